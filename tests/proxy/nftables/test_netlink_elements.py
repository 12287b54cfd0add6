"""Element-only transactions over nf_tables netlink (``kernel/nftables_netlink.py``).

The pure part: which declarations are understood, how a transaction is recognised as
element-only (anything else is left to libnftables). The kernel part runs a child Python in a
throwaway namespace: the same declarations and element changes applied once through netlink
and once through ``nft -f`` list back identically, a refused batch applies nothing and raises
``CommandFailed`` with nft's ENOENT text, and the tamper check's one-chain rule count.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from kubesvc.kernel.nftables_netlink import SetType, declared_set_types, parse_elements_only
from tests.support.netns import Netns

DECLARATIONS = """add table ip {t}
add chain ip {t} reject-chain
add chain ip {t} service-abc
add map ip {t} service-ips {{ type ipv4_addr . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP" ; }}
add map ip {t} no-endpoint-nodeports {{ type inet_proto . inet_service : verdict ; comment "y" ; }}
add set ip {t} cluster-ips {{ type ipv4_addr ; comment "Active ClusterIPs" ; }}
add set ip {t} hairpin-endpoints {{ type ipv4_addr . ipv4_addr ; }}
add map ip {t} endpoints-00 {{ typeof numgen random mod 1 : ip daddr . tcp dport ; }}
add map ip {t} endpoints-udp-00 {{ typeof numgen random mod 1 : ip daddr . udp dport ; }}
add map ip {t} endpoint-ranges-00 {{ typeof numgen random mod 1 : ip daddr . tcp dport ; flags interval ; }}
add set ip {t} affinity-x {{ type ipv4_addr ; flags dynamic,timeout ; timeout 10s ; }}
"""
ELEMENTS = """add element ip {t} service-ips {{ 10.96.0.1 . tcp . 80 : goto service-abc, 10.96.0.2 . udp . 53 : drop }}
add element ip {t} no-endpoint-nodeports {{ tcp . 30080 comment "ns/svc:http" : goto reject-chain, sctp . 30081 comment "ns/b" : drop }}
add element ip {t} cluster-ips {{ 10.96.0.1, 10.96.0.2 }}
add element ip {t} hairpin-endpoints {{ 10.1.2.3 . 10.1.2.3 }}
add element ip {t} endpoints-00 {{ 0 : 10.1.2.3 . 8080, 4000000000 : 10.1.2.4 . 443 }}
add element ip {t} endpoints-udp-00 {{ 7 : 10.1.2.3 . 53 }}
"""
CHANGES = """delete element ip {t} endpoints-00 {{ 0 }}
delete element ip {t} service-ips {{ 10.96.0.2 . udp . 53 }}
delete element ip {t} no-endpoint-nodeports {{ sctp . 30081 }}
add element ip {t} endpoints-00 {{ 0 : 10.9.9.9 . 80 }}
"""
# an interval map: two endpoints in a block, then a third added (the ranges re-split in one
# batch), one replaced, a block below the first and one ending at the top of the u32 space
RANGES = ["""add element ip {t} endpoint-ranges-00 {{ 1048576-1572863 : 10.1.2.3 . 8080, 1572864-2097151 : 10.1.2.4 . 8080 }}
""", """delete element ip {t} endpoint-ranges-00 {{ 1048576-1572863, 1572864-2097151 }}
add element ip {t} hairpin-endpoints {{ 10.1.2.5 . 10.1.2.5 }}
add element ip {t} endpoint-ranges-00 {{ 1048576-1398101 : 10.1.2.3 . 8080, 1398102-1747626 : 10.1.2.4 . 8080, 1747627-2097151 : 10.1.2.5 . 8080 }}
""", """delete element ip {t} endpoint-ranges-00 {{ 1398102-1747626 }}
add element ip {t} endpoint-ranges-00 {{ 1398102-1747626 : 10.1.2.9 . 8080 }}
""", """add element ip {t} endpoint-ranges-00 {{ 0-1048575 : 10.7.7.7 . 1, 4293918720-4294967295 : 10.7.7.8 . 2 }}
"""]


def test_declarations_understood_and_not():
    types = declared_set_types(DECLARATIONS.format(t="kube-proxy"), "ip", "kube-proxy")
    assert types["service-ips"] == SetType(("ipv4", "proto", "port"), ("verdict",))
    assert types["no-endpoint-nodeports"] == SetType(("proto", "port"), ("verdict",))
    assert types["cluster-ips"] == SetType(("ipv4",), None)
    assert types["hairpin-endpoints"] == SetType(("ipv4", "ipv4"), None)
    assert types["endpoints-00"] == SetType(("u32h",), ("ipv4", "port"))
    assert types["endpoint-ranges-00"] == SetType(("u32h",), ("ipv4", "port"), interval=True)
    assert types["affinity-x"] is None  # flags: left to nft
    assert declared_set_types(DECLARATIONS.format(t="other"), "ip", "kube-proxy") == {}
    assert declared_set_types(DECLARATIONS.format(t="kube-proxy"), "ip6", "kube-proxy") == {}


def test_only_element_transactions_on_known_sets_go_over_netlink():
    types = declared_set_types(DECLARATIONS.format(t="kube-proxy"), "ip", "kube-proxy")
    ops = parse_elements_only(ELEMENTS.format(t="kube-proxy") + CHANGES.format(t="kube-proxy"), "ip", "kube-proxy", types)
    assert ops is not None and [(op.delete, op.set, len(op.elements)) for op in ops][:2] == [(False, "service-ips", 2), (False, "no-endpoint-nodeports", 2)]
    assert [op.delete for op in ops[-4:]] == [True, True, True, False]
    assert parse_elements_only("", "ip", "kube-proxy", types) == []
    # a range is two kernel elements (start with the data, end flagged), in network order
    (op,) = parse_elements_only(RANGES[0].format(t="kube-proxy"), "ip", "kube-proxy", types)
    assert [(key[4:], data is not None, flags) for key, data, _, flags in op.elements] == [
        ((1048576).to_bytes(4, "big"), True, 0), ((1572864).to_bytes(4, "big"), False, 1),
        ((1572864).to_bytes(4, "big"), True, 0), ((2097152).to_bytes(4, "big"), False, 1)]


@pytest.mark.parametrize("text", [
    "add chain ip kube-proxy x\n",
    "add element ip kube-proxy cluster-ips { 10.0.0.1 }\nflush chain ip kube-proxy x\n",
    "add element ip kube-proxy affinity-x { 10.0.0.1 }\n",
    "add element ip kube-proxy unknown { 10.0.0.1 }\n",
    "add element ip other cluster-ips { 10.0.0.1 }\n",
    "add element ip kube-proxy cluster-ips { 10.0.0.300 }\n",
    "add element ip kube-proxy service-ips { 10.0.0.1 . tcp . 80 : jump a b }\n",
], ids=["not elements", "elements and a chain", "a set with flags", "an undeclared set", "another table",
        "an invalid address (nft's own error, please)", "a verdict netlink does not encode"])
def test_other_transactions_are_left_to_libnftables(text):
    types = declared_set_types(DECLARATIONS.format(t="kube-proxy"), "ip", "kube-proxy")
    assert parse_elements_only(text, "ip", "kube-proxy", types) is None


CHILD = textwrap.dedent("""
    import asyncio, json, subprocess, sys
    from kubesvc.kernel.exec import CommandFailed
    from kubesvc.kernel.nftables import NFTables, table_contents, is_not_found
    from kubesvc.kernel import nftables_netlink

    DECLARATIONS, STEPS = json.loads(sys.argv[1])
    sent = []
    apply = nftables_netlink.NftNetlink.apply
    def spy(self, family, table, ops):
        sent.append(table)
        return apply(self, family, table, ops)
    nftables_netlink.NftNetlink.apply = spy
    import shutil
    # nft by its path is a "stand-in" binary to NFTables: every transaction goes through it
    ours, theirs = NFTables(table="nl", in_process=True), NFTables(table="bin", in_process=False, nft=shutil.which("nft"))
    out = {"same": []}
    for nft, t in ((ours, "nl"), (theirs, "bin")):
        nft.run_sync(DECLARATIONS.format(t=t))
    def listing(t):
        return subprocess.run(["nft", "list", "table", "ip", t], capture_output=True, text=True).stdout.replace(t, "T")
    for text in STEPS:
        for nft, t in ((ours, "nl"), (theirs, "bin")):
            nft.run_sync(text.format(t=t))
        out["same"].append(table_contents(asyncio.run(ours.list_table()))[2] == table_contents(asyncio.run(theirs.list_table()))[2]
                           and listing("nl") == listing("bin"))
    before = subprocess.run(["nft", "list", "table", "ip", "nl"], capture_output=True, text=True).stdout
    bad = "add element ip nl hairpin-endpoints { 10.0.0.1 . 10.0.0.1 }\\ndelete element ip nl cluster-ips { 10.0.0.99 }\\n"
    try:
        ours.run_sync(bad)
        out["failed"] = None
    except CommandFailed as err:
        out["failed"] = {"argv": list(err.argv), "not_found": is_not_found(err), "input": err.input_text}
    out["unchanged"] = before == subprocess.run(["nft", "list", "table", "ip", "nl"], capture_output=True, text=True).stdout
    out["rules"] = [asyncio.run(ours.chain_rule_count("service-abc"))]
    ours.run_sync("add rule ip nl service-abc counter\\nadd rule ip nl service-abc counter\\n")
    out["rules"] += [asyncio.run(ours.chain_rule_count("service-abc")), asyncio.run(ours.chain_rule_count("nochain"))]
    out["sent"] = list(sent)
    binary_in_ns = NFTables(table="nl2", in_process=False)  # the stock binary: elements over netlink too
    binary_in_ns.run_sync(DECLARATIONS.format(t="nl2"))
    sent.clear()
    binary_in_ns.run_sync(STEPS[0].format(t="nl2"))
    out["binary_sent"] = list(sent)
    print(json.dumps(out))
""")


@pytest.mark.kernel
def test_netlink_elements_list_back_as_nft_wrote_them():
    ns = Netns.create("nl")  # prerequisites checked by tests/conftest.py (kernel tests fail, never skip)
    try:
        proc = ns.run(sys.executable, "-c", CHILD, json.dumps([DECLARATIONS, [ELEMENTS, CHANGES, *RANGES]]), check=False, timeout=60)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        ns.close()
    assert out["same"] == [True] * 6  # elements and nft's listing of the whole table
    assert out["sent"] == ["nl"] * 7  # every element transaction went over netlink, the refused one too
    assert out["failed"] == {"argv": ["nft", "-f", "-"], "not_found": True,
                             "input": "add element ip nl hairpin-endpoints { 10.0.0.1 . 10.0.0.1 }\ndelete element ip nl cluster-ips { 10.0.0.99 }\n"}
    assert out["unchanged"]  # the batch is atomic: the hairpin element of the refused batch is not there
    assert out["rules"] == [0, 2, None]
    assert out["binary_sent"] == ["nl2"]


def test_large_transactions_run_in_a_child_nft_small_ones_in_process(monkeypatch):
    """Memory: over ``LARGE_TRANSACTION`` the text goes to a child ``nft -f -`` (its memory
    is gone when it exits); smaller ones run in-process and are followed by malloc_trim."""
    from kubesvc.kernel import nftables

    calls = []
    monkeypatch.setattr(nftables, "LARGE_VIA", "child")
    monkeypatch.setattr(nftables, "run_sync", lambda argv, text: calls.append(("child", list(argv))))
    monkeypatch.setattr(nftables, "run_in_process", lambda argv, text: calls.append(("in-process", list(argv))))
    monkeypatch.setattr(nftables, "malloc_trim", lambda: calls.append(("trim",)))
    monkeypatch.setattr(nftables, "libnftables", lambda: object())
    nft = nftables.NFTables(in_process=True)
    nft.run_sync("add chain ip kube-proxy x\n")
    nft.run_sync("add chain ip kube-proxy x\n" + "# padding\n" * (nftables.LARGE_TRANSACTION // 10 + 1))
    assert calls == [("in-process", ["nft", "-f", "-"]), ("trim",), ("child", ["nft", "-f", "-"])]


def test_slots_read_as_the_dict_nft_lists_and_pack_as_their_text_does():
    """``Slots`` (an endpoint map's blocks, made without a string per slot) reads as the dict
    ``{"<slot>": "<address> . <port>"}``, writes the line's text, and packs to the bytes the
    text of the same elements packs to (that path is checked against the kernel above)."""
    from kubesvc.kernel import nftables_elements

    slots = nftables_elements.Slots()
    slots.add(8, (("10.0.0.1", 80), ("10.0.0.2", 8080)))
    slots.add(0, (("10.0.0.3", 53),))
    assert dict(slots.items()) == {"8": "10.0.0.1 . 80", "9": "10.0.0.2 . 8080", "0": "10.0.0.3 . 53"} == dict(slots)
    assert len(slots) == 3 and list(slots) == ["8", "9", "0"] and slots["9"] == "10.0.0.2 . 8080"
    for missing in ("10", "7", "08", "x", 8):
        assert missing not in slots
    assert slots.text() == "8 : 10.0.0.1 . 80, 9 : 10.0.0.2 . 8080, 0 : 10.0.0.3 . 53"
    joined = nftables_elements.Joined([slots, {"20": "10.0.0.4 . 443"}])
    assert dict(joined.items()) == {**dict(slots.items()), "20": "10.0.0.4 . 443"} and len(joined) == 4

    slot_map = SetType(("u32h",), ("ipv4", "port"))
    as_text = {"8": "10.0.0.1 . 80", "9": "10.0.0.2 . 8080", "0": "10.0.0.3 . 53"}
    assert list(nftables_elements.encode(slot_map, slots)) == list(nftables_elements.encode(slot_map, as_text))
    other = nftables_elements.Slots()
    other.add(20, (("10.0.0.4", 443),))
    assert (list(nftables_elements.encode(slot_map, nftables_elements.Joined([slots, other])))
            == list(nftables_elements.encode(slot_map, {**as_text, "20": "10.0.0.4 . 443"})))
