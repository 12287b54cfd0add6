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
from kubesvc.proxy.types import DEFAULT_STICKY_MAX_AGE_SECONDS, IPV4, IPV6

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
    family = options.family
    ipv6 = family == IPV6
    mark = options.masquerade_mark
    localhost_nfacct = localhost_nodeports and features.nfacct_localhost_nodeports
    masquerade_all = options.masquerade_all
    detector = options.local_detector
    if_local = " ".join(detector.iptables_if_local())
    if_not_local = " ".join(detector.iptables_if_not_local())
    node_name = options.node_name
    node_labels = request.node_labels
    prefer_same_node = options.prefer_same_node
    node_ip = request.node_ip
    changed = request.changed_services
    ports = request.service_ports
    endpoints_map = request.endpoints

    filter_chains = [f":{c} - [0:0]" for c in FILTER_TOP_CHAINS]
    filter_rules: list[str] = []
    nat_chains = [f":{c} - [0:0]" for c in NAT_TOP_CHAINS]
    nat_rules = [
        f"-A KUBE-POSTROUTING -m mark ! --mark {mark}/{mark} -j RETURN",
        f"-A KUBE-POSTROUTING -j MARK --xor-mark {mark}",
        '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE'
        + (" --random-fully" if features.random_fully else ""),
        f"-A KUBE-MARK-MASQ -j MARK --or-mark {mark}",
    ]
    if not ipv6 and localhost_nodeports:
        # route_localnet opens 127.0.0.0/8 to the outside (https://issue.k8s.io/90259); this
        # is kubelet's rule closing it again.
        filter_chains.append(f":{KUBE_FIREWALL} - [0:0]")
        filter_rules.append('-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 '
                            "! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP")

    active: set[str] = set()
    skipped_chains: list[str] = []
    skipped_rules: list[str] = []
    skipped_rule_count = 0
    no_local_internal = no_local_external = 0

    for name in sorted(ports):  # ServicePortName orders by namespace, name, port, protocol
        sp = ports[name]
        proto = sp.protocol.lower()
        n = str(name)
        svc_chain, svl_chain, ext_chain, fw_chain = service_chains(name)
        cat = categorize_endpoints(endpoints_map.get(name, ()), sp, node_name, node_labels, prefer_same_node=prefer_same_node)
        cluster_eps, local_eps, has_eps = cat.cluster, cat.local, cat.has_any

        uses_cluster_chain = bool(cluster_eps) and sp.uses_cluster_endpoints
        uses_local_chain = bool(local_eps) and sp.uses_local_endpoints
        internal_chain, has_internal = svc_chain, has_eps
        if sp.internal_policy_local:
            internal_chain = svl_chain
            if not local_eps:
                has_internal = False
        external_policy_chain, has_external = svc_chain, has_eps
        if sp.external_policy_local:
            external_policy_chain = svl_chain
            if not local_eps:
                has_external = False
        vips = sp.load_balancer_vips
        uses_ext_chain = has_eps and sp.externally_accessible
        uses_fw_chain = has_eps and bool(vips) and bool(sp.load_balancer_source_ranges)
        lb_chain = fw_chain if uses_fw_chain else ext_chain

        int_target = ext_target = int_comment = ext_comment = ""
        if not has_eps:
            int_target = ext_target = "REJECT"
            int_comment = ext_comment = f'"{n} has no endpoints"'
        else:
            if not has_internal:
                int_target, int_comment = "DROP", f'"{n} has no local endpoints"'
                no_local_internal += 1
            if not has_external:
                ext_target, ext_comment = "DROP", f'"{n} has no local endpoints"'
                no_local_external += 1

        match = f"-m {proto} -p {proto}"
        port = sp.port
        cip = sp.cluster_ip

        # Top-level chains: always written.
        if has_internal:
            nat_rules.append(f'-A KUBE-SERVICES -m comment --comment "{n} cluster IP" {match} -d {cip} --dport {port} -j {internal_chain}')
        else:
            filter_rules.append(f"-A KUBE-SERVICES -m comment --comment {int_comment} {match} -d {cip} --dport {port} -j {int_target}")
        for ip in sp.external_ips:
            if has_eps:
                nat_rules.append(f'-A KUBE-SERVICES -m comment --comment "{n} external IP" {match} -d {ip} --dport {port} -j {ext_chain}')
            if not has_external:
                filter_rules.append(f"-A KUBE-EXTERNAL-SERVICES -m comment --comment {ext_comment} {match} -d {ip} --dport {port} -j {ext_target}")
        for ip in vips:
            if has_eps:
                nat_rules.append(f'-A KUBE-SERVICES -m comment --comment "{n} loadbalancer IP" {match} -d {ip} --dport {port} -j {lb_chain}')
            if uses_fw_chain:
                filter_rules.append(f'-A KUBE-PROXY-FIREWALL -m comment --comment "{n} traffic not accepted by {fw_chain}" '
                                    f"{match} -d {ip} --dport {port} -j DROP")
        if not has_external:
            for ip in vips:
                filter_rules.append(f"-A KUBE-EXTERNAL-SERVICES -m comment --comment {ext_comment} {match} -d {ip} --dport {port} -j {ext_target}")
        if sp.node_port:
            node_port = sp.node_port
            if has_eps:
                # NodePorts are not subject to loadBalancerSourceRanges (upstream, for better or worse).
                if localhost_nfacct:
                    nat_rules.append(f"-A KUBE-NODEPORTS -m comment --comment {n} {match} -d 127.0.0.0/8 --dport {node_port} "
                                     f"-m nfacct --nfacct-name {NFACCT_LOCALHOST_NODEPORTS_ACCEPTED} -j {ext_chain}")
                nat_rules.append(f"-A KUBE-NODEPORTS -m comment --comment {n} {match} --dport {node_port} -j {ext_chain}")
            if not has_external:
                filter_rules.append(f"-A KUBE-EXTERNAL-SERVICES -m comment --comment {ext_comment} -m addrtype --dst-type LOCAL "
                                    f"{match} --dport {node_port} -j {ext_target}")
        if sp.health_check_node_port:
            filter_rules.append(f'-A KUBE-NODEPORTS -m comment --comment "{n} health check node port" -m tcp -p tcp '
                                f"--dport {sp.health_check_node_port} -j ACCEPT")

        # Per-Service chains: written only if the Service changed (or the sync is full).
        if full or name.service in changed:
            nc, nr = nat_chains, nat_rules
        else:
            nc, nr = skipped_chains, skipped_rules

        if has_internal:
            head = f'-A {internal_chain} -m comment --comment "{n} cluster IP" {match} -d {cip} --dport {port}'
            if masquerade_all:
                nr.append(f"{head} -j KUBE-MARK-MASQ")
            elif if_not_local:
                # Off-cluster traffic to a ClusterIP (a static route to the Service range) may
                # bounce to another node; masquerade it so the reply comes back here.
                nr.append(f"{head} {if_not_local} -j KUBE-MARK-MASQ")

        if uses_ext_chain:
            nc.append(f":{ext_chain} - [0:0]")
            active.add(ext_chain)
            if not sp.external_policy_local:
                nr.append(f'-A {ext_chain} -m comment --comment "masquerade traffic for {n} external destinations" -j KUBE-MARK-MASQ')
            else:
                if if_local:
                    # Pods reaching an external address get the Cluster policy, as if the
                    # packet had gone out to the load balancer and come back.
                    nr.append(f'-A {ext_chain} -m comment --comment "pod traffic for {n} external destinations" {if_local} -j {svc_chain}')
                nr.append(f'-A {ext_chain} -m comment --comment "masquerade LOCAL traffic for {n} external destinations" '
                          "-m addrtype --src-type LOCAL -j KUBE-MARK-MASQ")
                nr.append(f'-A {ext_chain} -m comment --comment "route LOCAL traffic for {n} external destinations" '
                          f"-m addrtype --src-type LOCAL -j {svc_chain}")
            if has_external:
                nr.append(f"-A {ext_chain} -j {external_policy_chain}")

        if uses_fw_chain:
            nc.append(f":{fw_chain} - [0:0]")
            active.add(fw_chain)
            head = f'-A {fw_chain} -m comment --comment "{n} loadbalancer IP"'
            allow_from_node = False
            for cidr in sp.load_balancer_source_ranges:
                nr.append(f"{head} -s {cidr} -j {ext_chain}")
                if node_ip and _cidr_contains(cidr, node_ip):
                    allow_from_node = True
            if allow_from_node:
                # A node reaching a VIP it routes locally arrives with the VIP as source.
                for ip in vips:
                    nr.append(f"{head} -s {ip} -j {ext_chain}")
            nr.append(f'-A {fw_chain} -m comment --comment "other traffic to {n} will be dropped by KUBE-PROXY-FIREWALL"')

        if uses_cluster_chain:
            nc.append(f":{svc_chain} - [0:0]")
            active.add(svc_chain)
            _endpoint_dispatch(nr, name, n, sp, svc_chain, cluster_eps, large)
        if uses_local_chain:
            nc.append(f":{svl_chain} - [0:0]")
            active.add(svl_chain)
            _endpoint_dispatch(nr, name, n, sp, svl_chain, local_eps, large)

        affinity = sp.client_ip_affinity
        for ep in cat.all_reachable:
            endpoint = ep.endpoint
            sep = endpoint_chain(name, endpoint)
            nc.append(f":{sep} - [0:0]")
            active.add(sep)
            head = f"-A {sep}" if large else f"-A {sep} -m comment --comment {n}"
            nr.append(f"{head} -s {ep.ip} -j KUBE-MARK-MASQ")  # hairpin: the endpoint reached itself
            if affinity:
                nr.append(f"{head} -m recent --name {sep} --set {match} -j DNAT --to-destination {endpoint}")
            else:
                nr.append(f"{head} {match} -j DNAT --to-destination {endpoint}")

        if nr is skipped_rules:
            skipped_rule_count += len(skipped_rules)
            skipped_rules.clear()
            skipped_chains.clear()

    deleted = 0
    if existing_nat_chains is not None:
        for chain in sorted(set(existing_nat_chains) - active):
            if is_service_chain_name(chain):
                # Declaring the chain flushes it, so nothing it holds blocks the delete.
                nat_chains.append(f":{chain} - [0:0]")
                nat_rules.append(f"-X {chain}")
                deleted += 1

    # The jump to KUBE-NODEPORTS must stay the last rule of KUBE-SERVICES.
    if request.nodeport_ips is None:
        if ipv6:
            dest = "-m addrtype --dst-type LOCAL ! -d ::1/128"
        elif not localhost_nodeports:
            dest = "-m addrtype --dst-type LOCAL ! -d 127.0.0.0/8"
        else:
            dest = "-m addrtype --dst-type LOCAL"
        nat_rules.append(f"-A KUBE-SERVICES -m comment --comment {_NODEPORTS_COMMENT} {dest} -j KUBE-NODEPORTS")
    else:
        for ip in request.nodeport_ips:
            if _is_loopback(ip) and (ipv6 or not localhost_nodeports):
                continue  # upstream logs an error: localhost NodePorts are not supported here
            nat_rules.append(f"-A KUBE-SERVICES -m comment --comment {_NODEPORTS_COMMENT} -d {ip} -j KUBE-NODEPORTS")

    if not features.conntrack_tcp_be_liberal:
        # Out-of-window packets would otherwise reset connections (issue 74839).
        nfacct = f" -m nfacct --nfacct-name {NFACCT_CT_STATE_INVALID_DROPPED}" if features.nfacct_ct_state_invalid else ""
        filter_rules.append(f"-A KUBE-FORWARD -m conntrack --ctstate INVALID{nfacct} -j DROP")
    filter_rules.append(f'-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark {mark}/{mark} -j ACCEPT')
    filter_rules.append('-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" '
                        "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT")

    text = "\n".join(["*filter", *filter_chains, *filter_rules, "COMMIT", "*nat", *nat_chains, *nat_rules, "COMMIT", ""])
    return RestoreData(
        text=text, full=full, filter_rules=len(filter_rules),
        nat_rules_written=len(nat_rules) - deleted,
        nat_rules_total=len(nat_rules) + skipped_rule_count - deleted,
        deleted_chains=deleted, large_cluster=large,
        no_local_internal=no_local_internal, no_local_external=no_local_external,
        active_nat_chains=active,
    )


def _endpoint_dispatch(rules: list[str], name, n: str, sp, chain: str, endpoints, large: bool) -> None:
    """Service chain → endpoint chains (upstream ``writeServiceToEndpointRules``)."""
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
    if not chains:
        return None
    return "\n".join([f"*{table}", *(f":{c} - [0:0]" for c in chains), *(f"-X {c}" for c in chains), "COMMIT", ""])
