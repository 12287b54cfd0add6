"""The IPVS mode's desired state, computed from the Service ports and endpoints (pure; upstream
``pkg/proxy/ipvs/proxier.go`` ``syncProxyRules``/``syncService``/``syncEndpoint``/
``writeIptablesRules``).

How a packet meets a Service in IPVS mode:

1. **The address is local.** Every ClusterIP, externalIP and LoadBalancer VIP is bound to the
   dummy interface ``kube-ipvs0``, so the node accepts packets to it (routing says "local").
2. **IPVS picks a real server.** IPVS hooks LOCAL_IN: a packet to a *virtual server* (address,
   protocol, port) is NATed to one of its *real servers* (the endpoints, weight 1) chosen by the
   scheduler (``--ipvs-scheduler``: ``rr`` by default; ``lc``, ``dh``, ``sh``, ``sed``, ``nq``,
   ``wrr``, ``wlc``, ``lblc``, ``lblcr``, ``mh``). ClientIP affinity is IPVS *persistence*
   (``timeout`` = ``sessionAffinityConfig.clientIP.timeoutSeconds``); ``mh`` also sets the
   source-hash flag. One virtual server exists per ClusterIP, externalIP, LB VIP, and per node
   IP for a NodePort, each port and protocol.
3. **iptables only marks and filters**, matching *ipsets* rather than one rule per Service:
   ``KUBE-CLUSTER-IP`` (VIP,proto:port) → mark for masquerade unless from a Pod,
   ``KUBE-LOOP-BACK`` (endpoint,proto:port,endpoint) → hairpin masquerade, ``KUBE-NODE-PORT-*``
   (bitmap of ports) → mark, ``KUBE-EXTERNAL-IP``/``KUBE-LOAD-BALANCER`` → mark,
   ``KUBE-HEALTH-CHECK-NODE-PORT`` → accept, ``KUBE-IPVS-IPS`` (every bound address) → reject new
   connections to any *other* port of a VIP. The rule set is small and static: it only names sets,
   and a rule whose set is empty is left out (as upstream).

Which endpoints a virtual server gets (upstream, which differs from iptables/nftables): the
ClusterIP's real servers are the local endpoints with ``internalTrafficPolicy: Local`` — or the
cluster endpoints if there are none locally — else the cluster endpoints; the external ones
(NodePort, externalIP, LB) likewise with ``externalTrafficPolicy``. Endpoints no longer wanted
are removed gracefully by the proxier (``plan.py``): weight 0, deleted when their connections are
gone.

IPv6 sets are named ``KUBE-6-...`` instead of ``KUBE-...``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kubesvc.proxy.backend import ProxyOptions, SyncRequest
from kubesvc.proxy.iptables.rules import (KUBE_FORWARD, KUBE_MARK_MASQ, KUBE_POSTROUTING, KUBE_PROXY_FIREWALL, KUBE_SERVICES,
                                          TABLE_FILTER, TABLE_NAT, JumpChain, chain_removal_input)
from kubesvc.proxy.topology import categorize_endpoints
from kubesvc.proxy.types import IPV6, Endpoint

DUMMY_DEVICE = "kube-ipvs0"
DEFAULT_SCHEDULER = "rr"
SCHEDULERS = ("rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq", "mh")
FLAG_PERSISTENT = 0x1  # IP_VS_SVC_F_PERSISTENT
FLAG_HASHED = 0x2  # IP_VS_SVC_F_HASHED (set by the kernel on every service)
FLAG_SOURCE_HASH = 0x10  # upstream FlagSourceHash (IP_VS_SVC_F_SCHED2: mh hashes the source port too)

# Chains shared with iptables mode keep its names (a mode switch rewrites them whole).
KUBE_NODE_PORT = "KUBE-NODE-PORT"
KUBE_LOAD_BALANCER = "KUBE-LOAD-BALANCER"
KUBE_SOURCE_RANGES_FIREWALL = "KUBE-SOURCE-RANGES-FIREWALL"
KUBE_IPVS_FILTER = "KUBE-IPVS-FILTER"
KUBE_IPVS_OUT_FILTER = "KUBE-IPVS-OUT-FILTER"
NAT_CHAINS = (KUBE_SERVICES, KUBE_POSTROUTING, KUBE_NODE_PORT, KUBE_LOAD_BALANCER, KUBE_MARK_MASQ)
FILTER_CHAINS = (KUBE_FORWARD, KUBE_NODE_PORT, KUBE_PROXY_FIREWALL, KUBE_SOURCE_RANGES_FIREWALL, KUBE_IPVS_FILTER,
                 KUBE_IPVS_OUT_FILTER)

_NEW = ("-m", "conntrack", "--ctstate", "NEW")
# upstream iptablesJumpChain (ipvs); installed with iptables -C/-I outside the restore.
JUMP_CHAINS = (
    JumpChain(TABLE_NAT, KUBE_SERVICES, "OUTPUT", "kubernetes service portals"),
    JumpChain(TABLE_NAT, KUBE_SERVICES, "PREROUTING", "kubernetes service portals"),
    JumpChain(TABLE_NAT, KUBE_POSTROUTING, "POSTROUTING", "kubernetes postrouting rules"),
    JumpChain(TABLE_FILTER, KUBE_FORWARD, "FORWARD", "kubernetes forwarding rules"),
    JumpChain(TABLE_FILTER, KUBE_NODE_PORT, "INPUT", "kubernetes health check rules"),
    JumpChain(TABLE_FILTER, KUBE_PROXY_FIREWALL, "INPUT", "kube-proxy firewall rules", _NEW),
    JumpChain(TABLE_FILTER, KUBE_PROXY_FIREWALL, "FORWARD", "kube-proxy firewall rules", _NEW),
    JumpChain(TABLE_FILTER, KUBE_IPVS_FILTER, "INPUT", "kubernetes ipvs access filter"),
    JumpChain(TABLE_FILTER, KUBE_IPVS_OUT_FILTER, "OUTPUT", "kubernetes ipvs access filter"),
)


# ---- ipsets ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SetInfo:
    name: str  # without the family prefix
    type: str
    comment: str


# upstream ipsetInfo
LOOP_BACK = SetInfo("LOOP-BACK", "hash:ip,port,ip", "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose")
CLUSTER_IP = SetInfo("CLUSTER-IP", "hash:ip,port", "Kubernetes service cluster ip + port for masquerade purpose")
EXTERNAL_IP = SetInfo("EXTERNAL-IP", "hash:ip,port", "Kubernetes service external ip + port for masquerade and filter purpose")
EXTERNAL_IP_LOCAL = SetInfo("EXTERNAL-IP-LOCAL", "hash:ip,port", "Kubernetes service external ip + port with externalTrafficPolicy=local")
LOAD_BALANCER = SetInfo("LOAD-BALANCER", "hash:ip,port", "Kubernetes service lb portal")
LOAD_BALANCER_FW = SetInfo("LOAD-BALANCER-FW", "hash:ip,port", "Kubernetes service load balancer ip + port for load balancer with sourceRange")
LOAD_BALANCER_LOCAL = SetInfo("LOAD-BALANCER-LOCAL", "hash:ip,port", "Kubernetes service load balancer ip + port with externalTrafficPolicy=local")
LOAD_BALANCER_SOURCE_IP = SetInfo("LOAD-BALANCER-SOURCE-IP", "hash:ip,port,ip", "Kubernetes service load balancer ip + port + source IP for packet filter purpose")
LOAD_BALANCER_SOURCE_CIDR = SetInfo("LOAD-BALANCER-SOURCE-CIDR", "hash:ip,port,net", "Kubernetes service load balancer ip + port + source cidr for packet filter purpose")
NODE_PORT_TCP = SetInfo("NODE-PORT-TCP", "bitmap:port", "Kubernetes nodeport TCP port for masquerade purpose")
NODE_PORT_LOCAL_TCP = SetInfo("NODE-PORT-LOCAL-TCP", "bitmap:port", "Kubernetes nodeport TCP port with externalTrafficPolicy=local")
NODE_PORT_UDP = SetInfo("NODE-PORT-UDP", "bitmap:port", "Kubernetes nodeport UDP port for masquerade purpose")
NODE_PORT_LOCAL_UDP = SetInfo("NODE-PORT-LOCAL-UDP", "bitmap:port", "Kubernetes nodeport UDP port with externalTrafficPolicy=local")
NODE_PORT_SCTP = SetInfo("NODE-PORT-SCTP-HASH", "hash:ip,port", "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'")
NODE_PORT_LOCAL_SCTP = SetInfo("NODE-PORT-LOCAL-SCTP-HASH", "hash:ip,port", "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'")
HEALTH_CHECK_NODE_PORT = SetInfo("HEALTH-CHECK-NODE-PORT", "bitmap:port", "Kubernetes health check node port")
IPVS_IPS = SetInfo("IPVS-IPS", "hash:ip", "IPVS service IPs")
ALL_SETS = (LOOP_BACK, CLUSTER_IP, EXTERNAL_IP, EXTERNAL_IP_LOCAL, LOAD_BALANCER, LOAD_BALANCER_FW, LOAD_BALANCER_LOCAL,
            LOAD_BALANCER_SOURCE_IP, LOAD_BALANCER_SOURCE_CIDR, NODE_PORT_TCP, NODE_PORT_LOCAL_TCP, NODE_PORT_UDP,
            NODE_PORT_LOCAL_UDP, NODE_PORT_SCTP, NODE_PORT_LOCAL_SCTP, HEALTH_CHECK_NODE_PORT, IPVS_IPS)


IPSET_NAME_MAX = 31  # the kernel's IPSET_MAXNAMELEN (32) less the terminating NUL


def set_name(info: SetInfo, family: int) -> str:
    """``KUBE-<name>``; IPv6 sets ``KUBE-6-<name>`` cut to 31 characters, as upstream's
    ``NewIPSet`` does (``KUBE-6-LOAD-BALANCER-SOURCE-CIDR`` is one too long)."""
    return (("KUBE-6-" if family == IPV6 else "KUBE-") + info.name)[:IPSET_NAME_MAX]


# ---- IPVS -----------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class VirtualServerKey:
    address: str
    protocol: str  # "TCP" | "UDP" | "SCTP"
    port: int

    def __str__(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}/{self.protocol}"


@dataclass(frozen=True)
class VirtualServer:
    """One IPVS service: its scheduler, flags (persistence), timeout and real servers
    (``(ip, port) -> weight``)."""

    key: VirtualServerKey
    scheduler: str = DEFAULT_SCHEDULER
    flags: int = 0
    timeout: int = 0
    real_servers: Mapping[tuple[str, int], int] = field(default_factory=dict)
    service: str = ""  # "ns/name:port", for logs

    def same_settings(self, other: "VirtualServer") -> bool:
        return (self.scheduler, self.flags & ~FLAG_HASHED, self.timeout) == (other.scheduler, other.flags & ~FLAG_HASHED, other.timeout)


@dataclass(frozen=True)
class DesiredState:
    addresses: tuple[str, ...]  # bound to kube-ipvs0
    virtual_servers: Mapping[VirtualServerKey, VirtualServer]
    ipsets: Mapping[str, tuple[str, ...]]  # set name -> sorted entries (every set, empty ones too)
    set_types: Mapping[str, SetInfo]
    iptables: str  # iptables-restore input (filter + nat)
    no_local_internal: int = 0
    no_local_external: int = 0


def _proto(protocol: str) -> str:
    return protocol.lower()


def _ip_port(ip: str, protocol: str, port: int) -> str:
    return f"{ip},{_proto(protocol)}:{port}"


def build_state(request: SyncRequest, options: ProxyOptions, *, scheduler: str = "", node_ips: Iterable[str] = ()) -> DesiredState:
    """Everything IPVS mode wants in the kernel. ``node_ips``: this family's addresses that
    accept NodePorts (every local address except those on ``kube-ipvs0`` when unrestricted)."""
    family = options.family
    scheduler = scheduler or DEFAULT_SCHEDULER
    node_ips = tuple(sorted(set(node_ips)))
    entries: dict[str, set[str]] = {set_name(info, family): set() for info in ALL_SETS}
    types = {set_name(info, family): info for info in ALL_SETS}

    def add(info: SetInfo, entry: str) -> None:
        entries[set_name(info, family)].add(entry)

    addresses: set[str] = set()
    servers: dict[VirtualServerKey, VirtualServer] = {}
    no_local_internal = no_local_external = 0

    for name in sorted(request.service_ports):
        sp = request.service_ports[name]
        endpoints = request.endpoints.get(name, ())
        cat = categorize_endpoints(endpoints, sp, options.node_name, request.node_labels,
                                   prefer_same_node=options.prefer_same_node)
        internal = (cat.local or cat.cluster) if sp.internal_policy_local else cat.cluster
        external = (cat.local or cat.cluster) if sp.external_policy_local else cat.cluster
        if sp.internal_policy_local and cat.has_any and not cat.local:
            no_local_internal += 1
        if sp.external_policy_local and sp.externally_accessible and cat.has_any and not cat.local:
            no_local_external += 1
        for ep in cat.all_reachable:
            add(LOOP_BACK, f"{ep.ip},{_proto(sp.protocol)}:{ep.port},{ep.ip}")

        def server(address: str, port: int, eps: tuple[Endpoint, ...]) -> None:
            key = VirtualServerKey(address, sp.protocol, port)
            flags, timeout = 0, 0
            if sp.client_ip_affinity:
                flags |= FLAG_PERSISTENT
                timeout = sp.sticky_max_age_seconds
            if scheduler == "mh":
                flags |= FLAG_SOURCE_HASH
            servers[key] = VirtualServer(key, scheduler, flags, timeout, {(ep.ip, ep.port): 1 for ep in eps}, str(name))

        addresses.add(sp.cluster_ip)
        add(CLUSTER_IP, _ip_port(sp.cluster_ip, sp.protocol, sp.port))
        server(sp.cluster_ip, sp.port, internal)
        for ip in sp.external_ips:
            addresses.add(ip)
            add(EXTERNAL_IP_LOCAL if sp.external_policy_local else EXTERNAL_IP, _ip_port(ip, sp.protocol, sp.port))
            server(ip, sp.port, external)
        for ip in sp.load_balancer_vips:
            addresses.add(ip)
            add(LOAD_BALANCER, _ip_port(ip, sp.protocol, sp.port))
            if sp.external_policy_local:
                add(LOAD_BALANCER_LOCAL, _ip_port(ip, sp.protocol, sp.port))
            if sp.load_balancer_source_ranges:
                add(LOAD_BALANCER_FW, _ip_port(ip, sp.protocol, sp.port))
                for cidr in sp.load_balancer_source_ranges:
                    add(LOAD_BALANCER_SOURCE_CIDR, f"{_ip_port(ip, sp.protocol, sp.port)},{cidr}")
                for node_ip in node_ips:  # the node may reach its own LB (hairpin through the LB)
                    add(LOAD_BALANCER_SOURCE_IP, f"{_ip_port(ip, sp.protocol, sp.port)},{node_ip}")
            server(ip, sp.port, external)
        if sp.node_port:
            if sp.protocol == "SCTP":
                for node_ip in node_ips:
                    add(NODE_PORT_LOCAL_SCTP if sp.external_policy_local else NODE_PORT_SCTP, _ip_port(node_ip, "SCTP", sp.node_port))
            else:
                local, masq = (NODE_PORT_LOCAL_TCP, NODE_PORT_TCP) if sp.protocol == "TCP" else (NODE_PORT_LOCAL_UDP, NODE_PORT_UDP)
                add(masq, str(sp.node_port))
                if sp.external_policy_local:
                    add(local, str(sp.node_port))
            for node_ip in node_ips:
                server(node_ip, sp.node_port, external)
        if sp.health_check_node_port:
            add(HEALTH_CHECK_NODE_PORT, str(sp.health_check_node_port))

    for address in addresses:
        add(IPVS_IPS, address)
    ipsets = {name: tuple(sorted(values, key=_entry_sort_key)) for name, values in entries.items()}
    text = build_iptables(options, ipsets)
    return DesiredState(tuple(sorted(addresses, key=_entry_sort_key)), servers, ipsets, types, text,
                        no_local_internal, no_local_external)


def _entry_sort_key(entry: str):
    head = entry.split(",", 1)[0]
    try:
        return (0, ipaddress.ip_address(head).packed, entry)
    except ValueError:
        return (1, int(head) if head.isdigit() else 0, entry)


# ---- iptables -------------------------------------------------------------------------------------


def build_iptables(options: ProxyOptions, ipsets: Mapping[str, tuple[str, ...]]) -> str:
    """The ``iptables-restore --noflush`` input for filter and nat (upstream
    ``writeIptablesRules`` and ``ipsetWithIptablesChain``): our chains, each flushed by its
    header and rewritten whole."""
    family = options.family
    mark = options.masquerade_mark
    n = lambda info: set_name(info, family)  # noqa: E731
    nonempty = lambda info: bool(ipsets.get(n(info)))  # noqa: E731
    nat: list[str] = []
    flt: list[str] = []

    def comment(info: SetInfo) -> list[str]:
        return ["-m", "comment", "--comment", f'"{info.comment}"']

    # ipsetWithIptablesChain, in upstream's order
    if nonempty(LOOP_BACK):
        nat.append(_rule(KUBE_POSTROUTING, *comment(LOOP_BACK), "-m", "set", "--match-set", n(LOOP_BACK), "dst,dst,src", "-j", "MASQUERADE"))
    if nonempty(LOAD_BALANCER):
        nat.append(_rule(KUBE_SERVICES, *comment(LOAD_BALANCER), "-m", "set", "--match-set", n(LOAD_BALANCER), "dst,dst", "-j", KUBE_LOAD_BALANCER))
    if nonempty(LOAD_BALANCER_LOCAL):
        nat.append(_rule(KUBE_LOAD_BALANCER, *comment(LOAD_BALANCER_LOCAL), "-m", "set", "--match-set", n(LOAD_BALANCER_LOCAL), "dst,dst", "-j", "RETURN"))
    if nonempty(LOAD_BALANCER_FW):
        flt.append(_rule(KUBE_PROXY_FIREWALL, *comment(LOAD_BALANCER_FW), "-m", "set", "--match-set", n(LOAD_BALANCER_FW), "dst,dst", "-j", KUBE_SOURCE_RANGES_FIREWALL))
    if nonempty(LOAD_BALANCER_SOURCE_CIDR):
        flt.append(_rule(KUBE_SOURCE_RANGES_FIREWALL, *comment(LOAD_BALANCER_SOURCE_CIDR), "-m", "set", "--match-set", n(LOAD_BALANCER_SOURCE_CIDR), "dst,dst,src", "-j", "RETURN"))
    if nonempty(LOAD_BALANCER_SOURCE_IP):
        flt.append(_rule(KUBE_SOURCE_RANGES_FIREWALL, *comment(LOAD_BALANCER_SOURCE_IP), "-m", "set", "--match-set", n(LOAD_BALANCER_SOURCE_IP), "dst,dst,src", "-j", "RETURN"))
    for local, masq, proto in ((NODE_PORT_LOCAL_TCP, NODE_PORT_TCP, "tcp"), (NODE_PORT_LOCAL_UDP, NODE_PORT_UDP, "udp")):
        if nonempty(local):
            nat.append(_rule(KUBE_NODE_PORT, "-p", proto, *comment(local), "-m", "set", "--match-set", n(local), "dst", "-j", "RETURN"))
        if nonempty(masq):
            nat.append(_rule(KUBE_NODE_PORT, "-p", proto, *comment(masq), "-m", "set", "--match-set", n(masq), "dst", "-j", KUBE_MARK_MASQ))
    if nonempty(NODE_PORT_LOCAL_SCTP):
        nat.append(_rule(KUBE_NODE_PORT, "-p", "sctp", *comment(NODE_PORT_LOCAL_SCTP), "-m", "set", "--match-set", n(NODE_PORT_LOCAL_SCTP), "dst,dst", "-j", "RETURN"))
    if nonempty(NODE_PORT_SCTP):
        nat.append(_rule(KUBE_NODE_PORT, "-p", "sctp", *comment(NODE_PORT_SCTP), "-m", "set", "--match-set", n(NODE_PORT_SCTP), "dst,dst", "-j", KUBE_MARK_MASQ))

    # masquerade for ClusterIPs: all, or what does not come from a Pod
    if nonempty(CLUSTER_IP):
        base = (*comment(CLUSTER_IP), "-m", "set", "--match-set", n(CLUSTER_IP))
        if options.masquerade_all:
            nat.append(_rule(KUBE_SERVICES, *base, "dst,dst", "-j", KUBE_MARK_MASQ))
        elif options.local_detector.implemented:
            nat.append(_rule(KUBE_SERVICES, *base, "dst,dst", *options.local_detector.iptables_if_not_local(), "-j", KUBE_MARK_MASQ))
        else:  # masquerade hairpin traffic only (no way to tell Pods from the rest)
            nat.append(_rule(KUBE_SERVICES, *base, "src,dst", "-j", KUBE_MARK_MASQ))
    if nonempty(EXTERNAL_IP):
        nat.append(_rule(KUBE_SERVICES, *comment(EXTERNAL_IP), "-m", "set", "--match-set", n(EXTERNAL_IP), "dst,dst", "-j", KUBE_MARK_MASQ))
        for info in ((EXTERNAL_IP_LOCAL,) if nonempty(EXTERNAL_IP_LOCAL) else ()) + (EXTERNAL_IP,):
            match = ("-m", "set", "--match-set", n(info), "dst,dst")
            nat.append(_rule(KUBE_SERVICES, *match, "-m", "physdev", "!", "--physdev-is-in", "-m", "addrtype", "!", "--src-type", "LOCAL", "-j", "ACCEPT"))
            nat.append(_rule(KUBE_SERVICES, *match, "-m", "addrtype", "--dst-type", "LOCAL", "-j", "ACCEPT"))
    elif nonempty(EXTERNAL_IP_LOCAL):
        for rule_args in ((("-m", "physdev", "!", "--physdev-is-in", "-m", "addrtype", "!", "--src-type", "LOCAL")),
                          ("-m", "addrtype", "--dst-type", "LOCAL")):
            nat.append(_rule(KUBE_SERVICES, "-m", "set", "--match-set", n(EXTERNAL_IP_LOCAL), "dst,dst", *rule_args, "-j", "ACCEPT"))
    nat.append(_rule(KUBE_LOAD_BALANCER, "-j", KUBE_MARK_MASQ))
    nat.append(_rule(KUBE_SERVICES, "-m", "addrtype", "--dst-type", "LOCAL", "-j", KUBE_NODE_PORT))
    if nonempty(CLUSTER_IP):
        nat.append(_rule(KUBE_SERVICES, "-m", "set", "--match-set", n(CLUSTER_IP), "dst,dst", "-j", "ACCEPT"))
    if nonempty(LOAD_BALANCER):
        nat.append(_rule(KUBE_SERVICES, "-m", "set", "--match-set", n(LOAD_BALANCER), "dst,dst", "-j", "ACCEPT"))

    # the same masquerade plumbing as iptables mode
    nat.append(_rule(KUBE_POSTROUTING, "-m", "mark", "!", "--mark", f"{mark}/{mark}", "-j", "RETURN"))
    nat.append(_rule(KUBE_POSTROUTING, "-j", "MARK", "--xor-mark", mark))
    nat.append(_rule(KUBE_POSTROUTING, "-m", "comment", "--comment", '"kubernetes service traffic requiring SNAT"', "-j", "MASQUERADE", "--random-fully"))
    nat.append(_rule(KUBE_MARK_MASQ, "-j", "MARK", "--or-mark", mark))

    # filter
    flt.append(_rule(KUBE_FORWARD, "-m", "conntrack", "--ctstate", "INVALID", "-j", "DROP"))
    flt.append(_rule(KUBE_FORWARD, "-m", "comment", "--comment", '"kubernetes forwarding rules"', "-m", "mark", "--mark", f"{mark}/{mark}", "-j", "ACCEPT"))
    flt.append(_rule(KUBE_FORWARD, "-m", "comment", "--comment", '"kubernetes forwarding conntrack rule"', "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"))
    flt.append(_rule(KUBE_NODE_PORT, *comment(HEALTH_CHECK_NODE_PORT), "-m", "set", "--match-set", n(HEALTH_CHECK_NODE_PORT), "dst", "-j", "ACCEPT"))
    flt.append(_rule(KUBE_SOURCE_RANGES_FIREWALL, "-j", "DROP"))
    for info in (LOAD_BALANCER, CLUSTER_IP, EXTERNAL_IP, EXTERNAL_IP_LOCAL):
        flt.append(_rule(KUBE_IPVS_FILTER, "-m", "set", "--match-set", n(info), "dst,dst", "-j", "RETURN"))
    flt.append(_rule(KUBE_IPVS_FILTER, "-m", "set", "--match-set", n(HEALTH_CHECK_NODE_PORT), "dst", "-j", "RETURN"))
    flt.append(_rule(KUBE_IPVS_FILTER, *_NEW, "-m", "set", "--match-set", n(IPVS_IPS), "dst", "-j", "REJECT"))

    lines = ["*filter", *(f":{c} - [0:0]" for c in FILTER_CHAINS), *flt, "COMMIT",
             "*nat", *(f":{c} - [0:0]" for c in NAT_CHAINS), *nat, "COMMIT"]
    return "\n".join(lines) + "\n"


def cleanup_input(table: str, existing_chains: Iterable[str]) -> str | None:
    """Restore input that flushes and deletes those of IPVS mode's chains in ``table`` that
    exist (names from ``iptables-save``; those it shares by name with iptables mode too: upstream
    ``iptablesCleanupChains``); ``None`` if there are none."""
    existing = set(existing_chains)
    return chain_removal_input(table, [c for c in {TABLE_NAT: NAT_CHAINS, TABLE_FILTER: FILTER_CHAINS}[table] if c in existing])


def _rule(chain: str, *args: str) -> str:
    return " ".join(("-A", chain, *args))


def ipset_restore_input(state: DesiredState, family: int) -> str:
    """``ipset restore`` input. Each set is created if missing (``-exist``), but never flushed in
    place: ``ipset restore`` is not one transaction, and an emptied KUBE-CLUSTER-IP would let
    KUBE-IPVS-FILTER reject new connections until refilled. The new contents go into a
    temporary set of the same type that is swapped in, then destroyed. Hash sets get the
    family; bitmap:port sets the whole port range."""
    inet = "inet6" if family == IPV6 else "inet"
    prefix = "KUBE-6-TMP" if family == IPV6 else "KUBE-TMP"
    lines: list[str] = []
    for index, name in enumerate(sorted(state.ipsets)):
        info = state.set_types[name]
        if info.type == "bitmap:port":
            spec = f"{info.type} range 0-65535"
        else:
            spec = f"{info.type} family {inet} hashsize 1024 maxelem 65536"
        temporary = f"{prefix}-{index:02d}"  # set names are at most 31 characters
        lines += [f"create {name} {spec} -exist", f"create {temporary} {spec} -exist", f"flush {temporary}"]
        lines.extend(f"add {temporary} {entry}" for entry in state.ipsets[name])
        lines += [f"swap {temporary} {name}", f"destroy {temporary}"]
    return "\n".join(lines) + "\n"


def is_excluded(address: str, exclude_cidrs: Iterable[str]) -> bool:
    ip = ipaddress.ip_address(address)
    return any(ip in ipaddress.ip_network(cidr, strict=False) for cidr in exclude_cidrs
               if ipaddress.ip_network(cidr, strict=False).version == ip.version)
