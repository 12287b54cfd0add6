"""apps/v1 Deployment, ReplicaSet, DaemonSet and ControllerRevision: the workload kinds.

A **ReplicaSet** keeps ``spec.replicas`` Pods that match ``spec.selector`` running, creating
them from ``spec.template``. A **Deployment** owns ReplicaSets, one per template version, and
moves Pods from the old ones to the new one by ``spec.strategy`` (``RollingUpdate`` within
``maxSurge``/``maxUnavailable``, or ``Recreate``); its status counts updated, ready and
available replicas and carries the ``Progressing``/``Available`` conditions. A **DaemonSet**
runs one Pod per eligible node. A **ControllerRevision** is an immutable snapshot of a
template (``data``, ``revision``) that DaemonSets (and StatefulSets) keep as history.

Fields follow k8s.io/api apps/v1 types.go (1.32): the selector is required and immutable, the
``conditions`` lists merge by ``type``, and ``strategy``/``updateStrategy`` carry the
``retainKeys`` patch strategy, so a strategic merge patch switching to ``Recreate`` drops the
old ``rollingUpdate``. All of them but ControllerRevision have the ``status`` subresource, and
Deployments and ReplicaSets the ``scale`` one (``apiserver/scale.py``).
"""

from __future__ import annotations

from kubesvc.api.kinds.core import CONDITION_STATUS, enum
from kubesvc.api.kinds.meta import LABEL_SELECTOR, keyed_by_type, kind_schema
from kubesvc.api.kinds.replicationcontroller import POD_TEMPLATE_SPEC, replica_condition
from kubesvc.api.scheme import KindInfo, register
from kubesvc.api.schema import BOOL, INT32, INT64, INT_OR_STRING, STRING, TIME, Any_, F, Obj

APPS = "io.k8s.api.apps.v1."

_SELECTOR_DOC = ("Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones "
                 "affected by this deployment. It must match the pod template's labels.")
_MIN_READY_DOC = ("Minimum number of seconds for which a newly created pod should be ready without any of its "
                  "container crashing, for it to be considered available. Defaults to 0 (pod will be considered "
                  "available as soon as it is ready)")

# ---- Deployment --------------------------------------------------------------------------------

ROLLING_UPDATE_DEPLOYMENT = Obj(
    APPS + "RollingUpdateDeployment",
    {
        "maxUnavailable": F(INT_OR_STRING, "The maximum number of pods that can be unavailable during the update. "
                                           "Value can be an absolute number (ex: 5) or a percentage of desired pods "
                                           "(ex: 10%). Absolute number is calculated from percentage by rounding down. "
                                           "This can not be 0 if MaxSurge is 0. Defaults to 25%."),
        "maxSurge": F(INT_OR_STRING, "The maximum number of pods that can be scheduled above the desired number of "
                                     "pods. Value can be an absolute number (ex: 5) or a percentage of desired pods "
                                     "(ex: 10%). This can not be 0 if MaxUnavailable is 0. Absolute number is "
                                     "calculated from percentage by rounding up. Defaults to 25%."),
    },
    description="Spec to control the desired behavior of rolling update.",
)

DEPLOYMENT_STRATEGY = Obj(
    APPS + "DeploymentStrategy",
    {
        "type": F(enum("Recreate", "RollingUpdate"),
                  'Type of deployment. Can be "Recreate" or "RollingUpdate". Default is RollingUpdate.'),
        "rollingUpdate": F(ROLLING_UPDATE_DEPLOYMENT, "Rolling update config params. Present only if "
                                                      "DeploymentStrategyType = RollingUpdate."),
    },
    description="DeploymentStrategy describes how to replace existing pods with new ones.",
)

DEPLOYMENT_SPEC = Obj(
    APPS + "DeploymentSpec",
    {
        "replicas": F(INT32, "Number of desired pods. This is a pointer to distinguish between explicit zero and not "
                             "specified. Defaults to 1."),
        "selector": F(LABEL_SELECTOR, _SELECTOR_DOC),
        "template": F(POD_TEMPLATE_SPEC, 'Template describes the pods that will be created. The only allowed '
                                         'template.spec.restartPolicy value is "Always".'),
        "strategy": F(DEPLOYMENT_STRATEGY, "The deployment strategy to use to replace existing pods with new ones.",
                      patch_strategy="retainKeys"),
        "minReadySeconds": F(INT32, _MIN_READY_DOC),
        "revisionHistoryLimit": F(INT32, "The number of old ReplicaSets to retain to allow rollback. This is a pointer "
                                         "to distinguish between explicit zero and not specified. Defaults to 10."),
        "paused": F(BOOL, "Indicates that the deployment is paused."),
        "progressDeadlineSeconds": F(INT32, "The maximum time in seconds for a deployment to make progress before it is "
                                            "considered to be failed. The deployment controller will continue to "
                                            "process failed deployments and a condition with a "
                                            "ProgressDeadlineExceeded reason will be surfaced in the deployment "
                                            "status. Note that progress will not be estimated during the time a "
                                            "deployment is paused. Defaults to 600s."),
    },
    description="DeploymentSpec is the specification of the desired behavior of the Deployment.",
    required=("selector", "template"),
)

DEPLOYMENT_CONDITION = Obj(
    APPS + "DeploymentCondition",
    {
        "type": F(STRING, "Type of deployment condition."),
        "status": F(CONDITION_STATUS, "Status of the condition, one of True, False, Unknown."),
        "lastUpdateTime": F(TIME, "The last time this condition was updated."),
        "lastTransitionTime": F(TIME, "Last time the condition transitioned from one status to another."),
        "reason": F(STRING, "The reason for the condition's last transition."),
        "message": F(STRING, "A human readable message indicating details about the transition."),
    },
    description="DeploymentCondition describes the state of a deployment at a certain point.",
    required=("type", "status"),
)

DEPLOYMENT_STATUS = Obj(
    APPS + "DeploymentStatus",
    {
        "observedGeneration": F(INT64, "The generation observed by the deployment controller."),
        "replicas": F(INT32, "Total number of non-terminated pods targeted by this deployment (their labels match the "
                             "selector)."),
        "updatedReplicas": F(INT32, "Total number of non-terminated pods targeted by this deployment that have the "
                                    "desired template spec."),
        "readyReplicas": F(INT32, "readyReplicas is the number of pods targeted by this Deployment with a Ready "
                                  "Condition."),
        "availableReplicas": F(INT32, "Total number of available pods (ready for at least minReadySeconds) targeted by "
                                      "this deployment."),
        "unavailableReplicas": F(INT32, "Total number of unavailable pods targeted by this deployment. This is the "
                                        "total number of pods that are still required for the deployment to have "
                                        "100% available capacity. They may either be pods that are running but not "
                                        "yet available or pods that still have not been created."),
        "conditions": F(keyed_by_type(DEPLOYMENT_CONDITION), "Represents the latest available observations of a "
                                                             "deployment's current state."),
        "collisionCount": F(INT32, "Count of hash collisions for the Deployment. The Deployment controller uses this "
                                   "field as a collision avoidance mechanism when it needs to create the name for the "
                                   "newest ReplicaSet."),
    },
    description="DeploymentStatus is the most recently observed status of the Deployment.",
)

DEPLOYMENT = kind_schema(
    APPS + "Deployment", ("apps", "v1", "Deployment"),
    "Deployment enables declarative updates for Pods and ReplicaSets.",
    {
        "spec": F(DEPLOYMENT_SPEC, "Specification of the desired behavior of the Deployment."),
        "status": F(DEPLOYMENT_STATUS, "Most recently observed status of the Deployment."),
    },
)

# ---- ReplicaSet --------------------------------------------------------------------------------

REPLICA_SET_SPEC = Obj(
    APPS + "ReplicaSetSpec",
    {
        "replicas": F(INT32, "Replicas is the number of desired pods. This is a pointer to distinguish between explicit "
                             "zero and unspecified. Defaults to 1."),
        "minReadySeconds": F(INT32, _MIN_READY_DOC),
        "selector": F(LABEL_SELECTOR, "Selector is a label query over pods that should match the replica count. Label "
                                      "keys and values that must match in order to be controlled by this replica set. "
                                      "It must match the pod template's labels."),
        "template": F(POD_TEMPLATE_SPEC, "Template is the object that describes the pod that will be created if "
                                         "insufficient replicas are detected."),
    },
    description="ReplicaSetSpec is the specification of a ReplicaSet.",
    required=("selector",),
)

REPLICA_SET_CONDITION = replica_condition(APPS + "ReplicaSetCondition", "ReplicaSet")

REPLICA_SET_STATUS = Obj(
    APPS + "ReplicaSetStatus",
    {
        "replicas": F(INT32, "Replicas is the most recently observed number of replicas."),
        "fullyLabeledReplicas": F(INT32, "The number of pods that have labels matching the labels of the pod template "
                                         "of the replicaset."),
        "readyReplicas": F(INT32, "readyReplicas is the number of pods targeted by this ReplicaSet with a Ready "
                                  "Condition."),
        "availableReplicas": F(INT32, "The number of available replicas (ready for at least minReadySeconds) for this "
                                      "replica set."),
        "observedGeneration": F(INT64, "ObservedGeneration reflects the generation of the most recently observed "
                                       "ReplicaSet."),
        "conditions": F(keyed_by_type(REPLICA_SET_CONDITION), "Represents the latest available observations of a "
                                                              "replica set's current state."),
    },
    description="ReplicaSetStatus represents the current status of a ReplicaSet.",
    required=("replicas",),
)

REPLICA_SET = kind_schema(
    APPS + "ReplicaSet", ("apps", "v1", "ReplicaSet"),
    "ReplicaSet ensures that a specified number of pod replicas are running at any given time.",
    {
        "spec": F(REPLICA_SET_SPEC, "Spec defines the specification of the desired behavior of the ReplicaSet."),
        "status": F(REPLICA_SET_STATUS, "Status is the most recently observed status of the ReplicaSet."),
    },
)

# ---- DaemonSet ---------------------------------------------------------------------------------

ROLLING_UPDATE_DAEMON_SET = Obj(
    APPS + "RollingUpdateDaemonSet",
    {
        "maxUnavailable": F(INT_OR_STRING, "The maximum number of DaemonSet pods that can be unavailable during the "
                                           "update. Value can be an absolute number (ex: 5) or a percentage of total "
                                           "number of DaemonSet pods at the start of the update (ex: 10%). Default "
                                           "value is 1."),
        "maxSurge": F(INT_OR_STRING, "The maximum number of nodes with an existing available DaemonSet pod that can "
                                     "have an updated DaemonSet pod during during an update. Value can be an absolute "
                                     "number (ex: 5) or a percentage of desired pods (ex: 10%). Defaults to 0."),
    },
    description="Spec to control the desired behavior of daemon set rolling update.",
)

DAEMON_SET_UPDATE_STRATEGY = Obj(
    APPS + "DaemonSetUpdateStrategy",
    {
        "type": F(enum("OnDelete", "RollingUpdate"),
                  'Type of daemon set update. Can be "RollingUpdate" or "OnDelete". Default is RollingUpdate.'),
        "rollingUpdate": F(ROLLING_UPDATE_DAEMON_SET, 'Rolling update config params. Present only if type = '
                                                      '"RollingUpdate".'),
    },
    description="DaemonSetUpdateStrategy is a struct used to control the update strategy for a DaemonSet.",
)

DAEMON_SET_SPEC = Obj(
    APPS + "DaemonSetSpec",
    {
        "selector": F(LABEL_SELECTOR, "A label query over pods that are managed by the daemon set. Must match in order "
                                      "to be controlled. It must match the pod template's labels."),
        "template": F(POD_TEMPLATE_SPEC, "An object that describes the pod that will be created. The DaemonSet will "
                                         "create exactly one copy of this pod on every node that matches the "
                                         "template's node selector (or on every node if no node selector is "
                                         "specified)."),
        "updateStrategy": F(DAEMON_SET_UPDATE_STRATEGY, "An update strategy to replace existing DaemonSet pods with new "
                                                        "pods."),
        "minReadySeconds": F(INT32, "The minimum number of seconds for which a newly created DaemonSet pod should be "
                                    "ready without any of its container crashing, for it to be considered available. "
                                    "Defaults to 0 (pod will be considered available as soon as it is ready)."),
        "revisionHistoryLimit": F(INT32, "The number of old history to retain to allow rollback. This is a pointer to "
                                         "distinguish between explicit zero and not specified. Defaults to 10."),
    },
    description="DaemonSetSpec is the specification of a daemon set.",
    required=("selector", "template"),
)

DAEMON_SET_CONDITION = replica_condition(APPS + "DaemonSetCondition", "DaemonSet")

DAEMON_SET_STATUS = Obj(
    APPS + "DaemonSetStatus",
    {
        "currentNumberScheduled": F(INT32, "The number of nodes that are running at least 1 daemon pod and are "
                                           "supposed to run the daemon pod."),
        "numberMisscheduled": F(INT32, "The number of nodes that are running the daemon pod, but are not supposed to "
                                       "run the daemon pod."),
        "desiredNumberScheduled": F(INT32, "The total number of nodes that should be running the daemon pod (including "
                                           "nodes correctly running the daemon pod)."),
        "numberReady": F(INT32, "numberReady is the number of nodes that should be running the daemon pod and have one "
                                "or more of the daemon pod running with a Ready Condition."),
        "observedGeneration": F(INT64, "The most recent generation observed by the daemon set controller."),
        "updatedNumberScheduled": F(INT32, "The total number of nodes that are running updated daemon pod"),
        "numberAvailable": F(INT32, "The number of nodes that should be running the daemon pod and have one or more of "
                                    "the daemon pod running and available (ready for at least spec.minReadySeconds)"),
        "numberUnavailable": F(INT32, "The number of nodes that should be running the daemon pod and have none of the "
                                      "daemon pod running and available (ready for at least spec.minReadySeconds)"),
        "collisionCount": F(INT32, "Count of hash collisions for the DaemonSet. The DaemonSet controller uses this "
                                   "field as a collision avoidance mechanism when it needs to create the name for the "
                                   "newest ControllerRevision."),
        "conditions": F(keyed_by_type(DAEMON_SET_CONDITION), "Represents the latest available observations of a "
                                                             "DaemonSet's current state."),
    },
    description="DaemonSetStatus represents the current status of a daemon set.",
    required=("currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled", "numberReady"),
)

DAEMON_SET = kind_schema(
    APPS + "DaemonSet", ("apps", "v1", "DaemonSet"),
    "DaemonSet represents the configuration of a daemon set.",
    {
        "spec": F(DAEMON_SET_SPEC, "The desired behavior of this daemon set."),
        "status": F(DAEMON_SET_STATUS, "The current status of this daemon set."),
    },
)

# ---- ControllerRevision ------------------------------------------------------------------------

CONTROLLER_REVISION = kind_schema(
    APPS + "ControllerRevision", ("apps", "v1", "ControllerRevision"),
    "ControllerRevision implements an immutable snapshot of state data. Clients are responsible for serializing and "
    "deserializing the objects that contain their internal state. Once a ControllerRevision has been successfully "
    "created, it can not be updated.",
    {
        "data": F(Any_("RawExtension is used to hold extensions in external versions."),
                  "Data is the serialized representation of the state."),
        "revision": F(INT64, "Revision indicates the revision of the state represented by Data."),
    },
    required=("revision",),
)

# ---- registration ------------------------------------------------------------------------------

register(KindInfo(
    "apps", "v1", "Deployment", "deployments", "deployment", namespaced=True, schema=DEPLOYMENT,
    short_names=("deploy",), categories=("all",), subresources=("status",),
))
register(KindInfo(
    "apps", "v1", "ReplicaSet", "replicasets", "replicaset", namespaced=True, schema=REPLICA_SET,
    short_names=("rs",), categories=("all",), subresources=("status",),
    field_labels={"status.replicas": ("status", "replicas")},
))
register(KindInfo(
    "apps", "v1", "DaemonSet", "daemonsets", "daemonset", namespaced=True, schema=DAEMON_SET,
    short_names=("ds",), categories=("all",), subresources=("status",),
))
register(KindInfo(
    "apps", "v1", "ControllerRevision", "controllerrevisions", "controllerrevision", namespaced=True,
    schema=CONTROLLER_REVISION,
))
