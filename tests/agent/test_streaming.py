"""The agent's streaming protocols without a kernel: the SPDY/3.1 session kubectl port-forward
talks to (frames built and read here with struct and zlib, independently of the module), and
the exec channel protocol's Status messages as kubectl decodes them.

Expected values are upstream's, written by hand: the dictionary's digest is of moby/spdystream's
spdy/dictionary.go bytes; the Status shapes are kubelet's (remotecommand exec.go) and what
client-go's v4 error decoder reads.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import struct
import zlib

import pytest
from multidict import MultiDict

from kubesvc.agent import streaming
from kubesvc.agent import streaming_spdy
from kubesvc.agent.streaming_spdy import DICTIONARY, ProtocolError, Session



def test_the_header_dictionary_is_spdy3s():
    assert len(DICTIONARY) == 1423
    assert hashlib.sha256(DICTIONARY).hexdigest() == "51d27341373f923f3cd88e1eb7162aeaa3723d7585ff2399201dc06498407f02"


# ---- a client of our own, written against the draft -----------------------------------------


class Client:
    def __init__(self):
        self.deflate = zlib.compressobj(9, zdict=DICTIONARY)
        self.inflate = zlib.decompressobj(zdict=DICTIONARY)
        self.received = bytearray()

    def block(self, headers: dict[str, str]) -> bytes:
        raw = struct.pack(">I", len(headers)) + b"".join(
            struct.pack(">I", len(k)) + k.encode() + struct.pack(">I", len(v)) + v.encode() for k, v in headers.items())
        return self.deflate.compress(raw) + self.deflate.flush(zlib.Z_SYNC_FLUSH)

    def syn_stream(self, stream_id: int, headers: dict[str, str], fin: bool = False) -> bytes:
        payload = struct.pack(">IIBB", stream_id, 0, 0, 0) + self.block(headers)
        return struct.pack(">HHI", 0x8003, 1, ((1 if fin else 0) << 24) | len(payload)) + payload

    @staticmethod
    def data(stream_id: int, payload: bytes, fin: bool = False) -> bytes:
        return struct.pack(">II", stream_id, ((1 if fin else 0) << 24) | len(payload)) + payload

    @staticmethod
    def ping(ping_id: int) -> bytes:
        return struct.pack(">HHII", 0x8003, 6, 4, ping_id)

    def frames(self) -> list[tuple]:
        """What the server wrote: ("control", type, flags, payload) or ("data", id, flags, payload)."""
        out, buf = [], self.received
        while len(buf) >= 8:
            length = struct.unpack(">I", buf[4:8])[0] & 0xFFFFFF
            head, payload = bytes(buf[:8]), bytes(buf[8:8 + length])
            del buf[:8 + length]
            first = struct.unpack(">I", head[:4])[0]
            if first & 0x80000000:
                assert (first >> 16) & 0x7FFF == 3
                out.append(("control", first & 0xFFFF, head[4], payload))
            else:
                out.append(("data", first, head[4], payload))
        return out

    def headers_of(self, compressed: bytes) -> dict[str, str]:
        raw = self.inflate.decompress(compressed)
        count, at, headers = struct.unpack(">I", raw[:4])[0], 4, {}
        for _ in range(count):
            n = struct.unpack(">I", raw[at:at + 4])[0]
            name = raw[at + 4:at + 4 + n].decode()
            at += 4 + n
            n = struct.unpack(">I", raw[at:at + 4])[0]
            headers[name] = raw[at + 4:at + 4 + n].decode()
            at += 4 + n
        return headers


async def echo_session(client: Client):
    """A session whose streams echo what they read, upper-cased, then close."""
    async def send(data: bytes) -> None:
        client.received += data

    async def on_stream(stream) -> None:
        while chunk := await stream.read():
            await stream.write(chunk.upper())
        await stream.close()

    return Session(send, on_stream)


async def test_streams_are_replied_to_and_carry_data_both_ways():
    client = Client()
    session = await echo_session(client)
    await session.feed(client.syn_stream(1, {"streamtype": "data", "port": "80", "requestid": "0"}))
    await session.feed(client.data(1, b"hello") + client.data(1, b" there", fin=True))
    await asyncio.wait_for(session.wait_handlers(), 5)
    frames = client.frames()
    kind, frame_type, flags, payload = frames[0]
    assert (kind, frame_type, flags) == ("control", 2, 0)  # SYN_REPLY
    assert struct.unpack(">I", payload[:4])[0] == 1
    assert client.headers_of(payload[4:]) == {}
    assert b"".join(p for k, i, f, p in frames[1:] if k == "data" and i == 1) == b"HELLO THERE"
    assert frames[-1][:3] == ("data", 1, 1) and frames[-1][3] == b""  # FIN


async def test_headers_reach_the_stream_and_the_second_block_shares_the_compressor():
    client = Client()
    seen = []

    async def send(data: bytes) -> None:
        client.received += data

    async def on_stream(stream) -> None:
        seen.append((stream.id, stream.header("streamType"), stream.header("port"), stream.header("requestID")))

    session = Session(send, on_stream)
    await session.feed(client.syn_stream(1, {"streamtype": "error", "port": "8080", "requestid": "7"}, fin=True))
    await session.feed(client.syn_stream(3, {"streamtype": "data", "port": "8080", "requestid": "7"}))
    await session.wait_handlers()
    assert seen == [(1, "error", "8080", "7"), (3, "data", "8080", "7")]
    replies = [f for f in client.frames() if f[0] == "control" and f[1] == 2]
    assert [struct.unpack(">I", r[3][:4])[0] for r in replies] == [1, 3]
    assert [client.headers_of(r[3][4:]) for r in replies] == [{}, {}]  # both decode on one zlib stream


async def test_pings_are_echoed_and_garbage_ends_the_session_with_goaway():
    client = Client()
    session = await echo_session(client)
    await session.feed(client.ping(5)[:6])  # a frame split across two reads
    await session.feed(client.ping(5)[6:])
    assert client.frames() == [("control", 6, 0, struct.pack(">I", 5))]
    with pytest.raises(ProtocolError):
        await session.feed(struct.pack(">HHI", 0x8002, 1, 0))  # SPDY/2
    kind, frame_type, _, payload = client.frames()[0]
    assert (kind, frame_type) == ("control", 7)  # GOAWAY
    assert struct.unpack(">II", payload) == (0, 1)  # protocol error


async def test_a_header_block_that_inflates_past_the_limit_ends_the_session():
    """A SYN_STREAM of 64 KiB whose header block inflates to 64 MiB (one value of zeros): a
    protocol error and GOAWAY, not 64 MiB (and its split) held by the agent."""
    client = Client()
    session = await echo_session(client)
    value = bytes(64 << 20)
    block = struct.pack(">I", 1) + struct.pack(">I", 4) + b"port" + struct.pack(">I", len(value)) + value
    deflate = zlib.compressobj(level=9, zdict=DICTIONARY)
    compressed = deflate.compress(block) + deflate.flush(zlib.Z_SYNC_FLUSH)
    assert len(compressed) < 128 << 10
    payload = struct.pack(">IIH", 1, 0, 0) + compressed
    with pytest.raises(ProtocolError, match="header block larger than 65536 bytes"):
        await session.feed(struct.pack(">HHI", 0x8003, 1, len(payload)) + payload)  # SPDY/3 SYN_STREAM
    kind, frame_type, _, goaway = client.frames()[0]
    assert (kind, frame_type) == ("control", 7) and struct.unpack(">II", goaway) == (0, 1)
    assert session.streams == {}


async def test_data_for_an_unknown_stream_is_reset():
    client = Client()
    session = await echo_session(client)
    await session.feed(client.data(9, b"x"))
    kind, frame_type, _, payload = client.frames()[0]
    assert (kind, frame_type) == ("control", 3)
    assert struct.unpack(">II", payload) == (9, 2)  # INVALID_STREAM


async def test_streams_past_the_limit_are_refused():
    client = Client()
    session = await echo_session(client)
    for stream_id in range(1, 2 * 256, 2):  # 256 open streams
        await session.feed(client.syn_stream(stream_id, {"streamtype": "data"}))
    client.received.clear()
    await session.feed(client.syn_stream(513, {"streamtype": "data"}))
    kind, frame_type, _, payload = client.frames()[0]
    assert (kind, frame_type) == ("control", 3)
    assert struct.unpack(">II", payload) == (513, 3)  # REFUSED_STREAM
    assert len(session.streams) == 256
    session.close()
    await session.wait_handlers()


async def test_a_stream_whose_reader_lags_holds_back_the_connection_not_the_agents_memory(monkeypatch):
    """Past 1 MiB unread on one stream, ``feed`` waits for the reader (TCP back-pressure to the
    client); a reader that never comes gets the stream reset with FLOW_CONTROL_ERROR."""
    monkeypatch.setattr(streaming_spdy, "READER_PATIENCE_SECONDS", 0.3)
    client = Client()
    release = asyncio.Event()
    taken = []

    async def send(data: bytes) -> None:
        client.received += data

    async def slow_reader(stream) -> None:
        await release.wait()
        while chunk := await stream.read():
            taken.append(len(chunk))

    session = Session(send, slow_reader)
    await session.feed(client.syn_stream(1, {"streamtype": "data"}))
    chunk = bytes(60000)
    for _ in range(17):  # 1,020,000 bytes: under the limit, taken without waiting
        await asyncio.wait_for(session.feed(client.data(1, chunk)), 1)
    feeding = asyncio.ensure_future(session.feed(client.data(1, chunk)))  # past 1 MiB
    await asyncio.sleep(0.1)
    assert not feeding.done()  # the transport is not read meanwhile
    release.set()
    await asyncio.wait_for(feeding, 1)  # the reader took some: room again
    await session.feed(client.data(1, b"", fin=True))
    await asyncio.wait_for(session.wait_handlers(), 2)
    assert sum(taken) == 18 * 60000

    client = Client()  # a new connection: header compression starts afresh
    never = Session(send, lambda stream: asyncio.sleep(3600))
    await never.feed(client.syn_stream(1, {"streamtype": "data"}))
    client.received.clear()
    for _ in range(18):
        await asyncio.wait_for(never.feed(client.data(1, chunk)), 2)
    kind, frame_type, _, payload = client.frames()[-1]
    assert (kind, frame_type) == ("control", 3)
    assert struct.unpack(">II", payload) == (1, 7)  # FLOW_CONTROL_ERROR
    assert never.streams == {}
    never.close()
    await never.wait_handlers()


# ---- exec -------------------------------------------------------------------------------------


def test_exit_statuses_are_kubelets():
    assert streaming.exit_status(0) == {"metadata": {}, "status": "Success"}
    status = streaming.exit_status(3)
    assert status["status"] == "Failure" and status["reason"] == "NonZeroExitCode"
    assert status["details"] == {"causes": [{"reason": "ExitCode", "message": "3"}]}
    assert status["message"] == "command terminated with non-zero exit code: exit status 3"
    json.dumps(status)


def test_exec_options_from_kube_apiservers_query():
    options = streaming.ExecOptions.from_query(MultiDict([("command", "sh"), ("command", "-c"), ("command", "exit 3"),
                                                          ("input", "1"), ("output", "1"), ("error", "1")]))
    assert options == streaming.ExecOptions(("sh", "-c", "exit 3"), True, True, True, False)
    assert options.first_channel() == streaming.STDOUT
    tty = streaming.ExecOptions.from_query(MultiDict([("command", "sh"), ("input", "1"), ("output", "1"), ("error", "1"), ("tty", "1")]))
    assert tty.stderr is False and tty.tty  # a terminal has one output stream
    assert streaming.ExecOptions.from_query(MultiDict([("output", "1")])).problem() == "you must specify at least 1 command"
    assert streaming.ExecOptions.from_query(MultiDict([("command", "ls")])).problem() == "you must specify at least 1 of stdin, stdout, stderr"


def test_resize_messages():
    assert streaming.resize_of(b'{"Width":101,"Height":33}') == (101, 33)
    assert streaming.resize_of(b"{") is None
    assert streaming.resize_of(b'{"Width":"x"}') is None
    # a terminal's size is two 16-bit numbers (TIOCSWINSZ): out of range is no resize
    assert streaming.resize_of(b'{"Width":-1,"Height":33}') is None
    assert streaming.resize_of(b'{"Width":101,"Height":65536}') is None


async def test_a_command_on_a_terminal_starts_with_the_size_the_client_sends_after_connecting():
    """kubectl exec -it sends the user's terminal size as a resize message once the session is up,
    and may type before the command has started: the command starts on a terminal of that size
    (``stty size`` tells) and reads what was typed. A real command on a real pseudo-terminal."""
    sent: list[tuple[int, bytes]] = []

    async def send(channel: int, data: bytes) -> None:
        sent.append((channel, data))

    async def client(child) -> None:
        await child.write(b"typed\r")
        await asyncio.sleep(0.3)  # the size comes late: the command must not have started without it
        child.resize(101, 33)
        await asyncio.sleep(60)  # the client stays until the session ends

    options = streaming.ExecOptions(("sh", "-c", "stty size; read line; echo got-$line"), True, True, False, True)
    target = streaming.ExecTarget(netns=None, env={}, working_dir="/", pid=None)
    await asyncio.wait_for(streaming._run_exec(send, client, options, target), 20)
    output = b"".join(data for channel, data in sent if channel == streaming.STDOUT).decode()
    assert "33 101" in output and "got-typed" in output, output
    assert sent[-1] == (streaming.ERROR, json.dumps(streaming.success_status()).encode())


async def test_input_sent_before_and_while_the_command_starts_arrives_whole_and_in_order():
    """``kubectl cp`` into a Pod is a tar stream on stdin that starts at once: chunks sent before
    the command exists and after reach it in the order sent, and the end of stdin comes after
    them, even when the command echoes as it reads (it must not hold the early input's write)."""
    sent: list[tuple[int, bytes]] = []
    chunks = [bytes([i]) * 65536 for i in range(1, 17)]  # 1 MiB: more than a pipe holds

    async def send(channel: int, data: bytes) -> None:
        sent.append((channel, data))

    async def client(child) -> None:
        for chunk in chunks:
            await child.write(chunk)
            await asyncio.sleep(0)
        child.close_stdin()
        await asyncio.sleep(60)

    options = streaming.ExecOptions(("cat",), True, True, True, False)
    target = streaming.ExecTarget(netns=None, env={}, working_dir="/", pid=None)
    await asyncio.wait_for(streaming._run_exec(send, client, options, target), 20)
    assert b"".join(data for channel, data in sent if channel == streaming.STDOUT) == b"".join(chunks)
    assert sent[-1] == (streaming.ERROR, json.dumps(streaming.success_status()).encode())
