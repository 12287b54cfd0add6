"""Relaying connections to endpoints (upstream ``pkg/proxy/userspace/proxysocket.go`` and
``udp_server.go``), on asyncio Protocols: no streams, no per-chunk coroutine, no copy beyond
the one ``recv`` makes; uvloop makes the same code about twice as fast where installed.

TCP (``TcpListener``): a connection is accepted with reading paused; an endpoint is chosen
(``choose(client_ip, reset, exclude)``) and dialled with upstream's increasing timeouts
(250 ms, 500 ms, 1 s, 2 s), the next endpoint after each refusal or timeout, skipping those
that already failed for this connection. All failed (or no endpoint): the client connection is
reset. Then each side's ``data_received`` writes straight into the other transport, and flow
control is the transports' own: when one side's write buffer passes its high-water mark its
protocol's ``pause_writing`` pauses reading on the other side, ``resume_writing`` resumes it,
so a fast sender never fills memory. A FIN is passed on as a FIN (half-close: the other
direction keeps flowing); the relay closes when both directions have ended, and a reset on
one side aborts the other.

UDP (``UdpListener``): one listening socket; per client address a *flow*, a connected UDP
socket to the endpoint chosen for its first datagram, whose replies go back from the
listening socket to that client. A flow ends after ``idle_timeout`` without a datagram in
either direction (upstream ``udpIdleTimeout``, default 250 ms), on an ICMP error from the
endpoint, or when its endpoint leaves the Service (``drop_flows``), so the client's next
datagram picks a live endpoint.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import struct
from collections.abc import Callable, Collection

from kubesvc.proxy.userspace.loadbalancer import NoEndpoints

log = logging.getLogger("kubesvc.proxy.userspace")

Endpoint = tuple[str, int]
# choose(client_ip, reset, exclude) -> (ip, port); NoEndpoints if there is none
Chooser = Callable[[str, bool, Collection[Endpoint]], Endpoint]

CONNECT_TIMEOUTS = (0.25, 0.5, 1.0, 2.0)  # upstream EndpointDialTimeouts
UDP_IDLE_TIMEOUT = 0.25
UDP_BUFFER = 65535
UDP_PENDING_MAX = 64  # datagrams queued per flow while its socket opens
# Write buffer limits per relayed side: large enough that a bulk transfer is not paused on
# every read (reads are up to 256 KiB), small enough to bound memory per connection.
WRITE_HIGH_WATER = 1024 * 1024
WRITE_LOW_WATER = 256 * 1024


def bound_socket(ip: str, kind: int, port: int = 0) -> socket.socket:
    """A non-blocking socket bound to ``ip:port`` (port 0: a random free one); IPv6 only for an
    IPv6 address."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    sock = socket.socket(family, kind)
    try:
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        if port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((ip, port))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


# ---- TCP -----------------------------------------------------------------------------------

_LINGER_RESET = struct.pack("ii", 1, 0)


def reset(transport: asyncio.BaseTransport) -> None:
    """Close with a RST rather than a FIN (``SO_LINGER`` 0), so the peer sees a reset."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        except OSError:
            pass
    transport.abort()



class _Side(asyncio.Protocol):
    """One socket of a relayed connection; ``peer`` is the other one."""

    __slots__ = ("transport", "peer", "eof")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.eof = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(WRITE_HIGH_WATER, WRITE_LOW_WATER)

    def data_received(self, data: bytes) -> None:
        self.peer.transport.write(data)

    def eof_received(self) -> bool:
        self.eof = True
        peer = self.peer
        if peer is None or peer.transport is None or peer.transport.is_closing():
            return False
        if peer.eof:  # both directions finished: close (after flushing) both
            peer.transport.close()
            return False
        peer.transport.write_eof()
        return True  # keep our side open for the other direction

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.transport.is_closing():
            if exc is None:
                peer.transport.close()
            else:
                reset(peer.transport)


class _Client(_Side):
    """The accepted side: dials an endpoint before relaying anything."""

    __slots__ = ("listener", "task", "early")

    def __init__(self, listener: TcpListener) -> None:
        super().__init__()
        self.listener = listener
        self.task: asyncio.Task | None = None
        self.early: list[bytes] = []  # data that arrived before the endpoint answered

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None:  # uvloop may deliver data despite pause_reading in connection_made
            self.early.append(data)
            self.transport.pause_reading()
            return
        peer.transport.write(data)

    def eof_received(self) -> bool:
        if self.peer is None:
            self.eof = True  # passed on once connected
            return True
        return super().eof_received()

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        transport.pause_reading()
        self.listener.connections.add(self)
        self.task = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        listener = self.listener
        peername = self.transport.get_extra_info("peername")
        client_ip = peername[0] if peername else ""
        loop = asyncio.get_running_loop()
        tried: set[Endpoint] = set()
        for attempt, timeout in enumerate(listener.timeouts):
            try:
                endpoint = listener.choose(client_ip, attempt > 0, tried)
            except NoEndpoints:
                break
            backend = _Side()
            backend.peer = self
            try:
                async with asyncio.timeout(timeout):
                    await loop.create_connection(lambda: backend, endpoint[0], endpoint[1])
            except (OSError, TimeoutError) as err:
                tried.add(endpoint)
                listener.failed_dials += 1
                log.debug("%s: dial %s:%d failed (%s), trying the next endpoint", listener.name, endpoint[0], endpoint[1],
                          err.strerror if isinstance(err, OSError) and err.strerror else type(err).__name__)
                continue
            if self.transport.is_closing():
                backend.transport.close()
                return
            self.peer = backend
            if self.early:
                backend.transport.writelines(self.early)
                self.early = []
            if self.eof:
                backend.transport.write_eof()
            else:
                self.transport.resume_reading()
            return
        listener.rejected += 1
        if tried:
            log.info("%s: failed to connect to an endpoint (tried %d)", listener.name, len(tried))
        reset(self.transport)

    def connection_lost(self, exc) -> None:
        self.listener.connections.discard(self)
        if self.task is not None and not self.task.done():
            self.task.cancel()
        super().connection_lost(exc)

    def close(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.abort()
        if self.transport is not None:
            self.transport.abort()


class TcpListener:
    """A listening socket relaying each connection to an endpoint from ``choose``."""

    def __init__(self, choose: Chooser, *, name: str = "", timeouts: tuple[float, ...] = CONNECT_TIMEOUTS, backlog: int = 1024):
        self.choose = choose
        self.name = name
        self.timeouts = timeouts
        self.backlog = backlog
        self.connections: set[_Client] = set()
        self.server: asyncio.base_events.Server | None = None
        self.port = 0
        self.failed_dials = 0
        self.rejected = 0

    async def start(self, ip: str = "0.0.0.0", port: int = 0) -> TcpListener:
        sock = bound_socket(ip, socket.SOCK_STREAM, port)
        try:
            sock.listen(self.backlog)
            self.port = sock.getsockname()[1]
            self.server = await asyncio.get_running_loop().create_server(lambda: _Client(self), sock=sock)
        except BaseException:
            sock.close()
            raise
        return self

    def close(self, *, connections: bool = False) -> None:
        """Stop accepting; with ``connections`` also cut the relayed ones (otherwise they live on
        to their end, as upstream's when a Service port goes away)."""
        if self.server is not None:
            self.server.close()
        if connections:
            for conn in list(self.connections):
                conn.close()
            self.connections.clear()


# ---- UDP -----------------------------------------------------------------------------------


class _Flow(asyncio.DatagramProtocol):
    """One client's datagrams to one endpoint, over a connected socket."""

    __slots__ = ("listener", "client", "endpoint", "transport", "pending", "loop", "last", "timer", "closed", "opening")

    def __init__(self, listener: UdpListener, client, endpoint: Endpoint) -> None:
        self.listener = listener
        self.client = client
        self.endpoint = endpoint
        self.transport: asyncio.DatagramTransport | None = None
        self.pending: list[bytes] | None = []
        self.closed = False
        self.loop = loop = asyncio.get_running_loop()
        self.last = loop.time()
        self.timer = loop.call_later(listener.idle_timeout, self._expire)
        self.opening = loop.create_task(self._open())  # referenced: a bare task may be collected

    async def _open(self) -> None:
        sock = None
        try:
            sock = bound_socket("::" if ":" in self.endpoint[0] else "0.0.0.0", socket.SOCK_DGRAM)
            sock.connect(self.endpoint)
            await self.loop.create_datagram_endpoint(lambda: self, sock=sock)
        except OSError as err:
            if sock is not None and self.transport is None:
                sock.close()
            log.debug("%s: UDP flow to %s:%d failed: %s", self.listener.name, *self.endpoint, err)
            self.close()

    def connection_made(self, transport) -> None:
        if self.closed:
            transport.close()
            return
        self.transport = transport
        pending, self.pending = self.pending, None
        for data in pending or ():
            transport.sendto(data)

    def send(self, data: bytes) -> None:
        self.last = self.loop.time()
        if self.transport is not None:
            self.transport.sendto(data)
        elif self.pending is not None and len(self.pending) < UDP_PENDING_MAX:
            self.pending.append(data)

    def datagram_received(self, data: bytes, addr) -> None:
        self.last = self.loop.time()
        listener_transport = self.listener.transport
        if listener_transport is not None:
            listener_transport.sendto(data, self.client)

    def error_received(self, exc) -> None:
        if getattr(exc, "errno", None) in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH):
            self.close()

    def _expire(self) -> None:
        idle = self.loop.time() - self.last
        if idle >= self.listener.idle_timeout:
            self.close()
        else:
            self.timer = self.loop.call_later(self.listener.idle_timeout - idle, self._expire)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.timer.cancel()
        if self.listener.flows.get(self.client) is self:
            del self.listener.flows[self.client]
        if self.transport is not None:
            self.transport.close()


class UdpListener(asyncio.DatagramProtocol):
    """A UDP socket relaying each client's datagrams to an endpoint from ``choose``."""

    def __init__(self, choose: Chooser, *, name: str = "", idle_timeout: float = UDP_IDLE_TIMEOUT):
        self.choose = choose
        self.name = name
        self.idle_timeout = idle_timeout
        self.flows: dict[object, _Flow] = {}
        self.transport: asyncio.DatagramTransport | None = None
        self.port = 0

    async def start(self, ip: str = "0.0.0.0", port: int = 0) -> UdpListener:
        sock = bound_socket(ip, socket.SOCK_DGRAM, port)
        self.port = sock.getsockname()[1]
        try:
            await asyncio.get_running_loop().create_datagram_endpoint(lambda: self, sock=sock)
        except BaseException:
            sock.close()
            raise
        return self

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        flow = self.flows.get(addr)
        if flow is None:
            try:
                endpoint = self.choose(addr[0], False, ())
            except NoEndpoints:
                return
            flow = self.flows[addr] = _Flow(self, addr, endpoint)
        flow.send(data)

    def error_received(self, exc) -> None:
        log.debug("%s: UDP listener error: %s", self.name, exc)

    def drop_flows(self, keep: Collection[Endpoint]) -> int:
        """End the flows whose endpoint is not in ``keep``; how many."""
        gone = [flow for flow in self.flows.values() if flow.endpoint not in keep]
        for flow in gone:
            flow.close()
        return len(gone)

    def close(self, *, connections: bool = True) -> None:
        for flow in list(self.flows.values()):
            flow.close()
        if self.transport is not None:
            self.transport.close()
