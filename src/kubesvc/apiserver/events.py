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
from kubesvc.apiserver.registry.store import Registry
from kubesvc.util.clock import Clock, rfc3339

log = logging.getLogger("kubesvc.apiserver.events")
FIELD_MANAGER = "kube-apiserver"


def object_reference(obj: dict) -> dict:
    meta = obj.get("metadata") or {}
    ref = {"kind": obj.get("kind", ""), "apiVersion": obj.get("apiVersion", ""), "name": meta.get("name", "")}
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    if meta.get("uid"):
        ref["uid"] = meta["uid"]
    if meta.get("resourceVersion"):
        ref["resourceVersion"] = meta["resourceVersion"]
    return ref


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
        namespace = ref.get("namespace") or "default"
        now = self.clock.now()
        key = (ref.get("uid") or ref["name"], type_, reason, message)
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
        stamp = int(now.timestamp() * 1e9)
        event = {
            "metadata": {"name": "", "namespace": namespace},
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "source": {"component": self.component},
            "firstTimestamp": rfc3339(now),
            "lastTimestamp": rfc3339(now),
            "count": 1,
            "type": type_,
            "reportingComponent": self.component,
            "reportingInstance": "",
        }
        if action:
            event["action"] = action
        for attempt in range(8):
            # <object>.<hex nanoseconds>, as client-go names Events; two Events about one object
            # in the same nanosecond (a fake clock, a fast loop) take the next nanosecond
            name = event["metadata"]["name"] = f"{ref['name']}.{stamp + attempt:x}"
            try:
                self.events.create(namespace, event, field_manager=FIELD_MANAGER)
            except StatusError as exc:
                if exc.code == 409:
                    continue
                raise
            self._recorded[key] = name
            return
