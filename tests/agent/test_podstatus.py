"""Pod status generation: phases as upstream ``getPhase`` decides them, conditions and their
transition times, container state shapes, and the merge patch the agent sends."""

from datetime import datetime, timedelta, timezone

import pytest

from kubesvc.agent.podstatus import ContainerRecord, PodRuntimeState, Termination, generate_pod_status, merge_patch_for, pod_phase

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def running(name="c"):
    return ContainerRecord(name, "img", running_since=T0)


def waiting(name="c", reason="ContainerCreating"):
    return ContainerRecord(name, "img", waiting_reason=reason)


def exited(code, name="c"):
    return ContainerRecord(name, "img", running_since=T0, terminated=Termination(code, "Completed" if code == 0 else "Error", T0, T0))


def backing_off(name="c"):
    return ContainerRecord(name, "img", waiting_reason="CrashLoopBackOff", last_termination=Termination(1, "Error", T0, T0), restart_count=1)


@pytest.mark.parametrize("policy,containers,expected", [
    ("Always", [waiting()], "Pending"),
    ("Always", [running(), waiting("d")], "Pending"),
    ("Always", [running(), running("d")], "Running"),
    ("Always", [running(), exited(0, "d")], "Running"),
    ("Always", [exited(1)], "Running"),                 # will be restarted
    ("Always", [backing_off()], "Running"),             # waiting, but ran before
    ("OnFailure", [exited(0), exited(0, "d")], "Succeeded"),
    ("OnFailure", [exited(1)], "Running"),
    ("Never", [exited(0), exited(0, "d")], "Succeeded"),
    ("Never", [exited(0), exited(2, "d")], "Failed"),
    ("Never", [running(), exited(2, "d")], "Running"),
], ids=["waiting", "one-waiting", "all-running", "running-and-done", "always-restarts", "crash-loop",
        "onfailure-all-succeeded", "onfailure-failed-restarts", "never-succeeded", "never-failed", "never-one-running"])
def test_phase(policy, containers, expected):
    assert pod_phase(policy, [], containers, initialized=True) == expected


def test_phase_while_init_containers_run_or_fail():
    assert pod_phase("Always", [running("init")], [waiting(reason="PodInitializing")], initialized=False) == "Pending"
    assert pod_phase("Never", [exited(1, "init")], [waiting(reason="PodInitializing")], initialized=False) == "Failed"
    assert pod_phase("OnFailure", [exited(1, "init")], [waiting(reason="PodInitializing")], initialized=False) == "Pending"


def state(containers, **kw):
    return PodRuntimeState(restart_policy="Always", sandbox_ready=True, initialized=True, containers=containers,
                           pod_ips=["10.244.0.5"], host_ip="192.168.1.10", start_time=T0, **kw)


def conditions(status):
    return {c["type"]: c for c in status["conditions"]}


def test_ready_pod_status_shape():
    ready = running()
    ready.ready = ready.started = True
    ready.container_id = "kubesvc://abc"
    status = generate_pod_status(state([ready]), {"conditions": [{"type": "PodScheduled", "status": "True"}]}, T0)
    assert status["phase"] == "Running"
    assert status["podIP"] == "10.244.0.5" and status["podIPs"] == [{"ip": "10.244.0.5"}]
    assert status["hostIP"] == "192.168.1.10" and status["hostIPs"] == [{"ip": "192.168.1.10"}]
    assert status["startTime"] == "2026-01-01T12:00:00Z"
    assert {t: c["status"] for t, c in conditions(status).items()} == {
        "PodReadyToStartContainers": "True", "Initialized": "True", "Ready": "True", "ContainersReady": "True", "PodScheduled": "True"}
    assert status["containerStatuses"] == [{
        "name": "c", "state": {"running": {"startedAt": "2026-01-01T12:00:00Z"}}, "lastState": {}, "ready": True,
        "restartCount": 0, "image": "img", "imageID": "", "started": True, "containerID": "kubesvc://abc"}]


def test_unready_containers_are_named_and_transition_times_hold():
    first = generate_pod_status(state([running("a"), running("b")]), {}, T0)
    ready = conditions(first)["Ready"]
    assert ready["status"] == "False" and ready["reason"] == "ContainersNotReady"
    assert ready["message"] == "containers with unready status: [a b]"
    later = T0 + timedelta(seconds=30)
    again = generate_pod_status(state([running("a"), running("b")]), first, later)
    assert conditions(again)["Ready"]["lastTransitionTime"] == "2026-01-01T12:00:00Z"  # unchanged status keeps its time
    a, b = running("a"), running("b")
    a.ready = b.ready = True
    flipped = generate_pod_status(state([a, b]), again, later)
    assert conditions(flipped)["Ready"] == {"type": "Ready", "status": "True", "lastProbeTime": None,
                                            "lastTransitionTime": "2026-01-01T12:00:30Z"}


def test_crash_loop_container_status():
    status = generate_pod_status(state([backing_off()]), {}, T0)
    (container,) = status["containerStatuses"]
    assert container["state"] == {"waiting": {"reason": "CrashLoopBackOff"}}
    assert container["lastState"] == {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "2026-01-01T12:00:00Z",
                                                     "startedAt": "2026-01-01T12:00:00Z"}}
    assert container["restartCount"] == 1


def test_completed_pod_is_not_ready_with_pod_completed():
    done = PodRuntimeState(restart_policy="Never", sandbox_ready=False, initialized=True, containers=[exited(0)])
    status = generate_pod_status(done, {}, T0)
    assert status["phase"] == "Succeeded"
    assert conditions(status)["Ready"]["reason"] == "PodCompleted"
    assert conditions(status)["PodReadyToStartContainers"]["status"] == "False"


@pytest.mark.parametrize("old,new,patch", [
    ({"a": 1}, {"a": 1}, {}),
    ({"a": 1}, {"a": 2}, {"a": 2}),
    ({"state": {"waiting": {"reason": "X"}}}, {"state": {"running": {"startedAt": "t"}}},
     {"state": {"waiting": None, "running": {"startedAt": "t"}}}),
    ({"l": [1, 2]}, {"l": [1]}, {"l": [1]}),
    ({"gone": 1, "kept": 2}, {"kept": 2}, {"gone": None}),
], ids=["same", "scalar", "nested-key-replaced", "list-whole", "removed-key"])
def test_merge_patch_for(old, new, patch):
    assert merge_patch_for(old, new) == patch


def test_conditions_of_other_components_are_kept():
    old = {"conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "example.com/lb", "status": "True"},
                          {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]}
    status = generate_pod_status(state([running()]), old, T0)
    kept = {t: c for t, c in conditions(status).items() if t in ("PodScheduled", "example.com/lb", "DisruptionTarget")}
    assert kept == {"PodScheduled": {"type": "PodScheduled", "status": "True"}, "example.com/lb": {"type": "example.com/lb", "status": "True"},
                    "DisruptionTarget": {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}}
