"""Topology across nodes on a real kernel: three machines (tests/support/lan.py) with
``kubesvc agent --pod-network routes --zone Z`` and ``kubesvc proxy`` (nftables) each, machines
1 and 2 in zone-a, machine 3 in zone-b, one backend Pod per machine answering with its name, and
a controller-manager writing the EndpointSlices (hints) against one real apiserver.

What a client on each node sees through the ClusterIP:

* ``PreferSameZone``: zone-a's nodes reach only zone-a's two backends, zone-b's node only its
  own; once zone-b has no backend (last, after Auto), its node reaches every backend (the hints
  name no endpoint for its zone, so the proxy ignores them, as upstream's ``CategorizeEndpoints``).
* ``PreferSameNode``: each node reaches only its own backend.
* ``service.kubernetes.io/topology-mode: Auto``: zone-a holds two thirds of the CPU (two
  machines of equal CPU), so of three endpoints it is hinted two, zone-b one (minimums 2 and 1,
  worked out by hand from upstream's rules); with zone-b's backend gone the two left cannot be
  spread without overloading a zone (minimums 2 + 1 > 2) and the hints are removed with a
  TopologyAwareHintsDisabled Event.
"""

from __future__ import annotations

import json
import re
import signal
from collections import Counter
from dataclasses import dataclass, field

import pytest

from tests.support.agent import AgentProcess, is_failure, requests_in
from tests.support.apiserver import RunningAPIServer, running_apiserver, start_controller_manager
from tests.support.lan import CLUSTER_CIDR, Lan
from tests.support.netns import ProxyProcess, wait_until

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(500)]

NAMESPACE = "topo"
ZONES = {"t1": "zone-a", "t2": "zone-a", "t3": "zone-b"}
NAME_SERVER = """\
import http.server, sys
name = (sys.argv[2] + "\\n").encode()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(name)))
        self.end_headers()
        self.wfile.write(name)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Handler).serve_forever()
"""


def backend(node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"backend-{node}", "namespace": NAMESPACE, "labels": {"app": "topo"}},
            "spec": {"nodeName": node, "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "web", "image": "python", "command": ["python3", "-c", NAME_SERVER, "8080", f"backend-{node}"],
                                     "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]}}


def service(spec: dict, annotations: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": NAMESPACE, "annotations": annotations or {}},
            "spec": {"selector": {"app": "topo"}, "ports": [{"port": 80, "targetPort": 8080}], **spec}}


@dataclass
class World:
    server: RunningAPIServer
    lan: Lan
    agents: dict[str, AgentProcess] = field(default_factory=dict)
    proxies: list[ProxyProcess] = field(default_factory=list)

    def kubectl(self, *args: str, **options):
        return self.server.kubectl(*args, **options)

    def get(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, obj: dict) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def diagnostics(self) -> str:
        parts = [self.kubectl("get", "pods,endpointslices", "-n", NAMESPACE, "-o", "wide", check=False).stdout]
        parts += [f"--- agent {n} ---\n{a.log(1500)}" for n, a in self.agents.items()]
        parts += [f"--- proxy ---\n{p.log(1500)}" for p in self.proxies]
        return "\n".join(parts)

    def answers(self, node: str, count: int = 12) -> Counter:
        vip = self.get("service", "web", "-n", NAMESPACE)["spec"]["clusterIP"]
        return Counter(requests_in(self.agents[node].node.ns.name, vip, 80, count, timeout=2))

    def wait_answers(self, node: str, expected: set[str], what: str) -> None:
        last: Counter = Counter()

        def done():
            nonlocal last
            last = self.answers(node)
            return not any(map(is_failure, last)) and set(last) == expected

        try:
            wait_until(done, 60, what, interval=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last from {node}: {dict(last)}\n{self.diagnostics()}") from None

    def slice_hints(self) -> list[tuple[str, tuple, tuple]]:
        found = []
        for slice_ in self.get("endpointslices", "-n", NAMESPACE, "-l", "kubernetes.io/service-name=web")["items"]:
            for endpoint in slice_.get("endpoints") or ():
                hints = endpoint.get("hints") or {}
                found.append((endpoint.get("nodeName"), tuple(h["name"] for h in hints.get("forZones") or ()),
                              tuple(h["name"] for h in hints.get("forNodes") or ())))
        return sorted(found)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("topology")
    with running_apiserver(log_dir / "apiserver") as server:
        manager = start_controller_manager(server, log_dir / "controller-manager.log", "--leader-elect=false", "--secure-port=0")
        lan = Lan(machines=3, segments=1)
        made = World(server, lan)
        try:
            lan.build()
            for node in lan.nodes:  # a route for the Service range, as up puts it on the Pod bridge: the proxy DNATs on output
                node.ns.ip("route", "add", "10.96.0.0/12", "dev", "eth0")
            lan.start_relays(int(re.search(r":(\d+)/?$", server.url).group(1)))
            made.kubectl("create", "namespace", NAMESPACE)
            for node, (name, zone) in zip(lan.nodes, ZONES.items()):
                made.agents[name] = AgentProcess(
                    node, server.node_kubeconfig(name), name, log_dir / name, log_dir / f"agent-{name}.log", zone=zone,
                    extra=["--pod-network=routes", f"--cluster-cidr={CLUSTER_CIDR}", f"--pod-network-kubeconfig={server.component_kubeconfig('proxy')}",
                           *server.agent_tls_flags(name, [node.lan_ip])]).start()
            for node, name in zip(lan.nodes, ZONES):
                made.proxies.append(ProxyProcess(node, server.component_kubeconfig("proxy"), "nftables", log_dir / f"proxy-{name}.log",
                                                 "--iptables-min-sync-period=0s", f"--hostname-override={name}").start(timeout=90))
            for name in ZONES:
                made.apply(backend(name))

            def ready():
                pods = made.get("pods", "-n", NAMESPACE)["items"]
                return len(pods) == 3 and all(any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or ())
                                              for p in pods)

            try:
                wait_until(ready, 120, "three backends Ready", interval=0.5)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{made.diagnostics()}") from None
            yield made
        finally:
            for agent in made.agents.values():
                agent.stop(signal.SIGTERM, timeout=30)
                agent.cleanup()
            for proxy in made.proxies:
                proxy.kill()
            lan.close()
            manager.stop()


ALL = {"backend-t1", "backend-t2", "backend-t3"}


def test_prefer_same_zone_and_same_node(world):
    world.apply(service({"trafficDistribution": "PreferSameZone"}))
    world.wait_answers("t1", {"backend-t1", "backend-t2"}, "zone-a's node 1 reaching zone-a's backends only")
    world.wait_answers("t3", {"backend-t3"}, "zone-b's node reaching its own backend only")
    assert world.slice_hints() == [("t1", ("zone-a",), ()), ("t2", ("zone-a",), ()), ("t3", ("zone-b",), ())]
    world.apply(service({"trafficDistribution": "PreferSameNode"}))
    world.wait_answers("t1", {"backend-t1"}, "node 1 reaching its own backend only")
    world.wait_answers("t2", {"backend-t2"}, "node 2 reaching its own backend only")
    assert world.slice_hints() == [("t1", ("zone-a",), ("t1",)), ("t2", ("zone-a",), ("t2",)), ("t3", ("zone-b",), ("t3",))]


def test_topology_mode_auto_is_proportional_then_removed_when_it_would_overload(world):
    world.apply(service({}, {"service.kubernetes.io/topology-mode": "Auto"}))
    wait_until(lambda: world.slice_hints() == [("t1", ("zone-a",), ()), ("t2", ("zone-a",), ()), ("t3", ("zone-b",), ())], 30,
               "Auto hints: two endpoints for zone-a, one for zone-b")
    world.wait_answers("t3", {"backend-t3"}, "zone-b's node reaching its hinted backend only")
    world.kubectl("delete", "pod", "backend-t3", "-n", NAMESPACE, "--wait=true", timeout=90)
    wait_until(lambda: world.slice_hints() == [("t1", (), ()), ("t2", (), ())], 30, "hints removed: two endpoints cannot serve two zones")
    world.wait_answers("t3", {"backend-t1", "backend-t2"}, "zone-b's node reaching every backend left")
    events = world.get("events", "-n", NAMESPACE)["items"]
    reasons = {(e["reason"], e["message"]) for e in events if e["involvedObject"].get("name") == "web"}
    assert ("TopologyAwareHintsDisabled", "Unable to allocate minimum required endpoints to each zone without exceeding overload threshold "
            "(2 endpoints, 2 zones), addressType: IPv4") in reasons, reasons
    assert any(reason == "TopologyAwareHintsEnabled" for reason, _ in reasons), reasons
    world.apply(service({"trafficDistribution": "PreferSameZone"}))  # the annotation gone: the field's heuristic again
    wait_until(lambda: world.slice_hints() == [("t1", ("zone-a",), ()), ("t2", ("zone-a",), ())], 30, "PreferSameZone hints")
    world.wait_answers("t3", {"backend-t1", "backend-t2"}, "zone-b's node, with no zone-b endpoint, reaching every backend")
    world.wait_answers("t1", {"backend-t1", "backend-t2"}, "zone-a's node reaching zone-a's backends")
