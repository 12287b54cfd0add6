"""kernel/ndp.py's pure frame decisions, with the frames' fields written out by hand and the
ICMPv6 checksum verified by this test's own one's-complement sum (RFC 4443 section 2.3); the
client kernel's acceptance is tests/kernel/test_loadbalancer_ndp.py's."""

from __future__ import annotations

import ipaddress

from kubesvc.kernel.ndp import link_local_address, neighbour_advertisement, unsolicited_advertisement

OURS = bytes.fromhex("0200000000aa")
ASKER_MAC = bytes.fromhex("0200000000bb")
ASKER = ipaddress.IPv6Address("fd00:81::100")
VIP = "fd00:81::50"
LINK_LOCAL = ipaddress.IPv6Address("fe80::aa")


def ones_complement_ok(source: bytes, destination: bytes, icmp: bytes) -> bool:
    data = source + destination + len(icmp).to_bytes(4, "big") + b"\x00\x00\x00\x3a" + icmp
    total = sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return total == 0xFFFF


def solicitation(target: str, source: ipaddress.IPv6Address = ASKER, hop_limit: int = 255, eth_source: bytes = ASKER_MAC) -> bytes:
    group = bytes.fromhex("ff02" + "00" * 8 + "0001ff") + ipaddress.IPv6Address(target).packed[-3:]  # solicited-node ff02::1:ffXX:XXXX
    icmp = bytes([135, 0, 0, 0]) + b"\x00" * 4 + ipaddress.IPv6Address(target).packed + bytes([1, 1]) + eth_source
    ip = bytes.fromhex("60000000") + len(icmp).to_bytes(2, "big") + bytes([58, hop_limit]) + source.packed + group
    return b"\x33\x33" + group[-4:] + eth_source + b"\x86\xdd" + ip + icmp


def fields(frame: bytes) -> dict:
    eth_dst, eth_src, ethertype = frame[:6], frame[6:12], frame[12:14]
    ip, icmp = frame[14:54], frame[54:]
    return {"eth_dst": eth_dst, "eth_src": eth_src, "ethertype": ethertype, "hop_limit": ip[7], "next_header": ip[6],
            "payload_length": int.from_bytes(ip[4:6], "big"), "src": ipaddress.IPv6Address(ip[8:24]), "dst": ipaddress.IPv6Address(ip[24:40]),
            "type": icmp[0], "code": icmp[1], "flags": icmp[4], "target": ipaddress.IPv6Address(icmp[8:24]), "option": icmp[24:32],
            "checksum_ok": ones_complement_ok(ip[8:24], ip[24:40], icmp)}


def test_a_solicitation_for_our_address_is_answered_to_the_asker_solicited_and_override():
    got = fields(neighbour_advertisement(solicitation(VIP), OURS, {"fd00:81:0::50"}, LINK_LOCAL))
    assert got == {"eth_dst": ASKER_MAC, "eth_src": OURS, "ethertype": b"\x86\xdd", "hop_limit": 255, "next_header": 58,
                   "payload_length": 32, "src": LINK_LOCAL, "dst": ASKER, "type": 136, "code": 0, "flags": 0x60,
                   "target": ipaddress.IPv6Address(VIP), "option": bytes([2, 1]) + OURS, "checksum_ok": True}


def test_a_duplicate_address_probe_is_answered_to_all_nodes_not_solicited():
    got = fields(neighbour_advertisement(solicitation(VIP, source=ipaddress.IPv6Address("::")), OURS, {VIP}))
    assert (got["eth_dst"], got["dst"], got["flags"], got["src"], got["checksum_ok"]) == \
        (bytes.fromhex("333300000001"), ipaddress.IPv6Address("ff02::1"), 0x20, ipaddress.IPv6Address(VIP), True)


def test_others_solicitations_and_our_own_are_not_answered():
    assert neighbour_advertisement(solicitation("fd00:81::51"), OURS, {VIP}) is None  # not ours
    assert neighbour_advertisement(solicitation(VIP, hop_limit=64), OURS, {VIP}) is None  # crossed a router: invalid
    assert neighbour_advertisement(solicitation(VIP, eth_source=OURS), OURS, {VIP}) is None  # our own
    assert neighbour_advertisement(b"\x00" * 40, OURS, {VIP}) is None


def test_an_unsolicited_advertisement_goes_to_all_nodes_with_override():
    got = fields(unsolicited_advertisement(OURS, VIP, LINK_LOCAL))
    assert (got["eth_dst"], got["dst"], got["src"], got["flags"], got["target"], got["option"], got["hop_limit"], got["checksum_ok"]) == \
        (bytes.fromhex("333300000001"), ipaddress.IPv6Address("ff02::1"), LINK_LOCAL, 0x20, ipaddress.IPv6Address(VIP),
         bytes([2, 1]) + OURS, 255, True)


def test_the_link_local_address_is_read_from_if_inet6():
    table = ("fd000081000000000000000000000011 02 40 00 80     eth0\n"
             "fe8000000000000000aabbfffecc0011 02 40 20 80     eth0\n"
             "fe800000000000000000000000000001 03 40 20 80     eth1\n")
    assert link_local_address("eth0", table) == ipaddress.IPv6Address("fe80::aa:bbff:fecc:11")
    assert link_local_address("eth9", table) is None
