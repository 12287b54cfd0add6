"""Decoding the protobuf request bodies that kubectl's typed clients send.

``kubectl create namespace X`` and ``kubectl create service clusterip|nodeport|...`` POST
``Content-Type: application/vnd.kubernetes.protobuf`` and never retry with JSON, so the server
must read them (api-compat.md G7). The body is Kubernetes' protobuf envelope
(k8s.io/apimachinery/pkg/runtime/serializer/protobuf):

* the 4 magic bytes ``k8s\\x00``, then
* a ``runtime.Unknown`` message (apimachinery pkg/runtime/generated.proto):
  ``1: TypeMeta{1: apiVersion, 2: kind}``, ``2: raw`` (the object's own protobuf bytes),
  ``3: contentEncoding``, ``4: contentType``.

The object is ordinary proto2 wire format: each field is a varint key ``number << 3 | wire
type`` followed by a varint (type 0), 8 bytes (1), a varint length and that many bytes (2:
strings, nested messages, map entries), or 4 bytes (5). Maps are repeated entry messages
``{1: key, 2: value}``; ``IntOrString`` is ``{1: type (0 int, 1 string), 2: intVal, 3:
strVal}``. The Go marshaller writes every non-pointer field, zero or not.

``kubectl create secret|configmap|serviceaccount|role|clusterrole|rolebinding|clusterrolebinding``
(and ``deployment``, ``job``, ``cronjob``: apps/v1 Deployment, batch/v1 Job and CronJob with the
Pod fields they fill in) do the same. This module is a small wire decoder plus field tables for the kinds those commands
create (v1 Namespace, Service, Secret, ConfigMap, ServiceAccount, the four rbac/v1 kinds, and
the access reviews, SelfSubjectReview, TokenReview and TokenRequest of ``kubectl auth can-i``,
``auth whoami`` and ``create token``), with the field numbers of k8s.io/api core/v1, rbac/v1,
authorization/v1 and authentication/v1 generated.proto and apimachinery
meta/v1/generated.proto. A ``map<string, bytes>`` (Secret ``data``) becomes base64 strings, as
its JSON form is. The result is the dict the object would be as JSON: fields in Go struct order, and zero values dropped the way Go's ``omitempty`` drops them,
except for Go pointer fields (``allocateLoadBalancerNodePorts: false`` is a choice, not a
default). Two small liberties: a zero ``targetPort`` is dropped, not printed as ``0``, so
defaulting treats it as absent (it sets it to ``port`` either way); and ``status`` and the
server-owned metadata (timestamps, managedFields) are skipped, since a create ignores them.

Other kinds answer 415 UnsupportedMediaType, pointing at the JSON route; anything malformed
is a 400 BadRequest. No other exception escapes :func:`decode_kubernetes_protobuf`.
"""

from __future__ import annotations

import base64
import enum
from datetime import datetime, timezone
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from kubesvc.api.errors import StatusError, bad_request

MAGIC = b"k8s\x00"
PROTOBUF_CONTENT_TYPE = "application/vnd.kubernetes.protobuf"


class _Kind(enum.Enum):
    STRING = "string"
    BYTES = "bytes"
    INT32 = "int32"
    INT64 = "int64"
    BOOL = "bool"
    MESSAGE = "message"
    STRING_MAP = "map<string,string>"
    BYTES_MAP = "map<string,bytes>"  # JSON: the values base64-encoded (Secret data, ConfigMap binaryData)
    EXTRA_MAP = "map<string,ExtraValue>"  # JSON: string lists (a user's "extra" attributes)
    INT_OR_STRING = "IntOrString"
    BASE64 = "bytes as JSON carries them"  # a []byte field: base64 in JSON (CSR request, certificate)
    TIME = "Time"  # meta/v1 Time {1: seconds, 2: nanos}: RFC 3339 in JSON, "" (dropped) when zero


_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5
_WIRE_TYPE_OF = {
    _Kind.STRING: _LENGTH_DELIMITED,
    _Kind.BYTES: _LENGTH_DELIMITED,
    _Kind.MESSAGE: _LENGTH_DELIMITED,
    _Kind.STRING_MAP: _LENGTH_DELIMITED,
    _Kind.BYTES_MAP: _LENGTH_DELIMITED,
    _Kind.EXTRA_MAP: _LENGTH_DELIMITED,
    _Kind.INT_OR_STRING: _LENGTH_DELIMITED,
    _Kind.BASE64: _LENGTH_DELIMITED,
    _Kind.TIME: _LENGTH_DELIMITED,
    _Kind.INT32: _VARINT,
    _Kind.INT64: _VARINT,
    _Kind.BOOL: _VARINT,
}


@dataclass(frozen=True)
class _Field:
    json_name: str
    kind: _Kind
    repeated: bool = False
    message: Mapping[int, _Field] | None = None
    pointer: bool = False  # a Go pointer field: present on the wire means set, even to zero


Message = Mapping[int, _Field]  # field number -> field, in Go struct (= JSON) order


def _string(name: str, **kw: Any) -> _Field:
    return _Field(name, _Kind.STRING, **kw)


def _message(name: str, table: Message, **kw: Any) -> _Field:
    return _Field(name, _Kind.MESSAGE, message=table, **kw)


# ---- field tables -----------------------------------------------------------------------

_TYPE_META: Message = {1: _string("apiVersion"), 2: _string("kind")}  # runtime.TypeMeta
_UNKNOWN: Message = {  # runtime.Unknown, the envelope
    1: _message("typeMeta", _TYPE_META),
    2: _Field("raw", _Kind.BYTES),
    3: _string("contentEncoding"),
    4: _string("contentType"),
}

_OWNER_REFERENCE: Message = {
    5: _string("apiVersion"),
    1: _string("kind"),
    3: _string("name"),
    4: _string("uid"),
    6: _Field("controller", _Kind.BOOL, pointer=True),
    7: _Field("blockOwnerDeletion", _Kind.BOOL, pointer=True),
}
_OBJECT_META: Message = {
    1: _string("name"),
    2: _string("generateName"),
    3: _string("namespace"),
    5: _string("uid"),
    6: _string("resourceVersion"),
    7: _Field("generation", _Kind.INT64),
    11: _Field("labels", _Kind.STRING_MAP),
    12: _Field("annotations", _Kind.STRING_MAP),
    13: _message("ownerReferences", _OWNER_REFERENCE, repeated=True),
    14: _string("finalizers", repeated=True),
}

_NAMESPACE_SPEC: Message = {1: _string("finalizers", repeated=True)}
_NAMESPACE: Message = {1: _message("metadata", _OBJECT_META), 2: _message("spec", _NAMESPACE_SPEC)}

_SERVICE_PORT: Message = {
    1: _string("name"),
    2: _string("protocol"),
    6: _string("appProtocol", pointer=True),
    3: _Field("port", _Kind.INT32),
    4: _Field("targetPort", _Kind.INT_OR_STRING),
    5: _Field("nodePort", _Kind.INT32),
}
_CLIENT_IP_CONFIG: Message = {1: _Field("timeoutSeconds", _Kind.INT32, pointer=True)}
_SESSION_AFFINITY_CONFIG: Message = {1: _message("clientIP", _CLIENT_IP_CONFIG, pointer=True)}
_SERVICE_SPEC: Message = {
    1: _message("ports", _SERVICE_PORT, repeated=True),
    2: _Field("selector", _Kind.STRING_MAP),
    3: _string("clusterIP"),
    18: _string("clusterIPs", repeated=True),
    4: _string("type"),
    5: _string("externalIPs", repeated=True),
    7: _string("sessionAffinity"),
    8: _string("loadBalancerIP"),
    9: _string("loadBalancerSourceRanges", repeated=True),
    10: _string("externalName"),
    11: _string("externalTrafficPolicy"),
    12: _Field("healthCheckNodePort", _Kind.INT32),
    13: _Field("publishNotReadyAddresses", _Kind.BOOL),
    14: _message("sessionAffinityConfig", _SESSION_AFFINITY_CONFIG, pointer=True),
    19: _string("ipFamilies", repeated=True),
    17: _string("ipFamilyPolicy", pointer=True),
    20: _Field("allocateLoadBalancerNodePorts", _Kind.BOOL, pointer=True),
    21: _string("loadBalancerClass", pointer=True),
    22: _string("internalTrafficPolicy", pointer=True),
    23: _string("trafficDistribution", pointer=True),
}
_SERVICE: Message = {1: _message("metadata", _OBJECT_META), 2: _message("spec", _SERVICE_SPEC)}

# what kubectl create secret|configmap|serviceaccount send
_OBJECT_REFERENCE: Message = {
    1: _string("kind"), 2: _string("namespace"), 3: _string("name"), 4: _string("uid"), 5: _string("apiVersion"),
    6: _string("resourceVersion"), 7: _string("fieldPath"),
}
_SECRET: Message = {
    1: _message("metadata", _OBJECT_META),
    5: _Field("immutable", _Kind.BOOL, pointer=True),
    2: _Field("data", _Kind.BYTES_MAP),
    4: _Field("stringData", _Kind.STRING_MAP),
    3: _string("type"),
}
_CONFIG_MAP: Message = {
    1: _message("metadata", _OBJECT_META),
    4: _Field("immutable", _Kind.BOOL, pointer=True),
    2: _Field("data", _Kind.STRING_MAP),
    3: _Field("binaryData", _Kind.BYTES_MAP),
}
_SERVICE_ACCOUNT: Message = {
    1: _message("metadata", _OBJECT_META),
    2: _message("secrets", _OBJECT_REFERENCE, repeated=True),
    3: _message("imagePullSecrets", {1: _string("name")}, repeated=True),
    4: _Field("automountServiceAccountToken", _Kind.BOOL, pointer=True),
}

# what kubectl create role|clusterrole|rolebinding|clusterrolebinding send (k8s.io/api rbac/v1)
_LABEL_SELECTOR: Message = {
    1: _Field("matchLabels", _Kind.STRING_MAP),
    2: _message("matchExpressions", {1: _string("key"), 2: _string("operator"), 3: _string("values", repeated=True)},
                repeated=True),
}
_POLICY_RULE: Message = {
    1: _string("verbs", repeated=True), 2: _string("apiGroups", repeated=True), 3: _string("resources", repeated=True),
    4: _string("resourceNames", repeated=True), 5: _string("nonResourceURLs", repeated=True),
}
_ROLE: Message = {1: _message("metadata", _OBJECT_META), 2: _message("rules", _POLICY_RULE, repeated=True)}
_CLUSTER_ROLE: Message = {
    **_ROLE,
    3: _message("aggregationRule", {1: _message("clusterRoleSelectors", _LABEL_SELECTOR, repeated=True)}, pointer=True),
}
_SUBJECT: Message = {1: _string("kind"), 2: _string("apiGroup"), 3: _string("name"), 4: _string("namespace")}
_BINDING: Message = {
    1: _message("metadata", _OBJECT_META),
    2: _message("subjects", _SUBJECT, repeated=True),
    3: _message("roleRef", {1: _string("apiGroup"), 2: _string("kind"), 3: _string("name")}),
}

# what kubectl auth can-i [--list], auth whoami and create token send (authorization/v1, authentication/v1)
_RESOURCE_ATTRIBUTES: Message = {
    1: _string("namespace"), 2: _string("verb"), 3: _string("group"), 4: _string("version"), 5: _string("resource"),
    6: _string("subresource"), 7: _string("name"),
    8: _message("fieldSelector", {1: _string("rawSelector"), 2: _message(
        "requirements", {1: _string("key"), 2: _string("operator"), 3: _string("values", repeated=True)}, repeated=True)},
        pointer=True),
    9: _message("labelSelector", {1: _string("rawSelector"), 2: _message(
        "requirements", {1: _string("key"), 2: _string("operator"), 3: _string("values", repeated=True)}, repeated=True)},
        pointer=True),
}
_SELF_SUBJECT_ACCESS_REVIEW_SPEC: Message = {
    1: _message("resourceAttributes", _RESOURCE_ATTRIBUTES, pointer=True),
    2: _message("nonResourceAttributes", {1: _string("path"), 2: _string("verb")}, pointer=True),
}
_SUBJECT_ACCESS_REVIEW_SPEC: Message = {
    **_SELF_SUBJECT_ACCESS_REVIEW_SPEC,
    3: _string("user"), 4: _string("groups", repeated=True), 5: _Field("extra", _Kind.EXTRA_MAP), 6: _string("uid"),
}
_SUBJECT_ACCESS_REVIEW: Message = {1: _message("metadata", _OBJECT_META), 2: _message("spec", _SUBJECT_ACCESS_REVIEW_SPEC)}
_SELF_SUBJECT_ACCESS_REVIEW: Message = {
    1: _message("metadata", _OBJECT_META), 2: _message("spec", _SELF_SUBJECT_ACCESS_REVIEW_SPEC),
}
_SELF_SUBJECT_RULES_REVIEW: Message = {1: _message("metadata", _OBJECT_META), 2: _message("spec", {1: _string("namespace")})}
_TOKEN_REVIEW: Message = {
    1: _message("metadata", _OBJECT_META), 2: _message("spec", {1: _string("token"), 2: _string("audiences", repeated=True)}),
}
_SELF_SUBJECT_REVIEW: Message = {1: _message("metadata", _OBJECT_META)}
_TOKEN_REQUEST: Message = {
    1: _message("metadata", _OBJECT_META),
    2: _message("spec", {
        1: _string("audiences", repeated=True),
        4: _Field("expirationSeconds", _Kind.INT64, pointer=True),
        3: _message("boundObjectRef", {1: _string("kind"), 2: _string("apiVersion"), 3: _string("name"), 4: _string("uid")},
                    pointer=True),
    }),
}

# what kubectl certificate approve|deny PUT to .../approval (certificates/v1 generated.proto)
_CSR_CONDITION: Message = {
    1: _string("type"), 6: _string("status"), 2: _string("reason"), 3: _string("message"),
    4: _Field("lastUpdateTime", _Kind.TIME), 5: _Field("lastTransitionTime", _Kind.TIME),
}
_CERTIFICATE_SIGNING_REQUEST: Message = {
    1: _message("metadata", _OBJECT_META),
    2: _message("spec", {
        1: _Field("request", _Kind.BASE64), 7: _string("signerName"),
        8: _Field("expirationSeconds", _Kind.INT32, pointer=True), 5: _string("usages", repeated=True),
        2: _string("username"), 3: _string("uid"), 4: _string("groups", repeated=True), 6: _Field("extra", _Kind.EXTRA_MAP),
    }),
    3: _message("status", {1: _message("conditions", _CSR_CONDITION, repeated=True), 2: _Field("certificate", _Kind.BASE64)}),
}

# what kubectl create deployment|job send (k8s.io/api apps/v1, batch/v1 and core/v1 PodTemplateSpec). Only
# the Pod fields those commands fill in are read (name, image, command, args, ports, env, restart
# policy...); anything else a template carries is skipped, as unknown fields are.
_CONTAINER_PORT: Message = {
    1: _string("name"), 2: _Field("hostPort", _Kind.INT32), 3: _Field("containerPort", _Kind.INT32), 4: _string("protocol"),
    5: _string("hostIP"),
}
_CONTAINER: Message = {
    1: _string("name"), 2: _string("image"), 3: _string("command", repeated=True), 4: _string("args", repeated=True),
    5: _string("workingDir"), 6: _message("ports", _CONTAINER_PORT, repeated=True),
    7: _message("env", {1: _string("name"), 2: _string("value")}, repeated=True),
    13: _string("terminationMessagePath"), 20: _string("terminationMessagePolicy"), 14: _string("imagePullPolicy"),
    16: _Field("stdin", _Kind.BOOL), 17: _Field("stdinOnce", _Kind.BOOL), 18: _Field("tty", _Kind.BOOL),
}
_POD_SPEC: Message = {
    20: _message("initContainers", _CONTAINER, repeated=True),
    2: _message("containers", _CONTAINER, repeated=True),
    3: _string("restartPolicy"),
    4: _Field("terminationGracePeriodSeconds", _Kind.INT64, pointer=True),
    5: _Field("activeDeadlineSeconds", _Kind.INT64, pointer=True),
    6: _string("dnsPolicy"),
    7: _Field("nodeSelector", _Kind.STRING_MAP),
    8: _string("serviceAccountName"),
    10: _string("nodeName"),
    11: _Field("hostNetwork", _Kind.BOOL),
    16: _string("hostname"),
    17: _string("subdomain"),
    19: _string("schedulerName"),
}
_POD_TEMPLATE_SPEC: Message = {1: _message("metadata", _OBJECT_META), 2: _message("spec", _POD_SPEC)}
_DEPLOYMENT_SPEC: Message = {
    1: _Field("replicas", _Kind.INT32, pointer=True),
    2: _message("selector", _LABEL_SELECTOR, pointer=True),
    3: _message("template", _POD_TEMPLATE_SPEC),
    4: _message("strategy", {1: _string("type"), 2: _message("rollingUpdate", {
        1: _Field("maxUnavailable", _Kind.INT_OR_STRING, pointer=True), 2: _Field("maxSurge", _Kind.INT_OR_STRING, pointer=True),
    }, pointer=True)}),
    5: _Field("minReadySeconds", _Kind.INT32),
    6: _Field("revisionHistoryLimit", _Kind.INT32, pointer=True),
    7: _Field("paused", _Kind.BOOL),
    9: _Field("progressDeadlineSeconds", _Kind.INT32, pointer=True),
}
_DEPLOYMENT: Message = {1: _message("metadata", _OBJECT_META), 2: _message("spec", _DEPLOYMENT_SPEC)}
_JOB_SPEC: Message = {
    1: _Field("parallelism", _Kind.INT32, pointer=True),
    2: _Field("completions", _Kind.INT32, pointer=True),
    3: _Field("activeDeadlineSeconds", _Kind.INT64, pointer=True),
    7: _Field("backoffLimit", _Kind.INT32, pointer=True),
    12: _Field("backoffLimitPerIndex", _Kind.INT32, pointer=True),
    13: _Field("maxFailedIndexes", _Kind.INT32, pointer=True),
    4: _message("selector", _LABEL_SELECTOR, pointer=True),
    5: _Field("manualSelector", _Kind.BOOL, pointer=True),
    6: _message("template", _POD_TEMPLATE_SPEC),
    8: _Field("ttlSecondsAfterFinished", _Kind.INT32, pointer=True),
    9: _string("completionMode", pointer=True),
    10: _Field("suspend", _Kind.BOOL, pointer=True),
    14: _string("podReplacementPolicy", pointer=True),
    15: _string("managedBy", pointer=True),
}
_JOB: Message = {1: _message("metadata", _OBJECT_META), 2: _message("spec", _JOB_SPEC)}
_CRON_JOB_SPEC: Message = {
    1: _string("schedule"),
    8: _string("timeZone", pointer=True),
    2: _Field("startingDeadlineSeconds", _Kind.INT64, pointer=True),
    3: _string("concurrencyPolicy"),
    4: _Field("suspend", _Kind.BOOL, pointer=True),
    5: _message("jobTemplate", _JOB),  # JobTemplateSpec: metadata 1, spec 2, as a Job's
    6: _Field("successfulJobsHistoryLimit", _Kind.INT32, pointer=True),
    7: _Field("failedJobsHistoryLimit", _Kind.INT32, pointer=True),
}
_CRON_JOB: Message = {1: _message("metadata", _OBJECT_META), 2: _message("spec", _CRON_JOB_SPEC)}

_RBAC = "rbac.authorization.k8s.io/v1"
_AUTHZ = "authorization.k8s.io/v1"
_AUTHN = "authentication.k8s.io/v1"
SUPPORTED_KINDS: dict[tuple[str, str], Message] = {
    ("v1", "Namespace"): _NAMESPACE,
    ("v1", "Service"): _SERVICE,
    ("v1", "Secret"): _SECRET,
    ("v1", "ConfigMap"): _CONFIG_MAP,
    ("v1", "ServiceAccount"): _SERVICE_ACCOUNT,
    (_RBAC, "Role"): _ROLE,
    (_RBAC, "ClusterRole"): _CLUSTER_ROLE,
    (_RBAC, "RoleBinding"): _BINDING,
    (_RBAC, "ClusterRoleBinding"): _BINDING,
    (_AUTHZ, "SubjectAccessReview"): _SUBJECT_ACCESS_REVIEW,
    (_AUTHZ, "LocalSubjectAccessReview"): _SUBJECT_ACCESS_REVIEW,
    (_AUTHZ, "SelfSubjectAccessReview"): _SELF_SUBJECT_ACCESS_REVIEW,
    (_AUTHZ, "SelfSubjectRulesReview"): _SELF_SUBJECT_RULES_REVIEW,
    (_AUTHN, "TokenReview"): _TOKEN_REVIEW,
    (_AUTHN, "SelfSubjectReview"): _SELF_SUBJECT_REVIEW,
    (_AUTHN, "TokenRequest"): _TOKEN_REQUEST,
    ("apps/v1", "Deployment"): _DEPLOYMENT,
    ("batch/v1", "Job"): _JOB,
    ("batch/v1", "CronJob"): _CRON_JOB,
    ("certificates.k8s.io/v1", "CertificateSigningRequest"): _CERTIFICATE_SIGNING_REQUEST,
}


# ---- the wire format ------------------------------------------------------------------------


class _Malformed(Exception):
    pass


class _Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def varint(self) -> int:
        value = 0
        for shift in range(0, 70, 7):
            if self.pos >= len(self.data):
                raise _Malformed(f"truncated varint at byte {self.pos}")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value & 0xFFFFFFFFFFFFFFFF
        raise _Malformed(f"varint longer than 10 bytes ending at byte {self.pos}")

    def take(self, length: int) -> bytes:
        if length > len(self.data) - self.pos:
            raise _Malformed(f"field of {length} bytes at byte {self.pos} runs past the end ({len(self.data)} bytes)")
        chunk = self.data[self.pos : self.pos + length]
        self.pos += length
        return chunk

    def fields(self) -> Iterator[tuple[int, int, int | bytes | None]]:
        """(number, wire type, value): an int for varints, bytes for length-delimited
        fields, None for the fixed-width ones (no field here uses them; they are skipped)."""
        while self.pos < len(self.data):
            key = self.varint()
            number, wire_type = key >> 3, key & 7
            if not 1 <= number <= 2**29 - 1:
                raise _Malformed(f"invalid field number {number}")
            if wire_type == _VARINT:
                yield number, wire_type, self.varint()
            elif wire_type == _LENGTH_DELIMITED:
                yield number, wire_type, self.take(self.varint())
            elif wire_type in (_FIXED64, _FIXED32):
                self.take(8 if wire_type == _FIXED64 else 4)
                yield number, wire_type, None
            else:
                raise _Malformed(f"unsupported wire type {wire_type} for field {number}")


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _int_or_string(data: bytes) -> int | str:
    decoded = _decode_fields(data, {1: _Field("type", _Kind.INT64), 2: _Field("intVal", _Kind.INT32), 3: _string("strVal")})
    return decoded.get("strVal", "") if decoded.get("type") == 1 else decoded.get("intVal", 0)


_EXTRA_VALUE: Message = {1: _string("items", repeated=True)}  # authentication/authorization v1 ExtraValue


def _time(data: bytes) -> str:
    """meta/v1 Time as JSON has it (RFC 3339, whole seconds); "" for Go's zero time."""
    decoded = _decode_fields(data, {1: _Field("seconds", _Kind.INT64), 2: _Field("nanos", _Kind.INT32)})
    seconds = decoded.get("seconds", 0)
    if not seconds and not decoded.get("nanos"):
        return ""
    try:
        return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return ""  # before year 1 or after 9999: no RFC 3339 form; as absent


def _map_entry(data: bytes, value_kind: _Kind = _Kind.STRING) -> tuple[str, Any]:
    entry = _decode_fields(data, {1: _string("key"), 2: _Field("value", value_kind)})
    return entry.get("key", ""), entry.get("value", "" if value_kind is _Kind.STRING else b"")


def _scalar(field: _Field, value: int | bytes) -> Any:
    if isinstance(value, int):
        if field.kind is _Kind.BOOL:
            return value != 0
        return _signed(value, 32 if field.kind is _Kind.INT32 else 64)
    if field.kind is _Kind.STRING:
        return value.decode("utf-8", "replace")  # Go keeps the bytes; its JSON encoder replaces bad UTF-8
    if field.kind is _Kind.MESSAGE:
        return _decode_message(value, field.message or {})
    if field.kind is _Kind.INT_OR_STRING:
        return _int_or_string(value)
    if field.kind is _Kind.BASE64:
        return base64.b64encode(value).decode("ascii")
    if field.kind is _Kind.TIME:
        return _time(value)
    return value


def _decode_fields(data: bytes, table: Message) -> dict[str, Any]:
    """Every known field's value as read (last one wins; repeated and maps collect)."""
    decoded: dict[str, Any] = {}
    for number, wire_type, value in _Reader(data).fields():
        field = table.get(number)
        if field is None:
            continue  # an unknown field: skipped, as protobuf readers do
        if wire_type != _WIRE_TYPE_OF[field.kind]:
            raise _Malformed(f"field {field.json_name} ({number}) has wire type {wire_type}, want {_WIRE_TYPE_OF[field.kind]}")
        if field.kind is _Kind.STRING_MAP:
            key, item = _map_entry(value)  # type: ignore[arg-type]
            decoded.setdefault(field.json_name, {})[key] = item
        elif field.kind is _Kind.BYTES_MAP:
            key, item = _map_entry(value, _Kind.BYTES)  # type: ignore[arg-type]
            decoded.setdefault(field.json_name, {})[key] = base64.b64encode(item).decode("ascii")
        elif field.kind is _Kind.EXTRA_MAP:
            key, item = _map_entry(value, _Kind.BYTES)  # type: ignore[arg-type]
            decoded.setdefault(field.json_name, {})[key] = _decode_fields(item, _EXTRA_VALUE).get("items", [])
        elif field.repeated:
            decoded.setdefault(field.json_name, []).append(_scalar(field, value))
        else:
            decoded[field.json_name] = _scalar(field, value)
    return decoded


def _is_zero(value: Any) -> bool:
    return value in ("", 0, False)


def _decode_message(data: bytes, table: Message) -> dict[str, Any]:
    """The message as its JSON object: Go struct order, omitempty zero values left out."""
    decoded = _decode_fields(data, table)
    result = {}
    for field in table.values():
        if field.json_name not in decoded:
            continue
        value = decoded[field.json_name]
        if not field.pointer and not field.repeated and _is_zero(value):
            continue
        result[field.json_name] = value
    return result


# ---- the request body ---------------------------------------------------------------------


_SUPPORTED_TEXT = ", ".join(f"{api_version} {kind}" for api_version, kind in SUPPORTED_KINDS)


def _unsupported(what: str) -> StatusError:
    return StatusError(
        415,
        "UnsupportedMediaType",
        f"this server decodes {PROTOBUF_CONTENT_TYPE} request bodies only for {_SUPPORTED_TEXT}; "
        f"got {what}. Send the object as JSON instead, for example: "
        "kubectl create <kind> <name> ... --dry-run=client -o yaml | kubectl apply -f -",
    )


def decode_kubernetes_protobuf(body: bytes) -> dict:
    """The JSON-shaped object in a protobuf request body. Raises 400 or 415 StatusErrors only."""
    if not body.startswith(MAGIC):
        raise bad_request(f"provided data does not appear to be a protobuf message, expected prefix [{' '.join(str(b) for b in MAGIC)}]")
    try:
        envelope = _decode_fields(body[len(MAGIC) :], _UNKNOWN)
        type_meta = envelope.get("typeMeta", {})
        api_version, kind = type_meta.get("apiVersion", ""), type_meta.get("kind", "")
        table = SUPPORTED_KINDS.get((api_version, kind))
        if table is None:
            raise _unsupported(f'apiVersion "{api_version}", kind "{kind}"')
        if envelope.get("contentEncoding") or envelope.get("contentType", "") not in ("", PROTOBUF_CONTENT_TYPE):
            raise _unsupported(f'an envelope with contentEncoding "{envelope.get("contentEncoding", "")}" and contentType "{envelope.get("contentType", "")}"')
        return {"apiVersion": api_version, "kind": kind, **_decode_message(envelope.get("raw", b""), table)}
    except _Malformed as e:
        raise bad_request(f"the protobuf request body is malformed: {e}") from None
