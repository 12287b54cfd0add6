"""The kubelet's AtomicWriter (``pkg/volume/util/atomic_writer.go``): a volume's files replaced
all at once, so a reader never sees half an update.

Layout in the volume directory::

    ..2024_05_01_10_00_00.123456789/   the real files (a timestamped directory, mode 0755)
    ..data -> ..2024_05_01_10_00_00.123456789
    token -> ..data/token               one link per top-level user-visible name
    ca.crt -> ..data/ca.crt

``write`` (upstream ``Write``): validate every path; compare the payload with the files behind
``..data`` and stop when nothing changed (the user-visible links are still made); otherwise
write every file into a new timestamped directory with its mode (chmod after writing, so the
umask does not matter), point ``..data_tmp`` at it and ``rename`` it over ``..data`` (the
atomic swap), make the missing user-visible links, remove the names no longer in the payload,
and remove the old timestamped directory. Names starting with ``..`` are the writer's own.
``set_perms`` (upstream's ``setPerms``: the volume's ``fsGroup`` ownership) runs on the volume
directory after the new files are written and before they are published by the swap.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path

from kubesvc.agent.volumes import FileProjection

DATA_DIR = "..data"
NEW_DATA_DIR = "..data_tmp"
MAX_FILE_NAME_LENGTH = 255
MAX_PATH_LENGTH = 4096


class InvalidPath(ValueError):
    pass


def validate_path(path: str) -> None:
    """Upstream ``validatePath``, with its error texts."""
    if path == "":
        raise InvalidPath('invalid path: must not be empty: ""')
    if path.startswith("/"):
        raise InvalidPath(f"invalid path: must be relative path: {path}")
    if len(path) > MAX_PATH_LENGTH:
        raise InvalidPath(f"invalid path: must be less than or equal to {MAX_PATH_LENGTH} characters")
    items = path.split("/")
    for item in items:
        if item == "..":
            raise InvalidPath(f"invalid path: must not contain '..': {path}")
        if len(item) > MAX_FILE_NAME_LENGTH:
            raise InvalidPath(f"invalid path: filenames must be less than or equal to {MAX_FILE_NAME_LENGTH} characters")
    if items[0].startswith("..") and len(items[0]) > 2:
        raise InvalidPath(f"invalid path: must not start with '..': {path}")


def clean_payload(payload: Mapping[str, FileProjection]) -> dict[str, FileProjection]:
    """``validatePayload``: every path valid, cleaned (``filepath.Clean``)."""
    for path in payload:
        validate_path(path)
    return {posixpath.normpath(path): content for path, content in payload.items()}


def _paths_under(directory: Path) -> set[str]:
    found = set()
    for base, dirs, files in os.walk(directory):
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(base, name), directory))
    return found


def paths_to_remove(current: set[str], payload: Mapping[str, FileProjection]) -> set[str]:
    """Upstream ``pathsToRemove``: what the old version holds that the new one does not (every
    parent directory of a new file counts as new)."""
    keep = set()
    for path in payload:
        while path:
            keep.add(path)
            path = posixpath.dirname(path)
    return current - keep


def _unchanged(payload: Mapping[str, FileProjection], old_dir: Path) -> bool:
    for path, content in payload.items():
        try:
            if (old_dir / path).read_bytes() != content.data:
                return False
        except FileNotFoundError:
            return False
    return True


def write(target_dir: Path, payload: Mapping[str, FileProjection], now: datetime | None = None,
          set_perms: Callable[[Path], None] | None = None) -> bool:
    """Project ``payload`` into ``target_dir`` (which must exist); True when files changed."""
    target_dir = Path(target_dir)
    payload = clean_payload(payload)
    data_dir = target_dir / DATA_DIR
    try:
        old_ts = os.readlink(data_dir)
    except FileNotFoundError:
        old_ts = ""
    to_remove: set[str] = set()
    should_write = True
    if old_ts:
        to_remove = paths_to_remove(_paths_under(target_dir / old_ts), payload)
        if _unchanged(payload, target_dir / old_ts) and not to_remove:
            should_write, old_ts = False, ""  # up to date; the user-visible links are checked below
    if should_write:
        moment = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
        ts_dir = Path(tempfile.mkdtemp(prefix=moment.strftime("..%Y_%m_%d_%H_%M_%S."), dir=target_dir))
        try:
            os.chmod(ts_dir, 0o755)
            for path, content in payload.items():
                full = ts_dir / path
                full.parent.mkdir(parents=True, exist_ok=True)
                full.write_bytes(content.data)
                os.chmod(full, content.mode & 0o7777)
            if set_perms is not None:
                set_perms(target_dir)
            new_link = target_dir / NEW_DATA_DIR
            if os.path.lexists(new_link):
                os.unlink(new_link)
            os.symlink(ts_dir.name, new_link)
            os.rename(new_link, data_dir)
        except BaseException:
            shutil.rmtree(ts_dir, ignore_errors=True)
            raise
    for path in payload:
        name = path.split("/", 1)[0]
        visible = target_dir / name
        if not os.path.lexists(visible):
            os.symlink(posixpath.join(DATA_DIR, name), visible)
    for path in to_remove:
        if "/" not in path:
            try:
                os.unlink(target_dir / path)
            except FileNotFoundError:
                pass
    if old_ts:
        shutil.rmtree(target_dir / old_ts, ignore_errors=True)
    return should_write
