"""What the agent reports in a Pod's ``status``: a pure function of what it knows about the
Pod's containers (upstream ``kubelet_pods.go`` ``generateAPIPodStatus``, ``getPhase``, and
``pkg/kubelet/status/generate.go`` for the conditions).

* **Container states**: exactly one of ``waiting`` (reason ``ContainerCreating``,
  ``PodInitializing``, ``CrashLoopBackOff``, ``CreateContainerConfigError``, ...), ``running``
  (``startedAt``) or ``terminated`` (``exitCode``, ``reason`` ``Completed``/``Error``/
  ``StartError``), plus ``lastState`` (the previous run's termination) and ``restartCount``.
  ``started`` follows the startup probe, ``ready`` the readiness probe.
* **Phase** (``getPhase``): Pending while a container waits without ever having run; Running
  once every container has started at least once and one still runs or will be restarted;
  Succeeded/Failed when all terminated for good (by restartPolicy) and no sidecar still runs.
* **Conditions**: ``PodReadyToStartContainers`` (the sandbox: our network namespace),
  ``Initialized`` (from the statuses alone: every regular init container exited 0, ``ready``,
  and every sidecar, an init container with ``restartPolicy: Always``, has started; or a
  regular container has run; reason ``PodCompleted`` once Succeeded), ``ContainersReady`` and ``Ready`` (every
  container and every sidecar ready; reason ``ContainersNotReady`` with the unready names,
  sidecars first, or ``PodCompleted``/``PodFailed`` once terminal), and the
  scheduler's ``PodScheduled`` kept as it is. A condition's ``lastTransitionTime`` changes only
  when its status does, so the EndpointSlice controller and ``kubectl`` see real transitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from kubesvc.api.conditions import transition_time
from kubesvc.util.golang import quote as go_quote, rfc3339

@dataclass
class Termination:
    exit_code: int
    reason: str  # Completed | Error | StartError | OOMKilled ...
    started_at: datetime | None
    finished_at: datetime
    message: str = ""
    signal: int | None = None
    container_id: str = ""

    def to_dict(self) -> dict:
        out: dict = {"exitCode": self.exit_code, "reason": self.reason, "finishedAt": rfc3339(self.finished_at)}
        if self.started_at is not None:
            out["startedAt"] = rfc3339(self.started_at)
        if self.signal:
            out["signal"] = self.signal
        if self.message:
            out["message"] = self.message
        if self.container_id:
            out["containerID"] = self.container_id
        return out


@dataclass
class ContainerRecord:
    """What the agent knows about one container (the runtime's ``ContainerStatus``)."""

    name: str
    image: str
    waiting_reason: str = "ContainerCreating"  # when neither running nor terminated
    waiting_message: str = ""
    running_since: datetime | None = None
    terminated: Termination | None = None  # the current run's end, while not restarted
    last_termination: Termination | None = None
    restart_count: int = 0
    container_id: str = ""
    ready: bool = False
    started: bool = False

    @property
    def running(self) -> bool:
        return self.running_since is not None and self.terminated is None

    @property
    def has_run(self) -> bool:
        return self.running_since is not None or self.terminated is not None or self.last_termination is not None

    def state(self) -> dict:
        if self.terminated is not None:
            return {"terminated": self.terminated.to_dict()}
        if self.running_since is not None:
            return {"running": {"startedAt": rfc3339(self.running_since)}}
        waiting = {"reason": self.waiting_reason}
        if self.waiting_message:
            waiting["message"] = self.waiting_message
        return {"waiting": waiting}

    def to_dict(self) -> dict:
        out = {
            "name": self.name,
            "state": self.state(),
            "lastState": {"terminated": self.last_termination.to_dict()} if self.last_termination else {},
            "ready": self.ready,
            "restartCount": self.restart_count,
            "image": self.image,
            "imageID": "",
            "started": self.started,
        }
        if self.container_id:
            out["containerID"] = self.container_id
        return out


def pod_phase(restart_policy: str, init: list[ContainerRecord], containers: list[ContainerRecord], *, initialized: bool,
              sidecars: frozenset[str] = frozenset()) -> str:
    """Upstream ``getPhase``: Pending / Running / Succeeded / Failed from the container states.
    A sidecar's exit never fails the Pod's initialization (it is restarted whatever the policy)."""
    if not initialized:
        failed_for_good = restart_policy == "Never" and any(
            r.terminated is not None and r.terminated.exit_code != 0 for r in init if r.name not in sidecars)
        return "Failed" if failed_for_good else "Pending"
    # a running sidecar keeps the Pod Running (upstream counts it among the running containers),
    # so a Pod whose regular containers are done ends only once its sidecars have stopped
    waiting = stopped = succeeded = 0
    running = sum(1 for r in init if r.name in sidecars and r.running)
    for record in containers:
        if record.running:
            running += 1
        elif record.terminated is not None:
            stopped += 1
            succeeded += record.terminated.exit_code == 0
        elif record.last_termination is not None:
            stopped += 1  # waiting to restart after a previous run
        else:
            waiting += 1
    if waiting:
        return "Pending"
    if running:
        return "Running"
    if not stopped:
        return "Pending"
    if restart_policy == "Always":
        return "Running"
    if restart_policy == "OnFailure":
        return "Succeeded" if stopped == succeeded and all(r.terminated is not None for r in containers) else "Running"
    return "Succeeded" if stopped == succeeded else "Failed"


def _condition(type_: str, status: bool, now: datetime, previous: dict[str, dict], reason: str = "", message: str = "") -> dict:
    text = "True" if status else "False"
    condition = {"type": type_, "status": text, "lastProbeTime": None, "lastTransitionTime": transition_time(previous.get(type_), text, now)}
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


@dataclass
class PodRuntimeState:
    """Everything the status is computed from."""

    restart_policy: str
    sandbox_ready: bool
    initialized: bool
    init_containers: list[ContainerRecord] = field(default_factory=list)
    containers: list[ContainerRecord] = field(default_factory=list)
    pod_ips: list[str] = field(default_factory=list)
    host_ip: str = ""
    host_ips: list[str] = field(default_factory=list)
    start_time: datetime | None = None
    readiness_gates_ok: bool = True
    readiness_gates_message: str = ""  # why not (readiness_gates_message()), for Ready's message
    message: str = ""
    reason: str = ""
    sidecars: frozenset[str] = frozenset()  # init containers with restartPolicy Always


def readiness_gates_message(gates: list[str], conditions: dict[str, str]) -> str:
    """``GeneratePodReadyCondition``'s message for the Pod's ``readinessGates`` not True, given
    the Pod's conditions (type -> status); "" when all are True."""
    messages = []
    for gate in gates:
        status = conditions.get(gate)
        if status is None:
            messages.append(f"corresponding condition of pod readiness gate {go_quote(gate)} does not exist.")
        elif status != "True":
            messages.append(f'the status of pod readiness gate {go_quote(gate)} is not "True", but {status}')
    return ", ".join(messages)


def _init_succeeded(record: ContainerRecord) -> bool:
    return record.terminated is not None and record.terminated.exit_code == 0


def _init_container_status(record: ContainerRecord, sidecar: bool) -> dict:
    """The prober manager's ``UpdatePodStatus``: a regular init container is ``ready`` once it
    has exited 0 (a sidecar's readiness is its readiness probe's, as a container's)."""
    out = record.to_dict()
    if not sidecar:
        out["ready"] = _init_succeeded(record)
    return out


def initialized_condition(state: PodRuntimeState, phase: str) -> tuple[bool, str, str]:
    """Upstream ``GeneratePodInitializedCondition`` from the container statuses alone: True with
    reason ``PodCompleted`` once the Pod Succeeded; True once any regular container is running
    or has terminated (initialized before: a sidecar restarting later does not undo it); else
    False, ``ContainersNotInitialized``, naming in spec order each regular init container that
    has not exited 0 and each sidecar not started. A Failed Pod gets no reason of its own: an
    init container that failed for good is named, a Pod whose containers ran is initialized."""
    if phase == "Succeeded":
        return True, "PodCompleted", ""
    if any(r.running or r.terminated is not None for r in state.containers):
        return True, "", ""
    incomplete = [r.name for r in state.init_containers
                  if not (r.started if r.name in state.sidecars else _init_succeeded(r))]
    if incomplete:
        return False, "ContainersNotInitialized", f"containers with incomplete status: [{' '.join(incomplete)}]"
    return True, "", ""


def generate_pod_status(state: PodRuntimeState, old_status: dict, now: datetime) -> dict:
    """The Pod's whole ``status`` (upstream ``generateAPIPodStatus``); ``old_status`` supplies
    the conditions other components own (kept as they are) and unchanged transition times."""
    previous = {c.get("type"): c for c in old_status.get("conditions") or [] if isinstance(c, dict)}
    phase = pod_phase(state.restart_policy, state.init_containers, state.containers, initialized=state.initialized, sidecars=state.sidecars)
    terminal = phase in ("Succeeded", "Failed")
    # generate.go: the sidecars' readiness counts beside the regular containers' (sidecars first)
    unready = [r.name for r in state.init_containers if r.name in state.sidecars and not r.ready] + [r.name for r in state.containers if not r.ready]
    if terminal:
        ready_reason, ready_message = ("PodCompleted" if phase == "Succeeded" else "PodFailed"), ""
    elif unready:
        ready_reason, ready_message = "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]"
    else:
        ready_reason, ready_message = "", ""
    containers_ready = not unready and not terminal
    initialized, init_reason, init_message = initialized_condition(state, phase)
    conditions = [
        _condition("PodReadyToStartContainers", state.sandbox_ready, now, previous),
        _condition("Initialized", initialized, now, previous, init_reason, init_message),
        _condition("Ready", containers_ready and state.readiness_gates_ok, now, previous,
                   *(("", "") if containers_ready and state.readiness_gates_ok else
                     (ready_reason, ready_message) if ready_reason else ("ReadinessGatesNotReady", state.readiness_gates_message))),
        _condition("ContainersReady", containers_ready, now, previous, *(("", "") if containers_ready else (ready_reason, ready_message))),
    ]
    ours = {c["type"] for c in conditions}
    # conditions of others (the scheduler's PodScheduled, readiness gates, DisruptionTarget) are kept
    conditions += [c for t, c in previous.items() if t not in ours]
    status: dict = {"phase": phase, "conditions": conditions}
    if state.host_ip:
        status["hostIP"] = state.host_ip
        status["hostIPs"] = [{"ip": ip} for ip in (state.host_ips or [state.host_ip])]
    if state.pod_ips:
        status["podIP"] = state.pod_ips[0]
        status["podIPs"] = [{"ip": ip} for ip in state.pod_ips]
    if state.start_time is not None:
        status["startTime"] = rfc3339(state.start_time)
    if state.init_containers:
        status["initContainerStatuses"] = [_init_container_status(r, r.name in state.sidecars) for r in state.init_containers]
    status["containerStatuses"] = [r.to_dict() for r in state.containers]
    status["qosClass"] = old_status.get("qosClass") or "BestEffort"
    if state.reason:
        status["reason"] = state.reason
    if state.message:
        status["message"] = state.message
    return status


STATUS_UNKNOWN = {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown",
                                  "message": "The container could not be located when the pod was terminated"}}


def terminate_pod_status(spec: dict, status: dict) -> dict:
    """Upstream status manager's ``TerminatePod``: the last status of a Pod the kubelet is done
    with. Every container not terminated is reported terminated with ``ContainerStatusUnknown``
    (exit 137: "we do not know whether the container was successful, always report an error")
    once the Pod has initialized (no init containers, or the last one succeeded); of the init
    containers, those up to the last one with evidence of a start; and a Pending or Running
    phase becomes Failed, so the Pod's controllers (a Job's tracking finalizer) see it end."""
    out = {**status}
    init_specs = spec.get("initContainers") or []
    init_statuses = [dict(s) for s in status.get("initContainerStatuses") or []]
    started = [i for i, s in enumerate(init_statuses) if (s.get("state") or {}).get("running") or (s.get("state") or {}).get("terminated")
               or (s.get("lastState") or {}).get("terminated")]
    for i in range(started[-1] + 1 if started else 0):
        if not (init_statuses[i].get("state") or {}).get("terminated"):
            init_statuses[i]["state"] = STATUS_UNKNOWN
    if init_statuses:
        out["initContainerStatuses"] = init_statuses
    last_init = ((init_statuses[-1].get("state") or {}).get("terminated") or {}) if init_statuses else {}
    initialized = not init_specs or (last_init.get("exitCode") == 0 and last_init.get("reason") != "ContainerStatusUnknown")
    if initialized:
        out["containerStatuses"] = [s if (s.get("state") or {}).get("terminated") else {**s, "state": STATUS_UNKNOWN}
                                    for s in status.get("containerStatuses") or []]
    if out.get("phase") not in ("Succeeded", "Failed"):
        out["phase"] = "Failed"
    return out


def never_started_status(pod: dict, host_ips: list[str], now: datetime) -> dict:
    """The final status of a Pod deleted before this node ran any of it (the kubelet's pod worker
    goes straight to terminated: ``generateAPIPodStatus`` with no runtime status, every container
    waiting, then ``TerminatePod``): Failed, its containers ``ContainerStatusUnknown``."""
    spec = pod.get("spec") or {}
    waiting = "PodInitializing" if spec.get("initContainers") else "ContainerCreating"
    old = pod.get("status") or {}
    counts = {s.get("name"): int(s.get("restartCount") or 0) for s in (old.get("initContainerStatuses") or []) + (old.get("containerStatuses") or [])}

    def records(containers: list[dict]) -> list[ContainerRecord]:
        return [ContainerRecord(c["name"], c.get("image", ""), waiting_reason=waiting, restart_count=counts.get(c["name"], 0)) for c in containers]

    state = PodRuntimeState(restart_policy=spec.get("restartPolicy", "Always"), sandbox_ready=False,
                            initialized=not spec.get("initContainers"), init_containers=records(spec.get("initContainers") or []),
                            containers=records(spec.get("containers") or []), host_ip=host_ips[0] if host_ips else "", host_ips=list(host_ips))
    return terminate_pod_status(spec, generate_pod_status(state, old, now))


def merge_patch_for(old: object, new: object) -> object:
    """The RFC 7386 merge patch turning ``old`` into ``new`` (keys that went away become null;
    lists are replaced whole), so one PATCH changes exactly what changed."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: dict = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = merge_patch_for(old[key], value) if isinstance(value, dict) and isinstance(old[key], dict) else value
    return patch
