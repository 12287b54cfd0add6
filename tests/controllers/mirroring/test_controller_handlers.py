"""Which events make the mirroring controller look at an Endpoints, and when (upstream's
``onEndpointsAdd/Update/Delete``, ``onServiceAdd/Update/Delete``, ``onEndpointSliceAdd/Update/
Delete``): handlers are called directly and the work queue is read with a fake clock.

Only EndpointSlice events wait for ``--mirroring-endpointslice-updates-batch-period``.
"""

from __future__ import annotations

import pytest

from kubesvc.controllers.informers import SharedInformers
from kubesvc.controllers.mirroring.controller import EndpointSliceMirroringController
from kubesvc.controllers.mirroring.reconciler import CONTROLLER_NAME
from kubesvc.util.clock import FakeClock
from tests.support import builders
from tests.support.workqueue import queued

BATCH = 5.0
SERVICE_NAME = "kubernetes.io/service-name"
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"


class _NoAPI:
    """The handlers never talk to the API; anything that tries fails loudly."""

    def resource(self, resource):
        return self


def controller() -> tuple[EndpointSliceMirroringController, FakeClock]:
    clock = FakeClock()
    client = _NoAPI()
    return EndpointSliceMirroringController(client, SharedInformers(client), batch_period=BATCH, clock=clock), clock


def endpoints(rv: str = "1", labels: dict | None = None, annotations: dict | None = None) -> dict:
    return {"metadata": {"name": "db", "namespace": "ns", "resourceVersion": rv, "labels": labels or {}, "annotations": annotations or {}}}


def service(selector: dict | None = None, labels: dict | None = None) -> dict:
    return builders.service("ns", "db", metadata={"labels": labels or {}}, **({"selector": selector} if selector is not None else {}))


def eps(name: str = "db-abc", service_name: str | None = "db", managed_by: str = CONTROLLER_NAME, generation: int = 1, uid: str = "u1") -> dict:
    labels = {MANAGED_BY: managed_by}
    if service_name is not None:
        labels[SERVICE_NAME] = service_name
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid, "generation": generation, "labels": labels}}


SKIP = {"endpointslice.kubernetes.io/skip-mirror": "true"}
LEADER = {"control-plane.alpha.kubernetes.io/leader": "{}"}

IMMEDIATE_CASES = {
    "Endpoints added": (lambda c: c._on_endpoints_add(endpoints()), {"ns/db"}),
    "Endpoints added with skip-mirror=true": (lambda c: c._on_endpoints_add(endpoints(labels=SKIP)), set()),
    "Endpoints added with skip-mirror=false": (lambda c: c._on_endpoints_add(endpoints(labels={"endpointslice.kubernetes.io/skip-mirror": "false"})), {"ns/db"}),
    "Endpoints added with the leader annotation": (lambda c: c._on_endpoints_add(endpoints(annotations=LEADER)), set()),
    "Endpoints updated": (lambda c: c._on_endpoints_update(endpoints("1"), endpoints("2")), {"ns/db"}),
    "Endpoints gains skip-mirror (cleanup)": (lambda c: c._on_endpoints_update(endpoints("1"), endpoints("2", labels=SKIP)), {"ns/db"}),
    "Endpoints loses skip-mirror": (lambda c: c._on_endpoints_update(endpoints("1", labels=SKIP), endpoints("2")), {"ns/db"}),
    "Endpoints updated, skip-mirror before and after": (lambda c: c._on_endpoints_update(endpoints("1", labels=SKIP), endpoints("2", labels=SKIP)), set()),
    "Endpoints deleted": (lambda c: c._on_endpoints_delete(endpoints()), {"ns/db"}),
    "Endpoints with skip-mirror deleted": (lambda c: c._on_endpoints_delete(endpoints(labels=SKIP)), set()),
    "Service without selector added": (lambda c: c._on_service_add(service()), {"ns/db"}),
    "Service with selector added": (lambda c: c._on_service_add(service({"app": "db"})), set()),
    "Service gains a selector": (lambda c: c._on_service_update(service(), service({"app": "db"})), {"ns/db"}),
    "Service loses its selector": (lambda c: c._on_service_update(service({"app": "db"}), service()), {"ns/db"}),
    "Service changes, still no selector": (lambda c: c._on_service_update(service(), service(labels={"a": "b"})), set()),
    "Service selector changes": (lambda c: c._on_service_update(service({"app": "a"}), service({"app": "b"})), set()),
    "Service without selector deleted": (lambda c: c._on_service_delete(service()), {"ns/db"}),
    "Service with selector deleted": (lambda c: c._on_service_delete(service({"app": "db"})), set()),
}


@pytest.mark.parametrize("handle,expected", list(IMMEDIATE_CASES.values()), ids=list(IMMEDIATE_CASES))
async def test_endpoints_and_service_events_enqueue_at_once(handle, expected):
    c, _ = controller()
    handle(c)
    assert await queued(c) == expected


def _tracked(c: EndpointSliceMirroringController, slice_: dict) -> None:
    c.tracker.update(slice_)


def _expected_deletion(c: EndpointSliceMirroringController, slice_: dict) -> None:
    c.tracker.expect_deletion(slice_)


SLICE_CASES = {
    "slice added by someone else": (None, lambda c: c._on_slice_add(eps()), {"ns/db"}),
    "slice added, not managed by us": (None, lambda c: c._on_slice_add(eps(managed_by="someone")), set()),
    "slice added without service-name label": (None, lambda c: c._on_slice_add(eps(service_name=None)), set()),
    "our own create echoing back": (lambda c: _tracked(c, eps()), lambda c: c._on_slice_add(eps()), set()),
    "slice changed by someone else (newer generation)": (
        lambda c: _tracked(c, eps()), lambda c: c._on_slice_update(eps(), eps(generation=2)), {"ns/db"}),
    "slice taken over by another controller": (
        lambda c: _tracked(c, eps()), lambda c: c._on_slice_update(eps(), eps(managed_by="someone")), {"ns/db"}),
    "slice relabelled to another service": (
        lambda c: _tracked(c, eps()), lambda c: c._on_slice_update(eps(), eps(service_name="other")), {"ns/db", "ns/other"}),
    "slice deleted by someone else": (lambda c: _tracked(c, eps()), lambda c: c._on_slice_delete(eps()), {"ns/db"}),
    "our own delete echoing back": (lambda c: _expected_deletion(c, eps()), lambda c: c._on_slice_delete(eps()), set()),
    "untracked slice deleted": (None, lambda c: c._on_slice_delete(eps()), set()),
}


@pytest.mark.parametrize("setup,handle,expected", list(SLICE_CASES.values()), ids=list(SLICE_CASES))
async def test_slice_events_wait_for_the_batch_period(setup, handle, expected):
    c, clock = controller()
    if setup:
        setup(c)
    handle(c)
    assert await queued(c) == set()
    clock.advance(BATCH - 0.1)
    assert await queued(c) == set()
    clock.advance(0.1)
    assert await queued(c) == expected
