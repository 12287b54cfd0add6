"""The Kubernetes objects behind a walk (pure functions over names and API objects).

* A Service port chain is named ``<kind>-<HASH>-<namespace>/<name>/<protocol>/<port name>``
  (``proxy/nftables/rules.py``, after upstream's ``servicePortChainNameBase``): the walk's
  chains name the Service port without asking the API.
* An endpoint ``ip:port`` is found in the Service's EndpointSlices: its Pod (``targetRef``) and
  node (``nodeName``), its conditions and zone.
* Why an endpoint of the Service is not a candidate, in the order upstream's
  ``CategorizeEndpoints`` (``proxy/topology.py``) applies its rules: not ready and not serving;
  terminating (used only when no endpoint is ready); on another node under a ``Local`` policy;
  hinted to other zones (or nodes) under topology-aware routing.
"""

from __future__ import annotations

import ipaddress
import re

from kubesvc.proxy.topology import LABEL_TOPOLOGY_ZONE

_SERVICE_CHAIN = re.compile(r"^(?:service|external|local|firewall)-[A-Z0-9]{8}-(?P<ns>[^/]+)/(?P<name>[^/]+)/(?P<proto>[a-z]+)/(?P<port>[^/]*)$")


_ELEMENT_COMMENT = re.compile(r"^(?P<ns>[^/\s]+)/(?P<name>[^/:\s]+):(?P<port>[^\s/]*)(?:\s|$)")


def service_port_of(chains: list[str], comments: list[str] = (), protocol: str = "tcp") -> dict | None:
    """The Service port the first Service chain of the walk belongs to; else the one a matched
    map element's or rule's comment names (``ns/name:port``, then anything: a Service with no
    endpoints has no chain, and iptables' chain names are hashes)."""
    for chain in chains:
        m = _SERVICE_CHAIN.match(chain)
        if m:
            return {"namespace": m["ns"], "name": m["name"], "protocol": m["proto"].upper(), "port": m["port"]}
    for comment in comments:
        m = _ELEMENT_COMMENT.match(comment)
        if m:
            return {"namespace": m["ns"], "name": m["name"], "protocol": protocol.upper(), "port": m["port"]}
    return None


def slice_endpoints(slices: list[dict], port_name: str | None) -> list[dict]:
    """Each endpoint address of the slices, with the port number for ``port_name`` (our chain
    names write an unnamed port as ``p<number>``... they carry the Service's port name; None: any)."""
    out = []
    for s in slices:
        ports = s.get("ports") or []
        numbers = [p.get("port") for p in ports if port_name is None or (p.get("name") or "") == port_name] or \
                  [p.get("port") for p in ports]
        for ep in s.get("endpoints") or []:
            cond = ep.get("conditions") or {}
            ref = ep.get("targetRef") or {}
            hints = ep.get("hints") or {}
            for address in ep.get("addresses") or []:
                out.append({
                    "address": address, "ports": numbers, "slice": (s.get("metadata") or {}).get("name", ""),
                    "pod": f"{ref.get('namespace', '')}/{ref['name']}" if ref.get("kind") == "Pod" and ref.get("name") else None,
                    "node": ep.get("nodeName"), "zone": ep.get("zone"),
                    "ready": cond.get("ready") is not False, "serving": cond.get("serving", cond.get("ready")) is not False,
                    "terminating": bool(cond.get("terminating")),
                    "hintZones": [z.get("name") for z in hints.get("forZones") or []],
                    "hintNodes": [n.get("name") for n in hints.get("forNodes") or []],
                })
    return out


def excluded_because(ep: dict, *, any_ready: bool, local_policy: bool, node: str | None, node_labels: dict) -> str:
    """Why endpoint ``ep`` (of ``slice_endpoints``) is not a DNAT candidate on this node."""
    if not ep["ready"] and not (ep["serving"] and ep["terminating"]):
        return "not ready"
    if not ep["ready"] and any_ready:
        return "terminating (used only while no endpoint is ready)"
    if local_policy and node and ep["node"] != node:
        return f"on node {ep['node'] or '(none)'}, and the traffic policy is Local"
    zone = node_labels.get(LABEL_TOPOLOGY_ZONE, "")
    if ep["hintNodes"] and node and node not in ep["hintNodes"]:
        return f"hinted to node(s) {', '.join(ep['hintNodes'])}, not this node"
    if ep["hintZones"] and zone and zone not in ep["hintZones"]:
        return f"hinted to zone(s) {', '.join(ep['hintZones'])}, this node is in {zone}"
    return "not in this node's rules (its proxy has not synced the change?)"


def host_port(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


def service_port_owning(services: list[dict], dest: str, port: int, protocol: str, node_addresses=()) -> dict | None:
    """The Service port (as ``service_port_of`` names one) whose ClusterIP, externalIP or
    LoadBalancer ingress IP and port ``dest:port`` is, or whose NodePort it is on one of the
    node's addresses: IPVS mode's rules name no Service, so the API says which one it is."""
    address = ipaddress.ip_address(dest).compressed
    on_node = address in {ipaddress.ip_address(a).compressed for a in node_addresses}
    for svc in services:
        spec, meta = svc.get("spec") or {}, svc.get("metadata") or {}
        ingress = [i.get("ip") for i in ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []]
        addresses = {ipaddress.ip_address(a).compressed for a in (*(spec.get("clusterIPs") or [spec.get("clusterIP")]),
                                                                   *(spec.get("externalIPs") or []), *ingress)
                     if a and a != "None"}
        for p in spec.get("ports") or []:
            if (p.get("protocol") or "TCP").lower() != protocol.lower():
                continue
            if (address in addresses and p.get("port") == port) or (on_node and p.get("nodePort") == port):
                return {"namespace": meta.get("namespace"), "name": meta.get("name"), "protocol": protocol.upper(),
                        "port": p.get("name") or ""}
    return None
