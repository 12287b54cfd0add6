"""ControllerRevisions as values (pkg/controller/history/controller_history.go).

* A revision holds ``data`` (for a DaemonSet, a strategic merge patch that puts its template
  back: ``{"spec": {"template": {..., "$patch": "replace"}}}``) and a ``revision`` number, one
  more than the highest of its siblings.
* Its name is ``<owner>-<hash>`` with the owner's name cut to 223 characters (so the name
  stays a valid DNS subdomain); its labels are the template's plus the hash label.
* Siblings sort by ``revision``, then creation time, then name (``SortControllerRevisions``).
* Two revisions are equal when their data is equal (and their hash labels, when both carry
  one, agree): ``EqualRevision``.
"""

from __future__ import annotations

CONTROLLER_REVISION_HASH_LABEL = "controller.kubernetes.io/hash"
MAX_PREFIX_LENGTH = 223


def revision_name(prefix: str, hash_: str) -> str:
    """``ControllerRevisionName``."""
    return f"{prefix[:MAX_PREFIX_LENGTH]}-{hash_}"


def revision_number(revision: dict) -> int:
    return int(revision.get("revision") or 0)


def sort_key(revision: dict) -> tuple:
    meta = revision.get("metadata") or {}
    return revision_number(revision), meta.get("creationTimestamp") or "", meta.get("name", "")


def sort_revisions(revisions: list[dict]) -> list[dict]:
    return sorted(revisions, key=sort_key)


def max_revision(revisions: list[dict]) -> int:
    return max((revision_number(r) for r in revisions), default=0)


def equal_revision(lhs: dict | None, rhs: dict | None, hash_label: str = CONTROLLER_REVISION_HASH_LABEL) -> bool:
    """``EqualRevision``."""
    if lhs is None or rhs is None:
        return lhs is rhs
    left = ((lhs.get("metadata") or {}).get("labels") or {}).get(hash_label)
    right = ((rhs.get("metadata") or {}).get("labels") or {}).get(hash_label)
    if left is not None and right is not None and left != right:
        return False
    return lhs.get("data") == rhs.get("data")


def find_equal_revisions(revisions: list[dict], needle: dict, hash_label: str = CONTROLLER_REVISION_HASH_LABEL) -> list[dict]:
    return [r for r in revisions if equal_revision(r, needle, hash_label)]


def new_controller_revision(owner: dict, owner_ref: dict, template_labels: dict, data: dict, revision: int, hash_: str,
                            hash_label: str = CONTROLLER_REVISION_HASH_LABEL, annotations: dict | None = None) -> dict:
    """``NewControllerRevision`` (the hash given: DaemonSets use the template's hash)."""
    meta = {"name": revision_name(owner["metadata"]["name"], hash_), "namespace": owner["metadata"].get("namespace"),
            "labels": {**(template_labels or {}), hash_label: hash_}, "ownerReferences": [owner_ref]}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": meta, "data": data, "revision": revision}
