"""Injectable time. Production code asks a Clock, tests hand in a FakeClock they advance.

Kubernetes timestamps are RFC 3339 in UTC with second precision (``metav1.Time``) or
microseconds (``metav1.MicroTime``, used by Leases and events.k8s.io Events): written and read
by :mod:`kubesvc.util.golang` (``rfc3339``, ``rfc3339_micro``, ``parse_rfc3339``).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...


class RealClock:
    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    def __init__(self, start: datetime | None = None):
        self._now = start or datetime(2026, 1, 1, tzinfo=timezone.utc)
        self._mono = 1000.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        self._mono += seconds

