"""The legacy Endpoints controller (kube-controller-manager's ``endpoint`` controller,
``pkg/controller/endpoint/endpoints_controller.go``): the thin shell around
``desired.plan_endpoints``.

Events only enqueue a Service key (``namespace/name``, which is also the Endpoints' key); a
worker syncs it:

* Service added, changed or deleted: enqueue at once.
* Pod added, changed (readiness, IPs, deletion, phase, node, labels...) or deleted: enqueue
  every Service it belongs (or belonged) to after ``--endpoint-updates-batch-period``
  (``batch_period``, default 0), so a burst of Pod changes becomes one write per Service.
* Endpoints deleted: enqueue its key, so a Service's Endpoints deleted by hand is recreated
  (and an orphan's deletion is confirmed).
* At start, once the caches are filled, every existing Endpoints is enqueued
  (``checkLeftoverEndpoints``): the Endpoints of Services deleted while the controller was
  down are found and deleted. Leader-election records (annotation
  ``control-plane.alpha.kubernetes.io/leader``, an Endpoints with no Service) are skipped.

A sync reads only caches:

* No Service: delete the Endpoints of that name (whoever wrote it: an Endpoints lives and dies
  with its Service), unless it is a leader-election record.
* ExternalName, or no selector: nothing; such Services get hand-written Endpoints.
* Otherwise: the Service's Pods (selector, same namespace) and the cached Endpoints go through
  ``plan_endpoints``; the result is POSTed (no Endpoints yet) or PUT (with the cached
  resourceVersion, so a concurrent change is a 409 and a retry).

After an update that produced a new resourceVersion, the old one is remembered: a sync that
still finds it in the cache raises and is retried later, instead of computing from a stale
object (``staleEndpointsTracker``). Unlike upstream, a create is remembered the same way (until
the cache shows the new object, "no Endpoints" is stale), so a Pod change right after a create
does not POST a second time and fail with AlreadyExists; and the staleness check comes before
the trigger-time computation, so the retried sync still carries the trigger time.

A failed write gives a Warning event on the Endpoints (``FailedToCreateEndpoint`` /
``FailedToUpdateEndpoint``, component ``endpoint-controller``) and a retry with backoff, except
a create refused because the namespace is being deleted, which is dropped quietly.
"""

from __future__ import annotations

import asyncio
import logging

from kubesvc.client.cache import object_key, split_key
from kubesvc.client.record import EventRecorder
from kubesvc.client.rest import ENDPOINTS, ApiError, RestClient, is_namespace_terminating
from kubesvc.client.workqueue import WorkQueue
from kubesvc.controllers.endpoints.desired import is_leader_election_record, plan_endpoints
from kubesvc.controllers.endpointslice.triggertime import TriggerTimeTracker
from kubesvc.controllers.endpointslice.util import (
    selector_matches,
    selects,
)
from kubesvc.controllers.informers import ServicesOfPods, SharedInformers
from kubesvc.controllers.runtime import run_workers
from kubesvc.util.clock import Clock, RealClock

log = logging.getLogger("kubesvc.controllers.endpoints")

COMPONENT = "endpoint-controller"
MAX_RETRIES = 15
ABSENT = ""  # the "resourceVersion" of an Endpoints not in the cache


class StaleInformerCache(Exception):
    """The Endpoints cache still holds a version this controller has already replaced."""


class EndpointsController:
    def __init__(self, client: RestClient, informers: SharedInformers, *, batch_period: float = 0.0, workers: int = 5,
                 recorder: EventRecorder | None = None, clock: Clock | None = None):
        self.batch_period = batch_period
        self.workers = workers
        self.clock = clock or RealClock()
        self.recorder = recorder or EventRecorder(client, COMPONENT, self.clock)
        self.queue = WorkQueue(clock=self.clock)
        self.trigger_times = TriggerTimeTracker()
        self._stale_versions: dict[str, str] = {}  # key -> resourceVersion we already replaced
        self._endpoints_api = client.resource(ENDPOINTS)
        self._services = informers.services
        self._pods = informers.pods
        self._endpoints = informers.endpoints
        self._services.add_event_handler(self._enqueue_service, lambda old, new: self._enqueue_service(new), self._enqueue_service)
        self._pod_events = ServicesOfPods(self._services, self.queue, batch_period)
        self._pod_events.attach(self._pods)
        self._endpoints.add_event_handler(self._on_endpoints_add, None, self._on_endpoints_delete)

    async def run(self) -> None:
        """Wait for the caches, enqueue leftover Endpoints, then work until cancelled."""
        await asyncio.gather(self._services.wait_for_sync(), self._pods.wait_for_sync(), self._endpoints.wait_for_sync())
        self.check_leftover_endpoints()
        await run_workers("endpoint", self.queue, self.sync_service, self.workers, MAX_RETRIES)

    # ---- event handlers: record and return -------------------------------------------------

    def _enqueue_service(self, service: dict) -> None:
        self.queue.add(object_key(service))

    def _on_endpoints_add(self, endpoints: dict) -> None:
        key = object_key(endpoints)
        if self._stale_versions.get(key) == ABSENT:  # our create has reached the cache
            del self._stale_versions[key]

    def _on_endpoints_delete(self, endpoints: dict) -> None:
        self.queue.add(object_key(endpoints))

    def check_leftover_endpoints(self) -> None:
        """Enqueue every cached Endpoints but leader-election records (``checkLeftoverEndpoints``)."""
        for endpoints in self._endpoints.indexer.list():
            if not is_leader_election_record(endpoints):
                self.queue.add(object_key(endpoints))

    # ---- the sync ----------------------------------------------------------------------------

    async def sync_service(self, key: str) -> None:
        namespace, name = split_key(key)
        service = self._services.indexer.get_by_key(key)
        if service is None:
            await self._delete_endpoints(key, namespace, name)
            return
        if not selects(service):  # ExternalName, or no selector: Endpoints are written by hand
            return
        current = self._endpoints.indexer.get_by_key(key)
        current_version = current["metadata"].get("resourceVersion", "") if current is not None else ABSENT
        if self._stale_versions.get(key) == current_version:
            raise StaleInformerCache(f"endpoints informer cache is out of date, resource version "
                                     f"{current_version or '(none)'} already processed for endpoints {key}")
        selector = service["spec"]["selector"]
        pods = [p for p in self._pods.indexer.by_index("namespace", namespace) if selector_matches(selector, p["metadata"].get("labels"))]
        # computed before deciding whether to write, so the tracker advances even on a no-op
        trigger_time = self.trigger_times.compute(service, pods)
        write = plan_endpoints(service, pods, current, trigger_time)
        if write is None:
            log.debug("endpoints %s are up to date", key)
            return
        log.debug("%s endpoints %s: %d ready, %d not ready", "creating" if write.create else "updating", key, write.ready, write.not_ready)
        try:
            if write.create:
                await self._endpoints_api.create(write.endpoints, namespace)
                if self._endpoints.indexer.get_by_key(key) is None:
                    self._stale_versions[key] = ABSENT  # until the cache shows it, "absent" is stale
                return
            updated = await self._endpoints_api.update(write.endpoints, namespace)
        except ApiError as exc:
            if write.create and exc.status == 403 and is_namespace_terminating(exc):
                return  # creates keep failing until the namespace is gone: drop the key
            if write.create:
                self.recorder.event(write.endpoints, "Warning", "FailedToCreateEndpoint",
                                    f"Failed to create endpoint for service {namespace}/{name}: {exc.message}")
            else:
                self.recorder.event(write.endpoints, "Warning", "FailedToUpdateEndpoint",
                                    f"Failed to update endpoint {namespace}/{name}: {exc.message}")
            raise
        if updated["metadata"].get("resourceVersion") != current_version:
            self._stale_versions[key] = current_version

    async def _delete_endpoints(self, key: str, namespace: str, name: str) -> None:
        """The Service is gone: so goes its Endpoints (a missing one is fine)."""
        if not is_leader_election_record(self._endpoints.indexer.get_by_key(key)):
            try:
                await self._endpoints_api.delete(name, namespace)
            except ApiError as exc:
                if exc.status != 404:
                    raise
        self.trigger_times.delete_service(namespace, name)
        self._stale_versions.pop(key, None)
