"""The CronJob controller: its schedule arithmetic (upstream's utils_test.go cases, written out)
and, against a real apiserver with the Job controller and a stand-in kubelet, a CronJob making
its Job on schedule, then seeing it complete."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import yaml

from kubesvc.api.cron import parse_standard
from kubesvc.controllers.cronjob.controller import CRONJOBS, JOBS, CronJobController, job_from_template, job_name, most_recent_schedule_time
from kubesvc.controllers.job.controller import JobController
from kubesvc.util.golang import rfc3339
from tests.support.cluster import eventually, kubectl, running_task
from tests.support.workloads import fake_kubelet, finished_status, running_controllers

T = datetime(2026, 11, 27, 10, 0, 0, tzinfo=timezone.utc)  # a Friday


def cron_job(schedule: str, created: datetime, last: datetime | None = None, **spec) -> dict:
    status = {"lastScheduleTime": rfc3339(last)} if last else {}
    return {"metadata": {"name": "tick", "namespace": "ns", "uid": "u1", "creationTimestamp": rfc3339(created)},
            "spec": {"schedule": schedule, **spec}, "status": status}


@pytest.mark.parametrize("schedule, created, last, now, expected, missed", [
    ("0 * * * *", T - timedelta(minutes=30), None, T - timedelta(minutes=1), None, 0),
    ("0 * * * *", T - timedelta(minutes=30), None, T + timedelta(minutes=1), T, 0),
    ("0 * * * *", T - timedelta(hours=5, minutes=30), T - timedelta(hours=5), T + timedelta(minutes=1), T, 5),
    ("*/15 * * * *", T - timedelta(days=3), T - timedelta(days=2), T + timedelta(minutes=16), T + timedelta(minutes=15), 193),
    ("@every 90s", T, None, T + timedelta(seconds=100), T + timedelta(seconds=90), 0),
], ids=["not-yet", "one-due", "several-missed", "many-missed", "every"])
def test_most_recent_schedule_time(schedule, created, last, now, expected, missed):
    _, got, got_missed = most_recent_schedule_time(cron_job(schedule, created, last), now, parse_standard(schedule), True)
    assert (got, got_missed) == (expected, missed)


def test_starting_deadline_limits_how_far_back_it_looks():
    job = cron_job("0 * * * *", T - timedelta(days=1), None, startingDeadlineSeconds=600)
    assert most_recent_schedule_time(job, T + timedelta(minutes=5), parse_standard("0 * * * *"), True)[1] == T
    assert most_recent_schedule_time(job, T + timedelta(minutes=50), parse_standard("0 * * * *"), True)[1] is None


def test_the_job_is_named_by_its_minute_and_made_from_the_template():
    job = cron_job("0 * * * *", T, jobTemplate={"metadata": {"labels": {"app": "tick"}, "annotations": {"a": "b"}},
                                                "spec": {"template": {"spec": {"restartPolicy": "Never"}}}})
    assert job_name(job, T) == f"tick-{int(T.timestamp()) // 60}"
    made = job_from_template(job, T)
    assert made["metadata"]["labels"] == {"app": "tick"}
    assert made["metadata"]["annotations"] == {"a": "b", "batch.kubernetes.io/cronjob-scheduled-timestamp": "2026-11-27T10:00:00Z"}
    assert made["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "tick", "uid": "u1",
                                                     "controller": True, "blockOwnerDeletion": True}]
    assert made["spec"] == {"template": {"spec": {"restartPolicy": "Never"}}}


async def test_a_cron_job_runs_its_job_and_sees_it_complete(apiserver, client, namespace):
    manifest = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "tick"},
                "spec": {"schedule": "@every 1s", "concurrencyPolicy": "Forbid",
                         "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                                                                        "containers": [{"name": "c", "image": "ok"}]}}}}}}
    factories = [lambda c, i: CronJobController(c, i), lambda c, i: JobController(c, i)]
    async with running_controllers(client, *factories):
        await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(manifest))

        async def first_job():
            jobs = (await client.resource(JOBS).list(namespace))["items"]
            return jobs[0] if jobs else None

        job = await eventually(first_job, 30, "the first Job")
        assert job["metadata"]["ownerReferences"][0]["kind"] == "CronJob"

        async def active():
            # the controller writes its status after the Job's create (upstream: Create, then
            # Status.Active appended and updateStatus): the Job may be listed first
            status = (await client.resource(CRONJOBS).get("tick", namespace))["status"]
            return status if status.get("active") else None

        status = await eventually(active, 30, "the CronJob's status naming its active Job")
        assert [ref["name"] for ref in status["active"]] == [job["metadata"]["name"]] and status["lastScheduleTime"]
        async with running_task(fake_kubelet(client, namespace, lambda pod: finished_status(pod, "Succeeded"), interval=0.2)):

            async def succeeded():
                status = (await client.resource(CRONJOBS).get("tick", namespace))["status"]
                return status if status.get("lastSuccessfulTime") and not status.get("active") else None

            await eventually(succeeded, 60, "the Job seen complete")
    events = await kubectl(apiserver, "-n", namespace, "get", "events", "--field-selector=involvedObject.name=tick",
                           "-o", "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}")
    assert {"SuccessfulCreate", "SawCompletedJob"} <= set(events.stdout.split())
    table = await kubectl(apiserver, "-n", namespace, "get", "cronjob", "tick", "--no-headers")
    assert table.stdout.split()[0:3] == ["tick", "@every", "1s"]
