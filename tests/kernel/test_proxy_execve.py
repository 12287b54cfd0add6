"""One steady-state sync starts no process in nftables mode, and in iptables mode only what
upstream kube-proxy runs per sync: ``iptables-restore`` once, and the ``iptables-save -t nat`` that
finds stale per-Service chains (upstream skips it only in large-cluster mode). Addresses
(``--nodeport-addresses``, read at every sync), conntrack cleanup of a UDP endpoint change and the
nftables transaction go through netlink or in-process libraries (tests/kernel/execve.py attaches
``strace -f -e trace=execve`` to the running proxy around the change)."""

from __future__ import annotations

import pytest

from tests.kernel.execve import assert_only, traced_endpoint_change

pytestmark = pytest.mark.kernel

NODE_COUNT = 1
# long periods: no periodic resync or interference check falls inside the traced window
PROXY_FLAGS = ("--iptables-min-sync-period=0s", "--iptables-sync-period=1h", "--nodeport-addresses=192.168.77.0/24", "--v=2")
PER_SYNC = {"nftables": {}, "iptables": {"iptables-restore": 1, "ip6tables-restore": 1, "iptables-save": 1, "ip6tables-save": 1}}


async def test_a_steady_state_sync_starts_only_the_restore_tools(kt, tmp_path):
    traced = await traced_endpoint_change(kt, tmp_path / "strace.out")
    assert traced.full_syncs == 0, "a periodic full sync fell inside the traced window"
    assert_only(traced, PER_SYNC[kt.mode])
    if kt.mode == "iptables":
        assert traced.started["iptables-restore"] >= 1, f"no iptables-restore traced: is strace following the proxy?\n{traced.tail()}"
