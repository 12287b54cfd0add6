"""nftables mode, the thin half (upstream ``syncProxyRules`` around the rule building, and
``CleanupLeftovers``), run by the shared proxier's skeleton (``backend.Mode``).

Per sync:

1. ``tidy``: chains that went stale more than a second ago are deleted in their own
   transaction (a failure counts ``sync_proxy_rules_nftables_cleanup_failures_total`` and
   makes this sync full, so the chains are listed and retried).
2. ``observe``: a full sync first reads the table back with one ``nft -j list table`` (chain
   and set names, and every element of our sets and maps) into a ``rules.KernelSnapshot``; a
   container that cannot be read back is flushed and refilled.
3. ``plan``: ``rules.build_sync`` renders the transaction and the bookkeeping after it (pure).
4. ``apply``: ``nft`` runs it. A rejected transaction counts
   ``sync_proxy_rules_nftables_sync_failures_total``; the bookkeeping stays as it was before
   and the next sync is full.

Between syncs, every ``check_period`` (the sync period) a monitor looks at two small chains
that every sync leaves non-empty (``nat-prerouting``, which hooks us in, and ``services``,
the dispatch). If either is gone or empty, someone deleted or flushed our table (``nft flush
ruleset``, a firewall reload) and a full sync is requested at once. Upstream nftables mode
has no such check (its iptables mode has the canary chains); we keep the promise in both.
Each look is two small netlink queries, the chain and its rules (``NFTables.chain_rule_count``), the cost
of the chain, not of the table: ``nft -j list chain`` fills nft's whole cache with every set
element first (~1 s at 10k Services × 10).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from kubesvc.kernel.exec import CleanupFailed, CommandFailed
from kubesvc.kernel.nftables import NFTables, table_contents
from kubesvc.proxy.backend import Mode, ProxyOptions, SyncRequest
from kubesvc.proxy import proxier
from kubesvc.proxy.nftables import rules

log = logging.getLogger("kubesvc.proxy.nftables")

STALE_CHAIN_DELAY = 1.0  # seconds between flushing a stale chain and deleting it


class NftablesBackend(Mode[rules.NftState]):
    mode = "nftables"
    failure_metric = "nftables_sync_failures"
    cleanup_failure_metric = "nftables_cleanup_failures"
    written_gauge = "nftables_objects_last"
    total_gauge = "nftables_objects_total"

    def __init__(self, options: ProxyOptions, *, nft: NFTables | None = None, clock: Callable[[], float] = time.monotonic,
                 check_period: float = 30.0):
        super().__init__(options)
        self.check_period = check_period
        self.nft = nft or NFTables(options.family)
        self.clock = clock

    def initial_state(self) -> rules.NftState:
        return rules.NftState()

    async def tidy(self, state: rules.NftState) -> rules.NftState:
        due = state.due_stale_chains(self.clock() - STALE_CHAIN_DELAY)
        if not due:
            return state
        await self.nft.run(rules.delete_chains_text(self.family, due))
        return state.without_chains(due)

    async def observe(self, request: SyncRequest, state: rules.NftState) -> tuple[rules.KernelSnapshot | None, float]:
        return (await self._snapshot() if request.full else None), self.clock()

    def plan(self, request: SyncRequest, previous: rules.NftState, observed) -> rules.SyncPlan:
        snapshot, now = observed
        return rules.build_sync(request, self.options, previous, snapshot, now)

    async def apply(self, plan: rules.SyncPlan) -> None:
        await self.nft.run(plan.kernel_input)

    def background(self, request_full_sync: Callable[[], None], state: Callable[[], rules.NftState]):
        return [self._watch_for_interference(request_full_sync, state)]

    async def _watch_for_interference(self, request_full_sync: Callable[[], None], state: Callable[[], rules.NftState]) -> None:
        while True:
            await asyncio.sleep(self.check_period)
            if not state().synced:
                continue  # nothing programmed yet
            try:
                intact = await self.table_intact()
            except CommandFailed as err:
                log.warning("could not check the nftables table: %s", err)
                continue
            if not intact:
                log.warning("the %s kube-proxy table was deleted or flushed by someone else; resyncing fully", self.nft.family_name)
                request_full_sync()

    async def table_intact(self) -> bool:
        for chain in rules.WATCHED_CHAINS:
            if not await self.nft.chain_rule_count(chain):
                return False
        return True

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
    proxier.cleanup_leftovers("nftables", cleanup_family, netns)


def cleanup_family(family: int, netns: str | None = None) -> list[str]:
    nft = NFTables(family, netns=netns)
    try:
        if nft.delete_table_sync():
            log.info("deleted the %s kube-proxy nftables table", nft.family_name)
    except CommandFailed as err:
        log.error("error cleaning up nftables rules: %s", err)
        return [str(err)]
    return []
