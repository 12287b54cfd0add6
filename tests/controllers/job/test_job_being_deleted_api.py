"""A Job being deleted (a deletionTimestamp held by a finalizer, as in a foreground deletion)
gets no new Pods: upstream's syncJob calls manageJob only while ``job.DeletionTimestamp ==
nil``. The Job controller against a real apiserver; a parallelism raised then makes no Pod."""

from __future__ import annotations

import asyncio

import yaml

from kubesvc.client.rest import PODS
from kubesvc.controllers.job.controller import JOBS, JobController
from tests.support.cluster import eventually, kubectl, running_task
from tests.support.workloads import fake_kubelet, ready_status, running_controllers

HOLD = "example.com/hold"


async def test_no_pod_is_made_while_the_job_is_being_deleted(apiserver, client, namespace):
    manifest = yaml.safe_dump({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "leaving", "finalizers": [HOLD]},
                               "spec": {"parallelism": 2, "completions": 4,
                                        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox"}]}}}})
    pods_api, jobs_api = client.resource(PODS), client.resource(JOBS)

    async def live_pods():
        return [p for p in (await pods_api.list(namespace))["items"] if not p["metadata"].get("deletionTimestamp")]

    async with running_controllers(client, lambda c, i: JobController(c, i)):
        async with running_task(fake_kubelet(client, namespace, ready_status, interval=0.2)):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=manifest)
            await eventually(lambda: _count(live_pods, 2), 30, "the Job's two Pods")
            await jobs_api.delete("leaving", namespace)  # held by its finalizer: now being deleted
            await kubectl(apiserver, "-n", namespace, "patch", "job", "leaving", "--type=merge", "-p", '{"spec": {"parallelism": 3}}')
            await asyncio.sleep(1.5)  # a third Pod, had one been made, would be there by now (a spec change syncs at once)
            assert len(await live_pods()) == 2
        await jobs_api.patch("leaving", {"metadata": {"finalizers": None}}, namespace)


async def _count(live_pods, n: int) -> bool:
    return len(await live_pods()) == n
