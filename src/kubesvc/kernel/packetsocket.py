"""A raw link-layer socket on one interface (AF_PACKET, SOCK_RAW, one ethertype): what the L2
announcers answer ARP (kernel/arp.py) and NDP (kernel/ndp.py) on, as MetalLB's speaker does
with its raw sockets.

The socket sees every frame of its ethertype on the interface, also the ones this host sends
(``PACKET_OUTGOING``): ``answer`` skips those, so an announcer never answers itself. Sends are
best effort: a full socket buffer drops the frame, as a busy link would. Reads go through
``loop.add_reader`` rather than ``loop.sock_recvfrom``, which uvloop does not implement.
Create it in the network namespace whose interface it is bound to.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

PACKET_OUTGOING = 4


class PacketSocket:
    def __init__(self, ifname: str, ethertype: int):
        self.ifname = ifname
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ethertype))
        try:
            self.sock.bind((ifname, ethertype))
            self.mac: bytes = self.sock.getsockname()[4][:6]
            self.sock.setblocking(False)
        except OSError:
            self.sock.close()
            raise

    def close(self) -> None:
        self.sock.close()

    def send(self, frame: bytes) -> None:
        try:
            self.sock.send(frame)
        except BlockingIOError:
            pass

    async def receive(self) -> tuple[bytes, tuple]:
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

    async def answer(self, reply: Callable[[bytes], bytes | None]) -> None:
        """Send ``reply(frame)`` for every frame received from elsewhere (None: no answer), until cancelled."""
        while True:
            frame, source = await self.receive()
            if source[2] == PACKET_OUTGOING:
                continue
            answer = reply(frame)
            if answer is not None:
                self.send(answer)
