"""IPVS mode's walk (``proxy/trace/ipvs.py``) over the state the real ``IpvsBackend`` leaves in
the stateful fakes (``FakeIpvs``, ``FakeIpset``, ``FakeIptablesAsync``, ``FakeLinks``): the
Services of ``tests/kernel/test_trace_side_by_side.py``, each scenario's verdict, candidates and
masquerade as upstream's IPVS proxier behaves (this kernel has no IPVS: the same walk runs
against real connections in the VM, ``tests/kernel/vm/test_trace_ipvs.py``).

Where IPVS mode differs from the iptables/nftables table (upstream's too): a Service with no
endpoints, or whose ``Local`` policy leaves none on this node, is a virtual server without real
servers (ICMP port unreachable: ``REJECT``, where the others ``DROP`` the latter); an
unallocated ClusterIP is not bound and is routed (``NONE``); a Pod's connection to an externalIP
under ``externalTrafficPolicy: Local`` gets the local endpoint only; another port of a Service
address is refused by ``KUBE-IPVS-FILTER``."""

from __future__ import annotations

import asyncio

import pytest

from kubesvc.kernel.fake.ipset import FakeIpset
from kubesvc.kernel.fake.iptables import TEST_NODE_NAME, FakeIptablesAsync
from kubesvc.kernel.fake.ipvs import FakeIpvs
from kubesvc.kernel.fake.netlink import FakeLinks
from kubesvc.kernel.fake.sysctl import FakeSysctl
from kubesvc.kernel.ipvs import ServiceKey
from kubesvc.kernel.iptables_save import parse_dump
from kubesvc.proxy.ipvs.proxier import IpvsBackend
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.proxier import Proxier
from kubesvc.proxy.trace import ipvs, live
from tests.kernel.test_trace_side_by_side import CIDRS, P, services
from tests.support.builders import options
from tests.support.builders import request as sync_request

NODE_IP, CLIENT_IP, POD_CIDR = "192.168.50.1", "192.168.50.2", "10.1.0.0/16"
GATEWAYS = ("10.1.1.1", "10.1.2.1", "10.1.3.1")

# (case, source, destination, port, verdict, Pods (by number), masqueraded)
CASES = [
    ("ClusterIP from outside", CLIENT_IP, "172.30.0.10", 80, "DNAT", {1, 2}, True),
    ("ClusterIP from a Pod", P[3], "172.30.0.10", 80, "DNAT", {1, 2}, False),
    ("NodePort", CLIENT_IP, NODE_IP, 30080, "DNAT", {1, 2}, True),
    ("LB IP its source ranges leave out", CLIENT_IP, "1.2.3.4", 80, "DROP", set(), False),
    ("LB IP its source ranges allow", CLIENT_IP, "1.2.3.5", 80, "DNAT", {2}, True),
    ("hairpin: an endpoint to its own ClusterIP", P[1], "172.30.0.12", 80, "DNAT", {1}, True),
    ("externalIP under eTP Local from outside", CLIENT_IP, "192.168.99.13", 80, "DNAT", {1}, False),
    ("externalIP under eTP Local from a Pod", P[2], "192.168.99.13", 80, "DNAT", {1}, False),
    ("ClientIP affinity", CLIENT_IP, "172.30.0.14", 80, "DNAT", {2, 3}, True),
    ("no endpoints", CLIENT_IP, "172.30.0.15", 80, "REJECT", set(), False),
    ("iTP Local from a Pod", P[2], "172.30.0.16", 80, "DNAT", {1}, False),
    ("terminating fallback", CLIENT_IP, "172.30.0.17", 80, "DNAT", {1}, True),
    ("iTP Local with no local endpoint", P[2], "172.30.0.18", 80, "REJECT", set(), False),
    ("an unallocated ClusterIP", CLIENT_IP, "172.30.0.99", 80, "NONE", set(), False),
    ("another port of a Service address", CLIENT_IP, "172.30.0.10", 81, "REJECT", set(), False),
    ("not a Service address (a Pod's own)", CLIENT_IP, P[3], 8080, "NONE", set(), False),
]
FROM_NODE = ("the node to a ClusterIP", NODE_IP, "172.30.0.10", 80, "DNAT", {1, 2}, True)


@pytest.fixture(scope="module")
def node():
    """The node's state as ``kubesvc trace`` reads it, from the fakes one real sync left."""
    links = FakeLinks({"lo": ["127.0.0.1"], "vcli": [NODE_IP], **{f"vp{k}": [gw] for k, gw in enumerate(GATEWAYS, start=1)}})
    sysctl = FakeSysctl(links=("lo", "vcli"))
    sysctl.values.update({f"net/ipv4/vs/{key}": "0" for key in ("conntrack", "expire_nodest_conn", "expire_quiescent_template")})
    fake_ipvs, ipset, ipt = FakeIpvs(), FakeIpset(), FakeIptablesAsync()
    opts = options(POD_CIDR, node_name=TEST_NODE_NAME)
    backend = IpvsBackend(opts, ipvs=fake_ipvs, ipt=ipt, ipset=ipset, sysctl=sysctl, links=links)
    asyncio.run(Proxier(backend, opts, ProxyMetrics()).run_sync(sync_request(services(), service_cidrs=CIDRS)))
    save = "".join(f"create {name} {kind} family inet\n" + "".join(f"add {name} {m}\n" for m in members)
                   for name, (kind, _, members) in ipset.state().items())
    addresses = [a.address for a in asyncio.run(links.addresses())]
    dump = parse_dump(ipt.save_sync())
    state = live.NodeState({4: None, 6: None}, addresses, {4: dump, 6: None}, ipsets=ipvs.Sets(ipvs.parse_ipset_save(save)),
                           ipvs_tables={4: fake_ipvs.dump(4), 6: None})
    return state, fake_ipvs


@pytest.mark.parametrize("case,source,dest,dport,verdict,pods,masq", [*CASES, FROM_NODE], ids=[c[0] for c in [*CASES, FROM_NODE]])
def test_the_walk_through_ipvs(node, case, source, dest, dport, verdict, pods, masq):
    state, _ = node
    rep = live.report(state, source, dest, dport, "tcp", from_node=source == NODE_IP)
    assert rep["mode"] == "ipvs"
    assert (rep["verdict"], {int(c["endpoint"].split(".")[2]) for c in rep["candidates"]}) == (verdict, pods), rep
    if pods:
        assert rep["masquerade"] == masq, rep["steps"]
        assert abs(sum(c["probability"] for c in rep["candidates"]) - 1) < 1e-6


def test_the_virtual_server_is_named_with_its_scheduler_and_persistence(node):
    state, _ = node
    rep = live.report(state, CLIENT_IP, "172.30.0.14", 80, "tcp")
    assert rep["ipvs"]["virtualServer"] == "172.30.0.14:80/TCP" and rep["ipvs"]["scheduler"] == "rr"
    assert rep["ipvs"]["persistentSeconds"] == 60 and rep["affinity"] == ["172.30.0.14:80/TCP persistent 60s"]
    steps = [(s["hook"], s["chain"], s["rule"]) for s in rep["steps"]]
    hooks = [h for h, _, r in steps if r is None]
    assert hooks.index("input") < hooks.index("postrouting")  # filter INPUT, then IPVS, then POSTROUTING
    assert ("input", "IPVS", f"TCP 172.30.0.14:80 rr persistent 60 -> {P[2]}:8080 weight 1, {P[3]}:8080 weight 1") in steps
    text = "\n".join(live.text(rep))
    assert "IPVS virtual server 172.30.0.14:80/TCP, scheduler rr, persistent 60s" in text, text


def test_weights_and_draining_real_servers(node):
    """A real server at weight 0 (graceful termination) gets no new connection; weights share."""
    state, fake = node
    key = ServiceKey("172.30.0.10", "TCP", 80)
    service, reals = fake.dump(4)[key]
    first, second = sorted(reals)
    tables = {4: {key: (service, {first: reals[first], second: type(reals[second])(second[0], second[1], 0, 2, 0)})}, 6: None}
    drained = live.NodeState(state.tables, state.addresses, state.dumps, ipsets=state.ipsets, ipvs_tables=tables)
    rep = live.report(drained, CLIENT_IP, "172.30.0.10", 80, "tcp")
    assert [(c["endpoint"], c["probability"]) for c in rep["candidates"]] == [(f"{first[0]}:8080", 1.0)]
    assert ipvs._shares("wrr", {first: reals[first], second: type(reals[second])(second[0], second[1], 3)}) == [
        (f"{first[0]}:8080", 0.25), (f"{second[0]}:8080", 0.75)]


def test_an_ipset_member_matches_as_the_kernel_matches_it():
    sets = ipvs.Sets({"KUBE-CLUSTER-IP": ("hash:ip,port", frozenset({"172.30.0.10,tcp:80"})),
                      "KUBE-LOOP-BACK": ("hash:ip,port,ip", frozenset({"10.1.1.2,tcp:8080,10.1.1.2"})),
                      "KUBE-SRC": ("hash:ip,port,net", frozenset({"1.2.3.5,tcp:80,192.168.50.0/24"})),
                      "KUBE-NODE-PORT-TCP": ("bitmap:port", frozenset({"30080"}))})

    class Packet:
        def __init__(self, source, dest, port, protocol="tcp"):
            self.source, self.dest, self.port, self.protocol = source, dest, str(port), protocol

    assert sets.matches("KUBE-CLUSTER-IP", "dst,dst", Packet("1.1.1.1", "172.30.0.10", 80))
    assert not sets.matches("KUBE-CLUSTER-IP", "dst,dst", Packet("1.1.1.1", "172.30.0.10", 81))
    assert not sets.matches("KUBE-CLUSTER-IP", "dst,dst", Packet("1.1.1.1", "172.30.0.10", 80, "udp"))
    assert sets.matches("KUBE-LOOP-BACK", "dst,dst,src", Packet("10.1.1.2", "10.1.1.2", 8080))
    assert not sets.matches("KUBE-LOOP-BACK", "dst,dst,src", Packet("10.1.1.3", "10.1.1.2", 8080))
    assert sets.matches("KUBE-SRC", "dst,dst,src", Packet("192.168.50.2", "1.2.3.5", 80))
    assert not sets.matches("KUBE-SRC", "dst,dst,src", Packet("192.168.51.2", "1.2.3.5", 80))
    assert sets.matches("KUBE-NODE-PORT-TCP", "dst", Packet("1.1.1.1", "192.168.50.1", 30080))
    assert not sets.matches("KUBE-MISSING", "dst", Packet("1.1.1.1", "192.168.50.1", 30080))
