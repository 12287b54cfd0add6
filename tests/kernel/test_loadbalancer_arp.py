"""kernel/arp.py against the real kernel: two namespaces on a veth, a "node" and a LAN client.
The node holds a LoadBalancer address on no LAN interface (on lo, with arp_ignore=1 on its LAN
link, so the kernel itself never answers for it): the client reaches a TCP server on the
address only while the node's ArpSocket answers ARP for it, and a gratuitous announcement
replaces the client's cached entry of a previous holder without the client asking."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading

import pytest

from kubesvc.kernel.arp import ArpSocket
from tests.support.netns import Netns, call_in_netns, socket_in, veth
from tests.support.slowdown import scaled

pytestmark = pytest.mark.kernel

NODE_IP, CLIENT_IP, VIP = "192.168.81.11", "192.168.81.100", "192.168.81.50"
OLD_MAC = "02:00:00:00:00:99"


@pytest.fixture
def lan():
    node, client = Netns.create("lbnode"), Netns.create("lbclient")
    try:
        veth(node, "eth0", client, "eth0")
        node.add_address("eth0", f"{NODE_IP}/24")
        client.add_address("eth0", f"{CLIENT_IP}/24")
        node.add_address("lo", f"{VIP}/32")
        node.sysctls({"net.ipv4.conf.all.arp_ignore": 1, "net.ipv4.conf.eth0.arp_ignore": 1})
        client.sysctls({"net.ipv4.neigh.eth0.locktime": 0})
        yield node, client
    finally:
        client.close()
        node.close()


def serve_tcp(node: Netns, vip: str = VIP) -> socket.socket:
    """A TCP server on ``vip``:8080 in ``node`` (IPv4 or IPv6) greeting every connection."""
    server = socket_in(node.name, socket.AF_INET6 if ":" in vip else socket.AF_INET)
    server.bind((vip, 8080))
    server.listen(8)

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                conn.sendall(b"hello from the VIP\n")
                conn.close()

    threading.Thread(target=accept, daemon=True).start()
    return server


def connect(client: Netns, timeout: float, vip: str = VIP) -> bytes:
    conn = socket_in(client.name, socket.AF_INET6 if ":" in vip else socket.AF_INET)
    conn.settimeout(timeout)
    try:
        conn.connect((vip, 8080))
        return conn.recv(100)
    finally:
        conn.close()


def neighbour(client: Netns, vip: str = VIP) -> str:
    return client.ip("neigh", "show", vip, "dev", "eth0").stdout


def mac_of(ns: Netns, dev: str) -> str:
    return ns.ip("-br", "link", "show", dev).stdout.split()[2]


def test_the_address_is_reached_only_while_the_node_answers_arp(lan):
    node, client = lan
    server = serve_tcp(node)
    try:
        with pytest.raises(OSError):  # nobody answers ARP for the address: no route to host / timeout
            connect(client, timeout=scaled(1.0))
        client.ip("neigh", "flush", "dev", "eth0")
        arp = call_in_netns(node.name, ArpSocket, "eth0")

        assert connect_while_answering(arp, {VIP}, client) == b"hello from the VIP\n"
        assert mac_of(node, "eth0") in neighbour(client)
    finally:
        server.close()


def connect_while_answering(announcer, addresses: set[str], client, connect=connect) -> bytes:
    """What the client's ``connect`` to the VIP reads while ``announcer`` (an ArpSocket or
    NdpSocket of the node) answers for ``addresses``; the socket is closed after (the NDP test
    uses it too)."""
    async def answering():
        task = asyncio.create_task(announcer.serve(lambda: addresses))
        try:
            return await asyncio.to_thread(connect, client, scaled(5.0))
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    try:
        return asyncio.run(answering())
    finally:
        announcer.close()


def test_a_gratuitous_announcement_replaces_the_previous_holders_entry(lan):
    node, client = lan
    client.ip("neigh", "replace", VIP, "lladdr", OLD_MAC, "dev", "eth0", "nud", "stale")
    assert OLD_MAC in neighbour(client)
    arp = call_in_netns(node.name, ArpSocket, "eth0")
    try:
        asyncio.run(arp.announce(VIP))
    finally:
        arp.close()
    assert mac_of(node, "eth0") in neighbour(client)
    assert OLD_MAC not in neighbour(client)
