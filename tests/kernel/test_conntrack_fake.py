"""The conntrack fake (``kernel/fake/conntrack.py``) against the kernel's table in a namespace
of the test's own: the same entries inserted into both (``conntrack -I``, with and without
``--dst-nat``), both accepting or both refusing each (a taken original or reply tuple), the
same table read back (``kernel.conntrack.flows_sync``; of the status bits only ``IPS_DST_NAT``,
the one the filters look at), then the proxier's kinds of ``FlowFilter`` deleting the same
entries from both (``kernel.conntrack.Conntrack.delete_flows_sync``), with the same counts.
"""

from __future__ import annotations

import dataclasses

import pytest

from kubesvc.kernel.conntrack import IPS_DST_NAT, Conntrack, FlowFilter
from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.fake.conntrack import FakeConntrack
from tests.support.netns import Netns

pytestmark = pytest.mark.kernel

VIP, OTHER_VIP, CLIENT = "172.30.0.10", "172.30.0.11", "192.168.50.2"


@pytest.fixture
def pair():
    ns = Netns.create("ct")
    try:
        yield ns, Conntrack(ns.name), FakeConntrack()
    finally:
        ns.close()


def insert(pair, protocol, src, dst, sport, dport, dst_nat=None) -> bool:
    ns, _, fake = pair
    argv = ["conntrack", "-I", "-p", protocol, "-s", src, "-d", dst, "--sport", str(sport), "--dport", str(dport), "--timeout", "300"]
    if protocol in ("tcp", "sctp"):  # the tool wants their state (and SCTP's verification tags)
        argv += ["--state", "ESTABLISHED"] + (["--orig-vtag", "1", "--reply-vtag", "2"] if protocol == "sctp" else [])
    real_ok = ns.run(*argv, *(["--dst-nat", dst_nat] if dst_nat else []), check=False).returncode == 0
    try:
        fake.insert(protocol, src, dst, sport, dport, dst_nat=dst_nat)
        fake_ok = True
    except CommandFailed:
        fake_ok = False
    assert fake_ok == real_ok, (protocol, src, dst, sport, dport, dst_nat)
    return real_ok


def same_tables(pair, family: int = 4) -> None:
    _, real, fake = pair

    def key(flow):
        return dataclasses.replace(flow, status=flow.status & IPS_DST_NAT)
    assert sorted(map(key, fake.flows_sync(family)), key=repr) == sorted(map(key, real.flows_sync(family)), key=repr)


def test_inserts_and_deletes_by_filter_alike(pair):
    _, real, fake = pair
    accepted = [
        insert(pair, "udp", CLIENT, VIP, 4000, 53, "10.1.1.2:5353"),
        insert(pair, "udp", CLIENT, VIP, 4001, 53, "10.1.1.3:5353"),
        insert(pair, "udp", CLIENT, VIP, 4002, 54, "10.1.1.2"),
        insert(pair, "udp", CLIENT, OTHER_VIP, 4000, 53, "10.1.2.2:5353"),
        insert(pair, "udp", CLIENT, OTHER_VIP, 4003, 53),  # not NATed
        insert(pair, "tcp", CLIENT, VIP, 4000, 80, "10.1.1.2:8080"),
        insert(pair, "sctp", CLIENT, VIP, 4000, 53, "10.1.1.2"),  # (conntrack -I maps no SCTP port)
        insert(pair, "udp", CLIENT, VIP, 4000, 53, "10.1.1.9:5353"),  # its original tuple is taken
        insert(pair, "udp", "192.168.50.9", OTHER_VIP, 4003, 53),  # another original tuple ...
        insert(pair, "udp", "10.1.1.2", CLIENT, 5353, 4000),  # ... but the first entry's reply tuple
        insert(pair, "udp", "fd00::2", "fd00:30::10", 4000, 53, "[fd00:1::2]:5353"),
    ]
    assert accepted == [True] * 7 + [False, True, False, True]
    same_tables(pair)
    same_tables(pair, 6)

    steps = [  # (filters, entries deleted)
        ([FlowFilter("udp", VIP, 53, "10.1.1.9"), FlowFilter("udp", VIP, 55), FlowFilter("tcp", "172.30.9.9")], 0),
        ([FlowFilter("udp", VIP, 53, "10.1.1.2")], 1),  # a stale endpoint: only the entry NATed to it
        ([FlowFilter("udp", OTHER_VIP, 53, "172.30.0.11")], 0),  # not NATed: --dst-nat never matches it
        ([FlowFilter("udp", VIP), FlowFilter("udp", VIP, 54)], 2),  # a deleted ClusterIP; one entry counted once
        ([FlowFilter("sctp", VIP, 53)], 1),
        ([FlowFilter("udp", OTHER_VIP, 53)], 3),
    ]
    for filters, count in steps:
        assert (fake.delete_flows_sync(filters), real.delete_flows_sync(filters)) == (count, count), filters
        same_tables(pair)
    assert [f.protocol for f in fake.flows_sync()] == [6]  # TCP is left to its own state machine
    assert (fake.delete_flows_sync([FlowFilter("udp")], 6), real.delete_flows_sync([FlowFilter("udp")], 6)) == (1, 1)
    same_tables(pair, 6)
