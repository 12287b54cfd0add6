"""``kubesvc proxy --proxy-mode ipvs`` on a kernel that has IPVS: virtual and real servers,
UDP, timeouts, drift repair, graceful termination, persistence and NodePorts, proven by traffic
and read back from the kernel with ``ipvsadm`` (tests/kernel/vm/ipvs.py).

This machine's kernel has no IPVS, so these tests run inside a throw-away VM booting Debian's
stock kernel (scripts/vm-ipvs.sh; tests/kernel/test_proxy_ipvs_vm.py starts it and checks the
result). They are collected only where ``KUBESVC_IPVS_TESTS=1`` (tests/kernel/conftest.py):
the VM sets it, and so can a developer whose own kernel has IPVS.
"""

from __future__ import annotations

import asyncio
import sys

import pytest

from kubesvc.client.rest import SERVICES
from tests.kernel.helpers import all_from, assert_spread
from tests.kernel.vm.ipvs import (ANSWER_TIMEOUT, ECHO, MODES, NAMES, NODE_COUNT, PORTS, PROXY_FLAGS, SYNC_PERIOD,  # noqa: F401
                                  TCP_TIMEOUT, UDP_TIMEOUT, all_answered, ipvs_connections, ipvs_table, three_backends,
                                  virtual_server, wait_for_kernel, weights)
from tests.support.held_connection import HeldConnections
from tests.support.slowdown import scaled

pytestmark = pytest.mark.kernel


# ---- tests --------------------------------------------------------------------------------------

async def test_clusterip_is_a_virtual_server_with_the_endpoints_as_real_servers(kt):
    (node,) = kt.nodes
    pods, client, svc, vip = await three_backends(kt)

    vs = virtual_server(node, vip, 80)
    assert vs is not None and vs.scheduler == "rr" and vs.persistent is None, ipvs_table(node)
    assert {(ip, port): (rs.forward, rs.weight) for (ip, port), rs in vs.reals.items()} == {
        (pod.ip, 8080): ("Masq", 1) for pod in pods}, vs
    assert set(weights(node, vip, ECHO)) == {pod.ip for pod in pods}
    dummy = node.ns.run("ip", "-o", "-4", "addr", "show", "dev", "kube-ipvs0").stdout
    assert f" {vip}/32 " in dummy, f"the ClusterIP must be bound to kube-ipvs0: {dummy!r}"

    # rr, one connection at a time: strict rotation, from a Pod and from the node itself
    for where in (client, node):
        result = await kt.probe(where, "tcp", vip, 80, 30, concurrency=1, timeout=ANSWER_TIMEOUT)
        assert result["names"] == {name: 10 for name in NAMES}, f"round robin from {where.name}: {result}"
    # masquerade only what needs it: a Pod's connection keeps its source IP
    from_pod = await kt.probe(client, "tcp", vip, 80, 6, concurrency=1, timeout=ANSWER_TIMEOUT)
    assert set(from_pod["sources"]) == {client.ip}, from_pod

    # any other port of a Service IP is refused at once (KUBE-IPVS-FILTER), not left to time out
    other = await kt.probe(client, "tcp", vip, 81, 3, timeout=2)
    assert other["refused"] == 3, other

    udp = await kt.service("dns", {"app": "web"}, ports=[{"name": "dns", "port": 53, "targetPort": 8080, "protocol": "UDP"}])
    uvip = udp["spec"]["clusterIP"]
    await kt.until(client, "udp", uvip, 53, 30, all_from(NAMES), what="UDP through IPVS")
    # a fresh round once every real server is in: the batch that first reached all three may have
    # begun before the last one was added (CI-3: 17/9/4)
    got = await kt.probe(client, "udp", uvip, 53, 30, timeout=ANSWER_TIMEOUT)
    assert_spread(got, NAMES, 5, "UDP round robin")
    assert virtual_server(node, uvip, 53, "UDP").scheduler == "rr"
    # --ipvs-udp-timeout reached the kernel: the flows just made expire within it
    flows = [c for c in ipvs_connections(node) if c["protocol"] == "UDP" and c["vip"] == uvip]
    assert flows and all(c["expires"] <= UDP_TIMEOUT for c in flows), flows


async def test_endpoint_changes_and_drift_are_repaired(kt):
    (node,) = kt.nodes
    pods, client, svc, vip = await three_backends(kt)
    a, b, c = pods

    await kt.set_ready(a, False)  # not ready: out of the real servers (it had only closed connections on port 80)
    await kt.until(client, "tcp", vip, 80, 30, all_from({"web-b", "web-c"}), what="the unready endpoint left out")
    await kt.set_ready(a, True)
    await kt.until(client, "tcp", vip, 80, 30, all_from(NAMES), what="the endpoint back")

    # someone deletes the virtual server behind the proxy's back: the periodic resync restores it
    script = ("import socket; from pyroute2 import IPVS, IPVSService; "
              f"IPVS().service('del', service=IPVSService(addr='{vip}', port=80, protocol=socket.IPPROTO_TCP))")
    node.ns.run(sys.executable, "-c", script, timeout=scaled(60))
    assert virtual_server(node, vip, 80) is None, "the test's own deletion did not take"
    restored = await wait_for_kernel(kt, "the deleted virtual server restored by the resync",
                                     lambda: weights(node, vip, 80) == {p.ip: 1 for p in pods}, timeout=SYNC_PERIOD + 10)
    assert restored
    await kt.until(client, "tcp", vip, 80, 30, all_from(NAMES), what="traffic after the resync")


async def test_graceful_termination_keeps_established_connections_at_weight_zero(kt):
    (node,) = kt.nodes
    pods, client, svc, vip = await three_backends(kt)
    held = await asyncio.to_thread(HeldConnections.open, client.ns, vip, ECHO)
    try:
        (gone_name,) = held.backends
        gone = next(p for p in pods if p.name == gone_name)
        stay = NAMES - {gone_name}
        await kt.delete_pod(gone, keep_running=True)  # the Pod's endpoint goes; its process still serves

        # TCP real server with a live connection: kept, at weight 0, until the connection ends
        drained = await wait_for_kernel(kt, "the removed endpoint drained at weight 0 on the echo port",
                                        lambda: weights(node, vip, ECHO) == {**{p.ip: 1 for p in pods if p is not gone}, gone.ip: 0})
        assert drained
        rs = virtual_server(node, vip, ECHO).reals[(gone.ip, ECHO)]
        assert rs.active == 1, rs
        (entry,) = [c for c in ipvs_connections(node) if c["vport"] == ECHO and c["dest"] == gone.ip]
        assert entry["state"] == "ESTABLISHED" and 0 < entry["expires"] <= TCP_TIMEOUT, f"--ipvs-tcp-timeout: {entry}"
        # ... while on port 80, where it had no connection left open... (its TIME_WAIT ones count:
        # IPVS keeps them 2 minutes), new connections never reach it
        result = await kt.until(client, "tcp", vip, 80, 30, all_from(stay), what="new connections only to the others")
        assert_spread(result, stay, 5, "after the endpoint went")
        more = await asyncio.to_thread(HeldConnections.open, client.ns, vip, ECHO, 2)
        assert set(more.backends) == stay, f"new connections to a draining real server: {more.backends}"
        more.reset()
        assert held.say("still there") == [f"{gone_name} still there"], "the established connection must survive"

        held.reset()  # RST: IPVS forgets the connection within its CLOSE timeout (10 s)
        await wait_for_kernel(kt, "the drained real server deleted once its connection is gone",
                              lambda: set(weights(node, vip, ECHO) or {}) == {p.ip for p in pods if p is not gone},
                              timeout=10 + SYNC_PERIOD + 10)
    finally:
        held.reset()


async def test_client_ip_affinity_is_ipvs_persistence(kt):
    (node,) = kt.nodes
    pods, client, svc, vip = await three_backends(kt, "sticky", answering=all_answered, sessionAffinity="ClientIP",
                                                  sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}})
    vs = virtual_server(node, vip, 80)
    assert vs.persistent == 60, vs
    result = await kt.probe(client, "tcp", vip, 80, 20, concurrency=1, timeout=ANSWER_TIMEOUT)
    assert result["answered"] == 20 and len(result["names"]) == 1, f"one client, one backend: {result}"
    held = await asyncio.to_thread(HeldConnections.open, client.ns, vip, ECHO, 3)
    try:
        assert len(set(held.backends)) == 1, f"persistent: every connection of the client to one backend: {held.backends}"

        svc = {**svc, "spec": {**svc["spec"], "sessionAffinity": "None"}}
        svc["spec"].pop("sessionAffinityConfig", None)
        await kt.client.resource(SERVICES).update(svc)
        await wait_for_kernel(kt, "persistence switched off in place", lambda: virtual_server(node, vip, 80).persistent is None)
        await kt.until(client, "tcp", vip, 80, 30, all_from(NAMES), what="spread again without affinity")
        answers = held.say("edited")
        assert answers == [f"{name} edited" for name in held.backends], f"connections survive editing the virtual server: {answers}"
    finally:
        held.reset()


async def test_nodeport_is_a_virtual_server_per_node_ip(kt):
    (node,) = kt.nodes
    pods, client, svc, vip = await three_backends(kt, "np", type="NodePort")
    node_port = svc["spec"]["ports"][0]["nodePort"]
    await wait_for_kernel(kt, f"a virtual server on the node's IP {node.lan_ip}:{node_port} with the three endpoints",
                          lambda: set(weights(node, node.lan_ip, node_port) or {}) == {p.ip for p in pods})
    result = await kt.until(kt.external, "tcp", node.lan_ip, node_port, 30, all_from(NAMES), what="NodePort from outside")
    assert_spread(result, NAMES, 5, "NodePort")
    assert kt.external.ip not in result["sources"], f"externalTrafficPolicy Cluster masquerades: {result['sources']}"
    members = node.ns.run("ipset", "list", "KUBE-NODE-PORT-TCP").stdout
    assert f"\n{node_port}\n" in members + "\n", members
