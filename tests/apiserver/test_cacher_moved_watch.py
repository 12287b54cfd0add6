"""A watch that moved here from another apiserver (issue 18: "a client switching apiservers
continues its watch from its resourceVersion with no gap"), in-process on the memory backend:
its resourceVersion may be beyond this cache, which may itself still be replaying history after
a start or a reload (an apiserver that just joined). What it gets, BOOKMARKs included, never
goes below the revision it came with nor back below an event already sent: a client resuming
from its last line must never receive an event twice.

tests/cluster/test_moving_watch.py moves a real watch between real apiservers on etcd."""

from __future__ import annotations

import asyncio

import pytest

from kubesvc.apiserver.cacher import WatchCache, WireEvent
from kubesvc.apiserver.registry.store import ListOptions
from kubesvc.apiserver.server import build_control_plane
from kubesvc.storage.memory import MemoryBackend
from kubesvc.util.clock import FakeClock
from tests.support.watchcache import stop_cache


@pytest.fixture(params=[True, False], ids=["progress-reliable", "progress-unreliable"])
async def registry(request, monkeypatch):
    """The registry on a memory backend; ``progress-unreliable``: the backend says its progress
    notifications prove nothing (as etcd 3.4.23), so a bookmark is the cache's own revision."""
    backend = MemoryBackend()
    if not request.param:
        monkeypatch.setattr(backend, "request_watch_progress", False, raising=False)
    reg, _ = await build_control_plane(backend, FakeClock(), ["10.96.0.0/16"])
    return reg


def svc(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}}


def line(item) -> tuple[str, str, int]:
    event_type, payload = item
    obj = payload.decode() if isinstance(payload, WireEvent) else payload
    return event_type, obj["metadata"].get("name", ""), int(obj["metadata"]["resourceVersion"])


async def read_until(watch, done, timeout: float = 3.0) -> list[tuple[str, str, int]]:
    """The watch's lines (type, name, resourceVersion) until ``done(lines)``, as the watch
    handler reads them (``next_batch``)."""
    lines: list[tuple[str, str, int]] = []
    deadline = asyncio.get_running_loop().time() + timeout
    while not done(lines):
        remaining = deadline - asyncio.get_running_loop().time()
        assert remaining > 0, lines
        batch = await watch.next_batch(min(remaining, 0.1))
        assert batch is not None, ("closed", lines)
        lines += [line(item) for item in batch]
    return lines


def assert_never_backwards(lines, start: int) -> None:
    """Every line at or beyond ``start``, events strictly rising, a BOOKMARK never below the
    last event (the client resumes from the last line it read)."""
    last = start
    for event_type, _, revision in lines:
        if event_type == "BOOKMARK":
            assert revision >= last, lines
        else:
            assert revision > last, lines
        last = revision


async def test_a_watch_from_beyond_a_cache_still_replaying_gets_only_what_follows_in_order(registry):
    services = registry.store("", "services")
    written = [await services.create("default", svc(f"s{i:02}"), field_manager="t") for i in range(12)]
    came_with = int(written[9]["metadata"]["resourceVersion"])  # what the client saw through a fresher apiserver
    cache = WatchCache(registry.backend, [store.info for store in registry.stores.values()], capacity=5)
    await cache.start()  # loaded as of 5 revisions back; the pump has not replayed them yet
    try:
        assert cache.ready and cache.revision < came_with
        watch = await cache.watch(services.info, "default", ListOptions(resource_version=came_with), send_initial=False)
        watch.request_progress()  # the handler's bookmark timer, at once
        later = await services.create("default", svc("s12"), field_manager="t")
        watch.request_progress()
        lines = await read_until(watch, lambda seen: ("ADDED", "s12", int(later["metadata"]["resourceVersion"])) in seen)
        watch.request_progress()
        lines += await read_until(watch, lambda seen: any(kind == "BOOKMARK" for kind, _, _ in seen))
        assert [(kind, name) for kind, name, _ in lines if kind != "BOOKMARK"] == [("ADDED", "s10"), ("ADDED", "s11"), ("ADDED", "s12")]
        assert_never_backwards(lines, came_with)
        watch.close()
    finally:
        await stop_cache(cache)


async def test_bookmarks_never_go_back_below_an_event_already_sent(registry):
    services, configmaps = registry.store("", "services"), registry.store("", "configmaps")
    cache = WatchCache(registry.backend, [store.info for store in registry.stores.values()])
    await cache.start()
    try:
        start = await registry.backend.current_revision()
        watch = await cache.watch(services.info, "default", ListOptions(resource_version=start), send_initial=False)
        lines: list[tuple[str, str, int]] = []
        for i in range(20):
            await services.create("default", svc(f"s{i:02}"), field_manager="t")
            if i % 3 == 0:  # revisions no event of this watch announces
                await configmaps.create("default", {"metadata": {"name": f"c{i}"}}, field_manager="t")
            watch.request_progress()
            batch = await watch.next_batch(0)
            lines += [line(item) for item in batch or []]
        watch.request_progress()
        lines += await read_until(watch, lambda seen: sum(kind == "ADDED" for kind, _, _ in lines + seen) == 20)
        assert [name for kind, name, _ in lines if kind == "ADDED"] == [f"s{i:02}" for i in range(20)]
        assert any(kind == "BOOKMARK" for kind, _, _ in lines)
        assert_never_backwards(lines, start)
        watch.close()
    finally:
        await stop_cache(cache)
