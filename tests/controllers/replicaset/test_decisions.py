"""The ReplicaSet controller's pure decisions, table-driven after upstream's unit tests
(controller_utils_test.go ``TestSortingActivePodsWithRanks``, replica_set_test.go
``TestGetPodsToDelete``, replica_set_utils_test.go ``TestCalculateStatus``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from kubesvc.api.pods import is_available
from kubesvc.controllers.replicaset.decisions import calculate_status, delete_first, pods_to_delete, status_unchanged
from kubesvc.util.golang import rfc3339

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def ago(seconds: float) -> str:
    return rfc3339(NOW - timedelta(seconds=seconds))


def pod(name: str, *, node: str = "", phase: str = "Running", ready: bool | None = None, ready_since: float = 3600,
        created: float = 7200, cost: int | None = None, restarts: int = 0, labels: dict | None = None, uid: str = "") -> dict:
    meta = {"name": name, "uid": uid or name, "creationTimestamp": ago(created), "labels": labels if labels is not None else {"app": "a"}}
    if cost is not None:
        meta["annotations"] = {"controller.kubernetes.io/pod-deletion-cost": str(cost)}
    status: dict = {"phase": phase, "containerStatuses": [{"name": "c", "restartCount": restarts}]}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": ago(ready_since)}]
    return {"metadata": meta, "spec": {"nodeName": node}, "status": status}


# (first, second): the first is deleted before the second
DELETE_FIRST = {
    "unscheduled before scheduled": (pod("a", phase="Pending"), pod("b", node="n1", phase="Pending")),
    "pending before unknown": (pod("a", node="n1", phase="Pending"), pod("b", node="n1", phase="Unknown")),
    "unknown before running": (pod("a", node="n1", phase="Unknown"), pod("b", node="n1", phase="Running")),
    "not ready before ready": (pod("a", node="n1", ready=False), pod("b", node="n1", ready=True)),
    "lower deletion cost first": (pod("a", node="n1", ready=True, cost=-5), pod("b", node="n1", ready=True)),
    "ready for less time first": (pod("a", node="n1", ready=True, ready_since=10), pod("b", node="n1", ready=True, ready_since=10000)),
    "more restarts first": (pod("a", node="n1", ready=True, restarts=3), pod("b", node="n1", ready=True, restarts=1)),
    "newer first": (pod("a", node="n1", created=60), pod("b", node="n1", created=100000)),
}


@pytest.mark.parametrize("first, second", DELETE_FIRST.values(), ids=DELETE_FIRST.keys())
def test_delete_first(first, second):
    assert delete_first((first, 0), (second, 0), NOW)
    assert not delete_first((second, 0), (first, 0), NOW)


def test_doubled_up_pods_go_first_and_rank_comes_after_readiness():
    assert delete_first((pod("a", node="n1", ready=True), 2), (pod("b", node="n2", ready=True), 1), NOW)
    assert not delete_first((pod("a", node="n1", ready=True), 2), (pod("b", node="n2", ready=False), 1), NOW)


def test_ages_in_one_power_of_two_bucket_compare_by_uid():
    # 1000 s and 1010 s ago are both in the 2^39..2^40 ns bucket: the uid decides, not the age
    younger, older = pod("y", node="n1", created=1000, uid="b"), pod("o", node="n1", created=1010, uid="a")
    assert delete_first((older, 0), (younger, 0), NOW)
    assert not delete_first((younger, 0), (older, 0), NOW)


def test_pods_to_delete_ranks_by_related_pods_on_the_same_node():
    pods = [pod("a", node="n1", ready=True), pod("b", node="n2", ready=True), pod("c", node="n3", ready=True)]
    related = pods + [pod("x", node="n2", ready=True)]  # a sibling ReplicaSet's Pod doubles up n2
    assert [p["metadata"]["name"] for p in pods_to_delete(pods, related, 1, NOW)] == ["b"]


def test_pods_to_delete_takes_all_without_sorting_when_all_go():
    pods = [pod("a", node="n1"), pod("b")]
    assert pods_to_delete(pods, [], 2, NOW) == pods


@pytest.mark.parametrize("min_ready, ready_since, expected", [(0, 0, True), (10, 11, True), (10, 10, False), (10, 5, False)],
                         ids=["no-min-ready", "past", "exactly-not-yet", "too-soon"])
def test_available_is_strictly_after_min_ready_seconds(min_ready, ready_since, expected):
    assert is_available(pod("a", ready=True, ready_since=ready_since), min_ready, NOW) is expected


def test_not_ready_is_never_available():
    assert not is_available(pod("a", ready=False), 0, NOW)


def test_calculate_status_counts_and_failure_condition():
    pods = [pod("a", ready=True, ready_since=100), pod("b", ready=True, ready_since=1), pod("c", ready=False, labels={"app": "a", "x": "1"}),
            pod("d", labels={"other": "1"})]
    status = calculate_status({"replicas": 1}, {"app": "a"}, 10, pods, 5, None, NOW)
    assert status == {"replicas": 4, "fullyLabeledReplicas": 3, "readyReplicas": 2, "availableReplicas": 1}
    failed = calculate_status(status, {"app": "a"}, 10, pods, 5, "pods is forbidden", NOW)
    assert failed["conditions"] == [{"type": "ReplicaFailure", "status": "True", "lastTransitionTime": rfc3339(NOW),
                                     "reason": "FailedCreate", "message": "pods is forbidden"}]
    too_many = calculate_status({}, {"app": "a"}, 0, pods, 1, "boom", NOW)
    assert too_many["conditions"][0]["reason"] == "FailedDelete"
    # the condition stays as it is while failing, and goes on the next clean pass
    assert calculate_status(failed, {"app": "a"}, 10, pods, 5, "other", NOW)["conditions"] == failed["conditions"]
    assert "conditions" not in calculate_status(failed, {"app": "a"}, 10, pods, 5, None, NOW)


def test_status_unchanged_also_needs_the_generation_observed():
    status = {"replicas": 2, "fullyLabeledReplicas": 2, "readyReplicas": 0, "availableReplicas": 0, "observedGeneration": 1}
    assert status_unchanged(status, dict(status), 1)
    assert not status_unchanged(status, dict(status), 2)
    assert not status_unchanged(status, {**status, "readyReplicas": 1}, 1)
