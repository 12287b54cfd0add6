"""ServiceAccount admission (apiserver/admission/serviceaccount.py): the plugin's decisions table
by table, then as a user sees them with kubectl and the official client on a real apiserver
(the ServiceAccount controller is not running there: the test makes ``default`` itself)."""

from __future__ import annotations

import copy
import json
import time

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from kubesvc.apiserver.admission.plugins import resolve_admission_plugins
from kubesvc.apiserver.admission.serviceaccount import (
    Refused, admit_pod, generate_volume_name, mount_service_account_token, secret_reference_problem, should_automount,
    token_volume_source,
)

SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_MOUNT = {"name": "kube-api-access-abcde", "readOnly": True, "mountPath": SA_PATH}
TOKEN_VOLUME = {"name": "kube-api-access-abcde", "projected": {"defaultMode": 420, "sources": [
    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
]}}


def pod(**spec):
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


def accounts(*items):
    table = {(sa.get("metadata") or {}).get("name"): sa for sa in items}
    return lambda namespace, name: table.get(name)


DEFAULT_SA = {"metadata": {"name": "default"}}


def test_token_volume_source_is_upstreams():
    assert {"name": "kube-api-access-abcde", "projected": token_volume_source()} == TOKEN_VOLUME


def test_generated_volume_names():
    name = generate_volume_name()
    assert name.startswith("kube-api-access-") and len(name) == len("kube-api-access-") + 5
    assert set(name.removeprefix("kube-api-access-")) <= set("bcdfghjklmnpqrstvwxz2456789")


@pytest.mark.parametrize("pod_setting, sa_setting, expected", [
    (None, None, True), (None, False, False), (True, False, True), (False, True, False), (False, None, False),
], ids=["unset-true", "sa-false", "pod-true-wins", "pod-false-wins", "pod-false"])
def test_should_automount(pod_setting, sa_setting, expected):
    spec = {} if pod_setting is None else {"automountServiceAccountToken": pod_setting}
    account = {} if sa_setting is None else {"automountServiceAccountToken": sa_setting}
    assert should_automount(account, {"spec": spec}) is expected


def test_default_account_volume_and_mounts_in_every_container():
    new = pod(initContainers=[{"name": "init", "image": "x"}])
    admit_pod(new, "ns", accounts(DEFAULT_SA), lambda: "kube-api-access-abcde")
    assert new["spec"]["serviceAccountName"] == "default"
    assert new["spec"]["volumes"] == [TOKEN_VOLUME]
    assert new["spec"]["initContainers"][0]["volumeMounts"] == [TOKEN_MOUNT]
    assert new["spec"]["containers"][0]["volumeMounts"] == [TOKEN_MOUNT]


@pytest.mark.parametrize("spec, expected_volumes, expected_mounts", [
    ({"containers": [{"name": "c", "volumeMounts": [{"name": "mine", "mountPath": SA_PATH}]}], "volumes": [{"name": "mine", "emptyDir": {}}]},
     [{"name": "mine", "emptyDir": {}}], [[{"name": "mine", "mountPath": SA_PATH}]]),
    ({"containers": [{"name": "c"}], "volumes": [{"name": "kube-api-access-zzzzz", "emptyDir": {}}]},
     [{"name": "kube-api-access-zzzzz", "emptyDir": {}}], [[{**TOKEN_MOUNT, "name": "kube-api-access-zzzzz"}]]),
    ({"containers": [{"name": "a", "volumeMounts": [{"name": "m", "mountPath": SA_PATH}]}, {"name": "b"}], "volumes": [{"name": "m", "emptyDir": {}}]},
     [{"name": "m", "emptyDir": {}}, TOKEN_VOLUME], [[{"name": "m", "mountPath": SA_PATH}], [TOKEN_MOUNT]]),
], ids=["own-mount-at-the-path-keeps-token-out", "existing-kube-api-access-volume-reused", "only-containers-without-a-mount"])
def test_mount_service_account_token(spec, expected_volumes, expected_mounts):
    new = {"spec": copy.deepcopy(spec)}
    mount_service_account_token(new, lambda: "kube-api-access-abcde")
    assert new["spec"]["volumes"] == expected_volumes
    assert [c.get("volumeMounts") for c in new["spec"]["containers"]] == expected_mounts


@pytest.mark.parametrize("new, lookup, message", [
    (pod(), accounts(), 'error looking up service account ns/default: serviceaccount "default" not found'),
    (pod(serviceAccountName="robot"), accounts(DEFAULT_SA), 'error looking up service account ns/robot: serviceaccount "robot" not found'),
    ({"metadata": {"name": "m", "annotations": {"kubernetes.io/config.mirror": "x"}}, "spec": {"serviceAccountName": "default", "containers": []}},
     accounts(DEFAULT_SA), "a mirror pod may not reference service accounts"),
    ({"metadata": {"name": "m", "annotations": {"kubernetes.io/config.mirror": "x"}},
      "spec": {"containers": [], "volumes": [{"name": "s", "secret": {"secretName": "s"}}]}}, accounts(), "a mirror pod may not reference secrets"),
    ({"metadata": {"name": "m", "annotations": {"kubernetes.io/config.mirror": "x"}},
      "spec": {"containers": [], "volumes": [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]}},
     accounts(), "a mirror pod may not use ServiceAccountToken volume projections"),
], ids=["no-default", "named-missing", "mirror-with-account", "mirror-with-secret", "mirror-with-token-projection"])
def test_refusals(new, lookup, message):
    with pytest.raises(Refused) as err:
        admit_pod(new, "ns", lookup)
    assert str(err.value) == message


def test_mirror_pod_is_left_unchanged():
    mirror = {"metadata": {"name": "m", "annotations": {"kubernetes.io/config.mirror": "x"}}, "spec": {"containers": [{"name": "c"}]}}
    before = copy.deepcopy(mirror)
    admit_pod(mirror, "ns", accounts())
    assert mirror == before


def test_image_pull_secrets_copied_when_the_pod_has_none():
    account = {"metadata": {"name": "default"}, "imagePullSecrets": [{"name": "registry"}], "automountServiceAccountToken": False}
    new = pod()
    admit_pod(new, "ns", accounts(account))
    assert new["spec"]["imagePullSecrets"] == [{"name": "registry"}]
    assert "volumes" not in new["spec"]


ENFORCING = {"metadata": {"name": "default", "annotations": {"kubernetes.io/enforce-mountable-secrets": "true"}},
             "secrets": [{"name": "ok"}], "imagePullSecrets": [{"name": "pull"}]}


@pytest.mark.parametrize("spec, message", [
    ({"volumes": [{"name": "v", "secret": {"secretName": "other"}}]},
     'volume with secret.secretName="other" is not allowed because service account default does not reference that secret'),
    ({"containers": [{"name": "c", "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "other", "key": "k"}}}]}]},
     'container c with envVar E referencing secret.secretName="other" is not allowed because service account default does not reference that secret'),
    ({"initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "other"}}]}], "containers": []},
     'init container i with envFrom referencing secret.secretName="other" is not allowed because service account default does not reference that secret'),
    ({"imagePullSecrets": [{"name": "nope"}]},
     'imagePullSecrets[0].name="nope" is not allowed because service account default does not reference that imagePullSecret'),
    ({"volumes": [{"name": "v", "secret": {"secretName": "ok"}}], "imagePullSecrets": [{"name": "pull"}]}, None),
], ids=["volume", "env", "init-envfrom", "pull-secret", "listed-ones-allowed"])
def test_mountable_secrets_enforced(spec, message):
    assert secret_reference_problem(ENFORCING, {"spec": {"containers": [], **spec}}) == message


@pytest.mark.parametrize("enable, disable, running, problems", [
    ("", "", {"NamespaceLifecycle", "ServiceAccount"}, []),
    ("NodeRestriction", "ServiceAccount", {"NamespaceLifecycle", "NodeRestriction"}, []),
    ("LimitRanger", "", None, ['enable-admission-plugins plugin "LimitRanger" is unknown']),
    ("ServiceAccount", "ServiceAccount", None, ["[ServiceAccount] in enable-admission-plugins and disable-admission-plugins overlapped"]),
    ("", "NamespaceLifecycle", None, ['disable-admission-plugins plugin "NamespaceLifecycle" cannot be turned off in kubesvc']),
], ids=["defaults", "enable-and-disable", "unknown", "overlap", "not-switchable"])
def test_admission_plugin_flags(enable, disable, running, problems):
    plugins, found = resolve_admission_plugins(enable, disable)
    assert found == problems
    if running is not None:
        assert plugins == running


# ---- on a real apiserver ----------------------------------------------------------------------


@pytest.fixture
def server(fresh_apiserver):
    return fresh_apiserver("--enable-admission-plugins=ServiceAccount")


def kubectl_json(server, *args):
    return json.loads(server.kubectl(*args, "-o", "json").stdout)


def manifest(name: str, **spec) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                       "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "1"]}], **spec}})


def test_kubectl_pod_gets_the_api_access_volume(server):
    server.kubectl("create", "namespace", "sa-test")
    started = time.monotonic()
    refused = server.kubectl("create", "-n", "sa-test", "-f", "-", input=manifest("early"), check=False)
    assert refused.returncode == 1
    assert refused.stderr.strip() == ('Error from server (Forbidden): error when creating "STDIN": pods "early" is forbidden: '
                                      'error looking up service account sa-test/default: serviceaccount "default" not found')
    assert time.monotonic() - started >= 0.9  # upstream's retries gave the ServiceAccount controller time first

    server.kubectl("create", "serviceaccount", "default", "-n", "sa-test")
    server.kubectl("create", "-n", "sa-test", "-f", "-", input=manifest("web"))
    spec = kubectl_json(server, "get", "pod", "web", "-n", "sa-test")["spec"]
    [volume] = spec["volumes"]
    assert volume["name"].startswith("kube-api-access-")
    assert volume == {**TOKEN_VOLUME, "name": volume["name"]}
    assert spec["serviceAccountName"] == "default"
    assert spec["serviceAccount"] == "default"  # the deprecated field, filled from the new one
    assert spec["containers"][0]["volumeMounts"] == [{"name": volume["name"], "readOnly": True, "mountPath": SA_PATH}]

    server.kubectl("create", "serviceaccount", "quiet", "-n", "sa-test")
    server.kubectl("patch", "serviceaccount", "quiet", "-n", "sa-test", "-p", '{"automountServiceAccountToken": false}')
    server.kubectl("create", "-n", "sa-test", "-f", "-", input=manifest("quiet", serviceAccountName="quiet"))
    assert "volumes" not in kubectl_json(server, "get", "pod", "quiet", "-n", "sa-test")["spec"]


def test_python_client_sees_the_same(server):
    from kubernetes import config

    api_client = config.new_client_from_config(str(server.kubeconfig))
    core = k8s.CoreV1Api(api_client)
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="sa-py")))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("sa-py", k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="p"), spec=k8s.V1PodSpec(
            service_account_name="robot", containers=[k8s.V1Container(name="c", image="busybox")])))
    assert err.value.status == 403
    assert json.loads(err.value.body)["message"] == (
        'pods "p" is forbidden: error looking up service account sa-py/robot: serviceaccount "robot" not found')
    core.create_namespaced_service_account("sa-py", k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name="robot")))
    created = core.create_namespaced_pod("sa-py", k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="p"), spec=k8s.V1PodSpec(
        service_account_name="robot", automount_service_account_token=True,
        containers=[k8s.V1Container(name="c", image="busybox")])))
    assert created.spec.volumes[0].projected.sources[0].service_account_token.expiration_seconds == 3607
    assert created.spec.containers[0].volume_mounts[0].mount_path == SA_PATH
