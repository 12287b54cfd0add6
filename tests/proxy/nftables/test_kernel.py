"""The nftables backend against the real kernel, with real connections, in throwaway network
namespaces (``tests.support.netns.NodeTopology``: a node running our table, Pods behind veths, an
outside client).

The backend runs in this process and drives ``nft`` inside the node namespace
(``NFTables(netns=...)``); every test deletes the namespaces it made, pass or fail.
"""

from __future__ import annotations

import collections

import pytest

from kubesvc.kernel.nftables import NFTables
from kubesvc.proxy.backend import SyncFailed
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.nftables.proxier import NftablesBackend, cleanup_leftovers
from kubesvc.proxy.proxier import Proxier
from kubesvc.proxy.types import IPV6
from tests.support.builders import TEST_NODE_NAME, ep, options, port, request
from tests.support.netns import CLIENT_IP, NODE_IP, POD_CIDR, Netns, NodeTopology

pytestmark = pytest.mark.kernel

CIP = "172.30.0.10"
CIDRS = ("172.30.0.0/16",)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def topo():
    t = NodeTopology(pods=3, default_via_client=True)  # a node has a default route: un-NATed packets die at the client
    try:
        yield t
    finally:
        t.close()


@pytest.fixture
def topo6():
    t = NodeTopology(pods=2, ipv6=True, default_via_client=True)
    try:
        yield t
    finally:
        t.close()


def backend_for(t: NodeTopology, family: int = 4, **kw) -> tuple[Proxier, Clock, ProxyMetrics]:
    """The nftables mode inside the shared proxier (which decides full/partial and commits the
    state); ``run_sync`` takes the requests directly."""
    clock = Clock()
    metrics = ProxyMetrics()
    opts = options(POD_CIDR if family == 4 else "fd00:1::/32", family=family, **kw)
    return Proxier(NftablesBackend(opts, nft=NFTables(family, netns=t.node.name), clock=clock), opts, metrics), clock, metrics


def connect(ns: Netns, ip: str, port: int, count: int = 1, timeout: float = 1.0) -> list[str]:
    """One line per attempt: ``ok <server> <peer seen by server>``, ``refused <seconds>``,
    ``timeout``, or another of tests.support.probe's outcomes."""
    out = []
    for outcome, seconds in NodeTopology.attempts(ns, ip, port, count=count, timeout=timeout):
        if outcome == "refused":
            out.append(f"refused {seconds:.3f}")
        elif outcome == "timeout" or outcome == "reset" or outcome.startswith("error:"):
            out.append(outcome)
        else:
            out.append(f"ok {outcome}")
    return out


def landed(lines: list[str]) -> collections.Counter:
    return collections.Counter(line.split()[1] if line.startswith("ok") else line.split()[0] for line in lines)


def peers(lines: list[str]) -> set[str]:
    return {line.split()[2] for line in lines if line.startswith("ok")}


def start_pods(t: NodeTopology, port: int = 8080, family: int = 4) -> None:
    for k, pod in enumerate(t.pods, start=1):
        t.serve(pod, f"pod{k}", tcp=(port,), host="::" if family == 6 else "0.0.0.0")


async def test_clusterip_dnat_spreads_over_endpoints_and_masquerades_non_pod_sources(topo):
    start_pods(topo)
    be, _, _ = backend_for(topo)
    sp = port("ns", "web", cluster_ip=CIP)
    result = await be.run_sync(request([(sp, (ep(topo.pod_ip(1), 8080), ep(topo.pod_ip(2), 8080)))], service_cidrs=CIDRS))
    assert result.full and result.written["chains"] > 0

    from_client = connect(topo.client, CIP, 80, count=24)
    assert set(landed(from_client)) == {"pod1", "pod2"}, from_client  # port 80 → 8080, both endpoints
    assert peers(from_client) <= {topo.pod_gw(1), topo.pod_gw(2)}  # masqueraded: not from the pod CIDR
    from_node = connect(topo.node, CIP, 80, count=12)
    assert set(landed(from_node)) <= {"pod1", "pod2"} and all(x.startswith("ok") for x in from_node)
    from_pod3 = connect(topo.pods[2], CIP, 80, count=6)
    assert peers(from_pod3) == {topo.pod_ip(3)}  # pod traffic keeps its source


async def test_no_endpoints_rejects_unknown_port_rejects_unallocated_ip_drops(topo):
    """From the node itself (output hook). The same verdicts run in the forward hook, but on
    this kernel an ICMP error for a forwarded packet from a veth never leaves the node (a plain
    ``reject`` in a bare forward chain shows the same), so the refusal is observed locally."""
    start_pods(topo)
    be, _, _ = backend_for(topo)
    await be.run_sync(request([(port("ns", "empty", cluster_ip=CIP), ()),
                           (port("ns", "web", cluster_ip="172.30.0.11"), (ep(topo.pod_ip(1), 8080),))], service_cidrs=CIDRS))
    [no_eps] = connect(topo.node, CIP, 80)
    assert no_eps.startswith("refused") and float(no_eps.split()[1]) < 0.5, no_eps
    [bad_port] = connect(topo.node, "172.30.0.11", 81)
    assert bad_port.startswith("refused"), bad_port
    assert connect(topo.node, "172.30.0.99", 80, timeout=0.5) == ["timeout"]
    assert connect(topo.node, "172.30.0.11", 80) == [f"ok pod1 {topo.pod_gw(1)}"]
    [forwarded] = connect(topo.client, CIP, 80, timeout=0.5)
    assert not forwarded.startswith("ok")
    assert "goto reject-chain" in topo.nft("list", "map", "ip", "kube-proxy", "no-endpoint-services")


async def test_internal_traffic_policy_local_without_local_endpoints_drops(topo):
    start_pods(topo)
    be, _, _ = backend_for(topo)
    result = await be.run_sync(request([(port("ns", "itp", cluster_ip=CIP, itp_local=True), (ep(topo.pod_ip(1), 8080),))]))
    assert result.no_local_internal == 1
    assert connect(topo.client, CIP, 80, timeout=0.5) == ["timeout"]
    await be.run_sync(request([(port("ns", "itp", cluster_ip=CIP, itp_local=True), (ep(topo.pod_ip(1), 8080, TEST_NODE_NAME),))],
                          full=False, changed={"ns/itp"}))
    assert landed(connect(topo.client, CIP, 80)) == {"pod1": 1}


async def test_hairpin_pod_reaching_itself_through_its_service_is_masqueraded(topo):
    start_pods(topo)
    be, _, _ = backend_for(topo)
    single = port("ns", "one", cluster_ip=CIP)
    multi = port("ns", "two", cluster_ip="172.30.0.12")
    await be.run_sync(request([(single, (ep(topo.pod_ip(1), 8080),)),
                           (multi, (ep(topo.pod_ip(1), 8080), ep(topo.pod_ip(2), 8080)))]))
    [line] = connect(topo.pods[0], CIP, 80)
    assert line == f"ok pod1 {topo.pod_gw(1)}"  # source rewritten to the node: the reply comes back through it
    lines = connect(topo.pods[0], "172.30.0.12", 80, count=16)
    assert all(x.startswith("ok") for x in lines), lines
    for x in lines:
        _, server, peer = x.split()
        assert peer == (topo.pod_gw(1) if server == "pod1" else topo.pod_ip(1))


async def test_client_ip_affinity_sticks_and_moves_when_its_endpoint_goes(topo):
    start_pods(topo)
    be, _, _ = backend_for(topo)
    sp = port("ns", "sticky", cluster_ip=CIP, affinity_seconds=600)
    eps3 = (ep(topo.pod_ip(1), 8080), ep(topo.pod_ip(2), 8080), ep(topo.pod_ip(3), 8080))
    await be.run_sync(request([(sp, eps3)]))
    first = landed(connect(topo.client, CIP, 80, count=10))
    assert len(first) == 1, first
    [chosen] = first
    again = landed(connect(topo.client, CIP, 80, count=5))
    assert again == first.__class__({chosen: 5})

    k = int(chosen[-1])
    remaining = tuple(e for e in eps3 if e.ip != topo.pod_ip(k))
    result = await be.run_sync(request([(sp, remaining)], full=False, changed={"ns/sticky"}))
    assert not result.full
    after = landed(connect(topo.client, CIP, 80, count=8))
    assert len(after) == 1 and chosen not in after, after


async def test_nodeport_and_external_traffic_policy(topo):
    start_pods(topo)
    be, _, _ = backend_for(topo)
    cluster = port("ns", "np-cluster", cluster_ip=CIP, node_port=30080)
    local = port("ns", "np-local", cluster_ip="172.30.0.11", node_port=30081, etp_local=True)
    nolocal = port("ns", "np-nolocal", cluster_ip="172.30.0.12", node_port=30082, etp_local=True)
    none = port("ns", "np-none", cluster_ip="172.30.0.13", node_port=30083)
    result = await be.run_sync(request([
        (cluster, (ep(topo.pod_ip(1), 8080),)),
        (local, (ep(topo.pod_ip(2), 8080, TEST_NODE_NAME), ep(topo.pod_ip(3), 8080))),
        (nolocal, (ep(topo.pod_ip(3), 8080),)),
        (none, ()),
    ], nodeport_ips=(NODE_IP,), node_ip=NODE_IP))
    assert result.no_local_external == 1
    assert connect(topo.client, NODE_IP, 30080) == [f"ok pod1 {topo.pod_gw(1)}"]  # eTP Cluster: masqueraded
    assert landed(connect(topo.client, NODE_IP, 30081, count=6)) == {"pod2": 6}
    assert peers(connect(topo.client, NODE_IP, 30081)) == {CLIENT_IP}  # eTP Local keeps the client IP
    assert connect(topo.client, NODE_IP, 30082, timeout=0.5) == ["timeout"]  # no local endpoint: drop
    assert connect(topo.client, NODE_IP, 30083)[0].startswith("refused")
    # a Pod reaching an eTP Local NodePort is short-circuited to every endpoint, unmasqueraded
    from_pod = connect(topo.pods[0], NODE_IP, 30082)
    assert from_pod == [f"ok pod3 {topo.pod_ip(1)}"]


async def test_nodeports_on_every_local_address_when_nodeport_ips_is_none(topo):
    start_pods(topo)
    be, _, _ = backend_for(topo)
    await be.run_sync(request([(port("ns", "np", cluster_ip=CIP, node_port=30090), (ep(topo.pod_ip(1), 8080),))], nodeport_ips=None))
    assert landed(connect(topo.client, NODE_IP, 30090)) == {"pod1": 1}
    assert landed(connect(topo.pods[1], topo.pod_gw(2), 30090)) == {"pod1": 1}  # another node address
    assert connect(topo.node, "127.0.0.1", 30090)[0].startswith("refused")  # never on loopback


async def test_external_ip_and_load_balancer_source_ranges(topo):
    start_pods(topo)
    be, _, _ = backend_for(topo)
    vip, ext = "203.0.113.7", "198.51.100.9"
    sp = port("ns", "lb", cluster_ip=CIP, node_port=30100, lb_ips=(vip,), external_ips=(ext,), source_ranges=("192.168.60.0/24",))
    await be.run_sync(request([(sp, (ep(topo.pod_ip(1), 8080),))], nodeport_ips=(NODE_IP,)))
    assert connect(topo.client, ext, 80) == [f"ok pod1 {topo.pod_gw(1)}"]
    assert connect(topo.client, vip, 80, timeout=0.5) == ["timeout"]  # client not in the source ranges
    allowed = port("ns", "lb", cluster_ip=CIP, node_port=30100, lb_ips=(vip,), external_ips=(ext,), source_ranges=("192.168.50.0/24",))
    await be.run_sync(request([(allowed, (ep(topo.pod_ip(1), 8080),))], nodeport_ips=(NODE_IP,), full=False, changed={"ns/lb"}))
    assert landed(connect(topo.client, vip, 80)) == {"pod1": 1}


def chain_handles(t: NodeTopology, chain: str) -> list[str]:
    out = t.nft("-a", "list", "chain", "ip", "kube-proxy", chain)
    return [line.rsplit("# handle", 1)[1].strip() for line in out.splitlines() if "# handle" in line and "chain " not in line]


async def test_partial_sync_rewrites_only_the_changed_service(topo):
    start_pods(topo)
    be, _, _ = backend_for(topo)
    a, b = port("ns", "a", cluster_ip=CIP), port("ns", "b", cluster_ip="172.30.0.11")
    eps_a = (ep(topo.pod_ip(1), 8080), ep(topo.pod_ip(2), 8080))
    await be.run_sync(request([(a, eps_a), (b, (ep(topo.pod_ip(3), 8080),))]))
    from kubesvc.proxy.nftables.naming import service_port_chain_name_base
    chain_a = "service-" + service_port_chain_name_base(a.name, "tcp")
    chain_b = "service-" + service_port_chain_name_base(b.name, "tcp")
    before_a, before_b = chain_handles(topo, chain_a), chain_handles(topo, chain_b)

    result = await be.run_sync(request([(a, (ep(topo.pod_ip(2), 8080),)), (b, (ep(topo.pod_ip(3), 8080),))], full=False, changed={"ns/a"}))
    assert not result.full
    assert result.written["chains"] == 1
    assert chain_handles(topo, chain_b) == before_b  # untouched
    assert chain_handles(topo, chain_a) != before_a
    assert landed(connect(topo.client, CIP, 80, count=6)) == {"pod2": 6}
    assert landed(connect(topo.client, "172.30.0.11", 80, count=2)) == {"pod3": 2}
    assert f"{topo.pod_ip(1)} . {topo.pod_ip(1)}" not in topo.nft("list", "set", "ip", "kube-proxy", "hairpin-endpoints")


async def test_removed_service_chain_is_flushed_then_deleted_a_second_later(topo):
    start_pods(topo)
    be, clock, _ = backend_for(topo)
    a, b = port("ns", "a", cluster_ip=CIP), port("ns", "b", cluster_ip="172.30.0.11")
    await be.run_sync(request([(a, (ep(topo.pod_ip(1), 8080),)), (b, (ep(topo.pod_ip(2), 8080),))]))
    from kubesvc.proxy.nftables.naming import service_port_chain_name_base
    chain_b = "service-" + service_port_chain_name_base(b.name, "tcp")
    assert chain_b in topo.nft("list", "chains", "ip")

    await be.run_sync(request([(a, (ep(topo.pod_ip(1), 8080),))], full=False, changed={"ns/b"}))
    assert chain_handles(topo, chain_b) == []  # flushed, still there
    assert "172.30.0.11" not in topo.nft("list", "map", "ip", "kube-proxy", "service-ips")
    assert connect(topo.client, "172.30.0.11", 80, timeout=0.5) == ["timeout"]  # unallocated now... or gone

    clock.now += 0.5
    await be.run_sync(request([(a, (ep(topo.pod_ip(1), 8080),))], full=False, changed=set()))
    assert chain_b in topo.nft("list", "chains", "ip")  # not yet
    clock.now += 1.0
    result = await be.run_sync(request([(a, (ep(topo.pod_ip(1), 8080),))], full=False, changed=set()))
    assert chain_b not in topo.nft("list", "chains", "ip")
    assert not result.full
    assert landed(connect(topo.client, CIP, 80)) == {"pod1": 1}


async def test_full_sync_repairs_tampering_and_a_restarted_proxy_adopts_the_table(topo):
    start_pods(topo)
    be, _, _ = backend_for(topo)
    a, b = port("ns", "a", cluster_ip=CIP), port("ns", "b", cluster_ip="172.30.0.11")
    await be.run_sync(request([(a, (ep(topo.pod_ip(1), 8080),)), (b, (ep(topo.pod_ip(2), 8080),))]))
    topo.nft("delete", "element", "ip", "kube-proxy", "service-ips", "{", f"{CIP} . tcp . 80", "}")
    topo.nft("add", "element", "ip", "kube-proxy", "cluster-ips", "{", "172.30.9.9", "}")
    assert connect(topo.node, CIP, 80, timeout=0.5)[0].startswith("refused")  # broken: cluster-ips-check

    fresh, _, _ = backend_for(topo)  # a restarted proxy without ns/b
    result = await fresh.run_sync(request([(a, (ep(topo.pod_ip(1), 8080),))]))
    assert result.full
    assert landed(connect(topo.client, CIP, 80)) == {"pod1": 1}
    assert "172.30.9.9" not in topo.nft("list", "set", "ip", "kube-proxy", "cluster-ips")
    assert any("ns/b" in c for c in fresh.state.stale_chains)
    written_again = (await fresh.run_sync(request([(a, (ep(topo.pod_ip(1), 8080),))]))).written
    assert written_again["elements"] == 0  # a second full sync finds everything in place


async def test_failed_transaction_counts_and_next_sync_is_full(topo):
    be, _, metrics = backend_for(topo)
    a = port("ns", "a", cluster_ip=CIP)
    await be.run_sync(request([(a, (ep(topo.pod_ip(1), 8080),))]))
    topo.nft("delete", "table", "ip", "kube-proxy")  # someone removed our table under us
    with pytest.raises(SyncFailed):
        await be.run_sync(request([(a, (ep(topo.pod_ip(2), 8080),))], full=False, changed={"ns/a"}))
    assert metrics.nftables_sync_failures.labels("IPv4")._value.get() == 1
    result = await be.run_sync(request([(a, (ep(topo.pod_ip(2), 8080),))], full=False, changed=set()))
    assert result.full
    start_pods(topo)
    assert landed(connect(topo.client, CIP, 80)) == {"pod2": 1}
    assert metrics.nftables_objects_total.labels("chains", "IPv4")._value.get() > 10


async def test_cleanup_leftovers_deletes_both_tables(topo):
    be4, _, _ = backend_for(topo)
    be6, _, _ = backend_for(topo, family=IPV6)
    await be4.run_sync(request([(port("ns", "a", cluster_ip=CIP), (ep(topo.pod_ip(1), 8080),))]))
    await be6.run_sync(request([(port("ns", "a", cluster_ip="fd00:30::10"), (ep("fd00:1:1::2", 8080),))]))
    tables = topo.nft("list", "tables")
    assert "table ip kube-proxy" in tables and "table ip6 kube-proxy" in tables
    assert cleanup_leftovers(netns=topo.node.name) is None
    assert "kube-proxy" not in topo.nft("list", "tables")
    cleanup_leftovers(netns=topo.node.name)  # nothing left: not an error



async def test_ipv6_clusterip_and_hairpin(topo6):
    start_pods(topo6, family=6)
    be, _, _ = backend_for(topo6, family=IPV6)
    vip = "fd00:30::10"
    await be.run_sync(request([(port("ns", "v6", cluster_ip=vip), (ep(topo6.pod_ip6(1), 8080), ep(topo6.pod_ip6(2), 8080)))],
                          service_cidrs=("fd00:30::/112",)))
    lines = connect(topo6.client, vip, 80, count=16)
    assert set(landed(lines)) == {"pod1", "pod2"}, lines
    assert connect(topo6.client, "fd00:30::99", 80, timeout=0.5) == ["timeout"]
    assert all(x.startswith("ok") for x in connect(topo6.pods[0], vip, 80, count=8))
