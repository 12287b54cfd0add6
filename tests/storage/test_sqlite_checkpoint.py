"""SQLite's WAL checkpoints run beside the writes, not inside them (storage/sqlite/checkpoint.py),
and an acknowledged write still survives ``kill -9`` of its process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from kubesvc.storage import SQLiteBackend

VALUE = b"x" * 3000  # a Service-sized value: one row per page or so


def wal_bytes(db: Path) -> int:
    wal = db.with_name(db.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_commits_do_not_checkpoint(tmp_path):
    """SQLite's own checkpoint at 1,000 WAL pages is off: with the checkpointer asleep, 3,000
    commits of a page or more each leave the WAL well past 1,000 pages (4 MiB)."""
    db = tmp_path / "state.db"
    backend = SQLiteBackend(str(db))
    backend.checkpointer.close()  # nothing checkpoints now, unless a commit does
    for i in range(3000):
        backend.sync_create(f"/registry/services/specs/default/s{i}", VALUE)
    assert wal_bytes(db) > 8 * 2**20
    backend.sync_close()


def test_idle_store_truncates_its_wal_and_keeps_everything(tmp_path):
    db = tmp_path / "state.db"
    backend = SQLiteBackend(str(db))
    backend.checkpointer.idle_seconds = 0.2
    for i in range(2000):
        backend.sync_create(f"/registry/services/specs/default/s{i}", VALUE)
    assert wal_bytes(db) > 2**20
    assert wait_until(lambda: backend.checkpointer.truncates >= 1), "an idle store's WAL is truncated"
    assert wal_bytes(db) == 0
    assert len(backend.sync_list("/registry/services/").kvs) == 2000
    backend.sync_close()
    reopened = SQLiteBackend(str(db))
    assert len(reopened.sync_list("/registry/services/").kvs) == 2000
    reopened.sync_close()


def test_wal_stays_bounded_under_continuous_writes(tmp_path):
    """Writes that never pause: past catch_up_frames the checkpointer catches up once under the
    write lock and the WAL starts over, so its file stops growing."""
    db = tmp_path / "state.db"
    backend = SQLiteBackend(str(db), wal_catch_up_frames=2000)  # 8 MiB of 4 KiB pages
    checkpointer = backend.checkpointer
    checkpointer.idle_seconds = 3600  # never idle here
    checkpointer.kick_every = 50
    for i in range(8000):
        backend.sync_create(f"/registry/services/specs/default/s{i:05d}", VALUE)
    assert checkpointer.catch_ups >= 1
    assert wal_bytes(db) < 4 * checkpointer.catch_up_frames * 4096
    assert len(backend.sync_list("/registry/services/").kvs) == 8000
    backend.sync_close()



def test_wal_stays_bounded_when_the_checkpointer_never_runs(tmp_path):
    """A checkpointer thread starved of CPU (a loaded machine): the committing connection's own
    backstop checkpoint (at twice the catch-up mark) and the WAL's size limit keep the file
    bounded anyway, and nothing written is lost."""
    db = tmp_path / "state.db"
    backend = SQLiteBackend(str(db), wal_catch_up_frames=2000)
    checkpointer = backend.checkpointer
    checkpointer.close()  # starved for good: its thread ends before any write (setting its interval raced a run already waiting)
    for i in range(8000):
        backend.sync_create(f"/registry/services/specs/default/s{i:05d}", VALUE)
    assert checkpointer.passive_runs == 0 and checkpointer.catch_ups == 0
    assert wal_bytes(db) < 3 * 2000 * 4096
    assert len(backend.sync_list("/registry/services/").kvs) == 8000
    backend.sync_close()
    reopened = SQLiteBackend(str(db))
    assert len(reopened.sync_list("/registry/services/").kvs) == 8000
    reopened.sync_close()


_WRITER = textwrap.dedent("""
    import sys
    from kubesvc.storage import SQLiteBackend
    backend = SQLiteBackend(sys.argv[1])
    backend.checkpointer.close()  # every acknowledged write stays in the WAL only
    for i in range(100000):
        backend.sync_create(f"/registry/configmaps/default/c{i}", b"v%d" % i)
        print(i, flush=True)  # acknowledged
""")


def test_acknowledged_writes_survive_kill_9(tmp_path):
    db = tmp_path / "state.db"
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(db)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")})
    acknowledged = -1
    assert writer.stdout is not None
    for line in writer.stdout:
        acknowledged = int(line)
        if acknowledged >= 500:
            break
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    writer.stdout.close()
    assert wal_bytes(db) > 0, "the writes were in the WAL, not checkpointed"
    backend = SQLiteBackend(str(db))
    stored = {kv.key: kv.value for kv in backend.sync_list("/registry/configmaps/").kvs}
    backend.sync_close()
    for i in range(acknowledged + 1):
        assert stored[f"/registry/configmaps/default/c{i}"] == b"v%d" % i
