"""``/ui/api/trace`` reads the apiserver machine's rules (``live.read_node``: several ``nft``,
``iptables-save`` and ``ipset`` processes) at most once per two seconds, one read at a time, however
many users ask at once: any user allowed to trace must not be able to make the apiserver's machine
start those processes per request (review 20)."""

from __future__ import annotations

import asyncio
from urllib.parse import urlencode

import pytest
from aiohttp.test_utils import make_mocked_request

from kubesvc.api.errors import StatusError
from kubesvc.kernel.exec import CommandFailed
from kubesvc.proxy.trace import live
from kubesvc.ui import routes

SERVICE = {"metadata": {"name": "web", "namespace": "ns"},
           "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "ports": [{"port": 80, "protocol": "TCP"}]}}


class Reader:
    """The reads trace_data makes, answered as an allowed user's would be."""

    def __init__(self, app, user):
        pass

    async def get(self, path):
        return SERVICE

    async def list(self, path, params=None):
        return {"items": []}


def empty_node() -> live.NodeState:
    return live.NodeState({4: None, 6: None}, ["192.168.1.2"], {4: None, 6: None}, {4: None, 6: None})


def trace_request():
    request = make_mocked_request("GET", "/ui/api/trace?namespace=ns&name=web", app={})
    request["user"] = object()
    return request


async def test_many_traces_at_once_read_the_rules_once(monkeypatch):
    reads = []

    async def read_node(**_):
        reads.append(1)
        await asyncio.sleep(0.05)
        return empty_node()

    monkeypatch.setattr(live, "read_node", read_node)
    monkeypatch.setattr(routes, "AsUser", Reader)
    handler = routes.path_handler()
    answers = await asyncio.gather(*(handler.serve(trace_request()) for _ in range(20)))
    assert [a.status for a in answers] == [200] * 20
    assert len(reads) == 1
    await handler.serve(trace_request())  # within two seconds: the same read
    assert len(reads) == 1


async def test_the_rules_are_read_again_once_two_seconds_old_and_a_failure_is_kept_as_long():
    now, reads = [0.0], []

    async def read():
        reads.append(now[0])
        if len(reads) == 1:
            raise CommandFailed(["nft", "-j", "list", "table"], 1, "", "Operation not permitted")
        return empty_node()

    rules = routes.RecentNodeState(clock=lambda: now[0], read=read)
    for _ in range(3):
        answer = await routes.trace_data(Reader(None, None), "ns", "web", rules)
        assert answer["error"].startswith("cannot read this machine's rules")
    now[0] = 1.9
    await routes.trace_data(Reader(None, None), "ns", "web", rules)
    assert reads == [0.0]
    now[0] = 2.0
    answer = await routes.trace_data(Reader(None, None), "ns", "web", rules)
    assert "report" in answer and reads == [0.0, 2.0]


async def test_a_namespace_or_name_that_is_not_a_service_s_is_a_400_before_any_read(monkeypatch):
    """A ``/`` in either would change the path read as the user: ``kubernetes/proxy`` was read as
    the Service, authorized as ``get services/proxy`` (review 20)."""
    reads = []

    class Recording(Reader):
        async def get(self, path):
            reads.append(path)
            return SERVICE

    monkeypatch.setattr(routes, "AsUser", Recording)
    handler = routes.path_handler()
    for what in ("explain", "trace"):
        for namespace, name in (("default", "kubernetes/proxy"), ("default", "kubernetes/status"), ("kube-system/services", "x"),
                                ("..", "x"), ("default", "a?b"), ("default", "x" * 64), ("Default", "x")):
            request = make_mocked_request("GET", f"/ui/api/{what}?" + urlencode({"namespace": namespace, "name": name}), app={})
            request["user"] = object()
            with pytest.raises(StatusError) as refused:
                await handler.serve(request)
            assert (refused.value.code, refused.value.reason) == (400, "BadRequest"), (namespace, name)
    assert reads == []
