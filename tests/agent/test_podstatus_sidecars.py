"""Sidecars (init containers with ``restartPolicy: Always``) in the Pod's conditions, as upstream
``pkg/kubelet/status/generate.go``: ``Initialized`` waits for every regular init container to
succeed and every sidecar to have started; ``ContainersReady``/``Ready`` need every started
sidecar ready beside the regular containers (sidecars named first). Expected conditions are
written by hand."""

from datetime import datetime, timezone

from kubesvc.agent.podstatus import ContainerRecord, PodRuntimeState, Termination, generate_pod_status, pod_phase

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
NOW = "2026-01-01T12:00:00Z"


def rec(name, *, running=False, started=False, ready=False, exit_code=None, waiting="PodInitializing"):
    return ContainerRecord(name, "img", waiting_reason=waiting, running_since=T0 if running or exit_code is not None else None,
                           terminated=Termination(exit_code, "Completed" if exit_code == 0 else "Error", T0, T0) if exit_code is not None else None,
                           started=started, ready=ready)


def cond(type_, status, reason="", message=""):
    out = {"type": type_, "status": status, "lastProbeTime": None, "lastTransitionTime": NOW}
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def conditions_of(state):
    return generate_pod_status(state, {}, T0)["conditions"]


def test_a_sidecar_not_yet_started_holds_initialization():
    state = PodRuntimeState(restart_policy="Always", sandbox_ready=True, initialized=False, sidecars=frozenset({"proxy"}),
                            init_containers=[rec("setup", exit_code=0), rec("proxy", running=True)], containers=[rec("main")])
    assert conditions_of(state) == [
        cond("PodReadyToStartContainers", "True"),
        cond("Initialized", "False", "ContainersNotInitialized", "containers with incomplete status: [proxy]"),
        cond("Ready", "False", "ContainersNotReady", "containers with unready status: [proxy main]"),
        cond("ContainersReady", "False", "ContainersNotReady", "containers with unready status: [proxy main]"),
    ]


def test_a_started_sidecar_is_not_incomplete_while_a_later_init_container_runs():
    # before: every init container not terminated with 0 was "incomplete", the running sidecar too
    state = PodRuntimeState(restart_policy="Always", sandbox_ready=True, initialized=False, sidecars=frozenset({"proxy"}),
                            init_containers=[rec("proxy", running=True, started=True, ready=True), rec("setup", running=True)],
                            containers=[rec("main")])
    assert conditions_of(state)[1] == cond("Initialized", "False", "ContainersNotInitialized", "containers with incomplete status: [setup]")


def test_an_unready_sidecar_keeps_the_pod_unready():
    state = PodRuntimeState(restart_policy="Always", sandbox_ready=True, initialized=True, sidecars=frozenset({"proxy"}),
                            init_containers=[rec("setup", exit_code=0), rec("proxy", running=True, started=True, ready=False)],
                            containers=[rec("main", running=True, started=True, ready=True)])
    assert conditions_of(state) == [
        cond("PodReadyToStartContainers", "True"),
        cond("Initialized", "True"),
        cond("Ready", "False", "ContainersNotReady", "containers with unready status: [proxy]"),
        cond("ContainersReady", "False", "ContainersNotReady", "containers with unready status: [proxy]"),
    ]


def test_ready_once_the_sidecar_is_ready_too():
    state = PodRuntimeState(restart_policy="Always", sandbox_ready=True, initialized=True, sidecars=frozenset({"proxy"}),
                            init_containers=[rec("setup", exit_code=0), rec("proxy", running=True, started=True, ready=True)],
                            containers=[rec("main", running=True, started=True, ready=True)])
    status = generate_pod_status(state, {}, T0)
    assert status["phase"] == "Running"
    assert status["conditions"] == [cond("PodReadyToStartContainers", "True"), cond("Initialized", "True"), cond("Ready", "True"),
                                    cond("ContainersReady", "True")]


def test_a_regular_init_containers_readiness_does_not_count():
    state = PodRuntimeState(restart_policy="Always", sandbox_ready=True, initialized=True,
                            init_containers=[rec("setup", exit_code=0)], containers=[rec("main", running=True, started=True, ready=True)])
    assert conditions_of(state)[2] == cond("Ready", "True")


def test_a_failed_sidecar_does_not_fail_a_never_pod():
    # the sidecar is restarted whatever restartPolicy says: the Pod is still Pending
    sidecar_exited = rec("proxy", exit_code=1)
    assert pod_phase("Never", [sidecar_exited], [rec("main")], initialized=False, sidecars=frozenset({"proxy"})) == "Pending"
    assert pod_phase("Never", [rec("setup", exit_code=1)], [rec("main")], initialized=False) == "Failed"


def test_a_failed_pod_is_not_ready_with_pod_failed():
    state = PodRuntimeState(restart_policy="Never", sandbox_ready=False, initialized=True, containers=[rec("main", exit_code=2)])
    status = generate_pod_status(state, {}, T0)
    assert status["phase"] == "Failed"
    assert status["conditions"][2:] == [cond("Ready", "False", "PodFailed"), cond("ContainersReady", "False", "PodFailed")]


def test_the_pod_worker_reports_its_sidecars():
    from types import SimpleNamespace

    from kubesvc.agent.podworker import PodWorker
    from kubesvc.util.clock import FakeClock

    pod = {"metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
           "spec": {"initContainers": [{"name": "setup", "image": "x"}, {"name": "proxy", "image": "x", "restartPolicy": "Always"}],
                    "containers": [{"name": "main", "image": "x"}]}, "status": {}}
    worker = PodWorker(SimpleNamespace(clock=FakeClock(), host_ips=["10.0.0.1"]), pod)
    state = worker.runtime_state()
    assert state.sidecars == {"proxy"}
    worker.initialized = True
    for slot in worker.slots + worker.init_slots[1:]:
        slot.record.running_since, slot.record.started, slot.record.ready = T0, True, slot.name == "main"
    assert generate_pod_status(worker.runtime_state(), {}, T0)["conditions"][3] == cond(
        "ContainersReady", "False", "ContainersNotReady", "containers with unready status: [proxy]")


def test_a_running_sidecar_keeps_a_finished_pod_running_until_it_stops():
    # upstream getPhase counts running sidecars among the running containers
    sidecars = frozenset({"proxy"})
    assert pod_phase("Never", [rec("proxy", running=True, started=True)], [rec("main", exit_code=0)], initialized=True, sidecars=sidecars) == "Running"
    assert pod_phase("Never", [rec("proxy", running=True, started=True)], [rec("main", exit_code=1)], initialized=True, sidecars=sidecars) == "Running"
    # stopped (SIGTERM: 143) after main: the regular containers decide
    assert pod_phase("Never", [rec("proxy", exit_code=143)], [rec("main", exit_code=0)], initialized=True, sidecars=sidecars) == "Succeeded"
    assert pod_phase("Never", [rec("proxy", exit_code=143)], [rec("main", exit_code=1)], initialized=True, sidecars=sidecars) == "Failed"
    # a regular init container that is done is no running container
    assert pod_phase("Never", [rec("setup", exit_code=0)], [rec("main", exit_code=0)], initialized=True) == "Succeeded"
