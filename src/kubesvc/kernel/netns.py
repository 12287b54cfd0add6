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
without an ``ip netns exec`` child process.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

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


def call_in(netns: str | None, fn: Callable[..., T], *args) -> T:
    """``fn(*args)``, inside network namespace ``netns`` (a name under /run/netns or an nsfs
    path) on a thread of its own; directly on this thread for None. Returns ``fn``'s result or
    raises its exception (``OSError`` if the namespace cannot be entered)."""
    if netns is None:
        return fn(*args)
    outcome: dict = {}

    def body() -> None:
        try:
            original = os.open(_THREAD_SELF, os.O_RDONLY)
            try:
                target = os.open(netns_path(netns), os.O_RDONLY)
                try:
                    _setns(target)
                    try:
                        outcome["value"] = fn(*args)
                    finally:
                        _setns(original)
                finally:
                    os.close(target)
            finally:
                os.close(original)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome["error"] = exc

    thread = threading.Thread(target=body, name=f"netns-{netns}", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
