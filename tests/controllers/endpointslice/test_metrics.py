"""The EndpointSlice controller's gauges (upstream ``metrics/cache_test.go``) and the exposition
names kube-controller-manager serves."""

from __future__ import annotations

import pytest

from kubesvc.controllers.endpointslice.metrics import EndpointSliceMetrics, desired_slices
from kubesvc.controllers.endpointslice.reconciler import PortGroupStats
from kubesvc.controllers.manager import render_metrics


@pytest.mark.parametrize(("endpoints", "max_per_slice", "expected"), [
    (0, 100, 0), (1, 100, 1), (100, 100, 1), (101, 100, 2), (250, 100, 3), (1000, 1000, 1), (1001, 1000, 2),
], ids=["empty group", "one", "exactly full", "one over", "250", "max 1000 full", "max 1000 one over"])
def test_desired_slices_per_port_group(endpoints, max_per_slice, expected):
    assert desired_slices(endpoints, max_per_slice) == expected


def _gauges(metrics: EndpointSliceMetrics) -> tuple[float, float, float]:
    return (metrics.endpoints_desired._value.get(), metrics.num_endpoint_slices._value.get(), metrics.desired_endpoint_slices._value.get())


def test_cache_totals_across_services_and_deletion():
    """TestNumEndpointsAndSlices: totals over Services; a Service with nothing wants its one
    placeholder; deleting a Service takes its share away."""
    metrics = EndpointSliceMetrics(100)
    metrics.update_service("ns/a", {("IPv4", ("http",)): PortGroupStats(250, 4), ("IPv4", ("https",)): PortGroupStats(10, 1)}, "")
    assert _gauges(metrics) == (260, 5, 4)
    # dual-stack Service without Pods: two placeholders exist, one slice is desired
    metrics.update_service("ns/b", {("IPv4", ()): PortGroupStats(0, 1), ("IPv6", ()): PortGroupStats(0, 1)}, "")
    assert _gauges(metrics) == (260, 7, 5)
    metrics.update_service("ns/a", {("IPv4", ("http",)): PortGroupStats(100, 1)}, "PreferClose")
    assert _gauges(metrics) == (100, 3, 2)
    assert metrics.by_traffic_distribution.labels("PreferClose")._value.get() == 1
    metrics.delete_service("ns/a")
    metrics.delete_service("ns/b")
    assert _gauges(metrics) == (0, 0, 0)
    assert metrics.by_traffic_distribution.labels("PreferClose")._value.get() == 0


def test_counters_are_exposed_under_upstream_names():
    metrics = EndpointSliceMetrics(100)
    metrics.changes.labels("create").inc(2)
    metrics.syncs.labels("stale").inc()
    text = render_metrics(metrics.registry).decode()
    assert 'endpoint_slice_controller_changes{operation="create"} 2.0' in text
    assert "# TYPE endpoint_slice_controller_syncs counter" in text
    assert 'endpoint_slice_controller_syncs{result="stale"} 1.0' in text
    assert "_total" not in text and "_created" not in text
    assert "endpoint_slice_controller_endpoints_added_per_sync_bucket" in text
