"""Service IP ranges and NodePort ranges: pure arithmetic against upstream's tables.

Every expected value is copied from the reference (/work/shared/reference/control-plane.md
§1.1-§1.3 and §2), which cites upstream's tests: ``Test_calculateRangeOffset`` in
pkg/registry/core/service/ipallocator/bitmap_test.go and portallocator/allocator_test.go,
``TestAllocateTiny`` / ``TestAllocateSmall`` / ``TestClusterIPMetrics`` (bitmap_test.go), and
kube-apiserver's flag checks (cmd/kube-apiserver/app/options/validation.go,
pkg/controlplane/apiserver/options/options.go ``ServiceIPRange``). Rows marked "derived"
apply the reference's formula by hand; none is computed with the code under test.
"""

from __future__ import annotations

import pytest

from kubesvc.apiserver.allocator.ranges import (
    IPRange,
    PortRange,
    check_service_cidr_flag,
    ip_range_offset,
    port_range_offset,
)

# ---- calculateRangeOffset, IPs (upstream Test_calculateRangeOffset, bitmap_test.go) ----------

IP_OFFSET_TABLE = [
    # (name, cidr, offset) -- the upstream table, row for row
    ("full mask IPv4", "192.168.1.1/32", 0),
    ("full mask IPv6", "fd00::1/128", 0),
    ("very small mask IPv4", "192.168.1.1/30", 0),
    ("very small mask IPv6", "fd00::1/126", 0),
    ("small mask IPv4", "192.168.1.1/28", 0),
    ("small mask IPv4 /27", "192.168.1.1/27", 16),
    ("small mask IPv6", "fd00::1/124", 0),
    ("small mask IPv6 /122", "fd00::1/122", 16),
    ("medium mask IPv4", "192.168.1.1/22", 64),
    ("medium mask IPv6", "fd00::1/118", 64),
    ("large mask IPv4", "192.168.1.1/8", 256),
    ("large mask IPv6", "fd00::1/12", 256),
]


@pytest.mark.parametrize(("cidr", "offset"), [row[1:] for row in IP_OFFSET_TABLE], ids=[row[0] for row in IP_OFFSET_TABLE])
def test_ip_range_offset_matches_upstream_table(cidr, offset):
    assert IPRange.parse(cidr).offset == offset


# The same table as raw RangeSize inputs (size includes network and broadcast addresses).
IP_OFFSET_BY_SIZE = [
    ("/32 size 1", 1, 0),
    ("/30 size 4", 4, 0),
    ("/28 size 16", 16, 0),
    ("/27 size 32", 32, 16),
    ("/22 size 1024", 1024, 64),
    ("/20 size 4096", 4096, 256),
    ("/8 size 2^24", 1 << 24, 256),
    ("/12 IPv6 size 2^116", 1 << 116, 256),
]


@pytest.mark.parametrize(("size", "offset"), [row[1:] for row in IP_OFFSET_BY_SIZE], ids=[row[0] for row in IP_OFFSET_BY_SIZE])
def test_ip_range_offset_by_size(size, offset):
    assert ip_range_offset(size) == offset


@pytest.mark.parametrize("cidr", ["10.96.0.0/24", "10.96.0.0/12", "fd00::/112", "192.168.1.0/27"], ids=["v4-24", "v4-12", "v6-112", "v4-27"])
def test_without_static_subrange_the_offset_is_zero(cidr):
    # ServiceIPStaticSubrange=false: the whole range is dynamic
    assert IPRange.parse(cidr, static_subrange=False).offset == 0


# ---- calculateRangeOffset, NodePorts (upstream portallocator Test_calculateRangeOffset) -------

PORT_OFFSET_TABLE = [
    ("default size 2768", 2768, 86),
    ("very small size 10", 10, 0),
    ("small size 16", 16, 0),
    ("medium size 128", 128, 16),
    ("large size 2048", 2048, 64),
    ("large size 4096", 4096, 128),
    ("very large size 8192", 8192, 128),
]


@pytest.mark.parametrize(("size", "offset"), [row[1:] for row in PORT_OFFSET_TABLE], ids=[row[0] for row in PORT_OFFSET_TABLE])
def test_port_range_offset_matches_upstream_table(size, offset):
    assert port_range_offset(size) == offset
    assert PortRange(30000, size).offset() == offset


def test_port_range_offset_without_static_subrange_is_zero():
    assert PortRange(30000, 2768).offset(static_subrange=False) == 0
    assert port_range_offset(2768, static_subrange=False) == 0


def test_default_node_port_range_static_band_is_30000_to_30085():
    port_range = PortRange.parse("30000-32767")
    assert (port_range.base, port_range.size) == (30000, 2768)
    assert port_range.offset() == 86
    # static band = slots [0, 86) = 30000..30085; dynamic band starts at 30086
    assert port_range.slot_of(30085) == 85
    assert port_range.slot_of(30086) == 86


# ---- usable slots per CIDR (bitmap arithmetic, §1.2) --------------------------------------------

USABLE_SLOTS = [
    # (id, cidr, slots, first usable, last usable) -- None when nothing is usable
    ("v4 /32 TestAllocateTiny", "192.168.1.0/32", 0, None, None),
    ("v4 /31 derived", "192.168.1.0/31", 0, None, None),
    ("v4 /30 TestAllocateSmall", "192.168.1.240/30", 2, "192.168.1.241", "192.168.1.242"),
    ("v4 /28 derived", "192.168.1.0/28", 14, "192.168.1.1", "192.168.1.14"),
    ("v4 /24", "10.96.0.0/24", 254, "10.96.0.1", "10.96.0.254"),
    ("v4 /12", "10.96.0.0/12", (1 << 20) - 2, "10.96.0.1", "10.111.255.254"),
    ("v6 /128 derived", "fd00::/128", 0, None, None),
    ("v6 /127 derived", "fd00::/127", 1, "fd00::1", "fd00::1"),
    ("v6 /126 derived", "fd00::/126", 3, "fd00::1", "fd00::3"),
    # "IPv6 clusterIP range is capped to 2^16 and consider the broadcast address as valid"
    ("v6 /112 TestClusterIPMetrics", "2001:db8::/112", 65535, "2001:db8::1", "2001:db8::ffff"),
    ("v6 /64 capped at 65535", "2001:db8::/64", 65535, "2001:db8::1", "2001:db8::ffff"),
]


@pytest.mark.parametrize(("cidr", "slots", "first", "last"), [row[1:] for row in USABLE_SLOTS], ids=[row[0] for row in USABLE_SLOTS])
def test_usable_slots(cidr, slots, first, last):
    ip_range = IPRange.parse(cidr)
    assert ip_range.slots == slots
    if slots == 0:
        return
    assert ip_range.ip_at(0) == first
    assert ip_range.ip_at(slots - 1) == last
    assert ip_range.slot_of(first) == 0
    assert ip_range.slot_of(last) == slots - 1


OUT_OF_RANGE = [
    # (id, cidr, ip): contains(ip) is false -> never usable
    ("v4 network address", "10.96.0.0/24", "10.96.0.0"),
    ("v4 broadcast", "10.96.0.0/24", "10.96.0.255"),
    ("v4 outside", "10.96.0.0/24", "10.96.1.1"),
    ("v4 /30 network", "192.168.1.240/30", "192.168.1.240"),
    ("v4 /30 broadcast", "192.168.1.240/30", "192.168.1.243"),
    ("v4 /32 only address", "192.168.1.0/32", "192.168.1.0"),
    ("v6 network address", "2001:db8::/112", "2001:db8::"),
    ("v6 outside", "2001:db8::/112", "2001:db8::1:0"),
    ("v6 /64 above network+65535", "2001:db8::/64", "2001:db8::1:0"),
    ("v6 /127 network", "fd00::/127", "fd00::"),
    ("wrong family", "10.96.0.0/24", "fd00::1"),
    ("not an IP", "10.96.0.0/24", "10.96.0.x"),
]


@pytest.mark.parametrize(("cidr", "ip"), [row[1:] for row in OUT_OF_RANGE], ids=[row[0] for row in OUT_OF_RANGE])
def test_addresses_outside_the_usable_slots(cidr, ip):
    assert IPRange.parse(cidr).slot_of(ip) is None


@pytest.mark.parametrize(("cidr", "family"), [("10.96.0.0/12", "IPv4"), ("fd00:10:96::/112", "IPv6")], ids=["v4", "v6"])
def test_family(cidr, family):
    assert IPRange.parse(cidr).family == family


BANDS = [
    # (id, cidr, last static IP, first dynamic IP) -- §1.3 worked examples
    ("10.0.0.0/24", "10.0.0.0/24", "10.0.0.16", "10.0.0.17"),
    ("10.96.0.0/12", "10.96.0.0/12", "10.96.1.0", "10.96.1.1"),
    ("10.96.0.0/16", "10.96.0.0/16", "10.96.1.0", "10.96.1.1"),
    ("10.96.0.0/20", "10.96.0.0/20", "10.96.1.0", "10.96.1.1"),
    ("/25 TestAllocateReserved", "192.168.1.0/25", "192.168.1.16", "192.168.1.17"),
]


@pytest.mark.parametrize(("cidr", "last_static", "first_dynamic"), [row[1:] for row in BANDS], ids=[row[0] for row in BANDS])
def test_static_band_boundary(cidr, last_static, first_dynamic):
    ip_range = IPRange.parse(cidr)
    assert ip_range.ip_at(ip_range.offset - 1) == last_static
    assert ip_range.ip_at(ip_range.offset) == first_dynamic


@pytest.mark.parametrize(("cidr", "ip"), [("10.96.0.0/12", "10.96.0.1"), ("10.0.0.0/24", "10.0.0.1"), ("fd00:10:96::/112", "fd00:10:96::1")],
                         ids=["default-12", "default-flag", "v6"])
def test_kubernetes_service_ip_is_network_plus_one(cidr, ip):
    # GetIndexedIP(primaryRange, 1); it is the first address of the static band
    ip_range = IPRange.parse(cidr)
    assert ip_range.first_ip() == ip
    assert ip_range.slot_of(ip) == 0 < ip_range.offset


# ---- --service-cluster-ip-range checks (§1.1) ---------------------------------------------------

FLAG_CHECKS = [
    # (id, cidr, expected message or None)
    ("v4 /12 accepted", "10.96.0.0/12", None),
    ("v4 /24 accepted", "10.0.0.0/24", None),
    ("v4 /29 smallest accepted", "10.96.0.0/29", None),
    ("v4 /30 too small", "10.96.0.0/30", "the service cluster IP range must be at least 8 IP addresses"),
    ("v4 /32 too small", "10.96.0.1/32", "the service cluster IP range must be at least 8 IP addresses"),
    ("v6 /125 smallest accepted", "fd00::/125", None),
    ("v6 /126 too small", "fd00::/126", "the service cluster IP range must be at least 8 IP addresses"),
    ("v6 /108 largest accepted", "fd00::/108", None),
    ("v4 /11 too large", "10.0.0.0/11",
     "specified --service-cluster-ip-range is too large; for 32-bit addresses, the mask must be >= 12"),
    ("v4 /8 too large", "10.0.0.0/8",
     "specified --service-cluster-ip-range is too large; for 32-bit addresses, the mask must be >= 12"),
    ("v6 /107 too large", "fd00::/107",
     "specified --service-cluster-ip-range is too large; for 128-bit addresses, the mask must be >= 108"),
    ("v6 /64 too large for the bitmap", "fd00::/64",
     "specified --service-cluster-ip-range is too large; for 128-bit addresses, the mask must be >= 108"),
]


@pytest.mark.parametrize(("cidr", "message"), [row[1:] for row in FLAG_CHECKS], ids=[row[0] for row in FLAG_CHECKS])
def test_service_cidr_flag_checks(cidr, message):
    assert check_service_cidr_flag(cidr) == message


def test_secondary_service_cidr_flag_names_its_index():
    # validateMaxCIDRRange(options.SecondaryServiceClusterIPRange, maxCIDRBits, "--service-cluster-ip-range[1]")
    assert check_service_cidr_flag("fd00::/64", flag="--service-cluster-ip-range[1]") == (
        "specified --service-cluster-ip-range[1] is too large; for 128-bit addresses, the mask must be >= 108")


@pytest.mark.parametrize("cidr", ["not-a-cidr", "10.96.0.0/33", "", "10.96.0.256/24"], ids=["word", "bad-mask", "empty", "bad-octet"])
def test_unparsable_service_cidr_flag_is_rejected(cidr):
    assert check_service_cidr_flag(cidr) is not None


# ---- --service-node-port-range (utilnet.ParsePortRange) -----------------------------------------

PORT_RANGE_FORMS = [
    # (id, text, base, size, str)
    ("min-max", "30000-32767", 30000, 2768, "30000-32767"),
    ("min+offset", "30000+2767", 30000, 2768, "30000-32767"),
    ("single port", "30000", 30000, 1, "30000-30000"),
    ("surrounding spaces", " 30000-30063 ", 30000, 64, "30000-30063"),
    ("equal ends", "8080-8080", 8080, 1, "8080-8080"),
    ("upper limit", "1-65535", 1, 65535, "1-65535"),
]


@pytest.mark.parametrize(("text", "base", "size", "rendered"), [row[1:] for row in PORT_RANGE_FORMS], ids=[row[0] for row in PORT_RANGE_FORMS])
def test_port_range_parse_forms(text, base, size, rendered):
    port_range = PortRange.parse(text)
    assert (port_range.base, port_range.size) == (base, size)
    assert str(port_range) == rendered


PORT_RANGE_ERRORS = [
    # (id, text, message) -- k8s.io/apimachinery/pkg/util/net/port_range.go Set()
    ("both notations", "30000-30010+5", "unable to parse port range: 30000-30010+5"),
    ("end above 65535", "30000-70000", "the port range cannot be greater than 65535: 30000-70000"),
    ("offset above 65535", "65000+1000", "the port range cannot be greater than 65535: 65000+1000"),
    ("end before start", "32767-30000", "end port cannot be less than start port: 32767-30000"),
]


@pytest.mark.parametrize(("text", "message"), [row[1:] for row in PORT_RANGE_ERRORS], ids=[row[0] for row in PORT_RANGE_ERRORS])
def test_port_range_parse_errors(text, message):
    with pytest.raises(ValueError) as info:
        PortRange.parse(text)
    assert str(info.value) == message


@pytest.mark.parametrize("text", ["abc", "30000-abc", "-5", "30000-"], ids=["word", "bad-end", "negative", "open-end"])
def test_port_range_unparsable(text):
    with pytest.raises(ValueError):
        PortRange.parse(text)


PORT_SLOTS = [
    # (id, port, slot or None)
    ("base", 30000, 0),
    ("last", 32767, 2767),
    ("below", 29999, None),
    ("above", 32768, None),
    ("negative", -2, None),
]


@pytest.mark.parametrize(("port", "slot"), [row[1:] for row in PORT_SLOTS], ids=[row[0] for row in PORT_SLOTS])
def test_port_range_slots(port, slot):
    assert PortRange.parse("30000-32767").slot_of(port) == slot
