"""``kubesvc trace`` in userspace mode: the kernel only redirects, the proxy picks.

How upstream's userspace proxy (``pkg/proxy/userspace``, removed in 1.26) moved a connection,
and ours does (``proxy/userspace/rules.py``): the nat table sends a Service's portal
(``ClusterIP:port``, an external or LoadBalancer IP, ``<node IP>:<NodePort>``) to a *proxy port*,
a listener of the proxy on the node: ``KUBE-PORTALS-CONTAINER`` / ``KUBE-NODEPORT-CONTAINER``
(prerouting) with ``-j REDIRECT --to-ports P``, ``KUBE-PORTALS-HOST`` / ``KUBE-NODEPORT-HOST``
(output, the node's own connections) with ``-j DNAT --to-destination <node IP>:P``. A portal
with no endpoint to serve it is refused or dropped in filter ``KUBE-PORTALS-FILTER`` instead.
The listener then takes the *next* endpoint of its round robin (``LoadBalancerRR``: the
endpoint list shuffled on each change, an index that advances per connection), or, under
ClientIP affinity, the client's endpoint while its session is younger than the timeout; a
refused or timed-out dial moves on to the next endpoint. The endpoint sees the node as the
source (the proxy connects from it): "masqueraded" in the walk's terms.

So the walk has two halves: ``iptables-save`` walked by ``trace/iptables.py`` (which reads
``REDIRECT``) up to the proxy port, then the proxy's own state, which upstream never showed
anywhere: the proxier publishes it after every sync (``snapshot``, written through
``kernel/runstate.py``, root-only) and ``walk`` reads it back: the listener's Service port and
portal kind, its endpoints (each one in N connections), which is next, and a live session of
this client. Sessions start and are refreshed per connection, between syncs: the published
ones are as of the last sync (their age grows from the time it was written).
"""

from __future__ import annotations

import time
from dataclasses import replace

from kubesvc.proxy.trace import iptables
from kubesvc.proxy.trace.nftables import TEST_LOCAL, Walk, _canonical, _host

KIND = "userspace"


def _endpoint(ep: tuple[str, int]) -> str:
    ip, port = ep
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def snapshot(portals, listeners, balancer, family: int, now: float, wall: float | None = None) -> dict:
    """What the proxier publishes after a sync: per portal (``rules.Portal`` by key) its
    listener's port, verdict and the balancer's view of it (``LoadBalancerRR.describe``);
    ``now`` on the balancer's clock, ``wall`` the time of writing (``time.time``)."""
    out = []
    for key, portal in portals.items():
        name, kind = key
        listener = listeners.get(key)
        described = balancer.describe(key)
        endpoints, index, affinity, ttl, sessions = described or ((), 0, False, 0, {})
        out.append({
            "service": str(name), "kind": kind, "protocol": portal.service_port.protocol,
            "proxyPort": listener.port if listener is not None else 0, "verdict": portal.verdict,
            "endpoints": [_endpoint(e) for e in endpoints], "next": index % len(endpoints) if endpoints else 0,
            "affinity": affinity, "affinityTimeoutSeconds": ttl if affinity else 0,
            "sessions": {ip: {"endpoint": _endpoint(ep), "idleSeconds": round(now - used, 3)} for ip, (ep, used) in sessions.items()},
        })
    return {"family": family, "writtenAt": time.time() if wall is None else wall, "portals": out}


def _listener_port(walk: Walk, local: frozenset[str]) -> int | None:
    """The proxy port the nat table sent the packet to: a ``REDIRECT``, or a ``DNAT`` to one of
    the node's own addresses (the host portals)."""
    if walk.redirect is not None:
        return walk.redirect
    if len(walk.candidates) == 1:
        endpoint = walk.candidates[0][0]
        if _canonical(_host(endpoint)) in local:
            return int(endpoint.rsplit(":", 1)[1])
    return None


def walk(dump, state: dict | None, source: str, protocol: str, dest: str, port: int | str, node_ips=(), *,
         from_node: bool = False, now: float | None = None) -> Walk:
    """The iptables half (``trace/iptables.py``), then the listener it reaches in the proxy's
    published ``state`` (``snapshot``): verdict ``REDIRECT`` with the listener and its
    candidates, or the iptables verdict (``REJECT``/``DROP`` in ``KUBE-PORTALS-FILTER``, or
    nothing of ours)."""
    local = frozenset(_canonical(ip) for ip in (*TEST_LOCAL, *node_ips))
    w = iptables.trace(dump, source, protocol, dest, port, node_ips, from_node=from_node)
    if w.verdict in ("DROP", "REJECT"):
        return w
    proxy_port = _listener_port(w, local)
    if proxy_port is None:
        return w
    portal = next((p for p in (state or {}).get("portals", ())
                   if p["proxyPort"] == proxy_port and p["protocol"].lower() == protocol.lower()), None)
    listener = {"proxyPort": proxy_port, "service": None, "kind": None, "next": None, "session": None,
                "published": state is not None}
    if portal is None:
        return replace(w, candidates=[], masquerade=False, verdict="REDIRECT", listener=listener)
    listener.update(service=portal["service"], kind=portal["kind"])
    endpoints = portal["endpoints"]
    affinity = [f"{portal['service']} ({portal['kind']}): {portal['affinityTimeoutSeconds']}s"] if portal["affinity"] else []
    session = portal["sessions"].get(_canonical(source)) if portal["affinity"] else None
    age = max(0.0, (time.time() if now is None else now) - state.get("writtenAt", 0))
    if session is not None and int(session["idleSeconds"] + age) < portal["affinityTimeoutSeconds"] and session["endpoint"] in endpoints:
        listener["session"] = {"endpoint": session["endpoint"], "idleSeconds": round(session["idleSeconds"] + age, 1)}
        candidates = [(session["endpoint"], 1.0)]
    else:
        candidates = [(e, round(1 / len(endpoints), 6)) for e in endpoints]
        listener["next"] = endpoints[portal["next"]] if endpoints else None
    return replace(w, candidates=candidates, masquerade=bool(candidates), verdict="REDIRECT", listener=listener,
                   affinity=affinity)


def is_userspace(dump) -> bool:
    """Whether ``dump`` (iptables-save) holds userspace mode's portal chains."""
    return dump is not None and dump.chain("nat", "KUBE-PORTALS-CONTAINER") is not None
