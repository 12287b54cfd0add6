"""EndpointSliceTracker against upstream's tables
(``staging/src/k8s.io/endpointslice/util/endpointslice_tracker_test.go``).

Upstream peeks at ``generationsByService``; here the tracked generation is observed through
``should_sync`` (an event at the tracked generation is our own write: no sync; a newer one is
someone else's: sync)."""

from __future__ import annotations

import copy

import pytest

from kubesvc.controllers.endpointslice.tracker import EndpointSliceTracker
from kubesvc.controllers.endpointslice.util import LABEL_SERVICE_NAME


def _slice(namespace="ns1", service="svc1", uid="original", generation=1, name="example-1") -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid, "generation": generation,
                         "labels": {LABEL_SERVICE_NAME: service}}}


SLICE1 = _slice()
DIFFERENT_NS = _slice(namespace="ns2", uid="diff-ns")
DIFFERENT_SERVICE = _slice(service="svc2", uid="diff-svc")
NEWER_GEN = _slice(generation=2)


@pytest.mark.parametrize("checks, want_has, want_should_sync", [
    (SLICE1, True, False),
    (DIFFERENT_NS, False, True),
    (DIFFERENT_SERVICE, False, True),
    (NEWER_GEN, True, True),
], ids=["same slice", "different namespace", "different service", "newer generation"])
def test_endpoint_slice_tracker_update(checks, want_has, want_should_sync):
    """TestEndpointSliceTrackerUpdate."""
    tracker = EndpointSliceTracker()
    tracker.update(copy.deepcopy(SLICE1))
    assert tracker.has(checks) is want_has
    assert tracker.should_sync(checks) is want_should_sync
    assert tracker.should_sync(SLICE1) is False  # generation 1 of the original is tracked


def _tracker(*steps) -> EndpointSliceTracker:
    tracker = EndpointSliceTracker()
    for step, slice_ in steps:
        getattr(tracker, step)(copy.deepcopy(slice_))
    return tracker


@pytest.mark.parametrize("tracker, slices, want_stale", [
    (lambda: _tracker(), [], False),
    (lambda: _tracker(("update", SLICE1), ("handle_deletion", SLICE1)), [], False),
    (lambda: _tracker(("update", SLICE1)), [SLICE1], False),
    (lambda: _tracker(("update", NEWER_GEN)), [SLICE1], True),
    (lambda: _tracker(("update", SLICE1)), [NEWER_GEN], False),
    (lambda: _tracker(("expect_deletion", SLICE1)), [SLICE1], True),
    (lambda: _tracker(("update", SLICE1)), [], True),
    (lambda: _tracker(("expect_deletion", SLICE1)), [], False),
], ids=["empty tracker", "empty slices", "matching slices", "newer slice in tracker", "newer slice in params",
        "slice in params is expected to be deleted", "slice in tracker but not in params",
        "deletion expected and done"])
def test_endpoint_slice_tracker_stale_slices(tracker, slices, want_stale):
    """TestEndpointSliceTrackerStaleSlices: the cache is stale if it shows an older generation
    than we wrote, a slice we deleted, or lacks a slice we wrote."""
    assert tracker().stale_slices("ns1/svc1", slices) is want_stale


@pytest.mark.parametrize("expect_deletion, checks, delete, want_has, want_should_sync, want_handled", [
    (SLICE1, SLICE1, SLICE1, True, True, True),
    (DIFFERENT_NS, DIFFERENT_NS, DIFFERENT_NS, True, True, False),
    (DIFFERENT_NS, SLICE1, DIFFERENT_NS, True, False, False),
    (DIFFERENT_SERVICE, DIFFERENT_SERVICE, DIFFERENT_SERVICE, True, True, False),
    (DIFFERENT_SERVICE, SLICE1, SLICE1, True, False, False),
    (NEWER_GEN, NEWER_GEN, NEWER_GEN, True, True, True),
    (NEWER_GEN, SLICE1, SLICE1, True, True, True),
], ids=["same slice", "different namespace", "different namespace, check original ep slice", "different service",
        "expectDelete different service, check original ep slice, delete original", "different generation",
        "expectDelete different generation, check original ep slice, delete original"])
def test_endpoint_slice_tracker_deletion(expect_deletion, checks, delete, want_has, want_should_sync, want_handled):
    """TestEndpointSliceTrackerDeletion: handle_deletion is True only for a deletion we expected
    (upstream always hands HandleDeletion the original slice; so does this port)."""
    tracker = EndpointSliceTracker()
    tracker.update(copy.deepcopy(SLICE1))
    tracker.expect_deletion(copy.deepcopy(expect_deletion))
    assert tracker.has(checks) is want_has
    assert tracker.should_sync(checks) is want_should_sync
    assert tracker.handle_deletion(SLICE1) is want_handled
    assert tracker.has(SLICE1) is False


@pytest.mark.parametrize("key, want_has, want_should_sync", [
    ("ns1/svc1", False, True),
    ("ns2/svc1", True, False),
    ("ns1/svc2", True, False),
], ids=["same service", "different namespace", "different service"])
def test_endpoint_slice_tracker_delete_service(key, want_has, want_should_sync):
    """TestEndpointSliceTrackerDeleteService."""
    tracker = EndpointSliceTracker()
    tracker.update(copy.deepcopy(SLICE1))
    tracker.delete_service(key)
    assert tracker.has(SLICE1) is want_has
    assert tracker.should_sync(SLICE1) is want_should_sync


def test_a_recreated_service_is_not_held_back_by_its_predecessors_writes():
    """A slice of the old Service whose deletion event never reached the tracker must not make
    every sync of the new Service (same name, new uid) look stale."""
    from kubesvc.controllers.endpointslice.tracker import EndpointSliceTracker

    tracker = EndpointSliceTracker()
    old_slice = {"metadata": {"name": "web-abc", "namespace": "ns", "uid": "slice-1", "generation": 1,
                              "labels": {"kubernetes.io/service-name": "web"}}}
    assert not tracker.stale_slices("ns/web", [], "svc-uid-1")
    tracker.update(old_slice)
    assert tracker.stale_slices("ns/web", [], "svc-uid-1")  # our create has not reached the cache yet
    assert not tracker.stale_slices("ns/web", [], "svc-uid-2")  # a new Service: nothing to wait for
