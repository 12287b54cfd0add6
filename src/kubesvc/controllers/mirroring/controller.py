"""The EndpointSlice mirroring controller (kube-controller-manager's ``endpointslicemirroring``,
``pkg/controller/endpointslicemirroring/endpointslicemirroring_controller.go``): the thin shell
around ``reconciler.reconcile``.

The work queue holds Endpoints keys (``namespace/name``; a Service and its Endpoints share the
name). Handlers only enqueue:

* Endpoints added or deleted: if it is mirrorable (no skip-mirror=true label, no leader
  annotation); updated: if the old or the new version is, so that adding the label still
  triggers the cleanup.
* Service added or deleted without a selector; updated when it gains or loses its selector
  (that decides whether its Endpoints is mirrored at all).
* EndpointSlice events for slices managed by this controller that the controller did not write
  itself (``EndpointSliceTracker``: a newer generation than our last write, a deletion we did
  not make), a change of the managed-by label, or of the service-name label (both the old and
  the new Endpoints are synced). These are delayed by
  ``--mirroring-endpointslice-updates-batch-period`` (default 0); nothing else is.

A sync reads caches only. If the Endpoints should not be mirrored (see
``reconciler.skip_reason``), every mirrored slice of that name is deleted. Otherwise, if the
slice cache is older than our own writes, the sync is retried later (creating now would
duplicate slices); else the plan's Warning Events (``InvalidIPAddress``,
``TooManyAddressesToMirror``) are recorded on the Endpoints and its creates, updates and deletes
are performed in that order. Failed syncs are retried with per-key backoff from 1 s doubling to
100 s, 15 times at most.
"""

from __future__ import annotations

import logging

from kubesvc.client.cache import Indexer, split_key
from kubesvc.client.record import EventRecorder
from kubesvc.client.rest import ENDPOINTSLICES, ApiError, RestClient, is_namespace_terminating
from kubesvc.client.workqueue import ItemExponentialBackoff, WorkQueue
from kubesvc.controllers.endpointslice.tracker import EndpointSliceTracker
from kubesvc.controllers.endpointslice.util import LABEL_MANAGED_BY, LABEL_SERVICE_NAME
from kubesvc.controllers.informers import SLICE_SERVICE_INDEX, SharedInformers
from kubesvc.controllers.mirroring.metrics import EndpointSliceMirroringMetrics
from kubesvc.controllers.mirroring.reconciler import (
    CONTROLLER_NAME,
    DEFAULT_MAX_ENDPOINTS_PER_SUBSET,
    ENDPOINTS_API_VERSION,
    ENDPOINTS_KIND,
    Plan,
    has_selector,
    reconcile,
    should_mirror,
    skip_reason,
)
from kubesvc.controllers.runtime import run_workers
from kubesvc.util.clock import Clock, RealClock

log = logging.getLogger("kubesvc.controllers.mirroring")

EVENT_COMPONENT = "endpoint-slice-mirroring-controller"
MAX_RETRIES = 15
DEFAULT_SYNC_BACKOFF = 1.0  # seconds; upstream's queue backs off 1 s doubling ...
MAX_SYNC_BACKOFF = 100.0  # ... up to 100 s


class StaleInformerCache(Exception):
    """The slice cache has not caught up with our own writes yet."""


def endpoints_key(obj: dict) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def managed_by_controller(slice_: dict) -> bool:
    return (slice_["metadata"].get("labels") or {}).get(LABEL_MANAGED_BY) == CONTROLLER_NAME


def endpoints_key_for_slice(slice_: dict) -> str | None:
    """``endpointsControllerKey``: the Endpoints a slice belongs to, by its service-name label."""
    name = (slice_["metadata"].get("labels") or {}).get(LABEL_SERVICE_NAME)
    if not name:
        return None
    return f"{slice_['metadata'].get('namespace', '')}/{name}"


def mirrored_slices(indexer: Indexer, namespace: str, name: str) -> list[dict]:
    """``endpointSlicesMirroredForService``: the cached slices labelled service-name=<name> and
    managed by this controller in ``namespace``, oldest first (the first of a key is kept)."""
    slices = [s for s in indexer.by_index(SLICE_SERVICE_INDEX, f"{namespace}/{name}") if managed_by_controller(s)]
    return sorted(slices, key=lambda s: (s["metadata"].get("creationTimestamp") or "", s["metadata"].get("name", "")))


class EndpointSliceMirroringController:
    def __init__(self, client: RestClient, informers: SharedInformers, *,
                 max_endpoints_per_subset: int = DEFAULT_MAX_ENDPOINTS_PER_SUBSET, batch_period: float = 0.0,
                 workers: int = 5, metrics: EndpointSliceMirroringMetrics | None = None,
                 recorder: EventRecorder | None = None, clock: Clock | None = None):
        self.max_endpoints_per_subset = max_endpoints_per_subset
        self.batch_period = batch_period
        self.workers = workers
        self.clock = clock or RealClock()
        self.metrics = metrics or EndpointSliceMirroringMetrics(max_endpoints_per_subset)
        self.metrics.gauges.max_per_slice = max_endpoints_per_subset  # upstream: metrics.NewCache(max)
        self.recorder = recorder or EventRecorder(client, EVENT_COMPONENT, self.clock)
        self.queue = WorkQueue(ItemExponentialBackoff(DEFAULT_SYNC_BACKOFF, MAX_SYNC_BACKOFF), clock=self.clock)
        self.tracker = EndpointSliceTracker()
        self._slices_api = client.resource(ENDPOINTSLICES)
        self._endpoints = informers.endpoints
        self._services = informers.services
        self._slices = informers.endpoint_slices
        self._endpoints.add_event_handler(self._on_endpoints_add, self._on_endpoints_update, self._on_endpoints_delete)
        self._services.add_event_handler(self._on_service_add, self._on_service_update, self._on_service_delete)
        self._slices.add_event_handler(self._on_slice_add, self._on_slice_update, self._on_slice_delete)

    async def run(self) -> None:
        try:
            await run_workers("endpointslicemirroring", self.queue, self.sync_endpoints, self.workers, MAX_RETRIES)
        finally:
            self.queue.shutdown()

    # ---- event handlers: record and return -------------------------------------------------

    def _on_endpoints_add(self, endpoints: dict) -> None:
        if should_mirror(endpoints):
            self.queue.add(endpoints_key(endpoints))

    def _on_endpoints_update(self, old: dict, new: dict) -> None:
        if should_mirror(old) or should_mirror(new):
            self.queue.add(endpoints_key(new))

    def _on_endpoints_delete(self, endpoints: dict) -> None:
        if should_mirror(endpoints):
            self.queue.add(endpoints_key(endpoints))

    def _on_service_add(self, service: dict) -> None:
        if not has_selector(service):
            self.queue.add(endpoints_key(service))

    def _on_service_update(self, old: dict, new: dict) -> None:
        if has_selector(old) != has_selector(new):
            self.queue.add(endpoints_key(new))

    def _on_service_delete(self, service: dict) -> None:
        if not has_selector(service):
            self.queue.add(endpoints_key(service))

    def _enqueue_for_slice(self, slice_: dict) -> None:
        key = endpoints_key_for_slice(slice_)
        if key is not None:
            self.queue.add_after(key, self.batch_period)

    def _on_slice_add(self, slice_: dict) -> None:
        if managed_by_controller(slice_) and self.tracker.should_sync(slice_):
            self._enqueue_for_slice(slice_)

    def _on_slice_update(self, old: dict, new: dict) -> None:
        # The generation does not move when only labels change; a user may relabel the
        # service name: then both Endpoints need a look.
        if (old["metadata"].get("labels") or {}).get(LABEL_SERVICE_NAME) != (new["metadata"].get("labels") or {}).get(LABEL_SERVICE_NAME):
            self._enqueue_for_slice(new)
            self._enqueue_for_slice(old)
            return
        if managed_by_controller(old) != managed_by_controller(new) or (managed_by_controller(new) and self.tracker.should_sync(new)):
            self._enqueue_for_slice(new)

    def _on_slice_delete(self, slice_: dict) -> None:
        if managed_by_controller(slice_) and self.tracker.has(slice_) and not self.tracker.handle_deletion(slice_):
            self._enqueue_for_slice(slice_)

    # ---- the sync ----------------------------------------------------------------------------

    def mirrored_slices(self, namespace: str, name: str) -> list[dict]:
        return mirrored_slices(self._slices.indexer, namespace, name)

    async def sync_endpoints(self, key: str) -> None:
        started = self.clock.monotonic()
        try:
            await self._sync(key)
        finally:
            self.metrics.sync_duration.observe(max(0.0, self.clock.monotonic() - started))

    async def _sync(self, key: str) -> None:
        namespace, name = split_key(key)
        endpoints = self._endpoints.indexer.get_by_key(key)
        service = self._services.indexer.get_by_key(key)
        slices = self.mirrored_slices(namespace, name)
        reason = skip_reason(endpoints, service)
        if reason is not None:
            log.debug("%s: %s, cleaning up any mirrored EndpointSlices", key, reason)
            self.tracker.delete_service(key)
            await self._delete_mirrored(namespace, name, slices)
            return
        if self.tracker.stale_slices(key, slices):
            raise StaleInformerCache("EndpointSlice informer cache is out of date")
        plan = reconcile(endpoints, service, slices, max_endpoints_per_subset=self.max_endpoints_per_subset)
        self._report(key, endpoints, plan)
        await self._finalize(endpoints, plan)

    def _report(self, key: str, endpoints: dict, plan: Plan) -> None:
        if plan.events:
            involved = {**endpoints, "apiVersion": ENDPOINTS_API_VERSION, "kind": ENDPOINTS_KIND}
            for event in plan.events:
                log.info("%s: %s", key, event.message)
                self.recorder.event(involved, event.type, event.reason, event.message)
        self.metrics.observe_reconcile(key, plan)

    async def _finalize(self, endpoints: dict, plan: Plan) -> None:
        """Creates, then updates, then deletes; the first failure stops the rest (the retried
        sync recomputes them)."""
        meta = endpoints["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        for slice_ in plan.creates:
            try:
                created = await self._slices_api.create(slice_)
            except ApiError as exc:
                if is_namespace_terminating(exc):
                    return  # creates will keep failing; drop the item
                raise RuntimeError(f"failed to create EndpointSlice for Endpoints {namespace}/{name}: {exc}") from exc
            self.tracker.update(created)
            self.metrics.changes.labels("create").inc()
        for slice_ in plan.updates:
            try:
                updated = await self._slices_api.update(slice_)
            except ApiError as exc:
                raise RuntimeError(f"failed to update {slice_['metadata']['name']} EndpointSlice for Endpoints {namespace}/{name}: {exc}") from exc
            self.tracker.update(updated)
            self.metrics.changes.labels("update").inc()
        for slice_ in plan.deletes:
            try:
                await self._slices_api.delete(slice_["metadata"]["name"], namespace)
            except ApiError as exc:
                if exc.status != 404:
                    raise RuntimeError(f"failed to delete {slice_['metadata']['name']} EndpointSlice for Endpoints {namespace}/{name}: {exc}") from exc
            self.tracker.expect_deletion(slice_)
            self.metrics.changes.labels("delete").inc()

    async def _delete_mirrored(self, namespace: str, name: str, slices: list[dict]) -> None:
        """``deleteEndpoints``: forget the Endpoints' metrics and delete every mirrored slice,
        trying all of them before reporting failures."""
        self.metrics.delete_endpoints(f"{namespace}/{name}")
        errors = []
        for slice_ in slices:
            try:
                await self._slices_api.delete(slice_["metadata"]["name"], namespace)
            except ApiError as exc:
                if exc.status != 404:  # already gone is what we want
                    errors.append(exc)
        if errors:
            raise RuntimeError(f"error(s) deleting {len(errors)}/{len(slices)} EndpointSlices for {namespace}/{name} Endpoints, including: {errors[0]}")
