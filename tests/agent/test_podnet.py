"""The pod network's decisions, without a kernel: host-local's address choice, names, the bridge
address plan, the link/address/route operations a Pod gets (shown as the ``ip -batch`` lines
they stand for), the state files, and what teardown leaves of a kernel (the stateful ``kernel/fake/links.py``),
and a Pod's operations applied to that fake. The real kernel: test_podnet_kernel.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubesvc.agent import podnet
from kubesvc.agent.podnet import (IPStore, NodeNetwork, NodeRecord, PodNetwork, PodNetworkError, RangeExhausted, bridge_ops, host_veth_name,
                                  next_free_ip, next_record, node_network_problems, node_side_ops, node_sysctls, node_teardown_ops,
                                  plan_bridge_addresses, pod_removal_ops, pod_side_ops, pods_from_state)
from kubesvc.kernel.fake.links import FakeHostKernel, FakeNetwork
from kubesvc.kernel.fake.sysctl import FakeSysctl
from kubesvc.kernel.links import AddBridge, AddNetns, AddVeth, LinkInfo, SetUp, parse_link_info, render

# ---------------------------------------------------------------------------------------------
# host-local's allocator

NEXT_FREE_IP_CASES = [
    # (id, cidr, gateway, used, last, expected address)
    ("first-skips-network-and-gateway", "10.244.1.0/24", "10.244.1.1", [], None, "10.244.1.2"),
    ("after-the-last-reserved", "10.244.1.0/24", "10.244.1.1", ["10.244.1.2", "10.244.1.5"], "10.244.1.5", "10.244.1.6"),
    ("released-address-not-reused-at-once", "10.244.1.0/24", "10.244.1.1", ["10.244.1.2"], "10.244.1.3", "10.244.1.4"),
    ("skips-used-after-last", "10.244.1.0/24", "10.244.1.1", ["10.244.1.6", "10.244.1.7"], "10.244.1.5", "10.244.1.8"),
    ("wraps-after-the-range-end", "10.244.1.0/24", "10.244.1.1", ["10.244.1.254"], "10.244.1.254", "10.244.1.2"),
    ("wraps-past-used-at-the-end", "10.244.1.0/24", "10.244.1.1", ["10.244.1.253", "10.244.1.254", "10.244.1.2"], "10.244.1.252",
     "10.244.1.3"),
    ("never-the-broadcast", "10.244.1.0/30", "10.244.1.1", [], "10.244.1.2", "10.244.1.2"),
    ("last-outside-the-range-starts-over", "10.244.1.0/24", "10.244.1.1", [], "10.244.2.9", "10.244.1.2"),
    ("last-of-the-other-family-starts-over", "10.244.1.0/24", "10.244.1.1", [], "fd00::9", "10.244.1.2"),
    ("gateway-in-the-middle", "10.0.0.0/29", "10.0.0.3", ["10.0.0.2"], "10.0.0.2", "10.0.0.4"),
    ("used-outside-the-range-ignored", "10.244.1.0/30", "10.244.1.1", ["10.244.2.2", "fd00::2"], None, "10.244.1.2"),
    ("ipv6-first", "fd00:10:244:1::/64", "fd00:10:244:1::1", [], None, "fd00:10:244:1::2"),
    ("ipv6-low-addresses-stay-ipv6", "::/64", "::1", [], None, "::2"),
    ("ipv6-used-in-any-spelling", "fd00:10:244:1::/64", "fd00:10:244:1::1", ["FD00:10:244:1:0:0:0:2"], None, "fd00:10:244:1::3"),
    ("ipv6-has-no-broadcast", "fd00::/126", "fd00::1", ["fd00::2"], "fd00::2", "fd00::3"),
]


@pytest.mark.parametrize("cidr, gateway, used, last, expected", [c[1:] for c in NEXT_FREE_IP_CASES], ids=[c[0] for c in NEXT_FREE_IP_CASES])
def test_next_free_ip(cidr, gateway, used, last, expected):
    assert next_free_ip(cidr, gateway, used, last) == expected


EXHAUSTED_CASES = [
    ("full-slash-30", "10.244.9.0/30", "10.244.9.1", ["10.244.9.2"], "no IP addresses available in range set: 10.244.9.1-10.244.9.2"),
    ("slash-31-has-nothing", "10.244.9.0/31", "10.244.9.1", [], "no IP addresses available in range set: 10.244.9.1-10.244.9.0"),
    ("full-ipv6", "fd00::/126", "fd00::1", ["fd00::2", "fd00::3"], "no IP addresses available in range set: fd00::1-fd00::3"),
]


@pytest.mark.parametrize("cidr, gateway, used, message", [c[1:] for c in EXHAUSTED_CASES], ids=[c[0] for c in EXHAUSTED_CASES])
def test_next_free_ip_exhausted(cidr, gateway, used, message):
    with pytest.raises(RangeExhausted) as failure:
        next_free_ip(cidr, gateway, used, None)
    assert str(failure.value) == message


def test_next_free_ip_hands_out_every_address_once_then_fails():
    used, last = [], None
    for _ in range(253):
        last = next_free_ip("10.244.1.0/24", "10.244.1.1", used, last)
        used.append(last)
    assert sorted(used, key=lambda ip: int(ip.rsplit(".", 1)[1])) == [f"10.244.1.{i}" for i in range(2, 255)]
    with pytest.raises(RangeExhausted):
        next_free_ip("10.244.1.0/24", "10.244.1.1", used, last)


# ---------------------------------------------------------------------------------------------
# parameters and names

PROBLEM_CASES = [
    ("ipv4", ["10.244.1.0/24"], "cbr0", "kubesvc-", []),
    ("dual-stack", ["10.244.1.0/24", "fd00:10:244:1::/64"], "cbr0", "ks-a-", []),
    ("none", [], "cbr0", "kubesvc-", ["expected one podCIDR, or one per IP family, got 0"]),
    ("two-ipv4", ["10.244.1.0/24", "10.244.2.0/24"], "cbr0", "kubesvc-", ["two podCIDRs of one IP family"]),
    ("host-bits-set", ["10.244.1.5/24"], "cbr0", "kubesvc-", ["podCIDR '10.244.1.5/24': 10.244.1.5/24 has host bits set"]),
    ("slash-31", ["10.244.1.0/31"], "cbr0", "kubesvc-", ["podCIDR 10.244.1.0/31 has no address for a Pod besides its gateway"]),
    ("bridge-name-too-long", ["10.244.1.0/24"], "a-very-long-bridge", "kubesvc-",
     ["bridge name 'a-very-long-bridge' is not a valid interface name (at most 15 characters)"]),
    ("empty-prefix", ["10.244.1.0/24"], "cbr0", "", ["netns prefix '' must be non-empty letters, digits, '.', '_', '-'"]),
    ("prefix-with-slash", ["10.244.1.0/24"], "cbr0", "a/b", ["netns prefix 'a/b' must be non-empty letters, digits, '.', '_', '-'"]),
]


@pytest.mark.parametrize("cidrs, bridge, prefix, problems", [c[1:] for c in PROBLEM_CASES], ids=[c[0] for c in PROBLEM_CASES])
def test_node_network_problems(cidrs, bridge, prefix, problems):
    assert node_network_problems(cidrs, bridge, prefix) == problems


def test_node_network_gateways_and_normalized_cidrs(tmp_path):
    net = NodeNetwork(["10.244.1.0/24", "fd00:10:244:01::/64"], state_dir=tmp_path)
    assert net.pod_cidrs == ["10.244.1.0/24", "fd00:10:244:1::/64"]
    assert net.gateways == ["10.244.1.1", "fd00:10:244:1::1"]
    assert net.bridge_addresses == ["10.244.1.1/24", "fd00:10:244:1::1/64"]
    assert net.ipam_dir == tmp_path / "networks" / "cbr0"
    with pytest.raises(PodNetworkError, match="two podCIDRs of one IP family"):
        NodeNetwork(["10.244.1.0/24", "10.244.2.0/24"], state_dir=tmp_path)


def test_pod_names_are_deterministic_and_fit_the_kernel(tmp_path):
    net = NodeNetwork(["10.244.1.0/24"], netns_prefix="ks-x-", state_dir=tmp_path)
    uid = "6f1c2b9e-3d4a-4c5b-8e7f-0a1b2c3d4e5f"
    pod = net.pod(uid)
    assert pod == PodNetwork(f"ks-x-{uid}", [], host_veth_name(uid))
    assert len(pod.host_veth) == 15 and pod.host_veth.startswith("veth")
    assert host_veth_name(uid) == host_veth_name(uid) != host_veth_name(uid[:-1] + "0")
    with pytest.raises(PodNetworkError, match="cannot name a network namespace"):
        net.pod("../etc")


# ---------------------------------------------------------------------------------------------
# the bridge

BRIDGE_PLAN_CASES = [
    ("missing-bridge-gets-everything", None, ["10.244.1.1/24"], ["10.244.1.1/24"]),
    ("adopted-with-the-address", LinkInfo("bridge", ("10.244.1.1/24",)), ["10.244.1.1/24"], []),
    ("adopted-without-addresses", LinkInfo("bridge", ()), ["10.244.1.1/24", "fd00::1/64"], ["10.244.1.1/24", "fd00::1/64"]),
    ("other-ipv6-subnet-may-stay", LinkInfo("bridge", ("10.244.1.1/24", "fd01::1/64")), ["10.244.1.1/24", "fd00::1/64"], ["fd00::1/64"]),
]


@pytest.mark.parametrize("existing, wanted, to_add", [c[1:] for c in BRIDGE_PLAN_CASES], ids=[c[0] for c in BRIDGE_PLAN_CASES])
def test_plan_bridge_addresses(existing, wanted, to_add):
    assert plan_bridge_addresses("cbr0", existing, wanted) == to_add


BRIDGE_CONFLICT_CASES = [
    ("not-a-bridge", LinkInfo("veth", ()), ["10.244.1.1/24"], "'cbr0' already exists but is not a bridge"),
    ("other-ipv4-address", LinkInfo("bridge", ("10.244.7.1/24",)), ["10.244.1.1/24"],
     "'cbr0' already has an IP address different from 10.244.1.1/24"),
    ("overlapping-ipv6", LinkInfo("bridge", ("fd00::1/48",)), ["fd00::1/64"],
     "'cbr0' already has an IP address different from fd00::1/64"),
]


@pytest.mark.parametrize("existing, wanted, message", [c[1:] for c in BRIDGE_CONFLICT_CASES], ids=[c[0] for c in BRIDGE_CONFLICT_CASES])
def test_plan_bridge_addresses_conflicts(existing, wanted, message):
    with pytest.raises(PodNetworkError) as failure:
        plan_bridge_addresses("cbr0", existing, wanted)
    assert str(failure.value) == message


def test_bridge_ops():
    assert render(bridge_ops("cbr0", "02:00:00:00:00:01", True, ["10.244.1.1/24", "fd00::1/64"])) == [
        "link add cbr0 address 02:00:00:00:00:01 type bridge", "address add 10.244.1.1/24 dev cbr0",
        "address add fd00::1/64 dev cbr0 nodad", "link set cbr0 up"]
    assert render(bridge_ops("cbr0", "02:00:00:00:00:01", False, [])) == ["link set cbr0 up"]


def test_bridge_mac_is_fixed_and_locally_administered():
    mac = podnet.bridge_mac("cbr0", ["10.244.1.0/24"])
    assert mac == podnet.bridge_mac("cbr0", ["10.244.1.0/24"]) != podnet.bridge_mac("cbr0", ["10.244.2.0/24"])
    assert mac.startswith("02:") and len(mac.split(":")) == 6


def test_node_sysctls():
    assert node_sysctls("cbr0", {4}) == {
        "net/ipv4/ip_forward": "1", "net/ipv4/conf/all/send_redirects": "0", "net/ipv4/conf/default/send_redirects": "0",
        "net/ipv4/conf/cbr0/send_redirects": "0", "net/ipv4/conf/all/rp_filter": "0", "net/ipv4/conf/cbr0/rp_filter": "0"}
    assert node_sysctls("cbr0", {4, 6})["net/ipv6/conf/all/forwarding"] == "1"


def test_parse_link_info():
    link = {"IFLA_IFNAME": "cbr0", "IFLA_LINKINFO": {"IFLA_INFO_KIND": "bridge"}}
    addresses = [{"family": 2, "IFA_LOCAL": "10.244.1.1", "IFA_ADDRESS": "10.244.1.1", "prefixlen": 24},
                 {"family": 10, "IFA_ADDRESS": "fd00::1", "prefixlen": 64}, {"family": 10, "IFA_ADDRESS": "fe80::1", "prefixlen": 64}]
    assert parse_link_info(link, addresses) == LinkInfo("bridge", ("10.244.1.1/24", "fd00::1/64"))
    assert parse_link_info({"IFLA_IFNAME": "eth0"}, []) == LinkInfo(None, ())


# ---------------------------------------------------------------------------------------------
# a Pod's kernel operations

POD = PodNetwork("kubesvc-u1", ["10.244.1.2"], "vethaaaaaaaaaaa")

NODE_SIDE_CASES = [
    ("new-pod", False, False, ["netns add kubesvc-u1", "link add vethaaaaaaaaaaa type veth peer name eth0 netns kubesvc-u1",
                               "link set vethaaaaaaaaaaa master cbr0 up", "link set vethaaaaaaaaaaa type bridge_slave hairpin on"]),
    ("everything-there", True, True, ["link set vethaaaaaaaaaaa master cbr0 up", "link set vethaaaaaaaaaaa type bridge_slave hairpin on"]),
    ("veth-lost", True, False, ["link add vethaaaaaaaaaaa type veth peer name eth0 netns kubesvc-u1",
                                "link set vethaaaaaaaaaaa master cbr0 up", "link set vethaaaaaaaaaaa type bridge_slave hairpin on"]),
    ("netns-deleted-by-name", False, True, ["link del vethaaaaaaaaaaa", "netns add kubesvc-u1",
                                            "link add vethaaaaaaaaaaa type veth peer name eth0 netns kubesvc-u1",
                                            "link set vethaaaaaaaaaaa master cbr0 up", "link set vethaaaaaaaaaaa type bridge_slave hairpin on"]),
]


@pytest.mark.parametrize("have_netns, have_veth, lines", [c[1:] for c in NODE_SIDE_CASES], ids=[c[0] for c in NODE_SIDE_CASES])
def test_node_side_ops(have_netns, have_veth, lines):
    assert render(node_side_ops("cbr0", POD, have_netns, have_veth)) == lines


POD_SIDE_CASES = [
    ("ipv4", ["10.244.1.2"], ["10.244.1.1"], ["address replace 10.244.1.2/32 dev eth0", "route replace 10.244.1.1 dev eth0 scope link",
                                               "route replace 0.0.0.0/0 via 10.244.1.1 dev eth0"]),
    ("dual-stack", ["10.244.1.2", "fd00::2"], ["10.244.1.1", "fd00::1"], [
        "address replace 10.244.1.2/32 dev eth0", "route replace 10.244.1.1 dev eth0 scope link",
        "route replace 0.0.0.0/0 via 10.244.1.1 dev eth0",
        "address replace fd00::2/128 dev eth0 nodad", "route replace fd00::1 dev eth0", "route replace ::/0 via fd00::1 dev eth0"]),
]


@pytest.mark.parametrize("ips, gateways, lines", [c[1:] for c in POD_SIDE_CASES], ids=[c[0] for c in POD_SIDE_CASES])
def test_pod_side_ops(ips, gateways, lines):
    assert render(pod_side_ops(ips, gateways)) == ["link set lo up", "link set eth0 up", *lines]


REMOVAL_CASES = [
    ("both", True, True, ["link del vethaaaaaaaaaaa", "netns del kubesvc-u1"]),
    ("netns-only", True, False, ["netns del kubesvc-u1"]),
    ("gone", False, False, []),
]


@pytest.mark.parametrize("have_netns, have_veth, lines", [c[1:] for c in REMOVAL_CASES], ids=[c[0] for c in REMOVAL_CASES])
def test_pod_removal_ops(have_netns, have_veth, lines):
    assert render(pod_removal_ops(POD, have_netns, have_veth)) == lines


def test_a_pods_operations_leave_the_pod_wired_and_its_removal_leaves_nothing():
    network = FakeNetwork()
    network.apply(bridge_ops("cbr0", "02:00:00:00:00:01", True, ["10.244.1.1/24", "fd00::1/64"]))
    pod = PodNetwork("kubesvc-u1", ["10.244.1.2", "fd00::2"], "vethaaaaaaaaaaa")
    for _ in range(2):  # an agent restart plans again from what exists: the same result
        network.apply(node_side_ops("cbr0", pod, pod.netns in network.named, network.link_exists(pod.host_veth)))
        network.apply(pod_side_ops(pod.ips, ["10.244.1.1", "fd00::1"]), pod.netns)
    veth, eth0 = network.host.links["vethaaaaaaaaaaa"], network.ns(pod.netns).links["eth0"]
    assert (veth.master, veth.hairpin, veth.up, eth0.up) == ("cbr0", True, True, True)
    assert network.link_info("eth0", pod.netns) == LinkInfo("veth", ("10.244.1.2/32", "fd00::2/128"))
    assert {(r.dst, r.via) for r in network.routes(pod.netns)} == {
        ("10.244.1.1/32", None), ("0.0.0.0/0", "10.244.1.1"), ("fd00::1/128", None), ("::/0", "fd00::1")}

    network.apply(pod_removal_ops(pod, True, True))
    assert network.netns_names() == [] and network.link_names() == {"lo", "cbr0"}


def test_pods_from_state_are_the_address_holders_only():
    allocations = {"fd00::2": "u1", "10.244.1.2": "u1", "10.244.1.3": "u2", "10.9.9.9": "u2"}
    pods = pods_from_state("ks-a-", ["10.244.1.0/24", "fd00::/64"], allocations)
    assert pods == {"u1": PodNetwork("ks-a-u1", ["10.244.1.2", "fd00::2"], host_veth_name("u1")),
                    "u2": PodNetwork("ks-a-u2", ["10.244.1.3", "10.9.9.9"], host_veth_name("u2"))}


# ---------------------------------------------------------------------------------------------
# the state files


def test_ip_store_allocates_round_robin_and_survives_a_restart(tmp_path):
    cidrs, gws = ["10.244.1.0/24"], ["10.244.1.1"]
    store = IPStore(tmp_path)
    assert store.allocate("u1", cidrs, gws) == ["10.244.1.2"]
    assert store.allocate("u2", cidrs, gws) == ["10.244.1.3"]
    assert store.allocate("u1", cidrs, gws) == ["10.244.1.2"]  # held already
    assert (tmp_path / "10.244.1.2").read_text() == "u1"
    assert (tmp_path / "last_reserved_ip.0").read_text() == "10.244.1.3"
    store.release(["10.244.1.2"])
    restarted = IPStore(tmp_path)
    assert restarted.allocations() == {"10.244.1.3": "u2"}
    assert restarted.allocate("u3", cidrs, gws) == ["10.244.1.4"]


def test_ip_store_dual_stack_releases_what_a_failed_allocation_reserved(tmp_path):
    cidrs, gws = ["10.244.1.0/24", "fd00::/126"], ["10.244.1.1", "fd00::1"]
    store = IPStore(tmp_path)
    assert store.allocate("u1", cidrs, gws) == ["10.244.1.2", "fd00::2"]
    assert store.allocate("u2", cidrs, gws) == ["10.244.1.3", "fd00::3"]
    with pytest.raises(RangeExhausted, match="fd00::1-fd00::3"):
        store.allocate("u3", cidrs, gws)
    assert set(store.allocations().values()) == {"u1", "u2"}
    assert (tmp_path / "last_reserved_ip.1").read_text() == "fd00::3"


def test_ip_store_skips_an_address_another_writer_took(tmp_path, monkeypatch):
    store = IPStore(tmp_path)
    real = store.last_reserved

    def racing_last_reserved(index):  # another agent writes .2 between our read and our reservation
        (tmp_path / "10.244.1.2").write_text("someone")
        return real(index)

    monkeypatch.setattr(store, "last_reserved", racing_last_reserved)
    assert store.allocate("u1", ["10.244.1.0/24"], ["10.244.1.1"]) == ["10.244.1.3"]


def record(**changes) -> NodeRecord:
    base = dict(bridge="cbr0", netns_prefix="ks-a-", node_netns=None, pod_cidrs=["10.244.1.0/24"], created_bridge=True, added_addresses=[])
    return NodeRecord(**{**base, **changes})


def test_next_record(tmp_path):
    net = NodeNetwork(["10.244.1.0/24"], netns_prefix="ks-a-", state_dir=tmp_path)
    bridge = LinkInfo("bridge", ("10.244.1.1/24",))
    assert next_record(net, None, None, ["10.244.1.1/24"], "ks-node") == record(node_netns="ks-node")
    assert next_record(net, record(), bridge, [], None) == record(), "a restarted agent still owns the bridge it made"
    assert next_record(net, None, LinkInfo("bridge", ()), ["10.244.1.1/24"], None) == record(created_bridge=False,
                                                                                              added_addresses=["10.244.1.1/24"])
    assert next_record(net, record(created_bridge=False, added_addresses=["10.244.1.1/24"]), bridge, [], None) == record(
        created_bridge=False, added_addresses=["10.244.1.1/24"])
    with pytest.raises(PodNetworkError, match="tear it down before using bridge 'cbr0'"):
        next_record(net, record(bridge="br9"), None, [], None)


# ---------------------------------------------------------------------------------------------
# teardown's requests to the kernel


def node_namespace_with_a_pod(network: FakeNetwork, node_netns: str | None, uid: str = "u1") -> None:
    """What ensure_node_network and add_pod leave: the bridge, the Pod's namespace and veth, a process in it."""
    network.apply([AddNetns(f"ks-a-{uid}")])
    network.apply([AddBridge("cbr0", "02:00:00:00:00:01"), AddVeth(host_veth_name(uid), "eth0", f"ks-a-{uid}"),
                   SetUp(host_veth_name(uid), "cbr0")], node_netns)
    network.spawn(f"ks-a-{uid}")


def test_teardown_from_another_namespace_reaches_the_node_namespace(tmp_path):
    (tmp_path / "podnet.json").write_text(json.dumps(record(node_netns="ks-node").__dict__))
    IPStore(tmp_path / "networks" / "cbr0").allocate("u1", ["10.244.1.0/24"], ["10.244.1.1"])
    network = FakeNetwork()
    network.apply([AddNetns("ks-node"), AddNetns("ks-a-gone")])
    node_namespace_with_a_pod(network, "ks-node")
    pod_ns = network.ns("ks-a-u1")
    assert podnet.teardown_sync(tmp_path, FakeHostKernel(network)) == []
    assert pod_ns.processes == set()  # killed before its namespace went
    assert network.netns_names() == ["ks-a-gone", "ks-node"]  # ks-a-gone holds no address of ours
    assert network.link_names("ks-node") == {"lo"} and network.link_names() == {"lo"}
    assert list(tmp_path.iterdir()) == []


def test_teardown_of_an_adopted_bridge_removes_only_our_addresses():
    pods = [PodNetwork("ks-a-u1", [], "vethaaaaaaaaaaa")]
    adopted = record(created_bridge=False, added_addresses=["10.244.1.1/24"])
    assert render(node_teardown_ops(adopted, pods, {"cbr0"})) == ["address del 10.244.1.1/24 dev cbr0"]
    assert render(node_teardown_ops(record(), pods, {"cbr0", "vethaaaaaaaaaaa"})) == ["link del vethaaaaaaaaaaa", "link del cbr0"]


def test_teardown_without_a_record_does_nothing(tmp_path):
    network = FakeNetwork()
    node_namespace_with_a_pod(network, None)
    assert podnet.teardown_sync(tmp_path, FakeHostKernel(network)) == []
    assert network.netns_names() == ["ks-a-u1"] and network.link_names() == {"lo", "cbr0", host_veth_name("u1")}
    assert network.ns("ks-a-u1").processes
    assert podnet.teardown_sync(Path(tmp_path)) == []


def test_teardown_that_fails_keeps_the_state_for_another_try(tmp_path):
    (tmp_path / "podnet.json").write_text(json.dumps(record().__dict__))
    IPStore(tmp_path / "networks" / "cbr0").allocate("u1", ["10.244.1.0/24"], ["10.244.1.1"])
    network = FakeNetwork()
    network.apply([AddNetns("ks-a-u1"), AddBridge("cbr0", "02:00:00:00:00:01")])
    network.busy |= {"cbr0", "ks-a-u1"}
    errors = podnet.teardown_sync(tmp_path, FakeHostKernel(network))
    assert errors == ["link del cbr0: Device or resource busy", "netns del ks-a-u1: Device or resource busy"]  # both plans tried
    assert network.netns_names() == ["ks-a-u1"] and "cbr0" in network.link_names()
    assert (tmp_path / "podnet.json").exists() and (tmp_path / "networks" / "cbr0" / "10.244.1.2").exists()


# ---------------------------------------------------------------------------------------------
# the API over injected fakes (NodeNetwork.kernel)


async def test_the_api_goes_through_the_kernel_it_is_given(tmp_path):
    """ensure_node_network, add_pod and remove_pod change only the rtnetlink, namespaces and
    sysctls of ``NodeNetwork.kernel`` (here the stateful fakes)."""
    network = FakeNetwork()
    veth = host_veth_name("uid-1")
    sysctl = FakeSysctl(links=("lo", "cbr0", veth))
    net = NodeNetwork(["10.244.1.0/24"], state_dir=tmp_path, kernel=podnet.NodeKernel(network, network, sysctl))
    await podnet.ensure_node_network(net)
    assert network.link_info("cbr0") == LinkInfo("bridge", ("10.244.1.1/24",)) and network.ns().links["cbr0"].up
    assert sysctl.read("net/ipv4/ip_forward") == "1" and sysctl.read("net/ipv4/conf/cbr0/send_redirects") == "0"

    pod = await podnet.add_pod(net, "uid-1")
    assert pod.ips == ["10.244.1.2"] and network.names() == ["kubesvc-uid-1"]
    assert network.ns().links[veth].master == "cbr0" and network.ns().links[veth].hairpin
    assert network.link_info("eth0", "kubesvc-uid-1") == LinkInfo("veth", ("10.244.1.2/32",))
    assert {(r.dst, r.via) for r in network.routes("kubesvc-uid-1")} == {("10.244.1.1/32", None), ("0.0.0.0/0", "10.244.1.1")}
    assert sysctl.read(f"net/ipv4/conf/{veth}/send_redirects") == "0"
    assert await podnet.add_pod(net, "uid-1") == pod  # again: what exists is reused

    network.spawn("kubesvc-uid-1")
    await podnet.remove_pod(net, "uid-1")
    assert network.names() == [] and veth not in network.link_names()
    assert not (tmp_path / "networks" / "cbr0" / "10.244.1.2").exists()


def test_ip_store_ignores_an_address_released_while_it_lists(tmp_path, monkeypatch):
    """Two Pods removed at once: one release unlinks its address file between the other's listing
    of the directory and its read. The other's removal still finds and releases its own address
    (before, the read raised FileNotFoundError and its address stayed held)."""
    store = IPStore(tmp_path)
    [ours] = store.allocate("uid-a", ["10.244.1.0/24"], ["10.244.1.1"])
    listed = [tmp_path / ours, tmp_path / "10.244.1.77"]  # .77 was listed, then released
    monkeypatch.setattr(Path, "iterdir", lambda self: iter(listed) if self == tmp_path else iter(()))
    assert store.allocations() == {ours: "uid-a"}
    monkeypatch.undo()
    store.release([ours])
    assert store.allocations() == {}
