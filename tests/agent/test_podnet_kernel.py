"""The pod network on the real kernel: each test makes a throw-away "node" namespace
(``ks-podnet-<hex>``), runs the agent's pod network code inside it (a thread entered with
``setns(2)``, as the agent would run in a node's namespace), and checks what a user would see:
Pods reaching each other and the gateway (ICMP echo, a real TCP connection to a listener in the
other Pod), their addresses and routes, the state files, a restart, removal, a full range,
and a teardown that leaves the node (and the host) as they were. Pod namespaces are named with a
per-test prefix ``ks-p<hex>-``; everything is removed after each test, pass or fail.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import socket
import statistics
import struct
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from kubesvc.agent import podnet
from kubesvc.agent.podnet import NodeNetwork, PodNetwork, PodNetworkError, RangeExhausted
from tests.support.netns import netns_names, netns_pids
from tests.support.netns import Netns, bridge, call_in_netns, socket_in

CIDR = "10.244.1.0/24"
GATEWAY = "10.244.1.1"


pytestmark = pytest.mark.kernel  # prerequisites (root, ip) checked by tests/conftest.py: missing ones fail, never skip


# ---------------------------------------------------------------------------------------------
# a node namespace running the pod network code


@dataclass
class Node:
    ns: Netns
    state_dir: Path
    prefix: str

    def net(self, *cidrs: str, bridge: str = "cbr0") -> NodeNetwork:
        return NodeNetwork(list(cidrs or [CIDR]), bridge, self.prefix, state_dir=self.state_dir)

    def run(self, fn, *args):
        """``fn(*args)`` on a thread inside the node's namespace; a coroutine function runs to completion there."""
        if asyncio.iscoroutinefunction(fn):
            return call_in_netns(self.ns.name, lambda: asyncio.run(fn(*args)))
        return call_in_netns(self.ns.name, fn, *args)

    def links(self) -> str:
        return self.ns.ip("-o", "link", "show").stdout

    def pod_namespaces(self) -> list[str]:
        """This node's Pod namespaces (other tests may be making their own meanwhile)."""
        return [name for name in netns_names() if name.startswith(self.prefix)]

    def link_names(self) -> set[str]:
        return {line.split(":")[1].strip().split("@")[0] for line in self.links().splitlines()}


@pytest.fixture
def node(tmp_path):
    ns = Netns.create("podnet")
    made = Node(ns, tmp_path / "state", f"ks-p{secrets.token_hex(3)}-")
    try:
        yield made
    finally:
        errors = made.run(podnet.teardown_sync, made.state_dir)
        left = [name for name in netns_names() if name.startswith(made.prefix)]
        for name in left:  # whatever teardown could not remove
            Netns(name).close()
        ns.close()
    assert not errors and not left, f"teardown failed: {errors}; left behind: {left}"


def new_uid() -> str:
    return str(uuid.uuid4())


# ---------------------------------------------------------------------------------------------
# what a user observes


def ping(ns: str, dst: str, timeout: float = 2.0) -> int:
    """One ICMP echo from namespace ``ns`` to ``dst``; the TTL of the reply (AssertionError if none)."""
    sock = call_in_netns(ns, socket.socket, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    ident = os.getpid() & 0xFFFF
    try:
        sock.settimeout(timeout)
        header = struct.pack("!BBHHH", 8, 0, 0, ident, 1) + b"podnet"
        sock.sendto(struct.pack("!BBHHH", 8, 0, _checksum(header), ident, 1) + b"podnet", (dst, 0))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            packet, (src, _) = sock.recvfrom(2048)
            ihl = (packet[0] & 0x0F) * 4
            kind, _, _, reply_id, _ = struct.unpack("!BBHHH", packet[ihl:ihl + 8])
            if kind == 0 and reply_id == ident and src == dst:
                return packet[8]
    except socket.timeout:
        pass
    finally:
        sock.close()
    raise AssertionError(f"no echo reply from {dst} in {ns}")


def _checksum(data: bytes) -> int:
    total = sum(struct.unpack(f"!{len(data) // 2}H", data + b"\0" * (len(data) % 2)))
    total = (total >> 16) + (total & 0xFFFF)
    return ~(total + (total >> 16)) & 0xFFFF


def tcp_connect(client_ns: str, server_ns: str, server_ip: str, port: int = 8080) -> str:
    """A real TCP connection from ``client_ns`` to a listener on ``server_ip`` in ``server_ns``;
    the source address the server saw (after a byte each way)."""
    family = socket.AF_INET6 if ":" in server_ip else socket.AF_INET
    listener = socket_in(server_ns, family)
    client = socket_in(client_ns, family)
    try:
        listener.bind((server_ip, port))
        listener.listen(1)
        client.settimeout(3)
        listener.settimeout(3)
        client.connect((server_ip, port))
        accepted, peer = listener.accept()
        with accepted:
            client.sendall(b"?")
            assert accepted.recv(1) == b"?"
            accepted.sendall(b"!")
            assert client.recv(1) == b"!"
        return peer[0]
    finally:
        client.close()
        listener.close()


def pod_routes(pod: PodNetwork, family: str = "-4") -> list[str]:
    return sorted(line.strip() for line in Netns(pod.netns).ip(family, "route", "show").stdout.splitlines() if line.strip())


def pod_addresses(pod: PodNetwork) -> list[str]:
    text = Netns(pod.netns).ip("-o", "address", "show", "dev", "eth0").stdout
    return [line.split()[3] for line in text.splitlines() if " scope global " in line]


def ip_files(node: Node, bridge_name: str = "cbr0") -> dict[str, str]:
    directory = node.state_dir / "networks" / bridge_name
    return {p.name: p.read_text() for p in sorted(directory.iterdir())} if directory.is_dir() else {}


# ---------------------------------------------------------------------------------------------
# tests


def test_two_pods_reach_each_other_and_the_gateway_through_the_node(node):
    net = node.net()
    node.run(podnet.ensure_node_network, net)
    a_uid, b_uid = new_uid(), new_uid()
    a = node.run(podnet.add_pod, net, a_uid)
    b = node.run(podnet.add_pod, net, b_uid)

    assert (a.ips, b.ips) == (["10.244.1.2"], ["10.244.1.3"])
    assert (a.netns, a.host_veth) == (node.prefix + a_uid, podnet.host_veth_name(a_uid))
    assert pod_addresses(a) == ["10.244.1.2/32"]
    assert pod_routes(a) == ["10.244.1.1 dev eth0 scope link", "default via 10.244.1.1 dev eth0"]
    assert "UP" in Netns(a.netns).ip("link", "show", "lo").stdout
    ports = node.ns.ip("-o", "link", "show", "master", "cbr0").stdout
    assert {a.host_veth, b.host_veth} == {line.split(":")[1].strip().split("@")[0] for line in ports.splitlines()}
    assert f"inet {GATEWAY}/24" in node.ns.ip("address", "show", "dev", "cbr0").stdout
    assert node.ns.read_sysctl("net.ipv4.ip_forward") == "1"
    assert node.ns.read_sysctl(f"net.ipv4.conf.{a.host_veth}.send_redirects") == "0"
    assert ip_files(node) == {"10.244.1.2": a_uid, "10.244.1.3": b_uid, "last_reserved_ip.0": "10.244.1.3"}

    assert ping(a.netns, GATEWAY) == 64
    assert ping(a.netns, "10.244.1.3") == 63, "a bridge neighbour is reached through the node's IP stack (one hop)"
    assert ping(b.netns, "10.244.1.2") == 63
    assert tcp_connect(a.netns, b.netns, "10.244.1.3") == "10.244.1.2"
    assert tcp_connect(b.netns, node.ns.name, GATEWAY) == "10.244.1.3"
    assert tcp_connect(node.ns.name, a.netns, "10.244.1.2") == GATEWAY


def test_add_pod_again_after_a_restart_returns_the_same_network_and_repairs_it(node):
    uid = new_uid()
    node.run(podnet.ensure_node_network, node.net())
    pod = node.run(podnet.add_pod, node.net(), uid)
    files = ip_files(node)

    restarted = node.net()  # a new agent process over the same state dir
    node.run(podnet.ensure_node_network, restarted)
    assert node.run(podnet.existing_pods, restarted) == {uid: pod}
    assert node.run(podnet.add_pod, restarted, uid) == pod
    assert ip_files(node) == files
    assert podnet.read_record(node.state_dir).created_bridge, "the bridge it made before the restart is still its own"

    node.ns.ip("link", "del", pod.host_veth)  # as if the agent died half-way through add_pod
    assert node.run(podnet.add_pod, restarted, uid) == pod
    assert pod_routes(pod) == ["10.244.1.1 dev eth0 scope link", "default via 10.244.1.1 dev eth0"]
    assert ping(pod.netns, GATEWAY) == 64


def test_remove_pod_releases_the_address_and_deletes_namespace_and_veth(node):
    net = node.net()
    node.run(podnet.ensure_node_network, net)
    mac = node.ns.ip("-o", "link", "show", "cbr0").stdout.split("link/ether ")[1].split()[0]
    assert mac == podnet.bridge_mac("cbr0", [CIDR])
    a_uid, b_uid = new_uid(), new_uid()
    a = node.run(podnet.add_pod, net, a_uid)
    b = node.run(podnet.add_pod, net, b_uid)

    node.run(podnet.remove_pod, net, a_uid)
    assert a.netns not in netns_names() and b.netns in netns_names()
    assert a.host_veth not in node.link_names()
    assert "10.244.1.2" not in ip_files(node)
    assert node.ns.ip("-o", "link", "show", "cbr0").stdout.split("link/ether ")[1].split()[0] == mac, "the bridge keeps its MAC"
    assert ping(b.netns, GATEWAY) == 64
    node.run(podnet.remove_pod, net, a_uid)  # again: nothing left to do

    c = node.run(podnet.add_pod, net, new_uid())
    assert c.ips == ["10.244.1.4"], "round robin: the released address is not handed out next"


def test_a_full_range_is_a_clear_error_and_changes_nothing(node):
    net = node.net("10.244.9.0/30")
    node.run(podnet.ensure_node_network, net)
    first = node.run(podnet.add_pod, net, new_uid())
    assert first.ips == ["10.244.9.2"]
    before = (node.pod_namespaces(), node.links(), ip_files(node))

    uid = new_uid()
    with pytest.raises(RangeExhausted, match=r"^no IP addresses available in range set: 10\.244\.9\.1-10\.244\.9\.2$"):
        node.run(podnet.add_pod, net, uid)
    assert (node.pod_namespaces(), node.links(), ip_files(node)) == before


def test_dual_stack_pods_get_an_address_of_each_family(node):
    net = node.net(CIDR, "fd00:10:244:1::/64")
    node.run(podnet.ensure_node_network, net)
    a = node.run(podnet.add_pod, net, new_uid())
    b = node.run(podnet.add_pod, net, new_uid())

    assert a.ips == ["10.244.1.2", "fd00:10:244:1::2"]
    assert pod_addresses(a) == ["10.244.1.2/32", "fd00:10:244:1::2/128"]
    routes = [re.sub(r" (metric|pref) \S+", "", route) for route in pod_routes(a, "-6")]
    assert "default via fd00:10:244:1::1 dev eth0" in routes
    assert "fd00:10:244:1::1 dev eth0" in routes
    assert tcp_connect(a.netns, b.netns, "fd00:10:244:1::3") == "fd00:10:244:1::2"
    assert tcp_connect(b.netns, node.ns.name, "fd00:10:244:1::1") == "fd00:10:244:1::3"
    assert tcp_connect(a.netns, b.netns, "10.244.1.3") == "10.244.1.2"


def test_teardown_leaves_the_node_as_it_was_and_kills_what_ran_in_pods(node):
    before = (node.pod_namespaces(), node.links(), node.ns.ip("address", "show").stdout)
    net = node.net()
    node.run(podnet.ensure_node_network, net)
    pods = [node.run(podnet.add_pod, net, new_uid()) for _ in range(2)]
    sleeper = subprocess.Popen(["ip", "netns", "exec", pods[0].netns, "sleep", "600"])
    try:
        # `ip netns exec` joins the namespace a moment after it starts (slower under load): tear
        # down only once the process is in it, or it would simply not be there to kill.
        deadline = time.monotonic() + 10
        while sleeper.pid not in netns_pids(pods[0].netns):
            assert time.monotonic() < deadline and sleeper.poll() is None, "the sleeper never entered the Pod's namespace"
            time.sleep(0.01)
        assert node.run(podnet.teardown_node_network, net) == []
        assert sleeper.wait(timeout=5) == -9
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
    assert (node.pod_namespaces(), node.links(), node.ns.ip("address", "show").stdout) == before
    assert list(node.state_dir.iterdir()) == []


def test_kubesvc_down_tears_down_from_the_host_namespace_with_only_the_state_dir(node):
    host_links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    before = (node.pod_namespaces(), node.links())
    net = node.net(CIDR, "fd00:10:244:1::/64")
    node.run(podnet.ensure_node_network, net)
    for _ in range(3):
        node.run(podnet.add_pod, net, new_uid())

    assert podnet.teardown_sync(node.state_dir) == []  # this thread: the host's namespace
    assert (node.pod_namespaces(), node.links()) == before
    assert subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout == host_links
    assert podnet.teardown_sync(node.state_dir) == []  # nothing recorded any more


@pytest.mark.parametrize("address", ["10.244.1.1/24", None], ids=["with-the-gateway-address", "without-an-address"])
def test_an_existing_bridge_is_adopted_and_left_as_it_was(node, address):
    bridge(node.ns, "cbr0", address)
    before = (node.link_names(), bridge_addresses(node))
    net = node.net()
    node.run(podnet.ensure_node_network, net)
    pod = node.run(podnet.add_pod, net, new_uid())
    assert ping(pod.netns, GATEWAY) == 64

    assert node.run(podnet.teardown_node_network, net) == []
    assert (node.link_names(), bridge_addresses(node)) == before  # (its MAC and carrier are the kernel's business)


def bridge_addresses(node: Node) -> list[str]:
    return [line.split()[3] for line in node.ns.ip("-o", "address", "show", "dev", "cbr0").stdout.splitlines()]


def test_a_bridge_with_another_address_is_refused(node):
    bridge(node.ns, "cbr0", "10.244.7.1/24")
    with pytest.raises(PodNetworkError, match="'cbr0' already has an IP address different from 10.244.1.1/24"):
        node.run(podnet.ensure_node_network, node.net())


def test_a_namespace_sharing_the_prefix_without_an_address_is_not_ours(node):
    """Another agent (or another kubesvc up) with the same prefix: never reported, never removed."""
    net = node.net()
    node.run(podnet.ensure_node_network, net)
    uid = new_uid()
    pod = node.run(podnet.add_pod, net, uid)
    foreign = Netns.create("foreign", name=f"{node.prefix}foreign")
    try:
        assert node.run(podnet.existing_pods, net) == {uid: pod}
        assert node.run(podnet.teardown_node_network, net) == []
        assert foreign.name in netns_names() and pod.netns not in netns_names()
    finally:
        foreign.close()


def test_add_pod_and_remove_pod_take_well_under_100ms(node):
    net = node.net()
    node.run(podnet.ensure_node_network, net)
    uids = [new_uid() for _ in range(10)]

    async def timed(fn) -> list[float]:
        took = []
        for uid in uids:
            start = time.perf_counter()
            await fn(net, uid)
            took.append(time.perf_counter() - start)
        return took

    adds = node.run(timed, podnet.add_pod)
    removes = node.run(timed, podnet.remove_pod)
    print(f"add_pod median {statistics.median(adds) * 1000:.1f} ms (max {max(adds) * 1000:.1f}); "
          f"remove_pod median {statistics.median(removes) * 1000:.1f} ms (max {max(removes) * 1000:.1f})")
    assert statistics.median(adds) < 0.1 and statistics.median(removes) < 0.1
