"""Informers: a live, indexed local copy of one resource, and callbacks on every change.

This is client-go's reflector + store + shared informer, in one asyncio task.

**The reflector loop** (``ListAndWatch``):

1. *List* every object (in pages of ``limit``, chained by ``continue``). The list is a snapshot
   at one resourceVersion (RV).
2. *Replace* the store with the snapshot, delivering the differences to the handlers: an add
   for a new key, an update for a key whose RV changed, and a delete, with the last known
   object, for a key that is gone (client-go hands out a ``DeletedFinalStateUnknown`` here;
   the object we pass is the last state we saw). After the first replace, ``has_synced()``.
3. *Watch* from the snapshot's RV with ``allowWatchBookmarks=true`` and a random
   ``timeoutSeconds`` of 5–10 minutes (so many informers do not reconnect in lock-step).
   Each event is applied to the store and handed to the handlers; every event, BOOKMARKs
   included, advances the RV to resume from.
4. When the server ends the watch normally, watch again from the last RV: nothing is missed
   and nothing is re-listed.
5. When the watch fails, restart from 1 after a backoff (0.8 s doubling to 30 s, jittered,
   reset by a successful list): on 410 Expired (the RV was compacted away: the events in
   between are lost, only a fresh list can tell what changed), on a dropped connection, on an
   error answer, and on a "very short watch" (ended within a second without any event, which
   means the server is refusing to serve it; re-watching would spin).

**Handlers** are plain callables ``on_add(obj)``, ``on_update(old, new)``, ``on_delete(obj)``,
called in order, one event at a time, inline in the reflector; they should only record the
change (enqueue a key, update a tracker) and return. Between two watch events the reflector
lets the event loop run, so the workers woken by one event start on it while the rest of a
burst that arrived in one read is still being applied. A handler added late first receives an
add for every object already cached, as client-go's shared informer does. ``on_update`` is not
called when the RV did not change (a relist re-reading an unchanged object), except for the
periodic resync: every ``resync_period`` seconds, ``on_update(obj, obj)`` for every cached
object, so level-triggered controllers re-check their work. A handler that raises is logged
and the others still run.

Like kube-proxy's ``config`` package, one informer fans out to many handlers; the store
(``informer.indexer``) is shared with them read-only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from kubesvc.client.cache import IndexFunc, Indexer, object_key
from kubesvc.client.rest import ClientError, Resource, RestClient, is_gone
from kubesvc.util.aio import wait_event

log = logging.getLogger("kubesvc.client.informer")

WATCH_TIMEOUT_RANGE = (300, 600)
VERY_SHORT_WATCH = 1.0  # seconds


class VeryShortWatch(ClientError):
    """The server closed a watch at once without sending anything."""


@dataclass
class Backoff:
    """Jittered exponential delay between failed list+watch attempts (client-go's reflector:
    800 ms initial, doubling, capped at 30 s)."""

    initial: float = 0.8
    cap: float = 30.0
    jitter: float = 0.1
    _next: float = 0.0

    def next_delay(self) -> float:
        base = self._next or self.initial
        self._next = min(base * 2, self.cap)
        return base * (1 + self.jitter * random.random())

    def reset(self) -> None:
        self._next = 0.0


@dataclass(frozen=True)
class EventHandler:
    on_add: Callable[[dict], object] | None = None
    on_update: Callable[[dict, dict], object] | None = None
    on_delete: Callable[[dict], object] | None = None


def resource_version(obj: dict) -> str:
    return obj.get("metadata", {}).get("resourceVersion", "")


class Informer:
    """List+watch one resource into an ``Indexer`` and tell handlers about every change.

    ``client`` is a ``RestClient``; ``resource`` a ``rest.Resource``. Start ``run()`` as a task,
    ``await wait_for_sync()``, and ``stop()`` to end it (``run()`` then returns).
    """

    def __init__(
        self,
        client: RestClient,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resync_period: float | None = None,
        *,
        indexers: dict[str, IndexFunc] | None = None,
        page_size: int = 500,
        watch_timeout_range: tuple[int, int] = WATCH_TIMEOUT_RANGE,
        backoff: Backoff | None = None,
    ):
        self.resource = resource
        self.indexer = Indexer(indexers)
        self._api = client.resource(resource)
        self._selection = {"namespace": namespace, "label_selector": label_selector, "field_selector": field_selector}
        self._resync_period = resync_period
        self._page_size = page_size
        self._watch_timeout_range = watch_timeout_range
        self._backoff = backoff or Backoff()
        self._handlers: list[EventHandler] = []
        self._synced = asyncio.Event()
        self._last_resource_version = ""
        self._loops: asyncio.Task | None = None
        self._stop_requested = False

    # -- public surface ------------------------------------------------------------------

    def add_event_handler(self, on_add=None, on_update=None, on_delete=None) -> EventHandler:
        """Register handlers; objects already cached are replayed to ``on_add`` first."""
        handler = EventHandler(on_add, on_update, on_delete)
        self._handlers.append(handler)
        if on_add is not None:
            for obj in self.indexer.list():
                self._call(on_add, obj)
        return handler

    def remove_event_handler(self, handler: EventHandler) -> None:
        self._handlers.remove(handler)

    def has_synced(self) -> bool:
        """True once the first list has been stored and delivered to the handlers."""
        return self._synced.is_set()

    async def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Wait until ``has_synced()``; False if ``timeout`` seconds pass first."""
        return await wait_event(self._synced, timeout)

    @property
    def last_sync_resource_version(self) -> str:
        """The RV the cache reflects (the last list, watch event or bookmark seen)."""
        return self._last_resource_version

    async def run(self) -> None:
        """Reflect until ``stop()`` (then return) or cancellation (then raise)."""
        if self._stop_requested:
            return
        self._loops = asyncio.create_task(self._run_loops())
        try:
            await self._loops
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # we were cancelled, not stopped
        finally:
            self._loops.cancel()

    def stop(self) -> None:
        self._stop_requested = True
        if self._loops is not None:
            self._loops.cancel()

    # -- the reflector ---------------------------------------------------------------------

    async def _run_loops(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._reflect_forever())
            if self._resync_period:
                group.create_task(self._resync_forever(self._resync_period))

    async def _reflect_forever(self) -> None:
        while True:
            try:
                await self._list_and_watch()
            except ClientError as err:
                delay = self._backoff.next_delay()
                level = logging.INFO if is_gone(err) else logging.WARNING
                log.log(level, "%s: %s; relisting in %.1fs", self._describe(), err, delay)
            except Exception:
                delay = self._backoff.next_delay()
                log.exception("%s: unexpected failure; relisting in %.1fs", self._describe(), delay)
            await asyncio.sleep(delay)

    async def _list_and_watch(self) -> None:
        version = await self._relist()
        self._backoff.reset()
        while True:
            version = await self._watch(version)

    async def _relist(self) -> str:
        listing = await self._api.list(**self._selection, limit=self._page_size)
        self._replace(listing["items"])
        version = listing["metadata"]["resourceVersion"]
        self._last_resource_version = version
        self._synced.set()
        return version

    async def _watch(self, version: str) -> str:
        """One watch from ``version``; returns the RV to resume from when it ends normally."""
        clock = asyncio.get_running_loop()
        started, events = clock.time(), 0
        stream = self._api.watch(**self._selection, resource_version=version, timeout_seconds=random.randint(*self._watch_timeout_range), allow_watch_bookmarks=True)
        async with contextlib.aclosing(stream):
            async for event_type, obj in stream:
                events += 1
                self._apply(event_type, obj)
                version = resource_version(obj) or version
                self._last_resource_version = version
                # One read of the stream often holds a burst of events (100 Pods created at
                # once); let the work each one queued start before the next is applied, as
                # client-go's workers run beside its handlers, not after the whole burst.
                await asyncio.sleep(0)
        if events == 0 and clock.time() - started < VERY_SHORT_WATCH:
            raise VeryShortWatch(f"watch from {version} ended at once without events")
        return version

    def _apply(self, event_type: str, obj: dict) -> None:
        if event_type in ("ADDED", "MODIFIED"):
            self._store(obj)
        elif event_type == "DELETED":
            self._forget(object_key(obj), obj)
        elif event_type != "BOOKMARK":
            log.warning("%s: ignoring watch event of unknown type %r", self._describe(), event_type)

    def _replace(self, items: list[dict]) -> None:
        """Make the store equal the listed items, delivering the differences."""
        listed = set()
        for obj in items:
            listed.add(object_key(obj))
            self._store(obj)
        for key in set(self.indexer.keys()) - listed:
            self._forget(key, self.indexer.get_by_key(key))

    def _store(self, obj: dict) -> None:
        old = self.indexer.upsert(obj)
        if old is None:
            self._notify("on_add", obj)
        elif resource_version(old) != resource_version(obj):
            self._notify("on_update", old, obj)

    def _forget(self, key: str, last_state: dict) -> None:
        if self.indexer.remove(key) is not None:
            self._notify("on_delete", last_state)

    async def _resync_forever(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            if self.has_synced():
                for obj in self.indexer.list():
                    self._notify("on_update", obj, obj)

    # -- handler dispatch ----------------------------------------------------------------------

    def _notify(self, which: str, *objs: dict) -> None:
        for handler in list(self._handlers):
            callback = getattr(handler, which)
            if callback is not None:
                self._call(callback, *objs)

    def _call(self, callback: Callable, *objs: dict) -> None:
        try:
            callback(*objs)
        except Exception:
            log.exception("%s: event handler %r failed", self._describe(), callback)

    def _describe(self) -> str:
        scope = self._selection["namespace"] or "all namespaces"
        return f"informer {self.resource.plural} ({scope})"
