"""Where a packet lands, traced through the rules the backend left in the fake kernel: upstream's
packet-flow tests from ``pkg/proxy/iptables/proxier_test.go`` with their case tables and
expectations as written there."""

from __future__ import annotations

import pytest

from kubesvc.kernel.fake.iptables import TEST_EXTERNAL_CLIENT, TEST_EXTERNAL_CLIENT_BLOCKED, TEST_NODE_IP, Flow, check_flows
from tests.proxy.iptables.scenario import fake_backend
from tests.support.builders import Cluster, ep, port, spn


async def test_no_endpoints_reject():
    backend, ipt = fake_backend()
    c = Cluster().add(port("ns1", "svc1", cluster_ip="172.30.0.41", node_port=3001, external_ips=["192.168.99.11"], lb_ips=["1.2.3.4"]))
    await backend.run_sync(c.request())
    check_flows(ipt, [
        Flow("pod to cluster IP with no endpoints", "10.0.0.2", "172.30.0.41", 80, "REJECT"),
        Flow("external to external IP with no endpoints", TEST_EXTERNAL_CLIENT, "192.168.99.11", 80, "REJECT"),
        Flow("pod to NodePort with no endpoints", "10.0.0.2", TEST_NODE_IP, 3001, "REJECT"),
        Flow("external to NodePort with no endpoints", TEST_EXTERNAL_CLIENT, TEST_NODE_IP, 3001, "REJECT"),
        Flow("pod to LoadBalancer IP with no endpoints", "10.0.0.2", "1.2.3.4", 80, "REJECT"),
        Flow("external to LoadBalancer IP with no endpoints", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, "REJECT"),
    ])


async def test_cluster_ip_general():
    backend, ipt = fake_backend()
    c = Cluster()
    c.add(port("ns1", "svc1", "http", cluster_ip="172.30.0.41"),
          port("ns2", "svc2", "http", 80, cluster_ip="172.30.0.42"),
          port("ns2", "svc2", "https", 443, cluster_ip="172.30.0.42"),
          port("ns2", "svc2", "dns-udp", 53, "UDP", cluster_ip="172.30.0.42"),
          port("ns2", "svc2", "dns-tcp", 53, "TCP", cluster_ip="172.30.0.42"),
          port("ns2", "svc2", "dns-sctp", 53, "SCTP", cluster_ip="172.30.0.42"))
    c.set_endpoints(spn("ns1", "svc1", "http"), ep("10.180.0.1", 80, "test-node"))
    for name, target, proto in (("http", 80, "TCP"), ("https", 8443, "TCP"), ("dns-udp", 53, "UDP"), ("dns-tcp", 5353, "TCP"),
                                ("dns-sctp", 53, "SCTP")):
        c.set_endpoints(spn("ns2", "svc2", name, proto), ep("10.180.0.1", target, "test-node"), ep("10.180.2.1", target, "node2"))
    await backend.run_sync(c.request())
    check_flows(ipt, [
        Flow("simple clusterIP", "10.180.0.2", "172.30.0.41", 80, "10.180.0.1:80"),
        Flow("hairpin to cluster IP", "10.180.0.1", "172.30.0.41", 80, "10.180.0.1:80", masq=True),
        Flow("clusterIP with multiple endpoints", "10.180.0.2", "172.30.0.42", 80, "10.180.0.1:80, 10.180.2.1:80"),
        Flow("clusterIP with TargetPort", "10.180.0.2", "172.30.0.42", 443, "10.180.0.1:8443, 10.180.2.1:8443"),
        Flow("clusterIP with TCP, UDP, and SCTP on same port (TCP)", "10.180.0.2", "172.30.0.42", 53, "10.180.0.1:5353, 10.180.2.1:5353", protocol="tcp"),
        Flow("clusterIP with TCP, UDP, and SCTP on same port (UDP)", "10.180.0.2", "172.30.0.42", 53, "10.180.0.1:53, 10.180.2.1:53", protocol="udp"),
        Flow("clusterIP with TCP, UDP, and SCTP on same port (SCTP)", "10.180.0.2", "172.30.0.42", 53, "10.180.0.1:53, 10.180.2.1:53", protocol="sctp"),
        Flow("TCP-only port does not match UDP traffic", "10.180.0.2", "172.30.0.42", 80, "", protocol="udp"),
        Flow("svc1 does not accept svc2's ports", "10.180.0.2", "172.30.0.41", 443, ""),
    ])


async def test_load_balancer():
    backend, ipt = fake_backend()
    c = Cluster().add(port("ns1", "svc1", cluster_ip="172.30.0.41", node_port=3001, lb_ips=["1.2.3.4", "5.6.7.8"],
                           source_ranges=["192.168.0.0/24", "203.0.113.0/25"]))
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.1"))
    await backend.run_sync(c.request())
    out = "10.180.0.1:80"
    check_flows(ipt, [
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


async def test_health_check_node_port():
    backend, ipt = fake_backend()
    c = Cluster(nodeport_ips=("127.0.0.1",))  # upstream: nodePortAddresses 127.0.0.0/8
    c.add(port("ns1", "svc1", cluster_ip="172.30.0.42", node_port=3001, health_check_node_port=30000, etp_local=True, lb_ips=()))
    await backend.run_sync(c.request())
    check_flows(ipt, [Flow("firewall accepts HealthCheckNodePort", "1.2.3.4", TEST_NODE_IP, 30000, "ACCEPT")])
    c.delete_service("ns1", "svc1")
    await backend.run_sync(c.request())
    check_flows(ipt, [Flow("HealthCheckNodePort no longer has any rule", "1.2.3.4", TEST_NODE_IP, 30000, "")])


async def test_external_traffic_policy_local():
    backend, ipt = fake_backend()
    c = Cluster().add(port("ns1", "svc1", cluster_ip="172.30.0.41", node_port=3001, health_check_node_port=30000,
                           external_ips=["192.168.99.11"], lb_ips=["1.2.3.4"], etp_local=True))
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.1"), ep("10.180.2.1", node="test-node"))
    await backend.run_sync(c.request())
    both, local = "10.180.0.1:80, 10.180.2.1:80", "10.180.2.1:80"
    check_flows(ipt, [
        Flow("pod to cluster IP hits both endpoints, unmasqueraded", "10.0.0.2", "172.30.0.41", 80, both),
        Flow("pod to external IP hits both endpoints, unmasqueraded", "10.0.0.2", "192.168.99.11", 80, both),
        Flow("external to external IP hits only local endpoint, unmasqueraded", TEST_EXTERNAL_CLIENT, "192.168.99.11", 80, local),
        Flow("pod to LB IP hits only both endpoints, unmasqueraded", "10.0.0.2", "1.2.3.4", 80, both),
        Flow("external to LB IP hits only local endpoint, unmasqueraded", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, local),
        Flow("pod to NodePort hits both endpoints, unmasqueraded", "10.0.0.2", TEST_NODE_IP, 3001, both),
        Flow("external to NodePort hits only local endpoint, unmasqueraded", TEST_EXTERNAL_CLIENT, TEST_NODE_IP, 3001, local),
    ])


async def test_external_traffic_policy_cluster():
    backend, ipt = fake_backend()
    c = Cluster().add(port("ns1", "svc1", cluster_ip="172.30.0.41", node_port=3001, external_ips=["192.168.99.11"], lb_ips=["1.2.3.4"]))
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.1"), ep("10.180.2.1", node="test-node"))
    await backend.run_sync(c.request())
    both = "10.180.0.1:80, 10.180.2.1:80"
    check_flows(ipt, [
        Flow("pod to cluster IP hits both endpoints, unmasqueraded", "10.0.0.2", "172.30.0.41", 80, both),
        Flow("pod to external IP hits both endpoints, masqueraded", "10.0.0.2", "192.168.99.11", 80, both, masq=True),
        Flow("external to external IP hits both endpoints, masqueraded", TEST_EXTERNAL_CLIENT, "192.168.99.11", 80, both, masq=True),
        Flow("pod to LB IP hits both endpoints, masqueraded", "10.0.0.2", "1.2.3.4", 80, both, masq=True),
        Flow("external to LB IP hits both endpoints, masqueraded", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, both, masq=True),
        Flow("pod to NodePort hits both endpoints, masqueraded", "10.0.0.2", TEST_NODE_IP, 3001, both, masq=True),
        Flow("external to NodePort hits both endpoints, masqueraded", TEST_EXTERNAL_CLIENT, TEST_NODE_IP, 3001, both, masq=True),
    ])


ITP_CASES = [
    ("internalTrafficPolicy is cluster", False, [("10.0.1.1", "test-node"), ("10.0.1.2", "node1"), ("10.0.1.3", "node2")],
     Flow("pod to ClusterIP hits all endpoints", "10.0.0.2", "172.30.1.1", 80, "10.0.1.1:80, 10.0.1.2:80, 10.0.1.3:80")),
    ("internalTrafficPolicy is local and there is one local endpoint", True,
     [("10.0.1.1", "test-node"), ("10.0.1.2", "node1"), ("10.0.1.3", "node2")],
     Flow("pod to ClusterIP hits only local endpoint", "10.0.0.2", "172.30.1.1", 80, "10.0.1.1:80")),
    ("internalTrafficPolicy is local and there are multiple local endpoints", True,
     [("10.0.1.1", "test-node"), ("10.0.1.2", "test-node"), ("10.0.1.3", "node2")],
     Flow("pod to ClusterIP hits all local endpoints", "10.0.0.2", "172.30.1.1", 80, "10.0.1.1:80, 10.0.1.2:80")),
    ("internalTrafficPolicy is local and there are no local endpoints", True,
     [("10.0.1.1", "node0"), ("10.0.1.2", "node1"), ("10.0.1.3", "node2")],
     Flow("no endpoints", "10.0.0.2", "172.30.1.1", 80, "DROP")),
]


@pytest.mark.parametrize("name,itp_local,endpoints,flow", ITP_CASES, ids=[c[0] for c in ITP_CASES])
async def test_internal_traffic_policy(name, itp_local, endpoints, flow):
    backend, ipt = fake_backend()
    c = Cluster().add(port("ns1", "svc1", "", cluster_ip="172.30.1.1", itp_local=itp_local))
    c.set_endpoints(spn("ns1", "svc1", ""), *(ep(ip, node=node) for ip, node in endpoints))
    await backend.run_sync(c.request())
    check_flows(ipt, [flow])
    c.set_endpoints(spn("ns1", "svc1", ""))  # slice deleted: a partial sync
    result = await backend.run_sync(c.request())
    assert not result.full
    check_flows(ipt, [Flow("endpoints deleted", "10.0.0.2", "172.30.1.1", 80, "REJECT")])


def _terminating_cases(local: bool):
    """upstream TestTerminatingEndpointsTrafficPolicy{Local,Cluster}: (name, endpoints, flows)."""
    if local:
        return [
            ("ready endpoints exist", [
                ep("10.0.1.1", node="test-node"), ep("10.0.1.2", node="test-node"),
                ep("10.0.1.3", node="test-node", ready=False, serving=True, terminating=True),
                ep("10.0.1.4", node="test-node", ready=False, serving=False, terminating=True),
                ep("10.0.1.5", node="node-1")],
             [Flow("pod to clusterIP", "10.0.0.2", "172.30.1.1", 80, "10.0.1.1:80, 10.0.1.2:80, 10.0.1.5:80"),
              Flow("external to LB", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, "10.0.1.1:80, 10.0.1.2:80")]),
            ("only terminating endpoints exist", [
                ep("10.0.1.2", node="test-node", ready=False, serving=True, terminating=True),
                ep("10.0.1.3", node="test-node", ready=False, serving=True, terminating=True),
                ep("10.0.1.4", node="test-node", ready=False, serving=False, terminating=True),
                ep("10.0.1.5", node="node-1")],
             [Flow("pod to clusterIP", "10.0.0.2", "172.30.1.1", 80, "10.0.1.5:80"),
              Flow("external to LB", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, "10.0.1.2:80, 10.0.1.3:80")]),
            ("terminating endpoints on remote node", [
                ep("10.0.1.5", node="node-1", ready=False, serving=True, terminating=True)],
             [Flow("pod to clusterIP", "10.0.0.2", "172.30.1.1", 80, "10.0.1.5:80"),
              Flow("external to LB, no locally-usable endpoints", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, "DROP")]),
            ("no usable endpoints on any node", [
                ep("10.0.1.5", node="test-node", ready=False, serving=False, terminating=True),
                ep("10.0.1.5", node="node-1", ready=False, serving=False, terminating=True)],
             [Flow("pod to clusterIP, no usable endpoints", "10.0.0.2", "172.30.1.1", 80, "REJECT"),
              Flow("external to LB, no usable endpoints", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, "REJECT")]),
        ]
    return [
        ("ready endpoints exist", [
            ep("10.0.1.1", node="test-node"), ep("10.0.1.2", node="test-node"),
            ep("10.0.1.3", node="another-node", ready=False, serving=True, terminating=True),
            ep("10.0.1.4", node="another-node", ready=False, serving=False, terminating=True),
            ep("10.0.1.5", node="another-node")],
         [Flow("pod to clusterIP", "10.0.0.2", "172.30.1.1", 80, "10.0.1.1:80, 10.0.1.2:80, 10.0.1.5:80"),
          Flow("external to LB", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, "10.0.1.1:80, 10.0.1.2:80, 10.0.1.5:80", masq=True)]),
        ("only terminating endpoints exist", [
            ep("10.0.1.2", node="test-node", ready=False, serving=True, terminating=True),
            ep("10.0.1.3", node="test-node", ready=False, serving=True, terminating=True),
            ep("10.0.1.4", node="another-node", ready=False, serving=False, terminating=True),
            ep("10.0.1.5", node="another-node", ready=False, serving=True, terminating=True)],
         [Flow("pod to clusterIP", "10.0.0.2", "172.30.1.1", 80, "10.0.1.2:80, 10.0.1.3:80, 10.0.1.5:80"),
          Flow("external to LB", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, "10.0.1.2:80, 10.0.1.3:80, 10.0.1.5:80", masq=True)]),
        ("terminating endpoints on remote node", [
            ep("10.0.1.5", node="node-1", ready=False, serving=True, terminating=True)],
         [Flow("pod to clusterIP", "10.0.0.2", "172.30.1.1", 80, "10.0.1.5:80"),
          Flow("external to LB", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, "10.0.1.5:80", masq=True)]),
        ("no usable endpoints on any node", [
            ep("10.0.1.5", node="test-node", ready=False, serving=False, terminating=True),
            ep("10.0.1.5", node="node-1", ready=False, serving=False, terminating=True)],
         [Flow("pod to clusterIP", "10.0.0.2", "172.30.1.1", 80, "REJECT"),
          Flow("external to LB", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, "REJECT")]),
    ]


# (eTP Local?, name, endpoints, flows), each case of both upstream tests
TERMINATING_CASES = [(local, *case) for local in (True, False) for case in _terminating_cases(local)]
TERMINATING_IDS = [f"{'eTP Local' if local else 'eTP Cluster'}: {name}" for local, name, _, _ in TERMINATING_CASES]


@pytest.mark.parametrize("local,name,endpoints,flows", TERMINATING_CASES, ids=TERMINATING_IDS)
async def test_terminating_endpoints(local, name, endpoints, flows):
    backend, ipt = fake_backend()
    c = Cluster().add(port("ns1", "svc1", "", cluster_ip="172.30.1.1", lb_ips=["1.2.3.4"], etp_local=local,
                           health_check_node_port=30000 if local else 0))
    c.set_endpoints(spn("ns1", "svc1", ""), *endpoints)
    await backend.run_sync(c.request())
    check_flows(ipt, flows)
    c.set_endpoints(spn("ns1", "svc1", ""))
    await backend.run_sync(c.request())
    check_flows(ipt, [Flow("pod to clusterIP after endpoints deleted", "10.0.0.2", "172.30.1.1", 80, "REJECT"),
                      Flow("external to LB after endpoints deleted", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, "REJECT")])


MASQ_FLOWS = [
    Flow("pod to ClusterIP", "10.0.0.2", "172.30.0.41", 80, "10.180.0.1:80, 10.180.1.1:80", False),
    Flow("pod to NodePort", "10.0.0.2", TEST_NODE_IP, 3001, "10.180.0.1:80, 10.180.1.1:80", True),
    Flow("pod to LB", "10.0.0.2", "1.2.3.4", 80, "10.180.0.1:80, 10.180.1.1:80", True),
    Flow("node to ClusterIP", TEST_NODE_IP, "172.30.0.41", 80, "10.180.0.1:80, 10.180.1.1:80", True),
    Flow("node to NodePort", TEST_NODE_IP, TEST_NODE_IP, 3001, "10.180.0.1:80, 10.180.1.1:80", True),
    Flow("localhost to NodePort", "127.0.0.1", "127.0.0.1", 3001, "10.180.0.1:80, 10.180.1.1:80", True),
    Flow("node to LB", TEST_NODE_IP, "1.2.3.4", 80, "10.180.0.1:80, 10.180.1.1:80", True),
    Flow("external to ClusterIP", TEST_EXTERNAL_CLIENT, "172.30.0.41", 80, "10.180.0.1:80, 10.180.1.1:80", True),
    Flow("external to NodePort", TEST_EXTERNAL_CLIENT, TEST_NODE_IP, 3001, "10.180.0.1:80, 10.180.1.1:80", True),
    Flow("external to LB", TEST_EXTERNAL_CLIENT, "1.2.3.4", 80, "10.180.0.1:80, 10.180.1.1:80", True),
    Flow("pod to ClusterIP with eTP:Local", "10.0.0.2", "172.30.0.42", 80, "10.180.0.2:80, 10.180.1.2:80", False),
    Flow("pod to NodePort with eTP:Local", "10.0.0.2", TEST_NODE_IP, 3002, "10.180.0.2:80, 10.180.1.2:80", False),
    Flow("pod to LB with eTP:Local", "10.0.0.2", "5.6.7.8", 80, "10.180.0.2:80, 10.180.1.2:80", False),
    Flow("node to ClusterIP with eTP:Local", TEST_NODE_IP, "172.30.0.42", 80, "10.180.0.2:80, 10.180.1.2:80", True),
    Flow("node to NodePort with eTP:Local", TEST_NODE_IP, TEST_NODE_IP, 3001, "10.180.0.1:80, 10.180.1.1:80", True),
    Flow("localhost to NodePort with eTP:Local", "127.0.0.1", "127.0.0.1", 3002, "10.180.0.2:80, 10.180.1.2:80", True),
    Flow("node to LB with eTP:Local", TEST_NODE_IP, "5.6.7.8", 80, "10.180.0.2:80, 10.180.1.2:80", True),
    Flow("external to ClusterIP with eTP:Local", TEST_EXTERNAL_CLIENT, "172.30.0.42", 80, "10.180.0.2:80, 10.180.1.2:80", True),
    Flow("external to NodePort with eTP:Local", TEST_EXTERNAL_CLIENT, TEST_NODE_IP, 3002, "10.180.0.2:80", False),
    Flow("external to LB with eTP:Local", TEST_EXTERNAL_CLIENT, "5.6.7.8", 80, "10.180.0.2:80", False),
    Flow("pod to ClusterIP with iTP:Local", "10.0.0.2", "172.30.0.43", 80, "10.180.0.3:80", False),
    Flow("pod to NodePort with iTP:Local", "10.0.0.2", TEST_NODE_IP, 3003, "10.180.0.3:80, 10.180.1.3:80", True),
    Flow("pod to LB with iTP:Local", "10.0.0.2", "9.10.11.12", 80, "10.180.0.3:80, 10.180.1.3:80", True),
    Flow("node to ClusterIP with iTP:Local", TEST_NODE_IP, "172.30.0.43", 80, "10.180.0.3:80", True),
    Flow("node to NodePort with iTP:Local", TEST_NODE_IP, TEST_NODE_IP, 3003, "10.180.0.3:80, 10.180.1.3:80", True),
    Flow("localhost to NodePort with iTP:Local", "127.0.0.1", "127.0.0.1", 3003, "10.180.0.3:80, 10.180.1.3:80", True),
    Flow("node to LB with iTP:Local", TEST_NODE_IP, "9.10.11.12", 80, "10.180.0.3:80, 10.180.1.3:80", True),
    Flow("external to ClusterIP with iTP:Local", TEST_EXTERNAL_CLIENT, "172.30.0.43", 80, "10.180.0.3:80", True),
    Flow("external to NodePort with iTP:Local", TEST_EXTERNAL_CLIENT, TEST_NODE_IP, 3003, "10.180.0.3:80, 10.180.1.3:80", True),
    Flow("external to LB with iTP:Local", TEST_EXTERNAL_CLIENT, "9.10.11.12", 80, "10.180.0.3:80, 10.180.1.3:80", True),
]

_NO_DETECTOR = {
    "node to ClusterIP": {"masq": False}, "node to ClusterIP with eTP:Local": {"masq": False},
    "node to ClusterIP with iTP:Local": {"masq": False}, "external to ClusterIP": {"masq": False},
    "external to ClusterIP with eTP:Local": {"masq": False}, "external to ClusterIP with iTP:Local": {"masq": False},
    "pod to NodePort with eTP:Local": {"output": "10.180.0.2:80"}, "pod to LB with eTP:Local": {"output": "10.180.0.2:80"},
}
_MASQ_ALL = {"pod to ClusterIP": {"masq": True}, "pod to ClusterIP with eTP:Local": {"masq": True},
             "pod to ClusterIP with iTP:Local": {"masq": True}}
MASQ_CASES = [
    ("base", False, True, {}),
    ("no LocalTrafficDetector", False, False, _NO_DETECTOR),
    ("masqueradeAll", True, True, _MASQ_ALL),
    ("masqueradeAll, no LocalTrafficDetector", True, False,
     {**_MASQ_ALL, "pod to NodePort with eTP:Local": {"output": "10.180.0.2:80"}, "pod to LB with eTP:Local": {"output": "10.180.0.2:80"}}),
]


@pytest.mark.parametrize("name,masquerade_all,detector,overrides", MASQ_CASES, ids=[c[0] for c in MASQ_CASES])
async def test_internal_external_masquerade(name, masquerade_all, detector, overrides):
    backend, ipt = fake_backend(masquerade_all=masquerade_all, detector=detector)
    c = Cluster().add(
        port("ns1", "svc1", cluster_ip="172.30.0.41", node_port=3001, lb_ips=["1.2.3.4"]),
        port("ns2", "svc2", cluster_ip="172.30.0.42", node_port=3002, lb_ips=["5.6.7.8"], etp_local=True, health_check_node_port=30002),
        port("ns3", "svc3", cluster_ip="172.30.0.43", node_port=3003, lb_ips=["9.10.11.12"], itp_local=True))
    for i in (1, 2, 3):
        c.set_endpoints(spn(f"ns{i}", f"svc{i}"), ep(f"10.180.0.{i}", node="test-node"), ep(f"10.180.1.{i}", node="remote"))
    await backend.run_sync(c.request())
    flows = []
    for flow in MASQ_FLOWS:
        change = overrides.get(flow.name, {})
        flows.append(Flow(flow.name, flow.source, flow.dest, flow.port, change.get("output", flow.output), change.get("masq", flow.masq)))
    check_flows(ipt, flows)


NO_LOCAL_CASES = [
    ("internalTrafficPolicy is set and there are local endpoints", True, False, True, (0, 0)),
    ("externalTrafficPolicy is set and there are local endpoints", False, True, True, (0, 0)),
    ("both policies are set and there are local endpoints", True, True, True, (0, 0)),
    ("internalTrafficPolicy is set and there are no local endpoints", True, False, False, (1, 0)),
    ("externalTrafficPolicy is set and there are no local endpoints", False, True, False, (0, 1)),
    ("both policies are set and there are no local endpoints", True, True, False, (1, 1)),
    ("both policies are set and there are no endpoints at all", True, True, None, (0, 0)),
]


@pytest.mark.parametrize("name,itp,etp,local,expected", NO_LOCAL_CASES, ids=[c[0] for c in NO_LOCAL_CASES])
async def test_no_endpoints_metric(name, itp, etp, local, expected):
    """upstream TestNoEndpointsMetric: the counts the shared proxier exports as
    ``sync_proxy_rules_no_local_endpoints_total``."""
    backend, _ = fake_backend()
    c = Cluster().add(port("ns1", "svc1", "", cluster_ip="172.30.1.1", node_port=123, itp_local=itp, etp_local=etp))
    if local is not None:
        first = "test-node" if local else "node0"
        c.set_endpoints(spn("ns1", "svc1", ""), ep("10.0.1.1", node=first), ep("10.0.1.2", node="node1"), ep("10.0.1.3", node="node2"))
    result = await backend.run_sync(c.request())
    assert (result.no_local_internal, result.no_local_external) == expected
