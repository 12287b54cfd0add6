"""The identity kinds as pure functions: Go's base64, defaulting, upstream's validation messages,
table cells, discovery and OpenAPI entries of create-only kinds, protobuf bodies, the registry."""

from __future__ import annotations

import base64
from datetime import datetime, timezone

import pytest

from kubesvc.api import validation
from kubesvc.api.decode import decode_object
from kubesvc.api.defaults import apply_defaults
from kubesvc.api.errors import StatusError
from kubesvc.api.scheme import all_kinds, by_resource
from kubesvc.apiserver.discovery import Discovery
from kubesvc.apiserver.protobuf import decode_kubernetes_protobuf
from kubesvc.apiserver.registry.store import Registry
from kubesvc.apiserver.tables import subjects_strings, to_table
from kubesvc.storage.memory import MemoryBackend
from kubesvc.util import gobase64
from kubesvc.util.clock import FakeClock
from tests.apiserver.test_protobuf import entry, envelope, num, object_meta, raw, text

RBAC = "rbac.authorization.k8s.io"


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


# ---- Go's base64 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text_, decoded", [
    ("", b""), ("YWJj", b"abc"), ("YWI=", b"ab"), ("YQ==", b"a"), ("YW\nJj\r\n", b"abc"), ("YWJjZA==", b"abcd"),
], ids=["empty", "full-group", "one-pad", "two-pads", "newlines-skipped", "two-groups"])
def test_go_base64_decodes(text_, decoded):
    assert gobase64.decode(text_) == decoded


@pytest.mark.parametrize("text_, offset", [
    ("YWJ", 0), ("Y", 0), ("YQ=", 3), ("YQ==x", 4), ("Y$Jj", 1), ("=", 0), ("YWJj====", 4), ("YWJjé", 4),
], ids=["short-group", "one-char", "half-padding", "trailing-garbage", "bad-char", "only-padding", "padding-after-group",
        "non-ascii"])
def test_go_base64_error_offsets(text_, offset):
    with pytest.raises(gobase64.CorruptInputError) as error:
        gobase64.decode(text_)
    assert str(error.value) == f"illegal base64 data at input byte {offset}"


def test_bad_base64_in_secret_data_is_the_decoders_400():
    schema = by_resource("", "v1", "secrets").schema
    with pytest.raises(StatusError) as bad:
        decode_object({"data": {"k": "YW$j"}}, schema, kind_label="Secret", api_version="v1")
    assert (bad.value.code, bad.value.message) == (400, 'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 2')


# ---- defaulting ------------------------------------------------------------------------------------


@pytest.mark.parametrize("secret, expected", [
    ({}, {"type": "Opaque"}),
    ({"type": "kubernetes.io/tls", "stringData": {}}, {"type": "kubernetes.io/tls"}),
    ({"data": {"a": b64("1"), "b": b64("2")}, "stringData": {"b": "two", "c": "ü"}},
     {"data": {"a": b64("1"), "b": b64("two"), "c": b64("ü")}, "type": "Opaque"}),
], ids=["type-opaque", "empty-string-data-dropped", "string-data-overwrites"])
def test_secret_defaults_merge_string_data(secret, expected):
    apply_defaults("Secret", secret)
    assert secret == expected


def test_binding_api_groups_default_by_kind():
    binding = {"roleRef": {"kind": "ClusterRole", "name": "view"},
               "subjects": [{"kind": "User", "name": "u"}, {"kind": "Group", "name": "g"}, {"kind": "ServiceAccount", "name": "s"},
                            {"kind": "User", "name": "kept", "apiGroup": "other"}]}
    apply_defaults("RoleBinding", binding)
    assert binding["roleRef"]["apiGroup"] == RBAC
    assert [s.get("apiGroup") for s in binding["subjects"]] == [RBAC, RBAC, None, "other"]


# ---- validation ------------------------------------------------------------------------------------


def messages(kind: str, obj: dict, namespaced: bool = True) -> list[str]:
    apply_defaults(kind, obj)
    return [str(e) for e in validation.validate(kind, obj, namespaced=namespaced)]


def meta(name: str = "x", namespace: str | None = "ns") -> dict:
    return {"name": name, **({"namespace": namespace} if namespace else {})}


@pytest.mark.parametrize("kind, obj, expected", [
    ("Role", {"metadata": meta("system:role"), "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]}, []),
    ("Role", {"metadata": meta("a/b"), "rules": []}, ["metadata.name: Invalid value: \"a/b\": may not contain '/'"]),
    ("Role", {"metadata": meta(), "rules": [{}]},
     ["rules[0].verbs: Required value: verbs must contain at least one value",
      "rules[0].apiGroups: Required value: resource rules must supply at least one api group",
      "rules[0].resources: Required value: resource rules must supply at least one resource"]),
    ("Role", {"metadata": meta(), "rules": [{"verbs": ["get"], "nonResourceURLs": ["/a", "/b"], "resources": ["pods"]}]},
     ['rules[0].nonResourceURLs: Invalid value: []string{"/a", "/b"}: namespaced rules cannot apply to non-resource URLs',
      'rules[0].nonResourceURLs: Invalid value: []string{"/a", "/b"}: rules cannot apply to both regular resources and non-resource URLs']),
    ("ClusterRole", {"metadata": meta(namespace=None), "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}, []),
    ("ClusterRole", {"metadata": meta(namespace=None), "aggregationRule": {}},
     ["aggregationRule.clusterRoleSelectors: Required value: at least one clusterRoleSelector required if aggregationRule is non-nil"]),
    ("ClusterRole", {"metadata": meta(namespace=None), "aggregationRule": {"clusterRoleSelectors": [
        {"matchExpressions": [{"key": "a", "operator": "In"}]}]}},
     ["aggregationRule.clusterRoleSelectors[0].matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
      'aggregationRule.clusterRoleSelectors[0]: Invalid value: "null": invalid label selector.']),
    ("RoleBinding", {"metadata": meta(), "roleRef": {"kind": "Role", "name": "r"},
                     "subjects": [{"kind": "ServiceAccount", "name": "robot"}, {"kind": "User", "name": "u"}]}, []),
    ("RoleBinding", {"metadata": meta(), "roleRef": {"apiGroup": "x", "kind": "Secret"}},
     ['roleRef.apiGroup: Unsupported value: "x": supported values: "rbac.authorization.k8s.io"',
      'roleRef.kind: Unsupported value: "Secret": supported values: "Role", "ClusterRole"',
      "roleRef.name: Required value"]),
    ("RoleBinding", {"metadata": meta(), "roleRef": {"kind": "Role", "name": "r"},
                     "subjects": [{"kind": "ServiceAccount", "name": "Robot", "apiGroup": RBAC}, {"kind": "User", "apiGroup": "v1"}, {"kind": "Bot", "name": "b"}]},
     ["subjects[0].name: Invalid value: \"Robot\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
      "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
      "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
      'subjects[0].apiGroup: Unsupported value: "rbac.authorization.k8s.io": supported values: ""',
      "subjects[1].name: Required value",
      'subjects[1].apiGroup: Unsupported value: "v1": supported values: "rbac.authorization.k8s.io"',
      'subjects[2].kind: Unsupported value: "Bot": supported values: "ServiceAccount", "User", "Group"']),
    ("ClusterRoleBinding", {"metadata": meta(namespace=None), "roleRef": {"kind": "Role", "name": "r"},
                            "subjects": [{"kind": "ServiceAccount", "name": "robot"}]},
     ['roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole"', "subjects[0].namespace: Required value"]),
], ids=["role-ok", "role-name-path-segment", "rule-empty", "rule-urls-in-role", "clusterrole-urls-ok", "aggregation-empty",
        "aggregation-bad-selector", "binding-ok", "binding-role-ref", "binding-subjects", "clusterbinding-kind-and-namespace"])
def test_rbac_validation(kind, obj, expected):
    assert messages(kind, obj, namespaced=kind in ("Role", "RoleBinding")) == expected


def test_role_ref_is_immutable_with_the_go_struct_in_the_message():
    old = {"metadata": {**meta(), "resourceVersion": "1"}, "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "view"}}
    same = {"metadata": {**meta(), "resourceVersion": "1"}, "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "view"}, "subjects": []}
    new = {"metadata": {**meta(), "resourceVersion": "1"}, "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "edit"}}
    assert validation.validate_update("RoleBinding", same, old, namespaced=True) == []
    assert [str(e) for e in validation.validate_update("RoleBinding", new, old, namespaced=True)] == [
        'roleRef: Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"edit"}: cannot change roleRef']


@pytest.mark.parametrize("kind, obj, expected", [
    ("Secret", {"metadata": meta(), "data": {"a.b_c-D": b64("x")}}, []),
    ("Secret", {"metadata": meta(), "data": {"..x": b64("x")}}, ["data[..x]: Invalid value: \"..x\": must not start with '..'"]),
    ("Secret", {"metadata": meta(), "data": {"a": b64(b"x" * (1024 * 1024 + 1))}}, ["data: Too long: may not be more than 1048576 bytes"]),
    ("Secret", {"metadata": meta(), "data": {"a": b64(b"x" * 1024 * 1024)}}, []),
    ("Secret", {"metadata": meta(), "type": "kubernetes.io/service-account-token"},
     ["metadata.annotations[kubernetes.io/service-account.name]: Required value"]),
    ("Secret", {"metadata": {**meta(), "annotations": {"kubernetes.io/service-account.name": "robot"}}, "type": "kubernetes.io/service-account-token"}, []),
    ("Secret", {"metadata": meta(), "type": "kubernetes.io/dockerconfigjson"}, ["data[.dockerconfigjson]: Required value"]),
    ("Secret", {"metadata": meta(), "type": "kubernetes.io/dockerconfigjson", "stringData": {".dockerconfigjson": '{"auths":{}}'}}, []),
    ("Secret", {"metadata": meta(), "type": "kubernetes.io/dockercfg", "stringData": {".dockercfg": "{"}},
     ['data[.dockercfg]: Invalid value: "<secret contents redacted>": unexpected end of JSON input']),
    ("Secret", {"metadata": meta(), "type": "kubernetes.io/basic-auth"}, ["data[username]: Required value", "data[password]: Required value"]),
    ("Secret", {"metadata": meta(), "type": "kubernetes.io/basic-auth", "stringData": {"password": ""}}, []),
    ("Secret", {"metadata": meta(), "type": "kubernetes.io/ssh-auth", "stringData": {"ssh-privatekey": ""}}, ["data[ssh-privatekey]: Required value"]),
    ("Secret", {"metadata": meta(), "type": "kubernetes.io/tls", "stringData": {"tls.key": "k"}}, ["data[tls.crt]: Required value"]),
    ("Secret", {"metadata": meta(), "type": "bootstrap.kubernetes.io/token"}, []),
    ("ConfigMap", {"metadata": meta(), "data": {"a": "1"}, "binaryData": {"a": b64("1"), "b c": b64("2")}},
     ['data[a]: Invalid value: "a": duplicate of key present in binaryData',
      "binaryData[b c]: Invalid value: \"b c\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
      "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"]),
    ("ConfigMap", {"metadata": meta(), "data": {"a": "é" * (512 * 1024 + 1)}}, [": Too long: may not be more than 1048576 bytes"]),
    ("ServiceAccount", {"metadata": meta("robot")}, []),
    ("ServiceAccount", {"metadata": meta("Robot")},
     ["metadata.name: Invalid value: \"Robot\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
      "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
      "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]),
], ids=["secret-ok", "secret-key", "secret-too-big", "secret-exactly-1mib", "sa-token-needs-annotation", "sa-token-ok",
        "dockerconfigjson-missing", "dockerconfigjson-ok", "dockercfg-not-json", "basic-auth-missing", "basic-auth-one-key",
        "ssh-auth-empty", "tls-missing-cert", "bootstrap-token-unchecked", "configmap-keys", "configmap-too-big-utf8",
        "sa-ok", "sa-name"])
def test_config_validation(kind, obj, expected):
    assert messages(kind, obj) == expected


@pytest.mark.parametrize("kind, old, new, expected", [
    ("Secret", {"type": "Opaque"}, {"type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}},
     ['type: Invalid value: "kubernetes.io/tls": field is immutable']),
    ("Secret", {"type": "Opaque", "immutable": True, "data": {"a": b64("1")}}, {"type": "Opaque", "immutable": True, "data": {"a": b64("2")}},
     ["data: Forbidden: field is immutable when `immutable` is set"]),
    ("Secret", {"type": "Opaque", "immutable": True}, {"type": "Opaque"}, ["immutable: Forbidden: field is immutable when `immutable` is set"]),
    ("Secret", {"type": "Opaque"}, {"type": "Opaque", "immutable": True, "data": {"a": b64("1")}}, []),
    ("ConfigMap", {"immutable": True, "binaryData": {"a": b64("1")}}, {"immutable": True},
     ["binaryData: Forbidden: field is immutable when `immutable` is set"]),
    ("ConfigMap", {"immutable": True, "data": {"a": "1"}}, {"immutable": True, "data": {"a": "1"}}, []),
], ids=["secret-type", "secret-immutable-data", "secret-unfreeze", "secret-freeze", "configmap-binary-data", "configmap-unchanged"])
def test_immutable_updates(kind, old, new, expected):
    stamp = {"metadata": {**meta(), "resourceVersion": "3"}}
    assert [str(e) for e in validation.validate_update(kind, {**stamp, **new}, {**stamp, **old}, namespaced=True)] == expected


# ---- tables ---------------------------------------------------------------------------------------

NOW = datetime(2026, 1, 1, 0, 1, 0, tzinfo=timezone.utc)
CREATED = {"creationTimestamp": "2026-01-01T00:00:00Z"}


@pytest.mark.parametrize("resource, group, obj, header, cells", [
    ("secrets", "", {"metadata": {"name": "s", **CREATED}, "type": "Opaque", "data": {"a": "", "b": ""}},
     ["Name", "Type", "Data", "Age"], ["s", "Opaque", 2, "60s"]),
    ("configmaps", "", {"metadata": {"name": "c", **CREATED}, "data": {"a": ""}, "binaryData": {"b": ""}},
     ["Name", "Data", "Age"], ["c", 2, "60s"]),
    ("serviceaccounts", "", {"metadata": {"name": "sa", **CREATED}, "secrets": [{"name": "t"}]}, ["Name", "Secrets", "Age"], ["sa", 1, "60s"]),
    ("roles", RBAC, {"metadata": {"name": "r", **CREATED}}, ["Name", "Created At"], ["r", "2026-01-01T00:00:00Z"]),
    ("clusterroles", RBAC, {"metadata": {"name": "c", **CREATED}}, ["Name", "Created At"], ["c", "2026-01-01T00:00:00Z"]),
    ("rolebindings", RBAC, {"metadata": {"name": "b", **CREATED}, "roleRef": {"kind": "ClusterRole", "name": "view"},
                            "subjects": [{"kind": "User", "name": "u1"}, {"kind": "User", "name": "u2"}, {"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}]},
     ["Name", "Role", "Age", "Users", "Groups", "ServiceAccounts"], ["b", "ClusterRole/view", "60s", "u1, u2", "", "ns/sa"]),
    ("clusterrolebindings", RBAC, {"metadata": {"name": "b", **CREATED}, "roleRef": {"kind": "ClusterRole", "name": "edit"},
                                   "subjects": [{"kind": "Group", "name": "g"}]},
     ["Name", "Role", "Age", "Users", "Groups", "ServiceAccounts"], ["b", "ClusterRole/edit", "60s", "", "g", ""]),
], ids=["secret", "configmap", "serviceaccount", "role", "clusterrole", "rolebinding", "clusterrolebinding"])
def test_tables_as_upstreams_printers(resource, group, obj, header, cells):
    table = to_table(by_resource(group, "v1", resource), [obj], now=NOW)
    assert [c["name"] for c in table["columnDefinitions"]] == header
    assert table["rows"][0]["cells"] == cells
    if resource.endswith("bindings"):
        assert [c["priority"] for c in table["columnDefinitions"]] == [0, 0, 0, 1, 1, 1]


def test_subjects_strings_keeps_unknown_kinds_apart():
    assert subjects_strings([{"kind": "Bot", "name": "b", "namespace": "n"}, "junk"]) == ([], [], [], ["Bot/n/b"])


# ---- discovery and the registry -----------------------------------------------------------------


def test_discovery_lists_create_only_kinds_with_create_and_no_storage_hash():
    discovery = Discovery(all_kinds(), "127.0.0.1:6443")
    resources = {r["name"]: r for r in discovery.api_resource_list("authentication.k8s.io", "v1")["resources"]}
    assert resources == {
        "selfsubjectreviews": {"name": "selfsubjectreviews", "singularName": "selfsubjectreview", "namespaced": False,
                               "kind": "SelfSubjectReview", "verbs": ["create"]},
        "tokenreviews": {"name": "tokenreviews", "singularName": "tokenreview", "namespaced": False, "kind": "TokenReview", "verbs": ["create"]},
    }
    aggregated = {g["metadata"].get("name"): g for g in discovery.aggregated(core=False)["items"]}
    reviews = {r["resource"]: r for r in aggregated["authorization.k8s.io"]["versions"][0]["resources"]}
    assert reviews["localsubjectaccessreviews"]["verbs"] == ["create"] and reviews["localsubjectaccessreviews"]["scope"] == "Namespaced"
    core = {r["resource"]: r for r in discovery.aggregated(core=True)["items"][0]["versions"][0]["resources"]}
    token = next(s for s in core["serviceaccounts"]["subresources"] if s["subresource"] == "token")
    assert token == {"subresource": "token", "responseKind": {"group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest"},
                     "verbs": ["create"]}
    groups = [g["name"] for g in discovery.api_group_list()["groups"]]
    assert groups.index("authentication.k8s.io") < groups.index("authorization.k8s.io") < groups.index("networking.k8s.io") < groups.index(RBAC)


def test_registry_stores_no_create_only_kind():
    registry = Registry(all_kinds(), MemoryBackend(), FakeClock())
    assert registry.store("authorization.k8s.io", "selfsubjectaccessreviews") is None
    assert registry.store("authentication.k8s.io", "tokenreviews") is None
    assert registry.store(RBAC, "roles") is not None and registry.store("", "secrets") is not None


# ---- protobuf bodies (what kubectl create secret|role..., auth can-i, create token send) ------------


def test_protobuf_secret_data_becomes_base64():
    body = envelope("v1", "Secret", raw(1, object_meta("s")) + entry(2, "k", "\x00\xff") + entry(4, "plain", "v") + text(3, "Opaque"))
    secret = decode_kubernetes_protobuf(body)
    assert secret["data"] == {"k": b64(b"\x00\xc3\xbf")} and secret["stringData"] == {"plain": "v"} and secret["type"] == "Opaque"


def test_protobuf_role_binding_and_cluster_role():
    subject = raw(2, text(1, "User") + text(2, RBAC) + text(3, "jane") + text(4, ""))
    role_ref = raw(3, text(1, RBAC) + text(2, "Role") + text(3, "r"))
    binding = decode_kubernetes_protobuf(envelope(f"{RBAC}/v1", "RoleBinding", raw(1, object_meta("b")) + subject + role_ref))
    assert binding["subjects"] == [{"kind": "User", "apiGroup": RBAC, "name": "jane"}]
    assert binding["roleRef"] == {"apiGroup": RBAC, "kind": "Role", "name": "r"}
    rule = raw(2, text(1, "get") + text(1, "list") + text(2, "") + text(3, "pods"))
    selector = raw(3, raw(1, entry(1, "aggregate", "true")))
    role = decode_kubernetes_protobuf(envelope(f"{RBAC}/v1", "ClusterRole", raw(1, object_meta("c")) + rule + selector))
    assert role["rules"] == [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]
    assert role["aggregationRule"] == {"clusterRoleSelectors": [{"matchLabels": {"aggregate": "true"}}]}


def test_protobuf_reviews_and_token_request():
    attributes = raw(1, text(1, "team") + text(2, "list") + text(3, "") + text(4, "") + text(5, "pods") + text(6, "") + text(7, ""))
    extra = raw(5, text(1, "scopes") + raw(2, text(1, "a") + text(1, "b")))
    review = decode_kubernetes_protobuf(envelope("authorization.k8s.io/v1", "SubjectAccessReview",
                                                 raw(1, object_meta("")) + raw(2, attributes + text(3, "jane") + extra)))
    assert review["spec"] == {"resourceAttributes": {"namespace": "team", "verb": "list", "resource": "pods"}, "user": "jane",
                              "extra": {"scopes": ["a", "b"]}}
    token = decode_kubernetes_protobuf(envelope("authentication.k8s.io/v1", "TokenRequest",
                                                raw(1, object_meta("")) + raw(2, text(1, "api") + num(4, 600))))
    assert token["spec"] == {"audiences": ["api"], "expirationSeconds": 600}
