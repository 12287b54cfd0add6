"""Network namespaces: which one we are in, and running a function inside a named one.

A network namespace is a kernel object named by the inode (and device) of its ``nsfs`` file:
``/proc/self/ns/net`` for ours, ``/run/netns/NAME`` for one ``ip netns add`` created (iproute2
bind-mounts the nsfs file there). Two paths name the same namespace exactly when ``stat`` gives
the same ``(st_dev, st_ino)`` pair, which is what ``ip netns identify`` compares too.

``setns(2)`` with ``CLONE_NEWNET`` moves only the *calling thread*, so :func:`call_in` runs a
function on a fresh thread that enters the namespace, and switches back before the thread ends.
Everything bound to a namespace at creation (a socket, a netlink socket, an open
``/proc/sys/net`` file) keeps it for its whole life, whichever thread later uses it; this is how
pyroute2's ``NetNS`` and the sysctl writes of :mod:`kubesvc.kernel.sysctl` reach a namespace
without an ``ip netns exec`` child process. :func:`on_thread` (and ``on_thread_async``) always
uses a fresh thread, in the *caller's thread's* namespace when none is named: pyroute2's blocking
API runs an asyncio loop of its own, which cannot run on a thread whose loop is running.

Named namespaces are made as ``ip netns add`` makes them (``netns/netns.c``): ``/run/netns``
made a shared mount point (bind-mounted onto itself first if needed, which pyroute2's
``netns.attach`` does), an empty file created there, ``unshare(CLONE_NEWNET)`` (on a throw-away
thread: it moves the calling thread only) and the thread's ``/proc/thread-self/ns/net``
bind-mounted onto the file. ``ip netns del`` is a lazy unmount and an unlink; the namespace lives
on while a process is inside, which is why :func:`pids_in` finds them as ``ip netns pids``
does: every ``/proc/PID/ns/net`` with the namespace's inode. ``Namespaces`` is this module's
interface; ``kernel/fake/links.py``'s ``FakeNetwork`` its stateful fake.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

CLONE_NEWNET = 0x40000000
NETNS_RUN_DIR = "/run/netns"
SELF = "/proc/self/ns/net"
_THREAD_SELF = "/proc/thread-self/ns/net"

T = TypeVar("T")

_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class NetnsId:
    """A network namespace's identity: the device and inode of its nsfs file."""

    dev: int
    ino: int

    def __str__(self) -> str:
        return f"net:[{self.ino}] (dev {self.dev})"


def netns_path(name: str) -> str:
    """The nsfs file of a named namespace (``ip netns add NAME``); a path is kept as it is."""
    return name if "/" in name else f"{NETNS_RUN_DIR}/{name}"


def identify(path: str = SELF) -> NetnsId:
    """The identity of the namespace whose nsfs file is ``path`` (default: this process's)."""
    st = os.stat(path)
    return NetnsId(st.st_dev, st.st_ino)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def _open(target: str | int) -> int:
    return os.dup(target) if isinstance(target, int) else os.open(netns_path(target), os.O_RDONLY)


def entered(target: str | int, fn: Callable[..., T], *args) -> T:
    """``fn(*args)`` on *this* thread after entering ``target`` (a name, an nsfs path or an open
    nsfs fd), switching back afterwards: the one ``setns`` of the package. For a thread that must
    stay the same (``kernel.netlink``'s netlink thread opens each namespace's socket this way);
    ``call_in``/``on_thread`` give a fresh one."""
    original = os.open(_THREAD_SELF, os.O_RDONLY)
    try:
        fd = _open(target)
        try:
            _setns(fd)
            try:
                return fn(*args)
            finally:
                _setns(original)
        finally:
            os.close(fd)
    finally:
        os.close(original)


def _on_new_thread(name: str, fn: Callable[..., T], *args) -> T:
    outcome: dict = {}

    def body() -> None:
        try:
            outcome["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome["error"] = exc

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def call_in(netns: str | None, fn: Callable[..., T], *args) -> T:
    """``fn(*args)``, inside network namespace ``netns`` (a name under /run/netns or an nsfs
    path) on a thread of its own; directly on this thread for None. Returns ``fn``'s result or
    raises its exception (``OSError`` if the namespace cannot be entered)."""
    if netns is None:
        return fn(*args)
    return _on_new_thread(f"netns-{netns}", entered, netns, fn, *args)


def on_thread(netns: str | None, fn: Callable[..., T], *args) -> T:
    """``fn(*args)`` on a fresh thread inside ``netns``, or (None) inside the namespace of the
    calling thread, whatever namespace the process's other threads are in."""
    if netns is not None:
        return call_in(netns, fn, *args)
    here = os.open(_THREAD_SELF, os.O_RDONLY)
    try:
        return _on_new_thread("netns-here", entered, here, fn, *args)
    finally:
        os.close(here)


async def on_thread_async(netns: str | None, fn: Callable[..., T], *args) -> T:
    """``on_thread`` without blocking the event loop (the namespace of None is the loop thread's)."""
    here = os.open(_THREAD_SELF, os.O_RDONLY) if netns is None else None
    try:
        return await asyncio.to_thread(entered, netns if here is None else here, fn, *args)
    finally:
        if here is not None:
            os.close(here)


# ---------------------------------------------------------------------------------------------
# named namespaces (ip netns add / del / list / pids)


def names(run_dir: str = NETNS_RUN_DIR) -> list[str]:
    """The named namespaces (``ip netns list``), sorted."""
    try:
        return sorted(entry for entry in os.listdir(run_dir) if not entry.startswith("."))
    except FileNotFoundError:
        return []


def exists(name: str) -> bool:
    return os.path.exists(netns_path(name))


def _unshare_and_attach(name: str) -> None:
    from pyroute2 import netns as p2netns

    if _libc.unshare(CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")
    try:
        p2netns.attach(name, "thread-self", libc=_libc)  # its own default finds libc with ldconfig: a process
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(netns_path(name))
        raise


def create(name: str) -> None:
    """``ip netns add NAME``: a new network namespace, kept by a bind mount under /run/netns
    (``FileExistsError`` if the name is taken). The namespace is made on a throw-away thread."""
    _on_new_thread(f"netns-add-{name}", _unshare_and_attach, name)


def remove(name: str) -> None:
    """``ip netns del NAME``: detach the bind mount and remove the name (``FileNotFoundError``
    if there is none; ``OSError`` EBUSY... as the kernel says)."""
    path = netns_path(name)
    if _libc.umount2(path.encode(), 2) != 0:  # MNT_DETACH
        err = ctypes.get_errno()
        if err != 22:  # EINVAL: not a mount point (a half-made name): unlink it anyway
            raise OSError(err, f"umount {path}: {os.strerror(err)}")
    os.unlink(path)


def name_of(ident: NetnsId, run_dir: str = NETNS_RUN_DIR) -> str | None:
    """The name under ``run_dir`` of the namespace ``ident``, if it has one."""
    for entry in names(run_dir):
        with contextlib.suppress(OSError):
            if identify(f"{run_dir}/{entry}") == ident:
                return entry
    return None


def current_name(run_dir: str = NETNS_RUN_DIR) -> str | None:
    """The name (under /run/netns) of the calling thread's network namespace, if it has one."""
    return name_of(identify(_THREAD_SELF), run_dir)


def pids_in(name: str) -> list[int]:
    """Every process inside namespace ``name`` (``ip netns pids``: each ``/proc/PID/ns/net``
    with its inode)."""
    target = identify(netns_path(name))
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if identify(f"/proc/{entry}/ns/net") == target:
                    found.append(int(entry))
    return found


def kill_all_in(name: str) -> list[int]:
    """SIGKILL every process inside namespace ``name``; the pids signalled."""
    killed = []
    for pid in pids_in(name):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


class Namespaces(Protocol):
    """The named network namespaces as one interface: this module itself is one (``from
    kubesvc.kernel import netns``); ``kernel.fake.links.FakeNetwork`` is its stateful fake."""

    def names(self) -> list[str]: ...
    def exists(self, name: str) -> bool: ...
    def create(self, name: str) -> None: ...
    def remove(self, name: str) -> None: ...
    def current_name(self) -> str | None: ...
    def pids_in(self, name: str) -> list[int]: ...
    def kill_all_in(self, name: str) -> list[int]: ...
