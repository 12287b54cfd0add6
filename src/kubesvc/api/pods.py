"""Pod helpers shared by the apiserver (binding), the scheduler, the agent and the controllers:
the condition bookkeeping of upstream ``pkg/api/v1/pod/util.go`` (``GetPodReadyCondition``,
``IsPodReady``, ``IsPodAvailable``, ``UpdatePodCondition``)."""

from __future__ import annotations

from datetime import datetime, timedelta

from kubesvc.util.golang import parse_rfc3339, rfc3339

POD_SCHEDULED = "PodScheduled"


def update_pod_condition(conditions: list[dict], condition: dict, now: datetime) -> tuple[list[dict], bool]:
    """Upstream ``podutil.UpdatePodCondition``: ``condition`` replaces the one of its type (or
    is appended), with ``lastTransitionTime`` now unless the status stays the same. Returns
    (conditions, changed)."""
    new = {**condition, "lastTransitionTime": rfc3339(now)}
    for i, old in enumerate(conditions):
        if old.get("type") != condition["type"]:
            continue
        if old.get("status") == new.get("status"):
            new.pop("lastTransitionTime")
            if old.get("lastTransitionTime"):
                new["lastTransitionTime"] = old["lastTransitionTime"]
        fields = ("status", "reason", "message", "lastProbeTime", "lastTransitionTime")
        changed = any(old.get(f) != new.get(f) for f in fields)
        return [*conditions[:i], new, *conditions[i + 1:]], changed
    return [*conditions, new], True


def ready_condition(pod: dict) -> dict | None:
    """``GetPodReadyCondition``: the Pod's ``Ready`` condition, whatever its status."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return condition
    return None


def is_ready(pod: dict) -> bool:
    """``IsPodReady``: a ``Ready`` condition with status ``True``."""
    condition = ready_condition(pod)
    return condition is not None and condition.get("status") == "True"


def ready_since(pod: dict) -> datetime | None:
    """When a Ready Pod turned Ready (its condition's ``lastTransitionTime``); None when it is
    not Ready or the time is missing or unreadable (Go's zero time)."""
    condition = ready_condition(pod)
    if condition is None or condition.get("status") != "True":
        return None
    since = condition.get("lastTransitionTime")
    if not isinstance(since, str) or not since:
        return None
    try:
        return parse_rfc3339(since)
    except ValueError:
        return None


def is_available(pod: dict, min_ready_seconds: int, now: datetime) -> bool:
    """``IsPodAvailable``: Ready, and with ``minReadySeconds`` for longer than that (strictly:
    ``lastTransitionTime + minReadySeconds`` before now; a zero time is never available)."""
    if not is_ready(pod):
        return False
    if not min_ready_seconds or min_ready_seconds <= 0:
        return True
    since = ready_since(pod)
    return since is not None and since + timedelta(seconds=min_ready_seconds) < now
