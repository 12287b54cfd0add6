"""ARP for LoadBalancer addresses the node does not own: answering requests for them and
announcing them gratuitously, on a raw packet socket, as MetalLB's speaker does in L2 mode
(internal/layer2/arp.go; Cilium's L2 announcer does the same from the agent).

Why answer ARP here instead of adding the address to an interface (kube-ipvs0 style): an
address on an interface is answered by the kernel for as long as it is there, also after the
process that put it there died, and on every node that has it (``arp_ignore=0`` answers for
any local address on any link). Answering from the announcer means exactly the elected node
answers, and a killed announcer stops answering at once: nothing stale is left behind to be
cleaned before another node can take over. The node proxy already accepts the traffic for the
address (its rules match ``status.loadBalancer.ingress`` IPs), so no address is needed at all.

* ``arp_reply`` (pure): the reply to a request (or an RFC 5227 probe, sender 0.0.0.0) whose
  target is one of ours, from our hardware address, back to the asker.
* ``gratuitous_arp`` (pure): the broadcast announcement a new holder sends (RFC 5227
  "ARP Announcement": a request with sender = target = the address; MetalLB also sends the
  reply form, so do we), so neighbours replace a cached entry of the previous holder at once.
* ``ArpSocket``: the socket (AF_PACKET, bound to one interface, ``ETH_P_ARP``); create it in the
  node's network namespace. ``serve`` answers until cancelled, ``announce`` sends the
  gratuitous pair. Frames this socket sent itself (``PACKET_OUTGOING``) are never answered.

IPv6 addresses are announced and answered the same way with NDP: kernel/ndp.py.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
from collections.abc import Callable, Collection

ETH_P_ARP = 0x0806
ETH_P_IP = 0x0800
ARP_REQUEST, ARP_REPLY = 1, 2
BROADCAST = b"\xff" * 6
_ETH = struct.Struct("!6s6sH")
_ARP = struct.Struct("!HHBBH6s4s6s4s")  # htype ptype hlen plen oper sha spa tha tpa
PACKET_OUTGOING = 4


def _frame(dst: bytes, src: bytes, oper: int, sha: bytes, spa: bytes, tha: bytes, tpa: bytes) -> bytes:
    return _ETH.pack(dst, src, ETH_P_ARP) + _ARP.pack(1, ETH_P_IP, 6, 4, oper, sha, spa, tha, tpa)


def arp_reply(frame: bytes, mac: bytes, addresses: Collection[str]) -> bytes | None:
    """The reply to ``frame`` when it asks for one of ``addresses`` (IPv4 text), else None."""
    if len(frame) < _ETH.size + _ARP.size:
        return None
    _, _, ethertype = _ETH.unpack_from(frame)
    htype, ptype, hlen, plen, oper, sha, spa, _, tpa = _ARP.unpack_from(frame, _ETH.size)
    if ethertype != ETH_P_ARP or (htype, ptype, hlen, plen, oper) != (1, ETH_P_IP, 6, 4, ARP_REQUEST) or sha == mac:
        return None
    if str(ipaddress.IPv4Address(tpa)) not in addresses or spa == tpa:  # spa == tpa: someone's announcement
        return None
    return _frame(sha, mac, ARP_REPLY, mac, tpa, sha, spa)


def gratuitous_arp(mac: bytes, address: str) -> list[bytes]:
    """The announcement of ``address`` at ``mac``: a broadcast request and reply, sender = target."""
    ip = ipaddress.IPv4Address(address).packed
    return [_frame(BROADCAST, mac, ARP_REQUEST, mac, ip, b"\x00" * 6, ip),
            _frame(BROADCAST, mac, ARP_REPLY, mac, ip, BROADCAST, ip)]


class ArpSocket:
    """A raw ARP socket on ``ifname`` of the current network namespace."""

    def __init__(self, ifname: str):
        self.ifname = ifname
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ARP))
        try:
            self.sock.bind((ifname, ETH_P_ARP))
            self.mac: bytes = self.sock.getsockname()[4][:6]
            self.sock.setblocking(False)
        except OSError:
            self.sock.close()
            raise

    def close(self) -> None:
        self.sock.close()

    async def announce(self, address: str) -> None:
        for frame in gratuitous_arp(self.mac, address):
            self._send(frame)

    def _send(self, frame: bytes) -> None:
        """One frame, best effort (a full socket buffer drops it, as a busy link would)."""
        try:
            self.sock.send(frame)
        except BlockingIOError:
            pass

    async def _receive(self) -> tuple[bytes, tuple]:
        # loop.add_reader rather than loop.sock_recvfrom: uvloop does not implement the latter
        loop = asyncio.get_running_loop()
        while True:
            try:
                return self.sock.recvfrom(2048)
            except BlockingIOError:
                pass
            readable = loop.create_future()
            loop.add_reader(self.sock.fileno(), lambda: readable.done() or readable.set_result(None))
            try:
                await readable
            finally:
                loop.remove_reader(self.sock.fileno())

    async def serve(self, addresses: Callable[[], Collection[str]]) -> None:
        """Answer requests for ``addresses()`` (asked again for every request) until cancelled."""
        while True:
            frame, source = await self._receive()
            if source[2] == PACKET_OUTGOING:
                continue
            reply = arp_reply(frame, self.mac, addresses())
            if reply is not None:
                self._send(reply)
