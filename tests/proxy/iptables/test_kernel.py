"""The iptables backend against the real kernel, in throwaway network namespaces
(``tests.support.netns.NodeTopology``: a client and a node whose own addresses are the
endpoints, so the client's traffic crosses nat PREROUTING then filter INPUT, or FORWARD to an
unanswered ClusterIP, and the node's own crosses nat and filter OUTPUT): real TCP/UDP
connections through ClusterIPs and NodePorts, REJECT, affinity, partial syncs, the canary
monitor repairing an outside flush, a failed restore followed by a full one, and
``cleanup_leftovers`` restoring ``iptables-save`` to what it was."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from kubesvc.kernel.fake.iptables import TEST_NODE_NAME
from kubesvc.kernel.iptables import Iptables
from kubesvc.proxy.backend import ProxyOptions, SyncFailed
from kubesvc.proxy.iptables.naming import endpoint_chain, service_chain
from kubesvc.proxy.iptables.proxier import IptablesBackend, cleanup_leftovers
from kubesvc.proxy.localdetector import LocalDetector
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.proxier import Proxier
from kubesvc.proxy.types import IPV4, IPV6
from tests.support.builders import Cluster, ep, port, spn
from tests.support.netns import NODE_IP, Netns, NodeTopology

pytestmark = pytest.mark.kernel

EPS = ["10.180.0.1", "10.180.0.2", "10.180.0.3", "10.180.0.4"]
WEB = {f"{ip}:8080" for ip in EPS[:3]}


@pytest.fixture
def topo():
    # endpoints are the node's own addresses; ClusterIPs and LoadBalancer VIPs routed to them
    t = NodeTopology(local_ips=tuple(EPS), local_routes=("172.30.0.0/16", "198.51.100.0/24"))
    try:
        # each endpoint answers as "<ip>:<port>"
        t.serve_many(t.node, [(f"{ip}:8080", ip, (8080,), ()) for ip in EPS] + [(f"{ip}:5353", ip, (), (5353,)) for ip in EPS])
        yield t
    finally:
        t.close()


def probe(ns: Netns, ip: str, port: int, proto: str = "tcp", count: int = 1, timeout: float = 1.0,
          source: str = "") -> list[tuple[str, float]]:
    """``count`` fresh connections (UDP: connected sockets) → [(endpoint that answered |
    "refused" | "timeout" | "error:<errno>", seconds)]."""
    return [(outcome.split()[0], seconds)
            for outcome, seconds in NodeTopology.attempts(ns, ip, port, proto, count=count, timeout=timeout, source=source)]


def replies(*args, **kwargs) -> list[str]:
    return [r for r, _ in probe(*args, **kwargs)]


def backend_for(topo: NodeTopology, family: int = IPV4, metrics: ProxyMetrics | None = None, **kwargs) -> Proxier:
    """The iptables mode inside the shared proxier (``run_sync`` takes requests directly)."""
    cidr = "10.244.0.0/16" if family == IPV4 else "fd00:244::/64"
    options = ProxyOptions(family=family, node_name=TEST_NODE_NAME, local_detector=LocalDetector(cidr=cidr, family=family))
    mode = IptablesBackend(options, netns=topo.node.name, ipt=RecordingIptables(family, netns=topo.node.name),
                           **kwargs)
    return Proxier(mode, options, metrics or ProxyMetrics())


class RecordingIptables(Iptables):
    """The real ``Iptables``, keeping every restore input it fed (``restores[-1]``: the last)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.restores: list[str] = []

    async def restore(self, text: str, **kwargs) -> None:
        self.restores.append(text)
        await super().restore(text, **kwargs)


def web_cluster() -> Cluster:
    c = Cluster(node_ip=NODE_IP)
    c.add(port("ns1", "web", "http", 80, cluster_ip="172.30.0.41", node_port=30080),
          port("ns1", "dns", "dns", 53, "UDP", cluster_ip="172.30.0.53"),
          port("ns1", "empty", "http", 80, cluster_ip="172.30.0.46", node_port=30046))
    c.set_endpoints(spn("ns1", "web", "http"), *(ep(ip, 8080) for ip in EPS[:3]))
    c.set_endpoints(spn("ns1", "dns", "dns", "UDP"), *(ep(ip, 5353) for ip in EPS[:3]))
    return c


def normalized_save(save: str) -> list[str]:
    return [re.sub(r"\[\d+:\d+\]", "[0:0]", line) for line in save.splitlines() if not line.startswith("#")]


async def test_cluster_ip_and_node_port_spread_over_endpoints(topo):
    backend = backend_for(topo)
    result = await backend.run_sync(web_cluster().request())
    assert result.full
    # from another machine: nat PREROUTING, then INPUT to a local endpoint
    assert set(replies(topo.client, "172.30.0.41", 80, count=60)) == WEB
    node_port = replies(topo.client, NODE_IP, 30080, count=30)
    assert set(node_port) <= WEB and len(set(node_port)) >= 2
    udp = replies(topo.client, "172.30.0.53", 53, "udp", count=45)
    assert set(udp) == {f"{ip}:5353" for ip in EPS[:3]}
    # from the node itself: nat OUTPUT
    assert set(replies(topo.node, "172.30.0.41", 80, count=30, source=NODE_IP)) <= WEB
    # NodePorts on 127.0.0.1 (IPv4 localhost NodePorts: route_localnet set in the node's namespace)
    assert topo.node.run("cat", "/proc/sys/net/ipv4/conf/all/route_localnet").stdout.strip() == "1"
    assert set(replies(topo.node, "127.0.0.1", 30080, count=10)) <= WEB
    # a port the Service does not define is not touched
    assert replies(topo.client, "172.30.0.41", 81, timeout=0.3) == ["timeout"]


@pytest.mark.parametrize("source, target, port_", [
    ("client", "172.30.0.46", 80),
    ("client", NODE_IP, 30046),
    ("node", "172.30.0.46", 80),
], ids=["FORWARD to KUBE-SERVICES", "INPUT to KUBE-EXTERNAL-SERVICES", "OUTPUT to KUBE-SERVICES"])
async def test_no_endpoints_rejects_at_once(topo, source, target, port_):
    backend = backend_for(topo)
    await backend.run_sync(web_cluster().request())
    results = probe(getattr(topo, source), target, port_, "tcp", count=3, timeout=2.0)
    assert [r for r, _ in results] == ["refused"] * 3, (target, port_)
    assert max(t for _, t in results) < 0.5


async def test_session_affinity_sticks_to_one_endpoint(topo):
    backend = backend_for(topo)
    c = Cluster(node_ip=NODE_IP).add(port("ns1", "sticky", "http", 80, cluster_ip="172.30.0.44", affinity_seconds=600))
    c.set_endpoints(spn("ns1", "sticky", "http"), *(ep(ip, 8080) for ip in EPS[:3]))
    await backend.run_sync(c.request())
    answers = replies(topo.client, "172.30.0.44", 80, count=25)
    assert len(set(answers)) == 1 and answers[0] in WEB
    assert "--rcheck --seconds 600 --reap" in topo.iptables_save()


async def test_load_balancer_source_ranges(topo):
    backend = backend_for(topo)
    c = Cluster(node_ip=NODE_IP)
    c.add(port("ns1", "open", "http", 80, cluster_ip="172.30.0.47", lb_ips=["198.51.100.7"], source_ranges=["192.168.50.0/24"]),
          port("ns1", "closed", "http", 80, cluster_ip="172.30.0.48", lb_ips=["198.51.100.8"], source_ranges=["203.0.113.0/25"]))
    c.set_endpoints(spn("ns1", "open", "http"), ep(EPS[0], 8080))
    c.set_endpoints(spn("ns1", "closed", "http"), ep(EPS[1], 8080))
    await backend.run_sync(c.request())
    assert replies(topo.client, "198.51.100.7", 80) == [f"{EPS[0]}:8080"]
    assert replies(topo.client, "198.51.100.8", 80, timeout=0.3) == ["timeout"]  # KUBE-PROXY-FIREWALL drops it
    assert replies(topo.client, "172.30.0.48", 80) == [f"{EPS[1]}:8080"]  # the ClusterIP is not filtered
    assert "-j DROP" in topo.node.run("iptables", "-w", "5", "-t", "filter", "-S", "KUBE-PROXY-FIREWALL").stdout


async def test_partial_sync_rewrites_only_the_changed_service(topo):
    backend = backend_for(topo)
    c = web_cluster()
    await backend.run_sync(c.request())
    web_svc = service_chain(spn("ns1", "web", "http"))

    c.add(port("ns2", "api", "http", 80, cluster_ip="172.30.0.42"))
    c.set_endpoints(spn("ns2", "api", "http"), ep(EPS[3], 8080))
    result = await backend.run_sync(c.request())
    assert not result.full
    assert f":{web_svc} " not in backend.mode.ipt.restores[-1]
    assert replies(topo.client, "172.30.0.42", 80, count=3) == [f"{EPS[3]}:8080"] * 3
    assert set(replies(topo.client, "172.30.0.41", 80, count=30)) == WEB  # untouched, still working

    c.set_endpoints(spn("ns1", "web", "http"), ep(EPS[1], 8080))
    result = await backend.run_sync(c.request())
    assert not result.full
    assert set(replies(topo.client, "172.30.0.41", 80, count=10)) == {f"{EPS[1]}:8080"}
    save = topo.iptables_save()
    assert endpoint_chain(spn("ns1", "web", "http"), f"{EPS[0]}:8080") not in save  # stale chain deleted
    assert endpoint_chain(spn("ns1", "web", "http"), f"{EPS[1]}:8080") in save


async def test_canary_monitor_repairs_a_flush(topo):
    period = 0.5
    backend = backend_for(topo, canary_period=period, flush_timeout=1.0)
    c = web_cluster()
    requests: list[float] = []
    repaired: list[float] = []

    async def resync():  # what the shared proxier does: a full sync now, retried until it works
        while True:
            try:
                await backend.run_sync(c.request(full=True))
                repaired.append(time.monotonic())
                return
            except SyncFailed:
                await asyncio.sleep(period)

    def request_full_sync():
        requests.append(time.monotonic())
        asyncio.get_running_loop().create_task(resync())

    async def ns(*argv, check=True):  # blocking tools run in a thread: the monitor keeps polling
        return await asyncio.to_thread(topo.node.run, *argv, check=check)

    async def answers(**kwargs):
        return await asyncio.to_thread(replies, topo.client, "172.30.0.41", 80, **kwargs)

    async def until(predicate, limit: float, what: str):
        deadline = time.monotonic() + limit
        while not predicate():
            assert time.monotonic() < deadline, what
            await asyncio.sleep(0.02)

    await backend.run_sync(c.request())
    backend.request_full_sync = request_full_sync  # instead of the proxier's own
    await backend.start()
    try:
        deadline = time.monotonic() + 10
        while (await ns("iptables", "-w", "5", "-t", "mangle", "-S", "KUBE-PROXY-CANARY", check=False)).returncode:
            assert time.monotonic() < deadline, "canary never created"
            await asyncio.sleep(0.05)
        assert set(await answers(count=10)) <= WEB

        # a firewall reload: every table flushed, every user chain deleted
        for table in ("mangle", "nat", "filter"):
            await ns("iptables", "-w", "5", "-t", table, "-F")
            await ns("iptables", "-w", "5", "-t", table, "-X")
        flushed = time.monotonic()
        assert await answers(timeout=0.3) == ["timeout"]
        await until(lambda: repaired, 30, "no full resync after the flush")
        # noticed within one poll period (plus slack for a loaded machine); all canaries were
        # gone, so no flush wait
        assert len(requests) == 1 and requests[0] - flushed < period + 2.0
        assert set(await answers(count=20)) <= WEB

        # only the mangle canary goes, and someone deletes our PREROUTING jump too: the monitor
        # waits (flush_timeout) for nat/filter, then the full sync puts the jump back
        await ns("iptables", "-w", "5", "-t", "mangle", "-X", "KUBE-PROXY-CANARY")
        gone = time.monotonic()
        await ns("iptables", "-w", "5", "-t", "nat", "-D", "PREROUTING", "-m", "comment", "--comment",
                 "kubernetes service portals", "-j", "KUBE-SERVICES")
        assert await answers(timeout=0.3) == ["timeout"]
        await until(lambda: len(repaired) == 2, 30, "no full resync after the mangle canary went")
        assert requests[1] - gone >= backend.mode.flush_timeout
        assert set(await answers(count=10)) <= WEB
    finally:
        await backend.stop()
    assert "KUBE-PROXY-CANARY" not in topo.node.run("iptables-save").stdout


async def test_failed_partial_restore_then_full_sync(topo):
    """upstream TestSyncProxyRulesRepeated's failure, on the real kernel: a foreign jump into an
    endpoint chain makes the partial restore that deletes it fail as a whole."""
    metrics = ProxyMetrics()
    backend = backend_for(topo, metrics=metrics)
    c = Cluster(node_ip=NODE_IP)
    c.add(port("ns3", "svc3", cluster_ip="172.30.0.43"), port("ns4", "svc4", cluster_ip="172.30.0.44"))
    c.set_endpoints(spn("ns3", "svc3"), ep(EPS[0], 8080))
    c.set_endpoints(spn("ns4", "svc4"), ep(EPS[1], 8080))
    await backend.run_sync(c.request())
    svc3_chain = service_chain(spn("ns3", "svc3"))
    svc4_sep = endpoint_chain(spn("ns4", "svc4"), f"{EPS[1]}:8080")
    topo.node.run("iptables", "-w", "5", "-t", "nat", "-A", svc3_chain, "-j", svc4_sep)

    c.delete_service("ns4", "svc4")
    c.set_endpoints(spn("ns4", "svc4"))
    with pytest.raises(SyncFailed):
        await backend.run_sync(c.request())
    assert backend.need_full_sync
    family = {"ip_family": "IPv4"}
    assert metrics.registry.get_sample_value("kubeproxy_sync_proxy_rules_iptables_restore_failures_total", family) == 1
    assert metrics.registry.get_sample_value("kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total", family) == 1
    # nothing of the failed transaction was applied
    assert replies(topo.client, "172.30.0.44", 80) == [f"{EPS[1]}:8080"]
    assert replies(topo.client, "172.30.0.43", 80) == [f"{EPS[0]}:8080"]

    result = await backend.run_sync(c.request())  # the retry is full, rewrites svc3's chain
    assert result.full
    save = topo.iptables_save()
    assert svc4_sep not in save and service_chain(spn("ns4", "svc4")) not in save
    assert replies(topo.client, "172.30.0.44", 80, timeout=0.3) == ["timeout"]
    assert replies(topo.client, "172.30.0.43", 80) == [f"{EPS[0]}:8080"]


async def test_cleanup_leftovers_restores_the_tables(topo):
    node = topo.node
    # what was there before kube-proxy: someone's rules in every table (no kubelet here: the
    # proxy's KUBE-FIREWALL is its own and goes too)
    for binary in ("iptables", "ip6tables"):
        ipt = [binary, "-w", "5"]
        node.run(*ipt, "-t", "filter", "-N", "USER-IN")
        node.run(*ipt, "-t", "filter", "-A", "USER-IN", "-p", "tcp", "--dport", "22", "-j", "ACCEPT")
        node.run(*ipt, "-t", "filter", "-A", "INPUT", "-j", "USER-IN")
        node.run(*ipt, "-t", "nat", "-N", "USER-NAT")
        node.run(*ipt, "-t", "mangle", "-N", "USER-MANGLE")
    node.run("iptables", "-w", "5", "-t", "nat", "-A", "POSTROUTING", "-s", "10.99.0.0/16", "-j", "MASQUERADE")
    before4 = normalized_save(node.run("iptables-save").stdout)
    before6 = normalized_save(node.run("ip6tables-save").stdout)

    c = web_cluster()
    c.add(port("ns5", "lb", "http", 80, cluster_ip="172.30.0.45", node_port=30045, lb_ips=["198.51.100.5"],
               source_ranges=["192.168.50.0/24"], etp_local=True, health_check_node_port=31000, affinity_seconds=60))
    c.set_endpoints(spn("ns5", "lb", "http"), ep(EPS[3], 8080, node=TEST_NODE_NAME))
    backend4 = backend_for(topo)
    await backend4.run_sync(c.request())
    assert replies(topo.client, "172.30.0.45", 80) == [f"{EPS[3]}:8080"]
    backend6 = backend_for(topo, IPV6)
    c6 = Cluster(node_ip="fd00:50::1").add(port("ns1", "web6", "http", 80, cluster_ip="fd00:172:30::41", node_port=30081))
    c6.set_endpoints(spn("ns1", "web6", "http"), ep("fd00:10:180::1", 8080))
    await backend6.run_sync(c6.request())
    # canaries planted, then the proxy dies without cleaning up
    await backend4.start()
    deadline = time.monotonic() + 5
    while "KUBE-PROXY-CANARY" not in node.run("iptables-save", "-t", "filter").stdout:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    (monitor,) = backend4._tasks  # the proxy dies: its tasks end, nothing is closed
    monitor.cancel()
    with pytest.raises(asyncio.CancelledError):
        await monitor
    assert "KUBE-SVC-" in node.run("iptables-save").stdout

    assert cleanup_leftovers(netns=node.name) is None  # both families
    assert normalized_save(node.run("iptables-save").stdout) == before4
    assert normalized_save(node.run("ip6tables-save").stdout) == before6
    cleanup_leftovers(netns=node.name)  # nothing left to do, no error
    assert normalized_save(node.run("iptables-save").stdout) == before4
    assert normalized_save(node.run("ip6tables-save").stdout) == before6
