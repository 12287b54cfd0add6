"""Bad input never yields a 5xx or a traceback, never stalls the server, and never changes
stored data.

Hypothesis generates requests that are wrong by construction (malformed JSON/YAML, wrong kinds,
unknown fields under Strict, invalid names, oversized bodies, bad tokens, garbage selectors and
patches; ``KUBESVC_FUZZ_EXAMPLES`` per property, default 100) and sends them to the real server over HTTPS. A seeded generator (``KUBESVC_FUZZ_SEED``,
default 15; the failing seed is in the assertion) adds thousands of bodies that attack the
server itself (issue 15): nesting at and past the depth limit as JSON, YAML flow and block
style and every patch type, alias bombs of random shape, libyaml's swallowed-bracket nesting,
integers past every Go type, and a wrong JSON type for every field of Service, Pod,
EndpointSlice and Role, as create, update and patch.

Every error answer must be a well-formed ``Status`` whose ``code`` equals the HTTP status;
throughout, a background poller sees ``/healthz`` answer within 1 s; after the run the server
process is alive and the namespace's objects are exactly what they were (same
resourceVersions, same content).
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import os
import random
import re
import threading
import time
import uuid

import pytest
import requests
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubesvc.api import nesting
from kubesvc.api.schema import ListOf, MapOf, Obj, Scalar
from kubesvc.api.scheme import all_kinds

VALID_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
# Examples per property and run: each is a request over HTTPS to the shared apiserver (both sides
# CPU on the suite's two cores). 250 made these eight properties half of this file's ~57 s in CI;
# every run draws new ones, so the runs add up. KUBESVC_FUZZ_EXAMPLES=1000 for a deeper run.
EXAMPLES = int(os.environ.get("KUBESVC_FUZZ_EXAMPLES") or 100)
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


def _too_large_resource_version(response: requests.Response) -> bool:
    """kube-apiserver's one 5xx for a well-formed request: a list at a resourceVersion the watch
    cache has not reached (2**63 parses as a uint64) waits 3 s for it, then answers 504 with the
    ResourceVersionTooLarge cause and retryAfterSeconds: "try again later", not a server fault."""
    if response.status_code != 504:
        return False
    details = response.json().get("details") or {}
    return [c.get("reason") for c in details.get("causes", [])] == ["ResourceVersionTooLarge"] and details.get("retryAfterSeconds") == 1


class Fuzzer:
    def __init__(self, server):
        self.base = server.url
        self.session = server.session()  # the admin, by client certificate
        self.anonymous = server.session(admin=False)  # no certificate: a bearer token is its only credential
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
        response = self.session.request(method, self.base + path, data=data, params=params, headers=all_headers, timeout=60)
        assert response.status_code < 500 or _too_large_resource_version(response), (response.status_code, response.text[:500])
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


@pytest.mark.parametrize("content_type", ["application/yaml", "application/vnd.kubernetes.protobuf"], ids=["yaml", "protobuf"])
@SETTINGS
@given(body=st.binary(max_size=200))
def test_random_bytes_as_yaml_or_protobuf_never_5xx(fuzzer, content_type, body):
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
    response = fuzzer.anonymous.get(fuzzer.base + fuzzer.services, headers={"Authorization": f"Bearer {token}"}, timeout=60)
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


# ---- the seeded fuzz: bodies that attack the server itself ------------------------------------

SEED = int(os.environ.get("KUBESVC_FUZZ_SEED") or 15)
LIMIT = nesting.MAX_DEPTH
DRY_RUN = {"dryRun": "All"}
JSON, YAML, MERGE, STRATEGIC, JSON_PATCH, APPLY = ("application/json", "application/yaml", "application/merge-patch+json",
                                                    "application/strategic-merge-patch+json", "application/json-patch+json",
                                                    "application/apply-patch+yaml")
# the fuzzed kinds: a valid object of each, and where its collection is
VALID = {
    "Service": ("/api/v1", "services", {"spec": {"ports": [{"port": 80}]}}),
    "Pod": ("/api/v1", "pods", {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
    "EndpointSlice": ("/apis/discovery.k8s.io/v1", "endpointslices",
                      {"addressType": "IPv4", "endpoints": [{"addresses": ["10.1.2.3"]}], "ports": [{"port": 80}]}),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
}
# the first test fuzzes every field of these; the kinds below hold a Pod template (or nothing
# new to a parser), so their own fields are fuzzed whole and their template and metadata (the
# same code as the Pod's and the Service's) by a seeded sample
FULLY_FUZZED = tuple(VALID)
_TEMPLATE = {"metadata": {"labels": {"app": "f"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
_JOB_TEMPLATE = {"spec": {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"}}
VALID |= {
    "Deployment": ("/apis/apps/v1", "deployments", {"spec": {"selector": {"matchLabels": {"app": "f"}}, "template": _TEMPLATE}}),
    "ReplicaSet": ("/apis/apps/v1", "replicasets", {"spec": {"selector": {"matchLabels": {"app": "f"}}, "template": _TEMPLATE}}),
    "DaemonSet": ("/apis/apps/v1", "daemonsets", {"spec": {"selector": {"matchLabels": {"app": "f"}}, "template": _TEMPLATE}}),
    "ReplicationController": ("/api/v1", "replicationcontrollers", {"spec": {"selector": {"app": "f"}, "template": _TEMPLATE}}),
    "Job": ("/apis/batch/v1", "jobs", {"spec": {"template": _JOB_TEMPLATE}}),
    "CronJob": ("/apis/batch/v1", "cronjobs", {"spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": _JOB_TEMPLATE}}}}),
    "ConfigMap": ("/api/v1", "configmaps", {"data": {"a": "b"}}),
    "Secret": ("/api/v1", "secrets", {"stringData": {"a": "b"}}),
}
SAMPLED_PATHS = 15  # template and metadata paths fuzzed per sampled kind


class HealthPoller(threading.Thread):
    """``GET /healthz`` every 50 ms on a connection of its own, each allowed 1 s."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.session = server.session(admin=False)
        self.url = server.url + "/healthz"
        self.done = threading.Event()
        self.polls, self.slowest, self.failures = 0, 0.0, []

    def run(self) -> None:
        while not self.done.is_set():
            started = time.monotonic()
            try:
                response = self.session.get(self.url, timeout=1.0)
                if response.status_code != 200:
                    self.failures.append(f"{response.status_code} {response.text[:100]}")
            except requests.RequestException as exc:
                self.failures.append(repr(exc))
            self.slowest = max(self.slowest, time.monotonic() - started)
            self.polls += 1
            self.done.wait(0.05)


@pytest.fixture(scope="module", autouse=True)
def server_stays_well(apiserver):
    """Around every test of this module: /healthz within 1 s throughout, the process alive after."""
    poller = HealthPoller(apiserver)
    poller.start()
    yield poller
    poller.done.set()
    poller.join()
    assert apiserver.process.poll() is None, "the apiserver died"
    assert poller.failures == [], f"/healthz failed (seed {SEED}): {poller.failures[:5]}"
    assert poller.slowest < 1.0, f"/healthz took {poller.slowest:.2f}s (seed {SEED})"
    assert poller.polls > 20


def nested_json(depth: int, rng: random.Random | None = None) -> str:
    """A JSON value ``depth`` arrays and objects deep (built without recursion)."""
    kinds = [rng.random() < 0.5 if rng else level % 2 == 0 for level in range(depth)]
    return "".join('{"a":' if obj else "[" for obj in kinds) + "1" + "".join("}" if obj else "]" for obj in reversed(kinds))


def alias_bomb(rng: random.Random) -> str:
    levels, width = rng.randint(3, 10), rng.randint(2, 12)
    if rng.random() < 0.5:
        lines = ['a0: &a0 [' + ", ".join(['"lol"'] * width) + "]"]
        lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    else:  # block style, mappings and merge keys
        lines = ["a0: &a0", *(f"  k{j}: lol" for j in range(width))]
        for i in range(1, levels):
            lines += [f"a{i}: &a{i}", *(f"  k{j}: *a{i - 1}" for j in range(width))]
            lines += [f"m{i}:", f"  <<: *a{i - 1}"]
    return "\n".join(lines) + "\n"


def wrong_values(node) -> list:
    """JSON values of a type ``node`` does not take, and integers no Go type holds."""
    huge = [2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 2**64, 10**30, 10**300]
    if isinstance(node, Scalar):
        if node.kind == "integer":
            return ["80", 1.5, True, [], {}, *huge]
        if node.kind == "int-or-string":
            return [1.5, True, [], {}, 2**31, 10**30]
        if node.kind == "boolean":
            return ["true", 1, [], {}]
        if node.kind == "number":
            return ["1", True, [], {}, 10**300]
        if node.kind == "date-time":
            return [5, True, "not a time", "9999-99-99T99:99:99Z", "2026-01-01T00:00:00+99:99"]
        if node.kind == "quantity":
            return [[], {}, True, "1" + "0" * 400 + "Ei", "-1e999", "1.5.5"]
        return [5, True, [], {}, 10**30]
    if isinstance(node, ListOf):
        return ["x", 5, {}, [5, "x", {}]]
    if isinstance(node, MapOf):
        return ["x", 5, [], {"k": [1]}, {"k": 10**30}]
    if isinstance(node, Obj):
        return ["x", 5, [], True]
    return [10**30, nested_json(50)]  # Any_: anything goes, but not crashing


def field_paths(schema: Obj, prefix: tuple = (), depth: int = 0) -> list[tuple[tuple, object]]:
    """(path, schema) of every field reachable within 8 levels; list items are index 0."""
    found = []
    for name, spec in schema.fields.items():
        path, node = prefix + (name,), spec.type
        found.append((path, node))
        while isinstance(node, (ListOf, MapOf)):
            path, node = path + ((0,) if isinstance(node, ListOf) else ("key",)), (node.item if isinstance(node, ListOf) else node.value)
        if isinstance(node, Obj) and depth < 8:
            found += field_paths(node, path, depth + 1)
    return found


def with_value(base: dict, path: tuple, value) -> dict:
    """A copy of ``base`` with ``value`` at ``path``, creating what lies on the way."""
    obj = json.loads(json.dumps(base))
    cursor = obj
    for key, following in zip(path, path[1:]):
        empty = [] if isinstance(following, int) else {}
        if isinstance(key, int):
            if not isinstance(cursor, list) or not cursor:
                return obj
            if not isinstance(cursor[0], type(empty)):
                cursor[0] = empty
            cursor = cursor[0]
        else:
            if not isinstance(cursor.get(key), type(empty)):
                cursor[key] = empty
            if isinstance(following, int) and not cursor[key]:
                cursor[key].append({})
            cursor = cursor[key]
    last = path[-1]
    if isinstance(last, int):
        if isinstance(cursor, list):
            cursor[:1] = [value]
    else:
        cursor[last] = value
    return obj


class Attack:
    """The seeded fuzz, sending through ``Fuzzer.send`` (never 5xx, errors are Status)."""

    def __init__(self, fuzzer: Fuzzer, seed: int):
        self.fuzz = fuzzer
        self.rng = random.Random(seed)
        self.ns = fuzzer.ns
        self.sent = 0

    def path(self, kind: str, name: str | None = None) -> str:
        prefix, resource, _ = VALID[kind]
        return f"{prefix}/namespaces/{self.ns}/{resource}" + (f"/{name}" if name else "")

    def send(self, method: str, path: str, body, content_type: str | None = JSON, params: dict | None = None) -> requests.Response:
        self.sent += 1
        data = body if isinstance(body, (str, bytes)) or body is None else self.encode(body, content_type)
        return self.fuzz.send(method, path, data=data, content_type=content_type, params=params)

    def encode(self, body, content_type: str | None) -> str:
        if content_type in (YAML, APPLY) and self.rng.random() < 0.5:
            return yaml.safe_dump(body)
        return json.dumps(body)

    def valid(self, kind: str, name: str = "fuzzed") -> dict:
        prefix, _, rest = VALID[kind]
        api_version = prefix.removeprefix("/apis/").removeprefix("/api/")
        return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, **json.loads(json.dumps(rest))}


def fuzz_nesting(attack: Attack) -> None:
    rng, services, keep = attack.rng, attack.path("Service"), attack.path("Service", "keep")
    header = "apiVersion: v1\nkind: Service\nmetadata:\n  name: deep\nspec:\n  ports: [{port: 80}]\nx: "
    issue_body = "apiVersion: v1\nkind: Service\nmetadata:\n  name: t\nx: " + "[" * 30000 + "]" * 30000
    assert attack.send("POST", services, issue_body, YAML, DRY_RUN).status_code == 400
    assert attack.send("PATCH", keep, issue_body, APPLY, {"fieldManager": "fuzz", **DRY_RUN}).status_code == 400
    for _ in range(12):
        depth = rng.choice([LIMIT - 2, LIMIT - 1, LIMIT + 1, LIMIT + 2, 5000, 30000])
        past = depth > LIMIT
        service = json.dumps({"metadata": {"name": "deep"}, "spec": {"ports": [{"port": 80}]}})[:-1]
        deep_value = nested_json(depth - 1, rng)  # one level is the object holding it
        body = service + ', "x": ' + deep_value + "}"
        assert (attack.send("POST", services, body, JSON, DRY_RUN).status_code == 400) == past
        assert (attack.send("POST", services, header + deep_value, YAML, DRY_RUN).status_code == 400) == past
        block = header.replace("x: ", "x:\n") + "- " * (depth - 1) + "1\n"
        assert (attack.send("POST", services, block, YAML, DRY_RUN).status_code == 400) == past
        for patch_type in (MERGE, STRATEGIC):
            response = attack.send("PATCH", keep, '{"metadata": {"annotations": {"a": "b"}}, "x": ' + deep_value + "}", patch_type, DRY_RUN)
            assert (response.status_code == 400) == past
        patch = '[{"op": "add", "path": "/metadata/annotations", "value": {"a": ' + nested_json(depth - 2, rng) + "}}]"
        attack.send("PATCH", keep, patch, JSON_PATCH, DRY_RUN)
        attack.send("PATCH", keep, body, APPLY, {"fieldManager": "fuzz", **DRY_RUN})
        attack.send("DELETE", keep, '{"x": ' + deep_value + "}", JSON, DRY_RUN)
        affinity = {"nodeAffinity": "DEEP"}
        pod = json.dumps(attack.valid("Pod") | {"spec": {"containers": [{"name": "c", "image": "i"}], "affinity": affinity}})
        attack.send("POST", attack.path("Pod"), pod.replace('"DEEP"', nested_json(max(depth - 4, 1), rng)), JSON, DRY_RUN)


def fuzz_yaml_aliases(attack: Attack) -> None:
    rng, services, keep = attack.rng, attack.path("Service"), attack.path("Service", "keep")
    for _ in range(25):
        started = time.monotonic()
        body = alias_bomb(rng)
        attack.send("POST", services, body, YAML, DRY_RUN)
        attack.send("PATCH", keep, body, APPLY, {"fieldManager": "fuzz", **DRY_RUN})
        assert time.monotonic() - started < 2.0, body[:200]
    for body in ("[?]," * rng.randint(LIMIT, 40000), "a: &a [*a]", "a: &a {b: *a}", "b: *nowhere", "\ufeffa: 1",
                 "a: 1\n---\nb: [" + "[" * 40000, "x: !!binary aGk=\ny: !!timestamp 2001-01-01", "k: .inf", "? [a]\n: b"):
        attack.send("POST", services, body, YAML, DRY_RUN)
        attack.send("POST", services, body.encode("utf-16"), YAML, DRY_RUN)
    attack.send("POST", services, b"apiVersion: v1\n\xff\xfe\x80", YAML, DRY_RUN)


def fuzz_integers_and_parameters(attack: Attack) -> None:
    rng, services, keep = attack.rng, attack.path("Service"), attack.path("Service", "keep")
    huge = ["99999999999999999999999", str(2**63), str(-(2**63) - 1), "-1", "1" * 5000, "0x10", "1e3", " 1", "", "١٢"]
    watches = []
    for name in ("limit", "timeoutSeconds", "resourceVersion", "gracePeriodSeconds", "continue"):
        for value in huge:
            attack.send("GET", services, None, None, {name: value})
            watches.append({name: value, "watch": "true", "timeoutSeconds": "1"} if name != "timeoutSeconds" else {name: value or "1", "watch": "true"})
            attack.send("DELETE", keep, None, None, {name: value, **DRY_RUN})
    # an accepted watch lasts its one-second timeout: fifty of them one after another would
    # be most of this test's time, so they run side by side (the server must bear that too)
    with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
        list(pool.map(lambda watch: attack.send("GET", services, None, None, watch), watches))
    tokens = [nested_json(5000), '{"v":"meta.k8s.io/v1","rv":' + "9" * 40 + ',"start":"a"}', "x" * 5000]
    for token in tokens:
        attack.send("GET", services, None, None, {"continue": base64.urlsafe_b64encode(token.encode()).decode().rstrip("="), "limit": "1"})
    # upstream's parser reads "()" as the one empty value: a valid selector, not an error
    assert attack.send("GET", services, None, None, {"labelSelector": "a in ()"}).status_code == 200
    for selector in ("a in ()", "a in (", "a notin ((((", "!!!", "a=" + "b" * 1000, ",".join(["a"] * 2000), "a in (" + ",".join("x" * 2000) + ")"):
        attack.send("GET", services, None, None, {"labelSelector": selector})
        attack.send("GET", services, None, None, {"fieldSelector": selector.replace("a", "metadata.name")})
    for value in (2**31, 2**63, -(2**63) - 1, 2**64, 10**30, 10**400):
        for path in (("spec", "ports", 0, "port"), ("spec", "ports", 0, "nodePort"), ("spec", "ports", 0, "targetPort"),
                     ("spec", "healthCheckNodePort"), ("metadata", "generation"), ("metadata", "deletionGracePeriodSeconds"),
                     ("spec", "sessionAffinityConfig", "clientIP", "timeoutSeconds")):
            body = with_value(attack.valid("Service"), path, value)
            attack.send("POST", services, body, rng.choice([JSON, YAML]), DRY_RUN)
            attack.send("PATCH", keep, with_value({}, path, value), rng.choice([MERGE, STRATEGIC]), DRY_RUN)
        attack.send("DELETE", keep, json.dumps({"gracePeriodSeconds": value}), JSON, DRY_RUN)
    attack.send("POST", services, "spec: {ports: [{port: " + "9" * 5000 + "}]}\nmetadata: {name: n}", YAML, DRY_RUN)


def fuzz_wrong_types(attack: Attack, kind: str, sample: int | None = None) -> None:
    """A wrong JSON type (or an integer too large) for every field of ``kind`` (with ``sample``,
    for its own fields, and for that many of its metadata and Pod-template fields): as a create,
    as an update of the stored object, and as a patch of it; all dry runs."""
    rng, info = attack.rng, next(k for k in all_kinds() if k.kind == kind)
    collection, keep = attack.path(kind), attack.path(kind, "keep")
    stored = attack.fuzz.session.get(attack.fuzz.base + keep).json()
    paths = field_paths(info.schema)
    if sample is not None:
        shared = [p for p in paths if p[0][0] == "metadata" or "template" in p[0]]
        paths = [p for p in paths if p not in shared] + rng.sample(shared, min(sample, len(shared)))
    for path, node in paths:
        values = wrong_values(node)
        value = rng.choice(values)
        attack.send("POST", collection, with_value(attack.valid(kind), path, value), rng.choice([JSON, YAML]), DRY_RUN)
        attack.send("PUT", keep, with_value(stored, path, rng.choice(values)), JSON, DRY_RUN)
        patch_type = rng.choice([MERGE, STRATEGIC, APPLY])
        patch = with_value(attack.valid(kind, "keep") if patch_type == APPLY else {}, path, rng.choice(values))
        attack.send("PATCH", keep, patch, patch_type, {"fieldManager": "fuzz", **DRY_RUN})


@pytest.fixture(scope="module")
def attack(fuzzer):
    """The fuzzer's namespace with a stored object of each fuzzed kind, unchanged at the end."""
    fuzz = fuzzer
    fuzz.post_json(f"/api/v1/namespaces/{fuzz.ns}/serviceaccounts", {"metadata": {"name": "default"}}, expect=201)
    attack = Attack(fuzz, SEED)
    for kind in VALID:
        if kind != "Service":
            fuzz.post_json(attack.path(kind), attack.valid(kind, "keep"), expect=201)
    before = {kind: fuzz.session.get(fuzz.base + attack.path(kind, "keep")).json() for kind in VALID}
    yield attack
    after = {kind: fuzz.session.get(fuzz.base + attack.path(kind, "keep")).json() for kind in VALID}
    assert after == before, f"the fuzz changed stored objects (seed {SEED})"


def test_seeded_fuzz_of_nesting_aliases_integers_and_field_types(attack):
    started = time.monotonic()
    fuzz_nesting(attack)
    fuzz_yaml_aliases(attack)
    fuzz_integers_and_parameters(attack)
    for kind in FULLY_FUZZED:
        fuzz_wrong_types(attack, kind)
    assert attack.sent > 2000, attack.sent
    assert time.monotonic() - started < 120, f"{attack.sent} requests took {time.monotonic() - started:.0f}s"


def test_seeded_wrong_types_of_workload_and_configuration_kinds(attack):
    """Deployments, ReplicaSets, DaemonSets, ReplicationControllers, Jobs, CronJobs, ConfigMaps
    and Secrets: a wrong type for each of their own fields, and for a sample of their template
    and metadata fields, is a 4xx Status (the stored objects stay as they were: the fixture)."""
    sent = attack.sent
    for kind in VALID:
        if kind not in FULLY_FUZZED:
            fuzz_wrong_types(attack, kind, sample=SAMPLED_PATHS)
    assert attack.sent - sent > 400, attack.sent - sent
