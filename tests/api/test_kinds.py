"""The kind table agrees with itself, with its schemas and with upstream's discovery facts."""

from __future__ import annotations

import pytest

from kubesvc.api.kinds.meta import OBJECT_META
from kubesvc.api.scheme import KindInfo, all_kinds, by_kind, by_resource, stored_kinds
from kubesvc.api.schema import ListOf, MapOf, Obj, child, walk

KINDS = all_kinds()
IDS = [info.group_resource for info in KINDS]

# (group, resource) -> (kind, singular, namespaced, short names, categories, subresources) as kube-apiserver 1.32 serves them
UPSTREAM = {
    ("", "namespaces"): ("Namespace", "namespace", False, ("ns",), (), ("status", "finalize")),
    ("", "services"): ("Service", "service", True, ("svc",), ("all",), ("status",)),
    ("", "pods"): ("Pod", "pod", True, ("po",), ("all",), ("status",)),
    ("", "nodes"): ("Node", "node", False, ("no",), (), ("status",)),
    ("", "endpoints"): ("Endpoints", "endpoints", True, ("ep",), (), ()),
    ("", "events"): ("Event", "event", True, ("ev",), (), ()),
    ("discovery.k8s.io", "endpointslices"): ("EndpointSlice", "endpointslice", True, (), (), ()),
    ("networking.k8s.io", "ipaddresses"): ("IPAddress", "ipaddress", False, (), (), ()),
    ("networking.k8s.io", "servicecidrs"): ("ServiceCIDR", "servicecidr", False, (), (), ("status",)),
    ("coordination.k8s.io", "leases"): ("Lease", "lease", True, (), (), ()),
    ("", "secrets"): ("Secret", "secret", True, (), (), ()),
    ("", "configmaps"): ("ConfigMap", "configmap", True, ("cm",), (), ()),
    ("", "serviceaccounts"): ("ServiceAccount", "serviceaccount", True, ("sa",), (), ()),
    ("rbac.authorization.k8s.io", "roles"): ("Role", "role", True, (), (), ()),
    ("rbac.authorization.k8s.io", "clusterroles"): ("ClusterRole", "clusterrole", False, (), (), ()),
    ("rbac.authorization.k8s.io", "rolebindings"): ("RoleBinding", "rolebinding", True, (), (), ()),
    ("rbac.authorization.k8s.io", "clusterrolebindings"): ("ClusterRoleBinding", "clusterrolebinding", False, (), (), ()),
    ("certificates.k8s.io", "certificatesigningrequests"): ("CertificateSigningRequest", "certificatesigningrequest", False, ("csr",), (),
                                                           ("approval", "status")),
    ("", "replicationcontrollers"): ("ReplicationController", "replicationcontroller", True, ("rc",), ("all",), ("status",)),
    ("apps", "deployments"): ("Deployment", "deployment", True, ("deploy",), ("all",), ("status",)),
    ("apps", "replicasets"): ("ReplicaSet", "replicaset", True, ("rs",), ("all",), ("status",)),
    ("apps", "daemonsets"): ("DaemonSet", "daemonset", True, ("ds",), ("all",), ("status",)),
    ("apps", "controllerrevisions"): ("ControllerRevision", "controllerrevision", True, (), (), ()),
    ("batch", "jobs"): ("Job", "job", True, (), ("all",), ("status",)),
    ("batch", "cronjobs"): ("CronJob", "cronjob", True, ("cj",), ("all",), ("status",)),
    # our own API group (issue 19: the LoadBalancer address pools, after Cilium's CiliumLoadBalancerIPPool)
    ("kubesvc.io", "loadbalancerippools"): ("LoadBalancerIPPool", "loadbalancerippool", False, ("lbippool",), (), ()),
    # create-only: answered, never stored
    ("authentication.k8s.io", "tokenreviews"): ("TokenReview", "tokenreview", False, (), (), ()),
    ("authentication.k8s.io", "selfsubjectreviews"): ("SelfSubjectReview", "selfsubjectreview", False, (), (), ()),
    ("authorization.k8s.io", "subjectaccessreviews"): ("SubjectAccessReview", "subjectaccessreview", False, (), (), ()),
    ("authorization.k8s.io", "selfsubjectaccessreviews"): ("SelfSubjectAccessReview", "selfsubjectaccessreview", False, (), (), ()),
    ("authorization.k8s.io", "localsubjectaccessreviews"): ("LocalSubjectAccessReview", "localsubjectaccessreview", True, (), (), ()),
    ("authorization.k8s.io", "selfsubjectrulesreviews"): ("SelfSubjectRulesReview", "selfsubjectrulesreview", False, (), (), ()),
}
CREATE_ONLY = {"tokenreviews", "selfsubjectreviews", "subjectaccessreviews", "selfsubjectaccessreviews",
               "localsubjectaccessreviews", "selfsubjectrulesreviews"}


def test_the_served_kinds_are_exactly_upstreams():
    assert {(info.group, info.resource) for info in KINDS} == set(UPSTREAM)


@pytest.mark.parametrize("info", KINDS, ids=IDS)
def test_discovery_facts_match_upstream(info: KindInfo):
    assert (info.kind, info.singular, info.namespaced, info.short_names, info.categories,
            info.subresources) == UPSTREAM[(info.group, info.resource)]
    assert info.version == ("v1alpha1" if info.group == "kubesvc.io" else "v1")


def test_only_the_reviews_are_create_only_and_never_stored():
    assert {info.resource for info in KINDS if info.create_only} == CREATE_ONLY
    assert {info.resource for info in stored_kinds()} == {resource for _, resource in UPSTREAM} - CREATE_ONLY


@pytest.mark.parametrize("info", KINDS, ids=IDS)
def test_schema_is_a_top_level_kind_of_this_group_version(info: KindInfo):
    schema = info.schema
    assert schema.gvk == (info.group, info.version, info.kind)
    assert schema.name.endswith("." + info.kind)
    assert schema.fields["apiVersion"].type == schema.fields["kind"].type
    assert schema.fields["metadata"].type is OBJECT_META
    for subresource in info.subresources:
        if subresource == "status":
            assert "status" in schema.fields


@pytest.mark.parametrize("info", KINDS, ids=IDS)
def test_field_labels_name_paths_in_the_schema(info: KindInfo):
    for label, path in info.field_labels.items():
        node = info.schema
        for key in path:
            node = child(node, key)
            assert node is not None, f"{label}: no {key!r} in {'.'.join(path)}"
        assert not isinstance(node, (Obj, ListOf, MapOf)), f"{label} selects a scalar, not {node}"


def test_only_services_and_pods_are_returned_on_delete():
    assert {info.kind for info in KINDS if info.delete_returns_object} == {"Service", "Pod"}


@pytest.mark.parametrize("info", KINDS, ids=[f"{info.api_version}/{info.kind}" for info in KINDS])
def test_lookups_find_every_kind(info):
    assert by_resource(info.group, info.version, info.resource) is info
    assert by_kind(info.api_version, info.kind) is info


def _reachable_structs() -> list[Obj]:
    found: list[Obj] = []
    for info in KINDS:
        walk(info.schema, found.append)
    return found


def test_each_component_name_is_one_struct():
    by_name: dict[str, Obj] = {}
    for obj in _reachable_structs():
        assert by_name.setdefault(obj.name, obj) is obj, f"two different structs are named {obj.name}"


@pytest.mark.parametrize("obj", {id(o): o for o in _reachable_structs()}.values(), ids=lambda obj: obj.name)
def test_struct_markers_are_consistent(obj: Obj):
    for name in obj.required:
        assert name in obj.fields, f"required {name!r} is not a field"
    for name, field in obj.fields.items():
        node = field.type
        if not isinstance(node, ListOf):
            continue
        if node.list_type == "map":
            assert node.map_keys, f"{name}: a map list needs keys"
        keys = set(node.map_keys) | ({node.patch_merge_key} if node.patch_merge_key else set())
        if isinstance(node.item, Obj):
            assert keys <= set(node.item.fields), f"{name}: keys {keys} are not fields of {node.item.name}"
        if node.patch_merge_key:
            assert "merge" in node.patch_strategy, f"{name}: a merge key without the merge strategy"


def test_upstream_merge_keys_that_patches_depend_on():
    def list_at(info_kind: str, *path: str) -> ListOf:
        node = by_kind("v1", info_kind).schema
        for key in path:
            node = child(node, key)
            if isinstance(node, ListOf) and key != path[-1]:
                node = node.item
        assert isinstance(node, ListOf)
        return node

    ports = list_at("Service", "spec", "ports")
    assert (ports.list_type, ports.map_keys, ports.patch_merge_key) == ("map", ("port", "protocol"), "port")
    container_ports = list_at("Pod", "spec", "containers", "ports")
    assert (container_ports.map_keys, container_ports.patch_merge_key) == (("containerPort", "protocol"), "containerPort")
    assert list_at("Pod", "spec", "containers", "env").patch_merge_key == "name"
    assert list_at("Pod", "status", "podIPs").patch_merge_key == "ip"
    assert list_at("Pod", "status", "conditions").patch_merge_key == "type"
    addresses = list_at("Node", "status", "addresses")
    assert (addresses.list_type, addresses.patch_merge_key) == ("atomic", "type")
    owners = list_at("Service", "metadata", "ownerReferences")
    assert (owners.list_type, owners.map_keys, owners.patch_merge_key) == ("map", ("uid",), "uid")
    finalizers = list_at("Service", "metadata", "finalizers")
    assert (finalizers.list_type, finalizers.patch_strategy) == ("set", "merge")
