"""A list from the watch cache written in pieces (handlers.stream_list): the same JSON, with its
Content-Length, whatever the piece size."""

from __future__ import annotations

import json

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from kubesvc.apiserver import handlers

HEAD = b'{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"7"}}'


@pytest.mark.parametrize("count", [0, 1, 2, 7])
@pytest.mark.parametrize("piece", [1, 40, 1 << 20])
async def test_a_list_written_in_pieces_is_the_whole_list(monkeypatch, count, piece):
    monkeypatch.setattr(handlers, "LIST_PIECE", piece)
    items = [json.dumps({"metadata": {"name": f"s{i}"}, "spec": {"n": i}}, separators=(",", ":")).encode() for i in range(count)]

    async def serve(request):
        return await handlers.stream_list(request, HEAD, items)

    app = web.Application()
    app.router.add_get("/", serve)
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/")
        body = await response.read()
    assert response.headers["Content-Length"] == str(len(body))
    assert json.loads(body) == {"kind": "ServiceList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"},
                                "items": [{"metadata": {"name": f"s{i}"}, "spec": {"n": i}} for i in range(count)]}
