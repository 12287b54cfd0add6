"""Relaying connections to endpoints (upstream ``pkg/proxy/userspace/proxysocket.go`` and
``udp_server.go``). TCP runs on raw non-blocking sockets in an epoll set of the relay's own,
which the event loop watches as one descriptor (the same code on uvloop and on plain asyncio):
no streams, no transports, no coroutine per connection or per chunk, a socket's registration
changed only when what it waits for changes. Linux only (epoll, splice), as the proxy is.

TCP (``TcpListener``): the listener accepts in the event loop; per connection an endpoint is
chosen (``choose(client_ip, reset, exclude)``) and dialled with upstream's increasing timeouts
(250 ms, 500 ms, 1 s, 2 s), the next endpoint after each refusal or timeout, skipping those
that already failed for this connection. All failed (or no endpoint): the client connection is
reset. Nothing is read from the client before the endpoint answers (the kernel holds it).

Then each direction is a pump (``_Pump``) that moves bytes with ``splice(2)``, socket -> pipe ->
socket, so the payload never enters Python (nor, on loopback, gets copied by the proxy at
all); with ``splice=False``, or when no pipe can be had, it reads into a reusable buffer
(``recv_into``) and sends from it. Either way a direction holds at most one pipe (``PIPE_SIZE``) or one
buffer (``COPY_BUFFER``) of data: it reads only when that is empty, and while the destination
cannot take it all it stops reading and waits for the destination to become writable, so a
fast sender never fills memory (the kernel's socket buffers push back on it). Pipes and buffers
are lent from a small pool while a direction has bytes in flight and given back when it is
idle, so an idle connection holds two sockets and nothing else. A FIN is passed on as a FIN
(``shutdown(SHUT_WR)``, half-close: the other direction keeps flowing); the relay closes both
sockets when both directions have ended, and an error on either socket (a reset) resets the
other.

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
import os
import select
import socket
import struct
import weakref
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

# TCP: the most one direction of a connection holds in the proxy. A splice pipe asks for
# PIPE_SIZE (the kernel's default pipe-max-size; less where the kernel refuses); the copy path
# reads into a COPY_BUFFER. One direction relays at most WAKEUP_BUDGET bytes per wakeup, then
# lets the other connections run.
SPLICE = hasattr(os, "splice")  # Linux, Python >= 3.10
PIPE_SIZE = 1 << 20
COPY_BUFFER = 256 * 1024
WAKEUP_BUDGET = 4 << 20
POOL_SIZE = 64  # idle pipes (and buffers) kept for the next connections


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

_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER 0: close with a RST rather than a FIN
_SPLICE_FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK if SPLICE else 0
_SOCK_NONBLOCK = getattr(socket, "SOCK_NONBLOCK", 0)
_AGAIN = (BlockingIOError, InterruptedError)
_ACCEPT_RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
ACCEPT_RETRY_DELAY = 1.0  # asyncio's own pause when accept() runs out of descriptors
_IN, _OUT = select.EPOLLIN, select.EPOLLOUT
_ERRHUP = select.EPOLLERR | select.EPOLLHUP


class _Pool:
    """Idle pipes or buffers, lent to a direction while it has bytes in flight."""

    def __init__(self, make: Callable[[], object], drop: Callable[[object], None] = lambda item: None):
        self.make, self.drop = make, drop
        self.free: list = []

    def take(self):
        return self.free.pop() if self.free else self.make()

    def give(self, item) -> None:
        if len(self.free) < POOL_SIZE:
            self.free.append(item)
        else:
            self.drop(item)


def _make_pipe() -> tuple[int, int, int]:
    """(read end, write end, capacity): PIPE_SIZE, or what the kernel allows."""
    import fcntl

    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        size = fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:  # above pipe-max-size, or the user's pipe-user-pages-soft reached
        size = fcntl.fcntl(w, fcntl.F_GETPIPE_SZ)
    return r, w, size


def _close_pipe(pipe: tuple[int, int, int]) -> None:
    os.close(pipe[0])
    os.close(pipe[1])


_pipes = _Pool(_make_pipe, _close_pipe)
_buffers = _Pool(lambda: bytearray(COPY_BUFFER))


class _Poller:
    """The relay's own epoll set, watched by the event loop as one descriptor: relayed sockets
    are registered here once and changed only when what they wait for changes (the event
    loop's ``add_reader``/``remove_reader`` would rebuild its registration at every step, and
    uvloop's costs several system calls each time). One per event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.ep = select.epoll()
        self.handlers: dict[int, Callable[[int], None]] = {}
        self.dispatching = False
        self.closing: list[socket.socket] = []
        loop.add_reader(self.ep.fileno(), self._dispatch)

    def update(self, fd: int, old: int, new: int, handler: Callable[[int], None]) -> None:
        """``fd`` waits for ``new`` (epoll bits) instead of ``old``; 0: nothing (unregistered,
        so that a hang-up cannot be reported over and over)."""
        if not old:
            self.ep.register(fd, new)
            self.handlers[fd] = handler
        elif not new:
            self.ep.unregister(fd)
            del self.handlers[fd]
        elif new != old:
            self.ep.modify(fd, new)

    def close(self, sock: socket.socket, registered: bool) -> None:
        """Close ``sock`` (closing removes it from the epoll set). Within a batch of events the
        close waits for the batch's end, so that no descriptor number is reused by a new socket
        while an event for the old one is still to be handed out."""
        if registered:
            self.handlers.pop(sock.fileno(), None)
        if self.dispatching:
            self.closing.append(sock)
        else:
            sock.close()

    def _dispatch(self) -> None:
        handlers = self.handlers
        self.dispatching = True
        try:
            for fd, events in self.ep.poll(0):
                handler = handlers.get(fd)
                if handler is not None:
                    handler(events)
        finally:
            self.dispatching = False
            if self.closing:
                closing, self.closing = self.closing, []
                for sock in closing:
                    sock.close()


_pollers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Poller] = weakref.WeakKeyDictionary()


def _poller(loop: asyncio.AbstractEventLoop) -> _Poller:
    poller = _pollers.get(loop)
    if poller is None:
        poller = _pollers[loop] = _Poller(loop)
    return poller


_IDLE, _READING, _WRITING, _DONE = range(4)
_CLIENT, _BACKEND = 0, 1


class _Pump:
    """One direction of a relayed connection, from side ``s`` to side ``d``.

    ``_READING``: waiting for the source to be readable, nothing in flight. ``_WRITING``:
    bytes in flight (in ``pipe`` or ``buf``) that the destination did not take, waiting for it
    to be writable; the source is not read meanwhile. ``_DONE``: the source ended (FIN passed
    on) or the connection closed."""

    __slots__ = ("conn", "src", "dst", "sfd", "dfd", "s", "d", "splice", "pipe", "buf", "capacity", "start", "inflight", "state",
                 "other")

    def __init__(self, conn: _Connection, s: int, splice: bool):
        self.conn = conn
        self.s, self.d = s, 1 - s
        self.src, self.dst = conn.socks[s], conn.socks[1 - s]
        self.sfd, self.dfd = self.src.fileno(), self.dst.fileno()
        self.splice = splice
        self.pipe: tuple[int, int, int] | None = None
        self.buf: bytearray | None = None
        self.capacity = 0  # of the pipe or buffer
        self.start = 0  # where the unsent bytes begin in buf
        self.inflight = 0
        self.state = _IDLE
        self.other: _Pump | None = None

    def _become(self, state: int) -> None:
        """Move to ``state``, changing what the sockets wait for."""
        old, self.state = self.state, state
        conn = self.conn
        if old == _READING:
            conn.watch(self.s, -_IN)
        elif old == _WRITING:
            conn.watch(self.d, -_OUT)
        if state == _READING:
            conn.watch(self.s, _IN)
        elif state == _WRITING:
            conn.watch(self.d, _OUT)

    def begin(self) -> None:
        """Start relaying, reading at once (the client has likely sent already)."""
        try:
            blocked = self._relay()
            if self.state == _IDLE:  # (not ended)
                self._become(_WRITING if blocked else _READING)
        except OSError as err:
            self.conn.fail(err)

    # Both callbacks relay until the source would block (stay reading), the destination would
    # block (stop reading, wait for writing), the source ends, or the budget is spent (the
    # source is still readable: the next round of events comes back to it).

    def readable(self) -> None:
        try:
            if self._relay():
                self._become(_WRITING)
        except OSError as err:
            self.conn.fail(err)

    def writable(self) -> None:
        try:
            if self._drain() and not self._relay() and self.state == _WRITING:
                self._become(_READING)
        except OSError as err:
            self.conn.fail(err)

    def _relay(self) -> bool:
        """Read and pass on until something would block; True: blocked on the destination."""
        budget = WAKEUP_BUDGET
        while budget > 0:
            n = self._fill()
            if n is None:  # nothing more to read for now: lend the pipe/buffer back
                self._release()
                return False
            if n == 0:
                self._eof()
                return False
            if not self._drain():
                return True
            if n < self.capacity:  # the socket had no more: wait for it to be readable again
                self._release()
                return False
            budget -= n
        return False

    def _fill(self) -> int | None:
        """Read what the pipe/buffer holds (only ever called when it is empty); None: would
        block, 0: end of stream."""
        if self.splice:
            pipe = self.pipe
            if pipe is None:
                try:
                    pipe = self.pipe = _pipes.take()
                except OSError as err:  # out of descriptors: this direction copies instead
                    log.debug("%s: no pipe for splice (%s): copying", self.conn.listener.name, err)
                    self.splice = False
                    return self._fill()
                self.capacity = pipe[2]
            try:
                n = os.splice(self.sfd, pipe[1], self.capacity, flags=_SPLICE_FLAGS)
            except _AGAIN:
                return None
        else:
            buf = self.buf
            if buf is None:
                buf = self.buf = _buffers.take()
                self.capacity = len(buf)
            try:
                n = self.src.recv_into(buf)
            except _AGAIN:
                return None
            self.start = 0
        self.inflight = n
        return n

    def _drain(self) -> bool:
        """Write what is in flight; False: the destination took only part of it (its send
        buffer is full: wait until it is writable)."""
        left = self.inflight
        try:
            if self.pipe is not None:
                n = os.splice(self.pipe[0], self.dfd, left, flags=_SPLICE_FLAGS)
            else:
                start = self.start
                with memoryview(self.buf) as view:
                    n = self.dst.send(view[start:start + left])
                self.start = start + n
        except _AGAIN:
            return False
        self.inflight = left = left - n
        return not left

    def _eof(self) -> None:
        """The source sent its FIN (everything before it is passed on): pass it on."""
        self._release()
        if self.other.state == _DONE:  # both ended: closing sends this FIN
            self.state = _DONE
            self.conn.close()
            return
        self._become(_DONE)
        try:
            self.dst.shutdown(socket.SHUT_WR)
        except OSError:  # the destination is gone already: the other direction finds out
            pass

    def _release(self) -> None:
        if self.pipe is not None:
            if self.inflight:  # bytes that will never be sent: do not hand them to another
                _close_pipe(self.pipe)
            else:
                _pipes.give(self.pipe)
            self.pipe = None
        if self.buf is not None:
            _buffers.give(self.buf)
            self.buf = None
        self.inflight = 0


def _established(sock: socket.socket) -> bool:
    try:
        sock.getpeername()  # ENOTCONN until the handshake is over (and after a refusal)
    except OSError:
        return False
    return True


class _Connection:
    """An accepted client: dialling an endpoint, then two pumps."""

    __slots__ = ("listener", "loop", "poller", "socks", "masks", "handlers", "client_ip", "endpoint", "tried", "attempt", "timer",
                 "connecting", "pumps", "closed")

    def __init__(self, listener: TcpListener, client: socket.socket, client_ip: str):
        self.listener = listener
        self.loop = listener.loop
        self.poller = listener.poller
        self.socks: list[socket.socket | None] = [client, None]
        self.masks = [0, 0]  # what each socket waits for in the poller
        self.handlers = (self._on_client, self._on_backend)
        self.client_ip = client_ip
        self.endpoint: Endpoint | None = None
        self.tried: set[Endpoint] | None = None  # the endpoints that failed for this connection
        self.attempt = 0
        self.timer: asyncio.TimerHandle | None = None
        self.connecting = False  # the backend socket waits for its connect to complete
        self.pumps: tuple[_Pump, _Pump] | None = None
        self.closed = False
        listener.connections.add(self)

    def watch(self, side: int, bits: int) -> None:
        """Side ``side`` also waits for ``bits`` (negative: no longer)."""
        old = self.masks[side]
        new = self.masks[side] = old + bits
        self.poller.update(self.socks[side].fileno(), old, new, self.handlers[side])

    def _on_client(self, events: int) -> None:
        up, down = self.pumps
        if up.state == _READING and events & (_IN | _ERRHUP):
            up.readable()
        if down.state == _WRITING and events & (_OUT | _ERRHUP):
            down.writable()

    def _on_backend(self, events: int) -> None:
        if self.connecting:
            self._connected()
            return
        up, down = self.pumps
        if down.state == _READING and events & (_IN | _ERRHUP):
            down.readable()
        if up.state == _WRITING and events & (_OUT | _ERRHUP):
            up.writable()

    # ---- dialling: next endpoint after a refusal or a timeout ----

    def dial(self) -> None:
        listener = self.listener
        timeouts = listener.timeouts
        while self.attempt < len(timeouts):
            attempt = self.attempt
            self.attempt += 1
            try:
                endpoint = listener.choose(self.client_ip, attempt > 0, self.tried or ())
            except NoEndpoints:
                break
            self.endpoint = endpoint
            try:
                sock = socket.socket(socket.AF_INET6 if ":" in endpoint[0] else socket.AF_INET, socket.SOCK_STREAM | _SOCK_NONBLOCK)
                if not _SOCK_NONBLOCK:
                    sock.setblocking(False)
            except OSError as exc:
                self._failed(exc)
                continue
            err = sock.connect_ex(endpoint)
            if err in (errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK, 0):
                self.socks[_BACKEND] = sock
                if err == 0 or _established(sock):  # a local endpoint answers within connect()
                    self._relay()
                    return
                try:
                    self.watch(_BACKEND, _OUT)
                except OSError as exc:
                    self.masks[_BACKEND] = 0
                    self.socks[_BACKEND] = None
                    sock.close()
                    self._failed(exc)
                    continue
                self.connecting = True
                self.timer = self.loop.call_later(timeouts[attempt], self._timed_out)
                return
            sock.close()
            self._failed(OSError(err, os.strerror(err)))
        listener.rejected += 1
        if self.tried:
            log.info("%s: failed to connect to an endpoint (tried %d)", listener.name, len(self.tried))
        if self._end():
            self._close(reset=True)

    def _failed(self, err: OSError) -> None:
        listener = self.listener
        endpoint = self.endpoint
        if self.tried is None:
            self.tried = set()
        self.tried.add(endpoint)
        listener.failed_dials += 1
        log.debug("%s: dial %s:%d failed (%s), trying the next endpoint", listener.name, endpoint[0], endpoint[1],
                  err.strerror if err.strerror else type(err).__name__)

    def _drop_backend(self) -> None:
        """Forget the backend socket that did not connect."""
        self.connecting = False
        self.masks[_BACKEND] = 0
        self.poller.close(self.socks[_BACKEND], registered=True)
        self.socks[_BACKEND] = None

    def _connected(self) -> None:
        self.timer.cancel()
        self.timer = None
        err = self.socks[_BACKEND].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self._drop_backend()
            self._failed(OSError(err, os.strerror(err)))
            self._redial()
        else:
            self._relay()

    def _timed_out(self) -> None:
        self.timer = None
        if not self.connecting:
            return
        self._drop_backend()
        self._failed(TimeoutError())
        self._redial()

    def _redial(self) -> None:
        try:
            self.dial()
        except Exception:
            log.exception("%s: relaying a connection failed", self.listener.name)
            self.abort()

    # ---- relaying ----

    def _relay(self) -> None:
        backend = self.socks[_BACKEND]
        try:  # (the client's is inherited from the listening socket)
            backend.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        splice = self.listener.splice
        up, down = _Pump(self, _CLIENT, splice), _Pump(self, _BACKEND, splice)
        up.other, down.other = down, up
        self.pumps = (up, down)
        down.state = _READING  # the backend: from waiting for its connect to waiting for data
        self.connecting = False
        try:
            self.watch(_BACKEND, _IN - self.masks[_BACKEND])
        except OSError as err:
            self.fail(err)
            return
        up.begin()

    def in_flight(self) -> int:
        """Bytes read from one side and not yet written to the other."""
        return sum(pump.inflight for pump in self.pumps) if self.pumps else 0

    def _end(self) -> bool:
        if self.closed:
            return False
        self.closed = True
        self.listener.connections.discard(self)
        self.connecting = False
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.pumps is not None:
            for pump in self.pumps:
                pump.state = _DONE
                pump._release()
        return True

    def _close(self, reset: bool) -> None:
        for side, sock in enumerate(self.socks):
            if sock is not None:
                if reset:
                    try:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
                    except OSError:
                        pass
                self.poller.close(sock, registered=bool(self.masks[side]))
                self.masks[side] = 0

    def close(self) -> None:
        """Both directions ended: close both (what was written is still delivered)."""
        if self._end():
            self._close(reset=False)

    def fail(self, err: OSError) -> None:
        """An error (a reset) on either socket: reset both."""
        if self._end():
            log.debug("%s: relay to %s:%d ended: %s", self.listener.name, *self.endpoint, err)
            self._close(reset=True)

    def abort(self) -> None:
        """Cut now (the listener closing with its connections)."""
        if self._end():
            self._close(reset=False)


class TcpListener:
    """A listening socket relaying each connection to an endpoint from ``choose``; ``splice``
    False: copy through a buffer even where splice(2) is available."""

    def __init__(self, choose: Chooser, *, name: str = "", timeouts: tuple[float, ...] = CONNECT_TIMEOUTS, backlog: int = 1024,
                 splice: bool | None = None):
        self.choose = choose
        self.name = name
        self.timeouts = timeouts
        self.backlog = backlog
        self.splice = SPLICE if splice is None else splice and SPLICE
        self.connections: set[_Connection] = set()
        self.sock: socket.socket | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.poller: _Poller | None = None
        self.paused: asyncio.TimerHandle | None = None
        self.port = 0
        self.failed_dials = 0
        self.rejected = 0

    async def start(self, ip: str = "0.0.0.0", port: int = 0) -> TcpListener:
        sock = bound_socket(ip, socket.SOCK_STREAM, port)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted sockets inherit it
            sock.listen(self.backlog)
            self.port = sock.getsockname()[1]
            self.loop = asyncio.get_running_loop()
            self.poller = _poller(self.loop)
            self.loop.add_reader(sock.fileno(), self._accept)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        return self

    def _accept(self) -> None:
        sock = self.sock
        for _ in range(self.backlog):
            try:
                client, addr = sock.accept()
            except _AGAIN:
                return
            except OSError as err:
                if err.errno in _ACCEPT_RESOURCE_ERRORS:
                    log.error("%s: cannot accept connections (%s): pausing %.0f s", self.name, err, ACCEPT_RETRY_DELAY)
                    self.loop.remove_reader(sock.fileno())
                    self.paused = self.loop.call_later(ACCEPT_RETRY_DELAY, self._resume)
                    return
                continue  # ECONNABORTED and the like: that client is gone already
            conn = None
            try:
                client.setblocking(False)
                conn = _Connection(self, client, addr[0])
                conn.dial()
            except Exception:
                log.exception("%s: relaying a connection failed", self.name)
                if conn is not None:
                    conn.abort()
                else:
                    client.close()

    def _resume(self) -> None:
        self.paused = None
        if self.sock is not None:
            self.loop.add_reader(self.sock.fileno(), self._accept)

    def in_flight(self) -> int:
        """Bytes the relay holds for all its connections (at most one pipe or buffer per
        direction)."""
        return sum(conn.in_flight() for conn in self.connections)

    def close(self, *, connections: bool = False) -> None:
        """Stop accepting; with ``connections`` also cut the relayed ones (otherwise they live on
        to their end, as upstream's when a Service port goes away)."""
        if self.sock is not None:
            if self.paused is not None:
                self.paused.cancel()
                self.paused = None
            else:
                self.loop.remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None
        if connections:
            for conn in list(self.connections):
                conn.abort()
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
