"""--nodeport-addresses per family, the node's IPs, and the local address listing (upstream
nodeport_addresses_test.go TestGetNodeIPs / TestContainsIPv4Loopback, server_test.go
Test_detectNodeIPs)."""

import os
import socket

import pytest

from kubesvc.kernel.netlink import local_addresses, parse_addresses, unique_ips
from kubesvc.util.ipnet import parse_cidr_sloppy, parse_ip_sloppy
from kubesvc.proxy.nodeportaddresses import NodePortAddresses, detect_node_ips, node_ips_from_node
from kubesvc.proxy.types import IPV4, IPV6
from tests.support import builders

ETH0_LO_V4 = ["10.20.30.51", "127.0.0.1"]
ETH0_LO_V6 = ["2001:db8::1", "::1"]
DUAL = ["1.2.3.4", "2001:db8::1", "127.0.0.1", "::1"]

# name, cidrs, interface addresses, {family: (match_all, ips)}
GET_NODE_IPS_CASES = [
    ("IPv4 single", ["10.20.30.0/24"], ["10.20.30.51", "100.200.201.1"],
     {IPV4: (False, {"10.20.30.51"}), IPV6: (True, set())}),
    ("IPv4 zero CIDR", ["0.0.0.0/0"], ETH0_LO_V4,
     {IPV4: (True, {"10.20.30.51", "127.0.0.1"}), IPV6: (True, set())}),
    ("IPv6 multiple", ["2001:db8::/64", "::1/128"], ETH0_LO_V6,
     {IPV4: (True, set()), IPV6: (False, {"2001:db8::1", "::1"})}),
    ("IPv6 zero CIDR", ["::/0"], ETH0_LO_V6,
     {IPV4: (True, set()), IPV6: (True, {"2001:db8::1", "::1"})}),
    ("IPv4 localhost exact", ["127.0.0.1/32"], ETH0_LO_V4,
     {IPV4: (False, {"127.0.0.1"}), IPV6: (True, set())}),
    ("IPv4 localhost subnet", ["127.0.0.0/8"], ["127.0.1.1"],
     {IPV4: (False, {"127.0.1.1"}), IPV6: (True, set())}),
    ("IPv4 multiple", ["10.20.30.0/24", "100.200.201.0/24"], ["10.20.30.51", "100.200.201.1"],
     {IPV4: (False, {"10.20.30.51", "100.200.201.1"}), IPV6: (True, set())}),
    ("IPv4 multiple, no match", ["10.20.30.0/24", "100.200.201.0/24"], ["192.168.1.2", "127.0.0.1"],
     {IPV4: (False, set()), IPV6: (True, set())}),
    ("empty list, IPv4 addrs", [], ["192.168.1.2", "127.0.0.1"],
     {IPV4: (True, {"192.168.1.2", "127.0.0.1"}), IPV6: (True, set())}),
    ("empty list, IPv6 addrs", [], ETH0_LO_V6,
     {IPV4: (True, set()), IPV6: (True, {"2001:db8::1", "::1"})}),
    ("IPv4 redundant CIDRs", ["1.2.3.0/24", "0.0.0.0/0"], ["1.2.3.4"],
     {IPV4: (True, {"1.2.3.4"}), IPV6: (True, set())}),
    ("Dual-stack, redundant IPv4", ["0.0.0.0/0", "1.2.3.0/24", "2001:db8::1/128"], DUAL,
     {IPV4: (True, {"1.2.3.4", "127.0.0.1"}), IPV6: (False, {"2001:db8::1"})}),
    ("Dual-stack, redundant IPv6", ["::/0", "1.2.3.0/24", "2001:db8::1/128"], DUAL,
     {IPV4: (False, {"1.2.3.4"}), IPV6: (True, {"2001:db8::1", "::1"})}),
]


@pytest.mark.parametrize("family", [IPV4, IPV6], ids=["IPv4", "IPv6"])
@pytest.mark.parametrize(("cidrs", "addresses", "expected"), [case[1:] for case in GET_NODE_IPS_CASES],
                         ids=[case[0] for case in GET_NODE_IPS_CASES])
def test_get_node_ips(cidrs, addresses, expected, family):
    npa = NodePortAddresses(cidrs, family)
    match_all, ips = expected[family]
    assert npa.match_all is match_all
    assert set(npa.node_ips(addresses)) == ips


@pytest.mark.parametrize(("cidrs", "want"), [
    pytest.param([], True, id="empty"),
    pytest.param(["224.0.0.0/24", "192.168.0.0/16", "fd00:1:d::/64", "0.0.0.0/0"], True, id="all zeros ipv4"),
    pytest.param(["224.0.0.0/24", "192.168.0.0/16", "fd00:1:d::/64", "::/0"], False, id="all zeros ipv6"),
    pytest.param(["224.0.0.0/24", "192.168.0.0/16", "fd00:1:d::/64", "127.0.0.0/8"], True, id="ipv4 loopback"),
    pytest.param(["224.0.0.0/24", "192.168.0.0/16", "fd00:1:d::/64", "::1/128"], False, id="ipv6 loopback"),
    pytest.param(["224.0.0.0/24", "192.168.0.0/16", "fd00:1:d::/64", "127.0.2.0/28"], True, id="ipv4 loopback smaller range"),
    pytest.param(["224.0.0.0/24", "192.168.0.0/16", "fd00:1:d::/64", "64.0.0.0/2"], True, id="ipv4 loopback within larger range"),
    pytest.param(["128.0.2.0/28", "224.0.0.0/24", "192.168.0.0/16", "fd00:1:d::/64"], False, id="non loop loopback"),
])
def test_contains_ipv4_loopback(cidrs, want):
    assert NodePortAddresses(cidrs, IPV4).contains_ipv4_loopback is want
    assert NodePortAddresses(cidrs, IPV6).contains_ipv4_loopback is False


@pytest.mark.parametrize(("primary_ips", "family", "cidrs", "match_all"), [
    pytest.param(["192.168.1.5"], IPV4, ("192.168.1.5/32",), False, id="primary IPv4"),
    pytest.param(["192.168.1.5", "fd00::5"], IPV6, ("fd00::5/128",), False, id="primary IPv6 of dual-stack"),
    pytest.param(["192.168.1.5"], IPV6, ("::/0",), True, id="no primary IP of the family: match all"),
    pytest.param(["127.0.0.1"], IPV4, ("0.0.0.0/0",), True, id="loopback stand-in is not a primary IP"),
    pytest.param([], IPV4, ("0.0.0.0/0",), True, id="node IPs unknown"),
])
def test_primary_node_port_addresses(primary_ips, family, cidrs, match_all):
    npa = NodePortAddresses(["primary"], family, primary_ips)
    assert npa.cidr_strings == cidrs
    assert npa.match_all is match_all


def test_node_ips_keeps_cidr_then_interface_order_and_ignores_prefixes():
    npa = NodePortAddresses(["10.0.0.0/8", "192.168.0.0/16"], IPV4)
    assert npa.node_ips(["192.168.1.1/24", "10.1.1.1/8", "10.1.1.1", "fd00::1"]) == ["10.1.1.1", "192.168.1.1"]
    assert str(npa) == "[10.0.0.0/8 192.168.0.0/16]"
    assert npa.matches("10.9.9.9") and not npa.matches("172.16.0.1")


@pytest.mark.parametrize(("raw", "bind_address", "family", "ipv4", "ipv6"), [
    pytest.param([], "10.0.0.1", IPV4, "10.0.0.1", "::1", id="Bind address IPv4 unicast address and no Node object"),
    pytest.param([], "fd00:4321::2", IPV6, "127.0.0.1", "fd00:4321::2", id="Bind address IPv6 unicast address and no Node object"),
    pytest.param([], "", IPV4, "127.0.0.1", "::1", id="No Valid IP found and no bind address"),
    pytest.param([], "0.0.0.0", IPV4, "127.0.0.1", "::1", id="No Valid IP found and unspecified bind address"),
    pytest.param(["192.168.1.1"], "0.0.0.0", IPV4, "192.168.1.1", "::1", id="Bind address 0.0.0.0 and node with IPv4 InternalIP set"),
    pytest.param(["192.168.1.1"], "::", IPV4, "192.168.1.1", "::1", id="Bind address :: and node with IPv4 InternalIP set"),
    pytest.param(["fd00:1234::1"], "0.0.0.0", IPV6, "127.0.0.1", "fd00:1234::1", id="Bind address 0.0.0.0 and node with IPv6 InternalIP set"),
    pytest.param(["fd00:1234::1"], "::", IPV6, "127.0.0.1", "fd00:1234::1", id="Bind address :: and node with IPv6 InternalIP set"),
    pytest.param(["90.90.90.90", "2001:db8::2"], "::", IPV4, "90.90.90.90", "2001:db8::2", id="Dual stack, primary IPv4"),
    pytest.param(["2001:db8::2", "90.90.90.90"], "0.0.0.0", IPV6, "90.90.90.90", "2001:db8::2", id="Dual stack, primary IPv6"),
    pytest.param(["2001:db8::2", "90.90.90.90"], "80.80.80.80", IPV4, "80.80.80.80", "2001:db8::2", id="Dual stack, override IPv4"),
    pytest.param(["90.90.90.90", "2001:db8::2"], "2001:db8::555", IPV6, "90.90.90.90", "2001:db8::555", id="Dual stack, override IPv6"),
    pytest.param(["2001:db8::2", "90.90.90.90"], "127.0.0.1", IPV4, "127.0.0.1", "2001:db8::2", id="Dual stack, override primary family, IPv4"),
    pytest.param(["90.90.90.90", "2001:db8::2"], "::1", IPV6, "90.90.90.90", "::1", id="Dual stack, override primary family, IPv6"),
])
def test_detect_node_ips(raw, bind_address, family, ipv4, ipv6):
    assert detect_node_ips(raw, bind_address) == (family, {IPV4: ipv4, IPV6: ipv6})


@pytest.mark.parametrize(("node", "expected"), [
    pytest.param(builders.node("n", addresses=(("ExternalIP", "54.10.11.12"), ("InternalIP", "10.0.1.1"))), ["10.0.1.1"],
                 id="InternalIP before ExternalIP"),
    pytest.param(builders.node("n", addresses=(("InternalIP", "10.0.1.1"), ("InternalIP", "10.0.1.2"), ("ExternalIP", "fd00::1"))),
                 ["10.0.1.1", "fd00::1"], id="secondary is the first of the other family"),
    pytest.param(builders.node("n", addresses=(("InternalIP", "fd00::1"), ("InternalIP", "10.0.1.1"))), ["fd00::1", "10.0.1.1"],
                 id="IPv6 primary"),
    pytest.param(builders.node("n", addresses=(("Hostname", "node-1"), ("InternalIP", "not-an-ip"))), [], id="no usable address"),
    pytest.param(None, [], id="no Node"),
])
def test_node_ips_from_node(node, expected):
    assert node_ips_from_node(node) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("10.0.0.1", "10.0.0.1"), ("010.000.000.001", "10.0.0.1"), ("::ffff:1.2.3.4", "1.2.3.4"), ("fd00::1", "fd00::1"),
    ("1.2.3", None), ("256.1.1.1", None), ("fe80::1%eth0", None), ("", None), (" 1.2.3.4", None), ("10.10.12.11:2000", None),
])
def test_parse_ip_sloppy(text, expected):
    parsed = parse_ip_sloppy(text)
    assert (str(parsed) if parsed else None) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("10.20.30.40/16", "10.20.0.0/16"), ("fd00:1::0/64", "fd00:1::/64"), ("010.0.0.0/8", "10.0.0.0/8"),
    ("10.0.0.0", None), ("0", None), ("::1", None), ("1.2.3.0/33", None), ("2001:db8:xyz/64", None), ("1.2.3.0/-1", None),
])
def test_parse_cidr_sloppy(text, expected):
    parsed = parse_cidr_sloppy(text)
    assert (str(parsed) if parsed else None) == expected


# RTM_NEWADDR messages as pyroute2 gives them (IPv4 carries IFA_LOCAL, IPv6 only IFA_ADDRESS)
ADDR_MESSAGES = [
    {"family": socket.AF_INET, "index": 1, "prefixlen": 8, "scope": 254, "IFA_LOCAL": "127.0.0.1", "IFA_ADDRESS": "127.0.0.1"},
    {"family": socket.AF_INET6, "index": 1, "prefixlen": 128, "scope": 254, "IFA_ADDRESS": "::1"},
    {"family": socket.AF_INET, "index": 3, "prefixlen": 24, "scope": 0, "IFA_LOCAL": "192.0.2.2", "IFA_ADDRESS": "192.0.2.2"},
    {"family": socket.AF_INET6, "index": 3, "prefixlen": 64, "scope": 0, "IFA_ADDRESS": "fd00::2"},
    {"family": socket.AF_INET, "index": 4, "prefixlen": 32, "scope": 0, "IFA_LOCAL": "192.0.2.2", "IFA_ADDRESS": "192.0.2.2"},
    {"family": socket.AF_INET, "index": 5, "prefixlen": 32, "scope": 0, "IFA_LOCAL": "192.0.2.9", "IFA_ADDRESS": "192.0.2.10"},  # ptp
    {"family": socket.AF_PACKET, "index": 6, "IFA_ADDRESS": "00:11:22:33:44:55"},
]


@pytest.mark.parametrize(("family", "expected"), [
    pytest.param(None, ["127.0.0.1", "::1", "192.0.2.2", "fd00::2", "192.0.2.9"], id="all"),
    pytest.param(IPV4, ["127.0.0.1", "192.0.2.2", "192.0.2.9"], id="IPv4"),
    pytest.param(IPV6, ["::1", "fd00::2"], id="IPv6"),
])
def test_parse_addresses(family, expected):
    assert unique_ips(parse_addresses(ADDR_MESSAGES, family)) == expected


def test_local_addresses_of_this_namespace_include_loopback():
    assert "127.0.0.1" in local_addresses(IPV4)
    assert all(":" not in address for address in local_addresses(IPV4))


def test_local_addresses_in_a_forked_child():
    """The netlink thread and its sockets stay with the parent; a child asks on fresh ones."""
    assert local_addresses(IPV4)  # the parent's thread and socket exist
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        os.write(write, ",".join(local_addresses(IPV4)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        got = f.read().decode()
    os.waitpid(pid, 0)
    assert got.split(",") == local_addresses(IPV4)


def test_mapped_ipv4_cidr_is_ipv4():
    """IsIPv4CIDRString: ``::ffff:10.0.0.0/104`` belongs to the IPv4 proxier, as Go's 10.0.0.0/8."""
    v4, v6 = NodePortAddresses(["::ffff:10.0.0.0/104", "fd00::/64"], IPV4), NodePortAddresses(["::ffff:10.0.0.0/104", "fd00::/64"], IPV6)
    assert v4.cidr_strings == ("::ffff:10.0.0.0/104",) and [str(c) for c in v4.cidrs] == ["10.0.0.0/8"]
    assert v6.cidr_strings == ("fd00::/64",)
    assert NodePortAddresses(["::ffff:127.0.0.0/104"], IPV4).contains_ipv4_loopback is True


def test_local_detector_takes_a_mapped_ipv4_cluster_cidr_as_ipv4():
    from kubesvc.proxy.localdetector import new_local_detector

    cidrs = ["::ffff:10.0.0.0/104", "fd00::/48"]
    assert new_local_detector("ClusterCIDR", IPV4, cidrs, []).cidr == "10.0.0.0/8"
    assert new_local_detector("ClusterCIDR", IPV6, cidrs, []).cidr == "fd00::/48"
