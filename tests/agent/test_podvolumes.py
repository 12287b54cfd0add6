"""One Pod's volumes on disk (agent/podvolumes.py): the kubelet's directory layout and modes, the
projected ServiceAccount token renewed at 80% of its lifetime, failures reported per volume, and
the Pod directory removed at the end. The API is a fake; time is a FakeClock."""

from __future__ import annotations

import base64
import os
import stat
from datetime import timedelta

import pytest

from kubesvc.agent.podvolumes import PodVolumes, VolumeSetUpFailed, remove_orphans
from kubesvc.agent.tokens import TokenManager
from kubesvc.agent.volumes import MountConfigError
from kubesvc.client.rest import ApiError
from kubesvc.kernel.mounts import BindMount
from kubesvc.util.clock import FakeClock
from kubesvc.util.golang import rfc3339

SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
KUBE_API_ACCESS = {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
]}}


def pod(*volumes, mounts=()):
    return {"metadata": {"name": "web", "namespace": "team", "uid": "pod-uid-1", "labels": {"app": "web"}},
            "spec": {"serviceAccountName": "robot", "volumes": [KUBE_API_ACCESS, *volumes],
                     "containers": [{"name": "c", "volumeMounts": [{"name": "kube-api-access-x7k2p", "mountPath": SA_MOUNT, "readOnly": True},
                                                                   *mounts]}]}}


class FakeAPI:
    """GETs of ConfigMaps and Secrets, and TokenRequests, with what was asked."""

    def __init__(self, clock: FakeClock):
        self.clock = clock
        self.objects = {
            "/api/v1/namespaces/team/configmaps/kube-root-ca.crt": {"data": {"ca.crt": "CA PEM\n"}},
            "/api/v1/namespaces/team/secrets/creds": {"data": {"password": base64.b64encode(b"hunter2").decode()}},
        }
        self.token_requests: list[tuple[str, str, dict]] = []

    async def get(self, path: str) -> dict:
        if path not in self.objects:
            name = path.rsplit("/", 1)[-1]
            raise ApiError(404, "NotFound", f'configmaps "{name}" not found')
        return self.objects[path]

    async def request_token(self, namespace: str, name: str, request: dict) -> dict:
        self.token_requests.append((namespace, name, request))
        seconds = request["spec"]["expirationSeconds"]
        return {"spec": request["spec"], "status": {"token": f"jwt-{len(self.token_requests)}",
                                                     "expirationTimestamp": rfc3339(self.clock.now() + timedelta(seconds=seconds))}}


@pytest.fixture
def env(tmp_path):
    clock = FakeClock()
    api = FakeAPI(clock)
    tokens = TokenManager(api.request_token, clock, jitter=lambda: 0.0)
    return tmp_path / "kubelet", clock, api, tokens


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


async def test_service_account_volume_files_modes_and_refresh(env):
    kubelet, clock, api, tokens = env
    volumes = PodVolumes(kubelet, pod(), client=api, tokens=tokens, clock=clock)
    await volumes.set_up()
    directory = kubelet / "pods" / "pod-uid-1" / "volumes" / "kubernetes.io~projected" / "kube-api-access-x7k2p"
    assert mode(kubelet / "pods" / "pod-uid-1") == 0o700
    assert mode(directory) == 0o1777  # a memory-backed volume's root, as containers see it upstream
    assert {name: (directory / name).read_text() for name in ("token", "ca.crt", "namespace")} == {
        "token": "jwt-1", "ca.crt": "CA PEM\n", "namespace": "team"}
    assert {name: mode(directory / name) for name in ("token", "ca.crt", "namespace")} == {"token": 0o644, "ca.crt": 0o644, "namespace": 0o644}
    assert api.token_requests == [("team", "robot", {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {
        "expirationSeconds": 3607, "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "pod-uid-1"}}})]
    data_before = os.readlink(directory / "..data")

    clock.advance(2800)  # below 80% of 3607 s: the cached token stays, nothing is rewritten
    assert await volumes.refresh() == []
    assert (directory / "token").read_text() == "jwt-1"
    assert os.readlink(directory / "..data") == data_before

    clock.advance(100)  # past 80%: a new token, swapped in atomically
    assert await volumes.refresh() == []
    assert (directory / "token").read_text() == "jwt-2"
    assert os.readlink(directory / "..data") != data_before
    assert mode(directory / "token") == 0o644

    assert volumes.mounts_for(pod()["spec"]["containers"][0]) == [BindMount(str(directory), SA_MOUNT, True)]
    await volumes.tear_down()
    assert not (kubelet / "pods" / "pod-uid-1").exists()


async def test_missing_configmap_fails_the_volume_and_a_later_refresh_keeps_files(env):
    kubelet, clock, api, tokens = env
    cm = api.objects.pop("/api/v1/namespaces/team/configmaps/kube-root-ca.crt")
    volumes = PodVolumes(kubelet, pod(), client=api, tokens=tokens, clock=clock)
    with pytest.raises(VolumeSetUpFailed) as err:
        await volumes.set_up()
    assert err.value.failures == [("kube-api-access-x7k2p", 'configmap "kube-root-ca.crt" not found')]
    api.objects["/api/v1/namespaces/team/configmaps/kube-root-ca.crt"] = cm
    await volumes.set_up()
    del api.objects["/api/v1/namespaces/team/configmaps/kube-root-ca.crt"]
    assert await volumes.refresh() == [("kube-api-access-x7k2p", 'configmap "kube-root-ca.crt" not found')]
    directory = volumes.dirs["kube-api-access-x7k2p"]
    assert (directory / "ca.crt").read_text() == "CA PEM\n"


async def test_secret_emptydir_and_downward_api_follow_pod_updates(env):
    kubelet, clock, api, tokens = env
    extra = [{"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400}},
             {"name": "scratch", "emptyDir": {}},
             {"name": "info", "downwardAPI": {"defaultMode": 420, "items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]
    spec = pod(*extra)
    volumes = PodVolumes(kubelet, spec, client=api, tokens=tokens, clock=clock)
    await volumes.set_up()
    assert (volumes.dirs["creds"] / "password").read_bytes() == b"hunter2"
    assert mode(volumes.dirs["creds"] / "password") == 0o400
    assert mode(volumes.dirs["scratch"]) == 0o777
    assert (volumes.dirs["info"] / "labels").read_text() == 'app="web"'
    relabelled = {**spec, "metadata": {**spec["metadata"], "labels": {"app": "web", "tier": "front"}}}
    assert await volumes.refresh(relabelled) == []
    assert (volumes.dirs["info"] / "labels").read_text() == 'app="web"\ntier="front"'


async def test_sub_paths_are_made_and_kept_inside_the_volume(env):
    kubelet, clock, api, tokens = env
    spec = pod({"name": "scratch", "emptyDir": {}})
    volumes = PodVolumes(kubelet, spec, client=api, tokens=tokens, clock=clock)
    await volumes.set_up()
    container = {"name": "c", "volumeMounts": [{"name": "scratch", "mountPath": "/logs", "subPath": "app/logs"}]}
    [mount] = volumes.mounts_for(container)
    assert mount == BindMount(str(volumes.dirs["scratch"] / "app" / "logs"), "/logs", False)
    assert mode(volumes.dirs["scratch"] / "app" / "logs") == 0o777
    os.symlink("/etc", volumes.dirs["scratch"] / "escape")
    with pytest.raises(MountConfigError, match='failed to prepare subPath for volumeMount "scratch" of container "c"'):
        volumes.mounts_for({"name": "c", "volumeMounts": [{"name": "scratch", "mountPath": "/x", "subPath": "escape"}]})


async def test_unsupported_volume_kind_is_reported(env):
    kubelet, clock, api, tokens = env
    volumes = PodVolumes(kubelet, pod({"name": "data", "persistentVolumeClaim": {"claimName": "c"}}), client=api, tokens=tokens, clock=clock)
    with pytest.raises(VolumeSetUpFailed) as err:
        await volumes.set_up()
    assert err.value.failures == [("data", "kubesvc cannot mount volumes of type persistentVolumeClaim")]


def test_orphan_pod_directories_are_removed(tmp_path):
    for uid in ("alive", "gone"):
        (tmp_path / "pods" / uid / "volumes").mkdir(parents=True)
    remove_orphans(tmp_path, {"alive"})
    assert sorted(os.listdir(tmp_path / "pods")) == ["alive"]


# ---- fsGroup (SetVolumeOwnership) --------------------------------------------------------------


@pytest.mark.parametrize("mode,is_dir,read_only,expected", [
    (0o644, False, True, 0o644),
    (0o400, False, True, 0o440),
    (0o600, False, False, 0o660),
    (0o755, True, True, 0o2755),
    (0o777, True, False, 0o2777),
    (0o700, True, False, 0o2770),
], ids=["readable file", "owner-only file, read-only volume", "owner-only file, rw volume", "dir", "emptyDir root", "private dir"])
def test_ownership_mode(mode, is_dir, read_only, expected):
    from kubesvc.agent.podvolumes import ownership_mode

    assert ownership_mode(mode, is_dir, read_only) == expected


def test_set_volume_ownership_skips_links(tmp_path):
    import os

    from kubesvc.agent.podvolumes import set_volume_ownership

    (tmp_path / "sub").mkdir(mode=0o755)
    (tmp_path / "sub" / "secret").write_text("x")
    os.chmod(tmp_path / "sub" / "secret", 0o400)
    os.symlink("sub/secret", tmp_path / "link")
    set_volume_ownership(tmp_path / "sub", 5000, True)
    info = os.stat(tmp_path / "sub" / "secret")
    assert (info.st_gid, info.st_mode & 0o7777) == (5000, 0o440)
    assert (os.stat(tmp_path / "sub").st_gid, os.stat(tmp_path / "sub").st_mode & 0o7777) == (5000, 0o2755)
