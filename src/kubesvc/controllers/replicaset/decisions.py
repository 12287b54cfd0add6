"""The ReplicaSet controller's pure decisions (pkg/controller/replicaset/replica_set.go,
replica_set_utils.go and pkg/controller/controller_utils.go, Kubernetes 1.32).

* **Active** Pods count (``IsPodActive``): not Succeeded or Failed, no deletionTimestamp.
* **Ready**: the ``Ready`` condition is True. **Available** (``IsPodAvailable``): Ready, and
  either ``minReadySeconds`` is 0 or the Ready condition's ``lastTransitionTime`` plus
  ``minReadySeconds`` is strictly before now.
* **Which Pods go first** when there are too many (``getPodsToDelete`` over
  ``ActivePodsWithRanks``), the first difference deciding: unscheduled before scheduled;
  Pending before Unknown before Running; not Ready before Ready; a lower
  ``controller.kubernetes.io/pod-deletion-cost``; more Pods of the same owner family on the
  same node (the rank: Pods of every ReplicaSet with the same controller, e.g. the old and new
  ReplicaSets of one Deployment); Ready for less time; more container restarts; newer. With
  ``LogarithmicScaleDown`` (on by default) the two ages compare by ``floor(log2(age in ns))``,
  ties broken by uid, so Pods of about the same age are picked at random instead of always
  the newest.
* **Status** (``calculateStatus``): replicas = claimed active Pods, fullyLabeledReplicas = those
  carrying every template label, readyReplicas, availableReplicas; a failed create/delete adds
  the ``ReplicaFailure`` condition (reason ``FailedCreate``/``FailedDelete``, the error as the
  message), which the next error-free pass removes.
"""

from __future__ import annotations

import functools
import math
from datetime import datetime

from kubesvc.api.pods import is_available, is_ready, ready_since
from kubesvc.util.golang import parse_rfc3339, rfc3339

BURST_REPLICAS = 500  # creations or deletions per sync (BurstReplicas)
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
REPLICA_FAILURE = "ReplicaFailure"
_PHASE_ORDINAL = {"Pending": 0, "Unknown": 1, "Running": 2}


def _meta(pod: dict) -> dict:
    return pod.get("metadata") or {}


def _status(pod: dict) -> dict:
    return pod.get("status") or {}


def is_active(pod: dict) -> bool:
    return _status(pod).get("phase") not in ("Succeeded", "Failed") and not _meta(pod).get("deletionTimestamp")


def _time(value) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_rfc3339(value)
    except ValueError:
        return None


def deletion_cost(pod: dict) -> int:
    """``GetDeletionCostFromPodAnnotations`` (validation keeps it an int32; unreadable is 0)."""
    text = (_meta(pod).get("annotations") or {}).get(DELETION_COST)
    try:
        return int(text) if text is not None else 0
    except ValueError:
        return 0


def _max_restarts(pod: dict) -> int:
    return max([int(s.get("restartCount") or 0) for s in _status(pod).get("containerStatuses") or [] if isinstance(s, dict)] or [0])


def _after_or_zero(t1: datetime | None, t2: datetime | None) -> bool:
    """``afterOrZero``: an unset time sorts first, else the later one."""
    if t1 is None or t2 is None:
        return t1 is None
    return t1 > t2


def _log_rank(t: datetime, now: datetime) -> int:
    nanoseconds = (now - t).total_seconds() * 1e9
    return int(math.log2(nanoseconds)) if nanoseconds > 0 else -1


def _newer_first(t1: datetime | None, t2: datetime | None, uid1: str, uid2: str, now: datetime) -> bool:
    """Rules 6 and 8 with LogarithmicScaleDown: compare ages by power-of-two bucket."""
    if t1 is None or t2 is None:
        return _after_or_zero(t1, t2)
    diff = _log_rank(t1, now) - _log_rank(t2, now)
    if diff == 0:
        return uid1 < uid2
    return diff < 0


def delete_first(a: tuple[dict, int], b: tuple[dict, int], now: datetime) -> bool:
    """``ActivePodsWithRanks.Less``: whether Pod ``a`` (with its rank) goes before ``b``."""
    (pi, ri), (pj, rj) = a, b
    node_i, node_j = (pi.get("spec") or {}).get("nodeName") or "", (pj.get("spec") or {}).get("nodeName") or ""
    if node_i != node_j and (not node_i or not node_j):
        return not node_i
    phase_i, phase_j = _PHASE_ORDINAL.get(_status(pi).get("phase"), 0), _PHASE_ORDINAL.get(_status(pj).get("phase"), 0)
    if phase_i != phase_j:
        return phase_i < phase_j
    ready_i, ready_j = is_ready(pi), is_ready(pj)
    if ready_i != ready_j:
        return not ready_i
    cost_i, cost_j = deletion_cost(pi), deletion_cost(pj)
    if cost_i != cost_j:
        return cost_i < cost_j
    if ri != rj:
        return ri > rj
    uid_i, uid_j = _meta(pi).get("uid", ""), _meta(pj).get("uid", "")
    if ready_i and ready_j:
        t_i, t_j = ready_since(pi), ready_since(pj)
        if t_i != t_j:
            return _newer_first(t_i, t_j, uid_i, uid_j, now)
    restarts_i, restarts_j = _max_restarts(pi), _max_restarts(pj)
    if restarts_i != restarts_j:
        return restarts_i > restarts_j
    created_i, created_j = _time(_meta(pi).get("creationTimestamp")), _time(_meta(pj).get("creationTimestamp"))
    if created_i != created_j:
        return _newer_first(created_i, created_j, uid_i, uid_j, now)
    return False


def pods_to_delete(pods: list[dict], related: list[dict], count: int, now: datetime) -> list[dict]:
    """``getPodsToDelete``: the ``count`` Pods to delete first (ranked only when not all go)."""
    if count < len(pods):
        on_node: dict[str, int] = {}
        for pod in related:
            if is_active(pod):
                node = (pod.get("spec") or {}).get("nodeName") or ""
                on_node[node] = on_node.get(node, 0) + 1
        ranked = [(pod, on_node.get((pod.get("spec") or {}).get("nodeName") or "", 0)) for pod in pods]

        def compare(a, b) -> int:
            return -1 if delete_first(a, b, now) else 1 if delete_first(b, a, now) else 0

        pods = [pod for pod, _ in sorted(ranked, key=functools.cmp_to_key(compare))]
    return pods[:count]


def calculate_status(status: dict, template_labels: dict, min_ready_seconds: int, pods: list[dict], desired: int,
                     manage_error: str | None, now: datetime) -> dict:
    """``calculateStatus``: the new status from the claimed active Pods (``status`` is the old one)."""
    new = dict(status)
    fully_labeled = ready = available = 0
    for pod in pods:
        labels = _meta(pod).get("labels") or {}
        if all(labels.get(k) == v for k, v in (template_labels or {}).items()):
            fully_labeled += 1
        if is_ready(pod):
            ready += 1
            if is_available(pod, min_ready_seconds, now):
                available += 1
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    failure = next((c for c in conditions if c.get("type") == REPLICA_FAILURE), None)
    if manage_error is not None and failure is None:
        diff = len(pods) - desired
        reason = "FailedCreate" if diff < 0 else "FailedDelete" if diff > 0 else ""
        conditions = conditions + [{"type": REPLICA_FAILURE, "status": "True", "lastTransitionTime": rfc3339(now),
                                    "reason": reason, "message": manage_error}]
    elif manage_error is None and failure is not None:
        conditions = [c for c in conditions if c.get("type") != REPLICA_FAILURE]
    if conditions:
        new["conditions"] = conditions
    else:
        new.pop("conditions", None)
    new.update(replicas=len(pods), fullyLabeledReplicas=fully_labeled, readyReplicas=ready, availableReplicas=available)
    return new


def status_unchanged(old: dict, new: dict, generation: int) -> bool:
    """``updateReplicaSetStatus``'s early return: nothing to write."""
    return (all((old.get(k) or 0) == (new.get(k) or 0) for k in ("replicas", "fullyLabeledReplicas", "readyReplicas", "availableReplicas"))
            and (old.get("observedGeneration") or 0) == generation
            and (old.get("conditions") or []) == (new.get("conditions") or []))
