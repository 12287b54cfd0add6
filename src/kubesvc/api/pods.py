"""Pod helpers shared by the apiserver (binding), the scheduler and the agent: the condition
bookkeeping of upstream ``pkg/api/v1/pod/util.go``."""

from __future__ import annotations

from datetime import datetime

from kubesvc.util.golang import rfc3339

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
