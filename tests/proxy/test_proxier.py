"""The shared proxier: what each sync hands the mode, and what it does after.

A recording mode stands in for the kernel mode (the kernel modes have their own tests and
the data-plane tests in tests/kernel run the whole chain)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from kubesvc.kernel.fake.conntrack import FakeConntrack
from kubesvc.proxy.backend import KernelPlan, Mode, ProxyOptions, SyncFailed, SyncRequest
from kubesvc.proxy.healthcheck import ProxyHealthServer
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.proxier import Proxier
from kubesvc.proxy.runner import FakeTimers
from kubesvc.proxy.types import ServicePortName
from tests.support.cluster import running_task
from tests.support.builders import endpoint, endpoint_slice, service, service_port, slice_port
from kubesvc.util.clock import FakeClock


class RecordingBackend(Mode[int]):
    """Its state counts the syncs the kernel accepted."""

    mode = "recording"
    failure_metric = "iptables_restore_failures"
    partial_failure_metric = "iptables_partial_restore_failures"
    cleanup_failure_metric = "nftables_cleanup_failures"

    def __init__(self):
        super().__init__(ProxyOptions(node_name="node-a"))
        self.requests: list[SyncRequest] = []
        self.fail_next = False
        self.fail_tidy = False

    def initial_state(self) -> int:
        return 0

    async def tidy(self, state: int) -> int:
        if self.fail_tidy:
            self.fail_tidy = False
            raise OSError("stale chains in use")
        return state

    def plan(self, request: SyncRequest, previous: int, observed) -> KernelPlan[int]:
        self.requests.append(request)
        return KernelPlan(kernel_input=request, next_state=previous + 1)

    async def apply(self, plan: KernelPlan[int]) -> None:
        if self.fail_next:
            self.fail_next = False
            raise SyncFailed("kernel said no")


def cluster_ip_service(name: str, ip: str, protocol: str = "TCP") -> dict:
    """A ClusterIP Service in namespace ns with one port "p" (80, or 53 for UDP)."""
    return service("ns", name, service_port("p", protocol, 53 if protocol == "UDP" else 80), type="ClusterIP", clusterIP=ip, clusterIPs=[ip])


def ready_slice(service_name: str, ips: list[str], protocol: str = "TCP", name: str = "") -> dict:
    """Its EndpointSlice: ``ips`` ready on port "p" (8080, or 5353 for UDP)."""
    return endpoint_slice("ns", service_name, name or f"{service_name}-1", [endpoint(ip, ready=True) for ip in ips],
                          [slice_port("p", 5353 if protocol == "UDP" else 8080, protocol)])


@pytest.fixture
def conntrack() -> FakeConntrack:
    """The node's conntrack table (a stateful fake) where the proxier deletes stale entries."""
    return FakeConntrack()


def new_proxier(backend, health=None, conntrack: FakeConntrack | None = None) -> Proxier:
    """A proxier over ``backend``; stale conntrack entries are deleted from ``conntrack`` (a fresh fake by default)."""
    return Proxier(backend, ProxyOptions(node_name="node-a"), ProxyMetrics(), min_sync_period=0, health=health,
                   conntrack=conntrack or FakeConntrack())


def metric(proxier: Proxier, name: str, **labels) -> float:
    return proxier.metrics.registry.get_sample_value(name, labels or None) or 0.0


async def test_nothing_is_synced_until_both_informers_synced():
    backend = RecordingBackend()
    proxier = new_proxier(backend)
    proxier.on_service_add(cluster_ip_service("a", "10.96.0.1"))
    proxier.on_services_synced()
    await proxier.sync_proxy_rules()
    assert backend.requests == []
    proxier.on_endpoint_slices_synced()
    await proxier.sync_proxy_rules()
    assert len(backend.requests) == 1


async def test_first_sync_is_full_then_partial_with_only_the_changed_services():
    backend = RecordingBackend()
    proxier = new_proxier(backend)
    proxier.on_services_synced()
    proxier.on_endpoint_slices_synced()
    for name, ip in (("a", "10.96.0.1"), ("b", "10.96.0.2")):
        proxier.on_service_add(cluster_ip_service(name, ip))
        proxier.on_endpoint_slice_add(ready_slice(name, ["10.244.0.1"]))
    await proxier.sync_proxy_rules()
    first = backend.requests[-1]
    assert first.full
    assert set(first.service_ports) == {ServicePortName("ns", "a", "p", "TCP"), ServicePortName("ns", "b", "p", "TCP")}
    proxier.on_endpoint_slice_update({}, ready_slice("b", ["10.244.0.1", "10.244.0.2"]))
    await proxier.sync_proxy_rules()
    second = backend.requests[-1]
    assert not second.full
    assert second.changed_services == {"ns/b"}
    assert [str(ep) for ep in second.endpoints[ServicePortName("ns", "b", "p", "TCP")]] == ["10.244.0.1:8080", "10.244.0.2:8080"]
    assert metric(proxier, "kubeproxy_sync_full_proxy_rules_duration_seconds_count", ip_family="IPv4") == 1
    assert metric(proxier, "kubeproxy_sync_partial_proxy_rules_duration_seconds_count", ip_family="IPv4") == 1
    assert metric(proxier, "kubeproxy_sync_proxy_rules_endpoint_changes_total") == 3
    assert metric(proxier, "kubeproxy_sync_proxy_rules_service_changes_total") == 2


async def test_a_change_after_a_quiet_minimum_interval_syncs_at_once_one_within_it_at_its_end():
    """The sync scheduling upstream's BoundedFrequencyRunner gives kube-proxy (burstSyncs 2), on
    fake time: minSyncPeriod (1 s) is the only wait. An endpoint change after a quiet second
    syncs at once (no timer advanced), and so does the next one, the burst's second; a third
    within the second after that sync waits for exactly that second's end, and changes
    meanwhile coalesce into that one sync."""
    backend = RecordingBackend()
    proxier = Proxier(backend, ProxyOptions(node_name="node-a"), ProxyMetrics(), min_sync_period=1.0, conntrack=FakeConntrack())
    timers = FakeTimers()
    proxier.runner.clock = timers

    async def settle() -> None:
        for _ in range(50):
            await asyncio.sleep(0)

    def synced_endpoints() -> list[str]:
        return [str(ep) for ep in backend.requests[-1].endpoints.get(ServicePortName("ns", "web", "p", "TCP"), [])]

    async with running_task(proxier.runner.loop()):
        proxier.on_service_add(cluster_ip_service("web", "10.96.0.10"))
        proxier.on_services_synced()
        proxier.on_endpoint_slices_synced()
        await settle()
        assert len(backend.requests) == 1  # t=0: the first sync, at once
        timers.advance(2.0)  # quiet, longer than minSyncPeriod
        await settle()
        assert len(backend.requests) == 1
        proxier.on_endpoint_slice_add(ready_slice("web", ["10.244.0.1"]))
        await settle()  # t=2.0: no time passes, the sync has run
        assert len(backend.requests) == 2 and synced_endpoints() == ["10.244.0.1:8080"]
        timers.advance(0.25)
        proxier.on_endpoint_slice_update({}, ready_slice("web", ["10.244.0.1", "10.244.0.2"]))
        await settle()
        assert len(backend.requests) == 3  # t=2.25: the burst's second sync, at once
        timers.advance(0.25)
        proxier.on_endpoint_slice_update({}, ready_slice("web", ["10.244.0.1", "10.244.0.2", "10.244.0.3"]))
        await settle()
        assert len(backend.requests) == 3  # t=2.5: the burst spent, within the second after the sync at 2.25
        timers.advance(0.5)
        await settle()
        assert len(backend.requests) == 3  # t=3.0: a token again, but the deferred sync is due at 3.25
        timers.advance(0.25)
        await settle()  # t=3.25: exactly minSyncPeriod after the last sync ended
        assert len(backend.requests) == 4
        assert synced_endpoints() == ["10.244.0.1:8080", "10.244.0.2:8080", "10.244.0.3:8080"]
        timers.advance(10.0)
        await settle()
        assert len(backend.requests) == 4  # nothing changed: no sync until the hourly one


async def test_a_failed_sync_makes_the_next_one_full():
    backend = RecordingBackend()
    proxier = new_proxier(backend)
    proxier.on_services_synced()
    proxier.on_endpoint_slices_synced()
    await proxier.sync_proxy_rules()
    proxier.on_service_add(cluster_ip_service("a", "10.96.0.1"))
    backend.fail_next = True
    with pytest.raises(SyncFailed):
        await proxier.sync_proxy_rules()
    assert not backend.requests[-1].full
    assert proxier.state == 1  # the failed plan's state was not committed
    assert metric(proxier, "kubeproxy_sync_proxy_rules_iptables_restore_failures_total", ip_family="IPv4") == 1
    assert metric(proxier, "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total", ip_family="IPv4") == 1
    await proxier.sync_proxy_rules()
    assert backend.requests[-1].full
    assert proxier.state == 2


async def test_a_failed_housekeeping_makes_this_sync_full_and_counts_the_cleanup_failure():
    backend = RecordingBackend()
    proxier = new_proxier(backend)
    proxier.on_services_synced()
    proxier.on_endpoint_slices_synced()
    await proxier.sync_proxy_rules()
    backend.fail_tidy = True
    await proxier.sync_proxy_rules()
    assert backend.requests[-1].full
    assert metric(proxier, "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total", ip_family="IPv4") == 1
    assert metric(proxier, "kubeproxy_sync_proxy_rules_iptables_restore_failures_total", ip_family="IPv4") == 0


@pytest.mark.parametrize("change", [{"nodeport_ips": ("10.0.0.1",)}, {"node_ip": "10.0.0.1"},
                                    {"service_cidrs": ("10.96.0.0/16",)}, {"node_labels": {"topology.kubernetes.io/zone": "z1"}}],
                         ids=["nodeport_ips", "node_ip", "service_cidrs", "node_labels"])
async def test_a_change_of_an_input_that_shapes_the_fixed_rules_makes_the_sync_full(change):
    backend = RecordingBackend()
    proxier = new_proxier(backend)
    request = SyncRequest(full=False, service_ports={}, endpoints={})
    assert (await proxier.run_sync(request)).full  # the first
    assert not (await proxier.run_sync(request)).full
    assert (await proxier.run_sync(dataclasses.replace(request, **change))).full
    assert not (await proxier.run_sync(dataclasses.replace(request, **change))).full


async def test_request_full_sync_and_topology_label_changes_force_full():
    backend = RecordingBackend()
    proxier = new_proxier(backend)
    proxier.on_services_synced()
    proxier.on_endpoint_slices_synced()
    await proxier.sync_proxy_rules()
    await proxier.sync_proxy_rules()
    assert not backend.requests[-1].full
    proxier.request_full_sync()
    await proxier.sync_proxy_rules()
    assert backend.requests[-1].full
    proxier.on_node({"metadata": {"name": "node-a", "labels": {"topology.kubernetes.io/zone": "z1"}}})
    await proxier.sync_proxy_rules()
    assert backend.requests[-1].full
    assert backend.requests[-1].node_labels == {"topology.kubernetes.io/zone": "z1"}
    proxier.on_node({"metadata": {"name": "node-a", "labels": {"topology.kubernetes.io/zone": "z1", "other": "x"}}})
    await proxier.sync_proxy_rules()
    assert not backend.requests[-1].full


async def test_udp_endpoint_replacement_deletes_conntrack_entries_to_the_old_backend(conntrack):
    backend = RecordingBackend()
    proxier = new_proxier(backend, conntrack=conntrack)
    proxier.on_services_synced()
    proxier.on_endpoint_slices_synced()
    proxier.on_service_add(cluster_ip_service("dns", "10.96.0.10", "UDP"))
    conntrack.insert("udp", "10.0.0.9", "10.96.0.10", 4000, 53)  # sent while there was no endpoint: not NATed
    proxier.on_endpoint_slice_add(ready_slice("dns", ["10.244.0.5"], "UDP"))
    await proxier.sync_proxy_rules()
    assert conntrack.flows_sync() == []  # the first endpoint: every entry to the Service:port goes

    to_old = conntrack.insert("udp", "10.0.0.9", "10.96.0.10", 4001, 53, dst_nat="10.244.0.5:5353")
    elsewhere = conntrack.insert("udp", "10.0.0.9", "10.96.0.11", 4003, 53, dst_nat="10.244.0.5:5353")
    proxier.on_endpoint_slice_update({}, ready_slice("dns", ["10.244.0.6"], "UDP"))
    to_new = conntrack.insert("udp", "10.0.0.9", "10.96.0.10", 4002, 53, dst_nat="10.244.0.6:5353")
    await proxier.sync_proxy_rules()
    flows = conntrack.flows_sync()
    assert to_old not in flows and flows == [elsewhere, to_new]  # only the entry NATed to the old backend
    assert metric(proxier, "kubeproxy_conntrack_reconciler_deleted_entries_total", ip_family="IPv4") == 2


async def test_health_follows_queued_and_applied_syncs():
    backend = RecordingBackend()
    clock = FakeClock()
    health = ProxyHealthServer(health_timeout=60, clock=clock)
    proxier = new_proxier(backend, health)
    proxier.on_services_synced()
    proxier.on_endpoint_slices_synced()
    await proxier.sync_proxy_rules()
    assert "IPv4" in health.health().status and health.health().healthy
    assert metric(proxier, "kubeproxy_sync_proxy_rules_last_timestamp_seconds", ip_family="IPv4") > 0
    proxier.on_service_add(cluster_ip_service("a", "10.96.0.1"))  # queued, and then never applied
    clock.advance(61)
    assert not health.health().healthy
    await proxier.sync_proxy_rules()
    assert health.health().healthy


async def test_prefer_same_node_gate_reaches_the_endpoints():
    backend = RecordingBackend()
    proxier = Proxier(backend, ProxyOptions(node_name="node-a", prefer_same_node=True), ProxyMetrics(), min_sync_period=0)
    proxier.on_services_synced()
    proxier.on_endpoint_slices_synced()
    proxier.on_service_add(cluster_ip_service("a", "10.96.0.1"))
    hinted = ready_slice("a", ["10.244.0.1"])
    hinted["endpoints"][0]["hints"] = {"forNodes": [{"name": "node-a"}], "forZones": [{"name": "z1"}]}
    proxier.on_endpoint_slice_add(hinted)
    await proxier.sync_proxy_rules()
    (endpoint,) = backend.requests[-1].endpoints[ServicePortName("ns", "a", "p", "TCP")]
    assert endpoint.node_hints == frozenset({"node-a"})


async def test_a_failed_address_lookup_keeps_the_changes_for_the_next_sync():
    backend = RecordingBackend()
    failures = [OSError("ip -j addr failed")]

    async def nodeport_ips():
        if failures:
            raise failures.pop()
        return ("192.168.0.10",)

    proxier = Proxier(backend, ProxyOptions(node_name="node-a"), ProxyMetrics(), min_sync_period=0, nodeport_ips=nodeport_ips)
    proxier.on_services_synced()
    proxier.on_endpoint_slices_synced()
    proxier.on_service_add(cluster_ip_service("a", "10.96.0.1"))
    with pytest.raises(OSError):
        await proxier.sync_proxy_rules()
    await proxier.sync_proxy_rules()
    assert ServicePortName("ns", "a", "p", "TCP") in backend.requests[-1].service_ports
    assert backend.requests[-1].nodeport_ips == ("192.168.0.10",)


async def test_the_mode_background_tasks_run_until_stop_then_the_mode_closes():
    events: list[str] = []

    class WithMonitor(RecordingBackend):
        def background(self, request_full_sync, state):
            async def monitor():
                events.append(f"started with state {state()}")
                request_full_sync()  # someone changed our kernel state
                try:
                    await asyncio.Event().wait()
                finally:
                    events.append("cancelled")
            return [monitor()]

        async def close(self) -> None:
            events.append("closed")

    backend = WithMonitor()
    proxier = new_proxier(backend)
    await proxier.run_sync(SyncRequest(full=False, service_ports={}, endpoints={}))
    await proxier.start()
    await asyncio.sleep(0)
    assert events == ["started with state 1"] and proxier.need_full_sync
    assert (await proxier.run_sync(SyncRequest(full=False, service_ports={}, endpoints={}))).full
    await proxier.stop()
    assert events == ["started with state 1", "cancelled", "closed"]


async def test_a_sync_reports_its_progress_in_the_log_and_the_metrics(caplog):
    """Upstream's V(2) lines (Syncing ... rules, Reloading service ... data with the counts,
    SyncProxyRules complete), the phase lines of a full sync, and the phase gauge and start
    time while each phase runs, back to 0 after."""
    seen = []

    class Watching(RecordingBackend):
        def _look(self, phase: str) -> None:
            seen.append((phase, [p for p in ("observe", "plan", "apply")
                                 if metric(proxier, "kubesvc_proxy_sync_phase", ip_family="IPv4", phase=p) == 1],
                         metric(proxier, "kubesvc_proxy_sync_started_timestamp_seconds", ip_family="IPv4") > 0))

        async def observe(self, request, state):
            self._look("observe")

        def plan(self, request, previous, observed):
            self._look("plan")
            return super().plan(request, previous, observed)

        async def apply(self, plan):
            self._look("apply")
            await super().apply(plan)

    backend = Watching()
    proxier = new_proxier(backend)
    proxier.on_services_synced()
    proxier.on_endpoint_slices_synced()
    for name, ip in (("a", "10.96.0.1"), ("b", "10.96.0.2")):
        proxier.on_service_add(cluster_ip_service(name, ip))
    proxier.on_endpoint_slice_add(ready_slice("a", ["10.244.0.1", "10.244.0.2"]))
    caplog.set_level("INFO", logger="kubesvc.proxy")
    await proxier.sync_proxy_rules()
    assert seen == [("observe", ["observe"], True), ("plan", ["plan"], True), ("apply", ["apply"], True)]
    assert [metric(proxier, "kubesvc_proxy_sync_phase", ip_family="IPv4", phase=p) for p in ("observe", "plan", "apply")] == [0, 0, 0]
    assert metric(proxier, "kubesvc_proxy_sync_started_timestamp_seconds", ip_family="IPv4") == 0
    lines = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
    assert lines[0] == "Syncing recording rules ipFamily=IPv4 sync=full", lines
    assert lines[1].startswith("Read the kernel's recording state ipFamily=IPv4 elapsed=")
    assert lines[2].startswith("Built the recording rules ipFamily=IPv4 elapsed=")
    assert lines[3] == "Reloading service recording data ipFamily=IPv4 numServices=2 numEndpoints=2"
    assert lines[4].startswith("SyncProxyRules complete ipFamily=IPv4 sync=full elapsed=") and len(lines) == 5, lines
    caplog.clear()
    caplog.set_level("DEBUG", logger="kubesvc.proxy")
    proxier.on_endpoint_slice_add(ready_slice("b", ["10.244.0.3"]))
    await proxier.sync_proxy_rules()  # partial and quick: its progress at DEBUG only (upstream's V(2))
    assert [r.getMessage() for r in caplog.records if r.levelname == "INFO"] == []
    lines = [r.getMessage() for r in caplog.records if r.levelname == "DEBUG" and not r.getMessage().startswith("synced ")]
    assert [line.split(" ipFamily")[0] for line in lines] == ["Syncing recording rules", "Read the kernel's recording state",
                                                             "Built the recording rules", "Reloading service recording data",
                                                             "SyncProxyRules complete"], lines
    assert lines[3].endswith("numServices=2 changedServices=1") and "sync=partial" in lines[4], lines
    assert metric(proxier, "kubeproxy_sync_full_proxy_rules_duration_seconds_count", ip_family="IPv4") == 1
    assert metric(proxier, "kubeproxy_sync_proxy_rules_last_timestamp_seconds", ip_family="IPv4") > 0



async def test_a_slow_partial_sync_says_it_completed_at_info(caplog, monkeypatch):
    """A partial sync that took SLOW_SYNC_SECONDS or more says so at INFO (its other lines stay DEBUG)."""
    from kubesvc.proxy import proxier as proxier_module

    backend = RecordingBackend()
    proxier = new_proxier(backend)
    proxier.on_services_synced()
    proxier.on_endpoint_slices_synced()
    proxier.on_service_add(cluster_ip_service("a", "10.96.0.1"))
    await proxier.sync_proxy_rules()
    proxier.on_endpoint_slice_add(ready_slice("a", ["10.244.0.1"]))
    monkeypatch.setattr(proxier_module, "SLOW_SYNC_SECONDS", 0.0)  # every sync is slow now
    caplog.set_level("INFO", logger="kubesvc.proxy")
    await proxier.sync_proxy_rules()
    assert not backend.requests[-1].full
    lines = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
    assert len(lines) == 1 and lines[0].startswith("SyncProxyRules complete ipFamily=IPv4 sync=partial elapsed="), lines
