"""Throwaway network namespaces for kernel tests: one "node" that runs the proxy's table, Pods
and an outside client joined to it by veth pairs, TCP servers that say who they are and who
called, and a client that reports what a connection experienced.

Nothing here touches the host's own namespace except creating and deleting the named
namespaces themselves; every address used is private to them.

Layout (``Topology``)::

    client ns 192.168.50.2/24 ──veth── 192.168.50.1/24  node ns  10.1.<k>.1/24 ──veth── 10.1.<k>.2/24 pod k
                                       (ip_forward=1; the cluster/pod CIDR is 10.1.0.0/16)
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import textwrap
import time

POD_CIDR = "10.1.0.0/16"
NODE_IP = "192.168.50.1"
CLIENT_IP = "192.168.50.2"
NODE_IP6 = "fd00:50::1"
CLIENT_IP6 = "fd00:50::2"

SERVER = textwrap.dedent("""
    import socket, sys, threading
    name, port, family = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    s = socket.socket(socket.AF_INET6 if family == "6" else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::" if family == "6" else "0.0.0.0", port))
    s.listen(64)
    print("ready", flush=True)
    while True:
        c, peer = s.accept()
        try:
            c.sendall(f"{name} {peer[0]}\\n".encode())
        finally:
            c.close()
""")

CLIENT = textwrap.dedent("""
    import socket, sys, time
    ip, port, count, timeout, src = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
    fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
    for _ in range(count):
        s = socket.socket(fam)
        s.settimeout(timeout)
        if src:
            s.bind((src, 0))
        started = time.monotonic()
        try:
            s.connect((ip, port))
            data = b""
            while not data.endswith(b"\\n"):
                chunk = s.recv(100)
                if not chunk:
                    break
                data += chunk
            print("ok " + data.decode().strip(), flush=True)
        except ConnectionRefusedError:
            print(f"refused {time.monotonic() - started:.3f}", flush=True)
        except (socket.timeout, TimeoutError):
            print("timeout", flush=True)
        except OSError as err:
            print(f"error {err.errno}", flush=True)
        finally:
            s.close()
""")


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check)


class Topology:
    def __init__(self, pods: int = 2, ipv6: bool = False):
        tag = "ksnft-" + secrets.token_hex(3)
        self.node = f"{tag}-node"
        self.client = f"{tag}-cli"
        self.pods = [f"{tag}-p{k}" for k in range(1, pods + 1)]
        self.namespaces: list[str] = []
        self.servers: list[subprocess.Popen] = []
        self.ipv6 = ipv6
        try:
            self._build()
        except BaseException:
            self.cleanup()
            raise

    # addresses
    @staticmethod
    def pod_ip(k: int) -> str:
        return f"10.1.{k}.2"

    @staticmethod
    def pod_gw(k: int) -> str:
        return f"10.1.{k}.1"

    @staticmethod
    def pod_ip6(k: int) -> str:
        return f"fd00:1:{k}::2"

    def _add_ns(self, name: str) -> None:
        sh("ip", "netns", "add", name)
        self.namespaces.append(name)
        sh("ip", "-n", name, "link", "set", "lo", "up")

    def _build(self) -> None:
        self._add_ns(self.node)
        sh("ip", "netns", "exec", self.node, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        if self.ipv6:
            sh("ip", "netns", "exec", self.node, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        self._add_ns(self.client)
        sh("ip", "-n", self.node, "link", "add", "vcli", "type", "veth", "peer", "name", "eth0", "netns", self.client)
        sh("ip", "-n", self.node, "addr", "add", f"{NODE_IP}/24", "dev", "vcli")
        sh("ip", "-n", self.client, "addr", "add", f"{CLIENT_IP}/24", "dev", "eth0")
        if self.ipv6:
            sh("ip", "-n", self.node, "addr", "add", f"{NODE_IP6}/64", "dev", "vcli", "nodad")
            sh("ip", "-n", self.client, "addr", "add", f"{CLIENT_IP6}/64", "dev", "eth0", "nodad")
        sh("ip", "-n", self.node, "link", "set", "vcli", "up")
        sh("ip", "-n", self.client, "link", "set", "eth0", "up")
        sh("ip", "-n", self.client, "route", "add", "default", "via", NODE_IP)
        # a node has a default route; un-NATed packets to Service IPs die at the client
        sh("ip", "-n", self.node, "route", "add", "default", "via", CLIENT_IP)
        if self.ipv6:
            sh("ip", "-n", self.client, "-6", "route", "add", "default", "via", NODE_IP6)
            sh("ip", "-n", self.node, "-6", "route", "add", "default", "via", CLIENT_IP6)
        for k, pod in enumerate(self.pods, start=1):
            self._add_ns(pod)
            dev = f"vp{k}"
            sh("ip", "-n", self.node, "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", pod)
            sh("ip", "-n", self.node, "addr", "add", f"{self.pod_gw(k)}/24", "dev", dev)
            sh("ip", "-n", pod, "addr", "add", f"{self.pod_ip(k)}/24", "dev", "eth0")
            if self.ipv6:
                sh("ip", "-n", self.node, "addr", "add", f"fd00:1:{k}::1/64", "dev", dev, "nodad")
                sh("ip", "-n", pod, "addr", "add", f"{self.pod_ip6(k)}/64", "dev", "eth0", "nodad")
            sh("ip", "-n", self.node, "link", "set", dev, "up")
            sh("ip", "-n", pod, "link", "set", "eth0", "up")
            sh("ip", "-n", pod, "route", "add", "default", "via", self.pod_gw(k))
            if self.ipv6:
                sh("ip", "-n", pod, "-6", "route", "add", "default", "via", f"fd00:1:{k}::1")

    def serve(self, ns: str, name: str, port: int, family: int = 4) -> None:
        proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", SERVER, name, str(port), str(family)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.servers.append(proc)
        line = proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"server {name} in {ns} did not start: {proc.stderr.read()}")

    def connect(self, ns: str, ip: str, port: int, count: int = 1, timeout: float = 1.0, src: str = "") -> list[str]:
        """One line per attempt: ``ok <server> <peer seen by server>``, ``refused <seconds>``,
        ``timeout``, ``error <errno>``."""
        out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", CLIENT, ip, str(port), str(count), str(timeout), src],
                             capture_output=True, text=True, timeout=30 + count * (timeout + 1))
        if out.returncode != 0:
            raise RuntimeError(out.stderr)
        return out.stdout.split("\n")[:-1]

    def nft(self, *args: str) -> str:
        return sh("ip", "netns", "exec", self.node, "nft", *args).stdout

    def cleanup(self) -> None:
        for proc in self.servers:
            proc.kill()
            proc.wait()
        self.servers.clear()
        for name in self.namespaces:
            sh("ip", "netns", "del", name, check=False)
        self.namespaces.clear()


def kernel_tests_possible() -> str:
    """Empty if this process may create namespaces and run nft; otherwise why not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "nft"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            return f"{tool} not installed"
    return ""


def wait_until(predicate, timeout: float = 3.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
