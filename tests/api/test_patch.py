"""Table-driven tests for kubesvc.api.patch: strategic merge, JSON merge (RFC 7386), JSON patch
(RFC 6902) and the Content-Type dispatch, including the bodies kubectl sends (api-compat §3.2)."""

from __future__ import annotations

import copy
import json

import pytest

from kubesvc.api.errors import StatusError
from kubesvc.api.patch import PatchError, apply_patch, json_merge_patch, json_patch, strategic_merge_patch
from kubesvc.api.schema import INT32, INT_OR_STRING, STRING, STRING_MAP, Any_, F, ListOf, Obj

# --- a small hand-written schema: a Service, plus Pod-ish containers and a Deployment-ish strategy --

OWNER_REFERENCE = Obj("OwnerReference", {"uid": F(STRING), "kind": F(STRING), "name": F(STRING)})
META = Obj("ObjectMeta", {
    "name": F(STRING),
    "labels": F(STRING_MAP),
    "annotations": F(STRING_MAP),
    "finalizers": F(ListOf(STRING, "set", patch_strategy="merge")),
    "ownerReferences": F(ListOf(OWNER_REFERENCE, "map", ("uid",), "merge", "uid")),
})
SERVICE_PORT = Obj("ServicePort", {"name": F(STRING), "port": F(INT32), "targetPort": F(INT_OR_STRING),
                                   "protocol": F(STRING)})
CONTAINER_PORT = Obj("ContainerPort", {"containerPort": F(INT32), "name": F(STRING)})
ENV_VAR = Obj("EnvVar", {"name": F(STRING), "value": F(STRING)})
CONTAINER = Obj("Container", {
    "name": F(STRING),
    "image": F(STRING),
    "args": F(ListOf(STRING)),
    "ports": F(ListOf(CONTAINER_PORT, "map", ("containerPort",), "merge", "containerPort")),
    "env": F(ListOf(ENV_VAR, "map", ("name",), "merge", "name")),
})
STRATEGY = Obj("DeploymentStrategy", {"type": F(STRING), "rollingUpdate": F(Obj("RollingUpdate", {"maxSurge": F(INT_OR_STRING)}))})
SPEC = Obj("Spec", {
    "type": F(STRING),
    "ports": F(ListOf(SERVICE_PORT, "map", ("port", "protocol"), "merge", "port")),
    "selector": F(STRING_MAP),
    "clusterIPs": F(ListOf(STRING)),
    "sessionAffinity": F(STRING),
    "containers": F(ListOf(CONTAINER, "map", ("name",), "merge", "name")),
    "strategy": F(STRATEGY, patch_strategy="retainKeys"),
    "template": F(Any_()),
})
CONDITION = Obj("Condition", {"type": F(STRING), "status": F(STRING)})
STATUS = Obj("Status", {"conditions": F(ListOf(CONDITION, "map", ("type",), "merge", "type"))})
SCHEMA = Obj("Thing", {"metadata": F(META), "spec": F(SPEC), "status": F(STATUS)})

LAST_APPLIED = '{"apiVersion":"v1","kind":"Service",...}\n'

SERVICE = {
    "apiVersion": "v1", "kind": "Service",
    "metadata": {"name": "web", "labels": {"app": "web"}, "finalizers": ["a", "b"],
                 "ownerReferences": [{"uid": "u1", "kind": "Deployment", "name": "d"}]},
    "spec": {"type": "ClusterIP", "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
             "selector": {"app": "web", "tier": "fe"}, "clusterIPs": ["10.0.0.1"]},
}
SERVICE_443 = {**SERVICE, "spec": {**SERVICE["spec"], "ports": [
    {"name": "http", "port": 80, "targetPort": 8080}, {"name": "https", "port": 443, "targetPort": 8443}]}}
POD = {"spec": {"containers": [
    {"name": "app", "image": "app:1", "args": ["--a", "--b"],
     "ports": [{"containerPort": 80}, {"containerPort": 9090, "name": "metrics"}],
     "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
    {"name": "sidecar", "image": "side:1"},
]}}
DEPLOYMENT = {"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}


def _with(base: dict, path: str, value) -> dict:
    """A deep copy of base with the value at the dotted path set (or removed when value is ...)."""
    result = copy.deepcopy(base)
    *parents, last = path.split(".")
    node = result
    for part in parents:
        node = node[part]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return result


# --- strategic merge patch: successes -----------------------------------------------------------

SMP_CASES = {
    # api-compat §3.2, verbatim: client-side apply adds a label and port 443.
    "csa-add-port-with-setElementOrder": (
        SERVICE,
        {"metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": LAST_APPLIED},
                      "labels": {"tier": "fe"}},
         "spec": {"$setElementOrder/ports": [{"port": 80}, {"port": 443}],
                  "ports": [{"name": "https", "port": 443, "targetPort": 8443}]}},
        _with(_with(SERVICE_443, "metadata.labels", {"app": "web", "tier": "fe"}),
              "metadata.annotations", {"kubectl.kubernetes.io/last-applied-configuration": LAST_APPLIED}),
    ),
    # api-compat §3.2, verbatim: client-side apply reverts it.
    "csa-revert-port-delete-and-label-null": (
        _with(_with(SERVICE_443, "metadata.labels", {"app": "web", "tier": "fe"}),
              "metadata.annotations", {"kubectl.kubernetes.io/last-applied-configuration": "old"}),
        {"metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": LAST_APPLIED},
                      "labels": {"tier": None}},
         "spec": {"$setElementOrder/ports": [{"port": 80}], "ports": [{"$patch": "delete", "port": 443}]}},
        _with(SERVICE, "metadata.annotations", {"kubectl.kubernetes.io/last-applied-configuration": LAST_APPLIED}),
    ),
    "setElementOrder-puts-new-port-first": (
        SERVICE,
        {"spec": {"$setElementOrder/ports": [{"port": 443}, {"port": 80}], "ports": [{"port": 443}]}},
        _with(SERVICE, "spec.ports", [{"port": 443}, {"name": "http", "port": 80, "targetPort": 8080}]),
    ),
    "setElementOrder-alone-reorders": (
        SERVICE_443,
        {"spec": {"$setElementOrder/ports": [{"port": 443}, {"port": 80}]}},
        _with(SERVICE, "spec.ports", [{"name": "https", "port": 443, "targetPort": 8443},
                                      {"name": "http", "port": 80, "targetPort": 8080}]),
    ),
    "setElementOrder-with-list-null-deletes-list": (
        SERVICE,
        {"spec": {"$setElementOrder/ports": [], "ports": None}},
        _with(SERVICE, "spec.ports", ...),
    ),
    "setElementOrder-ignores-a-non-list": (
        _with(SERVICE, "spec.ports", {"not": "a list"}),
        {"spec": {"$setElementOrder/ports": [{"port": 80}], "$setElementOrder/nothing": [{"port": 80}]}},
        _with(SERVICE, "spec.ports", {"not": "a list"}),
    ),
    "port-merged-by-key-in-place": (
        SERVICE_443,
        {"spec": {"ports": [{"port": 80, "targetPort": 8081, "name": None}]}},
        _with(SERVICE_443, "spec.ports", [{"port": 80, "targetPort": 8081},
                                          {"name": "https", "port": 443, "targetPort": 8443}]),
    ),
    "new-port-without-order-goes-first-as-upstream": (
        SERVICE,
        {"spec": {"ports": [{"port": 443}]}},
        _with(SERVICE, "spec.ports", [{"port": 443}, {"name": "http", "port": 80, "targetPort": 8080}]),
    ),
    "list-element-patch-replace": (
        SERVICE_443,
        {"spec": {"ports": [{"$patch": "replace"}, {"port": 53, "protocol": "UDP"}]}},
        _with(SERVICE, "spec.ports", [{"port": 53, "protocol": "UDP"}]),
    ),
    "list-element-patch-replace-alone-empties": (
        SERVICE,
        {"spec": {"ports": [{"$patch": "replace"}]}},
        _with(SERVICE, "spec.ports", []),
    ),
    "list-element-delete-removes-all-duplicates": (
        _with(SERVICE, "spec.ports", [{"port": 1}, {"port": 2, "name": "a"}, {"port": 1}]),
        {"spec": {"ports": [{"$patch": "delete", "port": 1}]}},
        _with(SERVICE, "spec.ports", [{"port": 2, "name": "a"}]),
    ),
    "list-element-patch-merge-is-the-default": (
        SERVICE,
        {"spec": {"ports": [{"$patch": "merge", "port": 80, "protocol": "TCP"}]}},
        _with(SERVICE, "spec.ports", [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]),
    ),
    "map-patch-replace": (
        SERVICE,
        {"spec": {"selector": {"$patch": "replace", "app": "api"}}},
        _with(SERVICE, "spec.selector", {"app": "api"}),
    ),
    "map-patch-replace-drops-nested-directives-and-nulls": (
        SERVICE,
        {"metadata": {"$patch": "replace", "name": "web", "labels": {"x": None, "y": "1"},
                      "finalizers": ["z"], "annotations": {"$patch": "delete"}}},
        _with(SERVICE, "metadata", {"name": "web", "labels": {"y": "1"}, "finalizers": ["z"]}),
    ),
    "map-patch-delete-removes-key": (
        SERVICE,
        {"spec": {"selector": {"$patch": "delete"}}},
        _with(SERVICE, "spec.selector", ...),
    ),
    "map-patch-merge-is-the-default": (
        SERVICE,
        {"spec": {"selector": {"$patch": "merge", "tier": None, "v": "2"}}},
        _with(SERVICE, "spec.selector", {"app": "web", "v": "2"}),
    ),
    "root-patch-replace": (
        SERVICE,
        {"$patch": "replace", "kind": "Service"},
        {"kind": "Service"},
    ),
    "null-deletes-and-unmatched-null-is-ignored": (
        SERVICE,
        {"metadata": {"labels": {"app": None, "nope": None}}, "spec": {"sessionAffinity": None}},
        _with(SERVICE, "metadata.labels", {}),
    ),
    "scalar-field-replaced-and-added": (
        SERVICE,
        {"spec": {"type": "NodePort", "sessionAffinity": "ClientIP"}},
        _with(_with(SERVICE, "spec.type", "NodePort"), "spec.sessionAffinity", "ClientIP"),
    ),
    "type-change-replaces": (
        SERVICE,
        {"spec": {"selector": "oops"}},
        _with(SERVICE, "spec.selector", "oops"),
    ),
    "atomic-list-replaced-whole": (
        SERVICE,
        {"spec": {"clusterIPs": ["10.0.0.2", "fd00::2"]}},
        _with(SERVICE, "spec.clusterIPs", ["10.0.0.2", "fd00::2"]),
    ),
    "finalizers-merged-as-set": (
        SERVICE,
        {"metadata": {"finalizers": ["c", "a", "c"]}},
        _with(SERVICE, "metadata.finalizers", ["c", "a", "b"]),
    ),
    "finalizers-deleteFromPrimitiveList": (
        SERVICE,
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a", "zz"]}},
        _with(SERVICE, "metadata.finalizers", ["b"]),
    ),
    "finalizers-kubectl-three-way-shape": (
        SERVICE,
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "$setElementOrder/finalizers": ["b", "c"],
                      "finalizers": ["c"]}},
        _with(SERVICE, "metadata.finalizers", ["b", "c"]),
    ),
    "deleteFromPrimitiveList-on-missing-list-is-noop": (
        _with(SERVICE, "metadata.finalizers", ...),
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}},
        _with(SERVICE, "metadata.finalizers", ...),
    ),
    "ownerReferences-merged-by-uid": (
        SERVICE,
        {"metadata": {"ownerReferences": [{"uid": "u1", "name": "d2"}, {"uid": "u2", "kind": "ReplicaSet"}]}},
        _with(SERVICE, "metadata.ownerReferences", [{"uid": "u1", "kind": "Deployment", "name": "d2"},
                                                    {"uid": "u2", "kind": "ReplicaSet"}]),
    ),
    "retainKeys-clears-unlisted": (
        DEPLOYMENT,
        {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}},
        {"spec": {"strategy": {"type": "Recreate"}}},
    ),
    "retainKeys-keeps-listed-and-merges": (
        DEPLOYMENT,
        {"spec": {"strategy": {"$retainKeys": ["type", "rollingUpdate"], "rollingUpdate": {"maxSurge": 2}}}},
        {"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 2}}}},
    ),
    "nested-container-port-env-merge": (
        POD,
        {"spec": {"containers": [{"name": "app", "image": "app:2",
                                  "ports": [{"containerPort": 9090, "name": "prom"}],
                                  "env": [{"name": "B", "$patch": "delete"}, {"name": "C", "value": "3"}]}]}},
        {"spec": {"containers": [
            {"name": "app", "image": "app:2", "args": ["--a", "--b"],
             "ports": [{"containerPort": 80}, {"containerPort": 9090, "name": "prom"}],
             "env": [{"name": "C", "value": "3"}, {"name": "A", "value": "1"}]},
            {"name": "sidecar", "image": "side:1"},
        ]}},
    ),
    "new-container-with-directive-elements-is-cleaned": (
        POD,
        {"spec": {"containers": [{"name": "new", "env": [{"name": "X", "$patch": "delete"}, {"name": "Y", "value": None}],
                                  "ports": [{"$patch": "replace"}, {"containerPort": 1}]}]}},
        {"spec": {"containers": [{"name": "new", "env": [{"name": "Y"}], "ports": [{"containerPort": 1}]},
                                 *POD["spec"]["containers"]]}},
    ),
    "container-args-atomic": (
        POD,
        {"spec": {"containers": [{"name": "app", "args": ["--c"]}]}},
        _with(POD, "spec.containers", [{**POD["spec"]["containers"][0], "args": ["--c"]}, POD["spec"]["containers"][1]]),
    ),
    "conditions-merged-by-type": (
        {"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Synced", "status": "True"}]}},
        {"status": {"$setElementOrder/conditions": [{"type": "Ready"}, {"type": "Synced"}],
                    "conditions": [{"type": "Ready", "status": "True"}]}},
        {"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "True"}]}},
    ),
    "merge-list-created-where-absent": (
        {"spec": {}},
        {"spec": {"ports": [{"port": 80}, {"port": 80, "name": "dup"}, {"$patch": "delete", "port": 9}]}},
        {"spec": {"ports": [{"port": 80, "name": "dup"}]}},
    ),
    "any-schema-falls-back-to-json-merge": (
        {"spec": {"template": {"a": {"b": 1, "c": 2}, "list": [{"k": 1}, {"k": 2}]}}},
        {"spec": {"template": {"a": {"b": None, "d": 3}, "list": [{"k": 3}]}}},
        {"spec": {"template": {"a": {"c": 2, "d": 3}, "list": [{"k": 3}]}}},
    ),
    "unknown-field-list-replaced": (
        {"extra": [1, 2]},
        {"extra": [3]},
        {"extra": [3]},
    ),
}


@pytest.mark.parametrize("original,patch,expected", SMP_CASES.values(), ids=SMP_CASES.keys())
def test_strategic_merge_patch(original, patch, expected):
    before, patch_before = copy.deepcopy(original), copy.deepcopy(patch)
    assert strategic_merge_patch(original, patch, SCHEMA) == expected
    assert original == before and patch == patch_before


def _directives(value, path="") -> list[str]:
    """Every key in value that is a strategic-merge-patch directive."""
    if isinstance(value, list):
        return [found for i, item in enumerate(value) for found in _directives(item, f"{path}[{i}]")]
    if not isinstance(value, dict):
        return []
    here = [f"{path}.{key}" for key in value
            if key in ("$patch", "$retainKeys") or key.startswith(("$setElementOrder", "$deleteFromPrimitiveList"))]
    return here + [found for key, item in value.items() for found in _directives(item, f"{path}.{key}")]


@pytest.mark.parametrize("original,patch,expected", SMP_CASES.values(), ids=SMP_CASES.keys())
def test_no_directive_reaches_the_result(original, patch, expected):
    assert _directives(strategic_merge_patch(original, patch, SCHEMA)) == []
    assert _directives(strategic_merge_patch({}, patch, SCHEMA)) == []


def test_original_result_share_nothing():
    result = strategic_merge_patch(SERVICE, {"spec": {"type": "NodePort"}}, SCHEMA)
    result["metadata"]["labels"]["x"] = "y"
    result["spec"]["ports"][0]["port"] = 1
    assert "x" not in SERVICE["metadata"]["labels"] and SERVICE["spec"]["ports"][0]["port"] == 80


# --- strategic merge patch: failures ------------------------------------------------------------

SMP_ERRORS = {
    "unknown-map-directive": ({"spec": {"selector": {"$patch": "explode"}}}, 422, "unknown patch type: explode"),
    "unknown-element-directive": ({"spec": {"ports": [{"$patch": "explode", "port": 1}]}}, 422, "unknown patch type"),
    "element-without-merge-key": ({"spec": {"ports": [{"name": "x"}]}}, 422, "does not contain declared merge key: port"),
    "delete-without-merge-key": ({"spec": {"ports": [{"$patch": "delete"}]}}, 422, "does not contain declared merge key"),
    "retainKeys-not-a-list": ({"spec": {"strategy": {"$retainKeys": "type"}}}, 400, "invalid patch format of retainKeys"),
    "retainKeys-missing-patched-key": ({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}},
                                       400, "invalid patch format of retainKeys"),
    "setElementOrder-not-a-list": ({"spec": {"$setElementOrder/ports": {"port": 80}}}, 400,
                                   "invalid patch format of setElementOrder list"),
    "setElementOrder-without-field": ({"spec": {"$setElementOrder": []}}, 400, "invalid patch format of setElementOrder list"),
    "setElementOrder-contradicts-patch": ({"spec": {"$setElementOrder/ports": [{"port": 443}, {"port": 80}],
                                                    "ports": [{"port": 80}, {"port": 443}]}},
                                          422, "doesn't match $setElementOrder list"),
    "setElementOrder-misses-patch-element": ({"spec": {"$setElementOrder/ports": [{"port": 80}], "ports": [{"port": 1}]}},
                                             422, "doesn't match"),
    "deleteFromPrimitiveList-not-a-list": ({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}, 400,
                                           "invalid patch format of primitive list"),
    "deleteFromPrimitiveList-without-field": ({"metadata": {"$deleteFromPrimitiveList": ["a"]}}, 400,
                                              "invalid patch format of primitive list"),
    "list-of-lists": ({"metadata": {"finalizers": [["a"]]}}, 422, "lists of lists are not supported"),
    "mixed-element-types": ({"metadata": {"finalizers": [{"a": 1}]}}, 422, "list element types are not identical"),
    "directive-element-in-scalar-list": ({"metadata": {"finalizers": [{"$patch": "replace"}]}}, 422, "list element types"),
}


@pytest.mark.parametrize("patch,code,message", SMP_ERRORS.values(), ids=SMP_ERRORS.keys())
def test_strategic_merge_patch_errors(patch, code, message):
    before = copy.deepcopy(SERVICE)
    with pytest.raises(PatchError) as caught:
        strategic_merge_patch(SERVICE, patch, SCHEMA)
    assert caught.value.code == code
    assert caught.value.reason == {400: "BadRequest", 422: "Invalid"}[code]
    assert message in str(caught.value)
    assert SERVICE == before


def test_merge_list_without_merge_key_in_schema():
    keyless = Obj("T", {"items": F(ListOf(Obj("I", {}), patch_strategy="merge"))})
    with pytest.raises(PatchError, match="cannot merge lists without merge key") as caught:
        strategic_merge_patch({"items": [{"a": 1}]}, {"items": [{"a": 2}]}, keyless)
    assert caught.value.code == 422


# --- JSON merge patch (RFC 7386) ----------------------------------------------------------------

MERGE_CASES = {
    "null-deletes": ({"a": 1, "b": 2}, {"a": None}, {"b": 2}),
    "null-for-missing-key": ({"a": 1}, {"z": None}, {"a": 1}),
    "nested-merge": ({"m": {"l": {"x": "1"}}}, {"m": {"l": {"y": "2", "x": None}}}, {"m": {"l": {"y": "2"}}}),
    "new-nested-object-drops-nulls": ({}, {"a": {"b": None, "c": 1}}, {"a": {"c": 1}}),
    "array-replaced-verbatim": ({"l": [1, 2, {"k": 1}]}, {"l": [{"k": None}]}, {"l": [{"k": None}]}),
    "object-replaces-scalar": ({"a": 1}, {"a": {"b": 1}}, {"a": {"b": 1}}),
    "scalar-replaces-object": ({"a": {"b": 1}}, {"a": "x"}, {"a": "x"}),
    "empty-patch": ({"a": 1}, {}, {"a": 1}),
    "directives-are-plain-keys": ({"a": 1}, {"$patch": "delete"}, {"a": 1, "$patch": "delete"}),
    "non-object-patch-replaces": ({"a": 1}, ["x"], ["x"]),
    "rfc7386-appendix-a": (
        {"title": "Goodbye!", "author": {"givenName": "John", "familyName": "Doe"}, "tags": ["example", "sample"],
         "content": "This will be unchanged"},
        {"title": "Hello!", "phoneNumber": "+01-123-456-7890", "author": {"familyName": None}, "tags": ["example"]},
        {"title": "Hello!", "author": {"givenName": "John"}, "tags": ["example"], "content": "This will be unchanged",
         "phoneNumber": "+01-123-456-7890"},
    ),
}


@pytest.mark.parametrize("original,patch,expected", MERGE_CASES.values(), ids=MERGE_CASES.keys())
def test_json_merge_patch(original, patch, expected):
    before = copy.deepcopy(original)
    assert json_merge_patch(original, patch) == expected
    assert original == before


# --- JSON patch (RFC 6902) ----------------------------------------------------------------------

DOC = {"metadata": {"labels": {"app": "web", "a/b": "slash", "m~n": "tilde"}},
       "spec": {"ports": [{"port": 80}, {"port": 443}], "selector": {"app": "web"}}}

JSON_PATCH_CASES = {
    "add-member": ([{"op": "add", "path": "/metadata/labels/j", "value": "2"}],
                   _with(DOC, "metadata.labels", {**DOC["metadata"]["labels"], "j": "2"})),
    "add-replaces-existing-member": ([{"op": "add", "path": "/spec/selector", "value": {}}], _with(DOC, "spec.selector", {})),
    "add-null-value": ([{"op": "add", "path": "/spec/x", "value": None}], _with(DOC, "spec.x", None)),
    "add-array-insert": ([{"op": "add", "path": "/spec/ports/1", "value": {"port": 8}}],
                         _with(DOC, "spec.ports", [{"port": 80}, {"port": 8}, {"port": 443}])),
    "add-array-at-length": ([{"op": "add", "path": "/spec/ports/2", "value": {"port": 8}}],
                            _with(DOC, "spec.ports", [{"port": 80}, {"port": 443}, {"port": 8}])),
    "add-array-append-dash": ([{"op": "add", "path": "/spec/ports/-", "value": {"port": 8}}],
                              _with(DOC, "spec.ports", [{"port": 80}, {"port": 443}, {"port": 8}])),
    "add-array-negative-index-like-upstream": ([{"op": "add", "path": "/spec/ports/-1", "value": {"port": 8}}],
                                               _with(DOC, "spec.ports", [{"port": 80}, {"port": 443}, {"port": 8}])),
    "remove-member": ([{"op": "remove", "path": "/spec/selector"}], _with(DOC, "spec.selector", ...)),
    "remove-array-element": ([{"op": "remove", "path": "/spec/ports/0"}], _with(DOC, "spec.ports", [{"port": 443}])),
    "remove-array-negative-index": ([{"op": "remove", "path": "/spec/ports/-1"}], _with(DOC, "spec.ports", [{"port": 80}])),
    "replace-member": ([{"op": "replace", "path": "/spec/ports/1/port", "value": 8443}],
                       _with(DOC, "spec.ports", [{"port": 80}, {"port": 8443}])),
    "escapes-tilde-one-is-slash": ([{"op": "replace", "path": "/metadata/labels/a~1b", "value": "x"}],
                                   _with(DOC, "metadata.labels", {**DOC["metadata"]["labels"], "a/b": "x"})),
    "escapes-tilde-zero-is-tilde": ([{"op": "remove", "path": "/metadata/labels/m~0n"}],
                                    _with(DOC, "metadata.labels", {"app": "web", "a/b": "slash"})),
    "move-member": ([{"op": "move", "from": "/spec/selector", "path": "/metadata/sel"}],
                    _with(_with(DOC, "spec.selector", ...), "metadata.sel", {"app": "web"})),
    "move-array-element": ([{"op": "move", "from": "/spec/ports/0", "path": "/spec/ports/-"}],
                           _with(DOC, "spec.ports", [{"port": 443}, {"port": 80}])),
    "copy-member": ([{"op": "copy", "from": "/spec/selector", "path": "/metadata/labels"}],
                    _with(DOC, "metadata.labels", {"app": "web"})),
    "copy-is-deep": ([{"op": "copy", "from": "/spec/selector", "path": "/spec/s2"},
                      {"op": "add", "path": "/spec/s2/x", "value": "1"}],
                     _with(DOC, "spec.s2", {"app": "web", "x": "1"})),
    "test-passes": ([{"op": "test", "path": "/spec/ports/0", "value": {"port": 80.0}},
                     {"op": "test", "path": "/metadata/labels/a~1b", "value": "slash"}], DOC),
    "test-whole-document": ([{"op": "test", "path": "", "value": DOC}], DOC),
    "replace-whole-document": ([{"op": "replace", "path": "", "value": {"kind": "X"}}], {"kind": "X"}),
    "ops-see-earlier-ops": ([{"op": "add", "path": "/spec/new", "value": {}},
                             {"op": "add", "path": "/spec/new/k", "value": [1]},
                             {"op": "add", "path": "/spec/new/k/0", "value": 0},
                             {"op": "test", "path": "/spec/new", "value": {"k": [0, 1]}}],
                            _with(DOC, "spec.new", {"k": [0, 1]})),
    "empty-patch": ([], DOC),
}


@pytest.mark.parametrize("operations,expected", JSON_PATCH_CASES.values(), ids=JSON_PATCH_CASES.keys())
def test_json_patch(operations, expected):
    before, ops_before = copy.deepcopy(DOC), copy.deepcopy(operations)
    assert json_patch(DOC, operations) == expected
    assert DOC == before and operations == ops_before


JSON_PATCH_ERRORS = {
    "replace-missing-key": ([{"op": "replace", "path": "/metadata/labels/x", "value": "y"}],
                            "replace operation does not apply: doc is missing key: /metadata/labels/x"),
    "replace-missing-parent": ([{"op": "replace", "path": "/nope/x", "value": "y"}],
                               "replace operation does not apply: doc is missing path: /nope/x"),
    "replace-index-out-of-range": ([{"op": "replace", "path": "/spec/ports/2", "value": 1}], "doc is missing key: /spec/ports/2"),
    "replace-dash": ([{"op": "replace", "path": "/spec/ports/-", "value": 1}], "doc is missing key"),
    "remove-missing-key": ([{"op": "remove", "path": "/metadata/labels/x"}],
                           "error in remove for path: '/metadata/labels/x': Unable to remove nonexistent key: x"),
    "remove-missing-parent": ([{"op": "remove", "path": "/a/b/c"}], 'remove operation does not apply: doc is missing path: "/a/b/c"'),
    "remove-index-out-of-range": ([{"op": "remove", "path": "/spec/ports/2"}], "Unable to access invalid index: 2"),
    "remove-negative-out-of-range": ([{"op": "remove", "path": "/spec/ports/-3"}], "Unable to access invalid index: -3"),
    "remove-whole-document": ([{"op": "remove", "path": ""}], "doc is missing path"),
    "add-missing-parent": ([{"op": "add", "path": "/baz/bat", "value": "qux"}], 'add operation does not apply: doc is missing path: "/baz/bat"'),
    "add-index-past-end": ([{"op": "add", "path": "/spec/ports/3", "value": 1}], "Unable to access invalid index: 3"),
    "add-index-not-a-number": ([{"op": "add", "path": "/spec/ports/x", "value": 1}], "invalid index"),
    "add-through-scalar": ([{"op": "add", "path": "/spec/ports/0/port/x", "value": 1}], "doc is missing path"),
    "path-not-a-pointer": ([{"op": "add", "path": "spec", "value": 1}], "doc is missing path"),
    "test-fails": ([{"op": "test", "path": "/spec/ports/0/port", "value": 81}], "testing value /spec/ports/0/port failed: test failed"),
    "test-bool-is-not-number": ([{"op": "test", "path": "/spec/ports/0", "value": {"port": True}}], "test failed"),
    "test-missing-is-not-null": ([{"op": "test", "path": "/spec/nothing", "value": None}], "test failed"),
    "move-from-missing": ([{"op": "move", "from": "/spec/nope", "path": "/spec/x"}], "Unable to remove nonexistent key: nope"),
    "move-into-own-child": ([{"op": "move", "from": "/spec", "path": "/spec/inner"}], "doc is missing path"),
    "copy-from-missing": ([{"op": "copy", "from": "/spec/nope", "path": "/spec/x"}],
                          "copy operation does not apply: doc is missing from path: /spec/nope"),
    "unknown-op": ([{"op": "frobnicate", "path": "/spec"}], "Unexpected kind: frobnicate"),
    "missing-op": ([{"path": "/spec"}], "Unexpected kind: unknown"),
    "missing-path": ([{"op": "add", "value": 1}], "add operation failed to decode path"),
    "missing-from": ([{"op": "copy", "path": "/x"}], "copy operation failed to decode from"),
    "missing-value": ([{"op": "replace", "path": "/spec"}], "replace operation failed to decode value"),
    "result-not-an-object": ([{"op": "replace", "path": "", "value": [1]}], "not an object"),
    "atomic-after-successful-ops": ([{"op": "add", "path": "/metadata/labels/new", "value": "1"},
                                     {"op": "remove", "path": "/spec/ports/0"},
                                     {"op": "test", "path": "/spec/type", "value": "x"}], "testing value /spec/type failed"),
}


@pytest.mark.parametrize("operations,message", JSON_PATCH_ERRORS.values(), ids=JSON_PATCH_ERRORS.keys())
def test_json_patch_errors_are_422_and_atomic(operations, message):
    before = copy.deepcopy(DOC)
    with pytest.raises(PatchError) as caught:
        json_patch(DOC, operations)
    assert (caught.value.code, caught.value.reason) == (422, "Invalid")
    assert message in str(caught.value)
    assert DOC == before


# --- apply_patch: Content-Type dispatch and decoding --------------------------------------------

DISPATCH_CASES = {
    "merge": ("application/merge-patch+json", {"spec": {"selector": None}}, _with(SERVICE, "spec.selector", ...)),
    "merge-with-charset": ("application/merge-patch+json; charset=utf-8", {"metadata": {"labels": {"m": "1"}}},
                           _with(SERVICE, "metadata.labels", {"app": "web", "m": "1"})),
    "merge-replaces-merge-lists": ("application/merge-patch+json", {"spec": {"ports": [{"port": 443}]}},
                                   _with(SERVICE, "spec.ports", [{"port": 443}])),
    "json-patch": ("application/json-patch+json", [{"op": "add", "path": "/metadata/labels/j", "value": "2"}],
                   _with(SERVICE, "metadata.labels", {"app": "web", "j": "2"})),
    "strategic": ("application/strategic-merge-patch+json", {"spec": {"ports": [{"port": 80, "targetPort": 9}]}},
                  _with(SERVICE, "spec.ports", [{"name": "http", "port": 80, "targetPort": 9}])),
}


@pytest.mark.parametrize("content_type,patch,expected", DISPATCH_CASES.values(), ids=DISPATCH_CASES.keys())
def test_apply_patch_dispatch(content_type, patch, expected):
    assert apply_patch(content_type, SERVICE, json.dumps(patch).encode(), SCHEMA) == expected


@pytest.mark.parametrize("content_type,patch,expected", DISPATCH_CASES.values(), ids=DISPATCH_CASES.keys())
def test_apply_patch_in_place_patches_the_given_copy(content_type, patch, expected):
    mine = copy.deepcopy(SERVICE)
    patched = apply_patch(content_type, mine, json.dumps(patch).encode(), SCHEMA, in_place=True)
    assert patched == expected and patched is mine


APPLY_ERRORS = {
    "apply-yaml-is-not-ours": ("application/apply-patch+yaml", b"{}", 415, "UnsupportedMediaType"),
    "plain-json": ("application/json", b"{}", 415, "UnsupportedMediaType"),
    "empty-content-type": ("", b"{}", 415, "UnsupportedMediaType"),
    "smp-bad-json": ("application/strategic-merge-patch+json", b"{nope", 400, "BadRequest"),
    "merge-bad-json": ("application/merge-patch+json", b"", 400, "BadRequest"),
    "json-patch-bad-json": ("application/json-patch+json", b"[{]", 400, "BadRequest"),
    "bad-utf8": ("application/merge-patch+json", b"\xff\xfe{", 400, "BadRequest"),
    "nan-is-not-json": ("application/merge-patch+json", b'{"a": NaN}', 400, "BadRequest"),
    "smp-array-body": ("application/strategic-merge-patch+json", b"[]", 400, "BadRequest"),
    "merge-null-body": ("application/merge-patch+json", b"null", 400, "BadRequest"),
    "json-patch-object-body": ("application/json-patch+json", b'{"op": "add"}', 400, "BadRequest"),
    "json-patch-element-not-object": ("application/json-patch+json", b'["add"]', 400, "BadRequest"),
    "json-patch-op-fails": ("application/json-patch+json", b'[{"op": "remove", "path": "/x"}]', 422, "Invalid"),
    "json-patch-too-many-ops": ("application/json-patch+json",
                                json.dumps([{"op": "test", "path": "/kind", "value": "Service"}] * 10001).encode(),
                                413, "RequestEntityTooLarge"),
}


@pytest.mark.parametrize("content_type,body,code,reason", APPLY_ERRORS.values(), ids=APPLY_ERRORS.keys())
def test_apply_patch_errors(content_type, body, code, reason):
    with pytest.raises(PatchError) as caught:
        apply_patch(content_type, SERVICE, body, SCHEMA)
    assert (caught.value.code, caught.value.reason) == (code, reason)


def test_error_messages_read_like_upstream():
    with pytest.raises(PatchError) as caught:
        apply_patch("application/merge-patch+json", SERVICE, b"[1]", SCHEMA)
    assert str(caught.value) == ("error decoding patch: json: cannot unmarshal array into Go value of type "
                                 "map[string]interface {}")
    with pytest.raises(PatchError) as caught:
        apply_patch("text/plain", SERVICE, b"{}", SCHEMA)
    assert str(caught.value) == ("the body of the request was in an unknown format - accepted media types include: "
                                 "application/json-patch+json, application/merge-patch+json, "
                                 "application/strategic-merge-patch+json")


def test_patch_error_is_a_status_error():
    with pytest.raises(StatusError) as caught:
        json_patch(DOC, [{"op": "replace", "path": "/metadata/labels/x", "value": "y"}])
    assert caught.value.status() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "replace operation does not apply: doc is missing key: /metadata/labels/x: missing value",
        "reason": "Invalid", "code": 422,
    }
