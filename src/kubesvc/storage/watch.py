"""Watch fan-out for the embedded backends: a ring of recent events and one queue per watch.

An etcd watch "after revision N" under a prefix delivers every event with revision > N for keys
under that prefix exactly once and in revision order. It starts with the history the watcher
missed (catch-up) and continues with live events as they commit. The apiserver's watch,
and every informer behind it, relies on there being no gap and no duplicate. A client that
falls too far behind gets a 410 and relists.

The :class:`WatchHub` keeps the last ``ring_size`` events in memory, which is kine's
broadcaster with a replay buffer. A new watch catches up from the ring when the ring reaches
back far enough. Otherwise it catches up from the backend's history, which the backend passes
in as ``read_history(prefix, after_revision)``; for SQLite that is
``SELECT ... WHERE id > ? ORDER BY id``. After that the watch takes live events.

Exactly-once delivery rests on one rule for backends: call :meth:`WatchHub.publish` with each
commit's events in revision order, and call :meth:`WatchHub.subscribe`, while holding the same
lock that serialises writes. Then no commit can land between a watch's catch-up and its
registration.

Threads: writers publish from any thread. A watch is iterated on an asyncio loop, captured when
iteration starts. Batches go onto a deque (its appends are thread-safe) and the loop is woken
with ``call_soon_threadsafe``. Each iteration step yields everything queued so far as one
``list[Event]``.

Slow consumers: a watch with ``queue_size`` undelivered batches is closed, like kine's
subscriber with a full buffer. Its queued events are dropped and its iteration ends. The
consumer re-watches from the last revision it saw, or gets Compacted and relists.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from itertools import takewhile
from typing import AsyncIterator, Callable

from kubesvc.storage.base import Event, KeyValue

ReadHistory = Callable[[str, int], list[Event]]


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, None in a thread without one (the group
    committer's, a ``sync_*`` caller's)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class QueuedWatch:
    """One open watch (the base.Watch protocol): batches waiting for the consumer's loop.

    Leaving the ``async for`` early closes the watch."""

    def __init__(self, hub: WatchHub, prefix: str, queue_size: int, backlog: list[Event]):
        self._prefix = prefix
        self._hub = hub
        self._queue_size = queue_size
        self._batches: deque[list[Event]] = deque([backlog] if backlog else [])
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = asyncio.Event()

    def offer(self, events: list[Event]) -> bool:
        """Queue the events under this watch's prefix. Returns False if the watch is closed,
        which includes being closed now because the consumer is ``queue_size`` batches behind."""
        # a watch of everything (the watch cache's, the allocators') shares the commit's list:
        # batches are only read, never changed
        batch = events if not self._prefix else [event for event in events if event.kv.key.startswith(self._prefix)]
        if batch and not self._closed:
            if len(self._batches) >= self._queue_size:
                self._closed = True
                self._batches.clear()
            else:
                self._batches.append(batch)
            self._wake()
        return not self._closed

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._hub.discard(self)
            self._wake()

    def request_progress(self) -> None:
        self._hub.progress(self)

    def queue_progress(self, revision: int) -> None:
        """Called by the hub under its lock, so the marker lands after every event it covers."""
        if not self._closed:
            self._batches.append([Event("PROGRESS", KeyValue("", b"", 0, revision))])
            self._wake()

    async def __aiter__(self) -> AsyncIterator[list[Event]]:
        self._loop = asyncio.get_running_loop()
        try:
            while not self._closed:
                self._ready.clear()
                events = self._take_queued()
                if events:
                    yield events
                else:
                    await self._ready.wait()
        finally:
            self.close()

    def _take_queued(self) -> list[Event]:
        events: list[Event] = []
        try:
            while True:
                events.extend(self._batches.popleft())
        except IndexError:
            return events

    def _wake(self) -> None:
        loop = self._loop
        if loop is None:  # not iterating yet: the first iteration step looks at the queue
            return
        if _running_loop() is loop:
            # published on the consumer's own loop (a commit on the event loop's thread, the
            # default): set it here; call_soon_threadsafe would write the loop's wake-up fd
            # and have the loop read it back, two system calls per commit and watch for nothing
            self._ready.set()
            return
        try:
            loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:  # the consumer's loop is closed: nobody will iterate again
            self._closed = True


class WatchHub:
    """Fans committed events out to watches; keeps the ring that most catch-ups are served from."""

    def __init__(self, revision: int, *, ring_size: int = 10_000, queue_size: int = 10_000):
        """``revision``: the backend's current revision; the ring starts empty after it."""
        self._lock = threading.Lock()
        self._ring: deque[Event] = deque()
        self._ring_size = max(ring_size, 1)
        self._ring_after = revision  # the ring holds every event with a revision above this
        self._revision = revision  # the newest published revision
        self._queue_size = queue_size
        self._watches: set[QueuedWatch] = set()

    def publish(self, events: list[Event]) -> None:
        """Record one commit's events (in revision order) and offer them to every watch."""
        if not events:
            return
        with self._lock:
            for event in events:
                if len(self._ring) == self._ring_size:
                    self._ring_after = self._ring.popleft().kv.mod_revision
                self._ring.append(event)
            self._revision = events[-1].kv.mod_revision
            closed = [watch for watch in self._watches if not watch.offer(events)]
            if closed:  # the set is rebuilt only when a watch went, not on every commit
                self._watches.difference_update(closed)

    def progress(self, watch: QueuedWatch) -> None:
        with self._lock:
            watch.queue_progress(self._revision)

    def subscribe(self, prefix: str, after_revision: int, read_history: ReadHistory) -> QueuedWatch:
        """A watch of events after ``after_revision`` under ``prefix``, starting with catch-up.
        The caller holds its write lock (see the module docstring)."""
        with self._lock:
            if after_revision >= self._ring_after:
                newer = takewhile(lambda event: event.kv.mod_revision > after_revision, reversed(self._ring))
                backlog = [event for event in newer if event.kv.key.startswith(prefix)][::-1]
            else:
                backlog = read_history(prefix, after_revision)
            watch = QueuedWatch(self, prefix, self._queue_size, backlog)
            self._watches.add(watch)
        return watch

    def discard(self, watch: QueuedWatch) -> None:
        with self._lock:
            self._watches.discard(watch)

    def close(self) -> None:
        """Close every watch; their iterations end."""
        with self._lock:
            watches, self._watches = self._watches, set()
        for watch in watches:
            watch.close()
