"""The OpenAPI v3 documents carry what kubectl needs: fieldValidation, SMP, explain-able components."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import openapi_spec_validator
import pytest

from kubesvc.api.scheme import all_kinds
from kubesvc.api.schema import STRING, F, Obj
from kubesvc.apiserver.openapi import PATCH_CONTENT_TYPES, OpenAPI

GROUP_VERSIONS = ["api/v1", "apis/discovery.k8s.io/v1", "apis/networking.k8s.io/v1", "apis/coordination.k8s.io/v1",
                  "apis/rbac.authorization.k8s.io/v1", "apis/authentication.k8s.io/v1", "apis/authorization.k8s.io/v1",
                  "apis/certificates.k8s.io/v1", "apis/apps/v1", "apis/batch/v1",
                  "apis/kubesvc.io/v1alpha1"]
WRITES = ("post", "put", "patch")


@pytest.fixture(scope="module")
def openapi() -> OpenAPI:
    return OpenAPI()


def load(openapi: OpenAPI, path: str) -> dict:
    body = openapi.document(path)
    assert body is not None, path
    return json.loads(body)


def operations(document: dict):
    for path, item in document["paths"].items():
        for verb in ("get", "put", "post", "patch", "delete"):
            if verb in item:
                yield path, verb, item[verb]


def component(document: dict, name: str) -> dict:
    return document["components"]["schemas"][name]


def referenced(schema: dict) -> str:
    """The component a property or item points at, through upstream's allOf wrapping."""
    return schema["allOf"][0]["$ref"].removeprefix("#/components/schemas/")


def test_the_index_lists_each_group_version_at_its_content_hash(openapi: OpenAPI):
    index = openapi.index()
    assert sorted(index["paths"]) == sorted(GROUP_VERSIONS)
    for path, entry in index["paths"].items():
        digest = hashlib.sha512(openapi.document(path)).hexdigest().upper()
        assert entry == {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
        assert openapi.etag(path) == digest


def test_documents_are_found_by_path_with_or_without_slashes(openapi: OpenAPI):
    assert openapi.document("/api/v1") == openapi.document("api/v1")
    assert openapi.document("apis/discovery.k8s.io/v2") is None
    assert openapi.etag("nope") is None


@pytest.mark.parametrize("path", GROUP_VERSIONS)
def test_every_write_operation_offers_server_side_validation(openapi: OpenAPI, path: str):
    document = load(openapi, path)
    assert document["openapi"] == "3.0.0"
    # a connect POST (pods/exec over SPDY) streams; it writes no object, and upstream offers no validation there
    writes = [(route, verb, op) for route, verb, op in operations(document) if verb in WRITES and op.get("x-kubernetes-action") != "connect"]
    assert writes
    for route, verb, operation in writes:
        names = {parameter["name"] for parameter in operation["parameters"] if parameter["in"] == "query"}
        assert {"fieldValidation", "dryRun", "fieldManager"} <= names, (route, verb)
        assert set(operation["x-kubernetes-group-version-kind"]) == {"group", "version", "kind"}
        if verb == "patch":
            assert "force" in names
            assert set(operation["requestBody"]["content"]) == set(PATCH_CONTENT_TYPES)


def test_pod_streams_are_connect_operations_as_upstream(openapi: OpenAPI):
    paths = load(openapi, "api/v1")["paths"]
    for name, kind, query in (("exec", "PodExecOptions", {"command", "container", "stderr", "stdin", "stdout", "tty"}),
                              ("attach", "PodAttachOptions", {"container", "stderr", "stdin", "stdout", "tty"}),
                              ("portforward", "PodPortForwardOptions", {"ports"})):
        item = paths[f"/api/v1/namespaces/{{namespace}}/pods/{{name}}/{name}"]
        assert {p["name"] for p in item["parameters"] if p["in"] == "query"} == query
        for verb in ("get", "post"):
            operation = item[verb]
            assert operation["operationId"] == f"connectCoreV1{verb.capitalize()}NamespacedPod{name.capitalize()}"
            assert operation["x-kubernetes-action"] == "connect"
            assert operation["x-kubernetes-group-version-kind"] == {"group": "", "kind": kind, "version": "v1"}


def test_patch_accepts_strategic_merge_patch(openapi: OpenAPI):
    document = load(openapi, "api/v1")
    patch = document["paths"]["/api/v1/namespaces/{namespace}/services/{name}"]["patch"]
    assert "application/strategic-merge-patch+json" in patch["requestBody"]["content"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Service"}


@pytest.mark.parametrize("path", GROUP_VERSIONS)
def test_every_reference_resolves_within_its_document(openapi: OpenAPI, path: str):
    document = load(openapi, path)
    schemas = document["components"]["schemas"]
    refs: list[str] = []

    def collect(node):
        if isinstance(node, dict):
            if "$ref" in node:
                refs.append(node["$ref"])
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(document)
    assert refs
    for ref in refs:
        assert ref.removeprefix("#/components/schemas/") in schemas, ref


def test_each_kind_has_its_paths_and_a_component_naming_its_group_version_kind(openapi: OpenAPI):
    for info in all_kinds():
        path = f"apis/{info.group}/{info.version}" if info.group else f"api/{info.version}"
        document = load(openapi, path)
        gvk = [{"group": info.group, "kind": info.kind, "version": info.version}]
        assert component(document, info.schema.name)["x-kubernetes-group-version-kind"] == gvk
        root = "/" + path
        collection = f"{root}/namespaces/{{namespace}}/{info.resource}" if info.namespaced else f"{root}/{info.resource}"
        if info.create_only:  # only POST on the collection: no item, list or all-namespaces paths
            assert set(document["paths"][collection]) == {"parameters", "post"}
            assert not [p for p in document["paths"] if p.startswith(collection + "/") or p == f"{root}/{info.resource}" != collection]
            post = document["paths"][collection]["post"]
            assert post["x-kubernetes-group-version-kind"] == gvk[0]
            assert post["requestBody"]["content"]["*/*"]["schema"]["$ref"].endswith("/" + info.schema.name)
            assert "fieldValidation" in {p["name"] for p in post["parameters"]}  # kubectl's validation mode
            continue
        assert {"get", "post", "delete"} <= set(document["paths"][collection])
        assert {"get", "put", "patch", "delete"} <= set(document["paths"][collection + "/{name}"])
        assert "get" in document["paths"][f"{root}/{info.resource}"]  # namespaced: the all-namespaces list
        for subresource in info.subresources:
            assert "put" in document["paths"][f"{collection}/{{name}}/{subresource}"]
        deleted = document["paths"][collection + "/{name}"]["delete"]["responses"]["200"]["content"]["application/json"]
        expected = info.schema.name if info.delete_returns_object else "io.k8s.apimachinery.pkg.apis.meta.v1.Status"
        assert deleted["schema"]["$ref"].endswith("/" + expected)


def test_explain_can_walk_from_service_to_its_ports(openapi: OpenAPI):
    document = load(openapi, "api/v1")
    service = component(document, "io.k8s.api.core.v1.Service")
    spec = component(document, referenced(service["properties"]["spec"]))
    ports = spec["properties"]["ports"]
    assert ports["x-kubernetes-patch-merge-key"] == "port"
    assert ports["x-kubernetes-patch-strategy"] == "merge"
    assert ports["x-kubernetes-list-type"] == "map"
    assert ports["x-kubernetes-list-map-keys"] == ["port", "protocol"]
    port = component(document, referenced(ports["items"]))
    assert port["required"] == ["port"]
    assert port["properties"]["port"] == {"type": "integer", "format": "int32",
                                          "description": "The port that will be exposed by this service."}
    int_or_string = component(document, referenced(port["properties"]["targetPort"]))
    assert int_or_string["x-kubernetes-int-or-string"] is True


def test_explain_can_walk_from_endpointslices_to_endpoint_conditions(openapi: OpenAPI):
    document = load(openapi, "apis/discovery.k8s.io/v1")
    slice_ = component(document, "io.k8s.api.discovery.v1.EndpointSlice")
    assert slice_["required"] == ["addressType", "endpoints"]
    endpoint = component(document, referenced(slice_["properties"]["endpoints"]["items"]))
    conditions = component(document, referenced(endpoint["properties"]["conditions"]))
    assert set(conditions["properties"]) == {"ready", "serving", "terminating"}


def test_schema_extensions_follow_the_schema_tree(openapi: OpenAPI):
    document = load(openapi, "api/v1")
    meta = component(document, "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
    assert meta["properties"]["finalizers"]["x-kubernetes-list-type"] == "set"
    assert meta["properties"]["labels"]["additionalProperties"] == {"type": "string", "default": ""}
    assert referenced(meta["properties"]["creationTimestamp"]) == "io.k8s.apimachinery.pkg.apis.meta.v1.Time"
    entry = component(document, "io.k8s.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry")
    assert entry["properties"]["fieldsV1"]["x-kubernetes-preserve-unknown-fields"] is True
    owner = component(document, "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference")
    assert owner["x-kubernetes-map-type"] == "atomic"
    event = component(document, "io.k8s.api.core.v1.Event")
    assert referenced(event["properties"]["eventTime"]) == "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime"


def test_a_document_is_valid_openapi_3():
    openapi = OpenAPI()
    for path in GROUP_VERSIONS:
        openapi_spec_validator.validate(load(openapi, path))


def test_the_hash_follows_the_content(openapi: OpenAPI):
    again = OpenAPI()
    assert again.index() == openapi.index()
    kinds = list(all_kinds())
    lease = next(info for info in kinds if info.kind == "Lease")
    changed_schema = Obj(lease.schema.name, {**lease.schema.fields, "extra": F(STRING, "new")}, gvk=lease.schema.gvk)
    changed = OpenAPI([dataclasses.replace(lease, schema=changed_schema) if info is lease else info for info in kinds])
    assert changed.etag("apis/coordination.k8s.io/v1") != openapi.etag("apis/coordination.k8s.io/v1")
    assert changed.etag("api/v1") == openapi.etag("api/v1")
    assert changed.index()["paths"]["apis/coordination.k8s.io/v1"] != openapi.index()["paths"]["apis/coordination.k8s.io/v1"]
