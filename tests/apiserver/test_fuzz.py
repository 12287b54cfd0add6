"""Bad input never yields a 5xx or a traceback, and never changes stored data.

Hypothesis generates requests that are wrong by construction (malformed JSON/YAML, wrong kinds,
unknown fields under Strict, invalid names, oversized bodies, bad tokens, garbage selectors and
patches) and sends them to the real server over HTTPS. Every error answer must be a well-formed
``Status`` whose ``code`` equals the HTTP status; after the run, the namespace's objects are
exactly what they were (same resourceVersions).
"""

from __future__ import annotations

import json
import re
import uuid

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

VALID_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


class Fuzzer:
    def __init__(self, server):
        self.base = server.url
        self.session = requests.Session()
        self.session.trust_env = False  # REQUESTS_CA_BUNDLE would override our CA
        self.session.verify = str(server.ca_file)
        self.session.headers["Authorization"] = f"Bearer {server.token}"
        self.ns = f"fuzz-{uuid.uuid4().hex[:6]}"
        self.post_json("/api/v1/namespaces", {"metadata": {"name": self.ns}}, expect=201)
        self.post_json(self.services, {"metadata": {"name": "keep", "labels": {"a": "b"}}, "spec": {"ports": [{"port": 80}]}}, expect=201)

    @property
    def services(self) -> str:
        return f"/api/v1/namespaces/{self.ns}/services"

    def post_json(self, path, body, expect):
        response = self.session.post(self.base + path, data=json.dumps(body), headers={"Content-Type": "application/json"})
        assert response.status_code == expect, response.text

    def snapshot(self) -> list[tuple[str, str]]:
        items = self.session.get(self.base + self.services).json()["items"]
        return [(i["metadata"]["name"], i["metadata"]["resourceVersion"]) for i in items]

    def send(self, method: str, path: str, *, data: bytes | str | None = None, content_type: str | None = "application/json",
             params: dict | None = None, headers: dict | None = None) -> requests.Response:
        all_headers = {"Content-Type": content_type} if content_type else {}
        all_headers.update(headers or {})
        response = self.session.request(method, self.base + path, data=data, params=params, headers=all_headers)
        assert response.status_code < 500, (response.status_code, response.text[:500])
        if response.status_code >= 400:
            assert_status(response)
        return response


def assert_status(response: requests.Response) -> None:
    assert response.headers["Content-Type"].startswith("application/json"), response.headers
    body = response.json()
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure"
    assert body["code"] == response.status_code
    assert isinstance(body["message"], str) and body["message"]
    assert isinstance(body["reason"], str) and body["reason"]
    assert "Traceback" not in body["message"]


@pytest.fixture(scope="module")
def fuzzer(apiserver):
    fuzz = Fuzzer(apiserver)
    before = fuzz.snapshot()
    yield fuzz
    assert fuzz.snapshot() == before, "bad requests changed stored data"


def not_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return True
    return False


@SETTINGS
@given(body=st.text(max_size=200).filter(not_json))
def test_malformed_json_body_is_400(fuzzer, body):
    response = fuzzer.send("POST", fuzzer.services, data=body.encode())
    assert response.status_code == 400


@SETTINGS
@given(body=st.binary(max_size=200))
def test_random_bytes_as_yaml_or_protobuf_never_5xx(fuzzer, body):
    for content_type in ("application/yaml", "application/vnd.kubernetes.protobuf"):
        response = fuzzer.send("POST", fuzzer.services, data=b"k8s\x00" + body if "protobuf" in content_type else body, content_type=content_type)
        assert response.status_code >= 400


@SETTINGS
@given(kind=st.text(min_size=1, max_size=20).filter(lambda k: k != "Service"), spec=JSONISH)
def test_wrong_kind_is_400(fuzzer, kind, spec):
    body = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "x"}, "spec": spec}
    assert fuzzer.send("POST", fuzzer.services, data=json.dumps(body)).status_code == 400


@SETTINGS
@given(field=st.text(min_size=1, max_size=15).filter(lambda f: f not in {
    "ports", "selector", "clusterIP", "clusterIPs", "type", "externalIPs", "sessionAffinity", "loadBalancerIP",
    "loadBalancerSourceRanges", "externalName", "externalTrafficPolicy", "healthCheckNodePort", "publishNotReadyAddresses",
    "sessionAffinityConfig", "ipFamilies", "ipFamilyPolicy", "allocateLoadBalancerNodePorts", "loadBalancerClass",
    "internalTrafficPolicy", "trafficDistribution"}), value=JSONISH)
def test_unknown_field_under_strict_is_400(fuzzer, field, value):
    body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "unk"}, "spec": {"ports": [{"port": 80}], field: value}}
    response = fuzzer.send("POST", fuzzer.services, data=json.dumps(body), params={"fieldValidation": "Strict"})
    assert response.status_code == 400
    assert "strict decoding error: unknown field" in response.json()["message"]


@SETTINGS
@given(name=st.text(min_size=1, max_size=80).filter(lambda n: not (VALID_1035.fullmatch(n) and len(n) <= 63)))
def test_invalid_names_are_422(fuzzer, name):
    body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}}
    response = fuzzer.send("POST", fuzzer.services, data=json.dumps(body))
    assert response.status_code in (400, 422)


@SETTINGS
@given(selector=st.text(max_size=40), fields=st.text(max_size=40), limit=st.text(max_size=5), rv=st.text(max_size=8))
def test_garbage_list_parameters_never_5xx(fuzzer, selector, fields, limit, rv):
    response = fuzzer.send("GET", fuzzer.services, content_type=None,
                           params={"labelSelector": selector, "fieldSelector": fields, "limit": limit, "resourceVersion": rv})
    if response.status_code == 200:
        assert response.json()["kind"] == "ServiceList"


@SETTINGS
@given(patch=JSONISH, patch_type=st.sampled_from(["application/merge-patch+json", "application/json-patch+json",
                                                  "application/strategic-merge-patch+json", "application/apply-patch+yaml", "text/plain"]))
def test_garbage_patches_with_dry_run_never_5xx(fuzzer, patch, patch_type):
    fuzzer.send("PATCH", fuzzer.services + "/keep", data=json.dumps(patch), content_type=patch_type,
                params={"dryRun": "All", "fieldManager": "fuzz"})


@SETTINGS
@given(token=st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40))
def test_bad_token_is_401(fuzzer, token):
    response = fuzzer.session.get(fuzzer.base + fuzzer.services, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 401
    assert_status(response)


def test_oversized_body_is_413(fuzzer):
    body = json.dumps({"metadata": {"name": "big", "annotations": {"a": "x" * (4 * 1024 * 1024)}}, "spec": {"ports": [{"port": 80}]}})
    assert fuzzer.send("POST", fuzzer.services, data=body).status_code == 413


def test_stale_put_is_409_and_changes_nothing(fuzzer):
    current = fuzzer.session.get(fuzzer.base + fuzzer.services + "/keep").json()
    current["metadata"]["resourceVersion"] = "1"
    current["metadata"]["labels"] = {"changed": "yes"}
    assert fuzzer.send("PUT", fuzzer.services + "/keep", data=json.dumps(current)).status_code == 409
