"""Run one function often enough but not too often (upstream
``pkg/proxy/runner/bounded_frequency_runner.go``), on asyncio.

kube-proxy's watch handlers only record changes and call ``run()``; this runner decides when the
sync function (``fn``) actually runs:

* **Coalescing.** ``run()`` never blocks and never queues more than one request: any number of
  calls before the next start make one run, which sees all their changes.
* **Minimum interval.** After a run *ends*, at least ``min_interval`` passes before the next one
  *starts* (``minSyncPeriod``); requests meanwhile wait and then run at once.
* **Retry.** If ``fn`` raises, the exception is logged and a retry is due ``retry_interval``
  later (``syncPeriod``), still no sooner than ``min_interval``; any run in between, successful
  or not, replaces it.
* **Maximum interval.** Without any request, ``fn`` runs ``max_interval`` after the last run
  ended (the hourly full resync).

One deliberate difference: upstream drops a ``Run()`` made before ``Loop`` is ready (its
proxiers call ``syncProxyRules`` directly when the informers have synced). Here a request made
before ``loop()`` starts is kept and runs as soon as the loop starts, so the first sync does not
wait for ``max_interval``.

Time comes from the ``clock``, a ``Timers`` object: ``LoopTimers`` (the running event loop's clock) in
production, ``FakeTimers`` in tests, which fire only when the test calls ``advance()``, so a
test of "999 ms is too soon, 1000 ms is not" is exact and instant.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

log = logging.getLogger("kubesvc.proxy")


class Timer(Protocol):
    def cancel(self) -> None: ...


class Timers(Protocol):
    def now(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Call ``callback`` once, ``delay`` seconds from now, unless cancelled first."""


class LoopTimers:
    """The running event loop's monotonic clock and timers."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(delay, callback)


class _FakeTimer:
    __slots__ = ("due", "callback", "cancelled")

    def __init__(self, due: float, callback: Callable[[], None]):
        self.due = due
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeTimers:
    """Timers that fire only inside ``advance``, in due order (like k8s' ``FakeClock.Step``)."""

    def __init__(self, start: float = 0.0):
        self._now = start
        self._heap: list[tuple[float, int, _FakeTimer]] = []
        self._sequence = itertools.count()

    def now(self) -> float:
        return self._now

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = _FakeTimer(self._now + max(delay, 0.0), callback)
        heapq.heappush(self._heap, (timer.due, next(self._sequence), timer))
        return timer

    def advance(self, seconds: float) -> None:
        """Move the clock forward and fire every timer now due."""
        self._now += seconds
        while self._heap and self._heap[0][0] <= self._now:
            _, _, timer = heapq.heappop(self._heap)
            if not timer.cancelled:
                timer.cancelled = True
                timer.callback()

    @property
    def armed(self) -> int:
        """Timers waiting to fire (upstream tests' ``fakeClock.Waiters()``)."""
        return sum(1 for _, _, timer in self._heap if not timer.cancelled)


class BoundedFrequencyRunner:
    """Runs ``fn`` on request, at most once per ``min_interval``, at least once per
    ``max_interval``, and ``retry_interval`` after a failure."""

    def __init__(self, name: str, fn: Callable[[], Awaitable[object]], min_interval: float, retry_interval: float,
                 max_interval: float, clock: Timers | None = None):
        if max_interval < min_interval:
            raise ValueError(f"{name}: max_interval ({max_interval}) must be >= min_interval ({min_interval})")
        self.name = name
        self.fn = fn
        self.min_interval = min_interval
        self.retry_interval = retry_interval
        self.max_interval = max_interval
        self.clock: Timers = clock or LoopTimers()
        self.runs = 0
        self.failures = 0
        self._requested = False
        self._wake: asyncio.Event | None = None
        self._max_timer: Timer | None = None
        self._retry_timer: Timer | None = None

    def run(self) -> None:
        """Ask for a run as soon as the minimum interval allows; never blocks."""
        self._requested = True
        if self._wake is not None:
            self._wake.set()

    async def loop(self) -> None:
        """Serve requests and timers until cancelled."""
        if self._wake is not None:
            raise RuntimeError(f"{self.name}: loop() is already running")
        self._wake = asyncio.Event()
        if self._requested:
            self._wake.set()
        log.debug("%s: loop running", self.name)
        try:
            self._max_timer = self.clock.call_later(self.max_interval, self._trigger)
            while True:
                await self._wake.wait()
                await self._run_once()
                await self._sleep(self.min_interval)
        finally:
            log.debug("%s: loop stopping", self.name)
            self._cancel_timers()
            self._wake = None

    async def _run_once(self) -> None:
        # Everything requested so far is served by this run; later requests wake the loop again.
        self._wake.clear()
        self._requested = False
        self._cancel_timers()
        self.runs += 1
        try:
            await self.fn()
        except Exception:
            self.failures += 1
            log.exception("%s: run failed; retrying in %ss", self.name, self.retry_interval)
            self._retry_timer = self.clock.call_later(self.retry_interval, self._trigger)
        # The periodic run counts from the end of this one, like upstream's timer reset.
        self._max_timer = self.clock.call_later(self.max_interval, self._trigger)

    def _trigger(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _cancel_timers(self) -> None:
        for timer in (self._max_timer, self._retry_timer):
            if timer is not None:
                timer.cancel()
        self._max_timer = self._retry_timer = None

    async def _sleep(self, delay: float) -> None:
        done = asyncio.get_running_loop().create_future()

        def wake_up() -> None:
            if not done.done():
                done.set_result(None)

        timer = self.clock.call_later(delay, wake_up)
        try:
            await done
        finally:
            timer.cancel()
