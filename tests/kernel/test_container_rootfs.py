"""A container's root filesystem and memory-backed volumes on the real kernel (agent/podvolumes.py
with kernel/mounts.py): with ``securityContext.readOnlyRootFilesystem`` a write to ``/`` or
``/tmp`` fails with "Read-only file system" while its volumes and ``/dev/null`` stay writable;
``emptyDir: {medium: Memory}`` volumes are tmpfs mounts the container sees in ``/proc/mounts``
with the size upstream's ``calculateEmptyDirMemorySize`` gives (the ``sizeLimit``, else the Pod's
memory limit, else the node's memory), removed with the Pod. The processes, mounts and files
are real; the API is a fake (no ConfigMap or token is read by these volumes)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kubesvc.agent.podvolumes import PodVolumes
from kubesvc.agent.runtime import ContainerProcess
from kubesvc.agent.tokens import TokenManager
from kubesvc.kernel.mounts import plan_mounts
from kubesvc.util.clock import FakeClock
from tests.agent.test_podvolumes import FakeAPI
from tests.kernel.test_container_mounts import host_mounts, log_lines

pytestmark = pytest.mark.kernel

POD = {"metadata": {"name": "cache", "namespace": "team", "uid": "pod-uid-rootfs"},
       "spec": {"volumes": [{"name": "scratch", "emptyDir": {}},
                            {"name": "small", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
                            {"name": "podsized", "emptyDir": {"medium": "Memory"}},
                            {"name": "huge", "emptyDir": {"medium": "Memory", "sizeLimit": "1Ti"}}],
                "containers": [{"name": "c", "resources": {"limits": {"memory": "128Mi"}},
                                "securityContext": {"readOnlyRootFilesystem": True},
                                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}, {"name": "small", "mountPath": "/small"},
                                                 {"name": "podsized", "mountPath": "/podsized"},
                                                 {"name": "huge", "mountPath": "/huge"}]}]}}

SCRIPT = """
touch /written-by-a-container 2>&1; echo "root $?"
touch /tmp/written-by-a-container 2>&1; echo "tmp $?"
echo kept > /scratch/file && cat /scratch/file
echo kept > /small/file && cat /small/file
echo x > /dev/null && echo "dev/null writable"
for m in /small /podsized /huge; do grep " $m " /proc/mounts | cut -d' ' -f1-3,4 | tr ',' '\\n' | grep -E '^(tmpfs|size=)' | tr '\\n' ' '; echo; done
"""


def mounts_under(tmp_path: Path) -> list[str]:
    """The host's mounts under this test's directory (other tests make and remove mounts of
    their own, e.g. network namespaces, at the same time)."""
    return [m for m in host_mounts() if m.split()[0].startswith(str(tmp_path))]


async def test_read_only_root_and_memory_volumes(tmp_path):
    clock = FakeClock()
    api = FakeAPI(clock)
    volumes = PodVolumes(tmp_path / "kubelet", POD, client=api, tokens=TokenManager(api.request_token, clock, jitter=lambda: 0.0), clock=clock)
    before = mounts_under(tmp_path)
    await volumes.set_up()
    try:
        container = POD["spec"]["containers"][0]
        plan = plan_mounts(volumes.mounts_for(container), str(volumes.staging_root), read_only_root=True)
        log = tmp_path / "c" / "0.log"
        process = ContainerProcess(["sh", "-c", SCRIPT], {}, None, None, log, mounts=plan)
        await process.start()
        exit_ = await asyncio.wait_for(process.wait(), 20)
        lines = log_lines(log)
        assert exit_.code == 0, lines
        assert lines[:2] == ["touch: cannot touch '/written-by-a-container': Read-only file system", "root 1"], lines
        assert lines[2:4] == ["touch: cannot touch '/tmp/written-by-a-container': Read-only file system", "tmp 1"], lines
        assert lines[4:7] == ["kept", "kept", "dev/null writable"], lines
        # the sizes: sizeLimit 64Mi; none -> the Pod's limit 128Mi; 1Ti is more than the Pod may use -> 128Mi
        assert [line.split() for line in lines[7:10]] == [
            ["tmpfs", "/small", "tmpfs", "rw", "size=65536k"], ["tmpfs", "/podsized", "tmpfs", "rw", "size=131072k"],
            ["tmpfs", "/huge", "tmpfs", "rw", "size=131072k"]], lines
        assert (volumes.directory / "volumes" / "kubernetes.io~empty-dir" / "small" / "file").read_text() == "kept\n"
        assert not Path("/written-by-a-container").exists() and not Path("/tmp/written-by-a-container").exists()
    finally:
        await volumes.tear_down()
    assert before == [] and mounts_under(tmp_path) == []  # the tmpfs volumes went with the Pod
    assert not volumes.directory.exists()


async def test_memory_volume_without_limits_is_the_node_size(tmp_path):
    from kubesvc.kernel import host

    clock = FakeClock()
    api = FakeAPI(clock)
    pod = {"metadata": {"name": "m", "namespace": "team", "uid": "pod-uid-mem"},
           "spec": {"volumes": [{"name": "mem", "emptyDir": {"medium": "Memory"}}],
                    "containers": [{"name": "c", "volumeMounts": [{"name": "mem", "mountPath": "/mem"}]}]}}
    volumes = PodVolumes(tmp_path / "kubelet", pod, client=api, tokens=TokenManager(api.request_token, clock, jitter=lambda: 0.0), clock=clock)
    await volumes.set_up()
    try:
        plan = plan_mounts(volumes.mounts_for(pod["spec"]["containers"][0]), str(volumes.staging_root))
        log = tmp_path / "c" / "0.log"
        process = ContainerProcess(["sh", "-c", "grep ' /mem ' /proc/mounts; touch /tmp/.j20-rw-probe && rm /tmp/.j20-rw-probe && echo rw"],
                                   {}, None, None, log, mounts=plan)
        await process.start()
        await asyncio.wait_for(process.wait(), 20)
        lines = log_lines(log)
        assert f"size={host.memory_total_kib()}k" in lines[0].split(" ")[3].split(","), lines
        assert lines[1] == "rw"  # without readOnlyRootFilesystem the root stays writable
    finally:
        await volumes.tear_down()
