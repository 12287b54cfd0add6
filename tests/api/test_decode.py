"""Decoding request bodies: upstream's exact 400 texts, fieldValidation modes, nulls, copies."""

from __future__ import annotations

import copy

import pytest

from kubesvc.api.decode import MAX_UNKNOWN_FIELDS, decode_object
from kubesvc.util.golang import rfc3339_error
from kubesvc.api.errors import StatusError
from kubesvc.api.kinds.coordination import LEASE
from kubesvc.api.kinds.core import NODE, POD, SERVICE
from kubesvc.api.kinds.discovery import ENDPOINT_SLICE

CANNOT_HANDLE = 'Service in version "v1" cannot be handled as a Service: '


def decode_service(data: dict, validation: str = "Strict") -> tuple[dict, list[str]]:
    return decode_object(data, SERVICE, kind_label="Service", api_version="v1", validation=validation)


def rejection(data: dict, validation: str = "Strict", schema=SERVICE, kind="Service", api_version="v1") -> str:
    with pytest.raises(StatusError) as caught:
        decode_object(data, schema, kind_label=kind, api_version=api_version, validation=validation)
    assert (caught.value.code, caught.value.reason) == (400, "BadRequest")
    return caught.value.message


def service(**spec) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"ports": [{"port": 80}], **spec}}


# ---- unknown fields --------------------------------------------------------------------------


def test_strict_rejects_an_unknown_field_with_its_path():
    assert rejection(service(bogusField=1)) == CANNOT_HANDLE + 'strict decoding error: unknown field "spec.bogusField"'


def test_strict_lists_every_unknown_field_in_document_order_with_list_indices():
    body = {"bogus": 1, "metadata": {"name": "web", "nmae": "x"},
            "spec": {"ports": [{"port": 80}, {"port": 81, "prot": "TCP"}], "zzz": True}}
    assert rejection(body) == CANNOT_HANDLE + (
        'strict decoding error: unknown field "bogus", unknown field "metadata.nmae", '
        'unknown field "spec.ports[1].prot", unknown field "spec.zzz"')


def test_field_names_are_case_sensitive():
    assert rejection({"Spec": {}}) == CANNOT_HANDLE + 'strict decoding error: unknown field "Spec"'


def test_warn_drops_unknown_fields_and_returns_one_warning_each():
    result, warnings = decode_service(service(bogusField=1, ports=[{"port": 80, "x": 1}]), "Warn")
    assert result["spec"] == {"ports": [{"port": 80}]}
    assert warnings == ['unknown field "spec.ports[0].x"', 'unknown field "spec.bogusField"']


def test_ignore_drops_unknown_fields_silently():
    result, warnings = decode_service(service(bogusField=1), "Ignore")
    assert result == {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}
    assert warnings == []


def test_unknown_fields_are_collected_up_to_upstreams_limit():
    _, warnings = decode_service({f"field{i}": i for i in range(MAX_UNKNOWN_FIELDS + 20)}, "Warn")
    assert len(warnings) == MAX_UNKNOWN_FIELDS


def test_a_group_kind_names_only_its_version():
    message = rejection({"bogus": 1}, schema=ENDPOINT_SLICE, kind="EndpointSlice", api_version="discovery.k8s.io/v1")
    assert message == ('EndpointSlice in version "v1" cannot be handled as a EndpointSlice: '
                       'strict decoding error: unknown field "bogus"')


def test_an_unknown_validation_mode_is_a_programming_error():
    with pytest.raises(ValueError):
        decode_service(service(), "strict")


# ---- type errors -----------------------------------------------------------------------------

TYPE_ERRORS = [
    ("string in int32", service(ports=[{"port": "80"}]),
     "json: cannot unmarshal string into Go struct field ServicePort.spec.ports.port of type int32"),
    ("fraction in int32", service(ports=[{"port": 80.5}]),
     "json: cannot unmarshal number 80.5 into Go struct field ServicePort.spec.ports.port of type int32"),
    ("integral float in int32", service(ports=[{"port": 80.0}]),
     "json: cannot unmarshal number 80.0 into Go struct field ServicePort.spec.ports.port of type int32"),
    ("overflow in int32", service(ports=[{"port": 1 << 31}]),
     "json: cannot unmarshal number 2147483648 into Go struct field ServicePort.spec.ports.port of type int32"),
    ("bool in int32", service(healthCheckNodePort=True),
     "json: cannot unmarshal bool into Go struct field ServiceSpec.spec.healthCheckNodePort of type int32"),
    ("number in string", service(clusterIP=10),
     "json: cannot unmarshal number into Go struct field ServiceSpec.spec.clusterIP of type string"),
    ("string in bool", service(publishNotReadyAddresses="true"),
     "json: cannot unmarshal string into Go struct field ServiceSpec.spec.publishNotReadyAddresses of type bool"),
    ("string for a struct", {"spec": "x"},
     "json: cannot unmarshal string into Go struct field Service.spec of type v1.ServiceSpec"),
    ("object for a list", service(ports={"port": 80}),
     "json: cannot unmarshal object into Go struct field ServiceSpec.spec.ports of type []v1.ServicePort"),
    ("string for a list item struct", service(ports=["80"]),
     "json: cannot unmarshal string into Go struct field ServiceSpec.spec.ports of type v1.ServicePort"),
    ("array for a map", {"metadata": {"labels": ["a"]}},
     "json: cannot unmarshal array into Go struct field ObjectMeta.metadata.labels of type map[string]string"),
    ("number as a map value", {"metadata": {"labels": {"a": 1}}},
     "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string"),
    ("number in a string list", service(clusterIPs=["10.0.0.1", 2]),
     "json: cannot unmarshal number into Go struct field ServiceSpec.spec.clusterIPs of type string"),
    ("bool as int-or-string", service(ports=[{"port": 80, "targetPort": True}]),
     "json: cannot unmarshal bool into Go struct field ServicePort.spec.ports.targetPort of type int32"),
    ("fraction as int-or-string", service(ports=[{"port": 80, "targetPort": 1.5}]),
     "json: cannot unmarshal number 1.5 into Go struct field ServicePort.spec.ports.targetPort of type int32"),
    ("number as a time", {"metadata": {"creationTimestamp": 5}},
     "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.creationTimestamp of type string"),
    ("unparseable time", {"metadata": {"creationTimestamp": "yesterday"}},
     'parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006"'),
]


@pytest.mark.parametrize("body, message", [case[1:] for case in TYPE_ERRORS], ids=[case[0] for case in TYPE_ERRORS])
def test_type_errors_read_as_encoding_json_writes_them(body: dict, message: str):
    assert rejection(body) == CANNOT_HANDLE + message


@pytest.mark.parametrize("validation", ["Strict", "Warn", "Ignore"])
def test_a_type_error_is_rejected_in_every_mode_and_before_unknown_fields(validation: str):
    body = service(bogusField=1, ports=[{"port": "80"}])
    assert rejection(body, validation) == CANNOT_HANDLE + (
        "json: cannot unmarshal string into Go struct field ServicePort.spec.ports.port of type int32")


def test_the_first_type_error_is_reported():
    body = service(ports=[{"port": "80"}, {"port": "81", "nodePort": "x"}], clusterIP=1)
    assert rejection(body).endswith("Go struct field ServicePort.spec.ports.port of type int32")


def test_a_custom_decoders_error_wins_over_an_earlier_type_error():
    # encoding/json remembers the port error and goes on; IntOrString's own decoder fails outright
    body = service(ports=[{"port": "80", "targetPort": True}])
    assert rejection(body).endswith("Go struct field ServicePort.spec.ports.targetPort of type int32")


def test_quantities_are_checked_and_numbers_become_strings():
    pod = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": 0.5, "memory": "1Gi"}}}]}}
    result, _ = decode_object(pod, POD, kind_label="Pod", api_version="v1")
    assert result["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "0.5", "memory": "1Gi"}
    bad = {"status": {"capacity": {"cpu": "lots"}}}
    assert rejection(bad, schema=NODE, kind="Node") == (
        'Node in version "v1" cannot be handled as a Node: quantities must match the regular expression '
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    assert rejection({"status": {"capacity": {"cpu": "1ii"}}}, schema=NODE, kind="Node").endswith(
        "unable to parse quantity's suffix")


def test_micro_times_decode_like_times():
    lease = {"spec": {"renewTime": "2024-05-01T10:00:00.123456Z", "leaseDurationSeconds": 15}}
    result, _ = decode_object(lease, LEASE, kind_label="Lease", api_version="coordination.k8s.io/v1")
    assert result == lease
    assert rejection({"spec": {"renewTime": "now"}}, schema=LEASE, kind="Lease").endswith(
        'parsing time "now" as "2006-01-02T15:04:05Z07:00": cannot parse "now" as "2006"')


GO_TIME_PARSE = [
    ("2024-05-01T10:00:00Z", None),
    ("2024-05-01T10:00:00.5+02:00", None),
    ("2024-05-01T10:00:00,5-07:30", None),
    ("2024-05-01T1:00:00Z", None),  # Go's hour element takes one digit
    ("2024-02-29T00:00:00Z", None),
    ("2024-05-01T10:00:00", 'parsing time "2024-05-01T10:00:00" as "2006-01-02T15:04:05Z07:00": cannot parse "" as "Z07:00"'),
    ("2024-05-01 10:00:00Z", 'parsing time "2024-05-01 10:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse " 10:00:00Z" as "T"'),
    ("2024-5-01T10:00:00Z", 'parsing time "2024-5-01T10:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse "5-01T10:00:00Z" as "01"'),
    ("2024-13-01T10:00:00Z", 'parsing time "2024-13-01T10:00:00Z": month out of range'),
    ("2023-02-29T00:00:00Z", 'parsing time "2023-02-29T00:00:00Z": day out of range'),
    ("2024-05-01T24:00:00Z", 'parsing time "2024-05-01T24:00:00Z": hour out of range'),
    ("2024-05-01T10:00:00+0200", 'parsing time "2024-05-01T10:00:00+0200" as "2006-01-02T15:04:05Z07:00": cannot parse "+0200" as "Z07:00"'),
    ("2024-05-01T10:00:00Zjunk", 'parsing time "2024-05-01T10:00:00Zjunk": extra text: "junk"'),
    ('"\u00e9', 'parsing time "\\"\\xc3\\xa9" as "2006-01-02T15:04:05Z07:00": cannot parse "\\"\\xc3\\xa9" as "2006"'),
]


@pytest.mark.parametrize("value, error", GO_TIME_PARSE, ids=[case[0] for case in GO_TIME_PARSE])
def test_times_parse_as_go_parses_rfc3339(value: str, error: str | None):
    assert rfc3339_error(value) == error


# ---- nulls, nesting, copies ------------------------------------------------------------------


def test_null_fields_are_removed_and_null_elements_become_zero_values():
    body = {"metadata": {"name": "web", "labels": {"a": None}, "creationTimestamp": None},
            "spec": {"ports": [None, {"port": 80, "name": None}], "clusterIPs": [None], "selector": None}}
    result, _ = decode_service(body)
    assert result == {"metadata": {"name": "web", "labels": {"a": ""}},
                      "spec": {"ports": [{}, {"port": 80}], "clusterIPs": [""]}}


def test_nested_lists_and_maps_decode_at_every_depth():
    pod = {"spec": {"containers": [{
        "name": "app",
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http", "httpHeaders": [{"name": "X", "value": "1"}]},
                           "periodSeconds": 5},
    }]}, "status": {"podIPs": [{"ip": "10.1.0.5"}], "containerStatuses": [
        {"name": "app", "ready": True, "restartCount": 0, "image": "i", "imageID": "",
         "state": {"running": {"startedAt": "2024-05-01T10:00:00Z"}}}]}}
    result, _ = decode_object(pod, POD, kind_label="Pod", api_version="v1")
    assert result == pod
    pod["spec"]["containers"][0]["readinessProbe"]["httpGet"]["httpHeaders"][0]["nmae"] = "typo"
    assert rejection(pod, schema=POD, kind="Pod") == (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field '
        '"spec.containers[0].readinessProbe.httpGet.httpHeaders[0].nmae"')


def test_any_subtrees_are_kept_verbatim_and_copied():
    managed = [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:ports": {'k:{"port":80,"protocol":"TCP"}': {".": {}, "f:x": None}}}}}]
    volumes = [{"name": "data", "emptyDir": {}, "anything": [1, "two", None]}]
    pod = {"metadata": {"managedFields": managed}, "spec": {"volumes": volumes, "containers": [{"name": "c"}]}}
    original = copy.deepcopy(pod)
    result, warnings = decode_object(pod, POD, kind_label="Pod", api_version="v1")
    assert (result, warnings) == (original, [])
    result["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"].clear()
    result["spec"]["volumes"][0]["anything"].append(4)
    assert pod == original


def test_the_input_is_not_modified():
    body = service(bogusField=1, selector={"app": None}, ports=[{"port": 80, "x": None}])
    original = copy.deepcopy(body)
    decode_service(body, "Warn")
    assert body == original
