"""Events through the API, as client-go's ``tools/record``: a component reports what it did to
an object (``Normal``) or what went wrong (``Warning``) as a core/v1 Event naming it.

Recording is best effort and never blocks the caller: ``event`` queues the Event and returns;
one sender writes the queue in order, as client-go's broadcaster feeds one sink goroutine (so a
burst of a thousand Events is a thousand writes one after another on one connection, not a
thousand connections opened at once beside the component's real work); a failed write is
logged, never raised, and beyond ``MAX_QUEUED`` waiting Events new ones are dropped (upstream's
queue of 1000, ``DropIfChannelFull``). An exact
repeat (same object, type, reason and message) is not a new Event: as client-go's
``EventCorrelator``, the first one's ``count`` goes up and its ``lastTimestamp`` moves (among
the last 4096 Events recorded: the correlator's LRU bound, so a long-running scheduler does not
keep every Event it ever sent). The flow
is ``api.events.record_steps``, shared with the apiserver's own recorder; this module drives it
over the REST client.

A component whose own requests are what its users wait for may hand the recorder a ``yield_to``:
before each write the sender awaits it, with a deadline ``MAX_YIELD`` seconds after the Event
was recorded, so Events wait while that work is in flight but never longer than that. The
scheduler passes "no binding in flight": its Scheduled Events, each a write costing the
apiserver about what a binding does, are written after a burst's bindings instead of between
them (the Events are the same, stamped when recorded; upstream's are asynchronous and best
effort too, and its apiserver serves them on other cores beside the bindings, which one event
loop here cannot).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from kubesvc.api.events import ALREADY_EXISTS, NOT_FOUND, Bump, RecordedEvents, Step, record_steps
from kubesvc.client.rest import EVENTS, ApiError, ClientError, RestClient
from kubesvc.util.clock import Clock, RealClock

log = logging.getLogger("kubesvc.client.record")

MAX_QUEUED = 1000
MAX_YIELD = 1.0  # seconds an Event may wait for the component's urgent work (``yield_to``) at most


class EventRecorder:
    """Records core/v1 Events through the API, best effort (a failure is logged, never raised),
    with exact repeats aggregated into ``count`` as client-go's correlator does."""

    def __init__(self, client: RestClient, component: str, clock: Clock | None = None, *,
                 yield_to: Callable[[float], Awaitable[None]] | None = None):
        self._events = client.resource(EVENTS)
        self.component = component
        self.clock = clock or RealClock()
        # awaited before each write with a deadline (the event loop's time): returns once the
        # component's urgent work is done, or at the deadline
        self._yield_to = yield_to
        self._recorded = RecordedEvents()  # the last 4096, as client-go's correlator keeps
        self._queue: deque[tuple] = deque()
        self._sender: asyncio.Task | None = None

    def event(self, obj: dict, type_: str, reason: str, message: str, action: str = "") -> None:
        """Queue one Event; returns at once (call from sync code or handlers)."""
        if len(self._queue) >= MAX_QUEUED:
            log.warning("dropping event %s %r about %s: %d events already wait", reason, message, (obj.get("metadata") or {}).get("name"),
                        len(self._queue))
            return
        loop = asyncio.get_running_loop()
        self._queue.append((loop.time() + MAX_YIELD, (obj, type_, reason, message, action, self.clock.now())))
        if self._sender is None or self._sender.done():
            self._sender = loop.create_task(self._send_queued())

    async def flush(self) -> None:
        """Wait for the Events queued so far (tests, shutdown)."""
        while self._sender is not None and not self._sender.done():
            await asyncio.gather(self._sender, return_exceptions=True)

    async def _send_queued(self) -> None:
        while self._queue:
            deadline, event = self._queue[0]
            if self._yield_to is not None:
                await self._yield_to(deadline)
            self._queue.popleft()
            try:
                await self._record(*event)
            except Exception:  # best effort: the next Events still go out
                log.exception("cannot record an event")

    async def _record(self, obj: dict, type_: str, reason: str, message: str, action: str, now) -> None:
        steps = record_steps(self._recorded, obj, type_, reason, message, component=self.component, action=action, now=now)
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
