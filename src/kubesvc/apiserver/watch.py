"""Streaming watch: ``GET …?watch=true``, one JSON event per line, flushed per event.

Behaviour clients depend on (api-compat.md §3.3, G9):

* resourceVersion unset or "0": a synthetic ADDED for every current object, then live events;
  N: only events after N; below the compaction point: HTTP 200 and one ERROR event carrying a
  410 Expired Status, then the stream ends (kubectl prints it; reflectors relist).
* ``allowWatchBookmarks=true``: BOOKMARK events carrying only kind, apiVersion and
  ``metadata.resourceVersion``: the store's revision, delivered in-band after every event up
  to it (etcd's progress notification), so a quiet watch still moves forward and resuming
  from a bookmark loses nothing. As upstream's cacher does, one is sent shortly before the
  deadline and then at most once a minute. A watch served from etcd itself (the cache not
  ready) gets one only where etcd orders a progress request's answer with the events (3.4.31+,
  3.5.13+: storage/etcd/watch.py); on an older etcd only its periodic notifications.
* ``timeoutSeconds``: the stream ends then (kubectl get -w exits, Python stops); without it,
  upstream's 30–60 minutes.
* A client that went away is noticed within seconds (the transport closes), so idle watches do
  not pile up.
* With the Table Accept header (``kubectl get -w``), every event's object is a one-row Table.
* Every event written (bookmarks and errors too) counts in ``apiserver_watch_events_total`` and
  ``apiserver_watch_events_sizes`` (apiserver/cacher_metrics.py), as upstream's handler records.
* From the watch cache, an event is written to the connection by the cache's dispatch itself
  (:class:`~kubesvc.apiserver.cacher.CacheWatch`'s sink), not by this handler's task woken for
  it: one pass over N watchers instead of N task switches. The handler still writes what
  queued (a backed-up connection, the initial events, bookmarks, Table output).
* A watch the store cannot start (etcd unreachable) is one ERROR event with a 500 Status.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from kubesvc.api.errors import StatusError
from kubesvc.api.selectors import parse_field_selector
from kubesvc.apiserver import appkeys, codec
from kubesvc.apiserver.cacher import CacheWatch, WireEvent
from kubesvc.apiserver.handlers import Target, list_options
from kubesvc.apiserver.tables import to_table
from kubesvc.storage.base import StorageError

BOOKMARK_INTERVAL = 60.0
BOOKMARK_BEFORE_DEADLINE = 2.0
DISCONNECT_POLL = 2.0


async def watch_objects(request: web.Request, target: Target) -> web.StreamResponse:
    info, query = target.info, request.query
    opts = list_options(query, info)
    if target.name is not None:
        opts.field_selector = parse_field_selector(f"metadata.name={target.name}", info.field_labels, info.schema)
    timeout = codec.watch_timeout(query)
    bookmarks = codec.parameter_bool(query, "allowWatchBookmarks")
    as_table = codec.wants_table(request.headers.get("Accept"))
    include_object = codec.include_object_mode(query) if as_table else "Object"
    send_initial = opts.resource_version in (None, 0)
    clock = request.app[appkeys.CLOCK]

    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json", "Cache-Control": "no-cache"})
    response.enable_chunked_encoding()
    await response.prepare(request)

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    next_bookmark = min(loop.time() + BOOKMARK_INTERVAL, deadline - BOOKMARK_BEFORE_DEADLINE)
    first_table = True

    def encode_event(event_type: str, obj: dict | WireEvent) -> bytes:
        nonlocal first_table
        if isinstance(obj, WireEvent):  # from the watch cache: encoded once for every watcher
            if not as_table:
                return obj.line
            obj = obj.decode()
        if as_table and event_type not in ("ERROR", "BOOKMARK"):
            obj = to_table(info, [obj], include_object=include_object, now=clock.now(),
                           list_meta={"resourceVersion": obj["metadata"].get("resourceVersion", "")}, columns=first_table)
            first_table = False
        return codec.to_json({"type": event_type, "object": obj}) + b"\n"

    metrics = request.app.get(appkeys.WATCH_CACHE_METRICS)
    sizes = metrics.watch_events(info.group, info.version, info.resource) if metrics is not None else None

    async def send(lines: list[bytes]) -> None:
        if sizes is not None:
            for line in lines:
                sizes.observe(len(line))
        await response.write(b"".join(lines))

    cache = request.app.get(appkeys.WATCH_CACHE)
    try:
        objects = await cache.watch(info, target.namespace, opts, send_initial=send_initial) if cache is not None else None
        if objects is None:
            objects = await target.store.watch(target.namespace, opts, send_initial=send_initial)
    except (StatusError, StorageError) as exc:
        # the 200 is out: a watch that cannot start ends with one ERROR event; a store that is
        # away (etcd unreachable) is the 500 with the store's words that the status middleware
        # gives a request before its headers (kube-apiserver's etcd3 watcher sends it so)
        status = exc if isinstance(exc, StatusError) else StatusError(500, "", str(exc))
        await send([encode_event("ERROR", status.status())])
        await response.write_eof()
        return response

    source = objects if isinstance(objects, CacheWatch) else _Pumped(objects)
    if isinstance(source, CacheWatch) and not as_table and request.transport is not None:
        source.sink = _direct_writer(request.transport, sizes)
    try:
        while True:
            now = loop.time()
            if now >= deadline:
                break
            wake = min(deadline, next_bookmark if bookmarks else deadline, now + DISCONNECT_POLL)
            items = await source.next_batch(max(0.0, wake - now))
            if items is None:
                break
            if not items:
                if request.transport is None or request.transport.is_closing():
                    break
                if bookmarks and loop.time() >= next_bookmark:
                    source.request_progress()
                    next_bookmark = min(loop.time() + BOOKMARK_INTERVAL, deadline - BOOKMARK_BEFORE_DEADLINE)
                    if next_bookmark <= loop.time():
                        next_bookmark = deadline + 1
                continue
            # everything already due in one write (each line a whole event, flushed together)
            await send([encode_event(*item) for item in items])
    except (ConnectionResetError, ConnectionError, asyncio.CancelledError):
        pass
    finally:
        await source.aclose()
    with contextlib.suppress(ConnectionResetError, ConnectionError, RuntimeError):
        await response.write_eof()
    return response


DIRECT_WRITE_LIMIT = 64 * 1024  # bytes waiting in the transport past which events queue (and the handler drains)


def _direct_writer(transport, sizes):
    """The cache watch's sink: a storage batch's event lines written to the connection as one
    HTTP chunk, framed as aiohttp's chunked writer frames it. The response's headers went out
    at prepare, and aiohttp's writer puts a write's bytes into the transport before it awaits
    anything, so these writes and the handler's own stay in the order they were made."""

    def write(items: list[tuple[str, WireEvent]]) -> bool:
        if transport.is_closing() or transport.get_write_buffer_size() > DIRECT_WRITE_LIMIT:
            return False
        lines = [wire.line for _, wire in items]
        data = lines[0] if len(lines) == 1 else b"".join(lines)
        transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        if sizes is not None:
            for line in lines:
                sizes.observe(len(line))
        return True

    return write


class _Pumped:
    """A storage watch (the registry's ObjectWatch) read by a task into a queue, behind the
    watch cache's ``next_batch`` interface."""

    def __init__(self, objects):
        self._objects = objects
        self._queue: asyncio.Queue = asyncio.Queue()
        self._ended = False
        self._task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        try:
            async for event in self._objects:
                await self._queue.put(event)
        finally:
            await self._queue.put(None)

    async def next_batch(self, timeout: float) -> list | None:
        """The events due, waiting up to ``timeout`` for one ([] then); None once the watch ended."""
        if self._ended:
            return None
        try:
            first = await asyncio.wait_for(self._queue.get(), timeout=timeout)
        except asyncio.TimeoutError:
            return []
        items = []
        while first is not None:
            items.append(first)
            if self._queue.empty():
                return items
            first = self._queue.get_nowait()
        self._ended = True
        return items or None

    def request_progress(self) -> None:
        self._objects.request_progress()

    async def aclose(self) -> None:
        self._objects.close()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
