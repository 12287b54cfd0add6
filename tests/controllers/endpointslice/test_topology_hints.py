"""Topology hints: ``topology-mode: Auto``'s proportional allocation (``topologycache``) and
``trafficDistribution``'s heuristics (``trafficdist``: PreferClose, PreferSameZone,
PreferSameNode and its feature gate), table-tested, then through whole reconciles. Expected
values are worked out by hand from upstream's rules (module docstrings): desired = share x n,
minimum = ceil(desired / 1.2), maximum = minimum + what the minimums leave."""

from __future__ import annotations

import pytest

from kubesvc.controllers.endpointslice import topologycache, trafficdist
from kubesvc.controllers.endpointslice.reconciler import reconcile, Topology
from kubesvc.controllers.endpointslice.topologycache import Allocation
from tests.controllers.endpointslice.builders import new_node, new_pod, new_service, nodes_by_name, set_ready


def node(name, zone=None, cpu="2", ready=True, **labels):
    obj = new_node(name, zone=zone, **labels)
    obj["status"] = {"allocatable": {"cpu": cpu} if cpu else {},
                     "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return obj


CPU_CASES = [
    ("two-equal-zones", [node("n1", "a"), node("n2", "b")], {"a": 0.5, "b": 0.5}),
    ("milli-and-fractions", [node("n1", "a", "500m"), node("n2", "b", "1.5")], {"a": 0.25, "b": 0.75}),
    ("zone-sums-its-nodes", [node("n1", "a"), node("n2", "a"), node("n3", "b", "4")], {"a": 0.5, "b": 0.5}),
    ("not-ready-left-out", [node("n1", "a"), node("n2", "b"), node("n3", "b", ready=False)], {"a": 0.5, "b": 0.5}),
    ("control-plane-left-out", [node("n1", "a"), node("n2", "b"), node("cp", "c", **{"node-role.kubernetes.io/control-plane": ""})],
     {"a": 0.5, "b": 0.5}),
    ("a-node-without-zone", [node("n1", "a"), node("n2", "b"), node("n3")], None),
    ("a-node-without-cpu", [node("n1", "a"), node("n2", "b", cpu=None)], None),
    ("one-zone", [node("n1", "a"), node("n2", "a")], None),
    ("not-ready-without-zone-is-ignored", [node("n1", "a"), node("n2", "b"), node("n3", ready=False)], {"a": 0.5, "b": 0.5}),
]


@pytest.mark.parametrize("nodes,expected", [c[1:] for c in CPU_CASES], ids=[c[0] for c in CPU_CASES])
def test_cpu_ratios(nodes, expected):
    assert topologycache.cpu_ratios(nodes) == expected


ALLOCATION_CASES = [
    ("even", {"a": 0.5, "b": 0.5}, 6, {"a": Allocation(3, 3, 3.0), "b": Allocation(3, 3, 3.0)}, None),
    ("uneven-with-spare", {"a": 0.25, "b": 0.75}, 8, {"a": Allocation(2, 3, 2.0), "b": Allocation(5, 6, 6.0)}, None),
    ("exact", {"a": 0.2, "b": 0.8}, 5, {"a": Allocation(1, 1, 1.0), "b": Allocation(4, 4, 4.0)}, None),
    ("no-shares", None, 6, None, topologycache.INSUFFICIENT_NODE_INFO),
    ("fewer-endpoints-than-zones", {"a": 0.5, "b": 0.5}, 1, None, "Insufficient number of endpoints (1 endpoints, 2 zones)"),
    ("minimums-overload", {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}, 4, None,
     "Unable to allocate minimum required endpoints to each zone without exceeding overload threshold (4 endpoints, 3 zones)"),
]


@pytest.mark.parametrize("ratios,n,expected,why", [c[1:] for c in ALLOCATION_CASES], ids=[c[0] for c in ALLOCATION_CASES])
def test_allocations(ratios, n, expected, why):
    assert topologycache.allocations(ratios, n) == (expected, why)


def endpoint(ip, zone, ready=True, node_name=None, hint=None):
    found = {"addresses": [ip], "conditions": {"ready": ready}, "zone": zone}
    if node_name:
        found["nodeName"] = node_name
    if hint:
        found["hints"] = {"forZones": [{"name": hint}]}
    return found


def hinted(slices):
    return [(e["addresses"][0], ((e.get("hints") or {}).get("forZones") or [{}])[0].get("name")) for s in slices for e in s["endpoints"]]


def test_auto_hints_follow_the_cpu_and_move_the_surplus_to_the_neediest_zone():
    # a has a quarter of the CPU, b three quarters; 4 endpoints in each zone: a may keep 3, b needs 5
    created = [{"endpoints": [endpoint(f"10.0.0.{i}", "a") for i in range(1, 5)] + [endpoint(f"10.0.1.{i}", "b") for i in range(1, 5)]}]
    moved, events = topologycache.add_hints(created, [], [], {"a": 0.25, "b": 0.75}, "IPv4", had_hints=False)
    assert moved == []
    assert hinted(created) == [("10.0.0.1", "b"), ("10.0.0.2", "a"), ("10.0.0.3", "a"), ("10.0.0.4", "a"),
                               ("10.0.1.1", "b"), ("10.0.1.2", "b"), ("10.0.1.3", "b"), ("10.0.1.4", "b")]
    assert events == [topologycache.HintEvent("Normal", "TopologyAwareHintsEnabled", "Topology Aware Hints has been enabled, addressType: IPv4")]
    _, again = topologycache.add_hints(created, [], [], {"a": 0.25, "b": 0.75}, "IPv4", had_hints=True)
    assert again == []  # announced once


def test_auto_hints_removed_with_an_event_when_they_cannot_be_balanced():
    unchanged = [{"endpoints": [endpoint("10.0.0.1", "a", hint="a")]}]
    created = [{"endpoints": [endpoint("10.0.0.2", "a", hint="a"), endpoint("10.0.0.3", "b")]}]
    moved, events = topologycache.add_hints(created, [], unchanged, None, "IPv6", had_hints=True)
    assert hinted(created) == [("10.0.0.2", None), ("10.0.0.3", None)]
    assert hinted(moved) == [("10.0.0.1", None)] and hinted(unchanged) == [("10.0.0.1", "a")]  # the cache's copy stays untouched
    assert events == [topologycache.HintEvent("Warning", "TopologyAwareHintsDisabled", f"{topologycache.INSUFFICIENT_NODE_INFO}, addressType: IPv6")]


def test_an_endpoint_without_a_zone_removes_every_hint():
    # six ready endpoints, enough for two zones (minimum 3 each); one has no zone
    created = [{"endpoints": [endpoint(f"10.0.0.{i}", "ab"[i % 2]) for i in range(1, 6)] + [endpoint("10.0.0.6", None)]}]
    _, events = topologycache.add_hints(created, [], [], {"a": 0.5, "b": 0.5}, "IPv4", had_hints=False)
    assert [zone for _, zone in hinted(created)] == [None] * 6
    assert events[0].message == "One or more endpoints do not have a Zone specified, addressType: IPv4"


def test_unchanged_slices_keep_valid_hints_and_foreign_ones_are_rewritten():
    # six ready endpoints, three per zone (allocation 3 each)
    good = {"endpoints": [endpoint("10.0.0.1", "a", hint="a"), endpoint("10.0.0.2", "a", hint="a"),
                          endpoint("10.0.1.1", "b", hint="b"), endpoint("10.0.1.2", "b", hint="b")]}
    foreign = {"endpoints": [endpoint("10.0.2.1", "a", hint="gone"), endpoint("10.0.2.2", "b", hint="b")]}
    moved, _ = topologycache.add_hints([], [], [good, foreign], {"a": 0.5, "b": 0.5}, "IPv4", had_hints=True)
    assert hinted(moved) == [("10.0.2.1", "a"), ("10.0.2.2", "b")]
    assert hinted([foreign]) == [("10.0.2.1", "gone"), ("10.0.2.2", "b")]  # a copy was rewritten, not the cache's slice


HEURISTIC_CASES = [
    ("PreferClose", True, "zone"), ("PreferSameZone", True, "zone"), ("PreferSameNode", True, "node"),
    ("PreferClose", False, "zone"), ("PreferSameZone", False, ""), ("PreferSameNode", False, ""), (None, True, ""), ("Unknown", True, ""),
]


@pytest.mark.parametrize("value,gate,expected", HEURISTIC_CASES, ids=[f"{c[0]}-gate-{c[1]}" for c in HEURISTIC_CASES])
def test_traffic_distribution_heuristic(value, gate, expected):
    assert trafficdist.heuristic(value, gate) == expected


def test_prefer_same_node_hints_node_and_zone():
    endpoints = [endpoint("10.0.0.1", "a", node_name="n1"), endpoint("10.0.0.2", None, node_name="n2"),
                 endpoint("10.0.0.3", "b", ready=False, node_name="n3")]
    endpoints[2]["hints"] = {"forZones": [{"name": "stale"}]}
    assert trafficdist.needs_update(endpoints, "node")
    trafficdist.apply(endpoints, "node")
    assert [e.get("hints") for e in endpoints] == [{"forNodes": [{"name": "n1"}], "forZones": [{"name": "a"}]},
                                                   {"forNodes": [{"name": "n2"}]}, {"forZones": [{"name": "stale"}]}]
    assert not trafficdist.needs_update(endpoints, "node")
    assert trafficdist.needs_update(endpoints, "")  # unset: every hint goes, ready or not
    trafficdist.apply(endpoints, "")
    assert all("hints" not in e for e in endpoints)


def _zones_world():
    nodes = nodes_by_name(node("node-0", "zone-a", "1"), node("node-1", "zone-b", "3"))
    pods = [new_pod(i, node=f"node-{i % 2}") for i in range(8)]
    return nodes, pods


@pytest.mark.parametrize("gate,expect_nodes", [(True, True), (False, False)], ids=["gate-on", "gate-off"])
def test_reconcile_prefer_same_node(gate, expect_nodes):
    nodes, pods = _zones_world()
    plan = reconcile(new_service(trafficDistribution="PreferSameNode"), pods, [], nodes, max_endpoints_per_slice=100,
                     topology=Topology(None, gate))
    by_node = {}
    for slice_ in plan.creates:
        for e in slice_["endpoints"]:
            by_node[e["nodeName"]] = e.get("hints")
    if expect_nodes:
        assert by_node == {"node-0": {"forNodes": [{"name": "node-0"}], "forZones": [{"name": "zone-a"}]},
                           "node-1": {"forNodes": [{"name": "node-1"}], "forZones": [{"name": "zone-b"}]}}
    else:
        assert by_node == {"node-0": None, "node-1": None}


def test_reconcile_topology_mode_auto_wins_over_traffic_distribution_and_records_events():
    nodes, pods = _zones_world()
    service = new_service(trafficDistribution="PreferSameNode")
    service["metadata"]["annotations"] = {"service.kubernetes.io/topology-mode": "Auto"}
    plan = reconcile(service, pods, [], nodes, max_endpoints_per_slice=100,
                     topology=Topology(topologycache.cpu_ratios(nodes.values())))
    zones = [((e.get("hints") or {}).get("forZones") or [{}])[0].get("name") for s in plan.creates for e in s["endpoints"]]
    # zone-a has 1 of 4 CPUs: of 8 endpoints it may keep at most 3 of its 4; zone-b gets 5 hints
    assert sorted(zones) == ["zone-a"] * 3 + ["zone-b"] * 5
    assert not any("forNodes" in (e.get("hints") or {}) for s in plan.creates for e in s["endpoints"])
    assert [(e.reason, e.type) for e in plan.events] == [("TopologyAwareHintsEnabled", "Normal")]
    lone = reconcile(service, pods[:1], [], nodes, max_endpoints_per_slice=100, topology=Topology(topologycache.cpu_ratios(nodes.values())))
    assert all("hints" not in e for s in lone.creates for e in s["endpoints"])
    assert lone.events[0].message == "Insufficient number of endpoints (1 endpoints, 2 zones), addressType: IPv4"


def test_not_ready_pods_count_nothing():
    nodes, pods = _zones_world()
    pods = [set_ready(p, i < 2) for i, p in enumerate(pods)]
    service = new_service()
    service["metadata"]["annotations"] = {"service.kubernetes.io/topology-mode": "Auto"}
    plan = reconcile(service, pods, [], nodes, max_endpoints_per_slice=100, topology=Topology(topologycache.cpu_ratios(nodes.values())))
    # 2 ready endpoints, one per zone: a desires 0.5 -> minimum 1, b desires 1.5 -> minimum 2: 3 > 2
    assert plan.events[0].message.startswith("Unable to allocate minimum required endpoints")


def test_node_hints_left_by_prefer_same_node_are_rewritten_under_auto():
    stale = {"endpoints": [endpoint(f"10.0.0.{i}", "ab"[i % 2], hint="ab"[i % 2]) for i in range(1, 7)]}
    stale["endpoints"][0]["hints"]["forNodes"] = [{"name": "n1"}]
    moved, _ = topologycache.add_hints([], [], [stale], {"a": 0.5, "b": 0.5}, "IPv4", had_hints=True)
    assert len(moved) == 1 and all("forNodes" not in e["hints"] for e in moved[0]["endpoints"])


def test_removing_the_annotation_announces_it_once_hints_were_populated():
    nodes, pods = _zones_world()
    service = new_service()
    plan = reconcile(service, pods, [], nodes, max_endpoints_per_slice=100, topology=Topology(None, True, hints_populated=True))
    assert [(e.reason, e.message) for e in plan.events] == [("TopologyAwareHintsDisabled", "Topology Aware Hints has been disabled, addressType: IPv4")]
    assert not plan.hints_populated
    assert reconcile(service, pods, [], nodes, max_endpoints_per_slice=100, topology=Topology()).events == []


def test_controller_manager_feature_gates_flag():
    from click.testing import CliRunner

    from kubesvc.cmd.controller_manager import controller_manager_command

    result = CliRunner().invoke(controller_manager_command, ["--kubeconfig", "x", "--feature-gates", "PreferSameRack=true"])
    assert result.exit_code == 2 and "unrecognized feature gate: PreferSameRack" in result.output, result.output
