"""Generic store semantics, in-process on the memory backend (fast; no HTTP)."""

from __future__ import annotations

import copy
import pytest

from kubesvc.api.errors import StatusError
from kubesvc.api.selectors import parse_label_selector
from kubesvc.apiserver.registry.store import ListOptions
from kubesvc.apiserver.server import build_control_plane
from kubesvc.storage.memory import MemoryBackend
from kubesvc.util.clock import FakeClock


@pytest.fixture
async def registry():
    reg, _ = await build_control_plane(MemoryBackend(), FakeClock(), ["10.96.0.0/16"])
    return reg


def svc(name: str, **extra) -> dict:
    return {"metadata": {"name": name, **extra}, "spec": {"ports": [{"port": 80}]}}


async def test_create_fills_system_fields_and_defaults(registry):
    services = registry.store("", "services")
    created = await services.create("default", svc("web"), field_manager="test")
    meta = created["metadata"]
    assert meta["namespace"] == "default" and meta["uid"] and meta["creationTimestamp"] == "2026-01-01T00:00:00Z"
    assert created["spec"]["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]
    assert meta["managedFields"][0]["manager"] == "test"
    assert await services.get("default", "web") == created


async def test_generate_name_appends_five_characters(registry):
    services = registry.store("", "services")
    created = await services.create("default", {"metadata": {"generateName": "web-"}, "spec": {"ports": [{"port": 80}]}}, field_manager="t")
    name = created["metadata"]["name"]
    assert name.startswith("web-") and len(name) == len("web-") + 5


async def test_missing_namespace_is_404(registry):
    with pytest.raises(StatusError) as err:
        await registry.store("", "services").create("nope", svc("web"), field_manager="t")
    assert (err.value.code, err.value.message) == (404, 'namespaces "nope" not found')


async def test_noop_update_keeps_resource_version(registry):
    services = registry.store("", "services")
    created = await services.create("default", svc("web"), field_manager="t")
    same, _ = await services.update("default", "web", created, field_manager="t")
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert await registry.backend.current_revision() == int(created["metadata"]["resourceVersion"])


async def test_stale_resource_version_is_conflict(registry):
    services = registry.store("", "services")
    created = await services.create("default", svc("web"), field_manager="t")
    newer = dict(created, metadata={**created["metadata"], "labels": {"a": "1"}})
    await services.update("default", "web", newer, field_manager="t")
    stale = dict(created, metadata={**created["metadata"], "labels": {"b": "1"}})
    with pytest.raises(StatusError) as err:
        await services.update("default", "web", stale, field_manager="t")
    assert err.value.code == 409 and err.value.reason == "Conflict"


async def test_status_is_only_written_through_the_subresource(registry):
    services = registry.store("", "services")
    created = await services.create("default", svc("web"), field_manager="t")
    created["status"] = {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}
    main, _ = await services.update("default", "web", created, field_manager="t")
    assert main["status"] == {"loadBalancer": {}}
    status, _ = await services.update("default", "web", created, field_manager="t", subresource="status")
    assert status["status"]["loadBalancer"]["ingress"] == [{"ip": "192.0.2.1"}]


async def test_pod_status_writes_are_checked_by_the_pod_status_rules(registry):
    """podStatusStrategy.ValidateUpdate is ValidatePodStatusUpdate: a status write's IPs and QoS
    class are checked (the Pod's update rules do not look at status)."""
    pods = registry.store("", "pods")
    created = await pods.create("default", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
                                field_manager="t")
    bad = copy.deepcopy(created)
    bad["status"] = {**bad["status"], "podIP": "10.0.0.300", "podIPs": [{"ip": "10.0.0.300"}], "qosClass": "Guaranteed"}
    with pytest.raises(StatusError) as err:
        await pods.update("default", "p", bad, field_manager="kubelet", subresource="status")
    assert err.value.code == 422
    assert [c["message"] for c in err.value.details["causes"]] == [
        'Invalid value: "Guaranteed": field is immutable',
        'Invalid value: "10.0.0.300": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)',
    ]
    good = copy.deepcopy(created)
    good["status"] = {**good["status"], "podIP": "10.0.0.3", "podIPs": [{"ip": "10.0.0.3"}]}
    written, _ = await pods.update("default", "p", good, field_manager="kubelet", subresource="status")
    assert written["status"]["podIPs"] == [{"ip": "10.0.0.3"}] and written["spec"] == created["spec"]
    assert [e["manager"] for e in written["metadata"]["managedFields"]] == ["kubelet", "t"]  # same time: by manager
    # a status written without qosClass (an older kubelet, a hand-made PUT) keeps the live one
    # (podStatusStrategy.PrepareForUpdate backfills it) instead of being refused as changing it
    assert created["status"]["qosClass"] == "BestEffort"
    without = copy.deepcopy(written)
    without["status"] = {k: v for k, v in without["status"].items() if k != "qosClass"} | {"phase": "Running"}
    kept, _ = await pods.update("default", "p", without, field_manager="kubelet", subresource="status")
    assert kept["status"]["qosClass"] == "BestEffort" and kept["status"]["phase"] == "Running"


async def test_finalizers_hold_deletion_until_removed(registry):
    services = registry.store("", "services")
    await services.create("default", svc("web", finalizers=["example.com/x"]), field_manager="t")
    marked, deleted_now = await services.delete("default", "web", {})
    assert not deleted_now and marked["metadata"]["deletionTimestamp"]

    def drop_finalizers(current):
        current["metadata"]["finalizers"] = []
        return current

    await services.guaranteed_update("default", "web", drop_finalizers, field_manager="t")
    with pytest.raises(StatusError) as err:
        await services.get("default", "web")
    assert err.value.code == 404


async def test_pod_on_a_node_is_deleted_gracefully(registry):
    pods = registry.store("", "pods")
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}}
    await pods.create("default", pod, field_manager="t")
    marked, deleted_now = await pods.delete("default", "p", {})
    assert not deleted_now and marked["metadata"]["deletionGracePeriodSeconds"] == 30
    _, deleted_now = await pods.delete("default", "p", {"gracePeriodSeconds": 0})
    assert deleted_now


async def test_list_pages_with_continue_bound_to_first_revision(registry):
    services = registry.store("", "services")
    for i in range(5):
        await services.create("default", svc(f"s{i}"), field_manager="t")
    page, meta = await services.list("default", ListOptions(limit=2))
    assert [o["metadata"]["name"] for o in page] == ["s0", "s1"] and meta["remainingItemCount"] == 3
    await services.delete("default", "s3", {})
    names = [o["metadata"]["name"] for o in page]
    while meta.get("continue"):
        page, meta = await services.list("default", ListOptions(limit=2, continue_token=meta["continue"]))
        names += [o["metadata"]["name"] for o in page]
    assert names == ["s0", "s1", "s2", "s3", "s4"]  # a consistent snapshot: s3 still listed


async def test_label_selector_pages_fill_up(registry):
    services = registry.store("", "services")
    for i in range(10):
        await services.create("default", svc(f"s{i}", labels={"even": str(i % 2 == 0).lower()}), field_manager="t")
    opts = ListOptions(label_selector=parse_label_selector("even=true"), limit=3)
    page, meta = await services.list("default", opts)
    assert [o["metadata"]["name"] for o in page] == ["s0", "s2", "s4"] and meta.get("continue")


async def test_namespace_delete_marks_terminating(registry):
    namespaces = registry.store("", "namespaces")
    await namespaces.create(None, {"metadata": {"name": "x"}}, field_manager="t")
    marked, deleted_now = await namespaces.delete(None, "x", {})
    assert not deleted_now and marked["status"]["phase"] == "Terminating"
    with pytest.raises(StatusError) as err:
        await registry.store("", "services").create("x", svc("web"), field_manager="t")
    assert err.value.code == 403 and "is being terminated" in err.value.message


async def test_service_create_checks_metadata_once_and_still_refuses_bad_metadata(registry):
    """A Service's metadata is checked before allocation and not again in validation (the
    create's own object, unchanged in between): a bad name is still the 422 upstream words,
    no IP is taken for it, and the next good create is validated and allocated as before."""
    services = registry.store("", "services")
    with pytest.raises(StatusError) as err:
        await services.create("default", svc("Bad_Name"), field_manager="t")
    assert err.value.code == 422
    assert 'metadata.name: Invalid value: "Bad_Name": a DNS-1035 label must consist of lower case alphanumeric characters' in err.value.message
    assert not (await registry.backend.list("/registry/ipaddresses/")).kvs
    with pytest.raises(StatusError) as err:
        await services.create("default", {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 0}]}}, field_manager="t")
    assert err.value.code == 422 and "spec.ports[0].port" in err.value.message
    created = await services.create("default", svc("web", labels={"a": "b"}), field_manager="t")
    assert created["spec"]["clusterIP"].startswith("10.96.")
    assert len((await registry.backend.list("/registry/ipaddresses/")).kvs) == 1


async def test_create_timestamps_follow_the_clock_second_by_second():
    """creationTimestamp (and the IPAddress a Service create records) is the clock's second,
    formatted once a second: within a second the same text, a new second (forward or back) its
    own."""
    from datetime import datetime, timezone

    clock = FakeClock(datetime(2026, 1, 1, 0, 0, 0, 900000, tzinfo=timezone.utc))
    reg, _ = await build_control_plane(MemoryBackend(), clock, ["10.96.0.0/16"])
    services = reg.store("", "services")
    stamps = []
    for name, step in (("a", 0), ("b", 0.05), ("c", 0.05), ("d", -1.2)):
        clock.advance(step)
        created = await services.create("default", svc(name), field_manager="t")
        ip = await reg.store("networking.k8s.io", "ipaddresses").get(None, created["spec"]["clusterIP"])
        assert ip["metadata"]["creationTimestamp"] == created["metadata"]["creationTimestamp"]
        stamps.append(created["metadata"]["creationTimestamp"])
    assert stamps == ["2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z", "2025-12-31T23:59:59Z"]



async def test_an_in_process_create_shares_nothing_with_the_callers_object_whatever_its_containers(registry):
    """The create works on a copy of the caller's object: a dict subclass (or a tuple) in it is
    copied too, so neither the create's writes reach the caller nor the caller's later changes
    the object the create answered with (before, a non-dict mapping was the same object in both)."""
    from collections import OrderedDict

    configmaps = registry.store("", "configmaps")
    data, annotations = OrderedDict(k="v"), OrderedDict(a="1")
    created = await configmaps.create("default", {"metadata": {"name": "shared", "annotations": annotations}, "data": data},
                                      field_manager="t")
    data["k"], annotations["a"] = "changed", "changed"
    assert created["data"] == {"k": "v"} and created["metadata"]["annotations"] == {"a": "1"}
    ports = ({"port": 80},)
    with pytest.raises(StatusError):  # a tuple is not a JSON array: refused, and left as it was
        await registry.store("", "services").create("default", {"metadata": {"name": "tupled"}, "spec": {"ports": ports}},
                                                    field_manager="t")
    assert ports == ({"port": 80},)
