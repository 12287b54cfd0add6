"""DeleteOptions.propagationPolicy: the apiserver's half of garbage collection.

A DELETE with ``Orphan`` / ``Foreground`` does not delete: it marks the object
(``deletionTimestamp``, ``deletionGracePeriodSeconds: 0``) and gives it the ``orphan`` /
``foregroundDeletion`` finalizer for the garbage collector; ``Background`` (kubectl's default)
deletes at once. No garbage collector runs here, so the marks stay for the tests to see.
Three layers: the pure finalizer rule, the registry in-process, and the server over HTTP with
kubectl and the Python client.
"""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from kubesvc.api.errors import StatusError
from kubesvc.apiserver.registry.store import deletion_finalizers_for_gc
from kubesvc.apiserver.server import build_control_plane
from kubesvc.storage.memory import MemoryBackend
from kubesvc.util.clock import FakeClock

NOW = "2026-01-01T00:00:00Z"


@pytest.mark.parametrize("finalizers, options, default, expected", [
    ([], {}, "", (False, [])),
    ([], {"propagationPolicy": "Background"}, "", (False, [])),
    ([], {"propagationPolicy": "Orphan"}, "", (True, ["orphan"])),
    ([], {"propagationPolicy": "Foreground"}, "", (True, ["foregroundDeletion"])),
    ([], {"orphanDependents": True}, "", (True, ["orphan"])),
    (["foregroundDeletion"], {"orphanDependents": False}, "", (True, [])),
    (["orphan"], {"propagationPolicy": "Background"}, "", (True, [])),
    (["a/b", "foregroundDeletion"], {}, "", (False, ["a/b", "foregroundDeletion"])),
    (["foregroundDeletion", "a/b"], {"propagationPolicy": "Orphan"}, "", (True, ["a/b", "orphan"])),
    ([], {}, "OrphanDependents", (True, ["orphan"])),
    ([], {"propagationPolicy": "Orphan"}, "Unsupported", (False, [])),
    (["orphan"], {}, "Unsupported", (True, [])),
], ids=["none", "background", "orphan", "foreground", "orphanDependents-true", "orphanDependents-false-drops-foreground",
        "background-drops-orphan", "no-policy-keeps-existing", "switch-keeps-others-in-order", "kind-default-orphan",
        "unsupported-kind-never-gets-them", "unsupported-kind-loses-them"])
def test_deletion_finalizers_for_gc(finalizers, options, default, expected):
    assert deletion_finalizers_for_gc(finalizers, options, default) == expected


# ---- the registry, in-process --------------------------------------------------------------


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
async def registry(clock):
    reg, _ = await build_control_plane(MemoryBackend(), clock, ["10.96.0.0/16"])
    return reg


async def _service(registry, name="web", **meta):
    return await registry.store("", "services").create("default", {"metadata": {"name": name, **meta}, "spec": {"ports": [{"port": 80}]}}, field_manager="t")


async def test_policies_mark_switch_and_finally_delete(registry, clock):
    services = registry.store("", "services")
    await _service(registry)
    marked, deleted = await services.delete("default", "web", {"propagationPolicy": "Orphan"})
    meta = marked["metadata"]
    assert not deleted and (meta["deletionTimestamp"], meta["deletionGracePeriodSeconds"], meta["finalizers"]) == (NOW, 0, ["orphan"])
    clock.advance(10)
    switched, deleted = await services.delete("default", "web", {"propagationPolicy": "Foreground"})
    assert not deleted and switched["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert switched["metadata"]["deletionTimestamp"] == NOW  # the first mark's time stays
    again, _ = await services.delete("default", "web", {})  # no policy: keeps what it has, writes nothing
    assert again["metadata"]["resourceVersion"] == switched["metadata"]["resourceVersion"]
    _, deleted = await services.delete("default", "web", {"propagationPolicy": "Background"})
    assert deleted
    with pytest.raises(StatusError) as gone:
        await services.get("default", "web")
    assert gone.value.code == 404


async def test_removing_the_last_gc_finalizer_completes_the_deletion(registry):
    services = registry.store("", "services")
    created = await _service(registry)
    await services.delete("default", "web", {"propagationPolicy": "Foreground"})

    def drop(current):
        del current["metadata"]["finalizers"]
        return current

    await services.guaranteed_update("default", "web", drop, field_manager="gc")
    with pytest.raises(StatusError):
        await services.get("default", "web")
    # the Service's ClusterIP went with it: a new Service may take it
    same_ip = {"metadata": {"name": "same-ip"}, "spec": {"clusterIP": created["spec"]["clusterIP"], "ports": [{"port": 80}]}}
    assert (await services.create("default", same_ip, field_manager="t"))["spec"]["clusterIP"] == created["spec"]["clusterIP"]


async def test_foreground_keeps_other_finalizers(registry):
    await _service(registry, finalizers=["example.com/hold"])
    marked, _ = await registry.store("", "services").delete("default", "web", {"propagationPolicy": "Foreground"})
    assert marked["metadata"]["finalizers"] == ["example.com/hold", "foregroundDeletion"]


async def test_graceful_pod_deletion_with_a_policy(registry, clock):
    pods = registry.store("", "pods")
    await pods.create("default", {"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}}, field_manager="t")
    marked, deleted = await pods.delete("default", "p", {"propagationPolicy": "Orphan"})
    meta = marked["metadata"]
    assert not deleted and (meta["deletionTimestamp"], meta["deletionGracePeriodSeconds"], meta["finalizers"]) == ("2026-01-01T00:00:30Z", 30, ["orphan"])
    # while the grace period runs, a later DELETE changes nothing, not even the finalizers
    same, deleted = await pods.delete("default", "p", {"propagationPolicy": "Foreground"})
    assert not deleted and same["metadata"]["finalizers"] == ["orphan"]

    def drop(current):
        del current["metadata"]["finalizers"]
        return current

    await pods.guaranteed_update("default", "p", drop, field_manager="gc")  # its kubelet still has to finish it
    assert "finalizers" not in (await pods.get("default", "p"))["metadata"]
    clock.advance(5)
    shortened, deleted = await pods.delete("default", "p", {"gracePeriodSeconds": 10})
    assert not deleted and shortened["metadata"]["deletionTimestamp"] == "2026-01-01T00:00:10Z"
    _, deleted = await pods.delete("default", "p", {"gracePeriodSeconds": 0})
    assert deleted


async def test_unscheduled_pod_with_foreground_is_marked_at_once(registry):
    pods = registry.store("", "pods")
    await pods.create("default", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}, field_manager="t")
    marked, deleted = await pods.delete("default", "p", {"propagationPolicy": "Foreground"})
    meta = marked["metadata"]
    assert not deleted and (meta["deletionTimestamp"], meta["deletionGracePeriodSeconds"], meta["finalizers"]) == (NOW, 0, ["foregroundDeletion"])


async def test_events_never_get_gc_finalizers(registry):
    events = registry.store("", "events")
    await events.create("default", {"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
                              "reason": "R", "message": "m", "type": "Normal"}, field_manager="t")
    _, deleted = await events.delete("default", "e", {"propagationPolicy": "Orphan"})
    assert deleted


async def test_marking_bumps_generation_once_and_dry_run_writes_nothing(registry):
    slices = registry.store("discovery.k8s.io", "endpointslices")
    created = await slices.create("default", {"metadata": {"name": "s"}, "addressType": "IPv4", "endpoints": []}, field_manager="t")
    preview, deleted = await slices.delete("default", "s", {"propagationPolicy": "Orphan"}, dry_run=True)
    assert not deleted and preview["metadata"]["finalizers"] == ["orphan"]
    assert await slices.get("default", "s") == created
    marked, _ = await slices.delete("default", "s", {"propagationPolicy": "Orphan"})
    assert marked["metadata"]["generation"] == created["metadata"]["generation"] + 1
    switched, _ = await slices.delete("default", "s", {"propagationPolicy": "Foreground"})
    assert switched["metadata"]["generation"] == marked["metadata"]["generation"]


async def test_a_write_naming_another_uid_is_refused(registry):
    services = registry.store("", "services")
    await _service(registry)

    def other_uid(current):
        current["metadata"]["uid"] = str(uuid.uuid4())
        return current

    with pytest.raises(StatusError) as refused:
        await services.guaranteed_update("default", "web", other_uid, field_manager="t")
    assert refused.value.code == 422 and "metadata.uid" in refused.value.message and "field is immutable" in refused.value.message


# ---- over HTTP: kubectl and the Python client ------------------------------------------------


@pytest.fixture
def ns(apiserver):
    name = f"dp-{uuid.uuid4().hex[:8]}"
    apiserver.kubectl("create", "namespace", name)
    return name


def _create_web(apiserver, ns, name="web"):
    apiserver.kubectl("create", "service", "clusterip", name, "--tcp=80:8080", "-n", ns)


def _meta(apiserver, ns, name="web") -> dict:
    return json.loads(apiserver.kubectl("get", "svc", name, "-n", ns, "-o", "json").stdout)["metadata"]


@pytest.mark.parametrize("cascade, finalizer", [("orphan", "orphan"), ("foreground", "foregroundDeletion")])
def test_kubectl_cascade_marks_the_service_for_the_garbage_collector(apiserver, ns, cascade, finalizer):
    _create_web(apiserver, ns)
    out = apiserver.kubectl("delete", "svc", "web", "-n", ns, f"--cascade={cascade}", "--wait=false").stdout
    assert out.strip() == 'service "web" deleted'
    meta = _meta(apiserver, ns)
    assert meta["finalizers"] == [finalizer] and meta["deletionTimestamp"] and meta["deletionGracePeriodSeconds"] == 0
    # kubectl's default, background, finishes it
    apiserver.kubectl("delete", "svc", "web", "-n", ns)
    assert apiserver.kubectl("get", "svc", "web", "-n", ns, check=False).returncode != 0


def test_kubectl_cascade_background_deletes_at_once(apiserver, ns):
    _create_web(apiserver, ns)
    apiserver.kubectl("delete", "svc", "web", "-n", ns, "--cascade=background", "--wait=false")
    assert "NotFound" in apiserver.kubectl("get", "svc", "web", "-n", ns, check=False).stderr


@pytest.fixture
def core(apiserver):
    return k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=str(apiserver.kubeconfig)))


@pytest.mark.parametrize("how, expected", [
    ({"body": k8s.V1DeleteOptions(propagation_policy="Orphan")}, ["orphan"]),
    ({"body": k8s.V1DeleteOptions(propagation_policy="Foreground")}, ["foregroundDeletion"]),
    ({"propagation_policy": "Foreground"}, ["foregroundDeletion"]),
    ({"body": k8s.V1DeleteOptions(orphan_dependents=True)}, ["orphan"]),
    ({"orphan_dependents": True}, ["orphan"]),
    ({"body": k8s.V1DeleteOptions(propagation_policy="Background")}, None),
], ids=["body-orphan", "body-foreground", "query-foreground", "body-orphanDependents", "query-orphanDependents", "body-background"])
def test_python_client_delete_options(apiserver, core, ns, how, expected):
    _create_web(apiserver, ns)
    answer = core.delete_namespaced_service("web", ns, **how)
    assert answer.metadata.finalizers == expected
    if expected is None:
        with pytest.raises(ApiException) as gone:
            core.read_namespaced_service("web", ns)
        assert gone.value.status == 404
    else:
        assert core.read_namespaced_service("web", ns).metadata.deletion_timestamp is not None


def test_orphan_dependents_and_propagation_policy_together_are_invalid(apiserver, core, ns):
    _create_web(apiserver, ns)
    with pytest.raises(ApiException) as invalid:
        core.delete_namespaced_service("web", ns, body=k8s.V1DeleteOptions(orphan_dependents=True, propagation_policy="Foreground"))
    assert invalid.value.status == 422
    assert json.loads(invalid.value.body)["message"] == (
        'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Invalid value: "Foreground": '
        "orphanDependents and deletionPropagation cannot be both set")
    assert core.read_namespaced_service("web", ns).metadata.deletion_timestamp is None


def test_patch_with_another_objects_uid_is_refused(apiserver, core, ns):
    _create_web(apiserver, ns)
    with pytest.raises(ApiException) as refused:
        core.patch_namespaced_service("web", ns, {"metadata": {"uid": str(uuid.uuid4()), "labels": {"x": "1"}}})
    assert refused.value.status == 422 and "metadata.uid" in json.loads(refused.value.body)["message"]
    assert core.read_namespaced_service("web", ns).metadata.labels == {"app": "web"}
