"""A pass that runs when woken, and at least every ``interval`` seconds.

Several loops inside the apiserver keep something in line with the store: commit hooks call
:meth:`WakeableLoop.kick` (cheap, on the event loop), and the loop runs its pass soon after,
once for any number of kicks; the interval catches what no kick announced. A pass that raises
is logged and the next kick or interval retries it: the loop itself never dies. This is
client-go's ``wait.Until`` with a wake-up channel, as upstream's repair loops and the
bootstrap controller run.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Callable

from kubesvc.util.aio import wait_event

log = logging.getLogger("kubesvc")


class WakeableLoop:
    def __init__(self, work: Callable[[], object], interval: float, what: str):
        """``work`` is one pass (a plain function, or one returning an awaitable: a pass that
        reads the store); ``what`` names it in the log when it fails."""
        self.work = work
        self.interval = interval
        self.what = what
        self._wake = asyncio.Event()

    def kick(self) -> None:
        """Ask for a pass soon."""
        self._wake.set()

    async def run(self) -> None:
        """Wait for a kick (or the interval), run a pass; forever."""
        while True:
            await wait_event(self._wake, self.interval)
            self._wake.clear()
            try:
                outcome = self.work()
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:  # keep the loop alive; the next kick or interval retries
                log.exception("%s failed", self.what)
