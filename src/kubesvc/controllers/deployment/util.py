"""The Deployment controller's decisions as pure functions over dicts
(pkg/controller/deployment/util/deployment_util.go; pkg/controller/controller_utils.go
``ComputeHash``).

* **Fenceposts.** ``maxSurge`` and ``maxUnavailable`` are numbers or percentages of
  ``spec.replicas``; surge rounds **up**, unavailability rounds **down**, and when both come out
  0 unavailability becomes 1 (rounding must not stall a rollout). ``MaxUnavailable`` is never
  more than the replicas.
* **The new ReplicaSet** is the oldest one whose pod template equals the Deployment's, ignoring
  the ``pod-template-hash`` label; all the others are old. Its name is ``<deployment>-<hash>``:
  an FNV-32a of the template (plus ``status.collisionCount`` when set) whose decimal digits are
  mapped to ``bcdfghjklmnpqrstvwxz2456789`` (``rand.SafeEncodeString``). Upstream hashes Go's
  dump of the struct, which cannot be reproduced; nothing outside the controller recomputes it,
  so any deterministic hash of the template serves.
* **Revisions.** Every ReplicaSet carries ``deployment.kubernetes.io/revision``; a new one gets
  the highest old revision + 1, and one brought back (a rollback) keeps its earlier numbers in
  ``revision-history`` (at most 2000 characters, oldest dropped first).
* **Replica annotations.** ``desired-replicas`` and ``max-replicas`` (replicas + surge) record
  the Deployment's size when it last scaled the ReplicaSet: a scaling event is an active
  ReplicaSet whose ``desired-replicas`` differs from ``spec.replicas``, and proportional
  scaling splits the change by each ReplicaSet's share of ``max-replicas``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from kubesvc.controllers.intstr import scaled_value
from kubesvc.util import golang

DEFAULT_UNIQUE_LABEL_KEY = "pod-template-hash"
REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
REVISION_HISTORY_ANNOTATION = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS_ANNOTATION = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS_ANNOTATION = "deployment.kubernetes.io/max-replicas"
ROLLBACK_TO_ANNOTATION = "deprecated.deployment.rollback.to"
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"
ANNOTATIONS_TO_SKIP = frozenset((LAST_APPLIED_ANNOTATION, REVISION_ANNOTATION, REVISION_HISTORY_ANNOTATION,
                                 DESIRED_REPLICAS_ANNOTATION, MAX_REPLICAS_ANNOTATION, ROLLBACK_TO_ANNOTATION))
MAX_REV_HISTORY_LENGTH_IN_CHARS = 2000
MAX_INT32 = 2147483647
ROLLING_UPDATE = "RollingUpdate"
RECREATE = "Recreate"
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


# ---- small accessors -------------------------------------------------------------------------

def replicas(obj: dict) -> int:
    """``spec.replicas`` (a Deployment or ReplicaSet; the API defaults it to 1)."""
    value = (obj.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def status_int(obj: dict, field: str) -> int:
    return int((obj.get("status") or {}).get(field) or 0)


def annotations(obj: dict) -> dict:
    return obj.get("metadata", {}).get("annotations") or {}


def strategy(deployment: dict) -> dict:
    return (deployment.get("spec") or {}).get("strategy") or {}


def is_rolling(deployment: dict) -> bool:
    return strategy(deployment).get("type", ROLLING_UPDATE) == ROLLING_UPDATE


def controller_of(obj: dict) -> dict | None:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def creation_key(obj: dict) -> tuple[str, str]:
    """Sort key oldest first: creationTimestamp, then name (``ReplicaSetsByCreationTimestamp``).
    RFC 3339 UTC timestamps of one width sort as strings."""
    meta = obj.get("metadata", {})
    return meta.get("creationTimestamp") or "", meta.get("name", "")


# ---- maxSurge / maxUnavailable ---------------------------------------------------------------

def resolve_fenceposts(max_surge: int | str | None, max_unavailable: int | str | None, desired: int) -> tuple[int, int]:
    """``ResolveFenceposts``: (surge rounded up, unavailable rounded down); never both 0."""
    surge = scaled_value(max_surge, desired, True)
    unavailable = scaled_value(max_unavailable, desired, False)
    if surge == 0 and unavailable == 0:
        # "Validation should never allow the user to explicitly use zero values for both
        # maxSurge maxUnavailable. Due to rounding down maxUnavailable though, it may resolve
        # to zero." (surge might not work due to quota)
        unavailable = 1
    return surge, unavailable


def _rolling_params(deployment: dict) -> tuple[Any, Any]:
    rolling = strategy(deployment).get("rollingUpdate") or {}
    return rolling.get("maxSurge"), rolling.get("maxUnavailable")


def max_unavailable(deployment: dict) -> int:
    """``MaxUnavailable``: 0 for Recreate or no replicas; else at most ``spec.replicas``."""
    desired = replicas(deployment)
    if not is_rolling(deployment) or desired == 0:
        return 0
    surge, unavailable = resolve_fenceposts(*_rolling_params(deployment), desired)
    return min(unavailable, desired)


def max_surge(deployment: dict) -> int:
    """``MaxSurge``: 0 for Recreate."""
    if not is_rolling(deployment):
        return 0
    surge, _ = resolve_fenceposts(*_rolling_params(deployment), replicas(deployment))
    return surge


def min_available(deployment: dict) -> int:
    return replicas(deployment) - max_unavailable(deployment) if is_rolling(deployment) else 0


def new_rs_new_replicas(deployment: dict, all_rss: Iterable[dict], new_rs: dict) -> int:
    """``NewRSNewReplicas``: how big the new ReplicaSet may be now. RollingUpdate: grow it into
    the surge room (replicas + maxSurge minus every ReplicaSet's size), never past the
    Deployment's replicas; Recreate: the whole size at once."""
    desired = replicas(deployment)
    if not is_rolling(deployment):
        return desired
    surge = scaled_value(_rolling_params(deployment)[0], desired, True)
    current = sum(replicas(rs) for rs in all_rss)
    max_total = desired + surge
    if current >= max_total:
        return replicas(new_rs)
    scale_up = min(max_total - current, desired - replicas(new_rs))
    return replicas(new_rs) + scale_up


# ---- the pod-template-hash -------------------------------------------------------------------

def fnv32a(data: bytes) -> int:
    value = 0x811C9DC5
    for byte in data:
        value ^= byte
        value = (value * 0x01000193) & 0xFFFFFFFF
    return value


def safe_encode(text: str) -> str:
    """``rand.SafeEncodeString``: no vowels, no look-alikes, so no bad words in names."""
    return "".join(_SAFE_ALPHABET[ord(ch) % len(_SAFE_ALPHABET)] for ch in text)


def compute_hash(template: dict, collision_count: int | None) -> str:
    """The ``pod-template-hash`` of ``template``: FNV-32a of its canonical JSON, the collision
    count appended as 8 little-endian bytes (as upstream appends it) when set."""
    data = json.dumps(_semantic(template), sort_keys=True, separators=(",", ":")).encode()
    if collision_count is not None:
        data += (int(collision_count) & 0xFFFFFFFF).to_bytes(4, "little") + bytes(4)
    return safe_encode(str(fnv32a(data)))


def _semantic(value: Any) -> Any:
    """apimachinery's semantic equality in dict form: an empty list or map is the same as none."""
    if isinstance(value, dict):
        pruned = {k: _semantic(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v is not None and v != {} and v != []}
    if isinstance(value, list):
        return [_semantic(v) for v in value]
    return value


def without_hash_label(template: dict) -> dict:
    template = dict(template or {})
    metadata = dict(template.get("metadata") or {})
    labels = dict(metadata.get("labels") or {})
    labels.pop(DEFAULT_UNIQUE_LABEL_KEY, None)
    metadata["labels"] = labels
    template["metadata"] = metadata
    return template


def equal_ignore_hash(template1: dict, template2: dict) -> bool:
    """``EqualIgnoreHash``: the templates are equal once ``pod-template-hash`` is taken out."""
    return _semantic(without_hash_label(template1)) == _semantic(without_hash_label(template2))


def find_new_replica_set(deployment: dict, rss: Iterable[dict]) -> dict | None:
    """``FindNewReplicaSet``: the oldest ReplicaSet with the Deployment's template."""
    template = (deployment.get("spec") or {}).get("template") or {}
    for rs in sorted(rss, key=creation_key):
        if equal_ignore_hash((rs.get("spec") or {}).get("template") or {}, template):
            return rs
    return None


def find_old_replica_sets(rss: Iterable[dict], new_rs: dict | None) -> tuple[list[dict], list[dict]]:
    """``FindOldReplicaSets``: (the old ones with replicas, every old one)."""
    new_uid = new_rs["metadata"].get("uid") if new_rs else None
    all_old = [rs for rs in rss if new_rs is None or rs["metadata"].get("uid") != new_uid]
    return [rs for rs in all_old if replicas(rs) > 0], all_old


def filter_active(rss: Iterable[dict | None]) -> list[dict]:
    return [rs for rs in rss if rs is not None and replicas(rs) > 0]


# ---- revisions -------------------------------------------------------------------------------

def revision(obj: dict) -> int | None:
    """The ``revision`` annotation, or None when it is missing or unparsable."""
    text = annotations(obj).get(REVISION_ANNOTATION)
    if text is None:
        return None
    try:
        return golang.parse_int(text, 64)
    except ValueError:
        return None


def max_revision(rss: Iterable[dict]) -> int:
    return max((r for r in (revision(rs) for rs in rss) if r is not None), default=0)


def last_revision(rss: Iterable[dict]) -> int:
    """``LastRevision``: the second-highest revision (what revision 0 of a rollback means)."""
    max_rev = second = 0
    for r in (revision(rs) for rs in rss):
        if r is None:
            continue
        if r >= max_rev:
            second, max_rev = max_rev, r
        elif r > second:
            second = r
    return second


def set_new_rs_annotations(deployment: dict, rs: dict, new_revision: str, exists: bool,
                           history_limit_chars: int = MAX_REV_HISTORY_LENGTH_IN_CHARS) -> bool:
    """``SetNewReplicaSetAnnotations`` (mutates ``rs``): the Deployment's annotations (skip
    list aside), the new revision when it is higher, the displaced revision into the history,
    and at creation the replica annotations. Returns whether anything changed."""
    meta = rs.setdefault("metadata", {})
    rs_annotations = meta.get("annotations") or {}
    meta["annotations"] = rs_annotations
    changed = False
    for key, value in annotations(deployment).items():
        if key in ANNOTATIONS_TO_SKIP or rs_annotations.get(key) == value:
            continue
        rs_annotations[key] = value
        changed = True
    old_revision_text = rs_annotations.get(REVISION_ANNOTATION)
    had_revision = old_revision_text is not None
    try:
        old_revision = golang.parse_int(old_revision_text or "0", 64)
    except ValueError:
        return False
    try:
        new_revision_int = golang.parse_int(new_revision, 64)
    except ValueError:
        return False
    if old_revision < new_revision_int:
        rs_annotations[REVISION_ANNOTATION] = new_revision
        changed = True
        if had_revision:
            history = rs_annotations.get(REVISION_HISTORY_ANNOTATION, "")
            old_revisions = history.split(",")
            if not old_revisions[0]:
                rs_annotations[REVISION_HISTORY_ANNOTATION] = old_revision_text
            else:
                total = len(history) + len(old_revision_text) + 1
                start = 0
                while total > history_limit_chars and start < len(old_revisions):
                    total -= len(old_revisions[start]) + 1
                    start += 1
                if total <= history_limit_chars:
                    rs_annotations[REVISION_HISTORY_ANNOTATION] = ",".join(old_revisions[start:] + [old_revision_text])
    if not exists:
        desired = replicas(deployment)
        if set_replicas_annotations(rs, desired, desired + max_surge(deployment)):
            changed = True
    return changed


def set_replicas_annotations(rs: dict, desired: int, max_replicas: int) -> bool:
    """``SetReplicasAnnotations`` (mutates ``rs``); whether anything changed."""
    meta = rs.setdefault("metadata", {})
    rs_annotations = meta.get("annotations") or {}
    meta["annotations"] = rs_annotations
    changed = False
    for key, value in ((DESIRED_REPLICAS_ANNOTATION, str(desired)), (MAX_REPLICAS_ANNOTATION, str(max_replicas))):
        if rs_annotations.get(key) != value:
            rs_annotations[key] = value
            changed = True
    return changed


def replicas_annotations_need_update(rs: dict, desired: int, max_replicas: int) -> bool:
    current = annotations(rs)
    return current.get(DESIRED_REPLICAS_ANNOTATION) != str(desired) or current.get(MAX_REPLICAS_ANNOTATION) != str(max_replicas)


def _int_annotation(rs: dict, key: str) -> int | None:
    text = annotations(rs).get(key)
    if text is None:
        return None
    try:
        return golang.parse_int(text, 32)
    except ValueError:
        return None


def is_scaling_event(deployment: dict, rss: Iterable[dict]) -> bool:
    """``isScalingEvent``: an active ReplicaSet last scaled for another Deployment size."""
    desired = replicas(deployment)
    for rs in filter_active(rss):
        recorded = _int_annotation(rs, DESIRED_REPLICAS_ANNOTATION)
        if recorded is not None and recorded != desired:
            return True
    return False


def is_saturated(deployment: dict, rs: dict | None) -> bool:
    """``IsSaturated``: the new ReplicaSet is the whole Deployment, all available."""
    if rs is None:
        return False
    desired = replicas(deployment)
    return (replicas(rs) == desired and _int_annotation(rs, DESIRED_REPLICAS_ANNOTATION) == desired
            and status_int(rs, "availableReplicas") == desired)


# ---- proportional scaling (sync.go scale) ----------------------------------------------------

def find_active_or_latest(new_rs: dict | None, old_rss: list[dict]) -> dict | None:
    """``FindActiveOrLatest``: the one active ReplicaSet, or with none the new (else newest
    old) one; None when several are active."""
    if new_rs is None and not old_rss:
        return None
    newest_first = sorted(old_rss, key=creation_key, reverse=True)
    every = ([new_rs] if new_rs is not None else []) + newest_first
    active = filter_active(every)
    if len(active) == 0:
        return new_rs if new_rs is not None else newest_first[0]
    if len(active) == 1:
        return active[0]
    return None


def _fraction(rs: dict, deployment: dict) -> int:
    """``getReplicaSetFraction``: this ReplicaSet's change when the Deployment resizes."""
    desired = replicas(deployment)
    if desired == 0:
        return -replicas(rs)
    allowed_size = desired + max_surge(deployment)
    annotated = _int_annotation(rs, MAX_REPLICAS_ANNOTATION)
    old_size = annotated if annotated is not None else status_int(deployment, "replicas")
    if old_size == 0:
        # upstream divides a float by zero (+Inf), then int32() of it; never seen in practice
        return 0
    new_size = math.floor(replicas(rs) * allowed_size / old_size + 0.5)  # half away from zero
    return new_size - replicas(rs)


def _proportion(rs: dict, deployment: dict, to_add: int, added: int) -> int:
    """``GetProportion``."""
    if replicas(rs) == 0 or to_add == 0 or to_add == added:
        return 0
    fraction = _fraction(rs, deployment)
    allowed = to_add - added
    return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)


def proportional_sizes(deployment: dict, new_rs: dict | None, old_rss: list[dict]) -> dict[str, int]:
    """``scale``: the size each ReplicaSet should have after the Deployment was resized (by
    name; ReplicaSets it has no opinion on are left out). Only for a Deployment whose
    ReplicaSets do not already match it (a scaling event, or while paused)."""
    desired = replicas(deployment)
    active_or_latest = find_active_or_latest(new_rs, old_rss)
    if active_or_latest is not None:
        return {active_or_latest["metadata"]["name"]: desired}
    if is_saturated(deployment, new_rs):
        return {rs["metadata"]["name"]: 0 for rs in filter_active(old_rss)}
    if not is_rolling(deployment):
        return {}
    all_rss = filter_active([new_rs] + list(old_rss))
    total = sum(replicas(rs) for rs in all_rss)
    allowed_size = desired + max_surge(deployment) if desired > 0 else 0
    to_add = allowed_size - total
    if to_add > 0:  # ReplicaSetsBySizeNewer: largest first, then newest first
        ordered = sorted(all_rss, key=lambda rs: creation_key(rs), reverse=True)
        ordered.sort(key=lambda rs: -replicas(rs))
    else:  # ReplicaSetsBySizeOlder: largest first, then oldest first
        ordered = sorted(all_rss, key=creation_key)
        ordered.sort(key=lambda rs: -replicas(rs))
    sizes: dict[str, int] = {}
    added = 0
    for rs in ordered:
        proportion = _proportion(rs, deployment, to_add, added)
        sizes[rs["metadata"]["name"]] = replicas(rs) + proportion
        added += proportion
    leftover = to_add - added
    for index, rs in enumerate(ordered):
        name = rs["metadata"]["name"]
        if index == 0 and leftover != 0:
            sizes[name] = max(sizes[name] + leftover, 0)
    return sizes


# ---- history cleanup -------------------------------------------------------------------------

def replica_sets_to_clean_up(deployment: dict, old_rss: Iterable[dict]) -> list[dict]:
    """``cleanupDeployment``: the oldest old ReplicaSets beyond ``revisionHistoryLimit`` that
    are scaled to nothing, fully observed and not already being deleted."""
    limit = (deployment.get("spec") or {}).get("revisionHistoryLimit")
    if limit is None or limit == MAX_INT32:
        return []
    cleanable = [rs for rs in old_rss if not rs["metadata"].get("deletionTimestamp")]
    diff = len(cleanable) - int(limit)
    if diff <= 0:
        return []

    def by_revision(rs: dict) -> tuple:
        # ReplicaSetsByRevision: a missing annotation is revision 0; equal or unparsable
        # revisions fall back to the creation order
        text = annotations(rs).get(REVISION_ANNOTATION)
        r = 0 if text is None else revision(rs)
        return (r is None, r or 0, *creation_key(rs))

    chosen = []
    for rs in sorted(cleanable, key=by_revision)[:diff]:
        if (status_int(rs, "replicas") != 0 or replicas(rs) != 0
                or int(rs["metadata"].get("generation") or 0) > status_int(rs, "observedGeneration")):
            continue
        chosen.append(rs)
    return chosen


def has_progress_deadline(deployment: dict) -> bool:
    deadline = (deployment.get("spec") or {}).get("progressDeadlineSeconds")
    return deadline is not None and deadline != MAX_INT32


# ---- the pre-apps/v1 rollback request (rollback.go) -----------------------------------------

def rollback_to(deployment: dict) -> int | None:
    """``getRollbackTo``: the revision the ``deprecated.deployment.rollback.to`` annotation asks
    for (0: the one before the current), None when absent or not a number (ignored)."""
    text = annotations(deployment).get(ROLLBACK_TO_ANNOTATION)
    if not text:
        return None
    try:
        return golang.parse_int(text, 64)
    except ValueError:
        return None


def rolled_back(deployment: dict, rs: dict) -> dict:
    """``SetFromReplicaSetTemplate`` + ``SetDeploymentAnnotationsTo``: the Deployment with the
    ReplicaSet's template (minus ``pod-template-hash``) and, besides the skipped keys it keeps,
    the ReplicaSet's annotations (so ``kubernetes.io/change-cause`` follows the template back)."""
    result = json.loads(json.dumps(deployment))
    result["spec"]["template"] = without_hash_label(json.loads(json.dumps((rs.get("spec") or {}).get("template") or {})))
    kept = {k: v for k, v in annotations(deployment).items() if k in ANNOTATIONS_TO_SKIP}
    kept.update({k: v for k, v in annotations(rs).items() if k not in ANNOTATIONS_TO_SKIP})
    result["metadata"]["annotations"] = kept
    return result

