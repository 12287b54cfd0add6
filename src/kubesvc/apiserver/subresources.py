"""Subresources that are actions, not views of the stored object.

``status`` and ``finalize`` read and write the object itself through the generic store. Some
of a Pod's subresources do something else, each with REST logic of its own upstream
(pkg/registry/core/pod/storage and pkg/registry/core/pod/rest):

* ``pods/binding`` (``BindingREST``): ``POST`` a ``Binding`` to assign the Pod to a Node. Its
  older spelling, the namespaced ``bindings`` collection (``LegacyBindingREST``), takes the
  Pod's name from the Binding's ``metadata.name``; it is a resource of its own in discovery,
  with the one verb ``create``.
* ``pods/eviction`` (``EvictionREST``): ``POST`` a policy/v1 ``Eviction`` to delete the Pod
  marked ``DisruptionTarget`` (``registry/eviction.py``).
* ``pods/log`` (``LogREST``): ``GET`` streams a container's log from the Pod's node agent.
* ``pods/exec``, ``pods/attach`` and ``pods/portforward`` (``ExecREST``, ``AttachREST``, ``PortForwardREST``): ``GET`` (a
  WebSocket) or ``POST`` (a SPDY upgrade) streams a command or TCP connections through the
  Pod's node agent (``streaming.py``).
* ``deployments/scale``, ``replicasets/scale``, ``replicationcontrollers/scale`` (``ScaleREST``):
  ``GET`` an autoscaling/v1 ``Scale`` of the object, ``PUT``/``PATCH`` one to set its
  ``spec.replicas`` (``scale.py``).
* ``serviceaccounts/token`` (``TokenREST``): ``POST`` an authentication.k8s.io/v1
  ``TokenRequest`` to get a signed token for the ServiceAccount; answered by the handler
  registered for it in the app's ``create_handlers`` (404 until one is).

Discovery, OpenAPI and routing all read this table, so a subresource is described once.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubesvc.api.kinds.authentication import TOKEN_REQUEST_INFO
from kubesvc.api.kinds.autoscaling import SCALE_INFO
from kubesvc.api.kinds.core import BINDING_INFO
from kubesvc.api.kinds.policy import EVICTION_INFO
from kubesvc.api.scheme import KindInfo


@dataclass(frozen=True, eq=False)  # one object per subresource: compared (and hashed) by identity
class ActionSubresource:
    group: str
    parent: str  # the resource it hangs off: "pods"
    name: str  # "binding"
    kind: str  # what the request body / answer is, as discovery names it
    verbs: tuple[str, ...]
    body: KindInfo | None = None  # the kind a create POSTs
    legacy_resource: str = ""  # also served as this namespaced collection (POST only)
    legacy_singular: str = ""


POD_BINDING = ActionSubresource("", "pods", "binding", "Binding", ("create",), body=BINDING_INFO,
                                legacy_resource="bindings", legacy_singular="binding")
POD_LOG = ActionSubresource("", "pods", "log", "Pod", ("get",))
POD_EVICTION = ActionSubresource("", "pods", "eviction", "Eviction", ("create",), body=EVICTION_INFO)
POD_ATTACH = ActionSubresource("", "pods", "attach", "PodAttachOptions", ("create", "get"))
POD_EXEC = ActionSubresource("", "pods", "exec", "PodExecOptions", ("create", "get"))
POD_PORTFORWARD = ActionSubresource("", "pods", "portforward", "PodPortForwardOptions", ("create", "get"))
SERVICE_ACCOUNT_TOKEN = ActionSubresource("", "serviceaccounts", "token", "TokenRequest", ("create",),
                                          body=TOKEN_REQUEST_INFO)
# the body is read and written (get, update, patch), not created: see openapi's _scale_action
DEPLOYMENT_SCALE = ActionSubresource("apps", "deployments", "scale", "Scale", ("get", "patch", "update"), body=SCALE_INFO)
REPLICA_SET_SCALE = ActionSubresource("apps", "replicasets", "scale", "Scale", ("get", "patch", "update"), body=SCALE_INFO)
REPLICATION_CONTROLLER_SCALE = ActionSubresource("", "replicationcontrollers", "scale", "Scale", ("get", "patch", "update"),
                                                 body=SCALE_INFO)
SCALE_SUBRESOURCES = (DEPLOYMENT_SCALE, REPLICA_SET_SCALE, REPLICATION_CONTROLLER_SCALE)
ACTION_SUBRESOURCES = (POD_ATTACH, POD_BINDING, POD_EVICTION, POD_LOG, POD_EXEC, POD_PORTFORWARD, SERVICE_ACCOUNT_TOKEN, *SCALE_SUBRESOURCES)


def actions_of(info: KindInfo) -> list[ActionSubresource]:
    """The action subresources of a served kind (version v1 is the only one they exist in)."""
    return [a for a in ACTION_SUBRESOURCES if a.group == info.group and a.parent == info.resource and info.version == "v1"]


def action(info: KindInfo, subresource: str) -> ActionSubresource | None:
    return next((a for a in actions_of(info) if a.name == subresource), None)


def legacy_action(group: str, resource: str) -> ActionSubresource | None:
    """The action a legacy collection (``bindings``) stands for."""
    return next((a for a in ACTION_SUBRESOURCES if a.legacy_resource and a.group == group and a.legacy_resource == resource), None)
