"""client-go's token bucket: ``burst`` at once, then ``qps`` per second, waiters in order."""

import pytest

from kubesvc.client.flowcontrol import TokenBucketRateLimiter, rate_limiter


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_burst_then_qps():
    clock = Clock()
    limiter = TokenBucketRateLimiter(5.0, 10, clock=clock)
    assert [limiter.reserve() for _ in range(10)] == [0.0] * 10
    assert [round(limiter.reserve(), 6) for _ in range(3)] == [0.2, 0.4, 0.6]  # queued behind each other
    clock.now += 0.6  # the three reserved tokens are due; the bucket is empty again
    assert round(limiter.reserve(), 6) == 0.2


def test_refill_stops_at_burst():
    clock = Clock()
    limiter = TokenBucketRateLimiter(5.0, 2, clock=clock)
    clock.now += 3600
    assert [limiter.reserve() for _ in range(2)] == [0.0, 0.0]
    assert round(limiter.reserve(), 6) == 0.2


def test_try_accept_takes_a_token_only_when_one_is_there():
    """client-go's ``TryAccept``: burst at once, then a token per 1/qps; a refusal takes nothing
    (no debt), and fractions that add up to a whole token make one (kube-proxy's sync runner:
    1/s, burst 2, requests 1 ms and 999 ms apart)."""
    clock = Clock()
    limiter = TokenBucketRateLimiter(1.0, 2, clock=clock)
    assert [limiter.try_accept(), limiter.try_accept(), limiter.try_accept()] == [True, True, False]
    clock.now += 0.5
    assert limiter.try_accept() is False
    clock.now += 0.5
    assert limiter.try_accept() is True  # one second after the bucket ran dry, not 1.5 s
    clock.now += 0.001
    assert limiter.try_accept() is False
    clock.now += 0.999
    assert limiter.try_accept() is True


async def test_wait_sleeps_for_the_reserved_delay():
    clock, slept = Clock(), []

    async def sleep(seconds):
        slept.append(round(seconds, 6))

    limiter = TokenBucketRateLimiter(2.0, 1, clock=clock, sleep=sleep)
    await limiter.wait()
    await limiter.wait()
    assert slept == [0.5]


@pytest.mark.parametrize(("qps", "burst", "limited"), [(5.0, 10, True), (0.0, 10, False), (-1.0, 0, False)],
                         ids=["defaults", "zero-qps", "negative-qps"])
def test_rate_limiter_only_for_positive_qps(qps, burst, limited):
    assert (rate_limiter(qps, burst) is not None) == limited


def test_qps_without_burst_is_refused():
    with pytest.raises(ValueError, match="burst must be at least 1"):
        TokenBucketRateLimiter(5.0, 0)
