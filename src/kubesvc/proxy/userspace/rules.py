"""Desired state → the userspace mode's ``iptables-restore`` input, as pure functions (upstream
``pkg/proxy/userspace/proxier.go``: ``openPortal``, ``openNodePort``, ``iptablesInit``).

How a packet meets a Service in userspace mode
==============================================

The kernel does no load balancing here. For every Service port the proxy listens on a random
local port (the "proxy port") and the nat table only *redirects* the Service's portals to it:

* ``KUBE-PORTALS-CONTAINER`` (first rule of nat ``PREROUTING``: traffic arriving from pods or
  from outside) redirects ``ClusterIP:port``, externalIPs and LoadBalancer IPs with
  ``-j REDIRECT --to-ports <proxy port>`` (the listener is bound to the wildcard address);
* ``KUBE-PORTALS-HOST`` (first rule of nat ``OUTPUT``: connections made on the node itself)
  does the same with ``-j DNAT --to-destination <node IP>:<proxy port>``;
* ``KUBE-NODEPORT-CONTAINER`` / ``KUBE-NODEPORT-HOST`` (*last* rules of ``PREROUTING`` /
  ``OUTPUT``, only for packets to a local address) redirect ``<node port>``;
* filter ``KUBE-NODEPORT-NON-LOCAL`` (first rule of ``INPUT``) accepts new connections to the
  proxy ports of NodePorts even behind a restrictive ``INPUT`` policy.

The proxy then accepts the connection, picks an endpoint (``loadbalancer.py``) and relays bytes
(``relay.py``); the endpoint sees the node, not the client, as the source.

Two differences from upstream, both so that a client learns "no Service here" at once, as it does
in the iptables and nftables modes: a portal whose policy leaves no endpoint is not redirected
but refused (``REJECT``: the Service has no endpoints at all) or dropped (``DROP``: none on this
node for a ``Local`` policy) in filter ``KUBE-PORTALS-FILTER`` (from ``INPUT``, ``FORWARD`` and
``OUTPUT``), where upstream accepted and closed the connection. And a Service port whose
external policy differs from its internal one gets a second proxy port for its external portals
(NodePort, externalIPs, LoadBalancer IPs), so that each listener knows which endpoints serve it.
externalIPs get ordinary portal rules (upstream added ``-m physdev ! --physdev-is-in`` variants,
which need ``br_netfilter``). SCTP is not proxied (upstream did not either).

Every chain is ours and written whole on every sync (``:CHAIN - [0:0]`` flushes it); the jumps
from the built-in chains are ensured once (``JUMPS``), outside the restore.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kubesvc.kernel.iptables import APPEND, PREPEND
from kubesvc.proxy.backend import ProxyOptions, SyncRequest
from kubesvc.proxy.iptables.rules import TABLE_FILTER, TABLE_NAT, JumpChain
from kubesvc.proxy.topology import categorize_endpoints
from kubesvc.proxy.types import Endpoint, ServicePort, ServicePortName
from kubesvc.util.ipnet import join_host_port, to_cidr

KUBE_PORTALS_CONTAINER = "KUBE-PORTALS-CONTAINER"
KUBE_PORTALS_HOST = "KUBE-PORTALS-HOST"
KUBE_NODEPORT_CONTAINER = "KUBE-NODEPORT-CONTAINER"
KUBE_NODEPORT_HOST = "KUBE-NODEPORT-HOST"
KUBE_NODEPORT_NON_LOCAL = "KUBE-NODEPORT-NON-LOCAL"
KUBE_PORTALS_FILTER = "KUBE-PORTALS-FILTER"

NAT_CHAINS = (KUBE_PORTALS_CONTAINER, KUBE_PORTALS_HOST, KUBE_NODEPORT_CONTAINER, KUBE_NODEPORT_HOST)
FILTER_CHAINS = (KUBE_NODEPORT_NON_LOCAL, KUBE_PORTALS_FILTER)

PROTOCOLS = ("TCP", "UDP")
INTERNAL, EXTERNAL = "internal", "external"
REJECT, DROP = "REJECT", "DROP"

_PORTALS_COMMENT = "handle ClusterIPs; NOTE: this must be before the NodePort rules"
_NODEPORTS_COMMENT = "handle service NodePorts; NOTE: this must be the last rule in the chain"
_LOCAL = ("-m", "addrtype", "--dst-type", "LOCAL")
_NEW = ("-m", "conntrack", "--ctstate", "NEW")

# (position, jump): upstream iptablesInit; the NodePort jumps go last, after anyone else's rules.
JUMPS: tuple[tuple[str, JumpChain], ...] = (
    (PREPEND, JumpChain(TABLE_NAT, KUBE_PORTALS_CONTAINER, "PREROUTING", _PORTALS_COMMENT)),
    (PREPEND, JumpChain(TABLE_NAT, KUBE_PORTALS_HOST, "OUTPUT", _PORTALS_COMMENT)),
    (APPEND, JumpChain(TABLE_NAT, KUBE_NODEPORT_CONTAINER, "PREROUTING", _NODEPORTS_COMMENT, _LOCAL)),
    (APPEND, JumpChain(TABLE_NAT, KUBE_NODEPORT_HOST, "OUTPUT", _NODEPORTS_COMMENT, _LOCAL)),
    (PREPEND, JumpChain(TABLE_FILTER, KUBE_NODEPORT_NON_LOCAL, "INPUT", "Ensure that non-local NodePort traffic can flow")),
    (PREPEND, JumpChain(TABLE_FILTER, KUBE_PORTALS_FILTER, "INPUT", "kubernetes service portals without endpoints", _NEW)),
    (PREPEND, JumpChain(TABLE_FILTER, KUBE_PORTALS_FILTER, "FORWARD", "kubernetes service portals without endpoints", _NEW)),
    (PREPEND, JumpChain(TABLE_FILTER, KUBE_PORTALS_FILTER, "OUTPUT", "kubernetes service portals without endpoints", _NEW)),
)


@dataclass(frozen=True, slots=True)
class Portal:
    """One listener's worth of a Service port: which traffic (``kind``: ClusterIP = internal;
    NodePort, externalIPs, LoadBalancer IPs = external), the endpoints that may serve it, and
    ``verdict`` "" (redirect to the listener), ``REJECT`` or ``DROP``."""

    service_port: ServicePort
    kind: str
    endpoints: tuple[Endpoint, ...]
    verdict: str

    @property
    def key(self) -> tuple[ServicePortName, str]:
        return (self.service_port.name, self.kind)


@dataclass(frozen=True)
class Plan:
    portals: dict[tuple[ServicePortName, str], Portal]
    no_local_internal: int = 0
    no_local_external: int = 0


def plan_portals(request: SyncRequest, options: ProxyOptions) -> Plan:
    """Per Service port: the internal portal (its ClusterIP) and, if its external traffic policy
    differs from its internal one, an external portal; the endpoints by traffic policy
    (``topology``), as in the kernel modes. Otherwise the internal portal serves the external
    destinations too. Which portals exist depends on the Service only, never on its endpoints,
    so an endpoint change never closes a listener."""
    portals: dict[tuple[ServicePortName, str], Portal] = {}
    no_local_internal = no_local_external = 0
    for name in sorted(request.service_ports):
        sp = request.service_ports[name]
        if sp.protocol not in PROTOCOLS:
            continue
        cat = categorize_endpoints(request.endpoints.get(name, ()), sp, options.node_name, request.node_labels,
                                   prefer_same_node=options.prefer_same_node)
        internal = cat.local if sp.internal_policy_local else cat.cluster
        external = cat.local if sp.external_policy_local else cat.cluster
        if cat.has_any and sp.internal_policy_local and not cat.local:
            no_local_internal += 1
        if cat.has_any and sp.externally_accessible and sp.external_policy_local and not cat.local:
            no_local_external += 1
        portals[(name, INTERNAL)] = Portal(sp, INTERNAL, internal, _verdict(internal, cat.has_any))
        if sp.externally_accessible and sp.external_policy_local != sp.internal_policy_local:
            portals[(name, EXTERNAL)] = Portal(sp, EXTERNAL, external, _verdict(external, cat.has_any))
    return Plan(portals, no_local_internal, no_local_external)


def _verdict(endpoints: tuple[Endpoint, ...], has_any: bool) -> str:
    if endpoints:
        return ""
    return DROP if has_any else REJECT


def external_portal(plan: Mapping[tuple[ServicePortName, str], Portal], name: ServicePortName) -> Portal:
    """The portal serving ``name``'s external destinations (its own, else the internal one)."""
    return plan.get((name, EXTERNAL)) or plan[(name, INTERNAL)]


@dataclass(frozen=True)
class RestoreData:
    text: str
    nat_rules: int
    filter_rules: int


def _proto_match(sp: ServicePort, dport: int, dest: str | None) -> str:
    proto = sp.protocol.lower()
    args = f"-p {proto} -m {proto} --dport {dport}"
    return f"{args} -d {to_cidr(dest)}" if dest else args


def _match(sp: ServicePort, dport: int, dest: str | None) -> str:
    """upstream ``iptablesCommonPortalArgs``: comment, protocol, port, destination."""
    return f"-m comment --comment {sp.name} {_proto_match(sp, dport, dest)}"


def build_restore(plan: Plan, proxy_ports: Mapping[tuple[ServicePortName, str], int], *,
                  node_ip: str = "", nodeport_ips: Iterable[str] | None = None) -> RestoreData:
    """The whole restore input for ``plan`` with the listeners' ports (``proxy_ports`` by portal
    key; a portal without a port is skipped). Listeners are bound to the wildcard address:
    container rules ``REDIRECT``, host rules ``DNAT`` to ``node_ip`` (``REDIRECT`` if unknown).
    ``nodeport_ips`` None: NodePorts on every local address (``--dst-type LOCAL``)."""
    nat: dict[str, list[str]] = {chain: [] for chain in NAT_CHAINS}
    filt: dict[str, list[str]] = {chain: [] for chain in FILTER_CHAINS}
    node_port_dests: list[str | None] = [None] if nodeport_ips is None else list(nodeport_ips)

    def redirect(port: int) -> str:
        return f"-j REDIRECT --to-ports {port}"

    def dnat(port: int) -> str:
        return f"-j DNAT --to-destination {join_host_port(node_ip, port)}" if node_ip else redirect(port)

    def portal(sp: ServicePort, dest: str, dport: int, proxy_port: int, verdict: str, why: str) -> None:
        if verdict:
            filt[KUBE_PORTALS_FILTER].append(f"-A {KUBE_PORTALS_FILTER} {_reason(sp, verdict, why)} {_proto_match(sp, dport, dest)} -j {verdict}")
            return
        match = _match(sp, dport, dest)
        nat[KUBE_PORTALS_CONTAINER].append(f"-A {KUBE_PORTALS_CONTAINER} {match} {redirect(proxy_port)}")
        nat[KUBE_PORTALS_HOST].append(f"-A {KUBE_PORTALS_HOST} {match} {dnat(proxy_port)}")

    for (name, kind), p in plan.portals.items():
        if kind != INTERNAL:
            continue
        sp = p.service_port
        internal_port = proxy_ports.get((name, INTERNAL), 0)
        ext = plan.portals.get((name, EXTERNAL), p)
        external_port = proxy_ports.get(ext.key, 0)
        if sp.cluster_ip and (internal_port or p.verdict):
            portal(sp, sp.cluster_ip, sp.port, internal_port, p.verdict, "cluster IP")
        if not (external_port or ext.verdict):
            continue
        for ip in sp.external_ips:
            portal(sp, ip, sp.port, external_port, ext.verdict, "external IP")
        for ip in sp.load_balancer_vips:
            portal(sp, ip, sp.port, external_port, ext.verdict, "loadbalancer IP")
        if sp.node_port:
            for dest in node_port_dests:
                if ext.verdict:
                    local = "" if dest else " -m addrtype --dst-type LOCAL"
                    filt[KUBE_PORTALS_FILTER].append(f"-A {KUBE_PORTALS_FILTER} {_reason(sp, ext.verdict, 'node port')}{local} "
                                                     f"{_proto_match(sp, sp.node_port, dest)} -j {ext.verdict}")
                    continue
                match = _match(sp, sp.node_port, dest)
                nat[KUBE_NODEPORT_CONTAINER].append(f"-A {KUBE_NODEPORT_CONTAINER} {match} {redirect(external_port)}")
                nat[KUBE_NODEPORT_HOST].append(f"-A {KUBE_NODEPORT_HOST} {match} {dnat(external_port)}")
            if not ext.verdict:
                proto = sp.protocol.lower()
                filt[KUBE_NODEPORT_NON_LOCAL].append(
                    f"-A {KUBE_NODEPORT_NON_LOCAL} -m comment --comment {sp.name} -p {proto} -m {proto} --dport {external_port} "
                    "-m state --state NEW -j ACCEPT")

    lines = ["*filter", *(f":{chain} - [0:0]" for chain in FILTER_CHAINS)]
    for chain in FILTER_CHAINS:
        lines.extend(filt[chain])
    lines += ["COMMIT", "*nat", *(f":{chain} - [0:0]" for chain in NAT_CHAINS)]
    for chain in NAT_CHAINS:
        lines.extend(nat[chain])
    lines.append("COMMIT")
    return RestoreData("\n".join(lines) + "\n", sum(map(len, nat.values())), sum(map(len, filt.values())))


def _reason(sp: ServicePort, verdict: str, why: str) -> str:
    what = "has no endpoints" if verdict == REJECT else "has no local endpoints"
    return f'-m comment --comment "{sp.name} {what} ({why})"'


def cleanup_input(table: str, existing_chains: Iterable[str]) -> str | None:
    """Restore input that flushes and deletes those of our chains in ``table`` that exist
    (names from ``iptables-save``); ``None`` if there are none (upstream ``CleanupLeftovers``)."""
    existing = set(existing_chains)
    chains = [c for c in {TABLE_NAT: NAT_CHAINS, TABLE_FILTER: FILTER_CHAINS}[table] if c in existing]
    if not chains:
        return None
    return "\n".join([f"*{table}", *(f":{c} - [0:0]" for c in chains), *(f"-X {c}" for c in chains), "COMMIT", ""])
