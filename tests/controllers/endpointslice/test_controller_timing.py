"""When the EndpointSlice controller looks at a Service after an event (upstream
``endpointslice_controller.go``: ``addPod``/``updatePod`` queue after
``--endpointslice-updates-batch-period``, default 0, i.e. at once; Service events at once;
EndpointSlice changes by someone else after ``endpointSliceChangeMinSyncDelay``, 1 s).
Handlers are called directly and the work queue is read on a fake clock, so "at once" means
with no time passed at all.
"""

from __future__ import annotations

from kubesvc.controllers.endpointslice.controller import EndpointSliceController
from kubesvc.controllers.endpointslice.reconciler import CONTROLLER_NAME
from kubesvc.controllers.informers import SharedInformers
from kubesvc.util.clock import FakeClock
from tests.support import builders


class _NoAPI:
    """The handlers never talk to the API."""

    def resource(self, resource):
        return self


def controller(**options) -> tuple[EndpointSliceController, FakeClock]:
    clock = FakeClock()
    client = _NoAPI()
    c = EndpointSliceController(client, SharedInformers(client), clock=clock, **options)
    c._services.indexer.upsert(builders.service("ns", "web", selector={"app": "web"}))
    return c, clock


async def queued(c: EndpointSliceController) -> set[str]:
    """The keys a worker may take now (taken and marked done)."""
    keys = set()
    while len(c.queue):
        key = await c.queue.get()
        keys.add(key)
        c.queue.done(key)
    return keys


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
