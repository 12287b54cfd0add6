"""The garbage collector's decisions, as pure functions (upstream garbagecollector.go and patch.go).

**Classifying an item's owners** (``classifyReferences``). Each ownerReference of an item is

* *dangling*: the owner does not exist: the apiserver answers 404 for its name, or the object
  with that name has another uid (the owner was deleted and something new took the name);
* *waiting for dependents deletion*: the owner exists, is marked for deletion and carries the
  ``foregroundDeletion`` finalizer: it waits for its dependents to go;
* *solid*: the owner exists otherwise.

**attemptToDeleteItem** then decides (:func:`decide_attempt_to_delete`):

* a solid owner keeps the item; dangling and waiting references are removed from it by a
  patch (a waiting owner would otherwise wait forever for this dependent);
* no solid owner, some waiting, and the item has dependents of its own: delete it in the
  foreground too (so the waiting owner waits for the whole subtree); if one of those
  dependents is itself deleting its dependents, first unset ``blockOwnerDeletion`` on the
  item's references (upstream's guard against a cycle of foreground deletions);
* otherwise delete it, with the propagation its own finalizers ask for (``orphan`` ->
  Orphan, ``foregroundDeletion`` -> Foreground), else Background.

**processDeletingDependentsItem** (:func:`decide_deleting_dependents`): an owner deleting its
dependents loses its ``foregroundDeletion`` finalizer once no dependent blocks it
(``blockOwnerDeletion: true``); until then its blocking dependents are (re)queued.

Every write names the object by uid as well as by name: deletes carry a ``uid`` precondition
(and a ``resourceVersion`` one, dropped on retry only when the ownerReferences did not
change), patches put ``metadata.uid`` in the patch body, which the apiserver rejects as
"field is immutable" when the object with that name is another one.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubesvc.controllers.gc.graph import FINALIZER_FOREGROUND, FINALIZER_ORPHAN, Node, has_finalizer, is_blocking

SOLID, DANGLING, WAITING = "solid", "dangling", "waitingForDependentsDeletion"


def owner_state(owner: dict | None, ref: dict) -> str:
    """One ownerReference's class, given the live owner found by name (None: 404)."""
    if owner is None:
        return DANGLING
    meta = owner.get("metadata") or {}
    if meta.get("uid") != ref.get("uid"):
        return DANGLING
    if meta.get("deletionTimestamp") and has_finalizer(meta, FINALIZER_FOREGROUND):
        return WAITING
    return SOLID


@dataclass(frozen=True)
class Classified:
    solid: tuple[dict, ...] = ()
    dangling: tuple[dict, ...] = ()
    waiting: tuple[dict, ...] = ()


def classify(refs_and_states: list[tuple[dict, str]]) -> Classified:
    by_state: dict[str, list[dict]] = {SOLID: [], DANGLING: [], WAITING: []}
    for ref, state in refs_and_states:
        by_state[state].append(ref)
    return Classified(tuple(by_state[SOLID]), tuple(by_state[DANGLING]), tuple(by_state[WAITING]))


# ---- decisions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Keep:
    """Nothing to do."""

    reason: str


@dataclass(frozen=True)
class RemoveOwnerReferences:
    """Patch the item: drop the ownerReferences with these uids."""

    owner_uids: tuple[str, ...]


@dataclass(frozen=True)
class Delete:
    """Delete the item (uid + resourceVersion preconditions) with this propagation policy,
    after unsetting ``blockOwnerDeletion`` on its ownerReferences if ``unblock_first``."""

    policy: str
    unblock_first: bool = False


@dataclass(frozen=True)
class RemoveFinalizer:
    finalizer: str


@dataclass(frozen=True)
class QueueDependents:
    """Re-check these blocking dependents (they should be going)."""

    dependents: tuple[Node, ...]


def decide_attempt_to_delete(latest: dict, owners: Classified, item: Node) -> Keep | RemoveOwnerReferences | Delete:
    """upstream attemptToDeleteItem after the item's owners were classified (``latest`` is
    the item as just read from the apiserver)."""
    meta = latest.get("metadata") or {}
    if owners.solid:
        if not owners.dangling and not owners.waiting:
            return Keep("has an existing owner")
        return RemoveOwnerReferences(tuple(ref.get("uid", "") for ref in (*owners.dangling, *owners.waiting)))
    if owners.waiting and item.dependents:
        cycle = any(dep.deleting_dependents for dep in item.dependents)
        return Delete("Foreground", unblock_first=cycle)
    if has_finalizer(meta, FINALIZER_ORPHAN):
        return Delete("Orphan")
    if has_finalizer(meta, FINALIZER_FOREGROUND):
        return Delete("Foreground")
    return Delete("Background")


def decide_deleting_dependents(owner: Node) -> RemoveFinalizer | QueueDependents:
    """upstream processDeletingDependentsItem."""
    blocking = owner.blocking_dependents()
    if not blocking:
        return RemoveFinalizer(FINALIZER_FOREGROUND)
    return QueueDependents(tuple(dep for dep in blocking if not dep.deleting_dependents))


# ---- patch and delete bodies -------------------------------------------------------------


def delete_owner_refs_strategic_patch(dependent_uid: str, owner_uids: list[str] | tuple[str, ...]) -> dict:
    """upstream deleteOwnerRefStrategicMergePatch: ``$patch: delete`` by uid (ownerReferences
    merge on uid), with the dependent's uid as a precondition."""
    return {"metadata": {"ownerReferences": [{"$patch": "delete", "uid": uid} for uid in owner_uids], "uid": dependent_uid}}


def delete_owner_refs_merge_patch(current: dict, owner_uids: list[str] | tuple[str, ...]) -> dict:
    """upstream deleteOwnerRefJSONMergePatch (for resources without strategic merge patch):
    the remaining list, pinned to the resourceVersion it was computed from."""
    meta = current.get("metadata") or {}
    remaining = [ref for ref in meta.get("ownerReferences") or [] if ref.get("uid") not in owner_uids]
    return {"metadata": {"resourceVersion": meta.get("resourceVersion", ""), "ownerReferences": remaining}}


def unblock_owner_refs_strategic_patch(item: Node) -> dict:
    """upstream unblockOwnerReferencesStrategicMergePatch: the blocking references again,
    with ``blockOwnerDeletion: false`` (merged by uid)."""
    refs = [{**ref, "blockOwnerDeletion": False} for ref in item.owners if is_blocking(ref)]
    return {"metadata": {"ownerReferences": refs, "uid": item.identity.uid}}


def unblock_owner_refs_merge_patch(current: dict, item: Node) -> dict:
    meta = current.get("metadata") or {}
    refs = [{**ref, "blockOwnerDeletion": False} for ref in item.owners]
    return {"metadata": {"resourceVersion": meta.get("resourceVersion", ""), "ownerReferences": refs}}


def remove_finalizer_patch(current: dict, finalizer: str) -> dict | None:
    """The JSON merge patch removing ``finalizer`` at the read resourceVersion (upstream
    removeFinalizer); None if the object does not have it."""
    meta = current.get("metadata") or {}
    finalizers = list(meta.get("finalizers") or [])
    if finalizer not in finalizers:
        return None
    rest = [f for f in finalizers if f != finalizer]
    return {"metadata": {"resourceVersion": meta.get("resourceVersion", ""), "finalizers": rest or None}}


def delete_options(uid: str, policy: str, resource_version: str = "") -> dict:
    preconditions = {"uid": uid}
    if resource_version:
        preconditions["resourceVersion"] = resource_version
    return {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": preconditions, "propagationPolicy": policy}
