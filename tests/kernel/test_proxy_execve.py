"""One steady-state sync starts no process in nftables mode, and in iptables mode only
``iptables-restore``, once per family, as upstream kube-proxy's partial syncs (their chains are
rewritten by that one restore). Addresses (``--nodeport-addresses``, read at every sync),
conntrack cleanup of a UDP endpoint change and the nftables transaction go through netlink or
in-process libraries (tests/kernel/execve.py attaches ``strace -f -e trace=execve`` to the
running proxy around the change).

A full sync in iptables mode (after start, a failure, an outside flush, a topology change,
every hour) also lists the nat table once (``iptables-save -t nat``: stale per-Service chains;
partial syncs know them from the last sync) and checks the jumps from the built-in chains with
``iptables`` (``-N``, ``-S``, ``-C`` per jump; upstream runs ``-N`` and ``-C``)."""

from __future__ import annotations

import pytest

from kubesvc.client.rest import NODES
from tests.kernel.execve import assert_only, traced_endpoint_change, traced_sync
from tests.kernel.helpers import FULL_SYNCS

pytestmark = pytest.mark.kernel

NODE_COUNT = 1
# long periods: no periodic resync or interference check falls inside the traced window
PROXY_FLAGS = ("--iptables-min-sync-period=0s", "--iptables-sync-period=1h", "--nodeport-addresses=192.168.77.0/24", "--v=2")
PER_SYNC = {"nftables": {}, "iptables": {"iptables-restore": 1, "ip6tables-restore": 1}}
# the jumps from the built-in chains: upstream's iptablesJumpChains (12) and its duplicates of
# kubelet's (2: KUBE-FIREWALL from INPUT and OUTPUT)
JUMPS = 12 + 2
PER_FULL_SYNC = {"iptables-save": 1, "ip6tables-save": 1, "iptables": 3 * JUMPS, "ip6tables": 3 * JUMPS}
ZONE = "topology.kubernetes.io/zone"


async def test_a_steady_state_sync_starts_only_the_restore_tools(kt, tmp_path):
    traced = await traced_endpoint_change(kt, tmp_path / "strace.out")
    assert traced.full_syncs == 0, "a periodic full sync fell inside the traced window"
    assert_only(traced, PER_SYNC[kt.mode])
    if kt.mode == "iptables":
        assert traced.started["iptables-restore"] >= 1, f"no iptables-restore traced: is strace following the proxy?\n{traced.tail()}"


@pytest.mark.modes("iptables")
async def test_a_full_sync_also_lists_the_nat_table_and_checks_the_jumps(kt, tmp_path):
    (node,) = kt.nodes

    async def new_zone():  # a topology label change makes the next sync full (upstream OnTopologyChange)
        await kt.client.resource(NODES).patch(node.name, {"metadata": {"labels": {ZONE: f"zone-{tmp_path.name}"}}})

    traced = await traced_sync(kt.proxy(node), new_zone, tmp_path / "strace.out", FULL_SYNCS)
    assert traced.full_syncs >= 1 and traced.syncs == traced.full_syncs, f"{traced.syncs} syncs, {traced.full_syncs} full"
    assert_only(traced, PER_SYNC["iptables"], PER_FULL_SYNC)
    assert traced.started["iptables-save"] == traced.started["iptables-restore"] >= 1, f"{dict(traced.started)}\n{traced.tail()}"
