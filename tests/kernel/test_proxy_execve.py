"""One steady-state sync starts no process in nftables mode, and in iptables mode only what
upstream kube-proxy runs per sync: ``iptables-restore`` once, and the ``iptables-save -t nat`` that
finds stale per-Service chains (upstream skips it only in large-cluster mode). Addresses
(``--nodeport-addresses``, read at every sync), conntrack cleanup of a UDP endpoint change and the
nftables transaction go through netlink or in-process libraries (tests/kernel/execve.py attaches
``strace -f -e trace=execve`` to the running proxy around the change)."""

from __future__ import annotations

import pytest

from tests.kernel.execve import execve_trace, one_sync, programs
from tests.kernel.helpers import settled

pytestmark = pytest.mark.kernel

NODE_COUNT = 1
# long periods: no periodic resync or interference check falls inside the traced window
PROXY_FLAGS = ("--iptables-min-sync-period=0s", "--iptables-sync-period=1h", "--nodeport-addresses=192.168.77.0/24", "--v=2")
ALLOWED = {"nftables": set(), "iptables": {"iptables-restore", "ip6tables-restore", "iptables-save", "ip6tables-save"}}

PORTS = [{"name": "tcp", "port": 80, "targetPort": 8080, "protocol": "TCP"},
         {"name": "udp", "port": 53, "targetPort": 8080, "protocol": "UDP"}]


async def test_a_steady_state_sync_starts_only_the_restore_tools(kt, tmp_path):
    (node,) = kt.nodes
    labels = {"app": "trace"}
    first = await kt.pod(node, "tr-1", labels)
    await kt.pod(node, "tr-2", labels)
    await kt.service("trace", labels, ports=PORTS, type="NodePort")
    proxy = kt.proxy(node)
    await settled(proxy)  # the Service and its endpoints synced before the trace starts

    async with execve_trace(proxy, tmp_path / "strace.out") as trace:
        syncs = await one_sync(proxy, lambda: kt.set_ready(first, False))  # a UDP endpoint leaves: conntrack cleanup too
    started = programs(trace[0])
    assert set(started) <= ALLOWED[kt.mode], f"{kt.mode} sync started {dict(started)}\n{trace[0][-3000:]}"
    for program in ALLOWED[kt.mode]:
        assert started[program] <= syncs, f"{program} ran {started[program]} times in {syncs} syncs\n{trace[0]}"
    if kt.mode == "iptables":
        assert started["iptables-restore"] >= 1, f"no iptables-restore traced: is strace following the proxy?\n{trace[0][-3000:]}"
