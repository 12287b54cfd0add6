"""Table-driven tests for kubesvc.api.managedfields: field sets and fieldsV1, server-side apply
(merge, prune, conflicts, force, no-op) and Update tracking, against a hand-built Service schema
and the shapes recorded in api-compat.md (F8b, §5)."""

from __future__ import annotations

import copy

import pytest

from kubesvc.api.errors import StatusError
from kubesvc.api.managedfields import (
    ApplyConflict,
    FieldSet,
    apply,
    fields_of,
    from_fields_v1,
    to_fields_v1,
    track_update,
    validate_managed_fields,
)
from kubesvc.api.schema import INT32, INT_OR_STRING, STRING, STRING_MAP, Any_, F, ListOf, Obj

PORT = Obj("ServicePort", {"name": F(STRING), "port": F(INT32), "protocol": F(STRING),
                           "targetPort": F(INT_OR_STRING)})
SPEC = Obj("ServiceSpec", {
    "ports": F(ListOf(PORT, "map", ("port", "protocol"))),
    "selector": F(STRING_MAP),
    "clusterIP": F(STRING),
    "clusterIPs": F(ListOf(STRING)),
    "type": F(STRING),
})
META = Obj("ObjectMeta", {
    **{name: F(STRING) for name in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")},
    "labels": F(STRING_MAP),
    "annotations": F(STRING_MAP),
    "finalizers": F(ListOf(STRING, "set")),
    "managedFields": F(ListOf(Any_())),
})
SERVICE = Obj("Service", {"apiVersion": F(STRING), "kind": F(STRING), "metadata": F(META), "spec": F(SPEC),
                          "status": F(Any_())})

T1, T2, T3 = "2024-05-01T10:00:00Z", "2024-05-01T11:00:00Z", "2024-05-01T12:00:00Z"
PORT80 = 'k:{"port":80,"protocol":"TCP"}'
PORT8080 = 'k:{"port":8080,"protocol":"TCP"}'


def svc(spec: dict | None = None, **meta) -> dict:
    """A Service manifest named web (``spec: {}`` would be a field of its own)."""
    obj = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", **meta}}
    return obj if spec is None else {**obj, "spec": spec}


def ssa(live, config, manager="kubectl", force=False, now=T1):
    return apply(live, config, manager=manager, force=force, schema=SERVICE, api_version="v1", now=now)


def update(old, new, manager, now=T1, subresource=""):
    new = copy.deepcopy(new)
    track_update(old, new, manager=manager, schema=SERVICE, api_version="v1", now=now, subresource=subresource)
    return new


def owners(obj) -> dict:
    """managedFields as {(manager, operation): fieldsV1}."""
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in obj["metadata"].get("managedFields", [])}


def without_managed_fields(obj) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"].pop("managedFields", None)
    return obj


CSA_MANIFEST = svc({"ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
                    "selector": {"app": "web"}, "type": "ClusterIP"},
                   annotations={"kubectl.kubernetes.io/last-applied-configuration": "{}"})
CSA_CREATED = update(None, CSA_MANIFEST, "kubectl-client-side-apply")


# ---- field sets and fieldsV1 -----------------------------------------------------------------

FIELDS_CASES = [
    pytest.param(  # api-compat F8b, byte for byte (the protocol key is defaulted, not owned)
        svc({"ports": [{"port": 80}]}, labels={"app": "web"}),
        {"f:metadata": {"f:labels": {"f:app": {}}},
         "f:spec": {"f:ports": {PORT80: {".": {}, "f:port": {}}}}},
        id="f8b-shape"),
    pytest.param(
        svc({"clusterIPs": ["10.0.0.1", "10.0.0.2"], "selector": {"b": "2", "a": "1"}}),
        {"f:spec": {"f:clusterIPs": {}, "f:selector": {"f:a": {}, "f:b": {}}}},
        id="atomic-list-is-a-leaf-granular-map-per-key"),
    pytest.param(
        svc(finalizers=["b", "a"]),
        {"f:metadata": {"f:finalizers": {'v:"a"': {}, 'v:"b"': {}}}},
        id="set-items-by-value"),
    pytest.param(
        svc({"ports": [{"port": 8080, "protocol": "UDP"}, {"port": 80, "name": "http"}]}),
        {"f:spec": {"f:ports": {PORT80: {".": {}, "f:name": {}, "f:port": {}},
                                'k:{"port":8080,"protocol":"UDP"}': {".": {}, "f:port": {}, "f:protocol": {}}}}},
        id="list-map-items-sorted-by-key"),
    pytest.param(
        svc({"selector": {}}, uid="u", resourceVersion="7", managedFields=[]),
        {"f:spec": {"f:selector": {}}},
        id="system-fields-untracked-empty-map-owned"),
]


@pytest.mark.parametrize("obj, fields_v1", FIELDS_CASES)
def test_fields_of_serialises_as_upstream(obj, fields_v1):
    fs = fields_of(obj, SERVICE)
    assert to_fields_v1(fs) == fields_v1
    assert list(to_fields_v1(fs)) == list(fields_v1)  # key order, too
    assert from_fields_v1(fields_v1) == fs


@pytest.mark.parametrize("fields_v1, canonical", [
    pytest.param({"f:spec": {"f:ports": {'k:{"protocol":"TCP","port":80}': {}}}},
                 {"f:spec": {"f:ports": {PORT80: {}}}}, id="key-fields-sorted"),
    pytest.param({"f:a": {"f:b": {}, ".": {}}}, {"f:a": {".": {}, "f:b": {}}}, id="dot-first"),
    pytest.param({"x:future": {}, "f:a": {}}, {"f:a": {}}, id="unknown-element-type-dropped"),
    pytest.param({"i:1": {}, 'v:"x"': {}, "f:z": {}, "v:true": {}, "v:2": {}, PORT80: {}},
                 {"f:z": {}, PORT80: {}, "v:2": {}, 'v:"x"': {}, "v:true": {}, "i:1": {}}, id="element-order"),
])
def test_fields_v1_round_trip_is_canonical(fields_v1, canonical):
    out = to_fields_v1(from_fields_v1(fields_v1))
    assert out == canonical and list(out) == list(canonical)


@pytest.mark.parametrize("fields_v1", [
    pytest.param({"f:a": []}, id="node-not-object"),
    pytest.param({"fa": {}}, id="missing-colon"),
    pytest.param({"k:[1]": {}}, id="key-not-object"),
    pytest.param({"i:x": {}}, id="bad-index"),
])
def test_from_fields_v1_rejects_malformed(fields_v1):
    with pytest.raises(ValueError):
        from_fields_v1(fields_v1)


# ---- apply -----------------------------------------------------------------------------------

def steps(*applies):
    """Apply each (manager, config[, force]) in turn, starting from nothing."""
    obj = None
    for n, (manager, config, *force) in enumerate(applies):
        obj = ssa(obj, config, manager, force=bool(force and force[0]), now=[T1, T2, T3][n])
    return obj


APPLY_CASES = [
    pytest.param(
        steps(("kubectl", svc({"ports": [{"name": "http", "port": 80}], "selector": {"app": "web"}},
                              labels={"app": "web"}))),
        svc({"ports": [{"name": "http", "port": 80}], "selector": {"app": "web"}}, labels={"app": "web"}),
        {("kubectl", "Apply"): {"f:metadata": {"f:labels": {"f:app": {}}},
                                "f:spec": {"f:ports": {PORT80: {".": {}, "f:name": {}, "f:port": {}}},
                                           "f:selector": {"f:app": {}}}}},
        id="create"),
    pytest.param(  # api-compat F8b: the fake kept both ports
        steps(("kubectl", svc({"ports": [{"name": "http", "port": 80}]})),
              ("kubectl", svc({"ports": [{"name": "http", "port": 8080}]}))),
        svc({"ports": [{"name": "http", "port": 8080}]}),
        {("kubectl", "Apply"): {"f:spec": {"f:ports": {PORT8080: {".": {}, "f:name": {}, "f:port": {}}}}}},
        id="edited-port-replaces-old-port"),
    pytest.param(
        steps(("a", svc({"ports": [{"port": 80}]}, labels={"a": "1"})),
              ("b", svc(labels={"b": "2"}))),
        svc({"ports": [{"port": 80}]}, labels={"a": "1", "b": "2"}),
        {("a", "Apply"): {"f:metadata": {"f:labels": {"f:a": {}}},
                          "f:spec": {"f:ports": {PORT80: {".": {}, "f:port": {}}}}},
         ("b", "Apply"): {"f:metadata": {"f:labels": {"f:b": {}}}}},
        id="two-managers-disjoint-fields-both-kept"),
    pytest.param(
        steps(("a", svc(labels={"shared": "x", "mine": "y"})),
              ("b", svc(labels={"shared": "x"})),
              ("a", svc())),
        svc(labels={"shared": "x"}),
        {("b", "Apply"): {"f:metadata": {"f:labels": {"f:shared": {}}}}},
        id="dropped-field-kept-while-another-applier-owns-it"),
    pytest.param(
        steps(("a", svc(finalizers=["x"])), ("b", svc(finalizers=["y"]))),
        svc(finalizers=["x", "y"]),
        {("a", "Apply"): {"f:metadata": {"f:finalizers": {'v:"x"': {}}}},
         ("b", "Apply"): {"f:metadata": {"f:finalizers": {'v:"y"': {}}}}},
        id="set-merged-by-value"),
    pytest.param(
        steps(("a", svc({"clusterIPs": ["10.0.0.1", "10.0.0.2"]})), ("a", svc({"clusterIPs": ["10.0.0.9"]}))),
        svc({"clusterIPs": ["10.0.0.9"]}),
        {("a", "Apply"): {"f:spec": {"f:clusterIPs": {}}}},
        id="atomic-list-replaced"),
    pytest.param(
        steps(("a", svc({"type": "ClusterIP"})), ("b", svc({"type": "NodePort"}), True)),
        svc({"type": "NodePort"}),
        {("b", "Apply"): {"f:spec": {"f:type": {}}}},
        id="force-transfers-ownership"),
    pytest.param(
        steps(("a", svc({"ports": [{"port": 80}, {"port": 443}]})),
              ("b", svc({"ports": [{"port": 8080}, {"port": 80}]}))),
        svc({"ports": [{"port": 8080}, {"port": 80}, {"port": 443}]}),  # traced through merge.go visitListItems
        {("a", "Apply"): {"f:spec": {"f:ports": {PORT80: {".": {}, "f:port": {}},
                                                 'k:{"port":443,"protocol":"TCP"}': {".": {}, "f:port": {}}}}},
         ("b", "Apply"): {"f:spec": {"f:ports": {PORT80: {".": {}, "f:port": {}},
                                                 PORT8080: {".": {}, "f:port": {}}}}}},
        id="merged-list-order"),
]


@pytest.mark.parametrize("result, expected, expected_owners", APPLY_CASES)
def test_apply(result, expected, expected_owners):
    assert without_managed_fields(result) == expected
    assert owners(result) == expected_owners


def test_apply_records_upstream_entry_shape():
    out = ssa(None, svc(labels={"app": "web"}))
    assert out["metadata"]["managedFields"] == [{
        "manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "time": T1, "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}}]


@pytest.mark.parametrize("live", [
    pytest.param(steps(("kubectl", svc({"ports": [{"port": 80}]}, labels={"app": "web"}))), id="applied"),
    pytest.param(steps(("other", svc(labels={"team": "x"})),
                       ("kubectl", svc({"ports": [{"port": 80}]}, labels={"app": "web"}))), id="two-managers"),
])
def test_reapplying_the_same_config_changes_nothing(live):
    config = svc({"ports": [{"port": 80}]}, labels={"app": "web"})
    assert ssa(live, config, now=T3) == live


@pytest.mark.parametrize("live, manager, config, times", [
    pytest.param(steps(("a", svc({"type": "ClusterIP"}))), "a", svc({"type": "NodePort"}), {"a": T3},
                 id="value-change-moves-time"),
    pytest.param(steps(("a", svc(labels={"x": "1"}, annotations={"y": "2"}))), "a", svc(labels={"x": "1"}),
                 {"a": T3}, id="dropping-a-field-moves-time"),
    pytest.param(steps(("a", svc(labels={"x": "1"}))), "b", svc(labels={"x": "1"}), {"a": T1, "b": None},
                 id="first-apply-changing-nothing-has-no-time"),  # upstream kubernetes#127938
])
def test_apply_time_moves_only_when_the_object_changes(live, manager, config, times):
    out = ssa(live, config, manager=manager, now=T3)
    assert {e["manager"]: e.get("time") for e in out["metadata"]["managedFields"]} == times


def test_apply_adopts_untracked_fields_as_before_first_apply():
    live = svc({"type": "ClusterIP"}, uid="u1")
    with pytest.raises(ApplyConflict) as err:
        ssa(live, svc({"type": "NodePort"}))
    assert err.value.conflicts == [('"before-first-apply" using v1', ".spec.type")]


def test_apply_ignores_status_and_keeps_the_live_one():
    live = {**steps(("a", svc({"type": "ClusterIP"}))), "status": {"loadBalancer": {}}}
    out = ssa(live, {**svc({"type": "NodePort"}), "status": {"bogus": True}}, manager="a", now=T2)
    assert out["status"] == {"loadBalancer": {}}
    assert out["spec"] == {"type": "NodePort"}


def test_apply_rejects_managed_fields_in_config():
    with pytest.raises(StatusError) as err:
        ssa(None, svc(managedFields=[]))
    assert (err.value.code, err.value.message) == (400, "metadata.managedFields must be nil")


# ---- conflicts -------------------------------------------------------------------------------

SECTION5_STATUS = {  # api-compat §5, "409 SSA conflict"
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
    "message": 'Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: '
               '.spec.ports[port=80,protocol="TCP"].targetPort',
    "reason": "Conflict",
    "details": {"causes": [{"reason": "FieldManagerConflict",
                            "message": 'conflict with "kubectl-client-side-apply" using v1',
                            "field": '.spec.ports[port=80,protocol="TCP"].targetPort'}]},
    "code": 409,
}

CONFLICT_CASES = [
    pytest.param(
        CSA_CREATED, svc({"ports": [{"name": "http", "port": 80, "targetPort": 9090}], "selector": {"app": "web"}}),
        SECTION5_STATUS["message"],
        [('"kubectl-client-side-apply" using v1', '.spec.ports[port=80,protocol="TCP"].targetPort')],
        id="client-side-apply-owns-targetPort"),
    pytest.param(
        steps(("other", svc({"selector": {"app": "web"}}))), svc({"selector": {"app": "api"}}),
        'Apply failed with 1 conflict: conflict with "other": .spec.selector.app',
        [('"other"', ".spec.selector.app")],
        id="other-applier"),
    pytest.param(
        update(None, svc({"type": "ClusterIP", "clusterIP": "10.0.0.1"}), "m"),
        svc({"type": "NodePort", "clusterIP": "10.0.0.2"}),
        'Apply failed with 2 conflicts: conflicts with "m" using v1:\n- .spec.clusterIP\n- .spec.type',
        [('"m" using v1', ".spec.clusterIP"), ('"m" using v1', ".spec.type")],
        id="plural"),
]


@pytest.mark.parametrize("live, config, message, conflicts", CONFLICT_CASES)
def test_apply_conflicts(live, config, message, conflicts):
    with pytest.raises(ApplyConflict) as err:
        ssa(live, config)
    assert str(err.value) == message
    assert err.value.conflicts == conflicts
    assert err.value.status()["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": f"conflict with {m}", "field": p} for m, p in conflicts]


def test_conflict_status_is_the_upstream_body():
    with pytest.raises(ApplyConflict) as err:
        ssa(CSA_CREATED, svc({"ports": [{"port": 80, "targetPort": 9090}]}))
    assert err.value.status() == SECTION5_STATUS


def test_forced_apply_takes_the_field_from_the_updater():
    out = ssa(CSA_CREATED, svc({"ports": [{"port": 80, "targetPort": 9090}]}), force=True, now=T2)
    assert out["spec"]["ports"] == [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 9090}]
    csa = owners(out)[("kubectl-client-side-apply", "Update")]
    assert csa["f:spec"]["f:ports"][PORT80] == {".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}}
    assert owners(out)[("kubectl", "Apply")] == {
        "f:spec": {"f:ports": {PORT80: {".": {}, "f:port": {}, "f:targetPort": {}}}}}


# ---- updates ---------------------------------------------------------------------------------

UPDATE_CASES = [
    pytest.param(  # what kube-apiserver records for kubectl create / client-side apply
        None, CSA_MANIFEST, "kubectl-client-side-apply",
        {("kubectl-client-side-apply", "Update"): {
            "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
            "f:spec": {"f:ports": {".": {}, PORT80: {".": {}, "f:name": {}, "f:port": {}, "f:protocol": {},
                                                     "f:targetPort": {}}},
                       "f:selector": {".": {}, "f:app": {}}, "f:type": {}}}},
        id="create"),
    pytest.param(
        CSA_CREATED, {**CSA_CREATED, "spec": {**CSA_CREATED["spec"], "type": "NodePort", "selector": {}}},
        "kubectl-edit",
        {("kubectl-client-side-apply", "Update"): {
            "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
            "f:spec": {"f:ports": {".": {}, PORT80: {".": {}, "f:name": {}, "f:port": {}, "f:protocol": {},
                                                     "f:targetPort": {}}},
                       "f:selector": {}}},
         ("kubectl-edit", "Update"): {"f:spec": {"f:type": {}}}},
        id="changed-and-removed-fields-leave-their-owner"),
    pytest.param(
        without_managed_fields(CSA_CREATED) | {"metadata": {"name": "web", "uid": "u1"}},
        {**CSA_CREATED, "metadata": {"name": "web", "uid": "u1"}, "spec": {"type": "NodePort"}}, "kubectl-edit",
        {},
        id="untracked-object-stays-untracked"),
    pytest.param(
        CSA_CREATED, {**CSA_CREATED, "metadata": {**CSA_CREATED["metadata"], "managedFields": []},
                      "spec": {"type": "NodePort"}}, "kubectl-edit",
        {},
        id="empty-list-resets"),
    pytest.param(
        CSA_CREATED, {**CSA_CREATED, "metadata": {**CSA_CREATED["metadata"], "managedFields": [{"operation": "Bogus"}]},
                      "spec": {**CSA_CREATED["spec"], "type": "NodePort"}}, "kubectl-edit",
        {("kubectl-client-side-apply", "Update"): {
            "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
            "f:spec": {"f:ports": {".": {}, PORT80: {".": {}, "f:name": {}, "f:port": {}, "f:protocol": {},
                                                     "f:targetPort": {}}},
                       "f:selector": {".": {}, "f:app": {}}}},
         ("kubectl-edit", "Update"): {"f:spec": {"f:type": {}}}},
        id="invalid-request-managed-fields-fall-back-to-live"),
    pytest.param(
        CSA_CREATED, {**CSA_CREATED, "metadata": {**CSA_CREATED["metadata"], "managedFields": [
            *CSA_CREATED["metadata"]["managedFields"],
            {"manager": "empty", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {}}]}},
        "kubectl-edit",
        owners(CSA_CREATED),
        id="empty-entries-dropped"),
]


@pytest.mark.parametrize("old, new, manager, expected_owners", UPDATE_CASES)
def test_track_update(old, new, manager, expected_owners):
    assert owners(update(old, new, manager, now=T2)) == expected_owners


@pytest.mark.parametrize("new", [
    pytest.param(without_managed_fields(CSA_CREATED), id="request-without-managed-fields"),
    pytest.param(copy.deepcopy(CSA_CREATED), id="request-echoing-them"),
])
def test_noop_update_leaves_managed_fields_identical(new):
    out = update(CSA_CREATED, new, "kubectl-edit", now=T2)
    assert out["metadata"]["managedFields"] == CSA_CREATED["metadata"]["managedFields"]


def test_update_replacing_managed_fields_is_honoured():
    """kubectl's client-side -> server-side apply migration JSON-patches managedFields (§3.1)."""
    migrated = [{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "time": T1,
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:type": {}}}}]
    new = {**CSA_CREATED, "metadata": {**CSA_CREATED["metadata"], "managedFields": migrated}}
    assert update(CSA_CREATED, new, "kubectl", now=T2)["metadata"]["managedFields"] == migrated


def test_status_update_is_recorded_with_its_subresource():
    old = {**CSA_CREATED, "status": {"loadBalancer": {}}}
    new = {**old, "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}
    entry = update(old, new, "controller", now=T2, subresource="status")["metadata"]["managedFields"][-1]
    assert entry == {"manager": "controller", "operation": "Update", "apiVersion": "v1", "time": T2,
                     "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:status": {"f:loadBalancer": {"f:ingress": {}}}}, "subresource": "status"}


def test_status_update_takes_status_fields_from_their_owner_and_leaves_the_rest_as_stored():
    """A status write reads only the entries whose fields it meets: the spec owner's entry is
    written back as stored, the status owner loses what the new writer changed."""
    old = update({**CSA_CREATED, "status": {"loadBalancer": {}}},
                 {**CSA_CREATED, "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}, "first", now=T2, subresource="status")
    new = {**old, "status": {"loadBalancer": {"ingress": [{"ip": "5.6.7.8"}]}}}
    out = update(old, new, "second", now=T3, subresource="status")["metadata"]["managedFields"]
    assert out[:-1] == CSA_CREATED["metadata"]["managedFields"]
    assert [(e["manager"], e.get("subresource")) for e in out] == [
        *((e["manager"], e.get("subresource")) for e in CSA_CREATED["metadata"]["managedFields"]), ("second", "status")]


def test_list_map_keys_of_equal_python_values_stay_apart():
    """``k:`` elements are remembered by value and type: true and 1 are one key to Python, two
    to JSON."""
    schema = Obj("Thing", {"items": F(ListOf(Obj("Item", {"k": F(Any_), "v": F(STRING)}), "map", ("k",)))})
    by_bool = fields_of({"items": [{"k": True, "v": "a"}]}, schema)
    by_int = fields_of({"items": [{"k": 1, "v": "a"}]}, schema)
    assert to_fields_v1(by_bool) == {"f:items": {'k:{"k":true}': {".": {}, "f:k": {}, "f:v": {}}}}
    assert to_fields_v1(by_int) == {"f:items": {'k:{"k":1}': {".": {}, "f:k": {}, "f:v": {}}}}


def test_entries_sorted_apply_first_then_oldest():
    obj = update(None, svc({"type": "ClusterIP"}), "z-creator", now=T1)
    obj = ssa(obj, svc(labels={"a": "1"}), manager="applier", now=T3)
    obj = update(obj, {**obj, "spec": {"type": "ClusterIP", "clusterIP": "10.0.0.1"}}, "allocator", now=T2)
    assert [(e["manager"], e["operation"]) for e in obj["metadata"]["managedFields"]] == [
        ("applier", "Apply"), ("z-creator", "Update"), ("allocator", "Update")]


# ---- validation ------------------------------------------------------------------------------

@pytest.mark.parametrize("managed_fields, error", [
    pytest.param(None, None, id="absent"),
    pytest.param(CSA_CREATED["metadata"]["managedFields"], None, id="valid"),
    pytest.param({}, "managedFields must be a list", id="not-a-list"),
    pytest.param([{"operation": "Patch", "apiVersion": "v1", "fieldsType": "FieldsV1"}],
                 "operation must be `Apply` or `Update`", id="bad-operation"),
    pytest.param([{"operation": "Apply", "fieldsType": "FieldsV1"}], "apiVersion must not be empty", id="no-version"),
    pytest.param([{"operation": "Apply", "apiVersion": "v1"}], "missing fieldsType in managed fields entry 0",
                 id="no-fields-type"),
    pytest.param([{"operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV2"}],
                 'invalid fieldsType "FieldsV2" in managed fields entry 0', id="bad-fields-type"),
    pytest.param([{"operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:a": 1}}],
                 "error decoding versioned set of managed fields entry 0: fieldsV1 nodes must be JSON objects",
                 id="bad-fields"),
])
def test_validate_managed_fields(managed_fields, error):
    obj = svc() if managed_fields is None else svc(managedFields=managed_fields)
    assert validate_managed_fields(obj) == error


def test_field_set_operations():
    a = from_fields_v1({"f:spec": {"f:type": {}, "f:selector": {".": {}, "f:app": {}}}})
    b = from_fields_v1({"f:spec": {"f:selector": {"f:app": {}}}})
    assert to_fields_v1(a.difference(b)) == {"f:spec": {"f:selector": {}, "f:type": {}}}
    assert to_fields_v1(a.intersection(b)) == {"f:spec": {"f:selector": {"f:app": {}}}}
    assert a.union(b) == a
    assert FieldSet().empty() and not a.empty()
    assert [".".join(p) for p in a.paths()] == ["f:spec.f:selector", "f:spec.f:type", "f:spec.f:selector.f:app"]


# ---- a create's diff: the fast walk against the general one -----------------------------------

_CREATE_SHAPES = [
    svc(),
    svc({}),
    svc(None, labels={}),
    {**svc({"ports": [], "selector": {}}), "status": {}},
    svc({"ports": [{"port": 80, "targetPort": 8080, "name": "http"}, {"port": 80, "protocol": "UDP"}],
         "selector": {"app": "web"}, "clusterIPs": ["10.0.0.1"], "type": "ClusterIP"}, labels={"a": "b"}, annotations={"x": ""}),
    {**svc({"ports": None, "selector": None}), "spec2": {"x": [1, {"y": None}]}},
    {"apiVersion": "v1", "kind": "Service", "metadata": None, "spec": "not a struct"},
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "finalizers": ["a", "b", "a"]}, "spec": [1, 2]},
]


@pytest.mark.parametrize("obj", _CREATE_SHAPES, ids=range(len(_CREATE_SHAPES)))
def test_create_diff_fast_walk_equals_general_walk(obj):
    """_diff_from_zero is _diff(zero, new) without the bookkeeping: same added, modified and
    removed sets, for the hand-built schema and for every served kind's own."""
    from kubesvc.api import managedfields as mf
    from kubesvc.api.scheme import all_kinds

    schemas = [SERVICE] + [info.schema for info in all_kinds() if info.kind in ("Service", "Pod", "Deployment", "ConfigMap", "Namespace")]
    for schema in schemas:
        zero = mf._content(mf._zero(schema))
        new = mf._content(copy.deepcopy(obj))
        fast, general = mf._diff_from_zero(zero, new, schema), mf._diff(zero, new, schema)
        for part in ("added", "modified", "removed"):
            assert to_fields_v1(getattr(fast, part)) == to_fields_v1(getattr(general, part)), (schema.name, part)


_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", "uid": "u", "labels": {"app": "web"},
                                                       "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "1"}],
                                                       "finalizers": ["x/y"], "generation": 1, "creationTimestamp": T1},
        "spec": {"containers": [{"name": "b", "image": "i", "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 53, "protocol": "UDP"}],
                                 "env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}], "resources": {}},
                                {"name": "a", "image": "j", "args": ["x", "y"]}],
                 "tolerations": [{"key": "k", "operator": "Exists"}], "volumes": [{"name": "v", "emptyDir": {}}], "nodeSelector": {"a": "<&>"}},
        "status": {"phase": "Pending"}}
_DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default", "annotations": {"é": "ü"}},
               "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}
_CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}, "data": {"b": "1", "a": "2"},
              "binaryData": {}}
_NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "labels": {"kubernetes.io/metadata.name": "n"}},
              "spec": {"finalizers": ["kubernetes"]}}


_TRACKED_SHAPES = [shape for shape in _CREATE_SHAPES if isinstance(shape["metadata"], dict)]  # the store makes metadata an object first


@pytest.mark.parametrize("obj", _TRACKED_SHAPES + [_POD, _DEPLOYMENT, _CONFIGMAP, _NAMESPACE],
                         ids=[*map(str, range(len(_TRACKED_SHAPES))), "pod", "deployment", "configmap", "namespace"])
def test_create_tracking_direct_fields_v1_equals_field_set_path(obj):
    """track_update on a create builds fieldsV1 directly (_created_fields_v1): the same
    managedFields, byte for byte once encoded, as the FieldSet path (diff from zero, less the
    untracked fields, emitted) that every other write takes, for every served kind's schema."""
    import json

    from kubesvc.api import managedfields as mf
    from kubesvc.api.scheme import all_kinds

    schemas = [SERVICE] + [info.schema for info in all_kinds() if info.kind in ("Service", "Pod", "Deployment", "ConfigMap", "Namespace")]
    for schema in schemas:
        fast = copy.deepcopy(obj)
        track_update(None, fast, manager="kubectl-create", schema=schema, api_version="v1", now=T1)
        general = copy.deepcopy(obj)
        managed = mf._record_update({}, mf._content(mf._zero(schema)), mf._content(general), manager="kubectl-create", schema=schema,
                                    api_version="v1", subresource="", now=T1, from_zero=True)
        mf._store(general, managed)
        assert json.dumps(fast) == json.dumps(general), schema.name


def test_create_tracking_of_a_service_is_upstreams_entry():
    """The whole entry a Service create records with the served Service schema, as
    kube-apiserver 1.32 writes it for ``kubectl create`` of this manifest (ports keyed by port
    and protocol, labels granular, name, namespace, uid and creationTimestamp untracked)."""
    from kubesvc.api.scheme import all_kinds

    schema = next(info.schema for info in all_kinds() if info.kind == "Service")
    obj = svc({"ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}], "type": "ClusterIP"},
              namespace="default", uid="u", creationTimestamp=T1, labels={"app": "web"})
    track_update(None, obj, manager="kubectl-create", schema=schema, api_version="v1", now=T1)
    assert obj["metadata"]["managedFields"] == [{
        "manager": "kubectl-create", "operation": "Update", "apiVersion": "v1", "time": T1, "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                     "f:spec": {"f:ports": {".": {}, PORT80: {".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}},
                                "f:type": {}}}}]
