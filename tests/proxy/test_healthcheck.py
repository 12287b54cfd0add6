"""kube-proxy's /healthz, /livez and per-Service health-check node ports, over real HTTP on
127.0.0.1 (upstream pkg/proxy/healthcheck/healthcheck_test.go: TestHealthzServer, TestLivezServer,
TestServer, TestServerWithSelectiveListeningAddress)."""

import json
import socket
from datetime import datetime, timedelta, timezone

import aiohttp
import pytest

from kubesvc.proxy.healthcheck import (
    TO_BE_DELETED_TAINT,
    ProxyHealth,
    ProxyHealthServer,
    ServiceHealthServer,
    evaluate_proxy_health,
    go_time,
    health_check_listen_ips,
    listen_socket,
    node_is_eligible,
    service_health_body,
)
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.nodeportaddresses import NodePortAddresses
from kubesvc.proxy.types import IPV4, IPV6
from kubesvc.util.clock import FakeClock
from tests.support import builders

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---- pure decisions ---------------------------------------------------------------------------


@pytest.mark.parametrize(("last_updated", "pending", "now", "healthy", "status"), [
    pytest.param({}, {}, 0, True, {}, id="never synced: healthy"),
    pytest.param({}, {"IPv4": 0}, 100, True, {}, id="a queued update on a family that never synced is ignored"),
    pytest.param({"IPv4": 0}, {}, 100, True, {"IPv4": True}, id="synced, nothing pending"),
    pytest.param({"IPv4": 0}, {"IPv4": 10}, 19, True, {"IPv4": True}, id="pending, not late yet"),
    pytest.param({"IPv4": 0}, {"IPv4": 10}, 20, False, {"IPv4": False}, id="pending for the whole timeout"),
    pytest.param({"IPv4": 0, "IPv6": 5}, {"IPv6": 10}, 25, False, {"IPv4": True, "IPv6": False}, id="one late family makes all unhealthy"),
])
def test_evaluate_proxy_health(last_updated, pending, now, healthy, status):
    at = lambda seconds: T0 + timedelta(seconds=seconds)  # noqa: E731
    health = evaluate_proxy_health({k: at(v) for k, v in last_updated.items()}, {k: at(v) for k, v in pending.items()}, at(now), 10.0)
    assert health.healthy is healthy
    assert {name: s.healthy for name, s in health.status.items()} == status
    assert health.last_updated == (max(at(v) for v in last_updated.values()) if last_updated else None)


@pytest.mark.parametrize(("node", "eligible"), [
    pytest.param(None, False, id="unknown node"),
    pytest.param(builders.node("node-1"), True, id="plain node"),
    pytest.param(builders.node("node-1", taints=["other"]), True, id="tainted in any other way"),
    pytest.param(builders.node("node-1", taints=[TO_BE_DELETED_TAINT]), False, id="ToBeDeletedByClusterAutoscaler"),
    pytest.param(builders.node("node-1", deleted=True), False, id="being deleted"),
])
def test_node_is_eligible(node, eligible):
    assert node_is_eligible(node) is eligible


def test_proxy_health_json_is_gos_layout():
    health = ProxyHealth(True, T0, T0 + timedelta(seconds=1.5), {"IPv6": evaluate_proxy_health({"IPv6": T0}, {}, T0, 1).status["IPv6"],
                                                                   "IPv4": evaluate_proxy_health({"IPv4": T0}, {}, T0, 1).status["IPv4"]}, True)
    assert health.to_json() == (
        '{"lastUpdated":"2026-01-01T00:00:00Z","currentTime":"2026-01-01T00:00:01.5Z","nodeEligible":true,"healthy":true,'
        '"status":{"IPv4":{"lastUpdated":"2026-01-01T00:00:00Z","healthy":true},"IPv6":{"lastUpdated":"2026-01-01T00:00:00Z","healthy":true}}}')
    assert ProxyHealth(False, None, T0).to_json() == '{"lastUpdated":"0001-01-01T00:00:00Z","currentTime":"2026-01-01T00:00:00Z","healthy":false}'
    assert go_time(T0 + timedelta(microseconds=120)) == "2026-01-01T00:00:00.00012Z"


def test_service_health_body_is_tab_indented_without_trailing_newline():
    assert service_health_body("ns/svc", 3, True) == (
        '{\n\t"service": {\n\t\t"namespace": "ns",\n\t\t"name": "svc"\n\t},\n\t"localEndpoints": 3,\n\t"serviceProxyHealthy": true\n}')


# ---- the proxy's /healthz and /livez -----------------------------------------------------------


@pytest.fixture
async def proxy_health():
    clock = FakeClock(T0)
    server = ProxyHealthServer("127.0.0.1:0", 10.0, ProxyMetrics(), clock=clock)
    port = await server.start()
    async with aiohttp.ClientSession() as session:
        yield server, clock, session, f"http://127.0.0.1:{port}"
    await server.stop()


class Tracker:
    """Expected values of kubeproxy_proxy_{healthz,livez}_total, as upstream's serverTest."""

    def __init__(self, server: ProxyHealthServer, session, url: str, path: str):
        self.server, self.session, self.url, self.path = server, session, url, path
        self.counts = {200: 0, 503: 0}

    async def expect(self, status: int) -> dict:
        async with self.session.get(self.url + self.path) as response:
            body = await response.text()
            assert response.status == status, body
            assert response.headers["Content-Type"] == "application/json"
            assert response.headers["X-Content-Type-Options"] == "nosniff"
        self.counts[status] += 1
        metric = "kubeproxy_proxy_healthz_total" if self.path == "/healthz" else "kubeproxy_proxy_livez_total"
        for code, count in self.counts.items():
            assert (self.server.metrics.registry.get_sample_value(metric, {"code": str(code)}) or 0) == count
        return json.loads(body)


async def run_proxy_health_updater(server: ProxyHealthServer, clock: FakeClock, tracker: Tracker) -> None:
    """upstream testProxyHealthUpdater, step by step."""
    await tracker.expect(200)  # by default
    server.updated(IPV4)
    server.updated(IPV6)
    await tracker.expect(200)  # after the first update of both proxiers
    clock.advance(25)
    await tracker.expect(200)  # as long as no further updates are queued
    server.queued_update(IPV4)
    clock.advance(25)
    await tracker.expect(503)  # IPv4 exceeded the max update-processing time
    server.updated(IPV4)
    server.updated(IPV6)
    clock.advance(5)
    await tracker.expect(200)
    server.queued_update(IPV6)
    clock.advance(25)
    await tracker.expect(503)  # IPv6 late
    server.updated(IPV4)
    server.updated(IPV6)
    clock.advance(5)
    await tracker.expect(200)
    server.queued_update(IPV4)
    server.queued_update(IPV6)
    clock.advance(25)
    await tracker.expect(503)  # both late
    server.updated(IPV4)
    server.updated(IPV6)
    clock.advance(5)
    await tracker.expect(200)
    server.queued_update("IPv6")  # the proxier passes family names
    clock.advance(25)
    await tracker.expect(503)
    server.updated("IPv4")
    await tracker.expect(503)  # updating the on-time family changes nothing
    server.updated("IPv6")
    await tracker.expect(200)
    server.queued_update(IPV4)
    server.queued_update(IPV6)
    clock.advance(25)
    await tracker.expect(503)
    server.updated(IPV4)
    await tracker.expect(503)  # not 200 until both have updated
    server.updated(IPV6)
    await tracker.expect(200)


async def test_healthz_server(proxy_health):
    server, clock, session, url = proxy_health
    tracker = Tracker(server, session, url, "/healthz")
    server.sync_node(builders.node("node-1"))
    await run_proxy_health_updater(server, clock, tracker)
    server.sync_node(builders.node("node-1", taints=["other"]))
    await tracker.expect(200)  # tainted in any other way
    server.sync_node(builders.node("node-1", taints=[TO_BE_DELETED_TAINT]))
    await tracker.expect(503)
    server.sync_node(builders.node("node-1", taints=["other"]))
    await tracker.expect(200)
    server.sync_node(builders.node("node-1", deleted=True))
    await tracker.expect(503)
    server.sync_node(None)
    assert (await tracker.expect(503))["nodeEligible"] is False  # the Node went away


async def test_livez_server(proxy_health):
    server, clock, session, url = proxy_health
    tracker = Tracker(server, session, url, "/livez")
    await run_proxy_health_updater(server, clock, tracker)
    for node in (builders.node("node-1", taints=["other"]), builders.node("node-1", taints=[TO_BE_DELETED_TAINT]), builders.node("node-1", deleted=True), None):
        server.sync_node(node)
        await tracker.expect(200)  # irrespective of node syncs


async def test_healthz_body(proxy_health):
    server, clock, session, url = proxy_health
    server.sync_node(builders.node("node-1"))
    server.updated(IPV4)
    clock.advance(3)
    async with session.get(url + "/healthz") as response:
        assert await response.text() == (
            '{"lastUpdated":"2026-01-01T00:00:03Z","currentTime":"2026-01-01T00:00:03Z","nodeEligible":true,"healthy":true,'
            '"status":{"IPv4":{"lastUpdated":"2026-01-01T00:00:00Z","healthy":true}}}')
    server.queued_update(IPV4)
    clock.advance(10)
    async with session.get(url + "/livez") as response:
        assert response.status == 503
        # unhealthy: lastUpdated is the last successful sync, not now; /livez has no nodeEligible
        assert await response.text() == (
            '{"lastUpdated":"2026-01-01T00:00:00Z","currentTime":"2026-01-01T00:00:13Z","healthy":false,'
            '"status":{"IPv4":{"lastUpdated":"2026-01-01T00:00:00Z","healthy":false}}}')
    async with session.get(url + "/other") as response:
        assert response.status == 404


async def test_proxy_health_start_reports_a_busy_port():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(OSError, match=rf"^\[Errno \d+\] failed to start proxy healthz on 127.0.0.1:{port}: "
                                          rf"listen tcp 127.0.0.1:{port}: bind: address already in use$"):
            await ProxyHealthServer(f"127.0.0.1:{port}").start()


# ---- per-Service health-check node ports -------------------------------------------------------


class FakeProxyHealth:
    def __init__(self, healthy=True):
        self.healthy = healthy

    def health(self) -> ProxyHealth:
        return ProxyHealth(self.healthy, None, T0)


@pytest.fixture
async def session():
    async with aiohttp.ClientSession() as client:
        yield client


async def check_handler(session, port: int, service: str, status: int, endpoints: int, proxy_healthy: bool = True) -> None:
    """upstream tHandler: status, body, and the three headers."""
    async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
        body = await response.text()
        assert response.status == status, body
        assert response.headers["Content-Type"] == "application/json"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["X-Load-Balancing-Endpoint-Weight"] == str(endpoints)
    payload = json.loads(body)
    namespace, _, name = service.partition("/")
    assert payload == {"service": {"namespace": namespace, "name": name}, "localEndpoints": endpoints, "serviceProxyHealthy": proxy_healthy}
    assert body == service_health_body(service, endpoints, proxy_healthy)


async def refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True


async def test_server(session):
    proxy = FakeProxyHealth(True)
    hcs = ServiceHealthServer("hostname", None, proxy, listen_ips=["127.0.0.1"])
    try:
        await hcs.sync_services(None)  # sync nothing
        hcs.sync_endpoints(None)
        assert hcs.services == {}
        hcs.sync_endpoints({"a/b": 93})  # unknown endpoints are dropped
        assert hcs.services == {}

        p1, p2, p3, p3b, p4 = (free_port() for _ in range(5))
        await hcs.sync_services({"a/b": p1})  # a real service
        assert list(hcs.services) == ["a/b"] and hcs.services["a/b"].endpoints == 0
        await check_handler(session, p1, "a/b", 503, 0)
        hcs.sync_endpoints({"a/b": 18})
        await check_handler(session, p1, "a/b", 200, 18)
        hcs.sync_endpoints({"a/b": 0})
        await check_handler(session, p1, "a/b", 503, 0)
        hcs.sync_endpoints({"a/b": 11})
        hcs.sync_endpoints(None)  # nil endpoints: 0
        await check_handler(session, p1, "a/b", 503, 0)
        hcs.sync_endpoints({"a/b": 18})
        await hcs.sync_services(None)  # delete the service
        assert hcs.services == {}
        assert await refused(p1)

        await hcs.sync_services({"a/b": p1, "c/d": p2, "e/f": p3})  # multiple services
        assert sorted(hcs.services) == ["a/b", "c/d", "e/f"]
        for service, port in (("a/b", p1), ("c/d", p2), ("e/f", p3)):
            await check_handler(session, port, service, 503, 0)
        hcs.sync_endpoints({"a/b": 9, "c/d": 3, "e/f": 7})
        for service, port, count in (("a/b", p1, 9), ("c/d", p2, 3), ("e/f", p3, 7)):
            await check_handler(session, port, service, 200, count)

        await hcs.sync_services({"c/d": p2, "e/f": p3b, "g/h": p4})  # remove a/b, leave c/d, change e/f, add g/h
        assert sorted(hcs.services) == ["c/d", "e/f", "g/h"]
        assert await refused(p1) and await refused(p3)
        await check_handler(session, p2, "c/d", 200, 3)
        await check_handler(session, p3b, "e/f", 503, 0)
        await check_handler(session, p4, "g/h", 503, 0)
        hcs.sync_endpoints({"a/b": 9, "c/d": 3, "e/f": 7, "g/h": 6})
        await check_handler(session, p2, "c/d", 200, 3)
        await check_handler(session, p3b, "e/f", 200, 7)
        await check_handler(session, p4, "g/h", 200, 6)
        hcs.sync_endpoints({"e/f": 7, "g/h": 6})  # c/d missing: 0
        await check_handler(session, p2, "c/d", 503, 0)

        proxy.healthy = False  # a temporarily unhealthy proxy
        await check_handler(session, p2, "c/d", 503, 0, proxy_healthy=False)
        await check_handler(session, p3b, "e/f", 503, 7, proxy_healthy=False)
        await check_handler(session, p4, "g/h", 503, 6, proxy_healthy=False)
        proxy.healthy = True
        await check_handler(session, p2, "c/d", 503, 0)
        await check_handler(session, p3b, "e/f", 200, 7)
        await check_handler(session, p4, "g/h", 200, 6)
    finally:
        await hcs.close()
    assert hcs.services == {}


async def test_server_with_selective_listening_address(session):
    addresses = NodePortAddresses(["127.0.0.0/8"], IPV4)
    hcs = ServiceHealthServer("hostname", addresses, FakeProxyHealth(), interface_addresses=lambda: ["10.1.2.3", "127.0.0.1", "fd00::1"])
    assert hcs.listen_ips == ("127.0.0.1",)
    port = free_port()
    try:
        await hcs.sync_services({"a/b": port})
        assert list(hcs.services) == ["a/b"]
        await check_handler(session, port, "a/b", 503, 0)
    finally:
        await hcs.close()


@pytest.mark.parametrize(("addresses", "interface_addresses", "expected"), [
    pytest.param(None, ["10.0.0.1"], ("0.0.0.0",), id="no nodePortAddresses: everywhere"),
    pytest.param(NodePortAddresses([], IPV4), ["10.0.0.1"], ("0.0.0.0",), id="match all: everywhere"),
    pytest.param(NodePortAddresses(["10.0.0.0/8"], IPV4), ["127.0.0.1", "10.0.0.1", "10.0.0.2"], ("10.0.0.1", "10.0.0.2"), id="matching IPs"),
    pytest.param(NodePortAddresses(["10.0.0.0/8"], IPV4), ["192.168.0.1"], (), id="no matching IP: nowhere"),
    pytest.param(NodePortAddresses(["primary"], IPV4, ["192.168.0.9"]), ["192.168.0.9", "127.0.0.1"], ("192.168.0.9",), id="primary"),
])
def test_health_check_listen_ips(addresses, interface_addresses, expected):
    assert health_check_listen_ips(addresses, lambda: interface_addresses) == expected


def test_health_check_listen_ips_fall_back_to_everywhere():
    def broken():
        raise OSError("no netlink")
    assert health_check_listen_ips(NodePortAddresses(["10.0.0.0/8"], IPV4), broken) == ("0.0.0.0",)


async def test_failed_listen_is_reported_and_retried(session):
    failures = []
    port, free = free_port(), free_port()
    hcs = ServiceHealthServer("node-1", None, FakeProxyHealth(), lambda service, message: failures.append((service, message)),
                              listen_ips=["127.0.0.1"])
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("127.0.0.1", port))
    blocker.listen()
    try:
        await hcs.sync_services({"ns/busy": port, "ns/ok": free})
        assert list(hcs.services) == ["ns/ok"]  # the failure does not stop the others
        assert failures == [("ns/busy", f'node node-1 failed to start healthcheck "ns/busy" on port {port}: '
                                        f"listen tcp 127.0.0.1:{port}: bind: address already in use")]
        blocker.close()
        await hcs.sync_services({"ns/busy": port, "ns/ok": free})  # retried on the next sync
        assert sorted(hcs.services) == ["ns/busy", "ns/ok"]
        await check_handler(session, port, "ns/busy", 503, 0)
        assert len(failures) == 1
    finally:
        blocker.close()
        await hcs.close()


async def test_failed_listen_closes_the_services_other_listeners():
    port = free_port()
    failures = []
    hcs = ServiceHealthServer("node-1", None, FakeProxyHealth(), lambda s, m: failures.append(m), listen_ips=["127.0.0.1", "192.0.2.254"])
    try:
        await hcs.sync_services({"ns/svc": port})  # 192.0.2.254 is not ours: EADDRNOTAVAIL after 127.0.0.1 opened
        assert hcs.services == {}
        assert failures and "bind: cannot assign requested address" in failures[0]
        assert await refused(port)  # the 127.0.0.1 listener was closed again
    finally:
        await hcs.close()


async def test_request_for_a_closed_service_gets_an_empty_answer():
    hcs = ServiceHealthServer("node-1", None, FakeProxyHealth(), listen_ips=[])
    response = hcs.response("ns/gone")
    assert (response.status, response.body) == (200, None)


async def test_any_address_listens_on_both_families():
    sock = listen_socket("0.0.0.0", 0)
    try:
        port = sock.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            pass
        if sock.family == socket.AF_INET6:  # dual-stack where the kernel has IPv6
            with socket.create_connection(("::1", port), timeout=1):
                pass
    finally:
        sock.close()
