"""The EndpointSlice distribution algorithm against upstream's scenarios
(``staging/src/k8s.io/endpointslice/reconciler_test.go``; test names in ids and docstrings).

Upstream counts the fake clientset's actions; here the same counts are the lengths of the plan's
creates, updates and deletes, and ``Cluster`` (builders.py) applies the plan so follow-up syncs and
the resulting slices can be checked the way a user listing EndpointSlices would see them.

Not ported: everything that needs the topology cache (``service.kubernetes.io/topology-mode:
Auto`` hints), and the controller-shell half of ``TestReconcilerFinalizeSvcDeletionTimestamp``
(no creates while the Service is being deleted is done by ``EndpointSliceController._apply``,
not by the pure reconcile).
"""

from __future__ import annotations

import copy

import pytest

from kubesvc.controllers.endpointslice.reconciler import CONTROLLER_NAME, Plan, new_slice
from kubesvc.controllers.endpointslice.util import LABEL_HEADLESS, LABEL_MANAGED_BY, LABEL_SERVICE_NAME, controller_ref
from tests.controllers.endpointslice.builders import (
    Cluster,
    endpoints_for,
    lengths,
    new_empty_slice,
    new_node,
    new_pod,
    new_service,
    nodes_by_name,
    port_group_totals,
    service_ports,
    set_ready,
)


def counts(plan) -> tuple[int, int, int]:
    return len(plan.creates), len(plan.updates), len(plan.deletes)


def many_pods(n: int, start: int = 0) -> list[dict]:
    """Upstream's loop: pods 0..n-1, every third (i % 3 == 0) not ready."""
    return [new_pod(i, ready=i % 3 != 0) for i in range(start, start + n)]


# ---- TestReconcileEmpty ------------------------------------------------------------------------

def test_reconcile_empty():
    """TestReconcileEmpty: a Service with no Pods gets one placeholder slice."""
    svc = new_service()
    cluster = Cluster()
    plan = cluster.reconcile(svc, [])
    assert counts(plan) == (1, 0, 0)
    [slice_] = cluster.list()
    assert slice_["metadata"]["name"].startswith("foo-")
    assert slice_["metadata"]["labels"][LABEL_SERVICE_NAME] == "foo"
    assert slice_["ports"] == [] and slice_["endpoints"] == []
    assert (plan.added, plan.removed) == (0, 0)
    assert port_group_totals(plan) == (0, 1)


# ---- TestReconcile1Pod -------------------------------------------------------------------------

NODE1 = new_node("node-1", zone="us-central1-a", **{"topology.kubernetes.io/region": "us-central1"})


def _pod1() -> dict:
    pod = new_pod(1, ips=["1.2.3.4", "1234::5678:0000:0000:9abc:def0"])
    pod["spec"]["hostname"] = "example-hostname"  # no subdomain: no hostname on the endpoint
    return pod


def _endpoint(address: str) -> dict:
    return {"addresses": [address], "conditions": {"ready": True, "serving": True, "terminating": False},
            "zone": "us-central1-a", "nodeName": "node-1",
            "targetRef": {"kind": "Pod", "namespace": "test", "name": "pod1", "uid": "uid-pod1"}}


def _svc(labels=None, drop_families=False, **spec) -> dict:
    svc = new_service(**spec)
    if drop_families:
        del svc["spec"]["ipFamilies"]
    if labels is not None:
        svc["metadata"]["labels"] = labels
    return svc


V4, V6 = _endpoint("1.2.3.4"), _endpoint("1234::5678:0:0:9abc:def0")
MANAGED = {LABEL_MANAGED_BY: CONTROLLER_NAME, LABEL_SERVICE_NAME: "foo"}
HEADLESS = {**MANAGED, LABEL_HEADLESS: ""}
RESERVED_ON_SERVICE = {LABEL_SERVICE_NAME: "bad", LABEL_MANAGED_BY: "actor", LABEL_HEADLESS: "invalid"}

ONE_POD_CASES = {
    "no-family-service": (_svc(drop_families=True, clusterIP="10.0.0.10"), {"IPv4": V4}, MANAGED),
    "ipv4": (_svc(), {"IPv4": V4}, HEADLESS),
    "ipv4-clusterip": (_svc(clusterIP="1.1.1.1"), {"IPv4": V4}, MANAGED),
    "ipv4-labels": (_svc(labels={"foo": "bar"}), {"IPv4": V4}, {**HEADLESS, "foo": "bar"}),
    "ipv4-bad-labels": (_svc(labels=RESERVED_ON_SERVICE), {"IPv4": V4}, HEADLESS),
    "ipv6": (_svc(ipFamilies=["IPv6"]), {"IPv6": V6}, HEADLESS),
    "ipv6-clusterip": (_svc(ipFamilies=["IPv6"], clusterIP="1234::5678:0000:0000:9abc:def1"), {"IPv6": V6}, MANAGED),
    "dualstack-service": (_svc(ipFamilies=["IPv4", "IPv6"], clusterIP="10.0.0.10", clusterIPs=["10.0.0.10", "2000::1"]),
                          {"IPv4": V4, "IPv6": V6}, MANAGED),
}


@pytest.mark.parametrize("service, expected_endpoints, expected_labels", list(ONE_POD_CASES.values()), ids=list(ONE_POD_CASES))
def test_reconcile_1_pod(service, expected_endpoints, expected_labels):
    """TestReconcile1Pod: one slice per address type, each with the Pod's address of that family
    (IPv6 re-stringified), zone from the Node, labels from the Service minus reserved ones."""
    cluster = Cluster()
    plan = cluster.reconcile(service, [_pod1()], nodes_by_name(NODE1))
    assert counts(plan) == (len(expected_endpoints), 0, 0)
    slices = cluster.list()
    assert {s["addressType"] for s in slices} == set(expected_endpoints)
    for slice_ in slices:
        assert slice_["metadata"]["name"].startswith("foo")
        assert slice_["metadata"]["labels"] == expected_labels
        assert slice_["endpoints"] == [expected_endpoints[slice_["addressType"]]]
    n = len(expected_endpoints)
    assert plan.added == n and plan.errors == []
    assert port_group_totals(plan) == (n, n)


def test_reconcile_dual_stack_service_with_single_stack_pods():
    """Derived from TestReconcile1Pod and TestReconcileEmpty: each address type is reconciled on
    its own, so a family no Pod has an address in still gets its placeholder."""
    svc = _svc(ipFamilies=["IPv4", "IPv6"], clusterIP="10.0.0.10")
    cluster = Cluster()
    plan = cluster.reconcile(svc, [new_pod(1)], nodes_by_name(NODE1))
    assert counts(plan) == (2, 0, 0)
    by_type = {s["addressType"]: s for s in cluster.list()}
    assert len(by_type["IPv4"]["endpoints"]) == 1
    assert by_type["IPv6"]["endpoints"] == [] and by_type["IPv6"]["ports"] == []


# ---- TestReconcile1EndpointSlice / TestPlaceHolderSliceCompare ---------------------------------

def _placeholder(svc: dict, **meta) -> dict:
    slice_ = new_slice(svc, [], "IPv4", CONTROLLER_NAME)
    slice_["metadata"].pop("generateName")
    slice_["metadata"].update(name="foo-abcde", uid="uid-placeholder", generation=1, resourceVersion="7", **meta)
    return slice_


def _different_placeholder(svc: dict) -> dict:
    slice_ = new_empty_slice(1, svc)
    slice_["metadata"]["labels"] = {"bar": "baz"}
    return slice_


@pytest.mark.parametrize("existing, want_counts", [
    (None, (1, 0, 0)),
    (_placeholder, (0, 0, 0)),
    (_different_placeholder, (0, 1, 0)),
], ids=["No existing placeholder", "Existing placeholder that's the same", "Existing placeholder that's different"])
def test_reconcile_1_endpoint_slice(existing, want_counts):
    """TestReconcile1EndpointSlice: an existing identical placeholder is left alone; a different one
    is rewritten in place (create recycled into an update), never deleted and recreated."""
    svc = new_service()
    cluster = Cluster([existing(svc)] if existing else [])
    plan = cluster.reconcile(svc, [])
    assert counts(plan) == want_counts
    [slice_] = cluster.list()
    assert slice_["metadata"]["name"].startswith("foo")
    assert slice_["metadata"]["labels"][LABEL_SERVICE_NAME] == "foo"
    assert slice_["ports"] == [] and slice_["endpoints"] == []
    assert port_group_totals(plan) == (0, 1)


def _tweak(**changes):
    def build(svc: dict) -> dict:
        slice_ = _placeholder(svc)
        for path, value in changes.items():
            target = slice_
            *parents, leaf = path.split("__")
            for key in parents:
                target = target[key]
            target[leaf] = value(svc) if callable(value) else value
        return slice_
    return build


PLACEHOLDER_COMPARE_CASES = {
    # upstream placeholderSliceCompare cases, as reconcile outcomes (0 writes = "equal")
    "Only ObjectMeta.Name has diff": (_tweak(metadata__name="foo-zzzzz"), (0, 0, 0)),
    "Creation time is different": (_tweak(metadata__creationTimestamp="2020-01-01T00:00:01Z"), (0, 0, 0)),
    "Only ObjectMeta.Labels has diff": (_tweak(metadata__labels=lambda svc: {**new_slice(svc, [], "IPv4")["metadata"]["labels"], "bar": "true"}), (0, 1, 0)),
    # not in the upstream table, same rules
    "Annotations and resourceVersion differ": (_tweak(metadata__annotations={"endpoints.kubernetes.io/last-change-trigger-time": "2020-01-01T00:00:00Z"},
                                                      metadata__resourceVersion="99"), (0, 0, 0)),
    "nil ports and endpoints equal empty": (_tweak(ports=None, endpoints=None), (0, 0, 0)),
    "Ports differ": (_tweak(ports=lambda svc: service_ports(svc)), (0, 1, 0)),
    # kubernetes/kubernetes#141593: ownerReference UIDs are compared (a recreated Service)
    "Owner UID differs": (_tweak(metadata__ownerReferences=[{"apiVersion": "v1", "kind": "Service", "name": "foo", "uid": "old-uid",
                                                             "controller": True, "blockOwnerDeletion": True}]), (1, 0, 1)),
}


@pytest.mark.parametrize("existing, want_counts", list(PLACEHOLDER_COMPARE_CASES.values()), ids=list(PLACEHOLDER_COMPARE_CASES))
def test_placeholder_slice_compare(existing, want_counts):
    """TestPlaceHolderSliceCompare, observed through reconcile: only namespace, labels, owners,
    addressType, ports and endpoints make an existing placeholder "different"."""
    svc = new_service()
    cluster = Cluster([existing(svc)])
    plan = cluster.reconcile(svc, [])
    assert counts(plan) == want_counts
    [slice_] = cluster.list()
    assert slice_["ports"] in ([], None) and slice_["endpoints"] in ([], None)
    assert slice_["metadata"]["ownerReferences"] == [controller_ref(svc, "v1", "Service")]


def test_placeholder_slice_compare_owner_uid_only():
    """placeholderSliceCompare after kubernetes/kubernetes#141593: owners compared by UID only."""
    svc = new_service()
    slice_ = _placeholder(svc)
    del slice_["metadata"]["ownerReferences"][0]["blockOwnerDeletion"]
    cluster = Cluster([slice_])
    assert counts(cluster.reconcile(svc, [])) == (0, 0, 0)


# ---- publishNotReadyAddresses, many pods ---------------------------------------------------------

def test_reconcile_1_endpoint_slice_publish_not_ready_addresses():
    """TestReconcile1EndpointSlicePublishNotReadyAddresses: every endpoint is ready; serving still
    tells which Pods are."""
    svc = new_service(publishNotReadyAddresses=True)
    pods = many_pods(50)
    cluster = Cluster()
    plan = cluster.reconcile(svc, pods)
    assert counts(plan) == (1, 0, 0)
    assert cluster.lengths() == [50]
    [slice_] = cluster.list()
    assert all(e["conditions"]["ready"] for e in slice_["endpoints"])
    assert sum(not e["conditions"]["serving"] for e in slice_["endpoints"]) == 17


def test_reconcile_many_pods():
    """TestReconcileManyPods: 250 Pods, no slices: creates of 100, 100, 50."""
    svc = new_service()
    cluster = Cluster()
    plan = cluster.reconcile(svc, many_pods(250))
    assert counts(plan) == (3, 0, 0)
    assert cluster.lengths() == [50, 100, 100]
    assert (plan.added, plan.removed) == (250, 0)
    assert port_group_totals(plan) == (250, 3)


def _reconcile_over_quarter_slices(count: int, existing_lengths: list[int]) -> tuple[list[dict], Cluster, Plan]:
    """``count`` Pods over upstream's two preexisting slices (pods 1, 5, 9, ... and pods 3, 7,
    11, ..., of ``existing_lengths`` endpoints), reconciled: (those slices, the cluster, the plan)."""
    svc = new_service()
    pods = many_pods(count)
    slice1, slice2 = new_empty_slice(1, svc), new_empty_slice(2, svc)
    slice1["endpoints"] = endpoints_for(pods[1:len(pods) - 4:4], svc)
    slice2["endpoints"] = endpoints_for(pods[3:len(pods) - 4:4], svc)
    existing = [slice1, slice2]
    assert lengths(existing) == existing_lengths
    cluster = Cluster(existing)
    return existing, cluster, cluster.reconcile(svc, pods)


def test_reconcile_endpoint_slices_some_preexisting():
    """TestReconcileEndpointSlicesSomePreexisting: 62 + 61 present, 127 to add: one create of 100,
    the other 27 into the slice that ends closest to full (62 -> 89): 1 update + 1 create instead
    of 2 updates + 1 create."""
    _, cluster, plan = _reconcile_over_quarter_slices(250, [61, 62])
    assert counts(plan) == (1, 1, 0)
    assert [len(s["endpoints"]) for s in plan.creates] == [100]
    assert [(s["metadata"]["name"], len(s["endpoints"])) for s in plan.updates] == [("foo-1", 89)]
    assert cluster.lengths() == [61, 89, 100]
    assert (plan.added, plan.removed) == (127, 0)
    assert port_group_totals(plan) == (250, 3)


def test_reconcile_endpoint_slices_some_preexisting_worse_allocation():
    """TestReconcileEndpointSlicesSomePreexistingWorseAllocation: 74 + 74 present, 152 to add: two
    creates (100, 52) rather than 2 updates + 1 create; the existing slices are untouched."""
    existing, cluster, plan = _reconcile_over_quarter_slices(300, [74, 74])
    assert counts(plan) == (2, 0, 0)
    assert lengths(plan.creates) == [52, 100]
    assert cluster.lengths() == [52, 74, 74, 100]
    assert cluster.slices["foo-1"] == existing[0] and cluster.slices["foo-2"] == existing[1]
    assert (plan.added, plan.removed) == (152, 0)
    assert port_group_totals(plan) == (300, 4)


def test_concept_page_prefers_one_create_to_several_updates():
    """EndpointSlices concept page, "Distribution of EndpointSlices": 10 new endpoints and two
    slices with room for 5 each -> one new slice; the two are left alone."""
    svc = new_service()
    pods = [new_pod(i) for i in range(200)]
    slice1, slice2 = new_empty_slice(1, svc), new_empty_slice(2, svc)
    slice1["endpoints"] = endpoints_for(pods[:95], svc)
    slice2["endpoints"] = endpoints_for(pods[95:190], svc)
    cluster = Cluster([slice1, slice2])
    plan = cluster.reconcile(svc, pods)
    assert counts(plan) == (1, 0, 0)
    assert lengths(plan.creates) == [10]
    assert cluster.lengths() == [10, 95, 95]


# ---- everything changes: port, labels ---------------------------------------------------------

def _created(n: int = 250) -> tuple[dict, list[dict], Cluster]:
    svc = new_service()
    pods = many_pods(n)
    cluster = Cluster()
    assert counts(cluster.reconcile(svc, pods)) == (3, 0, 0)
    assert cluster.lengths() == [50, 100, 100]
    return svc, pods, cluster


def test_reconcile_endpoint_slices_updating():
    """TestReconcileEndpointSlicesUpdating: a targetPort change rewrites the 3 slices in place
    (creates recycled into updates), no create or delete."""
    svc, pods, cluster = _created()
    svc = copy.deepcopy(svc)
    svc["spec"]["ports"][0]["targetPort"] = 81
    plan = cluster.reconcile(svc, pods)
    assert counts(plan) == (0, 3, 0)
    assert cluster.lengths() == [50, 100, 100]
    assert all(s["ports"] == service_ports(svc, 81) for s in cluster.list())


def test_reconcile_endpoint_slices_services_labels_updating():
    """TestReconcileEndpointSlicesServicesLabelsUpdating: a new Service label is copied onto all 3
    slices, by updates."""
    svc, pods, cluster = _created()
    svc = copy.deepcopy(svc)
    svc["metadata"]["labels"] = {"foo": "bar"}
    plan = cluster.reconcile(svc, pods)
    assert counts(plan) == (0, 3, 0)
    assert cluster.lengths() == [50, 100, 100]
    assert all(s["metadata"]["labels"].get("foo") == "bar" for s in cluster.list())


def test_reconcile_endpoint_slices_services_reserved_labels():
    """TestReconcileEndpointSlicesServicesReservedLabels: reserved labels on the Service change
    nothing."""
    svc, pods, cluster = _created()
    svc = copy.deepcopy(svc)
    svc["metadata"]["labels"] = dict(RESERVED_ON_SERVICE)
    plan = cluster.reconcile(svc, pods)
    assert counts(plan) == (0, 0, 0)
    assert all(s["metadata"]["labels"][LABEL_SERVICE_NAME] == "foo" for s in cluster.list())


def test_reconcile_endpoint_slices_recycling():
    """TestReconcileEndpointSlicesRecycling: 10 slices of 30 are left alone while nothing changes;
    a targetPort change repacks them: 3 updates (100 each) and 7 deletes."""
    svc = new_service()
    pods = many_pods(300)
    existing = []
    for i in range(10):
        slice_ = new_empty_slice(i, svc)
        slice_["endpoints"] = endpoints_for(pods[i * 30:(i + 1) * 30], svc)
        existing.append(slice_)
    cluster = Cluster(existing)
    assert counts(cluster.reconcile(svc, pods)) == (0, 0, 0)

    svc = copy.deepcopy(svc)
    svc["spec"]["ports"][0]["targetPort"] = 81
    plan = cluster.reconcile(svc, pods)
    assert counts(plan) == (0, 3, 7)
    assert cluster.lengths() == [100, 100, 100]
    assert set(cluster.slices) <= {s["metadata"]["name"] for s in existing}
    assert (plan.added, plan.removed) == (300, 0)
    assert port_group_totals(plan) == (300, 3)


@pytest.mark.parametrize("smaller_first", [False, True], ids=["fuller slice listed first", "smaller slice listed first"])
def test_reconcile_endpoint_slices_update_packing(smaller_first):
    """TestReconcileEndpointSlicesUpdatePacking: both slices change (Pods flipped not ready), and
    the 15 new endpoints go to the fuller of the slices already being updated: [95, 20]. With the
    smaller slice listed first too: the slices being updated are filled fullest first, whatever
    order they come in."""
    svc = new_service()
    fuller, smaller = [new_pod(i) for i in range(80)], [new_pod(i) for i in range(100, 120)]
    first, second = (smaller, fuller) if smaller_first else (fuller, smaller)
    slice1, slice2 = new_empty_slice(1, svc), new_empty_slice(2, svc)
    pods = first + second
    slice1["endpoints"] = endpoints_for(first, svc)
    slice2["endpoints"] = endpoints_for(second, svc)
    cluster = Cluster([slice1, slice2])
    for i, pod in enumerate(pods):
        if i % 10 == 0:
            set_ready(pod, False)
    pods += [new_pod(i) for i in range(200, 215)]
    plan = cluster.reconcile(svc, pods)
    assert counts(plan) == (0, 2, 0)
    want = {"foo-1": 20, "foo-2": 95} if smaller_first else {"foo-1": 95, "foo-2": 20}
    assert {s["metadata"]["name"]: len(s["endpoints"]) for s in plan.updates} == want
    assert (plan.added, plan.removed) == (15, 0)
    assert port_group_totals(plan) == (115, 2)


@pytest.mark.parametrize("sizes, new, want", [
    ([50, 70], 25, {"foo-2": 95}),
    ([70, 75, 60], 25, {"foo-2": 100}),
    ([80, 90], 15, {"foo-1": 95}),
], ids=["closest to full, not first fit", "exact fit", "only one fits"])
def test_get_slice_to_fill(sizes, new, want):
    """getSliceToFill (via reconcile): fewer than a slice's worth of new endpoints go into the
    unchanged slice that ends closest to full without exceeding the maximum."""
    svc = new_service()
    pods, existing, n = [], [], 0
    for i, size in enumerate(sizes, start=1):
        members = [new_pod(k) for k in range(n, n + size)]
        n += size
        slice_ = new_empty_slice(i, svc)
        slice_["endpoints"] = endpoints_for(members, svc)
        existing.append(slice_)
        pods += members
    pods += [new_pod(k) for k in range(n, n + new)]
    cluster = Cluster(existing)
    plan = cluster.reconcile(svc, pods)
    assert counts(plan) == (0, 1, 0)
    assert {s["metadata"]["name"]: len(s["endpoints"]) for s in plan.updates} == want


def test_reconcile_endpoint_slices_replace_deprecated():
    """TestReconcileEndpointSlicesReplaceDeprecated: slices of the deprecated "IP" address type
    are deleted, never recycled; the endpoints are packed perfectly into new IPv4 slices."""
    svc = new_service()
    no_publish = {"metadata": {"name": "x", "namespace": "test"}, "spec": {}}
    slice1 = new_empty_slice(1, svc, address_type="IP")
    slice2 = new_empty_slice(2, svc, address_type="IP")
    pods = [new_pod(i) for i in range(80)] + [new_pod(i) for i in range(100, 150)]
    slice1["endpoints"] = endpoints_for(pods[:80], no_publish)
    slice2["endpoints"] = endpoints_for(pods[80:], no_publish)
    cluster = Cluster([slice1, slice2])
    plan = cluster.reconcile(svc, pods)
    assert counts(plan) == (2, 0, 2)
    assert {s["metadata"]["name"] for s in plan.deletes} == {"foo-1", "foo-2"}
    assert cluster.lengths() == [30, 100]
    assert {s["addressType"] for s in cluster.list()} == {"IPv4"}


@pytest.mark.parametrize("owned, want_counts", [(True, (0, 0, 0)), (False, (1, 0, 1))],
                         ids=["slice owned by Service", "slice owned by other Service UID"])
def test_reconcile_endpoint_slices_recreation(owned, want_counts):
    """TestReconcileEndpointSlicesRecreation: a slice owned by an older Service of the same name is
    replaced (create, then delete), never updated."""
    svc = new_service()
    pod = new_pod(1)
    slice_ = new_empty_slice(1, svc)
    slice_["endpoints"] = endpoints_for([pod], {"metadata": {"name": "x", "namespace": "test"}, "spec": {}})
    if not owned:
        slice_["metadata"]["ownerReferences"][0]["uid"] = "different"
    cluster = Cluster([slice_])
    plan = cluster.reconcile(svc, [pod])
    assert counts(plan) == want_counts
    [remaining] = cluster.list()
    assert remaining["metadata"]["ownerReferences"][0]["uid"] == svc["metadata"]["uid"]
    assert len(remaining["endpoints"]) == 1


def test_reconcile_endpoint_slices_named_ports():
    """TestReconcileEndpointSlicesNamedPorts: a named targetPort resolving to 5 different numbers
    gives 5 port groups, one slice of 60 each, each with its own port."""
    svc = new_service("named-port-example", ports=[{"targetPort": "http", "protocol": "TCP"}])
    pods = []
    for i in range(300):
        pod = new_pod(i, ready=i % 3 != 0)
        pod["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": 8080 + i % 5, "protocol": "TCP"}]
        pods.append(pod)
    cluster = Cluster()
    plan = cluster.reconcile(svc, pods)
    assert counts(plan) == (5, 0, 0)
    assert cluster.lengths() == [60] * 5
    assert sorted((s["addressType"], s["ports"][0]["port"]) for s in cluster.list()) == [("IPv4", 8080 + i) for i in range(5)]
    assert all(s["ports"] == [{"name": "", "port": s["ports"][0]["port"], "protocol": "TCP"}] for s in cluster.list())
    assert port_group_totals(plan) == (300, 5)


@pytest.mark.parametrize("max_endpoints, want_lengths", [
    (50, [50, 50, 50, 50, 50]), (80, [10, 80, 80, 80]), (150, [100, 150]), (250, [250]), (500, [250]),
], ids=lambda v: f"maxEndpointsPerSlice: {v}" if isinstance(v, int) else None)
def test_reconcile_max_endpoints_per_slice(max_endpoints, want_lengths):
    """TestReconcileMaxEndpointsPerSlice."""
    cluster = Cluster()
    plan = cluster.reconcile(new_service(), many_pods(250), max_endpoints=max_endpoints)
    assert counts(plan) == (len(want_lengths), 0, 0)
    assert cluster.lengths() == want_lengths
    assert port_group_totals(plan) == (250, len(want_lengths))


def test_reconcile_endpoint_slices_metrics():
    """TestReconcileEndpointSlicesMetrics: endpoints added / removed per sync."""
    svc = new_service()
    pods = [new_pod(i) for i in range(20)]
    cluster = Cluster()
    plan = cluster.reconcile(svc, pods)
    assert counts(plan) == (1, 0, 0)
    assert (plan.added, plan.removed) == (20, 0)
    plan = cluster.reconcile(svc, pods[:10])
    assert counts(plan) == (0, 1, 0)
    assert (plan.added, plan.removed) == (0, 10)
    assert port_group_totals(plan) == (10, 1)
    assert cluster.lengths() == [10]


# ---- finalize: recycling and the Service's deletionTimestamp ------------------------------------

def _old_port_slice(svc: dict, pods: list[dict], name: str = "to-delete") -> dict:
    slice_ = new_empty_slice(0, svc, ports=service_ports(svc, 8080), name=name)
    slice_["endpoints"] = endpoints_for(pods, svc)
    return slice_


@pytest.mark.parametrize("deletion_timestamp", [None, "2024-01-01T00:00:00Z"], ids=["nil deletion timestamp", "deletion timestamp set"])
@pytest.mark.parametrize("scenario", ["attempt create", "attempt create and delete, recycling in action", "attempt update and delete"])
def test_reconciler_finalize_svc_deletion_timestamp(scenario, deletion_timestamp):
    """TestReconcilerFinalizeSvcDeletionTimestamp, pure part: the plan does not depend on the
    Service's deletionTimestamp (the controller shell drops the creates), and a create plus a
    delete of an owned slice of the same address type become one update of that slice."""
    svc = new_service()
    pods = [new_pod(i) for i in range(3)]
    existing = {
        "attempt create": [],
        "attempt create and delete, recycling in action": [_old_port_slice(svc, pods)],
        "attempt update and delete": [_old_port_slice(svc, pods[:1], "to-delete"), _old_port_slice(svc, pods, "to-update")],
    }[scenario]
    if scenario == "attempt update and delete":
        existing[1]["ports"] = service_ports(svc)
        existing[1]["endpoints"] = endpoints_for(pods[:2], svc)  # one endpoint to add
    deleting = copy.deepcopy(svc)
    if deletion_timestamp:
        deleting["metadata"]["deletionTimestamp"] = deletion_timestamp
    plain = Cluster(existing).reconcile(svc, pods, apply=False)
    cluster = Cluster(existing)
    plan = cluster.reconcile(deleting, pods)
    assert (plan.creates, plan.updates, plan.deletes) == (plain.creates, plain.updates, plain.deletes)
    want = {"attempt create": (1, 0, 0),
            "attempt create and delete, recycling in action": (0, 1, 0),
            "attempt update and delete": (0, 1, 1)}[scenario]
    assert counts(plan) == want
    if scenario == "attempt create and delete, recycling in action":
        [updated] = plan.updates
        assert updated["metadata"]["name"] == "to-delete"
        assert updated["ports"] == service_ports(svc) and len(updated["endpoints"]) == 3
    if scenario == "attempt update and delete":
        assert [s["metadata"]["name"] for s in plan.updates] == ["to-update"]
        assert [s["metadata"]["name"] for s in plan.deletes] == ["to-delete"]
    assert cluster.lengths() == [3]


def test_recycling_takes_the_last_create_for_the_first_delete():
    """finalize: while creates and deletes remain, the last create takes the first deletable
    slice's name."""
    svc = new_service()
    pods = [new_pod(i) for i in range(150)]
    cluster = Cluster([_old_port_slice(svc, pods[:5], "old")])
    plan = cluster.reconcile(svc, pods)
    assert counts(plan) == (1, 1, 0)
    assert lengths(plan.creates) == [100]
    assert [(s["metadata"]["name"], len(s["endpoints"])) for s in plan.updates] == [("old", 50)]
    assert plan.updates[0]["ports"] == service_ports(svc)


# ---- Pods whose Node is unknown ----------------------------------------------------------------

NODE0, NODE_1 = new_node("node-0"), new_node("node-1")


def _missing_node_pods() -> list[dict]:
    return [new_pod(0, node="node-0"), new_pod(1, node="node-1")]


def _slice_with_both(svc: dict) -> dict:
    slice_ = new_empty_slice(1, svc)
    pod0, pod1 = _missing_node_pods()
    slice_["endpoints"] = [endpoints_for([pod0], svc, NODE0)[0], endpoints_for([pod1], svc, NODE_1)[0]]
    return slice_


MISSING_NODE_CASES = {
    # name: publishNotReady, nodes, existing slice?, want (creates, updates, deletes), desired endpoints, error
    "Create and publishNotReady false": (False, [NODE0], False, (1, 0, 0), 1, True),
    "Create and publishNotReady true": (True, [NODE0], False, (1, 0, 0), 2, False),
    "Update and publishNotReady false": (False, [NODE0], True, (0, 1, 0), 1, True),
    "Update and publishNotReady true and all nodes missing": (True, [], True, (0, 0, 0), 2, False),
    "Update and publishNotReady true": (True, [NODE0], True, (0, 0, 0), 2, False),
    "Update if publishNotReady false and no nodes are present": (False, [], True, (0, 1, 0), 0, True),
}


@pytest.mark.parametrize("publish, nodes, existing, want_counts, desired, want_error",
                         list(MISSING_NODE_CASES.values()), ids=list(MISSING_NODE_CASES))
def test_reconciler_pod_missing_node(publish, nodes, existing, want_counts, desired, want_error):
    """TestReconcilerPodMissingNode: without publishNotReadyAddresses a Pod on an unknown Node is
    left out and reported (so the sync is retried) but the other writes happen; with it the Pod
    is published without a zone. The slice is updated, never deleted."""
    base = new_service()
    svc = new_service(publishNotReadyAddresses=publish)
    cluster = Cluster([_slice_with_both(base)] if existing else [])
    plan = cluster.reconcile(svc, _missing_node_pods(), nodes_by_name(*nodes))
    assert counts(plan) == want_counts
    assert cluster.lengths() == [desired]
    assert port_group_totals(plan)[0] == desired
    missing = [p for p in ("node-0", "node-1") if p not in {n["metadata"]["name"] for n in nodes}]
    if want_error:
        assert plan.errors == [f"skipping Pod pod{p[-1]} for Service test/foo: Node {p} Not Found" for p in missing]
    else:
        assert plan.errors == []


# ---- hints: trafficDistribution (no topology cache) ---------------------------------------------

def _td_topology():
    nodes = nodes_by_name(*(new_node(f"node-{i}", zone=f"zone-{'abc'[i]}") for i in range(3)))
    placement = ["node-0", "node-1", "node-1", "node-1", "node-2", "node-2"]
    pods = [new_pod(i, node=node) for i, node in enumerate(placement)]
    return nodes, pods


def _hints_by_zone(slices) -> dict[str, int]:
    got: dict[str, int] = {}
    for slice_ in slices:
        for endpoint in slice_["endpoints"]:
            zones = ((endpoint.get("hints") or {}).get("forZones")) or []
            hint = zones[0]["name"] if len(zones) == 1 else ""
            got[hint] = got.get(hint, 0) + 1
            assert hint in ("", endpoint.get("zone")), "PreferClose hints name the endpoint's own zone"
    return got


@pytest.mark.parametrize("traffic_distribution, annotation, want", [
    ("PreferClose", "Disabled", {"zone-a": 1, "zone-b": 3, "zone-c": 2}),
    (None, "", {"": 6}),
], ids=["trafficDistribution=PreferClose, topologyAnnotation=Disabled", "trafficDistribution=nil, topologyAnnotation=<empty>"])
def test_reconcile_traffic_distribution(traffic_distribution, annotation, want):
    """TestReconcile_TrafficDistribution (the cases without the topology cache)."""
    nodes, pods = _td_topology()
    svc = new_service()
    svc["metadata"]["annotations"] = {"service.kubernetes.io/topology-aware-hints": annotation}
    if traffic_distribution:
        svc["spec"]["trafficDistribution"] = traffic_distribution
    cluster = Cluster()
    plan = cluster.reconcile(svc, pods, nodes)
    assert counts(plan) == (1, 0, 0)
    assert _hints_by_zone(cluster.list()) == want


def _hinted(endpoint: dict, zone: str | None) -> dict:
    endpoint = copy.deepcopy(endpoint)
    if zone:
        endpoint["hints"] = {"forZones": [{"name": zone}]}
    return endpoint


HINT_CASES = {
    # trafficdist_test.go TestReconcileHints, as whole reconciles of an otherwise unchanged slice:
    # (trafficDistribution, hint zone per existing endpoint, pod readiness, want updates, want hints)
    "should set zone hints with PreferClose": ("PreferClose", [None, None, None], True, 1, {"zone-a": 1, "zone-b": 2}),
    "should correct incorrect hints with PreferClose": ("PreferClose", ["zone-a", "zone-c", "zone-b"], True, 1, {"zone-a": 1, "zone-b": 2}),
    "correct hints are left alone": ("PreferClose", ["zone-a", "zone-b", "zone-b"], True, 0, {"zone-a": 1, "zone-b": 2}),
    "unready endpoints should not trigger updates": ("PreferClose", [None, None, None], False, 0, {"": 3}),
    "should remove hints when trafficDistribution is unrecognized": ("Unknown", ["zone-a", "zone-b", "zone-b"], True, 1, {"": 3}),
    "should remove hints when trafficDistribution is unset": (None, ["zone-a", "zone-b", "zone-b"], True, 1, {"": 3}),
}


@pytest.mark.parametrize("traffic_distribution, hints, ready, want_updates, want_hints", list(HINT_CASES.values()), ids=list(HINT_CASES))
def test_reconcile_hints(traffic_distribution, hints, ready, want_updates, want_hints):
    """An unchanged slice is pulled into the updates only for missing, wrong or stale hints on
    ready endpoints (trafficdist.ReconcileHints / topologycache.RemoveHintsFromSlices)."""
    nodes, pods = _td_topology()
    pods = [set_ready(p, ready) for p in pods[:3]]
    svc = new_service()
    if traffic_distribution:
        svc["spec"]["trafficDistribution"] = traffic_distribution
    slice_ = new_empty_slice(1, svc)
    slice_["endpoints"] = [_hinted(e, z) for e, z in zip(endpoints_for(pods, svc, None), hints)]
    for endpoint, pod in zip(slice_["endpoints"], pods):  # the Node's zone, as podToEndpoint gives it
        endpoint["zone"] = nodes[pod["spec"]["nodeName"]]["metadata"]["labels"]["topology.kubernetes.io/zone"]
    cluster = Cluster([slice_])
    plan = cluster.reconcile(svc, pods, nodes)
    assert counts(plan) == (0, want_updates, 0)
    assert _hints_by_zone(cluster.list()) == want_hints


def test_unready_endpoints_keep_their_hints_under_prefer_close():
    """preferCloseHeuristic skips endpoints that are not ready: a stale hint on one neither
    triggers an update nor is removed."""
    nodes, pods = _td_topology()
    pods = [set_ready(p, False) for p in pods[:1]]
    svc = new_service(trafficDistribution="PreferClose")
    slice_ = new_empty_slice(1, svc)
    slice_["endpoints"] = endpoints_for(pods, svc, nodes["node-0"])
    slice_["endpoints"][0]["hints"] = {"forZones": [{"name": "zone-c"}]}
    cluster = Cluster([slice_])
    assert counts(cluster.reconcile(svc, pods, nodes)) == (0, 0, 0)


# ---- TestReconcileTopology, the cases that do not use the topology cache ------------------------

def _topology_fixture():
    nodes, pods = {}, []
    for i, zone in enumerate(("zone-a", "zone-b", "zone-c")):
        for j in range(10):
            node = new_node(f"node-{zone}-{j}", zone=zone)
            nodes[node["metadata"]["name"]] = node
            pods.append(new_pod(i * 100 + j, node=node["metadata"]["name"]))
    svc = new_service("foo", "testing")
    slice_pods = {"zone-a-b": [pods[k] for k in (7, 8, 16, 17, 18)], "zone-a-c": [pods[k] for k in (5, 6, 25, 26)],
                  "zone-c": [pods[k] for k in (27, 28, 29)]}
    slices = {}
    for name, members in slice_pods.items():
        slice_ = new_empty_slice(0, svc, name=name)
        slice_["metadata"]["labels"] = {LABEL_MANAGED_BY: CONTROLLER_NAME, LABEL_SERVICE_NAME: "foo"}
        slice_["endpoints"] = [endpoints_for([p], svc, nodes[p["spec"]["nodeName"]])[0] for p in members]
        slices[name] = slice_
    return svc, nodes, slice_pods, slices


@pytest.mark.parametrize("annotation, names, desired", [
    ("auto", ["zone-c"], 3),
    ("disabled", ["zone-a-c", "zone-a-b"], 9),
], ids=["no change, topologyCache disabled, annotation == auto", "topology enabled, hintsAnnotation==disabled, more slices and endpoints"])
def test_reconcile_topology(annotation, names, desired):
    """TestReconcileTopology without the topology cache: nothing to write and no hints."""
    svc, nodes, slice_pods, slices = _topology_fixture()
    svc["metadata"]["annotations"] = {"service.kubernetes.io/topology-aware-hints": annotation}
    pods = [p for name in names for p in slice_pods[name]]
    cluster = Cluster([slices[name] for name in names])
    plan = cluster.reconcile(svc, pods, nodes)
    assert counts(plan) == (0, 0, 0)
    assert port_group_totals(plan) == (desired, len(names))
    assert _hints_by_zone(cluster.list()) == {"": desired}
