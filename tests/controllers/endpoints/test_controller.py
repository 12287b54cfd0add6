"""The controller shell with a fake API: the requests a sync sends (or does not send) in the
cases a live apiserver does not easily produce: a namespace being terminated, a stale cache,
leader-election records, Pod-event batching.

Caches are filled directly (informers are never run); the fake API records every request and
answers from a script.
"""

from __future__ import annotations

import pytest

from kubesvc.client.rest import ENDPOINTS, ApiError
from kubesvc.controllers.endpoints.controller import EndpointsController, StaleInformerCache
from kubesvc.controllers.endpoints.desired import ANNOTATION_LEADER
from kubesvc.controllers.informers import SharedInformers
from kubesvc.util.clock import FakeClock
from tests.support import builders


class FakeResource:
    def __init__(self, api: FakeAPI, resource):
        self.api, self.resource = api, resource

    async def _call(self, verb: str, *args):
        self.api.requests.append((verb, self.resource.plural, *args))
        answer = self.api.answers.pop(0) if self.api.answers else None
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def create(self, obj, namespace=None):
        return await self._call("create", obj) or obj

    async def update(self, obj, namespace=None):
        answer = await self._call("update", obj)
        return answer or {**obj, "metadata": {**obj["metadata"], "resourceVersion": "next"}}

    async def delete(self, name, namespace=None):
        return await self._call("delete", namespace, name)


class FakeAPI:
    def __init__(self):
        self.requests: list[tuple] = []
        self.answers: list = []

    def resource(self, resource):
        return FakeResource(self, resource)


class Events:
    def __init__(self):
        self.recorded: list[tuple[str, str, str]] = []

    def event(self, obj, type_, reason, message, action=""):
        self.recorded.append((type_, reason, message))


@pytest.fixture
def setup():
    api = FakeAPI()
    informers = SharedInformers(api)
    events = Events()
    controller = EndpointsController(api, informers, recorder=events, clock=FakeClock(), batch_period=1.0)
    return api, informers, events, controller


SERVICE = {"metadata": {"name": "web", "namespace": "ns", "uid": "s1"},
           "spec": {"selector": {"app": "web"}, "clusterIP": "10.0.0.1", "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}]}}


def pod(name: str, ip: str) -> dict:
    return builders.pod("ns", name, ips=[ip], labels={"app": "web"}, uid=name, resourceVersion="5")


def forbidden_terminating() -> ApiError:
    body = {"kind": "Status", "reason": "Forbidden", "code": 403,
            "details": {"causes": [{"reason": "NamespaceTerminating", "message": "being terminated", "field": "metadata.namespace"}]}}
    return ApiError(403, "Forbidden", "unable to create new content in namespace ns because it is being terminated", body)


async def test_create_in_terminating_namespace_is_dropped_quietly(setup):
    api, informers, events, controller = setup
    informers.services.indexer.upsert(SERVICE)
    api.answers = [forbidden_terminating()]
    await controller.sync_service("ns/web")  # no exception: no retry
    assert [r[0] for r in api.requests] == ["create"] and events.recorded == []


async def test_other_create_failure_is_an_event_and_a_retry(setup):
    api, informers, events, controller = setup
    informers.services.indexer.upsert(SERVICE)
    api.answers = [ApiError(403, "Forbidden", "endpoints is forbidden: User cannot create", {"kind": "Status"})]
    with pytest.raises(ApiError):
        await controller.sync_service("ns/web")
    assert events.recorded == [("Warning", "FailedToCreateEndpoint",
                                "Failed to create endpoint for service ns/web: endpoints is forbidden: User cannot create")]


async def test_update_puts_the_cached_version_and_a_stale_cache_waits(setup):
    api, informers, events, controller = setup
    informers.services.indexer.upsert(SERVICE)
    informers.pods.indexer.upsert(pod("p1", "10.1.0.1"))
    informers.endpoints.indexer.upsert({"metadata": {"name": "web", "namespace": "ns", "resourceVersion": "41"}, "subsets": []})
    await controller.sync_service("ns/web")
    [(verb, resource, sent)] = api.requests
    assert (verb, resource) == ("update", ENDPOINTS.plural) and sent["metadata"]["resourceVersion"] == "41"
    assert [a["ip"] for a in sent["subsets"][0]["addresses"]] == ["10.1.0.1"]
    # the cache still shows version 41, which this controller has replaced: wait for it
    informers.pods.indexer.upsert(pod("p2", "10.1.0.2"))
    with pytest.raises(StaleInformerCache):
        await controller.sync_service("ns/web")
    assert len(api.requests) == 1


async def test_after_a_create_an_empty_cache_is_stale_until_the_object_arrives(setup):
    api, informers, events, controller = setup
    informers.services.indexer.upsert(SERVICE)
    await controller.sync_service("ns/web")
    informers.pods.indexer.upsert(pod("p1", "10.1.0.1"))
    with pytest.raises(StaleInformerCache):  # not a second POST that would fail with AlreadyExists
        await controller.sync_service("ns/web")
    created = {**api.requests[0][2], "metadata": {**api.requests[0][2]["metadata"], "resourceVersion": "7"}}
    informers.endpoints.indexer.upsert(created)
    controller._on_endpoints_add(created)  # what the informer does when the watch delivers it
    await controller.sync_service("ns/web")
    assert [r[0] for r in api.requests] == ["create", "update"]


async def test_service_gone_deletes_its_endpoints_but_not_a_leader_record(setup):
    api, informers, events, controller = setup
    await controller.sync_service("ns/web")
    assert api.requests == [("delete", ENDPOINTS.plural, "ns", "web")]
    leader = {"metadata": {"name": "kube-scheduler", "namespace": "kube-system", "resourceVersion": "3", "annotations": {ANNOTATION_LEADER: "{}"}}}
    informers.endpoints.indexer.upsert(leader)
    await controller.sync_service("kube-system/kube-scheduler")
    assert len(api.requests) == 1


async def test_not_found_on_delete_is_fine(setup):
    api, informers, events, controller = setup
    api.answers = [ApiError(404, "NotFound", 'endpoints "web" not found', {})]
    await controller.sync_service("ns/web")


async def test_selectorless_and_external_name_services_are_left_alone(setup):
    api, informers, events, controller = setup
    informers.services.indexer.upsert({"metadata": {"name": "manual", "namespace": "ns"}, "spec": {"ports": [{"port": 80}]}})
    informers.services.indexer.upsert({"metadata": {"name": "ext", "namespace": "ns"},
                                       "spec": {"type": "ExternalName", "externalName": "example.com", "selector": {"app": "web"}}})
    informers.endpoints.indexer.upsert({"metadata": {"name": "manual", "namespace": "ns", "resourceVersion": "2"}, "subsets": []})
    await controller.sync_service("ns/manual")
    await controller.sync_service("ns/ext")
    assert api.requests == []


def test_leftover_scan_enqueues_all_but_leader_records(setup):
    api, informers, events, controller = setup
    informers.endpoints.indexer.upsert({"metadata": {"name": "orphan", "namespace": "ns"}})
    informers.endpoints.indexer.upsert({"metadata": {"name": "lock", "namespace": "ns", "annotations": {ANNOTATION_LEADER: "{}"}}})
    controller.check_leftover_endpoints()
    assert len(controller.queue) == 1


def test_pod_events_wait_for_the_batch_period_service_events_do_not(setup):
    api, informers, events, controller = setup
    informers.services.indexer.upsert(SERVICE)
    controller._pod_events.on_add(pod("p1", "10.1.0.1"))
    assert len(controller.queue) == 0  # waiting out --endpoint-updates-batch-period
    controller._enqueue_service(SERVICE)
    assert len(controller.queue) == 1
