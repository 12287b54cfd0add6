"""WorkQueue: de-duplication, one worker per key, delays and backoff on an injected clock."""

from __future__ import annotations

import asyncio

import pytest

from kubesvc.client.workqueue import ItemExponentialBackoff, ShutDown, WorkQueue
from kubesvc.util.clock import FakeClock


async def _nothing_ready(queue: WorkQueue) -> bool:
    """True if get() stays blocked for a moment (then the waiting get is cancelled)."""
    try:
        await asyncio.wait_for(queue.get(), 0.05)
    except asyncio.TimeoutError:
        return True
    return False


async def test_items_come_out_in_order_and_duplicates_collapse():
    queue = WorkQueue()
    for item in ("a", "b", "a", "c", "b"):
        queue.add(item)
    assert len(queue) == 3
    assert [await queue.get() for _ in range(3)] == ["a", "b", "c"]
    assert await _nothing_ready(queue)


async def test_item_re_added_while_processing_waits_for_done():
    queue = WorkQueue()
    queue.add("a")
    assert await queue.get() == "a"
    queue.add("a")
    queue.add("a")
    assert len(queue) == 0 and await _nothing_ready(queue)  # never two workers on one key
    queue.done("a")
    assert len(queue) == 1
    assert await queue.get() == "a"
    queue.done("a")
    assert len(queue) == 0


async def test_done_without_re_add_does_not_requeue():
    queue = WorkQueue()
    queue.add("a")
    queue.done(await queue.get())
    assert len(queue) == 0


async def test_waiting_get_wakes_on_add():
    queue = WorkQueue()
    waiter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.add("x")
    assert await asyncio.wait_for(waiter, 1) == "x"


async def test_two_workers_share_items_without_duplicates():
    queue = WorkQueue()
    got: list[str] = []

    async def worker():
        while True:
            try:
                item = await queue.get()
            except ShutDown:
                return
            got.append(item)
            await asyncio.sleep(0)
            queue.done(item)

    workers = [asyncio.create_task(worker()) for _ in range(2)]
    for i in range(20):
        queue.add(f"k{i % 10}")
        await asyncio.sleep(0)
    while len(queue):
        await asyncio.sleep(0.01)
    queue.shutdown()
    await asyncio.wait_for(asyncio.gather(*workers), 1)
    assert set(got) == {f"k{i}" for i in range(10)}


async def test_add_after_waits_for_the_clock():
    clock = FakeClock()
    queue = WorkQueue(clock=clock)
    queue.add_after("late", 10)
    queue.add_after("early", 5)
    assert len(queue) == 0
    clock.advance(5)
    assert len(queue) == 1 and await queue.get() == "early"
    clock.advance(5)
    assert await queue.get() == "late"


async def test_add_after_keeps_the_earliest_deadline_per_item():
    clock = FakeClock()
    queue = WorkQueue(clock=clock)
    queue.add_after("a", 10)
    queue.add_after("a", 2)
    queue.add_after("a", 30)
    clock.advance(2)
    assert await queue.get() == "a"
    queue.done("a")
    clock.advance(60)
    assert len(queue) == 0  # the superseded deadlines do not add it again


async def test_add_after_zero_is_add():
    queue = WorkQueue(clock=FakeClock())
    queue.add_after("now", 0)
    assert await queue.get() == "now"


async def test_delayed_item_is_handed_to_a_waiting_get_on_real_time():
    queue = WorkQueue()
    waiter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.add_after("soon", 0.05)
    assert await asyncio.wait_for(waiter, 1) == "soon"


@pytest.mark.parametrize(
    "failures, delay",
    [(0, 0.005), (1, 0.010), (2, 0.020), (10, 5.12), (17, 655.36), (18, 1000.0), (500, 1000.0)],
    ids=["first", "second", "third", "11th", "18th", "capped", "far-past-cap"],
)
def test_exponential_backoff_per_item(failures, delay):
    limiter = ItemExponentialBackoff()
    for _ in range(failures):
        limiter.when("x")
    assert limiter.when("x") == pytest.approx(delay)
    assert limiter.when("other") == pytest.approx(0.005)


async def test_rate_limited_adds_back_off_until_forgotten():
    clock = FakeClock()
    queue = WorkQueue(clock=clock)
    for expected_delay in (0.005, 0.010, 0.020):
        queue.add_rate_limited("k")
        clock.advance(expected_delay - 0.001)
        assert len(queue) == 0
        clock.advance(0.001)
        assert await queue.get() == "k"
        queue.done("k")
    assert queue.num_requeues("k") == 3
    queue.forget("k")
    assert queue.num_requeues("k") == 0
    queue.add_rate_limited("k")
    clock.advance(0.005)
    assert len(queue) == 1


async def test_shutdown_drains_then_raises_and_ignores_adds():
    clock = FakeClock()
    queue = WorkQueue(clock=clock)
    queue.add("queued")
    queue.add_after("delayed", 1)
    queue.shutdown()
    queue.add("ignored")
    clock.advance(5)
    assert await queue.get() == "queued"
    with pytest.raises(ShutDown):
        await queue.get()


async def test_shutdown_wakes_waiting_workers():
    queue = WorkQueue()
    waiters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await asyncio.sleep(0)
    queue.shutdown()
    results = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), 1)
    assert all(isinstance(r, ShutDown) for r in results)
