"""What ``kubesvc explain`` reads before it judges (``findings.explain`` decides): the Service,
its namespace's Pods and Events, its EndpointSlices and the Nodes from the API; each relevant
node's proxy health (``http://<InternalIP>:10256/healthz``, kube-proxy's plain-HTTP health
endpoint, which carries no credential); and the Service's name asked of the cluster DNS.

Every read is bounded: a node or DNS server that does not answer within ``timeout`` becomes a
finding, never a hang.
"""

from __future__ import annotations

import asyncio
import json
import socket

import aiohttp
import dns.asyncquery
import dns.exception
import dns.message
import dns.rcode
import dns.rdatatype

from kubesvc.client.rest import ApiError, RestClient, is_not_found
from kubesvc.explain.findings import SERVICE_NAME_LABEL, DnsAnswer, ProxyHealth, Snapshot
from kubesvc.util.ipnet import join_host_port

PROXY_HEALTHZ_PORT = 10256  # kube-proxy's ports.ProxyHealthzPort
DNS_SERVICE = ("kube-system", "kube-dns")


class ServiceNotFound(Exception):
    pass


async def gather(client: RestClient, namespace: str, name: str, *, node: str | None, cluster_domain: str,
                 timeout: float = 2.0) -> Snapshot:
    try:
        service = await client.get(f"/api/v1/namespaces/{namespace}/services/{name}")
    except ApiError as err:
        if is_not_found(err):
            raise ServiceNotFound(f'services "{name}" not found in namespace {namespace}') from None
        raise
    pods, slices, events, nodes = await asyncio.gather(
        client.list(f"/api/v1/namespaces/{namespace}/pods"),
        client.list(f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
                    {"labelSelector": f"{SERVICE_NAME_LABEL}={name}"}),
        client.list(f"/api/v1/namespaces/{namespace}/events"),
        client.list("/api/v1/nodes"))
    nodes = nodes.get("items") or []
    snapshot = Snapshot(service=service, pods=pods.get("items") or [], slices=slices.get("items") or [],
                        events=[e for e in events.get("items") or [] if (e.get("involvedObject") or {}).get("kind") == "Pod"],
                        nodes=nodes, node=asking_node(node, nodes))
    checked = proxy_nodes(snapshot)
    snapshot.proxies = list(await asyncio.gather(*(proxy_health(n, timeout) for n in nodes if _name(n) in checked)))
    try:
        dns_service = await client.get(f"/api/v1/namespaces/{DNS_SERVICE[0]}/services/{DNS_SERVICE[1]}")
    except ApiError as err:
        if not is_not_found(err):
            raise
        snapshot.dns_service = False
    else:
        server = (dns_service.get("spec") or {}).get("clusterIP")
        if server and server != "None" and (service.get("spec") or {}).get("type") != "ExternalName":
            snapshot.dns = await resolve(f"{name}.{namespace}.svc.{cluster_domain}", server, _family(service), timeout)
    return snapshot


def asking_node(given: str | None, nodes: list[dict]) -> str | None:
    """``--node``, else the Node named as this machine (the agent's default name), else the only
    Node; None when it cannot be told (then per-node checks are left out)."""
    if given:
        return given
    names = {_name(n) for n in nodes}
    host = socket.gethostname().lower()
    if host in names:
        return host
    return next(iter(names)) if len(names) == 1 else None


def proxy_nodes(snapshot: Snapshot) -> set[str]:
    """The nodes whose proxy matters: those with an endpoint of the Service, and the asker."""
    names = {endpoint.get("nodeName") for item in snapshot.slices for endpoint in item.get("endpoints") or []}
    if snapshot.node:
        names.add(snapshot.node)
    return names - {None, ""}


async def proxy_health(node: dict, timeout: float) -> ProxyHealth:
    name = _name(node)
    address = next((a.get("address") for a in (node.get("status") or {}).get("addresses") or [] if a.get("type") == "InternalIP"), None)
    if not address:
        return ProxyHealth(name, "(no InternalIP)", None, error="the Node reports no InternalIP address")
    url = f"http://{join_host_port(address, PROXY_HEALTHZ_PORT)}/healthz"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(url) as response:
                body = await response.read()
                status = response.status
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as err:
        return ProxyHealth(name, url, None, error=str(err) or type(err).__name__)
    try:
        decoded = json.loads(body)
        last_updated = decoded.get("lastUpdated", "")
        # on a 200 the top-level lastUpdated is the current time (upstream, for old clients); each
        # family's own lastUpdated is when its proxier last synced
        synced = tuple(sorted((family, str(value.get("lastUpdated", ""))) for family, value in (decoded.get("status") or {}).items()
                              if isinstance(value, dict)))
    except (ValueError, AttributeError):
        last_updated, synced = "", ()
    if status not in (200, 503):
        return ProxyHealth(name, url, None, error=f"HTTP {status}")
    return ProxyHealth(name, url, status == 200, last_updated=last_updated, synced=synced)


async def resolve(qname: str, server: str, rdtype: str, timeout: float) -> DnsAnswer:
    query = dns.message.make_query(qname, rdtype)
    try:
        response = await dns.asyncquery.udp(query, server, timeout=timeout)
    except (dns.exception.DNSException, OSError) as err:
        return DnsAnswer(qname, server, error=str(err) or type(err).__name__)
    if response.rcode() != dns.rcode.NOERROR:
        return DnsAnswer(qname, server, error=dns.rcode.to_text(response.rcode()))
    addresses = tuple(item.address for rrset in response.answer if rrset.rdtype == dns.rdatatype.from_text(rdtype) for item in rrset)
    if not addresses:
        return DnsAnswer(qname, server, error=f"no {rdtype} record")
    return DnsAnswer(qname, server, addresses)


def _family(service: dict) -> str:
    families = (service.get("spec") or {}).get("ipFamilies") or ["IPv4"]
    return "AAAA" if families[0] == "IPv6" else "A"


def _name(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("name", "")
