"""The watch cache and list resourceVersions it has not reached yet (upstream's
waitUntilFreshAndBlock): a list waits up to 3 s for the cache to catch up, then answers 504
"Too large resource version" with upstream's Status and Retry-After. (A watch from ahead of the
cache is accepted: test_cacher_consistency.py.)"""

from __future__ import annotations

import asyncio
import time

import pytest

from kubesvc.api.errors import StatusError
from kubesvc.apiserver import cacher as cacher_module
from kubesvc.apiserver.app import error_response
from kubesvc.apiserver.cacher import WatchCache
from kubesvc.apiserver.registry.store import ListOptions
from kubesvc.apiserver.server import build_control_plane
from kubesvc.storage.memory import MemoryBackend
from kubesvc.util.clock import FakeClock
from tests.support.watchcache import start_cache, stop_cache as stop


@pytest.fixture
async def registry():
    reg, _ = await build_control_plane(MemoryBackend(), FakeClock(), ["10.96.0.0/16"])
    return reg


def svc(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}}


async def started(registry) -> WatchCache:
    return await start_cache(registry.backend, [store.info for store in registry.stores.values()])


async def test_list_ahead_of_the_cache_waits_for_the_write_that_reaches_it(registry):
    services = registry.store("", "services")
    cache = await started(registry)
    try:
        ahead = await registry.backend.current_revision() + 1

        async def write_soon():
            await asyncio.sleep(0.2)
            return await services.create("default", svc("late"), field_manager="t")

        writer = asyncio.create_task(write_soon())
        page = await cache.list(services.info, "default", ListOptions(resource_version=ahead))
        created = await writer
        assert int(page.meta["resourceVersion"]) >= ahead
        assert [obj.decode()["metadata"]["name"] for obj in page.items] == ["late"]
        assert int(created["metadata"]["resourceVersion"]) >= ahead
    finally:
        await stop(cache)


async def test_list_beyond_the_store_is_504_too_large_after_the_wait(registry, monkeypatch):
    monkeypatch.setattr(cacher_module, "FRESHNESS_TIMEOUT", 0.3)
    services = registry.store("", "services")
    cache = await started(registry)
    try:
        current = await registry.backend.current_revision()
        started_at = time.monotonic()
        with pytest.raises(StatusError) as refused:
            await cache.list(services.info, "default", ListOptions(resource_version=current + 100))
        assert time.monotonic() - started_at >= 0.3
        assert refused.value.status() == {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f"Timeout: Too large resource version: {current + 100}, current: {current}",
            "reason": "Timeout",
            "details": {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1},
            "code": 504,
        }
    finally:
        await stop(cache)


def test_the_too_large_status_carries_retry_after():
    """As upstream's ErrorNegotiated: a Status with retryAfterSeconds sets the Retry-After header."""
    from kubesvc.api.errors import too_large_resource_version

    response = error_response(too_large_resource_version(12, 10))
    assert response.status == 504 and response.headers["Retry-After"] == "1"
    assert "Retry-After" not in error_response(StatusError(404, "NotFound", "x")).headers
