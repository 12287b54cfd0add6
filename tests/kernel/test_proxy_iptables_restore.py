"""A failed iptables-restore in iptables mode: counted, and followed by a full restore.

iptables mode only: upstream's chain names (KUBE-SVC-<hash>, with the ``ns/name:port cluster IP``
comment on the KUBE-SERVICES jump) make the failure reproducible from outside the proxy. In
nftables mode the table's inner layout is the proxy's own; interference there is covered by
test_proxy_operations.py (the deleted table is rebuilt within syncPeriod).
"""

from __future__ import annotations

import shlex

import pytest

from tests.kernel.helpers import FULL_SYNCS, all_from, family_value, settled, syncs

pytestmark = pytest.mark.kernel

MODES = ["iptables"]
NODE_COUNT = 1
SYNC_PERIOD = 4
PROXY_FLAGS = ("--iptables-min-sync-period=1s", f"--iptables-sync-period={SYNC_PERIOD}s", "--v=2")


async def test_failed_partial_restore_is_followed_by_a_full_resync(kt):
    """iptables mode (upstream's chain names make the failure reproducible): one Service's
    KUBE-SVC chain vanishes behind the proxy's back; the next change to another Service is a
    partial restore that still jumps to it and fails; the proxy must count the failure and fall
    back to a full restore, which brings both Services back."""
    (node,) = kt.nodes
    proxy = kt.proxy(node)
    await kt.pod(node, "a-1", {"app": "a"})
    await kt.pod(node, "b-1", {"app": "b"})
    client = await kt.client_pod(node, "client")
    a_vip = (await kt.service("a", {"app": "a"}))["spec"]["clusterIP"]
    b_vip = (await kt.service("b", {"app": "b"}))["spec"]["clusterIP"]
    await kt.until(client, "tcp", a_vip, 80, 10, all_from({"a-1"}), what="a")
    await kt.until(client, "tcp", b_vip, 80, 10, all_from({"b-1"}), what="b")
    before = await settled(proxy)

    nat = node.ns.run("iptables-save", "-t", "nat").stdout
    comment = f'"{kt.namespace}/a:tcp cluster IP"'
    jump = next((line for line in nat.splitlines() if line.startswith("-A KUBE-SERVICES ") and comment in line and "-j KUBE-SVC-" in line), None)
    assert jump, f"no upstream-style KUBE-SERVICES jump with comment {comment}:\n{nat}"
    chain = jump.rsplit("-j ", 1)[1].strip()
    node.ns.run("iptables", "-w", "-t", "nat", "-D", *shlex.split(jump)[1:])
    node.ns.run("iptables", "-w", "-t", "nat", "-F", chain)
    node.ns.run("iptables", "-w", "-t", "nat", "-X", chain)

    await kt.pod(node, "b-2", {"app": "b"})  # a change elsewhere: a partial restore that jumps to the missing chain
    await kt.until(client, "tcp", b_vip, 80, 50, all_from({"b-1", "b-2"}), what="b with its new endpoint (after a full resync)",
                   wait=SYNC_PERIOD + 10, timeout=0.5)
    await kt.until(client, "tcp", a_vip, 80, 10, all_from({"a-1"}), what="a restored by the full resync", wait=SYNC_PERIOD + 10, timeout=0.5)
    # The kernel holds the full restore a moment before the proxy's loop has seen iptables-restore
    # exit and counted the sync: read the metrics once the proxy has settled, not at once.
    after = await settled(proxy)
    failures = (family_value(after, "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total")
                - family_value(before, "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total"))
    assert failures >= 1, f"the partial restore should have failed and been counted: {syncs(before)} -> {syncs(after)}\n{proxy.log()}"
    assert family_value(after, FULL_SYNCS) > family_value(before, FULL_SYNCS), f"no full resync after the failure: {syncs(before)} -> {syncs(after)}"
