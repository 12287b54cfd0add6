"""The apiserver's data directory: private, and usable before anything is written to it.

It holds the store (``state.db``), the cluster CA and its keys, tokens and kubeconfigs, so it
is the server user's alone, as k3s keeps ``/var/lib/rancher/k3s/server``: the directory is
created 0700, and narrowed to 0700 at every start if it is ours; every file in it is 0600
(``state.db`` and its ``-wal``/``-shm``: ``storage/sqlite``; credentials: ``serving/pki.py``).

A directory the server cannot use stops it at once with one line that names the directory
and the cause, ``cannot use data directory /var/lib/kubesvc: Read-only file system``, and a
non-zero exit: a read-only mount, a full disk, a path that is a file, no permission. The
check writes and removes a probe of ``PROBE_BYTES`` before anything else is written, so a
directory refused there holds nothing half-written; a failure further on (SQLite refusing
the database) is reported the same way.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

PROBE_BYTES = 1 << 20  # room for the store's first pages, the PKI and kubeconfigs
_PROBE_NAME = ".kubesvc-write-probe"


class DataDirError(ValueError):
    """The data directory cannot be used; ``str()`` is the one line to print."""

    def __init__(self, path: Path, cause: str):
        super().__init__(f"cannot use data directory {path}: {cause}")
        self.path = path
        self.cause = cause


def prepare_data_dir(path: Path) -> None:
    """Create ``path`` 0700 (or narrow it to 0700 if it is ours) and prove it writable with
    room to spare; ``DataDirError`` otherwise."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if path.stat().st_uid == os.geteuid():
            os.chmod(path, 0o700)
        _probe(path / _PROBE_NAME)
    except FileExistsError:
        raise DataDirError(path, os.strerror(errno.ENOTDIR)) from None
    except OSError as exc:
        raise DataDirError(path, exc.strerror or str(exc)) from None


def _probe(probe: Path) -> None:
    descriptor = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        block = b"\0" * 65536
        for _ in range(PROBE_BYTES // len(block)):
            os.write(descriptor, block)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
        probe.unlink(missing_ok=True)


def storage_error(path: Path, exc: Exception) -> DataDirError:
    """A store that could not be opened in ``path``, as the one line (SQLite's own words for
    its errors: ``database or disk is full``, ``attempt to write a readonly database``)."""
    if isinstance(exc, OSError):
        return DataDirError(path, exc.strerror or str(exc))
    if isinstance(exc, sqlite3.Error):
        return DataDirError(path, str(exc))
    return DataDirError(path, f"{type(exc).__name__}: {exc}")
