"""The EndpointSlice mirroring controller's metrics, with upstream's names
(``pkg/controller/endpointslicemirroring/metrics/{metrics,cache}.go``), subsystem
``endpoint_slice_mirroring_controller``:

* ``endpoints_added_per_sync``, ``endpoints_updated_per_sync``, ``endpoints_removed_per_sync``:
  histograms of endpoint changes per Endpoints sync (buckets 2, 4, ... 32768);
* ``addresses_skipped_per_sync``: addresses not mirrored per sync, invalid IPs plus those over
  ``--mirroring-max-endpoints-per-subset``;
* ``endpoints_sync_duration``: seconds per sync (buckets 1 ms doubling, 15 of them);
* ``endpoints_desired``, ``num_endpoint_slices``, ``desired_endpoint_slices``: gauges over all
  mirrored Endpoints, kept by a per-Endpoints cache of slice keys (address type + ports).
  "Desired" slices are what perfect packing would give: ``ceil(endpoints / max)`` per key, so
  a key with no endpoints wants none (unlike the EndpointSlice controller, there is no
  placeholder);
* ``changes{operation}``: slice creates, updates and deletes made by reconciling (the deletes
  of a cleanup, when an Endpoints stops being mirrored, are not counted, as upstream).

prometheus_client exposes the counter as ``..._changes_total``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kubesvc.controllers.endpointslice.metrics import EXPONENTIAL_2_2_15, SliceGauges
from kubesvc.controllers.mirroring.reconciler import Plan, PortGroupStats

SUBSYSTEM = "endpoint_slice_mirroring_controller_"
EXPONENTIAL_0001_2_15 = tuple(0.001 * 2**i for i in range(15))


class EndpointSliceMirroringMetrics:
    def __init__(self, max_endpoints_per_subset: int = 1000, registry: CollectorRegistry | None = None):
        self.registry = r = registry or CollectorRegistry()
        self.endpoints_added = Histogram(SUBSYSTEM + "endpoints_added_per_sync", "Number of endpoints added on each Endpoints sync",
                                         buckets=EXPONENTIAL_2_2_15, registry=r)
        self.endpoints_updated = Histogram(SUBSYSTEM + "endpoints_updated_per_sync", "Number of endpoints updated on each Endpoints sync",
                                           buckets=EXPONENTIAL_2_2_15, registry=r)
        self.endpoints_removed = Histogram(SUBSYSTEM + "endpoints_removed_per_sync", "Number of endpoints removed on each Endpoints sync",
                                           buckets=EXPONENTIAL_2_2_15, registry=r)
        self.addresses_skipped = Histogram(SUBSYSTEM + "addresses_skipped_per_sync",
                                           "Number of addresses skipped on each Endpoints sync due to being invalid or exceeding MaxEndpointsPerSubset",
                                           buckets=EXPONENTIAL_2_2_15, registry=r)
        self.sync_duration = Histogram(SUBSYSTEM + "endpoints_sync_duration", "Duration of syncEndpoints() in seconds",
                                       buckets=EXPONENTIAL_0001_2_15, registry=r)
        self.endpoints_desired = Gauge(SUBSYSTEM + "endpoints_desired", "Number of endpoints desired", registry=r)
        self.num_endpoint_slices = Gauge(SUBSYSTEM + "num_endpoint_slices", "Number of EndpointSlices", registry=r)
        self.desired_endpoint_slices = Gauge(SUBSYSTEM + "desired_endpoint_slices",
                                             "Number of EndpointSlices that would exist with perfect endpoint allocation", registry=r)
        self.changes = Counter(SUBSYSTEM + "changes", "Number of EndpointSlice changes", ["operation"], registry=r)
        self.gauges = SliceGauges(self.endpoints_desired, self.num_endpoint_slices, self.desired_endpoint_slices,
                                  max_endpoints_per_subset, placeholder=False)

    def observe_reconcile(self, key: str, plan: Plan) -> None:
        """One reconcile of Endpoints ``key``: the per-sync histograms and its share of the
        gauges (``changes`` counts writes as they succeed, in the controller)."""
        self.addresses_skipped.observe(plan.skipped)
        self.endpoints_added.observe(plan.added)
        self.endpoints_updated.observe(plan.updated)
        self.endpoints_removed.observe(plan.removed)
        self.update_endpoints(key, plan.port_groups)

    def update_endpoints(self, key: str, port_groups: dict[object, PortGroupStats]) -> None:
        """``UpdateEndpointPortCache``: this Endpoints' share of the gauges is now ``port_groups``."""
        self.gauges.update(key, port_groups)

    def delete_endpoints(self, key: str) -> None:
        self.gauges.delete(key)
