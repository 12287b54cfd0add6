"""Where packets go: real TCP and UDP connections through ``kubesvc proxy``'s rules, in both
modes, in a two-node cluster of network namespaces (tests/support/netns.py):

    client ns 192.168.77.100/.101 --- lan bridge --- node1 192.168.77.11 (pods 10.244.1.0/24)
                                               \\--- node2 192.168.77.12 (pods 10.244.2.0/24)

Each node runs its own proxy against one real apiserver and EndpointSlice controller. Every
backend answers with its name and the source address it saw, so each test asserts both where
connections landed and whether they were masqueraded, as upstream's packet-flow tests
(pkg/proxy/{iptables,nftables}/proxier_test.go) describe.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests.kernel.helpers import all_from, assert_all_answered, assert_spread
from tests.support.netns import probe_argv

pytestmark = pytest.mark.kernel

NODE_COUNT = 2
PROXY_FLAGS = ("--iptables-min-sync-period=1s", "--iptables-sync-period=10s", "--v=2")
LB_IP = "203.0.113.10"  # routed by the external client to node 1


def node_ips(node) -> set[str]:
    return {node.lan_ip, node.gateway}


# ---------------------------------------------------------------------------------------------
# ClusterIP


async def test_cluster_ip_lands_on_every_ready_endpoint_from_a_pod_and_from_the_node(kt):
    n1, n2 = kt.nodes
    web = {"app": "web"}
    for node, name in ((n1, "web-1"), (n1, "web-2"), (n2, "web-3")):
        await kt.pod(node, name, web)
    await kt.pod(n1, "web-unready", web, ready=False)  # serving, but not Ready: must get nothing
    client = await kt.client_pod(n1, "client")
    other = await kt.client_pod(n2, "client-2")
    vip = (await kt.service("web", web))["spec"]["clusterIP"]
    ready = {"web-1", "web-2", "web-3"}

    await kt.until(client, "tcp", vip, 80, 60, all_from(ready), what="each ready endpoint answering")
    # 300 connections, 64 at a time, to three Python servers: on a loaded CI machine an answer
    # can take longer than the probe's usual 1 s (a server not scheduled in time, a SYN
    # retransmitted after its 1 s RTO); a connection that gets no answer in 3 s still fails
    from_pod = await kt.probe(client, "tcp", vip, 80, 300, timeout=3)
    assert_spread(from_pod, ready, 40, "ClusterIP from a pod on node 1")
    # local-traffic detection (--cluster-cidr): Pod traffic to a ClusterIP is not masqueraded
    assert from_pod["sources"] == {client.ip: 300}, from_pod

    from_node = await kt.until(n1, "tcp", vip, 80, 300, all_from(ready), what="ClusterIP from node 1 itself", timeout=3)
    assert_spread(from_node, ready, 40, "ClusterIP from the node")
    from_other = await kt.until(other, "tcp", vip, 80, 300, all_from(ready), what="ClusterIP from a pod on node 2", timeout=3)
    assert_spread(from_other, ready, 40, "ClusterIP from a pod on node 2")
    assert from_other["sources"] == {other.ip: 300}, from_other


async def test_cluster_ip_without_ready_endpoints_is_refused_at_once(kt):
    n1, _ = kt.nodes
    await kt.pod(n1, "lonely-unready", {"app": "lonely"}, ready=False)
    client = await kt.client_pod(n1, "client")
    ports = [{"name": "tcp", "port": 80, "targetPort": 8080, "protocol": "TCP"},
             {"name": "udp", "port": 53, "targetPort": 8080, "protocol": "UDP"}]
    none = (await kt.service("none", {"app": "nothing"}, ports=ports))["spec"]["clusterIP"]
    unready = (await kt.service("unready", {"app": "lonely"}, ports=ports))["spec"]["clusterIP"]

    for vip in (none, unready):
        for where in (client, n1):
            await kt.until(where, "tcp", vip, 80, 10, lambda r: r["refused"] == r["count"], what=f"REJECT for {vip}", timeout=0.5)
            # one after the other, each refused at once (an ICMP port-unreachable / RST, not a timeout)
            result = await kt.probe(where, "tcp", vip, 80, 20, timeout=3, concurrency=1)
            assert result["refused"] == 20 and result["elapsed"] < 1.0, f"{vip} from {where.name}: {result}"
        udp = await kt.until(client, "udp", vip, 53, 5, lambda r: r["refused"] == r["count"], what=f"UDP REJECT for {vip}",
                             timeout=0.5)
        assert udp["answered"] == 0, udp


# ---------------------------------------------------------------------------------------------
# session affinity


async def test_client_ip_affinity_sticks_then_may_move_after_the_timeout_and_without_it_spreads(kt):
    n1, n2 = kt.nodes
    web = {"app": "sticky"}
    backends = {"s-1", "s-2", "s-3", "s-4"}
    for node, name in ((n1, "s-1"), (n1, "s-2"), (n2, "s-3"), (n2, "s-4")):
        await kt.pod(node, name, web)
    clients = [n1] + [await kt.client_pod(node, f"c-{i}") for i, node in enumerate((n1, n1, n2, n2))]
    timeout_seconds = 2
    sticky = (await kt.service("sticky", web, sessionAffinity="ClientIP",
                               sessionAffinityConfig={"clientIP": {"timeoutSeconds": timeout_seconds}}))["spec"]["clusterIP"]
    spread = (await kt.service("spread", web))["spec"]["clusterIP"]

    result = await kt.until(clients[1], "tcp", spread, 80, 200, all_from(backends), what="all four endpoints")
    assert_spread(result, backends, 20, "without affinity")

    # wait until the sticky Service is programmed (any answer), then let that client's affinity expire
    await kt.until(clients[1], "tcp", sticky, 80, 1, lambda r: r["answered"] == 1, what="sticky Service answering")
    await asyncio.sleep(timeout_seconds + 1.5)

    rounds: list[dict[str, str]] = []
    for round_no in range(3):
        chosen = {}
        for client in clients:
            result = await kt.probe(client, "tcp", sticky, 80, 30, concurrency=1)
            assert_all_answered(result, f"round {round_no} from {client.name}")
            assert len(result["names"]) == 1, f"ClientIP affinity: {client.name} was spread over {result['names']} (round {round_no})"
            chosen[client.name] = next(iter(result["names"]))
        rounds.append(chosen)
        if round_no < 2:
            await asyncio.sleep(timeout_seconds + 1.5)  # idle past timeoutSeconds: the next choice is free again
    moves = sum(rounds[i][c] != rounds[i + 1][c] for i in range(2) for c in rounds[0])
    # 5 clients x 2 expiries, 4 endpoints: all staying put has probability (1/4)^10
    assert moves > 0, f"affinity never expired after timeoutSeconds={timeout_seconds}: {rounds}"


# ---------------------------------------------------------------------------------------------
# internalTrafficPolicy


async def test_internal_traffic_policy_local_uses_only_same_node_endpoints_and_drops_without_them(kt):
    n1, n2 = kt.nodes
    labels = {"app": "itp"}
    await kt.pod(n1, "itp-a1", labels)
    await kt.pod(n1, "itp-a2", labels)
    await kt.pod(n2, "itp-b1", labels)
    c1 = await kt.client_pod(n1, "c1")
    c2 = await kt.client_pod(n2, "c2")
    vip = (await kt.service("itp", labels, internalTrafficPolicy="Local"))["spec"]["clusterIP"]

    from_c1 = await kt.until(c1, "tcp", vip, 80, 200, all_from({"itp-a1", "itp-a2"}), what="node-1 endpoints only")
    assert_spread(from_c1, {"itp-a1", "itp-a2"}, 40, "iTP Local from node 1's pod")
    await kt.until(n1, "tcp", vip, 80, 100, all_from({"itp-a1", "itp-a2"}), what="node 1 itself: node-1 endpoints only")
    await kt.until(c2, "tcp", vip, 80, 100, all_from({"itp-b1"}), what="node-2 endpoint only")

    # only a node-2 endpoint left for node 1... the node-1 Pods leave the API but keep answering,
    # so stale rules would show; correct ones drop (not reject) node 1's traffic
    remote = {"app": "remote"}
    near = await kt.pod(n1, "near", remote)
    await kt.pod(n2, "far", remote)
    rvip = (await kt.service("remote", remote, internalTrafficPolicy="Local"))["spec"]["clusterIP"]
    await kt.until(c1, "tcp", rvip, 80, 20, all_from({"near"}), what="the local endpoint")
    await kt.delete_pod(near, keep_running=True)
    dropped = await kt.until(c1, "tcp", rvip, 80, 10, lambda r: r["timeouts"] == r["count"],
                             what="no local endpoints: dropped (timeouts, neither answers nor refusals)", timeout=0.5)
    assert dropped["refused"] == 0 and dropped["answered"] == 0, dropped
    await kt.until(c2, "tcp", rvip, 80, 20, all_from({"far"}), what="node 2 still reaching its own endpoint")


# ---------------------------------------------------------------------------------------------
# externalTrafficPolicy, NodePort, LoadBalancer


async def test_external_traffic_policy_local_keeps_the_client_address_and_local_endpoints(kt):
    n1, n2 = kt.nodes
    ext = kt.external
    labels = {"app": "etp-local"}
    await kt.pod(n1, "l-a1", labels)
    await kt.pod(n2, "l-b1", labels)
    svc = await kt.service("local", labels, type="LoadBalancer", externalTrafficPolicy="Local")
    node_port = svc["spec"]["ports"][0]["nodePort"]
    await kt.set_load_balancer_ip(svc, LB_IP)

    r = await kt.until(ext, "tcp", n1.lan_ip, node_port, 100, all_from({"l-a1"}), what="NodePort on node 1 -> node-1 endpoint")
    assert r["sources"] == {ext.ip: 100}, f"eTP Local must preserve the client address: {r}"
    r = await kt.until(ext, "tcp", LB_IP, 80, 100, all_from({"l-a1"}), what="LoadBalancer IP via node 1 -> node-1 endpoint")
    assert r["sources"] == {ext.ip: 100}, r
    r = await kt.until(ext, "tcp", n2.lan_ip, node_port, 100, all_from({"l-b1"}), what="NodePort on node 2 -> node-2 endpoint")
    assert r["sources"] == {ext.ip: 100}, r


async def test_external_traffic_policy_cluster_reaches_any_endpoint_masqueraded(kt):
    n1, n2 = kt.nodes
    ext = kt.external
    labels = {"app": "etp-cluster"}
    await kt.pod(n1, "c-a1", labels)
    await kt.pod(n2, "c-b1", labels)
    svc = await kt.service("cluster", labels, type="LoadBalancer", externalTrafficPolicy="Cluster")
    node_port = svc["spec"]["ports"][0]["nodePort"]
    await kt.set_load_balancer_ip(svc, "203.0.113.20")
    both = {"c-a1", "c-b1"}

    for target, port, via in ((n1.lan_ip, node_port, n1), ("203.0.113.20", 80, n1), (n2.lan_ip, node_port, n2)):
        r = await kt.until(ext, "tcp", target, port, 200, all_from(both), what=f"{target}:{port} -> both endpoints")
        assert_spread(r, both, 40, f"eTP Cluster via {target}:{port}")
        assert set(r["sources"]) <= node_ips(via), f"eTP Cluster must masquerade to {via.name}'s address: {r}"


async def test_terminating_local_endpoints_still_receive_external_traffic(kt):
    """eTP Local with only terminating (still serving) endpoints on a node: that node uses them
    rather than dropping (upstream's terminating-endpoint fallback); a node with a ready local
    endpoint and cluster-wide traffic ignore terminating ones."""
    n1, n2 = kt.nodes
    ext = kt.external
    t1 = await kt.pod(n1, "t-1", register=False)
    r2 = await kt.pod(n2, "r-2", register=False)
    client = await kt.client_pod(n1, "client")
    svc = await kt.service("fallback", None, type="NodePort", externalTrafficPolicy="Local")
    node_port = svc["spec"]["ports"][0]["nodePort"]
    vip = svc["spec"]["clusterIP"]
    await kt.endpoint_slice("fallback", "fallback-1", [kt.endpoint(t1, ready=False, serving=True, terminating=True), kt.endpoint(r2)])

    r = await kt.until(ext, "tcp", n1.lan_ip, node_port, 50, all_from({"t-1"}), what="node 1's terminating endpoint (fallback)")
    assert r["sources"] == {ext.ip: 50}, r
    await kt.until(ext, "tcp", n2.lan_ip, node_port, 50, all_from({"r-2"}), what="node 2's ready endpoint")
    await kt.until(client, "tcp", vip, 80, 50, all_from({"r-2"}), what="ClusterIP (iTP Cluster): ready endpoints only")


async def test_load_balancer_source_ranges_drop_other_sources(kt):
    n1, _ = kt.nodes
    ext = kt.external
    allowed, denied = ext.ips[0], ext.ips[1]
    labels = {"app": "fw"}
    await kt.pod(n1, "fw-1", labels)
    svc = await kt.service("fw", labels, type="LoadBalancer", loadBalancerSourceRanges=[f"{allowed}/32"])
    await kt.set_load_balancer_ip(svc, "203.0.113.30")

    await kt.until(ext, "tcp", "203.0.113.30", 80, 20, all_from({"fw-1"}), what="allowed source answered", bind=allowed)
    r = await kt.probe(ext, "tcp", "203.0.113.30", 80, 10, bind=denied, timeout=1.0)
    assert r["timeouts"] == 10 and r["answered"] == 0 and r["refused"] == 0, f"{denied} is outside loadBalancerSourceRanges: must be dropped: {r}"
    # still allowed after the denied attempts; the ranges guard the LoadBalancer IP only, not the NodePort
    await kt.until(ext, "tcp", "203.0.113.30", 80, 10, all_from({"fw-1"}), what="allowed source still answered", bind=allowed)
    await kt.until(ext, "tcp", n1.lan_ip, svc["spec"]["ports"][0]["nodePort"], 10, all_from({"fw-1"}),
                   what="NodePort from the denied source", bind=denied)


async def test_two_nodes_show_local_versus_cluster(kt):
    """Endpoints only on node 1: eTP Local answers on node 1 (client address kept) and drops on
    node 2; eTP Cluster answers on both, node 2 forwarding masqueraded; the Local Service's
    health-check node port reports each node's local endpoint count."""
    n1, n2 = kt.nodes
    ext = kt.external
    labels = {"app": "two"}
    await kt.pod(n1, "two-1", labels)
    await kt.pod(n1, "two-2", labels)
    pods = {"two-1", "two-2"}
    local = await kt.service("local", labels, type="LoadBalancer", externalTrafficPolicy="Local")
    cluster = await kt.service("cluster", labels, type="NodePort", externalTrafficPolicy="Cluster")
    lnp, cnp = local["spec"]["ports"][0]["nodePort"], cluster["spec"]["ports"][0]["nodePort"]
    hc_port = local["spec"]["healthCheckNodePort"]

    r = await kt.until(ext, "tcp", n1.lan_ip, lnp, 100, all_from(pods), what="Local NodePort on node 1")
    assert r["sources"] == {ext.ip: 100}, r
    r = await kt.until(ext, "tcp", n2.lan_ip, cnp, 100, all_from(pods), what="Cluster NodePort on node 2 -> node 1's Pods")
    assert set(r["sources"]) <= node_ips(n2), f"forwarded by node 2: masqueraded to node 2: {r}"
    r = await kt.until(ext, "tcp", n1.lan_ip, cnp, 100, all_from(pods), what="Cluster NodePort on node 1")
    assert set(r["sources"]) <= node_ips(n1), r

    async def health(node):
        return await asyncio.to_thread(_http, ext, node.lan_ip, hc_port)

    status, body = await _eventually(lambda: health(n1), lambda sb: sb[0] == 200, "node 1 health check 200")
    assert json.loads(body)["localEndpoints"] == 2, body
    status, body = await _eventually(lambda: health(n2), lambda sb: sb[0] == 503, "node 2 health check 503")
    assert json.loads(body)["localEndpoints"] == 0, body
    # node 2 knows the Service (its health check says so) and has no local endpoint: dropped
    r = await kt.probe(ext, "tcp", n2.lan_ip, lnp, 10, timeout=1.0)
    assert r["timeouts"] == 10, f"eTP Local NodePort on a node without local endpoints must drop: {r}"


def _http(where, host: str, port: int):
    try:
        return where.ns.http_get(port, "/", host=host, timeout=2)
    except OSError as exc:
        return (0, str(exc))


async def _eventually(fetch, check, what: str, timeout: float = 20):
    deadline = time.monotonic() + timeout
    while True:
        value = await fetch()
        if check(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last: {value}")
        await asyncio.sleep(0.2)


# ---------------------------------------------------------------------------------------------
# UDP and conntrack


async def test_udp_client_follows_an_endpoint_replacement(kt):
    """One UDP client keeps sending from the same source port (one conntrack flow) while its
    endpoint is replaced. The old backend keeps running after it leaves the API, so a stale
    conntrack entry would keep answering from it: the proxy must delete it."""
    n1, n2 = kt.nodes
    labels = {"app": "dns"}
    old = await kt.pod(n1, "old", labels)
    client = await kt.client_pod(n2, "client")
    vip = (await kt.service("dns", labels, ports=[{"name": "dns", "port": 53, "targetPort": 8080, "protocol": "UDP"}]))["spec"]["clusterIP"]
    await kt.until(client, "udp", vip, 53, 3, all_from({"old"}), what="UDP to the old endpoint", timeout=0.5)

    argv = client.ns.argv(*probe_argv("udp", vip, 53, 600, timeout=0.3, source_port=40053, interval=0.05, stream=True))
    stream = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    outcomes: list[tuple[float, str]] = []

    async def read_until(predicate, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; UDP flow so far: {_summary(outcomes)}\n{kt.env.diagnostics(rules=False)}")
            try:
                line = await asyncio.wait_for(stream.stdout.readline(), 1.0)
            except asyncio.TimeoutError:
                continue
            if not line:
                raise AssertionError(f"probe ended: {_summary(outcomes)} {(await stream.stderr.read()).decode()[-2000:]}")
            event = json.loads(line)
            if "outcome" in event:
                outcomes.append((time.monotonic(), event["outcome"].split(" ")[0]))

    try:
        await read_until(lambda: sum(o == "old" for _, o in outcomes) >= 5, 15, "the flow answered by old")
        await kt.pod(n1, "new", labels)
        # both endpoints programmed (fresh flows reach new) while this flow stays on old
        await kt.until(n2, "udp", vip, 53, 40, lambda r: "new" in r["names"], what="new endpoint programmed", timeout=0.5)
        await kt.delete_pod(old, keep_running=True)
        removed_at = time.monotonic()
        await read_until(lambda: _tail_is(outcomes, "new", 10), 20, "ten answers in a row from new after old left the API")
        after = [o for t, o in outcomes if t > removed_at]
        first_new = after.index("new")
        assert "old" not in after[first_new:], f"the flow went back to old after reaching new: {_summary(outcomes)}"
    finally:
        if stream.returncode is None:
            stream.kill()
        await stream.wait()


def _tail_is(outcomes, name: str, n: int) -> bool:
    return len(outcomes) >= n and all(o == name for _, o in outcomes[-n:])


def _summary(outcomes) -> str:
    runs: list[list] = []
    for _, o in outcomes:
        if runs and runs[-1][0] == o:
            runs[-1][1] += 1
        else:
            runs.append([o, 1])
    return " ".join(f"{o}x{n}" for o, n in runs)
