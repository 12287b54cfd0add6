"""Upstream ``pkg/proxy/runner/bounded_frequency_runner_test.go``, ported test by test (they hold
for ``burst_runs=1``), the burst test of ``pkg/util/async/bounded_frequency_runner_test.go``, plus
tests of ours marked "(ours)".

Fake-time tests count in integer milliseconds (``FakeTimers`` takes any unit), so boundaries
like "999 ms is too soon, 1000 ms is not" are exact. The upstream ``*_RealClock`` tests run on
the event loop's clock with intervals scaled down 10x.
"""

import asyncio
import contextlib
import logging

import pytest

from kubesvc.proxy.runner import BoundedFrequencyRunner, FakeTimers
from tests.support.cluster import running_task


class Receiver:
    """The managed function: counts calls and raises while ``error`` is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.error: Exception | None = None

    async def __call__(self) -> None:
        self.calls += 1
        if self.error is not None:
            raise self.error


async def settle() -> None:
    """Let the runner's task react to what just happened (it needs a few loop turns)."""
    for _ in range(20):
        await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def looping(runner: BoundedFrequencyRunner):
    """The runner's loop as a task for the block, cancelled after it."""
    async with running_task(runner.loop()) as task:
        await settle()
        yield task


class Script:
    """Drives a runner on fake time the way upstream's tests drive ``fakeClock.Step``."""

    def __init__(self, min_interval: int, retry_interval: int, max_interval: int, burst_runs: int = 1):
        self.timers = FakeTimers()
        self.fn = Receiver()
        self.runner = BoundedFrequencyRunner("test-runner", self.fn, min_interval, retry_interval, max_interval, self.timers,
                                             burst_runs=burst_runs)

    async def run(self, expected_calls: int) -> None:
        self.runner.run()
        await self.expect(expected_calls)

    async def step(self, milliseconds: int, expected_calls: int) -> None:
        self.timers.advance(milliseconds)
        await self.expect(expected_calls)

    async def expect(self, calls: int) -> None:
        await settle()
        assert self.fn.calls == calls
        assert self.runner.runs == calls


async def test_bounded_frequency_runner():
    s = Script(1000, 5000, 10000)
    async with looping(s.runner):
        await s.run(1)  # Run once, immediately. rel=0ms
        assert s.timers.armed == 2  # min and max
        await s.step(500, 1)  # rel=500ms
        await s.run(1)  # before minInterval expires: no execution
        await s.step(499, 1)  # rel=999ms
        await s.run(1)
        await s.step(1, 2)  # rel=1000ms: the deferred run
        await s.run(2)
        await s.step(1, 2)  # rel=1ms
        await s.run(2)
        await s.step(998, 2)  # rel=999ms: not early
        await s.step(1, 3)  # rel=1000ms: the deferred run
        await s.step(1000, 3)  # minInterval passes, nothing queued
        await s.step(10000, 4)  # maxInterval
        await s.step(1, 4)  # rel=1ms
        await s.run(4)
        await s.step(999, 5)  # rel=1000ms


async def test_bounded_frequency_runner_retry():
    s = Script(1000, 5000, 10000)
    async with looping(s.runner):
        s.fn.error = RuntimeError("sync error")
        await s.run(1)  # run once immediately and queue a retry. rel=0ms
        assert s.timers.armed == 3  # min, max and retry
        s.fn.error = None  # next run will succeed
        await s.step(1000, 1)  # nothing happens... rel=1000ms
        await s.step(4000, 2)  # after retryInterval the function is called. rel=5000ms
        assert s.timers.armed == 2
        await s.step(499, 2)  # rel=499ms
        s.fn.error = RuntimeError("sync error")
        await s.run(2)  # before minInterval expires, and it will fail
        await s.step(501, 3)  # the deferred run queues another retry. rel=1000ms
        s.fn.error = None
        await s.step(1000, 3)  # minInterval passes
        await s.run(4)  # a successful run aborts the retry
        await s.step(4000, 4)  # retry was cancelled because we already ran
        s.fn.error = RuntimeError("sync error")
        await s.run(5)  # a new run triggers a retry
        assert s.timers.armed == 3
        s.fn.error = None
        await s.step(100, 5)  # rel=100ms
        await s.run(5)
        await s.step(900, 6)  # the deferred run, after minInterval. rel=1000ms
        await s.step(4000, 6)  # rel=4s since run, 5s since the failure: retry was cancelled
        await s.step(5000, 6)  # rel=9s since run
        await s.step(1000, 7)  # rel=10s since run: maxInterval


async def test_bounded_frequency_runner_retry_shorter_than_min_interval():
    s = Script(5000, 1000, 10000)
    async with looping(s.runner):
        s.fn.error = RuntimeError("sync error")
        await s.run(1)  # rel=0s
        assert s.timers.armed == 3
        s.fn.error = None
        await s.step(1000, 1)  # past retryInterval, still within minInterval. rel=1s
        await s.step(3999, 1)  # rel=4.999s
        await s.step(1, 2)  # rel=5s: the retry runs, respecting minInterval
        assert s.timers.armed == 2
        await s.step(10000, 3)  # maxInterval without any request


async def test_bounded_frequency_runner_burst():
    """``pkg/util/async``'s Test_BoundedFrequencyRunnerBurst (burst 2; its maxInterval 10 s)."""
    s = Script(1000, 5000, 10000, burst_runs=2)
    async with looping(s.runner):
        await s.run(1)  # abs=0ms: at once
        await s.step(1, 1)
        await s.run(2)  # abs=1ms: the burst's second run, at once
        await s.step(498, 2)
        await s.run(2)  # abs=499ms: too soon, deferred
        await s.step(1, 2)
        await s.run(2)  # abs=500ms
        await s.step(1, 2)
        await s.run(2)  # abs=501ms
        await s.step(499, 2)  # abs=1000ms: a token again, but not minInterval after the last run's end (1001)
        await s.run(3)  # a request now takes the token: the third run
        await s.step(1, 3)
        await s.run(3)  # abs=1001ms: too soon after the third
        await s.step(998, 3)
        await s.run(3)  # abs=1999ms
        await s.step(1, 4)  # abs=2000ms: the deferred run
        await s.step(2000, 4)  # abs=4000ms: the burst saved up again
        await s.run(5)
        await s.run(6)
        await s.run(6)  # too soon after the sixth
        await s.step(1000, 7)  # abs=5000ms: minInterval after the last run
        await s.step(10000, 8)  # abs=15000ms: maxInterval


async def test_a_request_during_a_long_run_waits_for_the_next_start_not_for_its_end_plus_the_interval():
    """(ours) Under a stream of changes runs start ``min_interval`` apart: a run of 300 ms at
    0, a request during it (deferred to 1300, the run's end + min_interval), another at 1000,
    when the bucket holds a token again: that one runs at once, and the deferred time is moot."""
    s = Script(1000, 5000, 10000)

    async def slow() -> None:
        s.fn.calls += 1
        s.timers.advance(300)  # the run takes 300 ms
        if s.fn.calls == 1:
            s.runner.run()  # a change while it runs

    s.runner.fn = slow
    async with looping(s.runner):
        await s.run(1)  # abs=0..300ms
        await s.step(699, 1)  # abs=999ms: still too soon
        await s.run(1)
        await s.step(1, 1)  # abs=1000ms: a token, but no request since the refusal at 999
        await s.run(2)  # a request at 1000 runs at once (the rewrite would wait until 1300)
        await s.step(1300, 2)  # abs=2600 (the second ran 1000..1300): nothing pending


# ---- upstream's *_RealClock tests, on the event loop's clock ----------------------------------

async def wait_calls(fn: Receiver, expected: int, timeout: float = 1.0) -> None:
    """Upstream ``assertCalls``: the call count reaches ``expected`` (and not more) in time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while fn.calls < expected and loop.time() < deadline:
        await asyncio.sleep(0.001)
    assert fn.calls == expected


async def no_calls(fn: Receiver, wait: float = 0.01) -> None:
    """Upstream ``assertNoCalls``: nothing new during ``wait``."""
    before = fn.calls
    await asyncio.sleep(wait)
    assert fn.calls == before


async def test_bounded_frequency_runner_run_runs_again_after_min_interval_real_clock():
    fn = Receiver()
    runner = BoundedFrequencyRunner("test-runner", fn, 0.05, 0.08, 0.15)
    async with looping(runner):
        runner.run()
        await wait_calls(fn, 1)
        await asyncio.sleep(2 * 0.05)
        await no_calls(fn)
        runner.run()
        await wait_calls(fn, 2)


async def test_bounded_frequency_runner_run_does_not_run_before_min_interval_real_clock():
    fn = Receiver()
    runner = BoundedFrequencyRunner("test-runner", fn, 0.05, 0.08, 0.15)
    async with looping(runner):
        runner.run()
        await wait_calls(fn, 1)
        await asyncio.sleep(0.05 / 4)
        runner.run()
        await no_calls(fn)


async def test_bounded_frequency_runner_run_after_max_interval_real_clock():
    fn = Receiver()
    runner = BoundedFrequencyRunner("test-runner", fn, 0.01, 0.02, 0.05)
    async with looping(runner):
        await no_calls(fn)
        await asyncio.sleep(0.05)
        await wait_calls(fn, 1)


async def test_bounded_frequency_runner_retry_real_clock():
    fn = Receiver()
    runner = BoundedFrequencyRunner("test-runner-real-clock", fn, 0.01, 0.05, 10)
    async with looping(runner):
        fn.error = RuntimeError("sync error")
        runner.run()  # run once immediately and trigger a retry
        await wait_calls(fn, 1)
        await asyncio.sleep(0.05 / 4)  # before retryInterval
        await no_calls(fn, 0)
        await asyncio.sleep(0.05)  # past retryInterval
        await wait_calls(fn, 2)
        await asyncio.sleep(0.05)  # retryInterval after the second failure
        await wait_calls(fn, 3)
        await no_calls(fn, 0.05 / 8)
        await asyncio.sleep(0.05)
        await wait_calls(fn, 4)


# ---- ours ---------------------------------------------------------------------------------------

async def test_requests_coalesce():
    """(ours) Any number of requests before a run starts make one run; a request during the
    run makes one more, after min_interval."""
    s = Script(1000, 5000, 10000)
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow() -> None:
        s.fn.calls += 1
        started.set()
        await release.wait()

    s.runner.fn = slow
    async with looping(s.runner):
        for _ in range(5):
            s.runner.run()
        await started.wait()
        s.runner.run()
        s.runner.run()
        release.set()
        await s.expect(1)
        await s.step(999, 1)
        await s.step(1, 2)
        await s.step(1000, 2)


async def test_request_before_loop_is_kept():
    """(ours; upstream drops it) The first sync must not wait for max_interval."""
    s = Script(1000, 5000, 10000)
    s.runner.run()
    async with looping(s.runner):
        await s.expect(1)


async def test_failure_is_logged_not_raised(caplog):
    """(ours)"""
    s = Script(1000, 5000, 10000)
    s.fn.error = RuntimeError("kernel said no")
    with caplog.at_level(logging.ERROR, logger="kubesvc.proxy"):
        async with looping(s.runner) as task:
            await s.run(1)
            assert not task.done()
    assert s.runner.failures == 1
    assert "kernel said no" in caplog.text


async def test_cancel_stops_timers():
    """(ours) Cancelling the loop leaves no timer armed; a new loop may start afterwards."""
    s = Script(1000, 5000, 10000)
    s.fn.error = RuntimeError("sync error")
    async with looping(s.runner):
        await s.run(1)
    assert s.timers.armed == 0
    s.fn.error = None
    async with looping(s.runner):
        await s.run(2)


async def test_one_loop_at_a_time():
    """(ours)"""
    s = Script(1000, 5000, 10000)
    async with looping(s.runner):
        with pytest.raises(RuntimeError):
            await s.runner.loop()


def test_max_interval_below_min_interval_is_refused():
    """(ours; upstream panics)"""
    with pytest.raises(ValueError):
        BoundedFrequencyRunner("test-runner", Receiver(), 10, 1, 5)
