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
3. ``run_sync``, the skeleton every mode runs in (``backend.Mode``): the mode's housekeeping
   (``tidy``), then the one decision full or partial, made here only (``full_sync_due``):
   full after start, after any failure, after someone else touched our rules or the mode's
   housekeeping failed (``request_full_sync``), after a topology label change of the Node,
   when an input that shapes the fixed rules changed (NodePort addresses, node IP,
   ServiceCIDRs, the node's topology labels), and once an hour. Then the mode reads the kernel
   (``observe``), plans (pure), applies; its ``next_state`` is committed only once the
   kernel accepted the plan. A failure counts the mode's failure metric and raises
   ``SyncFailed``; the previous state stays, and the next sync is full.
4. On success: metrics, health (``Updated``), the per-Service health-check servers, and the
   conntrack entries that the change made stale (UDP).

Progress, for a full sync at scale that takes seconds: upstream logs at ``V(2)`` "Syncing
nftables rules" (``iptables``...) when a sync starts, "Reloading service nftables data" with
``numServices``/``numEndpoints`` before its kernel call (ours: on a partial sync
``changedServices`` instead of counting every endpoint), and "SyncProxyRules complete" with
``elapsed`` at the end, and its metrics say only afterwards how long it took
(``sync_full_proxy_rules_duration_seconds``, ``sync_proxy_rules_last_timestamp_seconds``). We log
the same three lines (INFO, which ``-v`` 1 to 3 show), on a full sync also when each phase
ends (reading the kernel, building the rules), and keep two gauges of our own while a sync
runs: ``kubesvc_proxy_sync_phase{phase=observe|plan|apply}`` (1 for the current phase) and
``kubesvc_proxy_sync_started_timestamp_seconds`` (0 between syncs).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone

from kubesvc.kernel import conntrack as kernel_conntrack
from kubesvc.kernel.exec import CleanupFailed, CommandFailed
from kubesvc.proxy.backend import KernelPlan, Mode, ProxyOptions, SyncFailed, SyncRequest, SyncResult
from kubesvc.proxy.conntrack import stale_flow_filters
from kubesvc.proxy.endpointslicecache import EndpointsChangeTracker, apply_endpoint_changes, local_ready_endpoints
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.runner import BoundedFrequencyRunner
from kubesvc.proxy.servicechangetracker import ServiceChangeTracker, ServicePorts, apply_service_changes, health_check_node_ports
from kubesvc.proxy.topology import LABEL_TOPOLOGY_ZONE
from kubesvc.proxy.types import FAMILY_NAMES, IPV4, IPV6, EndpointsMap, ServicePortMap
from kubesvc.util import gcpause

BURST_SYNCS = 2  # upstream's burstSyncs: syncs saved up while quiet (runner.py)

log = logging.getLogger("kubesvc.proxy")

# upstream proxyutil.FullSyncPeriod
FULL_SYNC_PERIOD = 3600.0
SLOW_SYNC_SECONDS = 1.0  # a partial sync taking this long says so at INFO (others at DEBUG, upstream's V(2))
TOPOLOGY_LABELS = (LABEL_TOPOLOGY_ZONE,)


def fixed_inputs(request: SyncRequest) -> tuple:
    """The request's inputs that shape a mode's fixed rules (or every Service's): when they
    change, a partial sync would leave rules built from the old ones, so the sync is full."""
    topology = tuple(sorted((k, v) for k, v in request.node_labels.items() if k in TOPOLOGY_LABELS))
    return (request.nodeport_ips, tuple(request.service_cidrs), request.node_ip, topology)


def full_sync_due(request: SyncRequest, need_full_sync: bool, since_full: float, full_sync_period: float,
                  last_fixed_inputs: tuple | None) -> bool:
    """Full or partial: the one place this is decided (``request.full``: the caller asks)."""
    return (request.full or need_full_sync or since_full > full_sync_period
            or last_fixed_inputs != fixed_inputs(request))


class Proxier:
    """One IP family's proxy: trackers, maps, runner, and one kernel ``Mode`` with its state."""

    def __init__(self, mode: Mode, options: ProxyOptions, metrics: ProxyMetrics, *,
                 min_sync_period: float = 1.0, sync_period: float = 30.0, full_sync_period: float = FULL_SYNC_PERIOD,
                 health=None, service_health=None, nodeport_ips: Callable[[], Awaitable[tuple[str, ...] | None]] | None = None,
                 node_ip: str = "", clean_conntrack: bool = True, report_pending: bool = True,
                 conntrack: kernel_conntrack.Conntrack | None = None):
        self.mode = mode
        self.state = mode.initial_state()
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
        self.conntrack = conntrack or kernel_conntrack.Conntrack()  # or its fake (kernel.fake.conntrack)
        self.service_changes = ServiceChangeTracker(self.family)
        self.endpoint_changes = EndpointsChangeTracker(self.family, options.node_name, prefer_same_node=options.prefer_same_node)
        self.service_ports: ServicePortMap = ServicePorts()
        self.endpoints: EndpointsMap = {}
        self.node_labels: dict[str, str] = {}
        self.service_cidrs: tuple[str, ...] = ()
        self.services_synced = False
        self.endpoint_slices_synced = False
        self.need_full_sync = True
        self.last_full_sync = float("-inf")
        self.full_sync_period = full_sync_period
        self.last_fixed_inputs: tuple | None = None  # of the last successful sync
        self.last_result: SyncResult | None = None
        self._tasks: list[asyncio.Task] = []
        self.runner = BoundedFrequencyRunner("sync-runner", self.sync_proxy_rules, min_sync_period, sync_period, full_sync_period,
                                             burst_runs=BURST_SYNCS)

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
        every Service, so a sync is queued, and it is full (``fixed_inputs``; upstream
        ``OnTopologyChange``)."""
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        topology = {k: v for k, v in labels.items() if k in TOPOLOGY_LABELS}
        changed = topology != {k: v for k, v in self.node_labels.items() if k in TOPOLOGY_LABELS}
        self.node_labels = dict(labels)
        if changed:
            self.sync()

    def on_service_cidrs(self, cidrs: list[str]) -> None:
        """ServiceCIDR objects changed: the CIDRs of our family, for dropping unallocated IPs
        (a change queues a sync, and it is full: ``fixed_inputs``)."""
        wanted = tuple(sorted(c for c in cidrs if (":" in c) == (self.family == 6)))
        if wanted != self.service_cidrs:
            self.service_cidrs = wanted
            self.sync()

    def request_full_sync(self) -> None:
        """Someone else changed our kernel state (canary gone, table deleted): the one call a
        mode makes to ask for a full sync."""
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
        nodeport_ips = await self._nodeport_ips()  # before the checkout: a failure here loses no change
        with gcpause.paused():  # the checkout and the plan build long-lived objects only (util/gcpause.py)
            service_result = apply_service_changes(self.service_ports, self.service_changes.checkout())
            endpoint_result = apply_endpoint_changes(self.endpoints, self.endpoint_changes.checkout())
            self._report_pending()
            request = SyncRequest(
                full=False,
                service_ports=self.service_ports,
                endpoints=self.endpoints,
                changed_services=frozenset(service_result.updated_services | endpoint_result.updated_services),
                node_labels=self.node_labels,
                nodeport_ips=nodeport_ips,
                node_ip=self.node_ip,
                service_cidrs=self.service_cidrs,
            )
            result = await self.run_sync(request, started=started)  # logged by the runner on failure, which retries
        self._observe(result, started, time.monotonic(), endpoint_result.last_change_trigger_times)
        if self.health is not None:
            self.health.updated(self.family_name)
        if self.service_health is not None:
            await self._sync_service_health()
        if self.clean_conntrack:
            await self._clean_conntrack(service_result, endpoint_result)

    async def run_sync(self, request: SyncRequest, *, started: float | None = None) -> SyncResult:
        """The skeleton of one sync (module docstring, step 3); ``request.full`` asks for a
        full sync, the answer's ``full`` says whether it was one."""
        started = time.monotonic() if started is None else started
        mode = self.mode
        t0 = time.perf_counter()
        try:
            self.state = await mode.tidy(self.state)
        except Exception as err:  # upstream: unable to delete stale chains; will retry (full)
            log.error("%s %s housekeeping failed; the next sync is full: %s", self.family_name, mode.mode, err)
            self._count(mode.cleanup_failure_metric)
            self.need_full_sync = True
        full = full_sync_due(request, self.need_full_sync, started - self.last_full_sync, self.full_sync_period,
                             self.last_fixed_inputs)
        if full != request.full:
            request = dataclasses.replace(request, full=full)
        # A request for a full sync from now on is for the next sync.
        self.need_full_sync = False
        family, kind = self.family_name, "full" if full else "partial"
        # upstream logs a sync's progress at V(2); every partial sync saying so at INFO floods a
        # node's log: a full sync (the long one) says where it is, a partial one only when slow
        progress = log.info if full else log.debug
        progress("Syncing %s rules ipFamily=%s sync=%s", mode.mode, family, kind)
        self.metrics.sync_started_timestamp.labels(family).set(time.time())
        try:
            self._phase("observe")
            observed = await mode.observe(request, self.state)
            t1 = time.perf_counter()
            progress("Read the kernel's %s state ipFamily=%s elapsed=%.3fs", mode.mode, family, t1 - t0)
            self._phase("plan")
            plan: KernelPlan = mode.plan(request, self.state, observed)
            t2 = time.perf_counter()
            progress("Built the %s rules ipFamily=%s elapsed=%.3fs", mode.mode, family, t2 - t1)
            if full:  # counting the endpoints walks every Service port: ms at 10k, too much for a partial sync
                log.info("Reloading service %s data ipFamily=%s numServices=%d numEndpoints=%d", mode.mode, family,
                         len(request.service_ports), sum(len(request.endpoints.get(name, ())) for name in request.service_ports))
            else:
                log.debug("Reloading service %s data ipFamily=%s numServices=%d changedServices=%d", mode.mode, family,
                         len(request.service_ports), len(request.changed_services))
            self._phase("apply")
            await mode.apply(plan)
            t3 = time.perf_counter()
        except Exception as err:
            self.need_full_sync = True
            self._count(mode.failure_metric)
            if not full:
                self._count(mode.partial_failure_metric)
            log.error("%s sync of %s %s rules failed: %s%s", "full" if full else "partial", self.family_name, mode.mode, err,
                      failed_lines(err))
            raise SyncFailed(str(err)) from err
        except BaseException:  # cancelled mid-sync: the kernel may hold half of it
            self.need_full_sync = True
            raise
        finally:
            self._phase(None)
            self.metrics.sync_started_timestamp.labels(family).set(0)
        elapsed = time.monotonic() - started
        complete = log.info if full or elapsed >= SLOW_SYNC_SECONDS else log.debug
        complete("SyncProxyRules complete ipFamily=%s sync=%s elapsed=%.3fs", family, kind, elapsed)
        self.state = plan.next_state
        if full:
            self.last_full_sync = started
        self.last_fixed_inputs = fixed_inputs(request)
        for gauge, values in ((mode.written_gauge, plan.written), (mode.total_gauge, plan.totals)):
            if gauge:
                for key, count in values.items():
                    getattr(self.metrics, gauge).labels(key, family).set(count)
        # build: the pure plan; kernel: housekeeping, reading the kernel, applying
        result = SyncResult(full=full, no_local_internal=plan.no_local_internal, no_local_external=plan.no_local_external,
                            build_seconds=t2 - t1, kernel_seconds=(t1 - t0) + (t3 - t2), written=dict(plan.written))
        self.last_result = result
        return result

    PHASES = ("observe", "plan", "apply")

    def _phase(self, current: str | None) -> None:
        """``kubesvc_proxy_sync_phase``: 1 for ``current`` (None: no sync running), 0 for the others."""
        for phase in self.PHASES:
            self.metrics.sync_phase.labels(self.family_name, phase).set(1 if phase == current else 0)

    def _count(self, metric: str) -> None:
        if metric:
            getattr(self.metrics, metric).labels(self.family_name).inc()

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
            deleted = await self.conntrack.delete_flows(filters, self.family)
        except CommandFailed as err:
            log.warning("failed to delete stale conntrack entries: %s", err)
        self.metrics.conntrack_reconciler_deleted_entries.labels(self.family_name).inc(deleted)
        self.metrics.conntrack_reconciler_sync_duration.labels(self.family_name).observe(time.monotonic() - started)

    # ---- lifecycle ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Start the mode's background checks and the sync loop; runs until cancelled."""
        if self.health is not None:
            self.health.updated(self.family_name)
        await self.start()
        try:
            await self.runner.loop()
        finally:
            await self.stop()

    async def start(self) -> None:
        """Start the mode's background tasks (monitors, canaries)."""
        if not self._tasks:
            self._tasks = [asyncio.create_task(coro, name=f"{self.mode.mode}-{self.family_name}-{k}")
                           for k, coro in enumerate(self.mode.background(self.request_full_sync, lambda: self.state))]

    async def stop(self) -> None:
        """Cancel the background tasks, then let the mode close what it keeps open."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.mode.close()


def cleanup_leftovers(mode: str, cleanup_family: Callable[[int, str | None], list[str]], netns: str | None = None) -> None:
    """Every mode's ``cleanup_leftovers`` (``--cleanup``, switching modes): its
    ``cleanup_family`` for IPv4 then IPv6, each tried whatever the other did, the errors of
    both raised as one ``CleanupFailed``."""
    errors: list[str] = []
    for family in (IPV4, IPV6):
        errors += cleanup_family(family, netns)
    if errors:
        raise CleanupFailed(mode, errors)


def failed_lines(err: BaseException) -> str:
    """For a failed restore: the input lines around the one the tool complained about
    (upstream ``ExtractLines``), for the log."""
    cause = err if isinstance(err, CommandFailed) else None
    m = re.search(r"line:? (\d+)", (cause.stderr or "") if cause else "")
    if not m or not cause.input_text:
        return ""
    lines = cause.input_text.split("\n")
    number = int(m.group(1))
    shown = range(max(1, number - 3), min(len(lines), number + 3) + 1)
    return "\n" + "\n".join(f"{i:6d}{'>' if i == number else ' '} {lines[i - 1]}" for i in shown)


async def _match_all_addresses() -> None:
    return None
