"""How many Pods one PodGC pass deletes at once. Upstream gives each terminated (and each
out-of-service terminating) Pod a goroutine and lets kube-controller-manager's client rate
limit meter them; our controller-manager's client has none, so at most ``DELETE_PARALLELISM``
(10) are in flight, and every Pod is still deleted in the pass. Orphaned and unscheduled
terminating Pods go one at a time, as upstream's loops delete them. The pods API is a stand-in
that counts the requests in flight; the expected bounds are written by hand."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kubesvc.client.rest import NODES, PODS
from kubesvc.controllers.podgc.controller import PodGCController


class CountingPods:
    def __init__(self):
        self.in_flight = self.most = 0
        self.deleted: list[str] = []

    async def _request(self):
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(0.005)
        self.in_flight -= 1

    async def patch(self, name, body, namespace=None, patch_type=None, subresource=None):
        await self._request()

    async def delete(self, name, namespace=None, grace_period_seconds=None, preconditions=None):
        await self._request()
        self.deleted.append(name)


def pod(name, phase="Succeeded", node="n1", deleting=False):
    meta = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "creationTimestamp": f"2026-01-01T00:00:{len(name):02d}Z"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T11:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}


def controller(pods: list[dict], api: CountingPods, **kwargs) -> PodGCController:
    node = {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    resources = {PODS: api, NODES: SimpleNamespace()}
    client = SimpleNamespace(resource=lambda r: resources[r])
    informers = SimpleNamespace(pods=SimpleNamespace(indexer=SimpleNamespace(list=lambda: pods)),
                                nodes=SimpleNamespace(indexer=SimpleNamespace(list=lambda: [node])))
    return PodGCController(client, informers, **kwargs)


async def test_terminated_pods_are_deleted_at_most_ten_at_once():
    api = CountingPods()
    pods = [pod(f"done-{i}") for i in range(60)]
    await controller(pods, api, terminated_pod_threshold=5).gc()
    assert len(api.deleted) == 55  # the excess over the threshold, every one of them
    assert api.most == 10


async def test_unscheduled_terminating_pods_are_deleted_one_at_a_time():
    api = CountingPods()
    pods = [pod(f"stuck-{i}", phase="Pending", node=None, deleting=True) for i in range(4)]
    await controller(pods, api).gc()
    assert sorted(api.deleted) == [f"stuck-{i}" for i in range(4)]
    assert api.most == 1
