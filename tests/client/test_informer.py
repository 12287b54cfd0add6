"""Indexer and Informer.

Three layers: the Indexer alone; the Informer against a scripted fake API (exact control over
what each list and watch returns); and the Informer against the real apiserver, including
watch timeouts, a forced 410 after compaction, and a server restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import deque

import pytest

from kubesvc.client.cache import NAMESPACE_INDEX, Indexer, index_by_label, index_by_namespace, object_key, split_key
from kubesvc.client.informer import Backoff, Informer
from kubesvc.client.kubeconfig import load_kubeconfig
from kubesvc.client.rest import DEFAULT_FIELD_MANAGER, ENDPOINTS, SERVICES, ApiError, ConnectionFailed, RestClient, is_gone
from tests.support import cluster

FAST_BACKOFF = dict(initial=0.01, cap=0.05)


def _obj(name: str, rv: int | str = 1, namespace: str | None = "ns", **labels: str) -> dict:
    meta = {"name": name, "resourceVersion": str(rv), "labels": labels}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta}


# the shared poll, with this module's shorter default wait and finer steps
eventually = functools.partial(cluster.eventually, timeout=10.0, interval=0.02)


class Recorder:
    """Handlers that log ("add"|"update"|"delete", name, rv) in delivery order."""

    def __init__(self):
        self.events: list[tuple[str, str, str]] = []
        self.updates: list[tuple[dict, dict]] = []

    def on_add(self, obj):
        self.events.append(("add", obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))

    def on_update(self, old, new):
        self.updates.append((old, new))
        self.events.append(("update", new["metadata"]["name"], new["metadata"]["resourceVersion"]))

    def on_delete(self, obj):
        self.events.append(("delete", obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))

    def attach(self, informer: Informer) -> Recorder:
        informer.add_event_handler(self.on_add, self.on_update, self.on_delete)
        return self

    def kinds(self) -> list[tuple[str, str]]:
        return [(kind, name) for kind, name, _ in self.events]


@contextlib.asynccontextmanager
async def running(informer: Informer, sync_timeout: float = 10.0):
    task = asyncio.create_task(informer.run())
    try:
        assert await informer.wait_for_sync(sync_timeout), "informer did not sync"
        yield informer
    finally:
        informer.stop()
        await asyncio.wait_for(task, 5)


# -- Indexer -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "obj, key, split",
    [(_obj("web", namespace="ns"), "ns/web", ("ns", "web")), (_obj("node-1", namespace=None), "node-1", ("", "node-1"))],
    ids=["namespaced", "cluster-scoped"],
)
def test_object_keys(obj, key, split):
    assert object_key(obj) == key and split_key(key) == split


def test_indexer_keeps_indexes_in_step_with_changes():
    by_service = index_by_label("kubernetes.io/service-name")
    indexer = Indexer({NAMESPACE_INDEX: index_by_namespace, "service": by_service})
    slice_a = _obj("web-a", namespace="ns", **{"kubernetes.io/service-name": "web"})
    slice_b = _obj("web-b", namespace="ns", **{"kubernetes.io/service-name": "web"})
    other = _obj("web-a", namespace="other", **{"kubernetes.io/service-name": "web"})
    for obj in (slice_a, slice_b, other):
        assert indexer.upsert(obj) is None
    assert [object_key(o) for o in indexer.by_index("service", "ns/web")] == ["ns/web-a", "ns/web-b"]
    assert indexer.index_keys(NAMESPACE_INDEX, "other") == {"other/web-a"}

    moved = _obj("web-b", rv=2, namespace="ns", **{"kubernetes.io/service-name": "api"})
    assert indexer.upsert(moved) is slice_b
    assert indexer.index_keys("service", "ns/web") == {"ns/web-a"}
    assert indexer.by_index("service", "ns/api") == [moved]

    assert indexer.remove("ns/web-a") is slice_a
    assert indexer.remove("ns/web-a") is None
    assert indexer.index_keys("service", "ns/web") == set()
    assert sorted(indexer.keys()) == ["ns/web-b", "other/web-a"] and len(indexer) == 2
    assert indexer.get("web-b", "ns") is moved and indexer.get_by_key("other/web-a") is other
    assert "ns/web-b" in indexer and "ns/web-a" not in indexer


def test_indexer_added_later_covers_existing_objects_and_names_are_unique():
    indexer = Indexer()
    indexer.upsert(_obj("a", app="x"))
    indexer.add_indexers({"app": index_by_label("app")})
    assert indexer.index_keys("app", "ns/x") == {"ns/a"}
    with pytest.raises(ValueError, match="already exists"):
        indexer.add_indexers({"app": index_by_label("app")})
    with pytest.raises(KeyError, match="nope"):
        indexer.by_index("nope", "x")


# -- Informer against a scripted API ----------------------------------------------------------


class ScriptedApi:
    """Stands in for ``RestClient.resource(...)``: each list/watch call takes the next script.

    A listing is ``(resourceVersion, items)`` or an exception; a watch script is a list of
    events, where an exception entry is raised at that point. With no script left, the call
    blocks until the informer is stopped.
    """

    def __init__(self, listings=(), watches=()):
        self.listings = deque(listings)
        self.watches = deque(watches)
        self.watched_from: list[str] = []
        self.list_calls = 0

    def resource(self, resource):
        return self

    async def list(self, **selection):
        self.list_calls += 1
        if not self.listings:
            await asyncio.Event().wait()
        listing = self.listings.popleft()
        if isinstance(listing, Exception):
            raise listing
        version, items = listing
        return {"metadata": {"resourceVersion": str(version)}, "items": items}

    async def watch(self, **options):
        self.watched_from.append(options["resource_version"])
        assert options["allow_watch_bookmarks"] and 300 <= options["timeout_seconds"] <= 600
        if not self.watches:
            await asyncio.Event().wait()
        for event in self.watches.popleft():
            if isinstance(event, Exception):
                raise event
            yield event


def _informer(api: ScriptedApi, **kwargs) -> Informer:
    return Informer(api, SERVICES, backoff=Backoff(**FAST_BACKOFF), **kwargs)


async def test_relist_after_gone_delivers_the_differences():
    api = ScriptedApi(
        listings=[(10, [_obj("a", 5), _obj("b", 6), _obj("c", 7)]), (20, [_obj("a", 5), _obj("b", 15), _obj("d", 16)])],
        watches=[[ApiError(410, "Expired", "too old resource version: 10 (12)")]],
    )
    informer = _informer(api)
    recorder = Recorder().attach(informer)
    async with running(informer):
        await eventually(lambda: api.list_calls == 2 and len(api.watched_from) == 2)
    assert recorder.events == [
        ("add", "a", "5"), ("add", "b", "6"), ("add", "c", "7"),
        ("update", "b", "15"), ("add", "d", "16"), ("delete", "c", "7"),
    ]
    assert recorder.updates[0][0]["metadata"]["resourceVersion"] == "6"
    assert api.watched_from == ["10", "20"]
    assert sorted(informer.indexer.keys()) == ["ns/a", "ns/b", "ns/d"]


async def test_watch_events_update_the_cache_and_bookmarks_move_the_resume_point():
    api = ScriptedApi(
        listings=[(10, [_obj("a", 5)])],
        watches=[
            [("ADDED", _obj("b", 11)), ("MODIFIED", _obj("a", 12)), ("MODIFIED", _obj("a", 12)), ("BOOKMARK", {"metadata": {"resourceVersion": "30"}})],
            [("DELETED", _obj("b", 31)), ("DELETED", _obj("never-seen", 32))],
        ],
    )
    informer = _informer(api)
    recorder = Recorder().attach(informer)
    async with running(informer):
        await eventually(lambda: len(api.watched_from) == 3)
        assert informer.last_sync_resource_version == "32"
    assert api.watched_from == ["10", "30", "32"]  # re-watch, no relist
    assert api.list_calls == 1
    assert recorder.events == [("add", "a", "5"), ("add", "b", "11"), ("update", "a", "12"), ("delete", "b", "31")]
    assert informer.indexer.keys() == ["ns/a"]


@pytest.mark.parametrize(
    "failure",
    [ConnectionFailed("watch: connection reset"), ApiError(500, "InternalError", "boom"), []],
    ids=["dropped", "error-event", "very-short-watch"],
)
async def test_failed_watch_relists(failure):
    failed_watch = failure if isinstance(failure, list) else [("ADDED", _obj("b", 11)), failure]
    api = ScriptedApi(listings=[(10, [_obj("a", 5)]), (12, [_obj("a", 5), _obj("b", 11)])], watches=[failed_watch])
    informer = _informer(api)
    recorder = Recorder().attach(informer)
    async with running(informer):
        await eventually(lambda: api.list_calls == 2 and len(api.watched_from) == 2)
    assert api.watched_from == ["10", "12"]
    assert recorder.kinds() == [("add", "a"), ("add", "b")]  # the relist found nothing new


async def test_failed_lists_are_retried_with_backoff():
    api = ScriptedApi(listings=[ConnectionFailed("refused"), ConnectionFailed("refused"), (3, [_obj("a")])])
    informer = _informer(api)
    assert not informer.has_synced()
    async with running(informer):
        assert informer.has_synced() and api.list_calls == 3


def test_backoff_doubles_to_the_cap_and_resets():
    backoff = Backoff(initial=1, cap=5, jitter=0)
    assert [backoff.next_delay() for _ in range(5)] == [1, 2, 4, 5, 5]
    backoff.reset()
    assert backoff.next_delay() == 1


async def test_handler_errors_are_logged_and_others_still_run(caplog):
    api = ScriptedApi(listings=[(10, [_obj("a")])], watches=[[("ADDED", _obj("b", 11))]])
    informer = _informer(api)

    def broken(obj):
        raise RuntimeError("handler bug")

    informer.add_event_handler(on_add=broken)
    recorder = Recorder().attach(informer)
    with caplog.at_level(logging.ERROR, logger="kubesvc.client.informer"):
        async with running(informer):
            await eventually(lambda: len(recorder.events) == 2)
    assert recorder.kinds() == [("add", "a"), ("add", "b")]
    assert sum("handler bug" in (r.exc_text or "") for r in caplog.records) == 2


async def test_late_handler_gets_the_cache_replayed_as_adds():
    api = ScriptedApi(listings=[(10, [_obj("a"), _obj("b")])])
    informer = _informer(api)
    async with running(informer):
        late = Recorder().attach(informer)
        assert sorted(late.kinds()) == [("add", "a"), ("add", "b")]


async def test_removed_handler_hears_nothing_more():
    api = ScriptedApi(listings=[(10, [_obj("a")])], watches=[[("ADDED", _obj("b", 11))]])
    informer = _informer(api)
    seen: list[str] = []
    handle = informer.add_event_handler(on_add=lambda obj: seen.append(obj["metadata"]["name"]))
    informer.remove_event_handler(handle)
    async with running(informer):
        await eventually(lambda: len(informer.indexer) == 2)
    assert seen == []


async def test_resync_redelivers_every_object_as_an_update():
    api = ScriptedApi(listings=[(10, [_obj("a", 5)])])
    informer = _informer(api, resync_period=0.05)
    recorder = Recorder().attach(informer)
    async with running(informer):
        await eventually(lambda: len(recorder.events) >= 3)
    assert recorder.events[:3] == [("add", "a", "5"), ("update", "a", "5"), ("update", "a", "5")]
    old, new = recorder.updates[0]
    assert old is new


async def test_stop_ends_run_but_cancellation_propagates():
    stopped = _informer(ScriptedApi(listings=[(1, [])]))
    task = asyncio.create_task(stopped.run())
    await stopped.wait_for_sync(5)
    stopped.stop()
    assert await asyncio.wait_for(task, 5) is None

    cancelled = _informer(ScriptedApi(listings=[(1, [])]))
    task = asyncio.create_task(cancelled.run())
    await cancelled.wait_for_sync(5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_wait_for_sync_times_out():
    informer = _informer(ScriptedApi())
    task = asyncio.create_task(informer.run())
    assert await informer.wait_for_sync(0.05) is False
    informer.stop()
    await task


# -- Informer against the real apiserver -----------------------------------------------------


def _endpoints(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


async def _compacted_past(endpoints, namespace: str, version: str, timeout: float = 10.0) -> None:
    """Wait until a watch from ``version`` gets 410 (the compactor has run past it)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        try:
            async with contextlib.aclosing(endpoints.watch(namespace, resource_version=version, timeout_seconds=1)) as events:
                async for _ in events:
                    break
        except ApiError as err:
            if is_gone(err):
                return
            raise
        await asyncio.sleep(0.1)
    raise AssertionError(f"resourceVersion {version} was not compacted within {timeout}s")


class CountingClient:
    """A RestClient whose resource API counts list and watch calls, and can hold new watches
    back (``gate``) so that the cluster moves on while the informer is not watching."""

    def __init__(self, client: RestClient):
        self.client = client
        self.list_calls = 0
        self.watched_from: list[str] = []
        self.watch_errors: list[Exception] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.held_at_gate = 0

    def resource(self, resource):
        self.api = self.client.resource(resource)
        return self

    async def list(self, **kwargs):
        self.list_calls += 1
        return await self.api.list(**kwargs)

    async def watch(self, **kwargs):
        self.held_at_gate += 1
        await self.gate.wait()
        self.held_at_gate -= 1
        self.watched_from.append(kwargs["resource_version"])
        try:
            async with contextlib.aclosing(self.api.watch(**kwargs)) as events:
                async for event in events:
                    yield event
        except Exception as exc:
            self.watch_errors.append(exc)
            raise


async def test_initial_sync_then_events_in_order(client, namespace):
    endpoints = client.resource(ENDPOINTS)
    for name in ("a", "b", "c"):
        await endpoints.create(_endpoints(name), namespace)
    informer = Informer(client, ENDPOINTS, namespace=namespace)
    recorder = Recorder().attach(informer)
    async with running(informer):
        assert sorted(recorder.kinds()) == [("add", "a"), ("add", "b"), ("add", "c")]
        assert {object_key(o) for o in informer.indexer.by_index(NAMESPACE_INDEX, namespace)} == {f"{namespace}/{n}" for n in "abc"}
        recorder.events.clear()

        created = await endpoints.create(_endpoints("d"), namespace)
        changed = await endpoints.patch("d", {"metadata": {"labels": {"v": "2"}}}, namespace)
        await endpoints.delete("a", namespace)
        await eventually(lambda: len(recorder.events) == 3, message="three events")
        assert recorder.events[:2] == [("add", "d", created["metadata"]["resourceVersion"]), ("update", "d", changed["metadata"]["resourceVersion"])]
        assert recorder.events[2][:2] == ("delete", "a")
        assert sorted(informer.indexer.keys()) == sorted(f"{namespace}/{n}" for n in "bcd")
        assert informer.indexer.get("d", namespace)["metadata"]["labels"] == {"v": "2"}


async def test_no_update_callback_for_no_op_writes(client, namespace):
    endpoints = client.resource(ENDPOINTS)
    await endpoints.create(_endpoints("e", app="x"), namespace)
    informer = Informer(client, ENDPOINTS, namespace=namespace)
    recorder = Recorder().attach(informer)
    async with running(informer):
        unchanged = await endpoints.patch("e", {"metadata": {"labels": {"app": "x"}}}, namespace)
        changed = await endpoints.patch("e", {"metadata": {"labels": {"app": "y"}}}, namespace)
        await eventually(lambda: len(recorder.events) == 2, message="the real update")
        await asyncio.sleep(0.2)
    assert recorder.events == [("add", "e", unchanged["metadata"]["resourceVersion"]), ("update", "e", changed["metadata"]["resourceVersion"])]


async def test_label_selector_filters_and_tracks_objects_moving_in_and_out(client, namespace):
    endpoints = client.resource(ENDPOINTS)
    await endpoints.create(_endpoints("in", app="a"), namespace)
    await endpoints.create(_endpoints("out", app="b"), namespace)
    informer = Informer(client, ENDPOINTS, namespace=namespace, label_selector="app=a")
    recorder = Recorder().attach(informer)
    async with running(informer):
        assert recorder.kinds() == [("add", "in")]
        await endpoints.patch("in", {"metadata": {"labels": {"app": "b"}}}, namespace)
        await endpoints.patch("out", {"metadata": {"labels": {"app": "a"}}}, namespace)
        await endpoints.create(_endpoints("other", app="c"), namespace)
        await eventually(lambda: len(recorder.events) == 3, message="leave and enter")
        await asyncio.sleep(0.2)
    assert recorder.kinds() == [("add", "in"), ("delete", "in"), ("add", "out")]
    assert informer.indexer.keys() == [f"{namespace}/out"]


async def test_rewatches_from_the_last_version_when_the_server_ends_the_watch(client, namespace):
    counting = CountingClient(client)
    informer = Informer(counting, ENDPOINTS, namespace=namespace, watch_timeout_range=(2, 2))
    recorder = Recorder().attach(informer)
    async with running(informer):
        created = await client.resource(ENDPOINTS).create(_endpoints("before"), namespace)
        await eventually(lambda: len(counting.watched_from) >= 3, timeout=15, message="two re-watches")
        await client.resource(ENDPOINTS).create(_endpoints("after"), namespace)
        await eventually(lambda: len(recorder.events) == 2, message="event after re-watch")
    assert counting.list_calls == 1 and counting.watch_errors == []
    assert int(counting.watched_from[1]) >= int(created["metadata"]["resourceVersion"])
    assert recorder.kinds() == [("add", "before"), ("add", "after")]


async def test_relists_after_410_and_delivers_what_changed_meanwhile(fresh_apiserver):
    server = fresh_apiserver("--etcd-compaction-interval=0.5", "--compaction-retain-revisions=5")
    async with cluster.api_client(server, DEFAULT_FIELD_MANAGER) as client:
        namespace = await cluster.new_namespace(client)
        endpoints = client.resource(ENDPOINTS)
        for name in ("keep", "change", "remove"):
            await endpoints.create(_endpoints(name, v="1"), namespace)
        counting = CountingClient(client)
        informer = Informer(counting, ENDPOINTS, namespace=namespace, watch_timeout_range=(1, 1), backoff=Backoff(**FAST_BACKOFF))
        recorder = Recorder().attach(informer)
        async with running(informer):
            await eventually(lambda: len(counting.watched_from) >= 1, message="the first watch")
            counting.gate.clear()  # the next re-watch waits, holding its soon-old version
            await eventually(lambda: counting.held_at_gate == 1, message="the open watch to end")
            held_version = informer.last_sync_resource_version
            recorder.events.clear()
            await endpoints.patch("change", {"metadata": {"labels": {"v": "2"}}}, namespace)
            await endpoints.delete("remove", namespace)
            await endpoints.create(_endpoints("new"), namespace)
            for i in range(8):  # born and gone while nobody watched: never reported
                await endpoints.create(_endpoints(f"tmp{i}"), namespace)
                await endpoints.delete(f"tmp{i}", namespace)
            await _compacted_past(endpoints, namespace, held_version)
            counting.gate.set()
            await eventually(lambda: len(recorder.events) == 3, message="relist differences")
            await asyncio.sleep(0.3)
        assert any(is_gone(e) for e in counting.watch_errors)
        assert counting.list_calls == 2
        assert sorted(recorder.kinds()) == [("add", "new"), ("delete", "remove"), ("update", "change")]
        assert sorted(informer.indexer.keys()) == sorted(f"{namespace}/{n}" for n in ("keep", "change", "new"))
        removed = next(e for e in recorder.events if e[0] == "delete")
        assert removed[1] == "remove"


async def test_recovers_after_the_server_restarts(fresh_apiserver, tmp_path):
    data_dir = tmp_path / "data"
    server = fresh_apiserver(data_dir=data_dir)
    port = int(server.url.rsplit(":", 1)[1])
    config = load_kubeconfig(server.kubeconfig)
    async with RestClient(config, timeout=5) as client:
        namespace = await cluster.new_namespace(client)
        await client.resource(ENDPOINTS).create(_endpoints("a"), namespace)
        informer = Informer(client, ENDPOINTS, namespace=namespace, backoff=Backoff(initial=0.1, cap=0.5))
        recorder = Recorder().attach(informer)
        async with running(informer):
            assert recorder.kinds() == [("add", "a")]
            await asyncio.to_thread(server.stop)
            await asyncio.sleep(1.0)  # the informer notices and retries against a closed port
            restarted = await asyncio.to_thread(fresh_apiserver, data_dir=data_dir, port=port)
            assert restarted.url == server.url
            async with RestClient(config) as writer:
                await writer.resource(ENDPOINTS).create(_endpoints("b"), namespace)
                await writer.resource(ENDPOINTS).delete("a", namespace)
            await eventually(lambda: len(recorder.events) == 3, timeout=20, message="recovery")
            assert informer.indexer.keys() == [f"{namespace}/b"]
    assert recorder.kinds() == [("add", "a"), ("add", "b"), ("delete", "a")]


async def test_a_worker_woken_by_an_event_runs_before_the_rest_of_a_burst_is_applied():
    """Fifty events in one read of the stream (the scripted watch yields them without a pause):
    the worker the first one wakes runs while the others are still to come, not after all 50."""
    api = ScriptedApi(listings=[(10, [])], watches=[[("ADDED", _obj(f"p{i}", 11 + i)) for i in range(50)]])
    informer = _informer(api)
    woken = asyncio.Event()
    informer.add_event_handler(lambda obj: woken.set(), None, None)
    cached_when_woken: list[int] = []

    async def worker() -> None:
        await woken.wait()
        cached_when_woken.append(len(informer.indexer))

    task = asyncio.create_task(worker())
    async with running(informer):
        await eventually(lambda: len(informer.indexer) == 50)
    await task
    assert cached_when_woken[0] <= 2
