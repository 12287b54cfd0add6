"""Events the apiserver's own loops record (the repair controllers, the ServiceCIDR
controllers), written as core/v1 Events through the registry so ``kubectl get events`` and
``kubectl describe`` show them.

Like client-go's recorder, an Event lives in the namespace of the object it is about
(``default`` for cluster-scoped objects such as IPAddresses and ServiceCIDRs), is named
``<object>.<hex nanoseconds>``, and a repeat of the same (object, type, reason, message)
bumps ``count`` and ``lastTimestamp`` of the existing Event instead of adding another
(upstream's EventCorrelator aggregation, simplified to exact repeats).
"""

from __future__ import annotations

import logging

from kubesvc.api.errors import StatusError
from kubesvc.api.events import event_name, event_namespace, new_event, object_reference, repeat_key
from kubesvc.apiserver.registry.store import Registry
from kubesvc.util.clock import Clock
from kubesvc.util.golang import rfc3339

log = logging.getLogger("kubesvc.apiserver.events")
FIELD_MANAGER = "kube-apiserver"


class EventRecorder:
    def __init__(self, registry: Registry, clock: Clock, component: str, action: str = ""):
        self.events = registry.store("", "events")
        self.clock = clock
        self.component = component
        self.action = action
        self._recorded: dict[tuple, str] = {}  # (uid or name, type, reason, message) -> Event name

    def event(self, obj: dict, type_: str, reason: str, message: str, action: str | None = None) -> None:
        """Record one occurrence; never raises (an event is best effort, as upstream's)."""
        try:
            self._record(obj, type_, reason, message, action if action is not None else self.action)
        except StatusError as exc:
            log.warning("cannot record event %s %s: %s", reason, message, exc.message)

    def _record(self, obj: dict, type_: str, reason: str, message: str, action: str) -> None:
        ref = object_reference(obj)
        namespace = event_namespace(ref)
        now = self.clock.now()
        key = repeat_key(ref, type_, reason, message)
        existing = self._recorded.get(key)
        if existing is not None:
            def bump(current: dict) -> dict:
                current["count"] = int(current.get("count") or 1) + 1
                current["lastTimestamp"] = rfc3339(now)
                return current
            try:
                self.events.guaranteed_update(namespace, existing, bump, field_manager=FIELD_MANAGER)
                return
            except StatusError as exc:
                if exc.code != 404:
                    raise
        event = new_event(ref, type_, reason, message, component=self.component, action=action, now=now)
        for attempt in range(8):
            name = event["metadata"]["name"] = event_name(ref, now, attempt)
            try:
                self.events.create(namespace, event, field_manager=FIELD_MANAGER)
            except StatusError as exc:
                if exc.code == 409:
                    continue
                raise
            self._recorded[key] = name
            return
