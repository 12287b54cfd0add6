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
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Mapping, Sequence

from kubesvc.kernel.exec import in_netns

Process = asyncio.subprocess.Process


async def spawn(argv: Sequence[str], *, env: Mapping[str, str], cwd: str, netns: str | None = None, merge_stderr: bool = False,
                pass_fds: Sequence[int] = ()) -> Process:
    """``argv`` started in a session of its own (inside network namespace ``netns`` if given),
    stdin /dev/null, stdout piped, stderr piped or (``merge_stderr``) into stdout; ``pass_fds``
    stay open in the child."""
    pipe = asyncio.subprocess.PIPE
    return await asyncio.create_subprocess_exec(
        *in_netns(netns, argv), env=dict(env), cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=pipe,
        stderr=asyncio.subprocess.STDOUT if merge_stderr else pipe, start_new_session=True, pass_fds=tuple(pass_fds))


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
