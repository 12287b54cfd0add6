"""IPVS mode's desired state (src/kubesvc/proxy/ipvs/rules.py) against hand-written
expectations: virtual servers and their real servers per Service kind and traffic policy,
schedulers and persistence, the ipsets, and the static iptables rule set as golden text."""

from __future__ import annotations

import textwrap

import pytest

from kubesvc.kernel.fake.iptables import TEST_NODE_NAME
from kubesvc.proxy.backend import ProxyOptions
from kubesvc.proxy.ipvs.rules import (FLAG_PERSISTENT, FLAG_SOURCE_HASH, SCHEDULERS, VirtualServerKey, build_state, cleanup_input,
                                      ipset_restore_input)
from kubesvc.proxy.localdetector import new_local_detector
from kubesvc.proxy.types import IPV4
from tests.support.builders import Cluster, ep, port, spn

NODE_IP = "192.168.0.2"
OPTIONS = ProxyOptions(family=IPV4, node_name=TEST_NODE_NAME,
                       local_detector=new_local_detector("ClusterCIDR", IPV4, ["10.0.0.0/8"], [], "", ""))


def vs(address: str, port_: int, protocol: str = "TCP") -> VirtualServerKey:
    return VirtualServerKey(address, protocol, port_)


def state_of(cluster: Cluster, scheduler: str = "", options: ProxyOptions = OPTIONS):
    return build_state(cluster.request(full=True), options, scheduler=scheduler, node_ips=[NODE_IP])


def reals(state, key) -> dict:
    return dict(state.virtual_servers[key].real_servers)


def test_cluster_ip_virtual_server_gets_ready_endpoints_and_the_address_is_bound():
    c = Cluster().add(port("ns1", "svc1", cluster_ip="172.30.0.41"))
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.1", 80), ep("10.180.0.2", 80, ready=False, serving=False))
    s = state_of(c)
    assert s.addresses == ("172.30.0.41",)
    assert set(s.virtual_servers) == {vs("172.30.0.41", 80)}
    server = s.virtual_servers[vs("172.30.0.41", 80)]
    assert (server.scheduler, server.flags, server.timeout) == ("rr", 0, 0)
    assert reals(s, vs("172.30.0.41", 80)) == {("10.180.0.1", 80): 1}
    assert s.ipsets["KUBE-CLUSTER-IP"] == ("172.30.0.41,tcp:80",)
    assert s.ipsets["KUBE-LOOP-BACK"] == ("10.180.0.1,tcp:80,10.180.0.1",)
    assert s.ipsets["KUBE-IPVS-IPS"] == ("172.30.0.41",)


def test_nodeport_external_ip_and_load_balancer_each_get_virtual_servers():
    c = Cluster().add(port("ns1", "lb", cluster_ip="172.30.0.42", node_port=3001, external_ips=["192.168.99.11"],
                           lb_ips=["1.2.3.4"], protocol="UDP"))
    c.set_endpoints(spn("ns1", "lb", protocol="UDP"), ep("10.180.0.3", 80))
    s = state_of(c)
    assert set(s.virtual_servers) == {vs("172.30.0.42", 80, "UDP"), vs("192.168.99.11", 80, "UDP"), vs("1.2.3.4", 80, "UDP"),
                                      vs(NODE_IP, 3001, "UDP")}
    assert all(dict(v.real_servers) == {("10.180.0.3", 80): 1} for v in s.virtual_servers.values())
    assert s.addresses == ("1.2.3.4", "172.30.0.42", "192.168.99.11")  # never the node IP
    assert s.ipsets["KUBE-NODE-PORT-UDP"] == ("3001",)
    assert s.ipsets["KUBE-EXTERNAL-IP"] == ("192.168.99.11,udp:80",)
    assert s.ipsets["KUBE-LOAD-BALANCER"] == ("1.2.3.4,udp:80",)


def test_traffic_policy_local_prefers_local_endpoints_and_falls_back_to_cluster():
    c = Cluster().add(port("ns1", "local", cluster_ip="172.30.0.43", node_port=3002, etp_local=True, itp_local=True))
    c.set_endpoints(spn("ns1", "local"), ep("10.180.0.1", 80, TEST_NODE_NAME), ep("10.180.1.1", 80, "other"))
    s = state_of(c)
    assert reals(s, vs("172.30.0.43", 80)) == {("10.180.0.1", 80): 1}
    assert reals(s, vs(NODE_IP, 3002)) == {("10.180.0.1", 80): 1}
    assert s.ipsets["KUBE-NODE-PORT-LOCAL-TCP"] == ("3002",)
    # only remote endpoints: IPVS forwards to the cluster endpoints (upstream, unlike iptables' DROP)
    c.set_endpoints(spn("ns1", "local"), ep("10.180.1.1", 80, "other"))
    s = state_of(c)
    assert reals(s, vs(NODE_IP, 3002)) == {("10.180.1.1", 80): 1}
    assert s.no_local_external == 1


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_scheduler_and_client_ip_affinity(scheduler):
    c = Cluster().add(port("ns1", "sticky", cluster_ip="172.30.0.44", affinity_seconds=300))
    s = state_of(c, scheduler)
    server = s.virtual_servers[vs("172.30.0.44", 80)]
    assert server.scheduler == scheduler
    assert server.flags == FLAG_PERSISTENT | (FLAG_SOURCE_HASH if scheduler == "mh" else 0)
    assert server.timeout == 300


def test_terminating_endpoints_serve_only_when_nothing_is_ready():
    c = Cluster().add(port("ns1", "t", cluster_ip="172.30.0.45"))
    c.set_endpoints(spn("ns1", "t"), ep("10.180.0.1", 80), ep("10.180.0.2", 80, ready=False, serving=True, terminating=True))
    assert reals(state_of(c), vs("172.30.0.45", 80)) == {("10.180.0.1", 80): 1}
    c.set_endpoints(spn("ns1", "t"), ep("10.180.0.2", 80, ready=False, serving=True, terminating=True))
    assert reals(state_of(c), vs("172.30.0.45", 80)) == {("10.180.0.2", 80): 1}


EXPECTED_IPTABLES = """\
*filter
:KUBE-FORWARD - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SOURCE-RANGES-FIREWALL - [0:0]
:KUBE-IPVS-FILTER - [0:0]
:KUBE-IPVS-OUT-FILTER - [0:0]
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x00004000/0x00004000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-NODE-PORT -m comment --comment "Kubernetes health check node port" -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j ACCEPT
-A KUBE-SOURCE-RANGES-FIREWALL -j DROP
-A KUBE-IPVS-FILTER -m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP-LOCAL dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j RETURN
-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT
COMMIT
*nat
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-LOAD-BALANCER - [0:0]
:KUBE-MARK-MASQ - [0:0]
-A KUBE-POSTROUTING -m comment --comment "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE
-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
-A KUBE-POSTROUTING -m mark ! --mark 0x00004000/0x00004000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x00004000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-MARK-MASQ -j MARK --or-mark 0x00004000
COMMIT
"""


def test_iptables_rules_golden_cluster_ip_and_nodeport():
    c = Cluster().add(port("ns1", "np", cluster_ip="172.30.0.46", node_port=3003))
    c.set_endpoints(spn("ns1", "np"), ep("10.180.0.1", 80))
    assert state_of(c).iptables == EXPECTED_IPTABLES


def test_ipset_restore_input_fills_a_temporary_set_and_swaps_it_in():
    c = Cluster().add(port("ns1", "np", cluster_ip="172.30.0.46", node_port=3003))
    c.set_endpoints(spn("ns1", "np"), ep("10.180.0.1", 80))
    text = ipset_restore_input(state_of(c), IPV4)
    expected = textwrap.dedent("""\
        create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536 -exist
        create KUBE-TMP-00 hash:ip,port family inet hashsize 1024 maxelem 65536 -exist
        flush KUBE-TMP-00
        add KUBE-TMP-00 172.30.0.46,tcp:80
        swap KUBE-TMP-00 KUBE-CLUSTER-IP
        destroy KUBE-TMP-00
        """)
    assert text.startswith(expected)
    assert "flush KUBE-CLUSTER-IP" not in text  # a live set is never emptied in place
    assert "create KUBE-NODE-PORT-TCP bitmap:port range 0-65535 -exist\n" in text
    assert "add KUBE-TMP-" in text and " 3003\n" in text
    assert text.count("\nswap ") == 17


def test_ipv6_set_names_are_cut_to_the_kernels_31_characters_as_upstream():
    from kubesvc.proxy.ipvs.rules import ALL_SETS, set_name
    from kubesvc.proxy.types import IPV6

    names = {info.name: set_name(info, IPV6) for info in ALL_SETS}
    assert names["LOAD-BALANCER-SOURCE-CIDR"] == "KUBE-6-LOAD-BALANCER-SOURCE-CID"
    assert names["CLUSTER-IP"] == "KUBE-6-CLUSTER-IP"
    assert set_name(next(i for i in ALL_SETS if i.name == "LOAD-BALANCER-SOURCE-CIDR"), IPV4) == "KUBE-LOAD-BALANCER-SOURCE-CIDR"
    assert len(set(names.values())) == len(ALL_SETS), "cutting must not make two sets one"


def test_cleanup_input_flushes_then_deletes_only_the_chains_that_exist():
    save_nat = ["KUBE-SERVICES", "KUBE-NODE-PORT", "KUBE-SVC-XPGD46QRK7WJZT7O", "OTHER", "POSTROUTING"]
    assert cleanup_input("nat", save_nat) == ("*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-NODE-PORT - [0:0]\n"
                                              "-X KUBE-SERVICES\n-X KUBE-NODE-PORT\nCOMMIT\n")
    assert cleanup_input("filter", ["KUBE-IPVS-FILTER", "INPUT"]) == "*filter\n:KUBE-IPVS-FILTER - [0:0]\n-X KUBE-IPVS-FILTER\nCOMMIT\n"
    assert cleanup_input("filter", ["INPUT", "FORWARD"]) is None
