"""The pure LoadBalancer IPAM decisions (controllers/loadbalancer/allocator.py): which Services
are ours, what a pool block holds, asked-for addresses, per-family allocation, conflicts and
exhaustion. Expected values are written out by hand."""

from __future__ import annotations

import pytest

from kubesvc.controllers.loadbalancer.allocator import (
    AllocationFailed,
    Allocator,
    block_range,
    is_ours,
    pool_from_object,
    requested_ips,
)


def pool(name: str, *blocks: dict, selector: dict | None = None, disabled: bool = False) -> dict:
    spec: dict = {"blocks": list(blocks)}
    if selector is not None:
        spec["serviceSelector"] = selector
    if disabled:
        spec["disabled"] = True
    return {"metadata": {"name": name}, "spec": spec}


def service(name: str, *, namespace: str = "default", families=("IPv4",), labels=None, annotations=None, status_ips=(),
            **spec) -> dict:
    meta = {"name": name, "namespace": namespace, "labels": labels or {}, "annotations": annotations or {}}
    body = {"metadata": meta, "spec": {"type": "LoadBalancer", "ipFamilies": list(families), **spec}}
    if status_ips:
        body["status"] = {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"} for ip in status_ips]}}
    return body


def allocator(*pools: dict) -> Allocator:
    a = Allocator()
    for p in pools:
        a.set_pool(pool_from_object(p))
    return a


@pytest.mark.parametrize("block, first, last", [
    ({"cidr": "192.168.1.0/30"}, "192.168.1.1", "192.168.1.2"),  # network and broadcast left out
    ({"cidr": "192.168.1.8/31"}, "192.168.1.8", "192.168.1.9"),  # a /31 has neither
    ({"cidr": "192.168.1.7/32"}, "192.168.1.7", "192.168.1.7"),
    ({"start": "10.0.0.10", "stop": "10.0.0.12"}, "10.0.0.10", "10.0.0.12"),
    ({"start": "10.0.0.10"}, "10.0.0.10", "10.0.0.10"),
    ({"cidr": "fd00::/126"}, "fd00::", "fd00::3"),
])
def test_block_ranges(block, first, last):
    assert tuple(map(str, block_range(block))) == (first, last)


@pytest.mark.parametrize("spec, ours", [
    ({"type": "LoadBalancer"}, True),
    ({"type": "LoadBalancer", "loadBalancerClass": "kubesvc.io/loadbalancer"}, True),
    ({"type": "LoadBalancer", "loadBalancerClass": "example.com/other"}, False),  # another implementation's
    ({"type": "NodePort"}, False),
    ({"type": "ClusterIP"}, False),
])
def test_which_services_are_ours(spec, ours):
    assert is_ours({"metadata": {}, "spec": spec}) is ours


def test_the_annotation_wins_over_the_deprecated_field():
    svc = service("s", loadBalancerIP="10.0.0.5", annotations={"kubesvc.io/loadbalancer-ips": "10.0.0.6, fd00::6"})
    assert requested_ips(svc) == ["10.0.0.6", "fd00::6"]
    assert requested_ips(service("s", loadBalancerIP="10.0.0.5")) == ["10.0.0.5"]
    assert requested_ips(service("s")) == []


def test_lowest_free_address_first_and_kept_on_resync():
    a = allocator(pool("default", {"start": "10.0.0.10", "stop": "10.0.0.12"}))
    assert a.assign(service("a")) == ["10.0.0.10"]
    assert a.assign(service("b")) == ["10.0.0.11"]
    assert a.assign(service("a")) == ["10.0.0.10"]  # a resync keeps what it has
    a.release("default/a")
    assert a.assign(service("c")) == ["10.0.0.10"]  # freed and given again


def test_exhaustion_raises_no_available_ips_and_takes_nothing():
    a = allocator(pool("default", {"cidr": "10.0.0.0/30"}))  # .1 and .2
    assert a.assign(service("a")) == ["10.0.0.1"]
    assert a.assign(service("b")) == ["10.0.0.2"]
    with pytest.raises(AllocationFailed, match="^no available IPs$"):
        a.assign(service("c"))
    assert a.held_by("default/c") == []


def test_requested_address_outside_every_pool_or_taken_is_refused():
    a = allocator(pool("default", {"cidr": "10.0.0.0/29"}))
    assert a.assign(service("a", loadBalancerIP="10.0.0.5")) == ["10.0.0.5"]
    with pytest.raises(AllocationFailed, match=r'^\["192.168.9.9"\] is not allowed in config$'):
        a.assign(service("b", loadBalancerIP="192.168.9.9"))
    with pytest.raises(AllocationFailed, match=r'^"10.0.0.5" is already allocated to default/a$'):
        a.assign(service("b", annotations={"kubesvc.io/loadbalancer-ips": "10.0.0.5"}))
    assert a.assign(service("b")) == ["10.0.0.1"]  # without asking: the lowest free


def test_dual_stack_gets_one_address_per_family_in_ip_families_order():
    a = allocator(pool("v4", {"cidr": "10.0.0.0/30"}), pool("v6", {"cidr": "fd00::/126"}))
    assert a.assign(service("ds", families=("IPv6", "IPv4"))) == ["fd00::", "10.0.0.1"]
    assert a.assign(service("v6only", families=("IPv6",))) == ["fd00::1"]


def test_a_family_without_a_pool_is_exhaustion():
    a = allocator(pool("v4", {"cidr": "10.0.0.0/30"}))
    with pytest.raises(AllocationFailed, match="no available IPs"):
        a.assign(service("v6", families=("IPv6",)))


def test_service_selector_and_disabled_pools():
    a = allocator(pool("a-gold", {"start": "10.1.0.1"}, selector={"matchLabels": {"tier": "gold"}}),
                  pool("b-off", {"start": "10.2.0.1"}, disabled=True),
                  pool("c-all", {"start": "10.3.0.1", "stop": "10.3.0.2"}))
    assert a.assign(service("gold", labels={"tier": "gold"})) == ["10.1.0.1"]
    assert a.assign(service("plain")) == ["10.3.0.1"]  # not gold, and b-off gives nothing new
    with pytest.raises(AllocationFailed, match=r'^\["10.1.0.1"\] is not allowed in config$'):
        a.assign(service("other", loadBalancerIP="10.1.0.1"))  # the gold pool does not select it
    with pytest.raises(AllocationFailed, match="disabled pool b-off"):
        a.assign(service("other", loadBalancerIP="10.2.0.1"))


def test_recorded_addresses_are_occupied_first_and_kept():
    a = allocator(pool("default", {"start": "10.0.0.10", "stop": "10.0.0.12"}))
    a.occupy("default/old", ["10.0.0.10"])
    a.occupy("default/dup", ["10.0.0.10"])  # younger claim on the same address loses it
    assert a.assign(service("new")) == ["10.0.0.11"]
    assert a.assign(service("old", status_ips=["10.0.0.10"])) == ["10.0.0.10"]
    assert a.assign(service("dup", status_ips=["10.0.0.10"])) == ["10.0.0.12"]


def test_an_address_no_longer_in_any_pool_is_replaced():
    a = allocator(pool("old", {"start": "10.0.0.10"}), pool("new", {"start": "10.9.0.10"}))
    assert a.assign(service("s")) == ["10.9.0.10"]  # "new" sorts before "old"
    a.remove_pool("new")
    assert a.assign(service("s")) == ["10.0.0.10"]
