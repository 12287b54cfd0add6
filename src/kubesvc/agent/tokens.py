"""ServiceAccount tokens for projected volumes: the kubelet's token manager
(``pkg/kubelet/token/token_manager.go``).

A ``serviceAccountToken`` projection is a TokenRequest (``POST
serviceaccounts/<sa>/token``) bound to the Pod. The manager caches each answer under its
request (ServiceAccount, namespace, audiences, expirationSeconds, bound object) and asks again
when ``requires_refresh``:

* the token is older than 80% of its lifetime: ``now > exp - 20% of expirationSeconds -
  jitter``; or
* it is older than 24 hours: ``now > iat + 24h - jitter``, where ``iat = exp -
  expirationSeconds`` (a token made with the 1-year extension still changes daily);

with a jitter uniform in 0-10 s so that many Pods do not refresh together. ``exp`` is the
answer's ``status.expirationTimestamp`` and ``expirationSeconds`` its ``spec`` (the apiserver
may have shortened it). A refresh that fails keeps the cached token while it is still valid;
once expired the failure is the volume's (``token <key> expired and refresh failed: ...``); a
first fetch that fails is ``failed to fetch token: ...``. Expired entries are dropped at most
every minute (checked on each request) and a Pod's entries when it goes
(``DeleteServiceAccountToken``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from kubesvc.util.clock import Clock
from kubesvc.util.golang import parse_rfc3339

log = logging.getLogger("kubesvc.agent")

MAX_TTL = timedelta(hours=24)
MAX_JITTER_SECONDS = 10.0
GC_PERIOD_SECONDS = 60.0


class TokenError(Exception):
    pass


@dataclass(frozen=True)
class IssuedToken:
    token: str
    expiration: datetime  # status.expirationTimestamp
    expiration_seconds: int  # spec.expirationSeconds of the answer
    bound_pod_uid: str


def requires_refresh(now: datetime, token: IssuedToken, jitter_seconds: float) -> bool:
    """Upstream ``requiresRefresh`` (see the module docstring)."""
    jitter = timedelta(seconds=int(jitter_seconds))  # Go truncates the jitter to whole seconds
    issued_at = token.expiration - timedelta(seconds=token.expiration_seconds)
    if now > issued_at + MAX_TTL - jitter:
        return True
    return now > token.expiration - timedelta(seconds=token.expiration_seconds * 20 // 100) - jitter


def cache_key(namespace: str, name: str, request: Mapping) -> str:
    """Upstream ``keyFunc``: nothing secret, safe to log."""
    spec = request.get("spec") or {}
    ref = spec.get("boundObjectRef") or {}
    return f'"{name}"/"{namespace}"/{list(spec.get("audiences") or [])}/{spec.get("expirationSeconds") or 0}/' \
           f'{ref.get("kind", "")}:{ref.get("name", "")}:{ref.get("uid", "")}'


def issued_token(answer: Mapping, request: Mapping) -> IssuedToken:
    """The parts of a TokenRequest answer the manager keeps."""
    status = answer.get("status") or {}
    spec = answer.get("spec") or request.get("spec") or {}
    token, expiry = status.get("token"), status.get("expirationTimestamp")
    if not isinstance(token, str) or not token or not isinstance(expiry, str):
        raise TokenError("the TokenRequest answer holds no token")
    ref = (request.get("spec") or {}).get("boundObjectRef") or {}
    return IssuedToken(token, parse_rfc3339(expiry), int(spec.get("expirationSeconds") or 0), ref.get("uid", ""))


TokenRequester = Callable[[str, str, dict], Awaitable[Mapping]]


class TokenManager:
    """One per agent, shared by every Pod's volumes. ``request(namespace, sa, body)`` posts a
    TokenRequest and returns the answer (raising on failure)."""

    def __init__(self, request: TokenRequester, clock: Clock, jitter: Callable[[], float] | None = None):
        self._request = request
        self._clock = clock
        self._jitter = jitter or (lambda: random.uniform(0.0, MAX_JITTER_SECONDS))
        self._cache: dict[str, IssuedToken] = {}
        self._collected_at = clock.monotonic()

    async def token(self, namespace: str, service_account: str, request: dict) -> str:
        if self._clock.monotonic() - self._collected_at >= GC_PERIOD_SECONDS:
            self.collect_garbage()
        key = cache_key(namespace, service_account, request)
        cached = self._cache.get(key)
        now = self._clock.now()
        if cached is not None and not requires_refresh(now, cached, self._jitter()):
            return cached.token
        try:
            fresh = issued_token(await self._request(namespace, service_account, request), request)
        except Exception as err:  # the client's errors and a malformed answer alike
            detail = getattr(err, "message", None) or str(err)  # an API error as client-go prints it
            if cached is None:
                raise TokenError(f"failed to fetch token: {detail}") from None
            if now > cached.expiration:
                raise TokenError(f"token {key} expired and refresh failed: {detail}") from None
            log.error("couldn't update token %s: %s", key, detail)
            return cached.token
        self._cache[key] = fresh
        return fresh.token

    def forget_pod(self, uid: str) -> None:
        for key in [k for k, t in self._cache.items() if t.bound_pod_uid == uid]:
            del self._cache[key]

    def collect_garbage(self) -> None:
        self._collected_at = self._clock.monotonic()
        now = self._clock.now()
        for key in [k for k, t in self._cache.items() if now > t.expiration]:
            del self._cache[key]
