"""The Job controller's decisions (pkg/controller/job: job_controller_test.go's manageJob
counts, backoff_utils_test.go's back-off cases), as reference/workloads.md §6 states them."""

from __future__ import annotations

import time

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


@pytest.mark.parametrize("failures, seconds_since, remaining", [(1, 0, 3), (2, 1, 5), (4, 0, 20), (9, 0, 20), (2, 6, 0)],
                         ids=["first 3s", "second 6s", "fourth capped", "still capped", "elapsed"])
def test_backoff_delay_with_a_shorter_base_and_cap(failures, seconds_since, remaining):
    record = jd.BackoffRecord(failures, NOW - timedelta(seconds=seconds_since))
    assert jd.remaining_backoff(record, NOW, 3.0, 20.0) == remaining


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


def indexed_job(completions=4, parallelism=2, name="work"):
    j = job(completions=completions, parallelism=parallelism, completionMode="Indexed")
    j["metadata"]["name"] = name
    j["spec"]["template"] = {"metadata": {"labels": {"job-name": name}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    return j


def indexed_pod(index, created="2026-01-01T00:00:00Z"):
    return {"metadata": {"name": f"p{index}-{created[-3:-1]}", "creationTimestamp": created, "annotations": {jd.COMPLETION_INDEX_KEY: str(index)}},
            "status": {"phase": "Running"}}


@pytest.mark.parametrize("text, limit, expected, written", [
    ("", 5, set(), ""), ("1,3-5,7", 10, {1, 3, 4, 5, 7}, "1,3-5,7"), ("1,3-5,7", 5, {1, 3, 4}, "1,3,4"), ("0-2", 3, {0, 1, 2}, "0-2"),
    ("0,1,5,6,7", 10, {0, 1, 5, 6, 7}, "0,1,5-7"),
], ids=["empty", "intervals", "capped by completions", "all", "two in a row written with a comma"])
def test_completed_indexes_round_trip(text, limit, expected, written):
    # orderedIntervals.String(): a run of two is "a,b", of three or more "a-b"
    assert jd.parse_indexes(text, limit) == expected
    assert jd.format_indexes(expected) == written


def test_indexed_pods_to_create_and_delete():
    j = indexed_job(completions=5, parallelism=3)
    running = [indexed_pod(1), indexed_pod(1, "2026-01-01T00:00:09Z"), indexed_pod(3), indexed_pod(9)]
    assert jd.indexes_to_create(j, {0}, running, 3) == [2, 4]
    # index 3 already succeeded, 9 is out of range (5 completions), the newer Pod of index 1 is a duplicate
    assert jd.excess_indexed_pods(j, {3}, running) == [running[2], running[3], running[1]]


def test_indexed_template():
    template, prefix = jd.indexed_template(indexed_job(name="work"), 3)
    assert prefix == "work-3-"
    assert template["metadata"]["annotations"][jd.COMPLETION_INDEX_KEY] == template["metadata"]["labels"][jd.COMPLETION_INDEX_KEY] == "3"
    assert template["spec"]["hostname"] == "work-3"
    assert template["spec"]["containers"][0]["env"] == [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
        "apiVersion": "v1", "fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}}}]
    _, long_prefix = jd.indexed_template(indexed_job(name="x" * 70), 12)
    assert long_prefix == "x" * 54 + "-12-" and len(long_prefix) == 58


def test_the_pods_to_create_of_a_job_of_2_31_completions_are_found_at_once():
    """Upstream accepts an Indexed Job of 2**31-1 completions; walking every index each sync
    stalled the controller-manager (review 20). The first indexes come at once."""
    j = indexed_job(completions=2**31 - 1, parallelism=2)
    started = time.process_time()
    assert jd.indexes_to_create(j, {0}, [indexed_pod(1)], 2) == [2, 3]
    assert time.process_time() - started < 0.5


@pytest.mark.parametrize("text, limit, intervals", [
    ("", 5, []), ("1,3-5,7", 10, [(1, 1), (3, 5), (7, 7)]), ("1,3-5,7", 5, [(1, 1), (3, 4)]), ("0,1,2-4", 10, [(0, 4)]),
    ("0-2147483646", 2**31 - 1, [(0, 2**31 - 2)]),
], ids=["empty", "intervals", "capped by completions", "merged", "huge"])
def test_intervals_are_kept_not_expanded(text, limit, intervals):
    assert jd.parse_intervals(text, limit) == intervals
    for index in (0, 1, 2, 4, 5, 7, 2**31 - 2):
        assert jd.in_intervals(index, intervals) == any(first <= index <= last for first, last in intervals)
