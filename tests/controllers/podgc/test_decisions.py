"""PodGC's decisions (gc_controller_test.go's cases, expected values written out by hand)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from kubesvc.controllers.podgc import decisions as gc

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def pod(name, phase="Running", created="2026-01-01T00:00:00Z", node="n1", deleting=False, reason=None, conditions=None):
    status = {"phase": phase}
    if reason:
        status["reason"] = reason
    if conditions:
        status["conditions"] = conditions
    meta = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T11:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": status}


def node(name, ready=True, taints=()):
    return {"metadata": {"name": name}, "spec": {"taints": [{"key": k, "effect": "NoExecute"} for k in taints]},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def names(pods):
    return [p["metadata"]["name"] for p in pods]


@pytest.mark.parametrize("phase, terminated", [("Pending", False), ("Running", False), ("Unknown", False),
                                               ("Succeeded", True), ("Failed", True)], ids=lambda v: str(v))
def test_is_terminated(phase, terminated):
    assert gc.is_terminated(pod("a", phase)) is terminated


@pytest.mark.parametrize("pods, threshold, expected", [
    # upstream's "delete pods in order": the oldest two above a threshold of one
    ([pod("a", "Failed", "2026-01-01T00:00:01Z"), pod("b", "Succeeded", "2026-01-01T00:00:00Z"), pod("c", "Failed", "2026-01-01T00:00:02Z")],
     1, ["b", "a"]),
    # running Pods never count
    ([pod("a", "Running"), pod("b", "Failed"), pod("c", "Pending")], 1, []),
    # evicted first, however new; then by creation, ties by name
    ([pod("old", "Succeeded", "2026-01-01T00:00:00Z"), pod("tie-b", "Failed", "2026-01-01T00:00:05Z"),
      pod("tie-a", "Failed", "2026-01-01T00:00:05Z"), pod("evicted", "Failed", "2026-01-01T09:00:00Z", reason="Evicted")],
     1, ["evicted", "old", "tie-a"]),
    # a threshold of 0 turns it off
    ([pod("a", "Failed"), pod("b", "Failed")], 0, []),
    ([pod("a", "Failed"), pod("b", "Failed")], 2, []),
], ids=["oldest-first", "only-terminated", "evicted-then-oldest-then-name", "threshold-0-off", "at-threshold"])
def test_terminated_to_delete(pods, threshold, expected):
    assert names(gc.terminated_to_delete(pods, threshold)) == expected


def test_terminating_out_of_service():
    nodes = {"down": node("down", ready=False, taints=[gc.TAINT_OUT_OF_SERVICE]), "down-untainted": node("down-untainted", ready=False),
             "up-tainted": node("up-tainted", taints=[gc.TAINT_OUT_OF_SERVICE])}
    pods = [pod("b", node="down", deleting=True, created="2026-01-01T00:00:02Z"), pod("a", node="down", deleting=True, created="2026-01-01T00:00:03Z"),
            pod("running-on-down", node="down"), pod("x", node="down-untainted", deleting=True), pod("y", node="up-tainted", deleting=True),
            pod("z", node="unknown", deleting=True)]
    assert names(gc.terminating_out_of_service(pods, nodes)) == ["b", "a"]


def test_unscheduled_terminating():
    pods = [pod("bound", node="n1", deleting=True), pod("free", node=None, deleting=True), pod("pending", node=None)]
    assert names(gc.unscheduled_terminating(pods)) == ["free"]


def test_missing_nodes():
    pods = [pod("a", node="n1"), pod("b", node="gone"), pod("c", node=None), pod("d", node="gone")]
    assert gc.missing_nodes(pods, {"n1"}) == {"gone"}


def test_quarantine_keeps_the_first_time_a_name_was_missed():
    q = gc.Quarantine(40.0)
    q.note(["a"], 100.0)
    q.note(["a", "b"], 130.0)  # a stays due at 140, b at 170
    assert q.take_due(139.9) == []
    assert q.take_due(140.0) == ["a"]
    assert q.take_due(169.0) == []
    assert q.take_due(170.0) == ["b"]
    assert q.take_due(1000.0) == []  # handed out once


def test_failed_status_patch():
    assert gc.failed_status_patch(pod("a", "Succeeded"), gc.ORPHANED_CONDITION, NOW) is None
    assert gc.failed_status_patch(pod("a", "Failed"), None, NOW) is None
    assert gc.failed_status_patch(pod("a", "Pending"), None, NOW) == {"metadata": {"uid": "uid-a"}, "status": {"phase": "Failed"}}
    assert gc.failed_status_patch(pod("a", "Running"), gc.ORPHANED_CONDITION, NOW) == {
        "metadata": {"uid": "uid-a"},
        "status": {"phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
                                                      "message": "PodGC: node no longer exists", "lastTransitionTime": "2026-01-01T12:00:00Z"}]}}
    # an existing True condition keeps its transition time
    had = pod("a", "Running", conditions=[{"type": "DisruptionTarget", "status": "True", "lastTransitionTime": "2026-01-01T10:00:00Z"}])
    assert gc.failed_status_patch(had, gc.ORPHANED_CONDITION, NOW)["status"]["conditions"][0]["lastTransitionTime"] == "2026-01-01T10:00:00Z"
