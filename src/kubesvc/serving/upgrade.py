"""HTTP/1.1 connection upgrades to protocols other than WebSocket: ``Upgrade: SPDY/3.1``, what
kubectl falls back to for exec and port-forward when its WebSocket is refused (client-go's
``spdy.RoundTripper``: ``POST`` with ``Connection: Upgrade``, ``Upgrade: SPDY/3.1`` and one
``X-Stream-Protocol-Version`` header per protocol it speaks; the server answers ``101 Switching
Protocols`` with the one it chose, and from then on the TCP (TLS) connection carries SPDY).

aiohttp parses and answers HTTP only and takes over a connection for WebSocket alone, so both
ends are done here: :func:`accept` answers 101 on an aiohttp request and hands its connection's
bytes to a :class:`RawConnection` (the request's transport, its incoming bytes fed by aiohttp's
protocol as an upgraded payload); :func:`dial` makes the request over a TLS connection of its
own and returns the server's answer, or the connection itself after a 101.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass

from aiohttp import web
from multidict import CIMultiDict

WRITE_BUFFER_LIMIT = 1 << 20  # bytes queued for a slow peer before a writer waits
READ_QUEUE_LIMIT = 64  # chunks received and not yet read before reading from the peer pauses
MAX_HEAD = 64 * 1024
MAX_ERROR_BODY = 50000


def requested_protocols(headers) -> list[str]:
    """The client's ``X-Stream-Protocol-Version`` values, in its order (repeated or comma-joined)."""
    return [p.strip() for value in headers.getall("X-Stream-Protocol-Version", []) for p in value.split(",") if p.strip()]


def is_spdy_upgrade(request: web.BaseRequest) -> bool:
    return request.headers.get("Upgrade", "").lower().startswith("spdy/")


class RawConnection:
    """An upgraded connection's bytes: ``read`` (b"" at end of file), ``write``, ``close``."""

    def __init__(self, transport: asyncio.Transport):
        self._transport = transport
        self._incoming: asyncio.Queue[bytes] = asyncio.Queue()
        self._paused = False

    # aiohttp's payload parser interface (RequestHandler.set_parser)
    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self._incoming.put_nowait(bytes(data))
        if self._incoming.qsize() >= READ_QUEUE_LIMIT and not self._paused:
            self._paused = True
            self._transport.pause_reading()
        return False, b""

    def feed_eof(self) -> None:
        self._incoming.put_nowait(b"")

    async def read(self) -> bytes:
        data = await self._incoming.get()
        if self._paused and self._incoming.qsize() < READ_QUEUE_LIMIT // 2 and not self._transport.is_closing():
            self._paused = False
            self._transport.resume_reading()
        if not data:
            self._incoming.put_nowait(b"")  # end of file stays end of file
        return data

    async def write(self, data: bytes) -> None:
        if self._transport.is_closing():
            raise ConnectionResetError("connection closed")
        self._transport.write(data)
        while self._transport.get_write_buffer_size() > WRITE_BUFFER_LIMIT and not self._transport.is_closing():
            await asyncio.sleep(0.005)

    def close(self) -> None:
        self._transport.close()


async def accept(request: web.Request, protocol: str, extra_headers: dict[str, str] | None = None) -> tuple[web.StreamResponse, RawConnection]:
    """Answer ``101 Switching Protocols`` to the upgrade in ``request`` with ``protocol`` chosen;
    the connection closes once the handler returns the response."""
    upgrade = request.headers.get("Upgrade", "")
    response = web.StreamResponse(status=101, headers={"Connection": "Upgrade", "Upgrade": upgrade,
                                                       "X-Stream-Protocol-Version": protocol, **(extra_headers or {})})
    response.force_close()
    await response.prepare(request)
    assert request.transport is not None
    connection = RawConnection(request.transport)
    request.protocol.set_parser(connection)  # every later byte of the connection is ours
    return response, connection


@dataclass
class Answer:
    """A server's answer to :func:`dial`: a refusal (status, headers, body) or, after a 101, the
    connection (``reader``/``writer``)."""

    status: int
    headers: CIMultiDict
    body: bytes = b""
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None


async def dial(host: str, port: int, tls: ssl.SSLContext, method: str, path_qs: str, headers: list[tuple[str, str]],
               timeout: float = 10.0) -> Answer:
    """Send an upgrade request over a new TLS connection; ``OSError``/``ssl.SSLError``/timeout
    when the server cannot be reached, else its answer."""
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(host, port, ssl=tls, server_hostname=host, limit=MAX_HEAD)
    try:
        host_header = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        lines = [f"{method} {path_qs} HTTP/1.1", f"Host: {host_header}", "Content-Length: 0",
                 *(f"{name}: {value}" for name, value in headers)]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        async with asyncio.timeout(timeout):
            head = await reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        answer_headers = CIMultiDict()
        for line in header_lines:
            if ":" in line:
                name, value = line.split(":", 1)
                answer_headers.add(name.strip(), value.strip())
        if status == 101:
            return Answer(status, answer_headers, reader=reader, writer=writer)
        length = answer_headers.get("Content-Length")
        async with asyncio.timeout(timeout):
            body = await (reader.readexactly(min(int(length), MAX_ERROR_BODY)) if length is not None else reader.read(MAX_ERROR_BODY))
        writer.close()
        return Answer(status, answer_headers, body)
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, IndexError, ValueError) as exc:
        # the server closed early, sent a head past MAX_HEAD, or a status line that is not
        # HTTP: a connection error to the caller (kube-apiserver: "error dialing backend")
        writer.close()
        raise ConnectionError(f"malformed upgrade response: {exc!r}") from None
    except BaseException:
        writer.close()
        raise
