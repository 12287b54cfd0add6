"""``backoffLimit`` under ``restartPolicy: OnFailure`` (upstream ``pastBackoffLimitOnFailure``):
the kubelet restarts a failing container in place, so no Pod fails; the Job fails with
``BackoffLimitExceeded`` once the restarts of its Pending and Running Pods' containers (init
containers too) reach the limit, any restart with a limit of 0. Pure cases, then the Job
controller against a real apiserver with a stand-in kubelet reporting restarts. Expected values
written by hand from upstream."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
import yaml

from kubesvc.client.rest import PODS
from kubesvc.controllers.job import decisions as jd
from kubesvc.controllers.job.controller import JobController
from tests.controllers.job.test_job_api import conditions, job_status
from tests.support.cluster import eventually, kubectl, running_task
from tests.support.workloads import fake_kubelet, now, running_controllers

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def job(policy="OnFailure", **spec):
    return {"spec": {"template": {"spec": {"restartPolicy": policy}}, **spec}}


def pod(phase="Running", *restarts, init=()):
    return {"status": {"phase": phase, "containerStatuses": [{"name": f"c{i}", "restartCount": n} for i, n in enumerate(restarts)],
                       "initContainerStatuses": [{"name": f"i{i}", "restartCount": n} for i, n in enumerate(init)]}}


@pytest.mark.parametrize("j, pods, past", [
    (job(backoffLimit=3), [pod("Running", 1), pod("Running", 1)], False),
    (job(backoffLimit=3), [pod("Running", 2), pod("Pending", 0, init=(1,))], True),  # 3 restarts reach 3
    (job(backoffLimit=3), [pod("Running", 2, 1)], True),  # two containers of one Pod
    (job(backoffLimit=3), [pod("Running", 1), pod("Failed", 5), pod("Succeeded", 5)], False),  # finished Pods do not count
    (job(backoffLimit=0), [pod("Running", 1)], True),
    (job(backoffLimit=0), [pod("Running", 0)], False),
    (job(), [pod("Running", 5)], False),  # the default limit is 6
    (job(), [pod("Running", 6)], True),
    (job("Never", backoffLimit=1), [pod("Running", 9)], False),  # only under OnFailure
], ids=["below", "with-init", "two-containers", "finished-pods", "limit-0", "limit-0-no-restart", "default-below", "default", "never"])
def test_past_backoff_limit_on_failure(j, pods, past):
    assert jd.past_backoff_limit_on_failure(j, pods) is past
    assert jd.failure(j, 0, T0, pods=pods) == (jd.BACKOFF_LIMIT_EXCEEDED if past else None)


def crash_looping(pod: dict) -> dict:
    """The agent's status for a Pod whose container keeps exiting 1 under OnFailure: Running, restarted twice."""
    return {**(pod.get("status") or {}), "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now()}],
            "containerStatuses": [{"name": "work", "ready": False, "restartCount": 2, "image": "busybox", "imageID": "",
                                   "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                   "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": now(), "finishedAt": now()}}}]}


async def test_a_crash_looping_onfailure_job_fails_at_its_backoff_limit(apiserver, client, namespace):
    manifest = yaml.safe_dump({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "crashy"},
                               "spec": {"backoffLimit": 2, "template": {"spec": {"restartPolicy": "OnFailure",
                                                                                  "containers": [{"name": "work", "image": "busybox"}]}}}})
    async with running_controllers(client, lambda c, i: JobController(c, i)):
        async with running_task(fake_kubelet(client, namespace, crash_looping, interval=0.2)):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=manifest)

            async def failed():
                return conditions(await job_status(client, namespace, "crashy")).get("Failed")

            assert await eventually(failed, 60, "the Job failed") == ("True", "BackoffLimitExceeded")

            async def pods_gone():
                return not [p for p in (await client.resource(PODS).list(namespace))["items"]
                            if not p["metadata"].get("deletionTimestamp")]

            await eventually(pods_gone, 30, "the crash-looping Pod deleted")
    status = await job_status(client, namespace, "crashy")
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["message"] == "Job has reached the specified backoff limit"
    assert status["failed"] == 1 and status["active"] == 0  # the deleted running Pod is counted failed, as upstream
