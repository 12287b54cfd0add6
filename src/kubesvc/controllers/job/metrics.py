"""The Job controller's metrics, with upstream's names and labels
(pkg/controller/job/metrics/metrics.go), subsystem ``job_controller``:

* ``job_sync_duration_seconds`` (histogram, 4 ms doubling, 15 buckets) and ``job_syncs_total``
  {completion_mode, result, action}: every sync of an unfinished Job. ``completion_mode``
  ``NonIndexed``/``Indexed``; ``result`` ``success``/``error``; ``action`` ``reconciling``
  (expectations not met, or the Job is finishing), ``tracking`` (nothing to create or delete),
  ``pods_created`` (Pods created, or waiting out the back-off to), ``pods_deleted``
  (excess or suspended);
* ``jobs_finished_total`` {completion_mode, result, reason}: a Job written ``Complete``
  (``succeeded``) or ``Failed`` (``failed``), with the condition's reason;
* ``job_pods_finished_total`` {completion_mode, result}: finished Pods the status now counts
  (Indexed: succeeded is the growth of ``completedIndexes``);
* ``job_finished_indexes_total`` {status, backoffLimit}: an Indexed Job's newly succeeded
  (and, with ``backoffLimitPerIndex``, failed) indexes; ``backoffLimit`` ``perIndex`` or ``global``;
* ``pod_failures_handled_by_failure_policy_total`` {action}: failed Pods a pod failure policy
  rule matched (``FailJob``, ``FailIndex``, ``Ignore``, ``Count``);
* ``terminated_pods_tracking_finalizer_total`` {event}: a finished Pod with the
  ``batch.kubernetes.io/job-tracking`` finalizer appearing (``add``) or going (``delete``), as
  the Pod informer sees them, whoever owns the Pod;
* ``jobs_by_external_controller_total`` {controller_name}: a Job whose ``spec.managedBy`` names
  another controller, counted when the Job informer adds it (so again after a restart), with
  the ``managedBy`` value;
* ``job_pods_creation_total`` {reason, status}: Pod creations, ``new`` or, when the Job already
  has failed or terminating Pods, ``recreate_terminating_or_failed`` (``recreate_failed`` with
  ``podReplacementPolicy: Failed``), ``succeeded``/``failed``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from kubesvc.controllers.job import decisions as jd

SUBSYSTEM = "job_controller_"
SYNC_BUCKETS = tuple(0.004 * 2**i for i in range(15))  # ExponentialBuckets(0.004, 2, 15)

RECONCILING, TRACKING, PODS_CREATED, PODS_DELETED = "reconciling", "tracking", "pods_created", "pods_deleted"
SUCCEEDED, FAILED = "succeeded", "failed"
NEW, RECREATE_TERMINATING_OR_FAILED, RECREATE_FAILED = "new", "recreate_terminating_or_failed", "recreate_failed"


def completion_mode(job: dict) -> str:
    return "Indexed" if jd.is_indexed(job) else "NonIndexed"


def creation_reason(job: dict, failed: int, terminating: int) -> str:
    """``recordJobPodsCreationTotal``'s reason: why the Pods now created are made."""
    if (job.get("spec") or {}).get("podReplacementPolicy") == "Failed" and failed > 0:
        return RECREATE_FAILED
    if failed > 0 or terminating > 0:
        return RECREATE_TERMINATING_OR_FAILED
    return NEW


def is_finished_with_tracking_finalizer(pod: dict | None) -> bool:
    return pod is not None and jd.phase(pod) in ("Succeeded", "Failed") and jd.has_tracking_finalizer(pod)


def count_indexes(text: str | None, completions: int) -> int:
    return sum(last - first + 1 for first, last in jd.parse_intervals(text, completions))


class JobMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        registry = registry if registry is not None else CollectorRegistry()
        self.sync_duration = Histogram(SUBSYSTEM + "job_sync_duration_seconds", "The time it took to sync a job",
                                       ["completion_mode", "result", "action"], buckets=SYNC_BUCKETS, registry=registry)
        self.syncs = Counter(SUBSYSTEM + "job_syncs_total", "The number of job syncs", ["completion_mode", "result", "action"],
                             registry=registry)
        self.jobs_finished = Counter(SUBSYSTEM + "jobs_finished_total", "The number of finished jobs",
                                     ["completion_mode", "result", "reason"], registry=registry)
        self.pods_finished = Counter(SUBSYSTEM + "job_pods_finished_total", "The number of finished Pods that are fully tracked",
                                     ["completion_mode", "result"], registry=registry)
        self.failure_policy = Counter(
            SUBSYSTEM + "pod_failures_handled_by_failure_policy_total",
            "The number of failed Pods handled by failure policy with respect to the failure policy action applied based on the "
            'matched rule. Possible values of the action label correspond to the possible values for the failure policy rule '
            'action, which are: "FailJob", "Ignore" and "Count".', ["action"], registry=registry)
        self.tracking_finalizer = Counter(
            SUBSYSTEM + "terminated_pods_tracking_finalizer_total",
            "The number of terminated pods (phase=Failed|Succeeded) that have the finalizer batch.kubernetes.io/job-tracking. "
            'The event label can be "add" or "delete".', ["event"], registry=registry)
        self.finished_indexes = Counter(
            SUBSYSTEM + "job_finished_indexes_total",
            'The number of finished indexes. Possible values for the status label are: "succeeded", "failed". Possible values '
            'for the backoffLimit label are: "perIndex" and "global"', ["status", "backoffLimit"], registry=registry)
        self.by_external_controller = Counter(SUBSYSTEM + "jobs_by_external_controller_total",
                                              "The number of Jobs managed by an external controller", ["controller_name"],
                                              registry=registry)
        self.pods_creation = Counter(
            SUBSYSTEM + "job_pods_creation_total",
            "The number of Pods created by the Job controller labelled with a reason for the Pod creation.", ["reason", "status"],
            registry=registry)

    def observe_sync(self, job: dict, error: bool, action: str, seconds: float) -> None:
        labels = (completion_mode(job), "error" if error else "success", action)
        self.sync_duration.labels(*labels).observe(seconds)
        self.syncs.labels(*labels).inc()

    def pod_changed(self, old: dict | None, new: dict | None) -> None:
        """``recordFinishedPodWithTrackingFinalizer``."""
        was, now = is_finished_with_tracking_finalizer(old), is_finished_with_tracking_finalizer(new)
        if was != now:
            self.tracking_finalizer.labels("add" if now else "delete").inc()

    def job_finished(self, job: dict, condition_type: str, reason: str) -> None:
        self.jobs_finished.labels(completion_mode(job), SUCCEEDED if condition_type == jd.COMPLETE else FAILED, reason).inc()

    def pods_counted(self, job: dict, old: dict, new: dict) -> None:
        """``recordJobPodsFinished``: the growth of the counters between two written statuses."""
        mode = completion_mode(job)
        if jd.is_indexed(job):
            completions = jd.completions(job)
            succeeded = count_indexes(new.get("completedIndexes"), completions) - count_indexes(old.get("completedIndexes"), completions)
            per_index = (job.get("spec") or {}).get("backoffLimitPerIndex") is not None
            limit_label = "perIndex" if per_index else "global"
            if succeeded > 0:
                self.finished_indexes.labels(SUCCEEDED, limit_label).inc(succeeded)
            failed_indexes = count_indexes(new.get("failedIndexes"), completions) - count_indexes(old.get("failedIndexes"), completions)
            if per_index and failed_indexes > 0:
                self.finished_indexes.labels(FAILED, limit_label).inc(failed_indexes)
        else:
            succeeded = int(new.get("succeeded") or 0) - int(old.get("succeeded") or 0)
        failed = int(new.get("failed") or 0) - int(old.get("failed") or 0)
        if succeeded > 0:
            self.pods_finished.labels(mode, SUCCEEDED).inc(succeeded)
        if failed > 0:
            self.pods_finished.labels(mode, FAILED).inc(failed)

    def creations(self, reason: str, succeeded: int, failed: int) -> None:
        if succeeded > 0:
            self.pods_creation.labels(reason, SUCCEEDED).inc(succeeded)
        if failed > 0:
            self.pods_creation.labels(reason, FAILED).inc(failed)
