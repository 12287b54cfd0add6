"""The storage contract (kubesvc.storage.contract) against every embedded backend, plus what is
specific to SQLite (kine's schema and guard) and to open_backend."""

from __future__ import annotations

import inspect
import sqlite3

import pytest

from kubesvc.storage import MemoryBackend, SQLiteBackend, contract, open_backend
from kubesvc.storage.base import Backend, RevisionMismatch


async def run(check, argument) -> None:
    outcome = check(argument)
    if inspect.isawaitable(outcome):
        await outcome


@pytest.fixture(params=["memory", "sqlite"])
def make_backend(request, tmp_path):
    opened: list[Backend] = []

    def make(**options) -> Backend:
        if request.param == "memory":
            backend = MemoryBackend(**options)
        else:
            backend = SQLiteBackend(str(tmp_path / f"state-{len(opened)}.db"), **options)
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        backend.close()


@pytest.mark.parametrize("check", contract.CHECKS, ids=lambda check: check.__name__)
async def test_contract(check, make_backend):
    await run(check, make_backend)


@pytest.mark.parametrize("check", contract.DURABILITY_CHECKS, ids=lambda check: check.__name__)
async def test_sqlite_durability(check, tmp_path):
    await run(check, lambda: SQLiteBackend(str(tmp_path / "state.db")))


def test_sqlite_has_kines_table_and_indexes(tmp_path):
    SQLiteBackend(str(tmp_path / "state.db")).close()
    db = sqlite3.connect(tmp_path / "state.db")
    columns = [row[1] for row in db.execute("PRAGMA table_info(kine)")]
    indexes = {row[1]: row[2] for row in db.execute("PRAGMA index_list(kine)")}  # name -> unique
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    db.close()
    assert columns == ["id", "name", "created", "deleted", "create_revision", "prev_revision", "value", "old_value"]
    assert indexes == {
        "kine_name_index": 0,
        "kine_name_id_index": 0,
        "kine_id_deleted_index": 0,
        "kine_prev_revision_index": 0,
        "kine_name_prev_revision_uindex": 1,
    }


def test_sqlite_unique_name_prev_revision_guard_is_a_conflict(tmp_path):
    """A row appended behind this process's back after the row it read (a second writer on
    the file) makes its conditional write collide on UNIQUE(name, prev_revision)."""
    path = str(tmp_path / "state.db")
    backend = SQLiteBackend(path)
    first = backend.create("/k", b"v1")
    second = backend.update("/k", b"v2")
    backend.compact(second.mod_revision)  # frees id 1, which the intruder reuses below
    intruder = sqlite3.connect(path)
    with intruder:
        intruder.execute("INSERT INTO kine VALUES (?, '/k', 0, 0, ?, ?, x'00', x'00')",
                         (first.mod_revision, first.create_revision, second.mod_revision))
    intruder.close()
    with pytest.raises(RevisionMismatch) as conflict:
        backend.update("/k", b"v3", expected_revision=second.mod_revision)
    assert conflict.value.actual == second.mod_revision
    assert backend.current_revision() == second.mod_revision
    backend.close()


@pytest.mark.parametrize(
    ("spec", "kind"),
    [("memory", MemoryBackend), ("memory://", MemoryBackend), ("sqlite", SQLiteBackend), ("sqlite:///ABS", SQLiteBackend)],
    ids=["memory", "memory-url", "sqlite-in-data-dir", "sqlite-url"],
)
def test_open_backend(spec, kind, tmp_path):
    backend = open_backend(spec.replace("/ABS", str(tmp_path / "elsewhere.db")), str(tmp_path / "data"))
    assert isinstance(backend, kind)
    backend.close()
    if spec == "sqlite":
        assert (tmp_path / "data" / "state.db").exists()
    if spec.startswith("sqlite://"):
        assert (tmp_path / "elsewhere.db").exists()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("etcd://127.0.0.1:2379", "etcd backend is not implemented yet"),
        ("sqlite", "needs a data directory"),
        ("postgres://db", "unknown storage backend 'postgres://db'"),
    ],
    ids=["etcd", "sqlite-without-data-dir", "unknown"],
)
def test_open_backend_refuses(spec, message):
    with pytest.raises(ValueError, match=message):
        open_backend(spec, None)
