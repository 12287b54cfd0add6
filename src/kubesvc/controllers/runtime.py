"""What every controller shares: worker loops over a work queue (Events go through
``client.record.EventRecorder``).

A controller (client-go style) is informers whose handlers enqueue keys, plus ``workers``
coroutines that take keys off the queue and *sync* them: compare what the cache says should
exist with what does, and write the difference. A sync that raises is retried with per-key
exponential backoff (5 ms doubling, ``WorkQueue.add_rate_limited``) up to ``max_retries``
times (upstream's endpointslice and endpoints controllers use 15), after which the key is
dropped until the next event about it, as upstream's ``handleErr`` does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable

from kubesvc.client.record import EventRecorder
from kubesvc.client.rest import ClientError, RestClient
from kubesvc.client.workqueue import ShutDown, WorkQueue
from kubesvc.util.clock import Clock, RealClock

log = logging.getLogger("kubesvc.controllers")

DEFAULT_MAX_RETRIES = 15


def namespace_is_active(namespace: dict | None) -> bool:
    """The namespace exists and is ``Active`` (not ``Terminating``): objects may be made in it."""
    return namespace is not None and (namespace.get("status") or {}).get("phase") == "Active"


async def run_workers(name: str, queue: WorkQueue, sync: Callable[[Hashable], Awaitable[None]], workers: int,
                      max_retries: int = DEFAULT_MAX_RETRIES) -> None:
    """Run ``workers`` loops until the queue is shut down and drained (or cancellation)."""

    async def work() -> None:
        while True:
            try:
                key = await queue.get()
            except ShutDown:
                return
            try:
                await sync(key)
                queue.forget(key)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                retries = queue.num_requeues(key)
                if retries < max_retries:
                    log.info("%s: error syncing %s, retrying (%d): %s", name, key, retries + 1, _describe(exc))
                    queue.add_rate_limited(key)
                else:
                    log.warning("%s: dropping %s out of the queue after %d retries: %s", name, key, retries, _describe(exc))
                    queue.forget(key)
            finally:
                queue.done(key)

    async with asyncio.TaskGroup() as group:
        for _ in range(max(1, workers)):
            group.create_task(work())


class QueueController:
    """The shell of upstream's workload controllers (``NewDeploymentController``,
    ``NewReplicaSetController``, ...): a client, an EventRecorder reporting as ``component``, a
    work queue on the controller's clock, and ``workers`` loops syncing its keys (``run``).
    Subclasses name their queue (``queue_name``, the controller's name in logs), set
    ``max_retries`` where upstream does, and define ``sync(key)``."""

    queue_name = "controller"
    max_retries = DEFAULT_MAX_RETRIES

    def __init__(self, client: RestClient, component: str, *, workers: int, recorder: EventRecorder | None = None,
                 clock: Clock | None = None):
        self.client = client
        self.workers = workers
        self.clock = clock or RealClock()
        self.recorder = recorder or EventRecorder(client, component, self.clock)
        self.queue = WorkQueue(clock=self.clock)

    async def sync(self, key: Hashable) -> None:
        raise NotImplementedError

    async def run(self) -> None:
        await run_workers(self.queue_name, self.queue, self.sync, self.workers, self.max_retries)


def omitempty(value):
    """A status as the API serializes it (Go's ``omitempty``): zero counts, empty strings,
    lists and maps left out, so a freshly computed status compares equal to the stored one."""
    if isinstance(value, dict):
        return {k: omitempty(v) for k, v in value.items() if v not in (None, 0, [], {}, "")}
    if isinstance(value, list):
        return [omitempty(v) for v in value]
    return value


def _describe(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, ClientError) else f"{type(exc).__name__}: {exc}"

