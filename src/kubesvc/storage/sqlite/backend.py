"""SQLite Backend: kine's append-only log table, owned by one process.

kine (k3s-io/kine) serves the etcd API from SQL by storing the whole history as a log. Every
write INSERTs one row, and the row's ``id`` is the revision:

    id               the revision of this write (etcd mod_revision, k8s resourceVersion)
    name             the key, e.g. /registry/services/specs/default/web
    created          1 if this row creates the key (then create_revision = id)
    deleted          1 if this row is a tombstone; its value is the value that was deleted
    create_revision  id of the row that created the key
    prev_revision    id of the key's previous row (its tombstone on re-create, 0 on first create)
    value            the new value
    old_value        the previous value (the watch event's prev_kv)

A key's state at revision N is its newest row with ``id <= N``. A key's rows form a chain: each
row's ``prev_revision`` is the id of the row that was the key's newest when it was written, so
within a name ``prev_revision`` rises with ``id`` (and compaction, which only deletes rows,
keeps that order). The newest row is therefore ``ORDER BY prev_revision DESC`` on the UNIQUE
(name, prev_revision) index, walked down from the key's last entry to the first with
``id <= N`` (every index entry ends with the rowid, and ``id`` is the rowid: no table read to
test it). kine's schema also has a (name) index, a (name, id) index, a (prev_revision) index
for its own compaction query and an (id, deleted) index; here the (name, prev_revision) index
serves every name lookup, list and count, nothing reads prev_revision alone, and what needs
``deleted`` (a count drops the names whose newest row is a tombstone; compaction deletes
tombstones) asks only about tombstones, which a partial index of their ids answers
(``kine_tombstone_index``, ``WHERE deleted != 0``: a create or an update never touches it).
Each secondary index a write touches costs it an insert into that B-tree and a page of the
commit's WAL write (a Service create, with its IPAddress record, wrote 9.4 pages with the
(name) and (id, deleted) indexes, 5.7 without), so a database created by an older version
loses those indexes when it is opened (and builds the partial one once). A list takes
``MAX(id) ... GROUP BY name`` over a name range and drops tombstones. The UNIQUE
(name, prev_revision) index is also the optimistic-concurrency guard: two writers that read the
same row cannot both append after it. Here every write checks its condition inside
``BEGIN IMMEDIATE`` on the single connection, so the guard is a second line of defence, and a
violation is reported as the conflict it is (KeyExists / RevisionMismatch).

The differences from kine are consequences of one process owning the file. Ids are assigned
by this process, in order and without gaps, so there are no gap-filler rows and no poll loop:
commits feed the in-memory watch ring directly (see watch.py). ``name`` is declared TEXT, not
kine's INTEGER, so a key like "10" is not turned into a number. The compact revision lives in a
``kine_meta`` row rather than in a ``compact_rev_key`` log row, which would take up a revision.
AUTOINCREMENT keeps the last id in ``sqlite_sequence`` even after compaction deletes that row,
so the current revision survives a restart.

The store holds every Secret and token of the cluster, so it is private to the server's user,
as k3s keeps its datastore: ``state.db`` is 0600 (created so before SQLite opens it, so it is
never world-readable), and SQLite creates ``-wal`` and ``-shm`` with the database's own mode;
files left more open by an older version are narrowed at start. (The apiserver keeps its data
directory 0700.)

Compacting to C deletes, in one transaction, each row superseded by a row in
(previous C, C] and each tombstone in that range; this is kine's compaction, made incremental.

**Durability.** ``journal_mode=WAL`` with ``synchronous=NORMAL``: a commit appends the
transaction's pages to ``state.db-wal`` with write(2) before COMMIT returns, and only then is
the write acknowledged (and published to watchers). Written pages belong to the kernel from
then on, so ``kill -9`` of the apiserver loses no acknowledged write: the next open finds the
frames in the WAL and reads them (tests/apiserver/test_allocation_api.py kills the server in
the middle of a burst of creates and deletes and checks every acknowledged one). What NORMAL
gives up against FULL is the fsync of the WAL at every commit (2.7 ms median, 25 ms p99 on a
VM disk): after a power loss or kernel crash the last commits may be missing, but the file is
never corrupt, because the WAL is fsynced before any checkpoint copies it into the database.
etcd fsyncs every write; an apiserver whose store is on one machine's disk only loses what
that machine's own crash takes with it.

**Off the write path.** Checkpoints (copying WAL pages back into the database) run in a
background thread (checkpoint.py), not inside a committing write, so a write costs its own
statements and one write(2). The one exception is a backstop: if that thread is starved of CPU
long enough for the WAL to reach twice its catch-up mark (256 MiB by default), the committing
write checkpoints (``wal_autocheckpoint``), a pause of seconds that keeps the file bounded;
on a machine with a CPU to spare it never happens. The page cache is sized for 100k objects and their history
(``cache_size``, 64 MiB: the indexes of 200k rows, a Service and its IPAddress each, fit
with room to spare), so a write or a point read does not go to the file for index pages.
Statements are prepared once: the sqlite3 module keeps each SQL text's compiled statement
(``cached_statements``) and every statement here is a constant text with parameters.

**Group commit** (``group_commit=True``; off by default, see SQLiteBackend). Then no write runs
SQLite on the event loop's thread (reads still do, on the reader connection): a write is
queued to one writer thread (writer.py), which owns the write connection and commits
everything queued in one SQLite transaction: each write checks its own condition against
what is committed and what its batch wrote before it, takes the next revisions, and
fails alone (a transaction of several writes rolls back to its savepoint); COMMIT is one
write(2) for the batch instead of one per write. Only after COMMIT are the revision and the
events published (in revision order) and the writers answered, so an acknowledged write is
durable as above, and visible to the next read and watch. Reads use a second connection, a
WAL reader, which sees every committed write without waiting for the writer. The ``sync_*``
methods (for code outside an event loop) run the same commit on the caller's thread, taking
turns with the writer.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from kubesvc.storage.base import (
    Create,
    Delete,
    Event,
    KeyExists,
    KeyValue,
    ListResult,
    Op,
    RevisionMismatch,
    StorageError,
    TxnResult,
    Update,
    apply_op,
    prefix_end,
    resolve_revision,
)
from kubesvc.storage.embedded import EmbeddedBackend
from kubesvc.storage.sqlite.checkpoint import CATCH_UP_FRAMES, Checkpointer
from kubesvc.storage.sqlite.writer import GroupCommitter
from kubesvc.storage.watch import WatchHub

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kine (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    created INTEGER NOT NULL,
    deleted INTEGER NOT NULL,
    create_revision INTEGER NOT NULL,
    prev_revision INTEGER NOT NULL,
    value BLOB,
    old_value BLOB
);
CREATE INDEX IF NOT EXISTS kine_tombstone_index ON kine (id) WHERE deleted != 0;
DROP INDEX IF EXISTS kine_id_deleted_index;
DROP INDEX IF EXISTS kine_name_index;
DROP INDEX IF EXISTS kine_name_id_index;
DROP INDEX IF EXISTS kine_prev_revision_index;
CREATE UNIQUE INDEX IF NOT EXISTS kine_name_prev_revision_uindex ON kine (name, prev_revision);
CREATE TABLE IF NOT EXISTS kine_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""

_COLUMNS = "id, name, created, deleted, create_revision, prev_revision, value, old_value"

_INSERT = f"INSERT INTO kine ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"

# newest by prev_revision, which rises with id within a name (the module docstring): the UNIQUE
# index's order, so no sort
_NEWEST_ROW = "SELECT id, deleted, create_revision, value FROM kine WHERE name = ? AND id <= ? ORDER BY prev_revision DESC LIMIT 1"

# A list streams the newest row of each name in [start, end) as of a revision, in name order, so
# LIMIT ends the scan early. This relies on SQLite's bare columns: with a single MAX() aggregate,
# the other columns, including the one HAVING tests, come from the row that has the MAX.
_LIST = """
SELECT name, value, create_revision, MAX(id) FROM kine
WHERE name >= ? AND name < ? AND id <= ?
GROUP BY name HAVING deleted = 0 ORDER BY name LIMIT ?"""

# A count takes the newest ids from the (name, prev_revision) index and drops those in the
# tombstone index (named: the planner would otherwise read each id's table row for ``deleted``).
_COUNT = """
SELECT COUNT(*) FROM (SELECT MAX(id) AS id FROM kine WHERE name >= ? AND name < ? AND id <= ? GROUP BY name) AS newest
WHERE NOT EXISTS (SELECT 1 FROM kine AS gone INDEXED BY kine_tombstone_index WHERE gone.deleted != 0 AND gone.id = newest.id)"""

_EVENTS_AFTER = f"SELECT {_COLUMNS} FROM kine WHERE id > ? AND id <= ? AND name >= ? AND name < ? ORDER BY id"

_COMPACT = """
DELETE FROM kine WHERE id IN (
    SELECT prev_revision FROM kine WHERE id > :after AND id <= :upto AND prev_revision != 0
    UNION
    SELECT id FROM kine WHERE id > :after AND id <= :upto AND deleted != 0)"""

_SAVE_COMPACT_REVISION = """
INSERT INTO kine_meta (name, value) VALUES ('compact_revision', ?)
ON CONFLICT (name) DO UPDATE SET value = excluded.value"""

_CACHE_KIB = 64 * 1024  # the page cache: see "Off the write path" in the module docstring
_STATEMENTS = 64  # compiled statements kept by the sqlite3 module (its default is 128; we have a dozen)

_PAGE_BYTES = 4096  # SQLite's default page size, which the schema keeps
_ALL_ROWS = 2**62  # SQLite's integers are 64-bit: larger limits (up to Go's int64) mean all rows


class SQLiteBackend(EmbeddedBackend):
    """Thread-safe. Two connections: writes use the write connection; reads use a connection of
    their own, a WAL reader that sees every committed write and never waits for one in progress.

    Writes commit on the caller's thread by default (the event loop's: a commit is a few hundred
    microseconds and no fsync, see Durability). ``group_commit=True`` queues them to the group
    committer's thread instead (writer.py), which commits everything queued in one transaction.
    It is off by default because the hop back to a busy event loop costs the writer a whole loop
    iteration: in the apiserver under a burst, Pod creates, bindings and EndpointSlice updates
    went from 2-9 ms to 107-251 ms of server time (bench/e2e.py's request table), and in process,
    with the loop busy, a create's wait rose from p50 0.3 ms to 29 ms; the batching gained about
    15 % of creates/s (W1's A/B at load 8-14), too little for that latency."""

    def __init__(self, path: str, *, watch_ring_size: int = 10_000, watch_queue_size: int = 10_000,
                 wal_catch_up_frames: int = CATCH_UP_FRAMES, group_commit: bool = False):
        make_private(Path(path))
        self._conn = _connect(path)  # the write connection: the writer thread's, or whoever holds _write_lock
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")  # durable across kill -9: see the module docstring
        # Checkpoints are the Checkpointer's job, not a commit's. A commit checkpoints only as a
        # backstop, when the WAL has grown to twice the Checkpointer's catch-up mark (its thread
        # starved of CPU), and a WAL that starts over is cut back to the catch-up mark: bounded
        # on disk whatever the scheduling.
        self._conn.execute(f"PRAGMA wal_autocheckpoint={2 * wal_catch_up_frames}")
        self._conn.execute(f"PRAGMA journal_size_limit={wal_catch_up_frames * _PAGE_BYTES}")
        self._conn.executescript(_SCHEMA)
        self._reader = _connect(path)
        # Three locks, always taken in this order when nested (never the other way round):
        self._write_lock = threading.Lock()  # the write connection: a batch, a compaction, a checkpoint catch-up
        self._lock = threading.Lock()  # a commit's publication (revision + watch events) against a watch's start
        self._read_lock = threading.Lock()  # the read connection
        self._revision = self._scalar("SELECT seq FROM sqlite_sequence WHERE name = 'kine'")
        self._compacted = self._scalar("SELECT value FROM kine_meta WHERE name = 'compact_revision'")
        self._hub = WatchHub(self._revision, ring_size=watch_ring_size, queue_size=watch_queue_size)
        self.checkpointer = Checkpointer(path, self._write_lock, catch_up_frames=wal_catch_up_frames)
        self._writer = GroupCommitter(self._commit) if group_commit else None

    def sync_get(self, key: str, revision: int = 0) -> KeyValue | None:
        at = resolve_revision(revision, self._revision, self._compacted)
        with self._read_lock:
            return _newest(self._reader, key, at)[1]

    def sync_list(self, prefix: str, *, revision: int = 0, limit: int = 0, start_key: str = "") -> ListResult:
        end = prefix_end(prefix)
        at = resolve_revision(revision, self._revision, self._compacted)
        with self._read_lock:
            sql_limit = limit + 1 if 0 < limit < _ALL_ROWS else -1  # a limit past any table is no limit
            rows = self._reader.execute(_LIST, (max(prefix, start_key), end, at, sql_limit)).fetchall()
            remaining = 0
            if limit and len(rows) > limit:
                rows = rows[:limit]
                remaining = self._count(rows[-1][0] + "\0", end, at)
        kvs = [KeyValue(*row) for row in rows]  # name, value, create_revision, mod_revision
        return ListResult(kvs, at, more=remaining > 0, remaining=remaining)

    def sync_count(self, prefix: str) -> int:
        with self._read_lock:
            return self._count(prefix, prefix_end(prefix), self._revision)

    # ---- writes: committed here, or queued to the writer thread (group_commit) ---------------
    async def txn(self, ops: Sequence[Op]) -> TxnResult:
        if self._writer is None:
            return self.sync_txn(ops)
        return await self._writer.submit(ops)

    async def create(self, key: str, value: bytes) -> KeyValue:
        return (await self.txn((Create(key, value),))).results[0]

    async def update(self, key: str, value: bytes, expected_revision: int = 0) -> KeyValue:
        return (await self.txn((Update(key, value, expected_revision),))).results[0]

    async def delete(self, key: str, expected_revision: int = 0) -> KeyValue:
        return (await self.txn((Delete(key, expected_revision),))).results[0]

    def sync_txn(self, ops: Sequence[Op]) -> TxnResult:
        """A transaction committed on the calling thread (a batch of one), in turn with the writer's."""
        outcome = self._commit([ops])[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def writes_per_commit(self) -> float:
        """Transactions per SQLite commit so far through the writer (1.0: no batching yet)."""
        return self._writer.items / self._writer.batches if self._writer is not None and self._writer.batches else 1.0

    def _commit(self, batch: Sequence[Sequence[Op]]) -> list[TxnResult | BaseException]:
        """One SQLite transaction for the whole batch; per transaction of the batch, in order, its
        result or its error. Each transaction checks its own conditions against everything before
        it (the batch's earlier ones included) and takes the next revisions; one that fails
        takes none and leaves no row. Then, before anyone is answered: COMMIT (the write(2) to
        the WAL that makes them durable, see the module docstring), the revision, and the
        events published to watches in revision order."""
        outcomes: list[TxnResult | BaseException] = []
        events: list[Event] = []
        with self._write_lock:
            revision = self._revision
            with self._transaction():
                for ops in batch:
                    try:
                        done = self._apply(ops, revision)
                    except StorageError as err:
                        outcomes.append(err)
                        continue
                    revision += len(done)
                    events.extend(done)
                    outcomes.append(TxnResult([event.kv for event in done]))
            with self._lock:
                self._revision = revision
                self._hub.publish(events)
            self.checkpointer.committed(len(batch))
        return outcomes

    def _apply(self, ops: Sequence[Op], revision: int) -> list[Event]:
        """Append the rows of one transaction after ``revision``, all or none: a single write
        fails before its row exists (a failed INSERT is undone by SQLite itself), several share
        a savepoint."""
        if len(ops) == 1:
            return [self._append(ops[0], revision + 1)]
        self._conn.execute("SAVEPOINT txn")
        try:
            events = [self._append(op, revision + offset) for offset, op in enumerate(ops, 1)]
        except BaseException:
            self._conn.execute("ROLLBACK TO txn")
            self._conn.execute("RELEASE txn")
            raise
        self._conn.execute("RELEASE txn")
        return events

    def _compaction_lock(self) -> threading.Lock:
        """Compaction takes the write connection's lock first, as every write does."""
        return self._write_lock

    def _forget(self, revision: int) -> None:
        with self._transaction():
            self._conn.execute(_COMPACT, {"after": self._compacted, "upto": revision})
            self._conn.execute(_SAVE_COMPACT_REVISION, (revision,))
        self.checkpointer.wants_truncate()  # the freed pages leave the WAL at the next idle moment

    def sync_close(self) -> None:
        if self._writer is not None:
            self._writer.close()  # what is queued commits first
        self._hub.close()
        self.checkpointer.close()
        with self._write_lock:
            self._conn.close()
        with self._read_lock:
            self._reader.close()

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """All or nothing: BEGIN IMMEDIATE takes the write lock up front; any error rolls back."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise

    def _append(self, op: Op, revision: int) -> Event:
        """Check ``op`` against the key's newest row and append its row at ``revision``."""
        newest_id, current = _newest(self._conn, op.key, revision - 1)
        event = apply_op(op, current, revision)
        kv, prev = event.kv, event.prev_kv
        row = (revision, kv.key, event.is_create, event.type == "DELETE", kv.create_revision, newest_id,
               kv.value, prev.value if prev else None)
        try:
            self._conn.execute(_INSERT, row)
        except sqlite3.IntegrityError as err:
            if "kine.name, kine.prev_revision" not in str(err):
                raise
            if isinstance(op, Create):
                raise KeyExists(op.key) from err
            raise RevisionMismatch(op.key, op.expected_revision, newest_id) from err
        return event

    def _count(self, start: str, end: str, revision: int) -> int:
        return self._reader.execute(_COUNT, (start, end, revision)).fetchone()[0]

    def _events_after(self, prefix: str, revision: int) -> list[Event]:
        """History after ``revision`` up to the published revision (called under ``_lock``):
        rows committed but not yet published reach the watch with their publication."""
        with self._read_lock:
            rows = self._reader.execute(_EVENTS_AFTER, (revision, self._revision, prefix, prefix_end(prefix))).fetchall()
        return [_event(row) for row in rows]

    def _scalar(self, sql: str) -> int:
        row = self._conn.execute(sql).fetchone()
        return row[0] if row else 0


def _connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, cached_statements=_STATEMENTS)
    conn.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
    conn.execute("PRAGMA busy_timeout=5000")  # the checkpointer's connection may hold a lock for a moment
    return conn


def _newest(conn: sqlite3.Connection, key: str, revision: int) -> tuple[int, KeyValue | None]:
    """The id of the key's newest row as of ``revision`` (0: none), and its live value
    (None if there is no row or it is a tombstone)."""
    row = conn.execute(_NEWEST_ROW, (key, revision)).fetchone()
    if row is None:
        return 0, None
    row_id, deleted, create_revision, value = row
    return row_id, None if deleted else KeyValue(key, value, create_revision, row_id)


def _event(row: tuple) -> Event:
    row_id, name, created, deleted, create_revision, prev_revision, value, old_value = row
    prev = None if created else KeyValue(name, old_value, create_revision, prev_revision)
    return Event("DELETE" if deleted else "PUT", KeyValue(name, value, create_revision, row_id), prev)


def make_private(database: Path) -> None:
    """The database and its ``-wal``/``-shm`` 0600, the database created with that mode when
    missing (see the module docstring). Its directory is the caller's to choose and guard."""
    database.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(database, os.O_RDWR | os.O_CREAT, 0o600))
    for path in (database, database.with_name(database.name + "-wal"), database.with_name(database.name + "-shm")):
        if path.exists():
            os.chmod(path, 0o600)
