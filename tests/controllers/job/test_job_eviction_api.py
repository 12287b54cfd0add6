"""A Job Pod evicted through ``pods/NAME/eviction`` is marked ``DisruptionTarget`` by the
apiserver, so a pod failure policy's ``Ignore`` rule on that condition keeps the failure out of
``backoffLimit`` (0 here): the Job replaces the Pod and completes. A stand-in kubelet reports a
Pod being deleted as the agent does (Failed, its container stopped by SIGTERM: 143, the
conditions other components set kept), and every later Pod as succeeded."""

from __future__ import annotations

import asyncio
import contextlib
import json

import yaml
from prometheus_client import CollectorRegistry

from kubesvc.client.rest import PODS, ApiError
from kubesvc.controllers.job import metrics as jm
from kubesvc.controllers.job.controller import JobController
from tests.controllers.job.test_job_api import BACKOFF
from tests.controllers.job.test_job_policies_api import terminated, wait_condition
from tests.support.cluster import eventually, kubectl, running_task
from tests.support.workloads import ready_status, running_controllers


async def agent_like_kubelet(client, namespace: str, stopped_seen: list[dict]) -> None:
    pods, first = client.resource(PODS), []
    while True:
        for pod in (await pods.list(namespace))["items"]:
            status = pod.get("status") or {}
            with contextlib.suppress(ApiError):
                if pod["metadata"].get("deletionTimestamp") and status.get("phase") not in ("Succeeded", "Failed"):
                    stopped_seen.append(pod)
                    stopped = terminated(pod, 143)
                    kept = [c for c in status.get("conditions") or [] if c["type"] != "Ready"]
                    await pods.update_status({**pod, "status": {**stopped, "conditions": stopped["conditions"] + kept}})
                elif not status.get("phase") or status.get("phase") == "Pending":
                    first = first or [pod["metadata"]["name"]]
                    running = pod["metadata"]["name"] == first[0]
                    await pods.update_status({**pod, "status": ready_status(pod) if running else terminated(pod, 0)})
        await asyncio.sleep(0.1)


async def test_evicted_job_pod_is_ignored_by_the_pod_failure_policy(apiserver, client, namespace):
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "evicted"},
           "spec": {"backoffLimit": 0, "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
                    "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox"}]}}}}
    registry, stopped_seen = CollectorRegistry(), []
    # an ignored failure still delays the replacement by the Pod failure back-off (upstream's
    # newBackoffRecord counts every failed Pod): shortened as the other back-off tests do
    async with running_controllers(client, lambda c, i: JobController(c, i, metrics=jm.JobMetrics(registry), pod_failure_backoff=BACKOFF)):
        async with running_task(agent_like_kubelet(client, namespace, stopped_seen)):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(job))

            async def running_pod():
                items = (await client.resource(PODS).list(namespace))["items"]
                return [p for p in items if (p.get("status") or {}).get("phase") == "Running"]

            (pod,) = await eventually(running_pod, 30, "the Job's Pod running")
            name = pod["metadata"]["name"]
            evicted = await kubectl(apiserver, "-n", namespace, "create", "--raw", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction",
                                    "-f", "-", input=json.dumps({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}))
            assert '"status":"Success"' in evicted.stdout.replace(" ", ""), evicted
            status = await wait_condition(client, namespace, "evicted", "Complete")
    assert status["succeeded"] == 1 and not status.get("failed"), status
    assert registry.get_sample_value("job_controller_pod_failures_handled_by_failure_policy_total", {"action": "Ignore"}) == 1
    # what the kubelet saw when it stopped the evicted Pod: the apiserver's DisruptionTarget
    seen = next(p for p in stopped_seen if p["metadata"]["name"] == name)
    (disruption,) = [c for c in seen["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (disruption["status"], disruption["reason"], disruption["message"]) == ("True", "EvictionByEvictionAPI", "Eviction API: evicting")
