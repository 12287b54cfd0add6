"""A Pod's ``readinessGates`` in its ``Ready`` condition, as upstream's
``GeneratePodReadyCondition``: with every container ready, Ready is False with reason
``ReadinessGatesNotReady`` and a message naming each gate whose condition is missing or not
True (in spec order, joined by ", "); ContainersReady stays True. Expected messages written by
hand from upstream."""

from datetime import datetime, timezone
from types import SimpleNamespace

from kubesvc.agent.podstatus import generate_pod_status
from kubesvc.agent.podworker import PodWorker
from kubesvc.util.clock import FakeClock

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def conditions_of(gates, conditions):
    pod = {"metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
           "spec": {"readinessGates": [{"conditionType": g} for g in gates], "containers": [{"name": "main", "image": "x"}]},
           "status": {"conditions": [{"type": t, "status": s} for t, s in conditions.items()]}}
    worker = PodWorker(SimpleNamespace(clock=FakeClock(), host_ips=["10.0.0.1"]), pod)
    record = worker.slots[0].record
    record.running_since, record.started, record.ready = T0, True, True
    status = generate_pod_status(worker.runtime_state(), pod["status"], T0)
    return {c["type"]: (c["status"], c.get("reason", ""), c.get("message", "")) for c in status["conditions"]}


def test_a_missing_gate_condition():
    conditions = conditions_of(["example.com/lb-ready"], {})
    assert conditions["Ready"] == ("False", "ReadinessGatesNotReady",
                                   'corresponding condition of pod readiness gate "example.com/lb-ready" does not exist.')
    assert conditions["ContainersReady"] == ("True", "", "")


def test_gates_not_true_are_named_in_order():
    conditions = conditions_of(["example.com/a", "example.com/b", "example.com/c"], {"example.com/a": "False", "example.com/c": "True"})
    assert conditions["Ready"] == ("False", "ReadinessGatesNotReady",
                                   'the status of pod readiness gate "example.com/a" is not "True", but False, '
                                   'corresponding condition of pod readiness gate "example.com/b" does not exist.')


def test_ready_once_every_gate_is_true():
    conditions = conditions_of(["example.com/a"], {"example.com/a": "True"})
    assert conditions["Ready"] == ("True", "", "")
