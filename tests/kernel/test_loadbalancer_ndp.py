"""kernel/ndp.py against the real kernel, as test_loadbalancer_arp.py does for IPv4: two
namespaces on a veth, a "node" and a LAN client. The node holds an IPv6 LoadBalancer address on
lo only (Linux answers Neighbour Solicitations only for addresses on the link asked on), so the
client reaches a TCP server on the address only while the node's NdpSocket answers for it, and
an unsolicited Neighbour Advertisement replaces the client's cached entry of a previous holder
without the client asking. The client's kernel is the judge: it drops an advertisement with a
bad checksum, hop limit or flags."""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import sys

import pytest

from kubesvc.kernel.ndp import NdpSocket
from tests.kernel import test_loadbalancer_arp as ipv4
from tests.support.netns import Netns, call_in_netns, veth
from tests.support.slowdown import scaled

pytestmark = pytest.mark.kernel

NODE_IP, CLIENT_IP, VIP = "fd00:81::11", "fd00:81::100", "fd00:81::50"
OLD_MAC = "02:00:00:00:00:99"
serve_tcp = functools.partial(ipv4.serve_tcp, vip=VIP)  # the IPv4 test's server, client and readers, on the IPv6 address
connect = functools.partial(ipv4.connect, vip=VIP)
neighbour = functools.partial(ipv4.neighbour, vip=VIP)
mac_of = ipv4.mac_of


@pytest.fixture
def lan():
    node, client = Netns.create("ndpnode"), Netns.create("ndpclient")
    try:
        veth(node, "eth0", client, "eth0")
        node.ip("addr", "add", f"{NODE_IP}/64", "dev", "eth0", "nodad")
        client.ip("addr", "add", f"{CLIENT_IP}/64", "dev", "eth0", "nodad")
        node.ip("addr", "add", f"{VIP}/128", "dev", "lo")
        yield node, client
    finally:
        client.close()
        node.close()


def test_the_address_is_reached_only_while_the_node_answers_solicitations(lan):
    node, client = lan
    server = serve_tcp(node)
    try:
        with pytest.raises(OSError):  # nobody answers for the address: unreachable / timeout
            connect(client, timeout=scaled(1.0))
        client.ip("-6", "neigh", "flush", "dev", "eth0")
        ndp = call_in_netns(node.name, NdpSocket, "eth0")
        link_local = node.ip("-6", "-br", "addr", "show", "dev", "eth0", "scope", "link").stdout.split()[2].split("/")[0]
        assert str(ndp.source) == link_local  # advertisements come from eth0's link-local address

        assert ipv4.connect_while_answering(ndp, {"192.168.81.50", VIP}, client, connect) == b"hello from the VIP\n"
        assert mac_of(node, "eth0") in neighbour(client)
    finally:
        server.close()


def test_an_unsolicited_advertisement_replaces_the_previous_holders_entry(lan):
    node, client = lan
    client.ip("-6", "neigh", "replace", VIP, "lladdr", OLD_MAC, "dev", "eth0", "nud", "stale")
    assert OLD_MAC in neighbour(client)
    ndp = call_in_netns(node.name, NdpSocket, "eth0")
    try:
        asyncio.run(ndp.announce(VIP))
    finally:
        ndp.close()
    assert mac_of(node, "eth0") in neighbour(client)
    assert OLD_MAC not in neighbour(client)


def is_solicitation(frame: bytes) -> bool:
    return frame[20] == 58 and frame[54] == 135  # ICMPv6, Neighbour Solicitation


def drain(ndp: NdpSocket) -> list[bytes]:
    frames = []
    while True:
        try:
            frames.append(ndp.sock.recv(2048))
        except BlockingIOError:
            return frames


def send_udp(ns: Netns, address: str, count: int) -> None:
    ns.run(sys.executable, "-c", "import socket, time\n"
           "s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
           f"for _ in range({count}): s.sendto(b'x', ('{address}', 9))\n"
           "time.sleep(0.3)")  # the neighbour resolution the first datagram started


def test_ordinary_ipv6_traffic_never_reaches_the_announcer(lan):
    """The socket's BPF filter keeps only Neighbour Solicitations: a flow of UDP datagrams to the
    node (all of a node's IPv6 traffic would otherwise be copied to the announcer, ~10 µs of
    Python a frame; review 20) leaves nothing to read, and a solicitation still arrives."""
    node, client = lan
    send_udp(client, NODE_IP, 1)  # the neighbour entry first: its solicitation is one
    ndp = call_in_netns(node.name, NdpSocket, "eth0")
    try:
        send_udp(client, NODE_IP, 200)
        # the node's own solicitations may pass (answering the client's datagrams can need its
        # neighbour entry again on a loaded machine), the datagrams never
        seen = drain(ndp)
        assert len(seen) < 10 and all(is_solicitation(frame) for frame in seen), [frame[:60].hex() for frame in seen]
        send_udp(client, VIP, 1)  # asks who has the VIP (nobody answers)
        assert any(is_solicitation(frame) and frame[62:78] == ipaddress.IPv6Address(VIP).packed for frame in drain(ndp))
    finally:
        ndp.close()
