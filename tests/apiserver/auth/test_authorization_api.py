"""Node,RBAC authorization on a real apiserver, driven by kubectl and the official client
with identities from the cluster CA (x509 client certificates, CN user, O groups): the
default policy, 403 wording, RoleBindings taking effect, escalation prevention, access
reviews and ``kubectl auth can-i``, anonymous requests, and the Node authorizer with
NodeRestriction between two nodes."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
import uuid

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from kubesvc.serving import pki


def user_kubeconfig(server, name: str, *groups: str):
    """A kubeconfig for ``name`` in ``groups``, with a certificate from the cluster CA."""
    ca = server.ca
    label = name.replace(":", "-")
    pair = ca.client(f"test-user-{label}", pki.Identity(name, tuple(groups)))
    return pki.write_kubeconfig(server.data_dir / "users" / f"{label}.kubeconfig", server.url, ca, name, pair)


def core(kubeconfig) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=str(kubeconfig)))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def ns(apiserver):
    name = unique("authz")
    apiserver.kubectl("create", "namespace", name)
    yield name
    apiserver.kubectl("delete", "namespace", name, "--wait=false", check=False)


def wait_for(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


# ---- RBAC through kubectl ----------------------------------------------------------------------


def test_a_view_user_reads_pods_but_not_secrets(apiserver, ns):
    viewer = unique("viewer")
    kc = user_kubeconfig(apiserver, viewer, "team")
    denied = apiserver.kubectl("get", "pods", "-n", ns, kubeconfig=kc, check=False)
    assert denied.returncode == 1
    assert denied.stderr.strip() == (f'Error from server (Forbidden): pods is forbidden: User "{viewer}" cannot list resource "pods" '
                                     f'in API group "" in the namespace "{ns}"')
    apiserver.kubectl("create", "rolebinding", "viewers", "--clusterrole=view", f"--user={viewer}", "-n", ns)
    assert apiserver.kubectl("get", "pods", "-n", ns, kubeconfig=kc).returncode == 0
    secrets = apiserver.kubectl("get", "secret", "s", "-n", ns, kubeconfig=kc, check=False)
    assert secrets.stderr.strip() == (f'Error from server (Forbidden): secrets "s" is forbidden: User "{viewer}" cannot get resource '
                                      f'"secrets" in API group "" in the namespace "{ns}"')
    # a RoleBinding of a Role that allows it makes it allowed
    apiserver.kubectl("create", "secret", "generic", "s", "--from-literal=k=v", "-n", ns)
    apiserver.kubectl("create", "role", "secret-reader", "--verb=get", "--resource=secrets", "--resource-name=s", "-n", ns)
    apiserver.kubectl("create", "rolebinding", "read-s", "--role=secret-reader", "--group=team", "-n", ns)
    assert "s " in apiserver.kubectl("get", "secret", "s", "-n", ns, kubeconfig=kc).stdout
    listed = apiserver.kubectl("get", "secrets", "-n", ns, kubeconfig=kc, check=False)  # resourceNames never allow a list
    assert listed.returncode == 1 and 'cannot list resource "secrets"' in listed.stderr
    # the binding's removal takes the permission away
    apiserver.kubectl("delete", "rolebinding", "read-s", "-n", ns)
    assert apiserver.kubectl("get", "secret", "s", "-n", ns, kubeconfig=kc, check=False).returncode == 1


def test_escalation_is_refused_with_upstreams_message(apiserver, ns):
    admin = unique("nsadmin")
    kc = user_kubeconfig(apiserver, admin)
    apiserver.kubectl("create", "rolebinding", "admins", "--clusterrole=admin", f"--user={admin}", "-n", ns)
    # admin may create roles within what it holds
    apiserver.kubectl("create", "role", "pod-reader", "--verb=get,list", "--resource=pods", "-n", ns, kubeconfig=kc)
    refused = apiserver.kubectl("create", "role", "node-reader", "--verb=get", "--resource=nodes", "--resource=pods", "-n", ns,
                                kubeconfig=kc, check=False)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f'Error from server (Forbidden): roles.rbac.authorization.k8s.io "node-reader" is forbidden: user "{admin}" '
        f'(groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n'
        '{APIGroups:[""], Resources:["nodes"], Verbs:["get"]}')
    # binding cluster-admin is binding what it does not hold
    bind = apiserver.kubectl("create", "rolebinding", "grab", "--clusterrole=cluster-admin", f"--user={admin}", "-n", ns,
                             kubeconfig=kc, check=False)
    assert bind.returncode == 1
    assert (f'rolebindings.rbac.authorization.k8s.io "grab" is forbidden: user "{admin}" (groups=["system:authenticated"]) is '
            'attempting to grant RBAC permissions not currently held:\n{APIGroups:["*"], Resources:["*"], Verbs:["*"]}\n'
            '{NonResourceURLs:["*"], Verbs:["*"]}') in bind.stderr
    # but binding edit (covered by admin) is fine, and a missing role is a 404
    apiserver.kubectl("create", "rolebinding", "editors", "--clusterrole=edit", "--user=someone", "-n", ns, kubeconfig=kc)
    missing = apiserver.kubectl("create", "rolebinding", "ghost", "--clusterrole=no-such-role", "--user=someone", "-n", ns,
                                kubeconfig=kc, check=False)
    assert 'clusterroles.rbac.authorization.k8s.io "no-such-role" not found' in missing.stderr
    # with `bind` on cluster-admin it may bind it after all (no escalation check then)
    apiserver.kubectl("create", "role", "binder", "--verb=bind", "--resource=clusterroles.rbac.authorization.k8s.io",
                      "--resource-name=cluster-admin", "-n", ns)
    apiserver.kubectl("create", "rolebinding", "binders", "--role=binder", f"--user={admin}", "-n", ns)
    apiserver.kubectl("create", "rolebinding", "grab", "--clusterrole=cluster-admin", "--user=someone", "-n", ns, kubeconfig=kc)


def test_kubectl_auth_can_i(apiserver, ns):
    who = unique("asker")
    kc = user_kubeconfig(apiserver, who)
    no = apiserver.kubectl("auth", "can-i", "create", "pods", "-n", ns, kubeconfig=kc, check=False)
    assert (no.returncode, no.stdout) == (1, "no\n")
    apiserver.kubectl("create", "rolebinding", "editors", "--clusterrole=edit", f"--user={who}", "-n", ns)
    yes = apiserver.kubectl("auth", "can-i", "create", "pods", "-n", ns, kubeconfig=kc, check=False)
    assert (yes.returncode, yes.stdout) == (0, "yes\n")
    assert apiserver.kubectl("auth", "can-i", "create", "pods", "-n", "default", kubeconfig=kc, check=False).stdout == "no\n"
    assert apiserver.kubectl("auth", "can-i", "get", "/healthz", kubeconfig=kc).stdout == "yes\n"
    # an admin asking about a ServiceAccount through impersonation
    sa = f"system:serviceaccount:{ns}:robot"
    assert apiserver.kubectl("auth", "can-i", "get", "secrets", "-n", ns, "--as", sa, check=False).stdout == "no\n"
    apiserver.kubectl("create", "rolebinding", "robot-edit", "--clusterrole=edit", f"--serviceaccount={ns}:robot", "-n", ns)
    assert apiserver.kubectl("auth", "can-i", "get", "secrets", "-n", ns, "--as", sa).stdout == "yes\n"


def test_kubectl_auth_can_i_list(apiserver, ns):
    who = unique("lister")
    kc = user_kubeconfig(apiserver, who)
    apiserver.kubectl("create", "role", "cm", "--verb=get,list", "--resource=configmaps", "-n", ns)
    apiserver.kubectl("create", "role", "one-secret", "--verb=get", "--resource=secrets", "--resource-name=db", "-n", ns)
    apiserver.kubectl("create", "rolebinding", "cm", "--role=cm", f"--user={who}", "-n", ns)
    apiserver.kubectl("create", "rolebinding", "one-secret", "--role=one-secret", f"--user={who}", "-n", ns)
    listed = apiserver.kubectl("auth", "can-i", "--list", "-n", ns, kubeconfig=kc).stdout.splitlines()
    rows = [line.split() for line in listed]
    assert rows[0] == ["Resources", "Non-Resource", "URLs", "Resource", "Names", "Verbs"]
    assert ["configmaps", "[]", "[]", "[get", "list]"] in rows
    assert ["secrets", "[]", "[db]", "[get]"] in rows
    assert ["selfsubjectaccessreviews.authorization.k8s.io", "[]", "[]", "[create]"] in rows
    assert ["[/version]", "[]", "[get]"] in rows
    # kubectl aligns columns on the longest resource name: the header starts like every row
    assert listed[0].index("Non-Resource URLs") == listed[1].index("[]")
    elsewhere = apiserver.kubectl("auth", "can-i", "--list", "-n", "default", kubeconfig=kc).stdout
    assert "configmaps" not in elsewhere


# ---- access reviews through the official client ----------------------------------------------


def test_subject_access_review(apiserver, ns):
    who = unique("reviewed")
    apiserver.kubectl("create", "rolebinding", "view", "--clusterrole=view", f"--user={who}", "-n", ns)
    api = k8s.AuthorizationV1Api(k8s_config.new_client_from_config(config_file=str(apiserver.kubeconfig)))
    review = api.create_subject_access_review(k8s.V1SubjectAccessReview(spec=k8s.V1SubjectAccessReviewSpec(
        user=who, resource_attributes=k8s.V1ResourceAttributes(namespace=ns, verb="list", resource="pods"))))
    assert review.status.allowed is True
    assert review.status.reason == f'RBAC: allowed by RoleBinding "view/{ns}" of ClusterRole "view" to User "{who}"'
    denied = api.create_subject_access_review(k8s.V1SubjectAccessReview(spec=k8s.V1SubjectAccessReviewSpec(
        user=who, resource_attributes=k8s.V1ResourceAttributes(namespace=ns, verb="get", resource="secrets"))))
    assert (denied.status.allowed, denied.status.denied, denied.status.reason) == (False, None, None)
    by_group = api.create_subject_access_review(k8s.V1SubjectAccessReview(spec=k8s.V1SubjectAccessReviewSpec(
        groups=["system:unauthenticated"], non_resource_attributes=k8s.V1NonResourceAttributes(path="/version", verb="get"))))
    assert by_group.status.allowed is True
    assert by_group.status.reason.startswith('RBAC: allowed by ClusterRoleBinding "system:public-info-viewer" of ClusterRole')
    with pytest.raises(ApiException) as invalid:
        api.create_subject_access_review(k8s.V1SubjectAccessReview(spec=k8s.V1SubjectAccessReviewSpec(user=who)))
    assert invalid.value.status == 422
    assert json.loads(invalid.value.body)["message"] == (
        'SubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes: Invalid value: "null": '
        "exactly one of nonResourceAttributes or resourceAttributes must be specified")
    local = api.create_namespaced_local_subject_access_review(ns, k8s.V1LocalSubjectAccessReview(spec=k8s.V1SubjectAccessReviewSpec(
        user=who, resource_attributes=k8s.V1ResourceAttributes(namespace=ns, verb="watch", resource="services"))))
    assert local.status.allowed is True
    # a user without create subjectaccessreviews is refused the question
    asker = core(user_kubeconfig(apiserver, unique("nosy"))).api_client
    with pytest.raises(ApiException) as forbidden:
        k8s.AuthorizationV1Api(asker).create_subject_access_review(k8s.V1SubjectAccessReview(spec=k8s.V1SubjectAccessReviewSpec(
            user=who, resource_attributes=k8s.V1ResourceAttributes(verb="get", resource="pods"))))
    assert forbidden.value.status == 403


# ---- anonymous -----------------------------------------------------------------------------------


def _anonymous_get(server, path: str) -> tuple[int, bytes]:
    context = ssl.create_default_context(cafile=str(server.ca_file))
    try:
        with urllib.request.urlopen(server.url + path, context=context, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_anonymous_gets_version_and_health_only(apiserver):
    status, body = _anonymous_get(apiserver, "/version")
    assert status == 200 and json.loads(body)["major"] == "1"
    assert _anonymous_get(apiserver, "/readyz")[0] == 200
    status, body = _anonymous_get(apiserver, "/api/v1/namespaces")
    assert status == 403
    assert json.loads(body) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": 'namespaces is forbidden: User "system:anonymous" cannot list resource "namespaces" '
                                           'in API group "" at the cluster scope',
                                "reason": "Forbidden", "details": {"kind": "namespaces"}, "code": 403}
    status, body = _anonymous_get(apiserver, "/apis")
    assert status == 403 and json.loads(body)["message"] == 'forbidden: User "system:anonymous" cannot get path "/apis"'


# ---- the Node authorizer and NodeRestriction -----------------------------------------------------


def _pod(name: str, node: str, secret: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox",
                                                        "env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": secret, "key": "k"}}}]}]}}


def test_a_node_reads_what_its_pods_need_and_writes_only_its_own(apiserver, ns):
    n1, n2 = unique("n1"), unique("n2")
    kc1, kc2 = apiserver.node_kubeconfig(n1), apiserver.node_kubeconfig(n2)
    node1, node2 = core(kc1), core(kc2)
    for api, name in ((node1, n1), (node2, n2)):  # each node registers itself
        api.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(name=name, labels={"kubernetes.io/hostname": name})))
    for secret in ("s1", "s2", "unused"):
        apiserver.kubectl("create", "secret", "generic", secret, "--from-literal=k=v", "-n", ns)
    apiserver.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(_pod("p1", n1, "s1")))
    apiserver.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(_pod("p2", n2, "s2")))

    def readable(api, name) -> bool:
        try:
            api.read_namespaced_secret(name, ns)
            return True
        except ApiException as exc:
            assert exc.status == 403
            return False

    wait_for(lambda: readable(node1, "s1"))
    assert readable(node2, "s2")
    for api, secret, node in ((node1, "s2", n1), (node1, "unused", n1), (node2, "s1", n2)):
        with pytest.raises(ApiException) as refused:
            api.read_namespaced_secret(secret, ns)
        assert json.loads(refused.value.body)["message"] == (
            f'secrets "{secret}" is forbidden: User "system:node:{node}" cannot get resource "secrets" in API group "" in the '
            f"namespace \"{ns}\": no relationship found between node '{node}' and this object")
    # its own Node: read and patch; the other's: neither
    assert node1.read_node(n1).metadata.name == n1
    node1.patch_node(n1, {"metadata": {"labels": {"example.com/role": "web"}}})
    with pytest.raises(ApiException) as other_node:
        node1.patch_node(n2, {"metadata": {"labels": {"example.com/role": "web"}}})
    assert json.loads(other_node.value.body)["message"] == f'nodes "{n2}" is forbidden: node "{n1}" is not allowed to modify node "{n2}"'
    with pytest.raises(ApiException) as other_status:
        node1.patch_node_status(n2, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert other_status.value.status == 403
    with pytest.raises(ApiException) as taints:
        node1.patch_node(n1, {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}})
    assert json.loads(taints.value.body)["message"] == f'nodes "{n1}" is forbidden: node "{n1}" is not allowed to modify taints'
    with pytest.raises(ApiException) as reading:
        node1.read_node(n2)
    assert json.loads(reading.value.body)["message"].endswith(f"node '{n1}' cannot read '{n2}', only its own Node object")
    # its Pods' status: yes; the other node's Pods: no
    node1.patch_namespaced_pod_status("p1", ns, {"status": {"message": "running on n1"}})
    with pytest.raises(ApiException) as other_pod:
        node1.patch_namespaced_pod_status("p2", ns, {"status": {"message": "hijacked"}})
    assert json.loads(other_pod.value.body)["message"] == (
        f'pods "p2" is forbidden: node "{n1}" can only update pod status for pods with spec.nodeName set to itself')
    assert apiserver.kubectl("get", "pod", "p2", "-n", ns, "-o", "jsonpath={.status.message}").stdout == ""
    with pytest.raises(ApiException) as deleting:
        node1.delete_namespaced_pod("p2", ns)
    assert json.loads(deleting.value.body)["message"] == (
        f'pods "p2" is forbidden: node "{n1}" can only delete pods with spec.nodeName set to itself')
    # lists of Pods only of its own
    mine = node1.list_namespaced_pod(ns, field_selector=f"spec.nodeName={n1}")
    assert [p.metadata.name for p in mine.items] == ["p1"]
    with pytest.raises(ApiException) as listing:
        node1.list_namespaced_pod(ns)
    assert json.loads(listing.value.body)["message"].endswith("can only list/watch pods with spec.nodeName field selector")
    # Lease: its own in kube-node-lease only
    lease_api = k8s.CoordinationV1Api(node1.api_client)
    lease_api.create_namespaced_lease("kube-node-lease", k8s.V1Lease(metadata=k8s.V1ObjectMeta(name=n1), spec=k8s.V1LeaseSpec(holder_identity=n1)))
    with pytest.raises(ApiException) as other_lease:
        lease_api.create_namespaced_lease("kube-node-lease", k8s.V1Lease(metadata=k8s.V1ObjectMeta(name=n2)))
    assert json.loads(other_lease.value.body)["message"] == (
        f'leases.coordination.k8s.io "{n2}" is forbidden: can only access node lease with the same name as the requesting node')
    # once p1 is gone, n1 no longer reads s1
    apiserver.kubectl("delete", "pod", "p1", "-n", ns, "--grace-period=0", "--force")
    wait_for(lambda: not readable(node1, "s1"))


def test_cluster_role_aggregation_follows_labelled_roles(apiserver, ns):
    suffix = uuid.uuid4().hex[:6]
    label = f"example.com/aggregate-{suffix}"
    who = unique("aggregated")
    kc = user_kubeconfig(apiserver, who)
    apiserver.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": f"gathered-{suffix}"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]}}))
    apiserver.kubectl("create", "rolebinding", "gathered", f"--clusterrole=gathered-{suffix}", f"--user={who}", "-n", ns)
    assert apiserver.kubectl("auth", "can-i", "list", "configmaps", "-n", ns, kubeconfig=kc, check=False).stdout == "no\n"
    apiserver.kubectl("create", "clusterrole", f"part-{suffix}", "--verb=list", "--resource=configmaps")
    apiserver.kubectl("label", "clusterrole", f"part-{suffix}", f"{label}=true")
    wait_for(lambda: apiserver.kubectl("auth", "can-i", "list", "configmaps", "-n", ns, kubeconfig=kc, check=False).stdout == "yes\n")
    rules = json.loads(apiserver.kubectl("get", "clusterrole", f"gathered-{suffix}", "-o", "json").stdout)["rules"]
    assert rules == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]
    apiserver.kubectl("delete", "clusterrole", f"part-{suffix}")
    wait_for(lambda: apiserver.kubectl("auth", "can-i", "list", "configmaps", "-n", ns, kubeconfig=kc, check=False).stdout == "no\n")
    apiserver.kubectl("delete", "clusterrole", f"gathered-{suffix}")
    # an aggregationRule is for those who hold everything
    admin = unique("nsadmin")
    apiserver.kubectl("create", "clusterrole", f"role-writer-{suffix}", "--verb=create,get,update", "--resource=clusterroles")
    apiserver.kubectl("create", "clusterrolebinding", f"{admin}-rbac", f"--clusterrole=role-writer-{suffix}", f"--user={admin}")
    refused = apiserver.kubectl("apply", "-f", "-", kubeconfig=user_kubeconfig(apiserver, admin), check=False, input=json.dumps({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": f"sneaky-{suffix}"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}]}}))
    assert refused.stderr == (f'Error from server (Forbidden): error when creating "STDIN": clusterroles.rbac.authorization.k8s.io '
                              f'"sneaky-{suffix}" is forbidden: must have cluster-admin privileges to use the aggregationRule\n')
    apiserver.kubectl("delete", "clusterrolebinding", f"{admin}-rbac")
    apiserver.kubectl("delete", "clusterrole", f"role-writer-{suffix}")


def test_a_nodes_rules_review_is_incomplete(apiserver):
    listed = apiserver.kubectl("auth", "can-i", "--list", kubeconfig=apiserver.node_kubeconfig(unique("n")))
    assert listed.stderr == "Warning: the list may be incomplete: node authorizer does not support user rule resolution\n"
