"""The EndpointSlice controller's metrics, with upstream's names
(``staging/src/k8s.io/endpointslice/metrics/{metrics,cache}.go``), subsystem
``endpoint_slice_controller``:

* ``endpoints_added_per_sync`` / ``endpoints_removed_per_sync``: histograms per Service sync;
* ``endpoints_desired``, ``num_endpoint_slices``, ``desired_endpoint_slices``: gauges over all
  Services, kept by a per-Service cache of port groups. "Desired" slices are what perfect
  packing would give: ``ceil(endpoints / maxEndpointsPerSlice)`` per port group, at least one
  per Service (its placeholder);
* ``changes{operation}``: slice creates, updates, deletes;
* ``endpointslices_changed_per_sync{topology,traffic_distribution}``;
* ``syncs{result}``: success, error, or stale (the informer cache lagged our own writes);
* ``services_count_by_traffic_distribution{traffic_distribution}``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kubesvc.controllers.endpointslice.reconciler import PortGroupStats

SUBSYSTEM = "endpoint_slice_controller_"
EXPONENTIAL_2_2_15 = tuple(2.0 * 2**i for i in range(15))


def desired_slices(endpoints: int, max_endpoints_per_slice: int) -> int:
    """Per port group (``numDesiredSlices``): none for no endpoints; the Service's floor of one
    (its placeholder) is applied to the sum."""
    if endpoints == 0:
        return 0
    if endpoints <= max_endpoints_per_slice:
        return 1
    return -(-endpoints // max_endpoints_per_slice)


class EndpointSliceMetrics:
    def __init__(self, max_endpoints_per_slice: int, registry: CollectorRegistry | None = None):
        self.registry = r = registry or CollectorRegistry()
        self.max_endpoints_per_slice = max_endpoints_per_slice
        self.endpoints_added = Histogram(SUBSYSTEM + "endpoints_added_per_sync", "Number of endpoints added on each Service sync",
                                         buckets=EXPONENTIAL_2_2_15, registry=r)
        self.endpoints_removed = Histogram(SUBSYSTEM + "endpoints_removed_per_sync", "Number of endpoints removed on each Service sync",
                                           buckets=EXPONENTIAL_2_2_15, registry=r)
        self.endpoints_desired = Gauge(SUBSYSTEM + "endpoints_desired", "Number of endpoints desired", registry=r)
        self.num_endpoint_slices = Gauge(SUBSYSTEM + "num_endpoint_slices", "Number of EndpointSlices", registry=r)
        self.desired_endpoint_slices = Gauge(SUBSYSTEM + "desired_endpoint_slices",
                                             "Number of EndpointSlices that would exist with perfect endpoint allocation", registry=r)
        self.changes = Counter(SUBSYSTEM + "changes", "Number of EndpointSlice changes", ["operation"], registry=r)
        self.changed_per_sync = Histogram(SUBSYSTEM + "endpointslices_changed_per_sync", "Number of EndpointSlices changed on each Service sync",
                                          ["topology", "traffic_distribution"], registry=r)
        self.syncs = Counter(SUBSYSTEM + "syncs", "Number of EndpointSlice syncs", ["result"], registry=r)
        self.by_traffic_distribution = Gauge(SUBSYSTEM + "services_count_by_traffic_distribution",
                                             "Number of Services using some specific trafficDistribution", ["traffic_distribution"], registry=r)
        self._services: dict[str, tuple[int, int, int]] = {}  # key -> (endpoints, slices, desired slices)
        self._traffic_distribution: dict[str, str] = {}

    def update_service(self, key: str, port_groups: dict[object, PortGroupStats], traffic_distribution: str) -> None:
        endpoints = sum(g.endpoints for g in port_groups.values())
        slices = sum(g.slices for g in port_groups.values())
        desired = sum(desired_slices(g.endpoints, self.max_endpoints_per_slice) for g in port_groups.values()) or 1
        self._apply(key, (endpoints, slices, desired))
        self._set_traffic_distribution(key, traffic_distribution)

    def delete_service(self, key: str) -> None:
        self._apply(key, (0, 0, 0))
        self._services.pop(key, None)
        self._set_traffic_distribution(key, "")
        self._traffic_distribution.pop(key, None)

    def _apply(self, key: str, totals: tuple[int, int, int]) -> None:
        old = self._services.get(key, (0, 0, 0))
        self._services[key] = totals
        self.endpoints_desired.inc(totals[0] - old[0])
        self.num_endpoint_slices.inc(totals[1] - old[1])
        self.desired_endpoint_slices.inc(totals[2] - old[2])

    def _set_traffic_distribution(self, key: str, value: str) -> None:
        old = self._traffic_distribution.get(key, "")
        if old == value:
            return
        if old:
            self.by_traffic_distribution.labels(old).dec()
        if value:
            self.by_traffic_distribution.labels(value).inc()
        self._traffic_distribution[key] = value
