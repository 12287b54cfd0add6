"""The Job controller's pod failure policy, per-index back-off and success policy decisions
(pkg/controller/job pod_failure_policy_test.go, indexed_job_utils_test.go,
success_policy_test.go, backoff_utils_test.go cases), expected values written out by hand."""

from __future__ import annotations

import time

from datetime import datetime, timedelta, timezone

import pytest

from kubesvc.controllers.job import policies as jp
from kubesvc.controllers.job.decisions import COMPLETION_INDEX_KEY, JOB_TRACKING_FINALIZER

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def stamp(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def failed_pod(*exits: tuple[str, int], init: tuple[str, int] | None = None, conditions=(), index=None, counts=None, ago=5,
               phase="Failed", name="p"):
    def status(name, code):
        return {"name": name, "state": {"terminated": {"exitCode": code, "finishedAt": stamp(ago)}}}

    body = {"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "creationTimestamp": stamp(100),
                         "finalizers": [JOB_TRACKING_FINALIZER], "annotations": {}},
            "status": {"phase": phase, "containerStatuses": [status(n, c) for n, c in exits],
                       "conditions": [{"type": t, "status": s} for t, s in conditions]}}
    if init is not None:
        body["status"]["initContainerStatuses"] = [status(*init)]
    if index is not None:
        body["metadata"]["annotations"][COMPLETION_INDEX_KEY] = str(index)
    for key, value in (counts or {}).items():
        body["metadata"]["annotations"][key] = value
    return body


def job(completions=4, **spec):
    return {"metadata": {"name": "j", "namespace": "ns"}, "spec": {"completionMode": "Indexed", "completions": completions, **spec},
            "status": {}}


RULES = {"rules": [
    {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [1, 2, 3]}},
    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [5]}},
    {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [5]}},
]}


@pytest.mark.parametrize("pod, expected", [
    (failed_pod(("main", 2)), ("Container main for pod ns/p failed with exit code 2 matching FailJob rule at index 0", True, "FailJob")),
    (failed_pod(("side", 2)), (None, True, "Count")),  # containerName restricts the FailJob rule; NotIn [5] counts it
    (failed_pod(("main", 0), conditions=[("DisruptionTarget", "True")]), (None, False, "Ignore")),
    (failed_pod(("main", 0), conditions=[("DisruptionTarget", "False")]), (None, True, None)),  # exit 0 never matches
    (failed_pod(("main", 5)), (None, True, "FailIndex")),
    (failed_pod(("main", 0), init=("main", 3)), ("Container main for pod ns/p failed with exit code 3 matching FailJob rule at index 0",
                                                  True, "FailJob")),
], ids=["fail-job", "other-container", "disruption-ignored", "condition-false", "fail-index", "init-container"])
def test_match_pod_failure_policy(pod, expected):
    assert jp.match_pod_failure_policy(RULES, pod) == expected


def test_condition_rule_message_and_no_policy():
    policy = {"rules": [{"action": "FailJob", "onPodConditions": [{"type": "ConfigIssue", "status": "True"}]}]}
    pod = failed_pod(("main", 1), conditions=[("ConfigIssue", "True")])
    assert jp.match_pod_failure_policy(policy, pod) == ("Pod ns/p has condition ConfigIssue matching FailJob rule at index 0", True, "FailJob")
    assert jp.match_pod_failure_policy(None, pod) == (None, True, None)
    j = job(podFailurePolicy=policy)
    assert jp.fail_job_message(j, [failed_pod(("main", 1), phase="Running"), pod]) == "Pod ns/p has condition ConfigIssue matching FailJob rule at index 0"


def test_index_failure_counts_carry_to_the_replacement():
    j = job(backoffLimitPerIndex=2, podFailurePolicy={"rules": [RULES["rules"][1]]})
    first = failed_pod(("main", 1), index=1, counts={jp.INDEX_FAILURE_COUNT: "0"})
    assert jp.failure_count_annotations(j, None) == {jp.INDEX_FAILURE_COUNT: "0"}
    assert jp.failure_count_annotations(j, first) == {jp.INDEX_FAILURE_COUNT: "1"}
    disrupted = failed_pod(("main", 0), conditions=[("DisruptionTarget", "True")], index=1, counts={jp.INDEX_FAILURE_COUNT: "1"})
    assert jp.failure_count_annotations(j, disrupted) == {jp.INDEX_FAILURE_COUNT: "1", jp.INDEX_IGNORED_FAILURE_COUNT: "1"}
    # a garbage annotation counts 0
    assert jp.index_failure_count(failed_pod(("main", 1), counts={jp.INDEX_FAILURE_COUNT: "-4"})) == 0
    # the index fails once its counted failures reach backoffLimitPerIndex
    assert not jp.is_index_failed(j, failed_pod(("main", 1), index=1, counts={jp.INDEX_FAILURE_COUNT: "1"}))
    assert jp.is_index_failed(j, failed_pod(("main", 1), index=1, counts={jp.INDEX_FAILURE_COUNT: "2"}))
    assert not jp.is_index_failed(j, disrupted)


@pytest.mark.parametrize("counts, ago, remaining", [
    ({}, 3, 7.0), ({jp.INDEX_FAILURE_COUNT: "1"}, 5, 15.0), ({jp.INDEX_FAILURE_COUNT: "1", jp.INDEX_IGNORED_FAILURE_COUNT: "1"}, 5, 35.0),
    ({}, 30, 0.0),
], ids=["first failure: 10 s", "second: 20 s", "ignored ones count too: 40 s", "waited out"])
def test_remaining_backoff_of_index(counts, ago, remaining):
    assert jp.remaining_backoff_of_index(failed_pod(("main", 1), index=0, counts=counts, ago=ago), NOW) == remaining
    assert jp.remaining_backoff_of_index(None, NOW) == 0.0


def test_remaining_backoff_of_index_with_a_shorter_base():
    assert jp.remaining_backoff_of_index(failed_pod(("main", 1), index=0, counts={jp.INDEX_FAILURE_COUNT: "1"}, ago=1), NOW, 3.0, 600.0) == 5.0


def test_failed_indexes_and_delayed_deletion():
    j = job(completions=5, backoffLimitPerIndex=1)
    j["status"]["failedIndexes"] = "4"
    spent = failed_pod(("main", 1), index=0, counts={jp.INDEX_FAILURE_COUNT: "1"}, name="spent")
    retry_old = failed_pod(("main", 1), index=2, counts={jp.INDEX_FAILURE_COUNT: "0"}, ago=30, name="old")
    retry_new = failed_pod(("main", 1), index=2, counts={jp.INDEX_FAILURE_COUNT: "0"}, ago=5, name="new")
    replaced = failed_pod(("main", 1), index=3, counts={jp.INDEX_FAILURE_COUNT: "0"}, name="replaced")
    running = {"metadata": {"name": "r", "annotations": {COMPLETION_INDEX_KEY: "3"}}, "status": {"phase": "Running"}}
    pods = [spent, retry_old, retry_new, replaced, running]
    assert jp.failed_indexes(j, pods) == {0, 4}
    # index 2 waits for its replacement (the latest failure); index 3 has its replacement running
    assert jp.pods_with_delayed_deletion(j, pods, [running], set(), {0, 4}) == {2: retry_new}


@pytest.mark.parametrize("failed, succeeded, expected", [
    ({1}, {0}, None), ({1}, {0, 2, 3}, jp.FAILED_INDEXES), ({1, 2}, set(), jp.MAX_FAILED_INDEXES_EXCEEDED), (set(), {0, 1, 2, 3}, None),
], ids=["still running", "all decided", "over maxFailedIndexes", "no failure"])
def test_per_index_failure(failed, succeeded, expected):
    assert jp.per_index_failure(job(backoffLimitPerIndex=0, maxFailedIndexes=1), failed, succeeded) == expected


@pytest.mark.parametrize("rules, succeeded, expected", [
    ([{"succeededIndexes": "0-2"}], {0, 1}, None),
    ([{"succeededIndexes": "0-2"}], {0, 1, 2}, "Matched rules at index 0"),
    ([{"succeededIndexes": "0,2-3", "succeededCount": 2}], {1, 3}, None),
    ([{"succeededIndexes": "0,2-3", "succeededCount": 2}], {0, 3}, "Matched rules at index 0"),
    ([{"succeededCount": 3}, {"succeededIndexes": "1"}], {1}, "Matched rules at index 1"),
    ([{"succeededCount": 1}], set(), None),
], ids=["indexes missing", "indexes all", "count outside the set", "count inside", "second rule", "nothing succeeded"])
def test_match_success_policy(rules, succeeded, expected):
    assert jp.match_success_policy(job(successPolicy={"rules": rules}), succeeded) == expected


def test_a_success_policy_over_2_31_indexes_is_matched_at_once():
    """``"0-2147483646"`` is a valid rule: counted against its intervals, never expanded."""
    big = job(successPolicy={"rules": [{"succeededIndexes": "0-2147483646", "succeededCount": 1}]})
    big["spec"]["completions"] = 2**31 - 1
    started = time.process_time()
    assert jp.match_success_policy(big, {0}) == "Matched rules at index 0"
    assert time.process_time() - started < 0.5
