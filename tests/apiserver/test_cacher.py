"""The watch cache (apiserver/cacher.py) against the registry's storage path, in-process on the
memory backend: lists equal storage's after decoding, watches get exactly the events after
their revision, 410 below the window, selectors and their transitions, bookmarks."""

from __future__ import annotations

import asyncio
import weakref

import msgspec
import pytest

from kubesvc.api.errors import StatusError
from kubesvc.api.selectors import parse_field_selector, parse_label_selector
from kubesvc.apiserver.cacher import WatchCache, WireEvent
from kubesvc.apiserver.registry.store import ListOptions
from kubesvc.apiserver.server import build_control_plane
from kubesvc.storage.memory import MemoryBackend
from kubesvc.util.clock import FakeClock
from tests.support.watchcache import start_cache, stop_cache as stop


@pytest.fixture
async def registry():
    reg, _ = await build_control_plane(MemoryBackend(), FakeClock(), ["10.96.0.0/16"])
    await reg.store("", "namespaces").create(None, {"metadata": {"name": "other"}}, field_manager="t")
    return reg


def svc(name: str, labels: dict | None = None, type_: str | None = None) -> dict:
    spec: dict = {"ports": [{"port": 80}]}
    if type_:
        spec["type"] = type_
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


async def started(registry, capacity: int = 100) -> WatchCache:
    return await start_cache(registry.backend, [store.info for store in registry.stores.values()], capacity)


def services_info(registry):
    return registry.store("", "services").info


def as_objects(page) -> list[dict]:
    return [msgspec.json.decode(obj.raw) for obj in page.items]


async def take(watch, count: int, timeout: float = 2.0) -> list[tuple[str, dict]]:
    """The next ``count`` events of a cache watch as (type, object); one iteration per watch
    (leaving an ``async for`` over the watch closes it)."""
    stream = _streams.setdefault(watch, aiter(watch))
    events = []
    for _ in range(count):
        event_type, payload = await asyncio.wait_for(anext(stream), timeout)
        events.append((event_type, payload.decode() if isinstance(payload, WireEvent) else payload))
    return events


_streams: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def names(events) -> list[tuple[str, str]]:
    return [(t, o["metadata"].get("name", "")) for t, o in events]


@pytest.mark.parametrize("namespace, options", [
    (None, ListOptions()),
    ("default", ListOptions()),
    ("other", ListOptions(label_selector=parse_label_selector("tier=web"))),
    (None, ListOptions(label_selector=parse_label_selector("tier in (web,db),!gone"))),
    (None, ListOptions(field_selector=parse_field_selector("spec.type=NodePort", {"spec.type": ("spec", "type")}))),
    (None, ListOptions(field_selector=parse_field_selector("metadata.name=b", {}))),
    ("default", ListOptions(limit=2)),
    (None, ListOptions(limit=3, label_selector=parse_label_selector("tier"))),
    (None, ListOptions(limit=100)),
], ids=["all", "namespace", "label-in-namespace", "set-based", "field", "exact-name", "page", "page-filtered", "limit-above-count"])
async def test_list_from_cache_equals_list_from_storage(registry, namespace, options):
    services = registry.store("", "services")
    for ns in ("default", "other"):
        await services.create(ns, svc("a", {"tier": "web"}), field_manager="t")
        await services.create(ns, svc("b", {"tier": "db"}, "NodePort"), field_manager="t")
        await services.create(ns, svc("c", {"tier": "web", "gone": "yes"}), field_manager="t")
    await services.guaranteed_update("default", "a", lambda o: {**o, "metadata": {**o["metadata"], "labels": {"tier": "db"}}}, field_manager="t")
    await services.delete("other", "c", {})
    cache = await started(registry)
    try:
        page = await cache.list(services.info, namespace, options)
        items, meta = await services.list(namespace, options)
        assert as_objects(page) == items and page.meta == meta
        assert items  # the case selects something
        # every cached item is byte for byte what the storage path serves
        assert [obj.raw for obj in page.items] == [msgspec.json.encode(item) for item in items]
        if "continue" in meta:  # the next page, from the cache (nothing changed) as from storage
            following = ListOptions(limit=options.limit, continue_token=meta["continue"], label_selector=options.label_selector)
            cached_next = await cache.list(services.info, namespace, following)
            stored_next = await services.list(namespace, following)
            assert (as_objects(cached_next), cached_next.meta) == stored_next
            everything, _ = await services.list(namespace, ListOptions(label_selector=options.label_selector))
            assert items + stored_next[0] == everything[:len(items) + len(stored_next[0])]
    finally:
        await stop(cache)


async def test_list_waits_for_writes_committed_before_it(registry):
    services = registry.store("", "services")
    cache = await started(registry)
    try:
        created = await services.create("default", svc("late"), field_manager="t")  # the pump has not run yet
        page = await cache.list(services.info, "default", ListOptions())
        assert [o["metadata"]["name"] for o in as_objects(page)] == ["late"]
        assert page.meta["resourceVersion"] == created["metadata"]["resourceVersion"]
    finally:
        await stop(cache)


async def test_next_page_after_a_change_comes_from_storage_at_the_first_pages_revision(registry):
    services = registry.store("", "services")
    for name in "abcd":
        await services.create("default", svc(name), field_manager="t")
    cache = await started(registry)
    try:
        first = await cache.list(services.info, "default", ListOptions(limit=2))
        await services.delete("default", "c", {})  # after the first page: not in its snapshot's view
        following = ListOptions(limit=2, continue_token=first.meta["continue"])
        assert await cache.list(services.info, "default", following) is None
        rest, meta = await services.list("default", following)
        assert [o["metadata"]["name"] for o in rest] == ["c", "d"] and meta["resourceVersion"] == first.meta["resourceVersion"]
    finally:
        await stop(cache)


async def test_list_delegates_exact_to_storage(registry):
    services = registry.store("", "services")
    created = await services.create("default", svc("a"), field_manager="t")
    cache = await started(registry)
    try:
        rv = int(created["metadata"]["resourceVersion"])
        assert await cache.list(services.info, "default", ListOptions(resource_version=rv, resource_version_match="Exact")) is None
        with pytest.raises(StatusError) as invalid:  # as storage refuses it
            await cache.list(services.info, "default", ListOptions(continue_token="x"))
        assert invalid.value.code == 400
    finally:
        await stop(cache)


async def test_watch_from_a_revision_in_the_window_gets_exactly_the_events_after_it(registry):
    services = registry.store("", "services")
    cache = await started(registry)
    try:
        first = await services.create("default", svc("a"), field_manager="t")
        await services.create("other", svc("elsewhere"), field_manager="t")
        modified = await services.guaranteed_update("default", "a", lambda o: {**o, "metadata": {**o["metadata"], "labels": {"x": "1"}}},
                                              field_manager="t")
        await services.create("default", svc("b"), field_manager="t")
        deleted, _ = await services.delete("default", "a", {})
        watch = await cache.watch(services.info, "default", ListOptions(resource_version=int(first["metadata"]["resourceVersion"])),
                                  send_initial=False)
        events = await take(watch, 3)
        assert names(events) == [("MODIFIED", "a"), ("ADDED", "b"), ("DELETED", "a")]
        assert events[0][1] == modified
        assert events[2][1]["metadata"]["resourceVersion"] == deleted["metadata"]["resourceVersion"]
        # live events follow, once
        later = await services.create("default", svc("c"), field_manager="t")
        assert await take(watch, 1) == [("ADDED", later)]
        watch.close()
    finally:
        await stop(cache)


async def test_watch_below_the_window_is_410(registry):
    services = registry.store("", "services")
    cache = await started(registry, capacity=3)
    try:
        first = await services.create("default", svc("s0"), field_manager="t")
        for i in range(1, 5):
            await services.create("default", svc(f"s{i}"), field_manager="t")
        await cache.fresh()
        with pytest.raises(StatusError) as gone:
            await cache.watch(services.info, "default", ListOptions(resource_version=int(first["metadata"]["resourceVersion"])),
                              send_initial=False)
        assert gone.value.code == 410 and gone.value.reason == "Expired"
        assert gone.value.message.startswith(f"too old resource version: {first['metadata']['resourceVersion']} (")
    finally:
        await stop(cache)


async def test_watch_without_resource_version_starts_with_current_objects(registry):
    services = registry.store("", "services")
    await services.create("default", svc("a", {"tier": "web"}), field_manager="t")
    await services.create("default", svc("b", {"tier": "db"}), field_manager="t")
    cache = await started(registry)
    try:
        watch = await cache.watch(services.info, "default", ListOptions(label_selector=parse_label_selector("tier=web")), send_initial=True)
        assert names(await take(watch, 1)) == [("ADDED", "a")]
        await services.create("default", svc("c", {"tier": "web"}), field_manager="t")
        assert names(await take(watch, 1)) == [("ADDED", "c")]
        watch.close()
    finally:
        await stop(cache)


async def test_selector_transitions_become_added_and_deleted(registry):
    services = registry.store("", "services")
    cache = await started(registry)

    async def relabel(name: str, tier: str):
        return await services.guaranteed_update("default", name, lambda o: {**o, "metadata": {**o["metadata"], "labels": {"tier": tier}}},
                                          field_manager="t")

    try:
        await services.create("default", svc("a", {"tier": "db"}), field_manager="t")
        await cache.fresh()
        watch = await cache.watch(services.info, "default", ListOptions(label_selector=parse_label_selector("tier=web"),
                                                                        resource_version=await registry.backend.current_revision()),
                                  send_initial=False)
        joined = await relabel("a", "web")
        await relabel("a", "web2")
        events = await take(watch, 2)
        assert names(events) == [("ADDED", "a"), ("DELETED", "a")]
        assert events[0][1] == joined
        # what left the selection is reported in its last matching state, at the revision it left
        left = events[1][1]
        assert left["metadata"]["labels"] == {"tier": "web"}
        assert left["metadata"]["resourceVersion"] == str(await registry.backend.current_revision())
        watch.close()
    finally:
        await stop(cache)


async def test_an_event_for_many_watchers_is_encoded_once(registry):
    services = registry.store("", "services")
    cache = await started(registry)
    try:
        watches = [await cache.watch(services.info, None, ListOptions(resource_version=await registry.backend.current_revision()),
                                     send_initial=False) for _ in range(3)]
        await services.create("default", svc("a"), field_manager="t")
        await cache.fresh()
        received = [(await anext(aiter(watch)))[1] for watch in watches]
        assert received[0] is received[1] is received[2]
        assert received[0].line.startswith(b'{"type":"ADDED","object":{')
    finally:
        await stop(cache)


async def test_bookmark_after_progress_request_carries_the_current_revision(registry):
    services = registry.store("", "services")
    cache = await started(registry)
    try:
        watch = await cache.watch(services.info, "default", ListOptions(resource_version=await registry.backend.current_revision()),
                                  send_initial=False)
        await registry.store("", "configmaps").create("default", {"metadata": {"name": "elsewhere"}}, field_manager="t")
        watch.request_progress()
        assert await take(watch, 1) == [("BOOKMARK", {"kind": "Service", "apiVersion": "v1",
                                                      "metadata": {"resourceVersion": str(await registry.backend.current_revision())}})]
        watch.close()
    finally:
        await stop(cache)


async def test_resumes_watches_from_before_a_restart(registry):
    """A new cache (an apiserver restart) replays recent history: a watch from an older
    revision gets what followed it."""
    services = registry.store("", "services")
    first = await services.create("default", svc("a"), field_manager="t")
    await services.create("default", svc("b"), field_manager="t")
    cache = await started(registry)
    try:
        watch = await cache.watch(services.info, "default", ListOptions(resource_version=int(first["metadata"]["resourceVersion"])),
                                  send_initial=False)
        assert names(await take(watch, 1)) == [("ADDED", "b")]
        watch.close()
    finally:
        await stop(cache)


@pytest.mark.parametrize("stored", [
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"type": "NodePort"}},
    {"spec": {"template": {"metadata": {"name": "inner"}}}, "metadata": {"name": "b"}, "kind": "Service"},
    {"kind": "Service", "metadata": {}},
    {"kind": "Service", "metadata": {"name": "c\u00e9\\\"", "namespace": "n"}, "status": {}},
], ids=["usual", "nested-metadata-first", "empty-metadata", "escapes"])
@pytest.mark.parametrize("read_first", [False, True], ids=["unread", "read"])
def test_cached_object_is_the_stored_one_with_its_resource_version(registry, stored, read_first):
    from kubesvc.apiserver.cacher import Cached
    from kubesvc.apiserver.registry.store import decode
    from kubesvc.storage.base import KeyValue

    cached = Cached("k", msgspec.json.encode(stored), 7, services_info(registry))
    if read_first:
        assert msgspec.json.decode(cached.raw) == {**stored, "metadata": {**stored["metadata"], "resourceVersion": "7"}}
    deleted = cached.at(12)
    assert msgspec.json.decode(deleted.raw) == {**stored, "metadata": {**stored["metadata"], "resourceVersion": "12"}}
    assert deleted.view["metadata"] == {k: v for k, v in stored["metadata"].items() if k in ("name", "namespace", "labels")}
    # byte for byte what the storage path (decode, then encode) serves
    assert deleted.raw == msgspec.json.encode(decode(KeyValue("k", msgspec.json.encode(stored), 1, 12)))


class _BreakingWatch:
    """A storage watch that fails at its first batch."""

    def __init__(self, inner):
        self.inner = inner

    def close(self):
        self.inner.close()

    def request_progress(self):
        self.inner.request_progress()

    async def __aiter__(self):
        async for _ in self.inner:
            raise RuntimeError("storage watch broke")
        yield []  # pragma: no cover - makes this an async generator


class FlakyBackend(MemoryBackend):
    """A memory backend whose storage watches fail as planned, one plan entry per watch() call:
    "raise" (watch() raises), "break" (the watch fails at its first batch), then ones that work."""

    def __init__(self):
        super().__init__()
        self.plan: list[str] = []

    async def watch(self, prefix, after_revision):
        step = self.plan.pop(0) if self.plan else "ok"
        if step == "raise":
            raise RuntimeError("storage unavailable")
        watch = await super().watch(prefix, after_revision)
        return _BreakingWatch(watch) if step == "break" else watch


@pytest.mark.parametrize("plan, failures", [
    (["raise", "raise", "raise"], 3),  # the first load fails, then two reloads
    (["break", "raise", "raise"], 3),  # the pump's watch fails on a write, then two reloads
], ids=["at-start", "while-running"])
async def test_a_failed_pump_retries_and_storage_answers_meanwhile(plan, failures, caplog):
    backend = FlakyBackend()
    registry, _ = await build_control_plane(backend, FakeClock(), ["10.96.0.0/16"])
    services = registry.store("", "services")
    await services.create("default", svc("a"), field_manager="t")
    backend.plan = list(plan)
    cache = WatchCache(backend, [store.info for store in registry.stores.values()], capacity=100)
    loop = asyncio.get_running_loop()
    with caplog.at_level("WARNING", logger="kubesvc.apiserver.cacher"):
        await cache.start()
        await asyncio.sleep(0)
        try:
            await services.create("default", svc("b"), field_manager="t")  # breaks the "while-running" pump's watch
            began = loop.time()
            assert await cache.list(services.info, "default", ListOptions()) is None  # storage answers
            assert await cache.watch(services.info, "default", ListOptions(), send_initial=True) is None
            assert loop.time() - began < 0.5  # at once, not after the 3 s freshness wait
            while not cache.ready and loop.time() - began < 5:  # back-off 0.1 + 0.2 + 0.4 s
                await asyncio.sleep(0.05)
            await services.create("default", svc("c"), field_manager="t")
            page = await cache.list(services.info, "default", ListOptions())
            assert page is not None  # the cache serves again
            items, meta = await services.list("default", ListOptions())
            assert as_objects(page) == items and page.meta == meta
            assert [o["metadata"]["name"] for o in items] == ["a", "b", "c"]
        finally:
            await stop(cache)
    logged = [r for r in caplog.records if r.name == "kubesvc.apiserver.cacher" and r.levelname == "ERROR"]
    assert len(logged) == failures  # each failure logged


# -- over HTTP: the same answers with and without the watch cache --------------------------------


@pytest.mark.parametrize("flag", ["--watch-cache=true", "--watch-cache=false"], ids=["cache", "storage"])
def test_lists_and_watches_over_http(fresh_apiserver, flag):
    import json

    server = fresh_apiserver(flag)
    http = server.session()
    base = f"{server.url}/api/v1/namespaces/default/services"
    for name, tier in (("a", "web"), ("b", "db"), ("c", "web")):
        assert http.post(base, json=svc(name, {"tier": tier})).status_code == 201
    listed = http.get(base, params={"labelSelector": "tier=web"}).json()
    assert [i["metadata"]["name"] for i in listed["items"]] == ["a", "c"]
    first = http.get(base, params={"limit": "2"}).json()
    rest = http.get(base, params={"limit": "2", "continue": first["metadata"]["continue"]}).json()
    assert [i["metadata"]["name"] for i in first["items"] + rest["items"]] == ["a", "b", "c", "kubernetes"]
    assert first["metadata"]["remainingItemCount"] == 2 and rest["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    rv = listed["metadata"]["resourceVersion"]
    patched = http.patch(f"{base}/a", data=json.dumps({"metadata": {"labels": {"tier": "db"}}}),
                         headers={"Content-Type": "application/merge-patch+json"}).json()
    assert http.delete(f"{base}/c").status_code == 200
    with http.get(base, params={"watch": "true", "resourceVersion": rv, "labelSelector": "tier=web", "timeoutSeconds": "1"},
                  stream=True) as response:
        events = [json.loads(line) for line in response.iter_lines() if line]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("DELETED", "a"), ("DELETED", "c")]
    # a left the selection: its last matching state at the revision it left
    assert events[0]["object"]["metadata"]["labels"] == {"tier": "web"}
    assert events[0]["object"]["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]


@pytest.mark.parametrize("flag", ["--watch-cache=true", "--watch-cache=false"], ids=["cache", "storage"])
def test_continue_token_from_the_future_is_refused_as_by_storage(fresh_apiserver, flag):
    """A continue token whose revision the store has not reached (forged, or from another
    cluster) is 504 "Too large resource version", from the cache as from storage: the cache
    must not cut a page at a revision it does not have."""
    from kubesvc.apiserver.registry.store import encode_continue

    server = fresh_apiserver(flag)
    http = server.session()
    base = f"{server.url}/api/v1/namespaces/default/services"
    assert http.post(base, json=svc("a")).status_code == 201
    current = int(http.get(base).json()["metadata"]["resourceVersion"])
    token = encode_continue(1_000_000_000, "a\x00")
    response = http.get(base, params={"limit": "1", "continue": token})
    assert response.status_code == 504, response.text
    status = response.json()
    assert status["kind"] == "Status" and status["code"] == 504 and status["reason"] == "Timeout"
    assert status["message"].startswith("Too large resource version: 1000000000, current: ")
    assert int(status["message"].rsplit(" ", 1)[1]) >= current
