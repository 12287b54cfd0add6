"""What the in-process backends (memory, SQLite) share: one write lock, a revision counter,
a compact revision, and a WatchHub fed under that lock (see storage/watch.py for why the lock).

Subclasses provide ``txn`` (the write primitive), ``_events_after`` (history for catch-up) and
``_forget(revision)`` (drop history up to a revision); the single-op writes, watch and the
compaction preconditions are written once here.
"""

from __future__ import annotations

import threading
from typing import Sequence

from kubesvc.storage.base import Create, Delete, FutureRevision, KeyValue, Op, TxnResult, Update, resolve_revision
from kubesvc.storage.watch import QueuedWatch, WatchHub


class EmbeddedBackend:
    _lock: threading.Lock
    _revision: int
    _compacted: int
    _hub: WatchHub

    def txn(self, ops: Sequence[Op]) -> TxnResult:
        raise NotImplementedError

    def _events_after(self, prefix: str, after_revision: int) -> list:
        raise NotImplementedError

    def _forget(self, revision: int) -> None:
        """Drop history at and below ``revision``; called under the lock with a valid revision."""
        raise NotImplementedError

    def create(self, key: str, value: bytes) -> KeyValue:
        return self.txn([Create(key, value)]).results[0]

    def update(self, key: str, value: bytes, expected_revision: int = 0) -> KeyValue:
        return self.txn([Update(key, value, expected_revision)]).results[0]

    def delete(self, key: str, expected_revision: int = 0) -> KeyValue:
        return self.txn([Delete(key, expected_revision)]).results[0]

    def watch(self, prefix: str, after_revision: int) -> QueuedWatch:
        with self._lock:
            after = resolve_revision(after_revision, self._revision, self._compacted)
            return self._hub.subscribe(prefix, after, self._events_after)

    def compact(self, revision: int) -> None:
        """Compacting at or below the compact revision is a no-op."""
        with self._lock:
            if revision <= self._compacted:
                return
            if revision > self._revision:
                raise FutureRevision(revision, self._revision)
            self._forget(revision)
            self._compacted = revision
