"""The kubelet's token manager (agent/tokens.py): when a projected token is asked for again, and
what a failed refresh does."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from kubesvc.agent.tokens import IssuedToken, TokenError, TokenManager, requires_refresh
from kubesvc.client.rest import ApiError
from kubesvc.util.clock import FakeClock
from kubesvc.util.golang import rfc3339

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
HOUR = IssuedToken("t", T0 + timedelta(seconds=3600), 3600, "uid")  # issued at T0, lives 1 h
EXTENDED = IssuedToken("t", T0 + timedelta(days=365), 365 * 86400, "uid")  # 1-year token issued at T0


@pytest.mark.parametrize("token, age, jitter, expected", [
    (HOUR, 2879, 0, False),          # 80% of 3600 s is 2880 s
    (HOUR, 2881, 0, True),
    (HOUR, 2872, 9.9, True),         # the jitter (truncated to whole seconds) brings it forward
    (HOUR, 2870, 9.9, False),
    (EXTENDED, 86399, 0, False),     # never kept past 24 h
    (EXTENDED, 86401, 0, True),
], ids=["before-80pct", "after-80pct", "jitter-earlier", "jitter-not-enough", "before-24h", "after-24h"])
def test_requires_refresh(token, age, jitter, expected):
    assert requires_refresh(T0 + timedelta(seconds=age), token, jitter) is expected


class FakeTokenAPI:
    def __init__(self, clock: FakeClock):
        self.clock = clock
        self.calls = 0
        self.fail = False

    async def __call__(self, namespace: str, name: str, request: dict) -> dict:
        self.calls += 1
        if self.fail:
            raise ApiError(503, "ServiceUnavailable", "apiserver down")
        seconds = request["spec"]["expirationSeconds"]
        return {"spec": request["spec"], "status": {"token": f"token-{self.calls}",
                                                     "expirationTimestamp": rfc3339(self.clock.now() + timedelta(seconds=seconds))}}


REQUEST = {"spec": {"expirationSeconds": 3600, "boundObjectRef": {"kind": "Pod", "name": "p", "uid": "pod-uid"}}}


async def test_manager_caches_then_refreshes_at_80_percent():
    clock = FakeClock(T0)
    api = FakeTokenAPI(clock)
    manager = TokenManager(api, clock, jitter=lambda: 0.0)
    assert await manager.token("ns", "sa", REQUEST) == "token-1"
    clock.advance(2800)
    assert await manager.token("ns", "sa", REQUEST) == "token-1"
    clock.advance(100)
    assert await manager.token("ns", "sa", REQUEST) == "token-2"
    assert api.calls == 2


async def test_failed_refresh_keeps_a_valid_token_and_fails_an_expired_one():
    clock = FakeClock(T0)
    api = FakeTokenAPI(clock)
    manager = TokenManager(api, clock, jitter=lambda: 0.0)
    await manager.token("ns", "sa", REQUEST)
    api.fail = True
    clock.advance(3590)
    assert await manager.token("ns", "sa", REQUEST) == "token-1"
    clock.advance(20)  # expired, and the minutely garbage collection has not dropped it yet
    with pytest.raises(TokenError, match="expired and refresh failed: apiserver down"):
        await manager.token("ns", "sa", REQUEST)
    clock.advance(60)  # now it has: the failure is a first fetch's again
    with pytest.raises(TokenError, match="^failed to fetch token: apiserver down$"):
        await manager.token("ns", "sa", REQUEST)


async def test_first_fetch_failure_and_forgetting_a_pod():
    clock = FakeClock(T0)
    api = FakeTokenAPI(clock)
    manager = TokenManager(api, clock, jitter=lambda: 0.0)
    api.fail = True
    with pytest.raises(TokenError, match="^failed to fetch token: apiserver down$"):
        await manager.token("ns", "sa", REQUEST)
    api.fail = False
    await manager.token("ns", "sa", REQUEST)
    manager.forget_pod("pod-uid")
    assert await manager.token("ns", "sa", REQUEST) == "token-3"  # asked again: the cache forgot it
