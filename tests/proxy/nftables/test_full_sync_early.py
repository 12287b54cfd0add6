"""A full sync's new slot-map, range-map and hairpin elements sent ahead of its transaction
(``kernel.nftables.Transaction``, ``kernel/nftables_elements.py``).

The pure part: which containers a full sync marks early (filled from nothing and not flushed),
and that the transaction's text is still the whole transaction. The kernel part: the same full
sync applied with the early batch and through ``nft -f`` alone leaves the same table; a refused
batch leaves the whole text to nft.
"""

from __future__ import annotations

import asyncio
import errno
import shutil
import struct

import pytest

from kubesvc.kernel import nftables_elements
from kubesvc.kernel.nftables import NFTables, Transaction, table_contents
from kubesvc.kernel.nftables_netlink import NfNetlinkFailed
from kubesvc.proxy.nftables import rules
from tests.support.builders import ep, options, port, request
from tests.support.netns import Netns

SVC_A = port("ns", "a", cluster_ip="172.30.0.1")  # 20 endpoints: a slot map
SVC_B = port("ns", "b", cluster_ip="172.30.0.2", protocol="UDP", port=53)
SVC_C = port("ns", "c", cluster_ip="172.30.0.3")  # one endpoint: a direct dnat, no map
A_IPS = [f"10.180.1.{i}" for i in range(10, 30)]
PORTS = [
    (SVC_A, tuple(ep(ip, 8080) for ip in A_IPS)),
    (SVC_B, (ep("10.180.1.10", 5353), ep("10.180.0.3", 5353), ep("10.180.0.4", 5353))),
    (SVC_C, (ep("10.180.0.9", 80),)),
]
PAIRS = {f"{ip} . {ip}" for ip in [*A_IPS, "10.180.0.3", "10.180.0.4", "10.180.0.9"]}


def full_plan(snapshot: rules.KernelSnapshot) -> rules.SyncPlan:
    return rules.build_sync(request(PORTS), options(), rules.NftState(), snapshot, 0.0)


SHARES = {"EARLY_MIN_SHARE": rules.EARLY_MIN_SHARE, "AFTER_MIN_SHARE": rules.AFTER_MIN_SHARE}


@pytest.fixture(autouse=True)
def any_share(monkeypatch):
    """These few elements are a small part of the text: early (or after) all the same."""
    for name in SHARES:
        monkeypatch.setattr(rules, name, 0.0)


def test_early_only_when_the_elements_are_most_of_the_text(monkeypatch):
    for name, share in SHARES.items():
        monkeypatch.setattr(rules, name, share)
    assert not isinstance(full_plan(rules.KernelSnapshot()).kernel_input, Transaction)  # a few elements beside the fixed part
    # ranges too: 300 Services of 16 endpoints, 4800 ranges
    ranged = [(port("ns", f"r{i}", cluster_ip=f"172.30.{i // 250}.{i % 250 + 1}"), tuple(ep(f"10.{i // 250}.{i % 250}.{j + 1}", 80) for j in range(16)))
              for i in range(300)]
    tx = rules.build_sync(request(ranged), options(), rules.NftState(), rules.KernelSnapshot(), 0.0).kernel_input
    assert isinstance(tx, Transaction) and any(c.startswith(rules.RANGE_MAP_PREFIX) for c in tx.early)
    many = [(port("ns", f"s{i}", cluster_ip=f"172.30.1.{i}"), tuple(ep(f"10.{i}.{j // 250}.{j % 250}", 80) for j in range(500)))
            for i in range(4)]
    assert isinstance(rules.build_sync(request(many), options(), rules.NftState(), rules.KernelSnapshot(), 0.0).kernel_input,
                      Transaction)  # 4000 elements


def map_of(text: str, svc: str) -> str:
    """The endpoint map Service ``svc``'s dnat rule reads, from the text."""
    return next(line.rsplit("@", 1)[1] for line in text.splitlines() if f"-{svc}/" in line and " map @" in line)


def element_lines(text: str, containers) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(tuple(f"add element ip kube-proxy {c} " for c in containers))]


def test_a_new_table_sends_endpoint_maps_and_hairpin_pairs_ahead():
    tx = full_plan(rules.KernelSnapshot()).kernel_input
    assert isinstance(tx, Transaction)
    map_a, map_b = map_of(tx, "ns/a"), map_of(tx, "ns/b")
    # a new table: every element after the text, the dispatch map and the ClusterIPs as data too
    assert tx.after and set(tx.early) == {map_a, map_b, rules.HAIRPIN_ENDPOINTS, rules.CLUSTER_IPS, rules.SERVICE_IPS}
    assert dict(tx.early[map_a]) == {str(i): f"{ip} . 8080" for i, ip in enumerate(A_IPS)}
    assert set(tx.early[rules.HAIRPIN_ENDPOINTS]) == PAIRS and set(tx.early[rules.HAIRPIN_ENDPOINTS].values()) == {""}
    # The text is still the whole transaction (what a fake kernel or a tracer reads) ...
    assert f"add element ip kube-proxy {map_a} {{ 0 : 10.180.1.10 . 8080, 1 : 10.180.1.11 . 8080, " in tx
    assert len(element_lines(tx, [map_a, map_b, rules.HAIRPIN_ENDPOINTS])) == 3
    # ... and the rest is it without the lines of the sets sent ahead, the verdict maps and ClusterIPs kept.
    rest = tx.rest([map_a, rules.HAIRPIN_ENDPOINTS])
    assert element_lines(rest, [map_a, rules.HAIRPIN_ENDPOINTS]) == [] and len(element_lines(rest, [map_b])) == 1
    assert "add element ip kube-proxy cluster-ips { 172.30.0.1, 172.30.0.2, 172.30.0.3 }" in rest
    assert sorted(rest.splitlines()) == sorted(set(tx.splitlines()) - set(element_lines(tx, [map_a, rules.HAIRPIN_ENDPOINTS])))


def test_containers_the_kernel_holds_or_that_are_flushed_are_not_early():
    holds = full_plan(rules.KernelSnapshot(elements={rules.HAIRPIN_ENDPOINTS: {"10.180.0.9 . 10.180.0.9": ""}})).kernel_input
    assert rules.HAIRPIN_ENDPOINTS not in holds.early and holds.early
    assert element_lines(holds.rest(holds.early), [rules.HAIRPIN_ENDPOINTS])
    unreadable = full_plan(rules.KernelSnapshot(sets=[rules.HAIRPIN_ENDPOINTS], elements={rules.HAIRPIN_ENDPOINTS: None})).kernel_input
    assert rules.HAIRPIN_ENDPOINTS not in unreadable.early
    assert "flush set ip kube-proxy hairpin-endpoints" in unreadable.rest(unreadable.early)


def test_a_partial_sync_is_plain_text():
    first = full_plan(rules.KernelSnapshot())
    req = request([PORTS[0], (SVC_B, PORTS[1][1] + (ep("10.180.0.5", 5353),)), PORTS[2]], full=False, changed={"ns/b"})
    plan = rules.build_sync(req, options(), first.next_state, None, 1.0)
    assert not isinstance(plan.kernel_input, Transaction) and "10.180.0.5" in plan.kernel_input


def listing(nft: NFTables) -> tuple:
    chains, sets, elements = table_contents(asyncio.run(nft.list_table()))
    return sorted(chains), sorted(sets), elements


@pytest.mark.kernel
def test_early_elements_leave_the_table_nft_alone_leaves(monkeypatch):
    tx = full_plan(rules.KernelSnapshot()).kernel_input
    ours, theirs = Netns.create("early"), Netns.create("early")
    try:
        sent = []
        send = nftables_elements.send
        monkeypatch.setattr(nftables_elements, "send", lambda netns, batch: sent.append(batch.sets) or send(netns, batch))
        with_early = NFTables(netns=ours.name)
        with_early.run_sync(tx)
        assert map_of(tx, "ns/a") in sent[0] and rules.HAIRPIN_ENDPOINTS in sent[0]
        assert map_of(tx, "ns/b") in sent[0]  # the range map too
        assert map_of(tx, "ns/b") not in [line.split()[4] for line in element_lines(tx.rest(sent[0]), [map_of(tx, "ns/b")])]
        assert with_early.python_seconds > 0
        text_only = NFTables(netns=theirs.name, nft=shutil.which("nft"))  # a stand-in binary: the whole text to nft
        text_only.run_sync(tx)
        assert listing(with_early) == listing(NFTables(netns=theirs.name))
        terse = ("nft", "-t", "list", "table", "ip", "kube-proxy")
        assert ours.run(*terse).stdout == theirs.run(*terse).stdout

        # A refused batch: nothing of it applied, and nft applies the whole text.
        for ns in (ours, theirs):
            ns.run("nft", "delete", "table", "ip", "kube-proxy")

        def refuse(*a):
            raise NfNetlinkFailed(12, "add element")
        monkeypatch.setattr(nftables_elements, "send", refuse)
        NFTables(netns=ours.name).run_sync(tx)
        text_only.run_sync(tx)
        assert listing(NFTables(netns=ours.name)) == listing(NFTables(netns=theirs.name))
    finally:
        ours.close()
        theirs.close()


@pytest.mark.kernel
def test_ipv6_early_elements_leave_the_table_nft_alone_leaves(monkeypatch):
    from kubesvc.proxy.types import IPV6

    sent = []
    send = nftables_elements.send
    monkeypatch.setattr(nftables_elements, "send", lambda netns, batch: sent.append(batch.sets) or send(netns, batch))

    ports = [(port("ns", f"s{i}", cluster_ip=f"fd00:96::{i + 1:x}"), tuple(ep(f"fd00:10::{i:x}:{j + 1:x}", 8080) for j in range(20)))
             for i in range(3)]
    tx = rules.build_sync(request(ports), options("fd00:10::/64", IPV6), rules.NftState(), rules.KernelSnapshot(), 0.0).kernel_input
    assert isinstance(tx, Transaction) and rules.HAIRPIN_ENDPOINTS in tx.early
    ours, theirs = Netns.create("early6"), Netns.create("early6")
    try:
        NFTables(IPV6, netns=ours.name).run_sync(tx)
        assert sent and rules.HAIRPIN_ENDPOINTS in sent[0]
        NFTables(IPV6, netns=theirs.name, nft=shutil.which("nft")).run_sync(tx)
        assert listing(NFTables(IPV6, netns=ours.name)) == listing(NFTables(IPV6, netns=theirs.name))
        assert "fd00:10::1:14 . fd00:10::1:14" in listing(NFTables(IPV6, netns=ours.name))[2][rules.HAIRPIN_ENDPOINTS]
    finally:
        ours.close()
        theirs.close()


# Services of 2..16 endpoints (range maps), TCP and UDP, several sharing each map: adjacent
# blocks and ranges, as a full sync of a node with many small Services writes them.
RANGE_PORTS = [(port("ns", f"r{i}", cluster_ip=f"172.30.2.{i + 1}", protocol=("UDP" if i % 5 == 4 else "TCP")),
                tuple(ep(f"10.181.{i}.{j + 1}", 8000 + i) for j in range(2 + i % 15)))
               for i in range(40)]


@pytest.mark.kernel
def test_early_ranges_leave_the_table_nft_alone_leaves(monkeypatch):
    tx = rules.build_sync(request(RANGE_PORTS), options(), rules.NftState(), rules.KernelSnapshot(), 0.0).kernel_input
    range_maps = {c for c in tx.early if c.startswith(rules.RANGE_MAP_PREFIX)}
    assert isinstance(tx, Transaction) and len(range_maps) > 1 and any("-udp-" in c for c in range_maps)
    sent = []
    send = nftables_elements.send
    monkeypatch.setattr(nftables_elements, "send", lambda netns, batch: sent.append(batch.sets) or send(netns, batch))
    ours, theirs = Netns.create("earlyr"), Netns.create("earlyr")
    try:
        NFTables(netns=ours.name).run_sync(tx)
        assert range_maps <= set(sent[0])
        NFTables(netns=theirs.name, nft=shutil.which("nft")).run_sync(tx)
        ranges = listing(NFTables(netns=ours.name))[2]
        assert ranges == listing(NFTables(netns=theirs.name))[2]
        terse = ("nft", "-t", "list", "table", "ip", "kube-proxy")
        assert ours.run(*terse).stdout == theirs.run(*terse).stdout
        # what nft lists: Service r3's 5 endpoints split its block of 2^20 in 5 (hand-computed)
        r3 = map_of(tx, "ns/r3")
        listed = ours.run("nft", "list", "map", "ip", "kube-proxy", r3).stdout
        low = min(int(key.split("-")[0]) for key, value in tx.early[r3].items() if value == "10.181.3.1 . 8003")
        assert f"{low}-{low + 209714} : 10.181.3.1 . 8003" in listed
        assert f"{low + 209715}-{low + 419429} : 10.181.3.2 . 8003" in listed
    finally:
        ours.close()
        theirs.close()


@pytest.mark.kernel
def test_a_batch_the_kernel_refuses_applies_nothing_and_nft_applies_the_whole_text(monkeypatch):
    """A real refusal: the batch also names a set that does not exist, so the kernel aborts it
    whole (ENOENT); none of its ranges stay, and nft writes everything."""
    tx = rules.build_sync(request(RANGE_PORTS), options(), rules.NftState(), rules.KernelSnapshot(), 0.0).kernel_input
    batch_class, real_send = nftables_elements.Batch, nftables_elements.send
    refused = []

    def with_a_missing_set(family, table, sets):
        return batch_class(family, table, [*sets, ("no-such-map", [b""])])

    def send(netns, batch):
        try:
            real_send(netns, batch)
        except NfNetlinkFailed as err:
            refused.append(err.errno)
            raise
    monkeypatch.setattr(nftables_elements, "Batch", with_a_missing_set)
    monkeypatch.setattr(nftables_elements, "send", send)
    ours, theirs = Netns.create("earlyx"), Netns.create("earlyx")
    try:
        NFTables(netns=ours.name).run_sync(tx)
        assert refused == [errno.ENOENT]
        NFTables(netns=theirs.name, nft=shutil.which("nft")).run_sync(tx)
        assert listing(NFTables(netns=ours.name)) == listing(NFTables(netns=theirs.name))
    finally:
        ours.close()
        theirs.close()


def test_a_range_is_a_start_with_the_data_and_an_end_past_it():
    """Byte for byte as nft 1.0.6 sends ``0-524287 : 10.0.0.1 . 80`` to an interval map keyed
    by ``numgen`` (written out by hand: netlink headers in host order, the key big-endian)."""
    from kubesvc.kernel.nftables_netlink import SetType

    def head(length, kind):
        return struct.pack("=HH", length, kind)
    start = (head(32, 0x8001) + head(12, 0x8001) + head(8, 1) + bytes([0, 0, 0, 0])
             + head(16, 0x8002) + head(12, 1) + bytes([10, 0, 0, 1, 0, 80, 0, 0]))
    end = head(24, 0x8001) + head(8, 3) + bytes([0, 0, 0, 1]) + head(12, 0x8001) + head(8, 1) + bytes([0, 8, 0, 0])
    top = (head(32, 0x8001) + head(12, 0x8001) + head(8, 1) + bytes([0xFF, 0xF0, 0, 0])
           + head(16, 0x8002) + head(12, 1) + bytes([10, 0, 0, 2, 0x1F, 0x90, 0, 0]))  # to the top: no end
    ranges = {"0-524287": "10.0.0.1 . 80", "4293918720-4294967295": "10.0.0.2 . 8080"}
    assert list(nftables_elements.encode(SetType(("u32h",), ("ipv4", "port"), interval=True), ranges)) == [start + end + top]
    with pytest.raises(ValueError):
        list(nftables_elements.encode(SetType(("u32h",), ("ipv4", "port"), interval=True), {"5-4": "10.0.0.1 . 80"}))
    assert nftables_elements.encode(SetType(("u32h",), ("verdict",), interval=True), {"0-1": "drop"}) is None



@pytest.mark.kernel
async def test_early_batch_accepted_then_the_text_refused_the_next_full_sync_converges(monkeypatch):
    """A table that holds our chains but not yet a Service's range map elements: a full sync
    sends them ahead (the batch lands), then nft refuses the rest of the text. The sync fails,
    the proxier keeps its previous state and makes the next sync full; that one reads the
    elements back, sends none of them again, and leaves the table the same transaction applied
    by nft alone leaves, with traffic spread over both endpoints and a Pod reaching itself
    masqueraded."""
    import collections
    import dataclasses

    from kubesvc.proxy.backend import SyncFailed
    from kubesvc.proxy.metrics import ProxyMetrics
    from kubesvc.proxy.nftables.proxier import NftablesBackend
    from kubesvc.proxy.proxier import Proxier
    from tests.support.netns import POD_CIDR, NodeTopology

    topo = NodeTopology(pods=3, default_via_client=True)
    reference = Netns.create("earlyc")
    try:
        for k, pod in enumerate(topo.pods, start=1):
            topo.serve(pod, f"pod{k}", tcp=(8080,))
        opts = options(POD_CIDR)
        nft = NFTables(netns=topo.node.name)
        proxier = Proxier(NftablesBackend(opts, nft=nft), opts, ProxyMetrics())
        web = port("ns", "web", cluster_ip="172.30.0.10")
        cidrs = ("172.30.0.0/16",)
        await proxier.run_sync(request([(web, (ep(topo.pod_ip(1), 8080),))], service_cidrs=cidrs))  # one endpoint: no map
        req = request([(web, (ep(topo.pod_ip(1), 8080), ep(topo.pod_ip(2), 8080)))], service_cidrs=cidrs)  # two: a range map

        sent = []
        send = nftables_elements.send
        monkeypatch.setattr(nftables_elements, "send", lambda netns, batch: sent.append(batch.sets) or send(netns, batch))
        rest = Transaction.rest
        monkeypatch.setattr(Transaction, "rest", lambda self, sets: rest(self, sets) + "add rule ip kube-proxy no-such-chain accept\n")
        with pytest.raises(SyncFailed):
            await proxier.run_sync(req)
        [early] = sent
        [range_map] = early  # the hairpin set already held pod1's pair: not sent ahead
        assert range_map.startswith(rules.RANGE_MAP_PREFIX)
        _, _, held = table_contents(await nft.list_table())
        assert set(held[range_map].values()) == {f"{topo.pod_ip(1)} . 8080", f"{topo.pod_ip(2)} . 8080"}  # the batch landed
        assert set(held[rules.HAIRPIN_ENDPOINTS]) == {f"{topo.pod_ip(1)} . {topo.pod_ip(1)}"}  # the text did not

        monkeypatch.setattr(Transaction, "rest", rest)
        result = await proxier.run_sync(dataclasses.replace(req, full=False))
        assert result.full  # the failure made it full
        assert len(sent) == 1  # nothing went ahead again: the kernel held those elements already

        NFTables(netns=reference.name, nft=shutil.which("nft")).run_sync(
            rules.build_sync(req, opts, rules.NftState(), rules.KernelSnapshot(), 0.0).kernel_input)
        assert table_contents(await nft.list_table()) == table_contents(await NFTables(netns=reference.name).list_table())
        terse = ("nft", "-t", "list", "table", "ip", "kube-proxy")
        assert topo.node.run(*terse).stdout == reference.run(*terse).stdout

        outcomes = [outcome for outcome, _ in NodeTopology.attempts(topo.client, "172.30.0.10", 80, count=24)]
        assert all(o.startswith("pod") for o in outcomes), outcomes
        assert set(collections.Counter(o.split()[0] for o in outcomes)) == {"pod1", "pod2"}
        for outcome, _ in NodeTopology.attempts(topo.pods[0], "172.30.0.10", 80, count=16):
            server, peer = outcome.split()
            assert peer == (topo.pod_gw(1) if server == "pod1" else topo.pod_ip(1))  # hairpin: masqueraded
    finally:
        reference.close()
        topo.close()
