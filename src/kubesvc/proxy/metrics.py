"""kube-proxy's metrics (upstream ``pkg/proxy/metrics/metrics.go``; subsystem ``kubeproxy``),
with upstream names, types, labels and buckets, in one registry per proxy process.

Served on ``--metrics-bind-address`` (default ``127.0.0.1:10249``) at ``/metrics``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# component-base's default for kube-proxy's sync histograms: ExponentialBuckets(0.001, 2, 15)
SYNC_BUCKETS = tuple(0.001 * 2**i for i in range(15))
# network_programming_duration_seconds: 0.25, 0.5, 1..59 by 1, 60..115 by 5, 120..300 by 30
NETWORK_PROGRAMMING_BUCKETS = (0.25, 0.5, *range(1, 60), *range(60, 120, 5), *range(120, 301, 30))

NS = "kubeproxy"


class ProxyMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = r = registry or CollectorRegistry()
        family = ["ip_family"]

        def histogram(name: str, doc: str, buckets=SYNC_BUCKETS) -> Histogram:
            return Histogram(name, doc, family, namespace=NS, buckets=buckets, registry=r)

        self.sync_proxy_rules_duration = histogram("sync_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds")
        self.sync_full_proxy_rules_duration = histogram("sync_full_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for full resyncs")
        self.sync_partial_proxy_rules_duration = histogram("sync_partial_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for partial resyncs")
        self.network_programming_duration = histogram(
            "network_programming_duration_seconds", "In Cluster Network Programming Latency in seconds", NETWORK_PROGRAMMING_BUCKETS)
        self.sync_proxy_rules_last_timestamp = Gauge(
            "sync_proxy_rules_last_timestamp_seconds", "The last time proxy rules were successfully synced", family, namespace=NS, registry=r)
        # Not upstream's (kube-proxy only says how long a sync took, once it is over): where the
        # running sync is, for a full sync at scale that takes seconds. ``phase`` observe (reading
        # the kernel), plan (building the rules), apply (the kernel call); all 0 between syncs.
        self.sync_phase = Gauge("kubesvc_proxy_sync_phase", "1 for the phase the running sync of proxy rules is in",
                                ["ip_family", "phase"], registry=r)
        self.sync_started_timestamp = Gauge("kubesvc_proxy_sync_started_timestamp_seconds",
                                            "When the running sync of proxy rules started (0: none running)", family, registry=r)
        self.sync_proxy_rules_last_queued_timestamp = Gauge(
            "sync_proxy_rules_last_queued_timestamp_seconds", "The last time a sync of proxy rules was queued", family, namespace=NS, registry=r)
        self.endpoint_changes_pending = Gauge(
            "sync_proxy_rules_endpoint_changes_pending", "Pending proxy rules Endpoint changes", namespace=NS, registry=r)
        self.endpoint_changes_total = Counter(
            "sync_proxy_rules_endpoint_changes", "Cumulative proxy rules Endpoint changes", namespace=NS, registry=r)
        self.service_changes_pending = Gauge(
            "sync_proxy_rules_service_changes_pending", "Pending proxy rules Service changes", namespace=NS, registry=r)
        self.service_changes_total = Counter(
            "sync_proxy_rules_service_changes", "Cumulative proxy rules Service changes", namespace=NS, registry=r)
        self.iptables_restore_failures = Counter(
            "sync_proxy_rules_iptables_restore_failures", "Cumulative proxy iptables restore failures", family, namespace=NS, registry=r)
        self.iptables_partial_restore_failures = Counter(
            "sync_proxy_rules_iptables_partial_restore_failures", "Cumulative proxy iptables partial restore failures",
            family, namespace=NS, registry=r)
        self.iptables_total = Gauge(
            "sync_proxy_rules_iptables_total", "Total number of iptables rules owned by kube-proxy", ["table", "ip_family"], namespace=NS, registry=r)
        self.iptables_last = Gauge(
            "sync_proxy_rules_iptables_last", "Number of iptables rules written by kube-proxy in last sync",
            ["table", "ip_family"], namespace=NS, registry=r)
        self.nftables_sync_failures = Counter(
            "sync_proxy_rules_nftables_sync_failures", "Cumulative proxy nftables sync failures", family, namespace=NS, registry=r)
        self.nftables_cleanup_failures = Counter(
            "sync_proxy_rules_nftables_cleanup_failures", "Cumulative proxy nftables cleanup failures", family, namespace=NS, registry=r)
        # Ours, beside upstream's iptables rule gauges: what the last nftables sync sent and what the
        # table holds (chains, rules, set/map elements).
        self.nftables_objects_total = Gauge(
            "sync_proxy_rules_nftables_objects_total", "Number of nftables chains, rules and elements owned by kube-proxy",
            ["kind", "ip_family"], namespace=NS, registry=r)
        self.nftables_objects_last = Gauge(
            "sync_proxy_rules_nftables_objects_last", "Number of nftables chains, rules and elements written in the last sync",
            ["kind", "ip_family"], namespace=NS, registry=r)
        self.no_local_endpoints = Gauge(
            "sync_proxy_rules_no_local_endpoints_total", "Number of services with a Local traffic policy and no endpoints",
            ["traffic_policy", "ip_family"], namespace=NS, registry=r)
        self.conntrack_reconciler_deleted_entries = Counter(
            "conntrack_reconciler_deleted_entries", "Cumulative conntrack flows deleted by conntrack reconciler", family, namespace=NS, registry=r)
        self.conntrack_reconciler_sync_duration = histogram(
            "conntrack_reconciler_sync_duration_seconds", "ReconcileConntrackFlowsLatency latency in seconds")
        self.proxy_healthz_total = Counter("proxy_healthz", "Cumulative proxy healthz HTTP status", ["code"], namespace=NS, registry=r)
        self.proxy_livez_total = Counter("proxy_livez", "Cumulative proxy livez HTTP status", ["code"], namespace=NS, registry=r)
