"""Host processes the agent starts: containers and exec probes (the container runtime's
``CreateContainer``/``StartContainer`` and ``ExecSync``, which kubesvc does with plain processes).

Each runs in a session (and so a process group) of its own, so a signal to the group reaches
everything it started, even after its main process has exited; stdin is /dev/null and stdout
is piped (stderr piped too, or merged into stdout as an exec probe's output is). Inside a Pod's
network namespace it runs through ``ip netns exec NAME``, which enters the namespace and then
*execs* the command, so the pid we hold is the command's own (``kernel.exec.in_netns``); an exec
into a running container is ``nsenter`` over that container's pid (``kernel.mounts.in_container``).

``spawn`` raises ``OSError`` when the command cannot be started at all (the runtime's
``StartError``, or an exec probe's "unknown" result, for the callers to decide). ``alive`` and
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
import os
import signal
import time
from collections.abc import Mapping, Sequence

from kubesvc.kernel.exec import in_netns

Process = asyncio.subprocess.Process


PR_SET_PDEATHSIG = 1  # linux/prctl.h


async def spawn(argv: Sequence[str], *, env: Mapping[str, str], cwd: str, netns: str | None = None, merge_stderr: bool = False,
                pass_fds: Sequence[int] = (), die_with_parent: bool = False) -> Process:
    """``argv`` started in a session of its own (inside network namespace ``netns`` if given),
    stdin /dev/null, stdout piped, stderr piped or (``merge_stderr``) into stdout; ``pass_fds``
    stay open in the child; with ``die_with_parent`` it gets SIGKILL when this process dies."""
    pipe = asyncio.subprocess.PIPE
    return await asyncio.create_subprocess_exec(
        *in_netns(netns, argv), env=dict(env), cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=pipe,
        stderr=asyncio.subprocess.STDOUT if merge_stderr else pipe, start_new_session=True, pass_fds=tuple(pass_fds),
        preexec_fn=_death_signal(os.getpid()) if die_with_parent else None)


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
    """Whether process ``pid`` exists (signal 0; one we may not signal exists too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
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
