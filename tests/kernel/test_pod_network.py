"""The Pod network across nodes on a real kernel: three machines (network namespaces, each
only an uplink: tests/support/lan.py), each running ``kubesvc agent --pod-network MODE
--cluster-cidr 10.244.0.0/16`` with its own ``--pod-cidr 10.244.<i>.0/24`` against one real
apiserver, and an "internet" host outside the cluster CIDR.

* ``routes``: the machines share one LAN bridge; each routes the others' podCIDRs via their
  InternalIPs (flannel host-gw, kube-router).
* ``vxlan``: machines 1 and 2 on one bridge, machine 3 and the internet on another, a router
  between them (no L2 adjacency): each machine's ``kubesvc.1`` VXLAN device, its neighbour and
  FDB entries from the others' VtepMAC annotations, MTU 1450 on the device and in the Pods.

What a user would observe: a Pod on node 1 reaches a Pod on node 3 by its Pod IP and the server
sees the client Pod's own IP; a Pod reaching the internet host is seen with its node's IP
(masqueraded); the kernel state as ``ip`` shows it; a node whose agent stopped and whose Node
is deleted leaves nothing on its machine and loses its routes on the others. Expected values
are written by hand from the layout in tests/support/lan.py.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from dataclasses import dataclass, field

import pytest

from tests.support.agent import AgentProcess, requests_in
from tests.support.apiserver import RunningAPIServer, running_apiserver
from tests.support.lan import CLUSTER_CIDR, ECHO_SOURCE, Lan
from tests.support.netns import wait_until

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(400)]  # the first test's budget holds the module's setup

NAMESPACE = "podnet"
PORT = 8080


def pod_manifest(name: str, node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"nodeName": node, "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "echo", "image": "python", "command": ["python3", "-c", ECHO_SOURCE, str(PORT)]}]}}


@dataclass
class World:
    mode: str
    server: RunningAPIServer
    lan: Lan
    agents: list[AgentProcess] = field(default_factory=list)
    pods: dict[str, dict] = field(default_factory=dict)  # node name -> its echo Pod

    def kubectl(self, *args: str, **options):
        return self.server.kubectl(*args, **options)

    def get(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def pod_netns(self, index: int) -> str:
        agent = self.agents[index - 1]
        return agent.netns_prefix + self.pods[agent.node_name]["metadata"]["uid"]

    def pod_ip(self, index: int) -> str:
        return self.pods[self.agents[index - 1].node_name]["status"]["podIP"]

    def diagnostics(self) -> str:
        parts = [self.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout]
        for agent in self.agents:
            parts.append(f"--- agent {agent.node_name} ---\n{agent.log(3000)}")
            parts.append(agent.node.ns.ip("route", check=False).stdout)
        return "\n".join(parts)


def ip_lines(ns, *args: str) -> list[str]:
    return [line.strip() for line in ns.ip(*args).stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def apiserver_for_pod_network(tmp_path_factory):
    with running_apiserver(tmp_path_factory.mktemp("podnet-apiserver")) as server:
        server.kubectl("create", "namespace", NAMESPACE)
        server.kubectl("create", "serviceaccount", "default", "-n", NAMESPACE, check=False)  # no controller-manager here
        yield server


@pytest.fixture(scope="module", params=["routes", "vxlan"])
def world(request, apiserver_for_pod_network, tmp_path_factory):
    mode, server = request.param, apiserver_for_pod_network
    log_dir = tmp_path_factory.mktemp(f"podnet-{mode}")
    lan = Lan(machines=3, segments=1 if mode == "routes" else 2)
    made = World(mode, server, lan)
    try:
        lan.build()
        lan.start_relays(int(re.search(r":(\d+)/?$", server.url).group(1)))
        for node in lan.nodes:
            name = f"{mode[0]}{node.index}"
            made.agents.append(AgentProcess(node, server.node_kubeconfig(name), name, log_dir / name, log_dir / f"agent-{name}.log",
                                            extra=[f"--pod-network={mode}", f"--cluster-cidr={CLUSTER_CIDR}",
                                                   f"--pod-network-kubeconfig={server.component_kubeconfig('proxy')}",
                                                   *server.agent_tls_flags(name, [node.lan_ip])]).start())
        for agent in made.agents:
            made.kubectl("apply", "-f", "-", input=json.dumps(pod_manifest(f"echo-{agent.node_name}", agent.node_name)))

        def running():
            for agent in made.agents:
                pod = made.get("pod", f"echo-{agent.node_name}", "-n", NAMESPACE)
                if (pod.get("status") or {}).get("phase") != "Running" or not pod["status"].get("podIP"):
                    return False
                made.pods[agent.node_name] = pod
            return True

        try:
            wait_until(running, 90, "an echo Pod Running on each machine", interval=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{made.diagnostics()}") from None
        yield made
    finally:
        for agent in made.agents:
            agent.stop(signal.SIGTERM, timeout=30)
            agent.cleanup()
        for agent in made.agents:
            server.kubectl("delete", "node", agent.node_name, "--ignore-not-found", check=False)
        server.kubectl("delete", "pods", "--all", "-n", NAMESPACE, "--force", "--grace-period=0", check=False)
        lan.close()


def reach(world: World, netns: str, host: str, timeout: float = 60) -> str:
    """What the echo server at ``host`` says the client's address is (retried until it answers)."""
    last: list[str] = []

    def answered():
        nonlocal last
        last = requests_in(netns, host, PORT, 1, timeout=2)
        return not last[0].startswith("!")

    try:
        wait_until(answered, timeout, f"{host}:{PORT} to answer from {netns}", interval=0.3)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last: {last}\n{world.diagnostics()}") from None
    return last[0]


def test_a_pod_reaches_a_pod_on_another_node_with_its_own_source_ip(world):
    assert world.pod_ip(1).startswith("10.244.1.") and world.pod_ip(3).startswith("10.244.3."), world.pods
    assert reach(world, world.pod_netns(1), world.pod_ip(3)) == world.pod_ip(1)
    assert reach(world, world.pod_netns(3), world.pod_ip(2)) == world.pod_ip(3)


def test_a_pod_reaching_outside_the_cluster_cidr_is_masqueraded(world):
    process = world.lan.serve_echo(world.lan.internet, PORT, world.agents[0].log_path.with_name("internet.log"))
    try:
        assert reach(world, world.pod_netns(1), world.lan.internet_ip) == world.agents[0].node.lan_ip
    finally:
        process.kill()
        process.wait(timeout=10)


def test_the_kernel_holds_the_mode_s_routes_and_entries(world):
    m1 = world.agents[0].node.ns
    routes = ip_lines(m1, "route", "show", "proto", "77")
    if world.mode == "routes":
        assert routes == ["10.244.2.0/24 via 192.168.77.12 dev eth0", "10.244.3.0/24 via 192.168.77.13 dev eth0"], routes
        assert "kubesvc.1" not in m1.ip("link").stdout
        return
    assert routes == ["10.244.2.0/24 via 10.244.2.0 dev kubesvc.1 onlink", "10.244.3.0/24 via 10.244.3.0 dev kubesvc.1 onlink"], routes
    node2, node3 = world.get("node", "v2"), world.get("node", "v3")
    mac2 = json.loads(node2["metadata"]["annotations"]["flannel.alpha.coreos.com/backend-data"])["VtepMAC"]
    mac3 = json.loads(node3["metadata"]["annotations"]["flannel.alpha.coreos.com/backend-data"])["VtepMAC"]
    assert node3["metadata"]["annotations"]["flannel.alpha.coreos.com/public-ip"] == "192.168.82.13"
    neighbours = ip_lines(m1, "neigh", "show", "dev", "kubesvc.1", "nud", "permanent")
    assert sorted(neighbours) == [f"10.244.2.0 lladdr {mac2} PERMANENT", f"10.244.3.0 lladdr {mac3} PERMANENT"], neighbours
    fdb = subprocess.run(["bridge", "-n", m1.name, "fdb", "show", "dev", "kubesvc.1"], capture_output=True, text=True, check=True).stdout
    assert f"{mac2} dst 192.168.81.12 self permanent" in fdb and f"{mac3} dst 192.168.82.13 self permanent" in fdb, fdb
    details = m1.ip("-d", "link", "show", "kubesvc.1").stdout
    assert "mtu 1450" in details and "vxlan id 1 local 192.168.81.11 dev eth0" in details and "dstport 8472 nolearning" in details, details
    pod_eth0 = subprocess.run(["ip", "-n", world.pod_netns(1), "link", "show", "eth0"], capture_output=True, text=True, check=True).stdout
    assert "mtu 1450" in pod_eth0, pod_eth0


def test_a_stopped_agent_leaves_nothing_and_its_deleted_node_loses_its_routes(world):
    third = world.agents[2]
    third.stop(signal.SIGTERM, timeout=30)
    m3 = third.node.ns
    assert ip_lines(m3, "route", "show", "proto", "77") == []
    assert "kubesvc.1" not in m3.ip("link").stdout and "cbr0" not in m3.ip("link").stdout
    assert "kubesvc-pod-network" not in m3.run("nft", "list", "tables").stdout
    world.kubectl("delete", "node", third.node_name)
    for agent in world.agents[:2]:
        ns = agent.node.ns
        try:
            wait_until(lambda: not any(line.startswith("10.244.3.0/24") for line in ip_lines(ns, "route", "show", "proto", "77")), 30,
                       f"{agent.node_name} to drop its route to node 3's Pods")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{world.diagnostics()}") from None
        remaining = ip_lines(ns, "route", "show", "proto", "77")
        assert [line.split()[0] for line in remaining] == [f"10.244.{3 - agent.node.index}.0/24"], remaining
        if world.mode == "vxlan":
            assert not any(line.startswith("10.244.3.0 ") for line in ip_lines(ns, "neigh", "show", "dev", "kubesvc.1")), ns.name
