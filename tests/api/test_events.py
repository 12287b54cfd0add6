"""api.events.record_steps: the Event recording flow both recorders run (the apiserver's over the
registry, the controllers' over the REST client), driven here by a dict of Events."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from kubesvc.api.events import (ALREADY_EXISTS, MAX_RECORDED, NOT_FOUND, Bump, Create, RecordedEvents, object_reference, record_steps,
                                repeat_key, run_steps)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
POD = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "namespace": "ns", "uid": "u1"}}


class Store:
    """Events by (namespace, name); taken names refused; every step written down."""

    def __init__(self, taken=()):
        self.events: dict[tuple, dict] = {key: {} for key in taken}
        self.steps: list = []
        self.created: list[str] = []  # the names asked for, in order

    def carry_out(self, step):
        self.steps.append(step)
        if isinstance(step, Bump):
            event = self.events.get((step.namespace, step.name))
            if event is None:
                return NOT_FOUND
            event.update(count=step.count, lastTimestamp=step.last_timestamp)
            return dict(event)
        key = (step.event["metadata"]["namespace"], step.event["metadata"]["name"])
        self.created.append(key[1])
        if key in self.events:
            return ALREADY_EXISTS
        self.events[key] = dict(step.event, metadata=dict(step.event["metadata"]))
        return dict(self.events[key])


def record(store, recorded, message="m", now=NOW):
    run_steps(record_steps(recorded, POD, "Normal", "Reason", message, component="c", action="", now=now), store.carry_out)


def test_a_first_event_is_created_and_an_exact_repeat_bumps_it():
    store, recorded = Store(), {}
    record(store, recorded)
    record(store, recorded, now=NOW.replace(second=9))
    record(store, recorded, message="other", now=NOW.replace(second=7))
    assert [type(s).__name__ for s in store.steps] == ["Create", "Bump", "Create"]
    (name, first), (_, other) = sorted(store.events.items())[0], sorted(store.events.items())[1]
    assert first["count"] == 2 and first["lastTimestamp"] == "2026-01-02T03:04:09Z" and first["firstTimestamp"] == "2026-01-02T03:04:05Z"
    assert other["message"] == "other" and other["count"] == 1


def test_a_name_clash_takes_the_next_nanosecond():
    first = f"p.{int(NOW.timestamp() * 1e9):x}"
    store = Store(taken=[("ns", first)])
    record(store, {})
    assert store.created == [first, f"p.{int(NOW.timestamp() * 1e9) + 1:x}"]
    assert all(isinstance(s, Create) for s in store.steps)


def test_a_repeat_whose_event_is_gone_creates_it_again():
    store, recorded = Store(), {}
    record(store, recorded)
    store.events.clear()
    record(store, recorded)
    assert [type(s).__name__ for s in store.steps] == ["Create", "Bump", "Create"]
    assert [e["count"] for e in store.events.values()] == [1]


def test_eight_clashes_give_up_without_recording():
    base = int(NOW.timestamp() * 1e9)
    store, recorded = Store(taken=[("ns", f"p.{base + i:x}") for i in range(8)]), {}
    record(store, recorded)
    assert len(store.steps) == 8 and recorded == {}


def test_the_recorded_events_are_the_last_4096_used():
    """The recorder's cache is bounded as client-go's correlator LRU (maxLruCacheEntries 4096):
    4096 + 10 distinct Events leave 4096 remembered, a repeat of a recent one still bumps its
    Event, a repeat of one evicted long ago is created anew, and a repeat keeps its entry fresh."""
    store, recorded = Store(), RecordedEvents()
    for i in range(MAX_RECORDED + 10):
        record(store, recorded, message=f"m{i}", now=NOW + timedelta(microseconds=i))
    assert MAX_RECORDED == 4096 and len(recorded) == 4096 and len(store.events) == 4106
    store.steps.clear()
    record(store, recorded, message="m4105", now=NOW + timedelta(seconds=1))  # recent: a bump
    assert [type(s) for s in store.steps] == [Bump]
    store.steps.clear()
    record(store, recorded, message="m0", now=NOW + timedelta(seconds=2))  # evicted: a new Event (m11 goes)
    assert [type(s) for s in store.steps] == [Create]
    small = RecordedEvents(size=2)
    for step, message in enumerate("abac"):  # a used again: b is then the oldest
        record(store, small, message=message, now=NOW + timedelta(seconds=3 + step))
    assert [m in small for m in (repeat_key(object_reference(POD), "Normal", "Reason", x) for x in "abc")] == [True, False, True]
