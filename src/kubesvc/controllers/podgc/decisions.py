"""PodGC's decisions as pure functions (pkg/controller/podgc/gc_controller.go).

Every ``gcCheckPeriod`` (20 s) kube-controller-manager's ``pod-garbage-collector-controller``
looks at every Pod in its cache and force-deletes (grace period 0) four kinds:

* **terminated** (``--terminated-pod-gc-threshold``, 12500; 0 turns it off): when more Pods
  than that are finished (phase neither Pending, Running nor Unknown), the excess goes,
  evicted Pods first (Failed with reason ``Evicted``), then the oldest, then by name;
* **terminating on an out-of-service node**: a Pod being deleted on a Node that is not Ready
  and carries the ``node.kubernetes.io/out-of-service`` taint (no kubelet will finish it);
* **orphaned**: bound to a Node that no longer exists. A name missing from the cache is first
  quarantined for 40 s (the Node may be new and not yet in the informer) and then asked for
  live: only a 404 makes its Pods orphans. These get the ``DisruptionTarget`` condition
  (reason ``DeletionByPodGC``, message ``PodGC: node no longer exists``);
* **unscheduled terminating**: being deleted while bound to no node (no kubelet will ever
  finish it).

Before the delete a Pod not yet Succeeded or Failed is patched ``Failed`` (with the condition,
if any): a Job that counts only Failed Pods (``podFailurePolicy``, ``podReplacementPolicy:
Failed``) then sees the failure instead of waiting forever for a phase no kubelet will write.

Metrics (``pod_gc_collector`` subsystem): ``force_delete_pods_total`` and
``force_delete_pod_errors_total`` by ``namespace`` and ``reason`` (``terminated``,
``out-of-service``, ``orphaned``, ``unscheduled``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from kubesvc.util.golang import rfc3339

DEFAULT_TERMINATED_POD_THRESHOLD = 12500  # --terminated-pod-gc-threshold
GC_CHECK_PERIOD = 20.0  # gcCheckPeriod
QUARANTINE_TIME = 40.0  # quarantineTime
DELETE_PARALLELISM = 10  # terminated / out-of-service Pods being deleted at once (ours: upstream's client QPS meters a goroutine each)
TAINT_OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"

REASON_TERMINATED = "terminated"
REASON_OUT_OF_SERVICE = "out-of-service"
REASON_ORPHANED = "orphaned"
REASON_UNSCHEDULED = "unscheduled"

ORPHANED_CONDITION = ("DisruptionTarget", "DeletionByPodGC", "PodGC: node no longer exists")


def _phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or ""


def is_terminated(pod: dict) -> bool:
    """``isPodTerminated``: any phase but Pending, Running and Unknown."""
    return _phase(pod) not in ("Pending", "Running", "Unknown")


def is_terminating(pod: dict) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def is_evicted(pod: dict) -> bool:
    """The kubelet's ``PodIsEvicted``: Failed with reason ``Evicted``."""
    status = pod.get("status") or {}
    return status.get("phase") == "Failed" and status.get("reason") == "Evicted"


def gc_order(pods: Iterable[dict]) -> list[dict]:
    """``byEvictionAndCreationTimestamp``: evicted Pods first, then the oldest, then by name."""
    return sorted(pods, key=lambda p: (not is_evicted(p), p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))


def terminated_to_delete(pods: Iterable[dict], threshold: int) -> list[dict]:
    """The finished Pods above ``threshold`` (none when the threshold is 0: turned off)."""
    if threshold <= 0:
        return []
    terminated = [p for p in pods if is_terminated(p)]
    excess = len(terminated) - threshold
    return gc_order(terminated)[:excess] if excess > 0 else []


def node_is_ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in (node.get("status") or {}).get("conditions") or [])


def out_of_service(node: dict) -> bool:
    return any(t.get("key") == TAINT_OUT_OF_SERVICE for t in (node.get("spec") or {}).get("taints") or [])


def terminating_out_of_service(pods: Iterable[dict], nodes: dict[str, dict]) -> list[dict]:
    """Terminating Pods whose Node is not Ready and tainted out-of-service, in GC order."""
    chosen = []
    for pod in pods:
        node = nodes.get((pod.get("spec") or {}).get("nodeName") or "")
        if is_terminating(pod) and node is not None and not node_is_ready(node) and out_of_service(node):
            chosen.append(pod)
    return gc_order(chosen)


def unscheduled_terminating(pods: Iterable[dict]) -> list[dict]:
    return [p for p in pods if is_terminating(p) and not (p.get("spec") or {}).get("nodeName")]


def missing_nodes(pods: Iterable[dict], existing: set[str]) -> set[str]:
    """Names Pods are bound to that the Node cache does not hold."""
    return {name for p in pods if (name := (p.get("spec") or {}).get("nodeName")) and name not in existing}


class Quarantine:
    """Upstream's ``nodeQueue`` with ``AddAfter(name, quarantineTime)``: a name becomes due
    ``quarantine`` seconds after it was first noted; noting it again keeps the earlier time.
    ``take_due`` hands out (and forgets) the names whose time has come."""

    def __init__(self, quarantine: float = QUARANTINE_TIME):
        self.quarantine = quarantine
        self._due: dict[str, float] = {}

    def note(self, names: Iterable[str], now: float) -> None:
        for name in names:
            self._due.setdefault(name, now + self.quarantine)

    def take_due(self, now: float) -> list[str]:
        due = sorted(name for name, at in self._due.items() if at <= now)
        for name in due:
            del self._due[name]
        return due


def failed_status_patch(pod: dict, condition: tuple[str, str, str] | None, now: datetime) -> dict | None:
    """``markFailedAndDeletePodWithCondition``'s status patch: phase Failed (and the condition,
    its transition time now unless it already had that status) for a Pod not yet Succeeded or
    Failed; None when it already is. The ``uid`` pins the patch to this very Pod."""
    if _phase(pod) in ("Succeeded", "Failed"):
        return None
    status: dict = {"phase": "Failed"}
    if condition is not None:
        type_, reason, message = condition
        old = next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)
        since = old.get("lastTransitionTime") if old is not None and old.get("status") == "True" else rfc3339(now)
        status["conditions"] = [{"type": type_, "status": "True", "reason": reason, "message": message, "lastTransitionTime": since}]
    return {"metadata": {"uid": pod["metadata"]["uid"]}, "status": status}
