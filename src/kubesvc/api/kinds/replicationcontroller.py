"""core/v1 PodTemplateSpec and ReplicationController: Pods made from a template, kept at a count.

A **PodTemplateSpec** is a Pod without a name: the ``metadata`` (labels, annotations) and
``spec`` every Pod a workload controller creates gets (k8s.io/api core/v1 ``PodTemplateSpec``).
Deployments, ReplicaSets, DaemonSets, Jobs and ReplicationControllers all embed one as
``spec.template``; its labels must match the owner's selector, or the owner could never count
the Pods it made.

A **ReplicationController** is the oldest workload kind: ``spec.replicas`` Pods selected by the
plain label map ``spec.selector`` (no expressions), made from ``spec.template``. Upstream's
ReplicaSet controller runs it through the very same code, treating it "as if
ReplicationController were an older API version of ReplicaSet"; its status counts the same
things (``replicas``, ``fullyLabeledReplicas``, ``readyReplicas``, ``availableReplicas``).
When the template has labels, an empty selector and empty object labels default to them.
"""

from __future__ import annotations

from kubesvc.api.kinds.core import CONDITION_STATUS, CORE, POD_SPEC
from kubesvc.api.kinds.meta import OBJECT_META, keyed_by_type, kind_schema
from kubesvc.api.scheme import KindInfo, register
from kubesvc.api.schema import INT32, INT64, STRING, TIME, F, MapOf, Obj

POD_TEMPLATE_SPEC = Obj(
    CORE + "PodTemplateSpec",
    {
        "metadata": F(OBJECT_META, "Standard object's metadata. More info: "
                                   "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"),
        "spec": F(POD_SPEC, "Specification of the desired behavior of the pod. More info: "
                            "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#spec-and-status"),
    },
    description="PodTemplateSpec describes the data a pod should have when created from a template",
)


def replica_condition(name: str, owner: str) -> Obj:
    """The ``conditions`` entry of a ReplicaSet-like status (type, status, times, reason, message)."""
    return Obj(
        name,
        {
            "type": F(STRING, f"Type of {owner} condition."),
            "status": F(CONDITION_STATUS, "Status of the condition, one of True, False, Unknown."),
            "lastTransitionTime": F(TIME, "The last time the condition transitioned from one status to another."),
            "reason": F(STRING, "The reason for the condition's last transition."),
            "message": F(STRING, "A human readable message indicating details about the transition."),
        },
        description=f"{owner}Condition describes the state of a {owner.lower()} at a certain point.",
        required=("type", "status"),
    )


REPLICATION_CONTROLLER_CONDITION = replica_condition(CORE + "ReplicationControllerCondition", "ReplicationController")

REPLICATION_CONTROLLER_SPEC = Obj(
    CORE + "ReplicationControllerSpec",
    {
        "replicas": F(INT32, "Replicas is the number of desired replicas. This is a pointer to distinguish between "
                             "explicit zero and unspecified. Defaults to 1."),
        "minReadySeconds": F(INT32, "Minimum number of seconds for which a newly created pod should be ready without "
                                    "any of its container crashing, for it to be considered available. Defaults to 0 "
                                    "(pod will be considered available as soon as it is ready)"),
        "selector": F(MapOf(STRING), "Selector is a label query over pods that should match the Replicas count. If "
                                     "Selector is empty, it is defaulted to the labels present on the Pod template."),
        "template": F(POD_TEMPLATE_SPEC, "Template is the object that describes the pod that will be created if "
                                         "insufficient replicas are detected. This takes precedence over a "
                                         "TemplateRef."),
    },
    description="ReplicationControllerSpec is the specification of a replication controller.",
)

REPLICATION_CONTROLLER_STATUS = Obj(
    CORE + "ReplicationControllerStatus",
    {
        "replicas": F(INT32, "Replicas is the most recently observed number of replicas."),
        "fullyLabeledReplicas": F(INT32, "The number of pods that have labels matching the labels of the pod template "
                                         "of the replication controller."),
        "readyReplicas": F(INT32, "The number of ready replicas for this replication controller."),
        "availableReplicas": F(INT32, "The number of available replicas (ready for at least minReadySeconds) for this "
                                      "replication controller."),
        "observedGeneration": F(INT64, "ObservedGeneration reflects the generation of the most recently observed "
                                       "replication controller."),
        "conditions": F(keyed_by_type(REPLICATION_CONTROLLER_CONDITION),
                        "Represents the latest available observations of a replication controller's current state."),
    },
    description="ReplicationControllerStatus represents the current status of a replication controller.",
    required=("replicas",),
)

REPLICATION_CONTROLLER = kind_schema(
    CORE + "ReplicationController", ("", "v1", "ReplicationController"),
    "ReplicationController represents the configuration of a replication controller.",
    {
        "spec": F(REPLICATION_CONTROLLER_SPEC, "Spec defines the specification of the desired behavior of the "
                                               "replication controller."),
        "status": F(REPLICATION_CONTROLLER_STATUS, "Status is the most recently observed status of the replication "
                                                   "controller."),
    },
)

register(KindInfo(
    "", "v1", "ReplicationController", "replicationcontrollers", "replicationcontroller", namespaced=True,
    schema=REPLICATION_CONTROLLER, short_names=("rc",), categories=("all",), subresources=("status",),
    field_labels={"status.replicas": ("status", "replicas")},
))
