"""SQLite's group commit (storage/sqlite/writer.py): writes queued together commit together, and
each keeps its own conditions, revision and outcome, as if it had committed alone."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from kubesvc.storage import SQLiteBackend
from kubesvc.storage.base import Create, Delete, KeyExists, RevisionMismatch, Update


@pytest.fixture
async def backend(tmp_path):
    store = SQLiteBackend(str(tmp_path / "state.db"), group_commit=True)
    yield store
    await store.close()


async def test_concurrent_writes_share_commits_and_keep_their_own_outcomes(backend):
    """300 writes at once: creates of fresh keys succeed; a second create of a key, an update
    at a stale revision and a transaction whose second operation fails are refused with their
    own errors, and the failed transaction leaves nothing behind. Revisions have no gaps."""
    seeded = await backend.create("/k/seed", b"0")
    ops = []
    for i in range(100):
        ops.append([Create(f"/k/a{i}", b"a")])
        ops.append([Create("/k/seed", b"again")])  # exists
        ops.append([Create(f"/k/b{i}", b"b"), Update("/k/seed", b"x", seeded.mod_revision + 10_000)])  # second op fails
    outcomes = await asyncio.gather(*(backend.txn(txn) for txn in ops), return_exceptions=True)
    created = [o for o in outcomes[0::3]]
    assert all(not isinstance(o, BaseException) for o in created), created[:3]
    assert all(isinstance(o, KeyExists) for o in outcomes[1::3])
    assert all(isinstance(o, RevisionMismatch) for o in outcomes[2::3])
    revisions = sorted(o.revision for o in created)
    assert revisions == list(range(seeded.mod_revision + 1, seeded.mod_revision + 101))
    assert await backend.current_revision() == seeded.mod_revision + 100
    assert (await backend.list("/k/b")).kvs == []
    assert (await backend.get("/k/seed")).value == b"0"
    assert backend.writes_per_commit() > 1  # they were committed together, not one by one


async def test_an_acknowledged_write_is_read_and_watched_in_order(backend):
    """Every write is visible to the next read once awaited, and a watch sees all of them once,
    in revision order, whatever batches they were committed in."""
    watch = await backend.watch("/w/", 0)
    seen: list[int] = []

    async def consume():
        async for events in watch:
            seen.extend(event.kv.mod_revision for event in events)
            if len(seen) >= 301:
                return

    consumer = asyncio.create_task(consume())

    async def writer(i: int):
        kv = await backend.create(f"/w/{i}", b"v")
        assert (await backend.get(f"/w/{i}")).mod_revision == kv.mod_revision
        kv = await backend.update(f"/w/{i}", b"w", kv.mod_revision)
        assert (await backend.get(f"/w/{i}")).value == b"w"
        await backend.delete(f"/w/{i}", kv.mod_revision)
        assert await backend.get(f"/w/{i}") is None
        return kv

    await asyncio.gather(*(writer(i) for i in range(100)))
    kv = await backend.create("/w/last", b"v")
    await asyncio.wait_for(consumer, 10)
    watch.close()
    assert seen == sorted(seen) and len(seen) == len(set(seen)) == 301
    assert seen[-1] == kv.mod_revision


async def test_the_transaction_that_fails_in_a_batch_leaves_no_row(backend, tmp_path):
    """A multi-operation transaction that fails at its last operation writes none of its rows
    (its savepoint is rolled back), while the batch around it commits."""
    await backend.create("/t/taken", b"x")
    results = await asyncio.gather(
        backend.txn([Create("/t/one", b"1")]),
        backend.txn([Create("/t/two", b"2"), Create("/t/three", b"3"), Delete("/t/missing")]),
        backend.txn([Create("/t/four", b"4")]),
        return_exceptions=True)
    assert not isinstance(results[0], BaseException) and not isinstance(results[2], BaseException)
    assert isinstance(results[1], Exception)
    rows = sqlite3.connect(tmp_path / "state.db").execute("SELECT name FROM kine ORDER BY id").fetchall()
    assert [name for (name,) in rows] == ["/t/taken", "/t/one", "/t/four"]


async def test_close_commits_what_is_queued(tmp_path):
    """Writes queued when the store closes are committed and acknowledged, not dropped."""
    backend = SQLiteBackend(str(tmp_path / "state.db"), group_commit=True)
    writes = [asyncio.create_task(backend.create(f"/c/{i}", b"v")) for i in range(50)]
    await asyncio.sleep(0)  # every write is queued
    await backend.close()
    assert len(await asyncio.gather(*writes)) == 50
    reopened = SQLiteBackend(str(tmp_path / "state.db"), group_commit=True)
    assert len((await reopened.list("/c/")).kvs) == 50
    await reopened.close()
