"""``kubesvc etcd-snapshot save`` and ``restore`` against a real etcd member in a network
namespace: the snapshot is a 0600 file ``etcdctl snapshot status`` reads; a restore brings
back what the snapshot held and nothing written after it, as the same member alone in a
new one-member cluster, with the replaced data kept aside."""

from __future__ import annotations

import json
import stat
import sys

import pytest

from tests.cluster.machines import Machine
from tests.support import netns

pytestmark = pytest.mark.kernel


@pytest.fixture
def machine(tmp_path):
    cluster = netns.Cluster(nodes=1, client_ips=1).build()
    m = Machine(cluster.nodes[0], tmp_path / "m1")
    try:
        yield m
    finally:
        m.stop()
        cluster.close()


def kubesvc(machine: Machine, *args: str, check: bool = True):
    return machine.node.ns.run(sys.executable, "-m", "kubesvc", *args, check=check, timeout=120)


def test_snapshot_save_and_restore_round_trip(machine, tmp_path):
    machine.start()
    for i in range(3):
        machine.etcdctl("put", f"/registry/services/specs/default/s{i}", f"spec-{i}")
    out = kubesvc(machine, "etcd-snapshot", "save", "--data-dir", machine.data_dir).stdout.strip()
    assert out.startswith("Snapshot saved at ")
    path = out.removeprefix("Snapshot saved at ")
    assert path.startswith(str(machine.data_dir / "etcd-snapshots" / f"on-demand-{machine.name}-"))
    snapshot = machine.data_dir / "etcd-snapshots" / path.rsplit("/", 1)[1]
    assert stat.S_IMODE(snapshot.stat().st_mode) == 0o600
    assert not list(snapshot.parent.glob("*.part"))
    status = json.loads(machine.node.ns.run("env", "ETCDCTL_API=3", "etcdctl", "snapshot", "status", snapshot, "-w", "json").stdout)
    assert status["totalKey"] >= 3

    machine.etcdctl("put", "/registry/services/specs/default/after", "not-in-the-snapshot")
    refused = kubesvc(machine, "etcd-snapshot", "restore", "--data-dir", machine.data_dir, tmp_path / "missing", check=False)
    assert refused.returncode == 1 and refused.stderr.strip() == f"Error: no snapshot file {tmp_path / 'missing'}"
    machine.stop()
    restored = kubesvc(machine, "etcd-snapshot", "restore", "--data-dir", machine.data_dir, snapshot).stdout
    assert f"restored {snapshot} into {machine.data_dir / 'etcd' / 'data'}" in restored
    assert list((machine.data_dir / "etcd").glob("data-old-*/member/wal"))

    machine.start()
    for i in range(3):
        assert machine.get(f"/registry/services/specs/default/s{i}") == f"spec-{i}"
    assert machine.get("/registry/services/specs/default/after") is None
    members = machine.members()
    assert [(m["name"], m["learner"]) for m in members] == [(machine.name, False)]
