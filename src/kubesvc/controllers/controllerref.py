"""Adoption and release through the controller reference (pkg/controller/controller_ref_manager.go
``ClaimObject``): which dependents (ReplicaSets of a Deployment, ControllerRevisions of a
DaemonSet, Pods of a Job...) an owner works with.

An object whose ``ownerReferences`` entry with ``controller: true`` names the owner's uid is
the owner's while its labels match the owner's selector; when they stop matching it is
**released** (the reference removed), unless the owner is being deleted. An object with no
controller is **adopted** (a controller reference added) when its labels match, it is not being
deleted, and neither is the owner; before the first adoption of a sync the owner is read again
live (``CanAdopt``): an owner that was deleted and recreated under the same name (another uid)
or is being deleted adopts nothing. An object controlled by someone else is never touched.

Both writes are strategic merge patches carrying the dependent's uid, as upstream sends them;
``ownerReferences`` merge by ``uid``, so ``$patch: delete`` removes exactly our entry.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable

from kubesvc.api.selectors import LabelSelector
from kubesvc.client.rest import ApiError, ResourceClient, is_not_found

STRATEGIC = "strategic"


class Claim(enum.Enum):
    OWNED = "owned"
    ADOPT = "adopt"
    RELEASE = "release"
    IGNORE = "ignore"


def controller_ref(obj: dict) -> dict | None:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def resolve(ref: dict | None, kind: str, indexer, namespace: str | None) -> dict | None:
    """``resolveControllerRef``: the cached owner ``ref`` names, when it is of ``kind`` and
    still the same object (uid checked); None otherwise."""
    if ref is None or ref.get("kind") != kind:
        return None
    owner = indexer.get(ref.get("name", ""), namespace)
    if owner is None or owner["metadata"].get("uid") != ref.get("uid"):
        return None
    return owner


def new_controller_ref(owner: dict, api_version: str, kind: str) -> dict:
    """``metav1.NewControllerRef``."""
    return {"apiVersion": api_version, "kind": kind, "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


def claim_decision(owner: dict, obj: dict, selector: LabelSelector) -> Claim:
    """``ClaimObject``'s choice for one candidate (pure)."""
    owner_meta, meta = owner["metadata"], obj.get("metadata", {})
    owner_deleting = bool(owner_meta.get("deletionTimestamp"))
    matches = selector.matches(meta.get("labels"))
    ref = controller_ref(obj)
    if ref is not None:
        if ref.get("uid") != owner_meta.get("uid"):
            return Claim.IGNORE
        if matches:
            return Claim.OWNED
        return Claim.IGNORE if owner_deleting else Claim.RELEASE
    if owner_deleting or not matches or meta.get("deletionTimestamp") or meta.get("namespace") != owner_meta.get("namespace"):
        return Claim.IGNORE
    return Claim.ADOPT


class CannotAdopt(Exception):
    pass


async def claim(owner: dict, candidates: list[dict], selector: LabelSelector, api: ResourceClient, api_version: str, kind: str,
                fresh_owner: Callable[[], Awaitable[dict | None]]) -> list[dict]:
    """The candidates the owner controls after adopting orphans and releasing the ones that no
    longer match (each write's result replaces the cached copy). ``fresh_owner`` reads the
    owner live for ``CanAdopt``."""
    claimed: list[dict] = []
    checked = False
    errors: list[Exception] = []
    for obj in candidates:
        decision = claim_decision(owner, obj, selector)
        meta = obj["metadata"]
        if decision is Claim.OWNED:
            claimed.append(obj)
        elif decision is Claim.ADOPT:
            if not checked:
                await _can_adopt(owner, kind, fresh_owner)
                checked = True
            patch = {"metadata": {"ownerReferences": [new_controller_ref(owner, api_version, kind)], "uid": meta["uid"]}}
            try:
                claimed.append(await api.patch(meta["name"], patch, meta.get("namespace"), patch_type=STRATEGIC))
            except ApiError as exc:
                if not is_not_found(exc):
                    errors.append(exc)
        elif decision is Claim.RELEASE:
            patch = {"metadata": {"ownerReferences": [{"$patch": "delete", "uid": owner["metadata"]["uid"]}], "uid": meta["uid"]}}
            try:
                await api.patch(meta["name"], patch, meta.get("namespace"), patch_type=STRATEGIC)
            except ApiError as exc:
                if not is_not_found(exc) and exc.status != 422:
                    errors.append(exc)
    if errors:
        raise errors[0]
    return claimed


async def _can_adopt(owner: dict, kind: str, fresh_owner: Callable[[], Awaitable[dict | None]]) -> None:
    meta = owner["metadata"]
    fresh = await fresh_owner()
    if fresh is None or fresh["metadata"].get("uid") != meta.get("uid"):
        got = fresh["metadata"].get("uid") if fresh else ""
        raise CannotAdopt(f"original {kind} {meta.get('namespace')}/{meta['name']} is gone: got uid {got}, wanted {meta.get('uid')}")
    if fresh["metadata"].get("deletionTimestamp"):
        raise CannotAdopt(f"{meta.get('namespace')}/{meta['name']} has just been deleted at {fresh['metadata']['deletionTimestamp']}")
