"""PodGC against a real apiserver: what a user sees after one pass (``gc()``) or with the
controller running. A Job with ``podFailurePolicy`` whose Pod is deleted before it was
scheduled fails instead of waiting forever (PodGC marks the Pod Failed); a Pod on a deleted
Node is marked Failed with ``DisruptionTarget``/``DeletionByPodGC`` after its quarantine and
force-deleted; terminating Pods on an out-of-service Node go; terminating Pods on a Ready Node
and live Pods stay; above the terminated-Pod threshold evicted Pods go first, then the oldest."""

from __future__ import annotations

import asyncio
import contextlib

import yaml

from kubesvc.client.informer import Informer
from kubesvc.client.rest import NODES, PODS
from kubesvc.controllers.informers import SharedInformers
from kubesvc.controllers.job.controller import JOBS, JobController
from kubesvc.controllers.podgc.controller import PodGCController, PodGCMetrics
from kubesvc.util.clock import FakeClock
from prometheus_client import CollectorRegistry
from kubesvc.util.aio import cancel_and_wait
from tests.support.cluster import eventually, get_or_none, kubectl
from tests.support.workloads import running_controllers

HOLD = "example.com/hold"  # a finalizer of the test's, so a deleted Pod can still be read


@contextlib.asynccontextmanager
async def podgc(client, informers=None, **options):
    """A PodGCController on synced informers of its own; the test runs its passes."""
    informers = informers or SharedInformers(client)
    registry = CollectorRegistry()
    controller = PodGCController(client, informers, metrics=PodGCMetrics(registry), **options)
    informers.start()
    try:
        assert await informers.wait_for_sync(15), "informers did not sync"
        yield controller, registry
    finally:
        await informers.stop()


def pod_body(name: str, node: str | None = None, finalizers: list[str] | None = None) -> dict:
    spec = {"containers": [{"name": "app", "image": "app"}]}
    if node:
        spec["nodeName"] = node
    meta = {"name": name, "finalizers": finalizers} if finalizers else {"name": name}
    return {"metadata": meta, "spec": spec}


async def set_status(client, namespace: str, name: str, **status) -> None:
    pods = client.resource(PODS)
    pod = await pods.get(name, namespace)
    await pods.update_status({**pod, "status": {**(pod.get("status") or {}), **status}})


def in_cache(controller, namespace: str, name: str, predicate=lambda pod: True):
    def check():
        pod = controller._pods.indexer.get(name, namespace)
        return pod is not None and predicate(pod)
    return check


async def test_job_with_pod_failure_policy_does_not_hang_on_a_pod_deleted_before_it_ran(apiserver, client, namespace):
    """The Pod is never scheduled; deleted, it stays Terminating (the Job's tracking
    finalizer) and Pending, which a podFailurePolicy Job does not count as failed. PodGC marks
    it Failed: the Job counts it and, with backoffLimit 0, fails."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "stuck"},
           "spec": {"backoffLimit": 0, "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
                    "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox", "command": ["true"]}]}}}}
    factories = [lambda c, i: JobController(c, i), lambda c, i: PodGCController(c, i, gc_check_period=0.2, terminated_pod_threshold=0)]
    async with running_controllers(client, *factories):
        await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(job))
        pods = client.resource(PODS)
        (pod,) = (await eventually(lambda: _items(pods.list(namespace)), 30, "the Job's Pod"))
        await kubectl(apiserver, "-n", namespace, "delete", "pod", pod["metadata"]["name"], "--wait=false")

        async def failed():
            status = (await client.resource(JOBS).get("stuck", namespace)).get("status") or {}
            return status if any(c["type"] == "Failed" and c["status"] == "True" for c in status.get("conditions") or []) else None

        status = await eventually(failed, 30, "the Job failed")
        await eventually(lambda: _gone(pods, pod["metadata"]["name"], namespace), 30, "the deleted Pod gone")
    assert status["failed"] == 1 and not status.get("active")
    assert {c["type"]: c["reason"] for c in status["conditions"]}["Failed"] == "BackoffLimitExceeded"


async def _items(listing):
    return (await listing)["items"]


async def _gone(pods, name, namespace):
    return await get_or_none(pods.client, PODS, name, namespace) is None


async def test_orphaned_out_of_service_and_unscheduled_terminating(client, namespace):
    pods, nodes = client.resource(PODS), client.resource(NODES)
    down, up, ghost = f"{namespace}-down", f"{namespace}-up", f"{namespace}-ghost"
    clock = FakeClock()
    try:
        for name, ready, taints in ((down, "False", [{"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}]), (up, "True", [])):
            made = await nodes.create({"metadata": {"name": name}, "spec": {"taints": taints}})
            await nodes.update_status({**made, "status": {"conditions": [{"type": "Ready", "status": ready}]}})
        for body in (pod_body("on-down", down), pod_body("on-up", up), pod_body("alive", up), pod_body("orphan", ghost, [HOLD]),
                     pod_body("unscheduled", None, [HOLD])):
            await pods.create(body, namespace)
        await set_status(client, namespace, "orphan", phase="Running")
        for name in ("on-down", "on-up", "unscheduled"):
            await pods.delete(name, namespace)  # bound: graceful (Terminating); unscheduled: held by the finalizer

        async with podgc(client, terminated_pod_threshold=0, clock=clock) as (controller, registry):
            for name in ("on-down", "on-up", "unscheduled"):
                await eventually(in_cache(controller, namespace, name, lambda p: p["metadata"].get("deletionTimestamp")), 10, name)
            await eventually(in_cache(controller, namespace, "orphan", lambda p: p["status"].get("phase") == "Running"), 10, "orphan")
            await controller.gc()

            assert await get_or_none(client, PODS, "on-down", namespace) is None  # force-deleted
            on_up = await pods.get("on-up", namespace)
            assert on_up["metadata"].get("deletionTimestamp") and on_up["status"]["phase"] == "Pending"  # its kubelet will finish it
            unscheduled = await pods.get("unscheduled", namespace)
            assert unscheduled["status"]["phase"] == "Failed" and unscheduled["metadata"]["deletionGracePeriodSeconds"] == 0
            orphan = await pods.get("orphan", namespace)
            assert orphan["status"]["phase"] == "Running" and not orphan["metadata"].get("deletionTimestamp")  # quarantined
            await pods.patch("unscheduled", {"metadata": {"finalizers": None}}, namespace)

            clock.advance(39)
            await eventually(lambda: controller._pods.indexer.get("unscheduled", namespace) is None, 10, "unscheduled gone")
            await controller.gc()
            assert not (await pods.get("orphan", namespace))["metadata"].get("deletionTimestamp")  # 39 s: still quarantined
            clock.advance(1)
            await controller.gc()
            orphan = await pods.get("orphan", namespace)
            assert orphan["metadata"].get("deletionTimestamp") and orphan["status"]["phase"] == "Failed"
            (condition,) = [c for c in orphan["status"]["conditions"] if c["type"] == "DisruptionTarget"]
            assert (condition["status"], condition["reason"], condition["message"]) == ("True", "DeletionByPodGC", "PodGC: node no longer exists")
            assert (await pods.get("alive", namespace))["status"].get("phase") != "Failed"

            counted = {reason: registry.get_sample_value("pod_gc_collector_force_delete_pods_total", {"namespace": namespace, "reason": reason})
                       for reason in ("out-of-service", "unscheduled", "orphaned", "terminated")}
            assert counted == {"out-of-service": 1.0, "unscheduled": 1.0, "orphaned": 1.0, "terminated": None}
            assert registry.get_sample_value("pod_gc_collector_force_delete_pod_errors_total", {"namespace": namespace, "reason": "orphaned"}) is None
    finally:
        for name in ("orphan", "unscheduled"):
            with contextlib.suppress(Exception):
                await pods.patch(name, {"metadata": {"finalizers": None}}, namespace)
        for name in (down, up):
            with contextlib.suppress(Exception):
                await nodes.delete(name)


class OneNamespace:
    """The caches PodGC reads, its Pods only the test's namespace's: the threshold counts every
    Pod the cache holds, and the shared apiserver holds other tests' finished Pods."""

    def __init__(self, client, namespace: str):
        self.pods, self.nodes = Informer(client, PODS, namespace), Informer(client, NODES)
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(i.run()) for i in (self.pods, self.nodes)]

    async def wait_for_sync(self, timeout: float) -> bool:
        return all(await asyncio.gather(self.pods.wait_for_sync(timeout), self.nodes.wait_for_sync(timeout)))

    async def stop(self) -> None:
        for informer in (self.pods, self.nodes):
            informer.stop()
        await cancel_and_wait(self._tasks)


async def test_terminated_pods_above_the_threshold(client, namespace):
    """Threshold 2, four finished Pods and a running one: the evicted one goes first, then the
    oldest."""
    pods = client.resource(PODS)
    for name in ("a-succeeded", "b-failed", "c-evicted", "d-running", "e-failed"):
        await pods.create(pod_body(name), namespace)
    await set_status(client, namespace, "a-succeeded", phase="Succeeded")
    await set_status(client, namespace, "b-failed", phase="Failed")
    await set_status(client, namespace, "c-evicted", phase="Failed", reason="Evicted", message="The node was low on resource: memory.")
    await set_status(client, namespace, "d-running", phase="Running")
    await set_status(client, namespace, "e-failed", phase="Failed")
    async with podgc(client, OneNamespace(client, namespace), terminated_pod_threshold=2) as (controller, registry):
        await eventually(in_cache(controller, namespace, "d-running", lambda p: p["status"].get("phase") == "Running"), 10, "statuses")
        await controller.gc()
    left = sorted(p["metadata"]["name"] for p in (await pods.list(namespace))["items"])
    assert left == ["b-failed", "d-running", "e-failed"]
    assert registry.get_sample_value("pod_gc_collector_force_delete_pods_total", {"namespace": namespace, "reason": "terminated"}) == 2.0
