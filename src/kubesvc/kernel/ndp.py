"""NDP for IPv6 LoadBalancer addresses the node does not own: answering Neighbour Solicitations
for them and announcing them with unsolicited Neighbour Advertisements, on a raw packet socket,
as MetalLB's speaker does in L2 mode for IPv6 (internal/layer2/ndp.go) beside ARP for IPv4
(kernel/arp.py, which says why no address is put on an interface).

Neighbour Discovery (RFC 4861) is ICMPv6 inside IPv6 with hop limit 255 (a receiver drops any
other: the packet cannot have crossed a router):

* A **Neighbour Solicitation** (type 135) asks who has a target address; it is sent to the
  target's solicited-node multicast group (``ff02::1:ffXX:XXXX``, Ethernet ``33:33:ff:XX:XX:XX``)
  and carries the asker's link-layer address as an option (type 1). Duplicate Address Detection
  asks from the unspecified address ``::``.
* A **Neighbour Advertisement** (type 136) answers: flags Router (0x80), Solicited (0x40),
  Override (0x20), the target, and our link-layer address as an option (type 2). To a
  solicitation it goes back to the asker, Solicited and Override set (to a DAD probe: to all
  nodes, ``ff02::1``, not Solicited, as section 7.2.4 says). Unsolicited (a new holder's
  announcement, section 7.2.6) it goes to all nodes with Override set, so every neighbour that
  caches the address replaces the previous holder's entry.
* The ICMPv6 checksum covers a pseudo-header (source, destination, length, next header 58).

``neighbour_advertisement`` and ``unsolicited_advertisement`` are pure. ``NdpSocket`` is the
socket (kernel/packetsocket.py, ``ETH_P_IPV6``, receiving all multicast: the
solicitations go to groups the kernel did not join for an address it does not have); create it
in the node's network namespace. Its advertisements come from the interface's link-local
address (as MetalLB's, whose ``ndp.Conn`` is bound to it), else from the target itself.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Callable, Collection
from pathlib import Path

from kubesvc.kernel.packetsocket import PacketSocket, field_filter

ETH_P_IPV6 = 0x86DD
ICMPV6 = 58
HOP_LIMIT = 255
NEIGHBOUR_SOLICITATION, NEIGHBOUR_ADVERTISEMENT = 135, 136
OPTION_SOURCE_LLADDR, OPTION_TARGET_LLADDR = 1, 2
FLAG_SOLICITED, FLAG_OVERRIDE = 0x40, 0x20
ALL_NODES = ipaddress.IPv6Address("ff02::1")
UNSPECIFIED = ipaddress.IPv6Address("::")
SOL_PACKET, PACKET_ADD_MEMBERSHIP, PACKET_MR_ALLMULTI = 263, 1, 2
_ETH = struct.Struct("!6s6sH")
_IPV6 = struct.Struct("!IHBB16s16s")  # version/class/flow, payload length, next header, hop limit, source, destination
_ND = struct.Struct("!BBHI16s")  # type, code, checksum, flags/reserved, target


def multicast_mac(address: ipaddress.IPv6Address) -> bytes:
    """The Ethernet address of an IPv6 multicast group (RFC 2464: 33:33 and its last 32 bits)."""
    return b"\x33\x33" + address.packed[-4:]


def checksum(source: bytes, destination: bytes, message: bytes) -> int:
    """The ICMPv6 checksum of ``message`` (its checksum field zero) between the two addresses."""
    data = source + destination + struct.pack("!I3xB", len(message), ICMPV6) + message
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _advertisement(mac: bytes, source: ipaddress.IPv6Address, destination: ipaddress.IPv6Address, dst_mac: bytes,
                   target: ipaddress.IPv6Address, flags: int) -> bytes:
    option = struct.pack("!BB6s", OPTION_TARGET_LLADDR, 1, mac)
    message = _ND.pack(NEIGHBOUR_ADVERTISEMENT, 0, 0, flags << 24, target.packed) + option
    message = message[:2] + struct.pack("!H", checksum(source.packed, destination.packed, message)) + message[4:]
    header = _IPV6.pack(6 << 28, len(message), ICMPV6, HOP_LIMIT, source.packed, destination.packed)
    return _ETH.pack(dst_mac, mac, ETH_P_IPV6) + header + message


def neighbour_advertisement(frame: bytes, mac: bytes, addresses: Collection[str],
                            source: ipaddress.IPv6Address | None = None) -> bytes | None:
    """The answer to ``frame`` when it is a valid Neighbour Solicitation for one of
    ``addresses`` (IPv6 text, compared as addresses) from someone else, else None."""
    if len(frame) < _ETH.size + _IPV6.size + _ND.size:
        return None
    _, eth_source, ethertype = _ETH.unpack_from(frame)
    _, length, next_header, hop_limit, ip_source, _ = _IPV6.unpack_from(frame, _ETH.size)
    if ethertype != ETH_P_IPV6 or next_header != ICMPV6 or hop_limit != HOP_LIMIT or eth_source == mac or length < _ND.size:
        return None
    kind, code, _, _, target_bytes = _ND.unpack_from(frame, _ETH.size + _IPV6.size)
    if kind != NEIGHBOUR_SOLICITATION or code != 0:
        return None
    target = ipaddress.IPv6Address(target_bytes)
    if target not in {ipaddress.IPv6Address(a) for a in addresses}:
        return None
    asker = ipaddress.IPv6Address(ip_source)
    if asker == UNSPECIFIED:  # Duplicate Address Detection: tell everyone, not solicited
        return _advertisement(mac, source or target, ALL_NODES, multicast_mac(ALL_NODES), target, FLAG_OVERRIDE)
    return _advertisement(mac, source or target, asker, eth_source, target, FLAG_SOLICITED | FLAG_OVERRIDE)


def unsolicited_advertisement(mac: bytes, address: str, source: ipaddress.IPv6Address | None = None) -> bytes:
    """The announcement of ``address`` at ``mac`` to all nodes (Override set)."""
    target = ipaddress.IPv6Address(address)
    return _advertisement(mac, source or target, ALL_NODES, multicast_mac(ALL_NODES), target, FLAG_OVERRIDE)


def link_local_address(ifname: str, if_inet6: str | None = None) -> ipaddress.IPv6Address | None:
    """The link-local address of ``ifname`` in the calling thread's network namespace
    (``/proc/thread-self/net/if_inet6``: address, index, prefix length, scope, flags, name; not
    ``/proc/net``, which is the main thread's), or None."""
    text = if_inet6 if if_inet6 is not None else Path("/proc/thread-self/net/if_inet6").read_text()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 6 and fields[5] == ifname and int(fields[3], 16) == 0x20:
            return ipaddress.IPv6Address(bytes.fromhex(fields[0]))
    return None


class NdpSocket(PacketSocket):
    """A raw IPv6 packet socket on ``ifname`` of the current network namespace, for NDP."""

    def __init__(self, ifname: str):
        super().__init__(ifname, ETH_P_IPV6)
        try:
            # only Neighbour Solicitations: next header ICMPv6, hop limit 255, ICMPv6 type 135
            # (offsets from the Ethernet header: IPv6 at 14, ICMPv6 at 54)
            self.attach_filter(field_filter([(1, 20, ICMPV6), (1, 21, HOP_LIMIT), (1, 54, NEIGHBOUR_SOLICITATION)]))
            membership = struct.pack("iHH8s", socket.if_nametoindex(ifname), PACKET_MR_ALLMULTI, 0, b"")
            self.sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, membership)
            self.source = link_local_address(ifname)
        except OSError:
            self.close()
            raise

    async def announce(self, address: str) -> None:
        self.send(unsolicited_advertisement(self.mac, address, self.source))

    async def serve(self, addresses: Callable[[], Collection[str]]) -> None:
        """Answer solicitations for ``addresses()`` (IPv6 ones; asked again for each) until cancelled."""

        def reply(frame: bytes) -> bytes | None:
            wanted = [a for a in addresses() if ":" in a]
            return neighbour_advertisement(frame, self.mac, wanted, self.source) if wanted else None

        await self.answer(reply)
