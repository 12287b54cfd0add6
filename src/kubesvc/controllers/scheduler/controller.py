"""The scheduler's shell: Pods without a node go to one, through the API (a small
kube-scheduler, pkg/scheduler/schedule_one.go, run inside the controller-manager).

Events only enqueue Pod keys; one worker decides for one Pod at a time, so each decision sees
the ones before it, and the binding runs on its own (upstream's scheduling cycle, then
``go sched.bindingCycle(...)``): the worker *assumes* the Pod on its Node and takes the next
key while the ``binding`` request is in flight, so a burst of Pods is bound concurrently; the
worker waits for a slot beyond the binding window:

* upstream's bindings share one HTTP/2 connection; over HTTP/1.1 each request in flight is a
  connection of its own, and a new one costs a TLS handshake on both sides (about 2.5 ms of
  the client's CPU and 4 ms of the apiserver's on this machine: for a 100-Pod burst, 16
  connections were about 1 ms per bind). So the window is ``BINDINGS_IN_FLIGHT`` (4) while
  bindings come back fast, which keeps a quiet local apiserver busy, and widens to
  ``MAX_BINDINGS_IN_FLIGHT`` (16) once one takes ``SLOW_BINDING`` (20 ms) or longer (four in
  flight would then bind under 200 Pods/s: a busy, loaded or distant apiserver, where only
  more requests in flight keep the rate up); it narrows again when no binding is in flight;

* a Pod that needs scheduling (``placement.needs_scheduling``) is enqueued when it appears,
  and again when its spec changes (a toleration added, a gate removed);
* a Pod no Node could take waits among the *unschedulable* ones, all of which are enqueued
  again when a Node appears or changes in a way that matters (labels, taints,
  ``unschedulable``, conditions), and after ``UNSCHEDULABLE_RETRY`` seconds in any case
  (upstream's ``podMaxInUnschedulablePodsDuration``).

A sync decides with ``placement.pick_node`` over the informer caches, counting the Pods on
each Node plus the ones this scheduler bound and the cache does not show yet ("assumed"
Pods), so a burst of Pods still spreads. The counts follow the Pod events (``NodePodCounts``:
each Pod counted on the Node it is bound to while not terminal), as upstream's scheduler cache
keeps each NodeInfo's Pods, instead of each decision walking every Pod of every Node (a
backlog of N Pods bound onto one Node was N*N/2 Pods looked at). Then:

* placed: ``POST pods/NAME/binding`` (the Pod's uid as precondition, as upstream's
  DefaultBinder) and a Normal ``Scheduled`` Event "Successfully assigned NS/POD to NODE";
  a refused binding forgets the assumption (``ForgetPod``) and is a Warning
  ``FailedScheduling`` "Binding rejected: ..." and a retry after the Pod's back-off (1 s
  doubling to 10 s, upstream's ``podInitialBackoffSeconds``/``podMaxBackoffSeconds``), unless
  the Pod is gone or was bound by someone else meanwhile;
* not placed: a Warning ``FailedScheduling`` Event with the reason and the Pod's
  ``PodScheduled`` condition False, reason ``Unschedulable`` (a status patch only when the
  condition changes).

Events are reported by ``default-scheduler``, as kube-scheduler's are. They are written while
no binding is in flight, or once they have waited a second (``client/record.py``'s
``yield_to``): each is a write costing the apiserver about what a binding costs, and written
between a burst's bindings they took the apiserver's one core from them.
"""

from __future__ import annotations

import asyncio
import logging

from kubesvc.api.pods import POD_SCHEDULED, update_pod_condition
from kubesvc.client.cache import object_key, split_key
from kubesvc.client.record import EventRecorder
from kubesvc.client.rest import PODS, ApiError, RestClient, is_not_found
from kubesvc.client.workqueue import WorkQueue
from kubesvc.controllers.informers import SharedInformers
from kubesvc.controllers.runtime import run_workers
from kubesvc.controllers.scheduler.placement import DEFAULT_SCHEDULER, is_terminal, needs_scheduling, pick_node
from kubesvc.util.aio import cancel_and_wait, wait_event
from kubesvc.util.clock import Clock, RealClock

log = logging.getLogger("kubesvc.controllers.scheduler")

UNSCHEDULABLE_RETRY = 300.0  # seconds an unschedulable Pod waits at most before another try
MAX_RETRIES = 15
BINDINGS_IN_FLIGHT = 4  # binding requests at once while they come back fast (each is a TLS connection of its own)
MAX_BINDINGS_IN_FLIGHT = 16  # ... and once one is slow: a burst is bound in parallel, within the apiserver's in-flight limit
# seconds: a binding round trip this long widens the window; four in flight that slow would bind
# under 200 Pods/s (a quiet local apiserver answers in a few milliseconds; one shared with Pods
# starting, or loaded, or distant, takes longer, and then only more in flight keep the rate up)
SLOW_BINDING = BINDINGS_IN_FLIGHT / 200
POD_INITIAL_BACKOFF = 1.0  # seconds before a Pod whose binding failed is tried again, doubling ...
POD_MAX_BACKOFF = 10.0  # ... up to this (upstream's podInitialBackoffSeconds, podMaxBackoffSeconds)


def binding_backoff(failures: int) -> float:
    """Seconds before the next try of a Pod whose binding failed ``failures`` times in a row."""
    return min(POD_INITIAL_BACKOFF * 2 ** (max(failures, 1) - 1), POD_MAX_BACKOFF)


def binding_window(window: int, took: float | None, in_flight: int) -> int:
    """The bindings allowed in flight after one finished in ``took`` seconds (None: failed
    before an answer) with ``in_flight`` still out: the maximum once one was slow, the base
    again when none is out."""
    if in_flight == 0:
        return BINDINGS_IN_FLIGHT
    if took is not None and took >= SLOW_BINDING:
        return MAX_BINDINGS_IN_FLIGHT
    return window


def scheduling_view(node: dict) -> tuple:
    """What of a Node can change where Pods fit (upstream ``nodeSchedulingPropertiesChange``)."""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    conditions = sorted((c.get("type", ""), c.get("status", "")) for c in status.get("conditions") or [])
    return (bool(spec.get("unschedulable")), sorted((meta.get("labels") or {}).items()),
            repr(spec.get("taints") or []), conditions)


class NodePodCounts:
    """Non-terminal Pods per Node, kept from the Pod events: each Pod key remembers the Node it
    is counted on, so any sequence of adds, updates, replays and deletes (whatever the deleted
    object's last state) keeps the counts exact."""

    def __init__(self) -> None:
        self._node_of: dict[str, str] = {}  # pod key -> the Node it is counted on
        self._counts: dict[str, int] = {}

    def observe(self, key: str, pod: dict | None) -> None:
        """The Pod under ``key`` is now ``pod`` (None: gone)."""
        node = (pod.get("spec") or {}).get("nodeName") if pod is not None and not is_terminal(pod) else None
        was = self._node_of.get(key)
        if node == was:
            return
        if was is not None:
            del self._node_of[key]
            self._counts[was] -= 1
            if not self._counts[was]:
                del self._counts[was]
        if node:
            self._node_of[key] = node
            self._counts[node] = self._counts.get(node, 0) + 1

    def on(self, node: str) -> int:
        return self._counts.get(node, 0)


class Scheduler:
    def __init__(self, client: RestClient, informers: SharedInformers, *, scheduler_name: str = DEFAULT_SCHEDULER,
                 recorder: EventRecorder | None = None, clock: Clock | None = None):
        self.client = client
        self.scheduler_name = scheduler_name
        self.clock = clock or RealClock()
        self.recorder = recorder or EventRecorder(client, scheduler_name, self.clock, yield_to=self._until_no_binding_in_flight)
        self.queue = WorkQueue(clock=self.clock)
        self._pods = informers.pods
        self._nodes = informers.nodes
        self._assumed: dict[str, str] = {}  # pod key -> the node we bound it to, until the cache shows it
        self._unschedulable: set[str] = set()
        self._counts = NodePodCounts()
        self._binding_failures: dict[str, int] = {}  # pod key -> failed bindings in a row
        self._window = BINDINGS_IN_FLIGHT  # bindings allowed in flight (binding_window)
        self._in_flight = 0
        self._slot_freed = asyncio.Event()
        self._none_in_flight = asyncio.Event()
        self._none_in_flight.set()
        self._bindings: set[asyncio.Task] = set()
        self._pods.add_event_handler(self._on_pod_add, self._on_pod_update, self._on_pod_delete)
        self._nodes.add_event_handler(self._on_node_add, self._on_node_update, None)

    async def run(self) -> None:
        await asyncio.gather(self._pods.wait_for_sync(), self._nodes.wait_for_sync())
        for pod in self._pods.indexer.list():
            self._on_pod_add(pod)
        try:
            # one worker: each decision must see the Pods placed (assumed) before it
            await run_workers("scheduler", self.queue, self.schedule, 1, MAX_RETRIES)
        finally:
            await cancel_and_wait(list(self._bindings))

    # ---- event handlers: record and return -------------------------------------------------

    def _wants(self, pod: dict) -> bool:
        return needs_scheduling(pod, self.scheduler_name)

    def _on_pod_add(self, pod: dict) -> None:
        self._counts.observe(object_key(pod), pod)
        if self._wants(pod):
            self.queue.add(object_key(pod))

    def _on_pod_update(self, old: dict, new: dict) -> None:
        key = object_key(new)
        self._counts.observe(key, new)
        if (new.get("spec") or {}).get("nodeName"):
            self._assumed.pop(key, None)  # the cache shows the binding now
            self._unschedulable.discard(key)
        elif self._wants(new) and (key not in self._unschedulable or old.get("spec") != new.get("spec")):
            self.queue.add(key)  # not on a status-only change: our own PodScheduled patch comes back as one

    def _on_pod_delete(self, pod: dict) -> None:
        key = object_key(pod)
        self._counts.observe(key, None)
        self._assumed.pop(key, None)
        self._unschedulable.discard(key)
        self._binding_failures.pop(key, None)

    def _on_node_add(self, node: dict) -> None:
        self._retry_unschedulable()

    def _on_node_update(self, old: dict, new: dict) -> None:
        if scheduling_view(old) != scheduling_view(new):
            self._retry_unschedulable()

    def _retry_unschedulable(self) -> None:
        for key in self._unschedulable:
            self.queue.add(key)

    # ---- the sync ----------------------------------------------------------------------------

    def pod_counts(self) -> dict[str, int]:
        """Non-terminal Pods per Node: the cache's, plus assumed Pods it does not show yet."""
        counts = {node["metadata"]["name"]: self._counts.on(node["metadata"]["name"]) for node in self._nodes.indexer.list()}
        for key, node in self._assumed.items():
            cached = self._pods.indexer.get_by_key(key)
            if cached is not None and not (cached.get("spec") or {}).get("nodeName"):
                counts[node] = counts.get(node, 0) + 1
        return counts

    async def schedule(self, key: str) -> None:
        pod = self._pods.indexer.get_by_key(key)
        if pod is None or not self._wants(pod) or key in self._assumed:
            return
        pod = {"kind": "Pod", "apiVersion": "v1", **pod}  # list items may come without their type
        placement = pick_node(pod, self._nodes.indexer.list(), self.pod_counts())
        if placement.node is None:
            log.info("pod %s is unschedulable: %s", key, placement.reason)
            self._unschedulable.add(key)
            self.queue.add_after(key, UNSCHEDULABLE_RETRY)
            self.recorder.event(pod, "Warning", "FailedScheduling", placement.reason, action="Scheduling")
            await self._mark_unschedulable(pod, placement.reason)
            return
        self._unschedulable.discard(key)
        self._assumed[key] = placement.node  # assume: the next decision counts it on its Node
        while self._in_flight >= self._window:
            self._slot_freed.clear()
            await self._slot_freed.wait()
        self._in_flight += 1
        self._none_in_flight.clear()
        task = asyncio.create_task(self._binding_cycle(key, pod, placement.node))
        self._bindings.add(task)
        task.add_done_callback(self._bindings.discard)

    async def _binding_cycle(self, key: str, pod: dict, node: str) -> None:
        """Bind an assumed Pod; on failure forget the assumption and try the Pod again after its
        back-off (upstream ``handleBindingCycleError``)."""
        started, took = self.clock.monotonic(), None
        try:
            bound = await self._bind(pod, node)
            took = self.clock.monotonic() - started
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure: forget, back off, retry
            took = self.clock.monotonic() - started
            self._assumed.pop(key, None)
            failures = self._binding_failures[key] = self._binding_failures.get(key, 0) + 1
            delay = binding_backoff(failures)
            log.info("scheduler: binding %s to %s failed (%d in a row), retrying in %gs: %s", key, node, failures, delay, exc)
            self.queue.add_after(key, delay)
        else:
            self._binding_failures.pop(key, None)
            if not bound:
                self._assumed.pop(key, None)
        finally:
            self._in_flight -= 1
            self._window = binding_window(self._window, took, self._in_flight)
            self._slot_freed.set()
            if not self._in_flight:
                self._none_in_flight.set()

    async def _until_no_binding_in_flight(self, deadline: float) -> None:
        """The Event recorder's ``yield_to``: return once no binding is in flight, or at
        ``deadline`` (the event loop's time)."""
        await wait_event(self._none_in_flight, max(0.0, deadline - asyncio.get_running_loop().time()))

    async def _bind(self, pod: dict, node: str) -> bool:
        """``POST pods/NAME/binding``; False when there was nothing to bind (the Pod is gone, or
        someone else bound it meanwhile)."""
        namespace, name = split_key(object_key(pod))
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": name, "namespace": namespace, "uid": pod["metadata"].get("uid")},
                   "target": {"kind": "Node", "name": node}}
        try:
            await self.client.create(PODS.path(namespace, name, "binding"), binding)
        except ApiError as exc:
            if is_not_found(exc) or (exc.status == 409 and "already assigned" in exc.message):
                return False  # gone, or bound by someone else meanwhile: nothing to do
            self.recorder.event(pod, "Warning", "FailedScheduling", f"Binding rejected: {exc.message}", action="Scheduling")
            raise
        log.info("bound pod %s/%s to %s", namespace, name, node)
        self.recorder.event(pod, "Normal", "Scheduled", f"Successfully assigned {namespace}/{name} to {node}", action="Binding")
        return True

    async def _mark_unschedulable(self, pod: dict, reason: str) -> None:
        """PodScheduled=False, Unschedulable, as a strategic-merge status patch of that one
        condition (upstream ``updatePod``), only when it changes."""
        condition = {"type": POD_SCHEDULED, "status": "False", "reason": "Unschedulable", "message": reason}
        conditions, changed = update_pod_condition((pod.get("status") or {}).get("conditions") or [], condition, self.clock.now())
        if not changed:
            return
        new = next(c for c in conditions if c["type"] == POD_SCHEDULED)
        namespace, name = split_key(object_key(pod))
        try:
            await self.client.resource(PODS).patch(name, {"status": {"conditions": [new]}}, namespace, "strategic", "status")
        except ApiError as exc:
            if not is_not_found(exc):
                raise
