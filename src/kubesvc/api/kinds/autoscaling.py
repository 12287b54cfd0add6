"""autoscaling/v1 Scale: the ``scale`` subresource's view of a scalable object.

``GET deployments/NAME/scale`` (also ``replicasets``, ``replicationcontrollers``) answers a
Scale: the object's name, namespace, uid, resourceVersion and creationTimestamp,
``spec.replicas`` (the desired count) and ``status.replicas`` (the observed one) with
``status.selector``, the object's label selector *as a string* (``app=web``), which is what a
HorizontalPodAutoscaler lists Pods by. Writing a Scale (``PUT``, or a ``PATCH`` of it, which is
what ``kubectl scale`` sends) changes only the object's ``spec.replicas``; a Scale carrying a
``resourceVersion`` is a precondition on the object's. Scale is never stored: it is described
here for decoding, patching and OpenAPI, like Binding.
"""

from __future__ import annotations

from kubesvc.api.kinds.meta import kind_schema
from kubesvc.api.scheme import KindInfo
from kubesvc.api.schema import INT32, STRING, F, Obj

AUTOSCALING = "io.k8s.api.autoscaling.v1."

SCALE = kind_schema(
    AUTOSCALING + "Scale", ("autoscaling", "v1", "Scale"),
    "Scale represents a scaling request for a resource.",
    {
        "spec": F(Obj(AUTOSCALING + "ScaleSpec", {
            "replicas": F(INT32, "replicas is the desired number of instances for the scaled object."),
        }, description="ScaleSpec describes the attributes of a scale subresource."),
            "spec defines the behavior of the scale."),
        "status": F(Obj(AUTOSCALING + "ScaleStatus", {
            "replicas": F(INT32, "replicas is the actual number of observed instances of the scaled object."),
            "selector": F(STRING, "selector is the label query over pods that should match the replicas count. This is "
                                  "same as the label selector but in the string format to avoid introspection by "
                                  "clients."),
        }, description="ScaleStatus represents the current status of a scale subresource.", required=("replicas",)),
            "status is the current status of the scale."),
    },
)

# not registered: never stored, listed or watched; only read and written through ``<resource>/scale``
SCALE_INFO = KindInfo("autoscaling", "v1", "Scale", "scales", "scale", namespaced=True, schema=SCALE)
