"""core/v1 Events as data: the reference to the object an Event is about, and a new Event.

Shared by the apiserver's own loops (written through the registry) and the controllers
(written through the REST client), so both spell Events as client-go's recorder does: in the
namespace of the object (``default`` for cluster-scoped objects), named
``<object>.<hex nanoseconds>``, ``count`` 1 until a repeat bumps it.

:func:`record_steps` is the one recording flow both recorders run (client-go's
``EventCorrelator`` aggregation, simplified to exact repeats), free of I/O: a repeat of a
recorded Event is a :class:`Bump` of its ``count`` (from the recorder's cache, as the
correlator does) and ``lastTimestamp``; a first one, or a repeat whose Event is gone
(:data:`NOT_FOUND`), a :class:`Create` under ``<object>.<hex nanoseconds>``, the next
nanosecond on a name clash (:data:`ALREADY_EXISTS`), at most 8 times. The transport (the
registry in-process, the REST client outside) carries each step out and sends back the stored
Event or the outcome; :func:`run_steps` drives the flow synchronously, the async recorder
drives it with awaits. The recorder's cache is a :class:`RecordedEvents`, bounded as the
correlator's LRU caches are (``maxLruCacheEntries``, 4096): a scheduler that binds a million
Pods keeps the last 4096 Events it recorded, not every one (a repeat of an Event evicted from
it is created anew, as upstream's).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Generator
from dataclasses import dataclass
from datetime import datetime

from kubesvc.util.golang import rfc3339


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


def event_namespace(ref: dict) -> str:
    return ref.get("namespace") or "default"


def event_name(ref: dict, now: datetime, attempt: int = 0) -> str:
    """``<object>.<hex nanoseconds>``; a clash (two Events in one nanosecond) takes the next."""
    return f"{ref['name']}.{int(now.timestamp() * 1e9) + attempt:x}"


def new_event(ref: dict, type_: str, reason: str, message: str, *, component: str, action: str, now: datetime) -> dict:
    event = {
        "metadata": {"name": event_name(ref, now), "namespace": event_namespace(ref)},
        "involvedObject": ref,
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "firstTimestamp": rfc3339(now),
        "lastTimestamp": rfc3339(now),
        "count": 1,
        "type": type_,
        "reportingComponent": component,
        "reportingInstance": "",
    }
    if action:
        event["action"] = action
    return event


MAX_RECORDED = 4096  # client-go tools/record maxLruCacheEntries


class RecordedEvents:
    """Repeat key -> the stored Event, the ``MAX_RECORDED`` most recently used (an LRU, as the
    correlator's caches): what ``record_steps`` reads and writes."""

    def __init__(self, size: int = MAX_RECORDED):
        self.size = size
        self._events: OrderedDict[tuple, dict] = OrderedDict()

    def get(self, key: tuple) -> dict | None:
        event = self._events.get(key)
        if event is not None:
            self._events.move_to_end(key)
        return event

    def __setitem__(self, key: tuple, event: dict) -> None:
        self._events[key] = event
        self._events.move_to_end(key)
        if len(self._events) > self.size:
            self._events.popitem(last=False)

    def __len__(self) -> int:
        return len(self._events)

    def __contains__(self, key: tuple) -> bool:
        return key in self._events


def repeat_key(ref: dict, type_: str, reason: str, message: str) -> tuple:
    """Events equal under this key are one Event with a growing ``count``."""
    return (ref.get("uid") or ref["name"], type_, reason, message)


# ---- the recording flow, transport injected ------------------------------------------------------

NOT_FOUND = "NotFound"  # a Bump's Event is gone (404)
ALREADY_EXISTS = "AlreadyExists"  # a Create's name is taken (409)
_NAME_ATTEMPTS = 8


@dataclass(frozen=True)
class Bump:
    """Set ``count`` and ``lastTimestamp`` of Event ``namespace/name``."""
    namespace: str
    name: str
    count: int
    last_timestamp: str


@dataclass(frozen=True)
class Create:
    event: dict


Step = Bump | Create
# yields steps, is sent each step's outcome (the stored Event, NOT_FOUND or ALREADY_EXISTS)
Steps = Generator[Step, "dict | str", None]


def record_steps(recorded: "RecordedEvents | dict[tuple, dict]", obj: dict, type_: str, reason: str, message: str, *,
                 component: str, action: str, now: datetime) -> Steps:
    """One occurrence as steps; ``recorded`` (repeat key -> stored Event) is the recorder's
    cache, updated with what the transport stored. Any other failure the transport raises."""
    ref = object_reference(obj)
    key = repeat_key(ref, type_, reason, message)
    existing = recorded.get(key)
    if existing is not None:
        count = int(existing.get("count") or 1) + 1
        outcome = yield Bump(event_namespace(ref), existing["metadata"]["name"], count, rfc3339(now))
        if outcome != NOT_FOUND:
            recorded[key] = outcome
            return
    event = new_event(ref, type_, reason, message, component=component, action=action, now=now)
    for attempt in range(_NAME_ATTEMPTS):
        event["metadata"]["name"] = event_name(ref, now, attempt)
        outcome = yield Create(event)
        if outcome != ALREADY_EXISTS:
            recorded[key] = outcome
            return


def run_steps(steps: Steps, carry_out: Callable[[Step], "dict | str"]) -> None:
    """Drive ``steps`` with a synchronous transport."""
    try:
        step = next(steps)
        while True:
            step = steps.send(carry_out(step))
    except StopIteration:
        pass
