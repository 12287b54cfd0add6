"""Group commit: one writer thread owns SQLite's write connection and commits what is queued together.

A write's cost in SQLite is mostly fixed per transaction, not per row: BEGIN takes the write
lock, COMMIT appends every page the transaction touched to the WAL (the same index pages,
written again by each small transaction) with one write(2). etcd amortises the same fixed
cost by batching: its backend commits the writes of many requests in one bolt transaction,
and the raft log appends the entries of many proposals with one fsync. Here:

* an ``await submit(work)`` queues ``work`` and waits for its outcome; it never runs SQLite on
  the event loop's thread, so a request's storage round trip does not hold the loop, and the
  loop goes on parsing, validating and encoding other requests meanwhile (SQLite runs its
  statements with the GIL released);
* the writer thread takes *everything* queued when it wakes (writes that arrived while the
  previous batch committed wait for that one commit, no longer) and hands the batch to
  ``commit(batch) -> outcomes``, which runs it in one SQLite transaction and returns, per
  item in order, its result or the exception it raised: one item that fails (a conflict) does
  not fail the others;
* outcomes go back to each submitter's event loop with one ``call_soon_threadsafe`` per loop
  and batch, after the commit returned: nothing is acknowledged before it is committed.

What is durable, and when watchers see a write, is ``commit``'s business (backend.py): it
publishes each batch's events in revision order before returning.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from typing import Callable, Generic, Sequence, TypeVar

log = logging.getLogger(__name__)

Work = TypeVar("Work")
Result = TypeVar("Result")

MAX_BATCH = 512  # items per transaction: a bound on one commit's latency, far above any queue seen


class WriterClosed(RuntimeError):
    """The writer was closed before (or while) the work was queued."""


class GroupCommitter(Generic[Work, Result]):
    def __init__(self, commit: Callable[[Sequence[Work]], list[Result | BaseException]], *, name: str = "sqlite-writer",
                 max_batch: int = MAX_BATCH):
        self._commit = commit
        self._max_batch = max_batch
        self._queue: deque[tuple[Work, asyncio.Future, asyncio.AbstractEventLoop]] = deque()  # appends are thread-safe
        self._wake = threading.Event()
        self._closed = False
        self.batches = self.items = 0  # for tests and the bench: items / batches is the mean batch
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    async def submit(self, work: Work) -> Result:
        """Queue ``work`` for the next transaction and wait until it has committed (or failed)."""
        if self._closed:
            raise WriterClosed("storage is closed")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.append((work, future, loop))
        self._wake.set()
        return await future

    def close(self) -> None:
        """Commit what is queued, then stop the thread."""
        self._closed = True
        self._wake.set()
        self._thread.join()
        late = list(self._queue)  # queued by a submit that raced close(): refused, never lost silently
        self._queue.clear()
        for _, future, loop in late:
            try:
                loop.call_soon_threadsafe(_settle, [(future, WriterClosed("storage is closed"))])
            except RuntimeError:
                pass

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()  # set again by any submit from here on: its item is taken now or next round
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), self._max_batch))]
                self._commit_and_settle(batch)
            if self._closed and not self._queue:
                return

    def _commit_and_settle(self, batch: list[tuple[Work, asyncio.Future, asyncio.AbstractEventLoop]]) -> None:
        try:
            outcomes = self._commit([work for work, _, _ in batch])
        except BaseException as err:  # commit reports per item; this is a bug or a dead connection
            log.exception("storage write batch failed")
            outcomes = [err] * len(batch)
        self.batches += 1
        self.items += len(batch)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future, object]]] = {}
        for (_, future, loop), outcome in zip(batch, outcomes):
            by_loop.setdefault(loop, []).append((future, outcome))
        for loop, settled in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, settled)
            except RuntimeError:  # that loop is closed: nobody waits for these any more
                pass


def _settle(settled: list[tuple[asyncio.Future, object]]) -> None:
    for future, outcome in settled:
        if future.done():  # the waiter was cancelled; the write itself stands, as in etcd
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
