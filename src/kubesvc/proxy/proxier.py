"""The part of kube-proxy every mode shares: record changes, then one rate-limited sync.

Handlers (``on_service_*``, ``on_endpoint_slice_*``, ``on_node_*``) only feed the change
trackers and ask the runner for a sync (upstream ``OnServiceUpdate`` → ``Sync()``). The
bounded-frequency runner then calls ``sync_proxy_rules`` at most once per ``minSyncPeriod``, so a
burst of changes lands in one kernel transaction; a failed sync is retried after
``syncPeriod``; every ``FULL_SYNC_PERIOD`` a sync runs anyway and is full.

``sync_proxy_rules`` (upstream ``syncProxyRules`` minus the mode-specific middle):

1. Nothing until both the Service and the EndpointSlice informers have synced (otherwise the
   first sync would briefly reject traffic to Services whose slices are not listed yet).
2. Check the changes out of the trackers into the Service port map and the endpoints map.
3. Full or partial: full after start, after any failure, after someone else touched our rules
   (``request_full_sync``), after a topology label change of the Node, and once an hour.
4. The mode applies one transaction (``backend.Backend.sync``).
5. On success: metrics, health (``Updated``), the per-Service health-check servers, and the
   conntrack entries that the change made stale (UDP).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone

from kubesvc.kernel import conntrack as kernel_conntrack
from kubesvc.kernel.exec import CommandFailed
from kubesvc.proxy.backend import Backend, ProxyOptions, SyncRequest, SyncResult
from kubesvc.proxy.conntrack import stale_flow_filters
from kubesvc.proxy.endpointslicecache import EndpointsChangeTracker, apply_endpoint_changes, local_ready_endpoints
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.runner import BoundedFrequencyRunner
from kubesvc.proxy.servicechangetracker import ServiceChangeTracker, apply_service_changes, health_check_node_ports
from kubesvc.proxy.topology import LABEL_TOPOLOGY_ZONE
from kubesvc.proxy.types import FAMILY_NAMES, EndpointsMap, ServicePortMap

log = logging.getLogger("kubesvc.proxy")

# upstream proxyutil.FullSyncPeriod
FULL_SYNC_PERIOD = 3600.0
TOPOLOGY_LABELS = (LABEL_TOPOLOGY_ZONE,)


class Proxier:
    """One IP family's proxy: trackers, maps, runner, and one ``Backend``."""

    def __init__(self, backend: Backend, options: ProxyOptions, metrics: ProxyMetrics, *,
                 min_sync_period: float = 1.0, sync_period: float = 30.0, full_sync_period: float = FULL_SYNC_PERIOD,
                 health=None, service_health=None, nodeport_ips: Callable[[], Awaitable[tuple[str, ...] | None]] | None = None,
                 node_ip: str = "", clean_conntrack: bool = True, report_pending: bool = True):
        self.backend = backend
        self.options = options
        self.family = options.family
        self.family_name = FAMILY_NAMES[self.family]
        self.metrics = metrics
        self.health = health
        self.service_health = service_health
        self._nodeport_ips = nodeport_ips or _match_all_addresses
        # The pending-change gauges are unlabelled: in dual-stack only one family reports them.
        self.report_pending = report_pending
        self.node_ip = node_ip
        self.clean_conntrack = clean_conntrack
        self.service_changes = ServiceChangeTracker(self.family)
        self.endpoint_changes = EndpointsChangeTracker(self.family, options.node_name, prefer_same_node=options.prefer_same_node)
        self.service_ports: ServicePortMap = {}
        self.endpoints: EndpointsMap = {}
        self.node_labels: dict[str, str] = {}
        self.service_cidrs: tuple[str, ...] = ()
        self.services_synced = False
        self.endpoint_slices_synced = False
        self.need_full_sync = True
        self.last_full_sync = float("-inf")
        self.full_sync_period = full_sync_period
        self.last_result: SyncResult | None = None
        self.runner = BoundedFrequencyRunner("sync-runner", self.sync_proxy_rules, min_sync_period, sync_period, full_sync_period)

    # ---- handlers: record, then ask for a sync -------------------------------------------

    def on_service_add(self, service: dict) -> None:
        self.on_service_update(None, service)

    def on_service_update(self, old: dict | None, new: dict | None) -> None:
        if self.service_changes.update(old, new):
            self.metrics.service_changes_total.inc()
            self.sync()
        self._report_pending()

    def on_service_delete(self, service: dict) -> None:
        self.on_service_update(service, None)

    def on_services_synced(self) -> None:
        self.services_synced = True
        self.sync()

    def on_endpoint_slice_add(self, endpoint_slice: dict) -> None:
        self._endpoint_slice_changed(endpoint_slice, removed=False)

    def on_endpoint_slice_update(self, old: dict, new: dict) -> None:
        self._endpoint_slice_changed(new, removed=False)

    def on_endpoint_slice_delete(self, endpoint_slice: dict) -> None:
        self._endpoint_slice_changed(endpoint_slice, removed=True)

    def _endpoint_slice_changed(self, endpoint_slice: dict, removed: bool) -> None:
        if self.endpoint_changes.endpoint_slice_update(endpoint_slice, removed):
            self.metrics.endpoint_changes_total.inc()
            self.sync()
        self._report_pending()

    def _report_pending(self) -> None:
        if self.report_pending:
            self.metrics.service_changes_pending.set(self.service_changes.pending())
            self.metrics.endpoint_changes_pending.set(self.endpoint_changes.pending())

    def on_endpoint_slices_synced(self) -> None:
        self.endpoint_slices_synced = True
        self.sync()

    def on_node(self, node: dict | None) -> None:
        """Our Node changed (or went away): a topology label change re-selects endpoints of
        every Service, so the next sync is full (upstream ``OnTopologyChange``)."""
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        topology = {k: v for k, v in labels.items() if k in TOPOLOGY_LABELS}
        if topology != {k: v for k, v in self.node_labels.items() if k in TOPOLOGY_LABELS}:
            self.node_labels = dict(labels)
            self.need_full_sync = True
            self.sync()
        else:
            self.node_labels = dict(labels)

    def on_service_cidrs(self, cidrs: list[str]) -> None:
        """ServiceCIDR objects changed: the CIDRs of our family, for dropping unallocated IPs."""
        wanted = tuple(sorted(c for c in cidrs if (":" in c) == (self.family == 6)))
        if wanted != self.service_cidrs:
            self.service_cidrs = wanted
            self.need_full_sync = True
            self.sync()

    def request_full_sync(self) -> None:
        """Someone else changed our kernel state (canary gone, table deleted)."""
        self.need_full_sync = True
        self.sync()

    def sync(self) -> None:
        """Queue a sync (upstream ``Sync()``); coalesces with any already queued."""
        if self.health is not None:
            self.health.queued_update(self.family_name)
        self.metrics.sync_proxy_rules_last_queued_timestamp.labels(self.family_name).set(time.time())
        self.runner.run()

    # ---- the sync ---------------------------------------------------------------------------

    async def sync_proxy_rules(self) -> None:
        if not (self.services_synced and self.endpoint_slices_synced):
            return
        started = time.monotonic()
        full = self.need_full_sync or started - self.last_full_sync > self.full_sync_period
        nodeport_ips = await self._nodeport_ips()  # before the checkout: a failure here loses no change
        service_result = apply_service_changes(self.service_ports, self.service_changes.checkout())
        endpoint_result = apply_endpoint_changes(self.endpoints, self.endpoint_changes.checkout())
        self._report_pending()
        request = SyncRequest(
            full=full,
            service_ports=self.service_ports,
            endpoints=self.endpoints,
            changed_services=frozenset(service_result.updated_services | endpoint_result.updated_services),
            node_labels=self.node_labels,
            nodeport_ips=nodeport_ips,
            node_ip=self.node_ip,
            service_cidrs=self.service_cidrs,
        )
        try:
            result = await self.backend.sync(request)
        except Exception:  # logged by the runner, which retries after syncPeriod
            self.need_full_sync = True
            raise
        finished = time.monotonic()
        self.need_full_sync = False
        if result.full:
            self.last_full_sync = started
        self.last_result = result
        self._observe(result, started, finished, endpoint_result.last_change_trigger_times)
        if self.health is not None:
            self.health.updated(self.family_name)
        if self.service_health is not None:
            await self._sync_service_health()
        if self.clean_conntrack:
            await self._clean_conntrack(service_result, endpoint_result)

    def _observe(self, result: SyncResult, started: float, finished: float, trigger_times: dict[str, list[datetime]]) -> None:
        family = self.family_name
        elapsed = finished - started
        self.metrics.sync_proxy_rules_duration.labels(family).observe(elapsed)
        (self.metrics.sync_full_proxy_rules_duration if result.full else self.metrics.sync_partial_proxy_rules_duration).labels(family).observe(elapsed)
        self.metrics.sync_proxy_rules_last_timestamp.labels(family).set(time.time())
        self.metrics.no_local_endpoints.labels("internal", family).set(result.no_local_internal)
        self.metrics.no_local_endpoints.labels("external", family).set(result.no_local_external)
        now = datetime.now(timezone.utc)
        for times in trigger_times.values():
            for moment in times:
                self.metrics.network_programming_duration.labels(family).observe(max(0.0, (now - moment).total_seconds()))
        log.debug("synced %s %s proxy rules in %.3fs (build %.3fs, kernel %.3fs)", "full" if result.full else "partial",
                  family, elapsed, result.build_seconds, result.kernel_seconds)

    async def _sync_service_health(self) -> None:
        ports = health_check_node_ports(self.service_ports)
        await self.service_health.sync_services(ports)
        if ports:
            counts = local_ready_endpoints({name: eps for name, eps in self.endpoints.items() if name.service in ports})
            self.service_health.sync_endpoints({service: counts.get(service, 0) for service in ports})

    async def _clean_conntrack(self, service_result, endpoint_result) -> None:
        filters = stale_flow_filters(self.service_ports, endpoint_result.stale_udp_endpoints,
                                     endpoint_result.newly_active_udp_services, service_result.deleted_udp_cluster_ips)
        if not filters:
            return
        started = time.monotonic()
        deleted = 0
        try:  # one dump of the table, every matching entry deleted (upstream ConntrackDeleteFilters)
            deleted = await kernel_conntrack.delete_flows(filters, self.family)
        except CommandFailed as err:
            log.warning("failed to delete stale conntrack entries: %s", err)
        self.metrics.conntrack_reconciler_deleted_entries.labels(self.family_name).inc(deleted)
        self.metrics.conntrack_reconciler_sync_duration.labels(self.family_name).observe(time.monotonic() - started)

    # ---- lifecycle ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Start the mode's background checks and the sync loop; runs until cancelled."""
        if self.health is not None:
            self.health.updated(self.family_name)
        await self.backend.start(self.request_full_sync)
        try:
            await self.runner.loop()
        finally:
            await self.backend.stop()


async def _match_all_addresses() -> None:
    return None
