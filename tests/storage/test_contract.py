"""The storage contract (kubesvc.storage.contract) against every embedded backend, plus what is
specific to SQLite (kine's schema, compaction and guard; a differential run against
the memory store) and to open_backend."""

from __future__ import annotations

import asyncio
import inspect
import random
import sqlite3
import threading

import pytest

from kubesvc.storage import MemoryBackend, SQLiteBackend, contract, open_backend
from kubesvc.storage.base import Backend, Create, Delete, KeyValue, RevisionMismatch, StorageError, Update
from kubesvc.storage.sqlite import backend as sqlite_backend


async def run(check, argument) -> None:
    outcome = check(argument)
    if inspect.isawaitable(outcome):
        await outcome


@pytest.fixture(params=["memory", "sqlite", "sqlite-group-commit"])
async def make_backend(request, tmp_path):
    opened: list[Backend] = []

    def make(**options) -> Backend:
        if request.param == "memory":
            backend = MemoryBackend(**options)
        else:
            group_commit = request.param == "sqlite-group-commit"
            backend = SQLiteBackend(str(tmp_path / f"state-{len(opened)}.db"), group_commit=group_commit, **options)
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        await backend.close()


@pytest.mark.parametrize("check", contract.CHECKS, ids=lambda check: check.__name__)
async def test_contract(check, make_backend):
    await run(check, make_backend)


@pytest.mark.parametrize("check", contract.DURABILITY_CHECKS, ids=lambda check: check.__name__)
async def test_sqlite_durability(check, tmp_path):
    await run(check, lambda: SQLiteBackend(str(tmp_path / "state.db")))


def race_threads(threads: int, attempt) -> list[object]:
    """Run ``attempt(i)`` on ``threads`` threads released together; each result or exception."""
    barrier = threading.Barrier(threads)
    outcomes: list[object] = [None] * threads

    def run_one(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = attempt(i)
        except Exception as error:  # noqa: BLE001 - the outcome under test
            outcomes[i] = error

    workers = [threading.Thread(target=run_one, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return outcomes


async def test_embedded_backends_are_thread_safe(make_backend):
    """The embedded stores' synchronous primitives from racing threads (a writer thread may call
    them): one winner per conditional write, every create watched once and in order."""
    backend = make_backend()
    base = backend.sync_create(contract.key("a"), b"v0")
    outcomes = race_threads(20, lambda i: backend.sync_update(contract.key("a"), b"v%d" % i, base.mod_revision))
    winners = [o for o in outcomes if isinstance(o, KeyValue)]
    assert len(winners) == 1 and sum(isinstance(o, RevisionMismatch) for o in outcomes) == 19

    start = backend.sync_current_revision()
    events = aiter(await backend.watch(contract.SERVICES, start))
    watched = asyncio.ensure_future(contract.receive(events, 400))

    def create_fifty(thread: int) -> list[KeyValue]:
        return [backend.sync_create(contract.key(f"t{thread}/k{i}"), b"v") for i in range(50)]

    created = [kv for kvs in await asyncio.to_thread(race_threads, 8, create_fifty) for kv in kvs]
    assert sorted(kv.mod_revision for kv in created) == list(range(start + 1, start + 401))
    assert [e.kv.mod_revision for e in await watched] == list(range(start + 1, start + 401))


def test_sqlite_agrees_with_memory_on_a_random_history(tmp_path):
    """Differential check of the SQL (newest row per name, tombstones, incremental compaction)
    against the reference in-memory store: same outcomes, and the same reads at every revision."""
    rng = random.Random(20240601)
    memory, sqlite = MemoryBackend(), SQLiteBackend(str(tmp_path / "state.db"))
    keys = [f"/registry/{resource}/{i}" for resource in ("services", "servicesfoo", "pods") for i in range(5)]

    def outcome(backend: Backend, op):
        try:
            return backend.sync_txn([op]).results
        except StorageError as error:
            return type(error), str(error)

    def assert_same_reads() -> None:
        for revision in range(memory.compact_revision(), memory.sync_current_revision() + 1):
            for prefix in ("/registry/services/", "/registry/", "/registry/pods/3", ""):
                assert memory.sync_list(prefix, revision=revision) == sqlite.sync_list(prefix, revision=revision)
                assert memory.sync_list(prefix, revision=revision, limit=2, start_key="/registry/pods/2") == \
                    sqlite.sync_list(prefix, revision=revision, limit=2, start_key="/registry/pods/2")
            assert [memory.sync_get(key, revision) for key in keys] == [sqlite.sync_get(key, revision) for key in keys]
        assert [memory.sync_count(p) for p in ("/registry/", "/registry/services")] == \
            [sqlite.sync_count(p) for p in ("/registry/", "/registry/services")]

    for _ in range(400):
        key = rng.choice(keys)
        current = memory.sync_get(key)
        expected = rng.choice([0, current.mod_revision if current else 0, rng.randint(1, 400)])
        op = rng.choice([Create(key, rng.randbytes(3)), Update(key, rng.randbytes(3), expected), Delete(key, expected)])
        assert outcome(memory, op) == outcome(sqlite, op)
        if rng.random() < 0.03:
            assert_same_reads()
            target = rng.randint(memory.compact_revision(), memory.sync_current_revision())
            memory.sync_compact(target)
            sqlite.sync_compact(target)
    assert_same_reads()
    memory.sync_close()
    sqlite.sync_close()


def test_sqlite_has_kines_table_and_indexes(tmp_path):
    SQLiteBackend(str(tmp_path / "state.db")).sync_close()
    db = sqlite3.connect(tmp_path / "state.db")
    columns = [row[1] for row in db.execute("PRAGMA table_info(kine)")]
    indexes = {row[1]: row[2] for row in db.execute("PRAGMA index_list(kine)")}  # name -> unique
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    db.close()
    assert columns == ["id", "name", "created", "deleted", "create_revision", "prev_revision", "value", "old_value"]
    # kine's (name), (name, id), (prev_revision) and (id, deleted) indexes are left out:
    # (name, prev_revision) serves every name lookup, no query here reads prev_revision alone,
    # and only tombstones are looked up by id (backend.py's docstring)
    assert indexes == {
        "kine_tombstone_index": 0,
        "kine_name_prev_revision_uindex": 1,
    }


def test_sqlite_newest_row_is_read_from_the_unique_index_without_a_sort(tmp_path):
    """A write's check of the key's newest row walks (name, prev_revision) down, no sort."""
    SQLiteBackend(str(tmp_path / "state.db")).sync_close()
    db = sqlite3.connect(tmp_path / "state.db")
    plan = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sqlite_backend._NEWEST_ROW, ("/a", 1))]
    db.close()
    assert plan == ["SEARCH kine USING INDEX kine_name_prev_revision_uindex (name=?)"]


def test_sqlite_database_of_an_older_version_gets_todays_indexes(tmp_path):
    """An older version's (name) and (id, deleted) indexes go; the tombstone index is built
    from the rows already there, so a count after the upgrade still drops a deleted name."""
    backend = SQLiteBackend(str(tmp_path / "state.db"))
    backend.sync_create("/a", b"a1")
    backend.sync_create("/b", b"b1")
    backend.sync_delete("/b")
    backend.sync_close()
    db = sqlite3.connect(tmp_path / "state.db")
    db.execute("DROP INDEX kine_tombstone_index")  # as versions before it made the database
    db.execute("CREATE INDEX kine_name_index ON kine (name)")
    db.execute("CREATE INDEX kine_id_deleted_index ON kine (id, deleted)")
    db.commit()
    db.close()
    backend = SQLiteBackend(str(tmp_path / "state.db"))
    assert backend.sync_count("/") == 1
    backend.sync_close()
    db = sqlite3.connect(tmp_path / "state.db")
    indexes = {row[1] for row in db.execute("PRAGMA index_list(kine)")}
    db.close()
    assert indexes == {"kine_tombstone_index", "kine_name_prev_revision_uindex"}


def test_sqlite_reads_as_of_a_revision_across_deletes_recreates_and_compaction(tmp_path):
    """The newest row as of N is found by prev_revision order: through a key's whole history,
    a re-create after a delete, and after compaction removed the older rows."""
    backend = SQLiteBackend(str(tmp_path / "state.db"))
    a1 = backend.sync_create("/a", b"a1")
    backend.sync_create("/b", b"b1")
    a2 = backend.sync_update("/a", b"a2")
    gone = backend.sync_delete("/a")
    a3 = backend.sync_create("/a", b"a3")
    a4 = backend.sync_update("/a", b"a4", a3.mod_revision)
    assert [backend.sync_get("/a", rev).value if backend.sync_get("/a", rev) else None
            for rev in (a1.mod_revision, a2.mod_revision, gone.mod_revision, a3.mod_revision, a4.mod_revision)] == [
        b"a1", b"a2", None, b"a3", b"a4"]
    assert backend.sync_get("/a").create_revision == a3.mod_revision
    backend.sync_compact(a3.mod_revision)
    assert backend.sync_get("/a", a3.mod_revision).value == b"a3"
    assert backend.sync_get("/a").value == b"a4"
    a5 = backend.sync_update("/a", b"a5", a4.mod_revision)
    assert backend.sync_get("/a").mod_revision == a5.mod_revision
    with pytest.raises(RevisionMismatch):
        backend.sync_update("/a", b"stale", a4.mod_revision)
    backend.sync_close()


def test_sqlite_compaction_deletes_superseded_rows_and_tombstones(tmp_path):
    backend = SQLiteBackend(str(tmp_path / "state.db"))
    backend.sync_create("/a", b"a1")
    a2 = backend.sync_update("/a", b"a2")
    backend.sync_create("/b", b"b1")
    backend.sync_delete("/b")
    c1 = backend.sync_create("/c", b"c1")
    c2 = backend.sync_update("/c", b"c2")
    backend.sync_compact(c1.mod_revision)
    db = sqlite3.connect(tmp_path / "state.db")
    rows = db.execute("SELECT name, id FROM kine ORDER BY id").fetchall()
    db.close()
    backend.sync_close()
    assert rows == [("/a", a2.mod_revision), ("/c", c1.mod_revision), ("/c", c2.mod_revision)]


def test_sqlite_unique_name_prev_revision_guard_is_a_conflict(tmp_path):
    """A row appended behind this process's back after the row it read (a second writer on
    the file, at a revision this process has not reached, so this one's lookup as of its own
    revision still reads the older row) makes its conditional write collide on
    UNIQUE(name, prev_revision)."""
    path = str(tmp_path / "state.db")
    backend = SQLiteBackend(path)
    first = backend.sync_create("/k", b"v1")
    second = backend.sync_update("/k", b"v2")
    intruder = sqlite3.connect(path)
    with intruder:
        intruder.execute("INSERT INTO kine VALUES (?, '/k', 0, 0, ?, ?, x'00', x'00')",
                         (second.mod_revision + 10, first.create_revision, second.mod_revision))
    intruder.close()
    with pytest.raises(RevisionMismatch) as conflict:
        backend.sync_update("/k", b"v3", expected_revision=second.mod_revision)
    assert conflict.value.actual == second.mod_revision
    assert backend.sync_current_revision() == second.mod_revision
    backend.sync_close()


@pytest.mark.parametrize(
    ("spec", "kind"),
    [("memory", MemoryBackend), ("memory://", MemoryBackend),
     ("sqlite", SQLiteBackend), ("sqlite:///ABS", SQLiteBackend)],
    ids=["memory", "memory-url", "sqlite-in-data-dir", "sqlite-url"],
)
def test_open_backend(spec, kind, tmp_path):
    backend = open_backend(spec.replace("/ABS", str(tmp_path / "elsewhere.db")), str(tmp_path / "data"))
    assert isinstance(backend, kind)
    backend.sync_close()
    if spec == "sqlite":
        assert (tmp_path / "data" / "state.db").exists()
    if spec.startswith("sqlite://"):
        assert (tmp_path / "elsewhere.db").exists()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("etcd://127.0.0.1:2379", "--storage-backend etcd3 and --etcd-servers"),
        ("sqlite", "needs a data directory"),
        ("postgres://db", "unknown storage backend 'postgres://db'"),
    ],
    ids=["etcd", "sqlite-without-data-dir", "unknown"],
)
def test_open_backend_refuses(spec, message):
    with pytest.raises(ValueError, match=message):
        open_backend(spec, None)
