"""Relaying connections to endpoints (upstream ``pkg/proxy/userspace/proxysocket.go`` and
``udp_server.go``). TCP runs on raw sockets on the relay's own thread and epoll loop
(``loop.RelayLoop``), whatever event loop the proxy runs: no streams, no transports, no
coroutine per connection or per chunk, no timer per connection. UDP runs on the proxy's event
loop.

TCP (``TcpListener``): the listener accepts in a loop until the kernel's queue is empty; per
connection an endpoint is chosen (``choose(client_ip, reset, exclude)``) and dialled with
upstream's increasing timeouts (250 ms, 500 ms, 1 s, 2 s), the next endpoint after each
refusal or timeout, skipping those that already failed for this connection. All failed (or no
endpoint): the client connection is reset. Nothing is read from the client before the endpoint
answers (the kernel holds it).

What a connection costs is system calls (the kernel's work, about as much as HAProxy's) and
the Python between them, so the relay makes few calls and few events (a 1-byte request and
answer on loopback: accept, socket, connect, getpeername, two ``epoll_ctl``, six recv/send, one
shutdown, two close, three events; HAProxy 2.6 makes about 21 calls):

* each socket is registered once, edge-triggered, for reading and its peer's FIN, and for
  writing too (one ``EPOLL_CTL_MOD``) only once a direction first waits to write to it
  (registered writable for its whole life, a socket reports a useless event for every ACK that
  frees room in it); an endpoint whose connect is still under way is registered writable from
  the start, as that is how its connect completes. What a direction waits for then changes
  without a system call, and closing the socket is its removal. Edge-triggered means a direction reads until the socket is empty
  before it waits: a short read empties it (a TCP ``recv`` stops short only when the queue is
  empty), unless the peer's FIN is known to be there (``EPOLLRDHUP``) or the read was a
  splice (which also stops when the pipe is full), which read on to ``EAGAIN``. A direction
  that has relayed ``WAKEUP_BUDGET`` bytes in one go yields and is resumed after the other
  connections' events, since no new edge would come for what it left unread;
* where ``connect`` returns with the handshake already done (on loopback, as a rule: the
  kernel runs the endpoint's side of it within the call; ``getpeername`` tells), relaying
  starts at once: no event for the connect, no dial deadline. Otherwise a connect completes
  when the endpoint's socket reports writable, a refusal when it reports an error
  (``SO_ERROR`` is read only then), and dial timeouts are deadlines in a queue per attempt
  (their order is their arrival order), served by one timer;
* the client's socket stays in blocking mode (no ``O_NONBLOCK`` change after accept): every
  read and write on it passes ``MSG_DONTWAIT``; ``TCP_NODELAY`` is inherited from the
  listening socket, and set on the endpoint's socket only before a second write (Nagle only
  holds back a write while earlier data is unacknowledged);
* small exchanges are copied through a reusable buffer (``recv_into``, ``send``); a direction
  whose read fills the buffer (``COPY_BUFFER``) is a bulk stream and, if ``splice`` is on,
  moves on to ``splice(2)`` (socket -> pipe -> socket, the payload never enters Python), as
  HAProxy's ``splice-auto`` splices only streams it has seen fill its buffers;
* a FIN is passed on with ``shutdown(SHUT_WR)`` (half-close: the other direction keeps
  flowing) and the last direction to end closes both sockets, without a shutdown.

Either way a direction holds at most one pipe (``PIPE_SIZE``) or one buffer (``COPY_BUFFER``) of
data: it reads only when that is empty, and while the destination cannot take it all it stops
reading and waits for the destination to become writable, so a fast sender never fills memory
(the kernel's socket buffers push back on it). Pipes and buffers are lent from a small pool
while a direction has bytes in flight and given back when it is idle, so an idle connection
holds two sockets and nothing else. An error on either socket (a reset) resets the other.

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
import time
import _socket
from collections import deque
from collections.abc import Callable, Collection

from kubesvc.proxy.userspace.loadbalancer import NoEndpoints
from kubesvc.proxy.userspace.loop import RelayLoop, Timer, relay_loop

log = logging.getLogger("kubesvc.proxy.userspace")

Endpoint = tuple[str, int]
# choose(client_ip, reset, exclude) -> (ip, port); NoEndpoints if there is none
Chooser = Callable[[str, bool, Collection[Endpoint]], Endpoint]

CONNECT_TIMEOUTS = (0.25, 0.5, 1.0, 2.0)  # upstream EndpointDialTimeouts
DEADLINE_SLACK = 0.005  # how late a dial timeout may be served (see _DialDeadlines)
UDP_IDLE_TIMEOUT = 0.25
UDP_BUFFER = 65535
UDP_PENDING_MAX = 64  # datagrams queued per flow while its socket opens

# TCP: the most one direction of a connection holds in the proxy. The copy path reads into a
# COPY_BUFFER (a read that fills it marks a bulk stream); a splice pipe asks for PIPE_SIZE (the
# kernel's default pipe-max-size; less where the kernel refuses). One direction relays at most
# WAKEUP_BUDGET bytes per wakeup, then lets the other connections run.
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
_DONTWAIT = socket.MSG_DONTWAIT
_AGAIN = (BlockingIOError, InterruptedError)
_ACCEPT_RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
ACCEPT_RETRY_DELAY = 1.0  # asyncio's own pause when accept() runs out of descriptors
_IN, _OUT, _RDHUP, _ERR = select.EPOLLIN, select.EPOLLOUT, select.EPOLLRDHUP, select.EPOLLERR
_ERRHUP = select.EPOLLERR | select.EPOLLHUP
_WATCH = _IN | _OUT | _RDHUP | select.EPOLLET  # once per socket, for its whole life
# The client's socket is watched for writing only once a direction first waits to write to it
# (one epoll_ctl MOD, for bulk streams only): registered writable, it would report an event at
# once, to no purpose, on every connection.
_WATCH_READ = _IN | _RDHUP | select.EPOLLET
_monotonic = time.monotonic
_CONNECTING = (errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK, 0)


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
_buffers = _Pool(lambda: memoryview(bytearray(COPY_BUFFER)))  # (a view: slices for send() copy nothing)
_scratch = _buffers.take()  # what the relay copies through when the destination takes it all


_READING, _WRITING, _DONE = range(3)
_CLIENT, _BACKEND = 0, 1


class _Pump:
    """One direction of a relayed connection, from side ``s`` to side ``d``.

    ``_READING``: waiting for the source to be readable, nothing in flight. ``_WRITING``:
    bytes in flight (in ``pipe`` or ``buf``) that the destination did not take, waiting for it
    to be writable; the source is not read meanwhile. ``_DONE``: the source ended (FIN passed
    on) or the connection closed."""

    __slots__ = ("conn", "src", "dst", "to_backend", "splice", "piping", "pipe", "buf", "capacity", "start",
                 "inflight", "state", "other", "fin_seen", "writes")

    def __init__(self, conn: _Connection, s: int, splice: bool):
        self.conn = conn
        self.src, self.dst = conn.socks[s], conn.socks[1 - s]
        self.to_backend = s == _CLIENT
        self.splice = splice  # may move on to splice once the stream proves bulk
        self.piping = False  # moving bytes with splice (else copying through buf)
        self.pipe: tuple[int, int, int] | None = None
        self.buf: memoryview | None = None
        self.capacity = 0  # of the pipe or buffer
        self.start = 0  # where the unsent bytes begin in buf
        self.inflight = 0
        self.state = _READING
        self.other: _Pump | None = None
        self.fin_seen = False  # the source reported its peer's FIN: read on to the end
        self.writes = 0  # to the destination, for TCP_NODELAY before the second (endpoint side)

    # Both callbacks relay until the source is empty (stay reading), the destination would
    # block (stop reading, wait for writing), the source ends, or the budget is spent (resumed
    # after the next batch of events).

    def readable(self, events: int) -> None:
        if events & _RDHUP:  # (remembered while writing too: no new edge will come for it)
            self.fin_seen = True
        if self.state != _READING:
            return
        try:
            if self._relay():
                self._wait_writable()
        except OSError as err:
            self.conn.fail(err)

    def writable(self) -> None:
        if self.state != _WRITING:
            return
        try:
            if self._drain():
                self.state = _READING
                if self._relay():
                    self._wait_writable()
        except OSError as err:
            self.conn.fail(err)

    def _wait_writable(self) -> None:
        self.state = _WRITING
        if self.to_backend:
            self.conn.watch_backend_writable()
        else:
            self.conn.watch_client_writable()

    def _relay(self) -> bool:
        """Read and pass on until the source is empty; True: blocked on the destination.

        Copying, the bytes go through the relay's scratch buffer; only what the destination
        did not take stays with this direction, which then keeps that buffer (and the relay
        takes another scratch buffer). Most connections never hold a buffer of their own."""
        global _scratch
        if self.buf is not None and not self.inflight:
            _buffers.give(self.buf)
            self.buf = None
        if self.piping or self.buf is not None:
            return self._relay_held(WAKEUP_BUDGET)
        src, dst = self.src, self.dst
        budget = WAKEUP_BUDGET
        while True:
            scratch = _scratch
            try:
                n = src.recv_into(scratch, 0, _DONTWAIT)
            except _AGAIN:
                return False
            if n == 0:
                self._eof()
                return False
            if self.writes == 1 and self.to_backend:  # (the client's socket inherits it)
                dst.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.writes += 1
            try:
                sent = dst.send(scratch[:n], _DONTWAIT)
            except _AGAIN:
                sent = 0
            if sent < n:  # the destination is full: keep the rest, wait for it to be writable
                self.buf, self.capacity, self.start, self.inflight = scratch, COPY_BUFFER, sent, n - sent
                _scratch = _buffers.take()
                if n == COPY_BUFFER and self.splice:
                    self.conn.nonblocking()
                    self.piping = True
                return True
            if n < COPY_BUFFER and not self.fin_seen:  # a short recv: emptied
                return False
            budget -= n
            if budget <= 0:
                self.conn.poller.later(self)
                return False
            if self.splice:  # a bulk stream: splice from here on
                self.conn.nonblocking()
                self.piping = True
                return self._relay_held(budget)

    def _relay_held(self, budget: int) -> bool:
        """``_relay`` with a pipe or a buffer of this direction's own."""
        while True:
            n = self._fill()
            if n is None:  # nothing more to read for now: lend the pipe/buffer back
                self._release()
                return False
            if n == 0:
                self._eof()
                return False
            if not self._drain():
                return True
            if n < self.capacity and not self.fin_seen and self.pipe is None:  # a short recv: emptied
                self._release()
                return False
            budget -= n
            if budget <= 0:
                self._release()
                self.conn.poller.later(self)
                return False

    def _fill(self) -> int | None:
        """Read what the pipe/buffer holds (only ever called when it is empty); None: would
        block, 0: end of stream."""
        if self.piping:
            pipe = self.pipe
            if pipe is None:
                try:
                    pipe = self.pipe = _pipes.take()
                except OSError as err:  # out of descriptors: this direction copies on
                    log.debug("%s: no pipe for splice (%s): copying", self.conn.listener.name, err)
                    self.piping = self.splice = False
                    return self._fill()
                self.capacity = pipe[2]
            try:
                n = os.splice(self.src.fileno(), pipe[1], self.capacity, flags=_SPLICE_FLAGS)
            except _AGAIN:
                return None
        else:
            buf = self.buf
            if buf is None:
                buf = self.buf = _buffers.take()
                self.capacity = len(buf)
            try:
                n = self.src.recv_into(buf, 0, _DONTWAIT)
            except _AGAIN:
                return None
            self.start = 0
            if n == self.capacity and self.splice:  # a bulk stream: splice from the next read on
                self.conn.nonblocking()
                self.piping = True
        self.inflight = n
        return n

    def _drain(self) -> bool:
        """Write what is in flight; False: the destination took only part of it (its send
        buffer is full: wait until it is writable)."""
        left = self.inflight
        if self.writes == 1 and self.to_backend:  # (the client's socket inherits it)
            try:
                self.dst.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.writes += 1
        try:
            if self.pipe is not None and self.buf is None:
                n = os.splice(self.pipe[0], self.dst.fileno(), left, flags=_SPLICE_FLAGS)
            else:
                start = self.start
                n = self.dst.send(self.buf[start:start + left], _DONTWAIT)
                self.start = start + n
        except _AGAIN:
            return False
        self.inflight = left = left - n
        if not left and self.piping and self.buf is not None:  # the last copied bytes are out
            _buffers.give(self.buf)
            self.buf = None
        return not left

    def _eof(self) -> None:
        """The source sent its FIN (everything before it is passed on): pass it on."""
        if self.pipe is not None or self.buf is not None:
            self._release()
        self.inflight = 0
        self.state = _DONE
        if self.other.state == _DONE:  # both ended: closing sends this FIN
            self.conn.close()
            return
        try:
            self.dst.shutdown(socket.SHUT_WR)
        except OSError:  # the destination is gone already: the other direction finds out
            pass

    def _release(self) -> None:
        if self.pipe is not None:
            if self.inflight and self.buf is None:  # bytes that will never be sent: do not hand them to another
                _close_pipe(self.pipe)
            else:
                _pipes.give(self.pipe)
            self.pipe = None
        if self.buf is not None:
            _buffers.give(self.buf)
            self.buf = None
        self.inflight = 0


class _DialDeadlines:
    """Dial timeouts without a timer per connection: one queue per attempt (all deadlines in it
    have the same timeout, so arrival order is deadline order) and one timer for the earliest.
    A dial that completed stays queued until its deadline and is skipped then. While dials keep
    coming, the timer fires at most every ``DEADLINE_SLACK`` (each firing serves every deadline
    then due), so a dial may time out up to that much late: a timer per few connections, not one
    rescheduled per connection."""

    def __init__(self, loop: RelayLoop, timeouts: tuple[float, ...]):
        self.loop, self.timeouts = loop, timeouts
        self.queues: list[deque[tuple[float, _Connection, int]]] = [deque() for _ in timeouts]
        self.timer: Timer | None = None
        self.at = 0.0

    def add(self, conn: _Connection, attempt: int) -> None:
        deadline = self.loop.now + self.timeouts[attempt]  # (the batch's clock: no read per connection)
        self.queues[attempt].append((deadline, conn, conn.attempt))
        if self.timer is None or deadline < self.at:
            self._schedule(deadline)

    def _schedule(self, deadline: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.at = deadline
        self.timer = self.loop.call_at(deadline, self._expire)

    def _expire(self) -> None:
        self.timer = None
        now = self.loop.now
        for queue in self.queues:
            while queue and queue[0][0] <= now:
                _, conn, attempt = queue.popleft()
                if conn.connecting and conn.attempt == attempt:  # (attempt: the dial it was queued for)
                    conn.timed_out()
        heads = [queue[0][0] for queue in self.queues if queue]
        if heads and (self.timer is None or min(heads) < self.at):
            self._schedule(max(min(heads), now + DEADLINE_SLACK))

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for queue in self.queues:
            queue.clear()


def _connected(sock) -> bool:
    """Whether a socket's non-blocking connect has completed (it has a peer)."""
    try:
        sock.getpeername()
    except OSError:
        return False
    return True


class _Connection:
    """An accepted client: dialling an endpoint, then two pumps."""

    __slots__ = ("listener", "poller", "socks", "client_watch", "backend_watch", "client_ip", "endpoint", "tried", "attempt",
                 "connecting", "pumps", "closed", "blocking")

    def __init__(self, listener: TcpListener, client: socket.socket, client_ip: str):
        self.listener = listener
        self.poller = listener.poller
        self.socks: list[socket.socket | None] = [client, None]  # (a socket is in the epoll set until closed)
        self.client_watch = 0  # what the client's socket is registered for (0: not yet)
        self.backend_watch = 0  # and the endpoint's
        self.client_ip = client_ip
        self.endpoint: Endpoint | None = None
        self.tried: set[Endpoint] | None = None  # the endpoints that failed for this connection
        self.attempt = 0
        self.connecting = False  # the backend socket waits for its connect to complete
        self.pumps: tuple[_Pump, _Pump] | None = None
        self.closed = False
        self.blocking = True  # the client's socket (as accepted); the backend's never is
        listener.connections.add(self)

    def watch_client_writable(self) -> None:
        if self.client_watch == _WATCH_READ:
            self.client_watch = _WATCH
            self.poller.ep.modify(self.socks[_CLIENT].fileno(), _WATCH)  # (reports writable at once if it is)

    def watch_backend_writable(self) -> None:
        if self.backend_watch == _WATCH_READ:  # (connected at once: registered for reading only)
            self.backend_watch = _WATCH
            self.poller.ep.modify(self.socks[_BACKEND].fileno(), _WATCH)

    def nonblocking(self) -> None:
        """Splice needs O_NONBLOCK on the sockets themselves (it has no MSG_DONTWAIT)."""
        if self.blocking:
            self.blocking = False
            self.socks[_CLIENT].setblocking(False)

    def _on_client(self, events: int) -> None:
        if self.pumps is None:
            return
        up, down = self.pumps
        if events & (_IN | _RDHUP | _ERRHUP):
            up.readable(events)
        if down.state == _WRITING and events & (_OUT | _ERRHUP):  # (writable is reported with every event)
            down.writable()
        if events & _ERR and not self.closed:  # reset while neither direction was reading it
            self.fail(ConnectionResetError(errno.ECONNRESET, "client reset"))

    def _on_backend(self, events: int) -> None:
        if self.connecting:
            if events & _ERRHUP:
                sock = self.socks[_BACKEND]
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) or errno.ECONNREFUSED
                self._drop_backend()
                self._failed(OSError(err, os.strerror(err)))
                self._redial()
            elif events & (_OUT | _IN):
                self._relay(events)
            return
        if self.pumps is None:
            return
        up, down = self.pumps
        if events & (_IN | _RDHUP | _ERRHUP):
            down.readable(events)
        if up.state == _WRITING and events & (_OUT | _ERRHUP):
            up.writable()
        if events & _ERR and not self.closed:
            self.fail(ConnectionResetError(errno.ECONNRESET, "endpoint reset"))

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
                sock = _socket.socket(socket.AF_INET6 if ":" in endpoint[0] else socket.AF_INET, socket.SOCK_STREAM | _SOCK_NONBLOCK)
                if not _SOCK_NONBLOCK:
                    sock.setblocking(False)
            except OSError as exc:
                self._failed(exc)
                continue
            err = sock.connect_ex(endpoint)
            if err in _CONNECTING:
                poller = self.poller
                fd = sock.fileno()
                # On loopback the handshake is usually over when connect() returns (the kernel
                # ran the endpoint's side of it within the call): then relaying starts now, and
                # the socket is watched for reading only, as the client's is (for writing too
                # only once a direction waits to write to it). No event for the connect, no dial
                # deadline, no writable edge for every ACK afterwards. Otherwise: writable once
                # connected, an error if refused, a deadline if neither comes in time.
                connected = not err or _connected(sock)
                watch = _WATCH_READ if connected else _WATCH
                try:
                    poller.ep.register(fd, watch)
                except OSError as exc:
                    sock.close()
                    self._failed(exc)
                    continue
                poller.handlers[fd] = self._on_backend
                self.socks[_BACKEND] = sock
                self.backend_watch = watch
                if connected:
                    self._relay(0)
                    return
                self.connecting = True
                listener.deadlines.add(self, attempt)
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
        self.poller.close(self.socks[_BACKEND])
        self.socks[_BACKEND] = None

    def timed_out(self) -> None:
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

    def _relay(self, events: int) -> None:
        """The endpoint answered: relay both ways, reading the client at once (it has likely
        sent already), then watch it."""
        self.connecting = False
        splice = self.listener.splice
        up, down = _Pump(self, _CLIENT, splice), _Pump(self, _BACKEND, splice)
        up.other, down.other = down, up
        self.pumps = (up, down)
        up.readable(0)
        if events & (_IN | _RDHUP):  # the endpoint spoke first
            down.readable(events)
        if not self.closed:
            watch = _WATCH if down.state == _WRITING else _WATCH_READ
            try:
                self.poller.register(self.socks[_CLIENT], self._on_client, watch)
            except OSError as err:
                self.fail(err)
                return
            self.client_watch = watch

    def in_flight(self) -> int:
        """Bytes read from one side and not yet written to the other."""
        return sum(pump.inflight for pump in self.pumps) if self.pumps else 0

    def _end(self) -> bool:
        if self.closed:
            return False
        self.closed = True
        self.listener.connections.discard(self)
        self.connecting = False
        if self.pumps is not None:  # (no cycles left: refcounting frees the connection, not the GC)
            for pump in self.pumps:
                pump.state = _DONE
                if pump.pipe is not None or pump.buf is not None:
                    pump._release()
                pump.other = None
            self.pumps = None
        return True

    def _close(self, reset: bool) -> None:
        poller = self.poller
        handlers, deferred = poller.handlers, poller.dispatching  # (poller.close, inlined: every connection ends here)
        for sock in self.socks:
            if sock is not None:
                if reset:
                    try:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
                    except OSError:
                        pass
                handlers.pop(sock.fileno(), None)
                if deferred:
                    poller.closing.append(sock)
                else:
                    sock.close()

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
    False: copy through a buffer even where splice(2) is available (True: splice bulk streams).

    The listener and its connections live on the relay thread (``loop.RelayLoop``): ``choose``
    is called there, so it must be safe against the thread that changes its endpoints (the
    proxier holds a lock around both). ``start``, ``close`` and ``in_flight`` may be called
    from any thread."""

    def __init__(self, choose: Chooser, *, name: str = "", timeouts: tuple[float, ...] = CONNECT_TIMEOUTS, backlog: int = 1024,
                 splice: bool | None = None):
        self.choose = choose
        self.name = name
        self.timeouts = timeouts
        self.backlog = backlog
        self.splice = SPLICE if splice is None else splice and SPLICE
        self.connections: set[_Connection] = set()  # (changed on the relay thread only)
        self.sock: socket.socket | None = None
        self.poller: RelayLoop | None = None
        self.deadlines: _DialDeadlines | None = None
        self.paused: Timer | None = None
        self.port = 0
        self.family = 0
        self.failed_dials = 0
        self.rejected = 0

    async def start(self, ip: str = "0.0.0.0", port: int = 0) -> TcpListener:
        sock = bound_socket(ip, socket.SOCK_STREAM, port)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted sockets inherit it
            sock.listen(self.backlog)
            self.port = sock.getsockname()[1]
            self.family = sock.family.value  # (the property builds an enum on every read)
            self.poller = loop = relay_loop()
            self.deadlines = _DialDeadlines(loop, self.timeouts)
            loop.call(loop.register, sock, self._accept, _IN)  # (level-triggered: accepts at most backlog a time)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        return self

    def _accept(self, events: int) -> None:
        """Accept until the kernel's queue is empty (at most ``backlog`` at a time)."""
        accept, family = self.sock._accept, self.family
        for _ in range(self.backlog):
            try:  # (the C-level accept and socket: socket.socket's Python layer costs more than the calls)
                fd, addr = accept()
            except _AGAIN:
                return
            except OSError as err:
                if err.errno in _ACCEPT_RESOURCE_ERRORS:
                    log.error("%s: cannot accept connections (%s): pausing %.0f s", self.name, err, ACCEPT_RETRY_DELAY)
                    self.poller.unregister(self.sock)
                    self.paused = self.poller.call_at(_monotonic() + ACCEPT_RETRY_DELAY, self._resume)
                    return
                continue  # ECONNABORTED and the like: that client is gone already
            try:
                client = _socket.socket(family, socket.SOCK_STREAM, 0, fd)  # blocking, as accepted: MSG_DONTWAIT on every call
            except OSError:
                os.close(fd)
                continue
            conn = None
            try:
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
            self.poller.register(self.sock, self._accept, _IN)

    def in_flight(self) -> int:
        """Bytes the relay holds for all its connections (at most one pipe or buffer per
        direction)."""
        if self.poller is None:
            return 0
        return self.poller.call(lambda: sum(conn.in_flight() for conn in self.connections))

    def close(self, *, connections: bool = False) -> None:
        """Stop accepting (the port is closed when this returns); with ``connections`` also cut
        the relayed ones (otherwise they live on to their end, as upstream's when a Service port
        goes away)."""
        if self.poller is not None:
            self.poller.call(self._close, connections)

    def _close(self, connections: bool) -> None:
        if self.sock is not None:
            if self.paused is not None:
                self.paused.cancel()
                self.paused = None
                self.sock.close()
            else:
                self.poller.close(self.sock)
            self.sock = None
        if connections:
            for conn in list(self.connections):
                conn.abort()
            self.connections.clear()
            if self.deadlines is not None:
                self.deadlines.close()


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
