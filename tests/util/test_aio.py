"""wait_event keeps a cancellation that arrives as its event is set (CPython gh-86296)."""

import asyncio

import pytest

from kubesvc.util.aio import wait_event


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
