"""``kubesvc proxy --proxy-mode ipvs`` on a kernel that has IPVS (in the VM: see
tests/kernel/vm/test_proxy_ipvs.py): the processes one steady-state sync starts, each
``--ipvs-scheduler``, and ``--cleanup``. Each scheduler costs a proxy start, about half a minute
under emulation.

No test here needs the periodic resync, so it is an hour away: a traced sync is then the only
one in its window (tests/kernel/vm/test_proxy_ipvs.py tests the resync).
"""

from __future__ import annotations

import asyncio

import pytest

from kubesvc.client.rest import ENDPOINTSLICES
from tests.kernel.execve import TRACE_PORTS, assert_only, traced_sync
from tests.kernel.vm.ipvs import (ANSWER_TIMEOUT, ECHO, MODES, NAMES, NODE_COUNT, all_answered, ipvs_table, three_backends,  # noqa: F401
                                  virtual_server, wait_for_kernel, weights)
from tests.kernel.vm.ipvs import PROXY_FLAGS as RESYNCING_FLAGS
from tests.support.held_connection import HeldConnections
from tests.support.slowdown import scaled

pytestmark = pytest.mark.kernel

PROXY_FLAGS = tuple(f for f in RESYNCING_FLAGS if not f.startswith("--ipvs-sync-period=")) + ("--ipvs-sync-period=1h",)

# One steady-state sync starts only the restore tools upstream runs, once each: ipset restore
# (every set) and iptables-restore (the static rules). kube-ipvs0 and its addresses, the IPVS
# table and conntrack cleanup go over netlink, sysctls through /proc/sys (tests/kernel/execve.py).
PER_SYNC = {"ipset": 1, "iptables-restore": 1, "ip6tables-restore": 1}
# Endpoints without Pods: an IPVS real server needs no process behind it to be programmed, and
# each Pod is a Python start, slow under emulation.
TRACE_IPS = ("10.244.250.1", "10.244.250.2")
SLICE_PORTS = [{"name": "tcp", "port": 8080, "protocol": "TCP"}, {"name": "udp", "port": 8080, "protocol": "UDP"}]


def _endpoints(*unready: str) -> list[dict]:
    return [{"addresses": [ip], "conditions": {"ready": ip not in unready}} for ip in TRACE_IPS]


async def test_a_steady_state_sync_starts_only_ipset_and_iptables_restore(kt, tmp_path):
    """A NodePort Service with TCP and UDP ports and two endpoints, programmed; then, traced,
    one endpoint turns unready (its real servers go, and its UDP flows: conntrack cleanup)."""
    (node,) = kt.nodes
    svc = await kt.service("trace", None, ports=TRACE_PORTS, type="NodePort")
    vip = svc["spec"]["clusterIP"]
    await kt.endpoint_slice("trace", "trace-1", _endpoints(), SLICE_PORTS)
    await wait_for_kernel(kt, "the traced Service's real servers", lambda: weights(node, vip, 80) == dict.fromkeys(TRACE_IPS, 1))

    async def one_unready():
        await kt.client.resource(ENDPOINTSLICES).patch("trace-1", {"endpoints": _endpoints(TRACE_IPS[0])}, kt.namespace)

    traced = await traced_sync(kt.proxy(node), one_unready, tmp_path / "strace.out")
    assert traced.full_syncs == 0, f"a full sync fell inside the traced window\n{traced.tail()}"
    assert_only(traced, PER_SYNC)
    assert traced.started["ipset"] >= 1 and traced.started["iptables-restore"] >= 1, f"restores not traced\n{traced.tail()}"
    # the unready endpoint takes no new connections (weight 0 while draining, or gone)
    assert weights(node, vip, 80).get(TRACE_IPS[0], 0) == 0 and weights(node, vip, 80)[TRACE_IPS[1]] == 1


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
                result = await kt.probe(client, "tcp", vip, 80, 12, concurrency=1, timeout=ANSWER_TIMEOUT)
                ok = _one_backend(result)
            else:  # dh
                result = await kt.probe(client, "tcp", vip, 80, 12, concurrency=1, timeout=ANSWER_TIMEOUT)
                from_node = await kt.probe(node, "tcp", vip, 80, 12, concurrency=1, timeout=ANSWER_TIMEOUT)
                ok = _one_backend(result) and from_node["names"] == result["names"]
                result = {"client": result, "node": from_node}
            if not ok:
                failures.append(f"{scheduler}: {result}")
    finally:
        # the module's flags for the proxy's next start; the running one keeps the last
        # scheduler (a restart is half a minute here): the test after this one takes any
        proxy.extra = flags
    assert not failures, "\n".join(failures)


async def test_cleanup_removes_everything_ipvs_mode_made(kt):
    """Whatever scheduler the running proxy has (the sweep before leaves its last one)."""
    (node,) = kt.nodes
    proxy = kt.proxy(node)
    await three_backends(kt, answering=all_answered)
    proxy.stop()
    result = proxy.cleanup(timeout=scaled(60))
    assert result.returncode == 0, result.stdout + result.stderr
    assert ipvs_table(node) == {}
    assert node.ns.run("ip", "link", "show", "kube-ipvs0", check=False).returncode != 0
    sets = node.ns.run("ipset", "list", "-n").stdout.split()
    assert not [s for s in sets if s.startswith("KUBE-")], sets
    nat = node.ns.run("iptables-save", "-t", "nat").stdout
    assert "KUBE-NODE-PORT" not in nat and "KUBE-LOAD-BALANCER" not in nat, nat
