"""Three server machines (network namespaces on one LAN bridge in a namespace of its own) made
one control plane with the real commands: ``kubesvc up --cluster-init`` on the first, ``kubesvc
token create --print-join-command`` there, ``kubesvc up --server https://<first>:6443 --token
<token>`` on the others. A wrong token is one line and leaves the machine's data directory and
the etcd cluster as they were; the right one joins: objects written through one apiserver are
read through the others, and etcd (asked with the real etcdctl) has three voting members. With
the third machine killed (``kill -9`` of its up, so of its etcd and apiserver), both other
apiservers keep taking writes; a plain ``kubesvc up`` brings it back on its etcd member, caught
up.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import netns
from tests.support.agent import nsenter_argv
from tests.support.slowdown import scaled
from tests.support.up import Machine

pytestmark = pytest.mark.kernel

LAN = "192.168.78"


class Server(Machine):
    """``tests.support.up.Machine`` with up's cluster flags and this machine's LAN address."""

    def __init__(self, ns: netns.Netns, tmp: Path, index: int):
        super().__init__(ns, tmp)
        self.index = index
        self.ip = f"{LAN}.{10 + index}"

    def up_argv(self, *extra: str) -> list[str]:
        return nsenter_argv(self.ns.name, sys.executable, "-m", "kubesvc", "up", "--data-dir", str(self.data_dir),
                            "--node-name", f"srv{self.index}", "--pod-cidr", f"10.244.{self.index}.0/24", *extra)

    def start(self, *extra: str, timeout: float = 180) -> str:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.up_argv(*extra), stdout=subprocess.PIPE, stderr=log, cwd=netns.REPO_ROOT)
        from tests.cluster.machines import _first_line

        line = _first_line(self.process, scaled(timeout))
        match = re.match(r"^kubesvc is up at https://127\.0\.0\.1:(\d+); kubeconfig: (\S+)$", line)
        assert match, f"kubesvc up did not announce itself ({line!r}, exit {self.process.poll()}):\n{self.log()}"
        self.port, self.kubeconfig = int(match.group(1)), Path(match.group(2))
        return line

    def failed_start(self, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.up_argv(*extra), capture_output=True, text=True, timeout=scaled(120), cwd=netns.REPO_ROOT)

    def kubesvc(self, *args: str) -> str:
        return subprocess.run(nsenter_argv(self.ns.name, sys.executable, "-m", "kubesvc", *args), capture_output=True, text=True,
                              timeout=scaled(60), check=True, cwd=netns.REPO_ROOT).stdout

    def etcd_members(self) -> list[dict]:
        pki = self.data_dir / "pki" / "etcd"
        out = self.ns.run("env", "ETCDCTL_API=3", "etcdctl", "--endpoints", f"https://{self.ip}:2379", "--cacert", pki / "ca.crt",
                          "--cert", pki / "client.crt", "--key", pki / "client.key", "member", "list", "-w", "json").stdout
        return json.loads(out)["members"]


@pytest.fixture
def lan():
    ns = netns.Netns.create("lan")
    netns.bridge(ns, "br0")
    yield ns
    ns.close()


def server(lan: netns.Netns, tmp: Path, index: int) -> Server:
    (tmp / f"srv{index}").mkdir()
    machine = Server(netns.Netns.create(f"srv{index}"), tmp / f"srv{index}", index)
    netns.veth(machine.ns, "eth0", lan, f"s{index}")
    netns.attach(lan, f"s{index}", "br0")
    machine.ns.ip("addr", "add", f"{machine.ip}/24", "dev", "eth0")
    return machine


@pytest.mark.timeout(600)  # four up starts, each ~10 s on a quiet machine, several times that under load
def test_three_servers_join_survive_a_kill_9_and_the_killed_one_comes_back(lan, tmp_path):
    first, second, third = (server(lan, tmp_path, i) for i in (1, 2, 3))
    try:
        first.start("--cluster-init")
        joining = first.kubesvc("token", "create", "--data-dir", str(first.data_dir), "--print-join-command").split()
        url, token = joining[joining.index("--server") + 1], joining[joining.index("--token") + 1]
        assert url == f"https://{first.ip}:6443"

        # a wrong token (the right ID, another secret): one line, nothing made (the other
        # refusals are in test_join.py against a real apiserver)
        result = second.failed_start("--server", url, "--token", token.split(".")[0] + ".0000000000000000")
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 1 and len(lines) == 1, result.stderr
        assert lines[0].startswith("Error: cannot start: the token's secret does not match") and "kubesvc token create" in lines[0]
        assert not (second.data_dir / "pki" / "ca.crt").exists() and not (second.data_dir / "etcd").exists()
        assert not (second.data_dir / "up.json").exists()
        assert len(first.etcd_members()) == 1

        second.start("--server", url, "--token", token)
        third.start("--server", url, "--token", token)
        members = first.etcd_members()
        assert len(members) == 3 and not any(m.get("isLearner") for m in members)

        first.kubectl("create", "configmap", "written-on-srv1", "--from-literal=k=v")
        assert third.get("configmap", "written-on-srv1")["data"] == {"k": "v"}
        third.kubectl("create", "configmap", "written-on-srv3", "--from-literal=k=w")
        assert second.get("configmap", "written-on-srv3")["data"] == {"k": "w"}
        netns.wait_until(lambda: {n["metadata"]["name"] for n in second.get("nodes")["items"]} == {"srv1", "srv2", "srv3"},
                         scaled(90), "the three machines' nodes")

        # kill -9 of the third machine's up (its etcd and apiserver die with it): the two left
        # are a quorum, and both apiservers keep taking writes
        third.kill9()
        for i, machine in enumerate((first, second, first, second)):
            machine.kubectl("create", "configmap", f"while-srv3-is-down-{i}", f"--from-literal=i={i}")
        assert second.get("configmap", "while-srv3-is-down-2")["data"] == {"i": "2"}

        # a plain `kubesvc up` there restarts on its etcd member (no flag, no token) and catches up
        third.down()
        third.start()
        assert third.get("configmap", "while-srv3-is-down-3")["data"] == {"i": "3"}
        third.kubectl("create", "configmap", "after-restart", "--from-literal=k=x")
        assert first.get("configmap", "after-restart")["data"] == {"k": "x"}
        assert len(first.etcd_members()) == 3
    finally:
        for machine in (third, second, first):
            if machine.process is not None and machine.process.poll() is None:
                machine.interrupt(timeout=scaled(60))
            machine.teardown()
