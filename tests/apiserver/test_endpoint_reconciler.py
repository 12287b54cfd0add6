"""The lease endpoint reconciler (apiserver/endpointreconciler.py): ``default/kubernetes``
Endpoints and EndpointSlice follow the live apiservers' leases, as upstream's lease reconciler
and 1.32 EndpointsAdapter write them; seen through kubectl on a real apiserver too."""

from __future__ import annotations

import json
import time

import pytest

from kubesvc.apiserver.endpointreconciler import (
    NO_LEASES, EndpointReconciler, endpoint_ports, endpoint_slice_for, reconciled_endpoints,
)
from kubesvc.apiserver.registry.store import ListOptions
from kubesvc.apiserver.server import build_control_plane
from kubesvc.storage import MemoryBackend
from kubesvc.util.clock import FakeClock

PORTS = endpoint_ports(6443)
META = {"name": "kubernetes", "namespace": "default", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}}


def endpoints(ips, ports=PORTS, labels=None):
    meta = {**META, "labels": labels if labels is not None else META["labels"]}
    return {"metadata": meta, "subsets": [{"addresses": [{"ip": ip} for ip in ips], "ports": ports}]}


@pytest.mark.parametrize("current, ips, reconcile_ports, expected", [
    (None, ["10.0.0.2", "10.0.0.1"], False, endpoints(["10.0.0.1", "10.0.0.2"])),
    (endpoints(["10.0.0.1"]), ["10.0.0.1"], True, None),
    (endpoints(["10.0.0.1"]), ["10.0.0.1", "10.0.0.3"], False, endpoints(["10.0.0.1", "10.0.0.3"])),
    (endpoints(["10.0.0.1"], ports=[{"name": "https", "port": 1, "protocol": "TCP"}]), ["10.0.0.1"], False, None),
    (endpoints(["10.0.0.1"], ports=[{"name": "https", "port": 1, "protocol": "TCP"}]), ["10.0.0.1"], True, endpoints(["10.0.0.1"])),
    (endpoints(["10.0.0.1"], labels={"team": "x"}), ["10.0.0.1"], False,
     endpoints(["10.0.0.1"], labels={"team": "x", "endpointslice.kubernetes.io/skip-mirror": "true"})),
    ({"metadata": META, "subsets": [{"addresses": [{"ip": "10.0.0.1"}]}, {"addresses": [{"ip": "10.0.0.9"}]}]}, ["10.0.0.1"], False,
     endpoints(["10.0.0.1"])),
    (endpoints(["10.0.0.1"]), [], True, {"metadata": META, "subsets": []}),
], ids=["created-sorted", "correct-untouched", "address-added", "ports-left-after-start", "ports-reconciled-at-start",
        "skip-mirror-label-added", "two-subsets-rebuilt", "last-apiserver-leaves"])
def test_reconciled_endpoints(current, ips, reconcile_ports, expected):
    assert reconciled_endpoints(current, ips, PORTS, reconcile_ports) == expected


@pytest.mark.parametrize("ips, family", [(["10.0.0.1", "10.0.0.2"], "IPv4"), (["fd00::1"], "IPv6")], ids=["ipv4", "ipv6"])
def test_endpoint_slice_from_endpoints(ips, family):
    assert endpoint_slice_for(endpoints(ips)) == {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": family,
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips],
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
    }


@pytest.fixture
async def shared():
    """One store and clock for several apiservers."""
    clock = FakeClock()
    registry, _ = await build_control_plane(MemoryBackend(), clock, ["10.96.0.0/16"])
    return registry, clock


async def addresses(registry) -> tuple[list[str], list[str]]:
    eps = await registry.store("", "endpoints").get("default", "kubernetes")
    eps_ips = [a["ip"] for s in eps.get("subsets") or [] for a in s["addresses"]]
    eslice = await registry.store("discovery.k8s.io", "endpointslices").get("default", "kubernetes")
    return eps_ips, [a for e in eslice["endpoints"] for a in e["addresses"]]


async def test_apiservers_join_expire_and_leave(shared):
    registry, clock = shared
    first = EndpointReconciler(registry, "192.0.2.1", 6443, clock)
    second = EndpointReconciler(registry, "192.0.2.2", 6443, clock)
    await first.reconcile(True)
    await second.reconcile(True)
    await first.reconcile()
    assert await addresses(registry) == (["192.0.2.1", "192.0.2.2"], ["192.0.2.1", "192.0.2.2"])
    version = (await registry.store("", "endpoints").get("default", "kubernetes"))["metadata"]["resourceVersion"]
    await first.reconcile()
    assert (await registry.store("", "endpoints").get("default", "kubernetes"))["metadata"]["resourceVersion"] == version  # nothing to write

    clock.advance(16)  # the second stopped renewing: its 15 s lease is over
    await first.reconcile()
    assert await addresses(registry) == (["192.0.2.1"], ["192.0.2.1"])

    await first.remove()  # the last one leaves: the objects stay, empty
    assert await addresses(registry) == ([], [])
    await first.reconcile()  # stopped: does nothing more
    assert await addresses(registry) == ([], [])


async def test_a_deleted_slice_and_edited_endpoints_come_back(shared):
    registry, clock = shared
    reconciler = EndpointReconciler(registry, "192.0.2.1", 6443, clock)
    await reconciler.reconcile(True)
    await registry.store("discovery.k8s.io", "endpointslices").delete("default", "kubernetes", {})
    eps = await registry.store("", "endpoints").get("default", "kubernetes")
    eps["subsets"][0]["addresses"] = [{"ip": "198.51.100.7"}]
    await registry.store("", "endpoints").update("default", "kubernetes", eps, field_manager="someone")
    await reconciler.reconcile()
    assert await addresses(registry) == (["192.0.2.1"], ["192.0.2.1"])


async def test_loopback_advertise_address_is_not_reconciled(shared):
    registry, clock = shared
    await EndpointReconciler(registry, "127.0.0.1", 6443, clock).reconcile(True)
    assert (await registry.store("", "endpoints").list("default", ListOptions()))[0] == []


async def test_no_live_lease_refuses_to_erase(shared, monkeypatch):
    registry, clock = shared
    reconciler = EndpointReconciler(registry, "192.0.2.1", 6443, clock)
    async def lost(ip: str) -> None:  # a store that lost our write
        return None

    monkeypatch.setattr(reconciler.leases, "update", lost)
    with pytest.raises(RuntimeError, match=NO_LEASES):
        await reconciler.reconcile()


def test_kubectl_sees_the_advertise_address(fresh_apiserver):
    server = fresh_apiserver("--advertise-address", "192.0.2.10")
    port = int(server.url.rsplit(":", 1)[1])
    deadline = time.monotonic() + 20
    while True:
        result = server.kubectl("get", "endpoints", "kubernetes", "-n", "default", "-o", "json", check=False)
        if result.returncode == 0:
            break
        assert time.monotonic() < deadline, result.stderr
        time.sleep(0.2)
    eps = json.loads(result.stdout)
    assert eps["metadata"]["labels"] == {"endpointslice.kubernetes.io/skip-mirror": "true"}
    assert eps["subsets"] == [{"addresses": [{"ip": "192.0.2.10"}], "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]
    eslice = json.loads(server.kubectl("get", "endpointslice", "kubernetes", "-n", "default", "-o", "json").stdout)
    assert eslice["metadata"]["labels"] == {"kubernetes.io/service-name": "kubernetes"}
    assert (eslice["addressType"], eslice["endpoints"], eslice["ports"]) == (
        "IPv4", [{"addresses": ["192.0.2.10"], "conditions": {"ready": True}}], [{"name": "https", "port": port, "protocol": "TCP"}])


def test_endpoint_reconciler_type_none_keeps_no_endpoints(fresh_apiserver):
    server = fresh_apiserver("--advertise-address", "192.0.2.10", "--endpoint-reconciler-type", "none")
    time.sleep(1.5)  # the lease reconciler's first pass runs at start: well past it
    result = server.kubectl("get", "endpoints", "kubernetes", "-n", "default", check=False)
    assert 'endpoints "kubernetes" not found' in result.stderr
