"""The IPVS mode's kernel shell (upstream ``pkg/proxy/ipvs/proxier.go`` ``syncProxyRules`` and
``cleanup.go``). The decisions are in ``rules`` (desired state) and ``plan`` (the IPVS diff).

Per sync (``IpvsBackend.sync``):

1. once: the sysctls IPVS mode needs (``net/ipv4/vs/conntrack=1``, ``expire_nodest_conn=1``,
   ``expire_quiescent_template=1``, ``net/ipv4/ip_forward=1``; with ``--ipvs-strict-arp``
   ``arp_ignore=1``/``arp_announce=2``) and the IPVS connection timeouts given by
   ``--ipvs-tcp-timeout``/``--ipvs-tcpfin-timeout``/``--ipvs-udp-timeout``; full syncs: the
   jumps from the built-in hooks;
2. the dummy interface ``kube-ipvs0`` exists (rtnetlink, ``kernel.netlink.Links``);
3. build the desired state, bind the addresses missing on ``kube-ipvs0`` (rtnetlink);
4. ``ipset restore`` (every set created if missing, flushed and refilled), then
   ``iptables-restore --noflush`` of the small static rule set (sets before rules: a rule naming
   a missing set is rejected);
5. read the kernel's IPVS table, apply the plan (add/edit/delete virtual and real servers,
   graceful termination at weight 0);
6. unbind addresses no longer wanted.

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

from kubesvc.kernel import ipset as kernel_ipset
from kubesvc.kernel import modules, netlink
from kubesvc.kernel.exec import CleanupFailed, CommandFailed, CommandResult, run
from kubesvc.kernel.ipvs import IpvsError
from kubesvc.kernel.iptables import PREPEND, Iptables, IptablesSync
from kubesvc.kernel.sysctl import write_sysctl_async
from kubesvc.proxy.backend import ProxyOptions, SyncFailed, SyncRequest, SyncResult
from kubesvc.proxy.config import IPVSSettings
from kubesvc.proxy.ipvs.plan import plan
from kubesvc.proxy.ipvs.rules import (ALL_SETS, DUMMY_DEVICE, FILTER_CHAINS, JUMP_CHAINS, NAT_CHAINS, TABLE_FILTER, TABLE_NAT,
                                      build_state, ipset_restore_input, set_name)
from kubesvc.proxy.ipvs.table import IpvsTable
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.types import FAMILY_NAMES, IPV4, IPV6

log = logging.getLogger("kubesvc.proxy.ipvs")

Runner = Callable[..., Awaitable[CommandResult]]
SYSCTLS = (("net/ipv4/vs/conntrack", "1"), ("net/ipv4/vs/expire_nodest_conn", "1"),
           ("net/ipv4/vs/expire_quiescent_template", "1"), ("net/ipv4/ip_forward", "1"))
STRICT_ARP = (("net/ipv4/conf/all/arp_ignore", "1"), ("net/ipv4/conf/all/arp_announce", "2"))


class IpvsBackend:
    """``backend.Backend`` for one family."""

    mode = "ipvs"

    def __init__(self, options: ProxyOptions, metrics: ProxyMetrics | None = None, *, settings: IPVSSettings | None = None,
                 sync_period: float = 30.0, netns: str | None = None, ipvs=None, ipt: Iptables | None = None,
                 runner: Runner = run, links: netlink.Links | None = None, clock: Callable[[], float] = time.monotonic):
        self.options = options
        self.family = options.family
        self.family_name = FAMILY_NAMES[self.family]
        self.metrics = metrics
        self.settings = settings or IPVSSettings()
        self.sync_period = sync_period
        self.netns = netns
        self._ipvs = IpvsTable(ipvs) if ipvs is not None else None  # a kernel.ipvs interface (or its fake)
        self.links = links or netlink.Links(netns)
        self.ipt = ipt or Iptables(self.family, netns=netns)
        self.runner = runner
        self.clock = clock
        self.need_full_sync = True
        self._sysctls_set = False
        self._resync_task: asyncio.Task | None = None

    @property
    def ipvs(self):
        if self._ipvs is None:  # opened lazily: importing this module must not need ip_vs
            from kubesvc.kernel.ipvs import NetlinkIpvs
            self._ipvs = IpvsTable(NetlinkIpvs(self.netns))
        return self._ipvs

    # ---- sync --------------------------------------------------------------------------------

    async def sync(self, request: SyncRequest) -> SyncResult:
        full = request.full or self.need_full_sync
        started = self.clock()
        try:
            if not self._sysctls_set:
                await self._set_sysctls()
            dummy = await self.links.ensure_dummy(DUMMY_DEVICE)
            bound, others = await self._addresses(dummy)
            node_ips = request.nodeport_ips if request.nodeport_ips is not None else others
            built = self.clock()
            state = build_state(request, self.options, scheduler=self.settings.scheduler, node_ips=node_ips)
            build_seconds = self.clock() - built
            for address in state.addresses:
                if address not in bound:
                    await self.links.add_address(dummy, address)
            await kernel_ipset.restore(ipset_restore_input(state, self.family), self.netns, runner=self.runner)
            await self.ipt.restore(state.iptables)  # declares every chain a jump names
            if full:
                await self.ipt.ensure_jumps((PREPEND, jump) for jump in JUMP_CHAINS)
            current = await asyncio.to_thread(self.ipvs.dump, self.family)
            changes = plan(state.virtual_servers, current, self.settings.exclude_cidrs)
            for op in changes.ops:
                await asyncio.to_thread(self.ipvs.apply, op)
            if changes.draining:
                log.debug("%d real servers draining at weight 0", len(changes.draining))
            for address in set(bound) - set(state.addresses):
                await self.links.del_address(dummy, address)
        except (CommandFailed, IpvsError) as err:
            self.need_full_sync = True
            log.error("%s sync of %s IPVS rules failed: %s", "full" if full else "partial", self.family_name, err)
            raise SyncFailed(str(err)) from err
        except BaseException:
            self.need_full_sync = True
            raise
        self.need_full_sync = False
        return SyncResult(full=full, no_local_internal=state.no_local_internal, no_local_external=state.no_local_external,
                          build_seconds=build_seconds, kernel_seconds=max(0.0, self.clock() - started - build_seconds),
                          written={"virtual_servers": len(state.virtual_servers), "ipvs_ops": len(changes.ops)})

    async def _set_sysctls(self) -> None:
        if self.family != IPV4:  # the net/ipv4/vs sysctls cover both families
            self._sysctls_set = True
            return
        for name, value in SYSCTLS + (STRICT_ARP if self.settings.strict_arp else ()):
            await write_sysctl_async(name, value, netns=self.netns)
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

    async def start(self, request_full_sync: Callable[[], None]) -> None:
        if self._resync_task is None or self._resync_task.done():
            self._resync_task = asyncio.create_task(self._resync(request_full_sync), name=f"ipvs-resync-{self.family_name}")

    async def _resync(self, request_full_sync: Callable[[], None]) -> None:
        while True:
            await asyncio.sleep(self.sync_period)
            request_full_sync()

    async def stop(self) -> None:
        task, self._resync_task = self._resync_task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass


IPVS_CHAINS = ((TABLE_NAT, NAT_CHAINS), (TABLE_FILTER, FILTER_CHAINS))


def ipvs_state_present(netns: str | None = None) -> bool:
    """Whether IPVS mode can have left anything here: the kernel's IPVS table exists (the module
    is loaded) or our dummy device does. Loads no module."""
    return modules.ipvs_present() or netlink.link_exists_sync(DUMMY_DEVICE, netns)


def cleanup_leftovers(netns: str | None = None, *, ipvs=None) -> None:
    """Remove what IPVS mode makes (upstream ``CleanupLeftovers``): every IPVS virtual server,
    ``kube-ipvs0``, the jumps from the built-in chains, every chain of the rule set (flushed
    first, so none still references another; including those it shares by name with iptables
    mode), then the ipsets (a set still named by a rule cannot be destroyed). Upstream runs it
    on ``--cleanup`` and when switching to a mode that is not iptables-based, never at iptables
    mode's start (the shared chains would go dark until its first sync); so does
    ``server.ProxyServer``. Skipped where IPVS never ran. Blocking."""
    if ipvs is None:
        if not ipvs_state_present(netns):
            return
        from kubesvc.kernel.ipvs import NetlinkIpvs
        ipvs = NetlinkIpvs(netns)
    errors: list[str] = []
    for family in (IPV4, IPV6):
        try:
            ipvs.flush(family)
        except IpvsError as err:
            errors.append(f"flushing IPVS ({FAMILY_NAMES[family]}): {err}")
    try:
        netlink.delete_link_sync(DUMMY_DEVICE, netns)
    except CommandFailed as err:
        errors.append(f"deleting {DUMMY_DEVICE}: {err}")
    for family in (IPV4, IPV6):
        ipt = IptablesSync(family, netns=netns)
        if not ipt.available():
            continue
        try:
            for jump in JUMP_CHAINS:
                ipt.delete_rule(jump.table, jump.src, *jump.args)
            present = [(table, chain) for table, chains in IPVS_CHAINS for chain in chains if ipt.chain_exists(table, chain)]
            for table, chain in present:
                ipt.flush_chain(table, chain)
            for table, chain in present:
                ipt.delete_chain(table, chain)
        except CommandFailed as err:
            errors.append(f"{FAMILY_NAMES[family]} iptables: {err}")
        for info in ALL_SETS:
            kernel_ipset.destroy_sync(set_name(info, family), netns)
    if errors:
        raise CleanupFailed("ipvs", errors)
