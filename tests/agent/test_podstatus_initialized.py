"""The ``Initialized`` condition (and the terminal ``Ready``/``ContainersReady``) of a Pod that
has finished, as upstream's ``pkg/kubelet/status/generate.go`` computes them from the container
statuses: ``GeneratePodInitializedCondition`` (True with reason ``PodCompleted`` once Succeeded;
True once a regular container has run; else ``ContainersNotInitialized`` naming the regular init
containers not exited 0 and the sidecars not started) and ``generateContainersReadyConditionFor
TerminalPhase`` (``PodCompleted``/``PodFailed``, no message). A regular init container that
exited 0 is ``ready`` (the prober manager's ``UpdatePodStatus``). Expected values are written
by hand from upstream."""

from datetime import datetime, timezone

from kubesvc.agent.podstatus import ContainerRecord, PodRuntimeState, Termination, generate_pod_status
from tests.agent.test_podstatus_sidecars import cond

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
SIDECARS = frozenset({"proxy"})


def exited(name, code):
    return ContainerRecord(name, "img", running_since=None, terminated=Termination(code, "Completed" if code == 0 else "Error", T0, T0))


def running(name, *, started=True, ready=True):
    return ContainerRecord(name, "img", running_since=T0, started=started, ready=ready)


def waiting(name, reason="PodInitializing"):
    return ContainerRecord(name, "img", waiting_reason=reason)


def crash_looping(name):
    record = ContainerRecord(name, "img", waiting_reason="CrashLoopBackOff", last_termination=Termination(1, "Error", T0, T0), restart_count=1)
    return record


def status_of(policy, init, containers, *, initialized, sidecars=frozenset()):
    state = PodRuntimeState(restart_policy=policy, sandbox_ready=False, initialized=initialized, init_containers=init,
                            containers=containers, sidecars=sidecars)
    return generate_pod_status(state, {}, T0)


def test_succeeded_without_init_containers():
    status = status_of("Never", [], [exited("main", 0)], initialized=True)
    assert status["phase"] == "Succeeded"
    assert status["conditions"] == [
        cond("PodReadyToStartContainers", "False"),
        cond("Initialized", "True", "PodCompleted"),
        cond("Ready", "False", "PodCompleted"),
        cond("ContainersReady", "False", "PodCompleted"),
    ]


def test_succeeded_with_an_init_container_and_a_stopped_sidecar():
    # the sidecar was stopped with SIGTERM (143) after main: not started, not ready, yet the Pod completed
    status = status_of("Never", [exited("setup", 0), exited("proxy", 143)], [exited("main", 0)], initialized=True, sidecars=SIDECARS)
    assert status["phase"] == "Succeeded"
    assert status["conditions"][1:] == [
        cond("Initialized", "True", "PodCompleted"),
        cond("Ready", "False", "PodCompleted"),
        cond("ContainersReady", "False", "PodCompleted"),
    ]
    assert [(s["name"], s["ready"]) for s in status["initContainerStatuses"]] == [("setup", True), ("proxy", False)]


def test_an_onfailure_job_pod_that_succeeded_after_a_retry():
    main = exited("main", 0)
    main.last_termination, main.restart_count = Termination(1, "Error", T0, T0), 1
    status = status_of("OnFailure", [exited("setup", 0)], [main], initialized=True)
    assert status["phase"] == "Succeeded"
    assert status["conditions"][1] == cond("Initialized", "True", "PodCompleted")


def test_failed_without_init_containers_is_initialized_with_no_reason():
    status = status_of("Never", [], [exited("main", 2)], initialized=True)
    assert status["phase"] == "Failed"
    assert status["conditions"][1:] == [
        cond("Initialized", "True"),
        cond("Ready", "False", "PodFailed"),
        cond("ContainersReady", "False", "PodFailed"),
    ]


def test_failed_after_its_containers_ran_is_initialized_with_no_reason():
    status = status_of("Never", [exited("setup", 0), exited("proxy", 143)], [exited("main", 1), exited("helper", 0)],
                       initialized=True, sidecars=SIDECARS)
    assert status["phase"] == "Failed"
    assert status["conditions"][1:] == [
        cond("Initialized", "True"),
        cond("Ready", "False", "PodFailed"),
        cond("ContainersReady", "False", "PodFailed"),
    ]


def test_failed_in_an_init_container_names_it_incomplete():
    status = status_of("Never", [exited("setup", 1)], [waiting("main")], initialized=False)
    assert status["phase"] == "Failed"
    assert status["conditions"][1:] == [
        cond("Initialized", "False", "ContainersNotInitialized", "containers with incomplete status: [setup]"),
        cond("Ready", "False", "PodFailed"),
        cond("ContainersReady", "False", "PodFailed"),
    ]
    assert status["initContainerStatuses"][0]["ready"] is False


def test_failed_in_an_init_container_after_a_sidecar_names_both_in_spec_order():
    # the sidecar, stopped once setup failed for good, is no longer started: incomplete too
    status = status_of("Never", [exited("proxy", 143), exited("setup", 1), waiting("late")], [waiting("main")],
                       initialized=False, sidecars=SIDECARS)
    assert status["phase"] == "Failed"
    assert status["conditions"][1] == cond("Initialized", "False", "ContainersNotInitialized",
                                           "containers with incomplete status: [proxy setup late]")


def test_a_restarting_sidecar_does_not_undo_initialization():
    # the sidecar crash-loops after main started: upstream's HasAnyRegularContainerStarted keeps it True
    status = status_of("Always", [exited("setup", 0), crash_looping("proxy")], [running("main")], initialized=True, sidecars=SIDECARS)
    assert status["phase"] == "Running"
    assert status["conditions"][1:] == [
        cond("Initialized", "True"),
        cond("Ready", "False", "ContainersNotReady", "containers with unready status: [proxy]"),
        cond("ContainersReady", "False", "ContainersNotReady", "containers with unready status: [proxy]"),
    ]
