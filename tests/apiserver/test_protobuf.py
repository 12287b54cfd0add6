"""Protobuf request bodies: the captured ``kubectl create namespace demo`` body (api-compat.md G7)
and a Service hand-encoded the way Go's marshaller lays out ``kubectl create service clusterip
cs1 --tcp=80:8080`` (every non-pointer field written, zero or not)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubesvc.api.errors import StatusError
from kubesvc.apiserver.protobuf import decode_kubernetes_protobuf

CREATE_NAMESPACE_DEMO = bytes.fromhex(
    "6b3873000a0f0a02763112094e616d657370616365121c0a140a0464656d6f12001a0022002a0032003800420012001a020a001a002200"
)


# ---- a tiny encoder for the tests --------------------------------------------------------------


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def key(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def num(number: int, value: int) -> bytes:
    return key(number, 0) + varint(value)


def raw(number: int, payload: bytes) -> bytes:
    return key(number, 2) + varint(len(payload)) + payload


def text(number: int, value: str) -> bytes:
    return raw(number, value.encode())


def entry(number: int, k: str, v: str) -> bytes:
    return raw(number, text(1, k) + text(2, v))


def envelope(api_version: str, kind: str, obj: bytes, content_encoding: str = "", content_type: str = "") -> bytes:
    type_meta = text(1, api_version) + text(2, kind)
    return b"k8s\x00" + raw(1, type_meta) + raw(2, obj) + text(3, content_encoding) + text(4, content_type)


def object_meta(name: str, *extra: bytes) -> bytes:
    # gogo writes name..resourceVersion, generation and creationTimestamp even when empty
    return text(1, name) + text(2, "") + text(3, "") + text(4, "") + text(5, "") + text(6, "") + num(7, 0) + raw(8, b"") + b"".join(extra)


def service_port(name: str, protocol: str, port: int, target: bytes, node_port: int = 0, *extra: bytes) -> bytes:
    return text(1, name) + text(2, protocol) + num(3, port) + raw(4, target) + num(5, node_port) + b"".join(extra)


def int_target(n: int) -> bytes:
    return num(1, 0) + num(2, n) + text(3, "")


def service(spec: bytes, meta: bytes) -> bytes:
    status = raw(1, b"")  # ServiceStatus{loadBalancer: {}}
    return envelope("v1", "Service", raw(1, meta) + raw(2, spec) + raw(3, status))


def service_spec(*fields: bytes) -> bytes:
    # the non-pointer strings and scalars Go always writes, then the test's fields (which win)
    always = text(3, "") + text(4, "ClusterIP") + text(7, "") + text(8, "") + text(10, "") + text(11, "") + num(12, 0) + num(13, 0)
    return always + b"".join(fields)


KUBECTL_CREATE_SERVICE = service(
    service_spec(raw(1, service_port("80-8080", "TCP", 80, int_target(8080))), entry(2, "app", "cs1")),
    object_meta("cs1", entry(11, "app", "cs1")),
)


# ---- decoding -------------------------------------------------------------------------------------


def test_captured_create_namespace_body():
    assert len(CREATE_NAMESPACE_DEMO) == 55
    assert decode_kubernetes_protobuf(CREATE_NAMESPACE_DEMO) == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}, "spec": {}}


def test_encoder_reproduces_the_captured_namespace_body():
    namespace = raw(1, object_meta("demo")) + raw(2, b"") + raw(3, text(1, ""))
    assert envelope("v1", "Namespace", namespace) == CREATE_NAMESPACE_DEMO


def test_kubectl_create_service_clusterip():
    assert decode_kubernetes_protobuf(KUBECTL_CREATE_SERVICE) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "cs1", "labels": {"app": "cs1"}},
        "spec": {"ports": [{"name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080}], "selector": {"app": "cs1"}, "type": "ClusterIP"},
    }


SPEC_CASES = [
    pytest.param(service_spec(raw(1, service_port("", "TCP", 80, num(1, 1) + num(2, 0) + text(3, "http")))), {"ports": [{"protocol": "TCP", "port": 80, "targetPort": "http"}], "type": "ClusterIP"}, id="named-target-port"),
    pytest.param(service_spec(raw(1, service_port("", "TCP", 80, int_target(0)))), {"ports": [{"protocol": "TCP", "port": 80}], "type": "ClusterIP"}, id="zero-target-port-left-to-defaulting"),
    pytest.param(service_spec(raw(1, service_port("", "UDP", 53, int_target(53), 30053, text(6, "dns"))), raw(1, service_port("b", "TCP", 54, int_target(54)))), {"ports": [{"protocol": "UDP", "appProtocol": "dns", "port": 53, "targetPort": 53, "nodePort": 30053}, {"name": "b", "protocol": "TCP", "port": 54, "targetPort": 54}], "type": "ClusterIP"}, id="two-ports-node-port-app-protocol"),
    pytest.param(service_spec(text(18, "10.0.0.9"), text(18, "fd00::9"), text(19, "IPv4"), text(19, "IPv6"), text(17, "RequireDualStack")), {"clusterIPs": ["10.0.0.9", "fd00::9"], "type": "ClusterIP", "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "RequireDualStack"}, id="dual-stack"),
    pytest.param(service_spec(text(5, "1.2.3.4"), text(9, "10.0.0.0/8"), text(22, "Local"), text(23, "PreferClose"), text(21, "")), {"type": "ClusterIP", "externalIPs": ["1.2.3.4"], "loadBalancerSourceRanges": ["10.0.0.0/8"], "loadBalancerClass": "", "internalTrafficPolicy": "Local", "trafficDistribution": "PreferClose"}, id="lists-and-pointer-strings"),
    pytest.param(service_spec(num(20, 0)), {"type": "ClusterIP", "allocateLoadBalancerNodePorts": False}, id="pointer-false-kept"),
    pytest.param(service_spec(raw(14, raw(1, num(1, 10800)))), {"type": "ClusterIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}}}, id="session-affinity-config"),
    pytest.param(service_spec(num(12, 32000), num(13, 1)), {"type": "ClusterIP", "healthCheckNodePort": 32000, "publishNotReadyAddresses": True}, id="scalars-set"),
    pytest.param(service_spec(raw(1, service_port("", "TCP", 80, int_target(-1)))), {"ports": [{"protocol": "TCP", "port": 80, "targetPort": -1}], "type": "ClusterIP"}, id="negative-int32"),
    pytest.param(service_spec(num(99, 7), raw(98, b"\xff"), key(97, 1) + b"\0" * 8, key(96, 5) + b"\0" * 4), {"type": "ClusterIP"}, id="unknown-fields-skipped"),
    pytest.param(service_spec(text(4, "NodePort")), {"type": "NodePort"}, id="last-value-wins"),
]


@pytest.mark.parametrize("spec, expected", SPEC_CASES)
def test_service_spec_fields(spec, expected):
    assert decode_kubernetes_protobuf(service(spec, object_meta("s")))["spec"] == expected


def test_object_meta_fields():
    meta = object_meta(
        "",
        text(2, "web-"),
        text(3, "default"),
        entry(11, "app", "web"),
        entry(11, "tier", "fe"),
        entry(12, "note", "x"),
        text(14, "example.com/cleanup"),
        raw(13, text(5, "apps/v1") + text(1, "ReplicaSet") + text(3, "web-1") + text(4, "uid-1") + num(6, 1) + num(7, 0)),
        raw(17, b"\x0a\x03abc"),  # managedFields: skipped
    )
    assert decode_kubernetes_protobuf(service(service_spec(), meta))["metadata"] == {
        "generateName": "web-",
        "namespace": "default",
        "labels": {"app": "web", "tier": "fe"},
        "annotations": {"note": "x"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "uid-1", "controller": True, "blockOwnerDeletion": False}],
        "finalizers": ["example.com/cleanup"],
    }


def test_namespace_finalizers():
    body = envelope("v1", "Namespace", raw(1, object_meta("ns")) + raw(2, text(1, "kubernetes")))
    assert decode_kubernetes_protobuf(body)["spec"] == {"finalizers": ["kubernetes"]}


def test_invalid_utf8_is_replaced_like_gos_json_encoder():
    body = envelope("v1", "Namespace", raw(1, raw(1, b"d\xffemo")))
    assert decode_kubernetes_protobuf(body)["metadata"]["name"] == "d\ufffdemo"


# ---- errors -----------------------------------------------------------------------------------------


def status_of(body: bytes) -> StatusError:
    with pytest.raises(StatusError) as caught:
        decode_kubernetes_protobuf(body)
    return caught.value


@pytest.mark.parametrize(
    "body, reason",
    [
        pytest.param(envelope("v1", "Pod", raw(1, object_meta("p"))), 'apiVersion "v1", kind "Pod"', id="pod"),
        pytest.param(envelope("apps/v1", "DaemonSet", b""), 'apiVersion "apps/v1", kind "DaemonSet"', id="daemonset"),
        pytest.param(envelope("", "", b""), 'apiVersion "", kind ""', id="no-type-meta"),
        pytest.param(envelope("v1", "Namespace", b"", content_encoding="gzip"), 'contentEncoding "gzip"', id="compressed"),
    ],
)
def test_unsupported_kinds_are_415_pointing_at_json(body, reason):
    error = status_of(body)
    assert (error.code, error.reason) == (415, "UnsupportedMediaType")
    assert reason in error.message
    assert "--dry-run=client -o yaml | kubectl apply -f -" in error.message


@pytest.mark.parametrize(
    "body, message",
    [
        pytest.param(b'{"kind":"Namespace"}', "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]", id="json"),
        pytest.param(b"", "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]", id="empty"),
        pytest.param(CREATE_NAMESPACE_DEMO[:34], "the protobuf request body is malformed: field of 28 bytes at byte 19 runs past the end (30 bytes)", id="truncated-object"),
        pytest.param(CREATE_NAMESPACE_DEMO[:-3], "the protobuf request body is malformed: truncated varint at byte 48", id="truncated-tail"),
        pytest.param(b"k8s\x00\x0a", "the protobuf request body is malformed: truncated varint at byte 1", id="truncated-length"),
        pytest.param(b"k8s\x00" + b"\x08" + b"\xff" * 10 + b"\x01", "the protobuf request body is malformed: varint longer than 10 bytes ending at byte 11", id="long-varint"),
        pytest.param(b"k8s\x00\x0b", "the protobuf request body is malformed: unsupported wire type 3 for field 1", id="group"),
        pytest.param(b"k8s\x00\x00", "the protobuf request body is malformed: invalid field number 0", id="field-zero"),
        pytest.param(b"k8s\x00" + num(1, 5), "the protobuf request body is malformed: field typeMeta (1) has wire type 0, want 2", id="wrong-wire-type"),
        pytest.param(envelope("v1", "Service", raw(2, num(4, 1))), "the protobuf request body is malformed: field type (4) has wire type 0, want 2", id="wrong-wire-type-nested"),
    ],
)
def test_malformed_bodies_are_400(body, message):
    error = status_of(body)
    assert (error.code, error.reason, error.message) == (400, "BadRequest", message)


# ---- robustness -----------------------------------------------------------------------------------


def decodes_or_raises_status(body: bytes) -> None:
    try:
        decode_kubernetes_protobuf(body)
    except StatusError as e:
        assert e.code in (400, 415)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes(body):
    decodes_or_raises_status(body)
    decodes_or_raises_status(b"k8s\x00" + body)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from([CREATE_NAMESPACE_DEMO, KUBECTL_CREATE_SERVICE]), st.data())
def test_mutated_real_bodies(body, data):
    mutated = bytearray(body)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(4, len(mutated) - 1))
        mutated[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(4, len(mutated)))
    decodes_or_raises_status(bytes(mutated[:cut]))
