"""The order in which a Pod's containers stop, as upstream's kubelet kills a Pod
(``kuberuntime_termination_order.go``, KEP-753): every regular container at once, then the
sidecars (init containers with ``restartPolicy: Always``) one after the other, the last one
defined first, each only once the ones before it in that order have exited; the same when a
Pod's regular containers are done and its sidecars are stopped. A sidecar's wait comes out of
the grace period: a regular container that ignores SIGTERM holds the sidecars back only until
then. The containers are stand-in processes that record the signals they get; the expected
orders are written by hand from upstream."""

from __future__ import annotations

import asyncio
import signal
import time
from types import SimpleNamespace

from kubesvc.agent.podworker import PodWorker
from kubesvc.agent.terminationorder import TerminationOrder
from kubesvc.util.clock import RealClock


class StandIn:
    """A running container: exits ``exit_after`` seconds after SIGTERM (never if None), at once on SIGKILL."""

    def __init__(self, name: str, journal: list, exit_after: float | None = 0.05):
        self.name, self.journal, self.exit_after = name, journal, exit_after
        self.returncode = None
        self._exited = asyncio.Event()

    def signal(self, sig: int) -> None:
        if self.returncode is not None:
            return
        self.journal.append((signal.Signals(sig).name, self.name))
        if sig == signal.SIGTERM:
            self.sigterm_at = time.monotonic()
        if sig == signal.SIGKILL:
            self._exit(137)
        elif self.exit_after is not None:
            asyncio.get_running_loop().call_later(self.exit_after, self._exit, 143)

    def _exit(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            self.journal.append(("exited", self.name))
            self._exited.set()

    async def wait_exit(self) -> None:
        await self._exited.wait()


class Events:
    def __init__(self):
        self.seen = []

    def event(self, obj, type_, reason, message):
        self.seen.append((reason, message))


SPEC = {"initContainers": [{"name": "mesh", "image": "x", "restartPolicy": "Always"},
                           {"name": "setup", "image": "x"},
                           {"name": "logs", "image": "x", "restartPolicy": "Always"},
                           {"name": "metrics", "image": "x", "restartPolicy": "Always"}],
        "containers": [{"name": "web", "image": "x"}, {"name": "worker", "image": "x"}]}


def pod_worker(spec: dict, journal: list, *, exit_after: dict | None = None, not_running=()) -> PodWorker:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": spec, "status": {}}
    worker = PodWorker(SimpleNamespace(clock=RealClock(), host_ips=["10.0.0.1"], recorder=Events()), pod)
    for slot in worker.init_slots + worker.slots:
        if (slot.sidecar or not slot.init) and slot.name not in not_running:
            slot.process = StandIn(slot.name, journal, (exit_after or {}).get(slot.name, 0.05))
    return worker


def test_the_order_as_upstream_builds_it():
    order = TerminationOrder(SPEC, ["mesh", "logs", "metrics", "web", "worker"])
    assert order.prerequisites == {"metrics": ["web", "worker"], "logs": ["web", "worker", "metrics"], "mesh": ["web", "worker", "logs"]}


async def test_on_deletion_the_regular_containers_stop_first_then_the_sidecars_last_defined_first():
    journal: list = []
    worker = pod_worker(SPEC, journal)
    worker.request_termination(30)
    await asyncio.wait_for(worker._kill_all(), 10)
    regular = {("SIGTERM", "web"), ("SIGTERM", "worker")}
    assert set(journal[:2]) == regular  # both at once, before anything else
    assert set(journal[2:4]) == {("exited", "web"), ("exited", "worker")}
    assert journal[4:] == [("SIGTERM", "metrics"), ("exited", "metrics"), ("SIGTERM", "logs"), ("exited", "logs"),
                           ("SIGTERM", "mesh"), ("exited", "mesh")]


async def test_when_the_regular_containers_are_done_the_sidecars_stop_one_after_the_other():
    journal: list = []
    worker = pod_worker(SPEC, journal, not_running={"web", "worker"})
    await asyncio.wait_for(worker._stop_sidecars([]), 10)
    assert journal == [("SIGTERM", "metrics"), ("exited", "metrics"), ("SIGTERM", "logs"), ("exited", "logs"),
                       ("SIGTERM", "mesh"), ("exited", "mesh")]
    assert all(slot.retired for slot in worker.init_slots if slot.sidecar)


async def test_a_sidecar_that_is_not_running_holds_nobody_back():
    # logs is not running (crash-loop back-off): mesh, defined before it, waits only for the
    # regular containers, so it stops beside metrics (upstream pre-closes a stopped container's channel)
    journal: list = []
    worker = pod_worker(SPEC, journal, not_running={"logs", "worker"})
    worker.request_termination(30)
    await asyncio.wait_for(worker._kill_all(), 10)
    assert journal[:2] == [("SIGTERM", "web"), ("exited", "web")]
    assert set(journal[2:4]) == {("SIGTERM", "metrics"), ("SIGTERM", "mesh")}
    assert set(journal[4:]) == {("exited", "metrics"), ("exited", "mesh")}


async def test_the_wait_for_a_turn_ends_with_the_grace_period():
    # web ignores SIGTERM: at the end of the 1 s grace period the sidecar's turn comes anyway,
    # and it still gets upstream's 2 s minimum window, so it exits on its SIGTERM (143), not killed
    journal: list = []
    spec = {"initContainers": [{"name": "mesh", "image": "x", "restartPolicy": "Always"}], "containers": [{"name": "web", "image": "x"}]}
    worker = pod_worker(spec, journal, exit_after={"web": None, "mesh": 0.5})
    worker.request_termination(1)
    began = time.monotonic()
    mesh = worker.init_slots[0].process
    await asyncio.wait_for(worker._kill_all(), 10)
    assert journal[0] == ("SIGTERM", "web")
    assert journal.index(("SIGTERM", "mesh")) < journal.index(("exited", "mesh"))
    assert ("SIGKILL", "web") in journal and ("SIGKILL", "mesh") not in journal
    assert mesh.returncode == 143
    assert mesh.sigterm_at - began >= 0.9  # its turn came when the grace period ran out
    assert time.monotonic() - began < 5
