"""kube-controller-manager's ``pod-garbage-collector-controller`` (pkg/controller/podgc): every
``gc_check_period`` one pass over the Pod and Node caches force-deletes what ``decisions``
picks (the terminated excess, terminating Pods on out-of-service Nodes, orphans of deleted
Nodes after their quarantine, unscheduled terminating Pods), each first patched ``Failed``
when no kubelet will write its end. Upstream deletes the terminated and out-of-service Pods
with a goroutine each, which kube-controller-manager's client rate limit (``--kube-api-qps``
20, burst 30) meters; our client has no such limit, so at most ``DELETE_PARALLELISM`` of
them are in flight at once (a pass over 12 500 excess Pods is not 25 000 requests at once).
Orphaned and unscheduled terminating Pods go one at a time, as upstream's loops do. Writes
with ``system:controller:pod-garbage-collector`` (pods list/watch/delete, pods/status patch,
nodes get/list: upstream's bootstrap role).
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import CollectorRegistry, Counter

from kubesvc.client.rest import NODES, PODS, ApiError, ClientError, RestClient, is_not_found
from kubesvc.controllers.informers import SharedInformers
from kubesvc.controllers.podgc import decisions as gc
from kubesvc.util.clock import Clock, RealClock

log = logging.getLogger("kubesvc.controllers.podgc")


class PodGCMetrics:
    """``pod_gc_collector_force_delete_pods_total`` / ``..._force_delete_pod_errors_total``
    {namespace, reason} (pkg/controller/podgc/metrics)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.deleting = Counter("pod_gc_collector_force_delete_pods_total",
                                "Number of pods that are being forcefully deleted since the Pod GC Controller started.",
                                ["namespace", "reason"], registry=registry)
        self.errors = Counter("pod_gc_collector_force_delete_pod_errors_total",
                              "Number of errors encountered when forcefully deleting the pods since the Pod GC Controller started.",
                              ["namespace", "reason"], registry=registry)


class PodGCController:
    def __init__(self, client: RestClient, informers: SharedInformers, *, terminated_pod_threshold: int = gc.DEFAULT_TERMINATED_POD_THRESHOLD,
                 gc_check_period: float = gc.GC_CHECK_PERIOD, quarantine_time: float = gc.QUARANTINE_TIME,
                 metrics: PodGCMetrics | None = None, clock: Clock | None = None, parallelism: int = gc.DELETE_PARALLELISM):
        self.clock = clock or RealClock()
        self.parallelism = parallelism
        self.threshold = terminated_pod_threshold
        self.period = gc_check_period
        self.quarantine = gc.Quarantine(quarantine_time)
        self.metrics = metrics or PodGCMetrics(CollectorRegistry())
        self._pods_api = client.resource(PODS)
        self._nodes_api = client.resource(NODES)
        self._pods = informers.pods
        self._nodes = informers.nodes

    async def run(self) -> None:
        """``wait.UntilWithContext(gc, gcCheckPeriod)``: a pass, then the period, forever."""
        while True:
            try:
                await self.gc()
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad pass must not end the controller (HandleCrash)
                log.exception("pod GC pass failed")
            await asyncio.sleep(self.period)

    async def gc(self) -> None:
        pods = self._pods.indexer.list()
        nodes = {n["metadata"]["name"]: n for n in self._nodes.indexer.list()}
        await self._delete_all(gc.terminated_to_delete(pods, self.threshold), gc.REASON_TERMINATED, parallelism=self.parallelism)
        await self._delete_all(gc.terminating_out_of_service(pods, nodes), gc.REASON_OUT_OF_SERVICE, parallelism=self.parallelism)
        await self._gc_orphaned(pods, set(nodes))
        await self._delete_all(gc.unscheduled_terminating(pods), gc.REASON_UNSCHEDULED)

    async def _gc_orphaned(self, pods: list[dict], existing: set[str]) -> None:
        self.quarantine.note(gc.missing_nodes(pods, existing), self.clock.monotonic())
        deleted = set()
        for name in self.quarantine.take_due(self.clock.monotonic()):
            if name in existing or name in self._nodes_known():
                continue
            try:
                await self._nodes_api.get(name)
            except ApiError as exc:
                if is_not_found(exc):
                    deleted.add(name)
                else:  # noted again on the next pass if still missing
                    log.warning("Error while getting node %s: %s", name, exc)
            except ClientError as exc:
                log.warning("Error while getting node %s: %s", name, exc)
        orphans = [p for p in pods if (p.get("spec") or {}).get("nodeName") in deleted]
        for pod in orphans:
            log.info("Found orphaned Pod %s/%s assigned to the Node %s, deleting", pod["metadata"].get("namespace"),
                     pod["metadata"]["name"], pod["spec"]["nodeName"])
        await self._delete_all(orphans, gc.REASON_ORPHANED, gc.ORPHANED_CONDITION)  # one at a time, as upstream

    def _nodes_known(self) -> set[str]:
        return {n["metadata"]["name"] for n in self._nodes.indexer.list()}

    async def _delete_all(self, pods: list[dict], reason: str, condition: tuple[str, str, str] | None = None, *,
                          parallelism: int = 1) -> None:
        """The Pods in their order, at most ``parallelism`` at once (each a status patch and a
        delete), the pass returning once all are done."""
        queue = iter(pods)

        async def worker() -> None:
            for pod in queue:  # one shared iterator: each Pod taken by one worker
                await self._delete(pod, reason, condition)

        await asyncio.gather(*(worker() for _ in range(min(max(parallelism, 1), len(pods)))))

    async def _delete(self, pod: dict, reason: str, condition: tuple[str, str, str] | None) -> None:
        """``markFailedAndDeletePodWithCondition``: Failed first (with the condition), then DELETE
        with grace period 0. A Pod already gone is not an error. Both writes name the Pod's uid
        (the patch's ``metadata.uid``, the delete's precondition): a Pod of the same name made
        since the informer saw this one is neither marked nor deleted (a 409 for the delete:
        the Pod decided on is gone)."""
        namespace, name = pod["metadata"].get("namespace", ""), pod["metadata"]["name"]
        self.metrics.deleting.labels(namespace, reason).inc()
        log.info("PodGC is force deleting Pod %s/%s (%s)", namespace, name, reason)
        try:
            patch = gc.failed_status_patch(pod, condition, self.clock.now())
            if patch is not None:
                await self._pods_api.patch(name, patch, namespace, patch_type="strategic", subresource="status")
            await self._pods_api.delete(name, namespace, grace_period_seconds=0, preconditions={"uid": pod["metadata"]["uid"]})
        except ApiError as exc:
            if not (is_not_found(exc) or exc.status == 409):  # gone, or its name now another Pod's
                self.metrics.errors.labels(namespace, reason).inc()
                log.warning("PodGC: cannot delete Pod %s/%s: %s", namespace, name, exc)
        except ClientError as exc:
            self.metrics.errors.labels(namespace, reason).inc()
            log.warning("PodGC: cannot delete Pod %s/%s: %s", namespace, name, exc)
