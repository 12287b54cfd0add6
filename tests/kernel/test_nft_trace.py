"""The nftables tracer (``proxy/trace/nftables.py``) against real packets: the table our
proxier writes is applied to the real nft in a node namespace and to the fake at once
(``test_nft_fake.Tee``), then for each case the tracer's answer about a new connection is held
to what real connections do (``tests.support.netns.NodeTopology``: an outside client, three
Pods behind veths, a node with a default route back to the client).

How an answer reads in packets: endpoints ``ip:port`` → the connections land on exactly those
Pods; masqueraded → the Pod sees a node address, not the client's; ``DROP`` (and ``""``, nothing
matched: the packet leaves un-NATed towards the client, which has no such address) → no
connection, the client times out; ``REJECT`` → refused, or a timeout where the ICMP error of a
forwarded packet does not make it back (see ``tests/proxy/nftables/test_kernel.py``).
"""

from __future__ import annotations

import asyncio

import pytest

from kubesvc.kernel.fake.iptables import TEST_NODE_NAME
from kubesvc.kernel.fake.nftables import FakeKernel, FakeNFTables
from kubesvc.proxy.trace.nftables import trace_packet
from kubesvc.kernel.nftables import NFTables
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.nftables.proxier import NftablesBackend
from kubesvc.proxy.proxier import Proxier
from tests.kernel.test_nft_fake import Tee
from tests.support.builders import ep, options, port, request
from tests.support.netns import CLIENT_IP, NODE_IP, POD_CIDR, NodeTopology

pytestmark = pytest.mark.kernel

CIDRS = ("172.30.0.0/16",)


def services(t: NodeTopology) -> list:
    pod = [None, *(t.pod_ip(k) for k in (1, 2, 3))]
    return [
        (port("ns", "web", cluster_ip="172.30.0.10", node_port=30080, lb_ips=("1.2.3.4",), source_ranges=("203.0.113.0/25",)),
         (ep(pod[1], 8080), ep(pod[2], 8080))),
        (port("ns", "open", cluster_ip="172.30.0.11", lb_ips=("1.2.3.5",), source_ranges=("192.168.50.0/24",)),
         (ep(pod[2], 8080),)),
        (port("ns", "hairpin", cluster_ip="172.30.0.12"), (ep(pod[1], 8080),)),
        (port("ns", "local", cluster_ip="172.30.0.13", external_ips=("192.168.99.13",), etp_local=True),
         (ep(pod[1], 8080, TEST_NODE_NAME), ep(pod[3], 8080))),
        (port("ns", "sticky", cluster_ip="172.30.0.14", affinity_seconds=60), (ep(pod[2], 8080), ep(pod[3], 8080))),
        (port("ns", "empty", cluster_ip="172.30.0.15"), ()),
    ]


# (case, source: "client", "pod<k>" or "node" (the output hook), destination, port)
CASES = [
    ("client to a ClusterIP with two endpoints", "client", "172.30.0.10", 80),
    ("pod to a ClusterIP with two endpoints", "pod3", "172.30.0.10", 80),
    ("client to a NodePort", "client", NODE_IP, 30080),
    ("client to an LB IP its source ranges leave out", "client", "1.2.3.4", 80),
    ("client to an LB IP its source ranges allow", "client", "1.2.3.5", 80),
    ("hairpin: the endpoint to its own ClusterIP", "pod1", "172.30.0.12", 80),
    ("client to an eTP Local external IP", "client", "192.168.99.13", 80),
    ("pod to an eTP Local external IP", "pod2", "192.168.99.13", 80),
    ("client to a ClusterIP with affinity", "client", "172.30.0.14", 80),
    ("client to a ClusterIP with no endpoints", "client", "172.30.0.15", 80),
    ("client to an unallocated ClusterIP", "client", "172.30.0.99", 80),
    ("client to a ClusterIP's other port", "client", "172.30.0.10", 81),
    ("node to a ClusterIP", "node", "172.30.0.10", 80),
    ("node to its own NodePort", "node", NODE_IP, 30080),
    ("node to a ClusterIP with no endpoints", "node", "172.30.0.15", 80),
    ("node to an unallocated ClusterIP", "node", "172.30.0.99", 80),
    ("node to a ClusterIP's other port", "node", "172.30.0.10", 81),
]


@pytest.fixture(scope="module")
def world():
    t = NodeTopology(pods=3, default_via_client=True)
    try:
        for k, pod in enumerate(t.pods, start=1):
            t.serve(pod, f"pod{k}", tcp=(8080,))
        fake = FakeNFTables(4, kernel=FakeKernel())
        opts = options(POD_CIDR)
        p = Proxier(NftablesBackend(opts, nft=Tee(NFTables(4, netns=t.node.name, in_process=False), fake)), opts, ProxyMetrics())
        asyncio.run(p.run_sync(request(services(t), service_cidrs=CIDRS)))
        yield t, fake
    finally:
        t.close()


@pytest.mark.parametrize("case,source,dest,dport", CASES, ids=[c[0] for c in CASES])
def test_the_tracer_predicts_real_connections(world, case, source, dest, dport):
    t, fake = world
    k = int(source[3:]) if source.startswith("pod") else 0
    ns, source_ip = (t.pods[k - 1], t.pod_ip(k)) if k else (t.node, NODE_IP) if source == "node" else (t.client, CLIENT_IP)
    node_ips = (NODE_IP, *(t.pod_gw(i) for i in (1, 2, 3)))
    matches, output, masq = trace_packet(fake, source_ip, "tcp", dest, dport, node_ips, from_node=source == "node")
    endpoints = {f"pod{i}" for i in (1, 2, 3) if f"{t.pod_ip(i)}:8080" in output.split(", ")}
    outcomes = [o for o, _ in NodeTopology.attempts(ns, dest, dport, count=8 * len(endpoints) or 1, timeout=0.7)]
    why = f"tracer: {output!r} masq={masq} by\n  " + "\n  ".join(matches) + f"\nkernel: {outcomes}"
    if endpoints:
        landed = {o.split()[0] for o in outcomes}
        if "affinity" in case:  # the first connection picks one of them; the client then sticks to it
            assert len(landed) == 1 and landed <= endpoints, why
        else:
            assert landed == endpoints, why
        peers = {o.split()[1] for o in outcomes}
        assert (source_ip not in peers) if masq else (peers == {source_ip}), why
    elif output == "REJECT":  # from the node the ICMP error comes back; forwarded, it may not
        assert set(outcomes) <= ({"refused"} if source == "node" else {"refused", "timeout"}), why
    else:
        assert output in ("DROP", "") and outcomes == ["timeout"], why
