"""Choosing an endpoint for a new connection: round-robin with optional ClientIP affinity
(upstream ``pkg/proxy/userspace/roundrobin.go``, ``LoadBalancerRR``), with no I/O and the
clock injected.

* Per key (a Service port's portal) the endpoints are **shuffled** whenever the set changes
  and the index goes back to 0 (so every proxy in a cluster does not start on the same
  endpoint); ``next_endpoint`` returns ``endpoints[index]`` and advances the index.
* ClientIP affinity: the client's last endpoint is reused while
  ``int(now - last_used) < ttl`` (upstream compares whole seconds), refreshing ``last_used``;
  otherwise the next round-robin endpoint is taken and recorded. A retry after a failed
  connect (``reset``) ignores the recorded endpoint. Sessions pointing at removed endpoints
  are dropped on update; expired ones by ``cleanup_stale_sessions`` (every sync).
* A retry also passes the endpoints that already failed for this connection (``exclude``);
  round robin skips them while others are left. Upstream simply took the next index, which
  concurrent connections could bring back to the failed endpoint.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kubesvc.proxy.types import DEFAULT_STICKY_MAX_AGE_SECONDS

K = TypeVar("K", bound=Hashable)
E = TypeVar("E", bound=Hashable)


class NoEndpoints(LookupError):
    """``missing service entry`` / ``missing endpoints`` upstream."""


@dataclass
class _Session(Generic[E]):
    endpoint: E
    last_used: float


@dataclass
class _Entry(Generic[E]):
    endpoints: list[E]
    affinity: bool
    ttl: int
    index: int = 0
    sessions: dict[str, _Session[E]] = field(default_factory=dict)


class LoadBalancerRR(Generic[K, E]):
    def __init__(self, clock: Callable[[], float] = time.monotonic, shuffle: Callable[[list], None] = random.shuffle):
        self.clock = clock
        self.shuffle = shuffle
        self._entries: dict[K, _Entry[E]] = {}

    def update(self, key: K, endpoints: Iterable[E], *, affinity: bool = False, ttl_seconds: int = 0) -> None:
        """Set ``key``'s endpoints and affinity. An unchanged set keeps the order, the index and
        the sessions; a changed one is reshuffled and loses sessions to removed endpoints."""
        wanted = list(dict.fromkeys(endpoints))
        ttl = ttl_seconds or DEFAULT_STICKY_MAX_AGE_SECONDS
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(self._shuffled(wanted), affinity, ttl)
            return
        if not affinity or entry.ttl != ttl:
            entry.sessions.clear()
        entry.affinity, entry.ttl = affinity, ttl
        if set(wanted) != set(entry.endpoints):
            entry.endpoints = self._shuffled(wanted)
            entry.index = 0
            alive = set(wanted)
            entry.sessions = {ip: s for ip, s in entry.sessions.items() if s.endpoint in alive}

    def _shuffled(self, endpoints: list[E]) -> list[E]:
        endpoints = list(endpoints)
        self.shuffle(endpoints)
        return endpoints

    def delete(self, key: K) -> None:
        self._entries.pop(key, None)

    def keys(self) -> list[K]:
        return list(self._entries)

    def endpoints(self, key: K) -> Sequence[E]:
        entry = self._entries.get(key)
        return tuple(entry.endpoints) if entry else ()

    def describe(self, key: K) -> tuple[tuple[E, ...], int, bool, int, dict[str, tuple[E, float]]] | None:
        """(endpoints in round-robin order, index of the next, affinity, TTL, {client IP: (endpoint,
        last used)}) of ``key``, None if unknown: what ``kubesvc trace`` is shown of it."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        return (tuple(entry.endpoints), entry.index, entry.affinity, entry.ttl,
                {ip: (s.endpoint, s.last_used) for ip, s in entry.sessions.items()})

    def next_endpoint(self, key: K, client_ip: str, *, reset: bool = False, exclude: frozenset | set = frozenset()) -> E:
        """The endpoint for a new connection from ``client_ip``; ``NoEndpoints`` if none."""
        entry = self._entries.get(key)
        if entry is None or not entry.endpoints:
            raise NoEndpoints(f"missing endpoints for {key}")
        affinity = entry.affinity
        now = self.clock() if affinity else 0.0  # (a clock read per connection only where it is used)
        if affinity and not reset:
            session = entry.sessions.get(client_ip)
            if session is not None and int(now - session.last_used) < entry.ttl:
                session.last_used = now
                return session.endpoint
        endpoints = entry.endpoints
        n = len(endpoints)
        chosen = endpoints[entry.index % n]
        if exclude and chosen in exclude:
            for step in range(1, n):
                candidate = endpoints[(entry.index + step) % n]
                if candidate not in exclude:
                    chosen = candidate
                    entry.index += step
                    break
        entry.index = (entry.index + 1) % n
        if affinity:
            entry.sessions[client_ip] = _Session(chosen, now)
        return chosen

    def cleanup_stale_sessions(self) -> int:
        """Forget sessions idle for their TTL or longer (upstream ``CleanupStaleStickySessions``);
        how many were dropped."""
        now = self.clock()
        dropped = 0
        for entry in self._entries.values():
            stale = [ip for ip, s in entry.sessions.items() if int(now - s.last_used) >= entry.ttl]
            for ip in stale:
                del entry.sessions[ip]
            dropped += len(stale)
        return dropped
