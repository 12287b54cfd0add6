"""Where a packet lands, traced (``proxy.trace.nftables``) through the table the nftables
mode left in the nftables fake: upstream's packet-flow tests from
``pkg/proxy/nftables/proxier_test.go`` (TestNoEndpointsReject, TestClusterIPGeneral,
TestLoadBalancer, TestExternalTrafficPolicyLocal/Cluster, TestInternalExternalMasquerade, the
Services of TestOverallNFTablesRules), with their case tables and expectations as written there (the tables both modes share are
imported from the iptables module; nftables' own differences are spelled out here).
Our rule layout differs from upstream's (no endpoint chains, shared endpoint maps, a hairpin
pair set); where a packet lands must not.

The mode runs inside the shared proxier (``proxy/proxier.py``), which decides full or partial
and commits the state, as in production.
"""

from __future__ import annotations

import pytest

from kubesvc.kernel.fake.iptables import (TEST_EXTERNAL_CLIENT, TEST_EXTERNAL_CLIENT_BLOCKED, TEST_NODE_IP, TEST_NODE_IP_ALT, TEST_NODE_IPV6,
                                          TEST_NODE_IPS, TEST_NODE_IPV6_ALT, TEST_NODE_NAME, Flow, run_flows)
from kubesvc.kernel.fake.nftables import FakeNFTables
from kubesvc.proxy.trace.nftables import TraceError
from kubesvc.proxy.trace.nftables import trace_packet as trace_any
from kubesvc.proxy.backend import ProxyOptions, SyncFailed
from kubesvc.proxy.localdetector import LocalDetector
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.nftables.proxier import NftablesBackend
from kubesvc.proxy.proxier import Proxier
from kubesvc.proxy.types import IPV4

# upstream's tables, the same in both modes
from tests.proxy.iptables.test_packet_flow import ITP_CASES, MASQ_CASES, MASQ_FLOWS, TERMINATING_CASES, TERMINATING_IDS
from tests.support.builders import POD_CIDR, Cluster, ep, port, spn


def trace_packet(nft, source, protocol, dest, port, node_ips=TEST_NODE_IPS, **kw):
    """The tracer (``proxy/trace/nftables.py``) with the fakes' node addresses."""
    return trace_any(nft, source, protocol, dest, port, node_ips, **kw)


def check_flows(nft: FakeNFTables, flows: list[Flow], node_ips=TEST_NODE_IPS) -> None:
    """upstream ``runPacketFlowTests`` over the nftables fake: every failing flow reported together."""
    run_flows(lambda flow: trace_packet(nft, flow.source, flow.protocol, flow.dest, flow.port, node_ips), flows)


SERVICE_CIDRS = {4: ("172.30.0.0/16",), 6: ("fd00:10:96::/112",)}  # upstream NewFakeProxier's serviceCIDRs


class FakeProxier:
    """upstream ``NewFakeProxier`` for nftables: node ``test-node``, pod-CIDR local detector,
    the fake kernel, the shared proxier around the mode."""

    def __init__(self, family: int = IPV4, *, detector: bool = True, **options):
        self.family = family
        self.nft = FakeNFTables(family)
        detect = LocalDetector(cidr=POD_CIDR[family], family=family) if detector else LocalDetector(family=family)
        opts = ProxyOptions(family=family, node_name=TEST_NODE_NAME, local_detector=detect, **options)
        self.proxier = Proxier(NftablesBackend(opts, nft=self.nft, clock=lambda: 0.0), opts, ProxyMetrics())

    async def sync(self, cluster: Cluster):
        return await self.proxier.run_sync(cluster.request(service_cidrs=SERVICE_CIDRS[self.family]))

    def check(self, flows: list[Flow]) -> None:
        check_flows(self.nft, flows)


async def test_no_endpoints_reject():
    fp = FakeProxier()
    c = Cluster().add(port("ns1", "svc1", cluster_ip="172.30.0.41", node_port=3001, external_ips=["192.168.99.11"], lb_ips=["1.2.3.4"]))
    await fp.sync(c)
    fp.check([
        Flow("pod to cluster IP with no endpoints", "10.0.0.2", "172.30.0.41", 80, "REJECT"),
        Flow("external to external IP with no endpoints", TEST_EXTERNAL_CLIENT, "192.168.99.11", 80, "REJECT"),
        Flow("pod to NodePort with no endpoints", "10.0.0.2", TEST_NODE_IP, 3001, "REJECT"),
        Flow("external to NodePort with no endpoints", TEST_EXTERNAL_CLIENT, TEST_NODE_IP, 3001, "REJECT"),
        Flow("pod to LoadBalancer IP with no endpoints", "10.0.0.2", "1.2.3.4", 80, "REJECT"),
        Flow("external to LoadBalancer IP with no endpoints", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, "REJECT"),
    ])


async def test_cluster_ip_general():
    fp = FakeProxier()
    c = Cluster()
    c.add(port("ns1", "svc1", "http", cluster_ip="172.30.0.41"),
          port("ns2", "svc2", "http", 80, cluster_ip="172.30.0.42"),
          port("ns2", "svc2", "https", 443, cluster_ip="172.30.0.42"),
          port("ns2", "svc2", "dns-udp", 53, "UDP", cluster_ip="172.30.0.42"),
          port("ns2", "svc2", "dns-tcp", 53, "TCP", cluster_ip="172.30.0.42"),
          port("ns2", "svc2", "dns-sctp", 53, "SCTP", cluster_ip="172.30.0.42"))
    c.set_endpoints(spn("ns1", "svc1", "http"), ep("10.180.0.1", 80, TEST_NODE_NAME))
    for name, target, proto in (("http", 80, "TCP"), ("https", 8443, "TCP"), ("dns-udp", 53, "UDP"), ("dns-tcp", 5353, "TCP"),
                                ("dns-sctp", 53, "SCTP")):
        c.set_endpoints(spn("ns2", "svc2", name, proto), ep("10.180.0.1", target, TEST_NODE_NAME), ep("10.180.2.1", target, "node2"))
    await fp.sync(c)
    fp.check([
        Flow("simple clusterIP", "10.180.0.2", "172.30.0.41", 80, "10.180.0.1:80"),
        Flow("hairpin to cluster IP", "10.180.0.1", "172.30.0.41", 80, "10.180.0.1:80", masq=True),
        Flow("clusterIP with multiple endpoints", "10.180.0.2", "172.30.0.42", 80, "10.180.0.1:80, 10.180.2.1:80"),
        Flow("clusterIP with TargetPort", "10.180.0.2", "172.30.0.42", 443, "10.180.0.1:8443, 10.180.2.1:8443"),
        Flow("clusterIP with TCP, UDP, and SCTP on same port (TCP)", "10.180.0.2", "172.30.0.42", 53, "10.180.0.1:5353, 10.180.2.1:5353"),
        Flow("clusterIP with TCP, UDP, and SCTP on same port (UDP)", "10.180.0.2", "172.30.0.42", 53, "10.180.0.1:53, 10.180.2.1:53",
             protocol="udp"),
        Flow("clusterIP with TCP, UDP, and SCTP on same port (SCTP)", "10.180.0.2", "172.30.0.42", 53, "10.180.0.1:53, 10.180.2.1:53",
             protocol="sctp"),
        Flow("TCP-only port does not match UDP traffic", "10.180.0.2", "172.30.0.42", 80, "REJECT", protocol="udp"),
        Flow("svc1 does not accept svc2's ports", "10.180.0.2", "172.30.0.41", 443, "REJECT"),
        Flow("packet to unallocated cluster ip", "10.180.0.2", "172.30.0.50", 80, "DROP"),
    ])


async def test_load_balancer():
    fp = FakeProxier()
    c = Cluster().add(port("ns1", "svc1", cluster_ip="172.30.0.41", node_port=3001, lb_ips=["1.2.3.4", "5.6.7.8"],
                           source_ranges=["192.168.0.0/24", "203.0.113.0/25"]))
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.1"))
    await fp.sync(c)
    out = "10.180.0.1:80"
    fp.check([
        Flow("pod to cluster IP", "10.0.0.2", "172.30.0.41", 80, out),
        Flow("external to nodePort", TEST_EXTERNAL_CLIENT, TEST_NODE_IP, 3001, out, masq=True),
        Flow("nodePort bypasses LoadBalancerSourceRanges", TEST_EXTERNAL_CLIENT_BLOCKED, TEST_NODE_IP, 3001, out, masq=True),
        Flow("accepted external to LB1", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, out, masq=True),
        Flow("accepted external to LB2", TEST_EXTERNAL_CLIENT, "5.6.7.8", 80, out, masq=True),
        Flow("blocked external to LB1", TEST_EXTERNAL_CLIENT_BLOCKED, "1.2.3.4", 80, "DROP"),
        Flow("blocked external to LB2", TEST_EXTERNAL_CLIENT_BLOCKED, "5.6.7.8", 80, "DROP"),
        Flow("pod to LB1 (blocked by LoadBalancerSourceRanges)", "10.0.0.2", "1.2.3.4", 80, "DROP"),
        Flow("pod to LB2 (blocked by LoadBalancerSourceRanges)", "10.0.0.2", "5.6.7.8", 80, "DROP"),
        Flow("node to LB1 (allowed by LoadBalancerSourceRanges)", TEST_NODE_IP, "1.2.3.4", 80, out, masq=True),
        Flow("node to LB2 (allowed by LoadBalancerSourceRanges)", TEST_NODE_IP, "5.6.7.8", 80, out, masq=True),
        Flow("same node to LB1, SNATted to LB1 (implicitly allowed)", "1.2.3.4", "1.2.3.4", 80, out, masq=True),
        Flow("same node to LB2, SNATted to LB2 (implicitly allowed)", "5.6.7.8", "5.6.7.8", 80, out, masq=True),
    ])


NODEPORT_CASES = [
    ("ipv4, every local address", 4, None, True),
    ("ipv4, the node IP only", 4, (TEST_NODE_IP,), False),
    ("ipv6, every local address", 6, None, True),
    ("ipv6, the node IP only", 6, (TEST_NODE_IPV6,), False),
]


@pytest.mark.parametrize("name,family,nodeport_ips,alt_allowed", NODEPORT_CASES, ids=[c[0] for c in NODEPORT_CASES])
async def test_node_ports(name, family, nodeport_ips, alt_allowed):
    """upstream TestNodePorts: NodePorts on the node's addresses (``--nodeport-addresses``)."""
    v4 = family == 4
    svc_ip, ep1, ep2 = ("172.30.0.41", "10.180.0.1", "10.180.2.1") if v4 else ("fd00:10:96::41", "fd00:10:180::1", "fd00:10:180::2:1")
    node_ip, alt_ip = (TEST_NODE_IP, TEST_NODE_IP_ALT) if v4 else (TEST_NODE_IPV6, TEST_NODE_IPV6_ALT)
    pod, external = ("10.0.0.2", TEST_EXTERNAL_CLIENT) if v4 else ("fd00:10::2", "2600:5200::1")
    fp = FakeProxier(family)
    c = Cluster(node_ip=node_ip, nodeport_ips=nodeport_ips).add(port("ns1", "svc1", cluster_ip=svc_ip, node_port=3001))
    c.set_endpoints(spn("ns1", "svc1"), ep(ep1), ep(ep2, node=TEST_NODE_NAME))
    await fp.sync(c)
    out = ", ".join(f"[{ip}]:80" if ":" in ip else f"{ip}:80" for ip in (ep1, ep2))
    fp.check([
        Flow("pod to cluster IP", pod, svc_ip, 80, out),
        Flow("external to nodePort", external, node_ip, 3001, out, masq=True),
        Flow("node to nodePort", node_ip, node_ip, 3001, out, masq=True),
        Flow("external to nodePort on secondary IP" if alt_allowed else "secondary nodeIP ignores NodePorts",
             external, alt_ip, 3001, out if alt_allowed else "", masq=alt_allowed),
    ])


@pytest.mark.parametrize("local", [True, False], ids=["eTP Local", "eTP Cluster"])
async def test_external_traffic_policy(local):
    fp = FakeProxier()
    c = Cluster().add(port("ns1", "svc1", cluster_ip="172.30.0.41", node_port=3001, external_ips=["192.168.99.11"], lb_ips=["1.2.3.4"],
                           etp_local=local, health_check_node_port=30000 if local else 0))
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.1"), ep("10.180.2.1", node=TEST_NODE_NAME))
    await fp.sync(c)
    both, only_local = "10.180.0.1:80, 10.180.2.1:80", "10.180.2.1:80"
    if local:
        flows = [
            Flow("pod to cluster IP hits both endpoints, unmasqueraded", "10.0.0.2", "172.30.0.41", 80, both),
            Flow("pod to external IP hits both endpoints, unmasqueraded", "10.0.0.2", "192.168.99.11", 80, both),
            Flow("external to external IP hits only local endpoint, unmasqueraded", TEST_EXTERNAL_CLIENT, "192.168.99.11", 80, only_local),
            Flow("pod to LB IP hits only both endpoints, unmasqueraded", "10.0.0.2", "1.2.3.4", 80, both),
            Flow("external to LB IP hits only local endpoint, unmasqueraded", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, only_local),
            Flow("pod to NodePort hits both endpoints, unmasqueraded", "10.0.0.2", TEST_NODE_IP, 3001, both),
            Flow("external to NodePort hits only local endpoint, unmasqueraded", TEST_EXTERNAL_CLIENT, TEST_NODE_IP, 3001, only_local),
        ]
    else:
        flows = [
            Flow("pod to cluster IP hits both endpoints, unmasqueraded", "10.0.0.2", "172.30.0.41", 80, both),
            Flow("pod to external IP hits both endpoints, masqueraded", "10.0.0.2", "192.168.99.11", 80, both, masq=True),
            Flow("external to external IP hits both endpoints, masqueraded", TEST_EXTERNAL_CLIENT, "192.168.99.11", 80, both, masq=True),
            Flow("pod to LB IP hits both endpoints, masqueraded", "10.0.0.2", "1.2.3.4", 80, both, masq=True),
            Flow("external to LB IP hits both endpoints, masqueraded", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, both, masq=True),
            Flow("pod to NodePort hits both endpoints, masqueraded", "10.0.0.2", TEST_NODE_IP, 3001, both, masq=True),
            Flow("external to NodePort hits both endpoints, masqueraded", TEST_EXTERNAL_CLIENT, TEST_NODE_IP, 3001, both, masq=True),
        ]
    fp.check(flows)


@pytest.mark.parametrize("name,itp_local,endpoints,flow", ITP_CASES, ids=[c[0] for c in ITP_CASES])
async def test_internal_traffic_policy(name, itp_local, endpoints, flow):
    fp = FakeProxier()
    c = Cluster().add(port("ns1", "svc1", "", cluster_ip="172.30.1.1", itp_local=itp_local))
    c.set_endpoints(spn("ns1", "svc1", ""), *(ep(ip, node=node) for ip, node in endpoints))
    await fp.sync(c)
    fp.check([flow])
    c.set_endpoints(spn("ns1", "svc1", ""))  # slice deleted: a partial sync
    result = await fp.sync(c)
    assert not result.full
    fp.check([Flow("endpoints deleted", "10.0.0.2", "172.30.1.1", 80, "REJECT")])


def overall_cluster() -> Cluster:
    """The Services and endpoints of upstream's TestOverallNFTablesRules."""
    c = Cluster().add(
        port("ns1", "svc1", cluster_ip="172.30.0.41"),
        port("ns2", "svc2", cluster_ip="172.30.0.42", node_port=3001, lb_ips=["1.2.3.4"], external_ips=["192.168.99.22"],
             etp_local=True, health_check_node_port=30000),
        port("ns3", "svc3", cluster_ip="172.30.0.43", node_port=3003),
        port("ns4", "svc4", cluster_ip="172.30.0.44", external_ips=["192.168.99.33"]),
        port("ns5", "svc5", cluster_ip="172.30.0.45", node_port=3002, lb_ips=["5.6.7.8"], source_ranges=["203.0.113.0/25"],
             affinity_seconds=10800),
        port("ns6", "svc6", cluster_ip="172.30.0.46"))
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.1"))
    c.set_endpoints(spn("ns2", "svc2"), ep("10.180.0.2"))  # no node name: not local, so eTP Local has none
    c.set_endpoints(spn("ns3", "svc3"), ep("10.180.0.3"))
    c.set_endpoints(spn("ns4", "svc4"), ep("10.180.0.4"), ep("10.180.0.5", node=TEST_NODE_NAME))
    c.set_endpoints(spn("ns5", "svc5"), ep("10.180.0.3"))
    return c


OVERALL_FLOWS = [
    Flow("pod to ClusterIP with one endpoint", "10.0.0.2", "172.30.0.41", 80, "10.180.0.1:80"),
    Flow("external to ClusterIP is masqueraded", TEST_EXTERNAL_CLIENT, "172.30.0.41", 80, "10.180.0.1:80", masq=True),
    Flow("hairpin: the endpoint to its own ClusterIP", "10.180.0.1", "172.30.0.41", 80, "10.180.0.1:80", masq=True),
    Flow("pod to eTP Local ClusterIP reaches the remote endpoint", "10.0.0.2", "172.30.0.42", 80, "10.180.0.2:80"),
    Flow("external to eTP Local LB IP with no local endpoint", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, "DROP"),
    Flow("external to eTP Local external IP with no local endpoint", TEST_EXTERNAL_CLIENT, "192.168.99.22", 80, "DROP"),
    Flow("external to eTP Local NodePort with no local endpoint", TEST_EXTERNAL_CLIENT, TEST_NODE_IP, 3001, "DROP"),
    Flow("pod to eTP Local LB IP short-circuits to the cluster chain", "10.0.0.2", "1.2.3.4", 80, "10.180.0.2:80"),
    Flow("node to eTP Local NodePort short-circuits, masqueraded", TEST_NODE_IP, TEST_NODE_IP, 3001, "10.180.0.2:80", masq=True),
    Flow("external to NodePort", TEST_EXTERNAL_CLIENT, TEST_NODE_IP, 3003, "10.180.0.3:80", masq=True),
    Flow("NodePort on a port nobody uses", TEST_EXTERNAL_CLIENT, TEST_NODE_IP, 3999, ""),
    Flow("pod to ClusterIP with two endpoints", "10.0.0.2", "172.30.0.44", 80, "10.180.0.4:80, 10.180.0.5:80"),
    Flow("external to external IP with two endpoints", TEST_EXTERNAL_CLIENT, "192.168.99.33", 80, "10.180.0.4:80, 10.180.0.5:80",
         masq=True),
    Flow("pod to ClusterIP with affinity", "10.0.0.2", "172.30.0.45", 80, "10.180.0.3:80"),
    Flow("allowed external to LB with source ranges", TEST_EXTERNAL_CLIENT, "5.6.7.8", 80, "10.180.0.3:80", masq=True),
    Flow("blocked external to LB with source ranges", TEST_EXTERNAL_CLIENT_BLOCKED, "5.6.7.8", 80, "DROP"),
    Flow("NodePort of the LB bypasses the source ranges", TEST_EXTERNAL_CLIENT_BLOCKED, TEST_NODE_IP, 3002, "10.180.0.3:80", masq=True),
    Flow("pod to ClusterIP with no endpoints", "10.0.0.2", "172.30.0.46", 80, "REJECT"),
    Flow("pod to a ClusterIP's unused port", "10.0.0.2", "172.30.0.46", 8080, "REJECT"),
    Flow("pod to an unallocated ClusterIP", "10.0.0.2", "172.30.0.99", 80, "DROP"),
    Flow("pod to an address outside the service CIDR", "10.0.0.2", "10.200.0.1", 80, ""),
]


async def test_overall_rules_packet_flows():
    fp = FakeProxier()
    await fp.sync(overall_cluster())
    fp.check(OVERALL_FLOWS)


async def test_overall_rules_after_partial_syncs():
    """The same flows after the table was reached by partial syncs instead: Services first
    without endpoints, then the endpoints one Service at a time."""
    fp = FakeProxier()
    full = overall_cluster()
    c = Cluster().add(*full.ports.values())
    assert (await fp.sync(c)).full
    for name, endpoints in full.endpoints.items():
        c.set_endpoints(name, *endpoints)
        assert not (await fp.sync(c)).full
    fp.check(OVERALL_FLOWS)


@pytest.mark.parametrize("local,name,endpoints,flows", TERMINATING_CASES, ids=TERMINATING_IDS)
async def test_terminating_endpoints(local, name, endpoints, flows):
    """upstream TestTerminatingEndpointsTrafficPolicy{Local,Cluster}, case by case, then the
    endpoints deleted by a partial sync."""
    fp = FakeProxier()
    c = Cluster().add(port("ns1", "svc1", "", cluster_ip="172.30.1.1", lb_ips=["1.2.3.4"], etp_local=local,
                           health_check_node_port=30000 if local else 0))
    c.set_endpoints(spn("ns1", "svc1", ""), *endpoints)
    await fp.sync(c)
    fp.check([Flow(f"{name}: {f.name}", f.source, f.dest, f.port, f.output, f.masq) for f in flows])
    c.set_endpoints(spn("ns1", "svc1", ""))
    assert not (await fp.sync(c)).full
    fp.check([Flow("pod to clusterIP after endpoints deleted", "10.0.0.2", "172.30.1.1", 80, "REJECT"),
              Flow("external to LB after endpoints deleted", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, "REJECT")])


async def test_a_rejected_sync_changes_no_packet_path_and_the_next_full_sync_converges():
    """The kernel refuses a partial sync: every packet still goes where it went (the fake
    applies nothing of a rejected transaction); the next sync is full and lands the change."""
    fp = FakeProxier()
    c = overall_cluster()
    await fp.sync(c)
    before = fp.nft.dump()
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.9"))
    c.delete_service("ns6", "svc6")
    fp.nft.fail_next = "/dev/stdin:1:1-10: Error: Could not process rule: Cannot allocate memory"
    with pytest.raises(SyncFailed, match="Cannot allocate memory"):
        await fp.sync(c)
    assert fp.nft.dump() == before
    fp.check(OVERALL_FLOWS)
    assert (await fp.sync(c)).full
    fp.check([Flow("the new endpoint", "10.0.0.2", "172.30.0.41", 80, "10.180.0.9:80"),
              Flow("the deleted Service's ClusterIP is unallocated now", "10.0.0.2", "172.30.0.46", 80, "DROP"),
              *(f for f in OVERALL_FLOWS if f.dest not in ("172.30.0.41", "172.30.0.46"))])


# nftables mode does not serve NodePorts on localhost (upstream's nftables expectations)
NFTABLES_MASQ_FLOWS = {"localhost to NodePort": {"output": "", "masq": False},
                       "localhost to NodePort with eTP:Local": {"output": "", "masq": False},
                       "localhost to NodePort with iTP:Local": {"output": "", "masq": False}}


@pytest.mark.parametrize("name,masquerade_all,detector,overrides", MASQ_CASES, ids=[c[0] for c in MASQ_CASES])
async def test_internal_external_masquerade(name, masquerade_all, detector, overrides):
    fp = FakeProxier(masquerade_all=masquerade_all, detector=detector)
    c = Cluster().add(
        port("ns1", "svc1", cluster_ip="172.30.0.41", node_port=3001, lb_ips=["1.2.3.4"]),
        port("ns2", "svc2", cluster_ip="172.30.0.42", node_port=3002, lb_ips=["5.6.7.8"], etp_local=True, health_check_node_port=30002),
        port("ns3", "svc3", cluster_ip="172.30.0.43", node_port=3003, lb_ips=["9.10.11.12"], itp_local=True))
    for i in (1, 2, 3):
        c.set_endpoints(spn(f"ns{i}", f"svc{i}"), ep(f"10.180.0.{i}", node=TEST_NODE_NAME), ep(f"10.180.1.{i}", node="remote"))
    await fp.sync(c)
    flows = []
    for flow in MASQ_FLOWS:
        change = {**overrides.get(flow.name, {}), **NFTABLES_MASQ_FLOWS.get(flow.name, {})}
        flows.append(Flow(flow.name, flow.source, flow.dest, flow.port, change.get("output", flow.output), change.get("masq", flow.masq)))
    fp.check(flows)


async def test_ipv6_cluster_ip_and_hairpin():
    fp = FakeProxier(6)
    c = Cluster(node_ip="2001:db8::1").add(port("ns1", "svc1", cluster_ip="fd00:10:96::41", node_port=3001))
    c.set_endpoints(spn("ns1", "svc1"), ep("fd00:10:180::1"), ep("fd00:10:180::2:1", node=TEST_NODE_NAME))
    await fp.sync(c)
    both = "[fd00:10:180::1]:80, [fd00:10:180::2:1]:80"
    fp.check([
        Flow("pod to cluster IP", "fd00:10::2", "fd00:10:96::41", 80, both),
        Flow("external to cluster IP is masqueraded", "2600:5200::1", "fd00:10:96::41", 80, both, masq=True),
        Flow("hairpin", "fd00:10:180::1", "fd00:10:96::41", 80, both, masq=True),
        Flow("external to nodePort", "2600:5200::1", "2001:db8::1", 3001, both, masq=True),
        Flow("pod to an unallocated ClusterIP", "fd00:10::2", "fd00:10:96::99", 80, "DROP"),
    ])


async def test_client_ip_affinity_reaches_every_endpoint_a_new_client_may_pick():
    """ClientIP affinity: a sticky client's lookup never matches a new connection; the random
    choice among the endpoints (``numgen random mod N-i``) may pick any of them."""
    fp = FakeProxier()
    c = Cluster().add(port("ns1", "svc1", cluster_ip="172.30.0.41", node_port=3001, affinity_seconds=60))
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.1"), ep("10.180.0.2"), ep("10.180.0.3", node=TEST_NODE_NAME))
    await fp.sync(c)
    every = "10.180.0.1:80, 10.180.0.2:80, 10.180.0.3:80"
    fp.check([
        Flow("pod to ClusterIP", "10.0.0.2", "172.30.0.41", 80, every),
        Flow("external to NodePort", TEST_EXTERNAL_CLIENT, TEST_NODE_IP, 3001, every, masq=True),
    ])
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.2"))
    assert not (await fp.sync(c)).full
    fp.check([Flow("one endpoint left", "10.0.0.2", "172.30.0.41", 80, "10.180.0.2:80")])


@pytest.mark.parametrize("dest,dport,output,masq", [
    ("172.30.0.41", 80, "10.180.0.1:80", True),
    ("172.30.0.44", 80, "10.180.0.4:80, 10.180.0.5:80", True),
    (TEST_NODE_IP, 3003, "10.180.0.3:80", True),
    ("172.30.0.46", 80, "REJECT", False),
    ("172.30.0.99", 80, "DROP", False),
    ("5.6.7.8", 80, "DROP", False),  # the node's own address is not in the LB's source ranges
], ids=["ClusterIP", "two endpoints", "own NodePort", "no endpoints", "unallocated ClusterIP", "LB source ranges"])
async def test_connections_the_node_starts(dest, dport, output, masq):
    """The output hook: nat-output DNATs, filter-output checks, as for forwarded traffic."""
    fp = FakeProxier()
    await fp.sync(overall_cluster())
    matches, got, masqueraded = trace_packet(fp.nft, TEST_NODE_IP, "tcp", dest, dport, from_node=True)
    assert (got, masqueraded) == (output, masq), matches


def test_the_tracer_refuses_a_rule_it_cannot_read():
    nft = FakeNFTables()
    nft.run_sync("add table ip kube-proxy\nadd chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }\n"
                 "add rule ip kube-proxy nat-prerouting meta skuid 0 accept\n")
    with pytest.raises(TraceError, match="meta skuid 0"):
        trace_packet(nft, "10.0.0.2", "tcp", "10.0.0.3", 80)


@pytest.mark.parametrize("ranges,outcome", [
    ("16-23 : 10.1.0.1 . 80, 24-31 : 10.1.0.2 . 80", "10.1.0.1:80, 10.1.0.2:80"),
    ("16-23 : 10.1.0.1 . 80, 25-31 : 10.1.0.2 . 80", "numbers 24-24 of @m hold no endpoint"),
    ("16-23 : 10.1.0.1 . 80", "numbers 24-31 of @m hold no endpoint"),
    ("16-23 : 10.1.0.1 . 80, 24-40 : 10.1.0.2 . 80", "range 24-40 of @m crosses the block"),
], ids=["covered", "a gap", "the end missing", "a range past the block"])
def test_the_tracer_follows_every_range_of_a_block_and_refuses_a_block_not_covered(ranges, outcome):
    """An endpoint range map (``flags interval``): the DNAT may land on any range of the block,
    and a number of the block no range holds would find no endpoint."""
    nft = FakeNFTables()
    nft.run_sync("add table ip kube-proxy\nadd chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }\n"
                 "add map ip kube-proxy m { typeof numgen random mod 1 : ip daddr . tcp dport ; flags interval ; }\n"
                 "add rule ip kube-proxy nat-prerouting meta l4proto tcp dnat ip addr . port to numgen random mod 16 offset 16 map @m\n"
                 f"add element ip kube-proxy m {{ {ranges} }}\n")
    if ":" in outcome:
        assert trace_packet(nft, "10.0.0.2", "tcp", "10.0.0.3", 80)[1] == outcome
    else:
        with pytest.raises(TraceError, match=outcome):
            trace_packet(nft, "10.0.0.2", "tcp", "10.0.0.3", 80)
