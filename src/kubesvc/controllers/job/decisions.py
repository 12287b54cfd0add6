"""The Job controller's decisions as pure functions (pkg/controller/job/job_controller.go,
backoff_utils.go; NonIndexed and Indexed completion modes).

* **How many Pods run.** ``parallelism`` at most; with ``completions`` set, no more than the
  completions still missing; without it (a work queue) ``parallelism`` until one Pod
  succeeded, then only those still running.
* **Counting.** Every Pod is created with the ``batch.kubernetes.io/job-tracking`` finalizer.
  A finished Pod (Succeeded; Failed, or being deleted without having succeeded) is first
  written into ``status.uncountedTerminatedPods``, then its finalizer is removed, then it
  moves into ``succeeded``/``failed``: a Pod is counted exactly once even when it is deleted
  right after finishing.
* **Back-off.** After failures the next Pod waits ``10 s · 2^(n-1)`` (n failures since the
  last success), at most 10 minutes, from the last failure's finish time.
* **The end.** ``failed > backoffLimit`` (default 6), or under ``restartPolicy: OnFailure``
  the running Pods' container restarts reaching it: ``BackoffLimitExceeded``; running longer
  than ``activeDeadlineSeconds``: ``DeadlineExceeded``; enough successes:
  ``CompletionsReached``. As in 1.32 the Job first gets the interim condition
  (``FailureTarget`` / ``SuccessCriteriaMet``) and its remaining Pods are deleted; ``Failed`` /
  ``Complete`` follow once no Pod is left terminating or uncounted.
* **Another controller's Jobs.** A Job whose ``spec.managedBy`` names a controller other than
  ``kubernetes.io/job-controller`` (the JobManagedBy feature, beta and on by default in 1.32)
  is left alone: not synced (no Pods, no status), and its Pods' tracking finalizers are not
  removed while it exists.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from kubesvc.util.golang import parse_rfc3339, rfc3339

JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
JOB_CONTROLLER_NAME = "kubernetes.io/job-controller"  # batch.JobControllerName
DEFAULT_BACKOFF = 10.0  # seconds (DefaultJobPodFailureBackOff)
MAX_BACKOFF = 600.0  # MaxJobPodFailureBackOff
MAX_POD_CREATE_DELETE_PER_SYNC = 500
MAX_UNCOUNTED_PODS = 500
DEFAULT_BACKOFF_LIMIT = 6

COMPLETE, FAILED, FAILURE_TARGET, SUCCESS_CRITERIA_MET, SUSPENDED = "Complete", "Failed", "FailureTarget", "SuccessCriteriaMet", "Suspended"
BACKOFF_LIMIT_EXCEEDED = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
DEADLINE_EXCEEDED = ("DeadlineExceeded", "Job was active longer than specified deadline")
COMPLETIONS_REACHED = ("CompletionsReached", "Reached expected number of succeeded pods")


def phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or ""


def is_active(pod: dict) -> bool:
    """``IsPodActive``: not finished and not being deleted."""
    return phase(pod) not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def is_terminating(pod: dict) -> bool:
    return phase(pod) not in ("Succeeded", "Failed") and bool(pod["metadata"].get("deletionTimestamp"))


def only_replace_failed(job: dict) -> bool:
    spec = job.get("spec") or {}
    return spec.get("podReplacementPolicy") == "Failed" or spec.get("podFailurePolicy") is not None


def is_failed(pod: dict, job: dict) -> bool:
    """``isPodFailed``: Failed, or (unless only Failed Pods are replaced) being deleted
    without having succeeded: an orphan that never reaches Failed still counts."""
    if phase(pod) == "Failed":
        return True
    if only_replace_failed(job):
        return False
    return bool(pod["metadata"].get("deletionTimestamp")) and phase(pod) != "Succeeded"


def has_tracking_finalizer(pod: dict) -> bool:
    return JOB_TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or [])


def condition(job: dict, type_: str) -> dict | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_ and c.get("status") == "True":
            return c
    return None


def managed_by_external_controller(job: dict) -> str | None:
    """Upstream ``managedByExternalController``: the ``spec.managedBy`` naming another controller
    (the Job controller then leaves the Job alone), else None (unset or ours)."""
    name = (job.get("spec") or {}).get("managedBy")
    return name if name is not None and name != JOB_CONTROLLER_NAME else None


def is_finished(job: dict) -> bool:
    return condition(job, COMPLETE) is not None or condition(job, FAILED) is not None


def new_condition(type_: str, reason: str, message: str, now: datetime, status: str = "True") -> dict:
    stamp = rfc3339(now)
    return {"type": type_, "status": status, "lastProbeTime": stamp, "lastTransitionTime": stamp, "reason": reason, "message": message}


def set_condition(conditions: list[dict], new: dict) -> bool:
    """``ensureJobConditionStatus``: add it, or update status/reason/message of the existing one
    (transition time moves only with the status). Whether anything changed."""
    for index, existing in enumerate(conditions):
        if existing.get("type") != new["type"]:
            continue
        if existing.get("status") == new["status"] and existing.get("reason") == new["reason"] and existing.get("message") == new["message"]:
            return False
        updated = dict(new)
        if existing.get("status") == new["status"]:
            updated["lastTransitionTime"] = existing.get("lastTransitionTime")
        conditions[index] = updated
        return True
    if new["status"] != "True":
        return False  # a condition not there need not be written False
    conditions.append(new)
    return True


def want_active(job: dict, succeeded: int, active: int) -> int:
    """How many Pods should run now (``manageJob``)."""
    spec = job.get("spec") or {}
    parallelism = int(spec.get("parallelism") if spec.get("parallelism") is not None else 1)
    completions = spec.get("completions")
    if completions is None:
        # a work queue: once one succeeded, no new ones
        return active if succeeded > 0 else parallelism
    return max(0, min(int(completions) - succeeded, parallelism))


def is_complete(job: dict, succeeded: int, active: int) -> bool:
    completions = (job.get("spec") or {}).get("completions")
    if completions is None:
        return succeeded > 0 and active == 0
    return succeeded >= int(completions)


def backoff_limit(job: dict) -> int:
    limit = (job.get("spec") or {}).get("backoffLimit")
    return DEFAULT_BACKOFF_LIMIT if limit is None else int(limit)


def finish_time(pod: dict) -> datetime:
    """``getFinishedTime``: the latest container finish, else when it stopped being Ready,
    else its deletion, else its creation."""
    status = pod.get("status") or {}
    finished = []
    for container in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        terminated = (container.get("state") or {}).get("terminated") or {}
        if terminated.get("finishedAt"):
            finished.append(parse_rfc3339(terminated["finishedAt"]))
    if finished:
        return max(finished)
    for c in status.get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") == "False" and c.get("lastTransitionTime"):
            return parse_rfc3339(c["lastTransitionTime"])
    stamp = pod["metadata"].get("deletionTimestamp") or pod["metadata"].get("creationTimestamp")
    return parse_rfc3339(stamp)


@dataclass
class BackoffRecord:
    """``backoffRecord``: failures since the last success and when the last one finished."""

    failures_after_last_success: int = 0
    last_failure_time: datetime | None = None


def next_backoff_record(record: BackoffRecord, newly_succeeded: list[dict], newly_failed: list[dict]) -> BackoffRecord:
    """``newBackoffRecord``: a success after the failures resets the count."""
    if not newly_succeeded and not newly_failed:
        return record
    last_success = max((finish_time(p) for p in newly_succeeded), default=None)
    failures = sorted(finish_time(p) for p in newly_failed)
    if last_success is not None:
        after = [t for t in failures if t > last_success]
        return BackoffRecord(len(after), after[-1] if after else None)
    return BackoffRecord(record.failures_after_last_success + len(failures), failures[-1] if failures else record.last_failure_time)


def remaining_backoff(record: BackoffRecord, now: datetime, base: float = DEFAULT_BACKOFF, cap: float = MAX_BACKOFF) -> float:
    """Seconds until the next Pod may be created (0: now). ``base`` and ``cap`` are upstream's
    ``DefaultJobPodFailureBackOff``/``MaxJobPodFailureBackOff``, package variables its
    integration tests shorten; here the controller's ``pod_failure_backoff`` arguments."""
    if record.failures_after_last_success == 0 or record.last_failure_time is None:
        return 0.0
    delay = min(base * 2 ** (record.failures_after_last_success - 1), cap)
    waited = (now - record.last_failure_time).total_seconds()
    return max(0.0, delay - waited)


def past_active_deadline(job: dict, now: datetime) -> bool:
    deadline = (job.get("spec") or {}).get("activeDeadlineSeconds")
    start = (job.get("status") or {}).get("startTime")
    if deadline is None or not start:
        return False
    return now - parse_rfc3339(start) >= timedelta(seconds=int(deadline))


def seconds_to_active_deadline(job: dict, now: datetime) -> float | None:
    deadline = (job.get("spec") or {}).get("activeDeadlineSeconds")
    start = (job.get("status") or {}).get("startTime")
    if deadline is None or not start:
        return None
    return (parse_rfc3339(start) + timedelta(seconds=int(deadline)) - now).total_seconds()


def past_backoff_limit_on_failure(job: dict, pods: Iterable[dict]) -> bool:
    """``pastBackoffLimitOnFailure``: under the template's ``restartPolicy: OnFailure`` the
    kubelet restarts a failing container in place and the Pod never fails, so the restarts
    count instead: the ``restartCount`` of every container (init containers too) of the Job's
    Pending and Running Pods, summed, reaching ``backoffLimit`` (any restart, with a limit of 0)."""
    template_spec = (((job.get("spec") or {}).get("template") or {}).get("spec") or {})
    if template_spec.get("restartPolicy") != "OnFailure":
        return False
    restarts = 0
    for pod in pods:
        if phase(pod) in ("Pending", "Running"):
            status = pod.get("status") or {}
            for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
                restarts += int(container.get("restartCount") or 0)
    limit = backoff_limit(job)
    return restarts > 0 if limit == 0 else restarts >= limit


def failure(job: dict, failed: int, now: datetime, fail_job_message: str | None = None, pods: Iterable[dict] = ()) -> tuple[str, str] | None:
    """The reason and message a Job fails with now, if it does: an earlier FailureTarget, a
    Pod matching a ``FailJob`` rule of the pod failure policy, the back-off limit (failed Pods,
    or under ``OnFailure`` its Pods' container restarts), the active deadline, in that order."""
    target = condition(job, FAILURE_TARGET)
    if target is not None:
        return target.get("reason", ""), target.get("message", "")
    if fail_job_message is not None:
        return "PodFailurePolicy", fail_job_message
    if failed > backoff_limit(job) or past_backoff_limit_on_failure(job, pods):
        return BACKOFF_LIMIT_EXCEEDED
    if past_active_deadline(job, now):
        return DEADLINE_EXCEEDED
    return None


def pod_name_prefix(job_name: str) -> str:
    """``generateName`` of the Job's Pods: ``<job>-`` (the apiserver adds 5 characters)."""
    return f"{job_name}-"


# ---- Indexed completion mode (job_controller.go indexed_job_utils.go) -------------------------
#
# ``completionMode: Indexed``: each of the ``completions`` indexes 0..n-1 must succeed once. A
# Pod carries its index as the annotation and label ``batch.kubernetes.io/job-completion-index``
# and in ``JOB_COMPLETION_INDEX``; its hostname is ``<job>-<index>``. ``status.completedIndexes``
# lists the succeeded indexes as intervals (``"1,3-5,7"``); the Job is complete when all are.

COMPLETION_INDEX_KEY = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
MAX_GENERATED_NAME_LENGTH = 58


def is_indexed(job: dict) -> bool:
    return (job.get("spec") or {}).get("completionMode") == "Indexed"


def completions(job: dict) -> int:
    return int((job.get("spec") or {}).get("completions") or 0)


def pod_index(pod: dict, job: dict) -> int | None:
    """``getCompletionIndex``: the Pod's index, None when missing or out of range."""
    meta = pod.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(COMPLETION_INDEX_KEY) or (meta.get("labels") or {}).get(COMPLETION_INDEX_KEY)
    if text is None or not text.isdigit():
        return None
    index = int(text)
    return index if index < completions(job) else None


def parse_intervals(text: str | None, limit: int) -> list[tuple[int, int]]:
    """``parseIndexesFromString`` as upstream keeps it (``orderedIntervals``): sorted, merged
    ``(first, last)`` pairs, indexes >= ``limit`` dropped, unreadable parts skipped."""
    found = []
    for part in (text or "").split(","):
        first, _, last = part.partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            continue
        high = min(high, limit - 1)
        if 0 <= low <= high:
            found.append((low, high))
    merged: list[tuple[int, int]] = []
    for low, high in sorted(found):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def in_intervals(index: int, intervals: list[tuple[int, int]]) -> bool:
    at = bisect.bisect_right(intervals, (index, float("inf"))) - 1
    return at >= 0 and intervals[at][0] <= index <= intervals[at][1]


def parse_indexes(text: str | None, limit: int) -> set[int]:
    """``parseIndexesFromString``: ``"1,3-5"`` -> {1, 3, 4, 5}, indexes >= ``limit`` dropped."""
    found: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            continue
        found.update(range(low, min(high, limit - 1) + 1))
    return found


def format_indexes(indexes: set[int]) -> str:
    """``orderedIntervals.String()``: sorted intervals, ``0-2`` for three or more in a row and
    ``0,1`` for two (upstream writes a two-index run with a comma)."""
    parts, ordered = [], sorted(indexes)
    start = prev = None
    for index in ordered:
        if start is None:
            start = prev = index
        elif index == prev + 1:
            prev = index
        else:
            parts.append(_interval(start, prev))
            start = prev = index
    if start is not None:
        parts.append(_interval(start, prev))
    return ",".join(parts)


def _interval(first: int, last: int) -> str:
    if first == last:
        return str(first)
    return f"{first},{last}" if last == first + 1 else f"{first}-{last}"


def indexes_to_create(job: dict, succeeded: set[int], active_pods: list[dict], want: int, failed: set[int] = frozenset()) -> list[int]:
    """``firstPendingIndexes``: the lowest indexes neither succeeded, failed (with
    ``backoffLimitPerIndex``) nor running, ``want`` of them."""
    running = {pod_index(p, job) for p in active_pods}
    # stop at ``want``: an Indexed Job may have up to 2**31-1 completions, and walking them all
    # each sync stalled the controller-manager (at most want + the sets' sizes steps here)
    pending = (i for i in range(completions(job)) if i not in succeeded and i not in running and i not in failed)
    return list(itertools.islice(pending, max(0, want)))


def excess_indexed_pods(job: dict, succeeded: set[int], active_pods: list[dict]) -> list[dict]:
    """Active Pods to delete: those without a valid index, those of an index that already
    succeeded, and all but the oldest of two running one index."""
    excess, kept = [], set()
    for pod in sorted(active_pods, key=lambda p: p["metadata"].get("creationTimestamp") or ""):
        index = pod_index(pod, job)
        if index is None or index in succeeded or index in kept:
            excess.append(pod)
        else:
            kept.add(index)
    return excess


def indexed_template(job: dict, index: int, annotations: dict[str, str] | None = None) -> tuple[dict, str]:
    """The template of index ``index``'s Pod and its generateName (``podGenerateNameWithIndex``);
    ``annotations`` added (the index's failure counts with ``backoffLimitPerIndex``)."""
    import copy

    template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
    meta = template.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), COMPLETION_INDEX_KEY: str(index), **(annotations or {})}
    meta["labels"] = {**(meta.get("labels") or {}), COMPLETION_INDEX_KEY: str(index)}
    spec = template.setdefault("spec", {})
    name = job["metadata"]["name"]
    if not spec.get("hostname"):
        spec["hostname"] = f"{name}-{index}"
    env_var = {"name": COMPLETION_INDEX_ENV,
               "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.labels['{COMPLETION_INDEX_KEY}']"}}}
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if not any(e.get("name") == COMPLETION_INDEX_ENV for e in container.get("env") or []):
            container["env"] = list(container.get("env") or []) + [env_var]
    appendix = f"-{index}-"
    prefix = name + appendix
    if len(prefix) > MAX_GENERATED_NAME_LENGTH:
        prefix = prefix[:MAX_GENERATED_NAME_LENGTH - len(appendix)] + appendix
    return template, prefix
