"""A raw link-layer socket on one interface (AF_PACKET, SOCK_RAW, one ethertype): what the L2
announcers answer ARP (kernel/arp.py) and NDP (kernel/ndp.py) on, as MetalLB's speaker does
with its raw sockets.

The socket sees every frame of its ethertype on the interface, also the ones this host sends
(``PACKET_OUTGOING``): ``answer`` skips those, so an announcer never answers itself. Sends are
best effort: a full socket buffer drops the frame, as a busy link would. Reads go through
``loop.add_reader`` rather than ``loop.sock_recvfrom``, which uvloop does not implement.
Create it in the network namespace whose interface it is bound to.

A socket of one ethertype would otherwise copy *every* frame of that type to the announcer (for
IPv6 that is all of the node's IPv6 traffic, at ~10 µs of Python a frame), so each socket takes
a classic BPF filter (``SO_ATTACH_FILTER``, as ``tcpdump -dd`` prints one) that keeps only the
frames it answers: ARP requests, Neighbour Solicitations.
"""

from __future__ import annotations

import asyncio
import ctypes
import socket
import struct
from collections.abc import Callable, Sequence

PACKET_OUTGOING = 4
SO_ATTACH_FILTER = 26
# classic BPF (linux/filter.h): load a byte/half-word at an absolute offset, jump if equal, return
BPF_LDB_ABS, BPF_LDH_ABS, BPF_JEQ_K, BPF_RET_K = 0x30, 0x28, 0x15, 0x06
ACCEPT, DROP = 0x40000, 0  # bytes of the frame kept: all of it / none


def field_filter(fields: Sequence[tuple[int, int, int]]) -> list[tuple[int, int, int, int]]:
    """A BPF program keeping the frames whose every ``(size, offset, value)`` field (size 1 or
    2 bytes, at an offset from the Ethernet header) equals its value; the rest are dropped."""
    program = []
    for index, (size, offset, value) in enumerate(fields):
        left = len(fields) - index - 1  # the field checks after this one
        program.append((BPF_LDB_ABS if size == 1 else BPF_LDH_ABS, 0, 0, offset))
        program.append((BPF_JEQ_K, 0, 2 * left + 1, value))  # not equal: jump to the final DROP
    return program + [(BPF_RET_K, 0, 0, ACCEPT), (BPF_RET_K, 0, 0, DROP)]


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

    def attach_filter(self, program: Sequence[tuple[int, int, int, int]]) -> None:
        """``SO_ATTACH_FILTER``: the kernel copies the program, so the buffer may go after."""
        code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *instruction) for instruction in program))
        self.sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, struct.pack("HL", len(program), ctypes.addressof(code)))
        while True:  # frames queued before the filter held: let them go
            try:
                self.sock.recv(2048)
            except BlockingIOError:
                break

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
