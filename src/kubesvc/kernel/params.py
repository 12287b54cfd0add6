"""Kernel knobs that are not sysctls: a module parameter under ``/sys/module`` and a process's
``oom_score_adj`` under ``/proc``.

- ``nf_conntrack``'s ``hashsize`` (``/sys/module/nf_conntrack/parameters/hashsize``): the
  number of buckets of the connection-tracking hash table. kube-proxy keeps it at a quarter of
  ``nf_conntrack_max`` (upstream ``cmd/kube-proxy/app/conntrack.go``). It is one value for the
  whole host: the kernel refuses it from any network namespace but the initial one
  (``EOPNOTSUPP``), and a ``/sys`` mounted read-only (a known docker issue) gives ``EROFS``.
- ``oom_score_adj`` (``/proc/<pid>/oom_score_adj``, -1000..1000): how eagerly the OOM killer
  picks a process; kube-proxy sets its own to -999 (upstream ``pkg/util/oom``). Lowering it
  needs ``CAP_SYS_RESOURCE``.

Failures raise :class:`ParamFailed`, a ``CommandFailed`` carrying the path (as ``argv``), the
errno (as ``returncode``), the OS message and the value we tried to write.
"""

from __future__ import annotations

import errno as errno_

from kubesvc.kernel.exec import CommandFailed

CONNTRACK_HASHSIZE = "/sys/module/nf_conntrack/parameters/hashsize"


class ParamFailed(CommandFailed):
    """Reading or writing ``path`` failed; ``returncode`` is the errno."""

    def __init__(self, path: str, err: OSError, value: str | None = None):
        self.path = path
        reason = err.strerror or str(err)
        super().__init__((path,), err.errno or errno_.EIO, "", reason, value)
        verb = f"write {value!r} to" if value is not None else "read"
        self.args = (f"{verb} {path}: {reason}",)

    def __str__(self) -> str:
        return self.args[0]


def read_int(path: str) -> int:
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().strip())
    except OSError as err:
        raise ParamFailed(path, err) from err
    except ValueError as err:
        raise ParamFailed(path, OSError(errno_.EINVAL, f"not an integer: {err}")) from err


def write_int(path: str, value: int) -> None:
    try:
        with open(path, "w", encoding="ascii") as f:
            f.write(str(value))
    except OSError as err:
        raise ParamFailed(path, err, str(value)) from err


def conntrack_hashsize() -> int:
    return read_int(CONNTRACK_HASHSIZE)


def set_conntrack_hashsize(buckets: int) -> None:
    write_int(CONNTRACK_HASHSIZE, buckets)


def oom_score_adj_path(pid: int | str = "self") -> str:
    return f"/proc/{pid}/oom_score_adj"


def set_oom_score_adj(value: int, pid: int | str = "self") -> None:
    """Set a process's (by default our own) ``oom_score_adj``; raises :class:`ParamFailed`."""
    write_int(oom_score_adj_path(pid), value)
