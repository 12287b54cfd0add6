"""asyncio helpers that hold on Python 3.11.

``asyncio.wait_for(event.wait(), timeout)`` loses a cancellation on Python 3.11 when the event
is set in the same loop iteration as the cancel arrives (CPython gh-86296, fixed in 3.12 when
``wait_for`` was rebuilt on ``asyncio.timeout``): ``wait_for`` sees its inner task done and
returns its result instead of raising ``CancelledError``. A loop that waits on a wake-up event
then goes round once more and sleeps its whole interval, and whoever cancelled it and awaits
it (a server's ``stop()``) hangs. ``asyncio.wait`` never swallows the caller's cancellation.
"""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass; True if it was set."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait((waiter,), timeout=timeout)
    finally:
        waiter.cancel()
    return event.is_set()
