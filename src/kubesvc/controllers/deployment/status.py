"""A Deployment's status and its two conditions (pkg/controller/deployment/sync.go
``calculateStatus``, progress.go ``syncRolloutStatus``/``requeueStuckDeployment``,
util/deployment_util.go ``DeploymentComplete``/``DeploymentProgressing``/``DeploymentTimedOut``).

* The counts sum the ReplicaSets' own status: ``replicas``, ``readyReplicas``,
  ``availableReplicas``; ``updatedReplicas`` is the new ReplicaSet's; ``unavailableReplicas``
  is every ReplicaSet's size minus what is available.
* ``Available`` says whether ``spec.replicas - maxUnavailable`` Pods are available
  (``MinimumReplicasAvailable`` / ``MinimumReplicasUnavailable``).
* ``Progressing`` (only with ``progressDeadlineSeconds``, which defaults to 600) says how the
  rollout goes: ``NewReplicaSetCreated``/``FoundNewReplicaSet`` when it starts,
  ``ReplicaSetUpdated`` each time it moves (more updated, ready or available Pods, fewer old
  ones; ``lastUpdateTime`` moves, ``lastTransitionTime`` stays), ``NewReplicaSetAvailable``
  when complete, and ``ProgressDeadlineExceeded`` (status False) when it has not moved for the
  deadline. ``kubectl rollout status`` fails on that last one. The controller looks again when
  the deadline would pass (``requeueStuckDeployment``).
* A condition already there with the same status and reason is left as it is; a new reason
  with the same status keeps ``lastTransitionTime``.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta

from kubesvc.controllers.deployment.util import has_progress_deadline, max_unavailable, replicas, status_int
from kubesvc.util.golang import parse_rfc3339, rfc3339

PROGRESSING = "Progressing"
AVAILABLE = "Available"
REPLICA_FAILURE = "ReplicaFailure"

NEW_RS_REASON = "NewReplicaSetCreated"
FOUND_NEW_RS_REASON = "FoundNewReplicaSet"
RS_UPDATED_REASON = "ReplicaSetUpdated"
NEW_RS_AVAILABLE_REASON = "NewReplicaSetAvailable"
TIMED_OUT_REASON = "ProgressDeadlineExceeded"
FAILED_RS_CREATE_REASON = "ReplicaSetCreateError"
PAUSED_REASON = "DeploymentPaused"
RESUMED_REASON = "DeploymentResumed"
MINIMUM_REPLICAS_AVAILABLE = "MinimumReplicasAvailable"
MINIMUM_REPLICAS_UNAVAILABLE = "MinimumReplicasUnavailable"


def new_condition(type_: str, status: str, reason: str, message: str, now: datetime) -> dict:
    stamp = rfc3339(now)
    return {"type": type_, "status": status, "lastUpdateTime": stamp, "lastTransitionTime": stamp, "reason": reason, "message": message}


def get_condition(status: dict, type_: str) -> dict | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == type_:
            return condition
    return None


def set_condition(status: dict, condition: dict) -> None:
    """``SetDeploymentCondition`` (mutates ``status``)."""
    current = get_condition(status, condition["type"])
    if current is not None and current.get("status") == condition["status"] and current.get("reason") == condition["reason"]:
        return
    condition = dict(condition)
    if current is not None and current.get("status") == condition["status"]:
        condition["lastTransitionTime"] = current.get("lastTransitionTime")
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != condition["type"]] + [condition]


def remove_condition(status: dict, type_: str) -> None:
    if status.get("conditions"):
        status["conditions"] = [c for c in status["conditions"] if c.get("type") != type_]


def calculate_status(deployment: dict, all_rss: list[dict], new_rs: dict | None, now: datetime) -> dict:
    """``calculateStatus``: counts from the ReplicaSets, conditions carried over, ``Available``
    recomputed."""
    every = [rs for rs in all_rss if rs is not None]
    available = sum(status_int(rs, "availableReplicas") for rs in every)
    total = sum(replicas(rs) for rs in every)
    old = deployment.get("status") or {}
    status = {
        "observedGeneration": int(deployment["metadata"].get("generation") or 0),
        "replicas": sum(status_int(rs, "replicas") for rs in every),
        "updatedReplicas": status_int(new_rs, "replicas") if new_rs is not None else 0,
        "readyReplicas": sum(status_int(rs, "readyReplicas") for rs in every),
        "availableReplicas": available,
        "unavailableReplicas": max(0, total - available),
        "conditions": copy.deepcopy(old.get("conditions") or []),
    }
    if old.get("collisionCount") is not None:
        status["collisionCount"] = old["collisionCount"]
    if available >= replicas(deployment) - max_unavailable(deployment):
        set_condition(status, new_condition(AVAILABLE, "True", MINIMUM_REPLICAS_AVAILABLE, "Deployment has minimum availability.", now))
    else:
        set_condition(status, new_condition(AVAILABLE, "False", MINIMUM_REPLICAS_UNAVAILABLE, "Deployment does not have minimum availability.", now))
    return status


def deployment_complete(deployment: dict, status: dict) -> bool:
    """``DeploymentComplete``: every replica updated and available, and the spec observed."""
    desired = replicas(deployment)
    return (int(status.get("updatedReplicas") or 0) == desired and int(status.get("replicas") or 0) == desired
            and int(status.get("availableReplicas") or 0) == desired
            and int(status.get("observedGeneration") or 0) >= int(deployment["metadata"].get("generation") or 0))


def deployment_progressing(deployment: dict, status: dict) -> bool:
    """``DeploymentProgressing``: more updated, ready or available Pods, or fewer old ones,
    than the Deployment's current status says."""
    old = deployment.get("status") or {}

    def n(s: dict, field: str) -> int:
        return int(s.get(field) or 0)

    return (n(status, "updatedReplicas") > n(old, "updatedReplicas")
            or n(status, "replicas") - n(status, "updatedReplicas") < n(old, "replicas") - n(old, "updatedReplicas")
            or n(status, "readyReplicas") > n(old, "readyReplicas")
            or n(status, "availableReplicas") > n(old, "availableReplicas"))


def _deadline(deployment: dict) -> timedelta:
    return timedelta(seconds=int(deployment["spec"]["progressDeadlineSeconds"]))


def deployment_timed_out(deployment: dict, status: dict, now: datetime) -> bool:
    """``DeploymentTimedOut``: the Progressing condition has not moved for the deadline."""
    if not has_progress_deadline(deployment):
        return False
    condition = get_condition(status, PROGRESSING)
    if condition is None or condition.get("reason") == NEW_RS_AVAILABLE_REASON:
        return False
    if condition.get("reason") == TIMED_OUT_REASON:
        return True
    updated = condition.get("lastUpdateTime")
    return bool(updated) and parse_rfc3339(updated) + _deadline(deployment) < now


def _subject(deployment: dict, new_rs: dict | None) -> str:
    if new_rs is not None:
        return f'ReplicaSet "{new_rs["metadata"]["name"]}"'
    return f'Deployment "{deployment["metadata"]["name"]}"'


def rollout_status(deployment: dict, all_rss: list[dict], new_rs: dict | None, now: datetime) -> dict:
    """``syncRolloutStatus``'s new status: counts, Available, Progressing, ReplicaFailure."""
    status = calculate_status(deployment, all_rss, new_rs, now)
    deadline = has_progress_deadline(deployment)
    if not deadline:
        remove_condition(status, PROGRESSING)
    current = get_condition(deployment.get("status") or {}, PROGRESSING)
    complete = status["replicas"] == status["updatedReplicas"] and current is not None and current.get("reason") == NEW_RS_AVAILABLE_REASON
    if deadline and not complete:
        subject = _subject(deployment, new_rs)
        if deployment_complete(deployment, status):
            set_condition(status, new_condition(PROGRESSING, "True", NEW_RS_AVAILABLE_REASON, f"{subject} has successfully progressed.", now))
        elif deployment_progressing(deployment, status):
            # the one condition whose lastUpdateTime moves with the same reason: progress seen
            condition = new_condition(PROGRESSING, "True", RS_UPDATED_REASON, f"{subject} is progressing.", now)
            if current is not None:
                if current.get("status") == "True":
                    condition["lastTransitionTime"] = current.get("lastTransitionTime")
                remove_condition(status, PROGRESSING)
            set_condition(status, condition)
        elif deployment_timed_out(deployment, status, now):
            set_condition(status, new_condition(PROGRESSING, "False", TIMED_OUT_REASON, f"{subject} has timed out progressing.", now))
    failures = replica_failures(all_rss, new_rs)
    if failures:
        set_condition(status, failures[0])
    else:
        remove_condition(status, REPLICA_FAILURE)
    return status


def replica_failures(all_rss: list[dict], new_rs: dict | None) -> list[dict]:
    """``getReplicaFailures``: the new ReplicaSet's ReplicaFailure conditions, else the old ones'."""

    def of(rs: dict | None) -> list[dict]:
        found = []
        for c in ((rs or {}).get("status") or {}).get("conditions") or []:
            if c.get("type") == REPLICA_FAILURE:
                found.append({"type": REPLICA_FAILURE, "status": c.get("status"), "lastUpdateTime": c.get("lastTransitionTime"),
                              "lastTransitionTime": c.get("lastTransitionTime"), "reason": c.get("reason"), "message": c.get("message")})
        return found

    return of(new_rs) or [c for rs in all_rss for c in of(rs)]


def requeue_after(deployment: dict, status: dict, now: datetime) -> float | None:
    """``requeueStuckDeployment``: when to look again for a timed-out rollout (seconds; 0 means
    now, rate-limited), or None when there is nothing to watch for."""
    current = get_condition(deployment.get("status") or {}, PROGRESSING)
    if not has_progress_deadline(deployment) or current is None:
        return None
    if deployment_complete(deployment, status) or current.get("reason") == TIMED_OUT_REASON:
        return None
    updated = current.get("lastUpdateTime")
    if not updated:
        return None
    after = (parse_rfc3339(updated) + _deadline(deployment) - now).total_seconds()
    if after < 1:
        return 0.0
    return after + 1  # a second for the millisecond skew of AddAfter (kubernetes#39785)


def paused_condition_update(deployment: dict, now: datetime) -> dict | None:
    """``checkPausedConditions``: the status with Paused/Resumed set, or None if unchanged."""
    if not has_progress_deadline(deployment):
        return None
    status = copy.deepcopy(deployment.get("status") or {})
    condition = get_condition(status, PROGRESSING)
    if condition is not None and condition.get("reason") == TIMED_OUT_REASON:
        return None
    paused_seen = condition is not None and condition.get("reason") == PAUSED_REASON
    paused = bool(deployment["spec"].get("paused"))
    if paused and not paused_seen:
        set_condition(status, new_condition(PROGRESSING, "Unknown", PAUSED_REASON, "Deployment is paused", now))
    elif not paused and paused_seen:
        set_condition(status, new_condition(PROGRESSING, "Unknown", RESUMED_REASON, "Deployment is resumed", now))
    else:
        return None
    return status
