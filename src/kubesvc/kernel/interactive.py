"""A process a user talks to: what ``kubectl exec`` runs in a container (the container runtime's
``Exec`` with ``stdin``/``tty``; containerd hands runc a console or pipes).

Without a terminal the child's stdin is a pipe (or /dev/null when the client sends none) and
stdout/stderr are two pipes. With one (``tty=True``) the child gets the slave side of a new
pseudo-terminal as stdin, stdout and stderr and as its controlling terminal (it leads a session
of its own, ``setsid`` then ``TIOCSCTTY``), so shells prompt, echo and handle ^C as on a
terminal; the agent keeps the master: what the user types is written to it, what the child
prints is read from it (one stream: a terminal has no separate stderr), and a resize is
``TIOCSWINSZ`` on it, which the kernel forwards to the child as ``SIGWINCH``.

The argv is already the one that enters the container (``mounts.in_container``'s ``nsenter``,
or ``exec.in_netns``), both of which exec the command, so the pid held is the command's own and
its exit status the command's. The fork happens on a worker thread as in ``kernel.process``
(see there why), and the exit is learned from a ``pidfd``. All fds are non-blocking and served
by the event loop (``read``/``write`` below); a pseudo-terminal whose last writer is gone reads
``EIO``, which is its end of file.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import signal
import struct
import subprocess
import termios
from collections.abc import Mapping, Sequence

from kubesvc.kernel import process as kprocess


class Interactive:
    """The running child: ``stdin`` (fd to write, None without stdin), ``stdout``/``stderr``
    (fds to read; with a tty both are the master and ``stderr`` is None)."""

    def __init__(self, popen: subprocess.Popen, stdin: int | None, stdout: int, stderr: int | None, tty: bool):
        self._popen = popen
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.tty = tty
        self._exited: asyncio.Future | None = None

    @property
    def pid(self) -> int:
        return self._popen.pid

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        self._exited = loop.create_future()
        pidfd = os.pidfd_open(self._popen.pid)

        def reap() -> None:
            try:
                pid, status = os.waitpid(self._popen.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = self._popen.pid, 255 << 8
            if pid == 0:
                return
            loop.remove_reader(pidfd)
            os.close(pidfd)
            self._popen.returncode = os.waitstatus_to_exitcode(status)
            if not self._exited.done():
                self._exited.set_result(self._popen.returncode)

        loop.add_reader(pidfd, reap)

    async def wait(self) -> int:
        """The exit code; a death by signal N is 128 + N, as runc reports it."""
        assert self._exited is not None
        code = await asyncio.shield(self._exited)
        return 128 - code if code < 0 else code

    def resize(self, width: int, height: int) -> None:
        if self.tty:
            set_window_size(self.stdout, width, height)

    def close_stdin(self) -> None:
        """The client's stdin ended: a pipe is closed; a terminal gets ^D (end of input for a
        reader in canonical mode, as a user's ^D)."""
        if self.tty:
            with contextlib.suppress(OSError):
                os.write(self.stdout, b"\x04")
        elif self.stdin is not None:
            os.close(self.stdin)
            self.stdin = None

    def kill(self) -> None:
        """SIGKILL to its whole process group (the client went away)."""
        kprocess.kill_group(self._popen.pid, signal.SIGKILL)

    def close(self) -> None:
        for fd in {self.stdin, self.stdout, self.stderr} - {None}:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.stdin = None


def set_window_size(master: int, width: int, height: int) -> None:
    """A terminal resize (``TIOCSWINSZ`` on the master: the child gets ``SIGWINCH``); a closed
    terminal is ignored."""
    with contextlib.suppress(OSError):
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))


def _controlling_terminal() -> None:
    """In the child, after ``setsid``: the pty slave on fd 0 becomes its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


async def spawn_interactive(argv: Sequence[str], *, env: Mapping[str, str], cwd: str, stdin: bool, tty: bool) -> Interactive:
    """Start ``argv`` in a session of its own with pipes or (``tty``) a pseudo-terminal.
    ``OSError`` when it cannot be started at all."""
    loop = asyncio.get_running_loop()
    if tty:
        master, slave = os.openpty()
        try:
            popen = await asyncio.to_thread(subprocess.Popen, list(argv), env=dict(env), cwd=cwd, stdin=slave, stdout=slave,
                                            stderr=slave, start_new_session=True, preexec_fn=_controlling_terminal)
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        os.set_blocking(master, False)
        child = Interactive(popen, master, master, None, tty=True)
    else:
        popen = await asyncio.to_thread(subprocess.Popen, list(argv), env=dict(env), cwd=cwd,
                                        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, start_new_session=True)
        fds = [os.dup(f.fileno()) if f is not None else None for f in (popen.stdin, popen.stdout, popen.stderr)]
        for f in (popen.stdin, popen.stdout, popen.stderr):
            if f is not None:
                f.close()
        for fd in fds:
            if fd is not None:
                os.set_blocking(fd, False)
        child = Interactive(popen, fds[0], fds[1], fds[2], tty=False)
    child._watch(loop)
    return child


async def read(fd: int, size: int = 65536) -> bytes:
    """Some bytes from non-blocking ``fd``; b"" at end of file (``EIO`` on a pty master)."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            return os.read(fd, size)
        except BlockingIOError:
            pass
        except OSError as exc:
            if exc.errno == errno.EIO:
                return b""
            raise
        ready = loop.create_future()
        loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
        try:
            await ready
        finally:
            loop.remove_reader(fd)


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
