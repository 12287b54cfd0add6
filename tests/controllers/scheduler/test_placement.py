"""The scheduler's decision, table-driven: which Nodes a Pod may go to (upstream's
NodeUnschedulable, TaintToleration and NodeAffinity filters, with their reasons), which one
it goes to (fewest Pods, then name), and the FitError text when none fits."""

from __future__ import annotations

from collections import Counter

import pytest

from kubesvc.controllers.scheduler.placement import (
    NO_NODES,
    Placement,
    filter_node,
    fit_error,
    matches_node_affinity,
    needs_scheduling,
    pick_node,
    tolerates,
)
from tests.support import builders


def node(name: str, *, ready: str | None = "True", **kw) -> dict:
    """A Node, Ready unless told otherwise."""
    return builders.node(name, ready=ready, **kw)


def pod(**spec) -> dict:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": [{"name": "c", "image": "i"}], **spec}}


def required_affinity(*terms: dict) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


# ---- which Pods are ours ------------------------------------------------------------------------

NEEDS = [
    ("plain pending pod", pod(), True),
    ("default scheduler named", pod(schedulerName="default-scheduler"), True),
    ("another scheduler", pod(schedulerName="my-scheduler"), False),
    ("already bound", pod(nodeName="n1"), False),
    ("gated", pod(schedulingGates=[{"name": "wait"}]), False),
    ("being deleted", {**pod(), "metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"}}, False),
    ("finished", {**pod(), "status": {"phase": "Succeeded"}}, False),
]


@pytest.mark.parametrize("obj, expected", [(p, e) for _, p, e in NEEDS], ids=[name for name, _, _ in NEEDS])
def test_needs_scheduling(obj, expected):
    assert needs_scheduling(obj) is expected


# ---- tolerations (upstream ToleratesTaint) ---------------------------------------------------------

TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
TOLERATIONS = [
    ("equal key value effect", {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}, True),
    ("operator defaults to equal", {"key": "dedicated", "value": "gpu"}, True),
    ("equal other value", {"key": "dedicated", "value": "cpu"}, False),
    ("exists key", {"key": "dedicated", "operator": "Exists"}, True),
    ("exists everything", {"operator": "Exists"}, True),
    ("other effect", {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
    ("other key", {"key": "team", "operator": "Exists"}, False),
    ("unknown operator", {"key": "dedicated", "operator": "Gt", "value": "gpu"}, False),
]


@pytest.mark.parametrize("toleration, expected", [(t, e) for _, t, e in TOLERATIONS], ids=[name for name, _, _ in TOLERATIONS])
def test_tolerates(toleration, expected):
    assert tolerates(toleration, TAINT) is expected


# ---- node affinity / selector ----------------------------------------------------------------------

LABELS = {"disk": "ssd", "zone": "a", "cores": "8"}
AFFINITY = [
    ("no selector", pod(), True),
    ("selector matches", pod(nodeSelector={"disk": "ssd"}), True),
    ("selector value differs", pod(nodeSelector={"disk": "hdd"}), False),
    ("selector label missing", pod(nodeSelector={"gpu": "yes"}), False),
    ("In", pod(affinity=required_affinity({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]})), True),
    ("NotIn", pod(affinity=required_affinity({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]})), False),
    ("NotIn absent label", pod(affinity=required_affinity({"matchExpressions": [{"key": "rack", "operator": "NotIn", "values": ["1"]}]})), True),
    ("Exists", pod(affinity=required_affinity({"matchExpressions": [{"key": "disk", "operator": "Exists"}]})), True),
    ("DoesNotExist", pod(affinity=required_affinity({"matchExpressions": [{"key": "disk", "operator": "DoesNotExist"}]})), False),
    ("Gt", pod(affinity=required_affinity({"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}]})), True),
    ("Lt", pod(affinity=required_affinity({"matchExpressions": [{"key": "cores", "operator": "Lt", "values": ["4"]}]})), False),
    ("terms are ORed", pod(affinity=required_affinity({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]},
                                                      {"matchExpressions": [{"key": "disk", "operator": "Exists"}]})), True),
    ("expressions are ANDed", pod(affinity=required_affinity({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                                                                                   {"key": "disk", "operator": "In", "values": ["hdd"]}]})), False),
    ("empty term matches nothing", pod(affinity=required_affinity({})), False),
    ("match fields by node name", pod(affinity=required_affinity({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]})), True),
    ("selector and affinity both needed", pod(nodeSelector={"disk": "hdd"},
                                              affinity=required_affinity({"matchExpressions": [{"key": "zone", "operator": "Exists"}]})), False),
]


@pytest.mark.parametrize("obj, expected", [(p, e) for _, p, e in AFFINITY], ids=[name for name, _, _ in AFFINITY])
def test_matches_node_affinity(obj, expected):
    assert matches_node_affinity(obj, node("n1", labels=LABELS)) is expected


# ---- filters: the first failing one's reason ---------------------------------------------------------

FILTERS = [
    ("ready node fits", pod(), node("n1"), None),
    ("cordoned", pod(), node("n1", unschedulable=True), "node(s) were unschedulable"),
    ("cordoned but tolerated", pod(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]),
     node("n1", unschedulable=True), None),
    ("not ready", pod(), node("n1", ready="False"), "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"),
    ("ready unknown", pod(), node("n1", ready="Unknown"), "node(s) had untolerated taint {node.kubernetes.io/unreachable: }"),
    ("no ready condition", pod(), node("n1", ready=None), "node(s) had untolerated taint {node.kubernetes.io/unreachable: }"),
    ("not ready but tolerated", pod(tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]), node("n1", ready="False"), None),
    ("NoSchedule taint", pod(), node("n1", taints=[TAINT]), "node(s) had untolerated taint {dedicated: gpu}"),
    ("NoExecute taint", pod(), node("n1", taints=[{**TAINT, "effect": "NoExecute"}]), "node(s) had untolerated taint {dedicated: gpu}"),
    ("PreferNoSchedule only scores", pod(), node("n1", taints=[{**TAINT, "effect": "PreferNoSchedule"}]), None),
    ("tolerated taint", pod(tolerations=[{"key": "dedicated", "value": "gpu"}]), node("n1", taints=[TAINT]), None),
    ("selector mismatch", pod(nodeSelector={"disk": "ssd"}), node("n1"), "node(s) didn't match Pod's node affinity/selector"),
    ("unschedulable is checked before taints", pod(), node("n1", unschedulable=True, taints=[TAINT]), "node(s) were unschedulable"),
    ("taints are checked before affinity", pod(nodeSelector={"disk": "ssd"}), node("n1", taints=[TAINT]),
     "node(s) had untolerated taint {dedicated: gpu}"),
]


@pytest.mark.parametrize("obj, target, reason", [(p, n, r) for _, p, n, r in FILTERS], ids=[name for name, _, _, _ in FILTERS])
def test_filter_node(obj, target, reason):
    assert filter_node(obj, target) == reason


# ---- picking --------------------------------------------------------------------------------------

PICKS = [
    ("no nodes", pod(), [], {}, Placement(None, NO_NODES)),
    ("fewest pods", pod(), [node("a"), node("b"), node("c")], {"a": 2, "b": 1, "c": 3}, Placement("b", "")),
    ("ties by name", pod(), [node("c"), node("b"), node("a")], {"a": 1, "b": 1, "c": 1}, Placement("a", "")),
    ("unknown count is zero", pod(), [node("a"), node("b")], {"a": 1}, Placement("b", "")),
    ("only feasible nodes count", pod(), [node("a", unschedulable=True), node("b")], {"b": 10}, Placement("b", "")),
    ("none fits", pod(nodeSelector={"disk": "ssd"}), [node("a"), node("b", unschedulable=True), node("c", labels={"disk": "hdd"})], {},
     Placement(None, "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector.")),
    ("reasons sorted as text", pod(), [node("a", ready="False"), node("b", unschedulable=True), node("c", unschedulable=True)], {},
     Placement(None, "0/3 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, "
                     "2 node(s) were unschedulable.")),
]


@pytest.mark.parametrize("obj, nodes, counts, expected", [(p, n, c, e) for _, p, n, c, e in PICKS], ids=[name for name, *_ in PICKS])
def test_pick_node(obj, nodes, counts, expected):
    assert pick_node(obj, nodes, counts) == expected


def test_fit_error_is_upstreams_sentence():
    assert fit_error(2, Counter({"node(s) were unschedulable": 2})) == "0/2 nodes are available: 2 node(s) were unschedulable."
