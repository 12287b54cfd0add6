"""kernel/arp.py's pure frame decisions, with frames written out byte by byte."""

from __future__ import annotations

from kubesvc.kernel.arp import arp_reply, gratuitous_arp

OURS = bytes.fromhex("0200000000aa")
ASKER = bytes.fromhex("0200000000bb")
VIP = "192.168.81.50"


def request(sender_ip: bytes, target_ip: bytes, sha: bytes = ASKER) -> bytes:
    return (b"\xff" * 6 + sha + b"\x08\x06" + bytes.fromhex("0001 0800 06 04 0001".replace(" ", "")) + sha + sender_ip
            + b"\x00" * 6 + target_ip)


def test_a_request_for_our_address_is_answered_to_the_asker():
    reply = arp_reply(request(bytes([192, 168, 81, 100]), bytes([192, 168, 81, 50])), OURS, {VIP})
    assert reply == (ASKER + OURS + b"\x08\x06" + bytes.fromhex("0001080006040002") + OURS + bytes([192, 168, 81, 50])
                     + ASKER + bytes([192, 168, 81, 100]))


def test_probes_are_answered_announcements_and_others_are_not():
    assert arp_reply(request(b"\x00" * 4, bytes([192, 168, 81, 50])), OURS, {VIP}) is not None  # RFC 5227 probe
    assert arp_reply(request(bytes([192, 168, 81, 50]), bytes([192, 168, 81, 50])), OURS, {VIP}) is None  # an announcement
    assert arp_reply(request(bytes([192, 168, 81, 100]), bytes([192, 168, 81, 51])), OURS, {VIP}) is None  # not ours
    assert arp_reply(request(bytes([192, 168, 81, 100]), bytes([192, 168, 81, 50]), sha=OURS), OURS, {VIP}) is None  # our own
    assert arp_reply(b"\x00" * 20, OURS, {VIP}) is None


def test_gratuitous_pair_is_broadcast_with_sender_equal_target():
    ip = bytes([192, 168, 81, 50])
    req, rep = gratuitous_arp(OURS, VIP)
    assert req == b"\xff" * 6 + OURS + b"\x08\x06" + bytes.fromhex("0001080006040001") + OURS + ip + b"\x00" * 6 + ip
    assert rep == b"\xff" * 6 + OURS + b"\x08\x06" + bytes.fromhex("0001080006040002") + OURS + ip + b"\xff" * 6 + ip
