"""Connection timeouts, as kube-apiserver's ``http.Server`` has them.

Upstream (``k8s.io/apiserver/pkg/server/secure_serving.go``) serves with Go's ``http.Server``
and ``ReadHeaderTimeout: 32s`` ("just shy of requestTimeoutUpperBound") and ``IdleTimeout:
90s`` ("matches http.DefaultTransport keep-alive timeout"):

* **header timeout** (``--read-header-timeout``, 32 s): a client has that long to complete the
  TLS handshake (Go bounds the handshake by the same timeout), then that long from the first
  byte of each request to the blank line that ends its headers. A client that sends headers a
  byte at a time (slowloris) or stops half-way is disconnected, freeing the connection;
* **idle timeout** (``--idle-connection-timeout``, 90 s): a keep-alive connection with no
  request in progress is closed after that long.

There is no timeout for bodies and responses (upstream has none at this level either; watches
and logs stream for as long as they need).

Header sizes: upstream allows 1 MiB of headers (``MaxHeaderBytes: 1 << 20``), so a request line
carrying a long label selector is served. aiohttp limits each line instead (8 KiB by default):
here the request line may be ``MAX_REQUEST_LINE`` (1 MiB) and each header ``MAX_HEADER_FIELD``
(64 KiB, room for any token), at most aiohttp's 128 of them. Past that aiohttp answers 400 in
plain text, as Go answers 431 in plain text.

aiohttp closes idle connections by its keep-alive timeout, which also covers a connection that
never sends a first byte; the header timeout is added here (``HeaderTimeoutHandler``), and the
TLS handshake timeout is passed to the event loop's ``create_server`` (``TimedSockSite``).
"""

from __future__ import annotations

import asyncio
import ssl

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

DEFAULT_READ_HEADER_TIMEOUT = 32.0
DEFAULT_IDLE_TIMEOUT = 90.0
TLS_SHUTDOWN_TIMEOUT = 1.0
MAX_REQUEST_LINE = 1 << 20
MAX_HEADER_FIELD = 64 << 10


class HeaderTimeoutHandler(RequestHandler):
    """aiohttp's connection handler with a deadline on each request's headers: from the
    connection (for the first request) or from a request's first byte, to its parsed header.

    Each request only notes when its headers began; one timer per connection checks that note
    when it fires and, while the connection keeps finishing its headers in time, re-arms for
    the rest of the newest request's deadline. A busy keep-alive connection so schedules a timer
    once per timeout, not one (and its cancellation) per request."""

    def __init__(self, manager, *, header_timeout: float, **kwargs):
        super().__init__(manager, **kwargs)
        self._header_timeout = header_timeout
        self._headers_since: float | None = None  # when the request now waiting for its headers began
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm_header_deadline()

    def data_received(self, data: bytes) -> None:
        parsed_before = self._request_count
        if self._headers_since is None and self._waiting_for_request():
            self._arm_header_deadline()  # the first byte of a request on a kept-alive connection
        super().data_received(data)
        if self._request_count > parsed_before:
            self._headers_since = None

    def connection_lost(self, exc: BaseException | None) -> None:
        self._headers_since = None
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)

    def _waiting_for_request(self) -> bool:
        return self._payload_parser is None and not self._upgraded

    def _arm_header_deadline(self) -> None:
        if self._header_timeout > 0:
            self._headers_since = self._loop.time()
            if self._header_timer is None:
                self._header_timer = self._loop.call_later(self._header_timeout, self._header_timer_fired)

    def _header_timer_fired(self) -> None:
        self._header_timer = None
        if self._headers_since is None:
            return  # no request waiting for its headers: the next one arms a timer again
        left = self._headers_since + self._header_timeout - self._loop.time()
        if left > 0:
            self._header_timer = self._loop.call_later(left, self._header_timer_fired)
            return
        self._header_deadline_passed()

    def _header_deadline_passed(self) -> None:
        """Drop the connection at once: a client that trickles headers need not read, so no
        TLS close_notify exchange is waited for."""
        self._headers_since = None
        transport = self.transport
        self.force_close()
        if transport is not None:
            transport.abort()


class TimedSockSite(web.SockSite):
    """A SockSite whose connections get ``HeaderTimeoutHandler`` and whose TLS handshakes must
    finish within the header timeout."""

    def __init__(self, runner: web.BaseRunner, sock, *, header_timeout: float, idle_timeout: float, **kwargs):
        super().__init__(runner, sock, **kwargs)
        self._header_timeout = header_timeout
        self._idle_timeout = idle_timeout

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        options = dict(server._kwargs)
        options.update(keepalive_timeout=self._idle_timeout, max_line_size=MAX_REQUEST_LINE, max_field_size=MAX_HEADER_FIELD)

        def connection() -> HeaderTimeoutHandler:
            return HeaderTimeoutHandler(server, loop=loop, header_timeout=self._header_timeout, **options)

        tls: dict = {"ssl": self._ssl_context}
        if isinstance(self._ssl_context, ssl.SSLContext):
            # Go sends its close_notify and closes; an idle client that does not read it is
            # not waited for (asyncio would wait 30 s)
            tls["ssl_shutdown_timeout"] = TLS_SHUTDOWN_TIMEOUT
            if self._header_timeout > 0:
                tls["ssl_handshake_timeout"] = self._header_timeout
        self._server = await loop.create_server(connection, sock=self._sock, backlog=self._backlog, **tls)
