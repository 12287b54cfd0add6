"""Events the apiserver's own loops record (the repair controllers, the ServiceCIDR
controllers), written as core/v1 Events through the registry so ``kubectl get events`` and
``kubectl describe`` show them.

Like client-go's recorder, an Event lives in the namespace of the object it is about
(``default`` for cluster-scoped objects such as IPAddresses and ServiceCIDRs), is named
``<object>.<hex nanoseconds>``, and a repeat of the same (object, type, reason, message)
bumps ``count`` and ``lastTimestamp`` of the existing Event instead of adding another
(upstream's EventCorrelator aggregation, simplified to exact repeats). The flow is
``api.events.record_steps``, shared with the controllers' recorder; this module is its
transport over the registry.
"""

from __future__ import annotations

import logging

from kubesvc.api.errors import StatusError
from kubesvc.api.events import ALREADY_EXISTS, NOT_FOUND, Bump, RecordedEvents, Step, record_steps
from kubesvc.apiserver.registry.store import Registry
from kubesvc.util.clock import Clock

log = logging.getLogger("kubesvc.apiserver.events")
FIELD_MANAGER = "kube-apiserver"


class EventRecorder:
    def __init__(self, registry: Registry, clock: Clock, component: str, action: str = ""):
        self.events = registry.store("", "events")
        self.clock = clock
        self.component = component
        self.action = action
        self._recorded = RecordedEvents()  # (uid or name, type, reason, message) -> the Event, the last 4096

    async def event(self, obj: dict, type_: str, reason: str, message: str, action: str | None = None) -> None:
        """Record one occurrence; never raises (an event is best effort, as upstream's)."""
        try:
            await self._record(obj, type_, reason, message, action if action is not None else self.action)
        except StatusError as exc:
            log.warning("cannot record event %s %s: %s", reason, message, exc.message)

    async def _record(self, obj: dict, type_: str, reason: str, message: str, action: str) -> None:
        steps = record_steps(self._recorded, obj, type_, reason, message, component=self.component, action=action, now=self.clock.now())
        try:  # run_steps's loop, with each step's write awaited
            step = next(steps)
            while True:
                step = steps.send(await self._carry_out(step))
        except StopIteration:
            pass

    async def _carry_out(self, step: Step) -> dict | str:
        if isinstance(step, Bump):
            def bump(current: dict) -> dict:
                current["count"], current["lastTimestamp"] = step.count, step.last_timestamp
                return current
            try:
                return await self.events.guaranteed_update(step.namespace, step.name, bump, field_manager=FIELD_MANAGER)
            except StatusError as exc:
                if exc.code == 404:
                    return NOT_FOUND
                raise
        try:
            return await self.events.create(step.event["metadata"]["namespace"], step.event, field_manager=FIELD_MANAGER)
        except StatusError as exc:
            if exc.code == 409:
                return ALREADY_EXISTS
            raise
