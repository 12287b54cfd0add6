"""Userspace mode on the real kernel, side by side with iptables mode: the same scenarios in
the two-node cluster of tests/support/netns.py (see test_proxy_dataplane.py for the topology),
with the one expected difference of a relaying proxy, that endpoints see the node rather than
the client, and the one reason the mode existed: a connection to an endpoint that refuses is
retried on the next one, so clients never see the refusal (issue 7)."""

from __future__ import annotations

import asyncio

import pytest

from tests.kernel.helpers import all_from, assert_all_answered, assert_spread

pytestmark = pytest.mark.kernel

MODES = ["userspace", "iptables"]
NODE_COUNT = 2
PROXY_FLAGS = ("--iptables-min-sync-period=1s", "--iptables-sync-period=10s", "--v=2")


def node_addresses(node) -> set[str]:
    return {node.lan_ip, node.gateway}


def assert_sources(kt, result: dict, client, via) -> None:
    """iptables keeps the client's address (local traffic is not masqueraded); userspace
    connects from the node."""
    if kt.mode == "userspace":
        assert set(result["sources"]) <= node_addresses(via), f"userspace relays from the node: {result}"
    else:
        assert result["sources"] == {client.ip: result["count"]}, result


async def test_cluster_ip_and_node_port_reach_every_ready_endpoint(kt):
    n1, n2 = kt.nodes
    web = {"app": "web"}
    for node, name in ((n1, "web-1"), (n1, "web-2"), (n2, "web-3")):
        await kt.pod(node, name, web)
    await kt.pod(n1, "web-unready", web, ready=False)
    client = await kt.client_pod(n1, "client")
    other = await kt.client_pod(n2, "client-2")
    svc = await kt.service("web", web, type="NodePort")
    vip, node_port = svc["spec"]["clusterIP"], svc["spec"]["ports"][0]["nodePort"]
    ready = {"web-1", "web-2", "web-3"}

    await kt.until(client, "tcp", vip, 80, 60, all_from(ready), what="each ready endpoint answering")
    from_pod = await kt.probe(client, "tcp", vip, 80, 150)
    assert_spread(from_pod, ready, 20, "ClusterIP from a pod on node 1")
    assert_sources(kt, from_pod, client, n1)
    from_node = await kt.until(n1, "tcp", vip, 80, 150, all_from(ready), what="ClusterIP from node 1 itself")
    assert_spread(from_node, ready, 20, "ClusterIP from the node")
    from_other = await kt.until(other, "tcp", vip, 80, 150, all_from(ready), what="ClusterIP from a pod on node 2")
    assert_spread(from_other, ready, 20, "ClusterIP from a pod on node 2")
    for node in (n1, n2):
        r = await kt.until(kt.external, "tcp", node.lan_ip, node_port, 90, all_from(ready), what=f"NodePort on {node.name}")
        assert_spread(r, ready, 10, f"NodePort via {node.name}")


async def test_without_endpoints_tcp_and_udp_are_refused_at_once(kt):
    n1, _ = kt.nodes
    client = await kt.client_pod(n1, "client")
    ports = [{"name": "tcp", "port": 80, "targetPort": 8080, "protocol": "TCP"},
             {"name": "udp", "port": 53, "targetPort": 8080, "protocol": "UDP"}]
    vip = (await kt.service("none", {"app": "nothing"}, ports=ports))["spec"]["clusterIP"]
    for where in (client, n1):
        await kt.until(where, "tcp", vip, 80, 10, lambda r: r["refused"] == r["count"], what="REJECT", timeout=0.5)
        result = await kt.probe(where, "tcp", vip, 80, 20, timeout=3, concurrency=1)
        assert result["refused"] == 20 and result["elapsed"] < 1.0, f"from {where.name}: {result}"
    udp = await kt.until(client, "udp", vip, 53, 5, lambda r: r["refused"] == r["count"], what="UDP REJECT", timeout=0.5)
    assert udp["answered"] == 0, udp


async def test_a_refusing_endpoint_is_retried_in_userspace_mode_only(kt):
    """Issue 7: one of three endpoints refuses connections (its server listens elsewhere).
    Userspace mode retries on the next endpoint, so every connection succeeds; iptables mode
    sends a third of them to the refusing one."""
    n1, n2 = kt.nodes
    labels = {"app": "flaky"}
    await kt.pod(n1, "good-1", labels)
    await kt.pod(n2, "good-2", labels)
    await kt.pod(n2, "refuses", labels, tcp=(9090,))  # Ready, but nothing on 8080
    client = await kt.client_pod(n1, "client")
    vip = (await kt.service("flaky", labels))["spec"]["clusterIP"]
    good = {"good-1", "good-2"}

    if kt.mode == "userspace":
        await kt.until(client, "tcp", vip, 80, 30, all_from(good), what="both good endpoints, no failure")
        for _ in range(3):
            r = await kt.probe(client, "tcp", vip, 80, 150)
            assert_all_answered(r, "userspace retries a refused dial on the next endpoint")
            assert set(r["names"]) == good, r
    else:
        await kt.until(client, "tcp", vip, 80, 30, lambda r: set(r["names"]) == good, what="the good endpoints programmed")
        r = await kt.probe(client, "tcp", vip, 80, 150)
        assert r["refused"] >= 15 and r["answered"] + r["refused"] == 150, f"iptables mode: about 1/3 refused: {r}"


@pytest.mark.modes("userspace")  # iptables affinity and its expiry: test_proxy_dataplane.py
async def test_client_ip_affinity_sticks_and_expires(kt):
    n1, n2 = kt.nodes
    web = {"app": "sticky"}
    backends = {"s-1", "s-2", "s-3"}
    for node, name in ((n1, "s-1"), (n2, "s-2"), (n2, "s-3")):
        await kt.pod(node, name, web)
    # four clients over three endpoints: strict round robin cannot hand each its old one back
    clients = [await kt.client_pod(n1, f"c-{i}") for i in range(4)]
    timeout_seconds = 2
    vip = (await kt.service("sticky", web, sessionAffinity="ClientIP",
                            sessionAffinityConfig={"clientIP": {"timeoutSeconds": timeout_seconds}}))["spec"]["clusterIP"]
    await kt.until(clients[0], "tcp", vip, 80, 1, lambda r: r["answered"] == 1, what="sticky Service answering")
    await asyncio.sleep(timeout_seconds + 1.5)
    rounds = []
    for round_no in range(3):
        chosen = {}
        for client in clients:
            r = await kt.probe(client, "tcp", vip, 80, 20, concurrency=1)
            assert_all_answered(r, f"round {round_no}")
            assert len(r["names"]) == 1 and set(r["names"]) <= backends, f"{client.name} spread: {r}"
            chosen[client.name] = next(iter(r["names"]))
        rounds.append(chosen)
        if round_no < 2:
            await asyncio.sleep(timeout_seconds + 1.5)
    moves = sum(rounds[i][c] != rounds[i + 1][c] for i in range(2) for c in rounds[0])
    assert moves > 0, f"affinity never expired: {rounds}"


@pytest.mark.modes("userspace")  # iptables UDP and conntrack cleanup: test_proxy_dataplane.py
async def test_udp_reaches_endpoints_and_follows_an_endpoint_replacement(kt):
    n1, n2 = kt.nodes
    labels = {"app": "dns"}
    old = await kt.pod(n1, "old", labels)
    client = await kt.client_pod(n2, "client")
    vip = (await kt.service("dns", labels, ports=[{"name": "dns", "port": 53, "targetPort": 8080, "protocol": "UDP"}]))["spec"]["clusterIP"]
    await kt.until(client, "udp", vip, 53, 5, all_from({"old"}), what="UDP to old", timeout=0.5)
    # one long-lived client port: its flow must move once old leaves the Service
    await kt.until(client, "udp", vip, 53, 5, all_from({"old"}), what="pinned flow on old", timeout=0.5, source_port=40053, interval=0.05)
    await kt.pod(n1, "new", labels)
    await kt.delete_pod(old, keep_running=True)
    await kt.until(client, "udp", vip, 53, 10, all_from({"new"}), what="the pinned flow on new", timeout=0.5, source_port=40053,
                   interval=0.05)
