"""kernel/conntrack.py and kernel/netlink.py against the real kernel, in throwaway namespaces:
stale UDP flows deleted over ctnetlink by filter (the others kept), addresses read and bound
over rtnetlink, no process spawned for either."""

from __future__ import annotations

import socket
import time

import pytest

from kubesvc.kernel import conntrack, links, netlink
from kubesvc.kernel.conntrack import FlowFilter
from kubesvc.kernel.links import AddBridge
from tests.support.netns import CLIENT_IP, NODE_IP, NodeTopology

pytestmark = pytest.mark.kernel

VIP_A, VIP_B = "172.30.0.10", "172.30.0.11"


@pytest.fixture
def topo():
    t = NodeTopology(pods=2)
    try:
        yield t
    finally:
        t.close()


def dnat(t: NodeTopology) -> None:
    """UDP to VIP_A:53 DNATed to Pod 1, to VIP_B:53 to Pod 2 (what a proxy's rules do)."""
    t.node.run("nft", "-f", "-", input=f"""
table ip ct_test {{
  chain prerouting {{
    type nat hook prerouting priority dstnat; policy accept;
    ip daddr {VIP_A} udp dport 53 dnat to {t.pod_ip(1)}:5353
    ip daddr {VIP_B} udp dport 53 dnat to {t.pod_ip(2)}:5353
  }}
}}
""")


def send_udp(t: NodeTopology, vip: str, port: int = 53) -> None:
    with t.client.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(b"hello", (vip, port))


def udp_flows(t: NodeTopology) -> list[conntrack.Flow]:
    return [f for f in conntrack.flows_sync(4, netns=t.node.name) if f.protocol == socket.IPPROTO_UDP and f.orig_src == CLIENT_IP]


def wait_for_flows(t: NodeTopology, count: int) -> list[conntrack.Flow]:
    deadline = time.monotonic() + 5
    while len(flows := udp_flows(t)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return flows


def test_stale_udp_flow_deleted_by_filter_others_kept(topo):
    dnat(topo)
    send_udp(topo, VIP_A)
    send_udp(topo, VIP_B)
    flows = wait_for_flows(topo, 2)
    assert {(f.orig_dst, f.orig_dst_port, f.reply_src) for f in flows} == {
        (VIP_A, 53, topo.pod_ip(1)), (VIP_B, 53, topo.pod_ip(2))}
    assert all(f.status & conntrack.IPS_DST_NAT for f in flows)

    # another endpoint, another port, TCP: nothing matches
    misses = [FlowFilter("udp", VIP_A, 53, topo.pod_ip(2)), FlowFilter("udp", VIP_A, 54), FlowFilter("tcp", VIP_A)]
    assert conntrack.delete_flows_sync(misses, 4, netns=topo.node.name) == 0
    assert len(udp_flows(topo)) == 2

    # Pod 1 went away: the flow DNATed to it goes, the one to Pod 2 stays
    assert conntrack.delete_flows_sync([FlowFilter("udp", VIP_A, 53, topo.pod_ip(1))], 4, netns=topo.node.name) == 1
    assert [(f.orig_dst, f.reply_src) for f in udp_flows(topo)] == [(VIP_B, topo.pod_ip(2))]

    # a deleted ClusterIP: every flow to it
    assert conntrack.delete_flows_sync([FlowFilter("udp", VIP_B)], 4, netns=topo.node.name) == 1
    assert udp_flows(topo) == []


async def test_delete_flows_from_the_event_loop_counts_each_entry_once(topo):
    dnat(topo)
    send_udp(topo, VIP_A)
    wait_for_flows(topo, 1)
    overlapping = [FlowFilter("udp", VIP_A, 53), FlowFilter("udp", VIP_A, 53, topo.pod_ip(1))]
    assert await conntrack.delete_flows(overlapping, 4, netns=topo.node.name) == 1
    assert await conntrack.delete_flows(overlapping, 4, netns=topo.node.name) == 0


async def test_addresses_bound_and_unbound_over_rtnetlink(topo):
    node = topo.node.name
    assert NODE_IP in netlink.unique_ips(netlink.addresses(4, netns=node))
    index = await netlink.link_index("vcli", netns=node)
    assert index is not None and await netlink.link_index("no-such-link", netns=node) is None
    await netlink.add_address("vcli", "172.30.9.9", netns=node)
    await netlink.add_address("vcli", "172.30.9.9", netns=node)  # already bound: fine
    bound = [a for a in await netlink.addresses_async(4, netns=node) if a.address == "172.30.9.9"]
    assert [(a.index, a.prefixlen) for a in bound] == [(index, 32)]
    await netlink.del_address("vcli", "172.30.9.9", netns=node)
    await netlink.del_address("vcli", "172.30.9.9", netns=node)  # not bound: fine
    assert "172.30.9.9" not in netlink.unique_ips(netlink.addresses(4, netns=node))
    assert "172.30.9.9" not in topo.node.ip("-4", "addr").stdout
    with pytest.raises(netlink.NetlinkFailed, match="no-such-link"):
        await netlink.add_address("no-such-link", "172.30.9.9", netns=node)


async def test_an_ipv6_service_address_is_bound_as_upstream_binds_it(topo):
    """/128, and without ``nodad`` (upstream ``EnsureAddressBind`` sets no flags; the kernel
    runs duplicate address detection as for any address)."""
    node = topo.node.name
    await netlink.add_address("vcli", "fd00:30::9", netns=node)
    shown = [line for line in topo.node.ip("-6", "-o", "addr", "show", "dev", "vcli").stdout.splitlines() if "fd00:30::9" in line]
    assert len(shown) == 1 and "fd00:30::9/128" in shown[0] and "nodad" not in shown[0], shown
    await netlink.del_address("vcli", "fd00:30::9", netns=node)
    assert "fd00:30::9" not in topo.node.ip("-6", "addr").stdout


async def test_link_changes_run_kernel_links_operations_on_the_cached_socket(topo):
    """ensure_dummy/delete_link_sync/link_exists_sync go through ``kernel.links`` operations on
    the netlink thread's socket for the namespace: its links, not the thread's own namespace's."""
    node = topo.node.name
    links.apply([AddBridge("br6", "02:00:00:00:00:06")], node)
    assert netlink.link_exists_sync("br6", node) and not netlink.link_exists_sync("br6")
    assert await netlink.ensure_dummy("br6", node) == await netlink.link_index("br6", netns=node)  # there: kept as it is
    assert netlink.delete_link_sync("br6", node) is True
    assert netlink.delete_link_sync("br6", node) is False and not netlink.link_exists_sync("br6", node)
    assert "br6" not in links.link_names(node)
