"""The WAL checkpointer: SQLite's checkpoints moved off the committing write.

In WAL mode a commit appends its pages to ``state.db-wal``; a *checkpoint* copies them back
into ``state.db`` so the WAL can start over. By default the connection that commits runs one
whenever the WAL passes 1,000 pages (``wal_autocheckpoint``), inside that commit: the write
that crosses the line pays for copying every page and for two fsyncs, and here it also holds
the backend's lock, so every request behind it waits (ClusterIP allocation p99.9 at 100k
Services was 9 ms for that reason alone).

The backend moves that mark to twice ``catch_up_frames`` (a backstop, below) and runs this
thread instead, on a connection of its own:

* PASSIVE checkpoints, when kicked (every ``kick_every`` commits) or every ``interval``
  seconds. PASSIVE copies what is committed without taking the write lock, so writers go on
  appending meanwhile; the fsyncs happen here, not in a request.
* SQLite restarts the WAL from its start when a write begins and every frame has been copied.
  Under a continuous stream of writes a PASSIVE run never quite catches up (writes land while
  it fsyncs), so the WAL only grows; past ``catch_up_frames`` the thread takes the backend's
  lock for one more PASSIVE, which copies the few frames written since the last one, and the
  next write starts the WAL over. That is the one pause writers see, once per
  ``catch_up_frames`` pages of writes instead of once per 1,000.
* A backstop for a thread starved of CPU (a loaded machine): the backend's own connection
  checkpoints inside a commit once the WAL reaches twice ``catch_up_frames``
  (``wal_autocheckpoint``), and a WAL that starts over is cut back to ``catch_up_frames``
  pages (``journal_size_limit``), so the file stays bounded whatever the scheduling.
* TRUNCATE when the store has been idle for ``idle_seconds``: the WAL file shrinks to zero
  bytes (also under the lock: it must not race a writer, and nothing is writing anyway).

Durability does not depend on any of this: a checkpoint only moves pages that are already
committed in the WAL (see backend.py's docstring for what a commit guarantees).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

log = logging.getLogger(__name__)

CATCH_UP_FRAMES = 32768  # pages of 4 KiB: the WAL stays near 128 MiB at most (a 100k-Service store is ~500 MiB)


class Checkpointer:
    def __init__(self, path: str, lock: threading.Lock, *, interval: float = 0.5, kick_every: int = 256,
                 catch_up_frames: int = CATCH_UP_FRAMES, idle_seconds: float = 1.0):
        self._path = path
        self._lock = lock  # the backend's write lock: held by every commit, so holding it means no writer
        self.interval = interval
        self.kick_every = kick_every
        self.catch_up_frames = catch_up_frames
        self.idle_seconds = idle_seconds
        self._kick = threading.Event()
        self._stop = threading.Event()
        self._commits = 0
        self._last_commit = time.monotonic()
        self._dirty = False  # written since the last TRUNCATE
        self.passive_runs = self.catch_ups = self.truncates = 0  # for tests and curiosity
        self._thread = threading.Thread(target=self._run, name="sqlite-checkpointer", daemon=True)
        self._thread.start()

    def committed(self, writes: int = 1) -> None:
        """Called by the backend after each commit of ``writes`` transactions (under its lock:
        no atomics needed)."""
        self._dirty = True
        self._last_commit = time.monotonic()
        self._commits += writes
        if self._commits >= self.kick_every:
            self._commits = 0
            self._kick.set()

    def wants_truncate(self) -> None:
        """Truncate the WAL at the next idle moment (after a compaction freed many pages)."""
        self._dirty = True
        self._kick.set()

    def close(self) -> None:
        self._stop.set()
        self._kick.set()
        self._thread.join()

    def _run(self) -> None:
        conn = sqlite3.connect(self._path, isolation_level=None)
        try:
            conn.execute("PRAGMA busy_timeout=5000")
            while not self._stop.is_set():
                self._kick.wait(self.interval)
                self._kick.clear()
                if self._stop.is_set():
                    break
                try:
                    self._step(conn)
                except sqlite3.Error as err:  # e.g. a busy file: the next round tries again
                    log.warning("WAL checkpoint failed: %s", err)
        finally:
            conn.close()

    def _step(self, conn: sqlite3.Connection) -> None:
        if not self._dirty:
            return
        if time.monotonic() - self._last_commit >= self.idle_seconds:
            # copy (and fsync) first without the lock, so the locked TRUNCATE finds nothing left
            # to copy and only cuts the file: reads wait for a truncate, not for two fsyncs
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            with self._lock:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                self._dirty = False
                self.truncates += 1
            return
        # frames: the WAL's length when this run began, all copied by its end unless busy; the
        # writes made meanwhile are not, which is what keeps the WAL from starting over
        _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self.passive_runs += 1
        if frames >= self.catch_up_frames:
            with self._lock:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                self.catch_ups += 1
