"""Three machines (network namespaces on one LAN) form one etcd cluster through
``kubesvc.cluster.etcd_process``: the first creates it, the others join as learners and are
promoted; a member killed with ``kill -9`` leaves a quorum that keeps taking writes, and it
rejoins from its data directory and catches up; a learner left by a join of a machine that
died is removed by that machine's next join. The cluster is looked at with the real
``etcdctl``, never through the code under test. Joins that cannot work fail with one line and
leave nothing behind.
"""

from __future__ import annotations

import subprocess

import pytest

from kubesvc.cluster import etcd_member as em
from tests.cluster.machines import Machine, share_etcd_ca
from tests.support import netns

pytestmark = pytest.mark.kernel


@pytest.fixture
def machines(tmp_path):
    cluster = netns.Cluster(nodes=3, client_ips=1).build()
    started: list[Machine] = []
    try:
        started.extend(Machine(node, tmp_path / f"m{node.index}") for node in cluster.nodes)
        yield started
    finally:
        for machine in started:
            machine.stop()
        cluster.close()


def test_three_members_form_survive_a_kill_and_catch_up(machines, tmp_path):
    m1, m2, m3 = machines
    m1.start()
    # a machine pointed at a port where no etcd listens: one line, nothing made
    share_etcd_ca(m1, m2.data_dir)
    err = m2.start(f"https://{m1.ip}:2399", expect_ready=False)
    assert m2.process.returncode == 1
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot reach etcd at https://{m1.ip}:2399"), err
    assert not (m2.data_dir / "etcd").exists()

    m2.start(m1.client_url)
    share_etcd_ca(m1, m3.data_dir)
    m3.start(m1.client_url, m2.client_url)

    members = m3.members()
    assert sorted(m["name"] for m in members) == sorted([m1.name, m2.name, m3.name])
    assert not any(m["learner"] for m in members)
    assert sorted(m["id"] for m in members) == sorted([m1.member_id, m2.member_id, m3.member_id])
    assert {p for m in members for p in m["peer"]} == {f"https://{m.ip}:2380" for m in machines}

    m2.etcdctl("put", "/before", "written-through-m2")
    assert m1.get("/before") == "written-through-m2"

    m3.kill9()
    for i in range(5):  # the two left are a quorum of three: every write is acknowledged
        m1.etcdctl("put", f"/during/{i}", f"value-{i}")
    assert m2.get("/during/4") == "value-4"

    # the dead machine's address on a fresh data directory: refused, since the member it was
    # is still in the cluster; nothing is made and the membership is unchanged
    fresh = tmp_path / "m3-fresh"
    share_etcd_ca(m1, fresh)
    err = m3.start(m1.client_url, data_dir=fresh, expect_ready=False)
    lines = [line for line in err.splitlines() if line.strip()]
    assert m3.process.returncode == 1 and len(lines) == 1, err
    assert f"etcdctl member remove {m3.member_id}" in lines[0] and "already has this machine's peer URL" in lines[0]
    assert not (fresh / "etcd").exists()
    assert len(m1.members()) == 3

    # back from its own data directory: the same member, caught up (read from its own copy)
    before = m3.member_id
    m3.start()
    assert m3.member_id == before
    netns.wait_until(lambda: m3.get("/during/4", serializable=True) == "value-4", 30, "the rejoined member to catch up")
    assert m3.get("/before", serializable=True) == "written-through-m2"
    m3.etcdctl("put", "/after", "through-the-rejoined-member")
    assert m1.get("/after") == "through-the-rejoined-member"

    # a join of this machine that died after its learner started (added with etcdctl and
    # started by hand, then kill -9), its data gone: the next join of the machine removes that
    # learner first, then joins as a new member
    m3.stop()
    m1.etcdctl("member", "remove", m3.member_id)
    stale_dir = tmp_path / "m3-stale"
    share_etcd_ca(m1, stale_dir)
    stale = em.MemberSpec("machine3-stale", m3.ip)
    m1.etcdctl("member", "add", stale.name, f"--peer-urls={stale.peer_url}", "--learner")
    cluster = ",".join(f"{m['name']}={m['peer'][0]}" for m in m1.members() if m["name"]) + f",{stale.name}={stale.peer_url}"
    argv = em.etcd_argv(stale, stale_dir, em.member_tls(stale_dir, [m3.ip], "machine3"), cluster, "existing", "etcd")
    learner = m3.node.ns.popen(*argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    netns.wait_until(lambda: any(m["name"] == stale.name and m["learner"] for m in m1.members()), 30, "the stale learner to start")
    learner.kill()
    learner.wait(timeout=10)
    again = tmp_path / "m3-again"
    share_etcd_ca(m1, again)
    m3.start(m1.client_url, data_dir=again)
    members = m1.members()
    assert sorted(m["name"] for m in members) == sorted([m1.name, m2.name, m3.name]) and not any(m["learner"] for m in members)
    assert m3.get("/after", serializable=True) == "through-the-rejoined-member"
