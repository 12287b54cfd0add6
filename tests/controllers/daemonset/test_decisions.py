"""The DaemonSet controller's decisions against upstream's cases (pkg/controller/daemon:
update_test.go TestDaemonSetUpdatesPods, ...WithMaxSurge, ...WhenNewPosIsNotReady,
TestGetUnavailableNumbers; daemon_controller_test.go's node predicates)."""

from __future__ import annotations

import itertools
from datetime import datetime, timezone

import pytest

from kubesvc.controllers.daemonset import decisions as dd
from kubesvc.controllers.history import revisions

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
_names = itertools.count()


def ds(*, max_unavailable=None, max_surge=None, template_spec=None):
    rolling = {}
    if max_unavailable is not None:
        rolling["maxUnavailable"] = max_unavailable
    if max_surge is not None:
        rolling["maxSurge"] = max_surge
    return {"metadata": {"name": "d", "namespace": "default", "uid": "u"},
            "spec": {"template": {"metadata": {"labels": {"app": "d"}}, "spec": template_spec or {"containers": [{"name": "c"}]}},
                     "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": rolling}}}


def node(name, labels=None, taints=None):
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": taints or []}}


def pod(node_name, hash_, ready=True):
    index = next(_names)
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    return {"metadata": {"name": f"p{index}", "creationTimestamp": f"2026-01-01T00:{index // 60:02d}:{index % 60:02d}Z",
                         "labels": {dd.UNIQUE_LABEL_KEY: hash_}}, "spec": {"nodeName": node_name}, "status": status}


def sync(daemon, nodes, pods, hash_, ready_new):
    """One syncDaemonSet with expectations: manage's writes, or else the rolling update's."""
    by_node = {n["metadata"]["name"]: [p for p in pods if p["spec"]["nodeName"] == n["metadata"]["name"]] for n in nodes}
    surge, _ = dd.surge_and_unavailable(daemon, len(nodes))
    creates, deletes = [], []
    for name, node_pods in by_node.items():
        if not node_pods:
            creates.append(name)
        else:
            deletes += dd.pods_to_delete_on_node(daemon, node_pods, True, surge, hash_, NOW)[0]
    if not creates and not deletes:
        deletes, creates = dd.rolling_update(daemon, by_node, {n: True for n in by_node}, hash_, NOW)
    gone = {p["metadata"]["name"] for p in deletes}
    pods = [p for p in pods if p["metadata"]["name"] not in gone] + [pod(n, hash_, ready_new) for n in creates]
    return pods, (len(creates), len(deletes))


def run(daemon, count, ready_new=True, steps=12):
    nodes = [node(f"n{i}") for i in range(count)]
    pods = [pod(f"n{i}", "old") for i in range(count)]
    seen = []
    for _ in range(steps):
        pods, step = sync(daemon, nodes, pods, "new", ready_new)
        seen.append(step)
        if step == (0, 0):
            break
    return seen, pods


def test_updates_pods_with_max_unavailable():
    seen, pods = run(ds(max_unavailable=2), 5)
    assert seen == [(0, 2), (2, 0), (0, 2), (2, 0), (0, 1), (1, 0), (0, 0)]
    assert {p["metadata"]["labels"][dd.UNIQUE_LABEL_KEY] for p in pods} == {"new"} and len(pods) == 5


def test_updates_pods_with_max_surge():
    seen, pods = run(ds(max_unavailable=0, max_surge=2), 5)
    assert seen == [(2, 0), (0, 2), (2, 0), (0, 2), (1, 0), (0, 1), (0, 0)]
    assert len(pods) == 5


def test_new_pods_not_ready_stop_the_update():
    seen, pods = run(ds(max_unavailable=3), 5, ready_new=False)
    assert seen == [(0, 3), (3, 0), (0, 0)]
    assert sum(1 for p in pods if p["metadata"]["labels"][dd.UNIQUE_LABEL_KEY] == "old") == 2


@pytest.mark.parametrize("daemon, desired, expected", [
    (ds(max_unavailable="50%"), 3, (0, 2)),
    (ds(max_unavailable=1), 3, (0, 1)),
    (ds(max_unavailable=0, max_surge="25%"), 5, (2, 0)),
    (ds(max_unavailable=0, max_surge=0), 5, (0, 1)),
    (ds(max_unavailable=0, max_surge=0), 0, (0, 0)),
], ids=["50% of 3 rounds up", "one", "surge 25% of 5", "both 0 -> 1", "no nodes"])
def test_surge_and_unavailable(daemon, desired, expected):
    assert dd.surge_and_unavailable(daemon, desired) == expected


@pytest.mark.parametrize("template_spec, n, expected", [
    ({}, node("a"), (True, True)),
    ({"nodeSelector": {"disk": "ssd"}}, node("a"), (False, False)),
    ({"nodeSelector": {"disk": "ssd"}}, node("a", {"disk": "ssd"}), (True, True)),
    ({"nodeName": "b"}, node("a"), (False, False)),
    ({}, node("a", taints=[{"key": "k", "effect": "NoSchedule"}]), (False, True)),
    ({}, node("a", taints=[{"key": "k", "effect": "NoExecute"}]), (False, False)),
    ({"tolerations": [{"key": "k", "operator": "Exists"}]}, node("a", taints=[{"key": "k", "effect": "NoExecute"}]), (True, True)),
    ({}, node("a", taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]), (True, True)),
    ({}, node("a", taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]), (True, True)),
    ({}, node("a", taints=[{"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}]), (False, True)),
    ({"hostNetwork": True}, node("a", taints=[{"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}]), (True, True)),
], ids=["plain", "selector misses", "selector matches", "other nodeName", "NoSchedule taint", "NoExecute taint", "tolerated",
        "cordoned (tolerated by default)", "not-ready NoExecute tolerated", "network-unavailable", "host network tolerates it"])
def test_node_should_run(template_spec, n, expected):
    assert dd.node_should_run(ds(template_spec=template_spec), n) == expected


def test_pod_template_pins_the_node_and_labels_the_revision():
    daemon = ds()
    daemon["metadata"]["annotations"] = {dd.TEMPLATE_GENERATION_ANNOTATION: "3"}
    template = dd.pod_template_for_node(daemon, "n1", "abc")
    assert template["metadata"]["labels"] == {"app": "d", "controller-revision-hash": "abc", "pod-template-generation": "3"}
    assert dd.target_node({"spec": template["spec"]}) == "n1"
    assert {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"} in template["spec"]["tolerations"]
    assert dd.is_pod_updated({"metadata": {"labels": {"pod-template-generation": "3"}}}, "zzz", "3")


def test_surge_keeps_old_pod_until_new_one_is_available():
    daemon = ds(max_unavailable=0, max_surge=1)
    old, new = pod("n", "old"), pod("n", "new", ready=False)
    assert dd.pods_to_delete_on_node(daemon, [old, new], True, 1, "new", NOW)[0] == []
    new_ready = pod("n", "new")
    assert dd.pods_to_delete_on_node(daemon, [old, new_ready], True, 1, "new", NOW)[0] == [old]
    assert dd.pods_to_delete_on_node(daemon, [old, pod("n", "old")], True, 0, "new", NOW)[0][0]["metadata"]["name"] != old["metadata"]["name"]


def test_history_data_and_revisions():
    daemon = ds()
    data = dd.history_data(daemon)
    assert data["spec"]["template"]["$patch"] == "replace"
    assert "$patch" not in daemon["spec"]["template"]
    revs = [{"metadata": {"name": "b", "creationTimestamp": "2"}, "revision": 2, "data": data},
            {"metadata": {"name": "a", "creationTimestamp": "1"}, "revision": 1, "data": {}}]
    assert [r["metadata"]["name"] for r in revisions.sort_revisions(revs)] == ["a", "b"]
    assert revisions.max_revision(revs) == 2
    assert revisions.revision_name("x" * 300, "h") == "x" * 223 + "-h"
    assert revisions.equal_revision(revs[0], {"data": data}) and not revisions.equal_revision(revs[0], revs[1])
