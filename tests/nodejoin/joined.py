"""A cluster of machines joined with the real commands, for the tests/nodejoin modules: the
machines of tests/support/lan.py (one LAN bridge, or two bridges joined by a router namespace:
no L2 adjacency), the first running ``kubesvc up --cluster-init``, the second and third
``kubesvc join`` with the command ``kubesvc token create --print-join-command`` printed, every
machine with the same ``--pod-network``; the LAN's "internet" host is the spare machine (a
client on the LAN that is no node, and where a wrong-token join is tried).

Also what a test reads of a machine's Pod network (routes of protocol 77, the VXLAN device's
neighbour and FDB entries) to see that a node that went left nothing behind.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import netns
from tests.support.agent import nsenter_argv
from tests.support.lan import CLUSTER_CIDR, Lan
from tests.support.slowdown import scaled
from tests.support.up import Machine

JOINED = re.compile(r"^kubesvc joined (\S+) as node (\S+): Pods in (\S+),")
VXLAN_DEVICE = "kubesvc.1"


def kubesvc(ns: netns.Netns, *args: str, check: bool = True, timeout: float = 90) -> subprocess.CompletedProcess:
    result = subprocess.run(nsenter_argv(ns.name, sys.executable, "-m", "kubesvc", *args), capture_output=True, text=True,
                            timeout=scaled(timeout), cwd=netns.REPO_ROOT)
    assert not check or result.returncode == 0, result.stderr
    return result


class Joiner:
    def __init__(self, ns: netns.Netns, tmp: Path, index: int, ip: str):
        self.ns, self.index, self.ip = ns, index, ip
        self.name = f"m{index}"
        self.data_dir = tmp / f"node{index}"
        self.log_path = tmp / f"join{index}.log"
        self.process: subprocess.Popen | None = None
        self.line = ""

    def join(self, command: list[str], *extra: str, timeout: float = 180) -> str:
        self.start_join(command, *extra)
        return self.joined(timeout)

    def start_join(self, command: list[str], *extra: str) -> None:
        """``kubesvc join`` started; ``joined`` waits for its announcement."""
        argv = nsenter_argv(self.ns.name, sys.executable, "-m", "kubesvc", *command[1:], "--data-dir", str(self.data_dir),
                            "--node-name", self.name, "--node-ip", self.ip, *extra)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, cwd=netns.REPO_ROOT)

    def joined(self, timeout: float = 180) -> str:
        """The started join's first line, ``kubesvc joined <server> as node <name>: Pods in <cidr>, ...``."""
        from tests.cluster.machines import _first_line

        assert self.process is not None
        self.line = _first_line(self.process, scaled(timeout))
        assert JOINED.match(self.line), f"join did not announce itself ({self.line!r}, exit {self.process.poll()}):\n" + \
            self.log_path.read_text()[-4000:]
        return self.line

    def kubectl(self, *args: str) -> subprocess.CompletedProcess:
        """kubectl on this machine with the node's own credential."""
        return subprocess.run(nsenter_argv(self.ns.name, "kubectl", f"--kubeconfig={self.data_dir / 'kubeconfig'}",
                                           f"--cache-dir={self.data_dir.parent / f'cache{self.index}'}", *args),
                              capture_output=True, text=True, timeout=scaled(60))

    def leave(self) -> subprocess.CompletedProcess:
        """``kubesvc leave`` of this running join, reaping the join as it exits: ``leave`` waits
        until the join's pid is gone, and a child of ours not yet waited for stays a zombie (it
        would wait out its whole grace period; a shell reaps its jobs at once)."""
        argv = nsenter_argv(self.ns.name, sys.executable, "-m", "kubesvc", "leave", "--data-dir", str(self.data_dir))
        leaving = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=netns.REPO_ROOT)
        assert self.process is not None
        code = self.process.wait(timeout=scaled(60))
        stdout, stderr = leaving.communicate(timeout=scaled(60))
        assert code == 0, self.log_path.read_text()[-3000:]
        return subprocess.CompletedProcess(argv, leaving.returncode, stdout, stderr)

    def stop(self) -> None:
        self.interrupt()
        self.stopped()

    def interrupt(self) -> None:
        """Ctrl-C to a running join; ``stopped`` waits for it and cleans the machine up."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)

    def stopped(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=scaled(60))
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        if self.data_dir.exists():
            kubesvc(self.ns, "leave", "--data-dir", str(self.data_dir), check=False)


@dataclass
class JoinedCluster:
    mode: str  # --pod-network: routes | vxlan
    lan: Lan
    server: Machine
    tmp: Path
    joiners: list[Joiner] = field(default_factory=list)
    command: list[str] = field(default_factory=list)

    @property
    def spare(self) -> netns.Netns:
        return self.lan.internet

    def ip(self, index: int) -> str:
        """Machine ``index``'s LAN address (one past the last machine: the spare's)."""
        return self.lan.internet_ip if index == len(self.lan.nodes) + 1 else self.lan.nodes[index - 1].lan_ip

    def __getitem__(self, key: str):  # the dict the tests were written against
        return {"server": self.server, "joiners": self.joiners, "command": self.command, "spare": self.spare, "tmp": self.tmp}[key]


@contextlib.contextmanager
def joined_cluster(tmp: Path, mode: str, segments: int, machines: int = 3, loadbalancer_pool: str = "") -> Iterator[JoinedCluster]:
    """``machines`` machines (m1 runs up, with ``--loadbalancer-pool`` when given; the others
    join; zones zone-a, zone-b, ... in turn)."""
    lan = Lan(machines=machines, segments=segments)
    cluster = None
    try:
        lan.build()
        (tmp / "m1").mkdir()
        server = Machine(lan.nodes[0].ns, tmp / "m1")
        cluster = JoinedCluster(mode, lan, server, tmp)
        server.up(timeout=scaled(180), extra=("--cluster-init", "--node-name", "m1", "--pod-cidr", "10.244.0.0/24",
                                              "--cluster-cidr", CLUSTER_CIDR, "--pod-network", mode,
                                              *(["--loadbalancer-pool", loadbalancer_pool] if loadbalancer_pool else [])))
        cluster.command = kubesvc(server.ns, "token", "create", "--data-dir", str(server.data_dir), "--print-join-command").stdout.split()
        cluster.joiners = [Joiner(lan.nodes[i - 1].ns, tmp, i, cluster.ip(i)) for i in range(2, machines + 1)]
        # the machines join at once, as an operator's would (each its own bootstrap, CSR and
        # Node); one after the other only added up their start-up times
        for joiner in cluster.joiners:
            joiner.start_join(cluster.command, "--zone", f"zone-{chr(ord('a') + (joiner.index - 1) % 26)}", "--pod-network", mode)
        for joiner in cluster.joiners:
            joiner.joined()
        yield cluster
    finally:
        if cluster is not None:
            # all stop at once, and each one's wait and ``leave`` overlap the others'
            for joiner in cluster.joiners:
                joiner.interrupt()
            with concurrent.futures.ThreadPoolExecutor(max(1, len(cluster.joiners))) as pool:
                for stopping in [pool.submit(joiner.stopped) for joiner in cluster.joiners]:
                    stopping.result()
            if cluster.server.process is not None and cluster.server.process.poll() is None:
                cluster.server.interrupt(timeout=scaled(60))
            cluster.server.teardown()
        lan.close()


# -- what a machine's Pod network holds ----------------------------------------------------------

def pod_network_routes(ns: netns.Netns) -> list[str]:
    """The routes the Pod network made on a machine (``ip route show proto 77``)."""
    return [line.strip() for line in ns.ip("route", "show", "proto", "77").stdout.splitlines() if line.strip()]


def vxlan_entries(ns: netns.Netns) -> tuple[list[str], list[str]]:
    """The VXLAN device's permanent neighbours and FDB entries (empty when there is no device)."""
    if VXLAN_DEVICE not in ns.ip("link").stdout:
        return [], []
    neighbours = ns.ip("neigh", "show", "dev", VXLAN_DEVICE, "nud", "permanent").stdout.splitlines()
    fdb = subprocess.run(["bridge", "-n", ns.name, "fdb", "show", "dev", VXLAN_DEVICE], capture_output=True, text=True, check=True).stdout
    return [n.strip() for n in neighbours if n.strip()], [f.strip() for f in fdb.splitlines() if "permanent" in f]


def traces_of_node(ns: netns.Netns, pod_cidr: str, node_ip: str) -> list[str]:
    """What ``ns`` holds to reach another node's Pods: its route, and in vxlan its VTEP's
    neighbour entry and the FDB entry sending to its address."""
    vtep = pod_cidr.split("/")[0]
    neighbours, fdb = vxlan_entries(ns)
    return ([r for r in pod_network_routes(ns) if r.startswith(pod_cidr + " ")] + [n for n in neighbours if n.startswith(vtep + " ")]
            + [f for f in fdb if f" dst {node_ip} " in f + " "])


def route_to(mode: str, pod_cidr: str, node_ip: str) -> str:
    """The route to a peer's Pods (flannel host-gw's direct route, or vxlan's onlink one via its VTEP)."""
    if mode == "routes":
        return f"{pod_cidr} via {node_ip} dev eth0"
    return f"{pod_cidr} via {pod_cidr.split('/')[0]} dev {VXLAN_DEVICE} onlink"


def holds_no_pod_network(ns: netns.Netns) -> bool:
    """Nothing of the Pod network left on a machine: no routes of ours, no VXLAN device, no masquerade table."""
    return (pod_network_routes(ns) == [] and VXLAN_DEVICE not in ns.ip("link").stdout
            and "kubesvc-pod-network" not in ns.run("nft", "list", "tables").stdout)
