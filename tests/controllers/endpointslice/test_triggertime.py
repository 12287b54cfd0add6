"""TriggerTimeTracker against upstream's cases
(``staging/src/k8s.io/endpointslice/util/trigger_time_tracker_test.go``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from kubesvc.controllers.endpointslice.triggertime import TriggerTimeTracker
from kubesvc.controllers.endpointslice.util import ANNOTATION_TRIGGER_TIME, set_trigger_time
from tests.support import builders

T0 = datetime(2019, 1, 1, tzinfo=timezone.utc)
T1, T2, T3, T4, T5 = (T0 + timedelta(seconds=i) for i in range(1, 6))
NS, NAME = "ttNamespace1", "my-service"


def _rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def service(created: datetime) -> dict:
    return builders.service(NS, NAME, metadata={"creationTimestamp": _rfc3339(created)})


def pod(name: str, ready_time: datetime | str) -> dict:
    return builders.pod(NS, name, ready_since=ready_time if isinstance(ready_time, str) else _rfc3339(ready_time))


def test_new_service_no_pods():
    """TestNewServiceNoPods."""
    assert TriggerTimeTracker().compute(service(T2), []) == T2


def test_new_service_existing_pods():
    """TestNewServiceExistingPods: Pods older and newer than the Service; the first sync reports the
    Service's creation."""
    assert TriggerTimeTracker().compute(service(T3), [pod("pod1", T0), pod("pod2", T1), pod("pod3", T5)]) == T3


def test_pods_added():
    """TestPodsAdded: the earliest of the new Pods' ready times."""
    tracker = TriggerTimeTracker()
    svc = service(T0)
    assert tracker.compute(svc, []) == T0
    assert tracker.compute(svc, [pod("pod1", T2), pod("pod2", T1)]) == T1


def test_pods_updated():
    """TestPodsUpdated: pod1 -> T5, pod2 -> T4, pod3 unchanged: T4."""
    tracker = TriggerTimeTracker()
    svc = service(T0)
    pod3 = pod("pod3", T3)
    assert tracker.compute(svc, [pod("pod1", T1), pod("pod2", T2), pod3]) == T0
    assert tracker.compute(svc, [pod("pod1", T5), pod("pod2", T4), pod3]) == T4


def test_pods_updated_no_op():
    """TestPodsUpdatedNoOp: nothing changed, no trigger time (the annotation is removed)."""
    tracker = TriggerTimeTracker()
    svc = service(T0)
    pods = [pod("pod1", T1), pod("pod2", T2), pod("pod3", T3)]
    assert tracker.compute(svc, pods) == T0
    assert tracker.compute(svc, pods) is None


def test_pod_deleted_then_added():
    """TestPodDeletedThenAdded."""
    tracker = TriggerTimeTracker()
    svc = service(T0)
    pod1 = pod("pod1", T1)
    assert tracker.compute(svc, [pod1, pod("pod2", T2)]) == T0
    assert tracker.compute(svc, [pod1]) is None
    assert tracker.compute(svc, [pod1, pod("pod2", T4)]) == T4


def test_service_deleted_then_added():
    """TestServiceDeletedThenAdded: a new Service reports its own creation again."""
    tracker = TriggerTimeTracker()
    pods = [pod("pod1", T1), pod("pod2", T2)]
    assert tracker.compute(service(T0), pods) == T0
    tracker.delete_service(NS, NAME)
    assert tracker.compute(service(T3), pods) == T3


def test_service_updated_no_pod_change():
    """TestServiceUpdatedNoPodChange: a spec change has no trigger time."""
    tracker = TriggerTimeTracker()
    svc = service(T0)
    pods = [pod("pod1", T1), pod("pod2", T2)]
    assert tracker.compute(svc, pods) == T0
    svc["spec"] = {"selector": {}, "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}
    assert tracker.compute(svc, pods) is None


def test_trigger_time_annotation_is_utc():
    """A Ready transition written with a UTC offset: the annotation still names the same instant,
    in UTC (``triggerTime.UTC().Format(time.RFC3339Nano)``)."""
    tracker = TriggerTimeTracker()
    svc = service(T0)
    assert tracker.compute(svc, []) == T0
    moment = tracker.compute(svc, [pod("pod1", "2019-01-01T02:00:04+02:00")])
    assert moment == T4
    slice_ = {"metadata": {"name": "s"}}
    set_trigger_time(slice_, moment)
    assert slice_["metadata"]["annotations"][ANNOTATION_TRIGGER_TIME] == "2019-01-01T00:00:04Z"
