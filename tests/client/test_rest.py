"""RestClient against the real apiserver: verbs, paging, selectors, watch, errors.

Each test works in its own namespace, made through the client itself (the ``client`` and
``namespace`` fixtures of tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

import pytest

from kubesvc.client import rest
from kubesvc.client.kubeconfig import ClientConfig, load_kubeconfig
from kubesvc.client.rest import (
    ENDPOINTS,
    NAMESPACES,
    NODES,
    SERVICES,
    ApiError,
    ConnectionFailed,
    Resource,
    RestClient,
    is_already_exists,
    is_conflict,
    is_gone,
    is_not_found,
)
from tests.support.apiserver import free_port


def _service(name: str, port: int = 80, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}, "spec": {"ports": [{"port": port}]}}


def _endpoints(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


# -- pure: paths and error decoding ---------------------------------------------------------


@pytest.mark.parametrize(
    "resource, namespace, name, subresource, path",
    [
        (SERVICES, "ns", None, None, "/api/v1/namespaces/ns/services"),
        (SERVICES, None, None, None, "/api/v1/services"),
        (SERVICES, "ns", "web", "status", "/api/v1/namespaces/ns/services/web/status"),
        (rest.ENDPOINTSLICES, "ns", "web-abc", None, "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices/web-abc"),
        (NODES, None, "n1", None, "/api/v1/nodes/n1"),
        (NAMESPACES, None, "ns", "finalize", "/api/v1/namespaces/ns/finalize"),
        (rest.IPADDRESSES, None, "10.96.0.1", None, "/apis/networking.k8s.io/v1/ipaddresses/10.96.0.1"),
    ],
    ids=["namespaced-list", "all-namespaces", "status", "grouped", "cluster-scoped", "namespace-sub", "ipaddress"],
)
def test_resource_paths(resource, namespace, name, subresource, path):
    assert resource.path(namespace, name, subresource) == path


@pytest.mark.parametrize(
    "status, body, reason, message",
    [
        (404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": 'services "x" not found'}, "NotFound", 'services "x" not found'),
        (200, {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}, "Expired", "too old"),
        (409, {"kind": "Status", "code": 409, "message": "m"}, "Conflict", "m"),
        (502, "<html>bad gateway</html>", "Unknown", "<html>bad gateway</html>"),
        (503, b"", "ServiceUnavailable", ""),
    ],
    ids=["status-body", "status-code-wins", "reason-from-code", "not-json", "empty"],
)
def test_api_error_from_status(status, body, reason, message):
    err = ApiError.from_status(status, body)
    assert (err.reason, err.message) == (reason, message)
    assert err.status == (body["code"] if isinstance(body, dict) else status)


def test_error_predicates():
    gone = ApiError(410, "Expired", "too old")
    assert is_gone(gone) and not is_not_found(gone)
    assert is_conflict(ApiError(409, "Conflict", "")) and not is_already_exists(ApiError(409, "Conflict", ""))
    assert is_already_exists(ApiError(409, "AlreadyExists", ""))
    assert not is_not_found(ValueError("x"))


async def test_namespaced_object_calls_need_a_namespace():
    async with RestClient(ClientConfig(server="http://127.0.0.1:1")) as c:
        with pytest.raises(ValueError, match="services are namespaced"):
            await c.resource(SERVICES).get("web")
        with pytest.raises(ValueError, match="services are namespaced"):
            await c.resource(SERVICES).create(_service("web"))


async def test_refused_connection_is_connection_failed():
    async with RestClient(ClientConfig(server=f"http://127.0.0.1:{free_port()}")) as c:
        with pytest.raises(ConnectionFailed, match="GET http://127.0.0.1:.*/api/v1/nodes"):
            await c.resource(NODES).list()
        with pytest.raises(ConnectionFailed, match="watch"):
            async for _ in c.resource(NODES).watch():
                pass


# -- against the server ----------------------------------------------------------------------


async def test_service_lifecycle(client, namespace):
    services = client.resource(SERVICES)
    created = await services.create(_service("web", app="web"), namespace)
    assert created["kind"] == "Service" and created["metadata"]["uid"]
    assert created["metadata"]["namespace"] == namespace

    fetched = await services.get("web", namespace)
    assert fetched["metadata"]["uid"] == created["metadata"]["uid"]

    fetched["spec"]["ports"][0]["port"] = 81
    updated = await services.update(fetched)
    assert updated["spec"]["ports"][0]["port"] == 81
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])

    patched = await services.patch("web", {"metadata": {"labels": {"tier": "front"}}}, namespace)
    assert patched["metadata"]["labels"] == {"app": "web", "tier": "front"}

    patched["status"] = {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}
    with_status = await services.update_status(patched)
    assert with_status["status"]["loadBalancer"]["ingress"] == [{"ip": "192.0.2.10"}]

    deleted = await services.delete("web", namespace, propagation_policy="Background", grace_period_seconds=0)
    assert deleted["kind"] == "Service"  # Services answer DELETE with the object
    with pytest.raises(ApiError) as raised:
        await services.get("web", namespace)
    assert is_not_found(raised.value)
    assert raised.value.message == 'services "web" not found'


async def test_stale_update_conflicts_and_duplicate_create_already_exists(client, namespace):
    endpoints = client.resource(ENDPOINTS)
    first = await endpoints.create(_endpoints("e"), namespace)
    await endpoints.patch("e", {"metadata": {"labels": {"v": "2"}}}, namespace)
    with pytest.raises(ApiError) as stale:
        await endpoints.update(first)
    assert is_conflict(stale.value) and stale.value.status == 409
    assert stale.value.body["kind"] == "Status"
    with pytest.raises(ApiError) as duplicate:
        await endpoints.create(_endpoints("e"), namespace)
    assert is_already_exists(duplicate.value)
    assert duplicate.value.message == 'endpoints "e" already exists'


@pytest.mark.parametrize(
    "patch_type, body, labels",
    [
        ("merge", {"metadata": {"labels": {"b": "2", "a": None}}}, {"b": "2"}),
        ("strategic", {"metadata": {"labels": {"b": "2"}}}, {"a": "1", "b": "2"}),
        ("json", [{"op": "add", "path": "/metadata/labels/b", "value": "2"}], {"a": "1", "b": "2"}),
        ("application/merge-patch+json", {"metadata": {"labels": {"a": "3"}}}, {"a": "3"}),
    ],
    ids=["merge", "strategic", "json", "content-type"],
)
async def test_patch_types(client, namespace, patch_type, body, labels):
    endpoints = client.resource(ENDPOINTS)
    await endpoints.create(_endpoints("p", a="1"), namespace)
    patched = await endpoints.patch("p", body, namespace, patch_type=patch_type)
    assert patched["metadata"]["labels"] == labels


async def test_server_side_apply_creates_then_updates(client, namespace):
    endpoints = client.resource(ENDPOINTS)
    manifest = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "applied", "namespace": namespace, "labels": {"x": "1"}}}
    await endpoints.patch("applied", manifest, namespace, patch_type="apply", force=True)
    manifest["metadata"]["labels"]["x"] = "2"
    applied = await endpoints.patch("applied", manifest, namespace, patch_type="apply", force=True)
    assert applied["metadata"]["labels"] == {"x": "2"}


async def test_field_manager_is_recorded(apiserver, namespace):
    async with RestClient(load_kubeconfig(apiserver.kubeconfig), field_manager="test-manager") as c:
        created = await c.resource(ENDPOINTS).create(_endpoints("owned", a="1"), namespace)
    managers = {entry["manager"] for entry in created["metadata"].get("managedFields", [])}
    assert managers == {"test-manager"}


async def test_list_pages_through_everything_at_one_resource_version(client, namespace):
    endpoints = client.resource(ENDPOINTS)
    for i in range(5):
        await endpoints.create(_endpoints(f"e{i}", parity=str(i % 2)), namespace)
    first_page = await client.get(ENDPOINTS.path(namespace), {"limit": 2})
    assert len(first_page["items"]) == 2 and first_page["metadata"]["continue"]

    listed = await endpoints.list(namespace, limit=2)
    assert [i["metadata"]["name"] for i in listed["items"]] == [f"e{i}" for i in range(5)]
    assert listed["metadata"]["resourceVersion"] and "continue" not in listed["metadata"]
    assert listed["kind"] == "EndpointsList"


async def test_selectors(client, namespace):
    endpoints = client.resource(ENDPOINTS)
    for i in range(4):
        await endpoints.create(_endpoints(f"e{i}", parity=str(i % 2)), namespace)
    odd = await endpoints.list(namespace, label_selector="parity=1")
    assert [i["metadata"]["name"] for i in odd["items"]] == ["e1", "e3"]
    named = await endpoints.list(namespace, field_selector="metadata.name=e2")
    assert [i["metadata"]["name"] for i in named["items"]] == ["e2"]
    everywhere = await endpoints.list(field_selector=f"metadata.namespace={namespace}")
    assert len(everywhere["items"]) == 4


async def test_cluster_scoped_resources(client):
    nodes = client.resource(NODES)
    name = f"node-{uuid.uuid4().hex[:8]}"
    created = await nodes.create({"metadata": {"name": name, "labels": {"t": "1"}}})
    assert "namespace" not in created["metadata"]
    assert (await nodes.get(name))["metadata"]["uid"] == created["metadata"]["uid"]
    await nodes.delete(name)
    with pytest.raises(ApiError) as raised:
        await nodes.get(name)
    assert is_not_found(raised.value)


@pytest.mark.parametrize(
    "resource",
    [rest.SERVICES, rest.ENDPOINTS, rest.ENDPOINTSLICES, rest.PODS, rest.NODES, rest.NAMESPACES, rest.EVENTS, rest.LEASES, rest.IPADDRESSES, rest.SERVICECIDRS],
    ids=lambda r: r.plural,
)
async def test_every_predefined_resource_is_served(client, resource: Resource):
    listed = await client.resource(resource).list()
    assert listed["kind"] == f"{resource.kind}List"
    assert listed["apiVersion"] == resource.api_version
    assert isinstance(listed["items"], list)


async def test_watch_streams_changes_in_order(client, namespace):
    endpoints = client.resource(ENDPOINTS)
    start = (await endpoints.list(namespace))["metadata"]["resourceVersion"]
    await endpoints.create(_endpoints("w"), namespace)
    await endpoints.patch("w", {"metadata": {"labels": {"v": "2"}}}, namespace)
    await endpoints.delete("w", namespace)

    seen = []
    async with contextlib.aclosing(endpoints.watch(namespace, resource_version=start, timeout_seconds=30)) as events:
        async for event_type, obj in events:
            seen.append((event_type, obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))
            if event_type == "DELETED":
                break
    assert [s[:2] for s in seen] == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]
    versions = [int(s[2]) for s in seen]
    assert versions == sorted(versions) and versions[0] > int(start)


async def test_watch_sends_bookmarks_and_ends_at_timeout(client, namespace):
    began = time.monotonic()
    events = [e async for e in client.resource(ENDPOINTS).watch(namespace, timeout_seconds=3, allow_watch_bookmarks=True)]
    assert 2 <= time.monotonic() - began < 10
    assert [t for t, _ in events] == ["BOOKMARK"]
    assert events[0][1]["metadata"]["resourceVersion"]


async def test_watch_label_selector_reports_leaving_and_entering(client, namespace):
    endpoints = client.resource(ENDPOINTS)
    await endpoints.create(_endpoints("in", app="a"), namespace)
    await endpoints.create(_endpoints("out", app="b"), namespace)
    start = (await endpoints.list(namespace))["metadata"]["resourceVersion"]
    await endpoints.patch("in", {"metadata": {"labels": {"app": "b"}}}, namespace)
    await endpoints.patch("out", {"metadata": {"labels": {"app": "a"}}}, namespace)
    seen = []
    async with contextlib.aclosing(endpoints.watch(namespace, label_selector="app=a", resource_version=start, timeout_seconds=30)) as events:
        async for event_type, obj in events:
            seen.append((event_type, obj["metadata"]["name"]))
            if len(seen) == 2:
                break
    assert seen == [("DELETED", "in"), ("ADDED", "out")]


async def test_unauthorized_is_an_api_error(apiserver):
    config = load_kubeconfig(apiserver.kubeconfig)
    async with RestClient(ClientConfig(server=config.server, token="wrong", ca_pem=config.ca_pem)) as c:
        with pytest.raises(ApiError) as raised:
            await c.resource(NAMESPACES).list()
    assert (raised.value.status, raised.value.reason) == (401, "Unauthorized")


async def test_watch_from_a_compacted_version_raises_gone(fresh_apiserver):
    server = fresh_apiserver("--etcd-compaction-interval=0.5", "--compaction-retain-revisions=5")
    async with RestClient(load_kubeconfig(server.kubeconfig)) as c:
        endpoints = c.resource(ENDPOINTS)
        first = await endpoints.create(_endpoints("old"), "default")
        for i in range(10):
            await endpoints.patch("old", {"metadata": {"labels": {"i": str(i)}}}, "default")
        raised = None
        for _ in range(50):  # until a compaction pass has run (every 0.5 s)
            try:
                async for _ in endpoints.watch("default", resource_version=first["metadata"]["resourceVersion"], timeout_seconds=1):
                    pass
            except ApiError as err:
                raised = err
                break
            await asyncio.sleep(0.1)
    assert raised is not None and is_gone(raised)
    assert raised.reason == "Expired" and raised.message.startswith("too old resource version")
