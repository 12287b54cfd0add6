"""The userspace mode's restore input, against hand-written expected texts (upstream's portal
rules: ``iptablesContainerPortalArgs``, ``iptablesHostPortalArgs``, ``iptablesContainerNodePortArgs``,
``iptablesHostNodePortArgs``, ``iptablesNonLocalNodePortArgs``), and which portals a Service
port gets under each traffic policy."""

from __future__ import annotations

import textwrap

import pytest

from kubesvc.kernel.fake.iptables import TEST_NODE_NAME
from kubesvc.proxy.backend import ProxyOptions
from kubesvc.proxy.iptables.rules import TABLE_FILTER, TABLE_NAT
from kubesvc.proxy.userspace.rules import DROP, EXTERNAL, INTERNAL, REJECT, build_restore, cleanup_input, plan_portals
from tests.support.builders import Cluster, ep, port, spn

NODE_IP = "192.168.0.2"
OPTIONS = ProxyOptions(node_name=TEST_NODE_NAME)

HEAD_FILTER = """\
*filter
:KUBE-NODEPORT-NON-LOCAL - [0:0]
:KUBE-PORTALS-FILTER - [0:0]
"""
HEAD_NAT = """\
COMMIT
*nat
:KUBE-PORTALS-CONTAINER - [0:0]
:KUBE-PORTALS-HOST - [0:0]
:KUBE-NODEPORT-CONTAINER - [0:0]
:KUBE-NODEPORT-HOST - [0:0]
"""


def expected(filter_rules: str, nat_rules: str) -> str:
    return HEAD_FILTER + textwrap.dedent(filter_rules).lstrip("\n") + HEAD_NAT + textwrap.dedent(nat_rules).lstrip("\n") + "COMMIT\n"


def cluster_ip_only() -> Cluster:
    c = Cluster(node_ip=NODE_IP)
    c.add(port("ns1", "svc1", cluster_ip="172.30.0.41"))
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.1"))
    return c


def full_house() -> Cluster:
    c = Cluster(node_ip=NODE_IP)
    c.add(port("ns1", "svc1", cluster_ip="172.30.0.41", node_port=3001, external_ips=["192.168.99.11"], lb_ips=["1.2.3.4"]))
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.1"))
    return c


def no_endpoints_udp() -> Cluster:
    c = Cluster(node_ip=NODE_IP)
    c.add(port("ns2", "svc2", "dns", 53, "UDP", cluster_ip="172.30.0.42", node_port=3002))
    return c


def etp_local_without_local() -> Cluster:
    c = Cluster(node_ip=NODE_IP)
    c.add(port("ns3", "svc3", cluster_ip="172.30.0.43", node_port=3003, etp_local=True))
    c.set_endpoints(spn("ns3", "svc3"), ep("10.180.0.3", node="other-node"))
    return c


def etp_local_with_local() -> Cluster:
    c = Cluster(node_ip=NODE_IP)
    c.add(port("ns3", "svc3", cluster_ip="172.30.0.43", node_port=3003, etp_local=True))
    c.set_endpoints(spn("ns3", "svc3"), ep("10.180.0.3", node="other-node"), ep("10.180.0.4", node=TEST_NODE_NAME))
    return c


def itp_local_without_local() -> Cluster:
    c = Cluster(node_ip=NODE_IP)
    c.add(port("ns4", "svc4", cluster_ip="172.30.0.44", itp_local=True))
    c.set_endpoints(spn("ns4", "svc4"), ep("10.180.0.5", node="other-node"))
    return c


def sctp() -> Cluster:
    c = Cluster(node_ip=NODE_IP)
    c.add(port("ns5", "svc5", protocol="SCTP", cluster_ip="172.30.0.45"))
    c.set_endpoints(spn("ns5", "svc5", protocol="SCTP"), ep("10.180.0.6"))
    return c


GOLDEN = [
    pytest.param(cluster_ip_only, NODE_IP, None, "", """
        -A KUBE-PORTALS-CONTAINER -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 80 -d 172.30.0.41/32 -j REDIRECT --to-ports 40000
        -A KUBE-PORTALS-HOST -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 80 -d 172.30.0.41/32 -j DNAT --to-destination 192.168.0.2:40000
        """, id="cluster IP: container REDIRECT, host DNAT to the node IP"),
    pytest.param(cluster_ip_only, "", None, "", """
        -A KUBE-PORTALS-CONTAINER -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 80 -d 172.30.0.41/32 -j REDIRECT --to-ports 40000
        -A KUBE-PORTALS-HOST -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 80 -d 172.30.0.41/32 -j REDIRECT --to-ports 40000
        """, id="node IP unknown: host rules REDIRECT too"),
    pytest.param(full_house, NODE_IP, None, """
        -A KUBE-NODEPORT-NON-LOCAL -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 40000 -m state --state NEW -j ACCEPT
        """, """
        -A KUBE-PORTALS-CONTAINER -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 80 -d 172.30.0.41/32 -j REDIRECT --to-ports 40000
        -A KUBE-PORTALS-CONTAINER -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 80 -d 192.168.99.11/32 -j REDIRECT --to-ports 40000
        -A KUBE-PORTALS-CONTAINER -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 80 -d 1.2.3.4/32 -j REDIRECT --to-ports 40000
        -A KUBE-PORTALS-HOST -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 80 -d 172.30.0.41/32 -j DNAT --to-destination 192.168.0.2:40000
        -A KUBE-PORTALS-HOST -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 80 -d 192.168.99.11/32 -j DNAT --to-destination 192.168.0.2:40000
        -A KUBE-PORTALS-HOST -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 80 -d 1.2.3.4/32 -j DNAT --to-destination 192.168.0.2:40000
        -A KUBE-NODEPORT-CONTAINER -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 3001 -j REDIRECT --to-ports 40000
        -A KUBE-NODEPORT-HOST -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 3001 -j DNAT --to-destination 192.168.0.2:40000
        """, id="externalIP, LoadBalancer IP and NodePort share the one listener"),
    pytest.param(full_house, NODE_IP, ("192.168.0.2", "10.0.0.9"), """
        -A KUBE-NODEPORT-NON-LOCAL -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 40000 -m state --state NEW -j ACCEPT
        """, """
        -A KUBE-PORTALS-CONTAINER -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 80 -d 172.30.0.41/32 -j REDIRECT --to-ports 40000
        -A KUBE-PORTALS-CONTAINER -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 80 -d 192.168.99.11/32 -j REDIRECT --to-ports 40000
        -A KUBE-PORTALS-CONTAINER -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 80 -d 1.2.3.4/32 -j REDIRECT --to-ports 40000
        -A KUBE-PORTALS-HOST -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 80 -d 172.30.0.41/32 -j DNAT --to-destination 192.168.0.2:40000
        -A KUBE-PORTALS-HOST -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 80 -d 192.168.99.11/32 -j DNAT --to-destination 192.168.0.2:40000
        -A KUBE-PORTALS-HOST -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 80 -d 1.2.3.4/32 -j DNAT --to-destination 192.168.0.2:40000
        -A KUBE-NODEPORT-CONTAINER -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 3001 -d 192.168.0.2/32 -j REDIRECT --to-ports 40000
        -A KUBE-NODEPORT-CONTAINER -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 3001 -d 10.0.0.9/32 -j REDIRECT --to-ports 40000
        -A KUBE-NODEPORT-HOST -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 3001 -d 192.168.0.2/32 -j DNAT --to-destination 192.168.0.2:40000
        -A KUBE-NODEPORT-HOST -m comment --comment ns1/svc1:p80 -p tcp -m tcp --dport 3001 -d 10.0.0.9/32 -j DNAT --to-destination 192.168.0.2:40000
        """, id="--nodeport-addresses: one NodePort rule per node address"),
    pytest.param(no_endpoints_udp, NODE_IP, None, """
        -A KUBE-PORTALS-FILTER -m comment --comment "ns2/svc2:dns has no endpoints (cluster IP)" -p udp -m udp --dport 53 -d 172.30.0.42/32 -j REJECT
        -A KUBE-PORTALS-FILTER -m comment --comment "ns2/svc2:dns has no endpoints (node port)" -m addrtype --dst-type LOCAL -p udp -m udp --dport 3002 -j REJECT
        """, "", id="no endpoints: refused in filter, not redirected"),
    pytest.param(etp_local_without_local, NODE_IP, None, """
        -A KUBE-PORTALS-FILTER -m comment --comment "ns3/svc3:p80 has no local endpoints (node port)" -m addrtype --dst-type LOCAL -p tcp -m tcp --dport 3003 -j DROP
        """, """
        -A KUBE-PORTALS-CONTAINER -m comment --comment ns3/svc3:p80 -p tcp -m tcp --dport 80 -d 172.30.0.43/32 -j REDIRECT --to-ports 40000
        -A KUBE-PORTALS-HOST -m comment --comment ns3/svc3:p80 -p tcp -m tcp --dport 80 -d 172.30.0.43/32 -j DNAT --to-destination 192.168.0.2:40000
        """, id="eTP Local without a local endpoint: NodePort dropped, ClusterIP redirected"),
    pytest.param(etp_local_with_local, NODE_IP, None, """
        -A KUBE-NODEPORT-NON-LOCAL -m comment --comment ns3/svc3:p80 -p tcp -m tcp --dport 40001 -m state --state NEW -j ACCEPT
        """, """
        -A KUBE-PORTALS-CONTAINER -m comment --comment ns3/svc3:p80 -p tcp -m tcp --dport 80 -d 172.30.0.43/32 -j REDIRECT --to-ports 40000
        -A KUBE-PORTALS-HOST -m comment --comment ns3/svc3:p80 -p tcp -m tcp --dport 80 -d 172.30.0.43/32 -j DNAT --to-destination 192.168.0.2:40000
        -A KUBE-NODEPORT-CONTAINER -m comment --comment ns3/svc3:p80 -p tcp -m tcp --dport 3003 -j REDIRECT --to-ports 40001
        -A KUBE-NODEPORT-HOST -m comment --comment ns3/svc3:p80 -p tcp -m tcp --dport 3003 -j DNAT --to-destination 192.168.0.2:40001
        """, id="eTP Local: the NodePort goes to a listener of its own"),
    pytest.param(itp_local_without_local, NODE_IP, None, """
        -A KUBE-PORTALS-FILTER -m comment --comment "ns4/svc4:p80 has no local endpoints (cluster IP)" -p tcp -m tcp --dport 80 -d 172.30.0.44/32 -j DROP
        """, "", id="iTP Local without a local endpoint: ClusterIP dropped"),
    pytest.param(sctp, NODE_IP, None, "", "", id="SCTP is not proxied"),
]


@pytest.mark.parametrize("make, node_ip, nodeport_ips, filter_rules, nat_rules", GOLDEN)
def test_restore_text(make, node_ip, nodeport_ips, filter_rules, nat_rules):
    request = make().request(node_ip=node_ip, nodeport_ips=nodeport_ips)
    plan = plan_portals(request, OPTIONS)
    ports = {key: 40000 + i for i, key in enumerate(plan.portals)}
    got = build_restore(plan, ports, node_ip=request.node_ip, nodeport_ips=request.nodeport_ips).text
    assert got == expected(filter_rules, nat_rules)


@pytest.mark.parametrize("make, portals", [
    pytest.param(cluster_ip_only, {INTERNAL: ("", ["10.180.0.1"])}, id="ClusterIP: one internal portal"),
    pytest.param(full_house, {INTERNAL: ("", ["10.180.0.1"])}, id="same policies: external destinations share it"),
    pytest.param(no_endpoints_udp, {INTERNAL: (REJECT, [])}, id="no endpoints: REJECT"),
    pytest.param(etp_local_without_local, {INTERNAL: ("", ["10.180.0.3"]), EXTERNAL: (DROP, [])}, id="eTP Local, none local: external DROP"),
    pytest.param(etp_local_with_local, {INTERNAL: ("", ["10.180.0.3", "10.180.0.4"]), EXTERNAL: ("", ["10.180.0.4"])},
                 id="eTP Local: external portal gets the local endpoint only"),
    pytest.param(itp_local_without_local, {INTERNAL: (DROP, [])}, id="iTP Local, none local: DROP"),
])
def test_plan_portals(make, portals):
    plan = plan_portals(make().request(), OPTIONS)
    got = {kind: (p.verdict, [e.ip for e in p.endpoints]) for (_, kind), p in plan.portals.items()}
    assert got == portals


def test_plan_counts_no_local_endpoints():
    assert plan_portals(etp_local_without_local().request(), OPTIONS).no_local_external == 1
    assert plan_portals(itp_local_without_local().request(), OPTIONS).no_local_internal == 1


@pytest.mark.parametrize("table, existing, text", [
    pytest.param(TABLE_NAT, {"KUBE-PORTALS-HOST", "KUBE-SERVICES", "KUBE-NODEPORT-CONTAINER"},
                 "*nat\n:KUBE-PORTALS-HOST - [0:0]\n:KUBE-NODEPORT-CONTAINER - [0:0]\n-X KUBE-PORTALS-HOST\n-X KUBE-NODEPORT-CONTAINER\nCOMMIT\n",
                 id="nat: only our chains, never iptables mode's"),
    pytest.param(TABLE_FILTER, {"KUBE-PORTALS-FILTER"}, "*filter\n:KUBE-PORTALS-FILTER - [0:0]\n-X KUBE-PORTALS-FILTER\nCOMMIT\n",
                 id="filter"),
    pytest.param(TABLE_FILTER, {"KUBE-SERVICES"}, None, id="nothing of ours: nothing to do"),
])
def test_cleanup_input(table, existing, text):
    assert cleanup_input(table, existing) == text
