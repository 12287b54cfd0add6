"""The Job controller's decisions (pkg/controller/job: job_controller_test.go's manageJob
counts, backoff_utils_test.go's back-off cases), as reference/workloads.md §6 states them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from kubesvc.controllers.job import decisions as jd

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def stamp(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def job(completions=None, parallelism=None, backoff_limit=None, **spec):
    body = {"metadata": {"name": "pi", "namespace": "default", "uid": "j"}, "spec": dict(spec), "status": {}}
    for key, value in (("completions", completions), ("parallelism", parallelism), ("backoffLimit", backoff_limit)):
        if value is not None:
            body["spec"][key] = value
    return body


def pod(phase="Running", *, finished_ago=None, deleting=False):
    status = {"phase": phase}
    if finished_ago is not None:
        status["containerStatuses"] = [{"name": "c", "state": {"terminated": {"exitCode": 1, "finishedAt": stamp(finished_ago)}}}]
    meta = {"name": "p", "uid": "u", "creationTimestamp": stamp(1000)}
    if deleting:
        meta["deletionTimestamp"] = stamp(0)
    return {"metadata": meta, "status": status}


@pytest.mark.parametrize("j, succeeded, active, want", [
    (job(completions=5, parallelism=2), 0, 0, 2),
    (job(completions=5, parallelism=2), 4, 0, 1),
    (job(completions=5, parallelism=2), 5, 0, 0),
    (job(completions=5, parallelism=10), 2, 0, 3),
    (job(parallelism=3), 0, 0, 3),
    (job(parallelism=3), 1, 2, 2),
    (job(), 0, 0, 1),
], ids=["parallelism caps", "one missing", "done", "completions cap", "work queue", "work queue after a success", "defaults"])
def test_want_active(j, succeeded, active, want):
    assert jd.want_active(j, succeeded, active) == want


@pytest.mark.parametrize("j, succeeded, active, complete", [
    (job(completions=3), 3, 0, True),
    (job(completions=3), 2, 1, False),
    (job(parallelism=2), 1, 1, False),
    (job(parallelism=2), 1, 0, True),
], ids=["completions reached", "one missing", "work queue still running", "work queue done"])
def test_is_complete(j, succeeded, active, complete):
    assert jd.is_complete(j, succeeded, active) is complete


@pytest.mark.parametrize("failures, seconds_since, remaining", [
    (0, 0, 0), (1, 0, 10), (1, 4, 6), (2, 0, 20), (3, 0, 40), (6, 0, 320), (7, 0, 600), (12, 0, 600), (2, 25, 0),
], ids=["none", "first 10s", "4s later", "second 20s", "third 40s", "sixth 320s", "capped 10m", "still capped", "elapsed"])
def test_backoff_delay(failures, seconds_since, remaining):
    record = jd.BackoffRecord(failures, NOW - timedelta(seconds=seconds_since))
    assert jd.remaining_backoff(record, NOW) == remaining


def test_backoff_record_counts_failures_after_the_last_success():
    record = jd.next_backoff_record(jd.BackoffRecord(), [], [pod("Failed", finished_ago=30), pod("Failed", finished_ago=20)])
    assert (record.failures_after_last_success, record.last_failure_time) == (2, NOW - timedelta(seconds=20))
    record = jd.next_backoff_record(record, [pod("Succeeded", finished_ago=15)], [pod("Failed", finished_ago=10), pod("Failed", finished_ago=16)])
    assert (record.failures_after_last_success, record.last_failure_time) == (1, NOW - timedelta(seconds=10))
    assert jd.next_backoff_record(record, [pod("Succeeded", finished_ago=1)], []) == jd.BackoffRecord(0, None)


def test_failed_pods():
    j = job()
    assert jd.is_failed(pod("Failed"), j)
    assert jd.is_failed(pod("Running", deleting=True), j)  # an orphan that never reaches Failed
    assert not jd.is_failed(pod("Succeeded", deleting=True), j)
    assert not jd.is_failed(pod("Running", deleting=True), job(podReplacementPolicy="Failed"))


@pytest.mark.parametrize("j, failed, expected", [
    (job(backoff_limit=2), 2, None),
    (job(backoff_limit=2), 3, jd.BACKOFF_LIMIT_EXCEEDED),
    (job(), 7, jd.BACKOFF_LIMIT_EXCEEDED),
    (job(backoff_limit=0), 1, jd.BACKOFF_LIMIT_EXCEEDED),
], ids=["at the limit", "past the limit", "default limit 6", "limit 0"])
def test_backoff_limit(j, failed, expected):
    assert jd.failure(j, failed, NOW) == expected


def test_active_deadline():
    j = job(activeDeadlineSeconds=30)
    j["status"]["startTime"] = stamp(31)
    assert jd.failure(j, 0, NOW) == jd.DEADLINE_EXCEEDED
    j["status"]["startTime"] = stamp(10)
    assert jd.failure(j, 0, NOW) is None
    assert jd.seconds_to_active_deadline(j, NOW) == 20


def test_finish_time_prefers_container_finish():
    assert jd.finish_time(pod("Failed", finished_ago=5)) == NOW - timedelta(seconds=5)
    assert jd.finish_time(pod("Failed")) == NOW - timedelta(seconds=1000)


def test_set_condition_keeps_transition_time_for_same_status():
    conditions = []
    assert jd.set_condition(conditions, jd.new_condition("Suspended", "JobSuspended", "Job suspended", NOW - timedelta(seconds=9)))
    assert not jd.set_condition(conditions, jd.new_condition("Suspended", "JobSuspended", "Job suspended", NOW))
    assert jd.set_condition(conditions, jd.new_condition("Suspended", "JobResumed", "Job resumed", NOW, status="False"))
    assert conditions[0]["lastTransitionTime"] == "2026-01-01T12:00:00Z" and conditions[0]["status"] == "False"
    assert not jd.set_condition([], jd.new_condition("Suspended", "JobResumed", "Job resumed", NOW, status="False"))
