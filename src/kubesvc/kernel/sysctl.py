"""Kernel parameters (``sysctl``) read and written through ``/proc/sys``, not sysctl(8).

``sysctl -w net.ipv4.ip_forward=1`` is nothing more than writing ``1`` to
``/proc/sys/net/ipv4/ip_forward``; upstream does the same (``k8s.io/component-helpers/node/util/
sysctl``: ``GetSysctl``/``SetSysctl`` read and write ``/proc/sys/<key with / for .>``). Keys are
accepted in either spelling, ``net.ipv4.ip_forward`` or ``net/ipv4/ip_forward``; a dotted key
whose component holds a dot itself (an interface ``eth0.100``) must be given in the slash form.

``net.*`` parameters belong to the network namespace of the thread that *opens* the file, so
``netns=NAME`` opens it from a thread inside that namespace (:func:`kubesvc.kernel.netns.call_in`);
no ``ip netns exec`` process is spawned. A failure raises :class:`SysctlFailed`, a
``CommandFailed`` carrying the path (as ``argv``), the errno (as ``returncode``), the OS message
and the value we tried to write. ``Sysctl`` is one namespace's parameters as one interface; its
stateful fake is ``kernel/fake/sysctl.py``.
"""

from __future__ import annotations

import asyncio
import errno as errno_

from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.netns import call_in

ROOT = "/proc/sys"


class SysctlFailed(CommandFailed):
    """Reading or writing ``path`` failed; ``returncode`` is the errno."""

    def __init__(self, key: str, path: str, err: OSError, value: str | None = None):
        self.key = key
        self.path = path
        code = err.errno or errno_.EIO
        reason = err.strerror or str(err)
        super().__init__((path,), code, "", reason, value)
        verb = f"write {value!r} to" if value is not None else "read"
        self.args = (f"sysctl {dotted(key)}: {verb} {path}: {reason}",)

    def __str__(self) -> str:
        return self.args[0]


def slashed(key: str) -> str:
    """``net.ipv4.ip_forward`` -> ``net/ipv4/ip_forward`` (a slash form is kept)."""
    return key.strip("/") if "/" in key else key.replace(".", "/")


def dotted(key: str) -> str:
    """The sysctl(8) spelling of ``key``, for messages."""
    return key.replace("/", ".") if "/" in key else key


def sysctl_path(key: str) -> str:
    return f"{ROOT}/{slashed(key)}"


def _read(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as f:
        return f.read().strip()


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(value)


def read_sysctl(key: str, *, netns: str | None = None) -> str:
    """The value of ``key`` (whitespace stripped); raises :class:`SysctlFailed`."""
    path = sysctl_path(key)
    try:
        return call_in(netns, _read, path)
    except OSError as err:
        raise SysctlFailed(key, path, err) from err


def write_sysctl(key: str, value: str | int, *, netns: str | None = None) -> None:
    """Set ``key`` to ``value``; raises :class:`SysctlFailed`."""
    path = sysctl_path(key)
    try:
        call_in(netns, _write, path, str(value))
    except OSError as err:
        raise SysctlFailed(key, path, err, str(value)) from err


def write_sysctls(settings: dict[str, str], *, netns: str | None = None) -> None:
    """Each of ``settings`` in order; stops at (and raises) the first failure."""
    for key, value in settings.items():
        write_sysctl(key, value, netns=netns)


async def read_sysctl_async(key: str, *, netns: str | None = None) -> str:
    """``read_sysctl`` without blocking the event loop when it must enter a namespace."""
    if netns is None:
        return read_sysctl(key)
    return await asyncio.to_thread(read_sysctl, key, netns=netns)


async def write_sysctl_async(key: str, value: str | int, *, netns: str | None = None) -> None:
    """``write_sysctl`` without blocking the event loop when it must enter a namespace."""
    if netns is None:
        write_sysctl(key, value)
        return
    await asyncio.to_thread(write_sysctl, key, value, netns=netns)


class Sysctl:
    """One namespace's kernel parameters (None: the calling thread's): the interface a caller
    holds; its stateful fake is ``kernel.fake.sysctl.FakeSysctl``."""

    def __init__(self, netns: str | None = None):
        self.netns = netns

    def read(self, key: str) -> str:
        return read_sysctl(key, netns=self.netns)

    def write(self, key: str, value: str | int) -> None:
        write_sysctl(key, value, netns=self.netns)

    async def read_async(self, key: str) -> str:
        return await read_sysctl_async(key, netns=self.netns)

    async def write_async(self, key: str, value: str | int) -> None:
        await write_sysctl_async(key, value, netns=self.netns)
