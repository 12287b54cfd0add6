"""Host processes the agent starts: containers and exec probes (the container runtime's
``CreateContainer``/``StartContainer`` and ``ExecSync``, which kubesvc does with plain processes).

Each runs in a session (and so a process group) of its own, so a signal to the group reaches
everything it started, even after its main process has exited; stdin is /dev/null and stdout
is piped (stderr piped too, or merged into stdout as an exec probe's output is). Inside a Pod's
network namespace it runs through ``ip netns exec NAME``, which enters the namespace and then
*execs* the command, so the pid we hold is the command's own (``kernel.exec.in_netns``); an exec
into a running container is ``nsenter`` over that container's pid (``kernel.mounts.in_container``).

``spawn`` raises ``OSError`` when the command cannot be started at all (the runtime's
``StartError``, or an exec probe's "unknown" result, for the callers to decide).

The fork and exec happen on a worker thread, never on the event loop's: ``asyncio`` (and uvloop,
whose libuv forks) would copy the whole agent's page tables on the loop thread for every
container and exec probe, holding every Pod's status write and probe meanwhile. CPython's
``subprocess`` uses ``vfork`` where it can; the caller's loop then reads the child's pipes, and
learns of its exit from a ``pidfd`` (Linux 5.3) becoming readable, reaping that pid alone. ``alive`` and
``terminate`` are what ``kubesvc down`` does to a ``kubesvc up`` still running.

``kubesvc up`` starts its components with ``die_with_parent``: the kernel sends them SIGKILL
when ``up`` dies (``prctl(PR_SET_PDEATHSIG)``, set between fork and exec), so a ``kill -9`` of
``up`` leaves what one process would (the Pods' processes, in sessions of their own, and the
kernel state ``kubesvc down`` removes), not components running on without their supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import os
import signal
import subprocess
import termios
import threading
import time
from collections.abc import Mapping, Sequence

from kubesvc.kernel.exec import in_netns
from kubesvc.kernel.interactive import set_window_size

PR_SET_PDEATHSIG = 1  # linux/prctl.h
PIPE_LIMIT = 2**16  # each pipe's StreamReader buffer (asyncio's default)


class Process:
    """A process ``spawn`` started, as its callers hold it (what they used of
    ``asyncio.subprocess.Process``): ``pid``, ``returncode`` (negative: killed by that signal),
    ``stdout``/``stderr`` stream readers (``stderr`` None when merged) and ``wait()``; ``stdin``
    is the non-blocking write end of its stdin pipe when it was started with one (the caller
    owns and closes it), else None."""

    def __init__(self, popen: subprocess.Popen, stdout: asyncio.StreamReader, stderr: asyncio.StreamReader | None,
                 exited: asyncio.Future, stdin: int | None = None):
        self._popen = popen
        self.stdout = stdout
        self.stderr = stderr
        self.stdin = stdin
        self._exited = exited

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._exited.result() if self._exited.done() else None

    async def wait(self) -> int:
        """Until the process has exited; its exit code (negative: the signal that killed it)."""
        return await asyncio.shield(self._exited)


async def spawn(argv: Sequence[str], *, env: Mapping[str, str], cwd: str, netns: str | None = None, merge_stderr: bool = False,
                pass_fds: Sequence[int] = (), die_with_parent: bool = False, stdin_pipe: bool = False, tty: bool = False,
                window: tuple[int, int] | None = None) -> Process:
    """``argv`` started in a session of its own (inside network namespace ``netns`` if given),
    stdin /dev/null (a pipe with ``stdin_pipe``: a container with ``stdin: true``), stdout piped,
    stderr piped or (``merge_stderr``) into stdout; ``pass_fds`` stay open in the child; with
    ``die_with_parent`` it gets SIGKILL when this process dies. With ``tty`` (a container with
    ``tty: true``) stdin, stdout and stderr are a new pseudo-terminal, its controlling terminal:
    ``stdout`` reads the master, ``stdin`` writes it, ``stderr`` is None; ``window`` (width,
    height) is the terminal's size from the start.
    Forked on a worker thread (see the module docstring)."""
    loop = asyncio.get_running_loop()
    master = slave = None
    if tty:
        master, slave = os.openpty()
        if window is not None:
            set_window_size(master, *window)
        streams = {"stdin": slave, "stdout": slave, "stderr": slave}
    else:
        streams = {"stdin": subprocess.PIPE if stdin_pipe else subprocess.DEVNULL, "stdout": subprocess.PIPE,
                   "stderr": subprocess.STDOUT if merge_stderr else subprocess.PIPE}
    preexec = _in_child(([_death_signal(os.getpid())] if die_with_parent else []) + ([_controlling_terminal] if tty else []))
    starting = asyncio.ensure_future(asyncio.to_thread(
        subprocess.Popen, in_netns(netns, argv), env=dict(env), cwd=cwd, **streams, start_new_session=True, pass_fds=tuple(pass_fds),
        preexec_fn=preexec))
    try:
        popen = await asyncio.shield(starting)
    except asyncio.CancelledError:
        starting.add_done_callback(_abandon)  # started after all: nobody will hold it
        if master is not None:
            os.close(master)
        raise
    except BaseException:
        if master is not None:
            os.close(master)
        raise
    finally:
        if slave is not None:
            os.close(slave)
    return await _attach(loop, popen, master)


def _in_child(steps: list):
    """One ``preexec_fn`` running ``steps`` in order (None without any: ``vfork`` stays possible)."""
    if not steps:
        return None

    def run() -> None:
        for step in steps:
            step()

    return run


def _controlling_terminal() -> None:
    """In the child, after ``setsid``: the pseudo-terminal on fd 0 becomes its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _pty_reader(loop: asyncio.AbstractEventLoop, master: int) -> asyncio.StreamReader:
    """A stream reader of a pseudo-terminal's master (closed at its end). Not a pipe transport:
    a master whose every slave is closed reads ``EIO``, which is its end of file, not an error."""
    reader = asyncio.StreamReader(limit=PIPE_LIMIT, loop=loop)
    os.set_blocking(master, False)

    def readable() -> None:
        try:
            data = os.read(master, PIPE_LIMIT)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            reader.feed_data(data)
            return
        loop.remove_reader(master)
        os.close(master)
        reader.feed_eof()

    loop.add_reader(master, readable)
    return reader


async def _attach(loop: asyncio.AbstractEventLoop, popen: subprocess.Popen, tty_master: int | None = None) -> Process:
    """The loop's view of a started child: its pipes as stream readers, its exit from a pidfd."""
    exited = loop.create_future()
    pidfd = os.pidfd_open(popen.pid)

    def reap() -> None:
        try:
            pid, status = os.waitpid(popen.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: its status is lost
            pid, status = popen.pid, 255 << 8
        if pid == 0:
            return
        loop.remove_reader(pidfd)
        os.close(pidfd)
        popen.returncode = os.waitstatus_to_exitcode(status)  # so Popen never waits for it again
        if not exited.done():
            exited.set_result(popen.returncode)

    loop.add_reader(pidfd, reap)
    if tty_master is not None:
        stdin = os.dup(tty_master)
        os.set_blocking(stdin, False)
        return Process(popen, _pty_reader(loop, tty_master), None, exited, stdin)
    stdin = None
    if popen.stdin is not None:  # a plain non-blocking fd: writers wait on the loop (kernel.interactive.write)
        stdin = os.dup(popen.stdin.fileno())
        popen.stdin.close()
        os.set_blocking(stdin, False)
    return Process(popen, await _reader(loop, popen.stdout), await _reader(loop, popen.stderr) if popen.stderr else None, exited,
                   stdin)


async def _reader(loop: asyncio.AbstractEventLoop, pipe) -> asyncio.StreamReader:
    """A stream reader of a child's pipe (``pipe``, a file object), closed once at its end.

    Not ``loop.connect_read_pipe``: uvloop (0.23) hands libuv the file object's own descriptor,
    and both close it (MagicStack/uvloop#763): at end of file the transport stays open, and when
    it and the file object are collected, the file object closes the number first and libuv
    closes it again, by then often another descriptor this process opened meanwhile (a socket,
    a pidfd, the next child's pipe; libuv aborts on its own). The agent spawns a process per
    container and per exec probe run, so it met this all the time. Here the loop only watches
    the descriptor; we read it and close the file object, once."""
    reader = asyncio.StreamReader(limit=PIPE_LIMIT, loop=loop)
    _PipeReading(loop, pipe, reader)
    return reader


class _PipeReading:
    """The read end of a pipe feeding a StreamReader, as its transport: the reader pauses it
    past twice its limit and resumes it as it drains (the back-pressure a pipe transport gives)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, pipe, reader: asyncio.StreamReader):
        self.loop, self.pipe, self.reader = loop, pipe, reader
        self.fd = pipe.fileno()
        os.set_blocking(self.fd, False)
        self.reading = False
        reader.set_transport(self)
        self.resume_reading()

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, PIPE_LIMIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data:
            self.reader.feed_data(data)
            return
        self.close()
        self.reader.feed_eof()

    def pause_reading(self) -> None:
        if self.reading:
            self.reading = False
            self.loop.remove_reader(self.fd)

    def resume_reading(self) -> None:
        if not self.reading and not self.pipe.closed:
            self.reading = True
            self.loop.add_reader(self.fd, self._readable)

    def close(self) -> None:
        self.pause_reading()
        self.pipe.close()

    def is_closing(self) -> bool:
        return self.pipe.closed

    def get_extra_info(self, name: str, default=None):
        return {"pipe": self.pipe}.get(name, default)


def _abandon(starting: asyncio.Future) -> None:
    """A child whose ``spawn`` was cancelled while it was being started: killed with its group
    and reaped on a thread of its own."""
    if starting.cancelled() or starting.exception() is not None:
        return
    popen = starting.result()
    kill_group(popen.pid, signal.SIGKILL)
    threading.Thread(target=popen.wait, name=f"reap-{popen.pid}", daemon=True).start()


def _death_signal(parent: int):
    """The child's half of ``die_with_parent``: SIGKILL on the parent's death, and exit at once if
    the parent died before the request was made (the child was already re-parented)."""
    libc = ctypes.CDLL(None, use_errno=True)

    def in_child() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return in_child


def kill_group(pid: int, sig: int) -> None:
    """``sig`` to the process group ``pid`` leads (a process ``spawn`` started, and everything it
    started); a group already gone is fine."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (signal 0; one we may not signal exists too). A zombie (it
    exited; its parent has not reaped it yet) does not: signal 0 still reaches it, and waiting
    for it to go would wait out a whole grace period for nothing."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # "pid (comm) state ...": comm may hold spaces and parentheses, so the state is
            # the first field after the last ")"
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def terminate(pid: int, grace: float, poll: float = 0.1) -> None:
    """SIGTERM ``pid``, then SIGKILL if it still lives after ``grace`` seconds (blocking)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(poll)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
