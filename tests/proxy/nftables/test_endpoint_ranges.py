"""An endpoint added to (or removed from) a Service of 2..16 endpoints, on the real kernel: one
nf_tables netlink batch of map elements (``proxy/nftables/rules.py``, endpoint range maps), no
rule rewritten, so neither nft's cache nor the kernel's table validation is paid.

Checked against what a user sees: connections through the ClusterIP reach the added endpoint;
``nft list table`` after the netlink batch is exactly what the same syncs give when every
transaction goes through ``nft -f`` text (a second namespace, the nft binary by its path, so
nothing goes over our netlink encoder); a refused batch changes nothing in the kernel and the
next sync is full and converges.
"""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from kubesvc.kernel import nftables_netlink
from kubesvc.kernel.nftables import NFTables
from kubesvc.proxy.backend import SyncFailed
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.nftables.naming import service_port_chain_name_base
from kubesvc.proxy.nftables.proxier import NftablesBackend
from kubesvc.proxy.proxier import Proxier
from tests.proxy.nftables.test_kernel import CIDRS, CIP, connect, landed, start_pods
from tests.support.builders import ep, options, port, request
from tests.support.netns import POD_CIDR, Netns, NodeTopology

pytestmark = pytest.mark.kernel

WEB = port("ns", "web", cluster_ip=CIP)
OTHER = port("ns", "other", cluster_ip="172.30.0.11")
CHAIN = "service-" + service_port_chain_name_base(WEB.name, "tcp")


@pytest.fixture
def topo():
    t = NodeTopology(pods=3, default_via_client=True)
    try:
        yield t
    finally:
        t.close()


@pytest.fixture
def batches(monkeypatch):
    """The element batches sent over netlink, as (set, delete?) lists."""
    sent: list[list[tuple[str, bool]]] = []
    apply = nftables_netlink.NftNetlink.apply

    def spy(self, family, table, ops):
        sent.append([(op.set, op.delete) for op in ops])
        return apply(self, family, table, ops)

    monkeypatch.setattr(nftables_netlink.NftNetlink, "apply", spy)
    return sent


def proxier(nft: NFTables) -> tuple[Proxier, ProxyMetrics]:
    metrics = ProxyMetrics()
    opts = options(POD_CIDR)
    return Proxier(NftablesBackend(opts, nft=nft), opts, metrics), metrics


def syncs(t: NodeTopology) -> list:
    """Full sync with two endpoints, then a third added, then the first removed."""
    one, two, three = (ep(t.pod_ip(k), 8080) for k in (1, 2, 3))
    other = (ep(t.pod_ip(3), 8080), ep(t.pod_ip(1), 8080))
    return [request([(WEB, (one, two)), (OTHER, other)], service_cidrs=CIDRS),
            request([(WEB, (one, two, three)), (OTHER, other)], service_cidrs=CIDRS, full=False, changed={"ns/web"}),
            request([(WEB, (two, three)), (OTHER, other)], service_cidrs=CIDRS, full=False, changed={"ns/web"})]


async def test_added_endpoint_is_one_element_batch_reached_by_traffic_and_listed_as_nft_text_writes_it(topo, batches):
    start_pods(topo)
    be, _ = proxier(NFTables(netns=topo.node.name))
    first, added, removed = syncs(topo)
    await be.run_sync(first)
    rule_before = topo.nft("list", "chain", "ip", "kube-proxy", CHAIN)
    assert "numgen random mod 1048576 map @endpoint-ranges-" in rule_before  # (nft leaves "offset 0" out)
    assert set(landed(connect(topo.client, CIP, 80, count=16))) == {"pod1", "pod2"}

    batches.clear()
    result = await be.run_sync(added)
    assert not result.full and result.written["chains"] == 0 and result.written["rules"] == 0
    (emap,) = {block[2] for block in be.state.services["ns/web"].slots.values()}
    assert batches == [[(emap, True), (emap, False)]]  # one batch: the old ranges out, the new in
    assert topo.nft("list", "chain", "ip", "kube-proxy", CHAIN) == rule_before  # the rule is the same rule
    assert set(landed(connect(topo.client, CIP, 80, count=40))) == {"pod1", "pod2", "pod3"}

    result = await be.run_sync(removed)
    assert not result.full and result.written["rules"] == 0 and len(batches) == 2
    assert set(landed(connect(topo.client, CIP, 80, count=24))) == {"pod2", "pod3"}

    # The same syncs, every transaction as nft -f text, in a namespace of their own.
    text_ns = Netns.create("rtext")
    try:
        batches.clear()
        by_text, _ = proxier(NFTables(netns=text_ns.name, nft=shutil.which("nft")))  # a path: never netlink
        for req in syncs(topo):
            await by_text.run_sync(req)
        assert batches == []
        assert topo.nft("list", "table", "ip", "kube-proxy") == text_ns.run("nft", "list", "table", "ip", "kube-proxy").stdout
    finally:
        text_ns.close()


async def test_refused_element_batch_changes_nothing_and_the_next_sync_is_full(topo, batches):
    start_pods(topo)
    be, metrics = proxier(NFTables(netns=topo.node.name))
    first, added, _ = syncs(topo)
    await be.run_sync(first)
    (emap,) = {block[2] for block in be.state.services["ns/web"].slots.values()}
    web_ranges = [k for k in be.state.held(emap) if be.state.owned(emap).get(k) == "ns/web"]
    # someone deletes one of our ranges: the batch's delete of it is refused (ENOENT)
    topo.nft("delete", "element", "ip", "kube-proxy", emap, "{", web_ranges[0], "}")
    before = topo.nft("list", "table", "ip", "kube-proxy")

    with pytest.raises(SyncFailed):
        await be.run_sync(added)
    assert len(batches) == 1  # tried over netlink (the full sync before was nft text)
    assert topo.nft("list", "table", "ip", "kube-proxy") == before  # atomic: not even the hairpin element
    assert metrics.nftables_sync_failures.labels("IPv4")._value.get() == 1

    result = await be.run_sync(dataclasses.replace(added, changed_services=frozenset()))
    assert result.full  # the shared proxier: the failed sync left the previous state, so full now
    assert set(landed(connect(topo.client, CIP, 80, count=40))) == {"pod1", "pod2", "pod3"}
    again = await be.run_sync(dataclasses.replace(added, full=True))
    assert again.written["elements"] == 0  # the ranges read back from the kernel are the ones rendered


async def test_ipv6_range_elements_over_netlink_list_as_nft_text_writes_them(batches):
    """The ip6 table: addresses of 16 bytes in the map's data; the same syncs through netlink
    and through nft text give the same table, UDP (its own range maps) included."""
    web6 = port("ns", "web", cluster_ip="fd00:30::10")
    dns6 = port("ns", "dns", "dns", 53, "UDP", cluster_ip="fd00:30::53")
    eps = [ep(f"fd00:1::{k}", 8080) for k in range(1, 5)]
    dns = [ep(f"fd00:1::{k}", 5353) for k in range(1, 4)]
    steps = [request([(web6, tuple(eps[:2])), (dns6, tuple(dns[:2]))], service_cidrs=("fd00:30::/112",)),
             request([(web6, tuple(eps[:3])), (dns6, tuple(dns))], service_cidrs=("fd00:30::/112",), full=False,
                     changed={"ns/web", "ns/dns"}),
             request([(web6, (eps[1], eps[3])), (dns6, tuple(dns[1:]))], service_cidrs=("fd00:30::/112",), full=False,
                     changed={"ns/web", "ns/dns"})]
    by_netlink, by_text = Netns.create("r6nl"), Netns.create("r6tx")
    try:
        tables = []
        for ns, nft in ((by_netlink, "nft"), (by_text, shutil.which("nft"))):
            opts = options("fd00:1::/64", family=6)
            be = Proxier(NftablesBackend(opts, nft=NFTables(6, netns=ns.name, nft=nft)), opts, ProxyMetrics())
            for req in steps:
                result = await be.run_sync(req)
                assert result.full == req.full and (req.full or result.written["rules"] == 0)
            tables.append(ns.run("nft", "list", "table", "ip6", "kube-proxy").stdout)
        assert len(batches) == 2  # the two partial syncs of the first namespace, nothing of the second
        assert tables[0] == tables[1]
        assert "fd00:1::2 . 8080" in tables[0] and "fd00:1::3 . 5353" in tables[0] and "flags interval" in tables[0]
    finally:
        by_netlink.close()
        by_text.close()
