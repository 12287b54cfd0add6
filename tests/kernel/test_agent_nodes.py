"""Two nodes, each a network namespace of the Cluster harness (tests/support/netns.py) running
``kubesvc agent`` and ``kubesvc proxy`` as a kubelet and a kube-proxy would, against one
apiserver and controller-manager (scheduler included) on the host's loopback:

    nsenter --net=/run/netns/<node ns> python -m kubesvc agent --kubeconfig K --node-name nodeN
        --pod-cidr 10.244.N.0/24 --node-ip 192.168.77.1N --zone zone-N --data-dir D/nodeN --port 0
        --netns-prefix ks-pod-<hex>-
    ip netns exec <node ns> python -m kubesvc proxy --kubeconfig K --hostname-override nodeN ...

The harness gives each node its LAN address, a cbr0 bridge at its podCIDR's gateway (which the
agent adopts) and routes between the nodes' podCIDRs; the external client routes the Service
range via node 1. ``kubectl apply -f examples/backend.yaml`` then puts three Pods on the two
nodes, and the tests check what a user sees: the Nodes (Ready, zone, podCIDR, InternalIP, a
Lease), the ClusterIP answered by all three Pods from either node, from the external client and
from a Pod, ``internalTrafficPolicy: Local`` keeping each node's traffic on its own Pods, a Pod
deleted without a failed request, and a stopped agent removing its Pod namespaces and veths
but not the harness's bridge. Expected values are written by hand from the harness's layout
or read from kubectl.
"""

from __future__ import annotations

import json
import re
import signal
import time
from dataclasses import dataclass

import pytest

from tests.support.agent import AgentProcess, RequestLoop, is_failure, link_names, requests_in, tally
from tests.support.apiserver import RunningAPIServer, running_apiserver, start_controller_manager
from tests.support.netns import REPO_ROOT, Cluster, Node, ProxyProcess, wait_until

pytestmark = pytest.mark.kernel

BACKEND_YAML = REPO_ROOT / "examples" / "backend.yaml"
BACKENDS = {"backend-1", "backend-2", "backend-3"}
NODE_NAMES = ("node1", "node2")
# the harness's layout (tests/support/netns.py): node i on 192.168.77.(10+i), podCIDR 10.244.i.0/24
NODE_IP = {"node1": "192.168.77.11", "node2": "192.168.77.12"}
POD_CIDR = {"node1": "10.244.1.0/24", "node2": "10.244.2.0/24"}
POD_PREFIX = {"node1": "10.244.1.", "node2": "10.244.2."}
PROXY_FLAGS = ("--iptables-min-sync-period=1s", "--iptables-sync-period=10s", "--v=2")

LOCAL_SERVICE = """\
apiVersion: v1
kind: Service
metadata:
  name: node-local
spec:
  selector:
    app.kubernetes.io/name: MyApp
  internalTrafficPolicy: Local
  ports:
  - protocol: TCP
    port: 80
    targetPort: 9376
"""


CLIENT_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: client
spec:
  nodeName: node1
  terminationGracePeriodSeconds: 1
  containers:
  - name: sleep
    image: registry.k8s.io/e2e-test-images/agnhost:2.52
    command: [python3, -c, "import time; time.sleep(100000)"]
"""


SELF_SERVICE = """\
apiVersion: v1
kind: Service
metadata:
  name: self
spec:
  selector:
    hairpin: self
  ports:
  - protocol: TCP
    port: 80
    targetPort: 9376
"""


@dataclass
class World:
    server: RunningAPIServer
    cluster: Cluster
    agents: dict[str, AgentProcess]
    proxies: dict[str, ProxyProcess]

    def node(self, name: str) -> Node:
        return self.agents[name].node

    def kubectl(self, *args: str, **options):
        return self.server.kubectl(*args, **options)

    def get(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def backends(self) -> dict[str, dict]:
        return {p["metadata"]["name"]: p for p in self.get("pods", "-l", "app.kubernetes.io/name=MyApp")["items"]}

    def placement(self) -> dict[str, set[str]]:
        """{node name: names of the backend Pods bound to it}."""
        out: dict[str, set[str]] = {name: set() for name in NODE_NAMES}
        for name, pod in self.backends().items():
            out.setdefault(pod["spec"].get("nodeName", ""), set()).add(name)
        return out

    def diagnostics(self) -> str:
        parts = [self.kubectl("get", "pods", "-o", "wide", check=False).stdout]
        for name, agent in self.agents.items():
            parts.append(f"--- agent {name} ({'running' if agent.alive else 'stopped'}) ---\n{agent.log(3000)}")
        for name, proxy in self.proxies.items():
            parts.append(f"--- proxy {name} ---\n{proxy.log(2000)}")
        return "\n".join(parts)

    def wait_answers(self, netns: str, vip: str, names: set[str], timeout: float, what: str) -> None:
        last: list[str] = []

        def done():
            nonlocal last
            last = requests_in(netns, vip, 80, 15)
            return not any(map(is_failure, last)) and set(last) == names

        try:
            wait_until(done, timeout, what, interval=0.1)
        except AssertionError:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last batch: {tally(last)}\n{self.diagnostics()}") from None


def api_port(server: RunningAPIServer) -> int:
    return int(re.search(r":(\d+)/?$", server.url).group(1))


def ready_condition(obj: dict) -> str | None:
    return {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}.get("Ready")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("agent-nodes")
    with running_apiserver(log_dir / "apiserver") as server:
        manager = start_controller_manager(server, log_dir / "controller-manager.log", "--leader-elect=false", "--secure-port=0")
        cluster = Cluster(nodes=2, log_dir=log_dir)
        made = World(server, cluster, {}, {})
        try:
            cluster.build()
            cluster.start_relays(api_port(server))
            for name, node in zip(NODE_NAMES, cluster.nodes):
                made.agents[name] = AgentProcess(node, server.node_kubeconfig(name), name, log_dir / name, log_dir / f"agent-{name}.log",
                                                 zone=f"zone-{name[-1]}", extra=server.agent_tls_flags(name, [node.lan_ip])).start()

            def registered():
                nodes = {n["metadata"]["name"]: n for n in made.get("nodes")["items"]}
                return set(nodes) == set(NODE_NAMES) and all(ready_condition(n) == "True" for n in nodes.values())

            try:
                wait_until(registered, 30, "both Nodes registered and Ready", interval=0.2)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{made.diagnostics()}") from None
            for name, node in zip(NODE_NAMES, cluster.nodes):
                made.proxies[name] = ProxyProcess(node, server.component_kubeconfig("proxy"), "nftables", log_dir / f"proxy-{name}.log", *PROXY_FLAGS,
                                                  f"--hostname-override={name}").start()
            made.kubectl("apply", "-f", str(BACKEND_YAML))

            def running():
                pods = made.backends()
                return set(pods) == BACKENDS and all(p["status"].get("phase") == "Running" and ready_condition(p) == "True"
                                                     for p in pods.values())

            try:
                wait_until(running, 60, "the three backends Running and Ready", interval=0.3)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{made.diagnostics()}") from None
            yield made
        finally:
            for agent in made.agents.values():
                agent.stop(signal.SIGTERM, timeout=20)
                agent.cleanup()
            for proxy in made.proxies.values():
                proxy.kill()
            cluster.close()
            manager.stop()


# ---------------------------------------------------------------------------------------------


def test_nodes_register_ready_with_zone_pod_cidr_address_and_lease(world):
    for name in NODE_NAMES:
        node = world.get("node", name)
        assert ready_condition(node) == "True", node["status"]
        assert node["metadata"]["labels"].get("topology.kubernetes.io/zone") == f"zone-{name[-1]}", node["metadata"]["labels"]
        assert node["spec"].get("podCIDR") == POD_CIDR[name], node["spec"]
        internal = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
        assert internal == [NODE_IP[name]], node["status"]["addresses"]
        lease = world.get("lease", name, "-n", "kube-node-lease")
        assert lease["spec"].get("holderIdentity") == name, lease
        assert lease["spec"].get("renewTime"), lease
        owners = [(o["kind"], o["name"]) for o in lease["metadata"].get("ownerReferences") or []]
        assert owners == [("Node", name)], lease["metadata"]
    table = world.kubectl("get", "nodes").stdout
    assert re.search(r"^node1\s+Ready\s", table, re.M) and re.search(r"^node2\s+Ready\s", table, re.M), table


def test_backends_spread_over_both_nodes_and_answer_from_either_node_and_the_external_client(world):
    placement = world.placement()
    assert placement["node1"] and placement["node2"], f"the scheduler left a node empty: {placement}"
    assert placement["node1"] | placement["node2"] == BACKENDS, placement
    for name, pod in world.backends().items():
        node = pod["spec"]["nodeName"]
        assert pod["status"]["podIP"].startswith(POD_PREFIX[node]), f"{name} on {node} has {pod['status']['podIP']}"
    vip = world.get("service", "my-service")["spec"]["clusterIP"]
    senders = {"node1": world.node("node1").name, "node2": world.node("node2").name, "the external client": world.cluster.client.name}
    for what, netns in senders.items():  # each node's proxy converges on its own
        world.wait_answers(netns, vip, BACKENDS, 20, f"all three backends from {what}")
        got = tally(requests_in(netns, vip, 80, 45))
        assert set(got) == BACKENDS and all(got[n] >= 3 for n in BACKENDS), f"45 requests from {what} to {vip}: {got}\n{world.diagnostics()}"


def test_a_client_pod_reaches_the_backends_on_both_nodes(world):
    world.kubectl("apply", "-f", "-", input=CLIENT_POD)
    try:
        wait_until(lambda: ready_condition(world.get("pod", "client")) == "True", 30, "the client Pod Ready")
        pod = world.get("pod", "client")
        assert pod["status"]["podIP"].startswith("10.244.1."), pod["status"]  # node 1's Pod range: node 1's agent runs it
        netns = world.agents["node1"].netns_prefix + pod["metadata"]["uid"]
        vip = world.get("service", "my-service")["spec"]["clusterIP"]
        world.wait_answers(netns, vip, BACKENDS, 20, "all three backends from the client Pod")
        got = tally(requests_in(netns, vip, 80, 45))
        assert set(got) == BACKENDS and all(got[n] >= 3 for n in BACKENDS), f"45 requests from the client Pod to {vip}: {got}"
    finally:
        world.kubectl("delete", "pod", "client", "--ignore-not-found", timeout=60)


def test_a_backend_reaches_itself_through_a_service_of_its_own(world):
    name = sorted(world.placement()["node1"])[0]
    pod = world.backends()[name]
    world.kubectl("label", "pod", name, "hairpin=self")
    world.kubectl("apply", "-f", "-", input=SELF_SERVICE)
    try:
        vip = world.get("service", "self")["spec"]["clusterIP"]
        world.wait_answers(world.node("node1").name, vip, {name}, 20, f"the Service selecting only {name}, from node 1")
        got = tally(requests_in(world.agents["node1"].netns_prefix + pod["metadata"]["uid"], vip, 80, 3, timeout=1))
        assert got == {name: 3}, f"3 requests from {name} to a Service of its own ({vip}): {got}"
    finally:
        world.kubectl("delete", "service", "self", "--ignore-not-found")
        world.kubectl("label", "pod", name, "hairpin-")


def test_internal_traffic_policy_local_keeps_traffic_on_the_node(world):
    placement = world.placement()
    world.kubectl("apply", "-f", "-", input=LOCAL_SERVICE)
    try:
        vip = world.get("service", "node-local")["spec"]["clusterIP"]
        for name in NODE_NAMES:
            netns = world.node(name).name
            world.wait_answers(netns, vip, placement[name], 20, f"node-local answered by {name}'s Pods {sorted(placement[name])}")
            got = tally(requests_in(netns, vip, 80, 30))
            assert set(got) == placement[name], f"30 requests from {name} to the Local Service {vip}: {got} (Pods: {placement})"
    finally:
        world.kubectl("delete", "service", "node-local", "--ignore-not-found")


def test_deleting_a_pod_on_node2_keeps_answers_coming(world):
    placement = world.placement()
    victim = sorted(placement["node2"])[0]
    vip = world.get("service", "my-service")["spec"]["clusterIP"]
    world.wait_answers(world.node("node1").name, vip, BACKENDS, 20, "all three backends before the delete")
    with RequestLoop(world.node("node1").name, vip, 80, interval=0.02) as loop:
        time.sleep(1.0)
        started = time.monotonic()
        world.kubectl("delete", "pod", victim, timeout=60)
        deleted = time.monotonic()
        time.sleep(1.0)
    failures = loop.failures()
    assert not failures, f"{len(failures)} of {len(loop.records)} requests failed while {victim} terminated: {failures[:10]}"
    assert victim in loop.between(0, started), f"{victim} never answered before the delete: {tally(loop.between(0, started))}"
    after = loop.between(deleted)
    assert len(after) >= 20 and set(after) == BACKENDS - {victim}, f"answers after kubectl delete returned: {tally(after)}"
    assert victim not in world.backends()


def test_stopping_an_agent_removes_its_pod_namespaces_and_veths_but_not_the_bridge(world):
    agent = world.agents["node1"]
    node = world.node("node1")
    on_node1 = world.placement()["node1"]
    uids = {world.backends()[name]["metadata"]["uid"] for name in on_node1}
    assert agent.pod_namespaces() == sorted(agent.netns_prefix + uid for uid in uids)
    links = link_names(node.name)
    veths = links - {"lo", "eth0", "cbr0"}
    assert {"lo", "eth0", "cbr0"} <= links and len(veths) == len(on_node1), f"links in node 1: {links}, Pods there: {on_node1}"

    code = agent.stop(signal.SIGTERM, timeout=30)
    assert code == 0, f"the agent exited {code}:\n{agent.log()}"
    assert agent.pod_namespaces() == []
    assert link_names(node.name) == {"lo", "eth0", "cbr0"}
    bridge = node.ns.ip("-4", "-o", "addr", "show", "dev", "cbr0").stdout
    assert " 10.244.1.1/24 " in bridge, bridge
    assert "UP" in node.ns.ip("-o", "link", "show", "cbr0").stdout
    assert ready_condition(world.get("node", "node1")) == "False"
    # node 1's Pods are no longer endpoints: from node 2, only node 2's Pods answer (or, if the
    # delete test took its only one, every connection is refused: a Service without endpoints)
    vip = world.get("service", "my-service")["spec"]["clusterIP"]
    left = world.placement()["node2"]
    if left:
        world.wait_answers(world.node("node2").name, vip, left, 20, f"only node 2's Pods {sorted(left)} after node 1's agent stopped")
    else:
        wait_until(lambda: all(o.startswith("! ConnectionRefusedError") for o in requests_in(world.node("node2").name, vip, 80, 10, timeout=1)),
                   20, "every connection refused once no backend is left")
