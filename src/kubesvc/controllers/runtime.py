"""What every controller shares: worker loops over a work queue, and Events through the API.

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

from kubesvc.api.events import event_name, event_namespace, new_event, object_reference, repeat_key
from kubesvc.client.rest import EVENTS, ApiError, ClientError, RestClient
from kubesvc.client.workqueue import ShutDown, WorkQueue
from kubesvc.util.clock import Clock, RealClock, rfc3339

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


def _describe(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, ClientError) else f"{type(exc).__name__}: {exc}"


class EventRecorder:
    """Records core/v1 Events through the API, best effort (a failure is logged, never raised),
    with exact repeats aggregated into ``count`` as client-go's correlator does."""

    def __init__(self, client: RestClient, component: str, clock: Clock | None = None):
        self._events = client.resource(EVENTS)
        self.component = component
        self.clock = clock or RealClock()
        self._recorded: dict[tuple, dict] = {}
        self._pending: set[asyncio.Task] = set()

    def event(self, obj: dict, type_: str, reason: str, message: str, action: str = "") -> None:
        """Queue one Event; returns at once (call from sync code or handlers)."""
        task = asyncio.get_running_loop().create_task(self._record(obj, type_, reason, message, action))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def flush(self) -> None:
        """Wait for the Events queued so far (tests, shutdown)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def _record(self, obj: dict, type_: str, reason: str, message: str, action: str) -> None:
        ref = object_reference(obj)
        now = self.clock.now()
        key = repeat_key(ref, type_, reason, message)
        try:
            existing = self._recorded.get(key)
            if existing is not None:
                count = int(existing.get("count") or 1) + 1
                patch = {"count": count, "lastTimestamp": rfc3339(now)}
                try:
                    self._recorded[key] = await self._events.patch(existing["metadata"]["name"], patch, event_namespace(ref))
                    return
                except ApiError as exc:
                    if exc.status != 404:
                        raise
            event = new_event(ref, type_, reason, message, component=self.component, action=action, now=now)
            for attempt in range(8):
                event["metadata"]["name"] = event_name(ref, now, attempt)
                try:
                    self._recorded[key] = await self._events.create(event)
                    return
                except ApiError as exc:
                    if exc.status != 409:
                        raise
        except ClientError as exc:
            log.warning("cannot record event %s %r about %s: %s", reason, message, ref.get("name"), exc)
