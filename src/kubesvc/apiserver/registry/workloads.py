"""Registry strategies of the workload kinds (``pkg/registry/apps/*``, ``batch/job``, ``core/replicationcontroller``).

What the generic store leaves to them, as upstream's strategies decide it:

* **Create** starts with an empty status (the ReplicaSet-like kinds' ``replicas: 0`` and the
  DaemonSet's four counters are not ``omitempty``, so they show as zeros) and
  ``metadata.generation: 1``. A DaemonSet starts at template generation 1, which apps/v1 keeps
  in the annotation ``deprecated.daemonset.template.generation``. A Job without
  ``manualSelector: true`` gets its selector made here (``generateSelector``): the template
  gains ``batch.kubernetes.io/job-name``/``job-name`` = the Job's name and
  ``batch.kubernetes.io/controller-uid``/``controller-uid`` = its uid, and the selector matches
  ``batch.kubernetes.io/controller-uid``, so the Job only ever counts its own Pods.
* **Update** of the main resource keeps the status; the generation counts changes of ``spec``
  (and, for a Deployment, of its annotations: the rollback request is one). A DaemonSet's
  template generation only moves when its template changes, and clients cannot set it.
* **Status** writes are validated by the kind's status rules only.

The ``scale`` subresource of Deployments, ReplicaSets and ReplicationControllers is
``apiserver/scale.py``.
"""

from __future__ import annotations

import copy

from kubesvc.api import validation_workloads as rules
from kubesvc.api.errors import FieldError
from kubesvc.api.scheme import KindInfo
from kubesvc.apiserver.registry.strategy import Strategy

DAEMON_SET_TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"
JOB_NAME_LABELS = ("job-name", "batch.kubernetes.io/job-name")
CONTROLLER_UID_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"

_STATUS_RULES = {
    "Deployment": rules.validate_deployment_status_update,
    "ReplicaSet": rules.validate_replica_set_status_update,
    "DaemonSet": rules.validate_daemon_set_status_update,
    "ReplicationController": rules.validate_replication_controller_status_update,
    "Job": rules.validate_job_status_update,
    "CronJob": rules.validate_cron_job_status_update,
}
# the status a create starts from: the non-omitempty counters of each kind's status
_EMPTY_STATUS = {
    "Deployment": {},
    "ReplicaSet": {"replicas": 0},
    "ReplicationController": {"replicas": 0},
    "DaemonSet": {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0, "numberReady": 0},
    "Job": {},
    "CronJob": {},
}


class WorkloadStrategy(Strategy):
    """Deployments, ReplicaSets, ReplicationControllers, DaemonSets, Jobs and CronJobs."""

    bumps_generation = True

    def prepare_for_create(self, obj: dict) -> None:
        super().prepare_for_create(obj)
        obj["status"] = copy.deepcopy(_EMPTY_STATUS[self.info.kind])

    def validate_subresource_update(self, subresource: str, new: dict, old: dict) -> list[FieldError]:
        if subresource == "status":
            return _STATUS_RULES[self.info.kind](new, old, True)
        return self.validate_update(new, old)


class DeploymentStrategy(WorkloadStrategy):
    def generation_changed(self, new: dict, old: dict) -> bool:
        """``PrepareForUpdate``: spec or annotations (``kubectl rollout undo`` of old wrote one)."""
        return new.get("spec") != old.get("spec") or _annotations(new) != _annotations(old)


class DaemonSetStrategy(WorkloadStrategy):
    def prepare_for_create(self, obj: dict) -> None:
        super().prepare_for_create(obj)
        meta = obj.setdefault("metadata", {})
        annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
        meta["annotations"] = {**annotations, DAEMON_SET_TEMPLATE_GENERATION: "1"}

    def prepare_for_update(self, new: dict, old: dict) -> None:
        super().prepare_for_update(new, old)
        kept = _annotations(old).get(DAEMON_SET_TEMPLATE_GENERATION)
        annotations = dict(_annotations(new))
        annotations.pop(DAEMON_SET_TEMPLATE_GENERATION, None)
        if kept is not None:
            annotations[DAEMON_SET_TEMPLATE_GENERATION] = kept
        if annotations:
            new["metadata"]["annotations"] = annotations
        else:
            new["metadata"].pop("annotations", None)

    def generation_changed(self, new: dict, old: dict) -> bool:
        """Asked after defaulting, so templates compare as stored: a changed template is a new
        template generation (the annotation moves with it) and a new generation."""
        new_template = (new.get("spec") or {}).get("template")
        if new_template != (old.get("spec") or {}).get("template"):
            try:
                generation = int(_annotations(old).get(DAEMON_SET_TEMPLATE_GENERATION) or 0)
            except ValueError:
                generation = 0
            new["metadata"]["annotations"] = {**_annotations(new), DAEMON_SET_TEMPLATE_GENERATION: str(generation + 1)}
            return True
        return new.get("spec") != old.get("spec")


class JobStrategy(WorkloadStrategy):
    def prepare_for_create(self, obj: dict) -> None:
        super().prepare_for_create(obj)
        spec = obj.get("spec")
        if isinstance(spec, dict) and spec.get("manualSelector") is not True:
            generate_job_selector(obj)


def generate_job_selector(job: dict) -> None:
    """``generateSelector``: labels a user already set are kept (validation then objects if they
    conflict with the name or uid)."""
    meta = job.get("metadata") or {}
    spec = job["spec"]
    template = spec.get("template")
    if template is None:
        template = spec["template"] = {}
    if not isinstance(template, dict):
        return
    template_meta = template.get("metadata")
    if template_meta is None:
        template_meta = template["metadata"] = {}
    if not isinstance(template_meta, dict):
        return
    labels = template_meta.get("labels")
    if labels is None:
        labels = template_meta["labels"] = {}
    if not isinstance(labels, dict):
        return
    for key in JOB_NAME_LABELS:
        labels.setdefault(key, meta.get("name", ""))
    for key in CONTROLLER_UID_LABELS:
        labels.setdefault(key, meta.get("uid", ""))
    selector = spec.get("selector")
    if selector is None:
        selector = spec["selector"] = {}
    if not isinstance(selector, dict):
        return
    match_labels = selector.get("matchLabels")
    if match_labels is None:
        match_labels = selector["matchLabels"] = {}
    if isinstance(match_labels, dict):
        match_labels.setdefault(CONTROLLER_UID_LABEL, meta.get("uid", ""))


def _annotations(obj: dict) -> dict:
    annotations = (obj.get("metadata") or {}).get("annotations")
    return annotations if isinstance(annotations, dict) else {}


WORKLOAD_STRATEGIES: dict[str, type[Strategy]] = {
    "Deployment": DeploymentStrategy,
    "ReplicaSet": WorkloadStrategy,
    "ReplicationController": WorkloadStrategy,
    "DaemonSet": DaemonSetStrategy,
    "Job": JobStrategy,
    "CronJob": WorkloadStrategy,
}


def strategy(info: KindInfo) -> Strategy:
    return WORKLOAD_STRATEGIES.get(info.kind, Strategy)(info)
