"""Containers as processes: kubesvc's stand-in for a container runtime.

A container is its ``command``/``args`` run as a host process inside the Pod's network
namespace (``ip netns exec`` enters it and execs the command, so the PID we hold is the
container's), in a session of its own so a signal reaches every process it started, with the
container's environment and ``workingDir``; stdout and stderr are copied line by line into the
kubelet-format log file that ``kubectl logs`` reads (and to the clients of a ``kubectl attach``).
A container with ``stdin: true`` gets a pipe as its stdin, held open by the agent for attach
sessions (``stdinOnce``: closed when the first one ends); else stdin is /dev/null. With ``tty:
true`` its stdin, stdout and stderr are a pseudo-terminal (its log holds the one stream as stdout).
A container starts through the helper of ``kernel/mounts.py``: with volume mounts, in a mount
namespace of its own where they appear at their ``mountPath``s; in a UTS namespace of its own
named as the Pod's hostname; as the user and groups of its ``securityContext``. A step that
fails is the container's ``StartError``, reported back on a status pipe. There is no image:
``image`` is only reported back.

Stopping follows the container runtime's ``StopContainer(timeout)``: SIGTERM to the process
group, then SIGKILL when the grace period ends.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import signal
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kubesvc.agent.logs import ContainerLogFile, pump
from kubesvc.kernel import process as kprocess
from kubesvc.kernel.interactive import set_window_size
from kubesvc.kernel.mounts import DEFAULT_PATH, Identity, MountPlan, in_mount_namespace

log = logging.getLogger("kubesvc.agent")


class StartError(Exception):
    """The process could not be started (upstream: the runtime's ``StartError``, exit 128)."""


def find_executable(argv0: str, env: Mapping[str, str], cwd: str | None, root: str = "") -> str | None:
    """Where ``argv0`` resolves in the container's PATH (or relative to its working directory);
    ``root`` (``kernel.host.process_root``: a container's root) prefixes every path: the container's own view."""
    if "/" in argv0:
        path = Path(root + cwd if cwd else root or ".") / argv0 if not argv0.startswith("/") else Path(root + argv0)
        return str(path) if os.access(path, os.X_OK) and path.is_file() else None
    search = env.get("PATH", DEFAULT_PATH)
    return shutil.which(argv0, path=os.pathsep.join(root + d for d in search.split(os.pathsep)) if root else search)


def _read_to_end(fd: int) -> str:
    """What the mount helper reported before it exec'd the command ("" when it did)."""
    chunks = []
    try:
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode(errors="replace")


@dataclass
class Exit:
    code: int
    signal: int | None

    @property
    def reason(self) -> str:
        return "Completed" if self.code == 0 else "Error"


class ContainerProcess:
    """One run of one container."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], cwd: str | None, netns: str | None, log_path: Path,
                 mounts: MountPlan | None = None, identity: Identity | None = None, stdin: bool = False, stdin_once: bool = False,
                 tty: bool = False):
        self.argv = list(argv)
        self.env = dict(env)
        self.cwd = cwd or "/"
        self.netns = netns
        self.log_path = log_path
        self.mounts = mounts
        self.identity = identity
        self.container_id = f"kubesvc://{uuid.uuid4().hex}"
        # ``stdin: true``: the runtime holds the container's stdin open for ``kubectl attach``;
        # ``stdinOnce``: the first attach session to end closes it (the container reads EOF)
        self.stdin = stdin
        self.stdin_once = stdin_once
        self.tty = tty  # ``tty: true``: a pseudo-terminal as stdin, stdout and stderr (one output stream)
        self._listeners: set[Callable[[str, bytes], None]] = set()  # attached clients' output
        self._process: kprocess.Process | None = None
        self._pumps: list[asyncio.Task] = []
        self._log: ContainerLogFile | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def returncode(self) -> int | None:
        return self._process.returncode if self._process else None

    async def wait_exit(self) -> None:
        """Until the main process has exited (without collecting logs, unlike ``wait``)."""
        assert self._process is not None
        await self._process.wait()

    async def start(self) -> None:
        """Checks, log file and the process itself, each off the event loop (files are looked
        up and opened on a thread, the process forked on one: ``kernel.process.spawn``)."""
        if not self.argv:
            raise StartError("no command")
        self._log = await asyncio.to_thread(self._prepare)
        env = {"PATH": DEFAULT_PATH, **self.env}
        argv, status_read, status_write = self.argv, None, None
        helped = self.mounts is not None or (self.identity is not None and self.identity != Identity())
        if helped:
            status_read, status_write = os.pipe2(os.O_CLOEXEC)
            argv = in_mount_namespace(self.mounts, argv, cwd=self.cwd, status_fd=status_write, identity=self.identity or Identity())
        try:
            self._process = await kprocess.spawn(argv, env=env, cwd=self.cwd if not helped else "/", netns=self.netns,
                                                 pass_fds=(status_write,) if status_write is not None else (), stdin_pipe=self.stdin,
                                                 tty=self.tty)
        except OSError as exc:
            self._log.close()
            if status_read is not None:
                os.close(status_read)
            raise StartError(str(exc)) from None
        finally:
            if status_write is not None:
                os.close(status_write)
        self._pumps = [asyncio.create_task(pump(self._process.stdout, "stdout", self._log, self._to_listeners))]
        if self._process.stderr is not None:  # a terminal has one stream
            self._pumps.append(asyncio.create_task(pump(self._process.stderr, "stderr", self._log, self._to_listeners)))
        if status_read is not None:
            failure = await asyncio.to_thread(_read_to_end, status_read)
            if failure:
                await self.wait()
                raise StartError(failure)

    def _prepare(self) -> ContainerLogFile:
        """The runtime's checks before a start, then the log file (on a thread)."""
        if self.mounts is None:  # else the mount helper checks both in the container's view
            if not os.path.isdir(self.cwd):
                raise StartError(f'failed to create containerd task: chdir to cwd ("{self.cwd}") set in config.json failed: no such file or directory')
            if find_executable(self.argv[0], self.env, self.cwd) is None:
                raise StartError(f'exec: "{self.argv[0]}": executable file not found in $PATH')
        return ContainerLogFile(self.log_path)

    # -- attach (the runtime's Attach: live output, and stdin when the container has one)

    def _to_listeners(self, stream: str, chunk: bytes) -> None:
        for listener in list(self._listeners):
            listener(stream, chunk)

    def listen(self, listener: Callable[[str, bytes], None]) -> Callable[[], None]:
        """``listener(stream, chunk)`` for everything the container prints from now on; returns
        the call that stops it."""
        self._listeners.add(listener)
        return lambda: self._listeners.discard(listener)

    @property
    def stdin_fd(self) -> int | None:
        """The write end of the container's stdin (non-blocking), None without one or once closed."""
        return self._process.stdin if self._process is not None else None

    def resize(self, width: int, height: int) -> None:
        """An attached client's terminal size, for a container with a terminal."""
        if self.tty and self._process is not None and self._process.stdin is not None:
            set_window_size(self._process.stdin, width, height)

    def close_stdin(self) -> None:
        if self._process is not None and self._process.stdin is not None:
            os.close(self._process.stdin)
            self._process.stdin = None

    async def wait(self) -> Exit:
        assert self._process is not None
        code = await self._process.wait()
        self.close_stdin()
        # a container ends with its main process: what it left running in its group goes too
        # (it would otherwise outlive the Pod's namespace, where nothing could find it)
        self.signal(signal.SIGKILL)
        await asyncio.wait(self._pumps, timeout=1.0)
        for task in self._pumps:
            task.cancel()
        if self._log is not None:
            self._log.close()
        if code < 0:
            return Exit(128 - code, -code)  # shells report a signal death as 128+N
        return Exit(code, None)

    def signal(self, sig: int) -> None:
        """``sig`` to the container's whole process group (its children too, even after the
        main process has exited)."""
        if self._process is not None:
            kprocess.kill_group(self._process.pid, sig)

    async def stop(self, grace: float) -> Exit:
        """SIGTERM, then SIGKILL after ``grace`` seconds (the runtime's StopContainer)."""
        assert self._process is not None
        if self._process.returncode is None:
            self.signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(self._process.wait()), timeout=max(grace, 0.0))
            except asyncio.TimeoutError:
                self.signal(signal.SIGKILL)
        else:
            self.signal(signal.SIGKILL)  # leftovers of the group
        return await self.wait()



_LOG_FILE = re.compile(r"^(\d+)\.log(\..*)?")


def restart_count_from_log_dir(log_dir: Path) -> int:
    """kuberuntime's ``calcRestartCountByLogDir``: the restart count of a container's next
    attempt when the runtime remembers none (a node or, here, an agent restart): one more than
    the highest ``N`` of the ``N.log`` files (rotated ``N.log.*`` too) its attempts left; 0
    without any."""
    try:
        names = [entry.name for entry in os.scandir(log_dir) if not entry.is_dir()]
    except OSError:
        return 0
    counts = [int(match.group(1)) + 1 for name in names if (match := _LOG_FILE.match(name))]
    return max(counts, default=0)
