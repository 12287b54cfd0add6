"""Running ``kubesvc proxy`` like kube-proxy on a node, in both modes: someone else deleting its
rules, ``kill -9`` and restart, ``--cleanup``, a burst of endpoint changes under
minSyncPeriod, and one change among 1000 Services (a partial sync). Proof is traffic through the
rules and the proxy's own /metrics (upstream metric names). A failed apply followed by a full
resync: test_proxy_iptables_restore.py.
"""

from __future__ import annotations

import asyncio
import signal
import contextlib
import math
import time

import pytest

from tests.kernel.helpers import (FULL_SYNCS, PARTIAL_SYNCS, SYNCS, all_from, assert_all_answered, family_value, register_node, ruleset_diff,
                                  settled, syncs)
from tests.support.netns import ProxyProcess

pytestmark = pytest.mark.kernel

NODE_COUNT = 1
SYNC_PERIOD = 4  # seconds: the interference check / retry interval under test
PROXY_FLAGS = ("--iptables-min-sync-period=1s", f"--iptables-sync-period={SYNC_PERIOD}s", "--v=2")

# ---------------------------------------------------------------------------------------------
# interference, failure, restart


async def test_someone_deleting_the_proxy_rules_is_repaired_within_sync_period(kt):
    (node,) = kt.nodes
    labels = {"app": "repair"}
    await kt.pod(node, "rp-1", labels)
    await kt.pod(node, "rp-2", labels)
    client = await kt.client_pod(node, "client")
    vip = (await kt.service("repair", labels))["spec"]["clusterIP"]
    both = {"rp-1", "rp-2"}
    await kt.until(client, "tcp", vip, 80, 50, all_from(both), what="Service working before the interference")

    proxy = kt.proxy(node)
    proxy.process.send_signal(signal.SIGSTOP)  # frozen: the tampering is seen by traffic before any repair
    try:
        if kt.mode == "nftables":
            node.ns.run("nft", "delete", "table", "ip", "kube-proxy")
        else:
            node.ns.run("iptables", "-w", "-t", "nat", "-F", "KUBE-SERVICES")
            node.ns.run("iptables", "-w", "-t", "mangle", "-F", "KUBE-PROXY-CANARY")
            node.ns.run("iptables", "-w", "-t", "mangle", "-X", "KUBE-PROXY-CANARY")
        tampered = time.monotonic()  # the proxy's timers keep running while it is stopped
        right_after = await kt.probe(client, "tcp", vip, 80, 5, timeout=0.3)
        assert right_after["answered"] == 0, f"the interference did not break the Service: {right_after}"
    finally:
        proxy.process.send_signal(signal.SIGCONT)
    await kt.until(client, "tcp", vip, 80, 50, all_from(both), what=f"repair within syncPeriod ({SYNC_PERIOD}s)", wait=SYNC_PERIOD + 6,
                   timeout=0.5)
    took = time.monotonic() - tampered
    assert took <= SYNC_PERIOD + 3, f"repaired after {took:.1f}s, syncPeriod is {SYNC_PERIOD}s (right after the interference: {right_after})"
    if kt.mode == "nftables":
        assert node.ns.run("nft", "list", "table", "ip", "kube-proxy", check=False).returncode == 0
    else:
        nat = node.ns.run("iptables-save", "-t", "nat").stdout
        assert any(line.startswith("-A KUBE-SERVICES") for line in nat.splitlines()), nat
        assert node.ns.run("iptables", "-w", "-t", "mangle", "-S", "KUBE-PROXY-CANARY", check=False).returncode == 0, "canary not recreated"


async def test_kill_9_and_restart_converges(kt):
    (node,) = kt.nodes
    proxy = kt.proxy(node)
    keep = {"app": "keep"}
    await kt.pod(node, "k-1", keep)
    k2 = await kt.pod(node, "k-2", keep)
    g1 = await kt.pod(node, "g-1", {"app": "gone"})
    client = await kt.client_pod(node, "client")
    keep_vip = (await kt.service("keep", keep))["spec"]["clusterIP"]
    gone_vip = (await kt.service("gone", {"app": "gone"}))["spec"]["clusterIP"]
    await kt.until(client, "tcp", keep_vip, 80, 50, all_from({"k-1", "k-2"}), what="keep before the kill")
    await kt.until(client, "tcp", gone_vip, 80, 5, all_from({"g-1"}), what="gone before the kill")

    await asyncio.to_thread(proxy.kill)  # SIGKILL: no chance to tidy up
    # the rules are the kernel's, not the process's: traffic keeps flowing while it is down
    r = await kt.probe(client, "tcp", keep_vip, 80, 20)
    assert_all_answered(r, "while the proxy is dead")
    # the world moves on meanwhile; the old processes keep answering, so stale rules would show
    await kt.delete_pod(k2, keep_running=True)
    await kt.pod(node, "k-3", keep)
    await kt.delete_service("gone")
    assert g1.server is not None and g1.server.poll() is None

    await asyncio.to_thread(proxy.start)
    await kt.until(client, "tcp", keep_vip, 80, 100, all_from({"k-1", "k-3"}), what="keep converged after the restart")
    await kt.until(client, "tcp", gone_vip, 80, 5, lambda r: r["answered"] == 0, what="the deleted Service no longer answered",
                   timeout=0.5)
    if kt.mode == "iptables":  # restarting must not duplicate the jumps into kube-proxy's chains
        dump = node.ns.run("iptables-save").stdout
        jumps = [line for line in dump.splitlines() if line.startswith(("-A PREROUTING", "-A OUTPUT", "-A POSTROUTING", "-A INPUT", "-A FORWARD"))
                 and "-j KUBE-" in line]
        assert len(jumps) == len(set(jumps)), "duplicated jump rules after a restart:\n" + "\n".join(sorted(jumps))
    else:
        tables = node.ns.run("nft", "list", "tables").stdout.split("\n")
        assert tables.count("table ip kube-proxy") == 1, tables


# ---------------------------------------------------------------------------------------------
# --cleanup

IPTABLES_PRESEED = """*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:USER-CHAIN - [0:0]
-A INPUT -s {src} -j USER-CHAIN
-A FORWARD -s {src} -j ACCEPT
-A OUTPUT -d {src} -j ACCEPT
-A USER-CHAIN -j RETURN
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -s {src} -j ACCEPT
-A INPUT -s {src} -j ACCEPT
-A OUTPUT -d {src} -j ACCEPT
-A POSTROUTING -s {src} -j ACCEPT
COMMIT
*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -s {src} -j ACCEPT
-A INPUT -s {src} -j ACCEPT
-A FORWARD -s {src} -j ACCEPT
-A OUTPUT -d {src} -j ACCEPT
-A POSTROUTING -s {src} -j ACCEPT
COMMIT
*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A PREROUTING -s {src} -j ACCEPT
-A OUTPUT -d {src} -j ACCEPT
COMMIT
"""
NFT_PRESEED = """table inet ks-user {
    set blocked { type ipv4_addr; elements = { 192.0.2.254 } }
    chain input { type filter hook input priority 10; policy accept; ip saddr @blocked drop; }
}
"""


def preseed(ns) -> None:
    """What a node has before any proxy: someone's nftables table, and iptables rules in every
    built-in chain (with iptables-nft a built-in chain only exists once used, and removing
    kube-proxy's rules from it does not remove it again) plus a chain of their own."""
    ns.run("iptables-restore", input=IPTABLES_PRESEED.format(src="192.0.2.254/32"))
    ns.run("ip6tables-restore", input=IPTABLES_PRESEED.format(src="2001:db8::fe/128"))
    ns.run("nft", "-f", "-", input=NFT_PRESEED)


def kernel_state(ns) -> dict[str, str]:
    def clean(text: str) -> str:
        import re

        lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        return "\n".join(re.sub(r"\[\d+:\d+\]", "[-]", line) for line in lines)

    return {"nft list ruleset": clean(ns.run("nft", "-s", "list", "ruleset").stdout),
            "iptables-save": clean(ns.run("iptables-save").stdout),
            "ip6tables-save": clean(ns.run("ip6tables-save").stdout)}


async def test_cleanup_leaves_the_kernel_as_it_found_it(kt):
    """A fresh node with rules of its own; the proxy runs (and serves a Service), is killed,
    and ``kubesvc proxy --cleanup`` must leave nft's and iptables' view exactly as before."""
    fresh = await asyncio.to_thread(kt.cluster.add_node)
    proxy = None
    try:
        await register_node(kt.client, fresh)
        await asyncio.to_thread(preseed, fresh.ns)
        before = await asyncio.to_thread(kernel_state, fresh.ns)

        labels = {"app": "clean"}
        await kt.pod(fresh, "cl-1", labels)
        client = await kt.client_pod(fresh, "client")
        svc = await kt.service("clean", labels, type="NodePort")
        proxy = ProxyProcess(fresh, kt.env.server.kubeconfig, kt.mode, kt.env.log_dir / f"proxy-{fresh.name}.log", *kt.env.flags)
        await asyncio.to_thread(proxy.start)
        await kt.until(client, "tcp", svc["spec"]["clusterIP"], 80, 10, all_from({"cl-1"}), what="the proxy's rules at work")
        during = await asyncio.to_thread(kernel_state, fresh.ns)
        assert during != before, "the proxy made no rules?"

        await asyncio.to_thread(proxy.kill)
        result = await asyncio.to_thread(proxy.cleanup)
        assert result.returncode == 0, f"kubesvc proxy --cleanup exited {result.returncode}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
        after = await asyncio.to_thread(kernel_state, fresh.ns)
        diffs = {what: ruleset_diff(before[what], after[what]) for what in before if before[what] != after[what]}
        assert not diffs, "--cleanup left the kernel different from before the proxy ran:\n" + "\n".join(
            f"== {what} ==\n{diff}" for what, diff in diffs.items())
        # and the proxy's Service is gone from the data plane
        r = await kt.probe(client, "tcp", svc["spec"]["clusterIP"], 80, 3, timeout=0.5)
        assert r["answered"] == 0, r
    finally:
        if proxy is not None:
            proxy.kill()
        for pod in [p for p in kt.pods + kt.client_pods if p.node is fresh]:
            (kt.pods if pod in kt.pods else kt.client_pods).remove(pod)
        await asyncio.to_thread(kt.cluster.remove_node, fresh)
        with contextlib.suppress(Exception):
            from kubesvc.client.rest import NODES

            await kt.client.resource(NODES).delete(fresh.name)


# ---------------------------------------------------------------------------------------------
# sync frequency and partial syncs


async def test_a_burst_of_100_endpoint_deletions_is_applied_in_a_few_syncs(kt):
    """100 EndpointSlice deletions as fast as the API takes them, minSyncPeriod 1 s: the proxy
    aggregates them into a few syncs (counted by kubeproxy_sync_proxy_rules_duration_seconds)."""
    (node,) = kt.nodes
    proxy = kt.proxy(node)
    real = await kt.pod(node, "real", register=False)
    client = await kt.client_pod(node, "client")
    vip = (await kt.service("burst", None))["spec"]["clusterIP"]
    await kt.endpoint_slice("burst", "burst-real", [kt.endpoint(real)])
    sem = asyncio.Semaphore(16)

    async def fake(i: int) -> None:
        # addresses nobody answers for: while they are endpoints, most connections time out
        endpoint = {"addresses": [f"10.244.100.{i + 1}"], "conditions": {"ready": True, "serving": True, "terminating": False},
                    "nodeName": node.name}
        async with sem:
            await kt.endpoint_slice("burst", f"burst-{i}", [endpoint])

    await asyncio.gather(*(fake(i) for i in range(100)))
    await kt.until(client, "tcp", vip, 80, 100, lambda r: r["timeouts"] >= 80, what="the 100 unanswering endpoints programmed",
                   timeout=0.5, concurrency=100)
    before = await settled(proxy)

    started = time.monotonic()

    async def delete(i: int) -> None:
        async with sem:
            await kt.delete_slice(f"burst-{i}")

    await asyncio.gather(*(delete(i) for i in range(100)))
    burst = time.monotonic() - started
    await kt.until(client, "tcp", vip, 80, 50, all_from({"real"}), what="only the real endpoint left", timeout=0.5)
    applied = time.monotonic() - started
    after = await settled(proxy)
    used = family_value(after, SYNCS) - family_value(before, SYNCS)
    changes = after.value("kubeproxy_sync_proxy_rules_endpoint_changes_total") - before.value("kubeproxy_sync_proxy_rules_endpoint_changes_total")
    allowed = math.ceil(burst / 1.0) + 3  # one sync per minSyncPeriod while the burst lasts, plus the edges
    assert used <= allowed, (f"100 deletions over {burst:.2f}s took {used:.0f} syncs (at most {allowed} with minSyncPeriod 1s); "
                             f"endpoint changes counted: {changes:.0f}; {syncs(before)} -> {syncs(after)}")
    assert changes >= 100, f"each deletion is an endpoint change: {changes:.0f}"
    print(f"[{kt.mode}] 100 deletions in {burst:.2f}s applied after {applied:.2f}s in {used:.0f} syncs; endpoint changes {changes:.0f}")


@pytest.mark.timeout(300)
async def test_one_change_among_1000_services_is_a_partial_sync(kt):
    (node,) = kt.nodes
    proxy = kt.proxy(node)
    target = await kt.pod(node, "target", {"app": "target"})
    client = await kt.client_pod(node, "client")
    sem = asyncio.Semaphore(32)
    vips: dict[int, str] = {}

    async def make(i: int) -> None:
        async with sem:
            vips[i] = (await kt.service(f"s-{i}", None))["spec"]["clusterIP"]

    started = time.monotonic()
    await asyncio.gather(*(make(i) for i in range(1000)))
    created = time.monotonic() - started
    # a last Service with an endpoint: once it answers, the proxy has seen the 1000 before it
    last = (await kt.service("last", {"app": "target"}))["spec"]["clusterIP"]
    await kt.until(client, "tcp", last, 80, 5, all_from({"target"}), what="the Service made after the 1000", wait=90)
    before = await settled(proxy)

    changed_at = time.monotonic()
    await kt.endpoint_slice("s-500", "s-500-1", [kt.endpoint(target)])
    await kt.until(client, "tcp", vips[500], 80, 10, all_from({"target"}), what="s-500 answering after its one change", timeout=0.5)
    latency = time.monotonic() - changed_at
    after = await settled(proxy)
    assert family_value(after, FULL_SYNCS) == family_value(before, FULL_SYNCS), f"one change made a full sync: {syncs(before)} -> {syncs(after)}"
    assert family_value(after, PARTIAL_SYNCS) > family_value(before, PARTIAL_SYNCS), f"no partial sync counted: {syncs(before)} -> {syncs(after)}"
    print(f"[{kt.mode}] 1000 Services created in {created:.1f}s; one change visible in traffic after {latency:.2f}s; {syncs(before)} -> {syncs(after)}")
