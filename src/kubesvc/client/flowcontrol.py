"""Client-side rate limiting, as client-go's ``util/flowcontrol`` token bucket.

A client configured with ``qps`` and ``burst`` (kube-proxy's ``clientConnection.qps``/``burst``,
5 and 10 by default; ``--kube-api-qps``/``--kube-api-burst``) may send ``burst`` requests at
once, then ``qps`` per second: the bucket holds up to ``burst`` tokens, refills at ``qps`` per
second, and every request takes one, waiting when none is left. Waiters queue in order: each
reserves the next token (the count goes negative) and sleeps until it is due, as
``rate.Limiter.Wait`` does. A ``qps`` of zero or less means no limit (client-go's
``QPS < 0``; a zero there is defaulted before it gets here).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class TokenBucketRateLimiter:
    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        if qps > 0 and burst < 1:
            raise ValueError(f"burst must be at least 1 with qps {qps:g}, got {burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._last = clock()

    def reserve(self) -> float:
        """Take the next token; the seconds to wait before it is due (0: now)."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def try_accept(self) -> bool:
        """Take a token if there is one now (client-go's ``TryAccept``); never waits, and a
        refusal takes nothing. (A hair of slack: token fractions summed in floating point,
        0.001 + 0.999 s at 1/s, still make a whole token.)"""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        if self._tokens < 1.0 - 1e-9:
            return False
        self._tokens -= 1
        return True

    async def wait(self) -> None:
        delay = self.reserve()
        if delay > 0:
            await self._sleep(delay)


def rate_limiter(qps: float, burst: int) -> TokenBucketRateLimiter | None:
    """The limiter for ``qps``/``burst``, or None (no limit) when ``qps`` is not positive."""
    return TokenBucketRateLimiter(qps, burst) if qps > 0 else None
