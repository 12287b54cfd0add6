"""Expectations (pkg/controller/controller_utils.go ``ControllerExpectations``,
``UIDTrackingControllerExpectations``): what a controller wrote and has not yet seen come
back through its informer.

A controller that creates 3 Pods and syncs again before the informer delivered them would see
too few and create 3 more. So before writing it records what it expects (``expect_creations``,
``expect_deletions``), the informer's handlers lower the record as the events arrive
(``creation_observed``, ``deletion_observed``), and a sync only creates or deletes once the
record is satisfied: everything seen, or the record older than 5 minutes
(``ExpectationsTimeout``: a lost event must not stall the controller forever), or no record.
A failed write lowers the record at once (its event will never come). Deletions are tracked by
object key, so one Pod's delete is counted once however many events say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubesvc.util.clock import Clock, RealClock

EXPECTATIONS_TIMEOUT = 300.0  # seconds


@dataclass
class _Record:
    add: int = 0
    deleting: set[str] = field(default_factory=set)
    since: float = 0.0


class Expectations:
    def __init__(self, clock: Clock | None = None):
        self._clock = clock or RealClock()
        self._records: dict[str, _Record] = {}

    def satisfied(self, key: str) -> bool:
        record = self._records.get(key)
        if record is None:
            return True
        if record.add <= 0 and not record.deleting:
            return True
        return self._clock.monotonic() - record.since > EXPECTATIONS_TIMEOUT

    def expect(self, key: str, creations: int = 0, deletions: list[str] | tuple[str, ...] = ()) -> None:
        """``SetExpectations``: replaces the record (a sync only writes once the last is met)."""
        self._records[key] = _Record(add=creations, deleting=set(deletions), since=self._clock.monotonic())

    def expect_creations(self, key: str, count: int) -> None:
        self.expect(key, creations=count)

    def expect_deletions(self, key: str, object_keys: list[str]) -> None:
        self.expect(key, deletions=object_keys)

    def creation_observed(self, key: str) -> None:
        record = self._records.get(key)
        if record is not None:
            record.add -= 1

    def deletion_observed(self, key: str, object_key: str) -> None:
        record = self._records.get(key)
        if record is not None:
            record.deleting.discard(object_key)

    def delete(self, key: str) -> None:
        self._records.pop(key, None)
