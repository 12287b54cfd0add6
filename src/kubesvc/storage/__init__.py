"""Storage: the revisioned key-value store under the apiserver (protocol and semantics in base.py).

``open_backend`` picks an implementation from a flag value:

* ``memory`` or ``memory://``: MemoryBackend, forgotten when the process exits (tests);
* ``sqlite``: SQLiteBackend on ``<data_dir>/state.db``, the embedded default;
* ``sqlite:///abs/path.db``: SQLiteBackend on that file;
* etcd is not a URL here: ``--storage-backend etcd3`` with ``--etcd-servers`` (storage/etcd,
  ``open_etcd``), since it is a network client that must be awaited open.

``compact_to_window`` is the apiserver's compactor, run on a timer. Like kine's, it keeps the
newest N revisions so that watchers and paginated lists a little behind do not get 410s.
"""

from __future__ import annotations

from kubesvc.storage.base import Backend
from kubesvc.storage.memory import MemoryBackend
from kubesvc.storage.sqlite import SQLiteBackend

__all__ = ["MemoryBackend", "SQLiteBackend", "compact_to_window", "open_backend"]

_KINDS = "memory, sqlite (needs a data dir) or sqlite:///path/to/state.db"


def open_backend(url_or_kind: str, data_dir: str | None = None) -> Backend:
    if url_or_kind in ("memory", "memory://"):
        return MemoryBackend()
    if url_or_kind == "sqlite":
        if not data_dir:
            raise ValueError("storage backend 'sqlite' needs a data directory (or use sqlite:///path/to/state.db)")
        return SQLiteBackend(f"{data_dir}/state.db")
    if url_or_kind.startswith("sqlite://") and len(url_or_kind) > len("sqlite://"):
        return SQLiteBackend(url_or_kind.removeprefix("sqlite://"))
    if url_or_kind == "etcd" or url_or_kind.startswith("etcd://"):
        raise ValueError("etcd is opened with --storage-backend etcd3 and --etcd-servers, not a storage URL")
    raise ValueError(f"unknown storage backend {url_or_kind!r}: expected {_KINDS}")


async def compact_to_window(backend: Backend, keep: int) -> int:
    """Compact to ``current - keep`` when that is above the compact revision; returns the
    compact revision afterwards."""
    target = await backend.current_revision() - keep
    if target > backend.compact_revision():
        await backend.compact(target)
    return backend.compact_revision()
