"""The relay on real sockets on 127.0.0.1. TCP under both event loops (asyncio, uvloop) and
both ways of moving bytes (splice, copy): bulk data intact both ways at once, half-close in
each direction, resets passed on, a slow reader holding the relay to one pipe or buffer (the
sender is pushed back), refused and timed-out endpoints retried, endpoint changes that leave
established connections alone, the listener closing, no descriptor left behind. UDP flows and
their idle expiry."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import socket
import struct

import pytest

from kubesvc.proxy.userspace import relay
from kubesvc.proxy.userspace.loadbalancer import LoadBalancerRR
from kubesvc.proxy.userspace.relay import COPY_BUFFER, PIPE_SIZE, TcpListener, UdpListener

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None

HOST = "127.0.0.1"

LOOPS = [pytest.param(asyncio.new_event_loop, id="asyncio"),
         pytest.param(uvloop and uvloop.new_event_loop, id="uvloop", marks=pytest.mark.skipif(uvloop is None, reason="no uvloop"))]


@pytest.fixture(params=LOOPS)
def run(request):
    """Runs a coroutine to its end on a new event loop of each kind."""
    def run(coro, timeout: float = 60):
        with asyncio.Runner(loop_factory=request.param) as runner:
            return runner.run(asyncio.wait_for(coro, timeout))
    return run


@pytest.fixture(params=["splice", "copy"])
def splice(request) -> bool:
    if request.param == "splice" and not relay.SPLICE:
        pytest.skip("no splice(2) on this platform")
    return request.param == "splice"


def balancer(*endpoints) -> LoadBalancerRR:
    lb = LoadBalancerRR(shuffle=lambda xs: None)
    lb.update("svc", endpoints)
    return lb


def chooser(lb: LoadBalancerRR):
    return lambda ip, reset, exclude: lb.next_endpoint("svc", ip, reset=reset, exclude=exclude)


async def listen(splice: bool, *endpoints, lb: LoadBalancerRR | None = None, **options) -> TcpListener:
    return await TcpListener(chooser(lb or balancer(*endpoints)), splice=splice, **options).start(HOST)


def free_port() -> int:
    """A port nothing listens on (connections to it are refused)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


async def until(condition, what: str, timeout: float = 5) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


class Backend(asyncio.Protocol):
    """Test server: ``mode`` echo (echo until EOF, then close), ``send`` (send ``payload`` then
    close), ``sink-then-answer`` (read until EOF, answer with the byte count and a digest),
    ``duplex`` (send ``payload`` while reading until EOF; ``done`` gets the count and digest of
    what came), ``name`` (send the name)."""

    def __init__(self, mode: str, payload: bytes = b"", name: str = "", done: asyncio.Future | None = None):
        self.mode, self.payload, self.name, self.done = mode, payload, name, done
        self.received = hashlib.sha256()
        self.count = 0

    def connection_made(self, transport):
        self.transport = transport
        if self.mode == "send":
            transport.write(self.payload)
            transport.close()
        elif self.mode == "duplex":
            transport.write(self.payload)
        elif self.mode == "name":
            transport.write(self.name.encode() + b"\n")

    def data_received(self, data):
        if self.mode == "echo":
            self.transport.write(data)
        self.received.update(data)
        self.count += len(data)

    def eof_received(self):
        if self.mode == "sink-then-answer":
            self.transport.write(f"{self.count} {self.received.hexdigest()}".encode())
        if self.done is not None:
            self.done.set_result((self.count, self.received.hexdigest()))
        self.transport.close()


async def serve(factory) -> tuple[asyncio.AbstractServer, tuple[str, int]]:
    server = await asyncio.get_running_loop().create_server(factory, HOST, 0)
    return server, (HOST, server.sockets[0].getsockname()[1])


async def connect(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (HOST, port))
    except BaseException:
        sock.close()
        raise
    return sock


async def recv_all(sock: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    chunks = []
    while chunk := await loop.sock_recv(sock, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


async def recv_digest(sock: socket.socket) -> tuple[int, str]:
    loop = asyncio.get_running_loop()
    digest, count = hashlib.sha256(), 0
    while chunk := await loop.sock_recv(sock, 1 << 20):
        digest.update(chunk)
        count += len(chunk)
    return count, digest.hexdigest()


async def exchange(port: int, payload: bytes) -> bytes:
    """Send ``payload`` while reading, then half-close; everything the other side sent."""
    loop = asyncio.get_running_loop()
    sock = await connect(port)
    try:
        async def send():
            await loop.sock_sendall(sock, payload)
            sock.shutdown(socket.SHUT_WR)
        sender = asyncio.create_task(send())
        data = await recv_all(sock)
        await sender
        return data
    finally:
        sock.close()


def digest(data: bytes) -> tuple[int, str]:
    return len(data), hashlib.sha256(data).hexdigest()


PAYLOAD = bytes(range(256)) * (32 * 1024)  # 8 MiB


# ---- TCP -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, expect", [
    pytest.param("echo", lambda: PAYLOAD, id="client to backend and back (echo)"),
    pytest.param("send", lambda: PAYLOAD, id="backend to client"),
    pytest.param("sink-then-answer", lambda: f"{len(PAYLOAD)} {hashlib.sha256(PAYLOAD).hexdigest()}".encode(),
                 id="client to backend, answer after the client's FIN (half-close)"),
])
def test_tcp_bulk_and_half_close(run, splice, mode, expect):
    async def main():
        server, addr = await serve(lambda: Backend(mode, PAYLOAD))
        listener = await listen(splice, addr)
        try:
            got = await exchange(listener.port, PAYLOAD if mode != "send" else b"")
            assert len(got) == len(expect()) and got == expect()
            await until(lambda: not listener.connections, "the relay to close once both directions ended")
        finally:
            listener.close(connections=True)
            server.close()
    run(main())


def test_bulk_both_ways_at_once_arrives_intact(run, splice):
    """50 MB each way at the same time, different data each way: both sides get exactly what
    the other sent (count and SHA-256)."""
    rng = random.Random(7)
    up, down = rng.randbytes(50_000_000), rng.randbytes(50_000_000)

    async def main():
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        server, addr = await serve(lambda: Backend("duplex", down, done=done))
        listener = await listen(splice, addr)
        sock = await connect(listener.port)
        try:
            async def send():
                await loop.sock_sendall(sock, up)
                sock.shutdown(socket.SHUT_WR)
            sender = asyncio.create_task(send())
            assert await recv_digest(sock) == digest(down), "backend to client"
            await sender
            assert await done == digest(up), "client to backend"
            await until(lambda: not listener.connections, "the relay to close")
        finally:
            sock.close()
            listener.close(connections=True)
            server.close()
    run(main())


def test_tcp_backend_half_close_keeps_client_direction_open(run, splice):
    """The backend sends, then FIN; the client keeps sending after reading the EOF and the
    backend still receives all of it."""
    async def main():
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        class HalfCloser(asyncio.Protocol):
            def connection_made(self, transport):
                self.transport, self.n = transport, 0
                transport.write(b"hello")
                transport.write_eof()

            def data_received(self, data):
                self.n += len(data)

            def eof_received(self):
                done.set_result(self.n)
                self.transport.close()

        server, addr = await serve(HalfCloser)
        listener = await listen(splice, addr)
        sock = await connect(listener.port)
        try:
            assert await recv_all(sock) == b"hello"
            await loop.sock_sendall(sock, b"x" * 3_000_000)
            sock.shutdown(socket.SHUT_WR)
            assert await asyncio.wait_for(done, 5) == 3_000_000
            await until(lambda: not listener.connections, "the relay to close")
        finally:
            sock.close()
            listener.close(connections=True)
            server.close()
    run(main())


def reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@pytest.mark.parametrize("who", ["backend", "client"])
def test_a_reset_on_one_side_resets_the_other(run, splice, who):
    """A reset is passed on as a reset, not as a clean end of stream: the side still there
    gets ECONNRESET, after everything sent before it."""
    async def main():
        loop = asyncio.get_running_loop()
        backend_listener = socket.create_server((HOST, 0))
        backend_listener.setblocking(False)
        listener = await listen(splice, backend_listener.getsockname())
        client = await connect(listener.port)
        backend, _ = await loop.sock_accept(backend_listener)
        backend.setblocking(False)
        try:
            await loop.sock_sendall(client, b"ping")
            assert await loop.sock_recv(backend, 10) == b"ping"
            await loop.sock_sendall(backend, b"pong")
            assert await loop.sock_recv(client, 10) == b"pong"
            gone, still = (backend, client) if who == "backend" else (client, backend)
            reset(gone)
            with pytest.raises(ConnectionResetError):
                await asyncio.wait_for(recv_all(still), 5)
            await until(lambda: not listener.connections, "the relay to close")
        finally:
            for s in (client, backend, backend_listener):
                s.close()
            listener.close(connections=True)
    run(main())


def test_a_client_reset_after_its_fin_resets_the_endpoint_at_once(run, splice):
    """The client sends, half-closes, then resets while the endpoint has not answered: the relay
    does not wait for the endpoint to write before it notices; the endpoint's connection is
    reset (its next send fails) and the relayed connection ends."""
    async def main():
        loop = asyncio.get_running_loop()
        backend_listener = socket.create_server((HOST, 0))
        backend_listener.setblocking(False)
        listener = await listen(splice, backend_listener.getsockname())
        client = await connect(listener.port)
        backend, _ = await loop.sock_accept(backend_listener)
        backend.setblocking(False)
        try:
            await loop.sock_sendall(client, b"request")
            client.shutdown(socket.SHUT_WR)
            assert await asyncio.wait_for(recv_all(backend), 5) == b"request"  # (and the FIN)
            reset(client)
            await until(lambda: not listener.connections, "the relay to end the connection")
            with pytest.raises((BrokenPipeError, ConnectionResetError)):
                for _ in range(500):
                    backend.send(b"late answer")
                    await asyncio.sleep(0.01)
        finally:
            for s in (client, backend, backend_listener):
                s.close()
            listener.close(connections=True)
    run(main())


def test_slow_reader_pushes_back_on_the_sender(run, splice):
    """The backend sends 128 MiB to a client that reads nothing for a while: the relay stops
    reading, so the backend's sends block after what the socket buffers and one pipe (or
    buffer) hold, and the relay never holds more than that pipe (buffer); once the client
    reads, everything arrives intact."""
    payload = random.Random(3).randbytes(128 << 20)
    capacity = PIPE_SIZE if splice else COPY_BUFFER

    async def main():
        loop = asyncio.get_running_loop()
        backend_listener = socket.create_server((HOST, 0))
        backend_listener.setblocking(False)
        listener = await listen(splice, backend_listener.getsockname())
        client = await connect(listener.port)
        backend, _ = await loop.sock_accept(backend_listener)
        backend.setblocking(False)
        sent = 0

        async def push():
            nonlocal sent
            view = memoryview(payload)
            while sent < len(payload):
                try:
                    sent += backend.send(view[sent:sent + (1 << 20)])
                except BlockingIOError:
                    await asyncio.sleep(0.005)
            backend.close()

        pusher = asyncio.create_task(push())
        try:
            last, still = -1, 0
            while still < 5:  # no progress for 0.5 s: the sender is stuck
                await asyncio.sleep(0.1)
                still, last = (still + 1, last) if sent == last else (0, sent)
                assert listener.in_flight() <= capacity
            conn = next(iter(listener.connections))
            buffers = (client.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
                       + conn.socks[0].getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
                       + conn.socks[1].getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
                       + backend.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
            assert sent < len(payload), "the sender was never pushed back"
            assert sent <= buffers + capacity + (1 << 20), (sent, buffers, capacity)  # (1 MiB: accounting slack)
            assert listener.in_flight() <= capacity
            assert await recv_digest(client) == digest(payload)
            await pusher
        finally:
            pusher.cancel()
            client.close()
            backend.close()
            backend_listener.close()
            listener.close(connections=True)
    run(main())


async def names(port: int, count: int) -> list[str]:
    return [(await asyncio.wait_for(exchange(port, b""), 5)).decode().strip() for _ in range(count)]


@pytest.mark.parametrize("refusing", [
    pytest.param(1, id="one of three refuses"),
    pytest.param(2, id="two of three refuse"),
])
def test_refused_endpoints_are_retried(run, splice, refusing):
    async def main():
        servers = []
        endpoints = [(HOST, free_port()) for _ in range(refusing)]
        for i in range(3 - refusing):
            server, addr = await serve(lambda i=i: Backend("name", name=f"good-{i}"))
            servers.append(server)
            endpoints.append(addr)
        listener = await listen(splice, *endpoints)
        try:
            got = await names(listener.port, 30)
            assert set(got) == {f"good-{i}" for i in range(3 - refusing)}, got
            assert listener.failed_dials >= 10 and listener.rejected == 0
        finally:
            listener.close(connections=True)
            for server in servers:
                server.close()
    run(main())


@pytest.mark.parametrize("endpoints", [
    pytest.param(lambda: [(HOST, free_port())], id="every endpoint refuses"),
    pytest.param(lambda: [], id="no endpoints"),
])
def test_client_is_cut_when_no_endpoint_answers(run, splice, endpoints):
    async def main():
        listener = await listen(splice, *endpoints(), timeouts=(0.25, 0.25))
        try:
            sock = None
            try:  # the reset may come before the client's connect() returns or after
                sock = await connect(listener.port)
                outcome = await asyncio.wait_for(recv_all(sock), 5)
            except ConnectionResetError:
                outcome = "reset"
            finally:
                if sock is not None:
                    sock.close()
            assert outcome == "reset"
            assert listener.rejected == 1
            assert not listener.connections
        finally:
            listener.close(connections=True)
    run(main())


def test_dial_timeout_moves_on_to_the_next_endpoint(run, splice):
    """A backend whose accept queue is full never completes the handshake: the dial times out
    after the first timeout and the next endpoint serves."""
    async def main():
        stuck = socket.socket()
        stuck.bind((HOST, 0))
        stuck.listen(0)
        fillers = []
        for _ in range(4):  # fill the accept queue (SYNs beyond it are dropped)
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(stuck.getsockname())
            fillers.append(s)
        await asyncio.sleep(0.1)
        server, good = await serve(lambda: Backend("name", name="good"))
        listener = await listen(splice, stuck.getsockname(), good, timeouts=(0.2, 0.2, 0.2))
        try:
            loop = asyncio.get_running_loop()
            started = loop.time()
            assert await names(listener.port, 2) == ["good", "good"]
            assert listener.failed_dials >= 1 and loop.time() - started < 3
        finally:
            listener.close(connections=True)
            server.close()
            stuck.close()
            for s in fillers:
                s.close()
    run(main())


def test_endpoint_change_keeps_established_connections(run, splice):
    async def main():
        server_a, a = await serve(lambda: Backend("echo"))
        server_b, b = await serve(lambda: Backend("name", name="b"))
        lb = balancer(a)
        listener = await listen(splice, lb=lb)
        loop = asyncio.get_running_loop()
        try:
            sock = await connect(listener.port)
            await loop.sock_sendall(sock, b"ping")
            assert await asyncio.wait_for(loop.sock_recv(sock, 10), 5) == b"ping"
            lb.update("svc", [b])  # a leaves the Service
            assert await names(listener.port, 2) == ["b", "b"]
            await loop.sock_sendall(sock, b"still there")
            assert await asyncio.wait_for(loop.sock_recv(sock, 20), 5) == b"still there"
            sock.close()
        finally:
            listener.close(connections=True)
            server_a.close()
            server_b.close()
    run(main())


def test_closing_the_listener_leaves_relayed_connections_unless_told(run, splice):
    """``close()``: no new connections, the established one goes on; ``close(connections=True)``
    cuts it."""
    async def main():
        server, addr = await serve(lambda: Backend("echo"))
        listener = await listen(splice, addr)
        loop = asyncio.get_running_loop()
        sock = await connect(listener.port)
        try:
            await loop.sock_sendall(sock, b"one")
            assert await loop.sock_recv(sock, 10) == b"one"
            listener.close()
            with pytest.raises(ConnectionRefusedError):
                (await connect(listener.port)).close()
            await loop.sock_sendall(sock, b"two")
            assert await loop.sock_recv(sock, 10) == b"two"
            listener.close(connections=True)
            try:
                assert await asyncio.wait_for(loop.sock_recv(sock, 10), 5) == b""
            except ConnectionResetError:
                pass
            assert not listener.connections
        finally:
            sock.close()
            listener.close(connections=True)
            server.close()
    run(main())


@pytest.mark.parametrize("early_eof", [pytest.param(False, id="data first"), pytest.param(True, id="data and FIN first")])
def test_data_sent_before_the_endpoint_answers_is_relayed(run, splice, early_eof):
    """Data (and a FIN) the client sends before the endpoint's connection is up is not lost."""
    async def main():
        server, addr = await serve(lambda: Backend("sink-then-answer" if early_eof else "echo"))
        listener = await listen(splice, addr)
        loop = asyncio.get_running_loop()
        try:
            for _ in range(20):
                sock = socket.create_connection((HOST, listener.port))
                sock.sendall(b"early bird")
                if early_eof:
                    sock.shutdown(socket.SHUT_WR)
                sock.setblocking(False)
                got = await asyncio.wait_for(loop.sock_recv(sock, 100), 5)
                sock.close()
                expected = f"10 {hashlib.sha256(b'early bird').hexdigest()}".encode() if early_eof else b"early bird"
                assert got == expected
        finally:
            listener.close(connections=True)
            server.close()
    run(main())


def test_without_a_pipe_the_relay_copies(run, monkeypatch):
    """Out of descriptors for a splice pipe: the connection is relayed by copying instead."""
    if not relay.SPLICE:
        pytest.skip("no splice(2) on this platform")

    def no_pipe():
        raise OSError(24, "Too many open files")
    monkeypatch.setattr(relay, "_pipes", relay._Pool(no_pipe))

    async def main():
        server, addr = await serve(lambda: Backend("echo"))
        listener = await listen(True, addr)
        try:
            assert await exchange(listener.port, PAYLOAD) == PAYLOAD
        finally:
            listener.close(connections=True)
            server.close()
    run(main())


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback")
def test_ipv6_listener_and_endpoint(run, splice):
    async def main():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: Backend("echo"), "::1", 0)
        endpoint = ("::1", server.sockets[0].getsockname()[1])
        listener = await TcpListener(chooser(balancer(endpoint)), splice=splice).start("::1")
        sock = socket.socket(socket.AF_INET6)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, ("::1", listener.port))
            await loop.sock_sendall(sock, PAYLOAD)
            sock.shutdown(socket.SHUT_WR)
            assert await recv_all(sock) == PAYLOAD
        finally:
            sock.close()
            listener.close(connections=True)
            server.close()
    run(main())


def test_no_descriptor_is_left_behind(run, splice):
    """After many relayed connections (ended, reset, refused), the process holds no more
    descriptors than the idle pipes kept for the next connections."""
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    async def main():
        server, addr = await serve(lambda: Backend("echo"))
        listener = await listen(splice, (HOST, free_port()), addr)  # every other dial is refused first
        loop = asyncio.get_running_loop()
        try:
            await exchange(listener.port, b"warm up")
            before, pooled = fds(), len(relay._pipes.free)
            for i in range(50):
                assert await exchange(listener.port, b"x" * (i * 5000)) == b"x" * (i * 5000)
            sock = await connect(listener.port)
            await loop.sock_sendall(sock, b"bye")
            assert await loop.sock_recv(sock, 10) == b"bye"
            reset(sock)
            await until(lambda: not listener.connections, "every relay to end")
            # (the relay thread closes an ended connection's sockets at the end of its batch of events)
            await until(lambda: fds() - before <= 2 * (len(relay._pipes.free) - pooled), "every descriptor closed")
            assert len(relay._pipes.free) <= relay.POOL_SIZE
        finally:
            listener.close(connections=True)
            server.close()
    run(main())


def test_tcp_relays_while_the_proxy_event_loop_is_busy(run):
    """TCP is relayed on a thread of its own: a proxy event loop held up (a long sync, a slow
    callback) does not hold up relayed connections. A blocking client in another thread gets
    its answers while this loop sleeps."""
    import threading
    import time

    def blocking_exchange(port: int, out: list) -> None:
        with socket.create_connection((HOST, port), timeout=5) as sock:
            for i in range(20):
                sock.sendall(b"ping %d" % i)
                out.append(sock.recv(100))

    async def main():
        server = socket.create_server((HOST, 0))

        def echo() -> None:  # a blocking echo server in its own thread
            conn, _ = server.accept()
            with conn:
                while data := conn.recv(100):
                    conn.sendall(data)
        threading.Thread(target=echo, daemon=True).start()
        listener = await listen(False, server.getsockname())
        answers: list[bytes] = []
        client = threading.Thread(target=blocking_exchange, args=(listener.port, answers))
        try:
            client.start()
            started = time.monotonic()
            while client.is_alive() and time.monotonic() - started < 5:
                time.sleep(0.01)  # the event loop blocked all along
            assert answers == [b"ping %d" % i for i in range(20)]
        finally:
            client.join(5)
            listener.close(connections=True)
            server.close()
    run(main())


# ---- UDP -----------------------------------------------------------------------------------


class UdpBackend(asyncio.DatagramProtocol):
    def __init__(self, name: str):
        self.name = name

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.transport.sendto(f"{self.name} {data.decode()}".encode(), addr)


async def udp_backends(*names):
    loop = asyncio.get_running_loop()
    made = [await loop.create_datagram_endpoint(lambda n=n: UdpBackend(n), local_addr=(HOST, 0)) for n in names]
    return [t for t, _ in made], [t.get_extra_info("sockname") for t, _ in made]


async def udp_ask(sock: socket.socket, port: int, text: str) -> str:
    loop = asyncio.get_running_loop()
    sock.sendto(text.encode(), (HOST, port))
    data = await asyncio.wait_for(loop.sock_recv(sock, 1000), 2)
    return data.decode()


def udp_client() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((HOST, 0))
    sock.setblocking(False)
    return sock


async def test_udp_flows_stick_per_client_and_expire_when_idle():
    transports, addrs = await udp_backends("u1", "u2")
    lb = balancer(*addrs)
    listener = await UdpListener(chooser(lb), idle_timeout=0.3).start(HOST)
    c1, c2 = udp_client(), udp_client()
    try:
        assert await udp_ask(c1, listener.port, "a") == "u1 a"
        assert await udp_ask(c2, listener.port, "b") == "u2 b"
        for i in range(5):  # each client's flow keeps its endpoint while active
            assert await udp_ask(c1, listener.port, f"x{i}") == f"u1 x{i}"
            assert await udp_ask(c2, listener.port, f"y{i}") == f"u2 y{i}"
            await asyncio.sleep(0.1)
        assert len(listener.flows) == 2
        await asyncio.sleep(0.5)  # idle past the timeout: both flows end
        assert listener.flows == {}
        assert (await udp_ask(c2, listener.port, "again")).startswith("u1")  # a new flow, a new choice
    finally:
        listener.close()
        for t in transports:
            t.close()
        c1.close()
        c2.close()


async def test_udp_flow_to_a_removed_endpoint_ends():
    transports, addrs = await udp_backends("old", "new")
    lb = balancer(addrs[0])
    listener = await UdpListener(chooser(lb), idle_timeout=10).start(HOST)
    client = udp_client()
    try:
        assert await udp_ask(client, listener.port, "1") == "old 1"
        lb.update("svc", [addrs[1]])
        assert listener.drop_flows({addrs[1]}) == 1
        assert await udp_ask(client, listener.port, "2") == "new 2"
    finally:
        listener.close()
        for t in transports:
            t.close()
        client.close()


async def test_udp_without_endpoints_drops_datagrams():
    listener = await UdpListener(chooser(balancer()), idle_timeout=1).start(HOST)
    client = udp_client()
    try:
        with pytest.raises(asyncio.TimeoutError):
            await udp_ask(client, listener.port, "anyone?")
        assert listener.flows == {}
    finally:
        listener.close()
        client.close()


