"""The Node authorizer's graph and decisions (upstream node_authorizer_test.go cases), and
NodeRestriction's admission decisions (admission_test.go cases), on plain objects."""

import pytest

from kubesvc.apiserver.admission.noderestriction import (
    CREATE, DELETE, UPDATE, Refused, admit_lease, admit_node, admit_pod, admit_token_request, forbidden_labels)
from kubesvc.apiserver.auth.attributes import Attributes, RequestInfo, request_info
from kubesvc.apiserver.auth.authorizer import Decision
from kubesvc.apiserver.auth.node import NodeAuthorizer, NodeGraph, pod_references
from kubesvc.serving.user import UserInfo

N1 = UserInfo("system:node:n1", groups=("system:nodes", "system:authenticated"))


def pod(name, node, namespace="ns", **spec) -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"}, "spec": {"nodeName": node, **spec}}


FULL_POD = pod("full", "n1", serviceAccountName="sa", imagePullSecrets=[{"name": "pull"}],
               containers=[{"name": "c", "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k"}}},
                                                 {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "k"}}}],
                            "envFrom": [{"secretRef": {"name": "from-secret"}}, {"configMapRef": {"name": "from-cm"}}]}],
               initContainers=[{"name": "i", "envFrom": [{"secretRef": {"name": "init-secret"}}]}],
               volumes=[{"name": "v1", "secret": {"secretName": "vol-secret"}}, {"name": "v2", "configMap": {"name": "vol-cm"}},
                        {"name": "v3", "persistentVolumeClaim": {"claimName": "claim"}},
                        {"name": "v4", "projected": {"sources": [{"secret": {"name": "proj-secret"}}, {"configMap": {"name": "proj-cm"}},
                                                                 {"serviceAccountToken": {"path": "token"}}]}},
                        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}},
                        {"name": "v5", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi-secret"}}}])


def test_pod_references():
    assert pod_references(FULL_POD) == {
        ("serviceaccounts", "ns", "sa"), ("secrets", "ns", "pull"), ("secrets", "ns", "env-secret"), ("configmaps", "ns", "env-cm"),
        ("secrets", "ns", "from-secret"), ("configmaps", "ns", "from-cm"), ("secrets", "ns", "init-secret"), ("secrets", "ns", "vol-secret"),
        ("configmaps", "ns", "vol-cm"), ("persistentvolumeclaims", "ns", "claim"), ("secrets", "ns", "proj-secret"),
        ("configmaps", "ns", "proj-cm"), ("persistentvolumeclaims", "ns", "full-scratch"), ("secrets", "ns", "csi-secret")}


@pytest.fixture
def graph() -> NodeGraph:
    graph = NodeGraph()
    graph.set_pod(FULL_POD)
    graph.set_pod(pod("other", "n2", volumes=[{"name": "v", "secret": {"secretName": "vol-secret"}},
                                              {"name": "w", "secret": {"secretName": "n2-only"}}]))
    graph.set_pod({**pod("mirror", "n1", volumes=[{"name": "v", "secret": {"secretName": "mirror-secret"}}]),
                   "metadata": {"name": "mirror", "namespace": "ns", "annotations": {"kubernetes.io/config.mirror": "x"}}})
    graph.set_pod(pod("unscheduled", "", volumes=[{"name": "v", "secret": {"secretName": "pending-secret"}}]))
    return graph


def get(resource, name, namespace="ns", verb="get", group="", subresource="", field_selector="") -> RequestInfo:
    return RequestInfo(True, "", verb, group, "v1", namespace, resource, subresource, name, field_selector)


REASON_NONE = "no relationship found between node 'n1' and this object"

DECISIONS = [
    ("secret of its pod", get("secrets", "vol-secret"), Decision.ALLOW, ""),
    ("secret shared with another node's pod", get("secrets", "vol-secret"), Decision.ALLOW, ""),
    ("secret only another node uses", get("secrets", "n2-only"), Decision.NO_OPINION, REASON_NONE),
    ("secret of a mirror pod", get("secrets", "mirror-secret"), Decision.NO_OPINION, REASON_NONE),
    ("secret of an unscheduled pod", get("secrets", "pending-secret"), Decision.NO_OPINION, REASON_NONE),
    ("secret in another namespace", get("secrets", "vol-secret", namespace="other"), Decision.NO_OPINION, REASON_NONE),
    ("list of secrets", get("secrets", "", verb="list"), Decision.NO_OPINION, "No Object name found"),
    ("list of one named secret", request_info("GET", "/api/v1/namespaces/ns/secrets", {"fieldSelector": "metadata.name=env-secret"}),
     Decision.ALLOW, ""),
    ("write a secret", get("secrets", "vol-secret", verb="update"), Decision.NO_OPINION, "can only read resources of this type"),
    ("secrets everywhere", get("secrets", "vol-secret", namespace=""), Decision.NO_OPINION, "can only read namespaced object of this type"),
    ("configmap of its pod", get("configmaps", "proj-cm"), Decision.ALLOW, ""),
    ("pvc of its pod", get("persistentvolumeclaims", "claim"), Decision.ALLOW, ""),
    ("ephemeral pvc", get("persistentvolumeclaims", "full-scratch"), Decision.ALLOW, ""),
    ("pvc list", get("persistentvolumeclaims", "", verb="list"), Decision.NO_OPINION, "can only get individual resources of this type"),
    ("pvc status update", get("persistentvolumeclaims", "claim", verb="patch", subresource="status"), Decision.ALLOW, ""),
    ("pvc status get", get("persistentvolumeclaims", "claim", verb="get", subresource="status"), Decision.NO_OPINION,
     "can only get/update/patch this type"),
    ("token of its pods' account", get("serviceaccounts", "sa", verb="create", subresource="token"), Decision.ALLOW, ""),
    ("token of another account", get("serviceaccounts", "default", verb="create", subresource="token"), Decision.NO_OPINION, REASON_NONE),
    ("get a service account", get("serviceaccounts", "sa"), Decision.NO_OPINION, "can only create tokens for individual service accounts"),
    ("own lease", get("leases", "n1", namespace="kube-node-lease", group="coordination.k8s.io", verb="update"), Decision.ALLOW, ""),
    ("create a lease", get("leases", "", namespace="kube-node-lease", group="coordination.k8s.io", verb="create"), Decision.ALLOW, ""),
    ("other lease", get("leases", "n2", namespace="kube-node-lease", group="coordination.k8s.io"), Decision.NO_OPINION,
     "can only access node lease with the same name as the requesting node"),
    ("lease elsewhere", get("leases", "n1", namespace="kube-system", group="coordination.k8s.io"), Decision.NO_OPINION,
     'can only access leases in the "kube-node-lease" system namespace'),
    ("list leases", get("leases", "", namespace="kube-node-lease", group="coordination.k8s.io", verb="list"), Decision.NO_OPINION,
     "can only get, create, update, patch, or delete a node lease"),
    ("own node", get("nodes", "n1", namespace=""), Decision.ALLOW, ""),
    ("other node", get("nodes", "n2", namespace=""), Decision.NO_OPINION, "node 'n1' cannot read 'n2', only its own Node object"),
    ("all nodes", get("nodes", "", namespace="", verb="list"), Decision.NO_OPINION, "node 'n1' cannot read all nodes, only its own Node object"),
    ("watch own node by name", request_info("GET", "/api/v1/nodes", {"watch": "1", "fieldSelector": "metadata.name=n1"}), Decision.ALLOW, ""),
    ("patch a node", get("nodes", "n2", namespace="", verb="patch"), Decision.ALLOW, ""),
    ("node status", get("nodes", "n2", namespace="", verb="update", subresource="status"), Decision.ALLOW, ""),
    ("delete a node", get("nodes", "n1", namespace="", verb="delete"), Decision.NO_OPINION, ""),
    ("its pod", get("pods", "full"), Decision.ALLOW, ""),
    ("other pod", get("pods", "other"), Decision.NO_OPINION, REASON_NONE),
    ("pods on the node", get("pods", "", verb="watch", field_selector="spec.nodeName=n1"), Decision.ALLOW, ""),
    ("pods on the node, double equals", get("pods", "", verb="list", namespace="", field_selector="status.phase!=Failed,spec.nodeName==n1"),
     Decision.ALLOW, ""),
    ("pods on another node", get("pods", "", verb="list", field_selector="spec.nodeName=n2"), Decision.NO_OPINION,
     "can only list/watch pods with spec.nodeName field selector"),
    ("a named pod elsewhere, even with its own spec.nodeName",
     request_info("GET", "/api/v1/namespaces/ns/pods", {"fieldSelector": "metadata.name=other,spec.nodeName=n1"}),
     Decision.NO_OPINION, REASON_NONE),
    ("pod status", get("pods", "other", verb="patch", subresource="status"), Decision.ALLOW, ""),
    ("pod update", get("pods", "full", verb="update"), Decision.NO_OPINION, ""),
    ("pod eviction", get("pods", "full", verb="create", subresource="eviction"), Decision.ALLOW, ""),
    ("services (node rules)", get("services", "", verb="watch", namespace=""), Decision.ALLOW, ""),
    ("events (node rules)", get("events", "", verb="create"), Decision.ALLOW, ""),
    ("endpointslices are not in the node rules", get("endpointslices", "", verb="list", group="discovery.k8s.io"), Decision.NO_OPINION, ""),
    ("discovery path", RequestInfo(False, "/api", "get"), Decision.NO_OPINION, ""),
]


@pytest.mark.parametrize("case", DECISIONS, ids=[c[0] for c in DECISIONS])
def test_node_decisions(graph, case):
    _, info, decision, reason = case
    verdict = NodeAuthorizer(graph).authorize(Attributes(N1, info))
    assert (verdict.decision, verdict.reason) == (decision, reason)


def test_only_node_users_are_judged(graph):
    authorizer = NodeAuthorizer(graph)
    not_in_group = UserInfo("system:node:n1", groups=("system:authenticated",))
    assert authorizer.authorize(Attributes(not_in_group, get("secrets", "vol-secret"))).reason == ""
    assert authorizer.authorize(Attributes(not_in_group, get("secrets", "vol-secret"))).decision is Decision.NO_OPINION
    nameless = UserInfo("system:node:", groups=("system:nodes",))
    assert authorizer.authorize(Attributes(nameless, get("secrets", "vol-secret"))).reason == 'unknown node for user "system:node:"'
    assert authorizer.rules_for(N1, "ns").incomplete is True
    assert authorizer.rules_for(UserInfo("jane"), "ns").incomplete is False


def test_graph_follows_pod_changes(graph):
    authorizer = NodeAuthorizer(graph)
    allowed = lambda name: authorizer.authorize(Attributes(N1, get("secrets", name))).decision is Decision.ALLOW  # noqa: E731
    assert allowed("vol-secret")
    graph.set_pod({**FULL_POD, "spec": {**FULL_POD["spec"], "nodeName": "n3"}})  # moved (a recreated Pod)
    assert allowed("vol-secret") is False and allowed("env-secret") is False
    graph.set_pod(FULL_POD)
    graph.delete_pod("ns", "full")
    assert allowed("env-secret") is False
    graph.apply("ns", "other", None)
    graph.set_pod(pod("again", "n1", volumes=[{"name": "v", "secret": {"secretName": "n2-only"}}]))
    assert allowed("n2-only")


# ---- NodeRestriction -------------------------------------------------------------------------


def node(name, labels=None, taints=None, config_source=None) -> dict:
    spec = {}
    if taints is not None:
        spec["taints"] = taints
    if config_source is not None:
        spec["configSource"] = config_source
    return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": labels or {}}, "spec": spec}


def mirror(name="m", node_name="n1", owner=None, **spec) -> dict:
    owners = [owner] if owner is not None else [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-n1", "controller": True}]
    return {"metadata": {"name": name, "annotations": {"kubernetes.io/config.mirror": "hash"}, "ownerReferences": owners},
            "spec": {"nodeName": node_name, **spec}}


ADMISSION = [
    # (id, call, refusal or None)
    ("own node create", lambda: admit_node("n1", CREATE, node("n1", {"kubernetes.io/hostname": "n1", "node.kubernetes.io/x": "y"}), None), None),
    ("other node", lambda: admit_node("n1", UPDATE, node("n2"), node("n2")), 'node "n1" is not allowed to modify node "n2"'),
    ("restricted label on create", lambda: admit_node("n1", CREATE, node("n1", {"node-restriction.kubernetes.io/a": "b", "kubernetes.io/foo": "x"}), None),
     'node "n1" is not allowed to set the following labels: kubernetes.io/foo, node-restriction.kubernetes.io/a'),
    ("own labels of other namespaces", lambda: admit_node("n1", UPDATE, node("n1", {"example.com/a": "b"}), node("n1")), None),
    ("kubelet label change", lambda: admit_node("n1", UPDATE, node("n1", {"topology.kubernetes.io/zone": "z"}), node("n1")), None),
    ("removing a restricted label", lambda: admit_node("n1", UPDATE, node("n1"), node("n1", {"foo.node-restriction.kubernetes.io/x": ""})),
     "is not allowed to modify labels: foo.node-restriction.kubernetes.io/x"),
    ("taints", lambda: admit_node("n1", UPDATE, node("n1", taints=[{"key": "k", "effect": "NoSchedule"}]), node("n1")),
     'node "n1" is not allowed to modify taints'),
    ("config source", lambda: admit_node("n1", UPDATE, node("n1", config_source={"configMap": {}}), node("n1")),
     'node "n1" is not allowed to update configSource to a new non-nil configSource'),
    ("delete own pod", lambda: admit_pod("n1", DELETE, "", None, pod("p", "n1"), lambda n: "uid-n1"), None),
    ("delete other pod", lambda: admit_pod("n1", DELETE, "", None, pod("p", "n2"), lambda n: "uid-n1"),
     'node "n1" can only delete pods with spec.nodeName set to itself'),
    ("update a pod", lambda: admit_pod("n1", UPDATE, "", pod("p", "n1"), pod("p", "n1"), lambda n: "uid-n1"),
     'unexpected operation "UPDATE", node "n1" can only create and delete mirror pods'),
    ("own pod status", lambda: admit_pod("n1", UPDATE, "status", pod("p", "n1"), pod("p", "n1"), lambda n: "uid-n1"), None),
    ("other pod status", lambda: admit_pod("n1", UPDATE, "status", pod("p", "n2"), pod("p", "n2"), lambda n: "uid-n1"),
     'node "n1" can only update pod status for pods with spec.nodeName set to itself'),
    ("labels through status", lambda: admit_pod("n1", UPDATE, "status", {**pod("p", "n1"), "metadata": {"labels": {"a": "b"}}}, pod("p", "n1"),
                                                lambda n: "uid-n1"), 'node "n1" cannot update labels through pod status'),
    ("other subresource", lambda: admit_pod("n1", UPDATE, "binding", None, None, lambda n: "uid-n1"),
     "unexpected pod subresource \"binding\", only 'status' and 'eviction' are allowed"),
    ("mirror pod", lambda: admit_pod("n1", CREATE, "", mirror(), None, lambda n: "uid-n1"), None),
    ("regular pod", lambda: admit_pod("n1", CREATE, "", pod("p", "n1"), None, lambda n: "uid-n1"),
     'pod does not have "kubernetes.io/config.mirror" annotation, node "n1" can only create mirror pods'),
    ("mirror pod elsewhere", lambda: admit_pod("n1", CREATE, "", mirror(node_name="n2"), None, lambda n: "uid-n1"),
     'node "n1" can only create pods with spec.nodeName set to itself'),
    ("mirror pod of another owner", lambda: admit_pod("n1", CREATE, "", mirror(owner={"apiVersion": "v1", "kind": "Node", "name": "n2"}), None,
                                                      lambda n: "uid-n1"), 'node "n1" can only create pods with an owner reference set to itself'),
    ("mirror pod with stale node uid", lambda: admit_pod("n1", CREATE, "", mirror(), None, lambda n: "uid-new"),
     "node n1 UID mismatch: expected uid-n1 got uid-new"),
    ("mirror pod with a secret", lambda: admit_pod("n1", CREATE, "", mirror(volumes=[{"name": "v", "secret": {"secretName": "s"}}]), None,
                                                   lambda n: "uid-n1"), 'node "n1" can not create pods that reference secrets'),
    ("mirror pod with an account", lambda: admit_pod("n1", CREATE, "", mirror(serviceAccountName="default"), None, lambda n: "uid-n1"),
     'node "n1" can not create pods that reference a service account'),
    ("own lease", lambda: admit_lease("n1", CREATE, "kube-node-lease", "n1"), None),
    ("lease of another", lambda: admit_lease("n1", UPDATE, "kube-node-lease", "n2"), "can only access node lease with the same name as the requesting node"),
    ("lease elsewhere", lambda: admit_lease("n1", CREATE, "default", "n1"), 'can only access leases in the "kube-node-lease" system namespace'),
]


@pytest.mark.parametrize("case", ADMISSION, ids=[c[0] for c in ADMISSION])
def test_node_restriction(case):
    _, call, refusal = case
    if refusal is None:
        call()
        return
    with pytest.raises(Refused) as refused:
        call()
    assert str(refused.value) == refusal


def token_request(name="p", uid="uid-p", kind="Pod") -> dict:
    return {"spec": {"audiences": ["x"], "boundObjectRef": {"apiVersion": "v1", "kind": kind, "name": name, "uid": uid}}}


TOKEN_CASES = [
    ("bound to its pod", token_request(), None),
    ("not bound", {"spec": {}}, "node requested token not bound to a pod"),
    ("bound to a secret", token_request(kind="Secret"), "node requested token not bound to a pod"),
    ("no uid", token_request(uid=""), "node requested token with a pod binding without a uid"),
    ("stale uid", token_request(uid="old"), "the UID in the bound object reference (old) does not match the UID in record. "
                                             "The object might have been deleted and then recreated"),
    ("pod elsewhere", token_request(name="elsewhere", uid="uid-elsewhere"), "node requested token bound to a pod scheduled on a different node"),
]


@pytest.mark.parametrize("case", TOKEN_CASES, ids=[c[0] for c in TOKEN_CASES])
def test_token_requests(case):
    _, request, refusal = case
    pods = {"p": pod("p", "n1"), "elsewhere": pod("elsewhere", "n2")}
    if refusal is None:
        admit_token_request("n1", request, pods.__getitem__)
        return
    with pytest.raises(Refused) as refused:
        admit_token_request("n1", request, pods.__getitem__)
    assert str(refused.value) == refusal


def test_forbidden_labels():
    assert forbidden_labels({"kubernetes.io/os": "linux", "a.k8s.io/b": "c", "example.com/x": "y"}, None) == ["a.k8s.io/b"]
    assert forbidden_labels({"x": "1"}, {"x": "1"}) == []
