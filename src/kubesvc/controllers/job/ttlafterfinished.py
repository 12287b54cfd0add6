"""kube-controller-manager's ``ttl-after-finished-controller``
(pkg/controller/ttlafterfinished/ttlafterfinished_controller.go): a finished Job (``Complete``
or ``Failed`` True) with ``spec.ttlSecondsAfterFinished`` is deleted that many seconds after
it finished, with its Pods (``propagationPolicy: Foreground``).

* The finish time is the ``lastTransitionTime`` of the True Complete/Failed condition.
* Not yet due: look again when it is (``AddAfter(expireAt - now)``).
* Due: the Job is read again live and checked again (a user may have changed the TTL or the
  Job may have been replaced), then deleted with ``preconditions.uid``, so a new Job of the
  same name is never the one deleted.
* Metric (pkg/controller/ttlafterfinished/metrics): the histogram
  ``ttl_after_finished_controller_job_deletion_duration_seconds``, the time from when a Job
  became eligible for deletion to its DELETE (buckets 0.1 s doubling, 14).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry, Histogram

from kubesvc.client.cache import split_key
from kubesvc.client.record import EventRecorder
from kubesvc.client.rest import ApiError, RestClient, is_conflict, is_not_found
from kubesvc.client.workqueue import WorkQueue
from kubesvc.controllers.informers import SharedInformers
from kubesvc.controllers.job.controller import JOBS
from kubesvc.controllers.job.decisions import COMPLETE, FAILED
from kubesvc.controllers.runtime import run_workers
from kubesvc.util.clock import Clock, RealClock
from kubesvc.util.golang import parse_rfc3339

log = logging.getLogger("kubesvc.controllers.ttlafterfinished")


def finish_time(job: dict) -> datetime | None:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in (COMPLETE, FAILED) and condition.get("status") == "True":
            stamp = condition.get("lastTransitionTime")
            if not stamp:
                raise ValueError(f"unable to find the time when the Job {job['metadata'].get('namespace')}/{job['metadata']['name']} finished")
            return parse_rfc3339(stamp)
    return None


def needs_cleanup(job: dict) -> bool:
    return (job.get("spec") or {}).get("ttlSecondsAfterFinished") is not None and not job["metadata"].get("deletionTimestamp") \
        and finish_time(job) is not None


def time_left(job: dict, now: datetime) -> float | None:
    """Seconds until the Job expires (<= 0: now), or None when it never does."""
    if not needs_cleanup(job):
        return None
    finished = finish_time(job)
    if finished > now:
        log.warning("Warning: Found Job finished in the future. This is likely due to time skew in the cluster. Job cleanup will be deferred.")
    expire_at = finished + timedelta(seconds=int(job["spec"]["ttlSecondsAfterFinished"]))
    return (expire_at - now).total_seconds()


class TTLAfterFinishedMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.deletion_duration = Histogram("ttl_after_finished_controller_job_deletion_duration_seconds",
                                           "The time it took to delete the job since it became eligible for deletion",
                                           buckets=tuple(0.1 * 2**i for i in range(14)),  # ExponentialBuckets(0.1, 2, 14)
                                           registry=registry if registry is not None else CollectorRegistry())


class TTLAfterFinishedController:
    def __init__(self, client: RestClient, informers: SharedInformers, *, workers: int = 5, clock: Clock | None = None,
                 metrics: TTLAfterFinishedMetrics | None = None):
        self.clock = clock or RealClock()
        self.metrics = metrics or TTLAfterFinishedMetrics()
        self.workers = workers
        self.queue = WorkQueue(clock=self.clock)
        self.recorder = EventRecorder(client, "ttl-after-finished-controller", self.clock)
        self._jobs_api = client.resource(JOBS)
        self._jobs = informers.informer(JOBS)
        self._jobs.add_event_handler(self._enqueue, lambda old, new: self._enqueue(new), None)

    def _enqueue(self, job: dict) -> None:
        if needs_cleanup(job):
            self.queue.add(f"{job['metadata'].get('namespace', '')}/{job['metadata']['name']}")

    async def run(self) -> None:
        await run_workers("ttl-after-finished", self.queue, self.sync, self.workers)

    async def sync(self, key: Hashable) -> None:
        namespace, name = split_key(str(key))
        job = self._jobs.indexer.get(name, namespace)
        if job is None:
            return
        left = time_left(job, self.clock.now())
        if left is None:
            return
        if left > 0:
            self.queue.add_after(str(key), left)
            return
        try:
            fresh = await self._jobs_api.get(name, namespace)
        except ApiError as exc:
            if is_not_found(exc):
                return
            raise
        left = time_left(fresh, self.clock.now())
        if left is None:
            return
        if left > 0:
            self.queue.add_after(str(key), left)
            return
        try:
            await self._jobs_api.delete(name, namespace, propagation_policy="Foreground", preconditions={"uid": fresh["metadata"]["uid"]})
            log.info("cleaned up finished Job %s", key)
        except ApiError as exc:
            if not (is_not_found(exc) or is_conflict(exc)):
                raise
            return
        self.metrics.deletion_duration.observe(-time_left(fresh, self.clock.now()))  # seconds since it expired
