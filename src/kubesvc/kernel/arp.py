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
* ``ArpSocket``: the socket (kernel/packetsocket.py, ``ETH_P_ARP``); create it in the node's
  network namespace. ``serve`` answers until cancelled, ``announce`` sends the gratuitous pair.

IPv6 addresses are announced and answered the same way with NDP: kernel/ndp.py.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Callable, Collection

from kubesvc.kernel.packetsocket import PacketSocket, field_filter

ETH_P_ARP = 0x0806
ETH_P_IP = 0x0800
ARP_REQUEST, ARP_REPLY = 1, 2
BROADCAST = b"\xff" * 6
_ETH = struct.Struct("!6s6sH")
_ARP = struct.Struct("!HHBBH6s4s6s4s")  # htype ptype hlen plen oper sha spa tha tpa


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


class ArpSocket(PacketSocket):
    """A raw ARP socket on ``ifname`` of the current network namespace."""

    def __init__(self, ifname: str):
        super().__init__(ifname, ETH_P_ARP)
        try:
            self.attach_filter(field_filter([(2, 20, ARP_REQUEST)]))  # requests only: the operation at 14 + 6
        except OSError:
            self.close()
            raise

    async def announce(self, address: str) -> None:
        for frame in gratuitous_arp(self.mac, address):
            self.send(frame)

    async def serve(self, addresses: Callable[[], Collection[str]]) -> None:
        """Answer requests for ``addresses()`` (asked again for every request) until cancelled."""
        await self.answer(lambda frame: arp_reply(frame, self.mac, addresses()))
