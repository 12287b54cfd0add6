"""The garbage collector's pure decisions: owner classification, attemptToDeleteItem's choice,
foreground completion, and the request bodies (upstream garbagecollector.go, patch.go)."""

from __future__ import annotations

import pytest

from kubesvc.controllers.gc import decisions
from kubesvc.controllers.gc.decisions import (
    DANGLING, SOLID, WAITING, Classified, Delete, Keep, QueueDependents, RemoveFinalizer, RemoveOwnerReferences)
from kubesvc.controllers.gc.graph import Node, ObjectReference
from kubesvc.controllers.gc.resources import ResourceList, deletable_resources, mapping


def ref(uid: str, **extra) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "name": uid, "uid": uid, **extra}


def node(uid: str, owners=(), **flags) -> Node:
    return Node(ObjectReference("EndpointSlice", "discovery.k8s.io/v1", "ns", uid, uid), list(owners), **flags)


def live(uid: str, deleting: bool = False, finalizers=()) -> dict:
    meta: dict = {"uid": uid, "name": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {"metadata": meta}


@pytest.mark.parametrize("owner, expected", [
    (None, DANGLING),
    (live("other-uid"), DANGLING),
    (live("o"), SOLID),
    (live("o", deleting=True), SOLID),
    (live("o", deleting=True, finalizers=["orphan"]), SOLID),
    (live("o", deleting=True, finalizers=["foregroundDeletion"]), WAITING),
    (live("o", finalizers=["foregroundDeletion"]), SOLID),
], ids=["not-found", "name-taken-by-another-uid", "exists", "being-deleted-background", "being-orphaned",
        "deleting-dependents", "foreground-finalizer-but-not-deleted"])
def test_owner_state(owner, expected):
    assert decisions.owner_state(owner, ref("o")) == expected


def _with_dependents(item: Node, *deps: Node) -> Node:
    item.dependents.update(deps)
    return item


@pytest.mark.parametrize("latest, owners, item, expected", [
    (live("i"), Classified(solid=(ref("a"),)), node("i"), Keep("has an existing owner")),
    (live("i"), Classified(solid=(ref("a"),), dangling=(ref("b"),), waiting=(ref("c"),)), node("i"), RemoveOwnerReferences(("b", "c"))),
    (live("i"), Classified(dangling=(ref("a"), ref("b"))), node("i"), Delete("Background")),
    (live("i", finalizers=["orphan"]), Classified(dangling=(ref("a"),)), node("i"), Delete("Orphan")),
    (live("i", finalizers=["foregroundDeletion"]), Classified(dangling=(ref("a"),)), node("i"), Delete("Foreground")),
    (live("i"), Classified(waiting=(ref("a"),)), node("i"), Delete("Background")),
    (live("i"), Classified(waiting=(ref("a"),)), _with_dependents(node("i"), node("d")), Delete("Foreground")),
    (live("i"), Classified(waiting=(ref("a"),), dangling=(ref("b"),)), _with_dependents(node("i"), node("d", deleting_dependents=True)),
     Delete("Foreground", unblock_first=True)),
], ids=["solid-owner-keeps", "solid-owner-drops-dangling-and-waiting-refs", "all-dangling-background",
        "own-orphan-finalizer-honoured", "own-foreground-finalizer-honoured", "waiting-owner-leaf-background",
        "waiting-owner-with-dependents-foreground", "cycle-guard-unblocks-first"])
def test_decide_attempt_to_delete(latest, owners, item, expected):
    assert decisions.decide_attempt_to_delete(latest, owners, item) == expected


def test_classify_keeps_reference_order_within_each_class():
    got = decisions.classify([(ref("a"), DANGLING), (ref("b"), SOLID), (ref("c"), DANGLING), (ref("d"), WAITING)])
    assert [r["uid"] for r in got.dangling] == ["a", "c"]
    assert [r["uid"] for r in got.solid] == ["b"] and [r["uid"] for r in got.waiting] == ["d"]


def test_foreground_owner_finishes_when_no_dependent_blocks():
    owner = Node(ObjectReference("Service", "v1", "ns", "web", "o"), deleting_dependents=True)
    non_blocking = node("n", owners=[ref("o", blockOwnerDeletion=False)])
    owner.dependents.add(non_blocking)
    assert decisions.decide_deleting_dependents(owner) == RemoveFinalizer("foregroundDeletion")
    blocking = node("b", owners=[ref("o", blockOwnerDeletion=True)])
    deleting_its_own = node("c", owners=[ref("o", blockOwnerDeletion=True)], deleting_dependents=True)
    owner.dependents.update({blocking, deleting_its_own})
    assert decisions.decide_deleting_dependents(owner) == QueueDependents((blocking,))


def test_patch_bodies_name_the_object_by_uid():
    assert decisions.delete_owner_refs_strategic_patch("dep", ["a", "b"]) == {
        "metadata": {"ownerReferences": [{"$patch": "delete", "uid": "a"}, {"$patch": "delete", "uid": "b"}], "uid": "dep"}}
    current = {"metadata": {"resourceVersion": "7", "ownerReferences": [ref("a"), ref("b")]}}
    assert decisions.delete_owner_refs_merge_patch(current, ["a"]) == {"metadata": {"resourceVersion": "7", "ownerReferences": [ref("b")]}}
    item = node("i", owners=[ref("a", blockOwnerDeletion=True), ref("b")])
    assert decisions.unblock_owner_refs_strategic_patch(item) == {
        "metadata": {"ownerReferences": [ref("a", blockOwnerDeletion=False)], "uid": "i"}}


@pytest.mark.parametrize("finalizers, expected", [
    (["foregroundDeletion"], {"metadata": {"resourceVersion": "3", "finalizers": None}}),
    (["x/y", "foregroundDeletion"], {"metadata": {"resourceVersion": "3", "finalizers": ["x/y"]}}),
    (["x/y"], None),
], ids=["last-one-clears-the-list", "others-kept", "absent-no-patch"])
def test_remove_finalizer_patch(finalizers, expected):
    current = {"metadata": {"resourceVersion": "3", "finalizers": finalizers}}
    assert decisions.remove_finalizer_patch(current, "foregroundDeletion") == expected


def test_delete_options_carry_uid_and_resource_version_preconditions():
    assert decisions.delete_options("u", "Background", "12")["preconditions"] == {"uid": "u", "resourceVersion": "12"}
    assert decisions.delete_options("u", "Foreground")["preconditions"] == {"uid": "u"}


DISCOVERY = [
    ResourceList("v1", (
        {"name": "services", "namespaced": True, "kind": "Service", "verbs": ["create", "delete", "get", "list", "patch", "watch"]},
        {"name": "services/status", "namespaced": True, "kind": "Service", "verbs": ["get", "patch", "update"]},
        {"name": "events", "namespaced": True, "kind": "Event", "verbs": ["delete", "list", "watch"]},
        {"name": "nodes", "namespaced": False, "kind": "Node", "verbs": ["delete", "list", "watch"]},
        {"name": "bindings", "namespaced": True, "kind": "Binding", "verbs": ["create"]},
    ), True),
    ResourceList("events.k8s.io/v1", ({"name": "events", "namespaced": True, "kind": "Event", "verbs": ["delete", "list", "watch"]},), True),
    ResourceList("example.com/v1", ({"name": "widgets", "namespaced": True, "kind": "Widget", "verbs": ["delete", "list", "watch"]},), True),
    ResourceList("example.com/v1beta1", ({"name": "widgets", "namespaced": True, "kind": "Widget", "verbs": ["delete", "list", "watch"]},), False),
]


def test_deletable_resources_are_preferred_versions_with_delete_list_watch_minus_events():
    got = sorted((r.api_version, r.plural, r.namespaced) for r in deletable_resources(DISCOVERY))
    assert got == [("example.com/v1", "widgets", True), ("v1", "nodes", False), ("v1", "services", True)]


def test_mapping_covers_every_served_version():
    kinds = mapping(DISCOVERY)
    assert kinds[("example.com/v1beta1", "Widget")].version == "v1beta1"
    assert kinds[("v1", "Node")].namespaced is False and ("v1", "Binding") in kinds
