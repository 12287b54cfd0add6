"""Throwaway network namespaces for the iptables kernel tests.

Topology (one per test)::

    client ns                      node ns (kube-proxy rules live here)
    vc 192.168.50.2/24  <--veth-->  vn 192.168.50.1/24 (the node IP)
    default via .1                  kdummy0 (a port-less bridge; no dummy driver here): endpoint IPs (10.180.0.x/32), route 172.30.0.0/16
                                    ip_forward=1; TCP/UDP servers bound to the endpoint IPs

Traffic from the client crosses nat PREROUTING (DNAT), then filter INPUT (to a local
endpoint) or FORWARD (to an unanswered ClusterIP); traffic started inside the node crosses nat
and filter OUTPUT. Nothing is ever sent outside these two namespaces, and every iptables
command carries ``ip netns exec <node ns>``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid

NODE_IP = "192.168.50.1"
CLIENT_IP = "192.168.50.2"
NS_PREFIX = "ksipt-"

_SERVER = r"""
import json, socket, sys, threading
socks = []
for ip, port, proto in json.loads(sys.argv[1]):
    fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, port))
    if proto == "tcp":
        s.listen(256)
    socks.append((s, proto, ("[%s]:%d" if ":" in ip else "%s:%d") % (ip, port)))
def tcp(s, ident):
    while True:
        c, _ = s.accept()
        try:
            c.sendall(ident.encode())
        finally:
            c.close()
def udp(s, ident):
    while True:
        _, addr = s.recvfrom(100)
        s.sendto(ident.encode(), addr)
for s, proto, ident in socks:
    threading.Thread(target=tcp if proto == "tcp" else udp, args=(s, ident), daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""

_CLIENT = r"""
import json, socket, sys, time
ip, port, proto, count, timeout, src = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
out = []
for _ in range(count):
    s = socket.socket(fam, socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
    s.settimeout(timeout)
    started = time.monotonic()
    try:
        if src:
            s.bind((src, 0))
        s.connect((ip, port))
        if proto == "udp":
            s.send(b"x")
        result = s.recv(100).decode()
    except ConnectionRefusedError:
        result = "refused"
    except socket.timeout:
        result = "timeout"
    except OSError as e:
        result = "error:%d" % e.errno
    finally:
        s.close()
    out.append([result, time.monotonic() - started])
print(json.dumps(out))
"""


def available() -> str | None:
    """Why the kernel tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("ip", "iptables", "iptables-restore", "iptables-save"):
        if shutil.which(tool) is None:
            return f"{tool} not installed"
    name = f"{NS_PREFIX}probe-{uuid.uuid4().hex[:6]}"
    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
        return "cannot create network namespaces"
    try:
        probe = subprocess.run(["ip", "netns", "exec", name, "iptables", "-w", "5", "-t", "nat", "-N", "KSIPT-PROBE"], capture_output=True)
        if probe.returncode != 0:
            return "iptables does not work in a network namespace: " + probe.stderr.decode().strip()
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _check(ns: str) -> None:
    if not ns.startswith(NS_PREFIX):  # never touch the host's own namespace
        raise AssertionError(f"refusing to run outside a test namespace: {ns!r}")


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check)


def in_ns(ns: str, *argv: str, check: bool = True, input_text: str | None = None) -> subprocess.CompletedProcess:
    _check(ns)
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, check=check, input=input_text)


class Topology:
    def __init__(self):
        tag = uuid.uuid4().hex[:8]
        self.node = f"{NS_PREFIX}{tag}-n"
        self.client = f"{NS_PREFIX}{tag}-c"
        self.procs: list[subprocess.Popen] = []
        self.created: list[str] = []

    def setup(self, endpoint_ips: list[str]) -> Topology:
        for ns in (self.node, self.client):
            sh("ip", "netns", "add", ns)
            self.created.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", self.node, "link", "add", "vn", "type", "veth", "peer", "name", "vc", "netns", self.client)
        sh("ip", "-n", self.node, "addr", "add", f"{NODE_IP}/24", "dev", "vn")
        sh("ip", "-n", self.node, "link", "set", "vn", "up")
        sh("ip", "-n", self.client, "addr", "add", f"{CLIENT_IP}/24", "dev", "vc")
        sh("ip", "-n", self.client, "link", "set", "vc", "up")
        sh("ip", "-n", self.client, "route", "add", "default", "via", NODE_IP)
        sh("ip", "-n", self.node, "link", "add", "kdummy0", "type", "bridge")
        sh("ip", "-n", self.node, "link", "set", "kdummy0", "up")
        for ip in endpoint_ips:
            sh("ip", "-n", self.node, "addr", "add", f"{ip}/32", "dev", "kdummy0")
        for net in ("172.30.0.0/16", "198.51.100.0/24"):  # ClusterIPs, LoadBalancer VIPs
            sh("ip", "-n", self.node, "route", "add", net, "dev", "kdummy0")
        in_ns(self.node, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        return self

    def teardown(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=5)
        for ns in self.created:
            sh("ip", "netns", "del", ns, check=False)

    def start_servers(self, ns: str, specs: list[tuple[str, int, str]]) -> None:
        _check(ns)
        proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", _SERVER, json.dumps(specs)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(proc)
        line = proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"server did not start: {proc.stderr.read()}")

    def probe(self, ns: str, ip: str, port: int, proto: str = "tcp", count: int = 1, timeout: float = 1.0,
              source: str = "") -> list[tuple[str, float]]:
        """``count`` fresh connections (UDP: connected sockets) → [(endpoint that answered |
        "refused" | "timeout" | "error:N", seconds)]."""
        out = in_ns(ns, sys.executable, "-c", _CLIENT, ip, str(port), proto, str(count), str(timeout), source)
        return [(r, t) for r, t in json.loads(out.stdout)]

    def answers(self, *args, **kwargs) -> list[str]:
        return [r for r, _ in self.probe(*args, **kwargs)]

    def iptables_save(self, ns: str | None = None) -> str:
        return in_ns(ns or self.node, "iptables-save").stdout
