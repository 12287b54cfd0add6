"""The watch cache over a storage shared by several apiservers (etcd): events that share one
revision (an etcd Txn), consistent lists from storage or from a cache that caught up, and a
client whose watch moves from one apiserver's cache to another's without a gap."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from kubesvc.api.errors import StatusError
from kubesvc.api.scheme import by_resource
from kubesvc.apiserver.cacher import WatchCache, WireEvent
from kubesvc.apiserver.registry.store import ListOptions
from kubesvc.storage import base as storage
from kubesvc.storage.etcd import EtcdBackend, EtcdConfig
from kubesvc.storage.memory import MemoryBackend
from tests.support.etcd import running_etcd
from tests.support.watchcache import start_cache, stop_cache as stop

SERVICES = by_resource("", "v1", "services")


def key(name: str) -> str:
    return SERVICES.key("default", name)


def value(name: str) -> bytes:
    return msgspec.json.encode({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"},
                                "spec": {"ports": [{"port": 80}]}})


def put(name: str, revision: int) -> storage.Event:
    return storage.Event("PUT", storage.KeyValue(key(name), value(name), revision, revision))


class ScriptedWatch:
    """A storage watch fed by the test, batch by batch (etcd sends a revision's events whole)."""

    def __init__(self, backend: "ScriptedBackend"):
        self.backend = backend
        self.batches: asyncio.Queue = asyncio.Queue()
        self.progress_requests = 0

    async def __aiter__(self):
        while True:
            batch = await self.batches.get()
            if batch is None:
                return
            yield batch

    def close(self) -> None:
        self.batches.put_nowait(None)

    def request_progress(self) -> None:
        self.progress_requests += 1
        if self.backend.answers_progress:
            self.batches.put_nowait([storage.Event("PROGRESS", storage.KeyValue("", b"", 0, self.backend.revision))])


class ScriptedBackend:
    """A storage as an etcd cluster looks to one apiserver: its current revision, an empty
    initial state, one watch the test feeds."""

    def __init__(self, revision: int, *, request_watch_progress: bool = True, answers_progress: bool = True):
        self.revision = revision
        self.request_watch_progress = request_watch_progress
        self.answers_progress = answers_progress
        self.watches: list[ScriptedWatch] = []

    async def current_revision(self) -> int:
        return self.revision

    def compact_revision(self) -> int:
        return 0

    async def list(self, prefix: str, *, revision: int = 0, limit: int = 0, start_key: str = "") -> storage.ListResult:
        return storage.ListResult([], revision or self.revision)

    async def watch(self, prefix: str, after_revision: int) -> ScriptedWatch:
        watch = ScriptedWatch(self)
        self.watches.append(watch)
        return watch

    async def commit(self, *events: storage.Event) -> None:
        """One storage revision (or several events at one revision) reaches the cache."""
        self.revision = max(self.revision, *(event.kv.mod_revision for event in events))
        self.watches[-1].batches.put_nowait(list(events))
        await asyncio.sleep(0.01)


async def started(backend, capacity: int = 100) -> WatchCache:
    return await start_cache(backend, [SERVICES], capacity)


async def events_of(watch, count: int) -> list[tuple[str, str]]:
    stream = aiter(watch)
    seen = []
    for _ in range(count):
        event_type, payload = await asyncio.wait_for(anext(stream), 2)
        obj = payload.decode() if isinstance(payload, WireEvent) else payload
        seen.append((event_type, obj["metadata"].get("name", obj["metadata"]["resourceVersion"])))
    return seen


async def test_events_that_share_a_revision_are_one_step_of_the_history():
    """etcd puts every operation of a Txn at one revision: a watch after that revision gets
    none of them, a watch after the one before gets all; the ring drops a shared revision's
    first event only with a 410 for watches from before it; a list at that revision holds both."""
    backend = ScriptedBackend(10)
    cache = await started(backend, capacity=2)
    try:
        await backend.commit(put("a", 11), put("b", 11))
        page = await cache.list(SERVICES, "default", ListOptions())
        assert [obj.decode()["metadata"]["name"] for obj in page.items] == ["a", "b"] and page.meta["resourceVersion"] == "11"
        from_ten = await cache.watch(SERVICES, "default", ListOptions(resource_version=10), send_initial=False)
        from_eleven = await cache.watch(SERVICES, "default", ListOptions(resource_version=11), send_initial=False)
        await backend.commit(put("c", 12))  # the ring (capacity 2) drops a@11; b@11 stays
        assert await events_of(from_ten, 3) == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]
        assert await events_of(from_eleven, 1) == [("ADDED", "c")]
        with pytest.raises(StatusError) as gone:  # b@11 alone cannot replay revision 11
            await cache.watch(SERVICES, "default", ListOptions(resource_version=10), send_initial=False)
        assert gone.value.code == 410
        again = await cache.watch(SERVICES, "default", ListOptions(resource_version=11), send_initial=False)
        again.request_progress()
        assert await events_of(again, 2) == [("ADDED", "c"), ("BOOKMARK", "12")]
        for watch in (from_ten, from_eleven, again):
            watch.close()
    finally:
        await stop(cache)


async def test_consistent_list_from_storage_when_the_backend_cannot_request_progress():
    """kube-apiserver on etcd < 3.4.31 serves resourceVersion="" lists from etcd: without
    reliable progress notifications the cache cannot prove it caught up. "0" and N still
    come from the cache."""
    backend = ScriptedBackend(10, request_watch_progress=False)
    cache = await started(backend)
    try:
        await backend.commit(put("a", 11))
        assert await cache.list(SERVICES, "default", ListOptions()) is None  # storage answers
        for rv in (0, 11):
            page = await cache.list(SERVICES, "default", ListOptions(resource_version=rv))
            assert [obj.decode()["metadata"]["name"] for obj in page.items] == ["a"]
    finally:
        await stop(cache)


async def test_consistent_list_from_cache_once_it_reached_the_storages_revision():
    """With progress notifications a consistent list waits until the cache reached the
    storage's current revision, asking the storage watch for progress meanwhile: a write
    elsewhere (no event for this cache) does not leave it waiting for the timeout."""
    backend = ScriptedBackend(10)
    cache = await started(backend)
    try:
        await backend.commit(put("a", 11))
        backend.revision = 15  # written outside what this cache watches
        page = await asyncio.wait_for(cache.list(SERVICES, "default", ListOptions()), 1)
        assert page.meta["resourceVersion"] == "15" and backend.watches[-1].progress_requests >= 1
    finally:
        await stop(cache)


class Lagging:
    """A backend as one apiserver's cache sees it when its storage watch lags behind: batches
    pass only once ``catch_up`` is set."""

    def __init__(self, backend, *, request_watch_progress: bool):
        self.backend = backend
        self.request_watch_progress = request_watch_progress
        self.catch_up = asyncio.Event()

    def __getattr__(self, name):
        return getattr(self.backend, name)

    async def watch(self, prefix: str, after_revision: int):
        return _LaggingWatch(await self.backend.watch(prefix, after_revision), self.catch_up)


class _LaggingWatch:
    def __init__(self, watch, catch_up: asyncio.Event):
        self.watch, self.catch_up = watch, catch_up

    async def __aiter__(self):
        async for batch in self.watch:
            await self.catch_up.wait()
            yield batch

    def close(self) -> None:
        self.watch.close()

    def request_progress(self) -> None:
        self.watch.request_progress()


async def test_a_watch_moved_to_another_apiserver_continues_from_its_resource_version():
    """Two apiservers' caches over one storage; B's lags. A client that watched on A to
    revision N watches B from N: B accepts it (upstream's cacher does not refuse a watch from
    ahead of it) and, once caught up, sends exactly the events after N: no gap, no repeat."""
    shared = MemoryBackend()
    a = await started(shared)
    lagging = Lagging(shared, request_watch_progress=True)  # the embedded backend's progress is exact
    b = await started(lagging)
    try:
        on_a = await a.watch(SERVICES, "default", ListOptions(resource_version=await shared.current_revision()), send_initial=False)
        for name in ("one", "two", "three"):
            shared.sync_create(key(name), value(name))
        seen = await events_of(on_a, 3)
        assert seen == [("ADDED", "one"), ("ADDED", "two"), ("ADDED", "three")]
        last = await shared.current_revision()  # the client's resourceVersion: "three"'s
        on_a.close()  # A goes away
        assert b.revision < last
        on_b = await b.watch(SERVICES, "default", ListOptions(resource_version=last), send_initial=False)
        for name in ("four", "five"):
            shared.sync_create(key(name), value(name))
        lagging.catch_up.set()
        assert await events_of(on_b, 2) == [("ADDED", "four"), ("ADDED", "five")]
        on_b.close()
    finally:
        await stop(a)
        await stop(b)


async def test_two_caches_over_one_etcd():
    """Two apiservers' caches on one real etcd (Debian's 3.4.23): a Txn's two creates share one
    revision and reach both caches as one step; consistent lists go to etcd (no reliable
    progress notifications before 3.4.31), lists at a revision come from the cache; a watch
    moved from A to the lagging B at the revision it reached continues without a gap."""
    with running_etcd() as etcd:
        config = EtcdConfig((etcd.client_url,), prefix=etcd.new_prefix(), request_timeout=5)
        store_a, store_b = await EtcdBackend(config).open(), await EtcdBackend(config).open()
        store_a.watch_sees_every_revision = False  # as kube-apiserver knows etcd: only progress notifications could prove freshness
        a = await started(store_a)
        lagging = Lagging(store_b, request_watch_progress=False)
        b = await started(lagging)
        try:
            on_a = await a.watch(SERVICES, "default", ListOptions(resource_version=await store_a.current_revision()), send_initial=False)
            together = (await store_a.txn([storage.Create(key("one"), value("one")), storage.Create(key("two"), value("two"))])).revision
            assert await events_of(on_a, 2) == [("ADDED", "one"), ("ADDED", "two")]
            assert await a.list(SERVICES, "default", ListOptions()) is None  # resourceVersion="": etcd answers
            page = await a.list(SERVICES, "default", ListOptions(resource_version=together))
            assert [(obj.decode()["metadata"]["name"], obj.revision) for obj in page.items] == [("one", together), ("two", together)]
            on_a.close()
            assert b.revision < together
            on_b = await b.watch(SERVICES, "default", ListOptions(resource_version=together), send_initial=False)
            await store_b.create(key("three"), value("three"))
            lagging.catch_up.set()
            assert await events_of(on_b, 1) == [("ADDED", "three")]
            from_before = await b.watch(SERVICES, "default", ListOptions(resource_version=together - 1), send_initial=False)
            assert await events_of(from_before, 3) == [("ADDED", "one"), ("ADDED", "two"), ("ADDED", "three")]
            for watch in (on_b, from_before):
                watch.close()
        finally:
            await stop(a)
            await stop(b)
            await store_a.close()
            await store_b.close()


async def test_a_revisions_events_reach_the_connection_in_one_write():
    """The watch handler's sink gets each storage batch whole (one write to the connection), so
    a client cut off mid-revision never resumes "after" it with part of it unseen; a sink that
    declines (a backed-up connection) leaves them queued, in order."""
    backend = ScriptedBackend(10)
    cache = await started(backend)
    try:
        watch = await cache.watch(SERVICES, "default", ListOptions(resource_version=10), send_initial=False)
        writes = []
        watch.sink = lambda items: writes.append([wire.decode()["metadata"]["name"] for _, wire in items]) or True
        await backend.commit(put("a", 11), put("b", 11))
        await backend.commit(put("c", 12))
        assert writes == [["a", "b"], ["c"]]
        watch.sink = lambda items: False
        await backend.commit(put("d", 13), put("e", 13))
        assert await events_of(watch, 2) == [("ADDED", "d"), ("ADDED", "e")]
        watch.close()
    finally:
        await stop(cache)


async def test_consistent_list_from_cache_without_progress_when_every_revision_is_watched():
    """A backend whose every revision is a write under the watched keys (kubesvc's own etcd,
    its compactor's key under the prefix) lets a consistent list wait for the cache's events
    alone, without asking etcd for progress (3.4.23 cannot order it with events); a revision
    that never comes as an event sends the list to storage after the wait."""
    backend = ScriptedBackend(10, request_watch_progress=False, answers_progress=False)
    backend.watch_sees_every_revision = True
    cache = await started(backend)
    try:
        backend.revision = 11  # committed, its event still on its way

        async def arrives():
            await asyncio.sleep(0.1)
            await backend.commit(put("a", 11))

        arriving = asyncio.create_task(arrives())
        page = await asyncio.wait_for(cache.list(SERVICES, "default", ListOptions()), 2)
        await arriving
        assert [obj.decode()["metadata"]["name"] for obj in page.items] == ["a"] and page.meta["resourceVersion"] == "11"
        assert backend.watches[-1].progress_requests == 0
    finally:
        await stop(cache)
