"""Setting up many Pods at once keeps the agent's event loop free (upstream's pod workers run
side by side; nothing of a Pod's setup may hold the thread that serves probes, status writes
and informers): with a kernel whose every netlink plan and namespace walk blocks its caller
for a while, a burst of Pods is set up a few at a time (``WorkerContext.setup_slots``), in
parallel, while the loop keeps answering within a small fraction of one such call. Each
Pod's container is really started (``ip netns exec`` into a namespace only the fake kernel
knows, so it exits at once), so the fork is off the loop too."""

from __future__ import annotations

import asyncio
import threading
import time

from kubesvc.agent import podnet
from kubesvc.agent.podnet import NodeNetwork, host_veth_name
from kubesvc.agent.podworker import PodWorker, WorkerContext
from kubesvc.kernel.fake.links import FakeNetwork
from kubesvc.kernel.fake.sysctl import FakeSysctl
from kubesvc.util.clock import RealClock

BLOCKS = 0.2  # seconds each slow kernel call holds its caller's thread
PODS, PLACES = 6, 3


class SlowKernel(FakeNetwork):
    """The fake rtnetlink and namespaces, each plan and each walk of /proc taking ``BLOCKS``
    seconds of its caller's thread (as netlink and /proc do under load); counts how many
    callers it has at once."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.inside = self.most_inside = 0

    def _slowly(self, call, *args, **kwargs):
        with self._lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        try:
            time.sleep(BLOCKS)
            with self._lock:
                return call(*args, **kwargs)
        finally:
            with self._lock:
                self.inside -= 1

    def apply(self, ops, netns=None, *, force=False):
        return self._slowly(super().apply, ops, netns, force=force)

    def kill_all_in(self, netns):
        return self._slowly(super().kill_all_in, netns)


class StatusAPI:
    """The pods API's status subresource: each PATCH recorded with the moment it came."""

    def __init__(self) -> None:
        self.patches: list[tuple[float, str, dict]] = []

    async def patch(self, name, body, namespace=None, subresource=None):
        self.patches.append((time.monotonic(), name, body["status"]))
        return {"metadata": {"name": name}, "status": body["status"]}

    def ips(self) -> dict[str, str]:
        return {name: status["podIP"] for _, name, status in self.patches if status.get("podIP")}


class NoEvents:
    def event(self, *args, **kwargs) -> None:
        pass


def pod(i: int) -> dict:
    return {"metadata": {"name": f"web-{i}", "namespace": "ns", "uid": f"uid-{i}"},
            "spec": {"containers": [{"name": "c", "image": "x", "command": ["true"]}]}, "status": {}}


async def loop_lag_while(condition, period: float = 0.01) -> float:
    """The longest the loop was late for a ``period`` tick until ``condition()`` holds."""
    worst, deadline = 0.0, time.monotonic() + 30
    while not condition() and time.monotonic() < deadline:
        expected = time.monotonic() + period
        await asyncio.sleep(period)
        worst = max(worst, time.monotonic() - expected)
    return worst


async def test_a_burst_of_pods_is_set_up_a_few_at_a_time_off_the_event_loop(tmp_path):
    kernel = SlowKernel()
    sysctl = FakeSysctl(links=("lo", "cbr0", *(host_veth_name(pod(i)["metadata"]["uid"]) for i in range(PODS))))
    net = NodeNetwork(["10.244.1.0/24"], state_dir=tmp_path / "net", kernel=podnet.NodeKernel(kernel, kernel, sysctl))
    await podnet.ensure_node_network(net)
    api = StatusAPI()
    ctx = WorkerContext(node_name="n1", host_ips=["10.0.0.1"], network=net, log_root=tmp_path / "logs", pods=api, recorder=NoEvents(),
                        services=list, clock=RealClock(), setup_slots=asyncio.Semaphore(PLACES))
    workers = [PodWorker(ctx, pod(i)) for i in range(PODS)]
    began = time.monotonic()
    for worker in workers:
        worker.start()
    try:
        lag = await loop_lag_while(lambda: len(api.ips()) == PODS)
        took = time.monotonic() - began
        assert sorted(api.ips()) == sorted(f"web-{i}" for i in range(PODS))
        assert len(set(api.ips().values())) == PODS  # concurrent allocations never share an address
        assert lag < BLOCKS / 2, f"the event loop was held {lag:.3f} s"
        # in parallel, within the bound: what the kernel saw. (A wall-clock bound at 0.75 of the
        # serial 2.4 s failed in CI at 1.83 s on a busy machine; the overlap is the proof.)
        assert 2 <= kernel.most_inside <= PLACES
        assert took < PODS * 2 * BLOCKS * 4, f"{PODS} Pods took {took:.1f} s"  # a stall, not a speed figure
    finally:
        stopping = asyncio.gather(*(w.shutdown(0, delete=False) for w in workers))
        lag = await loop_lag_while(stopping.done)
        await stopping
    assert lag < BLOCKS / 2, f"the event loop was held {lag:.3f} s while the Pods were removed"
    assert kernel.names() == []
