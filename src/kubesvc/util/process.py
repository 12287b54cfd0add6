"""What every ``kubesvc`` command does around its work: logging to stderr at ``-v`` levels,
uvloop where installed, and an event set by SIGINT/SIGTERM (the components stop cleanly on
either, as upstream's do)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys


def setup_logging(verbosity: int) -> None:
    level = logging.DEBUG if verbosity >= 4 else logging.INFO if verbosity >= 1 else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def install_uvloop() -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def stop_on_signals() -> asyncio.Event:
    """An event set on SIGINT or SIGTERM (call from inside the running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop

