"""The known hang, its agent half: a Job Pod deleted before its node ran any of it. The agent
deletes such a Pod with grace 0 at once; a Job's tracking finalizer keeps the object, and a Job
with a podFailurePolicy counts a Pod only once it is terminal. The agent's
``finish_unrun_pod`` (what ``Agent._delete_now`` runs) reports it Failed first, as the
kubelet's ``TerminatePod`` does (containers ``ContainerStatusUnknown``, exit 137), so the Job
counts the failure, replaces the Pod and completes. Before, the Pod stayed Pending and the Job
waited forever."""

from __future__ import annotations

import asyncio
import contextlib

from kubesvc.agent.agent import finish_unrun_pod
from kubesvc.client.rest import PODS, ApiError
from kubesvc.controllers.job.controller import JobController
from kubesvc.util.clock import RealClock
from tests.controllers.job.test_job_api import BACKOFF
from tests.controllers.job.test_job_policies_api import job_pods, manifest, terminated, wait_condition
from tests.support.cluster import eventually, kubectl, running_task
from tests.support.workloads import running_controllers


async def agent_like_kubelet(client, namespace: str, never_run: set[str], running: asyncio.Event, finished: list[dict]) -> None:
    """A deleted Pod goes through the agent's own code at once; once ``running`` is set, every
    Pod not in ``never_run`` (UIDs) succeeds. The test names the Pod that never runs before
    any runs, so a slow first list cannot mistake its replacement for it."""
    pods, done = client.resource(PODS), set()
    while True:
        for pod in (await pods.list(namespace))["items"]:
            meta, status = pod["metadata"], pod.get("status") or {}
            with contextlib.suppress(ApiError):
                if meta.get("deletionTimestamp"):
                    if meta["uid"] not in done:
                        done.add(meta["uid"])
                        await finish_unrun_pod(pods, pod, ["10.9.0.7"], RealClock())
                        finished.append(pod)
                elif running.is_set() and meta["uid"] not in never_run and status.get("phase", "Pending") == "Pending":
                    await pods.update_status({**pod, "status": terminated(pod, 0)})
        await asyncio.sleep(0.1)


async def test_job_pod_deleted_before_it_ran_is_counted_failed(apiserver, client, namespace):
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}
    finished: list[dict] = []
    never_run: set[str] = set()
    running = asyncio.Event()
    async with running_controllers(client, lambda c, i: JobController(c, i, pod_failure_backoff=BACKOFF)):
        async with running_task(agent_like_kubelet(client, namespace, never_run, running, finished)):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=manifest("unrun", backoffLimit=1, podFailurePolicy=policy))
            (pod,) = await eventually(lambda: job_pods(client, namespace, "unrun"), 30, "the Job's Pod")
            name = pod["metadata"]["name"]
            never_run.add(pod["metadata"]["uid"])
            running.set()
            await kubectl(apiserver, "-n", namespace, "delete", "pod", name, "--wait=false")
            # the failure, the 3 s back-off, the replacement's run: ~7 s quiet, 60 s for a loaded CI
            status = await wait_condition(client, namespace, "unrun", "Complete", timeout=60)
    assert (status.get("failed"), status.get("succeeded")) == (1, 1), status
    assert [p["metadata"]["name"] for p in finished] == [name]
