"""Containers in mount namespaces of their own, on the real kernel (agent/runtime.py with
kernel/mounts.py): a Pod's projected ServiceAccount volume appears read-only at
``/var/run/secrets/kubernetes.io/serviceaccount`` with upstream's modes, a renewed token is
seen by the running container, exec probes see what the container sees, and the host's mount
table and ``/run`` are exactly as before.
The API is a fake (tests/agent/test_podvolumes.py); the processes, mounts and files are real.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from kubesvc.agent.podvolumes import PodVolumes
from kubesvc.agent.probes import CheckResult, probe_exec
from kubesvc.agent.runtime import ContainerProcess, StartError
from kubesvc.agent.tokens import TokenManager
from kubesvc.kernel.mounts import BindMount, plan_mounts
from kubesvc.util.clock import FakeClock
from tests.agent.test_podvolumes import SA_MOUNT, FakeAPI, pod

pytestmark = pytest.mark.kernel


WATCH_TOKEN = f"""
stat -c '%a' {SA_MOUNT}; stat -L -c '%a %n' {SA_MOUNT}/token {SA_MOUNT}/ca.crt {SA_MOUNT}/namespace
cat {SA_MOUNT}/namespace; echo
touch {SA_MOUNT}/x 2>/dev/null || echo read-only
echo ready
while [ "$(cat {SA_MOUNT}/token)" = jwt-1 ]; do sleep 0.05; done
cat {SA_MOUNT}/token; echo
"""


def host_mounts() -> list[str]:
    return sorted(line.split(" ", 4)[4] for line in Path("/proc/self/mountinfo").read_text().splitlines())


def log_lines(path: Path) -> list[str]:
    """The container's output (kubelet log format: time, stream, tag, text)."""
    return [line.split(" ", 3)[3] for line in path.read_text().splitlines()] if path.exists() else []


async def wait_for_line(path: Path, text: str, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if text in log_lines(path):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{text!r} never logged; got {log_lines(path)}")


@pytest.fixture
def volumes(tmp_path):
    clock = FakeClock()
    api = FakeAPI(clock)
    return PodVolumes(tmp_path / "kubelet", pod(), client=api, tokens=TokenManager(api.request_token, clock, jitter=lambda: 0.0), clock=clock), clock


async def test_service_account_volume_in_the_container_and_renewed_live(volumes, tmp_path):
    pod_volumes, clock = volumes
    before = host_mounts()
    await pod_volumes.set_up()
    plan = plan_mounts(pod_volumes.mounts_for(pod()["spec"]["containers"][0]), str(pod_volumes.staging_root))
    log = tmp_path / "c" / "0.log"
    process = ContainerProcess(["sh", "-c", WATCH_TOKEN], {}, None, None, log, mounts=plan)
    await process.start()
    try:
        await wait_for_line(log, "ready")
        clock.advance(2900)  # past 80% of 3607 s
        assert await pod_volumes.refresh() == []
        exit_ = await asyncio.wait_for(process.wait(), 10)
    finally:
        await process.stop(0)
    assert exit_.code == 0, log_lines(log)
    assert log_lines(log) == ["1777", f"644 {SA_MOUNT}/token", f"644 {SA_MOUNT}/ca.crt", f"644 {SA_MOUNT}/namespace", "team",
                              "read-only", "ready", "jwt-2"]
    assert not os.path.lexists("/run/secrets")
    assert host_mounts() == before


async def test_working_dir_and_command_inside_volumes(tmp_path):
    scripts, data = tmp_path / "scripts", tmp_path / "data"
    scripts.mkdir()
    data.mkdir()
    (scripts / "run.sh").write_text("#!/bin/sh\npwd\necho hello > out\n")
    os.chmod(scripts / "run.sh", 0o755)
    (tmp_path / "stage").mkdir()
    plan = plan_mounts([BindMount(str(scripts), "/kubesvc-test/scripts", True), BindMount(str(data), "/kubesvc-test/work", False)],
                       str(tmp_path / "stage"))
    log = tmp_path / "c" / "0.log"
    process = ContainerProcess(["/kubesvc-test/scripts/run.sh"], {}, "/kubesvc-test/work", None, log, mounts=plan)
    await process.start()
    exit_ = await asyncio.wait_for(process.wait(), 10)
    assert (exit_.code, log_lines(log)) == (0, ["/kubesvc-test/work"])
    assert (data / "out").read_text() == "hello\n"  # written through the bind, into the volume
    assert not os.path.lexists("/kubesvc-test")


@pytest.mark.parametrize("mounts, argv, message", [
    (lambda d: [BindMount(str(d / "ro"), "/kubesvc-test/ro", True), BindMount(str(d / "rw"), "/kubesvc-test/ro/inner", False)], ["true"],
     'failed to create containerd task: error mounting "{d}/rw" to rootfs at "/kubesvc-test/ro/inner": Read-only file system'),
    (lambda d: [BindMount(str(d / "ro"), "/kubesvc-test/ro", True)], ["no-such-command-anywhere"],
     'exec: "no-such-command-anywhere": executable file not found in $PATH'),
], ids=["mount-point-in-read-only-volume", "command-not-found"])
async def test_start_errors_are_reported(tmp_path, mounts, argv, message):
    for name in ("ro", "rw", "stage"):
        (tmp_path / name).mkdir()
    plan = plan_mounts(mounts(tmp_path), str(tmp_path / "stage"))
    process = ContainerProcess(argv, {}, None, None, tmp_path / "c" / "0.log", mounts=plan)
    with pytest.raises(StartError) as err:
        await process.start()
    assert str(err.value) == message.format(d=tmp_path)
    assert not os.path.lexists("/kubesvc-test")


async def test_exec_probe_enters_the_containers_mount_namespace(volumes, tmp_path):
    pod_volumes, _ = volumes
    await pod_volumes.set_up()
    plan = plan_mounts(pod_volumes.mounts_for(pod()["spec"]["containers"][0]), str(pod_volumes.staging_root))
    process = ContainerProcess(["sleep", "30"], {}, SA_MOUNT, None, tmp_path / "c" / "0.log", mounts=plan)
    await process.start()
    try:
        seen = await probe_exec(["cat", "namespace"], env={}, netns=None, timeout=5, cwd=SA_MOUNT, pid=process.pid)
        missing = await probe_exec([f"{SA_MOUNT}/no-such-tool"], env={}, netns=None, timeout=5, pid=process.pid)
        outside = await probe_exec(["cat", f"{SA_MOUNT}/namespace"], env={}, netns=None, timeout=5)
    finally:
        await process.stop(0)
    assert (seen.result, seen.output) == (CheckResult.SUCCESS, "team")
    assert (missing.result, missing.error) == (CheckResult.UNKNOWN, f'exec: "{SA_MOUNT}/no-such-tool": executable file not found in $PATH')
    assert outside.result == CheckResult.FAILURE  # the host has no such file: only the container's view does
