"""The mirroring reconciler as a pure function: upstream's ``reconciler_test.go`` (TestReconcile),
``endpointslicemirroring_controller_test.go`` (TestSyncEndpoints, TestShouldMirror,
TestEndpointSlicesMirroredForService) and ``reconciler_helpers_test.go`` (TestRecycleSlices),
case by case under upstream's names, plus RepackSubsets and IP parsing.

Each reconcile case applies the plan to the existing slices (as the API would: deletes go,
updates replace, creates get a generated name) and checks what a user would then list: the
number of slices, that every Endpoints address (of the repacked subsets, up to the cap) is there
with its readiness, hostname and nodeName, the labels and the annotations; plus the number of
API writes and upstream's metrics.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import pytest

from kubesvc.client.cache import Indexer, index_by_label, index_by_namespace
from kubesvc.controllers.informers import SLICE_SERVICE_INDEX
from kubesvc.controllers.mirroring.controller import mirrored_slices
from kubesvc.controllers.mirroring.metrics import EndpointSliceMirroringMetrics
from kubesvc.controllers.mirroring.reconciler import (
    CONTROLLER_NAME,
    Plan,
    address_to_endpoint,
    parse_ip,
    reconcile,
    recycle_slices,
    repack_subsets,
    should_mirror,
)

SERVICE_NAME = "kubernetes.io/service-name"
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
SKIP_MIRROR = "endpointslice.kubernetes.io/skip-mirror"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time"
LEADER = "control-plane.alpha.kubernetes.io/leader"
UID = "d8f2c1f6-5285-4b3c-b3c1-9b89f9e7ed7a"


# ---- builders --------------------------------------------------------------------------------

def addr(ip: str, hostname: str = "", node: str | None = None) -> dict:
    a: dict = {"ip": ip}
    if hostname:
        a["hostname"] = hostname
    if node is not None:
        a["nodeName"] = node
    return a


def port(name: str, number: int, protocol: str = "TCP") -> dict:
    return {"name": name, "port": number, "protocol": protocol}


def subset(ports: list[dict], ready: list[dict] = (), not_ready: list[dict] = ()) -> dict:
    s: dict = {"ports": list(ports)}
    if ready:
        s["addresses"] = list(ready)
    if not_ready:
        s["notReadyAddresses"] = list(not_ready)
    return s


def make_endpoints(subsets: list[dict], *, name: str = "test-ep", labels: dict | None = None, annotations: dict | None = None,
                   uid: str = "", deleting: bool = False) -> dict:
    meta: dict = {"name": name, "namespace": "test", "uid": uid}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"apiVersion": "v1", "kind": "Endpoints", "metadata": meta, "subsets": subsets}


def eps_port(name: str, number: int, protocol: str = "TCP") -> dict:
    return {"name": name, "port": number, "protocol": protocol}


def ep(ip: str | list[str], hostname: str | None = None, node: str | None = None, ready: bool | None = None) -> dict:
    e: dict = {"addresses": [ip] if isinstance(ip, str) else ip}
    if hostname is not None:
        e["hostname"] = hostname
    if node is not None:
        e["nodeName"] = node
    e["conditions"] = {} if ready is None else {"ready": ready}
    return e


def existing(name: str, ports: list[dict], endpoints: list[dict] = (), *, address_type: str = "IPv4", annotations: dict | None = None,
             owner_uid: str | None = None) -> dict:
    """An existing mirrored slice; as upstream's test does, it carries the two reserved labels."""
    meta: dict = {"name": name, "namespace": "test", "labels": {SERVICE_NAME: "test-ep", MANAGED_BY: CONTROLLER_NAME}}
    if annotations is not None:
        meta["annotations"] = annotations
    if owner_uid is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Endpoints", "name": "test-ep", "uid": owner_uid}]
    return {"metadata": meta, "addressType": address_type, "ports": ports, "endpoints": list(endpoints)}


SERVICE = {"metadata": {"name": "test-ep", "namespace": "test"}, "spec": {"ports": [{"port": 80}]}}


def apply(existing_slices: list[dict], plan: Plan) -> list[dict]:
    """The slices a user lists after the plan is performed."""
    by_name = {s["metadata"]["name"]: s for s in existing_slices}
    for slice_ in plan.deletes:
        del by_name[slice_["metadata"]["name"]]
    for slice_ in plan.updates:
        assert slice_["metadata"]["name"] in by_name, "update of a slice that does not exist"
        by_name[slice_["metadata"]["name"]] = slice_
    for i, slice_ in enumerate(plan.creates):
        created = copy.deepcopy(slice_)
        created["metadata"]["name"] = f"{slice_['metadata']['generateName']}gen{i}"
        by_name[created["metadata"]["name"]] = created
    return list(by_name.values())


def expect_endpoint_slices(num: int, max_per_subset: int, endpoints: dict, slices: list[dict]) -> None:
    """Upstream's ``expectEndpointSlices``."""
    assert len(slices) == num
    if num == 0:
        return
    meta = endpoints["metadata"]
    for slice_ in slices:
        assert slice_["metadata"]["name"].startswith(meta["name"])
        assert slice_["metadata"]["labels"][SERVICE_NAME] == meta["name"]
        annotations = slice_["metadata"].get("annotations") or {}
        assert LAST_APPLIED not in annotations and TRIGGER_TIME not in annotations
        for key, value in (meta.get("annotations") or {}).items():
            if key not in (LAST_APPLIED, TRIGGER_TIME):
                assert annotations.get(key) == value
    for repacked in repack_subsets(endpoints.get("subsets")):
        if not repacked.get("addresses") and not repacked.get("notReadyAddresses"):
            continue
        matching = {"IPv4": [], "IPv6": []}
        for slice_ in slices:
            if ports_match(repacked["ports"], slice_["ports"]):
                matching[slice_["addressType"]].extend(slice_["endpoints"])
        assert matching["IPv4"] or matching["IPv6"], f"no slice matches subset ports {repacked['ports']}"
        for family, found in matching.items():
            expect_matching_addresses(repacked, found, family, max_per_subset)


def ports_match(ep_ports: list[dict], eps_ports: list[dict]) -> bool:
    if len(ep_ports) != len(eps_ports):
        return False
    wanted = {p["port"]: p for p in ep_ports}
    for p in eps_ports:
        q = wanted.pop(p["port"], None)
        if q is None or (q.get("name") or "") != p["name"] or q.get("protocol") != p["protocol"] or q.get("appProtocol") != p.get("appProtocol"):
            return False
    return True


def expect_matching_addresses(repacked: dict, found: list[dict], family: str, max_per_subset: int) -> None:
    expected: dict[str, tuple[bool, dict]] = {}
    for group, ready in (("addresses", True), ("notReadyAddresses", False)):
        for address in repacked.get(group) or ():
            converted = address_to_endpoint(address, True)
            if converted and converted[1] == family and len(expected) < max_per_subset:
                expected[address["ip"]] = (ready, address)
    assert len(found) == len(expected)
    for endpoint in found:
        assert len(endpoint["addresses"]) == 1
        ready, address = expected[endpoint["addresses"][0]]
        assert endpoint["conditions"] == {"ready": ready}
        assert endpoint.get("hostname", "") == address.get("hostname", "")
        if address.get("nodeName") is not None:
            assert endpoint["nodeName"] == address["nodeName"]


@dataclass
class Metrics:
    desired_slices: int = 0
    actual_slices: int = 0
    desired_endpoints: int = 0
    added: int = 0
    updated: int = 0
    removed: int = 0
    skipped: int = 0
    created: int = 0
    num_updated: int = 0
    deleted: int = 0


def observed_metrics(plan: Plan, max_per_subset: int) -> Metrics:
    metrics = EndpointSliceMirroringMetrics(max_per_subset)
    metrics.observe_reconcile("test/test-ep", plan)
    value = metrics.registry.get_sample_value
    prefix = "endpoint_slice_mirroring_controller_"
    return Metrics(
        desired_slices=int(value(prefix + "desired_endpoint_slices")),
        actual_slices=int(value(prefix + "num_endpoint_slices")),
        desired_endpoints=int(value(prefix + "endpoints_desired")),
        added=int(value(prefix + "endpoints_added_per_sync_sum")),
        updated=int(value(prefix + "endpoints_updated_per_sync_sum")),
        removed=int(value(prefix + "endpoints_removed_per_sync_sum")),
        skipped=int(value(prefix + "addresses_skipped_per_sync_sum")),
        created=len(plan.creates), num_updated=len(plan.updates), deleted=len(plan.deletes),
    )


# ---- TestReconcile ---------------------------------------------------------------------------

HTTP, HTTPS_UDP = port("http", 80), port("https", 443, "UDP")
PORTS_3000 = [port("http", 3000), port("https", 3001, "UDP")]  # the second subset's ports
TWO_SUBSETS = [
    subset([HTTP, HTTPS_UDP], [addr("10.0.0.1", "pod-1", "node-1"), addr("10.0.0.2", "pod-2", "node-2")]),
    subset(PORTS_3000,
           [addr("10.0.1.1", "pod-11", "node-1"), addr("10.0.1.2", "pod-12", "node-2"), addr("10.0.1.3", "pod-13", "node-3")]),
]
ONE_ADDRESS = [subset([HTTP], [addr("10.0.0.1", "pod-1")])]
SAME_AS_ONE_ADDRESS = [ep("10.0.0.1", hostname="pod-1", ready=True)]


@dataclass
class Case:
    subsets: list[dict]
    existing: list[dict] = field(default_factory=list)
    num_slices: int = 0
    actions: int = 0
    metrics: Metrics | None = None
    labels: dict | None = None
    annotations: dict | None = None
    uid: str = ""
    deleting: bool = False
    max_per_subset: int = 1000


RECONCILE_CASES = {
    "Endpoints with no subsets": Case([], metrics=Metrics()),
    "Endpoints with no addresses": Case([subset([HTTP])], metrics=Metrics()),
    "Endpoints with 1 subset, port, and address": Case(
        [subset([HTTP], [addr("10.0.0.1", "pod-1", "node-1")])], num_slices=1, actions=1,
        metrics=Metrics(desired_slices=1, actual_slices=1, desired_endpoints=1, added=1, created=1)),
    "Endpoints with 2 subset, different port and address": Case(
        [subset([HTTP], [addr("10.0.0.1", "pod-1", "node-1")]), subset([port("https", 443)], [addr("10.0.0.2", "pod-2", "node-1")])],
        num_slices=2, actions=2, metrics=Metrics(desired_slices=2, actual_slices=2, desired_endpoints=2, added=2, created=2)),
    "Endpoints with 2 subset, different port and same address": Case(
        [subset([HTTP], [addr("10.0.0.1", "pod-1", "node-1")]), subset([port("https", 443)], [addr("10.0.0.1", "pod-1", "node-1")])],
        num_slices=1, actions=1, metrics=Metrics(desired_slices=1, actual_slices=1, desired_endpoints=1, added=1, created=1)),
    "Endpoints with 2 subset, different address and same port": Case(
        [subset([HTTP], [addr("10.0.0.1", "pod-1", "node-1")]), subset([HTTP], [addr("10.0.0.2", "pod-2", "node-1")])],
        num_slices=1, actions=1, metrics=Metrics(desired_slices=1, actual_slices=1, desired_endpoints=2, added=2, created=1)),
    "Endpoints with 1 subset, port, and address, pending deletion": Case(
        [subset([HTTP], [addr("10.0.0.1", "pod-1", "node-1")])], deleting=True),
    "Endpoints with 1 subset, port, and address and existing slice with same fields": Case(
        ONE_ADDRESS, [existing("test-ep-1", [eps_port("http", 80)], SAME_AS_ONE_ADDRESS, owner_uid=UID)], uid=UID, num_slices=1),
    "Endpoints with 1 subset, port, and address and existing slice with same fields but different OwnerReferences": Case(
        ONE_ADDRESS, [existing("test-ep-1", [eps_port("http", 80)], SAME_AS_ONE_ADDRESS, owner_uid="fb91e798-1875-4857-b5eb-e2c878157b4d")],
        uid=UID, num_slices=1, actions=1),
    "Endpoints with 1 subset, port, and address and existing slice with an additional annotation": Case(
        ONE_ADDRESS, [existing("test-ep-1", [eps_port("http", 80)], SAME_AS_ONE_ADDRESS, annotations={"foo": "bar"})], num_slices=1, actions=1),
    "Endpoints with 1 subset, port, label and address and existing slice with same fields but the label": Case(
        ONE_ADDRESS, [existing("test-ep-1", [eps_port("http", 80)], SAME_AS_ONE_ADDRESS, annotations={"foo": "bar"})],
        labels={"foo": "bar"}, num_slices=1, actions=1),
    "Endpoints with 1 subset, 2 ports, and 2 addresses": Case(
        [subset([HTTP, HTTPS_UDP], [addr("10.0.0.1", "pod-1", "node-1"), addr("10.0.0.2", "pod-2", "node-2")])],
        num_slices=1, actions=1, metrics=Metrics(desired_slices=1, actual_slices=1, desired_endpoints=2, added=2, created=1)),
    "Endpoints with 1 subset, 2 ports, and 2 not ready addresses": Case(
        [subset([HTTP, HTTPS_UDP], not_ready=[addr("10.0.0.1", "pod-1", "node-1"), addr("10.0.0.2", "pod-2", "node-2")])],
        num_slices=1, actions=1, metrics=Metrics(desired_slices=1, actual_slices=1, desired_endpoints=2, added=2, created=1)),
    "Endpoints with 1 subset, 2 ports, and 2 ready and 2 not ready addresses": Case(
        [subset([HTTP, HTTPS_UDP], [addr("10.1.1.1", "pod-11", "node-1"), addr("10.1.1.2", "pod-12", "node-2")],
                [addr("10.0.0.1", "pod-1", "node-1"), addr("10.0.0.2", "pod-2", "node-2")])],
        num_slices=1, actions=1, metrics=Metrics(desired_slices=1, actual_slices=1, desired_endpoints=4, added=4, created=1)),
    "Endpoints with 2 subsets, multiple ports and addresses": Case(
        TWO_SUBSETS, num_slices=2, actions=2, metrics=Metrics(desired_slices=2, actual_slices=2, desired_endpoints=5, added=5, created=2)),
    "Endpoints with 2 subsets, multiple ports and addresses, existing empty EndpointSlice": Case(
        TWO_SUBSETS, [existing("test-ep-1", [eps_port("http", 80), eps_port("https", 443, "UDP")])], num_slices=2, actions=2,
        metrics=Metrics(desired_slices=2, actual_slices=2, desired_endpoints=5, added=5, created=1, num_updated=1)),
    "Endpoints with 2 subsets, multiple ports and addresses, existing EndpointSlice with some addresses": Case(
        TWO_SUBSETS, [existing("test-ep-1", [eps_port("http", 80), eps_port("https", 443, "UDP")],
                               [ep("10.0.0.2", hostname="pod-2"), ep(["10.0.0.1", "10.0.0.3"], hostname="pod-1")])],
        num_slices=2, actions=2,
        metrics=Metrics(desired_slices=2, actual_slices=2, desired_endpoints=5, added=4, updated=1, removed=1, created=1, num_updated=1)),
    "Endpoints with 2 subsets, multiple ports and addresses, existing EndpointSlice identical to subset": Case(
        TWO_SUBSETS, [existing("test-ep-1", [eps_port("http", 80), eps_port("https", 443, "UDP")],
                               [ep("10.0.0.1", "pod-1", "node-1", True), ep("10.0.0.2", "pod-2", "node-2", True)])],
        num_slices=2, actions=1, metrics=Metrics(desired_slices=2, actual_slices=2, desired_endpoints=5, added=3, created=1)),
    "Endpoints with 2 subsets, multiple ports, and dual stack addresses": Case(
        [subset([HTTP, HTTPS_UDP], [addr("2001:db8:2222:3333:4444:5555:6666:7777", "pod-1", "node-1"), addr("10.0.0.2", "pod-2", "node-2")]),
         subset(PORTS_3000,
                [addr("10.0.1.1", "pod-11", "node-1"), addr("10.0.1.2", "pod-12", "node-2"),
                 addr("2001:db8:3333:4444:5555:6666:7777:8888", "pod-13", "node-3")])],
        num_slices=4, actions=4, metrics=Metrics(desired_slices=4, actual_slices=4, desired_endpoints=5, added=5, created=4)),
    "Endpoints with 2 subsets, multiple ports, ipv6 only addresses": Case(
        [subset([HTTP, HTTPS_UDP], [addr("2001:db8:1111:3333:4444:5555:6666:7777", "pod-1", "node-1"),
                                    addr("2001:db8:2222:3333:4444:5555:6666:7777", "pod-2", "node-2")]),
         subset(PORTS_3000,
                [addr("2001:db8:3333:3333:4444:5555:6666:7777", "pod-11", "node-1"), addr("2001:db8:4444:3333:4444:5555:6666:7777", "pod-12", "node-2"),
                 addr("2001:db8:5555:3333:4444:5555:6666:7777", "pod-13", "node-3")])],
        num_slices=2, actions=2, metrics=Metrics(desired_slices=2, actual_slices=2, desired_endpoints=5, added=5, created=2)),
    "Endpoints with 2 subsets, multiple ports, some invalid addresses": Case(
        [subset([HTTP, HTTPS_UDP], [addr("2001:db8:1111:3333:4444:5555:6666:7777", "pod-1", "node-1"), addr("this-is-not-an-ip", "pod-2", "node-2")]),
         subset(PORTS_3000,
                [addr("this-is-also-not-an-ip", "pod-11", "node-1"), addr("2001:db8:4444:3333:4444:5555:6666:7777", "pod-12", "node-2"),
                 addr("2001:db8:5555:3333:4444:5555:6666:7777", "pod-13", "node-3")])],
        num_slices=2, actions=2, metrics=Metrics(desired_slices=2, actual_slices=2, desired_endpoints=3, added=3, skipped=2, created=2)),
    "Endpoints with 2 subsets, multiple ports, all invalid addresses": Case(
        [subset([HTTP, HTTPS_UDP], [addr("this-is-not-an-ip1", "pod-1", "node-1"), addr("this-is-not-an-ip12", "pod-2", "node-2")]),
         subset(PORTS_3000,
                [addr("this-is-not-an-ip11", "pod-11", "node-1"), addr("this-is-not-an-ip12", "pod-12", "node-2"),
                 addr("this-is-not-an-ip3", "pod-13", "node-3")])],
        metrics=Metrics(skipped=5)),
    "Endpoints with 2 subsets, 1 exceeding maxEndpointsPerSubset": Case(
        TWO_SUBSETS, num_slices=2, actions=2, max_per_subset=2,
        metrics=Metrics(desired_slices=2, actual_slices=2, desired_endpoints=4, added=4, skipped=1, created=2)),
    "The last-applied-configuration annotation should not get mirrored to created or updated endpoint slices": Case(
        ONE_ADDRESS, annotations={LAST_APPLIED: '{"apiVersion":"v1","kind":"Endpoints","subsets":[]}'}, num_slices=1, actions=1,
        metrics=Metrics(added=1, created=1, desired_endpoints=1, desired_slices=1, actual_slices=1)),
    "The last-applied-configuration annotation shouldn't get added to created endpoint slices": Case(
        ONE_ADDRESS, num_slices=1, actions=1, metrics=Metrics(added=1, created=1, desired_endpoints=1, desired_slices=1, actual_slices=1)),
    "The last-applied-configuration shouldn't get mirrored to endpoint slices when it's value is empty": Case(
        ONE_ADDRESS, annotations={LAST_APPLIED: ""}, num_slices=1, actions=1,
        metrics=Metrics(added=1, created=1, desired_endpoints=1, desired_slices=1, actual_slices=1)),
    "Annotations other than last-applied-configuration should get correctly mirrored": Case(
        ONE_ADDRESS, annotations={LAST_APPLIED: '{"apiVersion":"v1","kind":"Endpoints","subsets":[]}', "foo": "bar"}, num_slices=1, actions=1,
        metrics=Metrics(added=1, created=1, desired_endpoints=1, desired_slices=1, actual_slices=1)),
    "Annotation mirroring should remove the last-applied-configuration annotation from existing endpoint slices": Case(
        ONE_ADDRESS, [existing("test-ep-1", [eps_port("http", 80)], SAME_AS_ONE_ADDRESS,
                               annotations={LAST_APPLIED: '{"apiVersion":"v1","kind":"Endpoints","subsets":[]}'})],
        num_slices=1, actions=1),
}


@pytest.mark.parametrize("case", list(RECONCILE_CASES.values()), ids=list(RECONCILE_CASES))
def test_reconcile(case: Case):
    endpoints = make_endpoints(case.subsets, labels=case.labels, annotations=case.annotations, uid=case.uid, deleting=case.deleting)
    before = copy.deepcopy(case.existing)
    plan = reconcile(endpoints, SERVICE, case.existing, max_endpoints_per_subset=case.max_per_subset)
    assert case.existing == before, "the reconciler must not modify its input"
    assert plan.mirrored
    assert plan.writes == case.actions
    if case.metrics is not None:
        assert observed_metrics(plan, case.max_per_subset) == case.metrics
    expect_endpoint_slices(case.num_slices, case.max_per_subset, endpoints, apply(case.existing, plan))


def test_created_slice_is_exactly_the_mirror_of_the_endpoints():
    endpoints = make_endpoints(
        [subset([{"name": "http", "port": 80, "protocol": "TCP", "appProtocol": "http"}],
                [{"ip": "10.0.0.1", "hostname": "h1", "nodeName": "node-1",
                  "targetRef": {"kind": "Pod", "namespace": "test", "name": "p1", "uid": "p1-uid", "resourceVersion": "7"}},
                 {"ip": "10.000.000.002"}],
                [{"ip": "2001:db8:0:0:0:0:0:1"}])],
        labels={"app": "db", SERVICE_NAME: "spoofed", MANAGED_BY: "someone"},
        annotations={"team": "storage", TRIGGER_TIME: "2026-01-01T00:00:00Z", LAST_APPLIED: "{}"}, uid=UID)
    plan = reconcile(endpoints, SERVICE, [])
    assert plan.updates == [] and plan.deletes == []
    by_type = {s["addressType"]: s for s in plan.creates}
    assert set(by_type) == {"IPv4", "IPv6"}
    v4 = by_type["IPv4"]
    assert v4["metadata"] == {
        "generateName": "test-ep-",
        "namespace": "test",
        "labels": {"app": "db", SERVICE_NAME: "test-ep", MANAGED_BY: CONTROLLER_NAME},
        "annotations": {"team": "storage"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Endpoints", "name": "test-ep", "uid": UID, "controller": True, "blockOwnerDeletion": True}],
    }
    assert v4["ports"] == [{"name": "http", "port": 80, "protocol": "TCP", "appProtocol": "http"}]
    assert v4["endpoints"] == [
        {"addresses": ["10.0.0.1"], "conditions": {"ready": True}, "hostname": "h1", "nodeName": "node-1",
         "targetRef": {"kind": "Pod", "namespace": "test", "name": "p1", "uid": "p1-uid", "resourceVersion": "7"}},
        {"addresses": ["10.0.0.2"], "conditions": {"ready": True}},  # re-stringified, as Go's ParseIPSloppy reads it
    ]  # in RepackSubsets order: by the IP as written
    assert by_type["IPv6"]["endpoints"] == [{"addresses": ["2001:db8::1"], "conditions": {"ready": False}}]


def test_existing_slices_beyond_the_first_of_a_key_are_deleted_and_recycled():
    endpoints = make_endpoints([subset([HTTP], [addr("10.0.0.1", "pod-1")]), subset([port("dns", 53, "UDP")], [addr("10.0.0.9")])], uid=UID)
    slices = [existing("test-ep-a", [eps_port("http", 80)], SAME_AS_ONE_ADDRESS, owner_uid=UID),
              existing("test-ep-b", [eps_port("http", 80)], SAME_AS_ONE_ADDRESS, owner_uid=UID)]
    plan = reconcile(endpoints, SERVICE, slices)
    # the duplicate of the http key would be deleted, and the dns key created: recycled instead
    assert plan.creates == [] and plan.deletes == []
    assert [s["metadata"]["name"] for s in plan.updates] == ["test-ep-b"]
    assert plan.updates[0]["ports"] == [eps_port("dns", 53, "UDP")]
    assert plan.updates[0]["endpoints"] == [{"addresses": ["10.0.0.9"], "conditions": {"ready": True}}]


def test_a_port_change_rewrites_the_slice_in_place():
    endpoints = make_endpoints([subset([port("http", 8080)], [addr("10.0.0.1", "pod-1")])], uid=UID)
    slices = [existing("test-ep-a", [eps_port("http", 80)], SAME_AS_ONE_ADDRESS, owner_uid=UID)]
    plan = reconcile(endpoints, SERVICE, slices)
    assert plan.creates == [] and plan.deletes == []
    assert [(s["metadata"]["name"], s["ports"]) for s in plan.updates] == [("test-ep-a", [eps_port("http", 8080)])]


def test_an_endpoints_being_deleted_gets_no_creates_but_still_updates():
    endpoints = make_endpoints([subset([HTTP], [addr("10.0.0.2")]), subset([port("dns", 53, "UDP")], [addr("10.0.0.9")])], uid=UID, deleting=True)
    slices = [existing("test-ep-a", [eps_port("http", 80)], SAME_AS_ONE_ADDRESS, owner_uid=UID)]
    plan = reconcile(endpoints, SERVICE, slices)
    assert plan.creates == []
    assert [s["metadata"]["name"] for s in plan.updates] == ["test-ep-a"]


def test_not_ready_wins_for_an_address_both_ready_and_not_ready():
    endpoints = make_endpoints([subset([HTTP], [addr("10.0.0.1")]), subset([HTTP], not_ready=[addr("10.0.0.1")])])
    plan = reconcile(endpoints, SERVICE, [])
    assert [s["endpoints"] for s in plan.creates] == [[{"addresses": ["10.0.0.1"], "conditions": {"ready": False}}]]


# ---- events ----------------------------------------------------------------------------------

def generate_addresses(count: int) -> list[dict]:
    return [{"ip": f"10.0.{i // 255}.{i % 255}"} for i in range(count)]


@pytest.mark.parametrize("count,events", [
    (1000, []),
    (1001, [("Warning", "TooManyAddressesToMirror",
             "A max of 1000 addresses can be mirrored to EndpointSlices per Endpoints subset. 1 addresses were skipped")]),
], ids=["Endpoints with 1000 addresses", "Endpoints with 1001 addresses - 1 should not be mirrored"])
def test_address_cap(count, events):
    plan = reconcile(make_endpoints([subset([{"port": 80, "protocol": "TCP"}], generate_addresses(count))]), SERVICE, [])
    assert [len(s["endpoints"]) for s in plan.creates] == [1000]
    assert [(e.type, e.reason, e.message) for e in plan.events] == events
    assert plan.skipped == count - 1000


def test_invalid_addresses_give_one_event_and_do_not_count_toward_the_cap():
    # repacked addresses are sorted by the IP as written: the two invalid ones come first
    addresses = [{"ip": "10.0.0.2"}, {"ip": "10.0.0.0/8"}, {"ip": "10.0.0.1"}, {"ip": "1.2.3"}]
    plan = reconcile(make_endpoints([subset([HTTP], addresses)]), SERVICE, [], max_endpoints_per_subset=2)
    assert [[e["addresses"][0] for e in s["endpoints"]] for s in plan.creates] == [["10.0.0.1", "10.0.0.2"]]
    assert [(e.reason, e.message) for e in plan.events] == [
        ("InvalidIPAddress", "Skipped 2 invalid IP addresses when mirroring to EndpointSlices")]
    # over the cap as well: both events; the second counts invalid and over-cap addresses, and
    # an invalid address past the cap is not looked at (not counted as invalid)
    plan = reconcile(make_endpoints([subset([HTTP], addresses + [{"ip": "10.0.0.3"}, {"ip": "zz-not-an-ip"}])]), SERVICE, [],
                     max_endpoints_per_subset=2)
    assert [(e.reason, e.message) for e in plan.events] == [
        ("InvalidIPAddress", "Skipped 2 invalid IP addresses when mirroring to EndpointSlices"),
        ("TooManyAddressesToMirror", "A max of 2 addresses can be mirrored to EndpointSlices per Endpoints subset. 4 addresses were skipped")]


# ---- TestSyncEndpoints (the skip / delete rules) ---------------------------------------------

ONE_ADDR_80 = [subset([{"port": 80, "protocol": "TCP"}], [addr("10.0.0.1")])]
NO_ADDR_80 = [subset([{"port": 80, "protocol": "TCP"}])]
OURS = {"metadata": {"name": "test-ep-1", "namespace": "test", "labels": {SERVICE_NAME: "test-ep", MANAGED_BY: CONTROLLER_NAME}}}

SYNC_CASES = {
    "Endpoints with no addresses": (SERVICE, make_endpoints(NO_ADDR_80), [], 0, 0),
    "Endpoints with skip label true": (SERVICE, make_endpoints(ONE_ADDR_80, labels={SKIP_MIRROR: "true"}), [], 0, 0),
    "Endpoints with skip label false": (SERVICE, make_endpoints(ONE_ADDR_80, labels={SKIP_MIRROR: "false"}), [], 1, 1),
    "Endpoints with skip label invalid": (SERVICE, make_endpoints(ONE_ADDR_80, labels={SKIP_MIRROR: "invalid"}), [], 1, 1),
    "Endpoints with leader election annotation": (SERVICE, make_endpoints(ONE_ADDR_80, annotations={LEADER: ""}), [], 0, 0),
    "Endpoints with missing Service": (None, make_endpoints(ONE_ADDR_80), [], 0, 0),
    "Endpoints with Service with selector specified": (
        {**SERVICE, "spec": {"selector": {"foo": "bar"}}}, make_endpoints(ONE_ADDR_80), [], 0, 0),
    "Existing EndpointSlices that need to be cleaned up": (SERVICE, make_endpoints(NO_ADDR_80), [OURS], 1, 0),
    "Missing Endpoints: mirrored slices deleted": (SERVICE, None, [OURS], 1, 0),
    "Skip label added: mirrored slices deleted": (SERVICE, make_endpoints(ONE_ADDR_80, labels={SKIP_MIRROR: "true"}), [OURS], 1, 0),
    "Selector added: mirrored slices deleted": ({**SERVICE, "spec": {"selector": {"a": "b"}}}, make_endpoints(ONE_ADDR_80), [OURS], 1, 0),
    "Service deleted: mirrored slices deleted": (None, make_endpoints(ONE_ADDR_80), [OURS], 1, 0),
}


@pytest.mark.parametrize("service,endpoints,slices,actions,num_slices", list(SYNC_CASES.values()), ids=list(SYNC_CASES))
def test_sync_endpoints(service, endpoints, slices, actions, num_slices):
    plan = reconcile(endpoints, service, slices)
    assert plan.writes == actions
    assert len(apply(slices, plan)) == num_slices
    if not plan.mirrored:
        assert plan.deletes == slices and plan.events == [] and plan.port_groups == {}


@pytest.mark.parametrize("endpoints,expected", [
    (make_endpoints([]), True),
    (make_endpoints([], labels={SKIP_MIRROR: "true"}), False),
    (make_endpoints([], labels={SKIP_MIRROR: "invalid"}), True),
    (make_endpoints([], annotations={LEADER: ""}), False),
], ids=["Standard Endpoints", "Endpoints with skip-mirror=true", "Endpoints with skip-mirror=invalid", "Endpoints with leader election annotation"])
def test_should_mirror(endpoints, expected):
    assert should_mirror(endpoints) is expected


def _slice(name: str, namespace: str, labels: dict) -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}}


@pytest.mark.parametrize("slice_,expected", [
    (_slice("example-1", "ns1", {SERVICE_NAME: "svc1", MANAGED_BY: CONTROLLER_NAME}), True),
    (_slice("example-1", "ns2", {SERVICE_NAME: "svc1", MANAGED_BY: CONTROLLER_NAME}), False),
    (_slice("example-1", "ns1", {SERVICE_NAME: "svc2", MANAGED_BY: CONTROLLER_NAME}), False),
    (_slice("example-1", "ns1", {SERVICE_NAME: "svc1", MANAGED_BY: CONTROLLER_NAME + "foo"}), False),
    (_slice("example-1", "ns1", {SERVICE_NAME: "svc1"}), False),
    (_slice("example-1", "ns1", {MANAGED_BY: CONTROLLER_NAME}), False),
], ids=["Service with matching EndpointSlice", "Service with EndpointSlice that has different namespace",
        "Service with EndpointSlice that has different service name", "Service with EndpointSlice that has different controller name",
        "Service with EndpointSlice that has missing controller name", "Service with EndpointSlice that has missing service name"])
def test_endpoint_slices_mirrored_for_service(slice_, expected):
    indexer = Indexer({"namespace": index_by_namespace, SLICE_SERVICE_INDEX: index_by_label(SERVICE_NAME)})
    indexer.upsert(slice_)
    found = mirrored_slices(indexer, "ns1", "svc1")
    assert [s["metadata"]["name"] for s in found] == (["example-1"] if expected else [])


# ---- TestRecycleSlices -----------------------------------------------------------------------

def simple(name: str, ip: str, address_type: str = "IPv4") -> dict:
    return {"metadata": {"name": name}, "addressType": address_type, "endpoints": [{"addresses": [ip]}]}


def summary(slices: list[dict]) -> list[tuple[str, str, str]]:
    return [(s["metadata"]["name"], s["addressType"], s["endpoints"][0]["addresses"][0]) for s in slices]


V6A, V6B = "2001:db8:1111:3333:4444:5555:6666:7777", "2001:db8:2222:3333:4444:5555:6666:7777"
RECYCLE_CASES = {
    "Empty slices": (([], [], []), ([], [], [])),
    "1 to create and 1 to delete": (([simple("foo", "10.1.2.3")], [], [simple("bar", "10.2.3.4")]),
                                    ([], [("bar", "IPv4", "10.1.2.3")], [])),
    "1 to create, update, and delete": (([simple("foo", "10.1.2.3")], [simple("baz", "10.2.3.4")], [simple("bar", "10.3.4.5")]),
                                        ([], [("baz", "IPv4", "10.2.3.4"), ("bar", "IPv4", "10.1.2.3")], [])),
    "2 to create and 1 to delete": (([simple("foo1", "10.1.2.3"), simple("foo2", "10.3.4.5")], [], [simple("bar", "10.2.3.4")]),
                                    ([("foo2", "IPv4", "10.3.4.5")], [("bar", "IPv4", "10.1.2.3")], [])),
    "1 to create and 2 to delete": (([simple("foo1", "10.1.2.3")], [], [simple("bar1", "10.2.3.4"), simple("bar2", "10.3.4.5")]),
                                    ([], [("bar1", "IPv4", "10.1.2.3")], [("bar2", "IPv4", "10.3.4.5")])),
    "1 to create and 1 to delete for each IP family": (
        ([simple("foo-v4", "10.1.2.3"), simple("foo-v6", V6A, "IPv6")], [], [simple("bar-v4", "10.2.2.3"), simple("bar-v6", V6B, "IPv6")]),
        ([], [("bar-v4", "IPv4", "10.1.2.3"), ("bar-v6", "IPv6", V6A)], [])),
    "1 to create and 1 to delete, wrong IP family": (
        ([simple("foo-v4", "10.1.2.3")], [], [simple("bar-v6", V6B, "IPv6")]),
        ([("foo-v4", "IPv4", "10.1.2.3")], [], [("bar-v6", "IPv6", V6B)])),
}


@pytest.mark.parametrize("start,expected", list(RECYCLE_CASES.values()), ids=list(RECYCLE_CASES))
def test_recycle_slices(start, expected):
    plan = Plan(creates=start[0], updates=start[1], deletes=start[2])
    recycle_slices(plan)
    assert (summary(plan.creates), summary(plan.updates), summary(plan.deletes)) == expected


# ---- RepackSubsets and IP parsing ------------------------------------------------------------

def test_repack_merges_same_ports_and_same_addresses():
    subsets = [
        subset([HTTP], [addr("10.0.0.2")]),
        subset([HTTP], [addr("10.0.0.1")]),
        subset([port("https", 443)], [addr("10.0.0.1"), addr("10.0.0.2")]),
        subset([port("metrics", 9090)], [addr("10.0.0.3")], [addr("10.0.0.4")]),
        subset([port("orphan", 1)]),  # no addresses: vanishes
        {"addresses": [addr("10.0.0.5")]},  # no ports: vanishes
    ]
    assert repack_subsets(subsets) == [
        {"addresses": [addr("10.0.0.1"), addr("10.0.0.2")], "ports": [HTTP, port("https", 443)]},
        {"addresses": [addr("10.0.0.3")], "notReadyAddresses": [addr("10.0.0.4")], "ports": [port("metrics", 9090)]},
    ]


def test_repack_keeps_addresses_with_distinct_target_uids_apart():
    a = {"ip": "10.0.0.1", "targetRef": {"kind": "Pod", "name": "a", "uid": "ua"}}
    b = {"ip": "10.0.0.1", "targetRef": {"kind": "Pod", "name": "b", "uid": "ub"}}
    (repacked,) = repack_subsets([subset([HTTP], [b, a, addr("10.0.0.1")])])
    assert repacked["addresses"] == [addr("10.0.0.1"), a, b]


@pytest.mark.parametrize("text,expected", [
    ("10.0.0.1", ("10.0.0.1", "IPv4")),
    ("010.001.000.001", ("10.1.0.1", "IPv4")),
    ("::ffff:10.0.0.1", ("10.0.0.1", "IPv4")),
    ("1234::5678:0000:0000:9abc:def0", ("1234::5678:0:0:9abc:def0", "IPv6")),
    ("fe80::1%eth0", None),
    ("10.0.0.256", None),
    ("", None),
    ("example.com", None),
])
def test_parse_ip(text, expected):
    assert parse_ip(text) == expected
