"""``IptablesBackend`` and ``cleanup_family`` (``cleanup_leftovers`` per family) on the fake kernel: jump rules, full vs partial,
failures and their metrics, stale chains, the canary monitor, cleanup."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from kubesvc.kernel.exec import CleanupFailed, CommandFailed
from kubesvc.kernel.fake.iptables import FakeIptablesSync, parse_rule, share_state
from kubesvc.proxy.backend import SyncFailed
from kubesvc.proxy.iptables.proxier import CANARY_TABLES, cleanup_family
from kubesvc.proxy.iptables.rules import JUMP_CHAINS, KUBE_PROXY_CANARY, build_restore, cleanup_input
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.types import IPV6
from tests.proxy.iptables.scenario import fake_backend
from tests.support.builders import Cluster, ep, port, spn


def sample(metrics, name, **labels):
    return metrics.registry.get_sample_value(f"kubeproxy_{name}", labels) or 0.0


def jumps(ipt, table, chain):
    return [r.jump.value for r in ipt.rules(table, chain)]


def cluster_with_one_service() -> Cluster:
    c = Cluster().add(port("ns1", "svc1", cluster_ip="172.30.0.41"))
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.1"))
    return c


async def test_full_sync_installs_jump_rules_prepended():
    backend, ipt = fake_backend()
    ipt.ensure_rule_sync("-A", "filter", "INPUT", "-j", "ACCEPT")  # someone else's rule stays last
    await backend.run_sync(cluster_with_one_service().request())
    assert jumps(ipt, "filter", "INPUT") == ["KUBE-FIREWALL", "KUBE-PROXY-FIREWALL", "KUBE-NODEPORTS", "KUBE-EXTERNAL-SERVICES", "ACCEPT"]
    assert jumps(ipt, "filter", "FORWARD") == ["KUBE-PROXY-FIREWALL", "KUBE-FORWARD", "KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES"]
    assert jumps(ipt, "filter", "OUTPUT") == ["KUBE-FIREWALL", "KUBE-PROXY-FIREWALL", "KUBE-SERVICES"]
    assert jumps(ipt, "nat", "PREROUTING") == ["KUBE-SERVICES"]
    assert jumps(ipt, "nat", "OUTPUT") == ["KUBE-SERVICES"]
    assert jumps(ipt, "nat", "POSTROUTING") == ["KUBE-POSTROUTING"]
    rule = ipt.rules("filter", "INPUT")[3]
    assert rule.raw == ('-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" '
                        "-j KUBE-EXTERNAL-SERVICES")
    # a second full sync adds nothing
    await backend.run_sync(cluster_with_one_service().request(full=True))
    assert len(ipt.rules("filter", "INPUT")) == 5


async def test_partial_sync_skips_jump_rules_full_sync_repairs_them():
    backend, ipt = fake_backend()
    c = cluster_with_one_service()
    await backend.run_sync(c.request())
    ipt.tables["nat"]["PREROUTING"].clear()
    result = await backend.run_sync(c.request())
    assert not result.full
    assert jumps(ipt, "nat", "PREROUTING") == []
    result = await backend.run_sync(c.request(full=True))
    assert result.full
    assert jumps(ipt, "nat", "PREROUTING") == ["KUBE-SERVICES"]


async def test_first_sync_is_full_whatever_the_request_says():
    backend, ipt = fake_backend()
    result = await backend.run_sync(cluster_with_one_service().request(full=False))
    assert result.full
    assert ipt.chain_exists_sync("nat", "KUBE-SVC-XPGD46QRK7WJZT7O")


async def test_partial_sync_writes_only_changed_services_but_counts_all():
    metrics = ProxyMetrics()
    backend, ipt = fake_backend(metrics=metrics)
    c = cluster_with_one_service()
    c.add(port("ns2", "svc2", cluster_ip="172.30.0.42"))
    c.set_endpoints(spn("ns2", "svc2"), ep("10.180.0.2"), ep("10.180.0.3"))
    await backend.run_sync(c.request())
    total = sample(metrics, "sync_proxy_rules_iptables_total", table="nat", ip_family="IPv4")
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.9"))
    result = await backend.run_sync(c.request())
    assert "KUBE-SVC-XPGD46QRK7WJZT7O" in backend.mode.ipt.restores[-1]
    assert "KUBE-SVC-GNZBNJ2PO5MGZ6GT -" not in backend.mode.ipt.restores[-1]  # svc2's chains not written
    assert "-A KUBE-SERVICES -m comment --comment \"ns2/svc2:p80 cluster IP\"" in backend.mode.ipt.restores[-1]
    assert sample(metrics, "sync_proxy_rules_iptables_total", table="nat", ip_family="IPv4") == total
    assert sample(metrics, "sync_proxy_rules_iptables_last", table="nat", ip_family="IPv4") == result.written["nat"] < total
    assert result.written["filter"] == sample(metrics, "sync_proxy_rules_iptables_last", table="filter", ip_family="IPv4")
    # svc2's chains are still in place and still used
    assert len(ipt.rules("nat", "KUBE-SVC-GNZBNJ2PO5MGZ6GT")) == 3
    assert not ipt.chain_exists_sync("nat", "KUBE-SEP-SXIVWICOYRO3J4NJ")  # the old svc1 endpoint went stale


@pytest.mark.parametrize("full", [True, False], ids=["full", "partial"])
async def test_restore_failure_counts_and_forces_full(full):
    metrics = ProxyMetrics()
    backend, ipt = fake_backend(metrics=metrics)
    c = cluster_with_one_service()
    await backend.run_sync(c.request())
    ipt.fail_next_restore = "iptables-restore: line 3 failed"
    with pytest.raises(SyncFailed, match="line 3 failed"):
        await backend.run_sync(c.request(full=full))
    assert backend.need_full_sync
    assert sample(metrics, "sync_proxy_rules_iptables_restore_failures_total", ip_family="IPv4") == 1
    assert sample(metrics, "sync_proxy_rules_iptables_partial_restore_failures_total", ip_family="IPv4") == (0 if full else 1)
    result = await backend.run_sync(c.request(full=False))
    assert result.full and not backend.need_full_sync


async def test_jump_rule_failure_is_a_failed_sync():
    metrics = ProxyMetrics()
    backend, ipt = fake_backend(metrics=metrics)

    async def broken(*args):
        raise CommandFailed(("iptables", "-N"), 4, "", "Another app is currently holding the xtables lock")
    ipt.ensure_chain = broken
    with pytest.raises(SyncFailed, match="xtables lock"):
        await backend.run_sync(cluster_with_one_service().request())
    assert sample(metrics, "sync_proxy_rules_iptables_restore_failures_total", ip_family="IPv4") == 1
    assert ipt.restores == []


async def test_failed_save_skips_stale_cleanup_only():
    backend, ipt = fake_backend()
    c = cluster_with_one_service()
    await backend.run_sync(c.request())
    real_save = ipt.save

    async def broken(table):
        raise CommandFailed(("iptables-save",), 1, "", "boom")
    ipt.save = broken
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.9"))
    result = await backend.run_sync(c.request(full=True))
    assert result.full
    assert "-X " not in backend.mode.ipt.restores[-1]
    assert ipt.chain_exists_sync("nat", "KUBE-SEP-SXIVWICOYRO3J4NJ")  # stale, kept for now
    ipt.save = real_save
    await backend.run_sync(c.request())  # the next sync, partial, deletes it
    assert not ipt.chain_exists_sync("nat", "KUBE-SEP-SXIVWICOYRO3J4NJ")


async def test_only_full_syncs_list_the_nat_table():
    """A partial sync runs iptables-restore alone: it takes the per-Service chains from the
    last successful sync instead of listing them, and still deletes the stale ones."""
    backend, ipt = fake_backend()
    saves = []
    real_save = ipt.save

    async def counting_save(table):
        saves.append(table)
        return await real_save(table)
    ipt.save = counting_save
    c = cluster_with_one_service()
    c.add(port("ns2", "svc2", cluster_ip="172.30.0.42"))
    c.set_endpoints(spn("ns2", "svc2"), ep("10.180.0.2"))
    await backend.run_sync(c.request())
    assert saves == ["nat"]
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.9"))  # KUBE-SEP-SXIVWICOYRO3J4NJ goes stale
    assert not (await backend.run_sync(c.request())).full
    c.delete_service("ns2", "svc2")  # all of svc2's chains go stale
    assert not (await backend.run_sync(c.request())).full
    assert saves == ["nat"]
    assert len(ipt.restores) == 3
    nat = set(ipt.tables["nat"])
    assert "KUBE-SEP-SXIVWICOYRO3J4NJ" not in nat and "KUBE-SVC-GNZBNJ2PO5MGZ6GT" not in nat
    assert "KUBE-SVC-XPGD46QRK7WJZT7O" in nat
    await backend.run_sync(c.request(full=True))
    assert saves == ["nat", "nat"]


async def test_ipv6_backend():
    backend, ipt = fake_backend(IPV6)
    c = Cluster(node_ip="2001:db8::1").add(port("ns1", "svc1", cluster_ip="fd00:172:30::41", node_port=3001))
    c.set_endpoints(spn("ns1", "svc1"), ep("fd00:10:180::1"))
    await backend.run_sync(c.request())
    text = backend.mode.ipt.restores[-1]
    assert "KUBE-FIREWALL" not in text  # localhost NodePorts are IPv4 only
    assert "-m addrtype --dst-type LOCAL ! -d ::1/128 -j KUBE-NODEPORTS" in text
    assert "-s fd00:10:180::1 -j KUBE-MARK-MASQ" in text
    assert "-j DNAT --to-destination [fd00:10:180::1]:80" in text
    assert "! -s fd00:10::/64 -j KUBE-MARK-MASQ" in text
    assert jumps(ipt, "filter", "INPUT")[0] == "KUBE-FIREWALL"  # kubelet's jumps are ensured in both families


async def test_large_cluster_stale_listing_is_rate_limited():
    now = [0.0]
    backend, ipt = fake_backend()
    backend.mode.clock = lambda: now[0]
    backend.mode.sync_period = 30.0
    saves = []
    real_save = ipt.save

    async def counting_save(table):
        saves.append(now[0])
        return await real_save(table)
    ipt.save = counting_save
    c = Cluster().add(port("ns1", "svc1", cluster_ip="172.30.0.41"))
    c.set_endpoints(spn("ns1", "svc1"), *(ep(f"10.1.{i // 250}.{i % 250 + 1}") for i in range(1001)))
    await backend.run_sync(c.request())
    now[0] = 10.0
    await backend.run_sync(c.request(full=True))
    now[0] = 31.0
    await backend.run_sync(c.request(full=True))
    assert saves == [0.0, 31.0]


async def test_large_cluster_stale_chains_go_once_per_sync_period():
    """In large-cluster mode stale chains stay until a sync period passed since stale chains
    were last looked for, on partial syncs as on full ones."""
    now = [0.0]
    backend, ipt = fake_backend()
    backend.mode.clock = lambda: now[0]
    backend.mode.sync_period = 30.0
    c = Cluster().add(port("ns1", "svc1", cluster_ip="172.30.0.41"))
    c.add(port("ns2", "svc2", cluster_ip="172.30.0.42"))
    c.set_endpoints(spn("ns1", "svc1"), *(ep(f"10.1.{i // 250}.{i % 250 + 1}") for i in range(1001)))
    c.set_endpoints(spn("ns2", "svc2"), ep("10.180.0.2"))
    await backend.run_sync(c.request())
    svc2_chains = {"KUBE-SVC-GNZBNJ2PO5MGZ6GT", "KUBE-SEP-RS4RBKLTHTF2IUXJ"}
    assert svc2_chains <= set(ipt.tables["nat"])
    c.delete_service("ns2", "svc2")
    now[0] = 10.0
    assert not (await backend.run_sync(c.request())).full
    assert svc2_chains <= set(ipt.tables["nat"])  # stale, kept for now
    now[0] = 31.0
    assert not (await backend.run_sync(c.request())).full
    assert not svc2_chains & set(ipt.tables["nat"])


def test_ten_thousand_services_build_fast():
    c = Cluster()
    for i in range(10000):
        c.add(port(f"ns{i % 50}", f"svc{i}", cluster_ip=f"172.30.{i // 250}.{i % 250 + 1}", node_port=30000 + i % 2000 if i % 4 == 0 else 0))
        c.set_endpoints(spn(f"ns{i % 50}", f"svc{i}"), ep(f"10.{i // 60000}.{i // 250 % 240}.{i % 250 + 1}"),
                        ep(f"10.200.{i // 250 % 240}.{i % 250 + 1}", node="test-node"))
    backend, _ = fake_backend()
    request = c.request(full=True)
    started = time.process_time()
    data = build_restore(request, backend.options)
    first = time.process_time() - started
    started = time.process_time()
    data = build_restore(request, backend.options)  # names cached
    second = time.process_time() - started
    started = time.process_time()
    one_changed = dataclasses.replace(request, full=False, changed_services=frozenset({"ns1/svc1"}))
    partial = build_restore(one_changed, backend.options)
    third = time.process_time() - started
    assert data.large_cluster
    assert data.nat_rules_written == data.nat_rules_total > 60000
    assert partial.nat_rules_total == data.nat_rules_total and partial.nat_rules_written < 20000
    print(f"10k services: first build {first:.3f}s, cached {second:.3f}s, partial {third:.3f}s, {len(data.text) >> 10} KiB")
    # CPU time of this process (the build is pure Python on one thread): a loaded machine
    # stretches the wall time of the same work, not this
    assert second < 2.0 and first < 4.0


# ---- canary monitor ------------------------------------------------------------------------------

async def wait_for(predicate, timeout=2.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.005)


async def start(proxier, on_request) -> None:
    """Start the mode's background tasks in the proxier, calling ``on_request`` on each full
    sync it is asked for."""
    request_full_sync = proxier.request_full_sync

    def recording():
        on_request()
        request_full_sync()
    proxier.request_full_sync = recording
    await proxier.start()


async def test_canary_monitor_detects_flush_and_requests_full_sync():
    backend, ipt = fake_backend()
    backend.mode.canary_period = 0.02
    backend.mode.flush_poll = 0.005
    requests = []
    await start(backend, lambda: requests.append(time.monotonic()))
    try:
        await wait_for(lambda: all(ipt.chain_exists_sync(t, KUBE_PROXY_CANARY) for t in CANARY_TABLES))
        await asyncio.sleep(0.1)
        assert requests == []
        # a firewall reload: every table flushed and its chains deleted
        for table in ("mangle", "nat", "filter"):
            for chain in [c for c in ipt.tables[table] if c.startswith("KUBE-")]:
                del ipt.tables[table][chain]
        await wait_for(lambda: len(requests) == 1)
        assert backend.need_full_sync
        await wait_for(lambda: all(ipt.chain_exists_sync(t, KUBE_PROXY_CANARY) for t in CANARY_TABLES))
        await asyncio.sleep(0.1)
        assert len(requests) == 1
    finally:
        await backend.stop()
    assert not any(ipt.chain_exists_sync(t, KUBE_PROXY_CANARY) for t in CANARY_TABLES)


async def test_canary_only_mangle_gone_reloads_after_flush_timeout():
    backend, ipt = fake_backend()
    backend.mode.canary_period = 0.02
    backend.mode.flush_timeout = 0.2
    backend.mode.flush_poll = 0.01
    requests = []

    def request_full_sync():
        requests.append(time.monotonic())
    await start(backend, request_full_sync)
    try:
        await wait_for(lambda: ipt.chain_exists_sync("mangle", KUBE_PROXY_CANARY))
        gone = time.monotonic()
        del ipt.tables["mangle"][KUBE_PROXY_CANARY]
        await wait_for(lambda: len(requests) == 1)
        assert requests[0] - gone >= 0.2  # waited for nat/filter, which never went
    finally:
        await backend.stop()


async def test_canary_monitor_keeps_trying_when_iptables_fails():
    backend, ipt = fake_backend()
    backend.mode.canary_period = 0.01
    failures = [3]
    real = ipt.ensure_chain

    async def flaky(table, chain):
        if failures[0]:
            failures[0] -= 1
            raise CommandFailed(("iptables", "-N"), 4, "", "lock")
        return await real(table, chain)
    ipt.ensure_chain = flaky
    await start(backend, lambda: None)
    try:
        await wait_for(lambda: all(ipt.chain_exists_sync(t, KUBE_PROXY_CANARY) for t in CANARY_TABLES))
    finally:
        await backend.stop()


# ---- cleanup ---------------------------------------------------------------------------------------

async def test_cleanup_family_removes_ours_and_keeps_the_rest():
    backend, ipt = fake_backend()
    # someone else's rules, and kubelet's KUBE-FIREWALL
    ipt.ensure_chain_sync("filter", "USER-CHAIN")
    ipt.ensure_rule_sync("-A", "filter", "INPUT", "-j", "USER-CHAIN")
    ipt.ensure_rule_sync("-A", "nat", "POSTROUTING", "-s", "192.0.2.0/24", "-j", "MASQUERADE")
    before = ipt.save_sync()
    c = Cluster().add(port("ns1", "svc1", cluster_ip="172.30.0.41", node_port=3001, lb_ips=["1.2.3.4"], source_ranges=["203.0.113.0/25"],
                           etp_local=True, health_check_node_port=30000))
    c.set_endpoints(spn("ns1", "svc1"), ep("10.180.0.1", node="test-node"))
    await backend.run_sync(c.request())
    for table in CANARY_TABLES:
        ipt.ensure_chain_sync(table, KUBE_PROXY_CANARY)
    sync_ipt = FakeIptablesSync()
    share_state(ipt, sync_ipt)
    cleanup_family(ipt=sync_ipt)
    after = ipt.save_sync()
    # all that remains of ours is the kubelet duplicate (chain, rule, jumps), which is not ours to delete
    kubelet = {"-A INPUT -j KUBE-FIREWALL", "-A OUTPUT -j KUBE-FIREWALL", ":KUBE-FIREWALL - [0:0]"}
    assert {line for line in after.splitlines() if not line.startswith("-A KUBE-FIREWALL ")} - kubelet == set(before.splitlines())
    assert not any("KUBE-SVC" in line or "KUBE-SEP" in line or KUBE_PROXY_CANARY in line for line in after.splitlines())
    cleanup_family(ipt=sync_ipt)  # idempotent


def test_cleanup_reports_failures_after_trying_everything():
    ipt = FakeIptablesSync()
    metrics = ProxyMetrics()
    ipt.restore_sync("*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n-A KUBE-SVC-A -j ACCEPT\nCOMMIT\n")
    # a foreign chain still jumps to one of ours: deleting KUBE-SVC-A fails
    ipt.ensure_chain_sync("nat", "FOREIGN")
    ipt.ensure_rule_sync("-A", "nat", "FOREIGN", "-j", "KUBE-SVC-A")
    ipt.ensure_chain_sync("mangle", KUBE_PROXY_CANARY)
    with pytest.raises(CleanupFailed, match="iptables-restore -T nat") as info:
        cleanup_family(ipt=ipt, metrics=metrics)
    assert info.value.mode == "iptables" and len(info.value.errors) == 1
    assert sample(metrics, "sync_proxy_rules_iptables_restore_failures_total", ip_family="IPv4") == 1
    assert not ipt.chain_exists_sync("mangle", KUBE_PROXY_CANARY)  # later steps still ran


def test_cleanup_input():
    assert cleanup_input("nat", {"PREROUTING", "FOO"}) is None
    assert cleanup_input("nat", {"KUBE-SERVICES", "KUBE-SEP-B", "KUBE-SVC-A", "KUBE-FIREWALL", "KUBE-PROXY-CANARY"}) == (
        "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-PROXY-CANARY - [0:0]\n:KUBE-SEP-B - [0:0]\n:KUBE-SVC-A - [0:0]\n"
        "-X KUBE-SERVICES\n-X KUBE-PROXY-CANARY\n-X KUBE-SEP-B\n-X KUBE-SVC-A\nCOMMIT\n")
    assert cleanup_input("filter", {"KUBE-FORWARD", "KUBE-FIREWALL", "KUBE-SVC-A"}) == (
        "*filter\n:KUBE-FORWARD - [0:0]\n:KUBE-FIREWALL - [0:0]\n-X KUBE-FORWARD\n-X KUBE-FIREWALL\nCOMMIT\n")


def test_jump_rule_args_match_upstream():
    assert JUMP_CHAINS[0].args == ("-m", "conntrack", "--ctstate", "NEW", "-m", "comment", "--comment",
                                   "kubernetes externally-visible service portals", "-j", "KUBE-EXTERNAL-SERVICES")
    assert parse_rule("-A INPUT " + " ".join(JUMP_CHAINS[2].args).replace("kubernetes health check service ports",
                                                                        '"kubernetes health check service ports"')).jump.value == "KUBE-NODEPORTS"
