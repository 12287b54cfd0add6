"""The EndpointSlice controller (kube-controller-manager's ``endpointslice`` controller,
``pkg/controller/endpointslice/endpointslice_controller.go``): the thin shell around
``reconciler.reconcile``.

Events only enqueue a Service key; a worker syncs it:

* Service added, changed or deleted: enqueue at once.
* Pod added, changed (readiness, IPs, deletion, labels...) or deleted: enqueue every Service
  it belongs (or belonged) to after ``--endpointslice-updates-batch-period`` (default 0), so a
  burst of Pod changes becomes one sync per Service.
* Node added, deleted or re-zoned: the Services of the Pods on it (zones and "Node not found"
  are read from Nodes).
* EndpointSlice changes by someone else (a generation we did not write, a deletion we did not
  make, a change of the managed-by label): resync after at least 1 s.

A sync reads only caches: the Service, its Pods (selector in its namespace), its slices
(service-name label, managed by this controller, not being deleted). If the slice cache is
older than our own last writes (``tracker``), the sync is retried later instead of creating
duplicates: upstream retries it after the error back-off only (1 s, doubling); here it is also
retried as soon as one of the Service's slices changes in the cache, which is what it waits
for (under load the Pod watch often delivers a Ready change before the slice watch delivers
our write for the same Service, and a blind second was then added to Ready -> reachable).
It then performs the plan: creates (not while the Service is being deleted, and
not in a terminating namespace), updates, deletes, each stamped with the trigger time.
"""

from __future__ import annotations

import logging

from kubesvc.client.cache import split_key
from kubesvc.client.record import EventRecorder
from kubesvc.client.rest import ENDPOINTSLICES, ApiError, RestClient, is_namespace_terminating
from kubesvc.client.workqueue import ItemExponentialBackoff, WorkQueue
from kubesvc.controllers.endpointslice.metrics import EndpointSliceMetrics
from kubesvc.controllers.endpointslice import topologycache, trafficdist
from kubesvc.controllers.endpointslice.reconciler import CONTROLLER_NAME, Plan, Topology, reconcile
from kubesvc.controllers.endpointslice.tracker import EndpointSliceTracker
from kubesvc.controllers.endpointslice.triggertime import TriggerTimeTracker
from kubesvc.controllers.endpointslice.util import (
    LABEL_MANAGED_BY,
    LABEL_SERVICE_NAME,
    LABEL_TOPOLOGY_ZONE,
    is_terminating,
    selector_matches,
    selects,
    set_trigger_time,
    topology_hints_annotation_enabled,
)
from kubesvc.controllers.informers import POD_NODE_INDEX, SLICE_SERVICE_INDEX, ServicesOfPods, SharedInformers
from kubesvc.controllers.runtime import run_workers
from kubesvc.util import golang
from kubesvc.util.clock import Clock, RealClock

log = logging.getLogger("kubesvc.controllers.endpointslice")

ENDPOINT_SLICE_CHANGE_MIN_SYNC_DELAY = 1.0  # seconds (endpointSliceChangeMinSyncDelay)
MAX_RETRIES = 15
DEFAULT_MAX_ENDPOINTS_PER_SLICE = 100


class StaleInformerCache(Exception):
    """The slice cache has not caught up with our own writes yet."""


class SliceWriteFailed(Exception):
    """A slice write (or a Pod's missing Node) failed; the sync is retried."""


class EndpointSliceController:
    def __init__(self, client: RestClient, informers: SharedInformers, *, max_endpoints_per_slice: int = DEFAULT_MAX_ENDPOINTS_PER_SLICE,
                 batch_period: float = 0.0, workers: int = 5, metrics: EndpointSliceMetrics | None = None,
                 recorder: EventRecorder | None = None, clock: Clock | None = None, prefer_same_traffic_distribution: bool = True):
        self.max_endpoints_per_slice = max_endpoints_per_slice
        self.prefer_same_traffic_distribution = prefer_same_traffic_distribution  # the PreferSameTrafficDistribution gate
        self._hints_populated: set[str] = set()  # Services whose Auto hints stand (upstream's hintsPopulatedByService)
        self.batch_period = batch_period
        self.workers = workers
        self.clock = clock or RealClock()
        self.metrics = metrics or EndpointSliceMetrics(max_endpoints_per_slice)
        self.recorder = recorder or EventRecorder(client, "endpoint-slice-controller", self.clock)
        # upstream: defaultSyncBackOff 1 s doubling to maxSyncBackOff 1000 s per Service
        self.queue = WorkQueue(ItemExponentialBackoff(1.0, 1000.0), clock=self.clock)
        self.tracker = EndpointSliceTracker()
        self._behind_cache: set[str] = set()  # Services whose last sync found the slice cache stale
        self.trigger_times = TriggerTimeTracker()
        self._slices_api = client.resource(ENDPOINTSLICES)
        self._services = informers.services
        self._pods = informers.pods
        self._nodes = informers.nodes
        self._slices = informers.endpoint_slices
        self._services.add_event_handler(self._enqueue_service, lambda old, new: self._enqueue_service(new), self._on_service_delete)
        self._pod_events = ServicesOfPods(self._services, self.queue, batch_period)
        self._pod_events.attach(self._pods)
        self._nodes.add_event_handler(self._on_node_change, self._on_node_update, self._on_node_change)
        self._slices.add_event_handler(self._on_slice_add, self._on_slice_update, self._on_slice_delete)

    async def run(self) -> None:
        await run_workers("endpointslice", self.queue, self.sync_service, self.workers, MAX_RETRIES)

    # ---- event handlers: record and return -------------------------------------------------

    def _enqueue_service(self, service: dict) -> None:
        meta = service["metadata"]
        self.queue.add(f"{meta.get('namespace', '')}/{meta['name']}")

    def _on_service_delete(self, service: dict) -> None:
        """A deleted Service no longer waits for its slices to catch up: its sync (queued here)
        only forgets it, and its slices go with it (garbage collection), so a slice event may
        never come to take it out of ``_behind_cache``."""
        meta = service["metadata"]
        self._behind_cache.discard(f"{meta.get('namespace', '')}/{meta['name']}")
        self._enqueue_service(service)

    def _on_node_change(self, node: dict) -> None:
        for pod in self._pods.indexer.by_index(POD_NODE_INDEX, node["metadata"]["name"]):
            self._pod_events.on_add(pod)
        self._enqueue_auto_services()

    def _on_node_update(self, old: dict, new: dict) -> None:
        def zone(node: dict) -> str | None:
            return (node["metadata"].get("labels") or {}).get(LABEL_TOPOLOGY_ZONE)

        if zone(old) != zone(new):
            self._on_node_change(new)
        elif _topology_facts(old) != _topology_facts(new):
            self._enqueue_auto_services()  # a zone's share of the CPU changed (upstream: checkNodeTopologyDistribution)

    def _enqueue_auto_services(self) -> None:
        """Every Service with ``topology-mode: Auto``: their hints follow the zones' CPU shares."""
        for service in self._services.indexer.list():
            if topology_hints_annotation_enabled(service):
                self._enqueue_service(service)

    def _managed(self, slice_: dict) -> bool:
        return (slice_["metadata"].get("labels") or {}).get(LABEL_MANAGED_BY) == CONTROLLER_NAME

    def _enqueue_for_slice(self, slice_: dict) -> None:
        service_name = (slice_["metadata"].get("labels") or {}).get(LABEL_SERVICE_NAME)
        if service_name:
            key = f"{slice_['metadata'].get('namespace', '')}/{service_name}"
            self.queue.add_after(key, max(ENDPOINT_SLICE_CHANGE_MIN_SYNC_DELAY, self.batch_period))

    def _retry_if_behind(self, slice_: dict) -> None:
        """A slice of a Service whose sync found the cache stale changed in the cache (most
        often our own write arriving): sync it now rather than after its back-off. A cache still
        stale fails the sync again, which waits for the next change or the back-off."""
        service_name = (slice_["metadata"].get("labels") or {}).get(LABEL_SERVICE_NAME)
        key = f"{slice_['metadata'].get('namespace', '')}/{service_name}"
        if service_name and key in self._behind_cache:
            self._behind_cache.discard(key)
            self.queue.add(key)

    def _on_slice_add(self, slice_: dict) -> None:
        self._retry_if_behind(slice_)
        if self._managed(slice_) and self.tracker.should_sync(slice_):
            self._enqueue_for_slice(slice_)

    def _on_slice_update(self, old: dict, new: dict) -> None:
        def service_name(slice_: dict) -> str | None:
            return (slice_["metadata"].get("labels") or {}).get(LABEL_SERVICE_NAME)

        self._retry_if_behind(new)
        if service_name(old) != service_name(new):
            # moved to another Service: both need a sync, and the old one must stop waiting
            # for a slice it will never see again
            self.tracker.handle_deletion(old)
            self._enqueue_for_slice(old)
            self._enqueue_for_slice(new)
        elif self._managed(old) != self._managed(new) or (self._managed(new) and self.tracker.should_sync(new)):
            self._enqueue_for_slice(new)

    def _on_slice_delete(self, slice_: dict) -> None:
        self._retry_if_behind(slice_)
        if self._managed(slice_) and self.tracker.has(slice_) and not self.tracker.handle_deletion(slice_):
            self._enqueue_for_slice(slice_)

    # ---- the sync ----------------------------------------------------------------------------

    async def sync_service(self, key: str) -> None:
        started = self.clock.monotonic()
        try:
            await self._sync(key)
        except StaleInformerCache:
            self.metrics.syncs.labels("stale").inc()
            self._behind_cache.add(key)  # (no await since the check: no slice event came between)
            raise
        except Exception:
            self.metrics.syncs.labels("error").inc()
            raise
        finally:
            # upstream's V(4) line, on success and failure alike: with -v 4 each Service's sync
            # (cache reads, plan, slice writes) can be timed against the Pod change that queued it
            if log.isEnabledFor(logging.DEBUG):
                log.debug("Finished syncing service endpoint slices key=%s elapsedTime=%s", key,
                          golang.format_duration(self.clock.monotonic() - started))
        self._behind_cache.discard(key)
        self.metrics.syncs.labels("success").inc()

    async def _sync(self, key: str) -> None:
        namespace, name = split_key(key)
        service = self._services.indexer.get_by_key(key)
        if service is None:
            self.trigger_times.delete_service(namespace, name)
            self._hints_populated.discard(key)
            self.tracker.delete_service(key)
            self.metrics.delete_service(key)
            return
        if not selects(service):
            return
        selector = service["spec"]["selector"]
        pods = [p for p in self._pods.indexer.by_index("namespace", namespace) if selector_matches(selector, p["metadata"].get("labels"))]
        slices = [s for s in self._slices.indexer.by_index(SLICE_SERVICE_INDEX, key) if self._managed(s) and not is_terminating(s)]
        if self.tracker.stale_slices(key, slices, service["metadata"].get("uid")):
            raise StaleInformerCache("EndpointSlice informer cache is out of date")
        trigger_time = self.trigger_times.compute(service, pods)
        topology = Topology(topologycache.cpu_ratios(self._nodes.indexer.list()) if topology_hints_annotation_enabled(service) else None,
                            self.prefer_same_traffic_distribution, key in self._hints_populated)
        plan = reconcile(service, pods, slices, _NodeLookup(self._nodes), max_endpoints_per_slice=self.max_endpoints_per_slice,
                         topology=topology)
        errors = list(plan.errors)
        try:
            await self._apply(service, plan, trigger_time)
        except SliceWriteFailed as exc:
            errors.append(str(exc))
        else:
            for event in plan.events:
                self.recorder.event(service, event.type, event.reason, event.message)
            if plan.hints_populated:
                self._hints_populated.add(key)
            else:
                self._hints_populated.discard(key)
        if errors:
            message = golang.aggregate(errors)
            self.recorder.event(service, "Warning", "FailedToUpdateEndpointSlices",
                                f"Error updating Endpoint Slices for Service {namespace}/{name}: {message}")
            raise SliceWriteFailed(message)

    async def _apply(self, service: dict, plan: Plan, trigger_time) -> None:
        """``finalize``: creates, then updates, then deletes; the first failure stops the rest
        (the retried sync recomputes them)."""
        self.metrics.endpoints_added.observe(plan.added)
        self.metrics.endpoints_removed.observe(plan.removed)
        key = f"{service['metadata'].get('namespace', '')}/{service['metadata']['name']}"
        traffic_distribution = service["spec"].get("trafficDistribution", "") if (
            not topology_hints_annotation_enabled(service)
            and trafficdist.heuristic(service["spec"].get("trafficDistribution"), self.prefer_same_traffic_distribution)) else ""
        self.metrics.update_service(key, plan.port_groups, traffic_distribution)
        where = f"for Service {key}"
        if not is_terminating(service):
            for slice_ in plan.creates:
                set_trigger_time(slice_, trigger_time)
                try:
                    created = await self._slices_api.create(slice_)
                except ApiError as exc:
                    if is_namespace_terminating(exc):
                        return
                    raise SliceWriteFailed(f"failed to create EndpointSlice {where}: {exc}") from exc
                self.tracker.update(created)
                self.metrics.changes.labels("create").inc()
        for slice_ in plan.updates:
            set_trigger_time(slice_, trigger_time)
            try:
                self.tracker.update(await self._slices_api.update(slice_))
            except ApiError as exc:
                raise SliceWriteFailed(f"failed to update {slice_['metadata']['name']} EndpointSlice {where}: {exc}") from exc
            self.metrics.changes.labels("update").inc()
        for slice_ in plan.deletes:
            try:
                await self._slices_api.delete(slice_["metadata"]["name"], slice_["metadata"].get("namespace"))
            except ApiError as exc:
                raise SliceWriteFailed(f"failed to delete {slice_['metadata']['name']} EndpointSlice {where}: {exc}") from exc
            self.tracker.expect_deletion(slice_)
            self.metrics.changes.labels("delete").inc()
        topology = "Auto" if topology_hints_annotation_enabled(service) else "Disabled"
        self.metrics.changed_per_sync.labels(topology, traffic_distribution).observe(plan.writes)


class _NodeLookup:
    """Nodes by name straight from the informer's cache (no copy per sync)."""

    def __init__(self, informer):
        self._indexer = informer.indexer

    def get(self, name: str, default=None):
        return self._indexer.get_by_key(name) if name else default


def _topology_facts(node: dict) -> tuple:
    """What of a Node the zones' CPU shares depend on: readiness, control-plane labels, zone, allocatable CPU."""
    labels = node["metadata"].get("labels") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in (node.get("status") or {}).get("conditions") or ())
    return (ready, tuple(label in labels for label in topologycache.EXCLUDED_LABELS), labels.get(LABEL_TOPOLOGY_ZONE),
            ((node.get("status") or {}).get("allocatable") or {}).get("cpu"))
