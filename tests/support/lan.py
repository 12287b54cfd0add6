"""Machines on a LAN, for the cross-node Pod network tests: bare network namespaces with one
uplink each and nothing else (no Pod bridge, no routes to anyone's Pods: what the agent's
``--pod-network`` must make itself), an "internet" host outside the cluster, and optionally a
router between two LAN segments (no L2 adjacency between them: what ``vxlan`` is for)::

    one segment                                 two segments
    lan ns: bridge br0 (a switch)               lan-a ns: br0             lan-b ns: br0
      machine 1  eth0 192.168.77.11/24            machine 1 192.168.81.11   machine 3 192.168.82.13
      machine 2  eth0 192.168.77.12/24            machine 2 192.168.81.12   internet  192.168.82.200
      machine 3  eth0 192.168.77.13/24                  router ns: 192.168.81.1 | 192.168.82.1
      internet   eth0 192.168.77.200/24            (forwarding; every machine's default route)

Machine ``i`` gets podCIDR ``10.244.<i>.0/24`` (handed to its agent as ``--pod-cidr``), a relay
to the apiserver on the host's 127.0.0.1 (``tests.support.netns.Relay``), and is a
``tests.support.netns.Node`` so ``tests.support.agent.AgentProcess`` runs an agent in it.
Everything is made inside namespaces of ours (``tests.support.netns``); ``close()`` removes them.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import netns
from tests.support.netns import Netns, Node, Relay

CLUSTER_CIDR = "10.244.0.0/16"
ECHO_SOURCE = """\
import http.server, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = (self.client_address[0] + "\\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Handler)
print("ready", flush=True)
server.serve_forever()
"""


@dataclass(eq=False)
class Lan:
    """``machines`` machines on ``segments`` (1 or 2) LAN segments; build with :meth:`build`."""

    machines: int = 3
    segments: int = 1
    namespaces: list[Netns] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    internet: Netns | None = None
    internet_ip: str = ""
    relays: list[Relay] = field(default_factory=list)
    switches: list[Netns] = field(default_factory=list)

    def _ns(self, role: str) -> Netns:
        ns = Netns.create(role)
        self.namespaces.append(ns)
        return ns

    def prefix(self, segment: int) -> str:
        return "192.168.77" if self.segments == 1 else f"192.168.{81 + segment}"

    def segment_of(self, index: int) -> int:
        """Machine ``index`` (1-based): the last machine on the second segment when there are two."""
        return 1 if self.segments == 2 and index == self.machines else 0

    def build(self) -> "Lan":
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def _plug(self, ns: Netns, segment: int, port: str, address: str) -> None:
        switch = self.switches[segment]
        netns.veth(ns, "eth0", switch, port)
        netns.attach(switch, port, "br0")
        lines = [f"addr add {address}/24 dev eth0"]
        if self.segments == 2:
            lines.append(f"route add default via {self.prefix(segment)}.1 dev eth0")
        ns.ip_batch(*lines)

    def _build(self) -> None:
        for segment in range(self.segments):
            switch = self._ns(f"lan{segment}")
            netns.bridge(switch, "br0")
            self.switches.append(switch)
        if self.segments == 2:
            router = self._ns("router")
            for segment in range(2):
                netns.veth(router, f"r{segment}", self.switches[segment], "up0")
                netns.attach(self.switches[segment], "up0", "br0")
                router.ip("addr", "add", f"{self.prefix(segment)}.1/24", "dev", f"r{segment}")
            router.sysctls({"net.ipv4.ip_forward": 1})
        for index in range(1, self.machines + 1):
            ns = self._ns(f"m{index}")
            segment = self.segment_of(index)
            ip = f"{self.prefix(segment)}.{10 + index}"
            self._plug(ns, segment, f"m{index}", ip)
            self.nodes.append(Node(index, ns, ip, f"10.244.{index}.0/24", f"10.244.{index}.1"))
        self.internet = self._ns("internet")
        self.internet_ip = f"{self.prefix(self.segments - 1)}.200"
        self._plug(self.internet, self.segments - 1, "inet", self.internet_ip)

    def start_relays(self, port: int) -> None:
        for node in self.nodes:
            node.relay = Relay(node.ns, port)
            self.relays.append(node.relay)

    def serve_echo(self, ns: Netns, port: int, log_path: Path) -> subprocess.Popen:
        """An HTTP server in ``ns`` answering every GET with the client's address (what it sees)."""
        with open(log_path, "ab") as log:
            process = ns.popen(sys.executable, "-c", ECHO_SOURCE, str(port), stdout=subprocess.PIPE, stderr=log)
        line = process.stdout.readline().decode().strip()
        if line != "ready":
            raise AssertionError(f"echo server in {ns.name} did not start: {log_path.read_text()[-2000:]}")
        return process

    def close(self) -> None:
        for relay in self.relays:
            relay.close()
        self.relays.clear()
        for ns in reversed(self.namespaces):
            ns.close()
        self.namespaces.clear()
