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


class SliceGauges:
    """endpoints_desired / num_endpoint_slices / desired_endpoint_slices over all owners (Services,
    or mirrored Endpoints), kept by deltas: one owner's sync costs O(its port groups), never a
    sum over the cluster (upstream ``metrics.Cache``). ``placeholder``: an owner always wants at
    least one slice (the EndpointSlice controller's placeholder; the mirroring controller has none)."""

    def __init__(self, endpoints_desired: Gauge, num_slices: Gauge, desired_slices_gauge: Gauge, max_per_slice: int, *, placeholder: bool):
        self._gauges = (endpoints_desired, num_slices, desired_slices_gauge)
        self.max_per_slice = max_per_slice
        self._placeholder = placeholder
        self._totals: dict[str, tuple[int, int, int]] = {}  # owner key -> (endpoints, slices, desired slices)

    def update(self, key: str, port_groups: dict[object, PortGroupStats]) -> None:
        groups = port_groups.values()
        desired = sum(desired_slices(g.endpoints, self.max_per_slice) for g in groups)
        self._apply(key, (sum(g.endpoints for g in groups), sum(g.slices for g in groups), max(desired, 1) if self._placeholder else desired))

    def delete(self, key: str) -> None:
        self._apply(key, (0, 0, 0))
        self._totals.pop(key, None)

    def _apply(self, key: str, totals: tuple[int, int, int]) -> None:
        old = self._totals.get(key, (0, 0, 0))
        self._totals[key] = totals
        for gauge, now, before in zip(self._gauges, totals, old):
            gauge.inc(now - before)


class EndpointSliceMetrics:
    def __init__(self, max_endpoints_per_slice: int, registry: CollectorRegistry | None = None):
        self.registry = r = registry or CollectorRegistry()
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
        self.gauges = SliceGauges(self.endpoints_desired, self.num_endpoint_slices, self.desired_endpoint_slices,
                                  max_endpoints_per_slice, placeholder=True)
        self._traffic_distribution: dict[str, str] = {}

    def update_service(self, key: str, port_groups: dict[object, PortGroupStats], traffic_distribution: str) -> None:
        self.gauges.update(key, port_groups)
        self._set_traffic_distribution(key, traffic_distribution)

    def delete_service(self, key: str) -> None:
        self.gauges.delete(key)
        self._set_traffic_distribution(key, "")
        self._traffic_distribution.pop(key, None)

    def _set_traffic_distribution(self, key: str, value: str) -> None:
        old = self._traffic_distribution.get(key, "")
        if old == value:
            return
        if old:
            self.by_traffic_distribution.labels(old).dec()
        if value:
            self.by_traffic_distribution.labels(value).inc()
        self._traffic_distribution[key] = value
