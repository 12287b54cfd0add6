"""Running the kernel tools (nft, iptables-restore, iptables-save, conntrack) as child
processes, with one error type for every failure (Felix's ``FailedSystemCall``): it carries the
argv, exit code, stdout, stderr and the input we fed, so a rejected transaction can be debugged
from the log alone.

Both a blocking and an asyncio form exist: syncs run the tool from the event loop
(``run``), while ``--cleanup`` and tests use ``run_sync``. ``in_netns`` builds the
``ip netns exec <netns>`` prefix every kernel module uses to run a tool in a named network
namespace. ``CleanupFailed`` is what every mode's ``cleanup_leftovers`` raises.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


# ip(8) as found in our own PATH, once: a command run in a namespace may carry an environment of
# its own (a container's PATH) that would not find it
IP = shutil.which("ip") or "ip"


def in_netns(netns: str | None, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside network namespace ``netns`` (``ip netns exec``); unchanged for None."""
    return [IP, "netns", "exec", netns, *argv] if netns else list(argv)


class CleanupFailed(Exception):
    """A mode's ``cleanup_leftovers`` could not remove everything; the message lists each failure."""

    def __init__(self, mode: str, errors: Sequence[str]):
        self.mode = mode
        self.errors = list(errors)
        super().__init__(f"{mode} cleanup: " + "; ".join(self.errors))


@dataclass
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class CommandFailed(Exception):
    def __init__(self, argv: Sequence[str], returncode: int, stdout: str, stderr: str, input_text: str | None = None):
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.input_text = input_text
        detail = stderr.strip() or stdout.strip() or "no output"
        super().__init__(f"{' '.join(self.argv)} failed (exit {returncode}): {detail}")

    @property
    def first_error_line(self) -> str:
        for line in self.stderr.splitlines():
            if line.strip():
                return line.strip()
        return ""


def _finish(argv: Sequence[str], code: int, out: bytes, err: bytes, input_text: str | None, check: bool) -> CommandResult:
    result = CommandResult(tuple(argv), code, out.decode(errors="replace"), err.decode(errors="replace"))
    if check and code != 0:
        raise CommandFailed(argv, code, result.stdout, result.stderr, input_text)
    return result


async def run(argv: Sequence[str], input_text: str | None = None, *, check: bool = True) -> CommandResult:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE if input_text is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    except FileNotFoundError as err:
        raise CommandFailed(argv, 127, "", str(err), input_text) from err
    out, err = await proc.communicate(input_text.encode() if input_text is not None else None)
    return _finish(argv, proc.returncode or 0, out, err, input_text, check)


def run_sync(argv: Sequence[str], input_text: str | None = None, *, check: bool = True,
             env: Mapping[str, str] | None = None) -> CommandResult:
    """``argv`` to completion (``env``: its whole environment, default ours)."""
    try:
        proc = subprocess.run(list(argv), input=input_text.encode() if input_text is not None else None,
                              stdin=None if input_text is not None else subprocess.DEVNULL, capture_output=True,
                              env=dict(env) if env is not None else None)
    except FileNotFoundError as err:
        raise CommandFailed(argv, 127, "", str(err), input_text) from err
    return _finish(argv, proc.returncode, proc.stdout, proc.stderr, input_text, check)
