"""Our ``iptables-restore`` input against upstream's expected outputs, copied from
``pkg/proxy/iptables/proxier_test.go`` (kubernetes @531be81208e2), not computed by our code.

Comparison is upstream's: our output is sorted with ``sortIPTablesRules`` (Services come out
of a Go map upstream) and compared with the expected text as written. The expected texts use
the fake proxier's mark ``0x4000``; the real kube-proxy (and we) write Go's ``%#08x`` form
``0x00004000``, so the expected texts get that one substitution.
"""

from __future__ import annotations

import dataclasses
import difflib
import textwrap

import pytest

from kubesvc.kernel.fake.iptables import (TEST_EXTERNAL_CLIENT, TEST_NODE_IP, TEST_NODE_IP_ALT, TEST_NODE_IPV6, TEST_NODE_IPV6_ALT,
                                          FakeIptables, Flow, check_flows, parse_dump, trace_packet)
from kubesvc.kernel.iptables import APPEND
from kubesvc.proxy.backend import SyncFailed
from kubesvc.proxy.iptables.rules import LARGE_CLUSTER_ENDPOINTS_THRESHOLD, Features
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.types import IPV4, IPV6
from tests.proxy.iptables.golden import chain_rules, check_rule_jumps, count_rules, sort_iptables_rules
from tests.proxy.iptables.scenario import UPSTREAM_FAKE_FEATURES, fake_backend
from tests.support.builders import Cluster, ep, port, spn


def expected_text(text: str) -> str:
    return textwrap.dedent(text).lstrip(" \t\n").replace("0x4000", "0x00004000")


def assert_rules_equal(expected: str, result: str, check_consistency: bool = True) -> None:
    """upstream ``assertIPTablesRulesEqual``."""
    expected = expected_text(expected)
    got = sort_iptables_rules(result.lstrip(" \t\n"))
    if got != expected:
        diff = "\n".join(difflib.unified_diff(expected.splitlines(), got.splitlines(), "expected", "got", lineterm=""))
        pytest.fail(f"rules do not match:\n{diff}\n\nfull result:\n{got}")
    if check_consistency:
        check_rule_jumps(expected)
        check_rule_jumps(result)


def gauge(metrics: ProxyMetrics, name: str, **labels) -> float:
    return metrics.registry.get_sample_value(f"kubeproxy_{name}", labels)


# ---- TestOverallIPTablesRules ----------------------------------------------------------------

OVERALL_EXPECTED = """
    *filter
    :KUBE-NODEPORTS - [0:0]
    :KUBE-SERVICES - [0:0]
    :KUBE-EXTERNAL-SERVICES - [0:0]
    :KUBE-FIREWALL - [0:0]
    :KUBE-FORWARD - [0:0]
    :KUBE-PROXY-FIREWALL - [0:0]
    -A KUBE-NODEPORTS -m comment --comment "ns2/svc2:p80 health check node port" -m tcp -p tcp --dport 30000 -j ACCEPT
    -A KUBE-SERVICES -m comment --comment "ns6/svc6:p80 has no endpoints" -m tcp -p tcp -d 172.30.0.46 --dport 80 -j REJECT
    -A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m tcp -p tcp -d 192.168.99.22 --dport 80 -j DROP
    -A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j DROP
    -A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 3001 -j DROP
    -A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
    -A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP
    -A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
    -A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
    -A KUBE-PROXY-FIREWALL -m comment --comment "ns5/svc5:p80 traffic not accepted by KUBE-FW-NUKIZ6OKUXPJNT4C" -m tcp -p tcp -d 5.6.7.8 --dport 80 -j DROP
    COMMIT
    *nat
    :KUBE-NODEPORTS - [0:0]
    :KUBE-SERVICES - [0:0]
    :KUBE-EXT-4SW47YFZTEDKD3PK - [0:0]
    :KUBE-EXT-GNZBNJ2PO5MGZ6GT - [0:0]
    :KUBE-EXT-NUKIZ6OKUXPJNT4C - [0:0]
    :KUBE-EXT-X27LE4BHSL4DOUIK - [0:0]
    :KUBE-FW-NUKIZ6OKUXPJNT4C - [0:0]
    :KUBE-MARK-MASQ - [0:0]
    :KUBE-POSTROUTING - [0:0]
    :KUBE-SEP-C6EBXVWJJZMIWKLZ - [0:0]
    :KUBE-SEP-I77PXRDZVX7PMWMN - [0:0]
    :KUBE-SEP-OYPFS5VJICHGATKP - [0:0]
    :KUBE-SEP-RS4RBKLTHTF2IUXJ - [0:0]
    :KUBE-SEP-SXIVWICOYRO3J4NJ - [0:0]
    :KUBE-SEP-UKSFD7AGPMPPLUHC - [0:0]
    :KUBE-SVC-4SW47YFZTEDKD3PK - [0:0]
    :KUBE-SVC-GNZBNJ2PO5MGZ6GT - [0:0]
    :KUBE-SVC-NUKIZ6OKUXPJNT4C - [0:0]
    :KUBE-SVC-X27LE4BHSL4DOUIK - [0:0]
    :KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]
    -A KUBE-NODEPORTS -m comment --comment ns2/svc2:p80 -m tcp -p tcp -d 127.0.0.0/8 --dport 3001 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
    -A KUBE-NODEPORTS -m comment --comment ns2/svc2:p80 -m tcp -p tcp --dport 3001 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
    -A KUBE-NODEPORTS -m comment --comment ns3/svc3:p80 -m tcp -p tcp -d 127.0.0.0/8 --dport 3003 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-EXT-X27LE4BHSL4DOUIK
    -A KUBE-NODEPORTS -m comment --comment ns3/svc3:p80 -m tcp -p tcp --dport 3003 -j KUBE-EXT-X27LE4BHSL4DOUIK
    -A KUBE-NODEPORTS -m comment --comment ns5/svc5:p80 -m tcp -p tcp -d 127.0.0.0/8 --dport 3002 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-EXT-NUKIZ6OKUXPJNT4C
    -A KUBE-NODEPORTS -m comment --comment ns5/svc5:p80 -m tcp -p tcp --dport 3002 -j KUBE-EXT-NUKIZ6OKUXPJNT4C
    -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
    -A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 80 -j KUBE-SVC-GNZBNJ2PO5MGZ6GT
    -A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 external IP" -m tcp -p tcp -d 192.168.99.22 --dport 80 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
    -A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 loadbalancer IP" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
    -A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
    -A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 -j KUBE-SVC-4SW47YFZTEDKD3PK
    -A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 external IP" -m tcp -p tcp -d 192.168.99.33 --dport 80 -j KUBE-EXT-4SW47YFZTEDKD3PK
    -A KUBE-SERVICES -m comment --comment "ns5/svc5:p80 cluster IP" -m tcp -p tcp -d 172.30.0.45 --dport 80 -j KUBE-SVC-NUKIZ6OKUXPJNT4C
    -A KUBE-SERVICES -m comment --comment "ns5/svc5:p80 loadbalancer IP" -m tcp -p tcp -d 5.6.7.8 --dport 80 -j KUBE-FW-NUKIZ6OKUXPJNT4C
    -A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
    -A KUBE-EXT-4SW47YFZTEDKD3PK -m comment --comment "masquerade traffic for ns4/svc4:p80 external destinations" -j KUBE-MARK-MASQ
    -A KUBE-EXT-4SW47YFZTEDKD3PK -j KUBE-SVC-4SW47YFZTEDKD3PK
    -A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment "pod traffic for ns2/svc2:p80 external destinations" -s 10.0.0.0/8 -j KUBE-SVC-GNZBNJ2PO5MGZ6GT
    -A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment "masquerade LOCAL traffic for ns2/svc2:p80 external destinations" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ
    -A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment "route LOCAL traffic for ns2/svc2:p80 external destinations" -m addrtype --src-type LOCAL -j KUBE-SVC-GNZBNJ2PO5MGZ6GT
    -A KUBE-EXT-NUKIZ6OKUXPJNT4C -m comment --comment "masquerade traffic for ns5/svc5:p80 external destinations" -j KUBE-MARK-MASQ
    -A KUBE-EXT-NUKIZ6OKUXPJNT4C -j KUBE-SVC-NUKIZ6OKUXPJNT4C
    -A KUBE-EXT-X27LE4BHSL4DOUIK -m comment --comment "masquerade traffic for ns3/svc3:p80 external destinations" -j KUBE-MARK-MASQ
    -A KUBE-EXT-X27LE4BHSL4DOUIK -j KUBE-SVC-X27LE4BHSL4DOUIK
    -A KUBE-FW-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 loadbalancer IP" -s 203.0.113.0/25 -j KUBE-EXT-NUKIZ6OKUXPJNT4C
    -A KUBE-FW-NUKIZ6OKUXPJNT4C -m comment --comment "other traffic to ns5/svc5:p80 will be dropped by KUBE-PROXY-FIREWALL"
    -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
    -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
    -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
    -A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
    -A KUBE-SEP-C6EBXVWJJZMIWKLZ -m comment --comment ns4/svc4:p80 -s 10.180.0.5 -j KUBE-MARK-MASQ
    -A KUBE-SEP-C6EBXVWJJZMIWKLZ -m comment --comment ns4/svc4:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.5:80
    -A KUBE-SEP-I77PXRDZVX7PMWMN -m comment --comment ns5/svc5:p80 -s 10.180.0.3 -j KUBE-MARK-MASQ
    -A KUBE-SEP-I77PXRDZVX7PMWMN -m comment --comment ns5/svc5:p80 -m recent --name KUBE-SEP-I77PXRDZVX7PMWMN --set -m tcp -p tcp -j DNAT --to-destination 10.180.0.3:80
    -A KUBE-SEP-OYPFS5VJICHGATKP -m comment --comment ns3/svc3:p80 -s 10.180.0.3 -j KUBE-MARK-MASQ
    -A KUBE-SEP-OYPFS5VJICHGATKP -m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.3:80
    -A KUBE-SEP-RS4RBKLTHTF2IUXJ -m comment --comment ns2/svc2:p80 -s 10.180.0.2 -j KUBE-MARK-MASQ
    -A KUBE-SEP-RS4RBKLTHTF2IUXJ -m comment --comment ns2/svc2:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.2:80
    -A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -s 10.180.0.1 -j KUBE-MARK-MASQ
    -A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80
    -A KUBE-SEP-UKSFD7AGPMPPLUHC -m comment --comment ns4/svc4:p80 -s 10.180.0.4 -j KUBE-MARK-MASQ
    -A KUBE-SEP-UKSFD7AGPMPPLUHC -m comment --comment ns4/svc4:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.4:80
    -A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
    -A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 -> 10.180.0.4:80" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-UKSFD7AGPMPPLUHC
    -A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 -> 10.180.0.5:80" -j KUBE-SEP-C6EBXVWJJZMIWKLZ
    -A KUBE-SVC-GNZBNJ2PO5MGZ6GT -m comment --comment "ns2/svc2:p80 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
    -A KUBE-SVC-GNZBNJ2PO5MGZ6GT -m comment --comment "ns2/svc2:p80 -> 10.180.0.2:80" -j KUBE-SEP-RS4RBKLTHTF2IUXJ
    -A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 cluster IP" -m tcp -p tcp -d 172.30.0.45 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
    -A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 -> 10.180.0.3:80" -m recent --name KUBE-SEP-I77PXRDZVX7PMWMN --rcheck --seconds 10800 --reap -j KUBE-SEP-I77PXRDZVX7PMWMN
    -A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 -> 10.180.0.3:80" -j KUBE-SEP-I77PXRDZVX7PMWMN
    -A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
    -A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 -> 10.180.0.3:80" -j KUBE-SEP-OYPFS5VJICHGATKP
    -A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
    -A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 -> 10.180.0.1:80" -j KUBE-SEP-SXIVWICOYRO3J4NJ
    COMMIT
"""


def overall_cluster() -> Cluster:
    c = Cluster()
    c.add(
        port("ns1", "svc1", cluster_ip="172.30.0.41"),
        # LoadBalancer, Local traffic policy
        port("ns2", "svc2", cluster_ip="172.30.0.42", node_port=3001, lb_ips=["1.2.3.4"], external_ips=["192.168.99.22"],
             health_check_node_port=30000, etp_local=True),
        port("ns3", "svc3", cluster_ip="172.30.0.43", node_port=3003),  # NodePort
        port("ns4", "svc4", cluster_ip="172.30.0.44", external_ips=["192.168.99.33"]),  # ExternalIP
        # LoadBalancer, Cluster policy, source ranges, session affinity (healthCheckNodePort
        # is only kept for eTP Local)
        port("ns5", "svc5", cluster_ip="172.30.0.45", node_port=3002, lb_ips=["5.6.7.8"], source_ranges=["203.0.113.0/25"],
             affinity_seconds=10800),
        port("ns6", "svc6", cluster_ip="172.30.0.46"),  # no endpoints
    )
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.1"))
    c.set_endpoints(spn("ns2", "svc2"), ep("10.180.0.2"))  # not local: no NodeName
    c.set_endpoints(spn("ns3", "svc3"), ep("10.180.0.3"))
    c.set_endpoints(spn("ns4", "svc4"), ep("10.180.0.4"), ep("10.180.0.5", node="test-node"))
    c.set_endpoints(spn("ns5", "svc5"), ep("10.180.0.3"))
    return c


async def test_overall_iptables_rules():
    metrics = ProxyMetrics()
    backend, ipt = fake_backend(metrics=metrics)
    await backend.run_sync(overall_cluster().request())
    assert_rules_equal(OVERALL_EXPECTED, backend.mode.ipt.restores[-1])
    assert gauge(metrics, "sync_proxy_rules_iptables_total", table="nat", ip_family="IPv4") == count_rules(backend.mode.ipt.restores[-1], "nat")
    assert gauge(metrics, "sync_proxy_rules_iptables_total", table="filter", ip_family="IPv4") == count_rules(backend.mode.ipt.restores[-1], "filter")


def test_overall_rules_pure():
    """The same through ``rules.build_restore`` alone (no kernel, no stale chains)."""
    from kubesvc.proxy.iptables.rules import build_restore
    backend, _ = fake_backend()
    data = build_restore(overall_cluster().request(full=True), backend.options, features=UPSTREAM_FAKE_FEATURES)
    assert_rules_equal(OVERALL_EXPECTED, data.text)
    assert data.nat_rules_total == data.nat_rules_written == count_rules(data.text, "nat")
    assert data.filter_rules == count_rules(data.text, "filter")
    assert (data.no_local_internal, data.no_local_external) == (0, 1)


# ---- TestBadIPs (the sloppy IPs are canonicalised by the change trackers; the output is the same)

BAD_IPS_EXPECTED = """
    *filter
    :KUBE-NODEPORTS - [0:0]
    :KUBE-SERVICES - [0:0]
    :KUBE-EXTERNAL-SERVICES - [0:0]
    :KUBE-FIREWALL - [0:0]
    :KUBE-FORWARD - [0:0]
    :KUBE-PROXY-FIREWALL - [0:0]
    -A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
    -A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP
    -A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
    -A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
    -A KUBE-PROXY-FIREWALL -m comment --comment "ns1/svc1:p80 traffic not accepted by KUBE-FW-XPGD46QRK7WJZT7O" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j DROP
    COMMIT
    *nat
    :KUBE-NODEPORTS - [0:0]
    :KUBE-SERVICES - [0:0]
    :KUBE-EXT-XPGD46QRK7WJZT7O - [0:0]
    :KUBE-FW-XPGD46QRK7WJZT7O - [0:0]
    :KUBE-MARK-MASQ - [0:0]
    :KUBE-POSTROUTING - [0:0]
    :KUBE-SEP-SXIVWICOYRO3J4NJ - [0:0]
    :KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]
    -A KUBE-NODEPORTS -m comment --comment ns1/svc1:p80 -m tcp -p tcp -d 127.0.0.0/8 --dport 3001 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-EXT-XPGD46QRK7WJZT7O
    -A KUBE-NODEPORTS -m comment --comment ns1/svc1:p80 -m tcp -p tcp --dport 3001 -j KUBE-EXT-XPGD46QRK7WJZT7O
    -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
    -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 external IP" -m tcp -p tcp -d 192.168.99.22 --dport 80 -j KUBE-EXT-XPGD46QRK7WJZT7O
    -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 loadbalancer IP" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j KUBE-FW-XPGD46QRK7WJZT7O
    -A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
    -A KUBE-EXT-XPGD46QRK7WJZT7O -m comment --comment "masquerade traffic for ns1/svc1:p80 external destinations" -j KUBE-MARK-MASQ
    -A KUBE-EXT-XPGD46QRK7WJZT7O -j KUBE-SVC-XPGD46QRK7WJZT7O
    -A KUBE-FW-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 loadbalancer IP" -s 203.0.113.0/25 -j KUBE-EXT-XPGD46QRK7WJZT7O
    -A KUBE-FW-XPGD46QRK7WJZT7O -m comment --comment "other traffic to ns1/svc1:p80 will be dropped by KUBE-PROXY-FIREWALL"
    -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
    -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
    -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
    -A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
    -A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -s 10.180.0.1 -j KUBE-MARK-MASQ
    -A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80
    -A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
    -A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 -> 10.180.0.1:80" -j KUBE-SEP-SXIVWICOYRO3J4NJ
    COMMIT
"""


async def test_bad_ips_output():
    backend, _ = fake_backend()
    c = Cluster().add(port("ns1", "svc1", cluster_ip="172.30.0.41", node_port=3001, lb_ips=["1.2.3.4"],
                           external_ips=["192.168.99.22"], source_ranges=["203.0.113.0/25"]))
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.1"))
    await backend.run_sync(c.request())
    assert_rules_equal(BAD_IPS_EXPECTED, backend.mode.ipt.restores[-1])


# ---- TestSyncProxyRulesRepeated ------------------------------------------------------------------

_FILTER_REPEATED = """
    *filter
    :KUBE-NODEPORTS - [0:0]
    :KUBE-SERVICES - [0:0]
    :KUBE-EXTERNAL-SERVICES - [0:0]
    :KUBE-FIREWALL - [0:0]
    :KUBE-FORWARD - [0:0]
    :KUBE-PROXY-FIREWALL - [0:0]
    {reject}-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
    -A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP
    -A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
    -A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
    COMMIT
"""


def repeated(filter_reject: str, nat: str) -> str:
    reject = (filter_reject + "\n    ") if filter_reject else ""
    return textwrap.dedent(_FILTER_REPEATED.replace("{reject}", reject)) + textwrap.dedent(nat).lstrip("\n")


REPEATED_STEPS = {
    "initial": repeated("", """
        *nat
        :KUBE-NODEPORTS - [0:0]
        :KUBE-SERVICES - [0:0]
        :KUBE-MARK-MASQ - [0:0]
        :KUBE-POSTROUTING - [0:0]
        :KUBE-SEP-SNQ3ZNILQDEJNDQO - [0:0]
        :KUBE-SEP-UHEGFW77JX3KXTOV - [0:0]
        :KUBE-SVC-2VJB64SDSIJUP5T6 - [0:0]
        :KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]
        -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
        -A KUBE-SERVICES -m comment --comment "ns2/svc2:p8080 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 8080 -j KUBE-SVC-2VJB64SDSIJUP5T6
        -A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
        -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
        -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
        -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
        -A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
        -A KUBE-SEP-SNQ3ZNILQDEJNDQO -m comment --comment ns1/svc1:p80 -s 10.0.1.1 -j KUBE-MARK-MASQ
        -A KUBE-SEP-SNQ3ZNILQDEJNDQO -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.1.1:80
        -A KUBE-SEP-UHEGFW77JX3KXTOV -m comment --comment ns2/svc2:p8080 -s 10.0.2.1 -j KUBE-MARK-MASQ
        -A KUBE-SEP-UHEGFW77JX3KXTOV -m comment --comment ns2/svc2:p8080 -m tcp -p tcp -j DNAT --to-destination 10.0.2.1:8080
        -A KUBE-SVC-2VJB64SDSIJUP5T6 -m comment --comment "ns2/svc2:p8080 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 8080 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
        -A KUBE-SVC-2VJB64SDSIJUP5T6 -m comment --comment "ns2/svc2:p8080 -> 10.0.2.1:8080" -j KUBE-SEP-UHEGFW77JX3KXTOV
        -A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
        -A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 -> 10.0.1.1:80" -j KUBE-SEP-SNQ3ZNILQDEJNDQO
        COMMIT
        """),
    "add svc3": repeated("", """
        *nat
        :KUBE-NODEPORTS - [0:0]
        :KUBE-SERVICES - [0:0]
        :KUBE-MARK-MASQ - [0:0]
        :KUBE-POSTROUTING - [0:0]
        :KUBE-SEP-BSWRHOQ77KEXZLNL - [0:0]
        :KUBE-SVC-X27LE4BHSL4DOUIK - [0:0]
        -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
        -A KUBE-SERVICES -m comment --comment "ns2/svc2:p8080 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 8080 -j KUBE-SVC-2VJB64SDSIJUP5T6
        -A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
        -A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
        -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
        -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
        -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
        -A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
        -A KUBE-SEP-BSWRHOQ77KEXZLNL -m comment --comment ns3/svc3:p80 -s 10.0.3.1 -j KUBE-MARK-MASQ
        -A KUBE-SEP-BSWRHOQ77KEXZLNL -m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.3.1:80
        -A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
        -A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 -> 10.0.3.1:80" -j KUBE-SEP-BSWRHOQ77KEXZLNL
        COMMIT
        """),
    "delete svc2": repeated("", """
        *nat
        :KUBE-NODEPORTS - [0:0]
        :KUBE-SERVICES - [0:0]
        :KUBE-MARK-MASQ - [0:0]
        :KUBE-POSTROUTING - [0:0]
        :KUBE-SEP-UHEGFW77JX3KXTOV - [0:0]
        :KUBE-SVC-2VJB64SDSIJUP5T6 - [0:0]
        -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
        -A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
        -A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
        -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
        -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
        -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
        -A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
        -X KUBE-SEP-UHEGFW77JX3KXTOV
        -X KUBE-SVC-2VJB64SDSIJUP5T6
        COMMIT
        """),
    "add svc4 without endpoints": repeated(
        '-A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 has no endpoints" -m tcp -p tcp -d 172.30.0.44 --dport 80 -j REJECT', """
        *nat
        :KUBE-NODEPORTS - [0:0]
        :KUBE-SERVICES - [0:0]
        :KUBE-MARK-MASQ - [0:0]
        :KUBE-POSTROUTING - [0:0]
        -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
        -A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
        -A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
        -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
        -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
        -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
        -A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
        COMMIT
        """),
    "svc4 endpoints": repeated("", """
        *nat
        :KUBE-NODEPORTS - [0:0]
        :KUBE-SERVICES - [0:0]
        :KUBE-MARK-MASQ - [0:0]
        :KUBE-POSTROUTING - [0:0]
        :KUBE-SEP-AYCN5HPXMIRJNJXU - [0:0]
        :KUBE-SVC-4SW47YFZTEDKD3PK - [0:0]
        -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
        -A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
        -A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 -j KUBE-SVC-4SW47YFZTEDKD3PK
        -A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
        -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
        -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
        -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
        -A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
        -A KUBE-SEP-AYCN5HPXMIRJNJXU -m comment --comment ns4/svc4:p80 -s 10.0.4.1 -j KUBE-MARK-MASQ
        -A KUBE-SEP-AYCN5HPXMIRJNJXU -m comment --comment ns4/svc4:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.4.1:80
        -A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
        -A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 -> 10.0.4.1:80" -j KUBE-SEP-AYCN5HPXMIRJNJXU
        COMMIT
        """),
    "change svc3 endpoint": repeated("", """
        *nat
        :KUBE-NODEPORTS - [0:0]
        :KUBE-SERVICES - [0:0]
        :KUBE-MARK-MASQ - [0:0]
        :KUBE-POSTROUTING - [0:0]
        :KUBE-SEP-BSWRHOQ77KEXZLNL - [0:0]
        :KUBE-SEP-DKCFIS26GWF2WLWC - [0:0]
        :KUBE-SVC-X27LE4BHSL4DOUIK - [0:0]
        -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
        -A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
        -A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 -j KUBE-SVC-4SW47YFZTEDKD3PK
        -A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
        -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
        -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
        -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
        -A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
        -A KUBE-SEP-DKCFIS26GWF2WLWC -m comment --comment ns3/svc3:p80 -s 10.0.3.2 -j KUBE-MARK-MASQ
        -A KUBE-SEP-DKCFIS26GWF2WLWC -m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.3.2:80
        -A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
        -A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 -> 10.0.3.2:80" -j KUBE-SEP-DKCFIS26GWF2WLWC
        -X KUBE-SEP-BSWRHOQ77KEXZLNL
        COMMIT
        """),
    "add svc3 endpoint": repeated("", """
        *nat
        :KUBE-NODEPORTS - [0:0]
        :KUBE-SERVICES - [0:0]
        :KUBE-MARK-MASQ - [0:0]
        :KUBE-POSTROUTING - [0:0]
        :KUBE-SEP-DKCFIS26GWF2WLWC - [0:0]
        :KUBE-SEP-JVVZVJ7BSEPPRNBS - [0:0]
        :KUBE-SVC-X27LE4BHSL4DOUIK - [0:0]
        -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
        -A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
        -A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 -j KUBE-SVC-4SW47YFZTEDKD3PK
        -A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
        -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
        -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
        -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
        -A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
        -A KUBE-SEP-DKCFIS26GWF2WLWC -m comment --comment ns3/svc3:p80 -s 10.0.3.2 -j KUBE-MARK-MASQ
        -A KUBE-SEP-DKCFIS26GWF2WLWC -m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.3.2:80
        -A KUBE-SEP-JVVZVJ7BSEPPRNBS -m comment --comment ns3/svc3:p80 -s 10.0.3.3 -j KUBE-MARK-MASQ
        -A KUBE-SEP-JVVZVJ7BSEPPRNBS -m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.3.3:80
        -A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
        -A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 -> 10.0.3.2:80" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-DKCFIS26GWF2WLWC
        -A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 -> 10.0.3.3:80" -j KUBE-SEP-JVVZVJ7BSEPPRNBS
        COMMIT
        """),
    "no changes": repeated("", """
        *nat
        :KUBE-NODEPORTS - [0:0]
        :KUBE-SERVICES - [0:0]
        :KUBE-MARK-MASQ - [0:0]
        :KUBE-POSTROUTING - [0:0]
        -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
        -A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
        -A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 -j KUBE-SVC-4SW47YFZTEDKD3PK
        -A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
        -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
        -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
        -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
        -A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
        COMMIT
        """),
    "full resync after failure": repeated("", """
        *nat
        :KUBE-NODEPORTS - [0:0]
        :KUBE-SERVICES - [0:0]
        :KUBE-MARK-MASQ - [0:0]
        :KUBE-POSTROUTING - [0:0]
        :KUBE-SEP-AYCN5HPXMIRJNJXU - [0:0]
        :KUBE-SEP-DKCFIS26GWF2WLWC - [0:0]
        :KUBE-SEP-JVVZVJ7BSEPPRNBS - [0:0]
        :KUBE-SEP-SNQ3ZNILQDEJNDQO - [0:0]
        :KUBE-SVC-4SW47YFZTEDKD3PK - [0:0]
        :KUBE-SVC-X27LE4BHSL4DOUIK - [0:0]
        :KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]
        -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
        -A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
        -A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
        -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
        -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
        -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
        -A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
        -A KUBE-SEP-DKCFIS26GWF2WLWC -m comment --comment ns3/svc3:p80 -s 10.0.3.2 -j KUBE-MARK-MASQ
        -A KUBE-SEP-DKCFIS26GWF2WLWC -m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.3.2:80
        -A KUBE-SEP-JVVZVJ7BSEPPRNBS -m comment --comment ns3/svc3:p80 -s 10.0.3.3 -j KUBE-MARK-MASQ
        -A KUBE-SEP-JVVZVJ7BSEPPRNBS -m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.3.3:80
        -A KUBE-SEP-SNQ3ZNILQDEJNDQO -m comment --comment ns1/svc1:p80 -s 10.0.1.1 -j KUBE-MARK-MASQ
        -A KUBE-SEP-SNQ3ZNILQDEJNDQO -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.1.1:80
        -A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
        -A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 -> 10.0.3.2:80" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-DKCFIS26GWF2WLWC
        -A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 -> 10.0.3.3:80" -j KUBE-SEP-JVVZVJ7BSEPPRNBS
        -A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
        -A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 -> 10.0.1.1:80" -j KUBE-SEP-SNQ3ZNILQDEJNDQO
        -X KUBE-SEP-AYCN5HPXMIRJNJXU
        -X KUBE-SVC-4SW47YFZTEDKD3PK
        COMMIT
        """),
}


async def test_sync_proxy_rules_repeated():
    metrics = ProxyMetrics()
    backend, ipt = fake_backend(metrics=metrics)
    c = Cluster()

    def nat_last():
        return gauge(metrics, "sync_proxy_rules_iptables_last", table="nat", ip_family="IPv4")

    def nat_total():
        return gauge(metrics, "sync_proxy_rules_iptables_total", table="nat", ip_family="IPv4")

    async def step(name: str, *, consistent: bool = False, total_delta: int | None = None):
        result = await backend.run_sync(c.request())
        assert_rules_equal(REPEATED_STEPS[name], backend.mode.ipt.restores[-1], check_consistency=consistent)
        assert nat_last() == count_rules(expected_text(REPEATED_STEPS[name]), "nat"), name
        return result

    # Create initial state
    c.add(port("ns1", "svc1", cluster_ip="172.30.0.41"), port("ns2", "svc2", "p8080", 8080, cluster_ip="172.30.0.42"))
    c.set_endpoints(spn("ns1", "svc1"), ep("10.0.1.1"))
    c.set_endpoints(spn("ns2", "svc2", "p8080"), ep("10.0.2.1", 8080))
    result = await step("initial", consistent=True)
    assert result.full
    total = count_rules(expected_text(REPEATED_STEPS["initial"]), "nat")
    assert nat_total() == total

    # Add a new service and its endpoints: only its SVC and SEP chains are written.
    c.add(port("ns3", "svc3", cluster_ip="172.30.0.43"))
    c.set_endpoints(spn("ns3", "svc3"), ep("10.0.3.1"))
    assert not (await step("add svc3")).full
    total += 5  # 1 KUBE-SERVICES rule, 2 KUBE-SVC-X27LE4BHSL4DOUIK rules, 2 KUBE-SEP-BSWRHOQ77KEXZLNL rules
    assert nat_total() == total

    # Delete a service (the other services are not rewritten)
    c.delete_service("ns2", "svc2")
    c.set_endpoints(spn("ns2", "svc2", "p8080"))
    await step("delete svc2")
    total -= 5
    assert nat_total() == total

    # Add a service, sync, then add its endpoints.
    c.add(port("ns4", "svc4", cluster_ip="172.30.0.44"))
    await step("add svc4 without endpoints")
    assert nat_total() == total  # the REJECT rule is in filter
    c.set_endpoints(spn("ns4", "svc4"), ep("10.0.4.1"))
    await step("svc4 endpoints")
    total += 5
    assert nat_total() == total

    # Change an endpoint of an existing service: its SVC and SEP chains are rewritten.
    c.set_endpoints(spn("ns3", "svc3"), ep("10.0.3.2"))
    await step("change svc3 endpoint")
    assert nat_total() == total

    # Add an endpoint to a service.
    c.set_endpoints(spn("ns3", "svc3"), ep("10.0.3.2"), ep("10.0.3.3"))
    await step("add svc3 endpoint")
    total += 3
    assert nat_total() == total

    # Sync with no new changes: no SVC or SEP chain is rewritten.
    await step("no changes")
    assert nat_total() == total

    # Force a partial resync error: a rule jumping from svc3's chain to svc4's endpoint makes
    # deleting svc4 in a partial restore fail (svc3's chain is not rewritten) ...
    assert not backend.need_full_sync
    assert ipt.chain_exists_sync("nat", "KUBE-SEP-AYCN5HPXMIRJNJXU")
    ipt.ensure_rule_sync(APPEND, "nat", "KUBE-SVC-X27LE4BHSL4DOUIK", "-j", "KUBE-SEP-AYCN5HPXMIRJNJXU")
    c.delete_service("ns4", "svc4")
    c.set_endpoints(spn("ns4", "svc4"))
    with pytest.raises(SyncFailed):
        await backend.run_sync(c.request())
    assert ipt.chain_exists_sync("nat", "KUBE-SEP-AYCN5HPXMIRJNJXU"), "deleted despite dangling references"
    assert backend.need_full_sync
    assert gauge(metrics, "sync_proxy_rules_iptables_partial_restore_failures_total", ip_family="IPv4") == 1
    assert gauge(metrics, "sync_proxy_rules_iptables_restore_failures_total", ip_family="IPv4") == 1

    # ... and the retry is a full resync, which succeeds (and deletes svc4).
    result = await step("full resync after failure")
    assert result.full
    total -= 5
    assert nat_total() == total
    assert not ipt.chain_exists_sync("nat", "KUBE-SEP-AYCN5HPXMIRJNJXU")


# ---- TestMasqueradeRule, TestDropInvalidRule --------------------------------------------------

@pytest.mark.parametrize("random_fully", [False, True], ids=["randomFully false", "randomFully true"])
async def test_masquerade_rule(random_fully):
    backend, _ = fake_backend(features=Features(random_fully=random_fully))
    await backend.run_sync(Cluster().request())
    expected = expected_text(f"""
        -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
        -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
        -A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE{" --random-fully" if random_fully else ""}
        """)
    assert chain_rules(backend.mode.ipt.restores[-1], "nat", "KUBE-POSTROUTING") == expected


FORWARD_RULES = """
    -A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
    -A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
"""


@pytest.mark.parametrize("liberal,nfacct,drop_rule", [
    (False, False, "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP\n"),
    (False, True, "-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP\n"),
    (True, False, ""),
], ids=["tcpLiberal false, nfacct false", "tcpLiberal false, nfacct true", "tcpLiberal true"])
async def test_drop_invalid_rule(liberal, nfacct, drop_rule):
    backend, _ = fake_backend(features=Features(random_fully=False, conntrack_tcp_be_liberal=liberal, nfacct_ct_state_invalid=nfacct))
    await backend.run_sync(Cluster().request())
    assert chain_rules(backend.mode.ipt.restores[-1], "filter", "KUBE-FORWARD") == drop_rule + expected_text(FORWARD_RULES)


# ---- TestNodePorts -----------------------------------------------------------------------------

NODEPORT_CASES = [
    # name, family, localhost nodeports, nodeport_ips (None = --nodeport-addresses unset),
    # allowAltNodeIP, expectFirewall. nodeport_ips are the fake node's addresses inside upstream's
    # nodePortAddresses CIDRs (lo 127.0.0.1/::1; eth0 192.168.0.2, 192.168.1.2, 192.168.99.11,
    # 2001:db8::1, 2001:db8:1::2).
    ("ipv4, localhost-nodeports enabled", IPV4, True, None, True, True),
    ("ipv4, localhost-nodeports disabled", IPV4, False, None, True, False),
    ("ipv4, localhost-nodeports disabled, localhost in nodeport-addresses", IPV4, False, ("192.168.0.2", "127.0.0.1"), False, False),
    ("ipv4, localhost-nodeports enabled, multiple nodeport-addresses", IPV4, False, ("192.168.0.2", "192.168.1.2"), True, False),
    ("ipv6, localhost-nodeports enabled", IPV6, True, None, True, False),
    ("ipv6, localhost-nodeports disabled", IPV6, False, None, True, False),
    ("ipv6, localhost-nodeports disabled, multiple nodeport-addresses", IPV6, False, ("2001:db8::1",), False, False),
]


@pytest.mark.parametrize("name,family,localhost,nodeport_ips,allow_alt,expect_firewall", NODEPORT_CASES, ids=[c[0] for c in NODEPORT_CASES])
async def test_node_ports(name, family, localhost, nodeport_ips, allow_alt, expect_firewall):
    backend, ipt = fake_backend(family, localhost_nodeports=localhost)
    if family == IPV4:
        svc_ip, ep1, ep2 = "172.30.0.41", "10.180.0.1", "10.180.2.1"
        pod, external, node, alt, localhost_ip = "10.0.0.2", TEST_EXTERNAL_CLIENT, TEST_NODE_IP, TEST_NODE_IP_ALT, "127.0.0.1"
        output = f"{ep1}:80, {ep2}:80"
    else:
        svc_ip, ep1, ep2 = "fd00:172:30::41", "fd00:10:180::1", "fd00:10:180::2:1"
        pod, external, node, alt, localhost_ip = "fd00:10::2", "2600:5200::1", TEST_NODE_IPV6, TEST_NODE_IPV6_ALT, "::1"
        output = f"[{ep1}]:80, [{ep2}]:80"
    c = Cluster(node_ip=TEST_NODE_IP if family == IPV4 else TEST_NODE_IPV6, nodeport_ips=nodeport_ips)
    c.add(port("ns1", "svc1", cluster_ip=svc_ip, node_port=3001))
    c.set_endpoints(spn("ns1", "svc1"), ep(ep1), ep(ep2, node="test-node"))
    await backend.run_sync(c.request())

    flows = [
        Flow("pod to cluster IP", pod, svc_ip, 80, output, masq=False),
        Flow("external to nodePort", external, node, 3001, output, masq=True),
        Flow("node to nodePort", node, node, 3001, output, masq=True),
    ]
    if family == IPV4 and localhost:
        flows.append(Flow("localhost to nodePort gets masqueraded", localhost_ip, localhost_ip, 3001, output, masq=True))
    else:
        flows.append(Flow("localhost to nodePort is ignored", localhost_ip, localhost_ip, 3001, ""))
    if allow_alt:
        flows.append(Flow("external to nodePort on secondary IP", external, alt, 3001, output, masq=True))
    else:
        flows.append(Flow("secondary nodeIP ignores NodePorts", external, alt, 3001, ""))
    check_flows(ipt, flows)

    expected = ('-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 '
                "-m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP\n") if expect_firewall else ""
    assert chain_rules(backend.mode.ipt.restores[-1], "filter", "KUBE-FIREWALL") == expected


# ---- TestSyncProxyRulesLargeClusterMode ----------------------------------------------------------

def count_endpoints_and_comments(data: str, match: str) -> tuple[str, int, int]:
    matched, endpoints, comments = "", 0, 0
    for line in data.split("\n"):
        if line.startswith("-A KUBE-SEP-") and "-j DNAT" in line:
            endpoints += 1
            if "--comment" in line:
                comments += 1
            if match in line:
                matched = line
    return matched, endpoints, comments


async def test_sync_proxy_rules_large_cluster_mode():
    now = [1000.0]
    backend, ipt = fake_backend(masquerade_all=True)
    backend.mode.sync_period = 30.0
    backend.mode.clock = lambda: now[0]
    c = Cluster()
    c.add(port("ns1", "svc1", cluster_ip="172.30.0.41"),
          port("ns2", "svc2", "p8080", 8080, cluster_ip="172.30.0.42"),
          port("ns3", "svc3", "p8081", 8081, cluster_ip="172.30.0.43"))
    half = LARGE_CLUSTER_ENDPOINTS_THRESHOLD // 2 - 1
    c.set_endpoints(spn("ns1", "svc1"), *(ep(f"10.0.{i % 256}.{i // 256}") for i in range(half)))
    c.set_endpoints(spn("ns2", "svc2", "p8080"), *(ep(f"10.1.{i % 256}.{i // 256}", 8080) for i in range(half)))
    await backend.run_sync(c.request())
    expected_endpoints = 2 * half

    first, endpoints, comments = count_endpoints_and_comments(backend.mode.ipt.restores[-1], "10.0.0.0")
    assert first == "-A KUBE-SEP-DKGQUZGBKLTPAR56 -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.0.0:80"
    assert endpoints == expected_endpoints
    assert comments == endpoints

    c.set_endpoints(spn("ns3", "svc3", "p8081"), ep("203.0.113.4", 8081), ep("203.0.113.8", 8081), ep("203.0.113.12", 8081))
    await backend.run_sync(c.request())
    first, endpoints, comments = count_endpoints_and_comments(backend.mode.ipt.restores[-1], "203.0.113.4")
    assert first == "-A KUBE-SEP-RUVVH7YV3PHQBDOS -m tcp -p tcp -j DNAT --to-destination 203.0.113.4:8081"
    # only svc3 was written: a partial sync does not become full on crossing the threshold
    assert (endpoints, comments) == (3, 0)

    # a full resync rewrites the older services without comments too
    await backend.run_sync(c.request(full=True))
    expected_endpoints += 3
    first, endpoints, comments = count_endpoints_and_comments(backend.mode.ipt.restores[-1], "10.0.0.0")
    assert first == "-A KUBE-SEP-DKGQUZGBKLTPAR56 -m tcp -p tcp -j DNAT --to-destination 10.0.0.0:80"
    assert (endpoints, comments) == (expected_endpoints, 0)

    # service deletion: add another one first (deleting an old one would leave large-cluster mode)
    c.add(port("ns4", "svc4", "p8082", 8082, cluster_ip="172.30.0.44"))
    c.set_endpoints(spn("ns4", "svc4", "p8082"), ep("10.4.0.1", 8082))
    await backend.run_sync(c.request())
    svc4, endpoints, _ = count_endpoints_and_comments(backend.mode.ipt.restores[-1], "10.4.0.1")
    assert svc4 == "-A KUBE-SEP-SU5STNODRYEWJAUF -m tcp -p tcp -j DNAT --to-destination 10.4.0.1:8082"
    assert endpoints == 1

    # in large-cluster mode a deleted service's chains are not deleted at once ...
    backend.state = dataclasses.replace(backend.state, last_stale_cleanup=now[0])
    c.delete_service("ns4", "svc4")
    c.set_endpoints(spn("ns4", "svc4", "p8082"))
    await backend.run_sync(c.request())
    svc4, endpoints, _ = count_endpoints_and_comments(backend.mode.ipt.restores[-1], "10.4.0.1")
    assert (svc4, endpoints) == ("", 0)
    assert "-X " not in backend.mode.ipt.restores[-1]

    # ... but once a sync period has passed
    backend.state = dataclasses.replace(backend.state, last_stale_cleanup=now[0] - backend.mode.sync_period - 0.001)
    await backend.run_sync(c.request())
    svc4, endpoints, _ = count_endpoints_and_comments(backend.mode.ipt.restores[-1], "10.4.0.1")
    assert (svc4, endpoints) == ("", 0)
    assert "-X KUBE-SVC-EBDQOQU5SJFXRIL3" in backend.mode.ipt.restores[-1]
    assert "-X KUBE-SEP-SU5STNODRYEWJAUF" in backend.mode.ipt.restores[-1]

    await backend.run_sync(c.request(full=True))
    _, endpoints, _ = count_endpoints_and_comments(backend.mode.ipt.restores[-1], "10.0.0.0")
    assert endpoints == expected_endpoints


# ---- the test helpers themselves (upstream TestSortIPTablesRules, TestTracePacket) --------------

def test_sort_matches_service_name_in_any_comment_style():
    data = textwrap.dedent("""
        *filter
        COMMIT
        *nat
        :KUBE-SERVICES - [0:0]
        -A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 cluster IP" svc2 line 1
        -A KUBE-SERVICES -m comment --comment ns2/svc2 svc2 line 2
        -A KUBE-SERVICES -m comment --comment "ns2/svc2 blah" svc2 line 3
        -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" svc1 line 1
        -A KUBE-SERVICES -m comment --comment ns1/svc1 svc1 line 2
        -A KUBE-SERVICES -m comment --comment "ns1/svc1 blah" svc1 line 3
        -A KUBE-SERVICES -m comment --comment ns4/svc4 svc4 line 1
        -A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 cluster IP" svc4 line 2
        -A KUBE-SERVICES -m comment --comment "ns4/svc4 blah" svc4 line 3
        -A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" svc3 line 1
        -A KUBE-SERVICES -m comment --comment "ns3/svc3 blah" svc3 line 2
        -A KUBE-SERVICES -m comment --comment ns3/svc3 svc3 line 3
        COMMIT
        """)
    assert sort_iptables_rules(data) == textwrap.dedent("""\
        *filter
        COMMIT
        *nat
        :KUBE-SERVICES - [0:0]
        -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" svc1 line 1
        -A KUBE-SERVICES -m comment --comment ns1/svc1 svc1 line 2
        -A KUBE-SERVICES -m comment --comment "ns1/svc1 blah" svc1 line 3
        -A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 cluster IP" svc2 line 1
        -A KUBE-SERVICES -m comment --comment ns2/svc2 svc2 line 2
        -A KUBE-SERVICES -m comment --comment "ns2/svc2 blah" svc2 line 3
        -A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" svc3 line 1
        -A KUBE-SERVICES -m comment --comment "ns3/svc3 blah" svc3 line 2
        -A KUBE-SERVICES -m comment --comment ns3/svc3 svc3 line 3
        -A KUBE-SERVICES -m comment --comment ns4/svc4 svc4 line 1
        -A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 cluster IP" svc4 line 2
        -A KUBE-SERVICES -m comment --comment "ns4/svc4 blah" svc4 line 3
        COMMIT
        """)


def test_sort_preserves_unexpected_lines():
    data = textwrap.dedent("""
        *filter
        COMMIT
        *nat
        :KUBE-SERVICES - [0:0]
        :KUBE-SEP-RS4RBKLTHTF2IUXJ - [0:0]
        :KUBE-AAAAA - [0:0]
        :KUBE-ZZZZZ - [0:0]
        :WHY-IS-THIS-CHAIN-HERE - [0:0]
        -A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 cluster IP" svc2 line 1
        -A KUBE-SEP-RS4RBKLTHTF2IUXJ -m comment --comment ns2/svc2:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.2:80
        -A KUBE-ZZZZZ -m comment --comment "mystery chain number 1"
        -A KUBE-SERVICES -m comment --comment ns2/svc2 svc2 line 2
        -A WHY-IS-THIS-CHAIN-HERE -j ACCEPT
        -A KUBE-SERVICES -m comment --comment "ns2/svc2 blah" svc2 line 3
        -A KUBE-AAAAA -m comment --comment "mystery chain number 2"
        COMMIT
        """)
    assert sort_iptables_rules(data) == textwrap.dedent("""\
        *filter
        COMMIT
        *nat
        :KUBE-SERVICES - [0:0]
        :KUBE-AAAAA - [0:0]
        :KUBE-SEP-RS4RBKLTHTF2IUXJ - [0:0]
        :KUBE-ZZZZZ - [0:0]
        :WHY-IS-THIS-CHAIN-HERE - [0:0]
        -A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 cluster IP" svc2 line 1
        -A KUBE-SERVICES -m comment --comment ns2/svc2 svc2 line 2
        -A KUBE-SERVICES -m comment --comment "ns2/svc2 blah" svc2 line 3
        -A KUBE-AAAAA -m comment --comment "mystery chain number 2"
        -A KUBE-SEP-RS4RBKLTHTF2IUXJ -m comment --comment ns2/svc2:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.2:80
        -A KUBE-ZZZZZ -m comment --comment "mystery chain number 1"
        -A WHY-IS-THIS-CHAIN-HERE -j ACCEPT
        COMMIT
        """)


@pytest.mark.parametrize("data,error", [
    ("*filter\nCOMMIT\n*nat\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]\n"
     "-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000\n"
     '-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 10.20.30.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O\n'
     '-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 10.20.30.41 --dport 80 ! -s 10.0.0.0/24 -j KUBE-MARK-MASQ\n'
     "COMMIT\n", None),
    ("*filter\nCOMMIT\n*nat\n:KUBE-SERVICES - [0:0]\n"
     '-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O\n'
     "COMMIT\n", "used but were not created"),
    ("*filter\nCOMMIT\n*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]\n"
     '-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O\n'
     "COMMIT\n", "jumped to but have no rules"),
    ("*filter\nCOMMIT\n*nat\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]\n"
     '-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" ...\nCOMMIT\n', "created but not used"),
], ids=["valid", "jump to chain not created", "jump to chain with no rules", "chain created but not used"])
def test_check_rule_jumps(data, error):
    if error is None:
        check_rule_jumps(data)
    else:
        with pytest.raises(AssertionError, match=error):
            check_rule_jumps(data)


TRACE_RULES = """
    *filter
    :INPUT - [0:0]
    :FORWARD - [0:0]
    :OUTPUT - [0:0]
    :KUBE-EXTERNAL-SERVICES - [0:0]
    :KUBE-FIREWALL - [0:0]
    :KUBE-FORWARD - [0:0]
    :KUBE-NODEPORTS - [0:0]
    :KUBE-SERVICES - [0:0]
    :KUBE-PROXY-FIREWALL - [0:0]
    -A INPUT -m comment --comment kubernetes health check service ports -j KUBE-NODEPORTS
    -A INPUT -m conntrack --ctstate NEW -m comment --comment kubernetes externally-visible service portals -j KUBE-EXTERNAL-SERVICES
    -A FORWARD -m comment --comment kubernetes forwarding rules -j KUBE-FORWARD
    -A FORWARD -m conntrack --ctstate NEW -m comment --comment kubernetes service portals -j KUBE-SERVICES
    -A FORWARD -m conntrack --ctstate NEW -m comment --comment kubernetes externally-visible service portals -j KUBE-EXTERNAL-SERVICES
    -A OUTPUT -m conntrack --ctstate NEW -m comment --comment kubernetes service portals -j KUBE-SERVICES
    -A KUBE-NODEPORTS -m comment --comment "ns2/svc2:p80 health check node port" -m tcp -p tcp --dport 30000 -j ACCEPT
    -A KUBE-SERVICES -m comment --comment "ns6/svc6:p80 has no endpoints" -m tcp -p tcp -d 172.30.0.46 --dport 80 -j REJECT
    -A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m tcp -p tcp -d 192.168.99.22 --dport 80 -j DROP
    -A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j DROP
    -A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 3001 -j DROP
    -A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
    -A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
    -A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
    -A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
    -A KUBE-PROXY-FIREWALL -m comment --comment "ns5/svc5:p80 traffic not accepted by KUBE-FW-NUKIZ6OKUXPJNT4C" -m tcp -p tcp -d 5.6.7.8 --dport 80 -j DROP
    COMMIT
    *nat
    :PREROUTING - [0:0]
    :INPUT - [0:0]
    :OUTPUT - [0:0]
    :POSTROUTING - [0:0]
    :KUBE-EXT-4SW47YFZTEDKD3PK - [0:0]
    :KUBE-EXT-GNZBNJ2PO5MGZ6GT - [0:0]
    :KUBE-EXT-NUKIZ6OKUXPJNT4C - [0:0]
    :KUBE-EXT-X27LE4BHSL4DOUIK - [0:0]
    :KUBE-FW-NUKIZ6OKUXPJNT4C - [0:0]
    :KUBE-MARK-MASQ - [0:0]
    :KUBE-NODEPORTS - [0:0]
    :KUBE-POSTROUTING - [0:0]
    :KUBE-SEP-C6EBXVWJJZMIWKLZ - [0:0]
    :KUBE-SEP-I77PXRDZVX7PMWMN - [0:0]
    :KUBE-SEP-OYPFS5VJICHGATKP - [0:0]
    :KUBE-SEP-RS4RBKLTHTF2IUXJ - [0:0]
    :KUBE-SEP-SXIVWICOYRO3J4NJ - [0:0]
    :KUBE-SEP-UKSFD7AGPMPPLUHC - [0:0]
    :KUBE-SERVICES - [0:0]
    :KUBE-SVC-4SW47YFZTEDKD3PK - [0:0]
    :KUBE-SVC-GNZBNJ2PO5MGZ6GT - [0:0]
    :KUBE-SVC-NUKIZ6OKUXPJNT4C - [0:0]
    :KUBE-SVC-X27LE4BHSL4DOUIK - [0:0]
    :KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]
    -A PREROUTING -m comment --comment kubernetes service portals -j KUBE-SERVICES
    -A OUTPUT -m comment --comment kubernetes service portals -j KUBE-SERVICES
    -A POSTROUTING -m comment --comment kubernetes postrouting rules -j KUBE-POSTROUTING
    -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
    -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
    -A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
    -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
    -A KUBE-NODEPORTS -m comment --comment ns2/svc2:p80 -m tcp -p tcp --dport 3001 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
    -A KUBE-NODEPORTS -m comment --comment ns3/svc3:p80 -m tcp -p tcp --dport 3003 -j KUBE-EXT-X27LE4BHSL4DOUIK
    -A KUBE-NODEPORTS -m comment --comment ns5/svc5:p80 -m tcp -p tcp --dport 3002 -j KUBE-EXT-NUKIZ6OKUXPJNT4C
    -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
    -A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 80 -j KUBE-SVC-GNZBNJ2PO5MGZ6GT
    -A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 external IP" -m tcp -p tcp -d 192.168.99.22 --dport 80 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
    -A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 loadbalancer IP" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
    -A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
    -A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 -j KUBE-SVC-4SW47YFZTEDKD3PK
    -A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 external IP" -m tcp -p tcp -d 192.168.99.33 --dport 80 -j KUBE-EXT-4SW47YFZTEDKD3PK
    -A KUBE-SERVICES -m comment --comment "ns5/svc5:p80 cluster IP" -m tcp -p tcp -d 172.30.0.45 --dport 80 -j KUBE-SVC-NUKIZ6OKUXPJNT4C
    -A KUBE-SERVICES -m comment --comment "ns5/svc5:p80 loadbalancer IP" -m tcp -p tcp -d 5.6.7.8 --dport 80 -j KUBE-FW-NUKIZ6OKUXPJNT4C
    -A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
    -A KUBE-EXT-4SW47YFZTEDKD3PK -m comment --comment "masquerade traffic for ns4/svc4:p80 external destinations" -j KUBE-MARK-MASQ
    -A KUBE-EXT-4SW47YFZTEDKD3PK -j KUBE-SVC-4SW47YFZTEDKD3PK
    -A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment "pod traffic for ns2/svc2:p80 external destinations" -s 10.0.0.0/8 -j KUBE-SVC-GNZBNJ2PO5MGZ6GT
    -A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment "masquerade LOCAL traffic for ns2/svc2:p80 external destinations" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ
    -A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment "route LOCAL traffic for ns2/svc2:p80 external destinations" -m addrtype --src-type LOCAL -j KUBE-SVC-GNZBNJ2PO5MGZ6GT
    -A KUBE-EXT-NUKIZ6OKUXPJNT4C -m comment --comment "masquerade traffic for ns5/svc5:p80 external destinations" -j KUBE-MARK-MASQ
    -A KUBE-EXT-NUKIZ6OKUXPJNT4C -j KUBE-SVC-NUKIZ6OKUXPJNT4C
    -A KUBE-EXT-X27LE4BHSL4DOUIK -m comment --comment "masquerade traffic for ns3/svc3:p80 external destinations" -j KUBE-MARK-MASQ
    -A KUBE-EXT-X27LE4BHSL4DOUIK -j KUBE-SVC-X27LE4BHSL4DOUIK
    -A KUBE-FW-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 loadbalancer IP" -s 203.0.113.0/25 -j KUBE-EXT-NUKIZ6OKUXPJNT4C
    -A KUBE-FW-NUKIZ6OKUXPJNT4C -m comment --comment "other traffic to ns5/svc5:p80 will be dropped by KUBE-PROXY-FIREWALL"
    -A KUBE-SEP-C6EBXVWJJZMIWKLZ -m comment --comment ns4/svc4:p80 -s 10.180.0.5 -j KUBE-MARK-MASQ
    -A KUBE-SEP-C6EBXVWJJZMIWKLZ -m comment --comment ns4/svc4:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.5:80
    -A KUBE-SEP-I77PXRDZVX7PMWMN -m comment --comment ns5/svc5:p80 -s 10.180.0.3 -j KUBE-MARK-MASQ
    -A KUBE-SEP-I77PXRDZVX7PMWMN -m comment --comment ns5/svc5:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.3:80
    -A KUBE-SEP-OYPFS5VJICHGATKP -m comment --comment ns3/svc3:p80 -s 10.180.0.3 -j KUBE-MARK-MASQ
    -A KUBE-SEP-OYPFS5VJICHGATKP -m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.3:80
    -A KUBE-SEP-RS4RBKLTHTF2IUXJ -m comment --comment ns2/svc2:p80 -s 10.180.0.2 -j KUBE-MARK-MASQ
    -A KUBE-SEP-RS4RBKLTHTF2IUXJ -m comment --comment ns2/svc2:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.2:80
    -A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -s 10.180.0.1 -j KUBE-MARK-MASQ
    -A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80
    -A KUBE-SEP-UKSFD7AGPMPPLUHC -m comment --comment ns4/svc4:p80 -s 10.180.0.4 -j KUBE-MARK-MASQ
    -A KUBE-SEP-UKSFD7AGPMPPLUHC -m comment --comment ns4/svc4:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.4:80
    -A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
    -A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 -> 10.180.0.4:80" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-UKSFD7AGPMPPLUHC
    -A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 -> 10.180.0.5:80" -j KUBE-SEP-C6EBXVWJJZMIWKLZ
    -A KUBE-SVC-GNZBNJ2PO5MGZ6GT -m comment --comment "ns2/svc2:p80 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
    -A KUBE-SVC-GNZBNJ2PO5MGZ6GT -m comment --comment "ns2/svc2:p80 -> 10.180.0.2:80" -j KUBE-SEP-RS4RBKLTHTF2IUXJ
    -A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 cluster IP" -m tcp -p tcp -d 172.30.0.45 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
    -A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 -> 10.180.0.3:80" -j KUBE-SEP-I77PXRDZVX7PMWMN
    -A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
    -A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 -> 10.180.0.3:80" -j KUBE-SEP-OYPFS5VJICHGATKP
    -A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
    -A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 -> 10.180.0.1:80" -j KUBE-SEP-SXIVWICOYRO3J4NJ
    COMMIT
"""


def test_trace_packet_on_static_rules():
    ipt = FakeIptables()
    ipt.restore_sync(textwrap.dedent(TRACE_RULES))
    check_flows(ipt, [
        Flow("no match", "10.0.0.2", "10.0.0.3", 80, ""),
        Flow("single endpoint", "10.0.0.2", "172.30.0.41", 80, "10.180.0.1:80"),
        Flow("multiple endpoints", "10.0.0.2", "172.30.0.44", 80, "10.180.0.4:80, 10.180.0.5:80"),
        Flow("LOCAL, KUBE-MARK-MASQ", TEST_NODE_IP, "192.168.99.22", 80, "10.180.0.2:80", masq=True),
        Flow("DROP", TEST_EXTERNAL_CLIENT, "192.168.99.22", 80, "DROP"),
        Flow("ACCEPT (NodePortHealthCheck)", TEST_NODE_IP, TEST_NODE_IP, 30000, "ACCEPT"),
        Flow("REJECT", "10.0.0.2", "172.30.0.46", 80, "REJECT"),
    ])
    assert parse_dump(textwrap.dedent(TRACE_RULES)).chain("nat", "KUBE-SERVICES") is not None
    assert trace_packet(ipt, "10.0.0.2", "udp", "172.30.0.41", 80)[1] == ""
