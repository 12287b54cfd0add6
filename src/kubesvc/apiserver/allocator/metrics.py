"""Allocator metrics with upstream's names (pkg/registry/core/service/ipallocator/metrics.go,
portallocator/metrics.go, and the repair controllers'):

* ``kube_apiserver_clusterip_allocator_allocated_ips{cidr}`` / ``available_ips{cidr}``
* ``kube_apiserver_clusterip_allocator_allocation_total{cidr,scope}`` (scope ``static`` for a
  user-chosen IP, ``dynamic`` for the next free one), ``allocation_errors_total{cidr,scope}``
* ``kube_apiserver_clusterip_allocator_allocation_duration_seconds{cidr}``
* ``kube_apiserver_nodeport_allocator_allocated_ports`` / ``available_ports``,
  ``allocation_total{scope}``, ``allocation_errors_total{scope}``
* ``kube_apiserver_clusterip_repair_ip_errors_total{type}``, ``..._reconcile_errors_total``,
  ``kube_apiserver_nodeport_repair_port_errors_total{type}``, ``..._reconcile_errors_total``

The gauges are read from the allocators' bitmaps at scrape time, so they are never stale.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

if TYPE_CHECKING:
    from kubesvc.apiserver.allocator.service import ServiceAllocators

_IP = "kube_apiserver_clusterip_allocator_"
_PORT = "kube_apiserver_nodeport_allocator_"
_DEF_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class AllocatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.ip_allocations = Counter(_IP + "allocation", "Number of Cluster IPs allocations", ["cidr", "scope"], registry=r)
        self.ip_errors = Counter(_IP + "allocation_errors", "Number of errors trying to allocate Cluster IPs", ["cidr", "scope"], registry=r)
        self.ip_latency = Histogram(_IP + "allocation_duration_seconds", "Duration in seconds to allocate a Cluster IP by ServiceCIDR",
                                    ["cidr"], buckets=_DEF_BUCKETS, registry=r)
        self.port_allocations = Counter(_PORT + "allocation", "Number of NodePort allocations", ["scope"], registry=r)
        self.port_errors = Counter(_PORT + "allocation_errors", "Number of errors trying to allocate NodePort", ["scope"], registry=r)
        self.ip_repair_errors = Counter("kube_apiserver_clusterip_repair_ip_errors", "Number of errors detected on clusterips by the repair loop broken down by type of error: leak, repair, full, outOfRange, duplicate, unknown, invalid",
                                        ["type"], registry=r)
        self.ip_repair_reconcile_errors = Counter("kube_apiserver_clusterip_repair_reconcile_errors", "Number of reconciliation failures on the clusterip repair reconcile loop", registry=r)
        self.port_repair_errors = Counter("kube_apiserver_nodeport_repair_port_errors", "Number of errors detected on ports by the repair loop broken down by type of error: leak, repair, full, outOfRange, duplicate, unknown",
                                          ["type"], registry=r)
        # Not upstream's (its repair loops say nothing of a pass but its errors): where a pass
        # over a large store is (phase snapshot|apply|index, 1 for the current one), and when and
        # how long the last one took.
        self.repair_phase = Gauge("kubesvc_apiserver_service_repair_phase", "1 for the phase the running Service repair pass is in",
                                  ["phase"], registry=r)
        self.repair_pass_duration = Histogram("kubesvc_apiserver_service_repair_pass_duration_seconds",
                                              "How long a ClusterIP and NodePort repair pass took", buckets=_DEF_BUCKETS + (30.0, 60.0),
                                              registry=r)
        self.repair_last_pass = Gauge("kubesvc_apiserver_service_repair_last_pass_timestamp_seconds",
                                      "When the last ClusterIP and NodePort repair pass completed", registry=r)
        self.port_repair_reconcile_errors = Counter("kube_apiserver_nodeport_repair_reconcile_errors", "Number of reconciliation failures on the nodeport repair reconcile loop", registry=r)
        self._ip_children: dict[tuple[str, str], tuple] = {}  # (cidr, scope) -> (allocation counter, latency histogram)

    def ip_allocated(self, cidr: str, scope: str, seconds: float) -> None:
        """One ClusterIP allocated from ``cidr``: its count and how long the decision took. The
        labelled children are looked up once per (cidr, scope) and kept: prometheus_client's
        ``labels()`` validates and hashes its arguments on every call, a tenth of an allocation."""
        children = self._ip_children.get((cidr, scope))
        if children is None:
            children = self._ip_children[(cidr, scope)] = (self.ip_allocations.labels(cidr, scope), self.ip_latency.labels(cidr))
        children[0].inc()
        children[1].observe(seconds)

    def watch_allocators(self, allocators: "ServiceAllocators") -> None:
        self.registry.register(_Gauges(allocators))


class _Gauges:
    def __init__(self, allocators: "ServiceAllocators"):
        self.allocators = allocators

    def collect(self) -> Iterator[GaugeMetricFamily]:
        allocated = GaugeMetricFamily(_IP + "allocated_ips", "Gauge measuring the number of allocated IPs for Services", labels=["cidr"])
        available = GaugeMetricFamily(_IP + "available_ips", "Gauge measuring the number of available IPs for Services", labels=["cidr"])
        for family in self.allocators.families.values():
            for r in family.ranges:
                allocated.add_metric([r.range.cidr], r.bitmap.used)
                available.add_metric([r.range.cidr], r.bitmap.free)
        yield allocated
        yield available
        bitmap = self.allocators.ports.bitmap
        yield GaugeMetricFamily(_PORT + "allocated_ports", "Gauge measuring the number of allocated NodePorts for Services", value=bitmap.used)
        yield GaugeMetricFamily(_PORT + "available_ports", "Gauge measuring the number of available NodePorts for Services", value=bitmap.free)
