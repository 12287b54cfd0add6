"""NodeRestriction admission: what a node may write (upstream
plugin/pkg/admission/noderestriction/admission.go; identity.md §2.6).

The Node authorizer lets nodes create and update Nodes, create and delete Pods, update Pod
status and ask for tokens, without knowing which object a write touches. This plugin, for
requests of a node user (``system:node:<name>`` in ``system:nodes``), narrows those writes:

* **nodes**: only its own Node (``node "n1" is not allowed to modify node "n2"``); on create no
  ``spec.configSource`` and no forbidden labels; on update no change of taints, no new
  non-nil configSource, and no added, removed or changed labels in
  ``node-restriction.kubernetes.io/`` or in other ``kubernetes.io``/``k8s.io`` namespaces
  except the kubelet's own (hostname, topology, instance type, os, arch, and anything under
  ``kubelet.kubernetes.io/`` or ``node.kubernetes.io/``);
* **pods**: create only mirror Pods bound to itself, owned by its Node (one controller
  ownerReference with the Node's UID, no blockOwnerDeletion) and referencing no
  ServiceAccount, Secret, ConfigMap or PVC; delete only Pods with ``spec.nodeName`` set to
  itself; ``status`` only of Pods bound to itself, without changing their labels; an
  ``eviction`` only of Pods bound to itself (refused before the eviction writes anything);
  no other writes or subresources;
* **leases**: only ``kube-node-lease/<its name>``;
* **serviceaccounts/token**: only tokens bound to a Pod (with its UID) running on itself.

Every refusal is a 403 ``<resource> "<name>" is forbidden: <reason>`` where the name is the
written (or deleted) object's, its ``generateName`` on a create without a name, else
``Unknown`` (upstream ``admission.NewForbidden``). Requests of anyone else pass unchanged.

kubesvc applies the plugin inside the registry: the Pod, Node and Lease strategies are
wrapped (:meth:`NodeRestriction.wrap`, ``admission/strategy.py``) so it sees each write's new
and old object exactly where upstream's admission would, and the TokenRequest handler is
wrapped likewise (:meth:`NodeRestriction.wrap_token_requests`).
"""

from __future__ import annotations

from typing import Callable, Mapping

from kubesvc.api import errors
from kubesvc.api.errors import StatusError
from kubesvc.util.golang import quote as go_quote
from kubesvc.apiserver.admission.strategy import CREATE, DELETE, UPDATE, admitted, object_name
from kubesvc.apiserver.auth.context import current
from kubesvc.apiserver.auth.node import MIRROR_ANNOTATION, NODE_LEASE_NAMESPACE, is_node_user, pod_references
from kubesvc.serving.user import UserInfo, node_name

NODE_RESTRICTION_LABEL_NAMESPACE = "node-restriction.kubernetes.io"
KUBELET_LABELS = frozenset({
    "kubernetes.io/hostname", "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type", "kubernetes.io/os", "kubernetes.io/arch",
    "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
})
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


class Refused(Exception):
    """One NodeRestriction refusal: the reason, worded as upstream."""


def _label_namespace(key: str) -> str:
    prefix, sep, _ = key.partition("/")
    return prefix if sep else ""


def _in_namespace(namespace: str, wanted: str) -> bool:
    return namespace == wanted or namespace.endswith("." + wanted)


def is_kubelet_label(key: str) -> bool:
    return key in KUBELET_LABELS or any(_in_namespace(_label_namespace(key), ns) for ns in KUBELET_LABEL_NAMESPACES)


def forbidden_labels(new: Mapping[str, str] | None, old: Mapping[str, str] | None) -> list[str]:
    """Upstream getModifiedLabels + getForbiddenLabels, sorted."""
    new, old = dict(new or {}), dict(old or {})
    modified = {k for k in set(new) | set(old) if new.get(k) != old.get(k) or (k in new) != (k in old)}
    refused = set()
    for key in modified:
        namespace = _label_namespace(key)
        if _in_namespace(namespace, NODE_RESTRICTION_LABEL_NAMESPACE):
            refused.add(key)
        if (_in_namespace(namespace, "kubernetes.io") or _in_namespace(namespace, "k8s.io")) and not is_kubelet_label(key):
            refused.add(key)
    return sorted(refused)


def _meta(obj: dict | None) -> dict:
    return (obj or {}).get("metadata") or {}


def _spec(obj: dict | None) -> dict:
    spec = (obj or {}).get("spec")
    return spec if isinstance(spec, dict) else {}


# ---- the decisions (pure, given lookups) -------------------------------------------------------


def admit_pod_create(node: str, pod: dict, node_uid: Callable[[str], str | None]) -> None:
    meta = _meta(pod)
    if MIRROR_ANNOTATION not in (meta.get("annotations") or {}):
        raise Refused(f'pod does not have "{MIRROR_ANNOTATION}" annotation, node "{node}" can only create mirror pods')
    if _spec(pod).get("nodeName") != node:
        raise Refused(f'node "{node}" can only create pods with spec.nodeName set to itself')
    owners = meta.get("ownerReferences") or []
    if len(owners) > 1:
        raise Refused(f'node "{node}" can only create pods with a single owner reference set to itself')
    if not owners:
        raise Refused(f'node "{node}" can only create pods with an owner reference set to itself')
    owner = owners[0] if isinstance(owners[0], dict) else {}
    if owner.get("apiVersion") != "v1" or owner.get("kind") != "Node" or owner.get("name") != node:
        raise Refused(f'node "{node}" can only create pods with an owner reference set to itself')
    if owner.get("controller") is not True:
        raise Refused(f'node "{node}" can only create pods with a controller owner reference set to itself')
    if owner.get("blockOwnerDeletion") is True:
        raise Refused(f'node "{node}" must not set blockOwnerDeletion on an owner reference')
    uid = node_uid(node)
    if uid is None:
        raise errors.not_found("nodes", node)
    if owner.get("uid") != uid:
        raise Refused(f"node {node} UID mismatch: expected {owner.get('uid')} got {uid}")
    if _spec(pod).get("serviceAccountName"):
        raise Refused(f'node "{node}" can not create pods that reference a service account')
    kinds = {kind for kind, _, _ in pod_references(pod)}
    if "secrets" in kinds:
        raise Refused(f'node "{node}" can not create pods that reference secrets')
    if "configmaps" in kinds:
        raise Refused(f'node "{node}" can not create pods that reference configmaps')
    for volume in _spec(pod).get("volumes") or []:
        for source in ((volume or {}).get("projected") or {}).get("sources") or []:
            if isinstance(source, dict) and source.get("clusterTrustBundle") is not None:
                raise Refused(f'node "{node}" can not create pods that reference clustertrustbundles')
    if any(isinstance(v, dict) and v.get("persistentVolumeClaim") is not None for v in _spec(pod).get("volumes") or []):
        raise Refused(f'node "{node}" can not create pods that reference persistentvolumeclaims')


def admit_pod(node: str, operation: str, subresource: str, new: dict | None, old: dict | None,
              node_uid: Callable[[str], str | None]) -> None:
    if subresource == "":
        if operation == CREATE:
            admit_pod_create(node, new or {}, node_uid)
        elif operation == DELETE:
            if _spec(old).get("nodeName") != node:
                raise Refused(f'node "{node}" can only delete pods with spec.nodeName set to itself')
        else:
            raise Refused(f'unexpected operation "{operation}", node "{node}" can only create and delete mirror pods')
    elif subresource == "status":
        if operation != UPDATE:
            raise Refused(f'unexpected operation "{operation}"')
        if _spec(old).get("nodeName") != node:
            raise Refused(f'node "{node}" can only update pod status for pods with spec.nodeName set to itself')
        if (_meta(old).get("labels") or {}) != (_meta(new).get("labels") or {}):
            raise Refused(f'node "{node}" cannot update labels through pod status')
    elif subresource == "eviction":  # admitPodEviction: ``old`` is the Pod the Eviction names
        if operation != CREATE:
            raise Refused(f"unexpected operation {operation}")
        if _spec(old).get("nodeName") != node:
            raise Refused(f"node {node} can only evict pods with spec.nodeName set to itself")
    else:
        raise Refused(f"unexpected pod subresource \"{subresource}\", only 'status' and 'eviction' are allowed")


def admit_node(node: str, operation: str, new: dict | None, old: dict | None) -> None:
    requested = _meta(new if new is not None else old).get("name") or ""
    if requested != node:
        raise Refused(f'node "{node}" is not allowed to modify node "{requested}"')
    if operation == CREATE:
        if _spec(new).get("configSource") is not None:
            raise Refused(f'node "{node}" is not allowed to create pods with a non-nil configSource')
        refused = forbidden_labels(_meta(new).get("labels"), None)
        if refused:
            raise Refused(f'node "{node}" is not allowed to set the following labels: {", ".join(refused)}')
    elif operation == UPDATE:
        config_source = _spec(new).get("configSource")
        if config_source is not None and config_source != _spec(old).get("configSource"):
            raise Refused(f'node "{node}" is not allowed to update configSource to a new non-nil configSource')
        if (_spec(new).get("taints") or []) != (_spec(old).get("taints") or []):
            raise Refused(f'node "{node}" is not allowed to modify taints')
        refused = forbidden_labels(_meta(new).get("labels"), _meta(old).get("labels"))
        if refused:
            raise Refused(f"is not allowed to modify labels: {', '.join(refused)}")


def admit_lease(node: str, operation: str, namespace: str, name: str) -> None:
    if namespace != NODE_LEASE_NAMESPACE:
        raise Refused(f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace')
    if name != node:
        raise Refused("can only access node lease with the same name as the requesting node")


def admit_token_request(node: str, token_request: dict, get_pod: Callable[[str], dict]) -> None:
    """``get_pod(name)`` returns the Pod in the request's namespace or raises its 404."""
    ref = _spec(token_request).get("boundObjectRef")
    if not isinstance(ref, dict) or ref.get("apiVersion") != "v1" or ref.get("kind") != "Pod" or not ref.get("name"):
        raise Refused("node requested token not bound to a pod")
    if not ref.get("uid"):
        raise Refused("node requested token with a pod binding without a uid")
    pod = get_pod(str(ref["name"]))
    if ref["uid"] != _meta(pod).get("uid"):
        raise Refused(f"the UID in the bound object reference ({ref['uid']}) does not match the UID in record. "
                      "The object might have been deleted and then recreated")
    if _spec(pod).get("nodeName") != node:
        raise Refused("node requested token bound to a pod scheduled on a different node")


# ---- wiring ------------------------------------------------------------------------------------


def _node_user() -> tuple[UserInfo, str | None] | None:
    """The requesting node user and its node name, or None when the requester is no node."""
    request = current()
    if request is None:
        return None
    if not is_node_user(request.user):
        return None
    return request.user, node_name(request.user)


class NodeRestriction:
    def __init__(self, registry_getter: Callable[[], object]):
        self._registry = registry_getter

    async def _node_uid(self, name: str) -> str | None:
        try:
            return _meta(await self._registry().store("", "nodes").get(None, name)).get("uid")
        except StatusError:
            return None

    async def admit(self, info, operation: str, subresource: str, new: dict | None, old: dict | None) -> None:
        """One write of ``info``'s kind; raises the 403 (or a lookup's 404)."""
        who = _node_user()
        if who is None:
            return
        user, node = who
        obj = new if new is not None else old
        name = object_name(obj)
        if not node:
            raise errors.forbidden(info.resource, name, info.group, f"could not determine node from user {go_quote(user.name)}")
        try:
            if info.kind == "Pod":
                # the one lookup the decision may make (a Pod create), read before it
                uid = await self._node_uid(node) if operation == CREATE and not subresource else None
                admit_pod(node, operation, subresource, new, old, lambda _name: uid)
            elif info.kind == "Node":
                admit_node(node, operation, new, old)
            elif info.kind == "Lease":
                admit_lease(node, operation, _meta(obj).get("namespace") or "", _meta(obj).get("name") or "")
        except Refused as refused:
            raise errors.forbidden(info.resource, name, info.group, str(refused)) from None

    def wrap(self, base: Callable) -> Callable:
        """A strategy factory whose writes pass this plugin first."""
        return admitted(base, self)

    def wrap_token_requests(self, handler: Callable) -> Callable:
        async def admitted_token_request(request, create):
            who = _node_user()
            if who is not None:
                user, node = who
                name = create.name or "Unknown"
                if not node:
                    raise errors.forbidden("serviceaccounts", name, "", f"could not determine node from user {go_quote(user.name)}")
                pod, missing = await _bound_pod(self._registry().store("", "pods"), create.namespace, create.body)
                try:
                    admit_token_request(node, create.body, lambda _name: _raise(missing) if missing is not None else pod)
                except Refused as refused:
                    raise errors.forbidden("serviceaccounts", name, "", str(refused)) from None
            return await handler(request, create)

        return admitted_token_request


async def _bound_pod(pods, namespace: str | None, token_request: dict) -> tuple[dict | None, Exception | None]:
    """The Pod a TokenRequest's boundObjectRef names (read before the decision, which asks for
    it only once the reference is well formed), or the store's error for it."""
    ref = _spec(token_request).get("boundObjectRef")
    if not isinstance(ref, dict) or not ref.get("name"):
        return None, None
    try:
        return await pods.get(namespace, str(ref["name"])), None
    except StatusError as err:
        return None, err


def _raise(error: Exception):
    raise error


RESTRICTED_KINDS = ("Pod", "Node", "Lease")
