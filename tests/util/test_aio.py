"""wait_event keeps a cancellation that arrives as its event is set (CPython gh-86296)."""

import asyncio

import pytest

from kubesvc.util.aio import cancel_and_wait, wait_event


async def test_set_event_returns_true_and_timeout_false():
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_event(event, 5) is True


async def test_cancel_in_the_iteration_that_sets_the_event_is_not_lost():
    """The loop below is what every wake-up loop does; on 3.11 ``wait_for`` would return
    the event's result to it and it would go round and sleep an hour instead of ending."""
    event = asyncio.Event()
    rounds = []

    async def loop():
        while True:
            rounds.append(1)
            await wait_event(event, 3600)
            event.clear()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # the loop now waits on the event
    event.set()  # wakes the inner waiter ...
    await asyncio.sleep(0)  # ... which completes in this iteration
    task.cancel()  # and the cancel arrives before the loop resumes
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)


async def test_cancel_and_wait_ends_every_task_and_drops_or_raises_their_errors():
    async def forever():
        await asyncio.sleep(3600)

    async def fails_on_cancel():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    tasks = [asyncio.create_task(forever()), asyncio.create_task(fails_on_cancel())]
    await asyncio.sleep(0)
    await cancel_and_wait(tasks)
    assert all(task.done() for task in tasks) and tasks[0].cancelled()
    again = [asyncio.create_task(fails_on_cancel())]
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="cleanup failed"):
        await cancel_and_wait(again, raise_errors=True)
    await cancel_and_wait([])


async def test_cancel_and_wait_keeps_the_callers_cancellation():
    """A stop() cancelled while it waits for its tasks is cancelled, not resumed."""
    async def slow_to_stop():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(0.5)

    inner = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0)
    after = []

    async def stop():
        await cancel_and_wait([inner])
        after.append("went on")

    stopper = asyncio.create_task(stop())
    await asyncio.sleep(0.05)
    stopper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    assert after == []
    await asyncio.wait([inner])
