"""A watch whose storage cannot be reached (etcd down: the watch cache is then not ready and the
watch goes to the store, or the cache cannot learn the store's revision): the response's 200 is
already out, so the failure is one ERROR event carrying a 500 Status with the store's words and
the stream ends, as kube-apiserver's etcd3 watcher sends it, never a second HTTP response inside
the chunked body."""

from __future__ import annotations

import json

import pytest
from aiohttp.test_utils import TestClient, TestServer

from kubesvc.apiserver.app import build_app
from kubesvc.apiserver.cacher import WatchCache
from kubesvc.apiserver.server import build_control_plane
from kubesvc.serving.user import UserInfo
from kubesvc.storage.base import StorageError
from kubesvc.storage.memory import MemoryBackend
from kubesvc.util.clock import FakeClock
from kubesvc.apiserver import appkeys

DOWN = "etcd (https://10.0.0.1:2379): connection refused"


class Admin:
    async def authenticate(self, request):
        return UserInfo("admin", groups=("system:masters",))


async def refuse(*args, **kwargs):
    raise StorageError(DOWN)


@pytest.mark.parametrize("failing", ["watch", "current_revision"])
async def test_a_watch_the_store_cannot_open_is_an_error_event_with_a_500_status(failing):
    clock = FakeClock()
    registry, _ = await build_control_plane(MemoryBackend(), clock, ["10.96.0.0/16"])
    app = build_app(registry, clock, "127.0.0.1:6443")
    app[appkeys.AUTHENTICATOR] = Admin()
    params = {"watch": "1", "resourceVersion": "1"}
    cache = None
    if failing == "current_revision":  # the cache asks the store's revision for a watch without one
        cache = WatchCache(registry.backend, [store.info for store in registry.stores.values()])
        await cache.start()
        app[appkeys.WATCH_CACHE] = cache
        params = {"watch": "1"}
    setattr(registry.backend, failing, refuse)
    try:
        async with TestClient(TestServer(app)) as client:
            response = await client.get("/api/v1/namespaces/default/services", params=params)
            body = await response.read()
    finally:
        if cache is not None:
            cache._task.cancel()
    assert response.status == 200
    lines = body.decode().splitlines()
    assert len(lines) == 1, body
    event = json.loads(lines[0])
    assert event["type"] == "ERROR"
    assert event["object"]["kind"] == "Status" and event["object"]["code"] == 500
    assert event["object"]["message"] == DOWN
