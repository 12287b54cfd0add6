"""etcd snapshots: ``kubesvc etcd-snapshot save`` and ``restore`` (k3s's command names).

**Save** streams ``Maintenance.Snapshot`` from this machine's member (what ``etcdctl snapshot
save`` does in etcd 3.4): the whole bbolt database as of one revision, followed by etcd's
SHA-256 of it, into ``<data-dir>/etcd-snapshots/on-demand-<member>-<unix time>`` (k3s's name
for an on-demand snapshot) or the file given. It is written to ``<file>.part`` (0600, as it
holds every Secret), synced, then renamed: a file under the final name is always whole.

**Restore** (``etcdctl snapshot restore``, etcd 3.4's tool; ``etcdutl`` from 3.5) writes a
new data directory for this machine's member from the file, forgetting the old membership: the
member comes back alone, a one-member cluster (its member and cluster IDs are hashes of its
peer URL and the cluster token, so they come out as before) (k3s's ``--cluster-reset
--cluster-reset-restore-path``). The data it replaces is kept in
``<data-dir>/etcd/data-old-<unix time>``. Then: start this machine (``kubesvc up
--cluster-init``); on every other server machine delete ``<data-dir>/etcd`` and join again
(``kubesvc up --server ... --token ...``), as k3s asks.

**What a restore on etcd 3.4.23 means for clients.** etcd 3.4.27 and 3.5.10 added
``--bump-revision N --mark-compacted`` to restore: the revision jumps past anything a client
saw and the old revisions read as compacted, so every watch and cache gets 410 Expired and
relists. 3.4.23 has neither: the restored store goes back to the snapshot's revision and the
next writes reuse revisions (resourceVersions) that clients already saw for other changes.
A client that watches from such a resourceVersion is not told: it waits until the store
reaches that revision and then misses every change in between. So after a restore, restart
every apiserver (their watch caches are rebuilt from the store) and expect every client
(controllers, proxies, kubectl watches) to relist; restarting the components does that.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from kubesvc.cluster import etcd_member as em
from kubesvc.kernel import exec as kexec
from kubesvc.serving import pki

SNAPSHOT_DIR = "etcd-snapshots"


class SnapshotFailed(Exception):
    """One line that says what went wrong and what to do."""


def snapshot_path(data_dir: Path, member: str, now: float, directory: Path | None = None, name: str = "on-demand") -> Path:
    """k3s's on-demand snapshot name, ``<name>-<member>-<unix time>``, in ``directory``
    (default ``<data-dir>/etcd-snapshots``)."""
    return Path(directory or Path(data_dir) / SNAPSHOT_DIR) / f"{name}-{member}-{int(now)}"


def restore_argv(snapshot: Path, spec: em.MemberSpec, target: Path, binary: str = "etcdctl") -> list[str]:
    """``etcdctl snapshot restore`` making ``target`` the data directory of ``spec`` alone."""
    return [binary, "snapshot", "restore", str(snapshot), "--name", spec.name, "--data-dir", str(target),
            "--initial-cluster", em.initial_cluster([(spec.name, [spec.peer_url])]),
            "--initial-advertise-peer-urls", spec.peer_url, "--initial-cluster-token", em.CLUSTER_TOKEN]


@dataclass(frozen=True)
class Saved:
    path: Path
    size: int


async def save(data_dir: Path, *, path: Path | None = None, endpoints: Sequence[str] = (), now: float | None = None) -> Saved:
    """A snapshot of the member at ``endpoints`` (default: this machine's) into ``path``."""
    from kubesvc.cluster.etcd_api import EtcdAPI, EtcdError

    spec = em.load_spec(data_dir)
    if spec is None and not endpoints:
        raise SnapshotFailed(f"no etcd member under {data_dir} (kubesvc up --cluster-init makes one): pass --data-dir or --etcd-servers")
    if not (em.etcd_pki_dir(data_dir) / "ca.crt").exists():
        raise SnapshotFailed(f"no etcd certificates under {data_dir}/pki/etcd: pass the --data-dir of a kubesvc up --cluster-init or --server")
    path = Path(path) if path else snapshot_path(data_dir, spec.name if spec else "etcd", now or time.time())
    ca, cert, key = em.client_tls(data_dir)
    if path.parent == Path(data_dir) / SNAPSHOT_DIR:
        pki.private_dir(path.parent)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as out:
            async with EtcdAPI(list(endpoints) or [spec.local_client_url], ca, cert, key) as api:
                size = await api.snapshot(out)
            out.flush()
            os.fsync(out.fileno())
    except EtcdError as err:
        part.unlink(missing_ok=True)
        raise SnapshotFailed(f"cannot take a snapshot from etcd at {err.endpoint} ({err.message}): is this machine's kubesvc up running?") \
            from None
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, path)
    return Saved(path, size)


def restore(data_dir: Path, snapshot: Path, *, address: str | None = None, now: float | None = None) -> Path | None:
    """Make ``<data-dir>/etcd/data`` a one-member cluster holding ``snapshot``; the directory the
    previous data was moved to (or None). Run with this machine's ``kubesvc up`` stopped."""
    import shutil

    from kubesvc.up import read_state

    data_dir = Path(data_dir)
    if not Path(snapshot).is_file():
        raise SnapshotFailed(f"no snapshot file {snapshot}")
    if read_state(data_dir) is not None:
        raise SnapshotFailed(f"kubesvc up is running on {data_dir} (or did not clean up): stop it (or run kubesvc down --data-dir {data_dir}) "
                             "before restoring")
    spec = em.load_spec(data_dir)
    if spec is None:
        if not address:
            raise SnapshotFailed(f"no etcd member recorded under {data_dir}: pass --address <this machine's IP>")
        spec = em.member_spec(data_dir, address)
    elif address and address != spec.address:
        spec = em.MemberSpec(spec.name, address, spec.client_port, spec.peer_port, spec.metrics_port)
    binary = shutil.which("etcdctl")
    if binary is None:
        raise SnapshotFailed("etcdctl is not installed: apt-get install etcd-client (Debian's etcd 3.4), then retry")
    target = em.member_data_dir(data_dir)
    staging = target.with_name(f"data-restore-{int(now or time.time())}")
    em.remove_tree(staging)
    pki.private_dir(em.etcd_dir(data_dir))
    result = kexec.run_sync(restore_argv(Path(snapshot), spec, staging, binary), check=False,
                            env={**em.env_without_etcd(dict(os.environ)), "ETCDCTL_API": "3"})
    if result.returncode != 0:
        em.remove_tree(staging)
        last = (result.stderr.strip().splitlines() or ["exit code %d" % result.returncode])[-1]
        raise SnapshotFailed(f"etcdctl snapshot restore of {snapshot} failed: {last}")
    old = None
    if target.exists():
        old = target.with_name(f"data-old-{int(now or time.time())}")
        os.replace(target, old)
    os.replace(staging, target)
    os.chmod(target, 0o700)
    em.save_spec(data_dir, spec)
    return old
