"""Desired state → ``iptables-restore`` input, as one pure function (upstream
``syncProxyRules`` in ``pkg/proxy/iptables/proxier.go``, minus the I/O).

How a packet meets a Service in iptables mode
=============================================

kube-proxy owns a handful of top-level chains and jumps to them from the built-in hooks
(``JUMP_CHAINS``, installed with ``iptables -C/-I`` outside the restore):

* nat ``PREROUTING``/``OUTPUT`` → ``KUBE-SERVICES``: one rule per ClusterIP, externalIP and
  LoadBalancer VIP, then (last) a jump to ``KUBE-NODEPORTS`` for packets to a local address.
* A ClusterIP rule jumps to ``KUBE-SVC-<hash>`` (or ``KUBE-SVL-<hash>`` with
  ``internalTrafficPolicy: Local``), which first marks off-pod traffic for masquerade and then
  picks an endpoint: rule *i* of *n* matches with probability ``1/(n-i)``, so every endpoint
  gets ``1/n``. ``KUBE-SEP-<hash>`` marks hairpin traffic and DNATs to ``ip:port``.
  ``ClientIP`` affinity adds ``-m recent --rcheck`` rules first and a ``--set`` in the DNAT rule.
* External destinations go through ``KUBE-EXT-<hash>`` (masquerade, or for ``Local`` policy the
  pod/host short-circuits) and, with ``loadBalancerSourceRanges``, ``KUBE-FW-<hash>`` first.
* nat ``POSTROUTING`` → ``KUBE-POSTROUTING`` masquerades packets carrying the mark
  ``KUBE-MARK-MASQ`` set.
* The filter table rejects traffic for Services without endpoints (``KUBE-SERVICES``,
  ``KUBE-EXTERNAL-SERVICES``), drops what the LB source ranges refuse
  (``KUBE-PROXY-FIREWALL``), accepts health-check node ports (``KUBE-NODEPORTS``) and
  forwarded masqueraded traffic (``KUBE-FORWARD``).

The restore input and its invariants
====================================

One input carries ``*filter`` then ``*nat``; it is applied with ``--noflush`` so other
owners' chains survive. A ``:CHAIN - [0:0]`` line creates the chain or, if it exists, flushes
it; so every chain we write is rewritten whole. The top-level chains are written on every
sync. Per-Service chains are written only for Services that changed since the last successful
sync, unless the sync is full ("MinimizeIPTablesRestore"); the unchanged ones are still
computed, so that the rule-count gauges are right and their chains count as in use. A chain
``iptables-save`` reports that has a per-Service prefix but is not in use any more is flushed
and deleted (``-X``) in the same transaction.

Over 1000 endpoints in total ("large cluster mode") the per-endpoint comments are dropped,
which shrinks the input by ~40%.

The text is byte-compatible with upstream's (quoting, ``%0.10f`` probabilities, the
``0x00004000`` mark); only the order of Services differs (sorted here, map order upstream).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from kubesvc.proxy.backend import ProxyOptions, SyncRequest
from kubesvc.proxy.iptables.naming import endpoint_chain, is_service_chain_name, service_chains
from kubesvc.proxy.topology import categorize_endpoints
from kubesvc.proxy.types import DEFAULT_STICKY_MAX_AGE_SECONDS, IPV4, IPV6, Endpoint, ServicePort, ServicePortName

TABLE_FILTER, TABLE_NAT, TABLE_MANGLE = "filter", "nat", "mangle"

KUBE_SERVICES = "KUBE-SERVICES"
KUBE_EXTERNAL_SERVICES = "KUBE-EXTERNAL-SERVICES"
KUBE_NODEPORTS = "KUBE-NODEPORTS"
KUBE_POSTROUTING = "KUBE-POSTROUTING"
KUBE_MARK_MASQ = "KUBE-MARK-MASQ"
KUBE_FORWARD = "KUBE-FORWARD"
KUBE_PROXY_FIREWALL = "KUBE-PROXY-FIREWALL"
KUBE_PROXY_CANARY = "KUBE-PROXY-CANARY"
# A duplicate of kubelet's chain holding the anti-martian rule; created, never deleted.
KUBE_FIREWALL = "KUBE-FIREWALL"

LARGE_CLUSTER_ENDPOINTS_THRESHOLD = 1000

# nfacct counters (metrics ``iptables_ct_state_invalid_dropped_packets_total`` and
# ``iptables_localhost_nodeports_accepted_packets_total``)
NFACCT_CT_STATE_INVALID_DROPPED = "ct_state_invalid_dropped_pkts"
NFACCT_LOCALHOST_NODEPORTS_ACCEPTED = "localhost_nps_accepted_pkts"

FILTER_TOP_CHAINS = (KUBE_SERVICES, KUBE_EXTERNAL_SERVICES, KUBE_FORWARD, KUBE_NODEPORTS, KUBE_PROXY_FIREWALL)
NAT_TOP_CHAINS = (KUBE_SERVICES, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_MARK_MASQ)

_NODEPORTS_COMMENT = '"kubernetes service nodeports; NOTE: this must be the last rule in this chain"'


class JumpChain(NamedTuple):
    table: str
    dst: str
    src: str
    comment: str
    extra_args: tuple[str, ...] = ()

    @property
    def args(self) -> tuple[str, ...]:
        """The rule as ``iptables -C/-I/-D <src>`` arguments (argv: the comment unquoted)."""
        comment = ("-m", "comment", "--comment", self.comment) if self.comment else ()
        return (*self.extra_args, *comment, "-j", self.dst)


_NEW = ("-m", "conntrack", "--ctstate", "NEW")

# upstream iptablesJumpChains; prepended, so for one hook the last entry ends up first.
JUMP_CHAINS = (
    JumpChain(TABLE_FILTER, KUBE_EXTERNAL_SERVICES, "INPUT", "kubernetes externally-visible service portals", _NEW),
    JumpChain(TABLE_FILTER, KUBE_EXTERNAL_SERVICES, "FORWARD", "kubernetes externally-visible service portals", _NEW),
    JumpChain(TABLE_FILTER, KUBE_NODEPORTS, "INPUT", "kubernetes health check service ports"),
    JumpChain(TABLE_FILTER, KUBE_SERVICES, "FORWARD", "kubernetes service portals", _NEW),
    JumpChain(TABLE_FILTER, KUBE_SERVICES, "OUTPUT", "kubernetes service portals", _NEW),
    JumpChain(TABLE_FILTER, KUBE_FORWARD, "FORWARD", "kubernetes forwarding rules"),
    JumpChain(TABLE_FILTER, KUBE_PROXY_FIREWALL, "INPUT", "kubernetes load balancer firewall", _NEW),
    JumpChain(TABLE_FILTER, KUBE_PROXY_FIREWALL, "OUTPUT", "kubernetes load balancer firewall", _NEW),
    JumpChain(TABLE_FILTER, KUBE_PROXY_FIREWALL, "FORWARD", "kubernetes load balancer firewall", _NEW),
    JumpChain(TABLE_NAT, KUBE_SERVICES, "OUTPUT", "kubernetes service portals"),
    JumpChain(TABLE_NAT, KUBE_SERVICES, "PREROUTING", "kubernetes service portals"),
    JumpChain(TABLE_NAT, KUBE_POSTROUTING, "POSTROUTING", "kubernetes postrouting rules"),
)
# upstream iptablesKubeletJumpChains: duplicates of kubelet's; cleanup leaves them alone.
KUBELET_JUMP_CHAINS = (
    JumpChain(TABLE_FILTER, KUBE_FIREWALL, "INPUT", ""),
    JumpChain(TABLE_FILTER, KUBE_FIREWALL, "OUTPUT", ""),
)
# Jumps a former version installed; cleanup removes them too (upstream iptablesCleanupOnlyChains).
CLEANUP_ONLY_JUMP_CHAINS: tuple[JumpChain, ...] = ()


_probabilities: dict[int, str] = {}


def probability(n: int) -> str:
    """``fmt.Sprintf("%0.10f", 1.0/n)``, memoised (upstream ``precomputedProbabilities``)."""
    p = _probabilities.get(n)
    if p is None:
        p = _probabilities[n] = "%0.10f" % (1.0 / n)
    return p


@dataclass(frozen=True)
class Features:
    """What the host offers, probed once by the proxier (upstream: ``HasRandomFully``, the
    ``nf_conntrack_tcp_be_liberal`` sysctl, nfacct counters that could be created)."""

    random_fully: bool = True
    conntrack_tcp_be_liberal: bool = False
    nfacct_ct_state_invalid: bool = False
    nfacct_localhost_nodeports: bool = False


@dataclass
class RestoreData:
    """One ``iptables-restore`` input plus what the metrics and the next sync need."""

    text: str
    full: bool
    filter_rules: int
    # ``sync_proxy_rules_iptables_last{table="nat"}``: rules written (``-X`` lines excluded)
    nat_rules_written: int
    # ``sync_proxy_rules_iptables_total{table="nat"}``: written + skipped unchanged − deleted
    nat_rules_total: int
    deleted_chains: int
    large_cluster: bool
    no_local_internal: int = 0
    no_local_external: int = 0
    active_nat_chains: set[str] = field(default_factory=set)


def total_endpoints(request: SyncRequest) -> int:
    """Endpoints of all proxied Service ports (decides large-cluster mode)."""
    endpoints = request.endpoints
    return sum(len(endpoints.get(name, ())) for name in request.service_ports)


def is_large_cluster(request: SyncRequest) -> bool:
    return total_endpoints(request) > LARGE_CLUSTER_ENDPOINTS_THRESHOLD


def effective_localhost_nodeports(options: ProxyOptions, nodeport_ips: tuple[str, ...] | None) -> bool:
    """``--iptables-localhost-nodeports`` as upstream applies it: IPv4 only, and only if the
    NodePort addresses include an IPv4 loopback address (``None`` = every address)."""
    if options.family != IPV4 or not options.localhost_nodeports:
        return False
    return nodeport_ips is None or any(_is_loopback(ip) for ip in nodeport_ips)


def _is_loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


def _cidr_contains(cidr: str, ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip) in ipaddress.ip_network(cidr.strip(), strict=False)
    except (ValueError, TypeError):
        return False


@dataclass(frozen=True)
class _SyncFacts:
    """What every Service's rules of one sync read (upstream: the proxier's fields and the
    locals ``syncProxyRules`` sets up before its loop over Services)."""

    ipv6: bool
    mark: str
    masquerade_all: bool
    if_local: str
    if_not_local: str
    large: bool
    localhost_nodeports: bool
    localhost_nfacct: bool
    node_ip: str


@dataclass
class _Restore:
    """The restore input under construction: the chains and rules of each table."""

    filter_chains: list[str]
    filter_rules: list[str]
    nat_chains: list[str]
    nat_rules: list[str]
    active: set[str] = field(default_factory=set)  # per-Service nat chains in use
    skipped_rules: int = 0  # rules of unchanged Services' chains, computed, not written
    no_local_internal: int = 0
    no_local_external: int = 0


@dataclass(slots=True)
class _ServicePort:
    """One Service port's chains and targets (upstream: the per-``svcName`` locals of the
    ``syncProxyRules`` loop)."""

    name: ServicePortName
    n: str  # ``ns/name:port``, as in comments
    sp: ServicePort
    match: str  # ``-m tcp -p tcp``
    svc_chain: str
    svl_chain: str
    ext_chain: str
    fw_chain: str
    cluster_eps: tuple[Endpoint, ...]
    local_eps: tuple[Endpoint, ...]
    all_reachable: tuple[Endpoint, ...]
    has_eps: bool
    internal_chain: str
    has_internal: bool
    external_policy_chain: str
    has_external: bool
    uses_fw_chain: bool
    # where traffic goes when it may not reach an endpoint: REJECT (no endpoints at all) or
    # DROP (no local ones for a Local policy), with the rule's comment
    int_target: str = ""
    int_comment: str = ""
    ext_target: str = ""
    ext_comment: str = ""

    @property
    def uses_cluster_chain(self) -> bool:
        return bool(self.cluster_eps) and self.sp.uses_cluster_endpoints

    @property
    def uses_local_chain(self) -> bool:
        return bool(self.local_eps) and self.sp.uses_local_endpoints

    @property
    def uses_ext_chain(self) -> bool:
        return self.has_eps and self.sp.externally_accessible

    @property
    def lb_chain(self) -> str:
        return self.fw_chain if self.uses_fw_chain else self.ext_chain


def build_restore(request: SyncRequest, options: ProxyOptions, *, full: bool | None = None,
                  existing_nat_chains: Iterable[str] | None = None, features: Features = Features(),
                  large: bool | None = None, localhost_nodeports: bool | None = None) -> RestoreData:
    """The restore input for one sync.

    ``full`` defaults to ``request.full``. ``existing_nat_chains`` are the chain names
    ``iptables-save -t nat`` reported (``None``: skip stale-chain deletion this time).
    ``large`` (``is_large_cluster``) and ``localhost_nodeports``
    (``effective_localhost_nodeports``) are computed here unless the caller, which needs them
    too, passes what it computed for this sync.
    """
    full = request.full if full is None else full
    if large is None:
        large = is_large_cluster(request)
    if localhost_nodeports is None:
        localhost_nodeports = effective_localhost_nodeports(options, request.nodeport_ips)
    detector = options.local_detector
    facts = _SyncFacts(
        ipv6=options.family == IPV6, mark=options.masquerade_mark, masquerade_all=options.masquerade_all,
        if_local=" ".join(detector.iptables_if_local()), if_not_local=" ".join(detector.iptables_if_not_local()),
        large=large, localhost_nodeports=localhost_nodeports,
        localhost_nfacct=localhost_nodeports and features.nfacct_localhost_nodeports, node_ip=request.node_ip)
    out = _fixed_chains(facts, features)
    changed = request.changed_services
    ports = request.service_ports
    endpoints_map = request.endpoints
    scratch_chains: list[str] = []
    scratch_rules: list[str] = []
    for name in sorted(ports):  # ServicePortName orders by namespace, name, port, protocol
        svc = _service_port(name, ports[name], endpoints_map.get(name, ()), options, request.node_labels)
        out.no_local_internal += bool(svc.has_eps and not svc.has_internal)
        out.no_local_external += bool(svc.has_eps and not svc.has_external)
        _write_service_rules(out, facts, svc)
        # Per-Service chains: written only if the Service changed (or the sync is full); the
        # others' are still computed, for the rule count and the chains in use.
        if full or name.service in changed:
            _write_service_chains(out.nat_chains, out.nat_rules, out.active, facts, svc)
        else:
            _write_service_chains(scratch_chains, scratch_rules, out.active, facts, svc)
            out.skipped_rules += len(scratch_rules)
            scratch_chains.clear()
            scratch_rules.clear()
    deleted = _delete_stale_chains(out, existing_nat_chains)
    _write_nodeports_jump(out, facts, request.nodeport_ips)
    _write_forward_rules(out, facts, features)

    text = "\n".join(["*filter", *out.filter_chains, *out.filter_rules, "COMMIT",
                      "*nat", *out.nat_chains, *out.nat_rules, "COMMIT", ""])
    return RestoreData(
        text=text, full=full, filter_rules=len(out.filter_rules),
        nat_rules_written=len(out.nat_rules) - deleted,
        nat_rules_total=len(out.nat_rules) + out.skipped_rules - deleted,
        deleted_chains=deleted, large_cluster=large,
        no_local_internal=out.no_local_internal, no_local_external=out.no_local_external,
        active_nat_chains=out.active,
    )


def _fixed_chains(facts: _SyncFacts, features: Features) -> _Restore:
    """The top-level chains (re-declared, so flushed, on every sync) and the rules that do
    not depend on Services."""
    mark = facts.mark
    out = _Restore(
        filter_chains=[f":{c} - [0:0]" for c in FILTER_TOP_CHAINS], filter_rules=[],
        nat_chains=[f":{c} - [0:0]" for c in NAT_TOP_CHAINS],
        nat_rules=[
            f"-A KUBE-POSTROUTING -m mark ! --mark {mark}/{mark} -j RETURN",
            f"-A KUBE-POSTROUTING -j MARK --xor-mark {mark}",
            '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE'
            + (" --random-fully" if features.random_fully else ""),
            f"-A KUBE-MARK-MASQ -j MARK --or-mark {mark}",
        ])
    if not facts.ipv6 and facts.localhost_nodeports:
        # route_localnet opens 127.0.0.0/8 to the outside (https://issue.k8s.io/90259); this
        # is kubelet's rule closing it again.
        out.filter_chains.append(f":{KUBE_FIREWALL} - [0:0]")
        out.filter_rules.append('-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 '
                                "! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP")
    return out


def _service_port(name: ServicePortName, sp: ServicePort, endpoints: tuple[Endpoint, ...], options: ProxyOptions,
                  node_labels) -> _ServicePort:
    """Categorize the endpoints and pick the chains and targets of one Service port."""
    proto = sp.protocol.lower()
    n = str(name)
    svc_chain, svl_chain, ext_chain, fw_chain = service_chains(name)
    cat = categorize_endpoints(endpoints, sp, options.node_name, node_labels, prefer_same_node=options.prefer_same_node)
    has_eps = cat.has_any
    internal_chain, has_internal = svc_chain, has_eps
    if sp.internal_policy_local:
        internal_chain = svl_chain
        if not cat.local:
            has_internal = False
    external_policy_chain, has_external = svc_chain, has_eps
    if sp.external_policy_local:
        external_policy_chain = svl_chain
        if not cat.local:
            has_external = False
    targets = {}
    if not has_eps:
        targets = dict(int_target="REJECT", ext_target="REJECT", int_comment=f'"{n} has no endpoints"',
                       ext_comment=f'"{n} has no endpoints"')
    else:
        if not has_internal:
            targets.update(int_target="DROP", int_comment=f'"{n} has no local endpoints"')
        if not has_external:
            targets.update(ext_target="DROP", ext_comment=f'"{n} has no local endpoints"')
    return _ServicePort(
        name=name, n=n, sp=sp, match=f"-m {proto} -p {proto}", svc_chain=svc_chain, svl_chain=svl_chain,
        ext_chain=ext_chain, fw_chain=fw_chain, cluster_eps=tuple(cat.cluster), local_eps=tuple(cat.local),
        all_reachable=tuple(cat.all_reachable), has_eps=has_eps, internal_chain=internal_chain, has_internal=has_internal,
        external_policy_chain=external_policy_chain, has_external=has_external,
        uses_fw_chain=has_eps and bool(sp.load_balancer_vips) and bool(sp.load_balancer_source_ranges), **targets)


def _write_service_rules(out: _Restore, facts: _SyncFacts, svc: _ServicePort) -> None:
    """One Service port's rules in the top-level chains (written on every sync): ClusterIP,
    external IPs, LoadBalancer VIPs and NodePort into its chains, or to REJECT/DROP."""
    sp, n, match = svc.sp, svc.n, svc.match
    filter_rules, nat_rules = out.filter_rules, out.nat_rules
    port, cip = sp.port, sp.cluster_ip
    has_eps, has_external = svc.has_eps, svc.has_external
    ext_chain, ext_target, ext_comment = svc.ext_chain, svc.ext_target, svc.ext_comment
    if svc.has_internal:
        nat_rules.append(f'-A KUBE-SERVICES -m comment --comment "{n} cluster IP" {match} -d {cip} --dport {port} -j {svc.internal_chain}')
    else:
        filter_rules.append(f"-A KUBE-SERVICES -m comment --comment {svc.int_comment} {match} -d {cip} --dport {port} -j {svc.int_target}")
    for ip in sp.external_ips:
        if has_eps:
            nat_rules.append(f'-A KUBE-SERVICES -m comment --comment "{n} external IP" {match} -d {ip} --dport {port} -j {ext_chain}')
        if not has_external:
            filter_rules.append(f"-A KUBE-EXTERNAL-SERVICES -m comment --comment {ext_comment} {match} -d {ip} --dport {port} -j {ext_target}")
    vips = sp.load_balancer_vips
    for ip in vips:
        if has_eps:
            nat_rules.append(f'-A KUBE-SERVICES -m comment --comment "{n} loadbalancer IP" {match} -d {ip} --dport {port} -j {svc.lb_chain}')
        if svc.uses_fw_chain:
            filter_rules.append(f'-A KUBE-PROXY-FIREWALL -m comment --comment "{n} traffic not accepted by {svc.fw_chain}" '
                                f"{match} -d {ip} --dport {port} -j DROP")
    if not has_external:
        for ip in vips:
            filter_rules.append(f"-A KUBE-EXTERNAL-SERVICES -m comment --comment {ext_comment} {match} -d {ip} --dport {port} -j {ext_target}")
    if sp.node_port:
        node_port = sp.node_port
        if has_eps:
            # NodePorts are not subject to loadBalancerSourceRanges (upstream, for better or worse).
            if facts.localhost_nfacct:
                nat_rules.append(f"-A KUBE-NODEPORTS -m comment --comment {n} {match} -d 127.0.0.0/8 --dport {node_port} "
                                 f"-m nfacct --nfacct-name {NFACCT_LOCALHOST_NODEPORTS_ACCEPTED} -j {ext_chain}")
            nat_rules.append(f"-A KUBE-NODEPORTS -m comment --comment {n} {match} --dport {node_port} -j {ext_chain}")
        if not has_external:
            filter_rules.append(f"-A KUBE-EXTERNAL-SERVICES -m comment --comment {ext_comment} -m addrtype --dst-type LOCAL "
                                f"{match} --dport {node_port} -j {ext_target}")
    if sp.health_check_node_port:
        filter_rules.append(f'-A KUBE-NODEPORTS -m comment --comment "{n} health check node port" -m tcp -p tcp '
                            f"--dport {sp.health_check_node_port} -j ACCEPT")


def _write_service_chains(nat_chains: list[str], nat_rules: list[str], active: set[str], facts: _SyncFacts,
                          svc: _ServicePort) -> None:
    """One Service port's own nat chains: the internal masquerade rule, ``KUBE-EXT-``,
    ``KUBE-FW-``, ``KUBE-SVC-``/``KUBE-SVL-`` and its endpoints' ``KUBE-SEP-`` chains."""
    sp, n = svc.sp, svc.n
    if svc.has_internal:
        head = f'-A {svc.internal_chain} -m comment --comment "{n} cluster IP" {svc.match} -d {sp.cluster_ip} --dport {sp.port}'
        if facts.masquerade_all:
            nat_rules.append(f"{head} -j KUBE-MARK-MASQ")
        elif facts.if_not_local:
            # Off-cluster traffic to a ClusterIP (a static route to the Service range) may
            # bounce to another node; masquerade it so the reply comes back here.
            nat_rules.append(f"{head} {facts.if_not_local} -j KUBE-MARK-MASQ")
    if svc.uses_ext_chain:
        _write_external_chain(nat_chains, nat_rules, active, facts, svc)
    if svc.uses_fw_chain:
        _write_firewall_chain(nat_chains, nat_rules, active, facts, svc)
    if svc.uses_cluster_chain:
        nat_chains.append(f":{svc.svc_chain} - [0:0]")
        active.add(svc.svc_chain)
        write_service_to_endpoint_rules(nat_rules, svc.name, n, sp, svc.svc_chain, svc.cluster_eps, facts.large)
    if svc.uses_local_chain:
        nat_chains.append(f":{svc.svl_chain} - [0:0]")
        active.add(svc.svl_chain)
        write_service_to_endpoint_rules(nat_rules, svc.name, n, sp, svc.svl_chain, svc.local_eps, facts.large)
    _write_endpoint_chains(nat_chains, nat_rules, active, facts, svc)


def _write_external_chain(nat_chains: list[str], nat_rules: list[str], active: set[str], facts: _SyncFacts,
                          svc: _ServicePort) -> None:
    """``KUBE-EXT-``: masquerade, then the external policy's chain."""
    ext_chain, svc_chain, n = svc.ext_chain, svc.svc_chain, svc.n
    nat_chains.append(f":{ext_chain} - [0:0]")
    active.add(ext_chain)
    if not svc.sp.external_policy_local:
        nat_rules.append(f'-A {ext_chain} -m comment --comment "masquerade traffic for {n} external destinations" -j KUBE-MARK-MASQ')
    else:
        if facts.if_local:
            # Pods reaching an external address get the Cluster policy, as if the
            # packet had gone out to the load balancer and come back.
            nat_rules.append(f'-A {ext_chain} -m comment --comment "pod traffic for {n} external destinations" {facts.if_local} -j {svc_chain}')
        nat_rules.append(f'-A {ext_chain} -m comment --comment "masquerade LOCAL traffic for {n} external destinations" '
                         "-m addrtype --src-type LOCAL -j KUBE-MARK-MASQ")
        nat_rules.append(f'-A {ext_chain} -m comment --comment "route LOCAL traffic for {n} external destinations" '
                         f"-m addrtype --src-type LOCAL -j {svc_chain}")
    if svc.has_external:
        nat_rules.append(f"-A {ext_chain} -j {svc.external_policy_chain}")


def _write_firewall_chain(nat_chains: list[str], nat_rules: list[str], active: set[str], facts: _SyncFacts,
                          svc: _ServicePort) -> None:
    """``KUBE-FW-``: the allowed source ranges on to ``KUBE-EXT-``; the rest falls through to
    the DROP in ``KUBE-PROXY-FIREWALL``."""
    fw_chain, ext_chain = svc.fw_chain, svc.ext_chain
    nat_chains.append(f":{fw_chain} - [0:0]")
    active.add(fw_chain)
    head = f'-A {fw_chain} -m comment --comment "{svc.n} loadbalancer IP"'
    allow_from_node = False
    for cidr in svc.sp.load_balancer_source_ranges:
        nat_rules.append(f"{head} -s {cidr} -j {ext_chain}")
        if facts.node_ip and _cidr_contains(cidr, facts.node_ip):
            allow_from_node = True
    if allow_from_node:
        # A node reaching a VIP it routes locally arrives with the VIP as source.
        for ip in svc.sp.load_balancer_vips:
            nat_rules.append(f"{head} -s {ip} -j {ext_chain}")
    nat_rules.append(f'-A {fw_chain} -m comment --comment "other traffic to {svc.n} will be dropped by KUBE-PROXY-FIREWALL"')


def _write_endpoint_chains(nat_chains: list[str], nat_rules: list[str], active: set[str], facts: _SyncFacts,
                           svc: _ServicePort) -> None:
    """``KUBE-SEP-`` per reachable endpoint: hairpin masquerade, (affinity,) DNAT."""
    name, n, match = svc.name, svc.n, svc.match
    affinity = svc.sp.client_ip_affinity
    for ep in svc.all_reachable:
        endpoint = ep.endpoint
        sep = endpoint_chain(name, endpoint)
        nat_chains.append(f":{sep} - [0:0]")
        active.add(sep)
        head = f"-A {sep}" if facts.large else f"-A {sep} -m comment --comment {n}"
        nat_rules.append(f"{head} -s {ep.ip} -j KUBE-MARK-MASQ")  # hairpin: the endpoint reached itself
        if affinity:
            nat_rules.append(f"{head} -m recent --name {sep} --set {match} -j DNAT --to-destination {endpoint}")
        else:
            nat_rules.append(f"{head} {match} -j DNAT --to-destination {endpoint}")


def _delete_stale_chains(out: _Restore, existing_nat_chains: Iterable[str] | None) -> int:
    """Per-Service chains the kernel has and no Service uses: declared (so flushed) and
    deleted in the same transaction. Returns how many."""
    if existing_nat_chains is None:
        return 0
    deleted = 0
    for chain in sorted(set(existing_nat_chains) - out.active):
        if is_service_chain_name(chain):
            # Declaring the chain flushes it, so nothing it holds blocks the delete.
            out.nat_chains.append(f":{chain} - [0:0]")
            out.nat_rules.append(f"-X {chain}")
            deleted += 1
    return deleted


def _write_nodeports_jump(out: _Restore, facts: _SyncFacts, nodeport_ips: tuple[str, ...] | None) -> None:
    """The jump to ``KUBE-NODEPORTS``, which must stay the last rule of ``KUBE-SERVICES``."""
    if nodeport_ips is None:
        if facts.ipv6:
            dest = "-m addrtype --dst-type LOCAL ! -d ::1/128"
        elif not facts.localhost_nodeports:
            dest = "-m addrtype --dst-type LOCAL ! -d 127.0.0.0/8"
        else:
            dest = "-m addrtype --dst-type LOCAL"
        out.nat_rules.append(f"-A KUBE-SERVICES -m comment --comment {_NODEPORTS_COMMENT} {dest} -j KUBE-NODEPORTS")
        return
    for ip in nodeport_ips:
        if _is_loopback(ip) and (facts.ipv6 or not facts.localhost_nodeports):
            continue  # upstream logs an error: localhost NodePorts are not supported here
        out.nat_rules.append(f"-A KUBE-SERVICES -m comment --comment {_NODEPORTS_COMMENT} -d {ip} -j KUBE-NODEPORTS")


def _write_forward_rules(out: _Restore, facts: _SyncFacts, features: Features) -> None:
    mark = facts.mark
    if not features.conntrack_tcp_be_liberal:
        # Out-of-window packets would otherwise reset connections (issue 74839).
        nfacct = f" -m nfacct --nfacct-name {NFACCT_CT_STATE_INVALID_DROPPED}" if features.nfacct_ct_state_invalid else ""
        out.filter_rules.append(f"-A KUBE-FORWARD -m conntrack --ctstate INVALID{nfacct} -j DROP")
    out.filter_rules.append(f'-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark {mark}/{mark} -j ACCEPT')
    out.filter_rules.append('-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" '
                            "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT")


def write_service_to_endpoint_rules(rules: list[str], name: ServicePortName, n: str, sp: ServicePort, chain: str,
                                    endpoints: tuple[Endpoint, ...], large: bool) -> None:
    """Service chain → endpoint chains (upstream ``writeServiceToEndpointRules``): affinity
    checks first, then rule *i* of *n* taken with probability ``1/(n-i)``."""
    if sp.client_ip_affinity:
        seconds = sp.sticky_max_age_seconds or DEFAULT_STICKY_MAX_AGE_SECONDS
        for ep in endpoints:
            sep = endpoint_chain(name, ep.endpoint)
            comment = "" if large else f' -m comment --comment "{n} -> {ep.endpoint}"'
            rules.append(f"-A {chain}{comment} -m recent --name {sep} --rcheck --seconds {seconds} --reap -j {sep}")
    count = len(endpoints)
    last = count - 1
    for i, ep in enumerate(endpoints):
        sep = endpoint_chain(name, ep.endpoint)
        comment = "" if large else f' -m comment --comment "{n} -> {ep.endpoint}"'
        if i < last:
            rules.append(f"-A {chain}{comment} -m statistic --mode random --probability {probability(count - i)} -j {sep}")
        else:
            rules.append(f"-A {chain}{comment} -j {sep}")


def chains_in_save(save_output: str) -> set[str]:
    """Chain names declared in ``iptables-save`` output (upstream ``GetChainsFromTable``)."""
    chains = set()
    for line in save_output.splitlines():
        if line.startswith(":"):
            chains.add(line[1:].split(" ", 1)[0])
    return chains


# Upstream leaves kubelet's KUBE-FIREWALL alone; here no kubelet writes iptables (the agent
# does not), so the chain is ours and ``--cleanup`` must leave the kernel as it found it.
_CLEANUP_CHAINS = {
    TABLE_NAT: (KUBE_SERVICES, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_MARK_MASQ, KUBE_PROXY_CANARY),
    TABLE_FILTER: (KUBE_SERVICES, KUBE_EXTERNAL_SERVICES, KUBE_FORWARD, KUBE_NODEPORTS, KUBE_PROXY_FIREWALL, KUBE_PROXY_CANARY,
                   KUBE_FIREWALL),
}


def cleanup_input(table: str, existing_chains: Iterable[str]) -> str | None:
    """Restore input that flushes and deletes every chain of ours in ``table`` (nat also: every
    per-Service chain); ``None`` if there is nothing to delete. Upstream ``CleanupLeftovers``."""
    existing = set(existing_chains)
    chains = [c for c in _CLEANUP_CHAINS[table] if c in existing]
    if table == TABLE_NAT:
        chains += sorted(c for c in existing if is_service_chain_name(c))
    return chain_removal_input(table, chains)


def chain_removal_input(table: str, chains: list[str]) -> str | None:
    """Restore input deleting ``chains`` of ``table`` (the iptables-based modes' cleanup): each
    declared first, which flushes it, so none still jumps to another when the deletions come;
    ``None`` for no chains."""
    if not chains:
        return None
    return "\n".join([f"*{table}", *(f":{c} - [0:0]" for c in chains), *(f"-X {c}" for c in chains), "COMMIT", ""])
