"""The scheduler against a real apiserver: Pods get bound through ``pods/binding``, spread over
the Ready Nodes, with kube-scheduler's Events; an unschedulable Pod gets FailedScheduling and
PodScheduled=False, and is placed once a Node changes to fit it."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import datetime, timezone

from kubesvc.client.rest import EVENTS, NODES, PODS, ApiError
from kubesvc.controllers.scheduler import controller as scheduler_controller
from kubesvc.controllers.scheduler.controller import Scheduler
from tests.support.cluster import api_client, eventually, new_namespace, running_controller


async def ready_node(client, name: str, *, labels: dict | None = None, unschedulable: bool = False) -> dict:
    body = {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}}}
    if unschedulable:
        body["spec"] = {"unschedulable": True}
    created = await client.resource(NODES).create(body)
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    created["status"] = {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now,
                                         "lastTransitionTime": now}]}
    return await client.resource(NODES).update_status(created)


async def pending_pod(client, namespace: str, name: str, **spec) -> dict:
    body = {"metadata": {"name": name, "namespace": namespace}, "spec": {"containers": [{"name": "app", "image": "app"}], **spec}}
    return await client.resource(PODS).create(body)


async def events_of(client, namespace: str, name: str) -> list[dict]:
    listing = await client.resource(EVENTS).list(namespace, field_selector=f"involvedObject.name={name}")
    return listing["items"]


async def node_of(client, namespace: str, name: str) -> str | None:
    return ((await client.resource(PODS).get(name, namespace)).get("spec") or {}).get("nodeName")


def condition(pod: dict, type_: str) -> dict | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


async def test_pods_are_bound_spread_over_ready_nodes_with_events(fresh_apiserver):
    server = fresh_apiserver()
    async with api_client(server) as client:
        for name in ("node-a", "node-b"):
            await ready_node(client, name)
        await ready_node(client, "node-c", unschedulable=True)
        await client.resource(NODES).create({"metadata": {"name": "node-d"}})  # no Ready condition: unreachable
        ns = await new_namespace(client)
        for i in range(4):
            await pending_pod(client, ns, f"web-{i}")
        await pending_pod(client, ns, "other", schedulerName="my-scheduler")
        async with running_controller(client, Scheduler):
            async def all_bound():
                nodes = [await node_of(client, ns, f"web-{i}") for i in range(4)]
                return nodes if all(nodes) else None

            nodes = await eventually(all_bound, message="all four Pods bound")
            assert sorted(nodes) == ["node-a", "node-a", "node-b", "node-b"]
            assert nodes[0] == "node-a"  # the first decision: a tie, broken by name
            events = await eventually(lambda: events_of(client, ns, "web-0"), message="the Scheduled event")
        assert await node_of(client, ns, "other") is None  # another scheduler's Pod
        assert await events_of(client, ns, "other") == []
        pod = await client.resource(PODS).get("web-0", ns)
        assert condition(pod, "PodScheduled")["status"] == "True"
        [event] = events
        assert (event["type"], event["reason"], event["message"]) == ("Normal", "Scheduled", f"Successfully assigned {ns}/web-0 to node-a")
        assert event["source"]["component"] == event["reportingComponent"] == "default-scheduler"
        assert event["involvedObject"]["kind"] == "Pod" and event["involvedObject"]["uid"] == pod["metadata"]["uid"]


async def test_unschedulable_pod_reports_why_and_is_placed_when_a_node_changes(fresh_apiserver):
    server = fresh_apiserver()
    async with api_client(server) as client:
        await ready_node(client, "node-a")
        await ready_node(client, "node-b")
        await ready_node(client, "node-c", unschedulable=True)
        ns = await new_namespace(client)
        await pending_pod(client, ns, "db", nodeSelector={"disk": "ssd"})
        async with running_controller(client, Scheduler):
            reason = "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector."

            async def reported():
                pod = await client.resource(PODS).get("db", ns)
                scheduled = condition(pod, "PodScheduled")
                return scheduled if scheduled and scheduled.get("reason") == "Unschedulable" else None

            scheduled = await eventually(reported, message="PodScheduled=False")
            assert (scheduled["status"], scheduled["message"]) == ("False", reason)
            [failed] = await events_of(client, ns, "db")
            assert (failed["type"], failed["reason"], failed["message"]) == ("Warning", "FailedScheduling", reason)
            assert failed["reportingComponent"] == "default-scheduler"

            await client.resource(NODES).patch("node-b", {"metadata": {"labels": {"disk": "ssd"}}})
            assert await eventually(lambda: node_of(client, ns, "db"), message="db bound after the label") == "node-b"
            pod = await client.resource(PODS).get("db", ns)
            assert condition(pod, "PodScheduled")["status"] == "True"
            reasons = await eventually(lambda: _reasons(client, ns, "db", 2), message="the Scheduled event")
            assert reasons == ["FailedScheduling", "Scheduled"]


async def _reasons(client, ns, name, count):
    events = await events_of(client, ns, name)
    return sorted(e["reason"] for e in events) if len(events) >= count else None


class SlowBindings:
    """The scheduler's client, with every ``pods/NAME/binding`` request answered ``delay``
    seconds late (a loaded apiserver); the first ``refuse`` of them refused with a 500."""

    def __init__(self, client, delay: float, refuse: int = 0):
        self._client, self.delay, self.refuse = client, delay, refuse
        self.in_flight = self.most_in_flight = 0

    def __getattr__(self, name):
        return getattr(self._client, name)

    async def create(self, path: str, body, params=None):
        if not path.endswith("/binding"):
            return await self._client.create(path, body, params)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            if self.refuse:
                self.refuse -= 1
                raise ApiError(500, "InternalError", "etcdserver: request timed out")
            return await self._client.create(path, body, params)
        finally:
            self.in_flight -= 1


async def two_nodes_and_pending_pods(client, count: int) -> str:
    """Ready nodes node-a and node-b, and ``count`` Pods waiting in a new namespace (its name)."""
    await ready_node(client, "node-a")
    await ready_node(client, "node-b")
    ns = await new_namespace(client)
    for i in range(count):
        await pending_pod(client, ns, f"burst-{i}")
    return ns


async def all_bound(client, ns: str, count: int) -> list[str]:
    """The node of each of the namespace's ``count`` Pods, once every one is bound."""
    async def nodes():
        names = [p["spec"].get("nodeName") for p in (await client.resource(PODS).list(ns))["items"]]
        return names if len(names) == count and all(names) else None

    return await eventually(nodes, message=f"all {count} Pods bound")


async def test_a_burst_of_pods_is_bound_concurrently_and_still_spread(fresh_apiserver):
    """20 Pods whose bindings each take 0.3 s are all bound in well under the 6 s one at a time
    would take, and the decisions made while bindings were in flight still spread them evenly."""
    server = fresh_apiserver()
    async with api_client(server) as client:
        ns = await two_nodes_and_pending_pods(client, 20)
        slow = SlowBindings(client, delay=0.3)
        async with running_controller(client, lambda _client, informers, **options: Scheduler(slow, informers, **options)):
            started = time.monotonic()
            nodes = await all_bound(client, ns, 20)
            took = time.monotonic() - started
        assert took < 5.0, f"20 bindings of 0.3 s each took {took:.2f}s: not concurrent (one after another: 6 s)"
        assert slow.most_in_flight >= 10, slow.most_in_flight
        assert sorted(Counter(nodes).values()) == [10, 10], Counter(nodes)


async def test_fast_bindings_keep_to_a_few_connections(fresh_apiserver, monkeypatch):
    """While bindings come back fast, a burst of 30 Pods is bound with at most
    BINDINGS_IN_FLIGHT requests out at once (each one in flight is a TLS connection of its own,
    a handshake on both sides), and still spread."""
    monkeypatch.setattr(scheduler_controller, "SLOW_BINDING", 60.0)  # every binding of this test counts as fast
    server = fresh_apiserver()
    async with api_client(server) as client:
        ns = await two_nodes_and_pending_pods(client, 30)
        counting = SlowBindings(client, delay=0.0)
        async with running_controller(client, lambda _client, informers, **options: Scheduler(counting, informers, **options)):
            nodes = await all_bound(client, ns, 30)
        assert 1 < counting.most_in_flight <= scheduler_controller.BINDINGS_IN_FLIGHT == 4, counting.most_in_flight
        assert sorted(Counter(nodes).values()) == [15, 15], Counter(nodes)


def test_the_binding_window_widens_on_a_slow_binding_and_narrows_when_none_is_out():
    window = scheduler_controller.binding_window
    assert window(4, 0.004, 3) == 4  # fast (4 ms): stays
    assert window(4, 0.03, 3) == 16  # slow (30 ms: under 200/s at 4 in flight): the maximum
    assert window(4, None, 3) == 4  # failed before an answer
    assert window(16, 0.004, 2) == 16  # stays wide for the rest of the burst
    assert window(16, 0.3, 0) == 4  # none out: the burst is over


async def test_a_refused_binding_is_reported_and_retried(fresh_apiserver):
    server = fresh_apiserver()
    async with api_client(server) as client:
        await ready_node(client, "node-a")
        ns = await new_namespace(client)
        await pending_pod(client, ns, "web")
        async with running_controller(client, lambda c, informers, **o: Scheduler(SlowBindings(c, delay=0, refuse=1), informers, **o)):
            assert await eventually(lambda: node_of(client, ns, "web"), timeout=10, message="web bound after the retry") == "node-a"
            reasons = await eventually(lambda: _reasons(client, ns, "web", 2), message="both events")
        assert reasons == ["FailedScheduling", "Scheduled"]
        failed = next(e for e in await events_of(client, ns, "web") if e["reason"] == "FailedScheduling")
        assert failed["message"] == "Binding rejected: etcdserver: request timed out"
