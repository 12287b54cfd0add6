"""Decode-time defaults of the workload kinds (``SetDefaults_*``), as kubectl then prints them.

* apps/v1 (``pkg/apis/apps/v1/defaults.go``): a Deployment gets ``replicas: 1``, the
  ``RollingUpdate`` strategy with ``maxUnavailable``/``maxSurge`` of ``"25%"`` (only for that
  type: a ``Recreate`` Deployment gets no ``rollingUpdate``), ``revisionHistoryLimit: 10`` and
  ``progressDeadlineSeconds: 600``; a ReplicaSet ``replicas: 1``; a DaemonSet the
  ``RollingUpdate`` update strategy with ``maxUnavailable: 1``, ``maxSurge: 0`` and
  ``revisionHistoryLimit: 10``. A ControllerRevision has none.
* core/v1 ReplicationController (``SetDefaults_ReplicationController``): when the template has
  labels, an empty ``spec.selector`` and empty ``metadata.labels`` become those labels;
  ``replicas: 1``.
* batch/v1 CronJob: ``concurrencyPolicy: Allow``, ``suspend: false``,
  ``successfulJobsHistoryLimit: 3``, ``failedJobsHistoryLimit: 1``.
* batch/v1 Job (``pkg/apis/batch/v1/defaults.go``): ``completions`` and ``parallelism`` both
  unset become 1 and 1, else ``parallelism`` alone defaults to 1; ``backoffLimit: 6``
  (MaxInt32 with ``backoffLimitPerIndex``); empty Job labels copy the template's;
  ``completionMode: NonIndexed``, ``suspend: false``, ``podReplacementPolicy``
  ``TerminatingOrFailed`` (``Failed`` with a ``podFailurePolicy``), and a pod-failure rule's
  ``onPodConditions[].status`` ``True``.

Every embedded ``spec.template.spec`` gets the PodSpec defaults Pods get (``SetDefaults_PodSpec``
and below: dnsPolicy, restartPolicy, schedulerName, terminationGracePeriodSeconds, the
containers' pull policy and termination message, probe and volume defaults), since upstream's
generated defaulters walk into every embedded PodSpec; ``SetDefaults_Pod``'s own extras
(requests from limits, ``enableServiceLinks``) are for Pods only.

All functions mutate in place and never raise: a field of the wrong JSON type is left alone
for validation to report.
"""

from __future__ import annotations

from typing import Any

__all__ = ["deployment", "replica_set", "daemon_set", "replication_controller", "job", "cron_job", "controller_revision",
           "pod_template", "DEFAULTERS"]

MAX_INT32 = 2**31 - 1


def _child(obj: dict, key: str) -> dict | None:
    """``obj[key]`` as a dict, created when absent or null; None when it holds something else."""
    value = obj.get(key)
    if value is None:
        value = obj[key] = {}
    return value if isinstance(value, dict) else None


def _unset(obj: dict, key: str) -> bool:
    return obj.get(key) is None


def pod_template(owner_spec: dict, pointer: bool = False) -> None:
    """PodSpec defaults for ``owner_spec["template"]["spec"]``. A template that is a Go pointer
    (the ReplicationController's) is left absent when absent."""
    if pointer and owner_spec.get("template") is None:
        return
    template = _child(owner_spec, "template")
    if template is None:
        return
    spec = _child(template, "spec")
    if spec is not None:
        from kubesvc.api import defaults  # the Pod rules; imported late: that module imports this one

        defaults._pod_spec(spec)  # SetDefaults_PodSpec and the defaults below it


def _template_labels(spec: dict) -> dict | None:
    template = spec.get("template")
    meta = template.get("metadata") if isinstance(template, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else None


def _dict_items(obj: Any, key: str) -> list[dict]:
    """The dict items of the list ``obj[key]`` (nothing when either is not what it should be)."""
    items = obj.get(key) if isinstance(obj, dict) else None
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _spec(obj: dict) -> dict | None:
    return _child(obj, "spec")


def _rolling_update(spec: dict, key: str, *, max_unavailable: int | str, max_surge: int | str) -> None:
    """``spec[key]``: type RollingUpdate when unset, and for that type the rolling update's bounds."""
    strategy = _child(spec, key)
    if strategy is None:
        return
    if strategy.get("type") in (None, ""):
        strategy["type"] = "RollingUpdate"
    rolling = _child(strategy, "rollingUpdate") if strategy["type"] == "RollingUpdate" else None
    if rolling is not None:
        if _unset(rolling, "maxUnavailable"):
            rolling["maxUnavailable"] = max_unavailable
        if _unset(rolling, "maxSurge"):
            rolling["maxSurge"] = max_surge


def deployment(obj: dict) -> None:
    spec = _spec(obj)
    if spec is None:
        return
    if _unset(spec, "replicas"):
        spec["replicas"] = 1
    _rolling_update(spec, "strategy", max_unavailable="25%", max_surge="25%")
    if _unset(spec, "revisionHistoryLimit"):
        spec["revisionHistoryLimit"] = 10
    if _unset(spec, "progressDeadlineSeconds"):
        spec["progressDeadlineSeconds"] = 600
    pod_template(spec)


def replica_set(obj: dict) -> None:
    spec = _spec(obj)
    if spec is None:
        return
    if _unset(spec, "replicas"):
        spec["replicas"] = 1
    pod_template(spec)


def daemon_set(obj: dict) -> None:
    spec = _spec(obj)
    if spec is None:
        return
    _rolling_update(spec, "updateStrategy", max_unavailable=1, max_surge=0)
    if _unset(spec, "revisionHistoryLimit"):
        spec["revisionHistoryLimit"] = 10
    pod_template(spec)


def replication_controller(obj: dict) -> None:
    spec = _spec(obj)
    if spec is None:
        return
    labels = _template_labels(spec)
    if labels is not None:
        if not spec.get("selector"):
            spec["selector"] = dict(labels)
        meta = _child(obj, "metadata")
        if meta is not None and not meta.get("labels"):
            meta["labels"] = dict(labels)
    if _unset(spec, "replicas"):
        spec["replicas"] = 1
    pod_template(spec, pointer=True)


def job(obj: dict) -> None:
    spec = _spec(obj)
    if spec is None:
        return
    if _unset(spec, "completions") and _unset(spec, "parallelism"):
        spec["completions"] = 1
        spec["parallelism"] = 1
    if _unset(spec, "parallelism"):
        spec["parallelism"] = 1
    if _unset(spec, "backoffLimit"):
        spec["backoffLimit"] = MAX_INT32 if spec.get("backoffLimitPerIndex") is not None else 6
    labels = _template_labels(spec)
    meta = obj.get("metadata")
    if labels is not None and isinstance(meta, dict) and not meta.get("labels"):
        meta["labels"] = dict(labels)
    if _unset(spec, "completionMode"):
        spec["completionMode"] = "NonIndexed"
    if _unset(spec, "suspend"):
        spec["suspend"] = False
    failure_policy = spec.get("podFailurePolicy")
    for rule in _dict_items(failure_policy, "rules"):
        for pattern in _dict_items(rule, "onPodConditions"):
            if pattern.get("status") in (None, ""):
                pattern["status"] = "True"
    if _unset(spec, "podReplacementPolicy"):
        spec["podReplacementPolicy"] = "Failed" if failure_policy is not None else "TerminatingOrFailed"
    pod_template(spec)


def cron_job(obj: dict) -> None:
    """``SetDefaults_CronJob``; the job template gets the PodSpec defaults, not the Job's own."""
    spec = _spec(obj)
    if spec is None:
        return
    if spec.get("concurrencyPolicy") in (None, ""):
        spec["concurrencyPolicy"] = "Allow"
    if _unset(spec, "suspend"):
        spec["suspend"] = False
    if _unset(spec, "successfulJobsHistoryLimit"):
        spec["successfulJobsHistoryLimit"] = 3
    if _unset(spec, "failedJobsHistoryLimit"):
        spec["failedJobsHistoryLimit"] = 1
    job_template = _child(spec, "jobTemplate")
    job_spec = _child(job_template, "spec") if job_template is not None else None
    if job_spec is not None:
        pod_template(job_spec)


def controller_revision(obj: dict) -> None:
    """apps/v1 ControllerRevision has no defaulting functions."""


DEFAULTERS = {
    "Deployment": deployment,
    "ReplicaSet": replica_set,
    "DaemonSet": daemon_set,
    "ControllerRevision": controller_revision,
    "ReplicationController": replication_controller,
    "Job": job,
    "CronJob": cron_job,
}
