"""Run one function often enough but not too often: kube-proxy's BoundedFrequencyRunner as its
iptables and nftables proxiers use it in the releases before the ``pkg/proxy/runner`` rewrite,
1.32 among them (``pkg/util/async/bounded_frequency_runner.go``;
``NewBoundedFrequencyRunner("sync-runner", syncProxyRules, minSyncPeriod, ..., burstSyncs)``
with ``burstSyncs := 2``), on asyncio.

kube-proxy's watch handlers only record changes and call ``run()``; this runner decides when the
sync function (``fn``) actually runs:

* **Coalescing.** ``run()`` never blocks and never queues more than one request: any number of
  calls before the next start make one run, which sees all their changes.
* **Minimum interval, with bursts.** A request runs at once if the token bucket allows it
  (client-go's ``flowcontrol`` token bucket: ``1/min_interval`` runs per second,
  ``burst_runs`` of them saved up while idle); otherwise it is deferred to ``min_interval`` after the last run
  *ended*, and any request before then tries the bucket again. So under a stream of changes
  runs start ``min_interval`` apart (a change that comes during a run waits for the next
  start, not for the run's end plus ``min_interval``), and after a quiet spell ``burst_runs``
  runs may follow each other at once.
* **Retry.** If ``fn`` raises, the exception is logged and a retry is due ``retry_interval``
  later (the proxiers' ``RetryAfter(syncPeriod)``), still within the bucket; any run in
  between, successful or not, replaces it.
* **Maximum interval.** Without any request, ``fn`` runs ``max_interval`` after the last run
  ended (the hourly full resync).

The later rewrite (``pkg/proxy/runner``) drops the bucket: ``min_interval`` from the end of one
run to the start of the next, no bursts; ``burst_runs=1`` comes close to it (one run per
``min_interval``, counted from starts). One deliberate difference from both: upstream drops a
``Run()`` made before ``Loop`` is ready (its proxiers call ``syncProxyRules`` directly when the
informers have synced). Here a request made before ``loop()`` starts is kept and runs as soon
as the loop starts, so the first sync does not wait for ``max_interval``.

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

from kubesvc.client.flowcontrol import TokenBucketRateLimiter

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
                 max_interval: float, clock: Timers | None = None, burst_runs: int = 1):
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
        self._pending = False  # a request, a retry or the periodic run waits to run
        self._wake: asyncio.Event | None = None
        self.burst_runs = burst_runs
        self._bucket: TokenBucketRateLimiter | None = None  # made by loop(), on its clock
        self._max_timer: Timer | None = None
        self._retry_timer: Timer | None = None
        self._min_timer: Timer | None = None  # min_interval after the last run ended: a deferred run's time

    def run(self) -> None:
        """Ask for a run as soon as the minimum interval allows; never blocks."""
        self._trigger()

    async def loop(self) -> None:
        """Serve requests and timers until cancelled."""
        if self._wake is not None:
            raise RuntimeError(f"{self.name}: loop() is already running")
        self._wake = asyncio.Event()
        # each loop starts with its bursts saved up; no bucket for a zero interval (upstream's nullLimiter)
        self._bucket = (TokenBucketRateLimiter(1.0 / self.min_interval, self.burst_runs, clock=self.clock.now)
                        if self.min_interval > 0 else None)
        if self._pending:
            self._wake.set()
        log.debug("%s: loop running", self.name)
        try:
            self._max_timer = self.clock.call_later(self.max_interval, self._trigger)
            while True:
                await self._wake.wait()
                self._wake.clear()
                if self._bucket is None or self._bucket.try_accept():
                    await self._run_once()
                # else deferred: the min timer (min_interval after the last run's end) or a
                # later request, which tries the bucket again, wakes the loop
        finally:
            log.debug("%s: loop stopping", self.name)
            self._cancel_timers()
            self._wake = None

    async def _run_once(self) -> None:
        # Everything requested so far is served by this run; later requests wake the loop again.
        self._pending = False
        self._cancel_timers()
        self.runs += 1
        try:
            await self.fn()
        except Exception:
            self.failures += 1
            log.exception("%s: run failed; retrying in %ss", self.name, self.retry_interval)
            self._retry_timer = self.clock.call_later(self.retry_interval, self._trigger)
        # The periodic run and a deferred one count from the end of this one (upstream's
        # timer.Reset(maxInterval) and nextPossible = minInterval - elapsed since lastRun).
        self._max_timer = self.clock.call_later(self.max_interval, self._trigger)
        self._min_timer = self.clock.call_later(self.min_interval, self._min_interval_passed)

    def _trigger(self) -> None:
        self._pending = True
        if self._wake is not None:
            self._wake.set()

    def _min_interval_passed(self) -> None:
        if self._pending and self._wake is not None:
            self._wake.set()

    def _cancel_timers(self) -> None:
        for timer in (self._max_timer, self._retry_timer, self._min_timer):
            if timer is not None:
                timer.cancel()
        self._max_timer = self._retry_timer = self._min_timer = None

