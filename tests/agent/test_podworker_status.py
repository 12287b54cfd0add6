"""The pod worker's status writes after a failure (upstream kubelet status manager: a newer
status is written on its next sync whatever happened to the last one): a status change during
the retry delay goes out at once; without one, the retry comes after the delay."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from kubesvc.agent import podworker
from kubesvc.agent.podworker import PodWorker
from kubesvc.client.rest import ConnectionFailed
from kubesvc.util.clock import FakeClock


class FlakyPods:
    """The pods API: the first status PATCH times out, later ones are answered (and recorded
    with the moment they arrived)."""

    def __init__(self) -> None:
        self.patches: list[tuple[float, dict]] = []
        self.failures = 1

    async def patch(self, name, body, namespace=None, subresource=None):
        if self.failures:
            self.failures -= 1
            raise ConnectionFailed(f"PATCH .../pods/{name}/status: timed out")
        self.patches.append((time.monotonic(), body["status"]))
        return {"metadata": {"name": name}, "status": body["status"]}


def worker() -> tuple[PodWorker, FlakyPods]:
    pods = FlakyPods()
    ctx = SimpleNamespace(pods=pods, clock=FakeClock(), host_ips=["10.0.0.1"])
    pod = {"metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
           "spec": {"containers": [{"name": "c", "image": "x"}]}, "status": {}}
    return PodWorker(ctx, pod), pods


async def test_a_status_change_after_a_failed_write_is_written_at_once():
    w, pods = worker()
    writer = asyncio.create_task(w._write_status_forever())
    try:
        w._mark_dirty()
        await asyncio.sleep(0.05)  # the first write has failed; the retry delay has begun
        assert pods.patches == []
        w.slots[0].record.ready = True  # e.g. the readiness probe succeeded
        changed = time.monotonic()
        w._mark_dirty()
        while not pods.patches:
            await asyncio.sleep(0.005)
        assert pods.patches[0][0] - changed < podworker.STATUS_RETRY_SECONDS / 2
    finally:
        writer.cancel()


async def test_without_a_change_a_failed_write_is_retried_after_the_delay():
    w, pods = worker()
    writer = asyncio.create_task(w._write_status_forever())
    try:
        started = time.monotonic()
        w._mark_dirty()
        while not pods.patches:
            await asyncio.sleep(0.005)
        assert pods.patches[0][0] - started >= podworker.STATUS_RETRY_SECONDS * 0.9
    finally:
        writer.cancel()
