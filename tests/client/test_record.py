"""The EventRecorder's sending (client-go's broadcaster feeding one sink): Events queued by
``event`` are written one after another in the order they were recorded, each stamped when it
was recorded; a repeat bumps the first one's count; past ``MAX_QUEUED`` waiting Events new ones
are dropped. The API is a fake that records what it was asked and how many writes overlapped."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from kubesvc.client import record
from kubesvc.client.record import EventRecorder
from kubesvc.util.clock import FakeClock


class FakeEvents:
    def __init__(self, delay: float = 0.0):
        self.delay = delay
        self.writes: list[tuple[str, dict]] = []
        self.stored: dict[str, dict] = {}
        self.in_flight = self.most_in_flight = 0

    async def _write(self, verb: str, body: dict) -> dict:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            self.writes.append((verb, body))
            return body
        finally:
            self.in_flight -= 1

    async def create(self, body: dict, namespace: str | None = None) -> dict:
        self.stored[body["metadata"]["name"]] = await self._write("create", body)
        return self.stored[body["metadata"]["name"]]

    async def patch(self, name: str, body: dict, namespace: str | None = None, *args) -> dict:
        await self._write("patch", body)
        self.stored[name] = {**self.stored[name], **body}
        return self.stored[name]


class FakeClient:
    def __init__(self, events: FakeEvents):
        self.events = events

    def resource(self, kind):
        return self.events


def pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}}


async def test_a_burst_is_written_one_at_a_time_in_order_stamped_when_recorded():
    events = FakeEvents(delay=0.01)
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=timezone.utc))
    recorder = EventRecorder(FakeClient(events), "default-scheduler", clock)
    for i in range(20):
        recorder.event(pod(f"p{i}"), "Normal", "Scheduled", f"Successfully assigned default/p{i} to n")
        clock.advance(1)
    await recorder.flush()
    assert events.most_in_flight == 1
    assert [body["involvedObject"]["name"] for _, body in events.writes] == [f"p{i}" for i in range(20)]
    assert events.writes[0][1]["firstTimestamp"] == "2026-01-01T00:00:00Z"
    assert events.writes[19][1]["firstTimestamp"] == "2026-01-01T00:00:19Z"


async def test_a_repeat_bumps_the_count():
    events = FakeEvents()
    recorder = EventRecorder(FakeClient(events), "kubelet")
    for _ in range(3):
        recorder.event(pod("web"), "Warning", "BackOff", "Back-off restarting failed container")
    await recorder.flush()
    assert [verb for verb, _ in events.writes] == ["create", "patch", "patch"]
    assert events.writes[-1][1]["count"] == 3


async def test_beyond_the_queue_new_events_are_dropped(monkeypatch):
    monkeypatch.setattr(record, "MAX_QUEUED", 5)
    events = FakeEvents(delay=0.01)
    recorder = EventRecorder(FakeClient(events), "kubelet")
    for i in range(12):
        recorder.event(pod(f"p{i}"), "Normal", "Started", "Started container c")
    await recorder.flush()
    assert [body["involvedObject"]["name"] for _, body in events.writes] == [f"p{i}" for i in range(5)]


async def test_events_wait_for_the_components_urgent_work_at_most_max_yield(monkeypatch):
    """``yield_to``: each write waits until the component's work is done (the scheduler: no
    binding in flight), or until MAX_YIELD after the Event was recorded."""
    monkeypatch.setattr(record, "MAX_YIELD", 0.3)
    events = FakeEvents()
    busy = asyncio.Event()  # set: the urgent work is done
    waited: list[float] = []

    async def until_done(deadline: float) -> None:
        loop = asyncio.get_running_loop()
        waited.append(deadline - loop.time())
        try:
            await asyncio.wait_for(busy.wait(), max(0.0, deadline - loop.time()))
        except TimeoutError:
            pass

    recorder = EventRecorder(FakeClient(events), "default-scheduler", yield_to=until_done)
    recorder.event(pod("a"), "Normal", "Scheduled", "Successfully assigned default/a to n")
    await asyncio.sleep(0.1)
    assert events.writes == []  # still busy: not written yet
    busy.set()
    await asyncio.sleep(0.05)
    assert [body["involvedObject"]["name"] for _, body in events.writes] == ["a"]

    busy.clear()  # busy for good: each Event goes out MAX_YIELD after it was recorded
    loop = asyncio.get_running_loop()
    began = loop.time()
    recorder.event(pod("b"), "Normal", "Scheduled", "Successfully assigned default/b to n")
    await recorder.flush()
    assert [body["involvedObject"]["name"] for _, body in events.writes] == ["a", "b"]
    assert 0.25 <= loop.time() - began < 1.0
    assert all(w <= 0.3 for w in waited)
