"""The official ``kubernetes`` Python client (37.x, strict pydantic models) against the server."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from kubernetes import client, config, dynamic, watch
from kubernetes.client.rest import ApiException


def api_client(server) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(server.kubeconfig))


@pytest.fixture
def core(apiserver):
    return client.CoreV1Api(api_client(apiserver))


@pytest.fixture
def ns(core):
    name = f"py-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def service(name: str, **labels) -> client.V1Service:
    return client.V1Service(
        metadata=client.V1ObjectMeta(name=name, labels=labels or None),
        spec=client.V1ServiceSpec(selector={"app": name}, ports=[client.V1ServicePort(port=80, target_port=8080)]),
    )


def test_crud_round_trip_with_defaults(core, ns):
    created = core.create_namespaced_service(ns, service("web"))
    assert created.spec.type == "ClusterIP" and created.spec.ports[0].protocol == "TCP"
    assert created.metadata.uid and created.metadata.resource_version
    assert [s.metadata.name for s in core.list_namespaced_service(ns).items] == ["web"]
    read = core.read_namespaced_service("web", ns)
    assert read.metadata.resource_version == created.metadata.resource_version
    read.metadata.labels = {"x": "1"}
    replaced = core.replace_namespaced_service("web", ns, read)
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    deleted = core.delete_namespaced_service("web", ns)
    assert isinstance(deleted, client.V1Service) and deleted.metadata.name == "web"
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_service("web", ns)
    assert missing.value.status == 404
    assert json.loads(missing.value.body)["message"] == 'services "web" not found'


def test_stale_update_is_409_conflict(core, ns):
    created = core.create_namespaced_service(ns, service("web"))
    core.patch_namespaced_service("web", ns, {"metadata": {"labels": {"first": "yes"}}})
    created.metadata.labels = {"second": "yes"}
    with pytest.raises(ApiException) as stale:
        core.replace_namespaced_service("web", ns, created)
    body = json.loads(stale.value.body)
    assert stale.value.status == 409 and body["reason"] == "Conflict"
    assert body["message"] == ('Operation cannot be fulfilled on services "web": the object has been modified; '
                               "please apply your changes to the latest version and try again")


def test_patch_dict_list_merge_and_apply(core, ns):
    core.create_namespaced_service(ns, service("web"))
    core.patch_namespaced_service("web", ns, {"metadata": {"labels": {"smp": "1"}}})
    core.patch_namespaced_service("web", ns, [{"op": "add", "path": "/metadata/annotations", "value": {"jp": "1"}}])
    merged = core.patch_namespaced_service("web", ns, {"metadata": {"labels": {"smp": None, "mp": "1"}}}, _content_type="application/merge-patch+json")
    assert merged.metadata.labels == {"mp": "1"} and merged.metadata.annotations == {"jp": "1"}
    applied = core.patch_namespaced_service(
        "applied", ns,
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "applied"}, "spec": {"ports": [{"port": 81}]}},
        field_manager="py", _content_type="application/apply-patch+yaml")
    assert applied.spec.ports[0].port == 81
    assert any(m.manager == "py" and m.operation == "Apply" for m in applied.metadata.managed_fields)


def test_delete_collection_by_label(core, ns):
    for name in ("a", "b", "c"):
        core.create_namespaced_service(ns, service(name, dc="1" if name != "c" else "0"))
    core.delete_collection_namespaced_service(ns, label_selector="dc=1")
    assert [s.metadata.name for s in core.list_namespaced_service(ns).items] == ["c"]


def test_watch_delivers_events_bookmarks_and_ends_at_timeout(core, ns):
    rv = core.list_namespaced_service(ns).metadata.resource_version
    core.create_namespaced_service(ns, service("w1"))
    core.patch_namespaced_service("w1", ns, {"metadata": {"labels": {"v": "2"}}})
    core.delete_namespaced_service("w1", ns)
    started = time.monotonic()
    events = list(watch.Watch().stream(core.list_namespaced_service, ns, resource_version=rv, timeout_seconds=4, allow_watch_bookmarks=True))
    elapsed = time.monotonic() - started
    kinds = [e["type"] for e in events]
    assert kinds[:3] == ["ADDED", "MODIFIED", "DELETED"]
    assert "BOOKMARK" in kinds[3:]
    assert events[0]["object"].metadata.name == "w1"
    assert 3 <= elapsed < 8


def test_watch_without_resource_version_starts_with_current_objects(core, ns):
    core.create_namespaced_service(ns, service("pre"))
    events = list(watch.Watch().stream(core.list_namespaced_service, ns, timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "pre")]


def test_watch_below_compaction_is_410(fresh_apiserver):
    server = fresh_apiserver("--etcd-compaction-interval=0.2", "--compaction-retain-revisions=2")
    core = client.CoreV1Api(api_client(server))
    old_rv = core.list_namespaced_service("default").metadata.resource_version
    for i in range(6):
        core.create_namespaced_service("default", service(f"s{i}"))
    time.sleep(1.0)
    with pytest.raises(ApiException) as expired:
        list(watch.Watch().stream(core.list_namespaced_service, "default", resource_version=old_rv, timeout_seconds=2))
    assert expired.value.status == 410
    assert "too old resource version" in expired.value.reason


def test_dynamic_client_get_and_server_side_apply(apiserver, ns):
    dyn = dynamic.DynamicClient(api_client(apiserver))
    services = dyn.resources.get(api_version="v1", kind="Service")
    body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "dyn", "namespace": ns}, "spec": {"ports": [{"port": 53, "protocol": "UDP"}]}}
    services.server_side_apply(body=body, field_manager="dyn", namespace=ns)
    got = services.get(name="dyn", namespace=ns)
    assert got.spec.ports[0].protocol == "UDP" and got.spec.ports[0].targetPort == 53
    slices = dyn.resources.get(api_version="discovery.k8s.io/v1", kind="EndpointSlice")
    assert slices.get(namespace=ns).items == []


def test_endpointslice_create_list_watch(apiserver, ns):
    disc = client.DiscoveryV1Api(api_client(apiserver))
    rv = disc.list_namespaced_endpoint_slice(ns).metadata.resource_version
    body = client.V1EndpointSlice(
        metadata=client.V1ObjectMeta(name="s1", labels={"kubernetes.io/service-name": "web"}), address_type="IPv4",
        endpoints=[client.V1Endpoint(addresses=["10.0.0.1"], conditions=client.V1EndpointConditions(ready=True))],
        ports=[client.DiscoveryV1EndpointPort(port=80, name="http")])
    created = disc.create_namespaced_endpoint_slice(ns, body)
    assert created.address_type == "IPv4" and created.ports[0].protocol == "TCP"
    assert created.metadata.generation == 1
    events = list(watch.Watch().stream(disc.list_namespaced_endpoint_slice, ns, resource_version=rv, timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "s1")]


def test_bookmark_of_a_quiet_watch_carries_the_current_revision(core, ns):
    other = f"{ns}-other"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    rv = core.list_namespaced_service(ns).metadata.resource_version
    latest = None
    for name in ("a", "b", "c"):
        latest = core.create_namespaced_service(other, service(name)).metadata.resource_version
    events = list(watch.Watch().stream(core.list_namespaced_service, ns, resource_version=rv, timeout_seconds=3, allow_watch_bookmarks=True))
    bookmarks = [e["object"]["metadata"]["resourceVersion"] for e in events if e["type"] == "BOOKMARK"]
    assert [e["type"] for e in events] == ["BOOKMARK"]
    assert int(bookmarks[0]) >= int(latest) > int(rv)
