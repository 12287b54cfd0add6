"""Events through the API, as client-go's ``tools/record``: a component reports what it did to
an object (``Normal``) or what went wrong (``Warning``) as a core/v1 Event naming it.

Recording is best effort and never blocks the caller: ``event`` queues a task and returns; a
failed write is logged, never raised (upstream drops Events under pressure too). An exact
repeat (same object, type, reason and message) is not a new Event: as client-go's
``EventCorrelator``, the first one's ``count`` goes up and its ``lastTimestamp`` moves.
"""

from __future__ import annotations

import asyncio
import logging

from kubesvc.api.events import event_name, event_namespace, new_event, object_reference, repeat_key
from kubesvc.client.rest import EVENTS, ApiError, ClientError, RestClient
from kubesvc.util.clock import Clock, RealClock
from kubesvc.util.golang import rfc3339

log = logging.getLogger("kubesvc.client.record")


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
