"""In-memory Backend: base.py's semantics with nothing underneath, for unit tests.

The store is one history, the sequence of committed events (one per revision), kept in three
views:

* ``_versions``: for each key, every retained (revision, value or tombstone) in revision order.
  A read at revision N is a bisect.
* ``_keys``: every key that has retained versions, sorted. A prefix list is a bisect and a scan.
* ``_log``: every retained event. Revisions have no gaps, so revision r sits at
  ``_log[r - compacted - 1]``; watch catch-up reads from there.

Compacting to C (etcd's rule) drops the events at or below C. For each key it keeps the newest
version at or below C, unless that version is a tombstone, together with everything after C.
A read at C therefore still sees every key as it was at C.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass, field
from itertools import islice
from typing import Iterator, Sequence

from kubesvc.storage.base import (
    Event,
    KeyValue,
    ListResult,
    Op,
    TxnResult,
    apply_op,
    resolve_revision,
)
from kubesvc.storage.embedded import EmbeddedBackend
from kubesvc.storage.watch import WatchHub


@dataclass(slots=True)
class _Versions:
    """One key's retained history; a None value is a tombstone (deleted at that revision)."""

    revisions: list[int] = field(default_factory=list)
    values: list[KeyValue | None] = field(default_factory=list)

    def at(self, revision: int) -> KeyValue | None:
        newer = bisect_right(self.revisions, revision)
        return self.values[newer - 1] if newer else None

    def latest(self) -> KeyValue | None:
        return self.values[-1] if self.values else None

    def record(self, event: Event) -> None:
        self.revisions.append(event.kv.mod_revision)
        self.values.append(event.kv if event.type == "PUT" else None)

    def compact(self, revision: int) -> None:
        newer = bisect_right(self.revisions, revision)
        keep_from = newer - 1 if newer and self.values[newer - 1] is not None else newer
        del self.revisions[:keep_from], self.values[:keep_from]


class MemoryBackend(EmbeddedBackend):
    def __init__(self, *, watch_ring_size: int = 10_000, watch_queue_size: int = 10_000):
        self._lock = threading.Lock()
        self._revision = 0
        self._compacted = 0
        self._versions: dict[str, _Versions] = {}
        self._keys: list[str] = []
        self._log: list[Event] = []
        self._hub = WatchHub(0, ring_size=watch_ring_size, queue_size=watch_queue_size)

    def sync_get(self, key: str, revision: int = 0) -> KeyValue | None:
        with self._lock:
            at = resolve_revision(revision, self._revision, self._compacted)
            versions = self._versions.get(key)
            return versions.at(at) if versions else None

    def sync_list(self, prefix: str, *, revision: int = 0, limit: int = 0, start_key: str = "") -> ListResult:
        with self._lock:
            at = resolve_revision(revision, self._revision, self._compacted)
            matches = self._live(prefix, max(prefix, start_key), at)
            kvs = list(islice(matches, limit) if limit else matches)
            remaining = sum(1 for _ in matches)
        return ListResult(kvs, at, more=remaining > 0, remaining=remaining)

    def sync_count(self, prefix: str) -> int:
        with self._lock:
            return sum(1 for _ in self._live(prefix, prefix, self._revision))

    def sync_txn(self, ops: Sequence[Op]) -> TxnResult:
        with self._lock:
            events = self._plan(ops)
            for event in events:
                self._record(event)
            self._hub.publish(events)
        return TxnResult([event.kv for event in events])

    def _forget(self, revision: int) -> None:
        dropped = self._log[: revision - self._compacted]
        del self._log[: revision - self._compacted]
        for key in {event.kv.key for event in dropped}:
            self._compact_key(key, revision)

    def sync_close(self) -> None:
        self._hub.close()

    def _live(self, prefix: str, start_key: str, revision: int) -> Iterator[KeyValue]:
        """Keys under ``prefix`` from ``start_key`` on, in order, as of ``revision``."""
        for index in range(bisect_left(self._keys, start_key), len(self._keys)):
            key = self._keys[index]
            if not key.startswith(prefix):
                return
            kv = self._versions[key].at(revision)
            if kv is not None:
                yield kv

    def _plan(self, ops: Sequence[Op]) -> list[Event]:
        """The events ``ops`` would commit, each seeing the ones before it; raises on the first
        failing op, before anything is recorded."""
        staged: dict[str, KeyValue | None] = {}
        events: list[Event] = []
        for op in ops:
            current = staged[op.key] if op.key in staged else self._latest(op.key)
            event = apply_op(op, current, self._revision + len(events) + 1)
            staged[op.key] = event.kv if event.type == "PUT" else None
            events.append(event)
        return events

    def _latest(self, key: str) -> KeyValue | None:
        versions = self._versions.get(key)
        return versions.latest() if versions else None

    def _record(self, event: Event) -> None:
        key = event.kv.key
        if key not in self._versions:
            self._versions[key] = _Versions()
            insort(self._keys, key)
        self._versions[key].record(event)
        self._log.append(event)
        self._revision = event.kv.mod_revision

    def _events_after(self, prefix: str, revision: int) -> list[Event]:
        return [event for event in self._log[revision - self._compacted :] if event.kv.key.startswith(prefix)]

    def _compact_key(self, key: str, revision: int) -> None:
        versions = self._versions[key]
        versions.compact(revision)
        if not versions.values:
            del self._versions[key]
            del self._keys[bisect_left(self._keys, key)]
