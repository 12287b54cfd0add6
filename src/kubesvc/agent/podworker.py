"""One Pod's life on the node (upstream ``pod_workers.go`` + ``kuberuntime_manager.go``
``SyncPod``/``KillPod``, reduced to processes).

1. **Volumes** (``podvolumes.py``), before anything else as the kubelet's
   ``WaitForAttachAndMount``: a volume that cannot be set up is a ``FailedMount`` event
   (``MountVolume.SetUp failed for volume "v" : ...``) and a retry with the kubelet's back-off
   (0.5 s doubling to 2m2s), the containers waiting in ``ContainerCreating``. Once set up, the
   atomic-writer volumes are refreshed every ``volume_resync`` seconds (and when the Pod's
   labels or annotations change), which is when a projected token gets renewed.
   **Sandbox**: the Pod's network namespace, veth and address (``podnet.add_pod``); the
   ``PodReadyToStartContainers`` condition and ``status.podIP(s)`` follow. Volumes and
   sandbox take one of the node's setup places (``WorkerContext.setup_slots``), given up
   while a failed step waits out its back-off; their files, netlink and forks run on worker
   threads, never on the event loop.
2. **Init containers** run one after another, each to a zero exit; then every container starts.
   A *sidecar* (an init container with ``restartPolicy: Always``, KEP-753, on by default since
   1.29) is started in its turn and kept running beside everything after it, restarted
   whatever the Pod's ``restartPolicy``; the next init container waits only until it has
   started (its startup probe passed). Once the regular containers are done for good (a Pod
   that completes) the sidecars are stopped; then, as on termination, they stop after the
   regular containers one after the other, the last one defined first (``terminationorder``).
3. **Each container** is supervised: its environment (the Service variables, ``env`` and
   ``envFrom`` with the ConfigMaps and Secrets they read, the downward API), its mounts (its
   own mount namespace, ``kernel/mounts.py``), its hostname and user (``podidentity.py``) are
   computed when it starts; one that cannot be configured waits in
   ``CreateContainerConfigError``, tried again every ``backoff_base`` (the pod worker's 10 s)
   and at once when a ConfigMap or Secret it reads changes (``objectwatch.py``). It is
   restarted by ``restartPolicy`` with the kubelet's crash-loop back-off (immediately, then
   10 s doubling to 5 min), and whatever the policy when its definition changes (a new
   ``image``: kuberuntime's container hash); its first ``restartCount`` is what the log files
   of earlier attempts on this node show (``runtime.restart_count_from_log_dir``). Its probes
   run while it runs: a startup probe gates the others, readiness sets ``ready``, a failed
   liveness or startup probe kills it for a restart.
4. **Status**: every change marks the Pod dirty; one writer sends a merge patch of the new
   ``status`` (computed by ``podstatus``) to the ``status`` subresource.
5. **Termination** (the Pod got a ``deletionTimestamp``): readiness probes keep running (the
   endpoint stays ``serving`` while it drains, ``terminating`` because of the timestamp),
   ``preStop`` hooks run, SIGTERM, SIGKILL at the end of the grace period, then the sandbox
   goes, then its volumes, and the Pod object is deleted for good (grace 0, UID precondition),
   as the kubelet's status manager does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from kubesvc.agent import envvars, podidentity, podnet, poddns, volumes as volume_kinds
from kubesvc.agent.logs import container_log_path
from kubesvc.agent.podvolumes import PodVolumes, VolumeSetUpFailed, fetch_object, read_only_root_filesystem, runtime_file_binds
from kubesvc.agent.tokens import TokenManager
from kubesvc.agent.volumes import MountConfigError
from kubesvc.agent.podstatus import (ContainerRecord, PodRuntimeState, Termination, generate_pod_status, merge_patch_for,
                                     readiness_gates_message)
from kubesvc.agent.probes import ProbeResult, ProbeSpec, ProbeTracker, next_check_at, probe_event, run_check, run_probe, worker_result
from kubesvc.agent.runtime import ContainerProcess, StartError, restart_count_from_log_dir
from kubesvc.agent.terminationorder import TerminationOrder
from kubesvc.util.golang import quote as go_quote
from kubesvc.client.record import EventRecorder
from kubesvc.client.rest import ApiError, ClientError, is_not_found
from kubesvc.kernel.mounts import CAPABILITIES, Identity, MountPlan, MountPlanError, plan_mounts
from kubesvc.util.aio import wait_event
from kubesvc.util.clock import Clock
from kubesvc.util.golang import format_duration

STATUS_RETRY_SECONDS = 1.0  # after a failed status write with no newer status to write

log = logging.getLogger("kubesvc.agent")

STOPPED_FOR_GOOD = object()
MINIMUM_GRACE_AFTER_PRE_STOP = 2.0  # upstream minimumGracePeriodInSeconds
KILLED_EXIT_WAIT = 5.0  # how long the next container in the termination order waits for a SIGKILLed one to go
VOLUME_RETRY_FIRST, VOLUME_RETRY_MAX = 0.5, 122.0  # nestedpendingoperations' exponential back-off


@dataclass
class WorkerContext:
    """What every Pod worker shares: the node, its network, the API and the Services."""

    node_name: str
    host_ips: list[str]
    network: podnet.NodeNetwork
    log_root: Path
    pods: object  # ResourceClient for pods
    recorder: EventRecorder
    services: Callable[[], list[dict]]
    clock: Clock
    backoff_base: float = 10.0
    backoff_max: float = 300.0
    # volumes (podvolumes.py) under kubelet_dir; ConfigMaps, Secrets and tokens read through
    # ``api`` (a RestClient); none served when kubelet_dir or tokens is None
    kubelet_dir: Path | None = None
    api: object = None
    tokens: TokenManager | None = None
    volume_resync: float = 60.0  # the kubelet's sync period, when projected files are renewed
    # how many Pods have their volumes and sandbox set up at once (None: no bound); a Pod
    # waiting out a back-off holds no place
    setup_slots: asyncio.Semaphore | None = None
    # the node's shared watches of referenced ConfigMaps and Secrets (objectwatch.py); None: the
    # volumes follow their objects every volume_resync only, a config error retries on its period
    objects: object = None
    # the kubelet's --cluster-dns/--cluster-domain/--resolv-conf (poddns.NodeDNS): each Pod's own
    # /etc/resolv.conf and /etc/hosts; None: containers see the host's
    dns: object = None


def _describe(pod: dict) -> str:
    meta = pod["metadata"]
    return f"{meta['name']}_{meta.get('namespace', '')}({meta.get('uid', '')})"


@dataclass
class ContainerSlot:
    """A container of the Pod and what the agent knows of it."""

    spec: dict
    record: ContainerRecord
    init: bool = False
    process: ContainerProcess | None = None
    kill_reason: str = ""  # why the agent is stopping the current run (liveness, startup)
    stop_requested: asyncio.Event = field(default_factory=asyncio.Event)
    trackers: dict[str, ProbeTracker] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    definition_changed: bool = False  # its spec hash changed: restarted whatever the restartPolicy
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # ends a back-off early (a new definition)
    retired: bool = False  # a sidecar stopped because the Pod's regular containers are done: not restarted
    started_once: asyncio.Event = field(default_factory=asyncio.Event)  # has been started (startup probe passed) at least once

    @property
    def name(self) -> str:
        return self.spec["name"]

    @property
    def sidecar(self) -> bool:
        """A restartable init container (``restartPolicy: Always`` on an init container)."""
        return self.init and self.spec.get("restartPolicy") == "Always"


class PodWorker:
    def __init__(self, ctx: WorkerContext, pod: dict, *, restart_counts: dict[str, int] | None = None):
        self.ctx = ctx
        self.pod = pod
        self.uid = pod["metadata"]["uid"]
        spec = pod.get("spec") or {}
        counts = restart_counts or {}
        self.init_slots = [ContainerSlot(c, ContainerRecord(c["name"], c.get("image", ""), waiting_reason="PodInitializing",
                                                            restart_count=counts.get(c["name"], 0)), init=True)
                           for c in spec.get("initContainers") or []]
        waiting = "PodInitializing" if self.init_slots else "ContainerCreating"
        self.slots = [ContainerSlot(c, ContainerRecord(c["name"], c.get("image", ""), waiting_reason=waiting,
                                                       restart_count=counts.get(c["name"], 0)))
                      for c in spec.get("containers") or []]
        self.network: podnet.PodNetwork | None = None
        self.volumes: PodVolumes | None = None
        self._volumes_changed = asyncio.Event()
        self._volume_refresher: asyncio.Task | None = None
        self.initialized = not self.init_slots
        self.start_time: datetime | None = None
        self.terminating = False
        self.grace: float = 30.0
        self.finished = asyncio.Event()  # sandbox gone and Pod deleted (or given up on)
        self.force_kill = asyncio.Event()
        self._dirty = asyncio.Event()
        self._status_reported: dict = dict(pod.get("status") or {})
        self._tasks: list[asyncio.Task] = []
        self._main: asyncio.Task | None = None
        self._writer: asyncio.Task | None = None
        self._delete_when_stopped = True  # False when the agent stops: the Pod object stays
        self._terminate = asyncio.Event()
        self._grace_shortened = asyncio.Event()
        self._message = ""
        self._watch_tokens: list = []

    # -- surface used by the Agent

    def start(self) -> None:
        self._writer = asyncio.create_task(self._write_status_forever())
        self._main = asyncio.create_task(self._run())

    def update(self, pod: dict) -> None:
        """A newer version of the Pod from the informer."""
        old_meta = self.pod["metadata"]
        self.pod = pod
        meta = pod["metadata"]
        self._follow_definitions(pod)
        if (meta.get("labels"), meta.get("annotations")) != (old_meta.get("labels"), old_meta.get("annotations")):
            self._volumes_changed.set()  # the downward API files follow
        if meta.get("deletionTimestamp"):  # a second, shorter DELETE shortens the grace period
            self.request_termination(float(meta.get("deletionGracePeriodSeconds", 30) or 0))

    def _follow_definitions(self, pod: dict) -> None:
        """kuberuntime's ``containerChanged``: a container whose hashed fields changed (a
        ``kubectl set image``) is killed with "Container X definition changed, will be
        restarted" and started again with the new definition whatever the restartPolicy, without
        waiting out the old one's back-off (the back-off key holds the hash)."""
        containers = {c.get("name"): c for c in (pod.get("spec") or {}).get("containers") or []}
        for slot in self.slots:
            new = containers.get(slot.name)
            if new is None or container_hash_fields(new) == container_hash_fields(slot.spec):
                continue
            slot.spec = new
            if self.terminating:
                continue
            if slot.process is not None and slot.process.returncode is None:
                slot.definition_changed = True
                self._kill_for_restart(slot, f"Container {slot.name} definition changed, will be restarted")
            else:
                slot.wake.set()
        self._follow_init_definitions(pod)

    def _follow_init_definitions(self, pod: dict) -> None:
        """An init container's new ``image`` as kuberuntime's ``computeInitContainerActions``
        treats it (1.32): a running one is left to finish and a completed one is not run again
        (after initialization only restartable init containers are looked at), but its next
        run uses the new definition, and one waiting out its crash-loop back-off runs at once
        (the back-off key holds the container's hash). A running sidecar is restarted with the
        new definition, as a regular container is."""
        containers = {c.get("name"): c for c in (pod.get("spec") or {}).get("initContainers") or []}
        for slot in self.init_slots:
            new = containers.get(slot.name)
            if new is None or container_hash_fields(new) == container_hash_fields(slot.spec):
                continue
            slot.spec = new
            if self.terminating:
                continue
            if slot.sidecar and slot.process is not None:
                slot.definition_changed = True
                self._kill_for_restart(slot, f"Init container {slot.name} definition changed")
            elif (slot.sidecar or not self.initialized) and slot.process is None:
                slot.wake.set()

    def request_termination(self, grace: float) -> None:
        if self.terminating and grace >= self.grace:
            return
        self.grace = grace
        self.terminating = True  # from now on nothing (re)starts
        self._terminate.set()
        self._grace_shortened.set()

    def kill_now(self) -> None:
        """The Pod object is gone (force deletion): SIGKILL without waiting."""
        self.force_kill.set()
        self.request_termination(0)

    def restart_count(self, container: str) -> int:
        for slot in self.init_slots + self.slots:
            if slot.name == container:
                return slot.record.restart_count
        return 0

    def container_running(self, container: str) -> bool:
        return any(slot.name == container and slot.record.running for slot in self.init_slots + self.slots)

    async def shutdown(self, grace: float, *, delete: bool) -> None:
        """Stop everything (the agent is stopping); the Pod object stays unless ``delete``."""
        self._delete_when_stopped = delete
        self.request_termination(grace)
        await self.finished.wait()

    # -- the Pod's life

    def _event(self, type_: str, reason: str, message: str) -> None:
        self.ctx.recorder.event(self.pod, type_, reason, message)

    def _mark_dirty(self) -> None:
        self._dirty.set()

    async def _run(self) -> None:
        try:
            running = asyncio.create_task(self._run_pod())
            terminate = asyncio.create_task(self._terminate.wait())
            await asyncio.wait({running, terminate}, return_when=asyncio.FIRST_COMPLETED)
            if not self._terminate.is_set():
                await self._terminate.wait()  # terminal phase reached: wait for deletion
            await self._kill_all()
            # supervisors see `terminating` and return; a container caught starting is stopped by
            # its own supervisor with the grace period. Cancel only as a last resort.
            done, _ = await asyncio.wait({running}, timeout=self.grace + 10)
            if not done:
                running.cancel()
            results = await asyncio.gather(running, return_exceptions=True)
            if isinstance(results[0], Exception):
                log.error("pod %s: %s", _describe(self.pod), results[0], exc_info=results[0])
            await self._finish()
        except Exception:
            log.exception("pod %s: worker failed", _describe(self.pod))
        finally:
            self.finished.set()

    async def _run_pod(self) -> None:
        self.start_time = self.ctx.clock.now()
        await asyncio.to_thread(self._restore_restart_counts)
        self._watch_referenced_objects()
        place = _SetupSlot(self.ctx.setup_slots)
        try:
            await place.take()
            if self.terminating:
                return  # deleted while it waited for its place
            if not await self._set_up_volumes(place):
                return  # terminated while waiting for its volumes
            if not await self._create_sandbox(place):
                return
            self._write_dns_files()
        finally:
            place.give_back()
        self._message = ""
        self._mark_dirty()
        sidecars: list[asyncio.Task] = []
        try:
            for slot in self.init_slots:
                if slot.sidecar:
                    sidecars.append(asyncio.create_task(self._supervise(slot)))
                    if not await self._started(slot):
                        return  # terminating
                    continue
                if await self._supervise(slot) is STOPPED_FOR_GOOD:
                    await self._stop_sidecars(sidecars)
                    await self._remove_sandbox()
                    return  # failed for good under restartPolicy Never: the Pod failed
            self.initialized = True
            for slot in self.slots:
                slot.record.waiting_reason = "ContainerCreating"
            self._mark_dirty()
            await asyncio.gather(*(self._supervise(slot) for slot in self.slots))
            await self._stop_sidecars(sidecars)  # the regular containers are done for good
        finally:
            for task in sidecars:  # only still running when this was cancelled
                task.cancel()
            await asyncio.gather(*sidecars, return_exceptions=True)
        if self.network is not None and not self.terminating:
            await self._remove_sandbox()  # terminal Pod: upstream tears the sandbox down too

    async def _started(self, slot: ContainerSlot) -> bool:
        """Wait until a sidecar has started once (running, its startup probe passed: the
        kubelet's "initialized" restartable init container, whose later exits no longer hold
        up what follows); False when the Pod terminates first."""
        await _wait_any([slot.started_once, self._terminate], None)
        return slot.started_once.is_set()

    async def _stop_sidecars(self, sidecars: list[asyncio.Task]) -> None:
        """The regular containers are done (or an init container failed for good): the kubelet
        kills the Pod (computePodActions' KillPod, its sidecars no longer started), so the
        sidecars stop as on deletion, one after the other, the last one defined first, with the
        Pod's terminationGracePeriodSeconds, and are not restarted."""
        for slot in self.init_slots:
            if slot.sidecar:
                slot.retired = True
                slot.wake.set()  # out of a crash-loop back-off
        running = [s for s in self.init_slots if s.sidecar and s.process is not None]
        spec = self.pod.get("spec") or {}
        order = TerminationOrder(spec, [s.name for s in running])
        grace = float(spec.get("terminationGracePeriodSeconds", 30))
        await asyncio.gather(*(self._kill_container(slot, order, grace) for slot in running))
        await asyncio.gather(*sidecars, return_exceptions=True)

    def _restore_restart_counts(self) -> None:
        """Each container's restart count from the attempts this node finds (kuberuntime's
        ``calcRestartCountByLogDir``: one log file ``N.log`` per attempt survives the agent, so
        after a restart the next attempt is ``max N + 1``), never below what the API last showed."""
        meta = self.pod["metadata"]
        for slot in self.init_slots + self.slots:
            log_dir = container_log_path(self.ctx.log_root, meta.get("namespace", ""), meta["name"], self.uid, slot.name, 0).parent
            slot.record.restart_count = max(slot.record.restart_count, restart_count_from_log_dir(log_dir))

    async def _set_up_volumes(self, place: "_SetupSlot") -> bool:
        """The Pod's volumes in place (retried until they are, or the Pod terminates: False)."""
        if self.ctx.kubelet_dir is None or self.ctx.tokens is None:
            return True
        self.volumes = PodVolumes(self.ctx.kubelet_dir, self.pod, client=self.ctx.api, tokens=self.ctx.tokens, clock=self.ctx.clock,
                                  watches=self.ctx.objects)
        delay = VOLUME_RETRY_FIRST
        while True:
            self._volumes_changed.clear()
            try:
                await self.volumes.set_up()
                break
            except VolumeSetUpFailed as err:
                self._report_mount_failures(err.failures)
            # a ConfigMap or Secret the volumes read that changes meanwhile (created at last) ends the wait
            if not await place.back_off(self._terminate, delay, wake=self._volumes_changed):
                return False
            delay = min(delay * 2, VOLUME_RETRY_MAX)
        self._volume_refresher = asyncio.create_task(self._refresh_volumes_forever())
        return True

    def _watch_referenced_objects(self) -> None:
        """Follow the ConfigMaps and Secrets this Pod reads: its volumes are rewritten when one
        changes, a container waiting for one (CreateContainerConfigError) is retried."""
        if self.ctx.objects is None:
            return
        namespace = self.pod["metadata"].get("namespace") or ""
        spec = self.pod.get("spec") or {}
        refs = {ref for v in spec.get("volumes") or [] if isinstance(v, dict) and volume_kinds.volume_kind(v)
                for ref in volume_kinds.referenced_objects(v)}
        for ref in refs:
            self._watch_tokens.append(self.ctx.objects.subscribe(namespace, ref, self._volumes_changed.set))
        for slot in self.init_slots + self.slots:
            for ref in envvars.env_objects(slot.spec):
                self._watch_tokens.append(self.ctx.objects.subscribe(namespace, ref, lambda s=slot: self._retry_config_error(s)))

    def _retry_config_error(self, slot: ContainerSlot) -> None:
        if slot.record.waiting_reason == "CreateContainerConfigError" and not slot.record.running:
            slot.wake.set()

    async def _create_sandbox(self, place: "_SetupSlot") -> bool:
        """The Pod's network (retried with back-off until it exists, or the Pod terminates: False)."""
        delay = 1.0
        while self.network is None:
            try:
                self.network = await podnet.add_pod(self.ctx.network, self.uid)
            except Exception as err:  # reported, then retried with back-off, as the kubelet's sync loop does
                self._message = f"Failed to create pod sandbox: {err}"
                self._event("Warning", "FailedCreatePodSandBox", self._message)
                self._mark_dirty()
                if not await place.back_off(self._terminate, delay):
                    return False
                delay = min(delay * 2, self.ctx.backoff_max)
        return True

    def _report_mount_failures(self, failures: list[tuple[str, str]]) -> None:
        for name, message in failures:
            self._event("Warning", "FailedMount", f"MountVolume.SetUp failed for volume {go_quote(name)} : {message}")

    async def _refresh_volumes_forever(self) -> None:
        assert self.volumes is not None
        while True:
            await wait_event(self._volumes_changed, self.ctx.volume_resync)
            self._volumes_changed.clear()
            try:
                self._report_mount_failures(await self.volumes.refresh(self.pod))
            except Exception:  # keep refreshing; the files stay as they were
                log.exception("pod %s: volume refresh failed", _describe(self.pod))

    def _mount_plan(self, container: dict) -> MountPlan | None:
        """The container's mount namespace (None: no volume mounts, no DNS files)."""
        if self.volumes is None:
            return None
        binds = self.volumes.mounts_for(container) if container.get("volumeMounts") else []
        read_only = read_only_root_filesystem(container)  # securityContext.readOnlyRootFilesystem
        if self.ctx.dns is not None:
            binds = [*binds, *runtime_file_binds(poddns.binds_for(container, self.volumes.directory), read_only)]
        return plan_mounts(binds, str(self.volumes.staging_root), read_only_root=read_only) if binds or read_only else None

    def _write_dns_files(self) -> None:
        """The Pod's resolv.conf and hosts (poddns), once its sandbox has its IPs."""
        if self.ctx.dns is None or self.volumes is None or self.network is None:
            return
        for event in self.ctx.dns.write_pod_files(self.pod, list(self.network.ips), self.volumes.directory):
            if event.on == "Pod":
                self._event("Warning", event.reason, event.message)
            else:  # the kubelet's nodeRef: its UID is the node's name
                node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.ctx.node_name, "uid": self.ctx.node_name}}
                self.ctx.recorder.event(node, "Warning", event.reason, event.message)

    async def _supervise(self, slot: ContainerSlot):
        """Run one container until it is done for good (by restartPolicy) or the Pod terminates;
        returns STOPPED_FOR_GOOD when an init container failed for good."""
        policy = "Always" if slot.sidecar else (self.pod.get("spec") or {}).get("restartPolicy", "Always")
        backoff = 0.0
        while not self.terminating and not slot.retired:
            try:
                exit_ = await self._run_once(slot)
            except (OSError, ValueError) as err:  # e.g. the log file cannot be written: retried like a start error
                log.warning("pod %s container %s: %s", _describe(self.pod), slot.name, err)
                slot.record.waiting_reason, slot.record.waiting_message = "RunContainerError", str(err)
                self._mark_dirty()
                exit_ = _RunResult(128, 0.0, config_error=True)
            if self.terminating or slot.retired:
                return None
            if slot.definition_changed:  # a new definition starts at once, with a back-off of its own
                slot.definition_changed, backoff = False, 0.0
                continue
            if exit_.config_error:
                # not a crash: the pod worker tries again on its next sync (backOffPeriod, 10 s),
                # the crash-loop back-off untouched; a new definition tries at once
                if await self._wait_or_wake(slot, self.ctx.backoff_base):
                    return None
                continue
            if slot.init and not slot.sidecar and exit_.exit_code == 0:
                return None
            if not should_restart(policy, exit_.exit_code, exit_.config_error):
                return STOPPED_FOR_GOOD if slot.init else None
            if backoff:
                record = slot.record
                if record.terminated is not None:  # a configuration error keeps its own waiting reason
                    record.last_termination, record.terminated, record.running_since = record.terminated, None, None
                    record.waiting_reason = "CrashLoopBackOff"
                    record.waiting_message = f"back-off {format_duration(backoff)} restarting failed container={slot.name} pod={_describe(self.pod)}"
                    self._event("Warning", "BackOff", f"Back-off restarting failed container {slot.name} in pod {_describe(self.pod)}")
                self._mark_dirty()
                if await self._wait_or_wake(slot, backoff):
                    return None
                if slot.wake.is_set():  # a new definition: its back-off starts afresh
                    backoff = 0.0
                    continue
            backoff = min(self.ctx.backoff_max, backoff * 2 if backoff else self.ctx.backoff_base)
            if exit_ is not None and exit_.ran_for > 2 * self.ctx.backoff_max:
                backoff = 0.0  # upstream resets the back-off after a long healthy run
        return None

    async def _wait_or_wake(self, slot: ContainerSlot, delay: float) -> bool:
        """Wait ``delay`` (less when the slot is woken); True when the Pod terminates meanwhile."""
        slot.wake.clear()
        await _wait_any([self._terminate, slot.wake], delay)
        return self._terminate.is_set()

    async def _run_once(self, slot: ContainerSlot) -> "_RunResult | None":
        record = slot.record
        if record.has_run:
            if record.terminated is not None:
                record.last_termination = record.terminated
                record.terminated = None
            if record.running_since is not None or record.last_termination is not None:
                record.restart_count += 1
        record.running_since = None
        record.ready = record.started = False
        slot.kill_reason = ""
        slot.stop_requested = asyncio.Event()
        slot.wake.clear()
        record.image = slot.spec.get("image", "")
        try:
            env = dict(await self._environment(slot.spec))
            argv = envvars.container_argv(slot.spec, env)
            mounts = self._mount_plan(slot.spec)
            identity = self._identity(slot.spec)
        except (envvars.EnvError, MountConfigError, MountPlanError, podidentity.IdentityError) as err:
            record.waiting_reason, record.waiting_message = "CreateContainerConfigError", str(err)
            self._event("Warning", "Failed", f"Error: {err}")
            self._mark_dirty()
            return _RunResult(1, 0.0, config_error=True)
        slot.env = env
        assert self.network is not None
        meta = self.pod["metadata"]
        log_path = container_log_path(self.ctx.log_root, meta.get("namespace", ""), meta["name"], self.uid, slot.name, record.restart_count)
        process = ContainerProcess(argv, env, slot.spec.get("workingDir"), self.network.netns, log_path, mounts=mounts, identity=identity,
                                   stdin=bool(slot.spec.get("stdin")), stdin_once=bool(slot.spec.get("stdinOnce")), tty=bool(slot.spec.get("tty")))
        if record.restart_count == 0:
            self._event("Normal", "Pulled", f'Container image "{record.image}" not pulled: kubesvc runs the container\'s command as a process '
                                            f"in the Pod's network namespace")
        self._event("Normal", "Created", f"Created container {slot.name}")
        started_at = self.ctx.clock.now()
        if self.terminating:
            return None
        try:
            await process.start()
        except StartError as err:
            record.terminated = Termination(128, "StartError", started_at, self.ctx.clock.now(), message=str(err),
                                            container_id=process.container_id)
            record.container_id = process.container_id
            self._event("Warning", "Failed", f"Error: {err}")
            self._mark_dirty()
            return _RunResult(128, 0.0)
        slot.process = process
        if self.terminating or slot.retired:
            slot.stop_requested.set()  # the Pod began terminating (or a sidecar was retired) while this container started
        record.container_id = process.container_id
        record.running_since = started_at
        record.waiting_message = ""
        self._event("Normal", "Started", f"Started container {slot.name}")
        probes = self._start_probes(slot)
        self._mark_dirty()
        waiter = asyncio.create_task(process.wait())
        stop = asyncio.create_task(slot.stop_requested.wait())
        try:
            await asyncio.wait({waiter, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not waiter.done():
                exit_ = await process.stop(self._grace_for_kill(slot))
                waiter.cancel()
            else:
                exit_ = waiter.result()
        except asyncio.CancelledError:
            process.signal(signal.SIGKILL)  # never leave a process behind a cancelled worker
            raise
        finally:
            stop.cancel()
            for task in probes:
                task.cancel()
            await asyncio.gather(*probes, return_exceptions=True)
        finished = self.ctx.clock.now()
        record.terminated = Termination(exit_.code, exit_.reason, started_at, finished, signal=exit_.signal, container_id=process.container_id)
        record.ready = record.started = False
        slot.process = None
        self._mark_dirty()
        return _RunResult(exit_.code, (finished - started_at).total_seconds())

    def _grace_for_kill(self, slot: ContainerSlot) -> float:
        if self.terminating:
            return self.grace
        probe_grace = None
        for kind in ("livenessProbe", "startupProbe"):
            probe = slot.spec.get(kind) or {}
            if probe.get("terminationGracePeriodSeconds") is not None:
                probe_grace = probe["terminationGracePeriodSeconds"]
        if probe_grace is not None:
            return float(probe_grace)
        return float((self.pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))

    async def _environment(self, container: dict) -> list[tuple[str, str]]:
        pod_ips = list(self.network.ips) if self.network else []
        services = envvars.services_for_pod(self.ctx.services(), self.pod)
        warnings: list[str] = []
        env = envvars.container_environment(self.pod, container, services, host_ip=self.ctx.host_ips[0] if self.ctx.host_ips else "",
                                            host_ips=list(self.ctx.host_ips), pod_ips=pod_ips,
                                            objects=await self._env_objects(container), warnings=warnings)
        for message in warnings:
            self._event("Warning", "InvalidEnvironmentVariableNames", message)
        names = {name for name, _ in env}
        if "HOSTNAME" not in names:  # container runtimes set it to the sandbox's hostname
            host_network = bool((self.pod.get("spec") or {}).get("hostNetwork"))
            env.append(("HOSTNAME", socket.gethostname() if host_network else podidentity.pod_hostname(self.pod)))
        return env

    def _identity(self, container: dict) -> Identity:
        """The container's hostname (its own UTS namespace; a hostNetwork Pod keeps the node's,
        as its sandbox shares the node's) and user (its securityContext)."""
        user = podidentity.run_as(self.pod, container)
        host_network = bool((self.pod.get("spec") or {}).get("hostNetwork"))
        return Identity(hostname=None if host_network else podidentity.pod_hostname(self.pod), uid=user.uid, gid=user.gid,
                        groups=user.groups, capabilities=podidentity.capabilities(container, CAPABILITIES))

    async def _env_objects(self, container: dict) -> dict:
        """The ConfigMaps and Secrets the container's environment reads, from their synced
        watches or else the API (the kubelet's managers; None: not found)."""
        namespace = self.pod["metadata"].get("namespace") or ""
        objects = {}
        for ref in envvars.env_objects(container):
            if self.ctx.api is None:
                raise envvars.EnvError(f"couldn't get {'configMap' if ref.kind == 'configmap' else 'secret'} {namespace}/{ref.name}, "
                                       "no kubeClient defined")
            try:
                objects[ref] = await fetch_object(self.ctx.api, namespace, ref, self.ctx.objects)
            except ClientError as err:
                raise envvars.EnvError(str(err)) from None
        return objects

    # -- probes

    def _start_probes(self, slot: ContainerSlot) -> list[asyncio.Task]:
        tasks = []
        slot.trackers = {}
        for kind in ("startup", "liveness", "readiness"):
            probe = slot.spec.get(f"{kind}Probe")
            if probe:
                slot.trackers[kind] = ProbeTracker(kind, ProbeSpec.from_dict(probe))
        if "startup" not in slot.trackers:
            slot.record.started = True
            slot.started_once.set()
        if "readiness" not in slot.trackers:
            slot.record.ready = slot.record.started
        for kind, tracker in slot.trackers.items():
            tasks.append(asyncio.create_task(self._probe_loop(slot, kind, tracker)))
        return tasks

    async def _probe_loop(self, slot: ContainerSlot, kind: str, tracker: ProbeTracker) -> None:
        spec = tracker.spec
        await asyncio.sleep(spec.initial_delay_seconds)
        loop = asyncio.get_running_loop()
        origin = loop.time()  # the ticker's start: checks keep this cadence however long each takes
        while not tracker.on_hold:
            if kind == "startup" and slot.record.started:
                return
            if kind != "startup" and not slot.record.started:
                await asyncio.sleep(min(spec.period_seconds, 1.0))
                continue
            if self.terminating and kind != "readiness":
                tracker.pod_deletion_requested()
                return  # liveness and startup stop on graceful deletion; readiness keeps draining
            assert self.network is not None
            check_started = loop.time()
            outcome = await run_check(spec, pod_ip=self.network.ips[0], container=slot.spec, env=slot.env, netns=self.network.netns,
                                      pid=_mount_namespace_pid(slot))
            event = probe_event(kind, outcome)
            if event is not None:
                self._event("Warning", *event)
            if tracker.observe(worker_result(outcome)):
                self._apply_probe(slot, kind, tracker)
            await asyncio.sleep(next_check_at(origin, spec.period_seconds, check_started, loop.time()) - loop.time())

    def _apply_probe(self, slot: ContainerSlot, kind: str, tracker: ProbeTracker) -> None:
        record = slot.record
        if kind == "readiness":
            record.ready = tracker.result == ProbeResult.SUCCESS and record.running
        elif kind == "startup":
            if tracker.result == ProbeResult.SUCCESS:
                record.started = True
                slot.started_once.set()
                if "readiness" not in slot.trackers:
                    record.ready = True
            elif tracker.result == ProbeResult.FAILURE:
                self._kill_for_restart(slot, f"Container {slot.name} failed startup probe, will be restarted")
        elif kind == "liveness" and tracker.result == ProbeResult.FAILURE:
            self._kill_for_restart(slot, f"Container {slot.name} failed liveness probe, will be restarted")
        self._mark_dirty()

    def _kill_for_restart(self, slot: ContainerSlot, message: str) -> None:
        self._event("Normal", "Killing", message)
        slot.kill_reason = message
        slot.stop_requested.set()

    # -- termination

    async def _kill_all(self) -> None:
        """Every running container at once, the sidecars waiting their turn (after the regular
        containers, the last one defined first: ``terminationorder``)."""
        running = [s for s in self.init_slots + self.slots if s.process is not None]
        order = TerminationOrder(self.pod.get("spec") or {}, [s.name for s in running])
        await asyncio.gather(*(self._kill_container(slot, order) for slot in running))

    async def _kill_container(self, slot: ContainerSlot, order: TerminationOrder | None = None, grace: float | None = None) -> None:
        """KillContainer: preStop, then (a sidecar) its turn in ``order``, SIGTERM, SIGKILL when
        the grace period runs out. The grace period is the deletion's (a later, shorter DELETE
        cuts it) unless ``grace`` is given (a Pod that finished: its terminationGracePeriodSeconds);
        the preStop hook and the wait for the turn come out of it."""
        process = slot.process
        if process is None:
            if order is not None:
                order.container_terminated(slot.name)
            return

        def budget() -> float:
            if grace is None:
                return self.grace
            return min(grace, self.grace) if self.terminating else grace

        self._event("Normal", "Killing", f"Stopping container {slot.name}")
        began = self.ctx.clock.monotonic()
        floor = began
        pre_stop = ((slot.spec.get("lifecycle") or {}).get("preStop")) or {}
        if pre_stop and not self.force_kill.is_set():
            try:
                await asyncio.wait_for(self._run_pre_stop(slot, pre_stop), timeout=max(budget(), 0.0))
            except asyncio.TimeoutError:
                pass
            # upstream leaves at least 2 s between SIGTERM and SIGKILL after a preStop hook
            floor = self.ctx.clock.monotonic() + MINIMUM_GRACE_AFTER_PRE_STOP
        if order is not None and order.waits(slot.name) and not self.force_kill.is_set():
            left = began + budget() - self.ctx.clock.monotonic()
            turn = asyncio.create_task(order.wait_for_turn(slot.name, left))
            forced = asyncio.create_task(self.force_kill.wait())
            await asyncio.wait({turn, forced}, return_when=asyncio.FIRST_COMPLETED)
            for task in (turn, forced):
                task.cancel()
            # and as much again after the wait ("always give containers a minimal shutdown window")
            floor = self.ctx.clock.monotonic() + MINIMUM_GRACE_AFTER_PRE_STOP
        process.signal(signal.SIGTERM)
        while process.returncode is None and not self.force_kill.is_set():
            remaining = max(began + budget(), floor) - self.ctx.clock.monotonic()  # self.grace shrinks on a shorter DELETE
            if remaining <= 0:
                break
            self._grace_shortened.clear()
            exited = asyncio.create_task(process.wait_exit())
            changed = asyncio.create_task(self._grace_shortened.wait())
            forced = asyncio.create_task(self.force_kill.wait())
            await asyncio.wait({exited, changed, forced}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            for task in (exited, changed, forced):
                task.cancel()
        process.signal(signal.SIGKILL)
        slot.stop_requested.set()
        if order is not None:
            # the next in line waits until this one has exited (a SIGKILL is quick)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait_exit(), timeout=KILLED_EXIT_WAIT)
            order.container_terminated(slot.name)

    async def _run_pre_stop(self, slot: ContainerSlot, hook: dict) -> None:
        """The ``preStop`` handler (exec, httpGet, tcpSocket or sleep), like a probe without thresholds."""
        if "sleep" in hook:
            await asyncio.sleep(float((hook["sleep"] or {}).get("seconds", 0)))
            return
        spec = ProbeSpec.from_dict({**hook, "timeoutSeconds": max(1, int(self.grace))})
        result, output = await run_probe(spec, pod_ip=self.network.ips[0] if self.network else "", container=slot.spec, env=slot.env,
                                         netns=self.network.netns if self.network else None, pid=_mount_namespace_pid(slot))
        if result != ProbeResult.SUCCESS:
            self._event("Warning", "FailedPreStopHook", f"PreStopHook failed: {output}".rstrip())

    async def _remove_sandbox(self) -> None:
        if self.network is None:
            return
        try:
            await podnet.remove_pod(self.ctx.network, self.uid)
        except Exception as err:
            log.warning("pod %s: cannot remove its network: %s", _describe(self.pod), err)
        self.network = None  # PodReadyToStartContainers turns False; the last podIPs stay reported
        self._mark_dirty()

    async def _finish(self) -> None:
        for slot in self.init_slots + self.slots:
            slot.record.ready = False
        await self._remove_sandbox()
        if self.ctx.objects is not None:
            for token in self._watch_tokens:
                self.ctx.objects.unsubscribe(token)
            self._watch_tokens.clear()
        if self._volume_refresher is not None:
            self._volume_refresher.cancel()
            await asyncio.gather(self._volume_refresher, return_exceptions=True)
        if self.volumes is not None:
            await self.volumes.tear_down()
        if self._writer is not None:  # one writer at a time: the final status is written here
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
        await self._flush_status()
        if self._delete_when_stopped:
            await delete_for_good(self.ctx.pods, self.pod)

    # -- status

    def runtime_state(self) -> PodRuntimeState:
        spec = self.pod.get("spec") or {}
        gates = [g.get("conditionType") for g in spec.get("readinessGates") or []]
        conditions = {c.get("type"): c.get("status") for c in (self.pod.get("status") or {}).get("conditions") or []}
        return PodRuntimeState(
            restart_policy=spec.get("restartPolicy", "Always"),
            sandbox_ready=self.network is not None and not self.finished.is_set(),
            initialized=self.initialized,
            init_containers=[s.record for s in self.init_slots],
            containers=[s.record for s in self.slots],
            pod_ips=list(self.network.ips) if self.network else [p.get("ip") for p in (self._status_reported.get("podIPs") or [])],
            host_ip=self.ctx.host_ips[0] if self.ctx.host_ips else "",
            host_ips=list(self.ctx.host_ips),
            start_time=self.start_time,
            readiness_gates_ok=all(conditions.get(g) == "True" for g in gates),
            readiness_gates_message=readiness_gates_message(gates, conditions),
            message=self._message,
            sidecars=frozenset(s.name for s in self.init_slots if s.sidecar),
        )

    async def _write_status_forever(self) -> None:
        while True:
            await self._dirty.wait()
            await self._flush_status()

    async def _flush_status(self) -> None:
        self._dirty.clear()
        status = generate_pod_status(self.runtime_state(), self.pod.get("status") or {}, self.ctx.clock.now())
        patch = merge_patch_for(self._status_reported, status)
        if not patch:
            return
        meta = self.pod["metadata"]
        try:
            # the UID makes the apiserver refuse the write if the name now belongs to a new Pod
            updated = await self.ctx.pods.patch(meta["name"], {"metadata": {"uid": self.uid}, "status": patch}, meta.get("namespace"),
                                                subresource="status")
            self._status_reported = updated.get("status") or status
            self.pod = {**self.pod, "status": self._status_reported}
        except ApiError as err:
            if is_not_found(err) or 400 <= err.status < 500:
                if not is_not_found(err):
                    log.warning("pod %s: status update refused: %s", _describe(self.pod), err)
                return  # gone, or another Pod now: never retried
            log.warning("pod %s: status update failed: %s", _describe(self.pod), err)
            await self._retry_status_later()
        except ClientError as err:
            log.warning("pod %s: status update failed: %s", _describe(self.pod), err)
            await self._retry_status_later()

    async def _retry_status_later(self) -> None:
        """After a failed status write: again in ``STATUS_RETRY_SECONDS``, or at once when the
        status changes meanwhile (the kubelet's status manager writes a new status on its next
        sync whatever the last one did), e.g. a readiness result reaching the API without
        waiting out the rest of a retry delay."""
        await wait_event(self._dirty, STATUS_RETRY_SECONDS)
        self._dirty.set()


class _SetupSlot:
    """A Pod's place among those being set up at once (``WorkerContext.setup_slots``): taken
    before its volumes, given back once its sandbox exists, and given up meanwhile while it
    waits out a back-off, so a Pod that cannot start holds no place. Waiters get places in
    the order they asked (asyncio's semaphore is fair), so a burst of Pods is set up in the
    order the Pods came."""

    def __init__(self, slots: asyncio.Semaphore | None):
        self._slots = slots
        self._held = False

    async def take(self) -> None:
        if self._slots is not None and not self._held:
            await self._slots.acquire()
            self._held = True

    def give_back(self) -> None:
        if self._held:
            self._held = False
            self._slots.release()

    async def back_off(self, terminate: asyncio.Event, delay: float, wake: asyncio.Event | None = None) -> bool:
        """Wait ``delay`` (less if ``wake`` is set meanwhile) without the place, then take it
        again; False if ``terminate`` came first."""
        self.give_back()
        await _wait_any([terminate] + ([wake] if wake is not None else []), delay)
        if terminate.is_set():
            return False
        await self.take()
        return True


async def _wait_any(events: list[asyncio.Event], timeout: float) -> None:
    """Until one of ``events`` is set or ``timeout`` seconds pass."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def _mount_namespace_pid(slot: ContainerSlot) -> int | None:
    """The container's process when it runs in namespaces of its own (mount, UTS) or as a user
    of its own: exec probes and hooks enter it there and run as its user, to see its volumes,
    hostname and files as the container does."""
    process = slot.process
    isolated = process is not None and (process.mounts is not None or process.identity not in (None, Identity()))
    return process.pid if isolated and process.returncode is None else None


def container_hash_fields(container: dict) -> tuple:
    """What kuberuntime's ``HashContainer`` covers (``pickFieldsToHash``: name and image, the
    fields a Pod update may change); a running container whose hash changed is restarted."""
    return container.get("name"), container.get("image")


def should_restart(policy: str, exit_code: int, config_error: bool) -> bool:
    """restartPolicy applied to a run that ended (an init container that succeeded is done
    before this is asked); a container that could not be configured is always retried."""
    return config_error or policy == "Always" or (policy == "OnFailure" and exit_code != 0)


async def delete_for_good(pods, pod: dict) -> None:
    """What the kubelet's status manager does once a terminating Pod has stopped: delete it with
    grace 0, only if it is still this Pod (UID precondition; a new Pod of the same name stays)."""
    meta = pod["metadata"]
    try:
        await pods.delete(meta["name"], meta.get("namespace"), grace_period_seconds=0, preconditions={"uid": meta["uid"]})
    except ApiError as err:
        if not is_not_found(err) and err.status != 409:
            log.warning("pod %s: cannot delete: %s", _describe(pod), err)
    except ClientError as err:
        log.warning("pod %s: cannot delete: %s", _describe(pod), err)


@dataclass
class _RunResult:
    exit_code: int
    ran_for: float
    config_error: bool = False
