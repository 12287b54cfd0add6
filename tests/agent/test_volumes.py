"""The agent's volume decisions (agent/volumes.py): payloads of configMap, secret, downwardAPI and
projected volumes with upstream's modes and errors, TokenRequests, container mounts; and the
mount plan that keeps the host untouched (kernel/mounts.py ``plan_mounts``)."""

from __future__ import annotations

import base64

import pytest

from kubesvc.agent.volumes import (
    FileProjection, MountConfigError, ObjectRef, VolumeError, configmap_payload, container_mounts, downward_api_payload,
    referenced_objects, secret_payload, token_request, volume_dir, volume_payload,
)
from kubesvc.kernel.mounts import BindMount, MountPlanError, plan_mounts

CONFIGMAP = {"data": {"a": "alpha", "b": "beta"}, "binaryData": {"bin": base64.b64encode(b"\x00\x01").decode()}}
SECRET = {"data": {"user": base64.b64encode(b"admin").decode(), "pass": base64.b64encode(b"s3cret").decode()}}


def b(text: str) -> bytes:
    return text.encode()


@pytest.mark.parametrize("source, configmap, expected", [
    ({"name": "cm"}, CONFIGMAP,
     {"a": FileProjection(b"alpha", 0o644), "b": FileProjection(b"beta", 0o644), "bin": FileProjection(b"\x00\x01", 0o644)}),
    ({"name": "cm", "items": [{"key": "a", "path": "dir/first"}, {"key": "bin", "path": "raw", "mode": 0o400}]}, CONFIGMAP,
     {"dir/first": FileProjection(b"alpha", 0o644), "raw": FileProjection(b"\x00\x01", 0o400)}),
    ({"name": "cm", "optional": True, "items": [{"key": "missing", "path": "m"}, {"key": "b", "path": "b"}]}, CONFIGMAP,
     {"b": FileProjection(b"beta", 0o644)}),
    ({"name": "cm", "optional": True}, None, {}),
], ids=["every-key-default-mode", "items-paths-and-modes", "optional-missing-key-skipped", "optional-missing-configmap-empty"])
def test_configmap_payload(source, configmap, expected):
    assert configmap_payload(source, configmap, 0o644) == expected


@pytest.mark.parametrize("source, configmap, message", [
    ({"name": "cm"}, None, 'configmap "cm" not found'),
    ({"name": "cm", "items": [{"key": "nope", "path": "x"}]}, CONFIGMAP, "configmap references non-existent config key: nope"),
], ids=["missing-configmap", "missing-key"])
def test_configmap_payload_errors(source, configmap, message):
    with pytest.raises(VolumeError) as err:
        configmap_payload(source, configmap, 0o644)
    assert str(err.value) == message


def test_secret_payload_decodes_and_honours_modes():
    assert secret_payload({"secretName": "s", "items": [{"key": "pass", "path": "p", "mode": 0o400}]}, SECRET, 0o644) == {
        "p": FileProjection(b"s3cret", 0o400)}
    assert secret_payload({"secretName": "s"}, SECRET, 0o600) == {"user": FileProjection(b"admin", 0o600),
                                                                   "pass": FileProjection(b"s3cret", 0o600)}


@pytest.mark.parametrize("source, secret, message", [
    ({"secretName": "s"}, None, 'secret "s" not found'),
    ({"secretName": "s", "items": [{"key": "nope", "path": "x"}]}, SECRET, "references non-existent secret key: nope"),
], ids=["missing-secret", "missing-key"])
def test_secret_payload_errors(source, secret, message):
    with pytest.raises(VolumeError) as err:
        secret_payload(source, secret, 0o644)
    assert str(err.value) == message


POD = {
    "metadata": {"name": "web", "namespace": "team", "uid": "u-1", "labels": {"b": "2", "a": 'x"y'}, "annotations": {"note": "hi"}},
    "spec": {"serviceAccountName": "robot", "containers": [{"name": "c", "resources": {"limits": {"memory": "64Mi"}}}]},
}


def test_downward_api_payload_values_and_formats():
    items = [
        {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}},
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}, "mode": 0o400},
        {"path": "sub/./note", "fieldRef": {"fieldPath": "metadata.annotations['note']"}},
        {"path": "mem", "resourceFieldRef": {"containerName": "c", "resource": "limits.memory", "divisor": "1Mi"}},
    ]
    assert downward_api_payload(items, POD, 0o644, {"cpu": "2", "memory": "1Gi"}) == {
        "namespace": FileProjection(b"team", 0o644),
        "labels": FileProjection(b'a="x\\"y"\nb="2"', 0o400),  # FormatMap: keys sorted, Go-quoted values
        "sub/note": FileProjection(b"hi", 0o644),
        "mem": FileProjection(b"64", 0o644),
    }


def test_downward_api_errors_aggregate():
    items = [{"path": "a", "fieldRef": {"fieldPath": "spec.nodeName"}}, {"path": "b", "fieldRef": {"fieldPath": "status.podIP"}}]
    with pytest.raises(VolumeError) as err:
        downward_api_payload(items, POD, 0o644, {})
    assert str(err.value) == "[unsupported fieldPath: spec.nodeName, unsupported fieldPath: status.podIP]"


# The volume the ServiceAccount admission plugin adds (admission.go TokenVolumeSource), defaulted.
KUBE_API_ACCESS = {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
]}}


def test_kube_api_access_volume_payload():
    seen = []

    def token(projection):
        seen.append(token_request(POD, projection))
        return "jwt-token"

    objects = {ObjectRef("configmap", "kube-root-ca.crt"): {"data": {"ca.crt": "-----BEGIN CERTIFICATE-----\n"}}}
    assert referenced_objects(KUBE_API_ACCESS) == [ObjectRef("configmap", "kube-root-ca.crt")]
    assert volume_payload(KUBE_API_ACCESS, POD, objects=objects, token=token, node_allocatable={}) == {
        "token": FileProjection(b"jwt-token", 0o644),
        "ca.crt": FileProjection(b"-----BEGIN CERTIFICATE-----\n", 0o644),
        "namespace": FileProjection(b"team", 0o644),
    }
    assert seen == [{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {
        "expirationSeconds": 3607, "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "u-1"}}}]


def test_projected_errors_of_every_source_are_reported_together():
    def token(projection):
        raise VolumeError("failed to fetch token: serviceaccounts \"robot\" not found")

    with pytest.raises(VolumeError) as err:
        volume_payload(KUBE_API_ACCESS, POD, objects={ObjectRef("configmap", "kube-root-ca.crt"): None}, token=token, node_allocatable={})
    assert str(err.value) == '[failed to fetch token: serviceaccounts "robot" not found, configmap "kube-root-ca.crt" not found]'


def test_token_request_with_audience():
    assert token_request(POD, {"audience": "vault", "expirationSeconds": 7200, "path": "t"})["spec"] == {
        "audiences": ["vault"], "expirationSeconds": 7200,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "u-1"}}


def test_volume_dirs_use_the_kubelet_plugin_names(tmp_path):
    assert volume_dir(tmp_path, KUBE_API_ACCESS) == tmp_path / "volumes" / "kubernetes.io~projected" / "kube-api-access-x7k2p"
    assert volume_dir(tmp_path, {"name": "scratch", "emptyDir": {}}) == tmp_path / "volumes" / "kubernetes.io~empty-dir" / "scratch"


MOUNT_POD = {"spec": {"volumes": [KUBE_API_ACCESS, {"name": "scratch", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "c"}}]}}
DIRS = {"kube-api-access-x7k2p": "/v/token", "scratch": "/v/scratch", "cfg": "/v/cfg"}


@pytest.mark.parametrize("mount, expected", [
    ({"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True},
     (BindMount("/v/token", "/var/run/secrets/kubernetes.io/serviceaccount", True), "")),
    ({"name": "cfg", "mountPath": "/etc/app"}, (BindMount("/v/cfg", "/etc/app", True), "")),  # always read-only
    ({"name": "scratch", "mountPath": "/scratch"}, (BindMount("/v/scratch", "/scratch", False), "")),
    ({"name": "scratch", "mountPath": "/scratch", "readOnly": True}, (BindMount("/v/scratch", "/scratch", True), "")),
    ({"name": "scratch", "mountPath": "data/x"}, (BindMount("/v/scratch", "/data/x", False), "")),  # MakeAbsolutePath
    ({"name": "scratch", "mountPath": "/logs", "subPath": "app/logs"}, (BindMount("/v/scratch/app/logs", "/logs", False), "app/logs")),
], ids=["service-account", "configmap-forced-read-only", "emptydir-writable", "emptydir-read-only", "relative-mount-path", "sub-path"])
def test_container_mounts(mount, expected):
    assert container_mounts(MOUNT_POD, {"name": "c", "volumeMounts": [mount]}, DIRS) == [expected]


@pytest.mark.parametrize("mount, message", [
    ({"name": "nope", "mountPath": "/x"}, 'cannot find volume "nope" to mount into container "c"'),
    ({"name": "scratch", "mountPath": "/x", "subPath": "/etc"}, "error SubPath `/etc` must not be an absolute path"),
    ({"name": "scratch", "mountPath": "/x", "subPath": "a/../../b"}, "unable to provision SubPath `a/../../b`: must not contain '..'"),
], ids=["unknown-volume", "absolute-sub-path", "sub-path-backsteps"])
def test_container_mount_errors(mount, message):
    with pytest.raises(MountConfigError) as err:
        container_mounts(MOUNT_POD, {"name": "c", "volumeMounts": [mount]}, DIRS)
    assert str(err.value) == message


# ---- the mount plan: which host directories get a tmpfs copy so that mount points can be made ---

HOST = {"/", "/run", "/run/lock", "/etc", "/etc/app", "/tmp", "/var"}
LINKS = {"/var/run": "/run"}


def host_resolve(path: str) -> str:
    for link, target in LINKS.items():
        if path == link or path.startswith(link + "/"):
            return target + path[len(link):]
    return path


@pytest.mark.parametrize("mounts, shadowed, targets", [
    ([BindMount("/v/t", "/var/run/secrets/kubernetes.io/serviceaccount", True)], ("/", "/run"),
     ["/run/secrets/kubernetes.io/serviceaccount"]),
    ([BindMount("/v/c", "/etc/app", True)], (), ["/etc/app"]),
    ([BindMount("/v/s", "/data", False)], ("/",), ["/data"]),
    ([BindMount("/v/inner", "/data/inner", False), BindMount("/v/s", "/data", False)], ("/",), ["/data", "/data/inner"]),
    ([BindMount("/v/s", "/tmp/cache/x", False), BindMount("/v/c", "/etc/app", True)], ("/", "/tmp"), ["/etc/app", "/tmp/cache/x"]),
], ids=["service-account-through-var-run-link", "existing-directory-no-shadow", "new-top-level", "nested-mount-made-in-outer-volume",
        "shadow-only-the-missing-chain"])
def test_plan_mounts(mounts, shadowed, targets):
    plan = plan_mounts(mounts, "/stage", exists=lambda p: p in HOST, is_dir=lambda p: True, resolve=host_resolve)
    assert plan.shadowed == shadowed
    assert [b.target for b in plan.binds] == targets


def test_plan_mounts_file_source_gets_a_file_mount_point():
    plan = plan_mounts([BindMount("/v/c/app.conf", "/etc/app.conf", True)], "/stage", exists=lambda p: p in HOST,
                       is_dir=lambda p: False, resolve=host_resolve)
    assert plan.file_targets == {"/etc/app.conf"}


def test_plan_refuses_the_root():
    with pytest.raises(MountPlanError, match="cannot mount over the root"):
        plan_mounts([BindMount("/v", "/", False)], "/stage", exists=lambda p: True, is_dir=lambda p: True, resolve=host_resolve)
