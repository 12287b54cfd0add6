"""The kubelet's AtomicWriter (agent/atomic_writer.py): path validation with upstream's texts, the
``..data`` layout, the atomic swap, modes regardless of umask, and pruning."""

from __future__ import annotations

import os
import stat
from datetime import datetime, timezone

import pytest

from kubesvc.agent import atomic_writer
from kubesvc.agent.atomic_writer import InvalidPath, validate_path
from kubesvc.agent.volumes import FileProjection

NOW = datetime(2026, 5, 1, 10, 0, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("path, message", [
    ("", 'invalid path: must not be empty: ""'),
    ("/etc/passwd", "invalid path: must be relative path: /etc/passwd"),
    ("a/../b", "invalid path: must not contain '..': a/../b"),
    ("..data", "invalid path: must not start with '..': ..data"),
    ("x" * 256, "invalid path: filenames must be less than or equal to 255 characters"),
    ("a/" * 2049, "invalid path: must be less than or equal to 4096 characters"),
], ids=["empty", "absolute", "backstep", "reserved-prefix", "long-name", "long-path"])
def test_invalid_paths(path, message):
    with pytest.raises(InvalidPath) as err:
        validate_path(path)
    assert str(err.value) == message


@pytest.mark.parametrize("path", ["token", "a/b/c", "a..b", ".hidden", "x/..y"], ids=["plain", "nested", "dots-inside", "dotfile", "dots-below-top"])
def test_valid_paths(path):
    validate_path(path)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_first_write_layout_and_modes(tmp_path):
    old_umask = os.umask(0o077)  # modes are the payload's whatever the umask
    try:
        changed = atomic_writer.write(tmp_path, {"token": FileProjection(b"t1", 0o644), "conf/app.yaml": FileProjection(b"x: 1", 0o400)}, NOW)
    finally:
        os.umask(old_umask)
    assert changed
    data = os.readlink(tmp_path / "..data")
    assert data.startswith("..2026_05_01_10_00_00.")
    assert mode(tmp_path / data) == 0o755
    assert os.readlink(tmp_path / "token") == "..data/token"
    assert os.readlink(tmp_path / "conf") == "..data/conf"
    assert (tmp_path / "token").read_bytes() == b"t1"
    assert mode(tmp_path / "token") == 0o644
    assert mode(tmp_path / "conf" / "app.yaml") == 0o400
    assert sorted(os.listdir(tmp_path)) == sorted(["..data", data, "token", "conf"])


def test_unchanged_payload_is_not_rewritten(tmp_path):
    payload = {"token": FileProjection(b"t1", 0o644)}
    atomic_writer.write(tmp_path, payload, NOW)
    before = os.readlink(tmp_path / "..data")
    os.unlink(tmp_path / "token")  # a lost user-visible link is made again (upstream #121472)
    assert not atomic_writer.write(tmp_path, payload, NOW)
    assert os.readlink(tmp_path / "..data") == before
    assert (tmp_path / "token").read_bytes() == b"t1"


def test_update_swaps_data_and_prunes(tmp_path):
    atomic_writer.write(tmp_path, {"token": FileProjection(b"t1", 0o644), "old": FileProjection(b"o", 0o644)}, NOW)
    first = os.readlink(tmp_path / "..data")
    # a reader holding the old directory open keeps its content until it reopens
    with open(tmp_path / "token", "rb") as held:
        assert atomic_writer.write(tmp_path, {"token": FileProjection(b"t2", 0o644), "new": FileProjection(b"n", 0o600)}, NOW)
        assert held.read() == b"t1"
    second = os.readlink(tmp_path / "..data")
    assert second != first
    assert not (tmp_path / first).exists()
    assert (tmp_path / "token").read_bytes() == b"t2"
    assert not os.path.lexists(tmp_path / "old")
    assert mode(tmp_path / "new") == 0o600
    assert not os.path.lexists(tmp_path / "..data_tmp")
