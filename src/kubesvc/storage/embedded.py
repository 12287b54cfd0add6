"""What the in-process backends (memory, SQLite) share: one write lock, a revision counter,
a compact revision, and a WatchHub fed under that lock (see storage/watch.py for why the lock).

Subclasses provide the synchronous primitives ``sync_get``, ``sync_list``, ``sync_count``,
``sync_txn`` (the write primitive), ``sync_close``, ``_events_after`` (history for catch-up)
and ``_forget(revision)`` (drop history up to a revision); the single-op writes, watch and the
compaction preconditions are written once here.

The Backend protocol's coroutines (base.py) run those primitives directly: they answer in
microseconds, so a thread hop would cost more than it saves. The ``sync_*`` methods are
thread-safe and stay public for what runs outside an event loop (tests racing threads, tools).
"""

from __future__ import annotations

import threading
from typing import Sequence

from kubesvc.storage.base import Create, Delete, FutureRevision, KeyValue, ListResult, Op, TxnResult, Update, resolve_revision
from kubesvc.storage.watch import QueuedWatch, WatchHub


class EmbeddedBackend:
    _lock: threading.Lock
    _revision: int
    _compacted: int
    _hub: WatchHub

    # ---- the synchronous primitives (subclasses) -------------------------------------------------
    def sync_get(self, key: str, revision: int = 0) -> KeyValue | None:
        raise NotImplementedError

    def sync_list(self, prefix: str, *, revision: int = 0, limit: int = 0, start_key: str = "") -> ListResult:
        raise NotImplementedError

    def sync_count(self, prefix: str) -> int:
        raise NotImplementedError

    def sync_txn(self, ops: Sequence[Op]) -> TxnResult:
        raise NotImplementedError

    def sync_close(self) -> None:
        raise NotImplementedError

    def _events_after(self, prefix: str, after_revision: int) -> list:
        raise NotImplementedError

    def _forget(self, revision: int) -> None:
        """Drop history at and below ``revision``; called under the lock with a valid revision."""
        raise NotImplementedError

    # ---- written once here, synchronous --------------------------------------------------------
    def sync_create(self, key: str, value: bytes) -> KeyValue:
        return self.sync_txn([Create(key, value)]).results[0]

    def sync_update(self, key: str, value: bytes, expected_revision: int = 0) -> KeyValue:
        return self.sync_txn([Update(key, value, expected_revision)]).results[0]

    def sync_delete(self, key: str, expected_revision: int = 0) -> KeyValue:
        return self.sync_txn([Delete(key, expected_revision)]).results[0]

    def sync_watch(self, prefix: str, after_revision: int) -> QueuedWatch:
        with self._lock:
            after = resolve_revision(after_revision, self._revision, self._compacted)
            return self._hub.subscribe(prefix, after, self._events_after)

    def _compaction_lock(self) -> threading.Lock:
        """The lock a compaction holds: the one every write takes (SQLite: its write connection's)."""
        return self._lock

    def sync_compact(self, revision: int) -> None:
        """Compacting at or below the compact revision is a no-op."""
        with self._compaction_lock():
            if revision <= self._compacted:
                return
            if revision > self._revision:
                raise FutureRevision(revision, self._revision)
            self._forget(revision)
            self._compacted = revision

    def sync_current_revision(self) -> int:
        return self._revision

    def compact_revision(self) -> int:
        return self._compacted

    # ---- the Backend protocol: the primitives, run directly ---------------------------------
    async def current_revision(self) -> int:
        return self._revision

    async def get(self, key: str, revision: int = 0) -> KeyValue | None:
        return self.sync_get(key, revision)

    async def list(self, prefix: str, *, revision: int = 0, limit: int = 0, start_key: str = "") -> ListResult:
        return self.sync_list(prefix, revision=revision, limit=limit, start_key=start_key)

    async def count(self, prefix: str) -> int:
        return self.sync_count(prefix)

    async def create(self, key: str, value: bytes) -> KeyValue:
        return self.sync_create(key, value)

    async def update(self, key: str, value: bytes, expected_revision: int = 0) -> KeyValue:
        return self.sync_update(key, value, expected_revision)

    async def delete(self, key: str, expected_revision: int = 0) -> KeyValue:
        return self.sync_delete(key, expected_revision)

    async def txn(self, ops: Sequence[Op]) -> TxnResult:
        return self.sync_txn(ops)

    async def watch(self, prefix: str, after_revision: int) -> QueuedWatch:
        return self.sync_watch(prefix, after_revision)

    async def compact(self, revision: int) -> None:
        self.sync_compact(revision)

    async def close(self) -> None:
        self.sync_close()
