"""The runtime's pure parts: the restart count an attempt gets from the log files earlier
attempts left (kuberuntime's ``calcRestartCountByLogDir`` cases, written out by hand), and
which container fields a restart-on-change compares (``pickFieldsToHash``)."""

from __future__ import annotations

import pytest

from kubesvc.agent.podworker import container_hash_fields
from kubesvc.agent.runtime import restart_count_from_log_dir


@pytest.mark.parametrize("files,expected", [
    ([], 0),
    (["0.log"], 1),
    (["0.log", "1.log", "2.log"], 3),
    (["4.log", "0.log"], 5),
    (["1.log.20260101-000000", "0.log"], 2),  # a rotated file counts
    (["notes.txt", "x.log", "0.log"], 1),
], ids=["none", "one attempt", "three", "highest wins", "rotated", "other files ignored"])
def test_restart_count_from_log_dir(tmp_path, files, expected):
    for name in files:
        (tmp_path / name).write_text("")
    (tmp_path / "7.log.d").mkdir()  # a directory is no attempt
    assert restart_count_from_log_dir(tmp_path) == expected


def test_restart_count_without_a_log_dir(tmp_path):
    assert restart_count_from_log_dir(tmp_path / "absent") == 0


def test_only_name_and_image_are_hashed():
    base = {"name": "c", "image": "busybox:1.36", "args": ["sleep", "1"]}
    assert container_hash_fields(base) == container_hash_fields({**base, "args": ["sleep", "2"], "env": [{"name": "A"}]})
    assert container_hash_fields(base) != container_hash_fields({**base, "image": "busybox:1.37"})


STATUS = """Name:\tsh
Umask:\t0022
State:\tS (sleeping)
Uid:\t2000\t2000\t2000\t2000
Gid:\t3000\t3000\t3000\t3000
FDSize:\t64
Groups:\t3000 4000 
"""


def test_credentials_from_status():
    from kubesvc.kernel.mounts import credentials_from_status

    assert credentials_from_status(STATUS) == (2000, 3000, (3000, 4000))
    assert credentials_from_status(STATUS.replace("Groups:\t3000 4000 ", "Groups:\t")) == (2000, 3000, ())
    assert credentials_from_status("Name:\tsh\n") is None


def test_exec_into_a_container_runs_as_its_user(monkeypatch):
    from kubesvc.kernel import mounts

    monkeypatch.setattr(mounts, "process_bounding_set", lambda pid: 0x1ffffffffff)  # the container's is the agent's
    monkeypatch.setattr(mounts, "process_credentials", lambda pid: (2000, 3000, (3000, 4000)))
    assert mounts.in_container(42, ["id"]) == ["nsenter", "--target=42", "--net", "--mount", "--uts", "--root", "--wd",
                                               "setpriv", "--reuid=2000", "--regid=3000", "--groups=3000,4000", "--", "id"]
    monkeypatch.setattr(mounts, "process_credentials", lambda pid: (0, 0, (0,)))
    assert mounts.in_container(42, ["id"]) == ["nsenter", "--target=42", "--net", "--mount", "--uts", "--root", "--wd", "id"]


def test_exec_into_a_container_keeps_its_capability_bounding_set(monkeypatch):
    """A container started with the runtime's default set (CapBnd a80425fb, as Docker's and
    containerd's) is exec'd into within that set, not with the agent's full one."""
    from kubesvc.kernel import mounts

    monkeypatch.setattr(mounts, "process_credentials", lambda pid: (0, 0, ()))
    monkeypatch.setattr(mounts, "process_bounding_set", lambda pid: 0xA80425FB if pid == 42 else 0x1FFFFFFFFFF)
    default_set = ("--bounding-set=-all,+chown,+dac_override,+fowner,+fsetid,+kill,+setgid,+setuid,+setpcap,+net_bind_service,"
                   "+net_raw,+sys_chroot,+mknod,+audit_write,+setfcap")
    assert mounts.in_container(42, ["id"]) == ["nsenter", "--target=42", "--net", "--mount", "--uts", "--root", "--wd",
                                               "setpriv", default_set, "--", "id"]
    assert mounts.bounding_set_from_status("Name:\tsh\nCapBnd:\t00000000a80425fb\n") == 0xA80425FB
    assert mounts.bounding_set_from_status("Name:\tsh\n") is None
