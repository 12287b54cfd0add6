"""The Node authorizer (upstream plugin/pkg/auth/authorizer/node ``NodeAuthorizer``, its
``Graph`` and graph populator; identity.md §2.5).

A node is the user ``system:node:<name>`` in the group ``system:nodes``; anyone else gets
NoOpinion with no reason (RBAC decides). A node may read what the Pods bound to it need,
and nothing else of those kinds:

* Secrets and ConfigMaps: ``get``/``list``/``watch`` of one named object (a list or watch
  names it with ``fieldSelector=metadata.name=``) that a Pod on the node references;
* PersistentVolumeClaims: ``get`` (and ``update``/``patch`` of ``status``) of a claim a
  Pod on the node mounts;
* ServiceAccounts: ``create`` of the ``token`` subresource for the account a Pod on the node
  runs as;
* Leases: ``get``/``create``/``update``/``patch``/``delete`` of its own Lease in
  ``kube-node-lease``;
* Nodes: ``create``/``update``/``patch`` and ``status`` updates (NodeRestriction admission
  narrows these to its own object), ``get``/``list``/``watch`` of its own object only;
* Pods: ``get`` of its Pods, ``list``/``watch`` with ``fieldSelector=spec.nodeName=<node>``,
  ``create``/``delete`` (mirror Pods, narrowed by NodeRestriction), ``status`` updates and
  ``eviction``;
* anything else as the ClusterRole ``system:node`` allows (``NodeRules()``).

Every refusal is NoOpinion with upstream's reason, e.g.
``no relationship found between node 'n1' and this object``, so RBAC is still asked.

The graph: an edge Pod -> node for every Pod with ``spec.nodeName``, and edges Secret,
ConfigMap, PVC, ServiceAccount -> Pod for what the Pod references (image pull secrets, env,
envFrom, volumes and projected sources; a mirror Pod, annotated
``kubernetes.io/config.mirror``, contributes only its node edge). The graph is kept in
memory, fed from the store's Pods (:mod:`kubesvc.apiserver.auth.storefeed`); with no
PersistentVolumes, VolumeAttachments or ResourceSlices served, those parts of upstream's
graph have nothing to hold.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterator

from kubesvc.util.golang import quote as go_quote
from kubesvc.apiserver.auth.attributes import Attributes
from kubesvc.apiserver.auth.authorizer import Decision, RuleSet, Verdict
from kubesvc.apiserver.auth.policy import node_rules
from kubesvc.apiserver.auth.rules import rules_allow
from kubesvc.serving.user import UserInfo, node_name, NODE_USER_PREFIX, NODES_GROUP

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
NODE_LEASE_NAMESPACE = "kube-node-lease"

ALLOW = Verdict(Decision.ALLOW)
NO_OPINION = Verdict(Decision.NO_OPINION)

# (vertex type, namespace, name) of what a Pod references
Ref = tuple[str, str, str]


# ---- what a Pod references (upstream VisitPodSecretNames / VisitPodConfigmapNames) ---------


def _containers(spec: dict) -> Iterator[dict]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(field) or []:
            if isinstance(container, dict):
                yield container


def _name(obj, *path: str) -> str:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj if isinstance(obj, str) else ""


_VOLUME_SECRET_REFS = (("azureFile", "secretName"), ("cephfs", "secretRef", "name"), ("cinder", "secretRef", "name"),
                       ("flexVolume", "secretRef", "name"), ("rbd", "secretRef", "name"), ("scaleIO", "secretRef", "name"),
                       ("iscsi", "secretRef", "name"), ("storageos", "secretRef", "name"), ("csi", "nodePublishSecretRef", "name"),
                       ("secret", "secretName"))


def pod_references(pod: dict) -> set[Ref]:
    """The Secrets, ConfigMaps, PVCs and ServiceAccount a Pod's node may read for it."""
    meta = pod.get("metadata") or {}
    namespace, pod_name = meta.get("namespace") or "", meta.get("name") or ""
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    refs: set[tuple[str, str]] = set()
    if spec.get("serviceAccountName"):
        refs.add(("serviceaccounts", str(spec["serviceAccountName"])))
    for secret in spec.get("imagePullSecrets") or []:
        refs.add(("secrets", _name(secret, "name")))
    for container in _containers(spec):
        for source in container.get("envFrom") or []:
            refs.add(("secrets", _name(source, "secretRef", "name")))
            refs.add(("configmaps", _name(source, "configMapRef", "name")))
        for env in container.get("env") or []:
            refs.add(("secrets", _name(env, "valueFrom", "secretKeyRef", "name")))
            refs.add(("configmaps", _name(env, "valueFrom", "configMapKeyRef", "name")))
    for volume in spec.get("volumes") or []:
        if not isinstance(volume, dict):
            continue
        for path in _VOLUME_SECRET_REFS:
            refs.add(("secrets", _name(volume, *path)))
        refs.add(("configmaps", _name(volume, "configMap", "name")))
        for source in _name_list(volume, "projected", "sources"):
            refs.add(("secrets", _name(source, "secret", "name")))
            refs.add(("configmaps", _name(source, "configMap", "name")))
        refs.add(("persistentvolumeclaims", _name(volume, "persistentVolumeClaim", "claimName")))
        if isinstance(volume.get("ephemeral"), dict) and volume.get("name"):
            refs.add(("persistentvolumeclaims", f"{pod_name}-{volume['name']}"))
    return {(kind, namespace, name) for kind, name in refs if name}


def _name_list(obj: dict, *path: str) -> list:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return [item for item in obj if isinstance(item, dict)] if isinstance(obj, list) else []


# ---- the graph -------------------------------------------------------------------------------


class NodeGraph:
    """Pods -> nodes, and what each Pod references. ``has_path(type, ns, name, node)``."""

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str], tuple[str, frozenset[Ref]]] = {}  # (ns, name) -> (node, refs)
        self._ref_nodes: dict[Ref, Counter] = {}  # referenced object -> node -> how many Pods there use it
        self._node_pods: Counter = Counter()  # node -> Pods bound to it (a node vertex exists while > 0)

    def set_pod(self, pod: dict) -> None:
        meta = pod.get("metadata") or {}
        key = (meta.get("namespace") or "", meta.get("name") or "")
        node = _name(pod, "spec", "nodeName")
        if not node:
            self.delete_pod(*key)
            return
        mirror = MIRROR_ANNOTATION in (meta.get("annotations") or {})
        refs = frozenset() if mirror else frozenset(pod_references(pod))
        if self._pods.get(key) == (node, refs):
            return
        self.delete_pod(*key)
        self._pods[key] = (node, refs)
        self._node_pods[node] += 1
        for ref in refs:
            self._ref_nodes.setdefault(ref, Counter())[node] += 1

    def delete_pod(self, namespace: str, name: str) -> None:
        old = self._pods.pop((namespace, name), None)
        if old is None:
            return
        node, refs = old
        self._node_pods[node] -= 1
        if self._node_pods[node] <= 0:
            del self._node_pods[node]
        for ref in refs:
            counts = self._ref_nodes[ref]
            counts[node] -= 1
            if counts[node] <= 0:
                del counts[node]
            if not counts:
                del self._ref_nodes[ref]

    def apply(self, namespace: str, name: str, pod: dict | None) -> None:
        self.set_pod(pod) if pod is not None else self.delete_pod(namespace, name)

    def has_path(self, vertex_type: str, namespace: str, name: str, node: str) -> bool:
        if vertex_type == "pods":
            entry = self._pods.get((namespace, name))
            return entry is not None and entry[0] == node
        return node in self._ref_nodes.get((vertex_type, namespace, name), ())


# ---- the authorizer --------------------------------------------------------------------------


class NodeAuthorizer:
    """``--authorization-mode=Node`` (with ``AuthorizeNodeWithSelectors``, on by default in 1.32)."""

    def __init__(self, graph: NodeGraph):
        self.graph = graph
        self.rules = tuple(node_rules())

    def rules_for(self, user: UserInfo, namespace: str) -> RuleSet:
        if is_node_user(user):
            return RuleSet(incomplete=True, errors=["node authorizer does not support user rule resolution"])
        return RuleSet()

    def authorize(self, attrs: Attributes) -> Verdict:
        user, info = attrs.user, attrs.info
        if not is_node_user(user):
            return NO_OPINION
        node = node_name(user)
        if not node:
            return Verdict(Decision.NO_OPINION, f"unknown node for user {go_quote(user.name)}")
        if info.is_resource_request:
            handler = _HANDLERS.get((info.api_group, info.resource))
            if handler is not None:
                return handler(self, node, attrs)
        return ALLOW if rules_allow(info, self.rules) else NO_OPINION

    # ---- per resource (upstream's names) ---------------------------------------------------
    def _authorize(self, node: str, vertex_type: str, attrs: Attributes) -> Verdict:
        info = attrs.info
        if not info.name:
            return Verdict(Decision.NO_OPINION, "No Object name found")
        if not self.graph.has_path(vertex_type, info.namespace, info.name, node):
            return Verdict(Decision.NO_OPINION, f"no relationship found between node '{node}' and this object")
        return ALLOW

    def read_namespaced_object(self, node: str, attrs: Attributes) -> Verdict:
        info = attrs.info
        if info.verb not in ("get", "list", "watch"):
            return Verdict(Decision.NO_OPINION, "can only read resources of this type")
        if info.subresource:
            return Verdict(Decision.NO_OPINION, "cannot read subresource")
        if not info.namespace:
            return Verdict(Decision.NO_OPINION, "can only read namespaced object of this type")
        return self._authorize(node, info.resource, attrs)

    def _get(self, node: str, attrs: Attributes) -> Verdict:
        info = attrs.info
        if info.verb != "get":
            return Verdict(Decision.NO_OPINION, "can only get individual resources of this type")
        if info.subresource:
            return Verdict(Decision.NO_OPINION, "cannot get subresource")
        return self._authorize(node, info.resource, attrs)

    def persistent_volume_claim(self, node: str, attrs: Attributes) -> Verdict:
        info = attrs.info
        if info.subresource == "status":
            if info.verb not in ("update", "patch"):
                return Verdict(Decision.NO_OPINION, "can only get/update/patch this type")
            return self._authorize(node, info.resource, attrs)
        return self._get(node, attrs)

    def create_token(self, node: str, attrs: Attributes) -> Verdict:
        info = attrs.info
        if info.verb != "create" or not info.name:
            return Verdict(Decision.NO_OPINION, "can only create tokens for individual service accounts")
        if info.subresource != "token":
            return Verdict(Decision.NO_OPINION, "can only create token subresource of serviceaccount")
        if not self.graph.has_path("serviceaccounts", info.namespace, info.name, node):
            return Verdict(Decision.NO_OPINION, f"no relationship found between node '{node}' and this object")
        return ALLOW

    def lease(self, node: str, attrs: Attributes) -> Verdict:
        info = attrs.info
        if info.verb not in ("get", "create", "update", "patch", "delete"):
            return Verdict(Decision.NO_OPINION, "can only get, create, update, patch, or delete a node lease")
        if info.namespace != NODE_LEASE_NAMESPACE:
            return Verdict(Decision.NO_OPINION, f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace')
        if info.verb != "create" and info.name != node:
            return Verdict(Decision.NO_OPINION, "can only access node lease with the same name as the requesting node")
        return ALLOW

    def node_object(self, node: str, attrs: Attributes) -> Verdict:
        info = attrs.info
        if not info.subresource:
            if info.verb in ("create", "update", "patch"):
                return ALLOW
            if info.verb in ("get", "list", "watch"):
                if info.name == node:
                    return ALLOW
                if not info.name:
                    return Verdict(Decision.NO_OPINION, f"node '{node}' cannot read all nodes, only its own Node object")
                return Verdict(Decision.NO_OPINION, f"node '{node}' cannot read '{info.name}', only its own Node object")
        elif info.subresource == "status" and info.verb in ("update", "patch"):
            return ALLOW
        return NO_OPINION

    def pod(self, node: str, attrs: Attributes) -> Verdict:
        info = attrs.info
        if not info.subresource:
            if info.verb == "get":
                return self._get(node, attrs)
            if info.verb in ("list", "watch"):
                if info.name:  # upstream asks the graph first for a named Pod
                    return self._authorize(node, "pods", attrs)
                if node_field_selected(info.field_selector, node):
                    return ALLOW
                return Verdict(Decision.NO_OPINION, "can only list/watch pods with spec.nodeName field selector")
            if info.verb in ("create", "delete"):
                return ALLOW
        elif info.subresource == "status" and info.verb in ("update", "patch"):
            return ALLOW
        elif info.subresource == "eviction" and info.verb == "create":
            return ALLOW
        return NO_OPINION


def node_field_selected(field_selector: str, node: str) -> bool:
    """Whether the selector holds the requirement ``spec.nodeName=<node>`` (``=`` or ``==``)."""
    for term in field_selector.split(","):
        key, op, value = term.partition("=")
        if not op or key.endswith("!"):
            continue
        value = value[1:] if value.startswith("=") else value
        if key.strip() == "spec.nodeName" and value.strip() == node:
            return True
    return False


_HANDLERS = {
    ("", "secrets"): NodeAuthorizer.read_namespaced_object,
    ("", "configmaps"): NodeAuthorizer.read_namespaced_object,
    ("", "persistentvolumeclaims"): NodeAuthorizer.persistent_volume_claim,
    ("", "persistentvolumes"): NodeAuthorizer._get,
    ("", "serviceaccounts"): NodeAuthorizer.create_token,
    ("coordination.k8s.io", "leases"): NodeAuthorizer.lease,
    ("", "nodes"): NodeAuthorizer.node_object,
    ("", "pods"): NodeAuthorizer.pod,
}


def is_node_user(user: UserInfo) -> bool:
    """Upstream nodeidentifier: the name prefix and the group both (an empty name is a node
    user the authorizer cannot place)."""
    return user.name.startswith(NODE_USER_PREFIX) and NODES_GROUP in user.groups
