"""SPDY/3.1, the server side: what ``kubectl port-forward`` speaks (the SPDY/3 draft,
http://www.chromium.org/spdy/spdy-protocol/spdy-protocol-draft3, as moby/spdystream implements
it for client-go; workloads.md §9.3).

kubectl 1.32 tunnels SPDY through a WebSocket (subprotocol ``SPDY/3.1+portforward.k8s.io``:
each binary message is a slice of the SPDY byte stream) and falls back to a plain ``Upgrade:
SPDY/3.1``. Either way the bytes are the same frames:

* every frame starts with 8 bytes. A control frame: the control bit, version 3 (15 bits), its
  type (16 bits), flags (8 bits), length (24 bits). A data frame: the stream id (31 bits),
  flags, length. Flag 0x01 is FIN (the sender's half of the stream is done).
* SYN_STREAM (type 1): stream id, associated id, priority and slot bytes, then a header block.
  The server answers each with SYN_REPLY (type 2): stream id and a header block (spdystream's
  ``CreateStream`` waits for it). RST_STREAM (3): stream id, status. PING (6): the id, echoed
  back. GOAWAY (7): the last good stream id, a status. SETTINGS (4) and WINDOW_UPDATE (9) are
  read and ignored (spdystream does no flow control, and ignores both from us).
* a header block is zlib-compressed with one stream per direction for the whole connection,
  primed with the spec's dictionary below and flushed (``Z_SYNC_FLUSH``) after every block.
  Uncompressed: a count, then for each header its name (lower case) and value, each a 32-bit
  big-endian length and the bytes; several values of one name are joined with NUL.

:class:`Session` is transport-agnostic: ``feed`` it bytes as they come, and it hands complete
frames' effects to the streams and writes its answers through the ``send`` coroutine it was
given, one at a time and in order (the header compressor's state depends on that order).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

log = logging.getLogger("kubesvc.agent.spdy")

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
RST_PROTOCOL_ERROR, RST_INVALID_STREAM, RST_REFUSED_STREAM, RST_CANCEL, RST_FLOW_CONTROL_ERROR = 1, 2, 3, 5, 7
MAX_DATA = 1 << 16  # the largest DATA frame we write (the format allows 2**24 - 1)
# the most a header block may inflate to: SPDY compresses headers for the whole connection, and
# a few hundred kilobytes of zeros would otherwise inflate to gigabytes in the agent (kubectl's
# blocks are a few dozen bytes; Netty's SPDY codec caps them at 16 KiB by default)
MAX_HEADER_BLOCK = 1 << 16
# What one session may hold: streams open at once (kubectl opens two per forwarded connection,
# four or five per exec), and bytes a stream has received that its reader has not taken yet.
# spdystream sends without waiting for WINDOW_UPDATE (it implements no flow control), so past
# the limit the session stops reading its transport until the stream's reader catches up:
# back-pressure to the client through TCP, instead of the agent's memory growing without bound.
MAX_STREAMS = 256
MAX_QUEUED_BYTES = 1 << 20
# how long the session waits for a stream's reader before resetting that stream
# (FLOW_CONTROL_ERROR): a reader that never comes must not stall the connection for good
READER_PATIENCE_SECONDS = 30.0

# The SPDY/3 header compression dictionary (the draft's section 2.6.10.1): 65 length-prefixed
# words (``_`` stands for a space), then the rest as one string.
_DICTIONARY_WORDS = [w.replace("_", " ") for w in (
    "options head post put delete trace accept accept-charset accept-encoding accept-language accept-ranges age allow "
    "authorization cache-control connection content-base content-encoding content-language content-length content-location "
    "content-md5 content-range content-type date etag expect expires from host if-match if-modified-since if-none-match "
    "if-range if-unmodified-since last-modified location max-forwards pragma proxy-authenticate proxy-authorization range "
    "referer retry-after server te trailer transfer-encoding upgrade user-agent vary via warning www-authenticate method get "
    "status 200_OK version HTTP/1.1 url public set-cookie keep-alive origin").split(" ")]
_DICTIONARY_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.")
DICTIONARY = b"".join(struct.pack(">I", len(w)) + w.encode() for w in _DICTIONARY_WORDS) + _DICTIONARY_TAIL.encode()


class ProtocolError(Exception):
    """The peer sent something that is not SPDY/3: the session ends (GOAWAY, protocol error)."""


# ---- frames: pure encoding and decoding -------------------------------------------------------


def control_frame(kind: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHI", 0x8000 | VERSION, kind, (flags << 24) | len(payload)) + payload


def data_frame(stream_id: int, data: bytes, fin: bool = False) -> bytes:
    return struct.pack(">II", stream_id & 0x7FFFFFFF, ((FLAG_FIN if fin else 0) << 24) | len(data)) + data


def header_block(headers: dict[str, list[str]]) -> bytes:
    """The uncompressed header block: names lower-cased, several values NUL-joined."""
    out = [struct.pack(">I", len(headers))]
    for name, values in headers.items():
        key, value = name.lower().encode(), "\x00".join(values).encode()
        out += [struct.pack(">I", len(key)), key, struct.pack(">I", len(value)), value]
    return b"".join(out)


def parse_header_block(block: bytes) -> dict[str, list[str]]:
    def take(at: int, n: int) -> tuple[bytes, int]:
        if at + n > len(block):
            raise ProtocolError("header block truncated")
        return block[at:at + n], at + n

    raw, at = take(0, 4)
    headers: dict[str, list[str]] = {}
    for _ in range(struct.unpack(">I", raw)[0]):
        raw, at = take(at, 4)
        name, at = take(at, struct.unpack(">I", raw)[0])
        raw, at = take(at, 4)
        value, at = take(at, struct.unpack(">I", raw)[0])
        headers.setdefault(name.decode("utf-8", "replace").lower(), []).extend(value.decode("utf-8", "replace").split("\x00"))
    return headers


@dataclass
class Frame:
    """One parsed frame: ``kind`` is a control type, or 0 for DATA."""

    kind: int
    flags: int
    stream_id: int = 0
    data: bytes = b""  # DATA payload, or the control frame's payload after its fixed fields
    headers: dict[str, list[str]] = field(default_factory=dict)
    value: int = 0  # RST status, PING id, GOAWAY last stream id

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


class FrameReader:
    """Bytes in, frames out; header blocks decompressed with the connection's one zlib stream."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer += data
        frames = []
        while len(self._buffer) >= 8:
            length = struct.unpack(">I", self._buffer[4:8])[0] & 0xFFFFFF
            if len(self._buffer) < 8 + length:
                break
            head, payload = bytes(self._buffer[:8]), bytes(self._buffer[8:8 + length])
            del self._buffer[:8 + length]
            frames.append(self._frame(head, payload))
        return frames

    def _headers(self, compressed: bytes) -> dict[str, list[str]]:
        try:
            block = self._inflate.decompress(compressed, MAX_HEADER_BLOCK)
        except zlib.error as exc:
            raise ProtocolError(f"header block: {exc}") from None
        if self._inflate.unconsumed_tail:
            raise ProtocolError(f"header block larger than {MAX_HEADER_BLOCK} bytes")
        return parse_header_block(block)

    def _frame(self, head: bytes, payload: bytes) -> Frame:
        first, flags = struct.unpack(">I", head[:4])[0], head[4]
        if not first & 0x80000000:
            return Frame(0, flags, first & 0x7FFFFFFF, payload)
        version, kind = (first >> 16) & 0x7FFF, first & 0xFFFF
        if version != VERSION:
            raise ProtocolError(f"unsupported SPDY version {version}")
        need = {SYN_STREAM: 10, SYN_REPLY: 4, RST_STREAM: 8, PING: 4, GOAWAY: 8, HEADERS: 4, WINDOW_UPDATE: 8}.get(kind, 0)
        if len(payload) < need:
            raise ProtocolError(f"control frame {kind} too short")
        if kind == SYN_STREAM:
            return Frame(kind, flags, struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF, headers=self._headers(payload[10:]))
        if kind in (SYN_REPLY, HEADERS):
            return Frame(kind, flags, struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF, headers=self._headers(payload[4:]))
        if kind in (RST_STREAM, WINDOW_UPDATE):
            stream_id, value = struct.unpack(">II", payload[:8])
            return Frame(kind, flags, stream_id & 0x7FFFFFFF, value=value)
        if kind == PING:
            return Frame(kind, flags, value=struct.unpack(">I", payload[:4])[0])
        if kind == GOAWAY:
            return Frame(kind, flags, value=struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF)
        return Frame(kind, flags, data=payload)  # SETTINGS, or a type this side ignores


class FrameWriter:
    """Frames out, header blocks compressed with the connection's one zlib stream."""

    def __init__(self) -> None:
        self._deflate = zlib.compressobj(level=9, zdict=DICTIONARY)

    def syn_reply(self, stream_id: int, headers: dict[str, list[str]] | None = None, fin: bool = False) -> bytes:
        block = self._deflate.compress(header_block(headers or {})) + self._deflate.flush(zlib.Z_SYNC_FLUSH)
        return control_frame(SYN_REPLY, FLAG_FIN if fin else 0, struct.pack(">I", stream_id) + block)

    def syn_stream(self, stream_id: int, headers: dict[str, list[str]], fin: bool = False) -> bytes:
        """(What a client sends: the tests' side.)"""
        block = self._deflate.compress(header_block(headers)) + self._deflate.flush(zlib.Z_SYNC_FLUSH)
        return control_frame(SYN_STREAM, FLAG_FIN if fin else 0, struct.pack(">IIBB", stream_id, 0, 0, 0) + block)

    @staticmethod
    def rst_stream(stream_id: int, status: int) -> bytes:
        return control_frame(RST_STREAM, 0, struct.pack(">II", stream_id, status))

    @staticmethod
    def ping(ping_id: int) -> bytes:
        return control_frame(PING, 0, struct.pack(">I", ping_id))

    @staticmethod
    def goaway(last_stream_id: int, status: int = 0) -> bytes:
        return control_frame(GOAWAY, 0, struct.pack(">II", last_stream_id, status))


# ---- the session ------------------------------------------------------------------------------


class Stream:
    """One stream the client opened: its headers, what it sent (``read``; b"" once it sent FIN),
    and our half (``write``, ``close`` sends FIN)."""

    def __init__(self, session: Session, stream_id: int, headers: dict[str, list[str]]):
        self.session = session
        self.id = stream_id
        self.headers = headers
        self._incoming: asyncio.Queue[bytes] = asyncio.Queue()
        self._queued = 0  # bytes in _incoming
        self._room = asyncio.Event()  # set while _queued is under MAX_QUEUED_BYTES
        self._room.set()
        self.remote_closed = False
        self.local_closed = False

    def header(self, name: str) -> str:
        return (self.headers.get(name.lower()) or [""])[0]

    async def read(self) -> bytes:
        data = await self._incoming.get()
        self._queued -= len(data)
        if self._queued < MAX_QUEUED_BYTES:
            self._room.set()
        return data

    async def wait_for_room(self) -> None:
        """Until this stream's reader has taken enough of what was received (or the stream ended)."""
        await self._room.wait()

    async def write(self, data: bytes) -> None:
        """``data`` to the client; dropped once our half is closed (or the client reset the stream)."""
        for at in range(0, len(data), MAX_DATA):
            if self.local_closed:
                return
            await self.session.send_frame(data_frame(self.id, data[at:at + MAX_DATA]))

    async def close(self) -> None:
        if not self.local_closed:
            self.local_closed = True
            await self.session.send_frame(data_frame(self.id, b"", fin=True))

    def _received(self, data: bytes, fin: bool) -> None:
        if self.remote_closed:
            return
        if data:
            self._incoming.put_nowait(data)
            self._queued += len(data)
            if self._queued >= MAX_QUEUED_BYTES:
                self._room.clear()
        if fin:
            self.remote_closed = True
            self._incoming.put_nowait(b"")

    def _reset(self) -> None:
        self.local_closed = True
        self._received(b"", True)
        self._room.set()  # nobody will read the rest: the session must not wait for it

    def _discard(self) -> None:
        """The stream's reader has gone: drop what it would have read, never wait for it again."""
        while not self._incoming.empty():
            self._incoming.get_nowait()
        self._queued = 0
        self._reset()


class Session:
    """The server's side of one SPDY connection. ``send`` writes bytes to the transport;
    ``on_stream`` is called (as a task) for every stream the client opens, after its SYN_REPLY."""

    def __init__(self, send: Callable[[bytes], Awaitable[None]], on_stream: Callable[[Stream], Awaitable[None]]):
        self._send = send
        self._on_stream = on_stream
        self._reader = FrameReader()
        self._writer = FrameWriter()
        self._lock = asyncio.Lock()
        self.streams: dict[int, Stream] = {}
        self._tasks: set[asyncio.Task] = set()
        self._last_stream = 0
        self.closed = asyncio.Event()

    async def send_frame(self, frame: bytes) -> None:
        async with self._lock:
            if not self.closed.is_set():
                await self._send(frame)

    async def feed(self, data: bytes) -> None:
        """Bytes from the client; ``ProtocolError`` (after a GOAWAY) if they are not SPDY/3."""
        try:
            frames = self._reader.feed(data)
        except ProtocolError:
            await self.send_frame(FrameWriter.goaway(self._last_stream, 1))
            raise
        for frame in frames:
            await self._handle(frame)

    async def _handle(self, frame: Frame) -> None:
        if frame.kind == 0:
            stream = self.streams.get(frame.stream_id)
            if stream is None:
                await self.send_frame(FrameWriter.rst_stream(frame.stream_id, RST_INVALID_STREAM))
                return
            stream._received(frame.data, frame.fin)
            try:
                await asyncio.wait_for(stream.wait_for_room(), READER_PATIENCE_SECONDS)
            except asyncio.TimeoutError:
                log.info("SPDY stream %d: its reader took nothing for %.0f s, resetting it", stream.id, READER_PATIENCE_SECONDS)
                stream._discard()
                self.remove(stream)
                await self.send_frame(FrameWriter.rst_stream(stream.id, RST_FLOW_CONTROL_ERROR))
        elif frame.kind == SYN_STREAM:
            if frame.stream_id in self.streams or frame.stream_id % 2 == 0:
                await self.send_frame(FrameWriter.rst_stream(frame.stream_id, RST_PROTOCOL_ERROR))
                return
            if len(self.streams) >= MAX_STREAMS:
                await self.send_frame(FrameWriter.rst_stream(frame.stream_id, RST_REFUSED_STREAM))
                return
            self._last_stream = max(self._last_stream, frame.stream_id)
            stream = self.streams[frame.stream_id] = Stream(self, frame.stream_id, frame.headers)
            async with self._lock:  # the reply's compressed block must go out in order
                await self._send(self._writer.syn_reply(frame.stream_id))
            if frame.fin:
                stream._received(b"", True)
            task = asyncio.create_task(self._on_stream(stream))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif frame.kind == RST_STREAM:
            stream = self.streams.get(frame.stream_id)
            if stream is not None:
                stream._reset()
        elif frame.kind == PING:
            await self.send_frame(FrameWriter.ping(frame.value))
        elif frame.kind == GOAWAY:
            self.close()
        # SETTINGS, WINDOW_UPDATE, HEADERS: nothing to do

    def remove(self, stream: Stream) -> None:
        self.streams.pop(stream.id, None)
        stream._room.set()  # a removed stream is read no more: frames for it get RST from now on

    def close(self) -> None:
        """The connection is gone: every stream reads EOF, every handler is cancelled."""
        if self.closed.is_set():
            return
        self.closed.set()
        for stream in self.streams.values():
            stream._reset()
        for task in list(self._tasks):
            task.cancel()

    async def wait_handlers(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
