"""Events through the API, as client-go's ``tools/record``: a component reports what it did to
an object (``Normal``) or what went wrong (``Warning``) as a core/v1 Event naming it.

Recording is best effort and never blocks the caller: ``event`` queues a task and returns; a
failed write is logged, never raised (upstream drops Events under pressure too). An exact
repeat (same object, type, reason and message) is not a new Event: as client-go's
``EventCorrelator``, the first one's ``count`` goes up and its ``lastTimestamp`` moves. The flow
is ``api.events.record_steps``, shared with the apiserver's own recorder; this module drives it
over the REST client.
"""

from __future__ import annotations

import asyncio
import logging

from kubesvc.api.events import ALREADY_EXISTS, NOT_FOUND, Bump, Step, record_steps
from kubesvc.client.rest import EVENTS, ApiError, ClientError, RestClient
from kubesvc.util.clock import Clock, RealClock

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
        steps = record_steps(self._recorded, obj, type_, reason, message, component=self.component, action=action, now=self.clock.now())
        try:
            step = next(steps)
            while True:
                step = steps.send(await self._carry_out(step))
        except StopIteration:
            pass
        except ClientError as exc:
            name = (obj.get("metadata") or {}).get("name")
            log.warning("cannot record event %s %r about %s: %s", reason, message, name, exc)

    async def _carry_out(self, step: Step) -> dict | str:
        if isinstance(step, Bump):
            try:
                return await self._events.patch(step.name, {"count": step.count, "lastTimestamp": step.last_timestamp}, step.namespace)
            except ApiError as exc:
                if exc.status == 404:
                    return NOT_FOUND
                raise
        try:
            return await self._events.create(step.event)
        except ApiError as exc:
            if exc.status == 409:
                return ALREADY_EXISTS
            raise
