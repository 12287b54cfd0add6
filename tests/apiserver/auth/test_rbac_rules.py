"""RBAC rule matching, subject matching, visiting order and reasons (upstream
plugin/pkg/auth/authorizer/rbac rbac_test.go and subject_locator cases), on plain objects."""

import pytest

from kubesvc.apiserver.auth.attributes import Attributes, RequestInfo, request_info
from kubesvc.apiserver.auth.authorizer import Decision
from kubesvc.apiserver.auth.rbac import PolicyIndex, RBACAuthorizer, Subject, applies_to_user
from kubesvc.apiserver.auth.rules import PolicyRule, rule_allows
from kubesvc.serving.user import UserInfo


def rule(verbs, groups=(), resources=(), names=(), urls=()) -> PolicyRule:
    return PolicyRule(tuple(verbs), tuple(groups), tuple(resources), tuple(names), tuple(urls))


def resource(verb, resource_, group="", subresource="", name="", namespace="ns") -> RequestInfo:
    return RequestInfo(True, "/", verb, group, "v1", namespace, resource_, subresource, name)


def path(verb, url) -> RequestInfo:
    return RequestInfo(False, url, verb)


RULE_CASES = [
    # (id, rule, request, allowed)
    ("exact", rule(["get"], [""], ["pods"]), resource("get", "pods"), True),
    ("other verb", rule(["get"], [""], ["pods"]), resource("list", "pods"), False),
    ("verb star", rule(["*"], [""], ["pods"]), resource("deletecollection", "pods"), True),
    ("other group", rule(["get"], ["apps"], ["pods"]), resource("get", "pods"), False),
    ("group star", rule(["get"], ["*"], ["deployments"]), resource("get", "deployments", "apps"), True),
    ("core group is empty string", rule(["get"], [""], ["deployments"]), resource("get", "deployments", "apps"), False),
    ("resource star", rule(["get"], [""], ["*"]), resource("get", "pods", subresource="log"), True),
    ("plain resource does not match subresource", rule(["get"], [""], ["pods"]), resource("get", "pods", subresource="log"), False),
    ("combined subresource", rule(["get"], [""], ["pods/log"]), resource("get", "pods", subresource="log"), True),
    ("subresource rule does not match the resource", rule(["get"], [""], ["pods/log"]), resource("get", "pods"), False),
    ("star slash subresource", rule(["update"], [""], ["*/status"]), resource("update", "services", subresource="status"), True),
    ("star slash other subresource", rule(["update"], [""], ["*/status"]), resource("update", "services", subresource="proxy"), False),
    ("star slash needs a subresource", rule(["get"], [""], ["*/status"]), resource("get", "status"), False),
    ("resource slash star is no wildcard", rule(["get"], [""], ["pods/*"]), resource("get", "pods", subresource="log"), False),
    ("resource name matches", rule(["get"], [""], ["secrets"], ["s1"]), resource("get", "secrets", name="s1"), True),
    ("resource name differs", rule(["get"], [""], ["secrets"], ["s1"]), resource("get", "secrets", name="s2"), False),
    ("no name never matches resourceNames", rule(["list"], [""], ["secrets"], ["s1"]), resource("list", "secrets"), False),
    ("list by field selector name", rule(["list"], [""], ["secrets"], ["s1"]),
     request_info("GET", "/api/v1/namespaces/ns/secrets", {"fieldSelector": "metadata.name=s1"}), True),
    ("url exact", rule(["get"], urls=["/healthz"]), path("get", "/healthz"), True),
    ("url other verb", rule(["get"], urls=["/healthz"]), path("post", "/healthz"), False),
    ("url star", rule(["get"], urls=["*"]), path("get", "/anything"), True),
    ("url prefix star", rule(["get"], urls=["/apis/*"]), path("get", "/apis/apps/v1"), True),
    ("url prefix star matches the bare prefix", rule(["get"], urls=["/apis/*"]), path("get", "/apis/"), True),
    ("url prefix star needs the slash", rule(["get"], urls=["/apis/*"]), path("get", "/apis"), False),
    ("url suffix star is a plain prefix", rule(["get"], urls=["/healthz*"]), path("get", "/healthzfoo"), True),
    ("url rule ignores groups and resources", rule(["get"], ["*"], ["*"]), path("get", "/version"), False),
    ("resource rule with urls only", rule(["get"], urls=["*"]), resource("get", "pods"), False),
]


@pytest.mark.parametrize("case", RULE_CASES, ids=[c[0] for c in RULE_CASES])
def test_rule_allows(case):
    _, policy_rule, info, allowed = case
    assert rule_allows(info, policy_rule) is allowed


JANE = UserInfo("jane", groups=("devs", "system:authenticated"))
SA = UserInfo("system:serviceaccount:ns1:robot", groups=("system:serviceaccounts", "system:serviceaccounts:ns1", "system:authenticated"))

SUBJECT_CASES = [
    ("user", JANE, Subject("User", "jane"), "", True),
    ("other user", JANE, Subject("User", "bob"), "", False),
    ("group", JANE, Subject("Group", "devs"), "", True),
    ("user is no group", JANE, Subject("Group", "jane"), "", False),
    ("group is no user", JANE, Subject("User", "devs"), "", False),
    ("sa with namespace", SA, Subject("ServiceAccount", "robot", "ns1"), "", True),
    ("sa other namespace", SA, Subject("ServiceAccount", "robot", "ns2"), "ns1", False),
    ("sa takes the binding's namespace", SA, Subject("ServiceAccount", "robot"), "ns1", True),
    ("sa without namespace in a cluster binding", SA, Subject("ServiceAccount", "robot"), "", False),
    ("sa as user name", SA, Subject("User", "system:serviceaccount:ns1:robot"), "", True),
    ("sa group", SA, Subject("Group", "system:serviceaccounts:ns1"), "", True),
    ("unknown kind", JANE, Subject("Robot", "jane"), "", False),
]


@pytest.mark.parametrize("case", SUBJECT_CASES, ids=[c[0] for c in SUBJECT_CASES])
def test_applies_to_user(case):
    _, user, subject, namespace, applies = case
    assert applies_to_user(user, subject, namespace) is applies


def crb(name, role, *subjects) -> dict:
    return {"metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": list(subjects)}


def rb(namespace, name, kind, role, *subjects) -> dict:
    return {"metadata": {"name": name, "namespace": namespace}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            "subjects": list(subjects)}


def user(name):
    return {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": name}


def group(name):
    return {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": name}


def service_account(name, namespace=""):
    return {"kind": "ServiceAccount", "name": name, **({"namespace": namespace} if namespace else {})}


@pytest.fixture
def index() -> PolicyIndex:
    index = PolicyIndex()
    index.apply("ClusterRole", "", "view", {"rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]})
    index.apply("ClusterRole", "", "secret-reader", {"rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}]})
    index.apply("Role", "ns1", "cm-reader", {"rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]}]})
    index.apply("ClusterRoleBinding", "", "b-view", crb("b-view", "view", user("bob"), group("devs")))
    index.apply("ClusterRoleBinding", "", "a-view", crb("a-view", "view", group("devs")))
    index.apply("RoleBinding", "ns1", "secrets", rb("ns1", "secrets", "ClusterRole", "secret-reader", service_account("robot")))
    index.apply("RoleBinding", "ns1", "cms", rb("ns1", "cms", "Role", "cm-reader", user("jane")))
    index.apply("RoleBinding", "ns1", "dangling", rb("ns1", "dangling", "Role", "missing", user("jane")))
    return index


DECISION_CASES = [
    ("first binding by name, first matching subject", JANE, resource("get", "pods"),
     Decision.ALLOW, 'RBAC: allowed by ClusterRoleBinding "a-view" of ClusterRole "view" to Group "devs"'),
    ("cluster binding applies in every namespace", JANE, resource("list", "pods", namespace="other"),
     Decision.ALLOW, 'RBAC: allowed by ClusterRoleBinding "a-view" of ClusterRole "view" to Group "devs"'),
    ("user subject named", UserInfo("bob"), resource("get", "pods", namespace=""),
     Decision.ALLOW, 'RBAC: allowed by ClusterRoleBinding "b-view" of ClusterRole "view" to User "bob"'),
    ("role binding of a role", JANE, resource("get", "configmaps", namespace="ns1"),
     Decision.ALLOW, 'RBAC: allowed by RoleBinding "cms/ns1" of Role "cm-reader" to User "jane"'),
    ("role binding of a cluster role to a service account", SA, resource("get", "secrets", namespace="ns1"),
     Decision.ALLOW, 'RBAC: allowed by RoleBinding "secrets/ns1" of ClusterRole "secret-reader" to ServiceAccount "robot/ns1"'),
    ("role binding only in its namespace", SA, resource("get", "secrets", namespace="ns2"), Decision.NO_OPINION, ""),
    ("role binding not at the cluster scope", SA, resource("get", "secrets", namespace=""), Decision.NO_OPINION, ""),
    ("missing role is a resolution error", JANE, resource("delete", "configmaps", namespace="ns1"),
     Decision.NO_OPINION, 'RBAC: role.rbac.authorization.k8s.io "missing" not found'),
    ("nobody", UserInfo("eve", groups=("system:authenticated",)), resource("get", "pods"), Decision.NO_OPINION, ""),
]


@pytest.mark.parametrize("case", DECISION_CASES, ids=[c[0] for c in DECISION_CASES])
def test_rbac_decision_and_reason(index, case):
    _, who, info, decision, reason = case
    verdict = RBACAuthorizer(index).authorize(Attributes(who, info))
    assert (verdict.decision, verdict.reason) == (decision, reason)


def test_index_follows_deletes_and_subject_changes(index):
    authorizer = RBACAuthorizer(index)
    bob = UserInfo("bob")
    assert authorizer.authorize(Attributes(bob, resource("get", "pods"))).decision is Decision.ALLOW
    index.apply("ClusterRoleBinding", "", "b-view", crb("b-view", "view", group("devs")))
    assert authorizer.authorize(Attributes(bob, resource("get", "pods"))).decision is Decision.NO_OPINION
    assert authorizer.authorize(Attributes(JANE, resource("get", "pods"))).decision is Decision.ALLOW
    index.apply("ClusterRoleBinding", "", "a-view", None)
    index.apply("ClusterRoleBinding", "", "b-view", None)
    assert authorizer.authorize(Attributes(JANE, resource("get", "pods"))).decision is Decision.NO_OPINION
    index.apply("ClusterRoleBinding", "", "b-view", crb("b-view", "view", group("devs")))
    index.apply("ClusterRole", "", "view", None)
    verdict = authorizer.authorize(Attributes(JANE, resource("get", "pods")))
    assert verdict.reason == 'RBAC: clusterrole.rbac.authorization.k8s.io "view" not found'


def test_several_resolution_errors_are_aggregated(index):
    index.apply("RoleBinding", "ns1", "dangling2", rb("ns1", "dangling2", "Foo", "x", user("jane")))
    verdict = RBACAuthorizer(index).authorize(Attributes(JANE, resource("delete", "configmaps", namespace="ns1")))
    assert verdict.reason == 'RBAC: [role.rbac.authorization.k8s.io "missing" not found, unsupported role reference kind: "Foo"]'


def test_rules_for_lists_cluster_then_namespace_rules(index):
    rules = RBACAuthorizer(index).rules_for(JANE, "ns1")
    assert [r.resources for r in rules.resource] == [("pods",), ("pods",), ("configmaps",)]
    assert rules.errors == ['role.rbac.authorization.k8s.io "missing" not found'] and not rules.incomplete
