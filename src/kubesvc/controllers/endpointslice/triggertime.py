"""``endpoints.kubernetes.io/last-change-trigger-time``: when did the change that an endpoints
write reflects happen (upstream ``util/trigger_time_tracker.go``)?

Consumers (kube-proxy's network-programming-latency metric) subtract it from the moment they
acted. The first sync of a Service reports the Service's creationTimestamp; later syncs report
the earliest trigger time that advanced since the previous sync of that Service, where a Pod's
trigger time is its Ready condition's lastTransitionTime and the Service's its
creationTimestamp; nothing advanced means no annotation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from kubesvc.controllers.endpointslice.util import pod_ready_transition
from kubesvc.util.golang import parse_rfc3339


@dataclass
class _ServiceState:
    service_time: datetime | None = None
    pod_times: dict[str, datetime] = field(default_factory=dict)


class TriggerTimeTracker:
    def __init__(self) -> None:
        self._states: dict[str, _ServiceState] = {}

    def compute(self, service: dict, pods: Iterable[dict]) -> datetime | None:
        meta = service["metadata"]
        key = f"{meta.get('namespace', '')}/{meta['name']}"
        previous = self._states.get(key)
        state = previous or _ServiceState()
        changed: list[datetime] = []
        pod_times: dict[str, datetime] = {}
        for pod in pods:
            moment = pod_ready_transition(pod)
            if moment is None:
                continue
            name = pod["metadata"]["name"]
            pod_times[name] = moment
            last = state.pod_times.get(name)
            if last is None or moment > last:
                changed.append(moment)
        created = parse_rfc3339(meta["creationTimestamp"]) if meta.get("creationTimestamp") else None
        if created is not None and (state.service_time is None or created > state.service_time):
            changed.append(created)
        self._states[key] = _ServiceState(created, pod_times)
        if previous is None:
            return created
        return min(changed) if changed else None

    def delete_service(self, namespace: str, name: str) -> None:
        self._states.pop(f"{namespace}/{name}", None)
