"""nftables mode, the thin half: one ``nft -f -`` per sync, stale chains deleted later, and
failures counted and turned into ``SyncFailed`` (upstream ``syncProxyRules`` around the rule
building, and ``CleanupLeftovers``).

Per sync:

1. Chains that went stale more than a second ago are deleted in their own transaction (a
   failure counts ``sync_proxy_rules_nftables_cleanup_failures_total`` and makes this sync
   full, so the chains are listed and retried).
2. A full sync first reads the table back with one ``nft -j list table`` (chain and set
   names, and every element of our sets and maps) into a ``rules.KernelSnapshot``; a
   container that cannot be read back is flushed and refilled.
3. ``rules.build_sync`` renders the transaction and updates the bookkeeping; ``nft`` applies
   it. A rejected transaction counts ``sync_proxy_rules_nftables_sync_failures_total``,
   invalidates the bookkeeping (next sync full) and raises ``SyncFailed``.

Between syncs, every ``check_period`` (the sync period) a monitor looks at two small chains
that every sync leaves non-empty (``nat-prerouting``, which hooks us in, and ``services``,
the dispatch). If either is gone or empty, someone deleted or flushed our table (``nft flush
ruleset``, a firewall reload) and a full sync is requested at once. Upstream nftables mode
has no such check (its iptables mode has the canary chains); we keep the promise in both.
Two ``nft`` calls on tiny chains cost the same at 10 or 30,000 Services.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from kubesvc.kernel.exec import CleanupFailed, CommandFailed
from kubesvc.kernel.nftables import NFTables, table_contents
from kubesvc.proxy.backend import ProxyOptions, SyncFailed, SyncRequest, SyncResult
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.nftables import rules
from kubesvc.proxy.types import FAMILY_NAMES, IPV4, IPV6

log = logging.getLogger("kubesvc.proxy.nftables")

STALE_CHAIN_DELAY = 1.0  # seconds between flushing a stale chain and deleting it


class NftablesBackend:
    mode = "nftables"

    def __init__(self, options: ProxyOptions, metrics: ProxyMetrics | None = None, *, nft: NFTables | None = None,
                 clock: Callable[[], float] = time.monotonic, check_period: float = 30.0):
        self.options = options
        self.check_period = check_period
        self._monitor: asyncio.Task | None = None
        self.metrics = metrics or ProxyMetrics()
        self.nft = nft or NFTables(options.family)
        self.clock = clock
        self.state = rules.NftState()
        self.family_name = FAMILY_NAMES[options.family]

    async def start(self, request_full_sync: Callable[[], None]) -> None:
        self._monitor = asyncio.create_task(self._watch_for_interference(request_full_sync))

    async def stop(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
            self._monitor = None

    async def _watch_for_interference(self, request_full_sync: Callable[[], None]) -> None:
        while True:
            await asyncio.sleep(self.check_period)
            if not self.state.synced:
                continue  # nothing programmed yet (or a full sync is already due)
            try:
                intact = await self.table_intact()
            except CommandFailed as err:
                log.warning("could not check the nftables table: %s", err)
                continue
            if not intact:
                log.warning("the %s kube-proxy table was deleted or flushed by someone else; resyncing fully", self.nft.family_name)
                self.state.invalidate()
                request_full_sync()

    async def table_intact(self) -> bool:
        for chain in rules.WATCHED_CHAINS:
            if not await self.nft.chain_rule_count(chain):
                return False
        return True

    async def sync(self, request: SyncRequest) -> SyncResult:
        started = time.perf_counter()
        kernel_seconds = 0.0
        state = self.state
        now = self.clock()

        due = state.due_stale_chains(now - STALE_CHAIN_DELAY)
        if due:
            t0 = time.perf_counter()
            try:
                await self.nft.run(rules.delete_chains_text(self.options.family, due))
                state.stale_chains_deleted(due)
            except CommandFailed as err:
                log.error("unable to delete stale nftables chains; the next sync is full: %s", err)
                self.metrics.nftables_cleanup_failures.labels(self.family_name).inc()
                state.invalidate()
            kernel_seconds += time.perf_counter() - t0

        snapshot = None
        full = rules.sync_is_full(request, self.options, state)
        if full:
            t0 = time.perf_counter()
            try:
                snapshot = await self._snapshot()
            except CommandFailed as err:
                self._failed(err, "listing the nftables table failed")
            kernel_seconds += time.perf_counter() - t0

        try:
            plan = rules.build_sync(request, self.options, state, snapshot, now, full=full)
        except Exception as err:  # e.g. slot space exhausted: a full sync rebuilds everything
            self._failed(err, "building the nftables transaction failed")
        t0 = time.perf_counter()
        try:
            await self.nft.run(plan.text)
        except CommandFailed as err:
            kernel_seconds += time.perf_counter() - t0
            self._failed(err, "nftables sync failed")
        kernel_seconds += time.perf_counter() - t0

        objects = state.objects()
        for kind, count in plan.written.items():
            self.metrics.nftables_objects_last.labels(kind, self.family_name).set(count)
        for kind, count in objects.items():
            self.metrics.nftables_objects_total.labels(kind, self.family_name).set(count)
        total = time.perf_counter() - started
        return SyncResult(full=plan.full, no_local_internal=plan.no_local_internal, no_local_external=plan.no_local_external,
                          build_seconds=total - kernel_seconds, kernel_seconds=kernel_seconds, written=dict(plan.written))

    def _failed(self, err: Exception, what: str):
        self.metrics.nftables_sync_failures.labels(self.family_name).inc()
        self.state.invalidate()
        log.error("%s: %s", what, err)
        raise SyncFailed(f"{what}: {err}") from err

    async def _snapshot(self) -> rules.KernelSnapshot:
        """Our table as the kernel holds it, from one ``nft -j list table``; empty when the
        table does not exist. Containers that cannot be read back are flushed and refilled
        (``elements[name] = None``), also when the whole listing with elements fails."""
        try:
            chains, sets, elements = table_contents(await self.nft.list_table())
        except (CommandFailed, ValueError) as err:  # unreadable: names only, refill every container
            log.warning("could not read the nftables sets and maps back (%s); they are refilled", err)
            chains, sets, _ = table_contents(await self.nft.list_table(terse=True))
            elements = dict.fromkeys(sets)
        return rules.KernelSnapshot(chains=chains, sets=sets,
                                    elements={n: c for n, c in elements.items() if n in rules.CONTAINERS})


def cleanup_leftovers(netns: str | None = None) -> None:
    """Delete table ``kube-proxy`` in ``ip`` and ``ip6`` (``--cleanup``; switching to another
    mode); a missing table is fine. Raises ``CleanupFailed`` (after trying both families) if
    ``nft`` failed otherwise."""
    errors: list[str] = []
    for family in (IPV4, IPV6):
        nft = NFTables(family, netns=netns)
        try:
            if nft.delete_table_sync():
                log.info("deleted the %s kube-proxy nftables table", nft.family_name)
        except CommandFailed as err:
            log.error("error cleaning up nftables rules: %s", err)
            errors.append(str(err))
    if errors:
        raise CleanupFailed("nftables", errors)
