"""The dependency graph (upstream graph_builder.go's processGraphChanges), event by event.

Each test feeds informer events (and virtual delete events) to a ``Graph`` and checks the graph
and the work it asks for: which nodes go to attempt-to-delete / attempt-to-orphan.
"""

from __future__ import annotations

import pytest

from kubesvc.controllers.gc.graph import (
    ADD, DELETE, UPDATE, Graph, GraphEvent, Node, ObjectReference, alternate_owner_identity, partition_dependents,
    references_diffs)

SVC = ("v1", "Service")
SLICE = ("discovery.k8s.io/v1", "EndpointSlice")
NODE = ("v1", "Node")


def ref(uid: str, name: str = "web", kind: str = "Service", api_version: str = "v1", **extra) -> dict:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, **extra}


def obj(uid: str, name: str, namespace: str | None = "ns", owners=(), deleting: bool = False, finalizers=()) -> dict:
    meta: dict = {"name": name, "uid": uid}
    if namespace:
        meta["namespace"] = namespace
    if owners:
        meta["ownerReferences"] = list(owners)
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {"metadata": meta}


def event(kind: tuple[str, str], type_: str, o: dict, old: dict | None = None, virtual: bool = False) -> GraphEvent:
    return GraphEvent(type_, o, kind[0], kind[1], old=old, virtual=virtual)


def uids(nodes) -> list[str]:
    return sorted(n.identity.uid for n in nodes)


def test_unknown_owner_becomes_a_virtual_node_queued_for_a_live_check():
    graph = Graph()
    fx = graph.process(event(SLICE, ADD, obj("s1", "web-1", owners=[ref("svc")])))
    owner = graph.get("svc")
    assert owner is not None and owner.virtual
    assert owner.identity == ObjectReference("Service", "v1", "ns", "web", "svc")  # the dependent's namespace
    assert [n.identity.uid for n in owner.dependents] == ["s1"]
    assert fx.attempt_to_delete == [owner] and not fx.attempt_to_orphan


def test_observing_a_virtual_owner_makes_it_real_without_new_work():
    graph = Graph()
    graph.process(event(SLICE, ADD, obj("s1", "web-1", owners=[ref("svc")])))
    virtual = graph.get("svc")
    fx = graph.process(event(SVC, ADD, obj("svc", "web")))
    assert graph.get("svc") is virtual and virtual.observed
    assert fx.attempt_to_delete == []


def test_owner_observed_under_other_coordinates_rechecks_the_dependents_that_guessed_wrong():
    graph = Graph()
    graph.process(event(SLICE, ADD, obj("s1", "web-1", owners=[ref("svc", name="old-name")])))
    fx = graph.process(event(SVC, ADD, obj("svc", "web")))
    node = graph.get("svc")
    assert node.observed and node.identity.name == "web"
    assert uids(fx.attempt_to_delete) == ["s1"]


def test_dependent_naming_an_owner_in_another_namespace_is_reported_and_rechecked():
    graph = Graph()
    graph.process(event(SVC, ADD, obj("svc", "web", namespace="a")))
    fx = graph.process(event(SLICE, ADD, obj("s1", "web-1", namespace="b", owners=[ref("svc")])))
    assert uids(fx.attempt_to_delete) == ["s1"]
    assert [(d.identity.uid, uid) for d, uid in fx.invalid_namespace_refs] == [("s1", "svc")]


def test_cluster_scoped_owner_can_own_namespaced_dependents():
    graph = Graph()
    graph.process(event(NODE, ADD, obj("n1", "node-a", namespace=None)))
    fx = graph.process(event(SLICE, ADD, obj("s1", "web-1", owners=[ref("n1", name="node-a", kind="Node")])))
    assert fx.attempt_to_delete == [] and fx.invalid_namespace_refs == []
    assert uids(graph.get("n1").dependents) == ["s1"]


def test_owner_deleted_queues_its_dependents_and_is_remembered_absent():
    graph = Graph()
    graph.process(event(SVC, ADD, obj("svc", "web")))
    for uid in ("s1", "s2"):
        graph.process(event(SLICE, ADD, obj(uid, f"web-{uid}", owners=[ref("svc")])))
    fx = graph.process(event(SVC, DELETE, obj("svc", "web")))
    assert graph.get("svc") is None
    assert uids(fx.attempt_to_delete) == ["s1", "s2"]
    assert graph.absent_owners.has(ObjectReference("Service", "v1", "ns", "web", "svc"))


def test_deleted_dependent_leaves_its_owners_dependents():
    graph = Graph()
    graph.process(event(SVC, ADD, obj("svc", "web")))
    graph.process(event(SLICE, ADD, obj("s1", "web-1", owners=[ref("svc")])))
    fx = graph.process(event(SLICE, DELETE, obj("s1", "web-1", owners=[ref("svc")])))
    assert graph.get("s1") is None and graph.get("svc").dependents == set()
    assert fx.attempt_to_delete == []  # the owner is not deleting its dependents


def test_foreground_deletion_marks_the_owner_and_queues_it_with_its_dependents():
    graph = Graph()
    live = obj("svc", "web")
    graph.process(event(SVC, ADD, live))
    graph.process(event(SLICE, ADD, obj("s1", "web-1", owners=[ref("svc", blockOwnerDeletion=True)])))
    marked = obj("svc", "web", deleting=True, finalizers=["foregroundDeletion"])
    fx = graph.process(event(SVC, UPDATE, marked, old=live))
    owner = graph.get("svc")
    assert owner.deleting_dependents and owner.being_deleted
    assert uids(fx.attempt_to_delete) == ["s1", "svc"]
    # the same state again (a resync, another update) starts nothing new
    assert graph.process(event(SVC, UPDATE, marked, old=marked)).attempt_to_delete == []


def test_last_blocking_dependent_gone_requeues_the_owner_deleting_dependents():
    graph = Graph()
    graph.process(event(SVC, ADD, obj("svc", "web", deleting=True, finalizers=["foregroundDeletion"])))
    graph.process(event(SLICE, ADD, obj("s1", "web-1", owners=[ref("svc", blockOwnerDeletion=True)])))
    owner = graph.get("svc")
    assert uids(owner.blocking_dependents()) == ["s1"]
    fx = graph.process(event(SLICE, DELETE, obj("s1", "web-1", owners=[ref("svc", blockOwnerDeletion=True)])))
    assert fx.attempt_to_delete == [owner] and owner.blocking_dependents() == []


@pytest.mark.parametrize("new_owners", [
    [],
    [ref("svc", blockOwnerDeletion=False)],
    [ref("svc")],
], ids=["reference-removed", "unblocked-false", "unblocked-unset"])
def test_dropping_a_blocking_reference_requeues_the_owner(new_owners):
    graph = Graph()
    graph.process(event(SVC, ADD, obj("svc", "web")))
    before = obj("s1", "web-1", owners=[ref("svc", blockOwnerDeletion=True)])
    graph.process(event(SLICE, ADD, before))
    fx = graph.process(event(SLICE, UPDATE, obj("s1", "web-1", owners=new_owners), old=before))
    assert uids(fx.attempt_to_delete) == ["svc"]
    assert uids(graph.get("svc").dependents) == (["s1"] if new_owners else [])


def test_orphan_deletion_queues_the_owner_for_orphaning_once():
    graph = Graph()
    live = obj("svc", "web")
    graph.process(event(SVC, ADD, live))
    marked = obj("svc", "web", deleting=True, finalizers=["orphan"])
    fx = graph.process(event(SVC, UPDATE, marked, old=live))
    assert fx.attempt_to_orphan == [graph.get("svc")] and fx.attempt_to_delete == []
    assert graph.process(event(SVC, UPDATE, marked, old=marked)).attempt_to_orphan == []


def test_object_first_seen_already_marked_starts_its_deletion_work():
    graph = Graph()
    fx = graph.process(event(SVC, ADD, obj("svc", "web", deleting=True, finalizers=["orphan"])))
    assert uids(fx.attempt_to_orphan) == ["svc"]


def test_virtual_delete_of_a_virtual_owner_removes_it_and_rechecks_dependents():
    graph = Graph()
    graph.process(event(SLICE, ADD, obj("s1", "web-1", owners=[ref("gone")])))
    identity = graph.get("gone").identity
    fx = graph.process(event(SVC, DELETE, {"metadata": {"name": "web", "namespace": "ns", "uid": "gone"}}, virtual=True))
    assert graph.get("gone") is None
    assert uids(fx.attempt_to_delete) == ["s1"] and graph.absent_owners.has(identity)


def test_virtual_delete_keeps_a_real_node_it_does_not_describe():
    graph = Graph()
    graph.process(event(SVC, ADD, obj("svc", "web")))
    graph.process(event(SLICE, ADD, obj("s1", "web-1", owners=[ref("svc", name="other")])))
    fx = graph.process(event(SVC, DELETE, {"metadata": {"name": "other", "namespace": "ns", "uid": "svc"}}, virtual=True))
    assert graph.get("svc") is not None
    assert uids(fx.attempt_to_delete) == ["s1"]
    assert graph.absent_owners.has(ObjectReference("Service", "v1", "ns", "other", "svc"))


def test_virtual_delete_with_disagreeing_dependents_tries_their_identity_next():
    graph = Graph()
    graph.process(event(SLICE, ADD, obj("s1", "a-1", owners=[ref("x", name="a")])))
    graph.process(event(SLICE, ADD, obj("s2", "b-1", owners=[ref("x", name="b")])))
    assert graph.get("x").identity.name == "a"
    fx = graph.process(event(SVC, DELETE, {"metadata": {"name": "a", "namespace": "ns", "uid": "x"}}, virtual=True))
    replacement = graph.get("x")
    assert replacement.virtual and replacement.identity.name == "b"
    assert uids(fx.attempt_to_delete) == ["s1"] and fx.attempt_to_delete_rate_limited == [replacement]


def test_changed_kind_replaces_the_node_in_its_owners():
    graph = Graph()
    graph.process(event(SVC, ADD, obj("svc", "web")))
    graph.process(event(SLICE, ADD, obj("s1", "web-1", owners=[ref("svc")])))
    old_node = graph.get("s1")
    graph.process(event(("discovery.k8s.io/v2", "EndpointSlice"), UPDATE, obj("s1", "web-1", owners=[ref("svc")])))
    new_node = graph.get("s1")
    assert new_node is not old_node and new_node.identity.api_version == "discovery.k8s.io/v2"
    assert graph.get("svc").dependents == {new_node}


@pytest.mark.parametrize("old, new, expected", [
    ([ref("a")], [ref("a")], ([], [], [])),
    ([], [ref("a")], (["a"], [], [])),
    ([ref("a"), ref("b")], [ref("b")], ([], ["a"], [])),
    ([ref("a")], [ref("a", controller=True)], ([], [], ["a"])),
], ids=["same", "added", "removed", "changed"])
def test_references_diffs(old, new, expected):
    added, removed, changed = references_diffs(old, new)
    assert ([r["uid"] for r in added], [r["uid"] for r in removed], [n["uid"] for _, n in changed]) == expected


def test_partition_and_alternate_identity():
    owner = ObjectReference("Service", "v1", "ns", "web", "x")
    match = Node(ObjectReference("EndpointSlice", "discovery.k8s.io/v1", "ns", "d1", "d1"), [ref("x")])
    wrong_name = Node(ObjectReference("EndpointSlice", "discovery.k8s.io/v1", "ns", "d2", "d2"), [ref("x", name="zzz")])
    other_ns = Node(ObjectReference("EndpointSlice", "discovery.k8s.io/v1", "other", "d3", "d3"), [ref("x")])
    matching, nonmatching = partition_dependents([match, wrong_name, other_ns], owner)
    assert matching == [match] and nonmatching == [wrong_name, other_ns]
    alternate = alternate_owner_identity([match, wrong_name, other_ns], owner)
    assert alternate == ObjectReference("Service", "v1", "ns", "zzz", "x")  # the first after "web"


def test_absent_owner_cache_is_bounded_lru():
    graph = Graph(absent_cache_size=2)
    a, b, c = (ObjectReference("Service", "v1", "ns", n, n) for n in "abc")
    graph.absent_owners.add(a)
    graph.absent_owners.add(b)
    assert graph.absent_owners.has(a)  # a is now the most recent
    graph.absent_owners.add(c)
    assert graph.absent_owners.has(a) and graph.absent_owners.has(c) and not graph.absent_owners.has(b)
