"""The watch cache: lists and watches served from memory, each object encoded once per write.

kube-apiserver's cacher (k8s.io/apiserver/pkg/storage/cacher) keeps, per resource, the current
objects and a ring of recent events, fed by one storage watch; lists and watches are answered
from it instead of from etcd. This is that, over any backend (embedded or etcd):

* **One storage watch** of every key feeds all resources (:class:`WatchCache`), where upstream
  opens one per resource. Each resource's cacher sees exactly the events its own watch would
  deliver, in the same order (a prefix's events are a subsequence of the whole keyspace's, and
  etcd orders both by revision). What differs: one watch stream instead of one per resource;
  a failure reloads every resource (upstream: the failing one); and the cache's revision is
  global, so a quiet resource is as fresh as the busiest one without a progress notification
  (upstream needs one per quiet resource). A revision made outside the watched keys (etcd's
  ``compact_rev_key``, another program's keys) brings no event: consistent reads wait for it
  with progress requests, below. Each event is parsed once, its ``metadata.resourceVersion``
  filled in and encoded once (:class:`Cached`): the bytes a list or a watch event carries,
  shared by every reader. Beside the bytes sits what selectors need (name, namespace, labels,
  the kind's selectable fields).
* **Lists** are a concatenation of those bytes in key order, by resourceVersion as upstream's
  cacher serves them (reference/etcd-ha.md 3.2):

  * unset, a consistent read: from the cache once it reached the storage's current revision
    (``ConsistentListFromCache``; one loop turn on the embedded backends), asking the storage
    watch for progress every 100 ms while it waits (``ConditionalProgressRequester``), storage
    after 3 s. From storage at once when the backend's progress notifications cannot prove the
    cache caught up (``request_watch_progress = False``: etcd before 3.4.31), as kube-apiserver
    reads etcd then, unless every revision of the storage is a write the cache watches
    (``watch_sees_every_revision``: an etcd only kubesvc writes to), when the cache's own events
    reach the current revision without notifications;
  * ``"0"``: whatever the cache holds now (any freshness);
  * ``N``: once the cache reached N (``waitUntilFreshAndBlock``); after 3 s, 504 ``Timeout:
    Too large resource version: N, current: M`` with the ``ResourceVersionTooLarge`` cause and
    ``retryAfterSeconds`` 1, which client-go retries.

  What the cache does not answer goes to storage as before (``Store.list``):
  ``resourceVersionMatch=Exact``, as 1.32's cacher delegates it. A first page (``limit``) is
  cut from the cache at its revision, with etcd3's continue token for that revision; a next
  page comes from the cache too while none of the resource's objects changed after the
  token's revision (the cached state is then the state at that revision), else from storage
  at that revision: one consistent snapshot either way, as before. A list is written out in
  pieces (handlers.stream_list).
* **Watches** start from the ring: events after the requested revision, exactly once and in
  order, then live events. A revision beyond the cache's (a client that moved from an
  apiserver whose cache was further on; every apiserver's cache follows the same storage, so
  revisions are global) is accepted and gets the events after it once they arrive, as
  upstream's cacher accepts it: no gap and no repeat across apiservers. Below the ring's
  window, or below the storage's compaction point, a watch gets 410 Expired (``too old
  resource version: N (oldest)``) and the client relists, as from the cacher. Without a
  resourceVersion, or with "0", the watch starts with a synthetic ADDED for every current
  object (the cache's snapshot), then follows it. An event going to N
  watchers is encoded once (:meth:`CachedEvent.wire`). Selector transitions become ADDED /
  DELETED as in the cacher's ``watchCacheEvent`` filtering (an object leaving the selection is
  DELETED with its previous state at the event's revision).
* **Bookmarks**: a watch that asks for progress gets a BOOKMARK at the cache's revision once
  every event up to it has been queued to it (the storage's progress notification passes
  through the same pump; without reliable notifications, at once at the cache's own revision),
  never below the revision the watch started from.
* **Events that share a revision** (etcd puts every operation of a Txn at one revision; the
  embedded backends give each its own): a storage batch holds whole revisions (etcd never
  splits a revision across watch responses), so the cache's revision always names a state it
  holds completely. A watch "after N" takes all or none of a revision's events; the ring's
  window is "every event above ``oldest()``", so dropping the first of a revision's events
  moves the window past that whole revision (a watch from before it gets 410).
* **Metrics**: upstream's ``apiserver_watch_cache_*``, ``apiserver_cache_list_*`` and the
  watch handler's ``apiserver_watch_events_*`` (apiserver/cacher_metrics.py).

While the pump is down (the storage watch or the reload failed) the cache is not ready: lists
and watches go to storage at once, as upstream's cacher answers from etcd until it is ready
again, and the pump retries with back-off (0.1 s doubling to 5 s), logging each failure.

At start the cache reads the store as of ``max(compaction point, current - capacity)`` and
replays the history after it, so watches resumed across an apiserver restart keep working
while the ring reaches back to them.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections import deque
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Iterable

import msgspec

from kubesvc.api import errors
from kubesvc.api.scheme import KindInfo
from kubesvc.apiserver.cacher_metrics import ResourceCounts, WatchCacheMetrics
from kubesvc.apiserver.registry.store import decode_continue, encode_continue  # the registry's token format
from kubesvc.storage import base as storage
from kubesvc.storage.embedded import EmbeddedBackend

log = logging.getLogger("kubesvc.apiserver.cacher")

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode

DEFAULT_CAPACITY = 10_000  # events kept per resource (upstream's watch cache grows to ~100k)
FRESHNESS_TIMEOUT = 3.0  # upstream's waitUntilFreshAndBlock waits 3 s; then storage answers (or 504)
PROGRESS_REQUEST_PERIOD = 0.1  # upstream's progressRequestPeriod: how often a waiting read asks for progress
WATCHER_BACKLOG = 10_000  # undelivered events after which a watcher is closed (it re-watches)
RETRY_FIRST, RETRY_MAX = 0.1, 5.0  # the pump's back-off after a failure, doubling (seconds)


def retry_delay(failures: int) -> float:
    """How long the pump waits before its next attempt after ``failures`` consecutive ones."""
    return min(RETRY_MAX, RETRY_FIRST * 2 ** max(0, failures - 1))


def selection_view(obj: dict, info: KindInfo) -> dict:
    """What label and field selectors read of ``obj``: name, namespace, labels and the kind's
    selectable fields (``info.field_labels``) at their paths, nothing else."""
    meta = obj.get("metadata") or {}
    view: dict = {"metadata": {k: meta[k] for k in ("name", "namespace", "labels") if k in meta}}
    for path in info.field_labels.values():
        _copy_path(obj, view, path)
    return view


def _copy_path(source: dict, target: dict, path: tuple[str, ...]) -> None:
    for step in path[:-1]:
        source = source.get(step) if isinstance(source, dict) else None
        if not isinstance(source, dict):
            return
        target = target.setdefault(step, {})
    if isinstance(source, dict) and path[-1] in source:
        target[path[-1]] = source[path[-1]]


_fields = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode  # one level parsed, the rest skipped


def _rv_field(revision: int) -> bytes:
    return b'"resourceVersion":"%d"' % revision


def stamp(value: bytes, revision: int, info: KindInfo) -> tuple[bytes, int, dict] | None:
    """The stored JSON with ``"resourceVersion":"<revision>"`` added as the last field of its
    metadata (where decoding, setting it and encoding puts it: the same bytes), the offset of
    that field, and the selection view; without parsing more than the top level, the metadata
    and the selectable fields. None when the value is not the compact encoding this relies on
    (then the caller decodes and encodes)."""
    top = _fields(value)
    meta_raw = top.get("metadata")
    if meta_raw is None:
        return None
    offset = 1  # past "{"
    for key, raw in top.items():
        key_length = len(_encode(key)) + 1  # "key":
        if key == "metadata":
            break
        offset += key_length + len(raw) + 1  # value and ","
    start = offset + key_length
    end = start + len(meta_raw)
    if value[end - 1:end] != b"}" or value[start:start + 1] != b"{":
        return None
    meta = _fields(meta_raw)
    if "resourceVersion" in meta:
        return None
    view_meta = {k: _decode(meta[k]) for k in ("name", "namespace", "labels") if k in meta}
    view: dict = {"metadata": view_meta}
    parsed: dict[str, object] = {}
    for path in info.field_labels.values():
        head = path[0]
        if head == "metadata" or head not in top:
            if head == "metadata":
                _copy_path({"metadata": {k: _decode(v) for k, v in meta.items() if k != "managedFields"}}, view, path)
            continue
        if head not in parsed:
            parsed[head] = _decode(top[head])
        _copy_path(parsed, view, path)
    rv_at = end - 1 + (len(meta_raw) > 2)  # after the "," that follows a non-empty metadata
    separator = b"," if len(meta_raw) > 2 else b""
    return b"".join((value[:end - 1], separator, _rv_field(revision), value[end - 1:])), rv_at, view


class Cached:
    """One object as of one revision. Its JSON as served (resourceVersion filled in) and its
    selection view are made from the stored value on first use and kept, as upstream's
    cachingObject serialises once on first use: a write nobody lists or watches costs no
    encoding, one listed or watched is encoded once for every reader."""

    __slots__ = ("key", "revision", "_info", "_value", "_raw", "_view", "_rv_at")

    def __init__(self, key: str, value: bytes, revision: int, info: KindInfo):
        """``value``: the stored JSON (without resourceVersion, registry/store.py ``encode``)."""
        self.key, self.revision, self._info, self._value = key, revision, info, value
        self._raw: bytes | None = None
        self._view: dict | None = None
        self._rv_at = -1  # where the resourceVersion field starts in raw (-1: unknown)

    @property
    def raw(self) -> bytes:
        if self._raw is None:
            self._materialize()
        return self._raw

    @property
    def view(self) -> dict:
        if self._raw is None:
            self._materialize()
        return self._view

    def _materialize(self) -> None:
        stamped = stamp(self._value, self.revision, self._info)
        if stamped is not None:
            self._raw, self._rv_at, self._view = stamped
        else:
            obj = _decode(self._value)
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.revision)
            self._raw, self._view = _encode(obj), selection_view(obj, self._info)
        self._value = None

    def at(self, revision: int) -> "Cached":
        """The same object stamped with another revision (a deletion's)."""
        if self._raw is None:
            return Cached(self.key, self._value, revision, self._info)
        other = Cached(self.key, b"", revision, self._info)
        other._view, other._value = self._view, None
        if self._rv_at >= 0:
            old = len(_rv_field(self.revision))
            other._raw = b"".join((self._raw[:self._rv_at], _rv_field(revision), self._raw[self._rv_at + old:]))
            other._rv_at = self._rv_at
        else:
            obj = _decode(self._raw)
            obj["metadata"]["resourceVersion"] = str(revision)
            other._raw = _encode(obj)
        return other

    def decode(self) -> dict:
        return _decode(self.raw)


class WireEvent:
    """A watch event ready for the wire: the JSON line and the object's bytes (a Table watch
    decodes those)."""

    __slots__ = ("line", "raw")

    def __init__(self, event_type: str, raw: bytes):
        self.raw = raw
        self.line = b'{"type":"' + event_type.encode() + b'","object":' + raw + b"}\n"

    def decode(self) -> dict:
        return _decode(self.raw)


class CachedEvent:
    """One change of one key: ``obj`` is the new state (for a deletion, the last state at the
    deletion's revision), ``prev`` the state before (None for a creation)."""

    __slots__ = ("type", "revision", "key", "obj", "prev", "_wire", "_prev_gone")

    def __init__(self, event_type: str, revision: int, key: str, obj: Cached, prev: Cached | None):
        self.type, self.revision, self.key, self.obj, self.prev = event_type, revision, key, obj, prev
        self._wire: dict[str, WireEvent] = {}
        self._prev_gone: Cached | None = None

    def wire(self, event_type: str, obj: Cached) -> WireEvent:
        """The line for ``event_type`` of ``obj``, encoded once for every watcher."""
        key = event_type if obj is self.obj else "prev:" + event_type
        found = self._wire.get(key)
        if found is None:
            found = self._wire[key] = WireEvent(event_type, obj.raw)
        return found

    def prev_gone(self) -> Cached:
        """The previous state at this event's revision: what a watcher whose selection the
        object leaves receives as DELETED (as the storage watch sends it)."""
        if self._prev_gone is None:
            self._prev_gone = self.prev.at(self.revision)
        return self._prev_gone


def translate(event: CachedEvent, opts) -> tuple[str, Cached] | None:
    """The event a watcher with ``opts`` (registry ListOptions) sees, if any: selector
    transitions become ADDED / DELETED."""
    if event.type == "DELETED":
        return ("DELETED", event.obj) if opts.matches(event.obj.view) else None
    now_matches = opts.matches(event.obj.view)
    if event.prev is None:
        return ("ADDED", event.obj) if now_matches else None
    if not opts.filtered:
        return "MODIFIED", event.obj
    was_matching = opts.matches(event.prev.view)
    if now_matches:
        return ("MODIFIED" if was_matching else "ADDED"), event.obj
    return ("DELETED", event.prev_gone()) if was_matching else None


@dataclass
class ListPage:
    items: list[Cached]
    meta: dict  # ListMeta: resourceVersion, continue, remainingItemCount
    fetched: int = 0  # objects read to make the page (apiserver_cache_list_fetched_objects_total)


class Cacher:
    """One resource's objects (in key order) and recent events."""

    def __init__(self, info: KindInfo, revision: int, capacity: int, counts: ResourceCounts | None = None):
        """``counts``: the resource's metrics (cacher_metrics.py), which outlive this cacher."""
        self.info = info
        self.counts = counts if counts is not None else ResourceCounts()
        self.prefix = info.key_prefix()
        self._objects: dict[str, Cached] = {}
        self._keys: list[str] = []  # sorted: lists and pages walk it
        self._ring: deque[CachedEvent] = deque()
        self.capacity = max(1, capacity)
        self._ring_after = revision  # the ring holds every event of this resource above this
        self._last_change = revision  # the newest revision that may have changed an object here
        self.watchers: set[CacheWatch] = set()

    def load(self, kv: storage.KeyValue) -> None:
        """An object of the initial state (no event)."""
        if kv.key not in self._objects:
            bisect.insort(self._keys, kv.key)
        self._objects[kv.key] = Cached(kv.key, kv.value, kv.mod_revision, self.info)

    def apply(self, event: storage.Event) -> None:
        key, revision = event.kv.key, event.kv.mod_revision
        prev = self._objects.get(key)
        if event.type == "DELETE":
            if prev is None:  # not seen (cannot happen with one ordered watch): the storage's value
                prev = Cached(key, event.kv.value, event.prev_kv.mod_revision if event.prev_kv else revision, self.info)
            else:
                del self._objects[key]
                del self._keys[bisect.bisect_left(self._keys, key)]
            cached_event = CachedEvent("DELETED", revision, key, prev.at(revision), prev)
        else:
            obj = Cached(key, event.kv.value, revision, self.info)
            if prev is None:
                bisect.insort(self._keys, key)
            self._objects[key] = obj
            cached_event = CachedEvent("ADDED" if prev is None else "MODIFIED", revision, key, obj, prev)
        self._last_change = revision
        if len(self._ring) == self.capacity:
            self._ring_after = self._ring.popleft().revision
        self._ring.append(cached_event)
        counts = self.counts
        counts.received += 1
        for watcher in list(self.watchers):
            watcher.offer(cached_event)
        counts.dispatched += 1

    def oldest(self) -> int:
        """The lowest revision a watch may start after."""
        return self._ring_after

    def events_after(self, revision: int, prefix: str) -> list[CachedEvent]:
        newer = []
        for event in reversed(self._ring):
            if event.revision <= revision:
                break
            if event.key.startswith(prefix):
                newer.append(event)
        newer.reverse()
        return newer

    def objects(self, prefix: str, start: str = "") -> Iterable[Cached]:
        """Current objects under ``prefix`` from key ``start`` on, in key order."""
        keys, objects = self._keys, self._objects
        index = bisect.bisect_left(keys, max(prefix, start))
        while index < len(keys):
            key = keys[index]
            if not key.startswith(prefix):
                return
            yield objects[key]
            index += 1

    def unchanged_since(self, revision: int) -> bool:
        """Whether the cached objects are this resource's state as of ``revision`` too."""
        return self._last_change <= revision

    def page(self, namespace: str | None, opts, revision: int, start_key: str = "") -> ListPage:
        """One list page at ``revision`` (the cache's, or a continue token's when
        :meth:`unchanged_since` it) from ``start_key`` on, with ``Store._list_range``'s paging:
        without selectors the limit is the page and the token points past its last key, with
        ``remainingItemCount``; with selectors the page fills with matches and the token points
        past the last match when any key follows. An exact name (``metadata.name=``) is never
        paged, as ``Store._list_one``."""
        prefix = self.info.key_prefix(namespace)
        meta: dict = {"resourceVersion": str(revision)}
        name = opts.field_selector.exact_name() if opts.field_selector is not None else None
        limit = 0 if name is not None and "/" not in name else max(0, opts.limit)
        if not opts.filtered:
            start = bisect.bisect_left(self._keys, max(prefix, start_key))
            end = bisect.bisect_left(self._keys, storage.prefix_end(prefix))
            keys = self._keys[start:min(end, start + limit) if limit else end]
            if limit and start + limit < end and keys:
                meta["continue"] = encode_continue(revision, keys[-1][len(prefix):] + "\x00")
                meta["remainingItemCount"] = end - start - limit
            return ListPage([self._objects[key] for key in keys], meta, len(keys))
        items: list[Cached] = []
        matches = opts.matches
        page = ListPage(items, meta)
        for obj in self.objects(prefix, start_key):
            page.fetched += 1
            if matches(obj.view):
                items.append(obj)
                if limit and len(items) == limit:
                    next_start = obj.key + "\x00"
                    if next(iter(self.objects(prefix, next_start)), None) is not None:
                        meta["continue"] = encode_continue(revision, next_start[len(prefix):])
                    break
        return page


class CacheWatch:
    """One client's watch on the cache: (type, WireEvent) pairs, and BOOKMARKs as dicts; the
    interface of the registry's ObjectWatch (``request_progress``, ``close``, ``async for``).

    ``sink``, when the consumer sets one, takes the events of each storage batch as the pump
    dispatches it (the watch handler writes them to its connection there and then, in one
    write), so an event for N watchers is N writes in one pass instead of N tasks woken to
    write it, and the events of one revision (an etcd Txn's) never go out in separate writes:
    a client cut off between two of them cannot resume "after" that revision having seen only
    part of it. It is used only while nothing is queued before the events (order), and it
    declines (returns False) when the connection is backed up; the events are then queued as
    without it."""

    def __init__(self, cache: "WatchCache", cacher: Cacher, prefix: str, opts, after: int, initial: list[Cached]):
        self._cache, self._cacher, self._prefix, self._opts, self._after = cache, cacher, prefix, opts, after
        self._pending: deque = deque(("ADDED", WireEvent("ADDED", obj.raw)) for obj in initial if opts.matches(obj.view))
        self._ready = asyncio.Event()
        self._closed = False
        self.sink: Callable[[list[tuple[str, WireEvent]]], bool] | None = None
        self._outgoing: list[tuple[str, WireEvent]] = []  # this batch's events for the sink (flush)
        if self._pending:
            self._ready.set()

    def offer(self, event: CachedEvent) -> None:
        if self._closed or event.revision <= self._after or not event.key.startswith(self._prefix):
            return
        seen = translate(event, self._opts)
        if seen is None:
            return
        item = (seen[0], event.wire(*seen))
        if self.sink is not None and not self._pending:
            if not self._outgoing:
                self._cache.flush_after_batch(self)
            self._outgoing.append(item)
            return
        self._queue(item)

    def _queue(self, item: tuple) -> None:
        if len(self._pending) >= WATCHER_BACKLOG:  # too slow: end it, the client re-watches
            self.close()
            return
        self._pending.append(item)
        self._ready.set()

    def flush(self) -> None:
        """The batch's events to the sink in one go; queued when it declines."""
        items, self._outgoing = self._outgoing, []
        if not items or self._closed or (self.sink is not None and self.sink(items)):
            return
        for item in items:
            self._queue(item)

    def bookmark(self, revision: int) -> None:
        if not self._closed and revision >= self._after:  # never behind where the client said it is (a watch from ahead)
            info = self._cacher.info
            self._pending.append(("BOOKMARK", {"kind": info.kind, "apiVersion": info.api_version, "metadata": {"resourceVersion": str(revision)}}))
            self._ready.set()

    def request_progress(self) -> None:
        self._cache.request_bookmark(self)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.sink = None
            self._cacher.watchers.discard(self)
            self._cache.forget_bookmark(self)
            self._ready.set()

    async def next_batch(self, timeout: float) -> list | None:
        """The events due, waiting up to ``timeout`` for one ([] then); None once closed (the
        watch handler's interface: one write per batch, no task in between)."""
        if not self._pending:
            if self._closed:
                return None
            self._ready.clear()
            timer = asyncio.get_running_loop().call_later(timeout, self._ready.set)  # cheaper than wait_for's task
            try:
                await self._ready.wait()
            finally:
                timer.cancel()
            if not self._pending:
                return None if self._closed else []
        items = list(self._pending)
        self._pending.clear()
        return items

    async def aclose(self) -> None:
        self.close()

    async def __aiter__(self) -> AsyncIterator[tuple[str, object]]:
        try:
            while True:
                while self._pending:
                    yield self._pending.popleft()
                if self._closed:
                    return
                self._ready.clear()
                await self._ready.wait()
        finally:
            self.close()


class WatchCache:
    """Every stored resource's Cacher, fed by one storage watch (see the module docstring)."""

    def __init__(self, backend: storage.Backend, kinds: Iterable[KindInfo], *, capacity: int = DEFAULT_CAPACITY,
                 metrics: WatchCacheMetrics | None = None):
        self.backend = backend
        self.capacity = capacity
        self._kinds = list(kinds)
        self.metrics = metrics if metrics is not None else WatchCacheMetrics()
        self.metrics.attach(self)
        self.revision = 0
        self._cachers: dict[str, Cacher] = {}
        self._by_kind: dict[tuple[str, str], Cacher] = {}
        self._advanced = asyncio.Event()
        self._bookmarks: set[CacheWatch] = set()
        self._flushing: list[CacheWatch] = []  # watchers holding events of the batch being applied
        self._watch: storage.Watch | None = None
        self._task: asyncio.Task | None = None
        self.ready = False  # loaded and fed by a live storage watch; else storage answers
        self._listeners: list[tuple[Callable[[list[storage.Event]], None], Callable[[int], None]]] = []

    # ---- feeding -----------------------------------------------------------------------------
    async def start(self) -> asyncio.Task:
        """Load the state and start the pump (returns its task, to cancel at stop). A failed
        load is the pump's to retry; storage answers meanwhile."""
        try:
            await self._load()
        except Exception:  # noqa: BLE001 - the apiserver serves from storage until the pump loads
            log.exception("watch cache: loading failed; lists and watches go to storage until it loads")
            self._reset()
        self._task = asyncio.create_task(self._pump())
        return self._task

    def _reset(self) -> None:
        """Not ready: the storage watch closed, the cache's watches ended (they re-watch, from
        storage or a reloaded cache, and may get 410), waiting readers woken to go to storage."""
        self.ready = False
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        for watcher in [w for c in self._cachers.values() for w in c.watchers]:
            watcher.close()
        self._advanced.set()
        self._advanced = asyncio.Event()

    async def _load(self) -> None:
        self._reset()
        backend = self.backend
        current, compacted = await backend.current_revision(), backend.compact_revision()
        start = max(compacted, current - self.capacity, min(current, 1))
        self._cachers = {info.key_prefix(): Cacher(info, start, self.capacity, self.metrics.resource(info.group, info.resource))
                         for info in self._kinds}
        self._by_kind = {(c.info.group, c.info.resource): c for c in self._cachers.values()}
        for kv in (await backend.list("", revision=start)).kvs:
            cacher = self._cacher_for(kv.key)
            if cacher is not None:
                cacher.load(kv)
        self.revision = start
        self._watch = await backend.watch("", start)
        self.ready = True
        for cacher in self._cachers.values():
            cacher.counts.initializations += 1
        for _, loaded in self._listeners:
            loaded(start)

    def _cacher_for(self, key: str) -> Cacher | None:
        """The resource a key belongs to: /registry/<prefix>/..., the prefix one or two segments."""
        parts = key.split("/", 4)
        if len(parts) < 4:
            return None
        if len(parts) == 5:
            found = self._cachers.get(f"/{parts[1]}/{parts[2]}/{parts[3]}/")
            if found is not None:
                return found
        return self._cachers.get(f"/{parts[1]}/{parts[2]}/")

    async def _pump(self) -> None:
        failures = 0  # in a row, without a batch applied in between
        while True:
            try:
                if self._watch is None:
                    await self._load()
                async for batch in self._watch:
                    self._apply(batch)
                    failures = 0
                # the storage ended the watch (this pump fell behind): resume where the cache is
                self._watch = await self.backend.watch("", self.revision)
            except storage.Compacted:
                log.warning("watch cache fell behind the compaction point at %d: reloading", self.revision)
                self._reset()
                if failures:  # again: it is not a one-off race with the compactor
                    await asyncio.sleep(retry_delay(failures))
                failures += 1
            except Exception:  # noqa: BLE001 - a cache that missed an event must not serve: start over
                failures += 1
                delay = retry_delay(failures)
                log.exception("watch cache: failed at revision %d (storage answers); reloading in %.1f s", self.revision, delay)
                self._reset()
                await asyncio.sleep(delay)

    def _apply(self, batch: list[storage.Event]) -> None:
        progressed = False
        for event in batch:
            if event.type == "PROGRESS":
                progressed = True
                self.revision = max(self.revision, event.kv.mod_revision)
                continue
            cacher = self._cacher_for(event.kv.key)
            if cacher is not None:
                cacher.apply(event)
            self.revision = event.kv.mod_revision
        for follow, _ in self._listeners:
            follow(batch)
        if self._flushing:
            flushing, self._flushing = self._flushing, []
            for watcher in flushing:
                watcher.flush()
        if progressed and self._bookmarks:
            waiting, self._bookmarks = self._bookmarks, set()
            for watcher in waiting:
                watcher.bookmark(self.revision)
        self._advanced.set()
        self._advanced = asyncio.Event()

    def listen(self, follow: Callable[[list[storage.Event]], None], loaded: Callable[[int], None]) -> None:
        """Hand the storage's events to an in-process follower (the allocators' index,
        allocator/follow.py), as upstream's in-apiserver informers read the cacher instead of
        watching etcd themselves: ``follow(batch)`` gets every batch the cache applies, in
        order; ``loaded(revision)`` says the cache (re)loaded its state at ``revision`` and the
        events after it follow (a follower behind it missed events: it re-reads the store).
        Called at once with the cache's revision when it is ready."""
        self._listeners.append((follow, loaded))
        if self.ready:
            loaded(self.revision)

    def flush_after_batch(self, watcher: CacheWatch) -> None:
        self._flushing.append(watcher)

    def request_bookmark(self, watcher: CacheWatch) -> None:
        if self._request_progress():  # the storage's marker comes after every event up to its revision
            self._bookmarks.add(watcher)
        else:  # every event up to the cache's revision is queued to the watcher already
            watcher.bookmark(self.revision)

    def forget_bookmark(self, watcher: CacheWatch) -> None:
        self._bookmarks.discard(watcher)

    def _request_progress(self) -> bool:
        """Ask the storage watch for a progress notification (etcd's RequestProgress), where the
        storage answers it reliably; True if asked."""
        if self._watch is None or not self.progress_reliable:
            return False
        self._watch.request_progress()
        return True

    @property
    def progress_reliable(self) -> bool:
        """Whether the storage's progress notifications can prove the cache caught up: the
        embedded backends' always can (queued under the write lock); another backend says so
        with ``request_watch_progress`` (etcd's RequestProgress: from 3.4.31 / 3.5.13, as
        kube-apiserver's feature check), and is not trusted without it."""
        return getattr(self.backend, "request_watch_progress", isinstance(self.backend, EmbeddedBackend))

    @property
    def sees_every_revision(self) -> bool:
        """Whether every revision the storage hands out is a write under the watched keys (a
        backend says so with ``watch_sees_every_revision``: an etcd that only kubesvc writes to,
        its compactor's key under the prefix too). Then the cache reaches the storage's current
        revision by events alone, and a consistent read can wait for that without progress
        notifications; a revision made elsewhere after all costs that read the 3 s wait, then
        storage answers it."""
        return getattr(self.backend, "watch_sees_every_revision", False)

    async def fresh(self) -> bool:
        """Wait until every write committed before now is in the cache; False if that took
        longer than FRESHNESS_TIMEOUT or the cache is not ready (the caller then reads storage)."""
        if not self.ready:
            return False
        return await self.reach(await self.backend.current_revision())

    async def reach(self, target: int) -> bool:
        """Wait until the cache holds every event up to revision ``target`` (upstream's
        waitUntilFreshAndBlock), at most FRESHNESS_TIMEOUT, asking the storage watch for
        progress every PROGRESS_REQUEST_PERIOD meanwhile (upstream's ConditionalProgressRequester:
        a revision made outside the cached keys brings no event); False on timeout or when the
        cache stops being ready meanwhile."""
        if self.revision >= target:
            return self.ready
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FRESHNESS_TIMEOUT
        while self.revision < target:
            if not self.ready:  # the pump failed while this waited
                return False
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._request_progress()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._advanced.wait(), min(remaining, PROGRESS_REQUEST_PERIOD))
        return self.ready

    # ---- reading -----------------------------------------------------------------------------
    def cacher(self, info: KindInfo) -> Cacher | None:
        return self._by_kind.get((info.group, info.resource))

    def capacities(self) -> list[tuple[str, str, int]]:
        """(group, resource, ring capacity) of every cached resource (the metrics' gauges)."""
        return [(c.info.group, c.info.resource, c.capacity) for c in self._cachers.values()]

    @staticmethod
    def _served(cacher: Cacher, page: ListPage) -> ListPage:
        counts = cacher.counts
        counts.lists += 1
        counts.fetched += page.fetched
        counts.returned += len(page.items)
        return page

    async def list(self, info: KindInfo, namespace: str | None, opts) -> ListPage | None:
        """A list page from the cache, or None when storage must answer (see the module docstring)."""
        cacher = self.cacher(info)
        if cacher is None or not self.ready or opts.resource_version_match == "Exact":
            return None
        if opts.continue_token:
            # a next page: from the cache while nothing of this resource changed since the
            # token's revision (the cached state is then the state at that revision, however
            # far behind the storage the cache is; with reliable progress it first catches up,
            # so a change committed before the request sends the page to storage)
            if self.progress_reliable and not await self.fresh():
                return None
            revision, start_key = decode_continue(opts.continue_token, info.key_prefix(namespace))
            name = opts.field_selector.exact_name() if opts.field_selector is not None else None
            if name is not None or revision < self.backend.compact_revision() or not cacher.unchanged_since(revision):
                return None
            if revision > self.revision:  # a token from beyond the cache (forged, or another apiserver's): storage answers
                return None
            return self._served(cacher, cacher.page(namespace, opts, revision, start_key))
        if opts.resource_version is None:  # a consistent read
            if not (self.progress_reliable or self.sees_every_revision):  # as kube-apiserver on etcd < 3.4.31: from storage
                return None
            if not await self.fresh():
                return None
        elif opts.resource_version and not await self.reach(opts.resource_version):  # "0": whatever the cache holds
            if not self.ready:
                return None
            raise errors.too_large_resource_version(opts.resource_version, self.revision)
        return self._served(cacher, cacher.page(namespace, opts, self.revision))

    async def watch(self, info: KindInfo, namespace: str | None, opts, *, send_initial: bool) -> CacheWatch | None:
        """A watch from the cache (410 Expired below its window, raised before anything streams),
        or None when storage must answer. From revision N it needs no freshness: events up to
        the cache's revision are in the ring, later ones follow live, and an N beyond the cache
        (a client coming from another apiserver) gets the events after N once they arrive, as
        upstream's cacher accepts such a watch. Without a revision it starts at the storage's
        current state where progress is reliable, else at the cache's (upstream's legacy "any")."""
        cacher = self.cacher(info)
        if cacher is None or not self.ready:
            return None
        after = opts.resource_version or 0
        if not after and self.progress_reliable and not await self.fresh():
            return None
        prefix = info.key_prefix(namespace)
        initial: list[Cached] = []
        if send_initial or not after:
            after = self.revision
            if send_initial:
                initial = list(cacher.objects(prefix))
        oldest = max(cacher.oldest(), self.backend.compact_revision())
        if after < oldest:
            raise errors.gone(f"too old resource version: {after} ({oldest})")
        watcher = CacheWatch(self, cacher, prefix, opts, after, initial)
        for event in cacher.events_after(after, prefix):
            watcher.offer(event)
        cacher.watchers.add(watcher)
        return watcher
