"""The iptables mode's kernel shell (upstream ``pkg/proxy/iptables/proxier.go`` around
``syncProxyRules``, ``pkg/util/iptables.Monitor`` and ``cleanup.go``), run by the shared
proxier's skeleton (``backend.Mode``).

Per sync:

1. ``observe``: on full syncs only, make sure the jumps from the built-in hooks into our
   chains exist (``iptables -C``, else ``-I``); they cannot be part of the restore, which
   would have to rewrite the hooks that other software also uses. Then find the per-Service
   nat chains that exist, to delete the stale ones — in large-cluster mode at most once per
   sync period, as upstream;
2. ``plan``: the input (pure ``rules.build_restore``);
3. ``apply``: ``iptables-restore --noflush --counters`` once, for filter and nat together.

Where the existing chains come from differs from upstream, which lists them with
``iptables-save -t nat`` whenever it looks (every sync outside large-cluster mode): here a full
sync lists them so, and a partial sync takes the per-Service chains the kernel held after the
last successful sync (``IptablesState.nat_chains``: that sync's chains in use, plus the ones it
did not look at). A partial sync only ever follows a successful one, whose restore the kernel
accepted whole, so the two agree unless someone else changed the nat table; that is what full
syncs (after a failure, the canary, every hour) repair. The stale chains go in the same syncs
as upstream's, and a steady-state partial sync starts one process: ``iptables-restore``.

Any failure counts ``sync_proxy_rules_iptables_restore_failures_total`` (and the partial
counter for a partial sync), makes the next sync full, and raises ``SyncFailed`` (the
proxier's skeleton does all three).

The canary monitor notices when someone else flushed the tables (firewalld reload, ``iptables
-F -X`` in every table): it keeps an empty ``KUBE-PROXY-CANARY`` chain in mangle, nat and
filter. mangle is polled, because kube-proxy writes nothing there, so the canary vanishing
means an outside flush; then it waits up to 5 s for the nat and filter canaries to vanish too
(a flush script working through the tables), asks for a full sync, and plants new canaries.

nfacct counters are not created (no nfacct client here), so the rules carry no ``-m nfacct``
matches, as upstream does when creating a counter fails.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from kubesvc.kernel.exec import CleanupFailed, CommandFailed
from kubesvc.kernel.iptables import PREPEND, Iptables, IptablesSync, has_random_fully
from kubesvc.kernel.sysctl import read_sysctl_async, write_sysctl_async
from kubesvc.proxy.backend import KernelPlan, Mode, ProxyOptions, SyncRequest
from kubesvc.proxy.iptables.rules import (CLEANUP_ONLY_JUMP_CHAINS, JUMP_CHAINS, KUBE_PROXY_CANARY, KUBELET_JUMP_CHAINS,
                                          TABLE_FILTER, TABLE_MANGLE, TABLE_NAT, Features, build_restore, chains_in_save,
                                          cleanup_input, effective_localhost_nodeports, is_large_cluster)
from kubesvc.proxy import proxier
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.types import FAMILY_NAMES, IPV4

log = logging.getLogger("kubesvc.proxy.iptables")

CANARY_TABLES = (TABLE_MANGLE, TABLE_NAT, TABLE_FILTER)
FLUSH_TIMEOUT = 5.0  # upstream iptablesFlushTimeout
FLUSH_POLL = 0.1  # upstream iptablesFlushPollTime
SYSCTL_ROUTE_LOCALNET = "net/ipv4/conf/all/route_localnet"
SYSCTL_TCP_BE_LIBERAL = "net/netfilter/nf_conntrack_tcp_be_liberal"


@dataclass(frozen=True)
class IptablesState:
    """What the iptables mode remembers between syncs: when stale chains were last looked for
    (upstream ``lastIPTablesCleanup``), and the per-Service nat chains the kernel holds since
    the last successful sync (read instead of ``iptables-save`` by partial syncs)."""

    last_stale_cleanup: float = float("-inf")
    nat_chains: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Observed:
    """Per-sync facts read or derived before planning."""

    existing_nat_chains: set[str] | frozenset[str] | None  # None: not looked for this time
    listed_at: float | None
    large: bool
    localhost_nodeports: bool


class IptablesBackend(Mode[IptablesState]):
    """The iptables mode for one family (``iptables`` or ``ip6tables``)."""

    mode = "iptables"
    failure_metric = "iptables_restore_failures"
    partial_failure_metric = "iptables_partial_restore_failures"
    written_gauge = "iptables_last"
    total_gauge = "iptables_total"

    def __init__(self, options: ProxyOptions, *, canary_period: float = 30.0, sync_period: float | None = None,
                 netns: str | None = None, ipt: Iptables | None = None, features: Features | None = None,
                 flush_timeout: float = FLUSH_TIMEOUT, flush_poll: float = FLUSH_POLL, clock: Callable[[], float] = time.monotonic):
        """``canary_period``: how often the canary is polled (upstream: ``syncPeriod``);
        ``sync_period`` (default: ``canary_period``): the stale-chain listing interval in
        large-cluster mode. ``features``: None = probe the host on the first sync."""
        super().__init__(options)
        self.netns = netns
        self.ipt = ipt or Iptables(self.family, netns=netns)
        self.canary_period = canary_period
        self.sync_period = canary_period if sync_period is None else sync_period
        self.features = features
        self.flush_timeout = flush_timeout
        self.flush_poll = flush_poll
        self.clock = clock
        self._route_localnet_set = False

    def initial_state(self) -> IptablesState:
        return IptablesState()

    # ---- sync --------------------------------------------------------------------------------

    async def observe(self, request: SyncRequest, state: IptablesState) -> Observed:
        if self.features is None:
            self.features = await self._probe_features()
        if request.full:
            await self._ensure_jumps()
        localhost_nodeports = effective_localhost_nodeports(self.options, request.nodeport_ips)
        large = is_large_cluster(request)
        if not self._route_localnet_set and localhost_nodeports:
            await self._set_route_localnet()
        existing, listed_at = None, None
        now = self.clock()
        if not large or now - state.last_stale_cleanup > self.sync_period:
            if not request.full:
                existing, listed_at = state.nat_chains, now
            else:
                try:
                    existing, listed_at = chains_in_save(await self.ipt.save(TABLE_NAT)), now
                except CommandFailed as err:
                    log.error("Failed to execute iptables-save: stale chains will not be deleted: %s", err)
        return Observed(existing, listed_at, large, localhost_nodeports)

    def plan(self, request: SyncRequest, previous: IptablesState, observed: Observed) -> KernelPlan[IptablesState]:
        data = build_restore(request, self.options, existing_nat_chains=observed.existing_nat_chains,
                             features=self.features or Features(), large=observed.large,
                             localhost_nodeports=observed.localhost_nodeports)
        if observed.listed_at is None:  # nothing looked for: what was there still is, besides this sync's
            following = IptablesState(previous.last_stale_cleanup, previous.nat_chains | data.active_nat_chains)
        else:  # every per-Service chain not in use was deleted
            following = IptablesState(observed.listed_at, frozenset(data.active_nat_chains))
        return KernelPlan(kernel_input=data.text, next_state=following,
                          no_local_internal=data.no_local_internal, no_local_external=data.no_local_external,
                          written={TABLE_FILTER: data.filter_rules, TABLE_NAT: data.nat_rules_written},
                          totals={TABLE_FILTER: data.filter_rules, TABLE_NAT: data.nat_rules_total})

    async def apply(self, plan: KernelPlan[IptablesState]) -> None:
        await self.ipt.restore(plan.kernel_input)

    async def _ensure_jumps(self) -> None:
        for jump in (*JUMP_CHAINS, *KUBELET_JUMP_CHAINS):
            await self.ipt.ensure_chain(jump.table, jump.dst)
            await self.ipt.ensure_rule(PREPEND, jump.table, jump.src, *jump.args)

    async def _probe_features(self) -> Features:
        try:
            random_fully = has_random_fully(await self.ipt.version())
        except CommandFailed as err:
            log.warning("cannot tell the iptables version, assuming --random-fully works: %s", err)
            random_fully = True
        try:
            liberal = await read_sysctl_async(SYSCTL_TCP_BE_LIBERAL, netns=self.netns)
        except CommandFailed:
            liberal = None  # no nf_conntrack loaded: the default (strict)
        if liberal not in (None, "0"):
            log.info("nf_conntrack_tcp_be_liberal set, not installing DROP rules for INVALID packets")
        return Features(random_fully=random_fully, conntrack_tcp_be_liberal=liberal not in (None, "0"))

    async def _set_route_localnet(self) -> None:
        # NodePorts on 127.0.0.1 need route_localnet (the KUBE-FIREWALL rule closes the hole).
        try:
            await write_sysctl_async(SYSCTL_ROUTE_LOCALNET, "1", netns=self.netns)
            self._route_localnet_set = True
        except CommandFailed as err:
            log.warning("cannot set %s=1, NodePorts on localhost will not work: %s", SYSCTL_ROUTE_LOCALNET, err)

    # ---- canary monitor ------------------------------------------------------------------------

    def background(self, request_full_sync: Callable[[], None], state):
        return [self._monitor(request_full_sync)]

    async def close(self) -> None:
        for table in CANARY_TABLES:
            try:
                if await self.ipt.chain_exists(table, KUBE_PROXY_CANARY):
                    await self.ipt.delete_chain(table, KUBE_PROXY_CANARY)
            except CommandFailed as err:
                log.debug("could not delete canary in %s: %s", table, err)

    async def _monitor(self, reload: Callable[[], None]) -> None:
        while True:
            try:
                await self._plant_canaries()
                await self._wait_for_flush()
            except asyncio.CancelledError:
                raise
            except Exception:  # keep watching whatever happened
                log.exception("iptables canary monitor failed")
                await asyncio.sleep(self.canary_period)
                continue
            log.info("Reloading after iptables flush")
            reload()

    async def _plant_canaries(self) -> None:
        while True:  # upstream PollImmediateUntil(interval, EnsureChain in every table)
            try:
                for table in CANARY_TABLES:
                    await self.ipt.ensure_chain(table, KUBE_PROXY_CANARY)
                return
            except CommandFailed as err:
                log.error("Could not set up iptables canary: %s", err)
            await asyncio.sleep(self.canary_period)

    async def _wait_for_flush(self) -> None:
        first, *others = CANARY_TABLES
        while True:  # upstream PollUntil(interval, mangle canary gone)
            await asyncio.sleep(self.canary_period)
            try:
                if await self.ipt.chain_exists(first, KUBE_PROXY_CANARY):
                    continue
            except CommandFailed as err:  # resource problem: cannot tell
                log.error("Could not check for iptables canary: %s", err)
                continue
            break
        log.info("IPTables canary deleted (table %s)", first)
        deadline = self.clock() + self.flush_timeout
        while True:  # wait for the flush to reach the other tables before reloading
            try:
                remaining = [t for t in others if await self.ipt.chain_exists(t, KUBE_PROXY_CANARY)]
            except CommandFailed:
                remaining = others
            if not remaining:
                return
            if self.clock() >= deadline:
                log.info("Inconsistent iptables state detected.")
                return
            await asyncio.sleep(self.flush_poll)


def cleanup_leftovers(netns: str | None = None) -> None:
    """Remove everything the iptables mode made, for IPv4 and IPv6 (upstream
    ``CleanupLeftovers``; ``--cleanup``, switching to another mode). Both families are tried;
    raises one ``CleanupFailed`` listing every failure of either."""
    proxier.cleanup_leftovers("iptables", _cleanup_errors, netns)


def _cleanup_errors(family: int, netns: str | None) -> list[str]:
    try:
        cleanup_family(family, netns=netns)
    except CleanupFailed as err:
        return err.errors
    return []


def cleanup_family(family: int = IPV4, *, netns: str | None = None, metrics: ProxyMetrics | None = None,
                   ipt: IptablesSync | None = None) -> None:
    """Remove everything the iptables mode made for ``family``:
    the jumps from the built-in hooks, every ``KUBE-`` chain of ours in nat and filter including
    all per-Service chains, the mangle canary, and ``KUBE-FIREWALL`` with its jumps (upstream
    leaves that to kubelet; no kubelet writes iptables here).
    A family whose iptables does not work is skipped. Every step runs; if any failed,
    ``CleanupFailed`` lists them. Blocking (runs from ``--cleanup`` and from startup)."""
    ipt = ipt or IptablesSync(family, netns=netns)
    if not ipt.available():
        log.info("%s iptables not available, nothing to clean up", FAMILY_NAMES[family])
        return
    errors: list[str] = []
    for jump in (*JUMP_CHAINS, *CLEANUP_ONLY_JUMP_CHAINS, *KUBELET_JUMP_CHAINS):
        try:
            ipt.delete_rule(jump.table, jump.src, *jump.args)
        except CommandFailed as err:
            errors.append(f"removing jump {jump.src} -> {jump.dst}: {err}")
    count_failure = metrics.iptables_restore_failures.labels(FAMILY_NAMES[family]).inc if metrics is not None else None
    errors += remove_chains(ipt, cleanup_input, count_failure)
    try:
        if ipt.chain_exists(TABLE_MANGLE, KUBE_PROXY_CANARY):
            ipt.delete_chain(TABLE_MANGLE, KUBE_PROXY_CANARY)
    except CommandFailed:
        pass  # upstream ignores this one
    if errors:
        for error in errors:
            log.error("iptables cleanup: %s", error)
        raise CleanupFailed("iptables", [f"{FAMILY_NAMES[family]}: {error}" for error in errors])


def remove_chains(ipt: IptablesSync, cleanup_text: Callable[[str, list[str]], str | None],
                  on_restore_failure: Callable[[], None] | None = None) -> list[str]:
    """The chain removal every iptables-based mode shares at cleanup: per table (nat, then
    filter) one ``iptables-save``, ``cleanup_text(table, chains)`` (the mode's own restore input
    flushing and deleting its chains, None: nothing of ours) and one ``iptables-restore``.
    Both tables are tried; the failures are returned."""
    errors: list[str] = []
    for table in (TABLE_NAT, TABLE_FILTER):
        try:
            text = cleanup_text(table, chains_in_save(ipt.save(table)))
        except CommandFailed as err:
            errors.append(f"iptables-save -t {table}: {err}")
            continue
        if text is None:
            continue
        try:
            ipt.restore(text, table=table)
        except CommandFailed as err:
            errors.append(f"iptables-restore -T {table}: {err}")
            if on_restore_failure is not None:
                on_restore_failure()
    return errors
