"""``kubectl get`` columns of the workload kinds, ported from upstream's printers.

From ``pkg/printers/internalversion/printers.go`` (1.32): ``printDeployment``,
``printReplicaSet``, ``printReplicationController``, ``printDaemonSet``, ``printJob``,
``printCronJob`` and ``printControllerRevision``. What kubectl shows::

    deployments             NAME READY UP-TO-DATE AVAILABLE AGE           [CONTAINERS IMAGES SELECTOR]
    replicasets, rcs        NAME DESIRED CURRENT READY AGE                 [CONTAINERS IMAGES SELECTOR]
    daemonsets              NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR AGE [...]
    jobs                    NAME STATUS COMPLETIONS DURATION AGE           [CONTAINERS IMAGES SELECTOR]
    cronjobs                NAME SCHEDULE TIMEZONE SUSPEND ACTIVE LAST SCHEDULE AGE [CONTAINERS IMAGES SELECTOR]
    controllerrevisions     NAME CONTROLLER REVISION AGE

Deployment ``READY`` is the string ``ready/desired``; the other counts are integers. A Job's
``COMPLETIONS`` is ``succeeded/completions`` (``succeeded/1 of parallelism`` when completions is
unset and parallelism above 1); its ``DURATION`` runs from ``startTime`` to now, or to
``completionTime`` once it completed; its ``STATUS`` is the first of Complete, Failed,
Terminating, Suspended, FailureTarget that holds, else Running. Selectors print as label
selector strings (``<none>`` when empty, except a Deployment's, which prints nothing).
The printers use the ``tables`` module's helpers (which imports this module after them) and
``tables.PRINTERS`` includes these.
"""

from __future__ import annotations

from typing import Any, Mapping

from kubesvc.api.errors import StatusError
from kubesvc.api.selectors import selector_from_label_selector

JSONObject = Mapping[str, Any]


def _column(name: str, description: str, *, type_: str = "string", priority: int = 0) -> dict:
    return {"name": name, "type": type_, "format": "", "description": description, "priority": priority}


def _columns(name_column: dict, age_column: dict) -> dict[str, list[dict]]:
    containers = _column("Containers", "Names of each container in the template.", priority=1)
    images = _column("Images", "Images referenced by each container in the template.", priority=1)

    def selector(doc: str) -> dict:
        return _column("Selector", doc, priority=1)

    return {
        "Deployment": [
            name_column,
            _column("Ready", "Number of the pod with ready state"),
            _column("Up-to-date", "Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
            _column("Available", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
            age_column, containers, images,
            selector("Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment."),
        ],
        "ReplicaSet": [
            name_column,
            _column("Desired", "Replicas is the number of desired replicas. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller/#what-is-a-replicationcontroller", type_="integer"),
            _column("Current", "Replicas is the most recently observed number of replicas. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller/#what-is-a-replicationcontroller", type_="integer"),
            _column("Ready", "The number of ready replicas for this replica set.", type_="integer"),
            age_column, containers, images,
            selector("Selector is a label query over pods that should match the replica count. If the selector is empty, it is defaulted to the labels present on the pod template. Label keys and values that must match in order to be controlled by this replica set. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
        ],
        "ReplicationController": [
            name_column,
            _column("Desired", "Replicas is the number of desired replicas. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller", type_="integer"),
            _column("Current", "Replicas is the most recently observed number of replicas. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller", type_="integer"),
            _column("Ready", "The number of ready replicas for this replication controller.", type_="integer"),
            age_column, containers, images,
            selector("Selector is a label query over pods that should match the Replicas count. If Selector is empty, it is defaulted to the labels present on the Pod template. Label keys and values that must match in order to be controlled by this replication controller, if empty defaulted to labels on Pod template. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels#label-selectors"),
        ],
        "DaemonSet": [
            name_column,
            _column("Desired", "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod). More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/", type_="integer"),
            _column("Current", "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod. More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/", type_="integer"),
            _column("Ready", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.", type_="integer"),
            _column("Up-to-date", "The total number of nodes that are running updated daemon pod", type_="integer"),
            _column("Available", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)", type_="integer"),
            _column("Node Selector", "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node. More info: https://kubernetes.io/docs/concepts/configuration/assign-pod-node/"),
            age_column, containers, images,
            selector("A label query over pods that are managed by the daemon set. Must match in order to be controlled. If empty, defaulted to labels on Pod template. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
        ],
        "Job": [
            name_column,
            _column("Status", "Status of the job."),
            _column("Completions", "The number of pods which reached phase Succeeded. The value increases monotonically for a given spec. However, it may decrease in reaction to scale down of elastic indexed jobs."),
            _column("Duration", "Time required to complete the job."),
            age_column, containers, images,
            selector("A label query over pods that should match the pod count. Normally, the system sets this field for you. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
        ],
        "CronJob": [
            name_column,
            _column("Schedule", "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron."),
            _column("Timezone", "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones. If not specified, this will default to the time zone of the kube-controller-manager process. The set of valid time zone names and the time zone offset is loaded from the system-wide time zone database by the API server during CronJob validation and the controller manager during execution. If no system-wide time zone database can be found a bundled version of the database is used instead. If the time zone name becomes invalid during the lifetime of a CronJob or due to a change in host configuration, the controller will stop creating new new Jobs and will create a system event with the reason UnknownTimeZone. More information can be found in https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/#time-zones"),
            _column("Suspend", "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.  Defaults to false.", type_="boolean"),
            _column("Active", "A list of pointers to currently running jobs.", type_="integer"),
            _column("Last Schedule", "Information when was the last time the job was successfully scheduled."),
            age_column, containers, images,
            selector("A label query over pods that should match the pod count. Normally, the system sets this field for you. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
        ],
        "ControllerRevision": [
            name_column,
            _column("Controller", "Controller of the object"),
            _column("Revision", "Revision indicates the revision of the state represented by Data."),
            age_column,
        ],
    }


# ---- cells ---------------------------------------------------------------------------------------


def container_cells(obj: JSONObject) -> list[str]:
    """``layoutContainerCells``: container names and images, each joined by commas."""
    containers = [c for c in _get(obj, "spec", "template", "spec", "containers") or [] if isinstance(c, Mapping)]
    return [",".join(_str(c, "name") for c in containers), ",".join(_str(c, "image") for c in containers)]


def selector_text(selector: Any, empty: str = "<none>") -> str:
    """``metav1.FormatLabelSelector`` (``empty`` for no requirements, ``<error>`` if unreadable)."""
    try:
        text = str(selector_from_label_selector(selector if isinstance(selector, Mapping) else None))
    except (StatusError, AttributeError, TypeError):
        return "<error>" if empty else "<invalid>"
    return text or empty


def _map(value: Any) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def _since(clock: Any, obj: JSONObject) -> str:
    return clock.since(_get(obj, "metadata", "creationTimestamp"))


def deployment_cells(obj: JSONObject, clock: Any) -> list:
    ready = f"{_int(obj, 'status', 'readyReplicas')}/{_int(obj, 'spec', 'replicas')}"
    return [_str(obj, "metadata", "name"), ready, _int(obj, "status", "updatedReplicas"), _int(obj, "status", "availableReplicas"),
            _since(clock, obj), *container_cells(obj), selector_text(_get(obj, "spec", "selector"), empty="")]


def replica_set_cells(obj: JSONObject, clock: Any) -> list:
    return [_str(obj, "metadata", "name"), _int(obj, "spec", "replicas"), _int(obj, "status", "replicas"),
            _int(obj, "status", "readyReplicas"), _since(clock, obj), *container_cells(obj), selector_text(_get(obj, "spec", "selector"))]


def replication_controller_cells(obj: JSONObject, clock: Any) -> list:
    return [_str(obj, "metadata", "name"), _int(obj, "spec", "replicas"), _int(obj, "status", "replicas"),
            _int(obj, "status", "readyReplicas"), _since(clock, obj), *container_cells(obj), format_labels(_map(_get(obj, "spec", "selector")))]


def daemon_set_cells(obj: JSONObject, clock: Any) -> list:
    status = _get(obj, "status")
    return [_str(obj, "metadata", "name"), _int(status, "desiredNumberScheduled"), _int(status, "currentNumberScheduled"),
            _int(status, "numberReady"), _int(status, "updatedNumberScheduled"), _int(status, "numberAvailable"),
            format_labels(_map(_get(obj, "spec", "template", "spec", "nodeSelector"))), _since(clock, obj), *container_cells(obj),
            selector_text(_get(obj, "spec", "selector"))]


def _has_condition(obj: JSONObject, condition_type: str) -> bool:
    return any(isinstance(c, Mapping) and c.get("type") == condition_type and c.get("status") == "True"
               for c in _get(obj, "status", "conditions") or [])


def job_status(obj: JSONObject) -> str:
    if _has_condition(obj, "Complete"):
        return "Complete"
    if _has_condition(obj, "Failed"):
        return "Failed"
    if _get(obj, "metadata", "deletionTimestamp"):
        return "Terminating"
    if _has_condition(obj, "Suspended"):
        return "Suspended"
    if _has_condition(obj, "FailureTarget"):
        return "FailureTarget"
    return "Running"


def job_completions(obj: JSONObject) -> str:
    succeeded = _int(obj, "status", "succeeded")
    completions = _get(obj, "spec", "completions")
    if isinstance(completions, int) and not isinstance(completions, bool):
        return f"{succeeded}/{completions}"
    parallelism = _int(obj, "spec", "parallelism")
    return f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"


def job_duration(obj: JSONObject, clock: Any) -> str:
    start = _parse_time(_get(obj, "status", "startTime"))
    if start is None:
        return ""
    end = _parse_time(_get(obj, "status", "completionTime")) or clock.now
    return human_duration((end - start).total_seconds())


def job_cells(obj: JSONObject, clock: Any) -> list:
    return [_str(obj, "metadata", "name"), job_status(obj), job_completions(obj), job_duration(obj, clock), _since(clock, obj),
            *container_cells(obj), selector_text(_get(obj, "spec", "selector"))]


def cron_job_cells(obj: JSONObject, clock: Any) -> list:
    """``printCronJob``: Suspend as True/False (``<unset>``), Active as the count of running Jobs."""
    suspend = _get(obj, "spec", "suspend")
    suspend_text = "<unset>" if not isinstance(suspend, bool) else "True" if suspend else "False"
    last = _get(obj, "status", "lastScheduleTime")
    job_spec = _get(obj, "spec", "jobTemplate")
    selector = _get(job_spec, "spec", "selector")
    return [_str(obj, "metadata", "name"), _str(obj, "spec", "schedule"), _str(obj, "spec", "timeZone") or "<none>", suspend_text,
            len(_get(obj, "status", "active") or []), clock.since(last) if last else "<none>", _since(clock, obj),
            *container_cells(job_spec or {}), selector_text(selector) if selector is not None else "<none>"]


def controller_revision_cells(obj: JSONObject, clock: Any) -> list:
    controller = "<none>"
    for ref in _get(obj, "metadata", "ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            group = _str(ref, "apiVersion").rpartition("/")[0]
            kind = _str(ref, "kind") + (f".{group}" if group else "")
            controller = f"{kind.lower()}/{_str(ref, 'name')}"
            break
    return [_str(obj, "metadata", "name"), controller, _int(obj, "revision"), _since(clock, obj)]


_CELLS = {
    "Deployment": deployment_cells,
    "ReplicaSet": replica_set_cells,
    "ReplicationController": replication_controller_cells,
    "DaemonSet": daemon_set_cells,
    "Job": job_cells,
    "CronJob": cron_job_cells,
    "ControllerRevision": controller_revision_cells,
}


def printers(name_column: dict, age_column: dict) -> dict:
    """kind -> (column definitions, cells), for ``tables.PRINTERS``."""
    columns = _columns(name_column, age_column)
    return {kind: (columns[kind], cells) for kind, cells in _CELLS.items()}


# The ``tables`` helpers, imported last: ``tables`` imports this module part way through (after
# those helpers, before PRINTERS), so either module may be imported first.
from kubesvc.apiserver.tables import _get, _int, _parse_time, _str, format_labels, human_duration  # noqa: E402
