"""One storage watch as one etcd watch, on a gRPC stream of its own (kube-apiserver's
``etcd3/watcher.go``).

* A watch "after revision N" is etcd's ``WatchCreateRequest{start_revision: N+1, prev_kv,
  progress_notify}`` over the prefix's range, with the ``hasleader`` metadata
  (``clientv3.WithRequireLeader``): a member that has lost its leader ends the stream instead of
  keeping it open and silent.
* etcd's events map one to one: ``PUT`` stays PUT (a create when ``create_revision ==
  mod_revision``); ``DELETE`` carries an empty value in etcd, so the deleted value is taken from
  ``prev_kv`` (kube's watcher does the same; a non-create event without ``prev_kv`` is an error
  there too). etcd never splits one revision's events over two responses, so each response is
  one batch.
* A response with no events is a progress notification (``IsProgressNotify``): every event up
  to ``header.revision`` under the range has been sent. It becomes a PROGRESS event, which the
  watch cache and the storage path's watch turn into a bookmark. ``request_progress()`` sends
  ``WatchProgressRequest`` only where etcd orders its answer with the watch's events (the
  backend's ``request_watch_progress``: 3.4.31+, 3.5.13+, 3.6, kube-apiserver's feature check);
  elsewhere it does nothing. An older etcd answers at once, from the watch server's control
  channel, with its current revision, whether or not this watcher has been sent the events up
  to it (etcd issues #15220, #17507): on Debian's 3.4.23 a watch opened 1,400 events behind got
  PROGRESS at the current revision before any of them (tests/storage/test_etcd.py), and a
  client resuming from the bookmark it became would never get them. etcd's periodic
  notifications (``progress_notify``) go to a synced watcher through its own event channel, in
  order, on every version. The answer is broadcast to every watcher of the stream (PR #9869),
  which is why each watch has a stream of its own (as the cacher has).
* etcd before 3.4.24 may send an event twice (etcd #15275): events at or below the newest
  revision already delivered are dropped.
* A watcher behind the compact revision is cancelled by etcd (``compact_revision`` set, "the
  client should treat the watcher as canceled"); the stream failing (member gone, no leader)
  ends it too. Either way the iteration ends and the consumer re-watches from the last revision
  it saw: the backend then answers Compacted, or resumes it on a live member.
* A consumer ``queue_size`` batches behind is dropped, as the embedded backends drop one.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import AsyncIterator, Callable

import grpc
from aetcd import rpc

from kubesvc.storage.base import Event, KeyValue

log = logging.getLogger(__name__)

Name = Callable[[bytes], str]


DELETE = rpc.Event.EventType.DELETE  # looked up once: the enum wrapper's getattr costs per event


def to_event(event, name: Name) -> Event:
    kv = event.kv
    key = name(kv.key)
    if event.HasField("prev_kv"):
        prev_kv = event.prev_kv
        prev = KeyValue(key, prev_kv.value, prev_kv.create_revision, prev_kv.mod_revision)
    else:
        prev = None
    if event.type == DELETE:
        if prev is None:
            raise ValueError(f"etcd event received with PrevKv=nil (key={key!r}, modRevision={kv.mod_revision}, type=DELETE)")
        return Event("DELETE", KeyValue(key, prev.value, prev.create_revision, kv.mod_revision), prev)
    return Event("PUT", KeyValue(key, kv.value, kv.create_revision, kv.mod_revision), prev)


class EtcdWatch:
    """The base.Watch protocol over one etcd watch stream; started by :meth:`start`."""

    def __init__(self, call, name: Name, queue_size: int, on_close: Callable[["EtcdWatch"], None], *,
                 progress_requests: bool = False):
        """``progress_requests``: whether etcd orders a progress request's answer with the
        events (the backend's ``request_watch_progress``); without it :meth:`request_progress`
        sends nothing."""
        self._call = call
        self._progress_requests = progress_requests
        self._name = name
        self._queue_size = queue_size
        self._on_close = on_close
        self._batches: deque[list[Event]] = deque()
        self._ready = asyncio.Event()
        self._closed = False
        self._delivered = 0  # newest revision queued (duplicate suppression)
        self._writing = asyncio.Lock()
        self._pump: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self.watch_id = -1

    async def start(self, create: "rpc.WatchCreateRequest") -> "rpc.WatchResponse":
        """Send the create request and return etcd's answer to it (``canceled`` set when it
        refused); :meth:`run` then reads the stream in the background."""
        await self._call.write(rpc.WatchRequest(create_request=create))
        first = await self._call.read()
        if first is not grpc.aio.EOF and first.created:
            self.watch_id = first.watch_id
            # events after the start revision, or after now for a watch from now
            self._delivered = create.start_revision - 1 if create.start_revision else first.header.revision
        return first

    def run(self) -> None:
        self._pump = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            while not self._closed:
                response = await self._call.read()
                if response is grpc.aio.EOF or response.canceled:
                    if response is not grpc.aio.EOF and response.compact_revision:
                        log.info("etcd cancelled a watch: compacted at %d", response.compact_revision)
                    break
                self._receive(response)
        except (grpc.aio.AioRpcError, asyncio.CancelledError) as error:
            if not self._closed and isinstance(error, grpc.aio.AioRpcError):
                log.info("etcd watch stream ended: %s", error.details())
        except Exception:  # noqa: BLE001 - a malformed event ends this watch, the consumer re-watches
            log.exception("etcd watch failed")
        finally:
            self._end()

    def _receive(self, response) -> None:
        if response.events:
            batch = [to_event(e, self._name) for e in response.events if e.kv.mod_revision > self._delivered]
            if not batch:
                return
            self._delivered = batch[-1].kv.mod_revision
        else:  # progress notification: everything up to header.revision was sent
            revision = response.header.revision
            if revision < self._delivered:
                return
            batch = [Event("PROGRESS", KeyValue("", b"", 0, revision))]
        if len(self._batches) >= self._queue_size:
            log.warning("etcd watch consumer is %d batches behind: closing its watch", len(self._batches))
            self.close()
            return
        self._batches.append(batch)
        self._ready.set()

    def request_progress(self) -> None:
        if not self._closed and self._progress_requests:
            task = asyncio.ensure_future(self._write(rpc.WatchRequest(progress_request=rpc.WatchProgressRequest())))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _write(self, request) -> None:
        try:
            async with self._writing:
                await self._call.write(request)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, asyncio.CancelledError):
            pass  # the stream is gone: its reader ends the watch

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._batches.clear()
            self._call.cancel()
            self._end()

    def _end(self) -> None:
        self._closed = True
        self._ready.set()
        self._on_close(self)

    async def __aiter__(self) -> AsyncIterator[list[Event]]:
        try:
            while True:
                if self._batches:
                    events: list[Event] = []
                    while self._batches:
                        events.extend(self._batches.popleft())
                    yield events
                    continue
                if self._closed:
                    return
                self._ready.clear()
                await self._ready.wait()
        finally:
            self.close()
