"""When the EndpointSlice controller looks at a Service after an event (upstream
``endpointslice_controller.go``: ``addPod``/``updatePod`` queue after
``--endpointslice-updates-batch-period``, default 0, i.e. at once; Service events at once;
EndpointSlice changes by someone else after ``endpointSliceChangeMinSyncDelay``, 1 s; a sync
that found the slice cache behind our own writes after its back-off, or, ours only, as soon as
a slice of that Service changes in the cache).
Handlers are called directly and the work queue is read on a fake clock, so "at once" means
with no time passed at all.
"""

from __future__ import annotations

import pytest

from kubesvc.controllers.endpointslice.controller import EndpointSliceController, StaleInformerCache
from kubesvc.controllers.endpointslice.reconciler import CONTROLLER_NAME
from kubesvc.controllers.informers import SharedInformers
from kubesvc.util.clock import FakeClock
from tests.support import builders
from tests.support.workqueue import queued


class _NoAPI:
    """The handlers never talk to the API; a sync's slice writes are recorded."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str]] = []

    def resource(self, resource):
        return self

    async def create(self, obj: dict) -> dict:
        self.writes.append(("create", obj["metadata"].get("generateName", "")))
        return {**obj, "metadata": {**obj["metadata"], "name": "web-new", "uid": "u2", "generation": 1}}

    async def update(self, obj: dict) -> dict:
        self.writes.append(("update", obj["metadata"]["name"]))
        return {**obj, "metadata": {**obj["metadata"], "generation": obj["metadata"]["generation"] + 1}}

    async def delete(self, name: str, namespace: str | None = None) -> None:
        self.writes.append(("delete", name))


def controller(**options) -> tuple[EndpointSliceController, FakeClock]:
    clock = FakeClock()
    client = _NoAPI()
    c = EndpointSliceController(client, SharedInformers(client), clock=clock, **options)
    c.api = client
    c._services.indexer.upsert(builders.service("ns", "web", selector={"app": "web"}))
    return c, clock


def web_pod(ready: bool, rv: str) -> dict:
    return builders.pod("ns", "web-1", ips=["10.244.0.5"], ready=ready, labels={"app": "web"}, resourceVersion=rv)


async def test_a_pod_turning_ready_queues_its_service_at_once():
    c, _ = controller()
    c._pod_events.on_update(web_pod(False, "1"), web_pod(True, "2"))
    assert await queued(c) == {"ns/web"}  # no time has passed


async def test_with_a_batch_period_pod_changes_wait_for_it_and_coalesce():
    c, clock = controller(batch_period=1.0)
    c._pod_events.on_update(web_pod(False, "1"), web_pod(True, "2"))
    clock.advance(0.5)
    c._pod_events.on_update(web_pod(True, "2"), web_pod(False, "3"))  # does not push the deadline out
    assert await queued(c) == set()
    clock.advance(0.499)
    assert await queued(c) == set()
    clock.advance(0.001)
    assert await queued(c) == {"ns/web"}


async def test_a_service_change_queues_at_once_even_with_a_batch_period():
    c, _ = controller(batch_period=1.0)
    c._enqueue_service(builders.service("ns", "web", selector={"app": "web"}))
    assert await queued(c) == {"ns/web"}


async def test_a_slice_changed_by_someone_else_is_looked_at_after_a_second():
    c, clock = controller()
    slice_ = {"metadata": {"name": "web-abc", "namespace": "ns", "uid": "u1", "generation": 1,
                           "labels": {"kubernetes.io/service-name": "web", "endpointslice.kubernetes.io/managed-by": CONTROLLER_NAME}}}
    c._on_slice_add(slice_)
    clock.advance(0.999)
    assert await queued(c) == set()
    clock.advance(0.001)
    assert await queued(c) == {"ns/web"}


def our_slice(generation: int) -> dict:
    return {"metadata": {"name": "web-abc", "namespace": "ns", "uid": "u1", "generation": generation, "resourceVersion": str(generation),
                         "labels": {"kubernetes.io/service-name": "web", "endpointslice.kubernetes.io/managed-by": CONTROLLER_NAME}},
            "addressType": "IPv4", "endpoints": [], "ports": []}


async def stale_sync(c: EndpointSliceController) -> None:
    """A sync that finds the slice cache behind our own last write (generation 2 written, 1
    cached), then the worker's error path: re-queued after the back-off (1 s)."""
    c._slices.indexer.upsert(our_slice(1))
    c.tracker.update(our_slice(2))
    with pytest.raises(StaleInformerCache):
        await c.sync_service("ns/web")
    c.queue.add_rate_limited("ns/web")


async def test_a_sync_that_found_the_cache_stale_runs_again_once_our_write_arrives_not_after_its_back_off():
    c, clock = controller()
    await stale_sync(c)
    assert await queued(c) == set()
    c._slices.indexer.upsert(our_slice(2))
    c._on_slice_update(our_slice(1), our_slice(2))  # our write echoing back: no time has passed
    assert await queued(c) == {"ns/web"}
    await c.sync_service("ns/web")  # the cache has caught up: the sync goes through to the API
    assert c.api.writes


async def test_without_a_slice_change_a_stale_sync_waits_out_its_back_off():
    c, clock = controller()
    await stale_sync(c)
    clock.advance(0.999)
    assert await queued(c) == set()
    clock.advance(0.001)
    assert await queued(c) == {"ns/web"}


async def test_a_deleted_service_no_longer_waits_for_its_slices():
    """Its slices go with it (garbage collection), so no slice event may ever come to clear it:
    the deletion itself forgets that its sync found the cache stale."""
    c, _ = controller()
    await stale_sync(c)
    assert c._behind_cache == {"ns/web"}
    service = c._services.indexer.remove("ns/web")
    c._on_service_delete(service)
    assert c._behind_cache == set()
    assert await queued(c) == {"ns/web"}  # its deletion is synced at once, not after the back-off
    await c.sync_service("ns/web")
    assert c.api.writes == []


async def test_each_sync_logs_how_long_it_took_at_v4(caplog):
    """Upstream's ``V(4)`` "Finished syncing service endpoint slices" with the key and the
    sync's elapsed time (Go's duration text), a failed sync included: with ``-v 4`` the time a
    Service spent in its sync (cache reads, plan, slice writes) is in the log."""
    c, clock = controller()
    c._nodes.indexer.upsert(builders.node("n1"))
    c._pods.indexer.upsert(builders.pod("ns", "web-1", ips=["10.244.0.5"], node="n1", labels={"app": "web"}, resourceVersion="2"))
    create = c.api.create

    async def slow_create(obj: dict) -> dict:  # the first create takes the apiserver 250 ms
        if not c.api.writes:
            clock.advance(0.25)
        return await create(obj)

    c.api.create = slow_create
    with caplog.at_level("DEBUG", logger="kubesvc.controllers.endpointslice"):
        await c.sync_service("ns/web")
        assert c.api.writes
        with pytest.raises(StaleInformerCache):  # the slice we created is not in the cache yet
            await c.sync_service("ns/web")
    assert [r.getMessage() for r in caplog.records if r.name == "kubesvc.controllers.endpointslice"] == [
        "Finished syncing service endpoint slices key=ns/web elapsedTime=250ms",
        "Finished syncing service endpoint slices key=ns/web elapsedTime=0s"]
