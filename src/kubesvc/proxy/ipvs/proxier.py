"""The IPVS mode's kernel shell (upstream ``pkg/proxy/ipvs/proxier.go`` ``syncProxyRules`` and
``cleanup.go``). The decisions are in ``rules`` (desired state) and ``plan`` (the IPVS diff).

Per sync, in the shared proxier's skeleton (``backend.Mode``):

1. ``observe``: once, the sysctls IPVS mode needs (``net/ipv4/vs/conntrack=1``,
   ``expire_nodest_conn=1``, ``expire_quiescent_template=1``, ``net/ipv4/ip_forward=1``; with
   ``--ipvs-strict-arp`` ``arp_ignore=1``/``arp_announce=2``) and the IPVS connection timeouts
   given by ``--ipvs-tcp-timeout``/``--ipvs-tcpfin-timeout``/``--ipvs-udp-timeout``; then the
   dummy interface ``kube-ipvs0`` exists (rtnetlink, ``kernel.netlink.Links``), the addresses
   bound to it and the node's others, and the kernel's IPVS table;
2. ``plan`` (pure): the desired state (``rules.build_state``) and the IPVS diff
   (``plan.plan``: add/edit/delete virtual and real servers, graceful termination at weight 0);
3. ``apply``: bind the addresses missing on ``kube-ipvs0``; ``ipset restore`` (every set
   created if missing, flushed and refilled), then ``iptables-restore --noflush`` of the small
   static rule set (sets before rules: a rule naming a missing set is rejected); on full syncs
   the jumps from the built-in hooks; the IPVS changes; unbind addresses no longer wanted.

A failed sync counts ``sync_proxy_rules_iptables_restore_failures_total`` (the skeleton).

Only the two restores start a process (as upstream: ``ipset restore``, ``iptables-restore``);
links, addresses and the IPVS table go over netlink, sysctls through ``kernel.sysctl``.

Every sync reads the IPVS table back, so drift is repaired; and the backend asks for a full
sync every ``sync_period`` (upstream's periodic resync), which is also when draining real
servers without connections are finally deleted.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kubesvc.kernel import ipset as kernel_ipset
from kubesvc.kernel import modules, netlink
from kubesvc.kernel.exec import CommandFailed, CommandResult, run
from kubesvc.kernel.ipvs import IpvsError
from kubesvc.kernel.iptables import PREPEND, Iptables, IptablesSync
from kubesvc.kernel.sysctl import Sysctl
from kubesvc.proxy import proxier
from kubesvc.proxy.backend import KernelPlan, Mode, ProxyOptions, SyncRequest
from kubesvc.proxy.config import IPVSSettings
from kubesvc.proxy.iptables.proxier import remove_chains
from kubesvc.proxy.ipvs.plan import plan
from kubesvc.proxy.ipvs.rules import ALL_SETS, DUMMY_DEVICE, JUMP_CHAINS, build_state, cleanup_input, ipset_restore_input, set_name
from kubesvc.proxy.ipvs.table import IpvsTable
from kubesvc.proxy.types import FAMILY_NAMES, IPV4

log = logging.getLogger("kubesvc.proxy.ipvs")

Runner = Callable[..., Awaitable[CommandResult]]
SYSCTLS = (("net/ipv4/vs/conntrack", "1"), ("net/ipv4/vs/expire_nodest_conn", "1"),
           ("net/ipv4/vs/expire_quiescent_template", "1"), ("net/ipv4/ip_forward", "1"))
STRICT_ARP = (("net/ipv4/conf/all/arp_ignore", "1"), ("net/ipv4/conf/all/arp_announce", "2"))


@dataclass(frozen=True)
class Observed:
    """What a sync reads before planning: ``kube-ipvs0``'s index, this family's addresses on it
    and the node's other ones, and the kernel's IPVS table."""

    dummy: int
    bound: frozenset[str]
    others: tuple[str, ...]
    current: object


@dataclass(frozen=True)
class IpvsInput:
    """One sync's kernel input, applied in this order (sets before the rules naming them)."""

    bind: tuple[str, ...]
    ipset_restore: str
    iptables_restore: str
    ensure_jumps: bool
    ops: tuple
    unbind: tuple[str, ...]


class IpvsBackend(Mode[None]):
    """The IPVS mode for one family."""

    mode = "ipvs"
    # Upstream's IPVS proxier counts this one (for its iptables-restore); here every failed
    # IPVS sync counts it, so none goes uncounted.
    failure_metric = "iptables_restore_failures"

    def __init__(self, options: ProxyOptions, *, settings: IPVSSettings | None = None,
                 sync_period: float = 30.0, netns: str | None = None, ipvs=None, ipt: Iptables | None = None,
                 runner: Runner = run, links: netlink.Links | None = None, clock: Callable[[], float] = time.monotonic,
                 ipset: kernel_ipset.Ipset | None = None, sysctl: Sysctl | None = None):
        super().__init__(options)
        self.settings = settings or IPVSSettings()
        self.sync_period = sync_period
        self.netns = netns
        self._ipvs = IpvsTable(ipvs) if ipvs is not None else None  # a kernel.ipvs interface (or its fake)
        self.links = links or netlink.Links(netns)
        self.ipt = ipt or Iptables(self.family, netns=netns)
        self.runner = runner
        self.ipset = ipset or kernel_ipset.Ipset(netns, runner=runner)  # or its fake (kernel.fake.ipset)
        self.sysctl = sysctl or Sysctl(netns)  # or its fake (kernel.fake.sysctl)
        self.clock = clock
        self._sysctls_set = False

    @property
    def ipvs(self):
        if self._ipvs is None:  # opened lazily: importing this module must not need ip_vs
            from kubesvc.kernel.ipvs import NetlinkIpvs
            self._ipvs = IpvsTable(NetlinkIpvs(self.netns))
        return self._ipvs

    # ---- sync --------------------------------------------------------------------------------

    async def observe(self, request: SyncRequest, state: None) -> Observed:
        if not self._sysctls_set:
            await self._set_sysctls()
        dummy = await self.links.ensure_dummy(DUMMY_DEVICE)
        bound, others = await self._addresses(dummy)
        current = await asyncio.to_thread(self.ipvs.dump, self.family)
        return Observed(dummy, frozenset(bound), others, current)

    def plan(self, request: SyncRequest, previous: None, observed: Observed) -> KernelPlan[None]:
        node_ips = request.nodeport_ips if request.nodeport_ips is not None else observed.others
        state = build_state(request, self.options, scheduler=self.settings.scheduler, node_ips=node_ips)
        changes = plan(state.virtual_servers, observed.current, self.settings.exclude_cidrs)
        if changes.draining:
            log.debug("%d real servers draining at weight 0", len(changes.draining))
        wanted = set(state.addresses)
        kernel_input = IpvsInput(
            bind=tuple(a for a in state.addresses if a not in observed.bound),
            ipset_restore=ipset_restore_input(state, self.family), iptables_restore=state.iptables,
            ensure_jumps=request.full, ops=tuple(changes.ops), unbind=tuple(sorted(observed.bound - wanted)))
        return KernelPlan(kernel_input=kernel_input, next_state=None,
                          no_local_internal=state.no_local_internal, no_local_external=state.no_local_external,
                          written={"virtual_servers": len(state.virtual_servers), "ipvs_ops": len(changes.ops)})

    async def apply(self, plan: KernelPlan[None]) -> None:
        todo: IpvsInput = plan.kernel_input
        for address in todo.bind:
            await self.links.add_address(DUMMY_DEVICE, address)
        await self.ipset.restore(todo.ipset_restore)
        await self.ipt.restore(todo.iptables_restore)  # declares every chain a jump names
        if todo.ensure_jumps:
            await self.ipt.ensure_jumps((PREPEND, jump) for jump in JUMP_CHAINS)
        for op in todo.ops:
            await asyncio.to_thread(self.ipvs.apply, op)
        for address in todo.unbind:
            await self.links.del_address(DUMMY_DEVICE, address)

    async def _set_sysctls(self) -> None:
        if self.family != IPV4:  # the net/ipv4/vs sysctls cover both families
            self._sysctls_set = True
            return
        for name, value in SYSCTLS + (STRICT_ARP if self.settings.strict_arp else ()):
            await self.sysctl.write_async(name, value)
        timeouts = (self.settings.tcp_timeout, self.settings.tcp_fin_timeout, self.settings.udp_timeout)
        if any(timeouts):  # upstream only logs a failure here: the defaults still work
            try:
                await asyncio.to_thread(self.ipvs.set_timeouts, *timeouts)
            except IpvsError as err:
                log.error("Failed to configure IPVS timeouts: %s", err)
        self._sysctls_set = True

    async def _addresses(self, dummy: int) -> tuple[set[str], tuple[str, ...]]:
        """(this family's addresses on kube-ipvs0, the other non-loopback, non-link-local ones)."""
        bound: set[str] = set()
        others: list[str] = []
        for a in await self.links.addresses(self.family):
            if a.index == dummy:
                bound.add(a.address)
            elif not ipaddress.ip_address(a.address).is_loopback and a.scope != netlink.SCOPE_LINK and a.address not in others:
                others.append(a.address)
        return bound, tuple(others)

    # ---- periodic resync ---------------------------------------------------------------------

    def background(self, request_full_sync: Callable[[], None], state):
        return [self._resync(request_full_sync)]

    async def _resync(self, request_full_sync: Callable[[], None]) -> None:
        while True:
            await asyncio.sleep(self.sync_period)
            request_full_sync()


def ipvs_state_present(netns: str | None = None) -> bool:
    """Whether IPVS mode can have left anything here: the kernel's IPVS table exists (the module
    is loaded) or our dummy device does. Loads no module."""
    return modules.ipvs_present() or netlink.link_exists_sync(DUMMY_DEVICE, netns)


def cleanup_leftovers(netns: str | None = None, *, ipvs=None) -> None:
    """Remove what IPVS mode makes (upstream ``CleanupLeftovers``), IPv4 then IPv6 in the shared
    family loop (``proxier.cleanup_leftovers``: both tried, one ``CleanupFailed`` listing every
    failure). Upstream runs it on ``--cleanup`` and when switching to a mode that is not
    iptables-based, never at iptables mode's start (the shared chains would go dark until its
    first sync); so does ``server.ProxyServer``. Skipped where IPVS never ran. Blocking."""
    if ipvs is None:
        if not ipvs_state_present(netns):
            return
        from kubesvc.kernel.ipvs import NetlinkIpvs
        ipvs = NetlinkIpvs(netns)
    proxier.cleanup_leftovers("ipvs", lambda family, ns: cleanup_family(family, ns, ipvs=ipvs), netns)


def cleanup_family(family: int, netns: str | None, *, ipvs) -> list[str]:
    """One family's part, in upstream's order: its IPVS virtual servers, ``kube-ipvs0`` (it holds
    both families' addresses: the first family's pass deletes it, the second finds it gone),
    the jumps from the built-in chains, every chain of the rule set (``iptables.remove_chains``:
    one save and one restore per table, as the other iptables-based modes), then the family's
    ipsets (a set still named by a rule cannot be destroyed). Returns the failures."""
    name = FAMILY_NAMES[family]
    errors: list[str] = []
    try:
        ipvs.flush(family)
    except IpvsError as err:
        errors.append(f"flushing IPVS ({name}): {err}")
    try:
        netlink.delete_link_sync(DUMMY_DEVICE, netns)
    except CommandFailed as err:
        errors.append(f"deleting {DUMMY_DEVICE}: {err}")
    ipt = IptablesSync(family, netns=netns)
    if not ipt.available():
        return errors
    for jump in JUMP_CHAINS:
        try:
            ipt.delete_rule(jump.table, jump.src, *jump.args)
        except CommandFailed as err:
            errors.append(f"{name}: removing jump {jump.src} -> {jump.dst}: {err}")
    errors += [f"{name}: {error}" for error in remove_chains(ipt, cleanup_input)]
    for info in ALL_SETS:
        kernel_ipset.destroy_sync(set_name(info, family), netns)
    return errors
