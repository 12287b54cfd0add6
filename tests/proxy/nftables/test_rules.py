"""Pure tests of the nftables transaction builder (``proxy/nftables/rules.py``) and naming:
what a sync writes, per case, and how partial syncs and the bookkeeping behave."""

from __future__ import annotations

import dataclasses
import random

import pytest

from kubesvc.proxy.nftables import rules
from kubesvc.proxy.proxier import fixed_inputs, full_sync_due
from kubesvc.proxy.nftables.naming import endpoint_name_base, hash_and_truncate, service_port_chain_name_base
from kubesvc.proxy.types import IPV6, ServicePortName
from tests.support.builders import TEST_NODE_NAME, ep, options, port, request

SVC = "service-ULMVA6XW-ns1/svc1/tcp/p80"
EXT = "external-ULMVA6XW-ns1/svc1/tcp/p80"
LOCAL = "local-ULMVA6XW-ns1/svc1/tcp/p80"
FW = "firewall-ULMVA6XW-ns1/svc1/tcp/p80"


def build(ports, opts=None, state=None, snapshot=None, now=0.0, **kw):
    """A sync from ``state`` (None: the first, full); returns the plan and its next state. The
    builder's request is full unless ``full=False`` (the shared proxier decides; see
    ``test_fixed_input_change_makes_sync_full``)."""
    req, opts = request(ports, **kw), opts or options()
    if state is None:
        state, req = rules.NftState(), dataclasses.replace(req, full=True)
    plan = rules.build_sync(req, opts, state, snapshot or rules.KernelSnapshot(), now)
    assert plan.full == req.full
    return plan, plan.next_state


def lines(plan) -> list[str]:
    return plan.text.splitlines()


def own_text(plan, opts=None, **kw) -> str:
    """The lines a full sync wrote beyond what it writes with no Services at all."""
    baseline = set(lines(build([], opts=opts, **kw)[0]))
    return "\n".join(x for x in lines(plan) if x not in baseline)


# -- naming -------------------------------------------------------------------------------------

@pytest.mark.parametrize("spn,protocol,expected", [
    (ServicePortName("ns1", "svc1", "p80", "TCP"), "tcp", "ULMVA6XW-ns1/svc1/tcp/p80"),
    (ServicePortName("ns2", "svc2", "p80", "TCP"), "tcp", "42NFTM6N-ns2/svc2/tcp/p80"),
], ids=["ns1-svc1", "ns2-svc2"])
def test_service_chain_name_base_matches_upstream(spn, protocol, expected):
    assert service_port_chain_name_base(spn, protocol) == expected


def test_long_names_are_truncated_with_hash_kept():
    name = hash_and_truncate("n" * 63 + "/" + "s" * 63 + "/tcp/" + "p" * 63 + "__" + "f" * 39 + "/65535")
    assert len(name) == 240 and name.endswith("...") and name[8] == "-"


def test_endpoint_name_base_matches_upstream():
    base = endpoint_name_base(ServicePortName("ns1", "svc1", "p80"), "tcp", "10.180.0.1", 80)
    assert base == "5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"


def test_endpoint_name_base_uses_dots_for_ipv6():
    base = endpoint_name_base(ServicePortName("ns1", "svc1", "p80"), "tcp", "fd00::1", 80)
    assert base.endswith("-ns1/svc1/tcp/p80__fd00..1/80") and ":" not in base


# -- fixed part ---------------------------------------------------------------------------------

# upstream pkg/proxy/nftables/proxier.go nftablesBaseChains: name, type, hook, priority
UPSTREAM_BASE_CHAINS = [
    ("filter-prerouting-pre-dnat", "filter", "prerouting", -110),
    ("filter-output-pre-dnat", "filter", "output", -110),
    ("filter-input", "filter", "input", 0),
    ("filter-forward", "filter", "forward", 0),
    ("filter-output", "filter", "output", 0),
    ("nat-prerouting", "nat", "prerouting", -100),
    ("nat-output", "nat", "output", -100),
    ("nat-postrouting", "nat", "postrouting", 100),
]

# upstream nftablesJumpChains, as rules
UPSTREAM_JUMPS = [
    "filter-input ct state new jump nodeport-endpoints-check",
    "filter-input ct state new jump service-endpoints-check",
    "filter-forward ct state new jump service-endpoints-check",
    "filter-output ct state new jump service-endpoints-check",
    "filter-prerouting-pre-dnat ct state new jump firewall-check",
    "filter-output-pre-dnat ct state new jump firewall-check",
    "nat-output jump services",
    "nat-prerouting jump services",
    "nat-postrouting jump masquerading",
    "filter-forward ct state new jump cluster-ips-check",
    "filter-output ct state new jump cluster-ips-check",
]


def test_fixed_part_has_upstream_base_chains_jumps_and_masquerading():
    opts = options(masquerade_bit=15)
    mark = opts.masquerade_mark
    assert mark == "0x00008000"
    assert options().masquerade_mark == "0x00004000"  # the default bit 14
    plan, _ = build([], opts=opts, service_cidrs=("172.30.0.0/16", "172.31.0.0/16"))
    text = plan.text
    base = [x for x in lines(plan) if " hook " in x]
    assert base == [f"add chain ip kube-proxy {name} {{ type {ctype} hook {hook} priority {prio} ; }}"
                    for name, ctype, hook, prio in UPSTREAM_BASE_CHAINS]
    assert 'add table ip kube-proxy { comment "rules for kube-proxy" ; }' in text
    assert "add chain ip kube-proxy filter-input\ndelete chain ip kube-proxy filter-input" in text  # first sync only
    jumps = [x.removeprefix("add rule ip kube-proxy ") for x in lines(plan) if " jump " in x and x.split()[4] in
             {name for name, *_ in UPSTREAM_BASE_CHAINS}]
    assert jumps == UPSTREAM_JUMPS
    assert "add rule ip kube-proxy mark-for-masquerade mark set mark or 0x00008000" in text
    assert "add rule ip kube-proxy masquerading mark and 0x00008000 == 0 return" in text
    assert "add rule ip kube-proxy masquerading mark set mark xor 0x00008000" in text
    assert "add rule ip kube-proxy masquerading masquerade fully-random" in text
    assert ("add rule ip kube-proxy masquerading ct status dnat ip saddr . ip daddr @hairpin-endpoints jump mark-for-masquerade"
            in text)
    assert 'ip daddr { 172.30.0.0/16, 172.31.0.0/16 } drop comment "Drop traffic to unallocated ClusterIPs"' in text
    assert 'ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"' in text
    assert "add rule ip kube-proxy reject-chain reject" in text


@pytest.mark.parametrize("nodeport_ips,services_rule,check_rule,nodeport_set", [
    (None, "fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports",
     "ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @no-endpoint-nodeports", "delete set ip kube-proxy nodeport-ips"),
    (("192.168.0.2", "127.0.0.1"), "ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports",
     "ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports", "add element ip kube-proxy nodeport-ips { 192.168.0.2 }"),
], ids=["match-all", "node-ips-loopback-skipped"])
def test_nodeport_addresses(nodeport_ips, services_rule, check_rule, nodeport_set):
    plan, _ = build([], nodeport_ips=nodeport_ips)
    assert f"add rule ip kube-proxy services {services_rule}" in plan.text
    assert f"add rule ip kube-proxy nodeport-endpoints-check {check_rule}" in plan.text
    assert nodeport_set in plan.text


def test_second_full_sync_does_not_recreate_base_chains():
    _, state = build([])
    plan, _ = build([], state=state)
    assert "delete chain ip kube-proxy filter-input" not in plan.text


# -- one Service port, per case -----------------------------------------------------------------

CIP = "172.30.0.41"
TWO = (ep("10.180.0.1", 8080), ep("10.180.0.2", 8080))

CASES = [
    ("cluster-ip-two-endpoints", port("ns1", "svc1", cluster_ip=CIP), TWO, {}, [
        "add element ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 : goto " + SVC + " }",
        f"add rule ip kube-proxy {SVC} ip daddr 172.30.0.41 tcp dport 80 ip saddr != 10.0.0.0/8 jump mark-for-masquerade",
        f"add rule ip kube-proxy {SVC} meta l4proto tcp dnat ip addr . port to numgen random mod 1048576 offset 0 map @endpoint-ranges-",
        "0-524287 : 10.180.0.1 . 8080, 524288-1048575 : 10.180.0.2 . 8080",
        "add element ip kube-proxy hairpin-endpoints { 10.180.0.1 . 10.180.0.1, 10.180.0.2 . 10.180.0.2 }",
        "add element ip kube-proxy cluster-ips { 172.30.0.41 }",
    ], [EXT, "no-endpoint-services {"]),
    ("single-endpoint-direct-dnat", port("ns1", "svc1", cluster_ip=CIP), TWO[:1], {}, [
        f"add rule ip kube-proxy {SVC} meta l4proto tcp dnat to 10.180.0.1:8080",
    ], ["numgen"]),
    ("no-endpoints-reject", port("ns1", "svc1", cluster_ip=CIP), (), {}, [
        'add element ip kube-proxy no-endpoint-services { 172.30.0.41 . tcp . 80 comment "ns1/svc1:p80" : goto reject-chain }',
    ], [SVC, "service-ips {"]),
    ("internal-local-no-local-drop", port("ns1", "svc1", cluster_ip=CIP, itp_local=True), TWO, {}, [
        'add element ip kube-proxy no-endpoint-services { 172.30.0.41 . tcp . 80 comment "ns1/svc1:p80" : drop }',
    ], [SVC, LOCAL]),
    ("internal-local-with-local", port("ns1", "svc1", cluster_ip=CIP, itp_local=True), (ep("10.180.0.1", 80, TEST_NODE_NAME),), {}, [
        f"goto {LOCAL}", f"add rule ip kube-proxy {LOCAL} ip daddr 172.30.0.41 tcp dport 80 ip saddr != 10.0.0.0/8 jump mark-for-masquerade",
    ], [f"chain ip kube-proxy {SVC}"]),
    ("masquerade-all", port("ns1", "svc1", cluster_ip=CIP), TWO, {"masquerade_all": True}, [
        f"add rule ip kube-proxy {SVC} ip daddr 172.30.0.41 tcp dport 80 jump mark-for-masquerade",
    ], ["saddr != 10.0.0.0/8"]),
    ("no-detector-no-masquerade-rule", port("ns1", "svc1", cluster_ip=CIP), TWO, {"cidr": ""}, [], ["jump mark-for-masquerade\n"]),
    ("nodeport-cluster", port("ns1", "svc1", cluster_ip=CIP, node_port=3001), TWO, {}, [
        f"add element ip kube-proxy service-nodeports {{ tcp . 3001 : goto {EXT} }}",
        f"add rule ip kube-proxy {EXT} jump mark-for-masquerade\nadd rule ip kube-proxy {EXT} goto {SVC}",
    ], ["no-endpoint-nodeports {"]),
    ("nodeport-local-with-local", port("ns1", "svc1", cluster_ip=CIP, node_port=3001, etp_local=True),
     (ep("10.180.0.1", 80, TEST_NODE_NAME), ep("10.180.0.2", 80)), {}, [
        f'add rule ip kube-proxy {EXT} ip saddr 10.0.0.0/8 goto {SVC} comment "short-circuit pod traffic"',
        f'add rule ip kube-proxy {EXT} fib saddr type local jump mark-for-masquerade comment "masquerade local traffic"',
        f'add rule ip kube-proxy {EXT} fib saddr type local goto {SVC} comment "short-circuit local traffic"',
        f"add rule ip kube-proxy {EXT} goto {LOCAL}",
        f"add rule ip kube-proxy {LOCAL} meta l4proto tcp dnat to 10.180.0.1:80",
    ], []),
    ("nodeport-local-without-local-drop", port("ns1", "svc1", cluster_ip=CIP, node_port=3001, etp_local=True), TWO, {}, [
        'add element ip kube-proxy no-endpoint-nodeports { tcp . 3001 comment "ns1/svc1:p80" : drop }',
        f"add element ip kube-proxy service-nodeports {{ tcp . 3001 : goto {EXT} }}",
    ], [f"goto {LOCAL}"]),
    ("nodeport-no-endpoints-reject", port("ns1", "svc1", cluster_ip=CIP, node_port=3001), (), {}, [
        'add element ip kube-proxy no-endpoint-nodeports { tcp . 3001 comment "ns1/svc1:p80" : goto reject-chain }',
    ], [EXT]),
    ("external-ip", port("ns1", "svc1", cluster_ip=CIP, external_ips=("192.168.99.11",)), TWO, {}, [
        f"192.168.99.11 . tcp . 80 : goto {EXT}",
    ], []),
    ("lb-source-ranges", port("ns1", "svc1", cluster_ip=CIP, lb_ips=("1.2.3.4",), source_ranges=("203.0.113.0/25",)), TWO, {}, [
        f"add element ip kube-proxy firewall-ips {{ 1.2.3.4 . tcp . 80 : goto {FW} }}",
        f"add rule ip kube-proxy {FW} ip saddr != {{ 203.0.113.0/25 }} drop",
        f"1.2.3.4 . tcp . 80 : goto {EXT}",
    ], []),
    ("lb-source-ranges-containing-node-ip", port("ns1", "svc1", cluster_ip=CIP, lb_ips=("1.2.3.4",),
                                                 source_ranges=("192.168.0.0/24",)), TWO, {"node_ip": "192.168.0.2"}, [
        f"add rule ip kube-proxy {FW} ip saddr != {{ 192.168.0.0/24, 1.2.3.4 }} drop",
    ], []),
    ("udp-port", port("ns1", "dns", "dns", 53, "UDP", cluster_ip=CIP), (ep("10.180.0.1", 53),), {}, [
        "172.30.0.41 . udp . 53 : goto service-", "meta l4proto udp dnat to 10.180.0.1:53",
    ], []),
]


@pytest.mark.parametrize("sp,eps,kw,present,absent", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_service_port(sp, eps, kw, present, absent):
    opt_kw = {k: v for k, v in kw.items() if k in ("masquerade_all", "cidr")}
    req_kw = {k: v for k, v in kw.items() if k == "node_ip"}
    opts = options(**opt_kw)
    plan, _ = build([(sp, eps)], opts=opts, **req_kw)
    own = own_text(plan, opts, **req_kw)
    for text in present:
        assert text in own, text
    for text in absent:
        assert text not in own, text


def test_no_local_counts():
    plan, _ = build([
        (port("ns", "a", cluster_ip="172.30.0.1", itp_local=True), TWO),
        (port("ns", "b", cluster_ip="172.30.0.2", node_port=3001, etp_local=True), TWO),
        (port("ns", "c", cluster_ip="172.30.0.3", node_port=3002, etp_local=True), ()),  # none at all: reject, not counted
    ])
    assert (plan.no_local_internal, plan.no_local_external) == (1, 1)


def test_client_ip_affinity_rules_and_sets():
    sp = port("ns1", "svc1", cluster_ip=CIP, affinity_seconds=300)
    plan, state = build([(sp, TWO)])
    s1 = "affinity-" + endpoint_name_base(sp.name, "tcp", "10.180.0.1", 8080)
    s2 = "affinity-" + endpoint_name_base(sp.name, "tcp", "10.180.0.2", 8080)
    assert s1.startswith("affinity-") and s1.endswith("-ns1/svc1/tcp/p80__10.180.0.1/8080")
    assert f"add set ip kube-proxy {s1} {{ type ipv4_addr ; flags dynamic,timeout ; timeout 300s ; }}" in plan.text
    rule_lines = [x for x in lines(plan) if x.startswith(f"add rule ip kube-proxy {SVC}")]
    assert rule_lines[1:] == [
        f"add rule ip kube-proxy {SVC} ip saddr @{s1} update @{s1} {{ ip saddr }} meta l4proto tcp dnat to 10.180.0.1:8080",
        f"add rule ip kube-proxy {SVC} ip saddr @{s2} update @{s2} {{ ip saddr }} meta l4proto tcp dnat to 10.180.0.2:8080",
        f"add rule ip kube-proxy {SVC} numgen random mod 2 0 update @{s1} {{ ip saddr }} meta l4proto tcp dnat to 10.180.0.1:8080",
        f"add rule ip kube-proxy {SVC} update @{s2} {{ ip saddr }} meta l4proto tcp dnat to 10.180.0.2:8080",
    ]
    # the endpoint goes: its set is deleted (after the chain was flushed), the other stays
    plan2, _ = build([(sp, TWO[1:])], state=state, full=False, changed={"ns1/svc1"})
    text = plan2.text
    assert text.index(f"flush chain ip kube-proxy {SVC}") < text.index(f"delete set ip kube-proxy {s1}")
    assert f"delete set ip kube-proxy {s2}" not in text


def test_ipv6_syntax():
    sp = port("ns1", "svc1", cluster_ip="fd00:30::41")
    plan, _ = build([(sp, (ep("fd00:1::1", 80), ep("fd00:1::2", 80)))], opts=options("fd00:1::/64", family=IPV6),
                    service_cidrs=("fd00:30::/112",))
    text = plan.text
    assert "add table ip6 kube-proxy" in text
    assert "ip6 daddr fd00:30::41 tcp dport 80 ip6 saddr != fd00:1::/64 jump mark-for-masquerade" in text
    assert "meta l4proto tcp dnat ip6 addr . port to numgen random mod 1048576 offset 0 map @endpoint-ranges-" in text
    assert "typeof numgen random mod 1 : ip6 daddr . tcp dport ; flags interval ;" in text
    assert "fd00:1::1 . fd00:1::1" in text and "type ipv6_addr . ipv6_addr" in text
    assert "ip6 daddr { fd00:30::/112 } drop" in text


# -- partial syncs and bookkeeping --------------------------------------------------------------

def two_services(eps_a=TWO, eps_b=TWO[:1]):
    return [(port("ns1", "svc1", cluster_ip=CIP), eps_a), (port("ns2", "svc2", cluster_ip="172.30.0.42"), eps_b)]


def test_partial_sync_touches_only_changed_service():
    _, state = build(two_services())
    plan, _ = build(two_services(eps_a=TWO[:1]), state=state, full=False, changed={"ns1/svc1"})
    assert not plan.full
    assert "svc2" not in plan.text
    assert "add table" not in plan.text
    # one chain rewritten (masquerade rule + direct DNAT); two slots and one hairpin element deleted
    assert plan.written == {"chains": 1, "rules": 2, "elements": 3}
    assert "delete element ip kube-proxy hairpin-endpoints { 10.180.0.2 . 10.180.0.2 }" in plan.text


def test_unchanged_partial_sync_writes_nothing():
    _, state = build(two_services())
    plan, _ = build(two_services(), state=state, full=False, changed=set())
    assert plan.text.strip() == "" and plan.written == {"chains": 0, "rules": 0, "elements": 0}


def test_removed_service_elements_deleted_chain_flushed_and_marked_stale():
    _, state = build(two_services())
    plan, state = build(two_services()[:1], state=state, full=False, changed={"ns2/svc2"}, now=5.0)
    chain = "service-" + service_port_chain_name_base(ServicePortName("ns2", "svc2", "p80"), "tcp")
    assert f"flush chain ip kube-proxy {chain}" in plan.text
    assert f"add chain ip kube-proxy {chain}" not in plan.text
    assert "delete element ip kube-proxy service-ips { 172.30.0.42 . tcp . 80 }" in plan.text
    assert "delete element ip kube-proxy cluster-ips { 172.30.0.42 }" in plan.text
    assert state.stale_chains == {chain: 5.0}
    assert state.due_stale_chains(5.5 - 1.0) == [] and state.due_stale_chains(6.5 - 1.0) == [chain]
    assert rules.delete_chains_text(4, [chain]) == f"delete chain ip kube-proxy {chain}\n"
    # the Service comes back before the chain was deleted: no longer stale
    _, state = build(two_services(), state=state, full=False, changed={"ns2/svc2"})
    assert state.stale_chains == {}


def test_shared_hairpin_element_stays_until_its_last_owner_goes():
    shared = (ep("10.180.0.9", 8080),)
    _, state = build(two_services(eps_a=shared, eps_b=shared))
    plan, state = build(two_services(eps_a=TWO, eps_b=shared), state=state, full=False, changed={"ns1/svc1"})
    assert "10.180.0.9 . 10.180.0.9" not in plan.text
    plan, state = build(two_services(eps_a=TWO, eps_b=TWO[:1]), state=state, full=False, changed={"ns2/svc2"})
    assert "delete element ip kube-proxy hairpin-endpoints { 10.180.0.9 . 10.180.0.9 }" in plan.text


def test_slot_block_reused_when_endpoint_count_stays_within_it():
    """Above RANGE_MAX_ENDPOINTS (exact slots): a block is kept while the count fits it."""
    many = tuple(ep(f"10.180.0.{i}", 80) for i in range(1, 33))  # 32: a block of 32 slots
    _, state = build([(port("ns1", "svc1", cluster_ip=CIP), many), (port("ns2", "svc2", cluster_ip="172.30.0.42"), TWO)])
    block = state.services["ns1/svc1"].slots[SVC]
    assert block[1] == 32 and block[2] == rules.endpoint_map(SVC)
    _, state = build([(port("ns1", "svc1", cluster_ip=CIP), many[:31]), (port("ns2", "svc2", cluster_ip="172.30.0.42"), TWO)],
                     state=state, full=False, changed={"ns1/svc1"})
    assert state.services["ns1/svc1"].slots[SVC] == block
    more = many + (ep("10.180.1.1", 80),)
    plan, state = build([(port("ns1", "svc1", cluster_ip=CIP), more), (port("ns2", "svc2", cluster_ip="172.30.0.42"), TWO)],
                        state=state, full=False, changed={"ns1/svc1"})
    new_block = state.services["ns1/svc1"].slots[SVC]
    assert new_block != block and new_block[1] == 64
    assert f"numgen random mod 33 offset {new_block[0]} map @{rules.endpoint_map(SVC)}" in plan.text



def test_a_replaced_endpoint_takes_the_slot_of_the_one_it_replaces():
    """Slots (past 16 endpoints) stay with their endpoints: a Pod replaced in a Service of 20
    rewrites its one slot, not every slot after it in sorted order; then one removed leaves its
    slot to the endpoint of the block's last slot, which the smaller count no longer reaches."""
    ips = [f"10.180.1.{i}" for i in range(10, 30)]  # sorted as text and as numbers alike
    svc = port("ns1", "svc1", cluster_ip=CIP)
    emap = rules.endpoint_map(SVC)
    _, state = build([(svc, tuple(ep(ip, 8080) for ip in ips))])
    base = state.services["ns1/svc1"].slots[SVC][0]
    assert state.held(emap) == {str(base + i): f"{ip} . 8080" for i, ip in enumerate(ips)}

    replaced = ips[:5] + ["10.180.1.99"] + ips[6:]  # 10.180.1.15 replaced
    plan, state = build([(svc, tuple(ep(ip, 8080) for ip in replaced))], state=state, full=False, changed={"ns1/svc1"})
    assert f"delete element ip kube-proxy {emap} {{ {base + 5} }}" in lines(plan)
    assert f"add element ip kube-proxy {emap} {{ {base + 5} : 10.180.1.99 . 8080 }}" in lines(plan)
    assert plan.written["elements"] == 4  # that slot, out and in; the hairpin pair, out and in
    assert state.held(emap) == {str(base + i): f"{ip} . 8080" for i, ip in enumerate(replaced)}

    fewer = [ip for ip in replaced if ip != "10.180.1.12"]  # 19 endpoints: slots base..base+18
    plan, state = build([(svc, tuple(ep(ip, 8080) for ip in fewer))], state=state, full=False, changed={"ns1/svc1"})
    expected = dict(enumerate(replaced))
    expected[2] = expected.pop(19)  # 10.180.1.29 moves from the last slot into the free one
    assert state.held(emap) == {str(base + i): f"{ip} . 8080" for i, ip in expected.items()}
    assert f"numgen random mod 19 offset {base} map @{emap}" in plan.text


def test_a_replaced_endpoint_takes_the_range_of_the_one_it_replaces():
    """The same for 2..16 endpoints (ranges): with the count unchanged, the replacement takes its
    predecessor's range; only that range's value changes."""
    ips = ["10.180.1.10", "10.180.1.11", "10.180.1.12", "10.180.1.13"]
    svc = port("ns1", "svc1", cluster_ip=CIP)
    emap = rules.endpoint_range_map(SVC)
    _, state = build([(svc, tuple(ep(ip, 8080) for ip in ips))])
    base = state.services["ns1/svc1"].slots[SVC][0]
    quarter = (1 << 20) // 4
    ranges = [f"{base + i * quarter}-{base + (i + 1) * quarter - 1}" for i in range(4)]
    assert state.held(emap) == {r: f"{ip} . 8080" for r, ip in zip(ranges, ips)}
    replaced = ["10.180.1.10", "10.180.1.99", "10.180.1.12", "10.180.1.13"]  # .11 replaced by .99 (sorts last)
    plan, state = build([(svc, tuple(ep(ip, 8080) for ip in sorted(replaced)))], state=state, full=False, changed={"ns1/svc1"})
    assert state.held(emap) == {r: f"{ip} . 8080" for r, ip in zip(ranges, replaced)}
    assert f"add element ip kube-proxy {emap} {{ {ranges[1]} : 10.180.1.99 . 8080 }}" in lines(plan)
    assert plan.written["elements"] == 4  # that range, out and in; the hairpin pair, out and in

@pytest.mark.parametrize("before,after", [(2, 3), (3, 2), (2, 16), (16, 9)])
def test_an_endpoint_count_change_up_to_16_changes_range_elements_only(before, after):
    """2..16 endpoints: the chain's fixed block of an interval map, one range per endpoint, so
    a changed count rewrites no rule (a rule would make the kernel validate the whole table)."""
    eps = tuple(ep(f"10.180.0.{i}", 80) for i in range(1, 17))
    _, state = build([(port("ns1", "svc1", cluster_ip=CIP), eps[:before])])
    block = state.services["ns1/svc1"].slots[SVC]
    assert block[2] == rules.endpoint_range_map(SVC) and block[1] == 1 << 20
    plan, state = build([(port("ns1", "svc1", cluster_ip=CIP), eps[:after])], state=state, full=False, changed={"ns1/svc1"})
    assert state.services["ns1/svc1"].slots[SVC] == block
    assert all(line.startswith(("add element ", "delete element ")) for line in lines(plan)), plan.text
    base, size = block[0], 1 << 20
    ranges = state.held(block[2])
    # every endpoint once, in order, the block covered without gap, shares within one number
    bounds = sorted((int(k.split("-")[0]), int(k.split("-")[1]), v) for k, v in ranges.items())
    assert sorted(v for *_, v in bounds) == sorted(f"10.180.0.{i} . 80" for i in range(1, after + 1))
    assert bounds[0][0] == base and bounds[-1][1] == base + size - 1
    assert all(b[1] + 1 == c[0] for b, c in zip(bounds, bounds[1:]))
    sizes = {high - low + 1 for low, high, _ in bounds}
    assert sizes <= {size // after, size // after + 1}


@pytest.mark.parametrize("change", ["nodeport_ips", "service_cidrs", "node_ip"], ids=lambda c: c)
def test_fixed_input_change_makes_sync_full(change):
    kw = {"nodeport_ips": ("192.168.0.2",), "service_cidrs": ("172.30.0.0/16",), "node_ip": "192.168.0.2"}[change]
    first = request(two_services())
    assert full_sync_due(request(two_services(), full=False, changed=set(), **{change: kw}), False, 0.0, 3600.0,
                         fixed_inputs(first))  # the shared proxier's decision
    _, state = build(two_services())
    plan, _ = build(two_services(), state=state, changed=set(), **{change: kw})
    assert plan.full and "add table" in plan.text


def test_a_plan_leaves_the_previous_state_alone():
    _, state = build(two_services())
    services, kernel = dict(state.services), {c: state.held(c) for c in rules.CONTAINERS}
    owners = {c: {k: (set(o) if isinstance(o, set) else o) for k, o in state.owned(c).items()} for c in rules.CONTAINERS}
    chains, allocators = set(state.chains), {m: (a.next, {c: list(f) for c, f in a.free.items()}) for m, a in state.allocators.items()}
    plan, after = build(two_services(eps_a=TWO[:1], eps_b=()), state=state, full=False, changed={"ns1/svc1", "ns2/svc2"})
    assert plan.text
    assert dict(state.services) == services and {c: state.held(c) for c in rules.CONTAINERS} == kernel
    assert {c: state.owned(c) for c in rules.CONTAINERS} == owners and set(state.chains) == chains
    assert {m: (a.next, a.free) for m, a in state.allocators.items()} == allocators
    assert after.services["ns1/svc1"] is not services["ns1/svc1"]


def test_full_sync_reconciles_against_snapshot():
    _, state = build(two_services())
    kernel = {c: state.held(c) for c in rules.CONTAINERS}
    kernel[rules.CLUSTER_IPS]["172.30.9.9"] = ""  # someone else's element
    del kernel[rules.SERVICE_IPS][f"{CIP} . tcp . 80"]  # lost
    kernel[rules.NO_ENDPOINT_SERVICES] = None  # unreadable
    snapshot = rules.KernelSnapshot(chains=["services", "old-base-chain", SVC, "service-XXXXXXXX-gone/x/tcp/p"],
                                    sets=["affinity-old"], elements=kernel)
    plan, state = build(two_services(), state=rules.NftState(), snapshot=snapshot, now=7.0)
    text = plan.text
    assert "delete element ip kube-proxy cluster-ips { 172.30.9.9 }" in text
    assert f"add element ip kube-proxy service-ips {{ {CIP} . tcp . 80 : goto {SVC} }}" in text
    assert "flush map ip kube-proxy no-endpoint-services" in text
    assert "hairpin-endpoints" not in text.split("add rule")[-1]  # present elements are not re-added
    assert "flush chain ip kube-proxy old-base-chain" in text
    assert state.stale_chains == {"service-XXXXXXXX-gone/x/tcp/p": 7.0}
    assert "delete set ip kube-proxy affinity-old" in text


def test_transaction_phases_are_ordered():
    _, state = build(two_services())
    plan, _ = build(two_services(eps_a=(), eps_b=TWO), state=state, full=False, changed={"ns1/svc1", "ns2/svc2"})
    kinds = [x.split(" ")[0] + " " + x.split(" ")[1] for x in lines(plan)]
    # element deletions, then chains (created or flushed), then rules, then element additions
    phases = [{"delete element"}, {"add chain", "flush chain"}, {"add rule"}, {"add element"}]
    spans = []
    for phase in phases:
        at = [i for i, k in enumerate(kinds) if k in phase]
        assert at, (phase, kinds)  # every phase is exercised
        spans.append((min(at), max(at)))
    for later in range(1, len(spans)):
        for earlier in range(later):
            assert spans[later][0] > spans[earlier][1], (phases[earlier], phases[later], kinds)


def test_objects_totals():
    plan, state = build(two_services())
    objects = state.objects()
    # 8 base chains, 8 fixed chains (services, masquerading, ...), one chain per Service
    assert objects["chains"] == 8 + 8 + 2
    # cluster-ips 2, service-ips 2, hairpin 2 (10.180.0.1 is shared), slots 2
    assert objects["elements"] == 8
    fixed_rules = sum(1 for x in lines(build([])[0]) if x.startswith("add rule "))
    # svc1: masquerade rule + numgen DNAT; svc2: masquerade rule + direct DNAT
    assert objects["rules"] == fixed_rules + 4
    assert objects["rules"] == sum(1 for x in lines(plan) if x.startswith("add rule "))
    assert plan.written["chains"] == objects["chains"]


@pytest.mark.parametrize("protocol", ["UDP", "SCTP"])
def test_non_tcp_endpoints_use_their_own_protocols_endpoint_maps(protocol):
    """nft 1.0.6 cannot reuse a map with ``th dport`` data from the kernel; each protocol has
    its own shards, and a UDP Service moving between endpoint counts keeps working."""
    proto = protocol.lower()
    dns = port("ns1", "dns", "dns", 53, protocol, cluster_ip="172.30.0.10")
    plan, state = build([(dns, (ep("10.180.0.1", 5353), ep("10.180.0.2", 5353)))])
    (chain,) = state.services["ns1/dns"].slots
    emap = rules.endpoint_range_map(chain, proto)
    assert emap.startswith(f"endpoint-ranges-{proto}-") and rules.endpoint_map(chain, proto).startswith(f"endpoints-{proto}-")
    assert f"typeof numgen random mod 1 : ip daddr . {proto} dport" in plan.text
    assert f"meta l4proto {proto} dnat ip addr . port to numgen random mod 1048576 offset 0 map @{emap}" in plan.text
    plan, state = build([(dns, (ep("10.180.0.3", 5353), ep("10.180.0.4", 5353), ep("10.180.0.5", 5353)))],
                        state=state, full=False, changed={"ns1/dns"})
    assert f"add element ip kube-proxy {emap} {{ " in plan.text and "add rule" not in plan.text


def test_endpoint_replaced_within_the_slot_block_changes_only_elements():
    _, state = build(two_services())
    replaced = (ep("10.180.0.1", 8080), ep("10.180.0.9", 8080))
    plan, _ = build(two_services(eps_a=replaced), state=state, full=False, changed={"ns1/svc1"})
    assert "flush chain" not in plan.text and "add rule" not in plan.text
    assert "10.180.0.9 . 8080" in plan.text  # the new endpoint's slot
    assert plan.written["chains"] == 0 and plan.written["rules"] == 0


def test_partial_plans_end_where_one_full_plan_does():
    """Random endpoint and Service changes applied as partial plans, each from the last one's
    committed state: the bookkeeping ends where one full plan of the same desired state does
    (what the kernel holds, who owns each element, the chains in use)."""
    rng = random.Random(16)

    def endpoints():
        return tuple(sorted({ep(f"10.180.{rng.randrange(3)}.{rng.randrange(1, 6)}", 8080) for _ in range(rng.randrange(5))},
                            key=lambda e: e.endpoint))

    desired = {f"svc{i}": (port("ns1", f"svc{i}", cluster_ip=f"172.30.0.{i + 1}", affinity_seconds=60 if i % 4 == 0 else None),
                           endpoints()) for i in range(8)}
    _, state = build(list(desired.values()))
    for _ in range(40):
        name = f"svc{rng.randrange(10)}"
        if name in desired and rng.random() < 0.2:
            del desired[name]
        else:
            desired[name] = (port("ns1", name, cluster_ip=f"172.30.0.{int(name[3:]) + 1}"), endpoints())
        _, state = build(list(desired.values()), state=state, full=False, changed={f"ns1/{name}"})
    _, fresh = build(list(desired.values()))
    for c in rules.CONTAINERS:
        assert set(state.held(c)) == set(state.owned(c)), c  # the kernel holds what someone owns
        if c in rules.ENDPOINT_MAP_PROTOCOLS:  # slot numbers depend on the history; the endpoints do not
            assert sorted(state.held(c).values()) == sorted(fresh.held(c).values()), c
        else:
            assert state.held(c) == fresh.held(c) and state.owned(c) == fresh.owned(c), c
    assert set(state.services) == set(fresh.services)
    assert {c for r in state.services.values() for c in r.chains} == {c for r in fresh.services.values() for c in r.chains}
