"""The legacy Endpoints controller's decisions, as pure functions.

Cases are ported from upstream ``pkg/controller/endpoint/endpoints_controller_test.go`` (ids
name the upstream test and case); where upstream asserts on the request sent to a fake server,
these assert on the write ``plan_endpoints`` returns (None = no request).
"""

from __future__ import annotations

import ipaddress
from datetime import datetime, timezone

import pytest

from kubesvc.controllers.endpoints.desired import (
    ANNOTATION_LEADER,
    ANNOTATION_OVER_CAPACITY,
    MAX_CAPACITY,
    desired_subsets,
    service_ip_family,
    endpoint_address,
    endpoint_port,
    plan_endpoints,
    repack_subsets,
    subsets_equal_ignore_resource_version,
    truncate_subsets,
)
from kubesvc.controllers.endpointslice.triggertime import TriggerTimeTracker
from kubesvc.controllers.endpointslice.util import ANNOTATION_TRIGGER_TIME, LABEL_HEADLESS
from tests.support import builders

TRIGGER_TIME = datetime(2018, 1, 1, tzinfo=timezone.utc)
TRIGGER_TIME_STRING = "2018-01-01T00:00:00Z"
OLD_TRIGGER_TIME_STRING = "2017-12-31T23:00:00Z"
V4, V6 = ("IPv4",), ("IPv6",)


def ipv4(i: int) -> str:
    return str(ipaddress.ip_address("1.2.3.4") + i)


def ipv6(i: int) -> str:
    return str(ipaddress.ip_address("2000::4") + i)


def make_pod(i: int, n_ports: int = 1, ready: bool = True, families=V4, ns: str = "other", **extra) -> dict:
    """upstream ``testPod``: pod<i>, label foo=bar, ports port<j> = 8080+j, IP 1.2.3.<4+i>."""
    ports = [{"name": f"port{j}", "containerPort": 8080 + j, "protocol": "TCP"} for j in range(n_ports)]
    pod = builders.pod(ns, f"pod{i}", ips=[ipv4(i) if family == "IPv4" else ipv6(i) for family in families], ready=ready,
                       labels={"foo": "bar"}, containers=[{"name": "c", "ports": ports}], uid=f"uid-pod{i}", resourceVersion=str(i))
    for path, value in extra.items():
        section, _, key = path.partition("__")
        pod[section][key] = value
    return pod


def make_pods(n_ready: int, n_not_ready: int = 0, n_ports: int = 1, families=V4, ns: str = "other") -> list[dict]:
    """upstream ``addPods``: the ready ones first, then the not-ready ones."""
    return [make_pod(i, n_ports, i < n_ready, families, ns) for i in range(n_ready + n_not_ready)]


def make_service(ns: str = "other", ports=None, selector=None, **spec) -> dict:
    return builders.service(ns, "foo", *([{"port": 80, "protocol": "TCP", "targetPort": 8080}] if ports is None else ports),
                            selector={"foo": "bar"} if selector is None else selector, **spec)


def existing(ns: str = "other", subsets=None, labels=None, annotations=None) -> dict:
    meta = {"name": "foo", "namespace": ns, "resourceVersion": "1"}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "subsets": subsets}


def address(i: int, ns: str = "other", ip: str | None = None) -> dict:
    return {"ip": ip or ipv4(i), "targetRef": {"kind": "Pod", "namespace": ns, "name": f"pod{i}", "uid": f"uid-pod{i}"}}


def counts(endpoints: dict) -> tuple[int, int]:
    subsets = endpoints.get("subsets") or []
    return sum(len(s.get("addresses") or ()) for s in subsets), sum(len(s.get("notReadyAddresses") or ()) for s in subsets)


# ---- TestTruncateEndpoints -------------------------------------------------------------------

@pytest.mark.parametrize(
    "ready, not_ready, expected_ready, expected_not_ready",
    [
        pytest.param([], [], [], [], id="empty"),
        pytest.param([50, 100, 100, 100, 100], [50, 100, 100, 100, 100], [50, 100, 100, 100, 100], [50, 100, 100, 100, 100],
                     id="total endpoints < max capacity"),
        pytest.param([100] * 5, [100] * 5, [100] * 5, [100] * 5, id="total endpoints = max capacity"),
        pytest.param([90, 110, 50, 10, 20], [101, 200, 200, 201, 298], [90, 110, 50, 10, 20], [73, 144, 144, 145, 214],
                     id="total ready endpoints < max capacity, but total endpoints > max capacity"),
        pytest.param([205, 400, 402, 400, 693], [100, 200, 200, 200, 300], [98, 191, 192, 191, 328], [0, 0, 0, 0, 0],
                     id="total ready endpoints > max capacity"),
    ],
)
def test_truncate_endpoints(ready, not_ready, expected_ready, expected_not_ready):
    n = iter(range(10**6))
    subsets = [{"addresses": [{"ip": ipv4(next(n))} for _ in range(r)], "notReadyAddresses": [{"ip": ipv4(next(n))} for _ in range(u)]}
               for r, u in zip(ready, not_ready)]
    result, truncated = truncate_subsets(subsets)
    assert [len(s.get("addresses") or ()) for s in result] == expected_ready
    assert [len(s.get("notReadyAddresses") or ()) for s in result] == expected_not_ready
    assert truncated == (sum(ready) + sum(not_ready) > MAX_CAPACITY)
    if truncated:  # the first addresses of each subset are the ones kept
        assert all(r.get("addresses", []) == s["addresses"][:len(r.get("addresses", []))] for r, s in zip(result, subsets))


# ---- TestSyncServiceOverCapacity -------------------------------------------------------------

@pytest.mark.parametrize(
    "starting_annotation, num_existing, num_desired, num_desired_not_ready, expected_ready, expected_not_ready, expected_annotation",
    [
        pytest.param(None, 0, 0, 0, 0, 0, False, id="empty"),
        pytest.param(None, MAX_CAPACITY - 1, MAX_CAPACITY - 3, 4, MAX_CAPACITY - 3, 3, True,
                     id="annotation added past capacity, < than maxCapacity of Ready Addresses"),
        pytest.param(None, MAX_CAPACITY - 1, MAX_CAPACITY, 10, MAX_CAPACITY, 0, True,
                     id="annotation added past capacity, maxCapacity of Ready Addresses"),
        pytest.param("truncated", MAX_CAPACITY - 1, MAX_CAPACITY - 1, 0, MAX_CAPACITY - 1, 0, False,
                     id="annotation removed below capacity"),
        pytest.param("warning", MAX_CAPACITY, MAX_CAPACITY, 0, MAX_CAPACITY, 0, False,
                     id="annotation was set to warning previously, annotation removed at capacity"),
        pytest.param("warning", MAX_CAPACITY + 1, MAX_CAPACITY + 1, 0, MAX_CAPACITY, 0, True,
                     id="annotation was set to warning previously but still over capacity"),
        pytest.param("truncated", MAX_CAPACITY, MAX_CAPACITY, 0, MAX_CAPACITY, 0, False, id="annotation removed at capacity"),
        pytest.param("invalid", MAX_CAPACITY + 1, MAX_CAPACITY + 1, 0, MAX_CAPACITY, 0, True,
                     id="no endpoints change, annotation value corrected"),
    ],
)
def test_sync_service_over_capacity(starting_annotation, num_existing, num_desired, num_desired_not_ready,
                                    expected_ready, expected_not_ready, expected_annotation):
    pods = make_pods(num_desired, num_desired_not_ready, ns="test")
    service = make_service("test", clusterIP="10.0.0.1", ipFamilies=["IPv4"])
    annotations = {} if starting_annotation is None else {ANNOTATION_OVER_CAPACITY: starting_annotation}
    current = existing("test", [{"addresses": [endpoint_address(service, pod) for pod in pods[:num_existing]]}], annotations=annotations)
    write = plan_endpoints(service, pods, current, None)
    result = current if write is None else write.endpoints
    annotations = result["metadata"].get("annotations") or {}
    if expected_annotation:
        assert annotations.get(ANNOTATION_OVER_CAPACITY) == "truncated"
    else:
        assert ANNOTATION_OVER_CAPACITY not in annotations
    assert counts(result) == (expected_ready, expected_not_ready)


def test_over_capacity_already_truncated_is_not_rewritten():
    """Upstream compares the untruncated subsets with the stored (truncated) ones, so it always
    asks for a write; one that would store exactly what is there is skipped."""
    pods = make_pods(MAX_CAPACITY + 1, ns="test")
    service = make_service("test", clusterIP="10.0.0.1")
    first = plan_endpoints(service, pods, None, None)
    stored = first.endpoints | {"metadata": first.endpoints["metadata"] | {"resourceVersion": "7"}}
    assert counts(stored) == (MAX_CAPACITY, 0)
    assert plan_endpoints(service, pods, stored, None) is None
    again = plan_endpoints(service, pods, stored, TRIGGER_TIME)  # a new trigger time is new content
    assert again is not None and again.endpoints["metadata"]["annotations"][ANNOTATION_TRIGGER_TIME] == TRIGGER_TIME_STRING


# ---- TestSyncServiceAddresses ----------------------------------------------------------------

def _addresses_pod(phase: str, ready: bool, terminating: bool) -> dict:
    pod = {
        "metadata": {"namespace": "ns", "name": "fakepod", "uid": "u1", "labels": {"foo": "bar"}},
        "spec": {"containers": [{"name": "c", "ports": [{"name": "port1", "containerPort": 8080}]}]},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                   "podIP": "10.1.1.1", "podIPs": [{"ip": "10.1.1.1"}]},
    }
    if terminating:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return pod


@pytest.mark.parametrize(
    "phase, ready, terminating, tolerate_unready, expected_ready, expected_unready",
    [
        pytest.param("Running", True, False, False, 1, 0, id="pod running phase"),
        pytest.param("Running", True, True, False, 0, 0, id="pod running phase being deleted"),
        pytest.param("Unknown", True, False, False, 1, 0, id="pod unknown phase container ready"),
        pytest.param("Unknown", True, True, False, 0, 0, id="pod unknown phase container ready being deleted"),
        pytest.param("Pending", True, False, False, 1, 0, id="pod pending phase container ready"),
        pytest.param("Pending", True, True, False, 0, 0, id="pod pending phase container ready being deleted"),
        pytest.param("Unknown", False, False, False, 0, 1, id="pod unknown phase container not ready"),
        pytest.param("Pending", False, False, False, 0, 1, id="pod pending phase container not ready"),
        pytest.param("Failed", False, False, False, 0, 0, id="pod failed phase"),
        pytest.param("Succeeded", False, False, False, 0, 0, id="pod succeeded phase"),
        pytest.param("Running", False, False, True, 1, 0, id="pod running phase and tolerate unready"),
        pytest.param("Running", False, True, True, 1, 0, id="pod running phase and tolerate unready being deleted"),
        pytest.param("Unknown", False, False, True, 1, 0, id="pod unknown phase and tolerate unready"),
        pytest.param("Unknown", False, True, True, 1, 0, id="pod unknown phase and tolerate unready being deleted"),
        pytest.param("Pending", False, False, True, 1, 0, id="pod pending phase and tolerate unready"),
        pytest.param("Pending", False, True, True, 1, 0, id="pod pending phase and tolerate unready being deleted"),
        pytest.param("Failed", False, False, True, 0, 0, id="pod failed phase and tolerate unready"),
        pytest.param("Succeeded", False, False, True, 0, 0, id="pod succeeded phase and tolerate unready endpoints"),
    ],
)
def test_sync_service_addresses(phase, ready, terminating, tolerate_unready, expected_ready, expected_unready):
    service = make_service("ns", type="ClusterIP", clusterIP="1.1.1.1", publishNotReadyAddresses=tolerate_unready)
    write = plan_endpoints(service, [_addresses_pod(phase, ready, terminating)], None, None)
    assert write.create
    assert counts(write.endpoints) == (expected_ready, expected_unready)


def test_pod_without_ip_is_left_out():
    pod = make_pod(0)
    pod["status"].pop("podIP")
    pod["status"].pop("podIPs")
    assert desired_subsets(make_service(clusterIP="10.0.0.1"), [pod]).subsets == []


# ---- TestSyncEndpoints* (what is written, and when nothing is) -------------------------------

def test_sync_endpoints_existing_nil_subsets():
    """TestSyncEndpointsExistingNilSubsets: no pods, stored nil subsets: no request."""
    assert plan_endpoints(make_service("default", ports=[{"port": 80}]), [], existing("default", None), None) is None


def test_sync_endpoints_existing_empty_subsets():
    assert plan_endpoints(make_service("default", ports=[{"port": 80}]), [], existing("default", []), None) is None


def test_sync_endpoints_new_no_subsets():
    """TestSyncEndpointsNewNoSubsets: no Endpoints yet, no pods: still a create."""
    write = plan_endpoints(make_service("default", ports=[{"port": 80}]), [], None, None)
    assert write.create and write.endpoints["subsets"] == []
    assert write.endpoints["metadata"] == {"name": "foo", "namespace": "default", "labels": {LABEL_HEADLESS: ""}}


def test_sync_endpoints_items_preexisting_identical():
    service = make_service("default", clusterIP="10.0.0.1")
    stored = existing("default", [{"addresses": [address(0, "default")], "ports": [{"port": 8080, "protocol": "TCP"}]}])
    assert plan_endpoints(service, make_pods(1, ns="default"), stored, None) is None


def test_sync_endpoints_with_pod_resource_version_update_only():
    """TestSyncEndpointsWithPodResourceVersionUpdateOnly: targetRef resourceVersions differ only."""
    service = make_service("default", clusterIP="10.0.0.1")
    ready, not_ready = address(0, "default"), address(1, "default")
    ready["targetRef"]["resourceVersion"] = "1"
    not_ready["targetRef"]["resourceVersion"] = "2"
    stored = existing("default", [{"addresses": [ready], "notReadyAddresses": [not_ready], "ports": [{"port": 8080, "protocol": "TCP"}]}])
    pods = make_pods(1, 1, ns="default")
    pods[0]["metadata"]["resourceVersion"], pods[1]["metadata"]["resourceVersion"] = "3", "4"
    assert plan_endpoints(service, pods, stored, None) is None


@pytest.mark.parametrize("protocol", ["TCP", "UDP", "SCTP"])
def test_sync_endpoints_protocol(protocol):
    """TestSyncEndpointsProtocolTCP/UDP/SCTP: a PUT replacing the stale address."""
    service = make_service(ports=[{"port": 80, "targetPort": 8080, "protocol": protocol}])
    stored = existing(subsets=[{"addresses": [{"ip": "6.7.8.9"}], "ports": [{"port": 1000, "protocol": protocol}]}])
    write = plan_endpoints(service, make_pods(1), stored, None)
    assert not write.create
    assert write.endpoints["metadata"] == {"name": "foo", "namespace": "other", "resourceVersion": "1", "labels": {LABEL_HEADLESS: ""}}
    assert write.endpoints["subsets"] == [{"addresses": [address(0)], "ports": [{"port": 8080, "protocol": protocol}]}]


def test_sync_endpoints_items_mixed_ready_and_not_ready():
    """TestSyncEndpointsItemsEmptySelectorSelectsAllMixed (with a real selector)."""
    write = plan_endpoints(make_service(), make_pods(1, 1), existing(subsets=[]), None)
    assert write.endpoints["subsets"] == [{"addresses": [address(0)], "notReadyAddresses": [address(1)], "ports": [{"port": 8080, "protocol": "TCP"}]}]


def test_sync_endpoints_items():
    """TestSyncEndpointsItems: 3 pods, 2 ports, one POST; pods elsewhere are not passed in."""
    service = make_service(ports=[{"name": "port0", "port": 80, "protocol": "TCP", "targetPort": 8080},
                                  {"name": "port1", "port": 88, "protocol": "TCP", "targetPort": 8088}])
    write = plan_endpoints(service, make_pods(3, n_ports=2), None, None)
    assert write.create
    assert write.endpoints["metadata"] == {"name": "foo", "namespace": "other", "labels": {LABEL_HEADLESS: ""}}
    assert write.endpoints["subsets"] == [{
        "addresses": [address(0), address(1), address(2)],
        "ports": [{"name": "port0", "port": 8080, "protocol": "TCP"}, {"name": "port1", "port": 8088, "protocol": "TCP"}],
    }]


def test_sync_endpoints_items_with_labels():
    service = make_service(ports=[{"name": "port0", "port": 80, "protocol": "TCP", "targetPort": 8080}])
    service["metadata"]["labels"] = {"foo": "bar"}
    write = plan_endpoints(service, make_pods(3), None, None)
    assert write.endpoints["metadata"]["labels"] == {"foo": "bar", LABEL_HEADLESS: ""}


def test_sync_endpoints_items_preexisting_labels_change():
    service = make_service("bar")
    service["metadata"]["labels"] = {"baz": "blah"}
    stored = existing("bar", [{"addresses": [address(0, "bar")], "ports": [{"port": 8080, "protocol": "TCP"}]}], labels={"foo": "bar"})
    write = plan_endpoints(service, make_pods(1, ns="bar"), stored, None)
    assert write is not None and write.endpoints["metadata"]["labels"] == {"baz": "blah", LABEL_HEADLESS: ""}


def test_sync_endpoints_headless_service_label():
    """TestSyncEndpointsHeadlessServiceLabel: the headless marker alone never causes a write."""
    stored = existing("default", [], labels={LABEL_HEADLESS: ""})
    assert plan_endpoints(make_service("default", ports=[{"port": 80}]), [], stored, None) is None


def test_headless_marker_removed_when_service_gets_cluster_ip():
    stored = existing("default", [{"addresses": [{"ip": "6.7.8.9"}], "ports": [{"port": 1}]}], labels={LABEL_HEADLESS: "", "a": "b"})
    service = make_service("default", clusterIP="10.0.0.9")
    service["metadata"]["labels"] = {"a": "b"}
    write = plan_endpoints(service, [], stored, None)
    assert write.endpoints["metadata"]["labels"] == {"a": "b"}


def test_sync_endpoints_headless_service():
    """TestSyncEndpointsHeadlessService: headless, ports [] -> addresses without ports."""
    service = make_service("headless", ports=[], clusterIP="None")
    service["metadata"]["labels"] = {"a": "b"}
    stored = existing("headless", [{"addresses": [{"ip": "6.7.8.9"}], "ports": [{"port": 1000, "protocol": "TCP"}]}])
    write = plan_endpoints(service, make_pods(1, ns="headless"), stored, None)
    assert write.endpoints["metadata"]["labels"] == {"a": "b", LABEL_HEADLESS: ""}
    assert write.endpoints["subsets"] == [{"addresses": [address(0, "headless")]}]
    assert service["metadata"]["labels"] == {"a": "b"}  # the Service is not modified


def test_sync_endpoints_headless_without_port():
    write = plan_endpoints(make_service("default", ports=[], clusterIP="None"), make_pods(1, ns="default"), None, None)
    assert write.create and write.endpoints["subsets"] == [{"addresses": [address(0, "default")]}]


def test_service_without_ports_that_is_not_headless_gets_no_addresses():
    assert desired_subsets(make_service(ports=[], clusterIP="10.0.0.1"), make_pods(2)).subsets == []


@pytest.mark.parametrize("phase", ["Failed", "Succeeded"])
def test_sync_endpoints_items_exclude_not_ready_pods_with_phase(phase):
    """TestSyncEndpointsItemsExcludeNotReadyPodsWithRestartPolicy*AndPhase*: an empty PUT."""
    pod = make_pod(0, ready=False)
    pod["status"]["phase"] = phase
    stored = existing(subsets=[], labels={"foo": "bar"})
    write = plan_endpoints(make_service(), [pod], stored, None)
    assert write.endpoints["subsets"] == [] and write.endpoints["metadata"]["labels"] == {LABEL_HEADLESS: ""}


def test_leader_election_record_is_never_written():
    stored = existing(subsets=[], annotations={ANNOTATION_LEADER: "{}"})
    assert plan_endpoints(make_service(), make_pods(2), stored, None) is None


def test_other_annotations_are_kept():
    stored = existing(subsets=[], annotations={"team": "blue", ANNOTATION_OVER_CAPACITY: "truncated"})
    write = plan_endpoints(make_service(), make_pods(1), stored, None)
    assert write.endpoints["metadata"]["annotations"] == {"team": "blue"}


# ---- TestLastTriggerChangeTimeAnnotation* ----------------------------------------------------

def _trigger_case(service_created: bool, stored_annotation: str | None) -> dict:
    service = make_service(ports=[{"port": 80, "targetPort": 8080, "protocol": "TCP"}])
    if service_created:
        service["metadata"]["creationTimestamp"] = "2018-01-01T00:00:00Z"
    annotations = None if stored_annotation is None else {ANNOTATION_TRIGGER_TIME: stored_annotation}
    stored = existing(subsets=[{"addresses": [{"ip": "6.7.8.9"}], "ports": [{"port": 1000, "protocol": "TCP"}]}], annotations=annotations)
    pods = make_pods(1)
    trigger_time = TriggerTimeTracker().compute(service, pods)
    return plan_endpoints(service, pods, stored, trigger_time).endpoints


def test_last_trigger_change_time_annotation():
    assert _trigger_case(True, None)["metadata"]["annotations"] == {ANNOTATION_TRIGGER_TIME: TRIGGER_TIME_STRING}


def test_last_trigger_change_time_annotation_overridden():
    assert _trigger_case(True, OLD_TRIGGER_TIME_STRING)["metadata"]["annotations"] == {ANNOTATION_TRIGGER_TIME: TRIGGER_TIME_STRING}


def test_last_trigger_change_time_annotation_cleared():
    """Neither pod nor Service has a trigger time: the annotation is removed by the write."""
    assert "annotations" not in _trigger_case(False, TRIGGER_TIME_STRING)["metadata"]


def test_trigger_time_alone_causes_no_write():
    stored = existing(subsets=[{"addresses": [address(0)], "ports": [{"port": 8080, "protocol": "TCP"}]}],
                      annotations={ANNOTATION_TRIGGER_TIME: OLD_TRIGGER_TIME_STRING}, labels={LABEL_HEADLESS: ""})
    assert plan_endpoints(make_service(), make_pods(1), stored, TRIGGER_TIME) is None


def test_trigger_time_has_nanosecond_precision_format():
    moment = datetime(2018, 1, 1, 0, 0, 0, 123400, tzinfo=timezone.utc)
    write = plan_endpoints(make_service(), [], None, moment)
    assert write.endpoints["metadata"]["annotations"][ANNOTATION_TRIGGER_TIME] == "2018-01-01T00:00:00.1234Z"


# ---- TestPodToEndpointAddressForService ------------------------------------------------------

@pytest.mark.parametrize(
    "pod_families, spec, expected_family",
    [
        pytest.param(V4, {"clusterIP": "10.0.0.1"}, "IPv4", id="v4 service, in a single stack cluster"),
        pytest.param(("IPv4", "IPv6"), {"clusterIP": "10.0.0.1"}, "IPv4", id="v4 service, in a dual stack cluster"),
        pytest.param(("IPv6", "IPv4"), {"clusterIP": "10.0.0.1"}, "IPv4", id="v4 service, in a dual stack ipv6-primary cluster"),
        pytest.param(V4, {"clusterIP": "None"}, "IPv4", id="v4 headless service, in a single stack cluster"),
        pytest.param(("IPv4", "IPv6"), {"clusterIP": "None", "ipFamilies": ["IPv4"]}, "IPv4", id="v4 headless service, in a dual stack cluster"),
        pytest.param(("IPv4", "IPv6"), {"clusterIP": "None"}, "IPv4", id="v4 legacy headless service, in a dual stack cluster"),
        pytest.param(("IPv6", "IPv4"), {"clusterIP": "None"}, "IPv6", id="v4 legacy headless service, in a dual stack ipv6-primary cluster"),
        pytest.param(V6, {"clusterIP": "3000::1"}, "IPv6", id="v6 service, in a single stack cluster"),
        pytest.param(("IPv4", "IPv6"), {"clusterIP": "3000::1"}, "IPv6", id="v6 service, in a dual stack cluster"),
        pytest.param(V6, {"clusterIP": "None"}, "IPv6", id="v6 headless service, in a single stack cluster"),
        pytest.param(("IPv4", "IPv6"), {"clusterIP": "None", "ipFamilies": ["IPv6"]}, "IPv6",
                     id="v6 headless service, in a dual stack cluster (connected to a new api-server)"),
        pytest.param(("IPv4", "IPv6"), {"clusterIP": "None"}, "IPv4",
                     id="v6 legacy headless service, in a dual stack cluster (connected to a old api-server)"),
        pytest.param(V4, {"clusterIP": "3000::1"}, None, id="v6 service, in a v4 only cluster"),
        pytest.param(("IPv4", "IPv6"), {"clusterIP": "10.0.0.1", "ipFamilies": ["IPv6", "IPv4"]}, "IPv6", id="ipFamilies[0] wins over clusterIP"),
    ],
)
def test_pod_to_endpoint_address_for_service(pod_families, spec, expected_family):
    pod = make_pod(0, families=pod_families, ns="test", spec__nodeName="node-1")
    got = endpoint_address(make_service("test", **spec), pod)
    if expected_family is None:
        assert got is None
        return
    assert got == {"ip": ipv4(0) if expected_family == "IPv4" else ipv6(0), "nodeName": "node-1",
                   "targetRef": {"kind": "Pod", "namespace": "test", "name": "pod0", "uid": "uid-pod0"}}  # no resourceVersion


@pytest.mark.parametrize(
    "pod_spec, expected",
    [
        pytest.param({"hostname": "h0", "subdomain": "foo"}, "h0", id="subdomain is the service"),
        pytest.param({"hostname": "h0", "subdomain": "other"}, None, id="subdomain is another service"),
        pytest.param({"hostname": "h0"}, None, id="no subdomain"),
        pytest.param({"subdomain": "foo"}, None, id="no hostname"),
    ],
)
def test_hostname(pod_spec, expected):
    pod = make_pod(0, **{f"spec__{k}": v for k, v in pod_spec.items()})
    assert endpoint_address(make_service(clusterIP="None"), pod).get("hostname") == expected


# ---- ports -----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "service_port, expected",
    [
        pytest.param({"name": "test", "port": 80}, {"name": "test", "port": 80, "protocol": "TCP"}, id="empty app protocol"),
        pytest.param({"name": "test", "port": 80, "appProtocol": "http"}, {"name": "test", "port": 80, "protocol": "TCP", "appProtocol": "http"},
                     id="http app protocol"),
    ],
)
def test_endpoint_port_from_service_port(service_port, expected):
    assert endpoint_port(service_port, 80) == expected


def test_named_target_port_resolving_differently_gives_one_subset_per_port_number():
    pods = make_pods(4)
    for i, pod in enumerate(pods):
        pod["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": 8080 + i % 2, "protocol": "TCP"}]
    pods[3]["spec"]["containers"][0]["ports"] = [{"name": "other", "containerPort": 9999, "protocol": "TCP"}]  # does not serve it
    service = make_service(ports=[{"name": "web", "port": 80, "protocol": "TCP", "targetPort": "http"}])
    assert desired_subsets(service, pods).subsets == [
        {"addresses": [address(0), address(2)], "ports": [{"name": "web", "port": 8080, "protocol": "TCP"}]},
        {"addresses": [address(1)], "ports": [{"name": "web", "port": 8081, "protocol": "TCP"}]},
    ]


def test_named_target_port_in_sidecar_init_container():
    pod = make_pod(0, n_ports=0)
    pod["spec"]["initContainers"] = [{"name": "proxy", "restartPolicy": "Always", "ports": [{"name": "http", "containerPort": 15001, "protocol": "TCP"}]}]
    service = make_service(ports=[{"port": 80, "protocol": "TCP", "targetPort": "http"}])
    assert desired_subsets(service, [pod]).subsets == [{"addresses": [address(0)], "ports": [{"port": 15001, "protocol": "TCP"}]}]


# ---- RepackSubsets ---------------------------------------------------------------------------

P1, P2 = {"port": 1, "protocol": "TCP"}, {"port": 2, "protocol": "TCP"}


@pytest.mark.parametrize(
    "given, expected",
    [
        pytest.param([{"addresses": [{"ip": "1.1.1.1"}], "ports": [P1]}, {"addresses": [{"ip": "1.1.1.2"}], "ports": [P1]}],
                     [{"addresses": [{"ip": "1.1.1.1"}, {"ip": "1.1.1.2"}], "ports": [P1]}], id="same port, addresses merged"),
        pytest.param([{"addresses": [{"ip": "1.1.1.1"}], "ports": [P1]}, {"addresses": [{"ip": "1.1.1.1"}], "ports": [P2]}],
                     [{"addresses": [{"ip": "1.1.1.1"}], "ports": [P1, P2]}], id="same address, ports merged"),
        pytest.param([{"addresses": [{"ip": "1.1.1.1"}], "ports": [P1]}, {"notReadyAddresses": [{"ip": "1.1.1.1"}], "ports": [P1]}],
                     [{"notReadyAddresses": [{"ip": "1.1.1.1"}], "ports": [P1]}], id="not ready wins"),
        pytest.param([{"addresses": [{"ip": "1.1.1.1"}], "ports": [P1]}, {"addresses": [{"ip": "1.1.1.2"}], "ports": [P2]}],
                     [{"addresses": [{"ip": "1.1.1.1"}], "ports": [P1]}, {"addresses": [{"ip": "1.1.1.2"}], "ports": [P2]}], id="disjoint"),
        pytest.param([{"addresses": [{"ip": "1.1.1.1", "targetRef": {"uid": "a"}}], "ports": [P1]},
                      {"addresses": [{"ip": "1.1.1.1", "targetRef": {"uid": "b"}}], "ports": [P1]}],
                     [{"addresses": [{"ip": "1.1.1.1", "targetRef": {"uid": "a"}}, {"ip": "1.1.1.1", "targetRef": {"uid": "b"}}], "ports": [P1]}],
                     id="one IP, two targets"),
        pytest.param([{"addresses": [{"ip": "1.1.1.2"}]}, {"addresses": [{"ip": "1.1.1.1"}]}],
                     [{"addresses": [{"ip": "1.1.1.1"}, {"ip": "1.1.1.2"}]}], id="no ports kept"),
    ],
)
def test_repack_subsets(given, expected):
    assert repack_subsets(given) == expected


def test_repack_is_independent_of_input_order():
    subsets = [{"addresses": [address(i)], "ports": [P1 if i % 2 else P2]} for i in range(6)]
    assert repack_subsets(subsets) == repack_subsets(list(reversed(subsets)))


# ---- TestEndpointSubsetsEqualIgnoreResourceVersion -------------------------------------------

def _es(prefix: str, rv1: str, rv2: str, port: int) -> dict:
    return {"addresses": [{"ip": f"{prefix}.1", "targetRef": {"kind": "Pod", "name": "p1", "namespace": "ns", "resourceVersion": rv1}}],
            "notReadyAddresses": [{"ip": f"{prefix}.2", "targetRef": {"kind": "Pod", "name": "p2", "namespace": "ns2", "resourceVersion": rv2}}],
            "ports": [{"port": port, "protocol": "TCP"}]}


ES1, ES2 = _es("1.1.1", "1", "2", 8081), _es("2.2.2", "3", "4", 8082)


def _mutated(subset: dict, path: tuple, value) -> dict:
    import copy
    out = copy.deepcopy(subset)
    target = out
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return out


@pytest.mark.parametrize(
    "a, b, expected",
    [
        pytest.param([ES1, ES2], [ES1], False, id="Subsets removed"),
        pytest.param([ES1, ES2], [_mutated(ES1, ("addresses", 0, "ip"), "1.1.1.10"), ES2], False, id="Ready Pod IP changed"),
        pytest.param([ES1, ES2], [ES1, _mutated(ES2, ("notReadyAddresses", 0, "ip"), "2.2.2.10")], False, id="NotReady Pod IP changed"),
        pytest.param([ES1, ES2], [ES1, _mutated(ES2, ("addresses", 0, "targetRef", "resourceVersion"), "100")], True, id="Pod ResourceVersion changed"),
        pytest.param([ES1, ES2], [ES1, _mutated(ES2, ("addresses", 0, "targetRef", "resourceVersion"), "")], True, id="Pod ResourceVersion removed"),
        pytest.param([ES1, ES2], [ES1, _mutated(ES1, ("ports", 0, "port"), 8082)], False, id="Ports changed"),
        pytest.param([], None, True, id="nil equals empty"),
    ],
)
def test_endpoint_subsets_equal_ignore_resource_version(a, b, expected):
    assert subsets_equal_ignore_resource_version(a, b) is expected


@pytest.mark.parametrize("pod_ip, family", [
    ("10.0.0.5", "IPv4"), ("fd00::5", "IPv6"), ("::ffff:10.0.0.5", "IPv4"), ("fe80::5%eth0", "IPv4"), ("", "IPv4"),
])
def test_legacy_headless_service_takes_the_pod_ips_family(pod_ip, family):
    """podToEndpointAddressForService without ipFamilies or a ClusterIP: IsIPv6String(pod.Status.PodIP)."""
    service = {"metadata": {"name": "s", "namespace": "ns"}, "spec": {"clusterIP": "None"}}
    assert service_ip_family(service, {"status": {"podIP": pod_ip}}) == family
