"""``upgrade.dial`` (the apiserver's SPDY upgrade to a node agent) against agents that answer
badly: each is a ``ConnectionError`` the caller turns into kube-apiserver's "error dialing
backend" (a 5xx Status with the reason), never an exception that escapes as a traceback."""

from __future__ import annotations

import asyncio

import pytest

from kubesvc.serving import pki, upgrade
from tests.serving.tls_pair import client_context, server_context


async def answering(ca: pki.ClusterCA, reply: bytes):
    """A TLS server on 127.0.0.1 that reads the request head, writes ``reply`` and closes."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(reply)
        await writer.drain()
        writer.close()

    pair = ca.node_serving("n1", ["127.0.0.1"])
    return await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_context(pair))


@pytest.mark.parametrize("reply", [
    b"",  # closed before a head: IncompleteReadError
    b"HTTP/1.1 101\r\n",  # a head that never ends
    b"garbage\r\n\r\n",  # no status code
    b"HTTP/1.1 abc Switching\r\n\r\n",  # a status code that is not a number
    b"HTTP/1.1 200 OK\r\n" + b"X: " + b"a" * (upgrade.MAX_HEAD + 10) + b"\r\n\r\n",  # a head past the limit
], ids=["closed", "unfinished-head", "no-status", "bad-status", "head-too-long"])
async def test_a_malformed_answer_is_a_connection_error(tmp_path, reply):
    ca = pki.ClusterCA(tmp_path / "pki")
    server = await answering(ca, reply)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(ConnectionError, match="malformed upgrade response"):
            await upgrade.dial("127.0.0.1", port, client_context(ca), "POST", "/exec/ns/pod/c?command=ls",
                               [("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")], timeout=5)
    finally:
        server.close()
        await server.wait_closed()


async def test_a_refusal_is_an_answer(tmp_path):
    ca = pki.ClusterCA(tmp_path / "pki")
    server = await answering(ca, b"HTTP/1.1 403 Forbidden\r\nContent-Length: 6\r\n\r\nno way")
    port = server.sockets[0].getsockname()[1]
    try:
        answer = await upgrade.dial("127.0.0.1", port, client_context(ca), "POST", "/exec/ns/pod/c", [], timeout=5)
        assert (answer.status, answer.body) == (403, b"no way")
    finally:
        server.close()
        await server.wait_closed()
