"""Throw-away network namespaces for kernel tests: nodes, Pods and an external client wired
with veths and bridges, a relay that lets a node reach the apiserver on the host's loopback,
and ``kubesvc proxy`` run inside a node.

Nothing here touches the host's own network namespace: every link is created *inside* a
namespace of ours (``ip -n NS link add ... peer ... netns OTHER``), every address, route,
sysctl and rule lives in one of them, and traffic only flows between them. Namespaces are
named ``ks-<role>-<xdist worker>-<random>`` (two workers, or two tests, never collide) and
deleted (with every process started in them) by ``close()``; a command is only ever run in a
namespace of ours (the ``ks-`` prefix), never in the host's. Only a test marked ``kernel``
may make one (tests/conftest.py tells the harness which test runs).

Two topologies: :class:`Cluster` (nodes on a LAN, Pods, an apiserver relay, ``kubesvc proxy``
in a node: the end-to-end tests) and :class:`NodeTopology` (one node whose rules a backend in
the test process programs, an outside client, Pods or node-local endpoints: the backend
tests). Links are veth pairs and bridges (this kernel has no ``dummy`` link type).

The topology a :class:`Cluster` builds::

    client ns (192.168.77.100, .101) --+   (routes each podCIDR via its node; service,
                                       |    LB and external IPs via node 1 or a chosen node)
                                       |  lan ns: bridge br0 (192.168.77.1, a switch; routes nothing)
    node ns 1 eth0 192.168.77.11 ------+
      cbr0 10.244.1.1/24 -- veth -- pod ns 10.244.1.10/32 (default via 10.244.1.1)
      routes: 10.244.2.0/24 via 192.168.77.12; default via 192.168.77.1
    node ns 2 eth0 192.168.77.12 ------+
      cbr0 10.244.2.1/24 -- ...

Pods get a /32 and reach even their bridge neighbours through the node (the gateway), so every
Pod-to-Pod packet crosses the node's IP stack where the proxy's rules are (as with Calico;
no reliance on bridge netfilter for a reply to be un-DNATed).

The apiserver runs on the host's 127.0.0.1. A node reaches it through a :class:`Relay`: a
listening socket created inside the node's namespace on 127.0.0.1:<apiserver port> (a thread
enters the namespace with ``setns(2)``, creates the socket, and switches back; the socket keeps
its namespace), whose connections the test process forwards to the host's 127.0.0.1 on the
same port. The apiserver's kubeconfig therefore works unchanged inside the node (the serving
certificate is for 127.0.0.1), and kubectl and the Python client keep working from the host.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import ipaddress
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.slowdown import scaled

REPO_ROOT = Path(__file__).resolve().parents[2]
CLONE_NEWNET = 0x40000000
PREFIX = "ks-"

_libc = ctypes.CDLL(None, use_errno=True)


# ---------------------------------------------------------------------------------------------
# prerequisites


@functools.cache
def missing_prerequisites() -> list[str]:
    """What keeps kernel tests from running here (empty: nothing); asked once per process."""
    problems = []
    if os.geteuid() != 0:
        problems.append("kernel tests need root (network namespaces, nftables, iptables)")
    missing = [tool for tool in ("ip", "nft", "iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save",
                                 "ip6tables-restore", "sysctl", "ipset", "conntrack", "strace") if shutil.which(tool) is None]
    if missing:
        problems.append(f"missing on PATH: {', '.join(missing)} (Debian: apt-get install iproute2 nftables iptables procps ipset "
                        "conntrack strace)")
    if not hasattr(_libc, "setns"):
        problems.append("libc has no setns()")
    if not problems:
        problems += _iptables_in_a_netns()
    return problems


def _iptables_in_a_netns() -> list[str]:
    """Whether iptables works inside a network namespace (a container may forbid it)."""
    name = unique_name("probe")
    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
        return ["cannot create network namespaces"]
    try:
        probe = subprocess.run(["ip", "netns", "exec", name, "iptables", "-w", "5", "-t", "nat", "-N", "KS-PROBE"], capture_output=True, text=True)
        return [] if probe.returncode == 0 else ["iptables does not work in a network namespace: " + probe.stderr.strip()]
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


# ---------------------------------------------------------------------------------------------
# names, and which test may make namespaces

_kernel_test: bool | None = None  # None: not under pytest (bench/, scripts)


def current_test_is_kernel(kernel: bool) -> None:
    """Called by tests/conftest.py before each test: whether it is marked ``kernel``."""
    global _kernel_test
    _kernel_test = kernel


def unique_name(role: str) -> str:
    """``ks-<role>-<xdist worker>-<random>``: unique across workers, tests and leftovers of an earlier run."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return f"{PREFIX}{role}-{worker}-{secrets.token_hex(3)}"


def _check_ours(name: str) -> None:
    if not name.startswith(PREFIX):  # never run anything in the host's namespace or another's
        raise AssertionError(f"refusing to work in a network namespace that is not a test's own: {name!r}")


def signal_and_wait(process: "subprocess.Popen | None", sig: int, timeout: float) -> int | None:
    """Send ``sig`` to a still-running ``process`` and wait for its exit (SIGKILL after
    ``timeout``); its exit code (None: never started)."""
    if process is None:
        return None
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


# ---------------------------------------------------------------------------------------------
# entering a namespace from a thread


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def call_in_netns(name: str, fn, *args):
    """``fn(*args)`` on a new thread that has entered network namespace ``name`` (and switches
    back before it ends); returns its result or raises its exception. Sockets made by ``fn``
    stay in that namespace for their whole life, whichever thread later uses them."""
    outcome: dict = {}

    def body() -> None:
        original = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            target = os.open(f"/run/netns/{name}", os.O_RDONLY)
            try:
                _setns(target)
                try:
                    outcome["value"] = fn(*args)
                finally:
                    _setns(original)
            finally:
                os.close(target)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome["error"] = exc
        finally:
            os.close(original)

    thread = threading.Thread(target=body, name=f"setns-{name}")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def socket_in(name: str, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
    """A new socket that lives in network namespace ``name``."""
    return call_in_netns(name, socket.socket, family, kind)


# ---------------------------------------------------------------------------------------------
# one namespace


def _run(argv: list[str], *, check: bool = True, timeout: float = 60, input: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input, cwd=REPO_ROOT)
    if check and result.returncode != 0:
        raise CommandFailed(argv, result, input)
    return result


class CommandFailed(AssertionError):
    def __init__(self, argv, result, input=None):
        self.argv, self.result = argv, result
        text = f"{' '.join(map(str, argv))} exited {result.returncode}\nstdout: {result.stdout[-3000:]}\nstderr: {result.stderr[-3000:]}"
        if input:
            text += f"\ninput: {input[:2000]}"
        super().__init__(text)


class Netns:
    """A network namespace of the test's own (``ip netns add``), with lo up."""

    def __init__(self, name: str):
        self.name = name
        self.processes: list[subprocess.Popen] = []
        self.closed = False

    @classmethod
    def create(cls, role: str, *, name: str | None = None) -> "Netns":
        """A new namespace named for ``role`` (:func:`unique_name`), or exactly ``name`` (a ``ks-`` one)."""
        if _kernel_test is False:
            raise AssertionError("a test that makes network namespaces must be marked kernel "
                                 "(module-level `pytestmark = pytest.mark.kernel`)")
        name = name or unique_name(role)
        _check_ours(name)
        _run(["ip", "netns", "add", name])
        ns = cls(name)
        ns.ip("link", "set", "lo", "up")
        return ns

    def __repr__(self) -> str:
        return f"Netns({self.name})"

    # -- commands inside

    def argv(self, *cmd: str) -> list[str]:
        _check_ours(self.name)
        return ["ip", "netns", "exec", self.name, *map(str, cmd)]

    def run(self, *cmd: str, check: bool = True, timeout: float = 60, input: str | None = None) -> subprocess.CompletedProcess:
        """``cmd`` inside the namespace, to completion (text output captured)."""
        return _run(self.argv(*cmd), check=check, timeout=timeout, input=input)

    def popen(self, *cmd: str, **options) -> subprocess.Popen:
        """``cmd`` started inside the namespace; killed by ``close()`` if still running."""
        options.setdefault("cwd", REPO_ROOT)
        process = subprocess.Popen(self.argv(*cmd), **options)
        self.processes.append(process)
        return process

    def python(self, module: str, *args: str) -> list[str]:
        """argv running ``python -m module args`` (this interpreter, the repository's modules)."""
        return [sys.executable, "-m", module, *map(str, args)]

    def ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        _check_ours(self.name)
        return _run(["ip", "-n", self.name, *map(str, args)], check=check)

    def ip_batch(self, *lines: str) -> None:
        """Several ``ip`` commands in one process (``ip -batch``)."""
        _run(["ip", "-n", self.name, "-batch", "-"], input="\n".join(lines) + "\n")

    def sysctls(self, settings: dict[str, object]) -> None:
        """``sysctl -w key=value ...`` inside the namespace."""
        if settings:
            self.run("sysctl", "-qw", *(f"{k}={v}" for k, v in settings.items()))

    def read_sysctl(self, key: str) -> str:
        return self.run("sysctl", "-n", key).stdout.strip()

    def add_address(self, dev: str, cidr: str) -> None:
        self.ip("addr", "add", cidr, "dev", dev)

    def add_route(self, dst: str, via: str | None = None, dev: str | None = None) -> None:
        args = ["route", "replace", dst]
        if via:
            args += ["via", via]
        if dev:
            args += ["dev", dev]
        self.ip(*args)

    def nft_ruleset(self) -> str:
        return self.run("nft", "list", "ruleset").stdout

    def iptables_save(self, ipv6: bool = False) -> str:
        return self.run("ip6tables-save" if ipv6 else "iptables-save").stdout

    # -- sockets inside

    def socket(self, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
        return socket_in(self.name, family, kind)

    def http_get(self, port: int, path: str = "/", host: str = "127.0.0.1", timeout: float = 2.0) -> tuple[int, str]:
        """One HTTP/1.0 GET from inside the namespace: (status, body)."""
        sock = self.socket()
        try:
            sock.settimeout(timeout)
            sock.connect((host, port))
            sock.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
            chunks = []
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            sock.close()
        raw = b"".join(chunks).decode(errors="replace")
        head, _, body = raw.partition("\r\n\r\n")
        status_line = head.split("\r\n", 1)[0]
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise OSError(f"not an HTTP response from {host}:{port}{path}: {raw[:200]!r}")
        return int(parts[1]), body

    # -- teardown

    def pids(self) -> list[int]:
        return netns_pids(self.name)

    def close(self) -> None:
        """Kill what runs inside (what we started, then anything they left), delete it."""
        if self.closed:
            return
        self.closed = True
        for process in self.processes:
            if process.poll() is None:
                process.kill()
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
        remove_netns(self.name)  # with the children of our own processes (nft, iptables-restore...)


def netns_names() -> list[str]:
    """``ip netns list``, names only: the tool's view (kernel tests hold kernel.netns to it)."""
    return [line.split()[0] for line in _run(["ip", "netns", "list"]).stdout.splitlines() if line.strip()]


def netns_pids(name: str) -> list[int]:
    """``ip netns pids NAME`` ([] when there is no such namespace)."""
    result = _run(["ip", "netns", "pids", name], check=False)
    return [int(p) for p in result.stdout.split() if p.isdigit()]


def remove_netns(name: str) -> None:
    """Kill everything inside namespace ``name`` and delete it (teardown of a test's namespace or
    of one its agent made: never fails)."""
    for _ in range(3):
        leftovers = netns_pids(name)
        if not leftovers:
            break
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    _run(["ip", "netns", "del", name], check=False)


class LoggedProcess:
    """A harness-started ``process`` whose output goes to ``log_path``: ``alive`` and the log's
    tail (the agent's and the proxy's process holders share these)."""

    process: "subprocess.Popen | None"
    log_path: Path

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self, tail: int = 4000) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return text[-tail:] if tail else text


def veth(a: Netns, a_name: str, b: Netns, b_name: str) -> None:
    """A veth pair made inside ``a`` with its peer born in ``b`` (never in the host's namespace), both up."""
    a.ip("link", "add", a_name, "type", "veth", "peer", "name", b_name, "netns", b.name)
    a.ip("link", "set", a_name, "up")
    b.ip("link", "set", b_name, "up")


def bridge(ns: Netns, name: str, cidr: str | None = None) -> None:
    """A Linux bridge inside ``ns`` (up), with ``cidr`` on it if given."""
    lines = [f"link add {name} type bridge", f"link set {name} up"]
    if cidr:
        lines.append(f"addr add {cidr} dev {name}")
    ns.ip_batch(*lines)


def attach(ns: Netns, dev: str, bridge_name: str) -> None:
    ns.ip("link", "set", dev, "master", bridge_name, "up")


# ---------------------------------------------------------------------------------------------
# the apiserver relay


class Relay:
    """Listens inside ``ns`` on 127.0.0.1:``port`` and forwards every connection to the host's
    ``target`` (default 127.0.0.1:``port``): each accepted connection gets a fresh host-side
    connection and two pump threads. ``close()`` stops listening and cuts every connection."""

    def __init__(self, ns: Netns, port: int, target: tuple[str, int] | None = None):
        self.ns = ns
        self.port = port
        self.target = target or ("127.0.0.1", port)
        self.listener = ns.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(128)
        self.connections: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.closed = False
        self.accepted = 0
        self.thread = threading.Thread(target=self._accept_loop, name=f"relay-{ns.name}", daemon=True)
        self.thread.start()

    def _accept_loop(self) -> None:
        while not self.closed:
            try:
                inside, _ = self.listener.accept()
            except OSError:
                if self.closed:
                    return
                time.sleep(0.01)
                continue
            try:
                outside = socket.create_connection(self.target, timeout=10)  # this thread: the host's namespace
                outside.settimeout(None)
            except OSError:
                inside.close()
                continue
            self.accepted += 1
            with self.lock:
                if self.closed:
                    inside.close()
                    outside.close()
                    return
                self.connections |= {inside, outside}
            state = {"open": 2}
            for src, dst in ((inside, outside), (outside, inside)):
                threading.Thread(target=self._pump, args=(src, dst, state), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, state: dict) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
        with self.lock:
            state["open"] -= 1
            done = state["open"] == 0
            if done:
                self.connections -= {src, dst}
        if done:
            src.close()
            dst.close()

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        with self.lock:
            conns, self.connections = list(self.connections), set()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self.thread.join(timeout=5)


# ---------------------------------------------------------------------------------------------
# the cluster topology


@dataclass(eq=False)
class Node:
    """A node: its namespace (``name`` is both the namespace's and the Node object's name)."""

    index: int
    ns: Netns
    lan_ip: str
    pod_cidr: str
    gateway: str
    relay: Relay | None = None
    next_pod: int = 10
    next_veth: int = 0

    @property
    def name(self) -> str:
        return self.ns.name

    def node_object(self) -> dict:
        """The Node as a kubelet would register it: InternalIP = the LAN address, the podCIDR."""
        return {"metadata": {"name": self.name, "labels": {"kubernetes.io/hostname": self.name}},
                "spec": {"podCIDR": self.pod_cidr, "podCIDRs": [self.pod_cidr]},
                "status": {"addresses": [{"type": "InternalIP", "address": self.lan_ip}, {"type": "Hostname", "address": self.name}],
                           "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                           "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}]}}


@dataclass(eq=False)
class Pod:
    """A Pod's namespace on ``node``, with backend_server answering as ``name``."""

    name: str
    node: Node
    ns: Netns
    ip: str
    veth: str
    server: subprocess.Popen | None = None
    log_path: Path | None = None
    api: dict | None = None  # the Pod object, when a test registered one

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""


@dataclass(eq=False)
class Client:
    ns: Netns
    ips: list[str] = field(default_factory=list)

    @property
    def ip(self) -> str:
        return self.ips[0]

    @property
    def name(self) -> str:
        return self.ns.name


class Cluster:
    """``nodes`` node namespaces on one LAN (a bridge in its own namespace) with an external
    client; Pods added on demand. Build with :meth:`build`, tear down with :meth:`close`
    (everything, pass or fail)."""

    SERVICE_CIDR = "10.96.0.0/12"
    LB_CIDR = "203.0.113.0/24"
    EXTERNAL_CIDR = "198.51.100.0/24"

    def __init__(self, nodes: int = 2, lan: str = "192.168.77", cluster_cidr: str = "10.244.0.0/16", log_dir: Path | None = None,
                 client_ips: int = 2):
        self.node_count = nodes
        self.lan_prefix = lan
        self.cluster_cidr = cluster_cidr
        self.log_dir = Path(log_dir) if log_dir else Path("/tmp")
        self.client_ip_count = client_ips
        self.namespaces: list[Netns] = []
        self.lan: Netns | None = None
        self.nodes: list[Node] = []
        self.client: Client | None = None
        self.pods: list[Pod] = []
        self.relays: list[Relay] = []
        self.apiserver_port: int | None = None
        self._allocating = threading.Lock()

    @property
    def lan_gateway(self) -> str:
        return f"{self.lan_prefix}.1"

    def _ns(self, role: str) -> Netns:
        ns = Netns.create(role)
        self.namespaces.append(ns)
        return ns

    def build(self) -> "Cluster":
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def _build(self) -> None:
        self.lan = self._ns("lan")
        bridge(self.lan, "br0", f"{self.lan_gateway}/24")
        client_ns = self._ns("client")
        veth(client_ns, "eth0", self.lan, "c0")
        attach(self.lan, "c0", "br0")
        self.client = Client(client_ns, [f"{self.lan_prefix}.{100 + k}" for k in range(self.client_ip_count)])
        client_ns.ip_batch(*(f"addr add {ip}/24 dev eth0" for ip in self.client.ips))
        for _ in range(self.node_count):
            self.add_node()
        self.route_external_via(self.nodes[0])

    def add_node(self) -> Node:
        """One more node on the LAN: its pod bridge and podCIDR (10.244.<i>.0/24), forwarding
        on, routes to and from every other node's podCIDR, the client's route to its podCIDR,
        and a relay if the cluster has an apiserver port already."""
        assert self.lan is not None and self.client is not None
        i = max((n.index for n in self.nodes), default=0) + 1
        ns = self._ns(f"node{i}")
        pod_net = list(ipaddress.ip_network(self.cluster_cidr).subnets(new_prefix=24))[i]
        node = Node(i, ns, f"{self.lan_prefix}.{10 + i}", str(pod_net), str(pod_net.network_address + 1))
        veth(ns, "eth0", self.lan, f"n{i}")
        attach(self.lan, f"n{i}", "br0")
        bridge(ns, "cbr0", f"{node.gateway}/{pod_net.prefixlen}")
        ns.ip_batch(f"addr add {node.lan_ip}/24 dev eth0", f"route add default via {self.lan_gateway} dev eth0")
        ns.sysctls({"net.ipv4.ip_forward": 1, "net.ipv4.conf.all.send_redirects": 0, "net.ipv4.conf.default.send_redirects": 0,
                    "net.ipv4.conf.cbr0.send_redirects": 0, "net.ipv4.conf.all.rp_filter": 0, "net.ipv4.conf.default.rp_filter": 0,
                    # a REJECT is an ICMP error, which the kernel rate-limits per destination (a
                    # burst of 6, then one a second): a test sending hundreds of connections from
                    # one client to a Service without endpoints must see every one refused
                    "net.ipv4.icmp_ratelimit": 0, "net.ipv4.icmp_msgs_per_sec": 100000, "net.ipv4.icmp_msgs_burst": 100000})
        for other in self.nodes:
            ns.add_route(other.pod_cidr, via=other.lan_ip)
            other.ns.add_route(node.pod_cidr, via=node.lan_ip)
        self.client.ns.add_route(node.pod_cidr, via=node.lan_ip)
        self.nodes.append(node)
        if self.apiserver_port:
            node.relay = Relay(node.ns, self.apiserver_port)
            self.relays.append(node.relay)
        return node

    def remove_node(self, node: Node) -> None:
        """Delete ``node`` (its Pods, relay, namespace) and the routes others had to it."""
        for pod in [p for p in self.pods if p.node is node]:
            self.remove_pod(pod)
        if node.relay is not None:
            node.relay.close()
            self.relays.remove(node.relay)
            node.relay = None
        self.nodes.remove(node)
        for other in self.nodes:
            other.ns.ip("route", "del", node.pod_cidr, check=False)
        if self.client is not None:
            self.client.ns.ip("route", "del", node.pod_cidr, check=False)
        node.ns.close()
        if node.ns in self.namespaces:
            self.namespaces.remove(node.ns)

    def route_external_via(self, node: Node, *cidrs: str) -> None:
        """The external client sends the service CIDR, LoadBalancer and external IPs (or
        ``cidrs``) to ``node``'s LAN address."""
        assert self.client is not None
        for cidr in cidrs or (self.SERVICE_CIDR, self.LB_CIDR, self.EXTERNAL_CIDR):
            self.client.ns.add_route(cidr, via=node.lan_ip)

    def node(self, index: int) -> Node:
        return self.nodes[index - 1]

    # -- relays

    def start_relays(self, port: int) -> None:
        """A relay in every node (and every node added later) to the host's 127.0.0.1:``port``
        (the apiserver)."""
        self.apiserver_port = port
        for node in self.nodes:
            if node.relay is None:
                node.relay = Relay(node.ns, port)
                self.relays.append(node.relay)

    # -- Pods

    def add_pod(self, node: Node, name: str, ip: str | None = None, *, tcp: tuple[int, ...] = (8080,), udp: tuple[int, ...] = (8080,),
                echo: tuple[int, ...] = (), serve: bool = True, wait: bool = True) -> Pod:
        """A Pod namespace on ``node``: veth into cbr0, ``ip``/32, default route via the bridge;
        backend_server answering as ``name`` on ``tcp``/``udp``/``echo`` ports (waits until it listens)."""
        with self._allocating:  # Pods may be added from several threads at once
            if ip is None:
                ip = self.next_pod_ip(node)
            ns = self._ns("pod")
            node.next_veth += 1
            host_side = f"vp{node.next_veth}"
        try:
            node.ns.ip("link", "add", host_side, "type", "veth", "peer", "name", "eth0", "netns", ns.name)
            node.ns.ip("link", "set", host_side, "master", "cbr0", "up")
            node.ns.sysctls({f"net.ipv4.conf.{host_side}.send_redirects": 0})
            ns.ip_batch("link set eth0 up", f"addr add {ip}/32 dev eth0", f"route add {node.gateway} dev eth0 scope link",
                        f"route add default via {node.gateway} dev eth0")
        except BaseException:
            ns.close()
            raise
        pod = Pod(name, node, ns, ip, host_side)
        self.pods.append(pod)
        if serve:
            self.start_server(pod, tcp=tcp, udp=udp, echo=echo, wait=wait)
        return pod

    def next_pod_ip(self, node: Node) -> str:
        net = ipaddress.ip_network(node.pod_cidr)
        ip = str(net.network_address + node.next_pod)
        node.next_pod += 1
        if node.next_pod >= net.num_addresses - 1:
            raise AssertionError(f"{node.name}: pod addresses exhausted")
        return ip

    def start_server(self, pod: Pod, *, tcp=(8080,), udp=(8080,), echo=(), wait: bool = True) -> None:
        args = ["--name", pod.name]
        for flag, ports in (("--tcp", tcp), ("--udp", udp), ("--echo", echo)):
            for port in ports:
                args += [flag, str(port)]
        pod.log_path = self.log_dir / f"backend-{pod.name}-{pod.ns.name}.log"
        log = open(pod.log_path, "ab")
        pod.server = pod.ns.popen(*pod.ns.python("tests.support.backend_server", *args), stdout=subprocess.PIPE, stderr=log)
        log.close()
        if wait:
            self.wait_server(pod)

    @staticmethod
    def wait_server(pod: Pod, timeout: float = 15) -> None:
        assert pod.server is not None and pod.server.stdout is not None
        deadline = time.monotonic() + scaled(timeout)
        import selectors

        with selectors.DefaultSelector() as sel:
            sel.register(pod.server.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if sel.select(timeout=0.1):
                    line = pod.server.stdout.readline()
                    if line.strip() == b"ready":
                        return
                    if not line:
                        break
        raise AssertionError(f"backend_server in {pod.ns.name} ({pod.name}) did not start: {pod.log()[-2000:]}")

    def remove_pod(self, pod: Pod) -> None:
        if pod in self.pods:
            self.pods.remove(pod)
        pod.ns.close()
        if pod.ns in self.namespaces:
            self.namespaces.remove(pod.ns)
        pod.node.ns.ip("link", "del", pod.veth, check=False)  # gone with the peer already; no-op then

    # -- traffic

    def probe(self, where: "Netns | Node | Pod | Client", proto: str, host: str, port: int, count: int = 1, *, timeout: float = 1.0,
              concurrency: int = 64, bind: str | None = None, source_port: int | None = None, interval: float = 0.0,
              sequence: bool = False) -> dict:
        """tests.support.probe run inside ``where``; its JSON result."""
        return run_probe(_netns_of(where), proto, host, port, count, timeout=timeout, concurrency=concurrency, bind=bind,
                         source_port=source_port, interval=interval, sequence=sequence)

    # -- teardown

    def close(self) -> None:
        for relay in self.relays:
            relay.close()
        self.relays.clear()
        for ns in reversed(self.namespaces):
            ns.close()
        self.namespaces.clear()
        self.pods.clear()


def _netns_of(where) -> Netns:
    if isinstance(where, Netns):
        return where
    return where.ns


def probe_args(proto: str, host: str, port: int, count: int = 1, *, timeout: float = 1.0, concurrency: int = 64, bind: str | None = None,
               source_port: int | None = None, interval: float = 0.0, sequence: bool = False, stream: bool = False) -> list[str]:
    """tests.support.probe's command-line arguments."""
    args = [proto, host, str(port), "--count", str(count), "--timeout", str(timeout), "--concurrency", str(concurrency)]
    if bind:
        args += ["--bind", bind]
    if source_port:
        args += ["--source-port", str(source_port)]
    if interval:
        args += ["--interval", str(interval)]
    if sequence:
        args.append("--sequence")
    if stream:
        args.append("--stream")
    return args


def probe_argv(proto: str, host: str, port: int, count: int = 1, **options) -> list[str]:
    """argv running tests.support.probe as a process of its own (for a probe that streams)."""
    return [sys.executable, "-m", "tests.support.probe", *probe_args(proto, host, port, count, **options)]


def run_probe(ns: Netns, proto: str, host: str, port: int, count: int = 1, **options) -> dict:
    """tests.support.probe's result, run in this process on a thread that has entered ``ns``
    (its sockets live there): no interpreter to start per probe, which matters most where
    Python starts slowly (the IPVS VM)."""
    import asyncio

    from tests.support import probe

    args = probe.parse(probe_args(proto, host, port, count, **options))
    return call_in_netns(ns.name, lambda: asyncio.run(probe.run(args)))


def _now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------------------------
# kubesvc proxy in a node


class Metrics(dict):
    """A /metrics scrape: ``{'name{label="v",...}': value}``; :meth:`get` sums the series of a
    name whose labels include the given ones (0 if none)."""

    def __init__(self, text: str):
        from prometheus_client.parser import text_string_to_metric_families

        super().__init__()
        self.text = text
        self.samples: list[tuple[str, dict, float]] = []
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                self[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
                self.samples.append((sample.name, dict(sample.labels), sample.value))

    def value(self, name: str, default: float = 0.0, **labels) -> float:
        found = [v for n, ls, v in self.samples if n == name and all(ls.get(k) == str(want) for k, want in labels.items())]
        return sum(found) if found else default

    def has(self, name: str) -> bool:
        return any(n == name for n, _, _ in self.samples)


class ProxyFailed(AssertionError):
    pass


# How long a started proxy may take to answer /healthz 200 with a first sync in /metrics. A wait,
# not a bound under test (no test asserts on it): CI has seen a proxy's first iptables-save take
# 38 s and its start 15 s when the machine was loaded, and 30 s then failed a module's first test.
READY_TIMEOUT = 60.0


class ProxyProcess(LoggedProcess):
    """``kubesvc proxy`` running inside ``node``'s namespace as kube-proxy would run on a node:

        ip netns exec <node> python -m kubesvc proxy --kubeconfig <file> --hostname-override <node>
            --proxy-mode <mode> --cluster-cidr 10.244.0.0/16 --metrics-bind-address 127.0.0.1:10249
            --healthz-bind-address 0.0.0.0:10256 [extra flags]

    with its log in ``log_path`` (appended across restarts)."""

    def __init__(self, node: Node, kubeconfig: Path, mode: str, log_path: Path, *extra: str, cluster_cidr: str = "10.244.0.0/16",
                 metrics_port: int = 10249, healthz_port: int = 10256):
        self.node = node
        self.kubeconfig = Path(kubeconfig)
        self.mode = mode
        self.log_path = Path(log_path)
        self.extra = list(extra)
        self.cluster_cidr = cluster_cidr
        self.metrics_port = metrics_port
        self.healthz_port = healthz_port
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def command(self) -> list[str]:
        return [sys.executable, "-m", "kubesvc", "proxy", f"--kubeconfig={self.kubeconfig}", f"--hostname-override={self.node.name}",
                f"--proxy-mode={self.mode}", f"--cluster-cidr={self.cluster_cidr}", f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                f"--healthz-bind-address=0.0.0.0:{self.healthz_port}", *self.extra]

    def start(self, wait: bool = True, timeout: float = READY_TIMEOUT) -> "ProxyProcess":
        assert not self.alive, "already running"
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(self.command())}\n".encode())
            log.flush()
            self.process = self.node.ns.popen(*self.command(), stdout=log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready(timeout)
        return self

    def _fail(self, why: str) -> ProxyFailed:
        return ProxyFailed(f"kubesvc proxy ({self.mode}) in {self.node.name}: {why}\n--- proxy log (tail) ---\n{self.log()}")

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> Metrics:
        """Until /healthz answers 200 and /metrics shows a completed sync."""
        deadline = time.monotonic() + scaled(timeout)
        last = "no answer"
        while time.monotonic() < deadline:
            if not self.alive:
                raise self._fail(f"exited with {self.process.returncode if self.process else None} before becoming ready")
            try:
                status, body = self.healthz()
                last = f"/healthz {status}: {body[:200]}"
                if status == 200:
                    metrics = self.metrics()
                    if metrics.value("kubeproxy_sync_proxy_rules_last_timestamp_seconds") > 0:
                        return metrics
                    last = "/healthz 200 but no sync in /metrics yet"
            except OSError as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.1)
        raise self._fail(f"not ready within {timeout}s (last: {last})")

    def healthz(self, path: str = "/healthz") -> tuple[int, str]:
        return self.node.ns.http_get(self.healthz_port, path)

    def metrics(self) -> Metrics:
        status, body = self.node.ns.http_get(self.metrics_port, "/metrics", timeout=scaled(5))  # a traced proxy in the VM is slow
        if status != 200:
            raise self._fail(f"/metrics answered {status}: {body[:300]}")
        return Metrics(body)

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 15) -> int | None:
        """Send ``sig`` (default: kill -9) and wait for the exit; the exit code."""
        return signal_and_wait(self.process, sig, timeout)

    def stop(self) -> int | None:
        return self.kill(signal.SIGTERM)

    def restart(self, wait: bool = True, timeout: float = READY_TIMEOUT) -> "ProxyProcess":
        self.kill()
        return self.start(wait=wait, timeout=timeout)

    def cleanup(self, timeout: float = 60) -> subprocess.CompletedProcess:
        """``kubesvc proxy --cleanup`` in the node (the proxy itself should not be running)."""
        return self.node.ns.run(sys.executable, "-m", "kubesvc", "proxy", "--cleanup", check=False, timeout=timeout)


def wait_until(predicate, timeout: float, message: str, interval: float = 0.2):
    """Poll ``predicate`` (sync) until truthy; its value, or AssertionError with the last one."""
    deadline = time.monotonic() + timeout
    value = None
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}; last: {value!r}"[:3000])
        time.sleep(interval)


# ---------------------------------------------------------------------------------------------
# one node and an outside client: backend tests


NODE_IP, CLIENT_IP = "192.168.50.1", "192.168.50.2"
NODE_IP6, CLIENT_IP6 = "fd00:50::1", "fd00:50::2"
POD_CIDR = "10.1.0.0/16"


class NodeTopology:
    """One node namespace whose rules a backend running in the test process programs (it drives
    ``nft``/``iptables`` inside with ``netns=topology.node.name``), an outside client, and
    either Pods or endpoints on the node itself::

        client ns 192.168.50.2/24 --veth-- 192.168.50.1/24  node ns (ip_forward=1)
          default via the node               Pod k: 10.1.<k>.1/24 --veth vp<k>-- 10.1.<k>.2/24 pod ns k
                                             local_ips: /32s on kdummy0, a port-less bridge (no dummy
                                               driver here) that also carries ``local_routes``

    Traffic from the client crosses the node's nat PREROUTING, then INPUT (a local endpoint) or
    FORWARD (a Pod); traffic started in the node crosses OUTPUT. With ``default_via_client`` the
    node's default route points back at the client, so un-NATed packets to Service IPs die
    there as on a real node. ``ipv6`` adds fd00:50::/64 on the link and fd00:1:<k>::/64 per Pod.
    Everything it made goes with :meth:`close`, pass or fail."""

    def __init__(self, pods: int = 0, *, ipv6: bool = False, local_ips: tuple[str, ...] = (), local_routes: tuple[str, ...] = (),
                 default_via_client: bool = False):
        self.ipv6 = ipv6
        self.namespaces: list[Netns] = []
        self.pods: list[Netns] = []
        try:
            self.node = self._ns("node")
            self.client = self._ns("client")
            self._build(pods, local_ips, local_routes, default_via_client)
        except BaseException:
            self.close()
            raise

    def _ns(self, role: str) -> Netns:
        ns = Netns.create(role)
        self.namespaces.append(ns)
        return ns

    def _build(self, pods: int, local_ips: tuple[str, ...], local_routes: tuple[str, ...], default_via_client: bool) -> None:
        node, client = self.node, self.client
        node.sysctls({"net.ipv4.ip_forward": 1, **({"net.ipv6.conf.all.forwarding": 1} if self.ipv6 else {})})
        veth(node, "vcli", client, "eth0")
        node.add_address("vcli", f"{NODE_IP}/24")
        client.add_address("eth0", f"{CLIENT_IP}/24")
        client.add_route("default", via=NODE_IP)
        if default_via_client:
            node.add_route("default", via=CLIENT_IP)
        if self.ipv6:
            node.ip("addr", "add", f"{NODE_IP6}/64", "dev", "vcli", "nodad")
            client.ip("addr", "add", f"{CLIENT_IP6}/64", "dev", "eth0", "nodad")
            client.ip("-6", "route", "add", "default", "via", NODE_IP6)
            if default_via_client:
                node.ip("-6", "route", "add", "default", "via", CLIENT_IP6)
        for k in range(1, pods + 1):
            pod = self._ns(f"p{k}")
            self.pods.append(pod)
            veth(node, f"vp{k}", pod, "eth0")
            node.add_address(f"vp{k}", f"{self.pod_gw(k)}/24")
            pod.add_address("eth0", f"{self.pod_ip(k)}/24")
            pod.add_route("default", via=self.pod_gw(k))
            if self.ipv6:
                node.ip("addr", "add", f"fd00:1:{k}::1/64", "dev", f"vp{k}", "nodad")
                pod.ip("addr", "add", f"{self.pod_ip6(k)}/64", "dev", "eth0", "nodad")
                pod.ip("-6", "route", "add", "default", "via", f"fd00:1:{k}::1")
        if local_ips or local_routes:
            bridge(node, "kdummy0")
            node.ip_batch(*(f"addr add {ip}/32 dev kdummy0" for ip in local_ips), *(f"route add {net} dev kdummy0" for net in local_routes))

    # -- addresses

    @staticmethod
    def pod_ip(k: int) -> str:
        return f"10.1.{k}.2"

    @staticmethod
    def pod_gw(k: int) -> str:
        return f"10.1.{k}.1"

    @staticmethod
    def pod_ip6(k: int) -> str:
        return f"fd00:1:{k}::2"

    # -- servers and clients

    def serve(self, ns: Netns, name: str, *, tcp: tuple[int, ...] = (), udp: tuple[int, ...] = (), host: str = "0.0.0.0") -> None:
        """tests.support.backend_server in ``ns`` answering as ``name`` (``"<name> <source ip>"``); waits until it listens."""
        self.serve_many(ns, [(name, host, tcp, udp)])

    def serve_many(self, ns: Netns, servers: list[tuple[str, str, tuple[int, ...], tuple[int, ...]]]) -> None:
        """Several backend_servers in ``ns`` at once, each ``(name, host, tcp ports, udp ports)``."""
        started = []
        for name, host, tcp, udp in servers:
            args = ["--name", name, "--host", host, *(a for port in tcp for a in ("--tcp", str(port))),
                    *(a for port in udp for a in ("--udp", str(port)))]
            started.append((name, ns.popen(*ns.python("tests.support.backend_server", *args), stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE)))
        for name, process in started:
            if process.stdout.readline().strip() != b"ready":
                raise AssertionError(f"backend_server {name} in {ns.name} did not start: {process.stderr.read().decode(errors='replace')}")

    @staticmethod
    def attempts(ns: Netns, host: str, port: int, proto: str = "tcp", *, count: int = 1, timeout: float = 1.0,
                 source: str = "") -> list[tuple[str, float]]:
        """``count`` fresh connections (UDP: connected sockets), one after another, from inside
        ``ns``: each one's outcome as tests.support.probe names it (``"<name> <source ip the
        server saw>"``, ``refused``, ``timeout``, ``reset``, ``error:<errno>``) and its seconds.
        tests.support.probe's single attempts, run in this process on a thread inside ``ns``."""
        import asyncio

        from tests.support import probe

        bind = (source, 0) if source else None

        async def run() -> list[tuple[str, float]]:
            out = []
            for _ in range(count):
                started = time.monotonic()
                if proto == "tcp":
                    outcome = await probe.tcp_once(host, port, timeout, bind)
                else:
                    outcome = await probe.udp_once(None, host, port, timeout, bind)
                out.append((outcome, time.monotonic() - started))
            return out

        return call_in_netns(ns.name, lambda: asyncio.run(run()))

    def nft(self, *args: str) -> str:
        return self.node.run("nft", *args).stdout

    def iptables_save(self, ns: Netns | None = None) -> str:
        return (ns or self.node).iptables_save()

    def close(self) -> None:
        for ns in reversed(self.namespaces):
            ns.close()
        self.namespaces.clear()


__all__ = ["Client", "Cluster", "CommandFailed", "Metrics", "Netns", "Node", "NodeTopology", "Pod", "ProxyFailed", "ProxyProcess", "Relay",
           "attach", "bridge", "call_in_netns", "current_test_is_kernel", "missing_prerequisites", "probe_args", "probe_argv",
           "run_probe", "socket_in", "unique_name", "veth", "wait_until"]
