"""The allocators' index follows the store, so several apiservers share one picture.

Each apiserver keeps the taken ClusterIPs and NodePorts in memory (bitmaps: a choice is a bit
scan, not a store read). The store decides every race: an allocation is the create of its
record (``/registry/ipaddresses/<ip>``, ``/registry/servicenodeports/<port>``) in the Service's
transaction, so two apiservers can never commit the same IP or port; a stale index costs a
retry (the record exists: the choice is marked taken and another is made), never a duplicate.

Upstream keeps the index current the same way: the IPAddress allocator reads an IPAddress
informer (pkg/registry/core/service/ipallocator/ipallocator.go, ``ipAddressLister``), so an
IP taken or freed through any apiserver is seen by all, and the ServiceCIDR allocator reads a
ServiceCIDR informer. Without it an apiserver only learns of the other apiservers' writes at
its next repair pass (allocator/repair.py reloads an index that differs from the store): until
then it retries on IPs another apiserver took and, worse, answers "range is full" for IPs
another apiserver has freed.

:class:`AllocationFeed` is that informer: a storage watch of each record kind (IPAddresses,
NodePort records, ServiceCIDRs) from the revision the index was loaded at, applied in order (a record created: taken; deleted: free; a ServiceCIDR changed:
the ranges re-read). Applying an event is idempotent, so this apiserver's own writes, which
its commit hooks apply at once, change nothing when they come back through the watch. A watch
that ends resumes from the last batch applied; one below the compaction point reloads the
index and watches from there.

With the watch cache on (the default), the feed reads the cache's events
(:meth:`AllocationFeed.follow_cache`) instead of three storage watches of its own, as upstream's
informers in kube-apiserver read its cacher rather than etcd: on etcd each storage watch is a
gRPC stream, and every Service create's IPAddress record was sent and decoded twice (the
cache's stream and this one's). When the cache (re)loads past the index's revision (it
skipped events), the index is read from the store again, the events arriving meanwhile kept
and applied after it in order.
"""

from __future__ import annotations

import asyncio
import logging

from kubesvc.apiserver.allocator import records
from kubesvc.apiserver.allocator.service import ServiceAllocators
from kubesvc.storage import base as storage

log = logging.getLogger("kubesvc.apiserver.allocator")

SERVICE_CIDR_PREFIX = "/registry/servicecidrs/"
PREFIXES = (records.IP_ADDRESS_PREFIX, records.NODE_PORT_PREFIX, SERVICE_CIDR_PREFIX)
RETRY_SECONDS = 0.5


def index_change(event: storage.Event) -> tuple[str, object, bool] | None:
    """What a storage event means for the index: ("ip", ip, taken), ("port", port, taken),
    ("cidrs", None, True) for a ServiceCIDR change, or None (another kind, or a progress
    notification)."""
    if event.type == "PROGRESS":
        return None
    key, taken = event.kv.key, event.type == "PUT"
    if key.startswith(records.IP_ADDRESS_PREFIX):
        return "ip", records.ip_of_key(key), taken
    if key.startswith(records.NODE_PORT_PREFIX):
        port = records.port_of_key(key)
        return ("port", port, taken) if port is not None else None
    if key.startswith(SERVICE_CIDR_PREFIX):
        return "cidrs", None, True
    return None


class AllocationFeed:
    def __init__(self, allocators: ServiceAllocators, backend: storage.Backend):
        self.allocators = allocators
        self.backend = backend
        self.revisions = {prefix: 0 for prefix in PREFIXES}  # per watch: every event up to it is in the index
        self._tasks: list[asyncio.Task] = []

    async def load(self) -> None:
        """Read the index from the store and remember the revision to watch from. The
        revision is read first: events between it and the reads come again through the
        watch, which is harmless (applying them is idempotent and in order)."""
        revision = await self.backend.current_revision()
        await self.allocators.load()
        self.revisions = {prefix: revision for prefix in PREFIXES}

    def since(self, revision: int) -> None:
        """The index was loaded at ``revision`` or later: watch from there (replaying a few
        events the load already saw is harmless)."""
        self.revisions = {prefix: revision for prefix in PREFIXES}

    def _mark(self, batch: list[storage.Event]) -> bool:
        """Apply a batch's IP and port changes; whether a ServiceCIDR changed."""
        resync_cidrs = False
        for event in batch:
            change = index_change(event)
            if change is None:
                continue
            kind, value, taken = change
            if kind == "ip":
                self.allocators.mark_ip(str(value), taken)
            elif kind == "port":
                (self.allocators.ports.mark if taken else self.allocators.ports.unmark)(int(value))
            else:
                resync_cidrs = True
        return resync_cidrs

    async def apply(self, prefix: str, batch: list[storage.Event]) -> None:
        if self._mark(batch):
            await self.allocators.sync_cidrs()
        # a whole batch at once: in etcd a transaction's events share one revision
        self.revisions[prefix] = max([self.revisions[prefix], *(e.kv.mod_revision for e in batch)])

    # ---- from the watch cache ------------------------------------------------------------------
    def follow_cache(self, cache) -> list[asyncio.Task]:
        """Follow the store through ``cache`` (apiserver/cacher.py ``WatchCache.listen``) from the
        revision given to :meth:`since`, instead of :meth:`start`'s storage watches; returns the
        task that applies what the cache hands over, in order."""
        inbox: asyncio.Queue = asyncio.Queue()
        cache.listen(lambda batch: inbox.put_nowait((False, batch)), lambda revision: inbox.put_nowait((True, revision)))
        return [asyncio.create_task(self._from_cache(inbox))]

    async def _from_cache(self, inbox: asyncio.Queue) -> None:
        applied = min(self.revisions.values())  # every event up to it is in the index
        while True:
            loaded, item = await inbox.get()
            if loaded:  # the cache (re)loaded at ``item``: events after ``applied`` up to it are skipped
                if item > applied:
                    log.info("allocator index: the watch cache loaded at %d, past the index's %d: reloading", item, applied)
                    await self._reload_until_done()  # batches arriving meanwhile wait in the inbox, in order
                    applied = item
                continue
            try:
                if self._mark(item):
                    await self.allocators.sync_cidrs()
            except Exception:  # noqa: BLE001 - the repair loop mends the index; the next events still apply
                log.exception("allocator index: applying the watch cache's events failed")
            if item:
                applied = max(applied, item[-1].kv.mod_revision)

    async def _reload_until_done(self) -> None:
        while True:
            try:
                await self.allocators.load()
                return
            except Exception:  # noqa: BLE001 - the store is away: the events wait, try again
                log.warning("allocator index: reload failed; retrying")
                await asyncio.sleep(RETRY_SECONDS)

    # ---- from storage watches -------------------------------------------------------------------
    def start(self) -> list[asyncio.Task]:
        """Follow the store from the loaded revision (call :meth:`load` first)."""
        self._tasks = [asyncio.create_task(self.follow(prefix)) for prefix in PREFIXES]
        return self._tasks

    async def follow(self, prefix: str) -> None:
        while True:
            try:
                watch = await self.backend.watch(prefix, self.revisions[prefix])
            except storage.Compacted:
                log.info("allocator index fell behind the compaction point at %d: reloading", self.revisions[prefix])
                await self._reload()
                continue
            except storage.StorageError as err:  # the store is away (etcd unreachable): one line, not a traceback
                log.warning("allocator index: cannot watch %s (%s); retrying", prefix, err)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            except Exception:  # noqa: BLE001 - a bug: the index keeps what it has
                log.exception("allocator index: cannot watch the store; retrying")
                await asyncio.sleep(RETRY_SECONDS)
                continue
            try:
                async for batch in watch:
                    await self.apply(prefix, batch)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - resume from the last batch applied
                log.exception("allocator index: following the store failed; resuming")
                await asyncio.sleep(RETRY_SECONDS)
            finally:
                watch.close()

    async def _reload(self) -> None:
        try:
            await self.load()
        except Exception:  # noqa: BLE001
            log.exception("allocator index: reload failed; retrying")
            await asyncio.sleep(RETRY_SECONDS)
