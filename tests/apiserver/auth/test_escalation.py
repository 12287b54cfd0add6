"""Escalation prevention, on plain objects: rule covering (upstream policy_comparator_test
cases), compaction and the refusal text, and the guard's bypasses (system:masters,
``escalate``, ``bind``, GC-only updates, aggregationRule)."""

import pytest

from kubesvc.api.errors import StatusError
from kubesvc.apiserver.auth.attributes import RequestInfo
from kubesvc.apiserver.auth.authorizer import PrivilegedGroupAuthorizer, Union
from kubesvc.apiserver.auth.context import RequestContext
from kubesvc.apiserver.auth.escalation import EscalationGuard, escalation_message, only_gc_fields_changed
from kubesvc.apiserver.auth.rbac import PolicyIndex, RBACAuthorizer
from kubesvc.apiserver.auth.rules import PolicyRule, compact_rules, compact_string, covers
from kubesvc.serving.user import UserInfo


def rule(verbs, groups=(), resources=(), names=(), urls=()) -> PolicyRule:
    return PolicyRule(tuple(verbs), tuple(groups), tuple(resources), tuple(names), tuple(urls))


COVER_CASES = [
    ("exact", [rule(["get"], [""], ["pods"])], [rule(["get"], [""], ["pods"])], True),
    ("star verb", [rule(["*"], [""], ["pods"])], [rule(["get", "delete"], [""], ["pods"])], True),
    ("missing verb", [rule(["get"], [""], ["pods"])], [rule(["get", "list"], [""], ["pods"])], False),
    ("star group", [rule(["get"], ["*"], ["pods"])], [rule(["get"], ["apps", ""], ["pods"])], True),
    ("star resource", [rule(["get"], [""], ["*"])], [rule(["get"], [""], ["pods", "pods/log"])], True),
    ("star subresource", [rule(["get"], [""], ["*/log"])], [rule(["get"], [""], ["pods/log"])], True),
    ("resource does not cover its subresource", [rule(["get"], [""], ["pods"])], [rule(["get"], [""], ["pods/log"])], False),
    ("split across owner rules", [rule(["get"], [""], ["pods"]), rule(["list"], [""], ["pods"])], [rule(["get", "list"], [""], ["pods"])], True),
    ("names owned", [rule(["get"], [""], ["secrets"], ["a", "b"])], [rule(["get"], [""], ["secrets"], ["a"])], True),
    ("names not owned", [rule(["get"], [""], ["secrets"], ["a"])], [rule(["get"], [""], ["secrets"], ["b"])], False),
    ("any name needs an unnamed owner", [rule(["get"], [""], ["secrets"], ["a"])], [rule(["get"], [""], ["secrets"])], False),
    ("unnamed owner covers names", [rule(["get"], [""], ["secrets"])], [rule(["get"], [""], ["secrets"], ["x"])], True),
    ("url prefix", [rule(["get"], urls=["/apis/*"])], [rule(["get"], urls=["/apis/apps"])], True),
    ("url other", [rule(["get"], urls=["/healthz"])], [rule(["get"], urls=["/metrics"])], False),
    ("nothing wanted", [], [], True),
]


@pytest.mark.parametrize("case", COVER_CASES, ids=[c[0] for c in COVER_CASES])
def test_covers(case):
    _, owner, servant, covered = case
    assert covers(owner, servant)[0] is covered


def test_missing_atoms_are_compacted_and_printed_as_upstream():
    held = [rule(["get"], [""], ["pods"])]
    wanted = (rule(["get", "list", "watch"], ["", "apps"], ["pods", "deployments"]), rule(["get"], urls=["/metrics", "/logs"]),
              rule(["get"], [""], ["secrets"], ["a", "b"]))
    user = UserInfo("bob", groups=("g1", "system:authenticated"))
    message = escalation_message(user, held, [], wanted)
    assert message == (
        'user "bob" (groups=["g1" "system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n'
        '{APIGroups:[""], Resources:["deployments"], Verbs:["get" "list" "watch"]}\n'
        '{APIGroups:[""], Resources:["pods"], Verbs:["list" "watch"]}\n'
        '{APIGroups:[""], Resources:["secrets"], ResourceNames:["a"], Verbs:["get"]}\n'
        '{APIGroups:[""], Resources:["secrets"], ResourceNames:["b"], Verbs:["get"]}\n'
        '{APIGroups:["apps"], Resources:["deployments"], Verbs:["get" "list" "watch"]}\n'
        '{APIGroups:["apps"], Resources:["pods"], Verbs:["get" "list" "watch"]}\n'
        '{NonResourceURLs:["/logs"], Verbs:["get"]}\n'
        '{NonResourceURLs:["/metrics"], Verbs:["get"]}')
    assert escalation_message(user, held, ['role.rbac.authorization.k8s.io "x" not found'], (rule(["list"], [""], ["pods"]),)).endswith(
        '; resolution errors: [role.rbac.authorization.k8s.io "x" not found]')
    assert escalation_message(user, held, [], (rule(["get"], [""], ["pods"]),)) is None


def test_compaction_merges_simple_rules_only():
    compacted = compact_rules([rule(["get"], [""], ["pods"]), rule(["list", "get"], [""], ["pods"]), rule(["get"], urls=["/x"])])
    assert sorted(compact_string(r) for r in compacted) == ['{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}',
                                                          '{NonResourceURLs:["/x"], Verbs:["get"]}']


def test_only_gc_fields_changed():
    old = {"metadata": {"name": "r", "finalizers": ["a"]}, "rules": []}
    assert only_gc_fields_changed({"metadata": {"name": "r", "ownerReferences": [{"uid": "1"}]}, "rules": []}, old)
    assert not only_gc_fields_changed({"metadata": {"name": "r"}, "rules": [{"verbs": ["get"]}]}, old)
    assert not only_gc_fields_changed({"metadata": {"name": "r"}, "rules": []}, None)


# ---- the guard -------------------------------------------------------------------------------


@pytest.fixture
def guard():
    index = PolicyIndex()
    index.apply("ClusterRole", "", "pods", {"rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]})
    index.apply("ClusterRole", "", "everything", {"rules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
                                                            {"verbs": ["*"], "nonResourceURLs": ["*"]}]})
    index.apply("ClusterRole", "", "escalator", {"rules": [{"verbs": ["escalate"], "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"]}]})
    index.apply("ClusterRole", "", "binder", {"rules": [{"verbs": ["bind"], "apiGroups": ["rbac.authorization.k8s.io"],
                                                          "resources": ["clusterroles"], "resourceNames": ["everything"]}]})
    index.apply("RoleBinding", "ns", "bob-pods", {"roleRef": {"kind": "ClusterRole", "name": "pods"}, "subjects": [{"kind": "User", "name": "bob"}]})
    index.apply("RoleBinding", "ns", "esc", {"roleRef": {"kind": "ClusterRole", "name": "escalator"}, "subjects": [{"kind": "User", "name": "esc"}]})
    index.apply("RoleBinding", "ns", "bind", {"roleRef": {"kind": "ClusterRole", "name": "binder"}, "subjects": [{"kind": "User", "name": "binder"}]})
    index.apply("ClusterRoleBinding", "", "root", {"roleRef": {"kind": "ClusterRole", "name": "everything"}, "subjects": [{"kind": "User", "name": "root"}]})
    roles = {("ClusterRole", "pods"): {"rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]},
             ("ClusterRole", "everything"): {"rules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]}}

    async def get_role(kind, namespace, name):
        if (kind, name) not in roles:
            raise StatusError(404, "NotFound", f'{kind.lower()}s.rbac.authorization.k8s.io "{name}" not found')
        return roles[(kind, name)]

    return EscalationGuard(Union([PrivilegedGroupAuthorizer(), RBACAuthorizer(index)]), index, get_role)


def request(user: str, resource: str, namespace: str = "ns", name: str = "", groups=()) -> RequestContext:
    return RequestContext(UserInfo(user, groups=tuple(groups)), RequestInfo(True, "", "create", "rbac.authorization.k8s.io", "v1", namespace, resource, "", name))


def role(name: str, *rules: dict, aggregation: bool = False) -> dict:
    obj = {"metadata": {"name": name}, "rules": list(rules)}
    if aggregation:
        obj["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]}
    return obj


def binding(name: str, role_kind: str, role_name: str) -> dict:
    return {"metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
            "subjects": [{"kind": "User", "name": "someone"}]}


PODS_GET = {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}
SECRETS_GET = {"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}

GUARD_CASES = [
    # (id, check, request, new, old, refused-with or None)
    ("role within held rules", "role", request("bob", "roles"), role("r", PODS_GET), None, None),
    ("role beyond held rules", "role", request("bob", "roles"), role("r", SECRETS_GET), None, "attempting to grant RBAC permissions"),
    ("held rules are the namespace's", "role", request("bob", "roles", namespace="other"), role("r", PODS_GET), None, "not currently held"),
    ("masters skip the check", "role", request("m", "roles", groups=["system:masters"]), role("r", SECRETS_GET), None, None),
    ("escalate verb skips the check", "role", request("esc", "roles"), role("r", SECRETS_GET), None, None),
    ("internal writes are not checked", "role", None, role("r", SECRETS_GET), None, None),
    ("gc-only update", "role", request("bob", "roles"), {**role("r", SECRETS_GET), "metadata": {"name": "r", "finalizers": ["x"]}},
     role("r", SECRETS_GET), None),
    ("aggregation needs everything", "clusterrole", request("bob", "clusterroles", namespace=""), role("c", aggregation=True), None,
     "must have cluster-admin privileges to use the aggregationRule"),
    ("aggregation by root", "clusterrole", request("root", "clusterroles", namespace=""), role("c", aggregation=True), None, None),
    ("removing aggregation needs everything too", "clusterrole", request("bob", "clusterroles", namespace=""), role("c"),
     role("c", aggregation=True), "must have cluster-admin privileges"),
    ("binding a role held", "binding", request("bob", "rolebindings"), binding("b", "ClusterRole", "pods"), None, None),
    ("binding a role not held", "binding", request("bob", "rolebindings"), binding("b", "ClusterRole", "everything"), None,
     'rolebindings.rbac.authorization.k8s.io "b" is forbidden: user "bob" (groups=[]) is attempting to grant'),
    ("bind verb on the role", "binding", request("binder", "rolebindings"), binding("b", "ClusterRole", "everything"), None, None),
    ("bind verb is per role", "binding", request("binder", "rolebindings"), binding("b", "ClusterRole", "pods"), None, "not currently held"),
    ("missing role is a 404", "binding", request("bob", "rolebindings"), binding("b", "ClusterRole", "nope"), None, "not found"),
    ("bad roleRef is left to validation", "binding", request("bob", "rolebindings"), binding("b", "Nonsense", "x"), None, None),
]


@pytest.mark.parametrize("case", GUARD_CASES, ids=[c[0] for c in GUARD_CASES])
async def test_guard(guard, case):
    _, check, ctx, new, old, refused = case
    resource = {"role": "roles", "clusterrole": "clusterroles", "binding": "rolebindings"}[check]
    call = guard.check_binding if check == "binding" else guard.check_role
    if refused is None:
        await call(ctx, resource, new, old)
        return
    with pytest.raises(StatusError) as error:
        await call(ctx, resource, new, old)
    assert error.value.code in (403, 404)
    assert refused in error.value.message
