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
"""

from __future__ import annotations

import asyncio
import os
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
