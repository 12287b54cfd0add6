"""State one process on this node publishes for another to read: the userspace proxy's portals
(its listeners and what each will pick), read by ``kubesvc trace``.

Upstream's userspace kube-proxy kept its portals only in memory (``serviceMap`` of
``ServiceInfo{portal, proxyPort, socket}``): the only way to see one was ``iptables-save`` (the
``REDIRECT --to-ports`` of each portal) and ``ss -ltnp`` (who listens there). We publish the rest,
the endpoints behind each listener and the round robin's position and sticky sessions, as a file:

* under ``/run/kubesvc/proxy`` (``$KUBESVC_RUN_DIR`` overrides ``/run/kubesvc``), a directory
  made ``0700`` and each file ``0600`` (root only: it names every endpoint and client of the
  node), written whole to a temporary name and renamed, so a reader never sees half of one;
* named by the network namespace the writer runs in (its nsfs inode, ``kernel.netns.identify``),
  so the proxies of several namespaces on one host (tests, ``kubesvc up`` in a namespace) each
  have theirs, and a reader given ``--netns NAME`` finds the one of that namespace;
* holding the writer's pid: a file whose writer is gone (killed before it could remove it), or
  is no longer in that namespace (an inode the kernel reused), reads as no state at all, and a
  process's first write removes such files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kubesvc.kernel.netns import SELF, identify, netns_path


def run_dir() -> Path:
    return Path(os.environ.get("KUBESVC_RUN_DIR", "/run/kubesvc")) / "proxy"


def state_path(kind: str, family: int, netns: str | None = None) -> Path:
    """The file of ``kind`` (``userspace``) for ``family`` in the namespace ``netns`` (None: ours)."""
    ident = identify(netns_path(netns) if netns else SELF)
    return run_dir() / f"{kind}-ipv{family}-net{ident.ino}.json"


def write(path: Path, data: dict) -> None:
    """``data`` as JSON at ``path`` with the writer's pid, atomically, ``0600`` in a ``0700`` directory."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({**data, "pid": os.getpid()}, f)
    os.replace(tmp, path)
    global _pruned
    if not _pruned:
        _pruned = True
        for other in path.parent.glob("*.json"):
            if other != path and read(other) is None:
                other.unlink(missing_ok=True)


_pruned = False  # whether this process has removed the files of writers that are gone


def read(path: Path) -> dict | None:
    """The published state; None if there is none, it is not ours to read, or its writer is no
    longer alive in the namespace the file is named for."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ino = path.stem.rpartition("-net")[2]
    try:
        alive = str(os.stat(f"/proc/{int(data.get('pid', 0))}/ns/net").st_ino) == ino
    except (OSError, ValueError, TypeError):
        alive = False
    return data if alive else None


def remove(path: Path) -> None:
    path.unlink(missing_ok=True)
