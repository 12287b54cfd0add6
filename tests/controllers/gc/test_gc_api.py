"""Garbage collection against a real apiserver, as a user sees it.

A Service owns EndpointSlices and an Endpoints object (``controller: true``,
``blockOwnerDeletion: true``, as the endpoint controllers write them); the user deletes the
Service with ``kubectl delete --cascade=...`` or the ``kubernetes`` Python client, and reads
what is left through the API. The garbage collector runs in the test's event loop; kubectl and
the (synchronous) Python client run in threads so it keeps working meanwhile.

The apiserver is private to this module: a garbage collector deletes whatever in the cluster
has absent owners, so it must not share a server with tests that do not expect one.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from kubesvc.client.rest import ENDPOINTS, ENDPOINTSLICES, SERVICES, ResourceClient, RestClient
from kubesvc.controllers.gc import GarbageCollector
from kubesvc.controllers.informers import SharedInformers
from tests.support.apiserver import running_apiserver
from tests.support.cluster import api_client, create_service, eventually, get_or_none, kubectl, new_namespace, running_task

HOLD = "kubesvc.test/hold"  # a finalizer of the test's own, to keep a dependent around


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_apiserver(tmp_path_factory.mktemp("gc-apiserver")) as running:
        yield running


@pytest.fixture
async def api(server):
    async with api_client(server, "gc-test") as c:
        yield c


@pytest.fixture
async def ns(api):
    return await new_namespace(api, "gc")


@contextlib.asynccontextmanager
async def garbage_collector(api: RestClient):
    gc = GarbageCollector(api, workers=4)
    async with running_task(gc.run()):
        assert await gc.wait_for_sync(20), "garbage collector did not sync"
        yield gc


def owner_ref(owner: dict, **extra) -> dict:
    meta = owner["metadata"]
    return {"apiVersion": "v1", "kind": "Service", "name": meta["name"], "uid": meta["uid"], **extra}


def controller_ref(owner: dict) -> dict:
    return owner_ref(owner, controller=True, blockOwnerDeletion=True)


async def owner_service(api: RestClient, ns: str, name: str = "web") -> dict:
    return await create_service(api, ns, name, {"app": name})


async def create_slice(api: RestClient, ns: str, name: str, refs: list[dict], finalizers=()) -> dict:
    meta: dict = {"name": name, "labels": {"kubernetes.io/service-name": refs[0]["name"] if refs else name}, "ownerReferences": refs}
    if finalizers:
        meta["finalizers"] = list(finalizers)
    body = {"metadata": meta, "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}], "ports": [{"name": "", "port": 80, "protocol": "TCP"}]}
    return await api.resource(ENDPOINTSLICES).create(body, ns)


async def create_endpoints(api: RestClient, ns: str, name: str, refs: list[dict]) -> dict:
    body = {"metadata": {"name": name, "ownerReferences": refs}, "subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]}
    return await api.resource(ENDPOINTS).create(body, ns)


async def service_with_dependents(api: RestClient, ns: str, *, held_slice: bool = False) -> dict:
    """Service "web", EndpointSlices web-a and web-b (web-b optionally held by a finalizer of
    the test's own) and Endpoints "web", all owned by the Service."""
    svc = await owner_service(api, ns)
    ref = controller_ref(svc)
    await create_slice(api, ns, "web-a", [ref])
    await create_slice(api, ns, "web-b", [ref], finalizers=[HOLD] if held_slice else ())
    await create_endpoints(api, ns, "web", [ref])
    return svc


DEPENDENTS = ((ENDPOINTSLICES, "web-a"), (ENDPOINTSLICES, "web-b"), (ENDPOINTS, "web"))


async def all_gone(api: RestClient, ns: str, objects) -> bool:
    return all([await get_or_none(api, resource, name, ns) is None for resource, name in objects])


def python_client(server) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=str(server.kubeconfig)))


# ---- kubectl delete --cascade -----------------------------------------------------------------


async def test_kubectl_cascade_background_deletes_the_service_then_its_dependents(server, api, ns):
    await service_with_dependents(api, ns)
    async with garbage_collector(api):
        result = await kubectl(server, "delete", "svc", "web", "-n", ns, "--cascade=background")
        assert result.stdout.strip() == 'service "web" deleted'
        assert await get_or_none(api, SERVICES, "web", ns) is None  # gone at once
        await eventually(lambda: all_gone(api, ns, DEPENDENTS), message="dependents deleted")


async def test_kubectl_cascade_foreground_keeps_the_service_until_its_dependents_are_gone(server, api, ns):
    await service_with_dependents(api, ns, held_slice=True)
    async with garbage_collector(api):
        deleting = asyncio.ensure_future(kubectl(server, "delete", "svc", "web", "-n", ns, "--cascade=foreground"))
        # the free dependents go; the held one is marked, and the Service waits for it
        await eventually(lambda: all_gone(api, ns, [(ENDPOINTSLICES, "web-a"), (ENDPOINTS, "web")]), message="free dependents deleted")
        held = await eventually(lambda: _marked(api, ENDPOINTSLICES, "web-b", ns), message="held slice marked")
        assert held["metadata"]["finalizers"] == [HOLD]
        await asyncio.sleep(0.5)  # time enough for a wrong garbage collector to let the Service go
        svc = await get_or_none(api, SERVICES, "web", ns)
        assert svc is not None and svc["metadata"]["deletionTimestamp"]
        assert svc["metadata"]["finalizers"] == ["foregroundDeletion"]
        shown = (await kubectl(server, "get", "svc", "web", "-n", ns, "-o", "jsonpath={.metadata.finalizers}")).stdout
        assert shown == '["foregroundDeletion"]'
        assert not deleting.done()  # kubectl is still waiting for the Service to go

        await api.resource(ENDPOINTSLICES).patch("web-b", {"metadata": {"finalizers": None}}, ns)
        result = await asyncio.wait_for(deleting, 30)
        assert result.stdout.strip() == 'service "web" deleted'
        assert await get_or_none(api, SERVICES, "web", ns) is None
        assert await all_gone(api, ns, DEPENDENTS)


async def test_foreground_deletion_goes_down_the_whole_tree_first(server, api, ns):
    """A dependent with dependents of its own is deleted in the foreground too: the Service
    waits for its slice, which waits for the object it owns."""
    svc = await owner_service(api, ns)
    middle = await create_slice(api, ns, "web-a", [controller_ref(svc)])
    leaf_ref = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "name": "web-a", "uid": middle["metadata"]["uid"],
                "controller": True, "blockOwnerDeletion": True}
    await api.resource(ENDPOINTS).create({"metadata": {"name": "leaf", "ownerReferences": [leaf_ref], "finalizers": [HOLD]}}, ns)
    async with garbage_collector(api):
        await kubectl(server, "delete", "svc", "web", "-n", ns, "--cascade=foreground", "--wait=false")
        await eventually(lambda: _marked(api, ENDPOINTS, "leaf", ns), message="leaf marked")
        middle_now = await eventually(lambda: _marked(api, ENDPOINTSLICES, "web-a", ns), message="slice marked")
        assert middle_now["metadata"]["finalizers"] == ["foregroundDeletion"]
        await asyncio.sleep(0.5)
        assert (await get_or_none(api, SERVICES, "web", ns))["metadata"]["finalizers"] == ["foregroundDeletion"]
        assert await get_or_none(api, ENDPOINTSLICES, "web-a", ns) is not None

        await api.resource(ENDPOINTS).patch("leaf", {"metadata": {"finalizers": None}}, ns)
        await eventually(lambda: all_gone(api, ns, [(SERVICES, "web"), (ENDPOINTSLICES, "web-a"), (ENDPOINTS, "leaf")]),
                         message="the whole tree deleted")


async def _marked(api, resource, name, ns):
    obj = await get_or_none(api, resource, name, ns)
    return obj if obj is not None and obj["metadata"].get("deletionTimestamp") else None


async def test_kubectl_cascade_orphan_keeps_the_dependents_without_the_owner_reference(server, api, ns):
    await service_with_dependents(api, ns)
    async with garbage_collector(api):
        result = await kubectl(server, "delete", "svc", "web", "-n", ns, "--cascade=orphan")
        assert result.stdout.strip() == 'service "web" deleted'
        assert await get_or_none(api, SERVICES, "web", ns) is None
        for resource, name in DEPENDENTS:
            dependent = await get_or_none(api, resource, name, ns)
            assert dependent is not None, name
            assert "ownerReferences" not in dependent["metadata"], dependent["metadata"]
        await asyncio.sleep(0.5)  # and they stay: nothing collects orphans
        for resource, name in DEPENDENTS:
            assert await get_or_none(api, resource, name, ns) is not None, name


# ---- the Python client with a DeleteOptions body --------------------------------------------


@pytest.mark.parametrize("policy", ["Background", "Foreground", "Orphan"])
async def test_python_client_delete_options_body(server, api, ns, policy):
    await service_with_dependents(api, ns)
    core = python_client(server)
    async with garbage_collector(api):
        answer = await asyncio.to_thread(core.delete_namespaced_service, "web", ns, body=k8s.V1DeleteOptions(propagation_policy=policy))
        expected_finalizer = {"Background": None, "Foreground": ["foregroundDeletion"], "Orphan": ["orphan"]}[policy]
        assert answer.metadata.finalizers == expected_finalizer
        assert (answer.metadata.deletion_timestamp is not None) == (policy != "Background")
        await eventually(lambda: _is_gone(api, SERVICES, "web", ns), message="service deleted")
        if policy == "Orphan":
            for resource, name in DEPENDENTS:
                dependent = await get_or_none(api, resource, name, ns)
                assert dependent is not None and "ownerReferences" not in dependent["metadata"]
        else:
            await eventually(lambda: all_gone(api, ns, DEPENDENTS), message="dependents deleted")


async def _is_gone(api, resource, name, ns) -> bool:
    return await get_or_none(api, resource, name, ns) is None


# ---- dangling, shared and stale owner references ---------------------------------------------


async def test_dependent_of_an_owner_that_never_existed_is_deleted(server, api, ns):
    ghost_service = {"apiVersion": "v1", "kind": "Service", "name": "ghost", "uid": str(uuid.uuid4())}
    ghost_node = {"apiVersion": "v1", "kind": "Node", "name": "ghost-node", "uid": str(uuid.uuid4())}
    await create_endpoints(api, ns, "orphaned", [ghost_service])
    await create_slice(api, ns, "on-a-ghost-node", [ghost_node])  # a cluster-scoped owner
    svc = await owner_service(api, ns, "real")
    await create_endpoints(api, ns, "real", [controller_ref(svc)])
    async with garbage_collector(api):
        await eventually(lambda: all_gone(api, ns, [(ENDPOINTS, "orphaned"), (ENDPOINTSLICES, "on-a-ghost-node")]),
                         message="dependents of absent owners deleted")
        assert await get_or_none(api, ENDPOINTS, "real", ns) is not None


async def test_dependent_with_two_owners_loses_only_the_deleted_owners_reference(server, api, ns):
    first, second = await owner_service(api, ns, "first"), await owner_service(api, ns, "second")
    await create_slice(api, ns, "shared", [controller_ref(first), owner_ref(second)])
    async with garbage_collector(api):
        await kubectl(server, "delete", "svc", "first", "-n", ns)

        async def only_second():
            shared = await get_or_none(api, ENDPOINTSLICES, "shared", ns)
            assert shared is not None, "the shared slice must survive"
            return shared["metadata"].get("ownerReferences") == [owner_ref(second)]

        await eventually(only_second, message="first owner's reference removed")
        await asyncio.sleep(0.5)
        assert await get_or_none(api, ENDPOINTSLICES, "shared", ns) is not None


async def test_a_recreated_owner_with_the_same_name_does_not_keep_the_old_dependents(server, api, ns):
    old = await owner_service(api, ns)
    await create_endpoints(api, ns, "web", [controller_ref(old)])
    await create_slice(api, ns, "web-old", [controller_ref(old)])
    # no garbage collector yet: the Service is deleted and made again under the same name
    await kubectl(server, "delete", "svc", "web", "-n", ns)
    new = await owner_service(api, ns)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    await create_slice(api, ns, "web-new", [controller_ref(new)])
    async with garbage_collector(api):
        await eventually(lambda: all_gone(api, ns, [(ENDPOINTS, "web"), (ENDPOINTSLICES, "web-old")]), message="old dependents deleted")
        assert await get_or_none(api, ENDPOINTSLICES, "web-new", ns) is not None
        assert (await get_or_none(api, SERVICES, "web", ns))["metadata"]["uid"] == new["metadata"]["uid"]


# ---- monitors share the controller-manager's informers ---------------------------------------


class CountingWatches:
    """The garbage collector's client, recording the paths it watches."""

    def __init__(self, client: RestClient):
        self._client, self.watched = client, []

    def __getattr__(self, name):
        return getattr(self._client, name)

    def resource(self, resource):
        return ResourceClient(self, resource)

    def watch(self, path, params=None):
        self.watched.append(path)
        return self._client.watch(path, params)


async def test_monitors_share_the_informers_controllers_already_run(server, api, ns):
    """Given the controller-manager's shared informers (here EndpointSlices'), the garbage
    collector watches those through them, not with a second watch of its own (upstream's
    ObjectOrMetadataInformerFactory), still deletes the dependents they show, and leaves no
    handler behind when it stops."""
    informers = SharedInformers(api)
    slices = informers.endpoint_slices
    informers.start()
    counting = CountingWatches(api)
    try:
        assert await informers.wait_for_sync(20)
        handlers = len(slices._handlers)
        await service_with_dependents(api, ns)
        gc = GarbageCollector(counting, workers=4, informers=informers)
        async with running_task(gc.run()):
            assert await gc.wait_for_sync(20), "garbage collector did not sync"
            assert len(slices._handlers) == handlers + 1
            await eventually(lambda: any(path.endswith("/services") for path in counting.watched), message="its own watch of Services")
            assert not [path for path in counting.watched if path.endswith("/endpointslices")], counting.watched
            await api.resource(SERVICES).delete("web", ns)
            await eventually(lambda: all_gone(api, ns, DEPENDENTS), message="dependents deleted")
        assert len(slices._handlers) == handlers
    finally:
        await informers.stop()
