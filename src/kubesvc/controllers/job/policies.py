"""A Job's pod failure policy, per-index back-off and success policy as pure decisions
(pkg/controller/job/pod_failure_policy.go, indexed_job_utils.go, success_policy.go,
backoff_utils.go; Kubernetes 1.32/1.33, all three features on by default).

**Pod failure policy** (``spec.podFailurePolicy``, KEP-3329). A failed Pod is matched against
the rules in order; the first match decides:

* ``FailJob``: the Job fails now (``FailureTarget``, then ``Failed``, reason
  ``PodFailurePolicy``), its message naming the container and exit code or the Pod condition;
* ``FailIndex``: (Indexed Jobs with ``backoffLimitPerIndex``) the Pod's index fails at once;
* ``Ignore``: the failure is not counted against ``backoffLimit`` (or the index's limit): the
  typical rule is ``onPodConditions: [{type: DisruptionTarget}]``, which the eviction API,
  preemption and node-pressure eviction set on the Pods they kill;
* ``Count``: counted, as with no rule.

``onExitCodes`` looks at terminated containers (app containers first, then init containers;
exit code 0 never matches), optionally only the one named ``containerName``; ``In``/``NotIn``
the listed values. ``onPodConditions`` matches a Pod condition with that type and status.

**Back-off limit per index** (``backoffLimitPerIndex``, KEP-3850). Each Pod of an Indexed Job
carries ``batch.kubernetes.io/job-index-failure-count`` (failures of its index before it; and
``...-ignored-failure-count`` for ignored ones). A failed Pod whose count has reached the
limit (or that matched ``FailIndex``) fails its index: it is listed in ``status.failedIndexes``
and not retried. The Job fails with ``MaxFailedIndexesExceeded`` once more indexes failed
than ``maxFailedIndexes``, or with ``FailedIndexes`` once every index either succeeded or
failed. A failed Pod of an index not yet retried keeps its tracking finalizer until its
replacement exists (the count moves on to it); the replacement waits the back-off of its
index's failures (10 s doubling, at most 10 min).

**Success policy** (``successPolicy``, KEP-3998). The Job succeeds early once one rule holds:
all of ``succeededIndexes`` succeeded, or ``succeededCount`` of them (of any index if no
``succeededIndexes``): ``SuccessCriteriaMet`` then ``Complete``, reason ``SuccessPolicy``,
message ``Matched rules at index <i>``; the Pods still running are deleted.
"""

from __future__ import annotations

from datetime import datetime

from kubesvc.controllers.job import decisions as jd

FAIL_JOB, FAIL_INDEX, IGNORE, COUNT = "FailJob", "FailIndex", "Ignore", "Count"
POD_FAILURE_POLICY_REASON = "PodFailurePolicy"
FAILED_INDEXES = ("FailedIndexes", "Job has failed indexes")
MAX_FAILED_INDEXES_EXCEEDED = ("MaxFailedIndexesExceeded", "Job has exceeded the specified maximal number of failed indexes")
SUCCESS_POLICY_REASON = "SuccessPolicy"
INDEX_FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
INDEX_IGNORED_FAILURE_COUNT = "batch.kubernetes.io/job-index-ignored-failure-count"
MAX_INT32 = 2**31 - 1


def _spec(job: dict) -> dict:
    return job.get("spec") or {}


# ---- pod failure policy --------------------------------------------------------------------------


def _exit_code_matches(code: int, requirement: dict) -> bool:
    values = requirement.get("values") or []
    operator = requirement.get("operator")
    if operator == "In":
        return code in values
    if operator == "NotIn":
        return code not in values
    return False


def _matching_container(pod: dict, requirement: dict) -> dict | None:
    """``matchOnExitCodes``: the first terminated container (app containers, then init
    containers) with a non-zero exit code the requirement matches."""
    status = pod.get("status") or {}
    for statuses in (status.get("containerStatuses") or [], status.get("initContainerStatuses") or []):
        for container in statuses:
            terminated = (container.get("state") or {}).get("terminated")
            if not terminated:
                continue
            name = requirement.get("containerName")
            if name is not None and name != container.get("name"):
                continue
            code = int(terminated.get("exitCode") or 0)
            if code != 0 and _exit_code_matches(code, requirement):
                return container
    return None


def _matching_condition(pod: dict, patterns: list[dict]) -> dict | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        for pattern in patterns:
            if condition.get("type") == pattern.get("type") and condition.get("status") == (pattern.get("status") or "True"):
                return condition
    return None


def match_pod_failure_policy(policy: dict | None, pod: dict) -> tuple[str | None, bool, str | None]:
    """``matchPodFailurePolicy``: (the Job's failure message for ``FailJob``, whether the
    failure counts, the matched action)."""
    if not policy:
        return None, True, None
    meta = pod.get("metadata") or {}
    for index, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action")
        if rule.get("onExitCodes") is not None:
            container = _matching_container(pod, rule["onExitCodes"])
            if container is None:
                continue
            message = (f"Container {container.get('name')} for pod {meta.get('namespace')}/{meta.get('name')} failed with exit code "
                       f"{container['state']['terminated'].get('exitCode')} matching {action} rule at index {index}")
        elif rule.get("onPodConditions") is not None:
            condition = _matching_condition(pod, rule["onPodConditions"])
            if condition is None:
                continue
            message = (f"Pod {meta.get('namespace')}/{meta.get('name')} has condition {condition.get('type')} matching {action} "
                       f"rule at index {index}")
        else:
            continue
        if action == IGNORE:
            return None, False, IGNORE
        if action == FAIL_INDEX:
            return None, True, FAIL_INDEX
        if action == COUNT:
            return None, True, COUNT
        if action == FAIL_JOB:
            return message, True, FAIL_JOB
    return None, True, None


def counts_as_failure(job: dict, pod: dict) -> bool:
    """Whether a failed Pod counts against the back-off limits (no ``Ignore`` rule matched)."""
    return match_pod_failure_policy(_spec(job).get("podFailurePolicy"), pod)[1]


def fail_job_message(job: dict, pods: list[dict]) -> str | None:
    """``getFailJobMessage``: the message of the first failed Pod matching a ``FailJob`` rule."""
    policy = _spec(job).get("podFailurePolicy")
    if not policy:
        return None
    for pod in pods:
        if jd.is_failed(pod, job):
            message = match_pod_failure_policy(policy, pod)[0]
            if message is not None:
                return message
    return None


# ---- backoffLimitPerIndex ------------------------------------------------------------------------


def has_backoff_limit_per_index(job: dict) -> bool:
    return _spec(job).get("backoffLimitPerIndex") is not None


def _annotation_count(pod: dict, key: str) -> int:
    """``parseInt32``: a missing, unparsable, negative or too large value counts 0."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(key)
    try:
        value = int(text)
    except (TypeError, ValueError):
        return 0
    return value if 0 <= value <= MAX_INT32 else 0


def index_failure_count(pod: dict) -> int:
    return _annotation_count(pod, INDEX_FAILURE_COUNT)


def index_absolute_failure_count(pod: dict) -> int:
    return _annotation_count(pod, INDEX_FAILURE_COUNT) + _annotation_count(pod, INDEX_IGNORED_FAILURE_COUNT)


def is_index_failed(job: dict, pod: dict) -> bool:
    """``isIndexFailed``: the Pod failed and either matched ``FailIndex`` or its counted
    failure used up the index's ``backoffLimitPerIndex``."""
    if not jd.is_failed(pod, job):
        return False
    _, counted, action = match_pod_failure_policy(_spec(job).get("podFailurePolicy"), pod)
    if action == FAIL_INDEX:
        return True
    return counted and index_failure_count(pod) >= int(_spec(job).get("backoffLimitPerIndex") or 0)


def failed_indexes(job: dict, pods: list[dict]) -> set[int]:
    """``calculateFailedIndexes``: ``status.failedIndexes`` plus the indexes whose not yet
    counted Pod failed them."""
    found = jd.parse_indexes((job.get("status") or {}).get("failedIndexes"), jd.completions(job))
    for pod in pods:
        index = jd.pod_index(pod, job)
        if index is not None and jd.has_tracking_finalizer(pod) and is_index_failed(job, pod):
            found.add(index)
    return found


def pods_with_delayed_deletion(job: dict, pods: list[dict], active_pods: list[dict], succeeded: set[int], failed: set[int]) -> dict[int, dict]:
    """``getPodsWithDelayedDeletionPerIndex``: per index still to be retried, its latest
    failed Pod, which keeps its finalizer until the replacement carries its count on."""
    active_indexes = {jd.pod_index(p, job) for p in active_pods}
    delayed: dict[int, dict] = {}
    for pod in pods:
        if not jd.has_tracking_finalizer(pod) or not jd.is_failed(pod, job):
            continue
        index = jd.pod_index(pod, job)
        if index is None or index in succeeded or index in failed or index in active_indexes:
            continue
        last = delayed.get(index)
        if last is None or (index_absolute_failure_count(last) <= index_absolute_failure_count(pod)
                            and jd.finish_time(pod) >= jd.finish_time(last)):
            delayed[index] = pod
    return delayed


def new_index_failure_counts(job: dict, replaced: dict | None) -> tuple[int, int]:
    """``getNewIndexFailureCounts``: the (counted, ignored) failures the replacement of
    ``replaced`` carries."""
    if replaced is None:
        return 0, 0
    counted, ignored = index_failure_count(replaced), _annotation_count(replaced, INDEX_IGNORED_FAILURE_COUNT)
    if counts_as_failure(job, replaced):
        counted += 1
    else:
        ignored += 1
    return counted, ignored


def failure_count_annotations(job: dict, replaced: dict | None) -> dict[str, str]:
    """``addIndexFailureCountAnnotation``: the count always, the ignored count when not 0."""
    counted, ignored = new_index_failure_counts(job, replaced)
    annotations = {INDEX_FAILURE_COUNT: str(counted)}
    if ignored > 0:
        annotations[INDEX_IGNORED_FAILURE_COUNT] = str(ignored)
    return annotations


def remaining_backoff_of_index(replaced: dict | None, now: datetime, base: float = jd.DEFAULT_BACKOFF, cap: float = jd.MAX_BACKOFF) -> float:
    """``getRemainingTimePerIndex``: the back-off of the index's failures so far (counted and
    ignored, the one being replaced included) from when that Pod finished."""
    if replaced is None:
        return 0.0
    record = jd.BackoffRecord(index_absolute_failure_count(replaced) + 1, jd.finish_time(replaced))
    return jd.remaining_backoff(record, now, base, cap)


def per_index_failure(job: dict, failed: set[int], succeeded: set[int]) -> tuple[str, str] | None:
    """``MaxFailedIndexesExceeded`` past ``maxFailedIndexes``; ``FailedIndexes`` once every
    index either succeeded or failed (and one failed)."""
    max_failed = _spec(job).get("maxFailedIndexes")
    if max_failed is not None and len(failed) > int(max_failed):
        return MAX_FAILED_INDEXES_EXCEEDED
    if failed and len(failed) + len(succeeded) >= jd.completions(job):
        return FAILED_INDEXES
    return None


# ---- success policy ------------------------------------------------------------------------------


def match_success_policy(job: dict, succeeded: set[int]) -> str | None:
    """``matchSuccessPolicy``: ``Matched rules at index <i>`` for the first rule that holds."""
    policy = _spec(job).get("successPolicy")
    if not policy or not succeeded:
        return None
    completions = jd.completions(job)
    for index, rule in enumerate(policy.get("rules") or []):
        count = rule.get("succeededCount")
        if rule.get("succeededIndexes") is not None:
            # as intervals, never expanded: "0-2147483646" is a valid rule
            intervals = jd.parse_intervals(rule["succeededIndexes"], completions)
            required = sum(last - first + 1 for first, last in intervals)
            if not required:
                continue
            contained = sum(1 for i in succeeded if jd.in_intervals(i, intervals))
            if contained == required or (count is not None and contained >= int(count)):
                return f"Matched rules at index {index}"
        elif count is not None and len(succeeded) >= int(count):
            return f"Matched rules at index {index}"
    return None
