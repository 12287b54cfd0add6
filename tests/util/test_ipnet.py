"""util/ipnet: netutils' sloppy parsing, families, host:port, port ranges and CIDR pairs."""

from __future__ import annotations

import ipaddress

import pytest

from kubesvc.util import ipnet

SLOPPY_IPS = [
    # (id, text, parsed or None)
    ("plain v4", "10.0.0.1", "10.0.0.1"),
    ("leading zeros are decimal", "010.000.000.001", "10.0.0.1"),
    ("octet too large", "256.0.0.1", None),
    # Go's dtoi takes any number of leading zeros; Python's int() refuses over 4300 digits (a 500 once)
    ("thousands of leading zeros", "10.96.0." + "0" * 5000 + "9", "10.96.0.9"),
    ("thousands of digits", "10.96.0." + "1" * 5000, None),
    ("leading zeros, too large", "10.96.0.0256", None),
    ("three octets", "10.0.1", None),
    ("v6", "fd00::1", "fd00::1"),
    ("v6 long form", "fd00:0:0:0:0:0:0:1", "fd00::1"),
    ("mapped v4 is v4", "::ffff:1.2.3.4", "1.2.3.4"),
    ("mapped with leading zeros", "::ffff:01.2.3.4", "1.2.3.4"),
    ("zone refused", "fe80::1%eth0", None),
    ("empty", "", None),
    ("name", "localhost", None),
]


@pytest.mark.parametrize(("text", "expected"), [r[1:] for r in SLOPPY_IPS], ids=[r[0] for r in SLOPPY_IPS])
def test_parse_ip_sloppy(text, expected):
    parsed = ipnet.parse_ip_sloppy(text)
    assert (str(parsed) if parsed is not None else None) == expected


@pytest.mark.parametrize(("text", "canonical"), [
    ("10.0.0.1", "10.0.0.1"), ("010.000.000.001", "10.0.0.1"), ("::ffff:1.2.3.4", "1.2.3.4"),
    ("FD00:0:0::1", "fd00::1"), ("not-an-ip", "not-an-ip"), ("256.1.1.1", "256.1.1.1"),
])
def test_canonical_address(text, canonical):
    assert ipnet.canonical_address(text) == canonical


SLOPPY_CIDRS = [
    ("plain", "10.0.0.0/8", "10.0.0.0/8"),
    ("host bits cleared", "10.1.2.3/8", "10.0.0.0/8"),
    ("leading zeros", "010.0.0.0/8", "10.0.0.0/8"),
    ("v6", "fd00::/64", "fd00::/64"),
    ("mapped keeps 128-bit mask", "::ffff:1.2.3.0/120", "::ffff:102:300/120"),
    ("mask too long", "10.0.0.0/33", None),
    ("no mask", "10.0.0.0", None),
    ("signed mask", "10.0.0.0/+8", None),
]


@pytest.mark.parametrize(("text", "expected"), [r[1:] for r in SLOPPY_CIDRS], ids=[r[0] for r in SLOPPY_CIDRS])
def test_parse_cidr_sloppy(text, expected):
    parsed = ipnet.parse_cidr_sloppy(text)
    assert (str(parsed) if parsed is not None else None) == expected


@pytest.mark.parametrize(("text", "family"), [
    ("10.0.0.1", "IPv4"), ("fd00::1", "IPv6"), ("::ffff:1.2.3.4", "IPv4"), ("nope", ""),
])
def test_ip_family(text, family):
    assert ipnet.ip_family(text) == family


@pytest.mark.parametrize(("text", "version"), [
    ("10.0.0.1", 4), ("010.000.0.1", 4), ("256.0.0.1", None), ("fd00::1", 6), ("::ffff:1.2.3.4", 4),
    ("::ffff:01.2.3.4", 4), ("fe80::1%eth0", None), ("1.2.3.4:80", None), ("", None), ("nope", None),
])
def test_ip_version(text, version):
    assert ipnet.ip_version(text) == version
    assert ipnet.ip_version(text) == version  # cached path gives the same


@pytest.mark.parametrize(("text", "family"), [
    ("10.0.0.0/8", "IPv4"), ("fd00::/64", "IPv6"), ("::ffff:1.2.3.0/120", "IPv4"), ("10.0.0.0", ""),
])
def test_cidr_family(text, family):
    assert ipnet.cidr_family(text) == family


def test_family_constants():
    assert (ipnet.IPV4, ipnet.IPV6) == (4, 6)
    assert (ipnet.IPV4_PROTOCOL, ipnet.IPV6_PROTOCOL) == ("IPv4", "IPv6")
    assert ipnet.FAMILY_NAMES[ipaddress.ip_address("fd00::1").version] == ipnet.IPV6_PROTOCOL
    assert ipnet.is_dual_stack(["IPv6", "IPv4"]) and not ipnet.is_dual_stack(["IPv4", "IPv4"])


@pytest.mark.parametrize(("host", "port", "joined"), [
    ("10.0.0.1", 80, "10.0.0.1:80"), ("fd00::1", 443, "[fd00::1]:443"), ("node-a", "10250", "node-a:10250"), ("", 9, ":9"),
])
def test_join_host_port(host, port, joined):
    assert ipnet.join_host_port(host, port) == joined
    assert ipnet.split_host_port(joined) == (host, str(port))


@pytest.mark.parametrize(("text", "reason"), [
    ("10.0.0.1", "missing port in address"),
    ("fd00::1:80", "too many colons in address"),
    ("[fd00::1", "missing ']' in address"),
    ("[fd00::1]", "missing port in address"),
    ("[fd00::1]80", "missing port in address"),
    ("a]:80", "unexpected '[' or ']' in address"),
])
def test_split_host_port_errors(text, reason):
    with pytest.raises(ValueError) as info:
        ipnet.split_host_port(text)
    assert str(info.value) == reason


PORT_RANGES = [
    # (id, text, (base, size) or error text) -- utilnet.ParsePortRange
    ("empty", "", (0, 0)),
    ("single", "8080", (8080, 1)),
    ("hyphen", "30000-32767", (30000, 2768)),
    ("plus", "30000+2767", (30000, 2768)),
    ("spaces", " 1-2 ", (1, 2)),
    ("both notations", "1-2+3", "unable to parse port range: 1-2+3"),
    ("above 65535", "65000-70000", "the port range cannot be greater than 65535: 65000-70000"),
    ("reversed", "10-5", "end port cannot be less than start port: 10-5"),
    ("Atoi error passed on", "1-x", 'strconv.Atoi: parsing "x": invalid syntax'),
    ("negative", "-5", 'strconv.Atoi: parsing "": invalid syntax'),
]


@pytest.mark.parametrize(("text", "expected"), [r[1:] for r in PORT_RANGES], ids=[r[0] for r in PORT_RANGES])
def test_parse_port_range(text, expected):
    if isinstance(expected, tuple):
        assert ipnet.parse_port_range(text) == expected
    else:
        with pytest.raises(ValueError) as info:
            ipnet.parse_port_range(text)
        assert str(info.value) == expected


CIDR_PAIRS = [
    ("one", "10.0.0.0/16", ["10.0.0.0/16"]),
    ("dual", "10.0.0.0/16, fd00::/108", ["10.0.0.0/16", "fd00::/108"]),
    ("empty items ignored", "fd00::/108,,", ["fd00::/108"]),
    ("none", "", "specify one CIDR, or two of different IP families"),
    ("three", "10.0.0.0/16,fd00::/108,10.1.0.0/16", "specify one CIDR, or two of different IP families"),
    ("same family", "10.0.0.0/16,10.1.0.0/16", "the two CIDRs must be of different IP families"),
    ("host bits", "10.0.0.1/16", "invalid CIDR address: 10.0.0.1/16: 10.0.0.1/16 has host bits set"),
]


@pytest.mark.parametrize(("text", "expected"), [r[1:] for r in CIDR_PAIRS], ids=[r[0] for r in CIDR_PAIRS])
def test_parse_cidr_pair(text, expected):
    if isinstance(expected, list):
        assert [str(n) for n in ipnet.parse_cidr_pair(text)] == expected
    else:
        with pytest.raises(ValueError) as info:
            ipnet.parse_cidr_pair(text)
        assert str(info.value) == expected


IP_PAIRS = [
    ("one", "10.0.0.7", ["10.0.0.7"]),
    ("dual", "10.0.0.7, fd00::7", ["10.0.0.7", "fd00::7"]),
    ("sloppy", "010.0.0.7,::ffff:1.2.3.4", "the two IPs must be of different IP families"),
    ("leading zeros read as decimal", "010.0.0.7", ["10.0.0.7"]),
    ("none", ",", "specify one IP, or two of different IP families"),
    ("three", "10.0.0.7,fd00::7,10.0.0.8", "specify one IP, or two of different IP families"),
    ("same family", "fd00::7,fd00::8", "the two IPs must be of different IP families"),
    ("zone", "fe80::1%eth0", "invalid IP address: fe80::1%eth0"),
    ("a CIDR is no IP", "10.0.0.0/8", "invalid IP address: 10.0.0.0/8"),
]


@pytest.mark.parametrize(("text", "expected"), [r[1:] for r in IP_PAIRS], ids=[r[0] for r in IP_PAIRS])
def test_parse_ip_pair(text, expected):
    """The one pair parser behind parse_cidr_pair, for IPs."""
    if isinstance(expected, list):
        assert [str(ip) for ip in ipnet.parse_ip_pair(text)] == expected
    else:
        with pytest.raises(ValueError) as info:
            ipnet.parse_ip_pair(text)
        assert str(info.value) == expected


def test_parse_cidr_pair_loose_keeps_host_bits_out():
    assert [str(n) for n in ipnet.parse_cidr_pair("10.0.0.1/16", strict=False)] == ["10.0.0.0/16"]


@pytest.mark.parametrize(("text", "expected"), [
    ("10.0.0.0/8", "10.0.0.0/8"), ("010.0.0.1/8", "10.0.0.0/8"), ("fd00::/64", "fd00::/64"),
    ("::ffff:10.0.0.0/104", "10.0.0.0/8"), ("::ffff:10.1.2.3/128", "10.1.2.3/32"), ("::ffff:0:0/96", "0.0.0.0/0"),
    ("::ffff:0:0/95", "::fffe:0:0/95"),  # shorter than 96: the masked address is no longer mapped
    ("10.0.0.0", None),
])
def test_parse_cidr_go(text, expected):
    """IPFamilyOfCIDR and IPNet.String() of ParseCIDRSloppy's network."""
    parsed = ipnet.parse_cidr_go(text)
    assert (str(parsed) if parsed is not None else None) == expected
    if parsed is not None:
        assert ipnet.cidr_family(text) == ipnet.FAMILY_NAMES[parsed.version]


def test_to_cidr():
    assert ipnet.to_cidr("10.0.0.1") == "10.0.0.1/32"
    assert ipnet.to_cidr("fd00::1") == "fd00::1/128"
