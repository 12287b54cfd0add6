"""Controller tests driven by hand: what a controller's work queue would hand its workers now."""

from __future__ import annotations


async def queued(controller) -> set[str]:
    """The keys a worker may take now from ``controller.queue`` (taken and marked done)."""
    keys = set()
    while len(controller.queue):
        key = await controller.queue.get()
        keys.add(key)
        controller.queue.done(key)
    return keys
