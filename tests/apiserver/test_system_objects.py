"""System objects kept as kube-apiserver keeps them, and a data directory that is private and
checked before use (issue 15, Deliver 7).

* NamespaceLifecycle admission: ``default``, ``kube-system`` and ``kube-public`` cannot be
  deleted (upstream's 403, dry run included); nothing is created in a terminating namespace.
* The apiserver recreates the ``default/kubernetes`` Service and a deleted ``kube-node-lease``
  within upstream's 10 s.
* The data directory is 0700, the store 0600; a read-only, full or wrong data directory stops
  the server with one line naming it and the cause, a non-zero exit, and nothing written.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.support.netns import wait_until
from tests.support.slowdown import scaled

IMMORTAL = ("default", "kube-system", "kube-public")


def core_api(server) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(server.kubeconfig)))


@pytest.mark.parametrize("namespace", IMMORTAL)
@pytest.mark.parametrize("dry_run", [False, True], ids=["delete", "dry-run"])
def test_system_namespaces_cannot_be_deleted(apiserver, namespace, dry_run):
    result = apiserver.kubectl("delete", "namespace", namespace, *(["--dry-run=server"] if dry_run else []), check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == (f'Error from server (Forbidden): namespaces "{namespace}" is forbidden: '
                                     "this namespace may not be deleted")
    assert apiserver.kubectl("get", "namespace", namespace, "-o", "jsonpath={.status.phase}").stdout == "Active"


def test_deleting_default_is_upstreams_status(apiserver):
    with pytest.raises(ApiException) as caught:
        core_api(apiserver).delete_namespace("default")
    assert caught.value.status == 403
    body = json.loads(caught.value.body)
    assert body["reason"] == "Forbidden"
    assert body["message"] == 'namespaces "default" is forbidden: this namespace may not be deleted'
    assert body["details"] == {"name": "default", "kind": "namespaces"}


def test_kubernetes_service_comes_back(apiserver):
    before = json.loads(apiserver.kubectl("get", "service", "kubernetes", "-n", "default", "-o", "json").stdout)
    apiserver.kubectl("delete", "service", "kubernetes", "-n", "default")
    started = time.monotonic()

    def back():
        result = apiserver.kubectl("get", "service", "kubernetes", "-n", "default", "-o", "json", check=False)
        return json.loads(result.stdout) if result.returncode == 0 else None

    after = wait_until(back, timeout=10, message="the kubernetes Service to come back", interval=0.2)
    assert time.monotonic() - started < 10
    assert after["metadata"]["uid"] != before["metadata"]["uid"]
    assert after["spec"]["clusterIP"] == before["spec"]["clusterIP"] == "10.96.0.1"
    assert after["spec"]["ports"] == before["spec"]["ports"]
    assert after["metadata"]["labels"] == {"provider": "kubernetes", "component": "apiserver"}


def test_kube_node_lease_comes_back(apiserver):
    apiserver.kubectl("delete", "namespace", "kube-node-lease")

    def active():
        result = apiserver.kubectl("get", "namespace", "kube-node-lease", "-o", "jsonpath={.status.phase}", check=False)
        return result.returncode == 0 and result.stdout == "Active"

    wait_until(active, timeout=scaled(60), message="kube-node-lease to come back")


def test_nothing_is_created_in_a_terminating_namespace(apiserver):
    core = core_api(apiserver)
    name = f"term-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    held = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="held", finalizers=["example.com/hold"]))
    core.create_namespaced_config_map(name, held)
    core.delete_namespace(name)
    try:
        wait_until(lambda: core.read_namespace(name).status.phase == "Terminating", timeout=scaled(10), message="Terminating")
        result = apiserver.kubectl("create", "service", "clusterip", "web", "--tcp=80", "-n", name, check=False)
        assert result.returncode == 1
        assert (f'services "web" is forbidden: unable to create new content in namespace {name} because it is being terminated'
                in result.stderr)
        with pytest.raises(ApiException) as caught:
            core.create_namespaced_service(name, client.V1Service(metadata=client.V1ObjectMeta(generate_name="gen-"),
                                                                 spec=client.V1ServiceSpec(ports=[client.V1ServicePort(port=80)])))
        body = json.loads(caught.value.body)
        assert caught.value.status == 403
        assert body["message"].startswith('services "gen-" is forbidden')
        assert {"reason": "NamespaceTerminating", "message": f"namespace {name} is being terminated",
                "field": "metadata.namespace"} in body["details"]["causes"]
    finally:
        core.patch_namespaced_config_map("held", name, {"metadata": {"finalizers": None}})
    wait_until(lambda: name not in [n.metadata.name for n in core.list_namespace().items], timeout=scaled(20), message="the namespace to go")
    result = apiserver.kubectl("create", "service", "clusterip", "web", "--tcp=80", "-n", name, check=False)
    assert f'namespaces "{name}" not found' in result.stderr


# ---- the data directory -------------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_data_directory_is_private(fresh_apiserver, tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    (data / "state.db").touch(mode=0o644)
    os.chmod(data, 0o755)
    os.chmod(data / "state.db", 0o644)
    server = fresh_apiserver(data_dir=data)
    server.kubectl("create", "namespace", "written")  # the WAL holds a write
    assert mode(data) == 0o700
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        assert mode(data / name) == 0o600, name
    harness = {data / "apiserver.log", data / "kubectl-cache"}  # the test's log and kubectl's cache
    readable = [p for p in data.rglob("*") if mode(p) & 0o077 and not harness & {p, *p.parents}]
    assert readable == []


def run_apiserver(data_dir: str, *, mount: str = "") -> subprocess.CompletedProcess:
    """``kubesvc apiserver`` in a mount namespace of its own, after ``mount`` (shell) there."""
    command = f"{mount} && exec {sys.executable} -m kubesvc apiserver --data-dir={data_dir} --secure-port=0" if mount else \
        f"exec {sys.executable} -m kubesvc apiserver --data-dir={data_dir} --secure-port=0"
    return subprocess.run(["unshare", "--mount", "sh", "-c", command], capture_output=True, text=True, timeout=scaled(60),
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


needs_mounts = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root for a mount namespace")


@needs_mounts
@pytest.mark.parametrize("mount, cause", [
    pytest.param("mount --bind {dir} {dir} && mount -o remount,bind,ro {dir}", "Read-only file system", id="read-only"),
    pytest.param("mount -t tmpfs -o size=256k tmpfs {dir}", "No space left on device", id="full"),
])
def test_unusable_data_directory_is_one_line(tmp_path, mount, cause):
    outer = tmp_path / "mnt"
    outer.mkdir()
    data = outer / "data"
    result = run_apiserver(str(data), mount=mount.format(dir=outer))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [f"Error: cannot use data directory {data}: {cause}"]
    assert result.stdout == ""


@needs_mounts
def test_nothing_is_written_to_a_full_data_directory(tmp_path):
    outer = tmp_path / "mnt"
    outer.mkdir()
    listing = f"{sys.executable} -c \"import os; print(sorted(os.listdir('{outer}/data')))\""
    result = subprocess.run(["unshare", "--mount", "sh", "-c",
                             f"mount -t tmpfs -o size=256k tmpfs {outer} && "
                             f"{sys.executable} -m kubesvc apiserver --data-dir={outer}/data --secure-port=0; {listing}"],
                            capture_output=True, text=True, timeout=scaled(60), env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert result.stdout.strip() == "[]"


def test_a_file_in_the_data_directory_path_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = subprocess.run([sys.executable, "-m", "kubesvc", "apiserver", f"--data-dir={blocker}/data", "--secure-port=0"],
                            capture_output=True, text=True, timeout=scaled(60))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [f"Error: cannot use data directory {blocker}/data: Not a directory"]
