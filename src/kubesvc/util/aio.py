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
from collections.abc import Iterable


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


async def cancel_and_wait(tasks: Iterable[asyncio.Future], *, raise_errors: bool = False) -> None:
    """Cancel ``tasks`` and wait until every one has finished (a component's ``stop()``).

    The caller's own cancellation is never swallowed (``asyncio.wait``; the common
    ``with suppress(CancelledError): await task`` swallows the caller's cancellation along with
    the task's). A task that ended with an error other than its cancellation: the first such
    error is raised with ``raise_errors``, else dropped as ``gather(..., return_exceptions=True)``
    drops it (retrieved either way, so asyncio does not log it as never retrieved)."""
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    await asyncio.wait(tasks)
    errors = [task.exception() for task in tasks if not task.cancelled()]
    first = next((error for error in errors if error is not None), None)
    if raise_errors and first is not None:
        raise first
