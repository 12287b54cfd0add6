"""``xtables-monitor --trace`` (iptables-nft 1.8.9) as ``kernel/xtrace.py`` reads it: the first
packet's rules outside ``raw`` (its IP ID: the SYN, not the ACKs after it), and the comparison
with the walk (``live.compare_probe_iptables``): the kernel's rules a subsequence of the walk's,
its outcome the walk's."""

from __future__ import annotations

from kubesvc.kernel.xtrace import parse_monitor
from kubesvc.proxy.trace.live import compare_probe_iptables

# as printed in the side-by-side test's node namespace (a client to a ClusterIP with two endpoints)
MONITOR = """PACKET: 2 539fad8d IN=vcli MACPROTO=0800 SRC=192.168.50.2 DST=172.30.0.10 LEN=60 TOS=0x0 TTL=64 ID=4582 DF SPORT=54152 DPORT=80 SYN
 TRACE: 2 539fad8d raw:PREROUTING:rule:0x2:CONTINUE  -4 -t raw -A PREROUTING -s 192.168.50.2/32 -d 172.30.0.10/32 -p tcp -m tcp --dport 80 -j TRACE
 TRACE: 2 539fad8d raw:PREROUTING:policy:ACCEPT
PACKET: 2 539fad8d IN=vcli MACPROTO=0800 SRC=192.168.50.2 DST=172.30.0.10 LEN=60 TOS=0x0 TTL=64 ID=4582 DF SPORT=54152 DPORT=80 SYN
 TRACE: 2 539fad8d nat:PREROUTING:rule:0x5:JUMP:KUBE-SERVICES  -4 -t nat -A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
 TRACE: 2 539fad8d nat:KUBE-SERVICES:rule:0x57:JUMP:KUBE-SVC-7VQ47DIBKGOC5FEW  -4 -t nat -A KUBE-SERVICES -d 172.30.0.10/32 -p tcp -m comment --comment "ns/web:p80 cluster IP" -m tcp --dport 80 -j KUBE-SVC-7VQ47DIBKGOC5FEW
 TRACE: 2 539fad8d nat:KUBE-SVC-7VQ47DIBKGOC5FEW:rule:0x60:JUMP:KUBE-SEP-Q3O3GGL7P676QZRB  -4 -t nat -A KUBE-SVC-7VQ47DIBKGOC5FEW -m comment --comment "ns/web:p80 -> 10.1.2.2:8080" -j KUBE-SEP-Q3O3GGL7P676QZRB
 TRACE: 2 539fad8d nat:KUBE-SEP-Q3O3GGL7P676QZRB:rule:0x64:ACCEPT  -4 -t nat -A KUBE-SEP-Q3O3GGL7P676QZRB -p tcp -m comment --comment "ns/web:p80" -m tcp -j DNAT --to-destination 10.1.2.2:8080
PACKET: 2 539fad8d IN=vcli OUT=vp2 MACPROTO=0800 SRC=192.168.50.2 DST=10.1.2.2 LEN=60 TOS=0x0 TTL=63 ID=4582 DF SPORT=54152 DPORT=8080 SYN MARK=0x4000
 TRACE: 2 539fad8d filter:FORWARD:rule:0xd:JUMP:KUBE-FORWARD  -4 -t filter -A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
PACKET: 2 bd705337 IN=vcli MACPROTO=0800 SRC=192.168.50.2 DST=172.30.0.10 LEN=52 TOS=0x0 TTL=64 ID=4583 DF SPORT=54152 DPORT=80 ACK
 TRACE: 2 bd705337 filter:FORWARD:rule:0xd:JUMP:KUBE-FORWARD  -4 -t filter -A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
"""

FIRST = '-A KUBE-SVC-7VQ47DIBKGOC5FEW -m comment --comment "ns/web:p80 -> 10.1.1.2:8080" -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-AAAA'


def test_the_first_packets_rules_outside_raw():
    steps = parse_monitor(MONITOR)
    assert [(s["table"], s["chain"], s["verdict"]) for s in steps] == [
        ("nat", "PREROUTING", "JUMP:KUBE-SERVICES"), ("nat", "KUBE-SERVICES", "JUMP:KUBE-SVC-7VQ47DIBKGOC5FEW"),
        ("nat", "KUBE-SVC-7VQ47DIBKGOC5FEW", "JUMP:KUBE-SEP-Q3O3GGL7P676QZRB"), ("nat", "KUBE-SEP-Q3O3GGL7P676QZRB", "ACCEPT"),
        ("filter", "FORWARD", "JUMP:KUBE-FORWARD")]  # not the ACK's (ID 4583)
    assert steps[3]["rule"] == '-A KUBE-SEP-Q3O3GGL7P676QZRB -p tcp -m comment --comment "ns/web:p80" -m tcp -j DNAT --to-destination 10.1.2.2:8080'


def walk_report(*rules, verdict="DNAT", candidates=("10.1.1.2:8080", "10.1.2.2:8080")) -> dict:
    return {"steps": [{"chain": r.split()[1], "rule": r} for r in rules], "verdict": verdict,
            "candidates": [{"endpoint": c} for c in candidates]}


def test_the_kernels_branch_is_one_of_the_walks():
    kernel = parse_monitor(MONITOR)
    rules = [s["rule"] for s in kernel]
    # the walk follows both branches: the first endpoint's, then the kernel's (the second)
    rep = walk_report(rules[0], rules[1], FIRST, "-A KUBE-SEP-AAAA -j DNAT --to-destination 10.1.1.2:8080", *rules[2:])
    got = compare_probe_iptables(rep, kernel)
    assert got["agrees"] and (got["verdict"], got["endpoint"]) == ("DNAT", "10.1.2.2:8080")
    assert not compare_probe_iptables(walk_report(*rules[:2], *rules[3:]), kernel)["agrees"]  # a rule the walk missed
    assert not compare_probe_iptables(walk_report(*rules, candidates=("10.1.1.2:8080",)), kernel)["agrees"]  # not a candidate
    assert not compare_probe_iptables(walk_report(*rules, verdict="DROP"), kernel)["agrees"]


def test_userspace_the_kernel_redirects_to_the_walks_listener():
    redirect = ('-A KUBE-PORTALS-CONTAINER -d 172.30.0.10/32 -p tcp -m comment --comment "ns/web:p80" -m tcp --dport 80 '
                "-j REDIRECT --to-ports 43911")
    host = ('-A KUBE-PORTALS-HOST -d 172.30.0.10/32 -p tcp -m comment --comment "ns/web:p80" -m tcp --dport 80 '
            "-j DNAT --to-destination 192.168.50.1:43911")
    for rule in (redirect, host):
        kernel = [{"table": "nat", "chain": rule.split()[1], "rule": rule, "verdict": "ACCEPT"}]
        rep = {**walk_report(rule, verdict="REDIRECT"), "listener": {"proxyPort": 43911}}
        got = compare_probe_iptables(rep, kernel)
        assert got["agrees"] and (got["verdict"], got["endpoint"]) == ("REDIRECT", "43911"), got
        assert not compare_probe_iptables({**rep, "listener": {"proxyPort": 40000}}, kernel)["agrees"]


def test_the_raw_table_iptables_nft_made_for_the_probe_is_removed_and_nothing_else():
    """iptables-nft creates nftables' ``raw`` table and the built-in chain on the first rule
    inserted there; deleting the rule leaves both. The probe removes what it made and only that."""
    from kubesvc.kernel.xtrace import raw_leftovers

    assert raw_leftovers(None, {"PREROUTING": 0, "OUTPUT": 0}) == ([], True)  # no raw table before: delete it
    assert raw_leftovers(None, None) == ([], False)
    assert raw_leftovers(None, {"PREROUTING": 0, "OUTPUT": 1}) == ([], False)  # someone's rule arrived meanwhile: theirs
    assert raw_leftovers({"PREROUTING": 2}, {"PREROUTING": 2, "OUTPUT": 0}) == (["OUTPUT"], False)  # only the chain it made
    assert raw_leftovers({"PREROUTING": 0, "OUTPUT": 0}, {"PREROUTING": 0, "OUTPUT": 0}) == ([], False)  # all there before: kept
