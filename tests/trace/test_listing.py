"""The live table as the kernel lists it (``nft -j list table`` + ``nft list table``, excerpts of
what nft 1.0.6 printed for our layout) walked by ``proxy.trace.nftables``: the kernel's own
rule forms (``meta mark & … == 0x00000000``, ``meta mark set meta mark | …``, ``dnat ip to
numgen … map @m``) are read, and the probabilities come from the interval map's ranges."""

from __future__ import annotations

from kubesvc.proxy.trace.nftables import table_from_listing, trace

TEXT = """table ip kube-proxy {
	comment "rules for kube-proxy"
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 172.30.0.10 . tcp . 80 : goto service-WHF35ZYN-ns/web/tcp/p80 }
	}

	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}

	chain nat-postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		jump masquerading
	}

	chain services {
		ip daddr . meta l4proto . th dport vmap @service-ips
	}

	chain masquerading {
		meta mark & 0x00004000 == 0x00000000 return
		meta mark set meta mark ^ 0x00004000
		masquerade fully-random
	}

	chain mark-for-masquerade {
		comment "a chain comment is not a rule"
		meta mark set meta mark | 0x00004000
	}

	chain service-WHF35ZYN-ns/web/tcp/p80 {
		ip daddr 172.30.0.10 tcp dport 80 ip saddr != 10.1.0.0/16 jump mark-for-masquerade
		meta l4proto tcp dnat ip to numgen random mod 1048576 map @endpoint-ranges-50
	}
}
"""

OBJS = [
    {"metainfo": {"version": "1.0.6"}},
    {"table": {"family": "ip", "name": "kube-proxy", "handle": 1}},
    {"map": {"family": "ip", "name": "service-ips", "table": "kube-proxy", "type": ["ipv4_addr", "inet_proto", "inet_service"],
             "map": "verdict", "elem": [[{"concat": ["172.30.0.10", "tcp", 80]}, {"goto": {"target": "service-WHF35ZYN-ns/web/tcp/p80"}}]]}},
    {"map": {"family": "ip", "name": "endpoint-ranges-50", "table": "kube-proxy", "type": "integer", "map": "ipv4_addr . inet_service",
             "flags": ["interval"], "elem": [[{"range": [0, 262143]}, {"concat": ["10.1.1.2", 8080]}],
                                             [{"range": [262144, 1048575]}, {"concat": ["10.1.2.2", 8080]}]]}},
    {"chain": {"family": "ip", "table": "kube-proxy", "name": "nat-prerouting", "type": "nat", "hook": "prerouting", "prio": -100}},
    {"chain": {"family": "ip", "table": "kube-proxy", "name": "nat-postrouting", "type": "nat", "hook": "postrouting", "prio": 100}},
    {"chain": {"family": "ip", "table": "kube-proxy", "name": "services"}},
    {"chain": {"family": "ip", "table": "kube-proxy", "name": "masquerading"}},
    {"chain": {"family": "ip", "table": "kube-proxy", "name": "mark-for-masquerade"}},
    {"chain": {"family": "ip", "table": "kube-proxy", "name": "service-WHF35ZYN-ns/web/tcp/p80"}},
]


def test_the_listing_becomes_a_table():
    table = table_from_listing(OBJS, TEXT)
    assert table.chains["nat-prerouting"].base == ("nat", "prerouting", -100)
    assert [r.text for r in table.chains["mark-for-masquerade"].rules] == ["meta mark set meta mark | 0x00004000"]
    assert table.sets["endpoint-ranges-50"].flags == ("interval",)
    assert {k: e.value for k, e in table.sets["endpoint-ranges-50"].elements.items()} == {
        "0-262143": "10.1.1.2 . 8080", "262144-1048575": "10.1.2.2 . 8080"}
    assert table_from_listing([], "") is None


def test_a_walk_through_the_kernels_forms():
    walk = trace(table_from_listing(OBJS, TEXT), "192.168.50.2", "tcp", "172.30.0.10", 80, ("192.168.50.1",))
    assert walk.verdict == "DNAT" and walk.masquerade
    assert walk.candidates == [("10.1.1.2:8080", 0.25), ("10.1.2.2:8080", 0.75)]
    assert [(s["hook"], s["chain"]) for s in walk.steps if s["rule"] is None] == [
        ("prerouting", "nat-prerouting"), ("prerouting", "services"), ("prerouting", "service-WHF35ZYN-ns/web/tcp/p80"),
        ("prerouting", "mark-for-masquerade"), ("postrouting", "nat-postrouting"), ("postrouting", "masquerading")]


def test_from_a_pod_no_masquerade():
    walk = trace(table_from_listing(OBJS, TEXT), "10.1.3.2", "tcp", "172.30.0.10", 80, ("192.168.50.1",))
    assert walk.verdict == "DNAT" and not walk.masquerade


def test_not_ours():
    walk = trace(table_from_listing(OBJS, TEXT), "192.168.50.2", "tcp", "172.30.0.99", 80, ("192.168.50.1",))
    assert walk.verdict == "" and walk.candidates == []


def test_the_fake_lists_text_the_tracer_reads():
    """The fake's ``list_table_text`` (kernel.fake.nftables) gives the same walk as its own table."""
    import asyncio

    from kubesvc.kernel.fake.nftables import FakeKernel, FakeNFTables
    fake = FakeNFTables(4, kernel=FakeKernel())
    fake.run_sync("add table ip kube-proxy\n"
                  "add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }\n"
                  "add chain ip kube-proxy svc\n"
                  "add rule ip kube-proxy nat-prerouting ip daddr 172.30.0.10 tcp dport 80 jump svc\n"
                  "add rule ip kube-proxy svc meta l4proto tcp dnat to 10.1.1.2:8080\n")
    table = table_from_listing(asyncio.run(fake.list_table()), asyncio.run(fake.list_table_text()))
    walk = trace(table, "192.168.50.2", "tcp", "172.30.0.10", 80)
    assert walk.verdict == "DNAT" and walk.candidates == [("10.1.1.2:8080", 1.0)]
