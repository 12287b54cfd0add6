"""Talking to a process a user drives: what ``kubectl exec -i``/``-t`` and ``kubectl attach``
write into a command or container that ``kernel.process.spawn`` started with a stdin pipe
(``stdin_pipe``) or on a pseudo-terminal (``tty``), and how a terminal is resized.

The fds are non-blocking and served by the event loop: :func:`write` waits while a pipe or
terminal is full (a command that does not read its input holds the writer, not the loop).
:func:`set_window_size` is ``TIOCSWINSZ`` on a terminal's master, which the kernel forwards to
the process group in the foreground as ``SIGWINCH``: a shell redraws, ``stty size`` tells.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import struct
import termios


def set_window_size(master: int, width: int, height: int) -> None:
    """A terminal resize; a closed terminal is ignored."""
    with contextlib.suppress(OSError):
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))


async def write(fd: int, data: bytes) -> None:
    """All of ``data`` to non-blocking ``fd``, waiting while it is full (``BrokenPipeError``
    when the reader is gone)."""
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
            continue
        except BlockingIOError:
            pass
        ready = loop.create_future()
        loop.add_writer(fd, lambda: ready.done() or ready.set_result(None))
        try:
            await ready
        finally:
            loop.remove_writer(fd)
