"""The size of a memory-backed emptyDir (empty_dir.go ``calculateEmptyDirMemorySize`` with
``ResourceConfigForPod``'s memory limit), readOnlyRootFilesystem in the mount plan, and the
mountinfo walk that finds a Pod's tmpfs volumes; expected values written out by hand."""

from __future__ import annotations

import pytest

from kubesvc.agent.podvolumes import memory_volume_size, pod_memory_limit, read_only_root_filesystem, runtime_file_binds
from kubesvc.kernel.mounts import BindMount, mounts_under, plan_mounts

MI = 2**20
NODE = 8192 * MI


def pod(*limits, init=(), overhead=None):
    spec = {"containers": [{"name": f"c{i}", "resources": {"limits": {"memory": m}} if m else {}} for i, m in enumerate(limits)],
            "initContainers": [{"name": f"i{i}", "resources": {"limits": {"memory": m}} if m else {}} for i, m in enumerate(init)]}
    if overhead:
        spec["overhead"] = {"memory": overhead}
    return {"spec": spec}


@pytest.mark.parametrize("p, expected", [
    (pod("128Mi", "64Mi"), 192 * MI), (pod("128Mi", None), None), (pod("128Mi", init=["512Mi"]), 512 * MI),
    (pod("128Mi", init=[None]), None), (pod("100M", overhead="10Mi"), 100_000_000 + 10 * MI),
], ids=["sum", "one-without", "init-larger", "init-without", "decimal-and-overhead"])
def test_pod_memory_limit(p, expected):
    assert pod_memory_limit(p) == expected


@pytest.mark.parametrize("size_limit, p, expected", [
    (None, pod(None), NODE), (None, pod("128Mi"), 128 * MI), ("64Mi", pod("128Mi"), 64 * MI), ("1Ti", pod("128Mi"), 128 * MI),
    ("64Mi", pod(None), 64 * MI), ("0", pod(None), NODE), ("16Gi", pod(None), NODE), (None, pod("16Gi"), NODE),
], ids=["node", "pod-limit", "size-limit", "size-limit-above-pod", "size-limit-only", "zero-ignored", "above-node", "pod-above-node"])
def test_memory_volume_size(size_limit, p, expected):
    volume = {"name": "m", "emptyDir": {"medium": "Memory", **({"sizeLimit": size_limit} if size_limit else {})}}
    assert memory_volume_size(volume, p, NODE) == expected


def test_read_only_root_in_the_plan():
    assert read_only_root_filesystem({"securityContext": {"readOnlyRootFilesystem": True}})
    assert not read_only_root_filesystem({"securityContext": {"readOnlyRootFilesystem": False}}) and not read_only_root_filesystem({})
    plan = plan_mounts([BindMount("/src", "/data")], "/stage", exists=lambda p: True, is_dir=lambda p: True, resolve=lambda p: p,
                       read_only_root=True)
    assert plan.read_only_root and plan.to_dict()["readOnlyRoot"] is True
    assert plan_mounts([], "/stage").to_dict()["readOnlyRoot"] is False


def test_mounts_under_deepest_first():
    mountinfo = "\n".join([
        "22 1 0:21 / / rw - ext4 /dev/root rw",
        "40 22 0:40 / /var/lib/k/pods/u1/volumes/kubernetes.io~empty-dir/a rw - tmpfs tmpfs rw,size=1024k",
        "41 22 0:41 / /var/lib/k/pods/u1/volumes/kubernetes.io~empty-dir/with\\040space rw - tmpfs tmpfs rw",
        "42 40 0:42 / /var/lib/k/pods/u1/volumes/kubernetes.io~empty-dir/a/inner rw - tmpfs tmpfs rw",
        "43 22 0:43 / /var/lib/k/pods/u10 rw - tmpfs tmpfs rw",
    ])
    assert mounts_under("/var/lib/k/pods/u1", mountinfo) == [
        "/var/lib/k/pods/u1/volumes/kubernetes.io~empty-dir/a/inner",
        "/var/lib/k/pods/u1/volumes/kubernetes.io~empty-dir/with space",
        "/var/lib/k/pods/u1/volumes/kubernetes.io~empty-dir/a",
    ]  # u10 is not under u1


def test_resolv_conf_read_only_with_the_root_hosts_writable():
    binds = [BindMount("/pods/u/resolv.conf", "/etc/resolv.conf"), BindMount("/pods/u/etc-hosts", "/etc/hosts")]
    assert [b.read_only for b in runtime_file_binds(binds, True)] == [True, False]
    assert [b.read_only for b in runtime_file_binds(binds, False)] == [False, False]
