"""The relay on real sockets on 127.0.0.1: bulk data both ways, half-close, a refused endpoint
retried, endpoint changes that leave established connections alone, UDP flows and their idle
expiry."""

from __future__ import annotations

import asyncio
import hashlib
import socket

import pytest

from kubesvc.proxy.userspace.loadbalancer import LoadBalancerRR
from kubesvc.proxy.userspace.relay import TcpListener, UdpListener

HOST = "127.0.0.1"


def balancer(*endpoints) -> LoadBalancerRR:
    lb = LoadBalancerRR(shuffle=lambda xs: None)
    lb.update("svc", endpoints)
    return lb


def chooser(lb: LoadBalancerRR):
    return lambda ip, reset, exclude: lb.next_endpoint("svc", ip, reset=reset, exclude=exclude)


def free_port() -> int:
    """A port nothing listens on (connections to it are refused)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Backend(asyncio.Protocol):
    """Test server: ``mode`` echo (echo until EOF, then close), ``send`` (send ``payload`` then
    close), ``sink-then-answer`` (read until EOF, answer with the byte count and a digest)."""

    def __init__(self, mode: str, payload: bytes = b"", name: str = ""):
        self.mode, self.payload, self.name = mode, payload, name
        self.received = hashlib.sha256()
        self.count = 0

    def connection_made(self, transport):
        self.transport = transport
        if self.mode == "send":
            transport.write(self.payload)
            transport.close()
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
        self.transport.close()


async def serve(factory) -> tuple[asyncio.AbstractServer, tuple[str, int]]:
    server = await asyncio.get_running_loop().create_server(factory, HOST, 0)
    return server, (HOST, server.sockets[0].getsockname()[1])


async def connect(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (HOST, port))
    return sock


async def recv_all(sock: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    chunks = []
    while chunk := await loop.sock_recv(sock, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


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


PAYLOAD = bytes(range(256)) * (32 * 1024)  # 8 MiB


@pytest.mark.parametrize("mode, expect", [
    pytest.param("echo", lambda: PAYLOAD, id="client to backend and back (echo)"),
    pytest.param("send", lambda: PAYLOAD, id="backend to client"),
    pytest.param("sink-then-answer", lambda: f"{len(PAYLOAD)} {hashlib.sha256(PAYLOAD).hexdigest()}".encode(),
                 id="client to backend, answer after the client's FIN (half-close)"),
])
async def test_tcp_bulk_and_half_close(mode, expect):
    server, addr = await serve(lambda: Backend(mode, PAYLOAD))
    listener = await TcpListener(chooser(balancer(addr))).start(HOST)
    try:
        got = await asyncio.wait_for(exchange(listener.port, PAYLOAD if mode != "send" else b""), 30)
        assert len(got) == len(expect()) and got == expect()
        await asyncio.sleep(0.05)
        assert not listener.connections, "relay must close once both directions ended"
    finally:
        listener.close(connections=True)
        server.close()


async def test_tcp_backend_half_close_keeps_client_direction_open():
    """The backend sends, then FIN; the client keeps sending after reading the EOF and the
    backend still receives all of it."""
    done = asyncio.get_running_loop().create_future()

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
    listener = await TcpListener(chooser(balancer(addr))).start(HOST)
    loop = asyncio.get_running_loop()
    try:
        sock = await connect(listener.port)
        assert await asyncio.wait_for(recv_all(sock), 5) == b"hello"
        await loop.sock_sendall(sock, b"x" * 100000)
        sock.shutdown(socket.SHUT_WR)
        assert await asyncio.wait_for(done, 5) == 100000
        sock.close()
    finally:
        listener.close(connections=True)
        server.close()


async def names(port: int, count: int) -> list[str]:
    return [(await asyncio.wait_for(exchange(port, b""), 5)).decode().strip() for _ in range(count)]


@pytest.mark.parametrize("refusing", [
    pytest.param(1, id="one of three refuses"),
    pytest.param(2, id="two of three refuse"),
])
async def test_refused_endpoints_are_retried(refusing):
    servers = []
    endpoints = [(HOST, free_port()) for _ in range(refusing)]
    for i in range(3 - refusing):
        server, addr = await serve(lambda i=i: Backend("name", name=f"good-{i}"))
        servers.append(server)
        endpoints.append(addr)
    listener = await TcpListener(chooser(balancer(*endpoints))).start(HOST)
    try:
        got = await names(listener.port, 30)
        assert set(got) == {f"good-{i}" for i in range(3 - refusing)}, got
        assert listener.failed_dials >= 10 and listener.rejected == 0
    finally:
        listener.close(connections=True)
        for server in servers:
            server.close()


@pytest.mark.parametrize("endpoints", [
    pytest.param(lambda: [(HOST, free_port())], id="every endpoint refuses"),
    pytest.param(lambda: [], id="no endpoints"),
])
async def test_client_is_cut_when_no_endpoint_answers(endpoints):
    listener = await TcpListener(chooser(balancer(*endpoints())), timeouts=(0.25, 0.25)).start(HOST)
    try:
        sock = await connect(listener.port)
        try:
            outcome = await asyncio.wait_for(recv_all(sock), 5)
        except ConnectionResetError:
            outcome = "reset"
        sock.close()
        assert outcome == "reset"
        assert listener.rejected == 1
    finally:
        listener.close(connections=True)


async def test_dial_timeout_moves_on_to_the_next_endpoint():
    """A backend whose accept queue is full never completes the handshake: the dial times out
    after the first timeout and the next endpoint serves."""
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
    listener = await TcpListener(chooser(balancer(stuck.getsockname(), good)), timeouts=(0.2, 0.2, 0.2)).start(HOST)
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


async def test_endpoint_change_keeps_established_connections():
    server_a, a = await serve(lambda: Backend("echo"))
    server_b, b = await serve(lambda: Backend("name", name="b"))
    lb = balancer(a)
    listener = await TcpListener(chooser(lb)).start(HOST)
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


@pytest.mark.parametrize("early_eof", [pytest.param(False, id="data first"), pytest.param(True, id="data and FIN first")])
def test_data_sent_before_the_endpoint_answers_is_relayed_under_uvloop(early_eof):
    """uvloop may deliver data (and EOF) before the endpoint's connection is up, even with
    reading paused in ``connection_made``: none of it may be lost."""
    uvloop = pytest.importorskip("uvloop")

    async def main():
        server, addr = await serve(lambda: Backend("sink-then-answer" if early_eof else "echo"))
        listener = await TcpListener(chooser(balancer(addr))).start(HOST)
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

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
