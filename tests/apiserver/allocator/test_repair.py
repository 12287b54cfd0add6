"""The ClusterIP and NodePort repair loops, in-process on the memory backend.

Each case breaks the store behind the allocator's back (writing keys on the backend, as a
crash, an old version or an operator with etcdctl would), runs a repair pass and checks what a
user sees: the Events (reason and exact message), the IPAddress objects and NodePort records
left, the pass's report and metrics, and whether a new Service can take the value afterwards.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable

import pytest

from kubesvc.api.errors import StatusError
from kubesvc.apiserver.allocator import records, repair as repair_module
from kubesvc.apiserver.allocator.repair import (
    NodePortRecord,
    Repair,
    Snapshot,
    collect_service_node_ports,
    plan_ip_repair,
    plan_port_repair,
    service_cidr_ranges,
    take_snapshot,
)
from kubesvc.apiserver.allocator.ranges import PortRange, prefix_contains_ip
from kubesvc.apiserver.registry.store import ListOptions
from kubesvc.apiserver.server import build_control_plane
from kubesvc.storage.memory import MemoryBackend
from kubesvc.util.clock import FakeClock
from kubesvc.util.golang import rfc3339

CIDR = "10.96.0.0/24"
PORTS = "30000-30100"


@dataclass
class Cluster:
    backend: MemoryBackend
    clock: FakeClock
    registry: object
    allocators: object
    repair: Repair

    # ---- writing, the normal way and behind the allocator's back ------------------------------
    async def create(self, name: str, spec: dict, namespace: str = "default") -> dict:
        return await self.registry.store("", "services").create(namespace, {"metadata": {"name": name}, "spec": spec}, field_manager="test")

    async def put_raw_service(self, name: str, spec: dict, namespace: str = "default") -> None:
        obj = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "creationTimestamp": rfc3339(self.clock.now())},
               "spec": spec}
        await self.backend.create(f"/registry/services/specs/{namespace}/{name}", json.dumps(obj).encode())

    async def put_raw_ip_address(self, ip: str, parent_ref: dict, *, labels: dict | None = None, age: float = 3600.0) -> None:
        obj = records.ip_address_object(ip, "x", "x")
        obj["spec"]["parentRef"] = parent_ref
        if labels is not None:
            obj["metadata"]["labels"] = labels
        obj["metadata"]["creationTimestamp"] = rfc3339(self.clock.now() - timedelta(seconds=age))
        await self.backend.create(records.ip_address_key(ip), json.dumps(obj).encode())

    async def edit_raw(self, key: str, change: Callable[[dict], None]) -> None:
        kv = await self.backend.get(key)
        obj = json.loads(kv.value)
        change(obj)
        await self.backend.update(key, json.dumps(obj).encode(), kv.mod_revision)

    # ---- what a user sees ---------------------------------------------------------------------
    async def events(self) -> list[tuple[str, str, str, str]]:
        items, _ = await self.registry.store("", "events").list(None, ListOptions())
        return sorted((e["involvedObject"]["kind"], e["involvedObject"]["name"], e["reason"], e["message"]) for e in items)

    async def ip_owner(self, ip: str) -> tuple[str, str] | None:
        kv = await self.backend.get(records.ip_address_key(ip))
        return records.ip_address_owner(json.loads(kv.value)) if kv else None

    async def ip_labels(self, ip: str) -> dict:
        return (await self.registry.store("networking.k8s.io", "ipaddresses").get(None, ip))["metadata"]["labels"]

    async def port_owner(self, port: int) -> tuple[str, str] | None:
        kv = await self.backend.get(records.node_port_key(port))
        return records.node_port_owner(kv.value) if kv else None

    def metric(self, name: str, type_: str | None = None) -> float:
        labels = {"type": type_} if type_ else {}
        return self.allocators.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
async def cluster() -> Cluster:
    backend, clock = MemoryBackend(), FakeClock()
    registry, allocators = await build_control_plane(backend, clock, [CIDR], PORTS)
    return Cluster(backend, clock, registry, allocators, Repair(registry, allocators, clock))


def cluster_ip(ip: str) -> dict:
    return {"clusterIP": ip, "ports": [{"port": 80}]}


def node_port(port: int, **extra) -> dict:
    return {"type": "NodePort", "ports": [{"port": 80, "nodePort": port}], **extra}


def raw_spec(ips: list[str], ports: list[dict] | None = None, type_: str = "ClusterIP", **extra) -> dict:
    """A Service spec as the store holds it (what a direct backend write must look like)."""
    return {"type": type_, "clusterIP": ips[0], "clusterIPs": ips, "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": ports or [{"port": 80, "protocol": "TCP", "targetPort": 80}], **extra}


GATEWAY_REF = {"group": "gateway.networking.k8s.io", "resource": "gateways", "namespace": "default", "name": "gw"}


# ---- a healthy cluster ----------------------------------------------------------------------


async def test_healthy_cluster_is_clean(cluster):
    await cluster.create("plain", {"ports": [{"port": 80}]})
    await cluster.create("chosen", cluster_ip("10.96.0.10"))
    await cluster.create("np", {"type": "NodePort", "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                                                        {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]})
    await cluster.create("lb", {"type": "LoadBalancer", "externalTrafficPolicy": "Local", "ports": [{"port": 443}]})
    await cluster.create("headless", {"clusterIP": "None", "ports": [{"port": 80}]})
    await cluster.create("ext", {"type": "ExternalName", "externalName": "example.com"})
    await cluster.registry.store("", "services").delete("default", "plain", {})
    for _ in range(3):
        report = await cluster.repair.run_once()
        assert report.clean, report
    assert await cluster.events() == []
    assert await cluster.repair.reload_index() is False  # the index already equals the store
    assert cluster.metric("kube_apiserver_clusterip_repair_reconcile_errors_total") == 0
    lb = (await cluster.registry.store("", "services").get("default", "lb"))["spec"]
    assert await cluster.port_owner(lb["healthCheckNodePort"]) == ("default", "lb")


# ---- ClusterIPs -----------------------------------------------------------------------------


async def _missing_ip_address(c: Cluster) -> None:
    await c.create("a", cluster_ip("10.96.0.10"))
    await c.backend.delete(records.ip_address_key("10.96.0.10"))


async def _duplicate(c: Cluster) -> None:
    await c.create("a", cluster_ip("10.96.0.10"))
    await c.put_raw_service("b", raw_spec(["10.96.0.10"]))


async def _duplicate_missing_ip_address(c: Cluster) -> None:
    await c.put_raw_service("a", raw_spec(["10.96.0.10"]))
    await c.put_raw_service("b", raw_spec(["10.96.0.10"]))


async def _duplicate_owned_by_second(c: Cluster) -> None:
    await c.put_raw_service("a", raw_spec(["10.96.0.10"]))
    await c.create("b", cluster_ip("10.96.0.11"))
    await c.backend.delete(records.ip_address_key("10.96.0.11"))
    await c.edit_raw("/registry/services/specs/default/b", lambda o: o["spec"].update(clusterIP="10.96.0.10", clusterIPs=["10.96.0.10"]))
    await c.put_raw_ip_address("10.96.0.10", records.service_ref("default", "b"))


async def _out_of_range(c: Cluster) -> None:
    await c.put_raw_service("b", raw_spec(["10.97.0.5"]))


async def _network_address(c: Cluster) -> None:
    await c.put_raw_service("b", raw_spec(["10.96.0.0"]))


async def _invalid(c: Cluster) -> None:
    await c.put_raw_service("b", raw_spec(["10.96.0.300"]))


async def _ref_to_missing_service(c: Cluster) -> None:
    await c.create("a", cluster_ip("10.96.0.10"))
    await c.edit_raw(records.ip_address_key("10.96.0.10"), lambda o: o["spec"].update(parentRef=records.service_ref("default", "ghost")))


async def _ref_to_service_not_claiming(c: Cluster) -> None:
    await c.create("a", cluster_ip("10.96.0.10"))
    await c.create("c", cluster_ip("10.96.0.11"))
    await c.edit_raw(records.ip_address_key("10.96.0.10"), lambda o: o["spec"].update(parentRef=records.service_ref("default", "c")))


async def _ref_not_a_service(c: Cluster) -> None:
    await c.create("a", cluster_ip("10.96.0.10"))
    await c.edit_raw(records.ip_address_key("10.96.0.10"), lambda o: o["spec"].update(parentRef=GATEWAY_REF))


async def _labels_missing(c: Cluster) -> None:
    await c.create("a", cluster_ip("10.96.0.10"))
    await c.edit_raw(records.ip_address_key("10.96.0.10"), lambda o: o["metadata"].pop("labels"))


async def _wrong_family_label(c: Cluster) -> None:
    await c.create("a", cluster_ip("10.96.0.10"))
    await c.edit_raw(records.ip_address_key("10.96.0.10"), lambda o: o["metadata"]["labels"].update({records.LABEL_IP_FAMILY: "IPv6"}))


async def _orphan(c: Cluster) -> None:
    await c.put_raw_ip_address("10.96.0.50", records.service_ref("default", "ghost"), age=120)


async def _modified(c: Cluster) -> None:
    await c.put_raw_ip_address("10.96.0.51", GATEWAY_REF)


async def _parent_not_listing(c: Cluster) -> None:
    await c.create("a", cluster_ip("10.96.0.10"))
    await c.put_raw_ip_address("10.96.0.52", records.service_ref("default", "a"))


async def _unmanaged(c: Cluster) -> None:
    await c.put_raw_ip_address("10.96.0.53", records.service_ref("default", "ghost"), labels={records.LABEL_IP_FAMILY: "IPv4"})
    await c.put_raw_ip_address("10.96.0.54", GATEWAY_REF, labels={})


SVC, IPA = "Service", "IPAddress"
KEPT = "kept"  # the IPAddress is still there, whatever it references
WRONG_REF_A = (SVC, "a", "ClusterIPNotAllocated", "the ClusterIP [IPv4]: 10.96.0.10 for Service default/a has a wrong reference; repairing")
DUP = "Cluster IP [IPv4]:10.96.0.10 was assigned to multiple services; please recreate service"

IP_CASES = [
    # id, break, events, report counts, IPAddresses afterwards (ip -> owner, None: absent)
    ("missing-ipaddress", _missing_ip_address,
     [(SVC, "a", "ClusterIPNotAllocated", "Cluster IP [IPv4]: 10.96.0.10 is not allocated; repairing")],
     {"repair": 1}, {"10.96.0.10": ("default", "a")}),
    ("duplicate", _duplicate,
     [(SVC, "b", "ClusterIPAlreadyAllocated", DUP)],
     {"duplicate": 1}, {"10.96.0.10": ("default", "a")}),
    ("duplicate-and-missing", _duplicate_missing_ip_address,
     [(SVC, "a", "ClusterIPNotAllocated", "Cluster IP [IPv4]: 10.96.0.10 is not allocated; repairing"),
      (SVC, "b", "ClusterIPAlreadyAllocated", DUP)],
     {"repair": 1, "duplicate": 1}, {"10.96.0.10": ("default", "a")}),
    ("duplicate-owned-by-second", _duplicate_owned_by_second,
     [(SVC, "a", "ClusterIPAlreadyAllocated", DUP)],
     {"duplicate": 1}, {"10.96.0.10": ("default", "b")}),
    ("out-of-range", _out_of_range,
     [(SVC, "b", "ClusterIPOutOfRange", "Cluster IP [IPv4]: 10.97.0.5 is not within any configured Service CIDR; please recreate service")],
     {"outOfRange": 1}, {"10.97.0.5": None}),
    ("network-address", _network_address,
     [(SVC, "b", "ClusterIPOutOfRange", "Cluster IP [IPv4]: 10.96.0.0 is not within any configured Service CIDR; please recreate service")],
     {"outOfRange": 1}, {"10.96.0.0": None}),
    ("invalid", _invalid,
     [(SVC, "b", "ClusterIPNotValid", "Cluster IP 10.96.0.300 is not a valid IP; please recreate Service")],
     {"invalid": 1}, {}),
    ("ref-to-missing-service", _ref_to_missing_service, [WRONG_REF_A], {"repair": 1}, {"10.96.0.10": ("default", "a")}),
    ("ref-to-service-not-claiming", _ref_to_service_not_claiming, [WRONG_REF_A], {"repair": 1},
     {"10.96.0.10": ("default", "a"), "10.96.0.11": ("default", "c")}),
    ("ref-not-a-service", _ref_not_a_service, [WRONG_REF_A], {"repair": 1}, {"10.96.0.10": ("default", "a")}),
    ("labels-missing", _labels_missing, [], {"repair": 1}, {"10.96.0.10": ("default", "a")}),
    ("wrong-family-label", _wrong_family_label, [], {"repair": 1}, {"10.96.0.10": ("default", "a")}),
    ("orphan-ipaddress", _orphan,
     [(IPA, "10.96.0.50", "IPAddressNotAllocated", "IPAddress: 10.96.0.50 for Service default/ghost appears to have leaked: cleaning up")],
     {"leak": 1}, {"10.96.0.50": None}),
    ("ipaddress-not-for-a-service", _modified,
     [(IPA, "10.96.0.51", "IPAddressNotAllocated",
       "IPAddress 10.96.0.51 appears to have been modified, not referencing a Service "
       "&{gateway.networking.k8s.io gateways default gw}: cleaning up")],
     {"leak": 1}, {"10.96.0.51": None}),
    ("ipaddress-parent-not-listing-it", _parent_not_listing,
     [(IPA, "10.96.0.52", "IPAddressWrongReference", "IPAddress: 10.96.0.52 for Service default/a has a wrong reference; cleaning up")],
     {"leak": 1}, {"10.96.0.52": None, "10.96.0.10": ("default", "a")}),
    ("unmanaged-ipaddress-left-alone", _unmanaged, [], {}, {"10.96.0.53": ("default", "ghost"), "10.96.0.54": KEPT}),
]


@pytest.mark.parametrize("breaks, events, counts, after", [c[1:] for c in IP_CASES], ids=[c[0] for c in IP_CASES])
async def test_cluster_ip_repair(cluster, breaks, events, counts, after):
    await breaks(cluster)
    report = await cluster.repair.run_once()
    assert await cluster.events() == sorted(events)
    assert report.ip_errors == counts and report.port_errors == {} and report.skipped == 0
    assert sorted(report.events) == sorted((e[2], e[3]) for e in events)
    for type_, count in counts.items():
        assert cluster.metric("kube_apiserver_clusterip_repair_ip_errors_total", type_) == count
    for ip, owner in after.items():
        if owner == KEPT:
            assert await cluster.backend.get(records.ip_address_key(ip)) is not None, ip
            continue
        assert await cluster.ip_owner(ip) == owner, ip
        if owner is not None and owner[1] != "ghost":
            assert await cluster.ip_labels(ip) == {records.LABEL_IP_FAMILY: "IPv4", records.LABEL_MANAGED_BY: records.IPALLOCATOR_MANAGER}
    # the pass left the store consistent: a second pass only repeats the unfixable reports
    second = await cluster.repair.run_once()
    assert second.ip_errors == {t: n for t, n in counts.items() if t in ("duplicate", "outOfRange", "invalid")}


async def test_cluster_ip_events_carry_component_and_action(cluster):
    await _duplicate(cluster)
    await _orphan(cluster)
    await cluster.put_raw_service("bad", raw_spec(["nope"]))
    await cluster.repair.run_once()
    items, _ = await cluster.registry.store("", "events").list(None, ListOptions())
    by_reason = {e["reason"]: e for e in items}
    assert by_reason["ClusterIPNotValid"]["action"] == "ClusterIPValidation"  # as upstream
    dup = by_reason["ClusterIPAlreadyAllocated"]
    assert (dup["type"], dup["source"]["component"], dup["action"]) == ("Warning", "ipallocator-repair-controller", "ClusterIPAllocation")
    assert dup["metadata"]["namespace"] == "default" and dup["involvedObject"]["uid"] == "uid-b"
    leak = by_reason["IPAddressNotAllocated"]
    assert leak["action"] == "IPAddressAllocation" and leak["metadata"]["namespace"] == "default"
    assert leak["involvedObject"]["kind"] == "IPAddress" and "namespace" not in leak["involvedObject"]


async def test_repeated_duplicate_bumps_one_event(cluster):
    await _duplicate(cluster)
    for _ in range(3):
        await cluster.repair.run_once()
    items, _ = await cluster.registry.store("", "events").list(None, ListOptions())
    assert [(e["reason"], e["count"]) for e in items] == [("ClusterIPAlreadyAllocated", 3)]
    assert cluster.metric("kube_apiserver_clusterip_repair_ip_errors_total", "duplicate") == 3


async def test_missing_ipaddress_is_held_again_after_repair(cluster):
    """An IPAddress lost behind the allocator's back (and the index reloaded) could be handed
    out twice; the repair recreates it, and then a new Service cannot take it."""
    await _missing_ip_address(cluster)
    await cluster.allocators.load()
    await cluster.repair.run_once()
    assert "10.96.0.10" in cluster.allocators.families["IPv4"].taken
    with pytest.raises(StatusError) as err:
        await cluster.create("thief", cluster_ip("10.96.0.10"))
    assert err.value.code == 422 and "provided IP is already allocated" in err.value.message


async def test_out_of_range_ip_is_not_allocated(cluster):
    await _out_of_range(cluster)
    await cluster.repair.run_once()
    assert (await cluster.backend.list(records.IP_ADDRESS_PREFIX)).kvs == []


async def test_ip_in_a_second_service_cidr_is_in_range(cluster):
    await cluster.registry.store("networking.k8s.io", "servicecidrs").create(
        None, {"metadata": {"name": "extra"}, "spec": {"cidrs": ["10.97.0.0/24"]}}, field_manager="test")
    await cluster.put_raw_service("b", raw_spec(["10.97.0.5"]))
    report = await cluster.repair.run_once()
    assert report.ip_errors == {"repair": 1}
    assert await cluster.ip_owner("10.97.0.5") == ("default", "b")


async def test_ip_past_the_bitmap_of_a_wide_service_cidr_is_in_range(cluster):
    """A ServiceCIDR contains its whole prefix (upstream's servicecidr.ContainsIP), not only
    the first 65535 addresses of an IPv6 /64 the allocator's bitmap covers."""
    await cluster.registry.store("networking.k8s.io", "servicecidrs").create(
        None, {"metadata": {"name": "v6"}, "spec": {"cidrs": ["fd00::/64"]}}, field_manager="test")
    await cluster.put_raw_service("b", {**raw_spec(["fd00::1:0"]), "ipFamilies": ["IPv6"]})
    report = await cluster.repair.run_once()
    assert [reason for reason, _ in report.events] == ["ClusterIPNotAllocated"]
    assert await cluster.ip_owner("fd00::1:0") == ("default", "b")


@pytest.mark.parametrize("cidr", ["10.96.0.0/24", "10.96.0.0/31", "10.96.0.1/32", "fd00::/64", "fd00::/127", "fd00::1/128"])
def test_service_cidr_bounds_are_prefix_contains_ip(cidr):
    network = ipaddress.ip_network(cidr)
    bounds = service_cidr_ranges([cidr])
    for delta in (-1, 0, 1, 2, 255, 256, 65535, 65536, 2**64 - 1, 2**64):
        try:
            address = network.network_address + delta
        except ipaddress.AddressValueError:
            continue
        in_bounds = any(v == address.version and first <= int(address) <= last for v, first, last in bounds)
        assert in_bounds == prefix_contains_ip(network, address), address


@pytest.mark.parametrize("grace", [60.0, 10.0])
async def test_orphan_ipaddress_waits_for_the_grace_period(cluster, grace):
    repair = Repair(cluster.registry, cluster.allocators, cluster.clock, leak_grace_seconds=grace)
    # an IPAddress written through the API, as an in-flight Service create would have it
    await cluster.registry.store("networking.k8s.io", "ipaddresses").create(
        None, records.ip_address_object("10.96.0.60", "default", "ghost"), field_manager="test")
    report = await repair.run_once()
    assert report.ip_leaks_pending == 1 and report.ip_errors == {} and await cluster.events() == []
    with pytest.raises(StatusError) as err:
        await cluster.create("new", cluster_ip("10.96.0.60"))
    assert err.value.code == 422 and "provided IP is already allocated" in err.value.message
    cluster.clock.advance(grace)
    assert (await repair.run_once()).ip_leaks_pending == 1  # not older than the grace period yet
    assert await cluster.ip_owner("10.96.0.60") == ("default", "ghost")
    cluster.clock.advance(1)
    report = await repair.run_once()
    assert report.ip_errors == {"leak": 1} and report.ip_leaks_pending == 0
    assert await cluster.events() == [(IPA, "10.96.0.60", "IPAddressNotAllocated",
                                 "IPAddress: 10.96.0.60 for Service default/ghost appears to have leaked: cleaning up")]
    assert (await cluster.create("new", cluster_ip("10.96.0.60")))["spec"]["clusterIPs"] == ["10.96.0.60"]


# ---- NodePorts ------------------------------------------------------------------------------


async def _missing_record(c: Cluster) -> None:
    await c.create("a", node_port(30010))
    await c.backend.delete(records.node_port_key(30010))


async def _missing_health_check_record(c: Cluster) -> None:
    await c.create("a", {"type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": 30020,
                   "ports": [{"port": 80, "nodePort": 30021}]})
    await c.backend.delete(records.node_port_key(30020))


async def _shared(c: Cluster) -> None:
    await c.create("a", node_port(30010))
    await c.put_raw_service("b", raw_spec(["10.96.0.20"], [{"port": 80, "protocol": "TCP", "nodePort": 30010}], "NodePort"))
    await c.put_raw_ip_address("10.96.0.20", records.service_ref("default", "b"))


async def _same_protocol_twice(c: Cluster) -> None:
    await c.put_raw_service("b", raw_spec(["10.96.0.20"], [{"port": 80, "protocol": "TCP", "nodePort": 30011},
                                                   {"port": 81, "protocol": "TCP", "nodePort": 30011}], "NodePort"))
    await c.put_raw_ip_address("10.96.0.20", records.service_ref("default", "b"))


async def _port_out_of_range(c: Cluster) -> None:
    await c.put_raw_service("b", raw_spec(["10.96.0.20"], [{"port": 80, "protocol": "TCP", "nodePort": 31000}], "NodePort"))
    await c.put_raw_ip_address("10.96.0.20", records.service_ref("default", "b"))


async def _record_owned_by_other(c: Cluster) -> None:
    await c.create("a", node_port(30010))
    await c.backend.update(records.node_port_key(30010), records.node_port_record("default", "ghost"))


async def _record_unreadable(c: Cluster) -> None:
    await c.create("a", node_port(30010))
    await c.backend.update(records.node_port_key(30010), b"garbage")


ALLOCATED = "Port 30010 was assigned to multiple services; please recreate service"
PORT_CASES = [
    # id, break, events, report counts, records afterwards (port -> owner, None: absent)
    ("missing-record", _missing_record, [(SVC, "a", "PortNotAllocated", "Port 30010 is not allocated; repairing")],
     {"repair": 1}, {30010: ("default", "a")}),
    ("missing-health-check-record", _missing_health_check_record,
     [(SVC, "a", "PortNotAllocated", "Port 30020 is not allocated; repairing")],
     {"repair": 1}, {30020: ("default", "a"), 30021: ("default", "a")}),
    ("shared", _shared, [(SVC, "b", "PortAlreadyAllocated", ALLOCATED)], {"duplicate": 1}, {30010: ("default", "a")}),
    ("same-protocol-twice", _same_protocol_twice,
     [(SVC, "b", "PortNotAllocated", "Port 30011 is not allocated; repairing"),
      (SVC, "b", "PortAlreadyAllocated", "Port 30011 was assigned to multiple services; please recreate service")],
     {"repair": 1, "duplicate": 1}, {30011: ("default", "b")}),
    ("out-of-range", _port_out_of_range,
     [(SVC, "b", "PortOutOfRange", "Port 31000 is not within the port range 30000-30100; please recreate service")],
     {"outOfRange": 1}, {31000: None}),
    ("record-owned-by-another", _record_owned_by_other, [], {"repair": 1}, {30010: ("default", "a")}),
    ("record-unreadable", _record_unreadable, [], {"repair": 1}, {30010: ("default", "a")}),
]


@pytest.mark.parametrize("breaks, events, counts, after", [c[1:] for c in PORT_CASES], ids=[c[0] for c in PORT_CASES])
async def test_node_port_repair(cluster, breaks, events, counts, after):
    await breaks(cluster)
    report = await cluster.repair.run_once()
    assert await cluster.events() == sorted(events)
    assert report.port_errors == counts and report.ip_errors == {} and report.skipped == 0
    for type_, count in counts.items():
        assert cluster.metric("kube_apiserver_nodeport_repair_port_errors_total", type_) == count
    for port, owner in after.items():
        assert await cluster.port_owner(port) == owner, port
    second = await cluster.repair.run_once()
    assert second.port_errors == {t: n for t, n in counts.items() if t in ("duplicate", "outOfRange")}
    assert second.port_leaks_pending == 0


async def test_node_port_events_carry_component_and_action(cluster):
    await _shared(cluster)
    await cluster.repair.run_once()
    items, _ = await cluster.registry.store("", "events").list(None, ListOptions())
    assert [(e["type"], e["source"]["component"], e["action"], e["involvedObject"]["name"]) for e in items] == [
        ("Warning", "portallocator-repair-controller", "PortAllocation", "b")]


async def test_ip_and_port_events_on_one_service_both_recorded(cluster):
    await cluster.create("a", node_port(30010, clusterIP="10.96.0.10"))
    await cluster.backend.delete(records.node_port_key(30010))
    await cluster.backend.delete(records.ip_address_key("10.96.0.10"))
    await cluster.repair.run_once()
    assert [e[2] for e in await cluster.events()] == ["ClusterIPNotAllocated", "PortNotAllocated"]


async def test_missing_record_is_held_again_after_repair(cluster):
    await _missing_record(cluster)
    await cluster.allocators.load()
    await cluster.repair.run_once()
    assert cluster.allocators.ports.has(30010)
    with pytest.raises(StatusError) as err:
        await cluster.create("thief", node_port(30010))
    assert err.value.code == 422 and "provided port is already allocated" in err.value.message


async def test_leaked_port_is_freed_on_the_third_pass(cluster):
    await cluster.backend.create(records.node_port_key(30050), records.node_port_record("default", "ghost"))
    await cluster.allocators.load()
    for expected_pending in (1, 1):
        report = await cluster.repair.run_once()
        assert report.port_leaks_pending == expected_pending and report.port_errors == {}
        assert await cluster.port_owner(30050) == ("default", "ghost")
        with pytest.raises(StatusError) as err:
            await cluster.create("new", node_port(30050))
        assert "provided port is already allocated" in err.value.message
    report = await cluster.repair.run_once()
    assert report.port_errors == {"leak": 1} and report.port_leaks_pending == 0
    assert await cluster.port_owner(30050) is None
    assert cluster.metric("kube_apiserver_nodeport_repair_port_errors_total", "leak") == 1
    assert await cluster.events() == []  # leaks are only logged
    assert (await cluster.create("new", node_port(30050)))["spec"]["ports"][0]["nodePort"] == 30050
    assert (await cluster.repair.run_once()).clean


async def test_leak_counter_resets_when_the_port_is_used_again(cluster):
    await cluster.backend.create(records.node_port_key(30050), records.node_port_record("default", "ghost"))
    await cluster.repair.run_once()
    await cluster.repair.run_once()
    # the Service shows up (it was being created): the port is in use, the count starts over
    await cluster.put_raw_service("ghost", raw_spec(["10.96.0.20"], [{"port": 80, "protocol": "TCP", "nodePort": 30050}], "NodePort"))
    await cluster.put_raw_ip_address("10.96.0.20", records.service_ref("default", "ghost"))
    assert (await cluster.repair.run_once()).clean
    await cluster.backend.delete("/registry/services/specs/default/ghost")
    assert [(await cluster.repair.run_once()).port_leaks_pending for _ in range(2)] == [1, 1]
    assert await cluster.port_owner(30050) == ("default", "ghost")
    assert (await cluster.repair.run_once()).port_errors == {"leak": 1}
    assert await cluster.port_owner(30050) is None


def test_plan_port_repair_counts_down_without_mutating_its_input():
    snapshot = Snapshot(1, {}, {}, [CIDR], {30050: NodePortRecord(("default", "ghost"), 1)})
    counters: dict[int, int] = {}
    seen = []
    for _ in range(3):
        plan = plan_port_repair(snapshot, PortRange.parse(PORTS), counters)
        seen.append((dict(plan.leak_counters), [f.op.verb for f in plan.findings]))
        counters = plan.leak_counters
    assert seen == [({30050: 1}, []), ({30050: 0}, []), ({}, ["delete"])]
    first = {30050: 1}
    plan_port_repair(snapshot, PortRange.parse(PORTS), first)
    assert first == {30050: 1}


@pytest.mark.parametrize("spec, expected", [
    ({"ports": [{"port": 80, "protocol": "TCP", "nodePort": 30001}]}, [30001]),
    ({"ports": [{"port": 80, "protocol": "TCP"}]}, []),
    ({"ports": [{"port": 53, "protocol": "TCP", "nodePort": 30053}, {"port": 53, "protocol": "UDP", "nodePort": 30053}]}, [30053]),
    ({"ports": [{"port": 53, "protocol": "TCP", "nodePort": 30053}, {"port": 54, "protocol": "TCP", "nodePort": 30053}]}, [30053, 30053]),
    ({"ports": [{"port": 53, "protocol": "TCP", "nodePort": 30053}, {"port": 53, "protocol": "UDP", "nodePort": 30053},
                {"port": 54, "protocol": "UDP", "nodePort": 30053}]}, [30053, 30053]),
    ({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": 30100,
      "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30001}]}, [30001, 30100]),
    ({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": 30001,
      "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30001}]}, [30001, 30001]),
    ({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": 30001,
      "ports": [{"port": 80, "protocol": "UDP", "nodePort": 30001}]}, [30001]),
    ({"type": "LoadBalancer", "externalTrafficPolicy": "Cluster", "healthCheckNodePort": 30100,
      "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30001}]}, [30001]),
], ids=["one", "none", "same-port-tcp-udp", "same-port-same-protocol", "tcp-udp-then-udp-again",
        "health-check", "health-check-equals-tcp-port", "health-check-equals-udp-port", "health-check-not-needed"])
def test_collect_service_node_ports(spec, expected):
    assert collect_service_node_ports({"spec": spec}) == expected


# ---- acting on a moving store ---------------------------------------------------------------


async def test_stale_finding_is_dropped_when_the_service_went_away(cluster):
    await _missing_ip_address(cluster)
    plans = cluster.repair.plan(await cluster.repair.snapshot())
    await cluster.registry.store("", "services").delete("default", "a", {})
    report = await cluster.repair.apply(*plans)
    assert report.skipped == 1 and report.ip_errors == {} and await cluster.events() == []
    assert await cluster.ip_owner("10.96.0.10") is None


async def test_stale_finding_is_dropped_when_the_service_changed(cluster):
    await cluster.create("a", node_port(30010))
    await cluster.put_raw_service("b", raw_spec(["10.97.0.5"], [{"port": 80, "protocol": "TCP", "nodePort": 30010}], "NodePort"))
    plans = cluster.repair.plan(await cluster.repair.snapshot())
    assert [f.reason for f in plans[0].findings + plans[1].findings] == ["ClusterIPOutOfRange", "PortAlreadyAllocated"]
    await cluster.edit_raw("/registry/services/specs/default/b", lambda o: o["spec"].update(clusterIP="10.96.0.30", clusterIPs=["10.96.0.30"]))
    await cluster.edit_raw("/registry/services/specs/default/b", lambda o: o["spec"]["ports"][0].update(nodePort=30011))
    report = await cluster.repair.apply(*plans)
    assert report.skipped == 2 and report.ip_errors == report.port_errors == {} and await cluster.events() == []


async def test_concurrent_fix_is_not_an_error(cluster):
    await _missing_ip_address(cluster)
    plans = cluster.repair.plan(await cluster.repair.snapshot())
    await cluster.registry.store("networking.k8s.io", "ipaddresses").create(
        None, records.ip_address_object("10.96.0.10", "default", "a"), field_manager="someone")
    report = await cluster.repair.apply(*plans)
    assert report.skipped == 1 and report.ip_errors == {} and await cluster.events() == []
    assert cluster.metric("kube_apiserver_clusterip_repair_reconcile_errors_total") == 0


async def test_leaked_port_rewritten_since_the_snapshot_is_kept(cluster):
    await cluster.backend.create(records.node_port_key(30050), records.node_port_record("default", "ghost"))
    await cluster.repair.run_once()
    await cluster.repair.run_once()
    plans = cluster.repair.plan(await cluster.repair.snapshot())
    await cluster.backend.update(records.node_port_key(30050), records.node_port_record("default", "ghost2"))
    report = await cluster.repair.apply(*plans)
    assert report.skipped == 1 and await cluster.port_owner(30050) == ("default", "ghost2")


async def test_orphan_ipaddress_claimed_since_the_snapshot_is_kept(cluster):
    await _orphan(cluster)
    plans = cluster.repair.plan(await cluster.repair.snapshot())
    await cluster.put_raw_service("ghost", raw_spec(["10.96.0.50"]))
    report = await cluster.repair.apply(*plans)
    assert report.skipped == 1 and await cluster.ip_owner("10.96.0.50") == ("default", "ghost")


async def test_leaked_port_claimed_since_the_snapshot_is_kept(cluster):
    await cluster.backend.create(records.node_port_key(30050), records.node_port_record("default", "ghost"))
    await cluster.repair.run_once()
    await cluster.repair.run_once()
    plans = cluster.repair.plan(await cluster.repair.snapshot())
    assert [f.op.verb for f in plans[1].findings] == ["delete"]
    await cluster.put_raw_service("ghost", raw_spec(["10.96.0.20"], [{"port": 80, "protocol": "TCP", "nodePort": 30050}], "NodePort"))
    report = await cluster.repair.apply(*plans)
    assert report.skipped == 1 and report.port_errors == {} and await cluster.port_owner(30050) == ("default", "ghost")
    assert cluster.allocators.ports.has(30050)


async def test_snapshot_reads_one_revision(cluster):
    await cluster.create("a", cluster_ip("10.96.0.10"))
    revision = await cluster.backend.current_revision()
    await cluster.create("b", cluster_ip("10.96.0.11"))
    old = await take_snapshot(cluster.backend, revision)
    assert old.revision == revision
    assert list(old.services) == [("default", "a")] and list(old.ip_addresses) == ["10.96.0.10"]
    assert plan_ip_repair(old, cluster.clock.now()).findings == []


async def test_snapshot_reads_in_pages(cluster, monkeypatch):
    for i in range(5):
        await cluster.create(f"s{i}", node_port(30010 + i, clusterIP=f"10.96.0.{10 + i}"))
    revision = await cluster.backend.current_revision()
    monkeypatch.setattr(repair_module, "_PAGE", 2)
    await cluster.create("late", cluster_ip("10.96.0.20"))  # after the revision read: not seen
    snapshot = await take_snapshot(cluster.backend, revision)
    assert list(snapshot.services) == [("default", f"s{i}") for i in range(5)]
    assert sorted(snapshot.ip_addresses) == [f"10.96.0.{10 + i}" for i in range(5)]
    assert sorted(snapshot.node_ports) == [30010 + i for i in range(5)]
    assert (await cluster.repair.run_once()).clean


async def test_index_equals_store_after_a_pass(cluster, monkeypatch):
    """Keys written behind the allocator's back are in its index after the pass; the
    repair's own writes keep the index exact without a full reload."""
    await cluster.put_raw_ip_address("10.96.0.53", records.service_ref("default", "ghost"), labels={})
    await cluster.backend.create(records.node_port_key(30050), records.node_port_record("default", "ghost"))
    await cluster.repair.run_once()
    assert "10.96.0.53" in cluster.allocators.families["IPv4"].taken
    assert cluster.allocators.ports.has(30050)
    await cluster.create("a", node_port(30010, clusterIP="10.96.0.10"))
    await cluster.backend.delete(records.ip_address_key("10.96.0.10"))
    await cluster.backend.delete(records.node_port_key(30010))
    await cluster.allocators.load()  # the index forgets them: the repair's writes must tell it
    loads = []
    real_load = cluster.allocators.load
    async def counting_load() -> None:
        loads.append(1)
        await real_load()

    monkeypatch.setattr(cluster.allocators, "load", counting_load)
    await cluster.repair.run_once()
    await cluster.repair.run_once()
    await cluster.repair.run_once()  # the leaked port 30050 goes now
    assert loads == [] and not cluster.allocators.ports.has(30050)
    assert cluster.allocators.ports.has(30010) and "10.96.0.10" in cluster.allocators.families["IPv4"].taken


# ---- the loop -------------------------------------------------------------------------------


async def test_run_survives_a_failing_pass(cluster):
    await _missing_ip_address(cluster)
    real_snapshot = cluster.repair.snapshot
    calls = []

    async def flaky(*, offload: bool = False):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("storage hiccup")
        return await real_snapshot(offload=offload)

    cluster.repair.snapshot = flaky
    task = asyncio.create_task(cluster.repair.run(0.01))
    try:
        for _ in range(500):
            if await cluster.ip_owner("10.96.0.10") is not None:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert await cluster.ip_owner("10.96.0.10") == ("default", "a")
    assert cluster.metric("kube_apiserver_clusterip_repair_reconcile_errors_total") == 1
    assert cluster.metric("kube_apiserver_nodeport_repair_reconcile_errors_total") == 1
    assert len(calls) >= 2


async def test_run_makes_its_first_pass_at_once(cluster):
    await _missing_record(cluster)
    await cluster.put_raw_ip_address("10.96.0.53", records.service_ref("default", "ghost"), labels={})
    task = asyncio.create_task(cluster.repair.run(3600))
    try:
        # the pass repairs the port on the loop, then settles the index after a check in a
        # worker thread: wait for both, or a loaded machine cancels it in between
        for _ in range(500):
            if await cluster.port_owner(30010) is not None and "10.96.0.53" in cluster.allocators.families["IPv4"].taken:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert await cluster.port_owner(30010) == ("default", "a")
    assert "10.96.0.53" in cluster.allocators.families["IPv4"].taken  # the index was reloaded


async def test_a_pass_reports_its_progress(cluster, caplog, monkeypatch):
    """The pass's phases in the phase gauge while it runs, its lines (the store's counts, the
    findings acted on, complete with elapsed) at INFO once it is slow (here: at once), and its
    duration and completion time in the metrics."""
    await _missing_ip_address(cluster)
    monkeypatch.setattr(cluster.repair, "SLOW_PASS", 0.0)
    phases = []
    real_apply, real_settle = cluster.repair.apply, cluster.repair._settle_index

    def current() -> list[str]:
        registry = cluster.allocators.metrics.registry
        return [p for p in ("snapshot", "apply", "index") if registry.get_sample_value("kubesvc_apiserver_service_repair_phase", {"phase": p}) == 1]

    async def apply(*args, **kwargs):
        phases.append(current())
        return await real_apply(*args, **kwargs)

    async def settle(differences):
        phases.append(current())
        return await real_settle(differences)

    monkeypatch.setattr(cluster.repair, "apply", apply)
    monkeypatch.setattr(cluster.repair, "_settle_index", settle)
    caplog.set_level("INFO", logger="kubesvc.apiserver")
    task = asyncio.create_task(cluster.repair.run(3600))
    try:
        for _ in range(500):
            if cluster.metric("kubesvc_apiserver_service_repair_last_pass_timestamp_seconds") > 0:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert phases == [["apply"], ["index"]]
    assert current() == []
    assert cluster.metric("kubesvc_apiserver_service_repair_pass_duration_seconds_count") == 1
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("repair")]
    assert lines[0].startswith("repair: read the store at revision ") and "1 Services, 0 IPAddresses, 0 NodePort records" in lines[0], lines
    assert lines[1].startswith("repair: acted on 1 findings at revision "), lines
    assert lines[2].startswith("repair pass complete revision=") and "elapsed=" in lines[2], lines
