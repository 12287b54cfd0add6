"""core/v1 Events as data: the reference to the object an Event is about, and a new Event.

Shared by the apiserver's own loops (written through the registry) and the controllers
(written through the REST client), so both spell Events as client-go's recorder does: in the
namespace of the object (``default`` for cluster-scoped objects), named
``<object>.<hex nanoseconds>``, ``count`` 1 until a repeat bumps it.
"""

from __future__ import annotations

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


def repeat_key(ref: dict, type_: str, reason: str, message: str) -> tuple:
    """Events equal under this key are one Event with a growing ``count``."""
    return (ref.get("uid") or ref["name"], type_, reason, message)
