"""The OpenAPI v2 (Swagger 2.0) document, ``GET /openapi/v2``, as JSON or as gnostic protobuf.

kubectl reads the v3 documents for nearly everything (``kubesvc.apiserver.openapi``), but one
path still goes through v2: client-side validation of a ``kind: List``. ``kubectl apply -f`` of
``{apiVersion: v1, kind: List, items: [...]}`` asks whether the server validates fields
(``queryParamVerifierV3.HasSupport``), and for ``v1/List`` the answer is always "no", since a
List is no resource (cli-runtime ``query_param_verifier_v3.go``). kubectl then validates each
item itself (kubectl ``pkg/util/openapi/validation``: ``validateList`` → ``LookupResource`` by
each item's ``x-kubernetes-group-version-kind`` → ``ValidateModel``, which reports unknown fields
and wrong types) against the schema it fetches with client-go's ``DiscoveryClient.OpenAPISchema``:
``GET /openapi/v2`` with ``Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf``,
decoded with ``proto.Unmarshal`` into gnostic's ``openapi_v2.Document``. A 404 there fails the
whole apply ("error validating data: the server could not find the requested resource").

Upstream's kube-apiserver serves one v2 document for every group/version, JSON by default and
the gnostic protobuf when asked for it. This one is derived from the v3 documents, so the two
never disagree: ``#/components/schemas/`` becomes ``#/definitions/``, an ``allOf: [{$ref}]``
property becomes a plain ``$ref`` with its description beside it (v2's form, and the only one
kube-openapi's v2 parser takes: a reference must carry no ``type`` or ``properties``), an
operation's ``requestBody`` becomes a ``body`` parameter and its responses' content types become
``consumes``/``produces``; IntOrString is ``{type: string, format: int-or-string}`` and Quantity
``{type: string}``, as upstream's v2 definitions read.

The protobuf is proto3 wire format of gnostic's ``openapiv2/OpenAPIv2.proto`` (field numbers in
the tables below). Vendor extensions (``x-…``) and defaults are ``Any{yaml}``: the value as YAML
text, which JSON is; kube-openapi reads them back with a YAML decoder.
"""

from __future__ import annotations

import json
import struct
from typing import Iterable

from kubesvc.util.protowire import varint

# kube-openapi's handler takes either name in Accept (client-go still sends the '@' one) and
# answers with the one Go's mime parser accepts.
PROTOBUF_TYPES = ("application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                  "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")
PROTOBUF_TYPE = PROTOBUF_TYPES[0]


def wants_protobuf(accept: str) -> bool:
    return any(name in accept for name in PROTOBUF_TYPES)

_V3_REF = "#/components/schemas/"
_V2_REF = "#/definitions/"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_OPERATIONS = ("get", "put", "post", "delete", "options", "head", "patch")


# ---- v3 → v2 ---------------------------------------------------------------------------------


def swagger_document(v3_documents: Iterable[dict]) -> dict:
    """One Swagger 2.0 document from the per-group/version OpenAPI v3 documents."""
    definitions: dict[str, dict] = {}
    paths: dict[str, dict] = {}
    for document in v3_documents:
        for name, schema in document.get("components", {}).get("schemas", {}).items():
            definitions[name] = _definition(name, schema)
        for path, item in document.get("paths", {}).items():
            paths[path] = _path_item(item)
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "unversioned"},
        "paths": dict(sorted(paths.items())),
        "definitions": dict(sorted(definitions.items())),
        "securityDefinitions": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header",
                                                "description": "Bearer Token authentication"}},
        "security": [{"BearerToken": []}],
    }


def _definition(name: str, schema: dict) -> dict:
    if name == _INT_OR_STRING:
        return {"description": schema.get("description", ""), "type": "string", "format": "int-or-string"}
    if name == _QUANTITY:
        return {"description": schema.get("description", ""), "type": "string"}
    return _schema(schema)


def _schema(schema: dict) -> dict:
    """A v3 schema in v2's dialect (recursively)."""
    out: dict = {}
    all_of = schema.get("allOf")
    if all_of and len(all_of) == 1 and "$ref" in all_of[0]:
        out["$ref"] = all_of[0]["$ref"].replace(_V3_REF, _V2_REF)
    for key, value in schema.items():
        if key == "allOf" and "$ref" in out:
            continue
        if key == "$ref":
            out["$ref"] = value.replace(_V3_REF, _V2_REF)
        elif key == "properties":
            out[key] = {name: _schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _schema(value)
        else:
            out[key] = value
    if "$ref" in out:  # v2 references carry only a description beside them
        out = {key: value for key, value in out.items() if key in ("$ref", "description")}
    return out


def _path_item(item: dict) -> dict:
    out: dict = {}
    for method in _OPERATIONS:
        if method in item:
            out[method] = _operation(item[method])
    if item.get("parameters"):
        out["parameters"] = [_parameter(parameter) for parameter in item["parameters"]]
    return out


def _parameter(parameter: dict) -> dict:
    out = {key: value for key, value in parameter.items() if key != "schema"}
    out.update(parameter.get("schema", {}))
    return out


def _operation(operation: dict) -> dict:
    out: dict = {}
    consumes: list[str] = []
    produces: list[str] = []
    parameters = [_parameter(parameter) for parameter in operation.get("parameters", [])]
    body = operation.get("requestBody")
    if body:
        content = body.get("content", {})
        consumes = list(content)
        schema = next(iter(content.values()), {}).get("schema", {})
        parameters.insert(0, {"name": "body", "in": "body", "required": True, "schema": _schema(schema)})
    responses: dict[str, dict] = {}
    for code, response in operation.get("responses", {}).items():
        answer = {"description": response.get("description", "")}
        content = response.get("content", {})
        for content_type in content:
            if content_type not in produces:
                produces.append(content_type)
        if content:
            answer["schema"] = _schema(next(iter(content.values())).get("schema", {}))
        responses[code] = answer
    for key, value in operation.items():
        if key in ("parameters", "requestBody", "responses"):
            continue
        out[key] = value
    if consumes:
        out["consumes"] = consumes
    if produces:
        out["produces"] = produces
    out["schemes"] = ["https"]
    if parameters:
        out["parameters"] = parameters
    out["responses"] = responses
    return out


# ---- gnostic protobuf ------------------------------------------------------------------------


def _bytes_field(number: int, data: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(data)) + data


def _string(number: int, value: str) -> bytes:
    return _bytes_field(number, value.encode()) if value else b""


def _strings(number: int, values: Iterable[str]) -> bytes:
    return b"".join(_bytes_field(number, value.encode()) for value in values)


def _bool(number: int, value: bool) -> bytes:
    return varint(number << 3) + b"\x01" if value else b""


def _int(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value & 0xFFFFFFFFFFFFFFFF) if value else b""


def _double(number: int, value: float) -> bytes:
    return varint(number << 3 | 1) + struct.pack("<d", value)


def _any(value) -> bytes:
    """gnostic ``Any``: ``2: yaml``."""
    return _string(2, json.dumps(value, sort_keys=True))


def _named_any(name: str, value) -> bytes:
    return _string(1, name) + _bytes_field(2, _any(value))


def _extensions(number: int, node: dict) -> bytes:
    return b"".join(_bytes_field(number, _named_any(key, value)) for key, value in node.items() if key.startswith("x-"))


# Schema's scalar fields: name → (number, encoder).
_SCHEMA_SCALARS = {
    "$ref": (1, _string), "format": (2, _string), "title": (3, _string), "description": (4, _string),
    "multipleOf": (6, _double), "maximum": (7, _double), "exclusiveMaximum": (8, _bool),
    "minimum": (9, _double), "exclusiveMinimum": (10, _bool), "maxLength": (11, _int), "minLength": (12, _int),
    "pattern": (13, _string), "maxItems": (14, _int), "minItems": (15, _int), "uniqueItems": (16, _bool),
    "maxProperties": (17, _int), "minProperties": (18, _int), "discriminator": (26, _string),
    "readOnly": (27, _bool),
}


def encode_schema(schema: dict) -> bytes:
    """gnostic ``Schema``."""
    out = bytearray()
    for key, value in schema.items():
        if key in _SCHEMA_SCALARS:
            number, encode = _SCHEMA_SCALARS[key]
            out += encode(number, value)
        elif key == "default":
            out += _bytes_field(5, _any(value))
        elif key == "required":
            out += _strings(19, value)
        elif key == "enum":
            out += b"".join(_bytes_field(20, _any(item)) for item in value)
        elif key == "additionalProperties":
            # AdditionalPropertiesItem: oneof {1: Schema, 2: bool}
            item = _bytes_field(1, encode_schema(value)) if isinstance(value, dict) else varint(2 << 3) + varint(int(bool(value)))
            out += _bytes_field(21, item)
        elif key == "type":
            out += _bytes_field(22, _strings(1, [value] if isinstance(value, str) else value))
        elif key == "items":
            items = value if isinstance(value, list) else [value]
            out += _bytes_field(23, b"".join(_bytes_field(1, encode_schema(item)) for item in items))
        elif key == "allOf":
            out += b"".join(_bytes_field(24, encode_schema(item)) for item in value)
        elif key == "properties":
            # Properties{1: repeated NamedSchema{1: name, 2: Schema}}, present even when empty
            out += _bytes_field(25, b"".join(_bytes_field(1, _string(1, name) + _bytes_field(2, encode_schema(sub)))
                                             for name, sub in value.items()))
        elif key == "example":
            out += _bytes_field(30, _any(value))
    out += _extensions(31, schema)
    return bytes(out)


# Non-body parameters' fields: (QueryParameterSubSchema, PathParameterSubSchema, HeaderParameterSubSchema).
_PARAMETER_FIELDS = {
    "required": ((1, _bool), (1, _bool), (1, _bool)),
    "in": ((2, _string), (2, _string), (2, _string)),
    "description": ((3, _string), (3, _string), (3, _string)),
    "name": ((4, _string), (4, _string), (4, _string)),
    "type": ((6, _string), (5, _string), (5, _string)),
    "format": ((7, _string), (6, _string), (6, _string)),
    "collectionFormat": ((9, _string), (8, _string), (8, _string)),
    "uniqueItems": ((20, _bool), (19, _bool), (19, _bool)),
}
_PARAMETER_KINDS = {"query": (0, 3, 23), "path": (1, 4, 22), "header": (2, 1, 22)}


def _encode_parameter(parameter: dict) -> bytes:
    """gnostic ``ParametersItem{1: Parameter{1: BodyParameter | 2: NonBodyParameter}}``."""
    if parameter.get("in") == "body":
        body = (_string(1, parameter.get("description", "")) + _string(2, parameter["name"]) + _string(3, "body")
                + _bool(4, parameter.get("required", False)) + _bytes_field(5, encode_schema(parameter.get("schema", {})))
                + _extensions(6, parameter))
        return _bytes_field(1, _bytes_field(1, body))
    column, oneof_number, extension_number = _PARAMETER_KINDS[parameter.get("in", "query")]
    sub = bytearray()
    for key, value in parameter.items():
        if key in _PARAMETER_FIELDS:
            number, encode = _PARAMETER_FIELDS[key][column]
            sub += encode(number, value)
    sub += _extensions(extension_number, parameter)
    return _bytes_field(1, _bytes_field(2, _bytes_field(oneof_number, bytes(sub))))


def _encode_operation(operation: dict) -> bytes:
    out = bytearray(_strings(1, operation.get("tags", [])))
    out += _string(2, operation.get("summary", "")) + _string(3, operation.get("description", ""))
    out += _string(5, operation.get("operationId", ""))
    out += _strings(6, operation.get("produces", [])) + _strings(7, operation.get("consumes", []))
    out += b"".join(_bytes_field(8, _encode_parameter(parameter)) for parameter in operation.get("parameters", []))
    responses = b""
    for code, response in operation.get("responses", {}).items():
        answer = _string(1, response.get("description", ""))
        if "schema" in response:
            answer += _bytes_field(2, _bytes_field(1, encode_schema(response["schema"])))
        # NamedResponseValue{1: code, 2: ResponseValue{1: Response}}
        responses += _bytes_field(1, _string(1, code) + _bytes_field(2, _bytes_field(1, answer)))
    out += _bytes_field(9, responses)
    out += _strings(10, operation.get("schemes", []))
    out += _bool(11, operation.get("deprecated", False))
    out += _extensions(13, operation)
    return bytes(out)


def _encode_path_item(item: dict) -> bytes:
    out = bytearray()
    for number, method in enumerate(_OPERATIONS, start=2):
        if method in item:
            out += _bytes_field(number, _encode_operation(item[method]))
    out += b"".join(_bytes_field(9, _encode_parameter(parameter)) for parameter in item.get("parameters", []))
    out += _extensions(10, item)
    return bytes(out)


def encode_document(document: dict) -> bytes:
    """gnostic ``openapi_v2.Document`` of a Swagger 2.0 document made by :func:`swagger_document`."""
    info = document["info"]
    out = bytearray(_string(1, document["swagger"]))
    out += _bytes_field(2, _string(1, info["title"]) + _string(2, info["version"]))
    out += _bytes_field(8, b"".join(_bytes_field(2, _string(1, path) + _bytes_field(2, _encode_path_item(item)))
                                    for path, item in document["paths"].items()))
    out += _bytes_field(9, b"".join(_bytes_field(1, _string(1, name) + _bytes_field(2, encode_schema(schema)))
                                    for name, schema in document["definitions"].items()))
    for requirement in document.get("security", []):
        # SecurityRequirement{1: NamedStringArray{1: name, 2: StringArray{1: values}}}
        out += _bytes_field(12, b"".join(_bytes_field(1, _string(1, name) + _bytes_field(2, _strings(1, scopes)))
                                         for name, scopes in requirement.items()))
    definitions = b""
    for name, scheme in document.get("securityDefinitions", {}).items():
        api_key = (_string(1, scheme["type"]) + _string(2, scheme["name"]) + _string(3, scheme["in"])
                   + _string(4, scheme.get("description", "")))
        # NamedSecurityDefinitionsItem{1: name, 2: SecurityDefinitionsItem{2: ApiKeySecurity}}
        definitions += _bytes_field(1, _string(1, name) + _bytes_field(2, _bytes_field(2, api_key)))
    if definitions:
        out += _bytes_field(13, definitions)
    return bytes(out)
