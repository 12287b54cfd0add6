"""The default RBAC policy, its union-mode reconciliation (upstream reconcile_role_test.go and
reconcile_rolebindings_test.go cases) and ClusterRole aggregation, on plain objects and on a
registry over the memory backend."""

import pytest

from kubesvc.apiserver.auth.aggregation import ClusterRoleAggregator, aggregated_rules
from kubesvc.apiserver.auth.attributes import Attributes, RequestInfo
from kubesvc.apiserver.auth.authorizer import Decision
from kubesvc.apiserver.auth.modes import Authorization, parse_modes
from kubesvc.apiserver.auth.policy import (
    AUTO_UPDATE, cluster_role_bindings, cluster_roles, controller_roles, ensure_bootstrap_policy, reconcile_binding, reconcile_role)
from kubesvc.serving.user import UserInfo
from kubesvc.apiserver.registry.store import ListOptions
from kubesvc.apiserver.server import build_control_plane
from kubesvc.storage.memory import MemoryBackend
from kubesvc.util.clock import FakeClock

GET_PODS = {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}
LIST_PODS = {"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]}


def role(rules=None, labels=None, annotations=None, aggregation=None) -> dict:
    meta = {"name": "r"}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    obj = {"kind": "ClusterRole", "metadata": meta, "rules": rules or []}
    if aggregation is not None:
        obj["aggregationRule"] = {"clusterRoleSelectors": aggregation}
    return obj


EXPECTED = role([GET_PODS], {"kubernetes.io/bootstrapping": "rbac-defaults"}, {AUTO_UPDATE: "true"})

ROLE_CASES = [
    ("missing is created", None, EXPECTED, "create", None),
    ("same is left alone", EXPECTED, EXPECTED, "none", None),
    ("missing rule is added", role([LIST_PODS], EXPECTED["metadata"]["labels"], {AUTO_UPDATE: "true"}), EXPECTED, "update", [LIST_PODS, GET_PODS]),
    ("user rules are kept", role([GET_PODS, LIST_PODS], EXPECTED["metadata"]["labels"], {AUTO_UPDATE: "true"}), EXPECTED, "none", None),
    ("covered rule is not added", role([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}], EXPECTED["metadata"]["labels"],
                                       {AUTO_UPDATE: "true"}), EXPECTED, "none", None),
    ("labels merged, existing values win", role([GET_PODS], {"kubernetes.io/bootstrapping": "mine", "x": "y"}), EXPECTED, "update", [GET_PODS]),
]


@pytest.mark.parametrize("case", ROLE_CASES, ids=[c[0] for c in ROLE_CASES])
def test_reconcile_role(case):
    _, existing, expected, operation, rules = case
    result = reconcile_role(existing, expected)
    assert result.operation == operation
    if rules is not None:
        assert result.obj["rules"] == rules
    if existing is not None and operation == "update":
        meta = result.obj["metadata"]
        assert meta["annotations"][AUTO_UPDATE] == "true"
        assert meta["labels"]["kubernetes.io/bootstrapping"] == existing["metadata"].get("labels", {}).get("kubernetes.io/bootstrapping", "rbac-defaults")


def test_protected_role_is_not_reconciled():
    existing = role([], annotations={AUTO_UPDATE: "false"})
    result = reconcile_role(existing, EXPECTED)
    assert result.protected and result.operation == "update"


def test_aggregation_rule_reconciled():
    selector = {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}
    mine = {"matchLabels": {"example.com/mine": "true"}}
    expected = role(aggregation=[selector])
    assert reconcile_role(role(aggregation=[mine]), expected).obj["aggregationRule"]["clusterRoleSelectors"] == [mine, selector]
    assert "aggregationRule" not in reconcile_role(role(aggregation=[mine]), role()).obj


def binding(role_name="r", subjects=(), annotations=None) -> dict:
    meta = {"name": "b"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
            "subjects": list(subjects)}


ALICE = {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}
DEVS = {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "devs"}


def test_reconcile_binding():
    assert reconcile_binding(None, binding(subjects=[DEVS])).operation == "create"
    added = reconcile_binding(binding(subjects=[ALICE]), binding(subjects=[DEVS]))
    assert (added.operation, added.obj["subjects"]) == ("update", [ALICE, DEVS])
    assert reconcile_binding(binding(role_name="other", subjects=[ALICE]), binding(subjects=[DEVS])).operation == "recreate"
    assert reconcile_binding(binding(subjects=[ALICE], annotations={AUTO_UPDATE: "false"}), binding(subjects=[DEVS])).protected


DEFAULT_ROLE_NAMES = ("cluster-admin", "admin", "edit", "view", "system:basic-user", "system:discovery", "system:public-info-viewer",
                      "system:node", "system:node-proxier", "system:kube-controller-manager", "system:kube-scheduler", "system:monitoring",
                      "system:auth-delegator", "system:kube-dns", "system:node-bootstrapper", "system:service-account-issuer-discovery",
                      "system:certificates.k8s.io:certificatesigningrequests:nodeclient", "system:controller:endpointslice-controller",
                      "system:controller:endpointslicemirroring-controller", "system:controller:endpoint-controller",
                      "system:controller:generic-garbage-collector", "system:controller:namespace-controller",
                      "system:controller:service-account-controller", "system:controller:root-ca-cert-publisher",
                      "system:controller:clusterrole-aggregation-controller")


@pytest.mark.parametrize("wanted", DEFAULT_ROLE_NAMES, ids=DEFAULT_ROLE_NAMES)
def test_default_policy_names(wanted):
    assert wanted in {r.name for r in cluster_roles() + controller_roles()}
    bindings = {b.name: b for b in cluster_role_bindings()}
    assert bindings["system:public-info-viewer"].subjects[1]["name"] == "system:unauthenticated"
    assert bindings["system:node"].subjects == ()


def test_aggregated_rules():
    roles = [
        {"metadata": {"name": "view", "labels": {"agg-edit": "true"}}, "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg-view": "true"}}]},
         "rules": []},
        {"metadata": {"name": "b-view", "labels": {"agg-view": "true"}}, "rules": [GET_PODS, LIST_PODS]},
        {"metadata": {"name": "a-view", "labels": {"agg-view": "true"}}, "rules": [LIST_PODS]},
        {"metadata": {"name": "unrelated"}, "rules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]},
    ]
    assert aggregated_rules(roles[0], roles) == [LIST_PODS, GET_PODS]
    assert aggregated_rules(roles[1], roles) is None


@pytest.fixture
async def control_plane():
    authorization = Authorization(parse_modes("Node,RBAC"))
    registry, _ = await build_control_plane(MemoryBackend(), FakeClock(), ["10.96.0.0/16"], authorization=authorization)
    return registry, authorization


async def test_bootstrap_policy_on_a_registry(control_plane):
    registry, authorization = control_plane
    roles = registry.store("rbac.authorization.k8s.io", "clusterroles")
    view = await roles.get(None, "view")
    assert {"verbs": ["get", "list", "watch"], "apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"]} in view["rules"]
    admin = await roles.get(None, "admin")
    assert len(admin["rules"]) > len(view["rules"])  # admin gathers edit, which gathers view
    assert view["metadata"]["labels"]["kubernetes.io/bootstrapping"] == "rbac-defaults"
    assert await registry.store("rbac.authorization.k8s.io", "roles").get("kube-system", "extension-apiserver-authentication-reader")
    anonymous = UserInfo("system:anonymous", groups=("system:unauthenticated",))
    chain = authorization.authorizer
    assert chain.authorize(Attributes(anonymous, RequestInfo(False, "/version", "get"))).decision is Decision.ALLOW
    assert chain.authorize(Attributes(anonymous, RequestInfo(False, "/apis", "get"))).decision is Decision.NO_OPINION
    proxy = UserInfo("system:kube-proxy", groups=("system:authenticated",))
    watch_slices = RequestInfo(True, "", "watch", "discovery.k8s.io", "v1", "", "endpointslices")
    assert chain.authorize(Attributes(proxy, watch_slices)).reason == (
        'RBAC: allowed by ClusterRoleBinding "system:node-proxier" of ClusterRole "system:node-proxier" to User "system:kube-proxy"')


async def test_reconcile_keeps_user_changes_and_restores_defaults(control_plane):
    registry, authorization = control_plane
    roles = registry.store("rbac.authorization.k8s.io", "clusterroles")
    extra = {"verbs": ["get"], "apiGroups": [""], "resources": ["nodes"]}
    await roles.guaranteed_update(None, "system:kube-dns", lambda r: {**r, "rules": [extra]}, field_manager="test")
    await roles.guaranteed_update(None, "system:heapster", lambda r: {**r, "metadata": {**r["metadata"], "annotations": {AUTO_UPDATE: "false"}},
                                                                "rules": []}, field_manager="test")
    await ensure_bootstrap_policy(registry)  # the next start
    dns = (await roles.get(None, "system:kube-dns"))["rules"]
    assert dns[0] == extra and {"verbs": ["list"], "apiGroups": [""], "resources": ["endpoints"]} in dns
    assert (await roles.get(None, "system:heapster"))["rules"] == []


async def test_aggregator_follows_labelled_roles(control_plane):
    registry, authorization = control_plane
    roles = registry.store("rbac.authorization.k8s.io", "clusterroles")
    crd_rule = {"verbs": ["get"], "apiGroups": ["example.com"], "resources": ["widgets"]}
    await roles.create(None, {"metadata": {"name": "widgets-view", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
                        "rules": [crd_rule]}, field_manager="test")
    assert await ClusterRoleAggregator(registry).sync() == 3  # view, then edit, then admin
    for name in ("view", "edit", "admin"):
        assert crd_rule in (await roles.get(None, name))["rules"]
    await roles.delete(None, "widgets-view", {})
    await ClusterRoleAggregator(registry).sync()
    assert all(crd_rule not in r.get("rules", []) for r in (await roles.list(None, ListOptions()))[0])


def test_parse_modes():
    assert parse_modes("Node,RBAC") == ["Node", "RBAC"]
    assert parse_modes("AlwaysAllow") == ["AlwaysAllow"]
    with pytest.raises(ValueError, match='authorization-mode "Foo" is not a valid mode'):
        parse_modes("RBAC,Foo")
    with pytest.raises(ValueError, match=r'authorization-mode \["RBAC" "RBAC"\] has mode specified more than once'):
        parse_modes("RBAC,RBAC")
