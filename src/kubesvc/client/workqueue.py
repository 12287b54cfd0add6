"""A controller's work queue (client-go ``util/workqueue``): de-duplicating, delayed, rate-limited.

Controllers do not act inside informer callbacks; they enqueue a *key* (``namespace/name``)
and workers later reconcile whatever the cache says that key should look like. The queue's
job is to make that safe and cheap:

* **De-duplication.** A key added many times before a worker takes it is processed once
  (the ``dirty`` set holds keys waiting to be processed).
* **No concurrent processing of one key.** ``get()`` moves a key into ``processing``; if the
  key is added again meanwhile, it is only marked dirty, and re-queued when the worker calls
  ``done(key)``. So every change is seen, yet one key never runs in two workers at once.
* **Delays.** ``add_after(key, seconds)`` adds the key later (a heap of deadlines; an earlier
  deadline for a waiting key wins).
* **Per-item exponential backoff.** ``add_rate_limited(key)`` re-adds a failed key after
  5 ms, 10 ms, 20 ms … up to 1000 s (client-go's ``ItemExponentialFailureRateLimiter``
  defaults); ``forget(key)`` after a success resets its count.
* **Shutdown.** ``shutdown()`` wakes every worker; ``get()`` then raises ``ShutDown`` once
  the queue is empty, and further adds are ignored.

The worker loop that drives it (get, sync, forget or ``add_rate_limited``, ``done``) is
``kubesvc.controllers.runtime.run_workers``.

Time comes from an injected ``Clock`` (deadlines are on ``clock.monotonic()``), so tests can
move time forward without sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Hashable

from kubesvc.util.aio import wait_event
from kubesvc.util.clock import Clock, RealClock

Item = Hashable


class ShutDown(Exception):
    """The queue was shut down and holds nothing more to process."""


class ItemExponentialBackoff:
    """Delay for an item's n-th consecutive failure: ``min(base * 2**n, cap)`` seconds."""

    def __init__(self, base: float = 0.005, cap: float = 1000.0):
        self.base = base
        self.cap = cap
        self._failures: dict[Item, int] = {}

    def when(self, item: Item) -> float:
        failures = self._failures.get(item, 0)
        self._failures[item] = failures + 1
        if failures >= 64:  # 2**64 * base is far beyond any sane cap
            return self.cap
        return min(self.base * 2**failures, self.cap)

    def forget(self, item: Item) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: Item) -> int:
        return self._failures.get(item, 0)


class WorkQueue:
    """De-duplicating FIFO with delayed and rate-limited adds (see the module docstring)."""

    def __init__(self, rate_limiter: ItemExponentialBackoff | None = None, clock: Clock | None = None):
        self.rate_limiter = rate_limiter or ItemExponentialBackoff()
        self._clock = clock or RealClock()
        self._queue: deque[Item] = deque()
        self._dirty: set[Item] = set()
        self._processing: set[Item] = set()
        self._waiting: dict[Item, float] = {}  # item -> its (earliest) deadline
        self._deadlines: list[tuple[float, int, Item]] = []  # heap; entries may be stale
        self._sequence = itertools.count()  # heap tie-break: FIFO among equal deadlines
        self._wakeup = asyncio.Event()
        self._shutting_down = False

    def add(self, item: Item) -> None:
        if self._shutting_down or item in self._dirty:
            return
        self._dirty.add(item)
        if item in self._processing:
            return  # re-queued by done()
        self._queue.append(item)
        self._wakeup.set()

    def add_after(self, item: Item, delay: float) -> None:
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(item)
            return
        deadline = self._clock.monotonic() + delay
        if item in self._waiting and self._waiting[item] <= deadline:
            return
        self._waiting[item] = deadline
        heapq.heappush(self._deadlines, (deadline, next(self._sequence), item))
        self._wakeup.set()  # a sleeping get() may need to wake earlier

    def add_rate_limited(self, item: Item) -> None:
        self.add_after(item, self.rate_limiter.when(item))

    def forget(self, item: Item) -> None:
        """Stop tracking the item's failures (call after it was processed successfully)."""
        self.rate_limiter.forget(item)

    def num_requeues(self, item: Item) -> int:
        return self.rate_limiter.num_requeues(item)

    async def get(self) -> Item:
        """The next item to process; call ``done(item)`` when finished with it."""
        while True:
            self._promote_due()
            if self._queue:
                item = self._queue.popleft()
                self._processing.add(item)
                self._dirty.discard(item)
                return item
            if self._shutting_down:
                raise ShutDown
            self._wakeup.clear()
            await wait_event(self._wakeup, self._time_to_next_deadline())

    def done(self, item: Item) -> None:
        """Mark the item processed; if it was added meanwhile, queue it again."""
        self._processing.discard(item)
        if item in self._dirty:
            self._queue.append(item)
            self._wakeup.set()

    def shutdown(self) -> None:
        """Refuse new items and wake every waiting ``get()``; queued items still drain."""
        self._shutting_down = True
        self._waiting.clear()
        self._deadlines.clear()
        self._wakeup.set()

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def __len__(self) -> int:
        """Items ready to be handed out now (not those still waiting for a deadline)."""
        self._promote_due()
        return len(self._queue)

    def _promote_due(self) -> None:
        now = self._clock.monotonic()
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, _, item = heapq.heappop(self._deadlines)
            if self._waiting.get(item) == deadline:
                del self._waiting[item]
                self.add(item)

    def _time_to_next_deadline(self) -> float | None:
        if not self._deadlines:
            return None
        return max(0.0, self._deadlines[0][0] - self._clock.monotonic())
