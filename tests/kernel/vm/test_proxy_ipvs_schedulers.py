"""``kubesvc proxy --proxy-mode ipvs`` with each ``--ipvs-scheduler``, and ``--cleanup``, on a
kernel that has IPVS (in the VM: see tests/kernel/vm/test_proxy_ipvs.py). Each scheduler costs a
proxy start, about half a minute under emulation.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.kernel.vm.ipvs import (ECHO, MODES, NAMES, NODE_COUNT, PROXY_FLAGS, ipvs_table, three_backends,  # noqa: F401
                                  virtual_server, wait_for_kernel)
from tests.support.held_connection import HeldConnections
from tests.support.slowdown import scaled

pytestmark = pytest.mark.kernel


def _one_backend(result: dict) -> bool:
    return result["answered"] == result["count"] and len(result["names"]) == 1


# The schedulers upstream documents besides rr (the default, strict rotation: the first test).
# The others (wrr, wlc, lblc, lblcr, mh) reach the kernel the same way, a name in the virtual
# server (tests/proxy/ipvs); each proxy start costs about half a minute under emulation.
SCHEDULER_SWEEP = ("lc", "sed", "nq", "sh", "dh")


async def test_each_scheduler_balances_as_it_should(kt):
    """One proxy start per ``--ipvs-scheduler``: the virtual server's scheduler is edited in
    place, and traffic shows it. lc/sed/nq send each new connection to the least loaded server,
    so three held connections land on three backends; sh hashes the source (one client → one
    backend); dh hashes the destination (one VIP → one backend, from any client)."""
    (node,) = kt.nodes
    proxy = kt.proxy(node)
    pods, client, svc, vip = await three_backends(kt)
    flags = list(proxy.extra)
    failures = []
    try:
        for scheduler in SCHEDULER_SWEEP:
            proxy.extra = [f for f in flags if not f.startswith("--ipvs-scheduler=")] + [f"--ipvs-scheduler={scheduler}"]
            await asyncio.to_thread(proxy.restart)
            await wait_for_kernel(kt, f"the virtual server's scheduler edited to {scheduler}",
                                  lambda: {virtual_server(node, vip, port).scheduler for port in (80, ECHO)} == {scheduler})
            if scheduler in ("lc", "sed", "nq"):
                held = await asyncio.to_thread(HeldConnections.open, client.ns, vip, ECHO, 3)
                held.reset()
                result = {"held": held.backends}
                ok = set(held.backends) == NAMES
            elif scheduler == "sh":
                result = await kt.probe(client, "tcp", vip, 80, 12, concurrency=1)
                ok = _one_backend(result)
            else:  # dh
                result = await kt.probe(client, "tcp", vip, 80, 12, concurrency=1)
                from_node = await kt.probe(node, "tcp", vip, 80, 12, concurrency=1)
                ok = _one_backend(result) and from_node["names"] == result["names"]
                result = {"client": result, "node": from_node}
            if not ok:
                failures.append(f"{scheduler}: {result}")
    finally:
        proxy.extra = flags
        await asyncio.to_thread(proxy.restart)
    assert not failures, "\n".join(failures)


async def test_cleanup_removes_everything_ipvs_mode_made(kt):
    (node,) = kt.nodes
    proxy = kt.proxy(node)
    await three_backends(kt)
    proxy.stop()
    result = proxy.cleanup(timeout=scaled(60))
    assert result.returncode == 0, result.stdout + result.stderr
    assert ipvs_table(node) == {}
    assert node.ns.run("ip", "link", "show", "kube-ipvs0", check=False).returncode != 0
    sets = node.ns.run("ipset", "list", "-n").stdout.split()
    assert not [s for s in sets if s.startswith("KUBE-")], sets
    nat = node.ns.run("iptables-save", "-t", "nat").stdout
    assert "KUBE-NODE-PORT" not in nat and "KUBE-LOAD-BALANCER" not in nat, nat
