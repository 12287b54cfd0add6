#!/usr/bin/env python3
"""EndpointSlice controller: Pod-Ready -> slice-updated latency, and slice writes per rolling update.

Starts a real ``kubesvc apiserver`` (SQLite, in a temp dir) and a real ``kubesvc
controller-manager`` process, creates one Service selecting ``--pods`` Running, Ready Pods and
waits for their slices. Then:

  (a) latency: flips ``--flips`` Pods (one every ``--flip-interval`` s) not-ready and back; for
      each flip, the time from the status write's answer to the watch event of the slice that
      shows the new condition (the controller's reaction: informer delivery, sync, slice write,
      watch delivery to us). Printed as p50/p99/max. This is what a node proxy waits before a
      newly unready Pod stops getting traffic;
  (b) a rolling replacement of every Pod in waves of ``--wave`` (start a wave of new Ready
      Pods, then delete as many old ones), counting the slice writes seen on the watch
      (ADDED/MODIFIED/DELETED), and the slice count and packing it ends with.

    python3 bench/endpointslices.py                  # 5000 Pods, 200 flips, waves of 500
    python3 bench/endpointslices.py --pods 1000 --flips 50 --wave 100
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))
from kubesvc.client.rest import ENDPOINTSLICES, PODS  # noqa: E402
from tests.support.apiserver import start_apiserver, start_controller_manager  # noqa: E402
from tests.support.cluster import api_client, create_pods, create_service, ensure_node, new_namespace, set_pod_status  # noqa: E402

LABEL = "kubernetes.io/service-name"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class SliceWatch:
    """Every slice of the Service as last seen, each endpoint's ready condition with the time it
    was first seen, and a count of slice writes."""

    def __init__(self, client, namespace: str, service: str):
        self.client, self.namespace, self.service = client, namespace, service
        self.slices: dict[str, dict] = {}
        self.ready_seen: dict[tuple[str, bool], float] = {}  # (pod, ready) -> first time seen
        self.writes = 0
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        api = self.client.resource(ENDPOINTSLICES)
        listing = await api.list(self.namespace, label_selector=f"{LABEL}={self.service}")
        for item in listing["items"]:
            self._record(item)
        self._task = asyncio.create_task(self._watch(listing["metadata"]["resourceVersion"]))

    async def _watch(self, version: str) -> None:
        api = self.client.resource(ENDPOINTSLICES)
        while True:
            async for event_type, obj in api.watch(self.namespace, label_selector=f"{LABEL}={self.service}", resource_version=version,
                                                   timeout_seconds=3600, allow_watch_bookmarks=True):
                version = obj["metadata"].get("resourceVersion", version)
                if event_type == "BOOKMARK":
                    continue
                self.writes += 1
                if event_type == "DELETED":
                    self.slices.pop(obj["metadata"]["name"], None)
                else:
                    self._record(obj)

    def _record(self, obj: dict) -> None:
        self.slices[obj["metadata"]["name"]] = obj
        now = time.monotonic()
        for endpoint in obj.get("endpoints") or ():
            key = (endpoint["targetRef"]["name"], bool(endpoint["conditions"].get("ready")))
            self.ready_seen.setdefault(key, now)

    def endpoints(self) -> dict[str, dict]:
        return {ep["targetRef"]["name"]: ep for s in self.slices.values() for ep in s.get("endpoints") or ()}

    async def wait(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


async def run(args, server) -> None:
    async with api_client(server) as client:
        await ensure_node(client, "node-a", zone="zone-a")
        ns = await new_namespace(client, "bench")
        started = time.monotonic()
        pods = await create_pods(client, ns, args.pods, {"app": "web"}, prefix="old", concurrency=32)
        print(f"created {args.pods} Ready Pods in {time.monotonic() - started:.1f} s")
        await create_service(client, ns, "web", {"app": "web"})
        watch = SliceWatch(client, ns, "web")
        await watch.start()
        started = time.monotonic()
        await watch.wait(lambda: len(watch.endpoints()) == args.pods, 300, "all endpoints")
        print(f"slices for {args.pods} Pods: {len(watch.slices)} slices in {time.monotonic() - started:.2f} s")

        # (a) Ready -> slice latency
        latencies = []
        step = max(1, args.pods // max(1, args.flips))
        for i in range(args.flips):
            pod = pods[(i * step) % len(pods)]
            for ready in (False, True):
                watch.ready_seen.pop((pod["metadata"]["name"], ready), None)
                pod = await set_pod_status(client, pod, ready=ready)
                written = time.monotonic()
                key = (pod["metadata"]["name"], ready)
                await watch.wait(lambda: key in watch.ready_seen and watch.endpoints()[key[0]]["conditions"]["ready"] == ready, 60, "flip")
                latencies.append(watch.ready_seen[key] - written)
                await asyncio.sleep(args.flip_interval)
        ms = [x * 1000 for x in latencies]
        print(f"Pod Ready change -> slice updated ({len(ms)} changes, {args.pods} Pods): "
              f"p50 {percentile(ms, 0.5):.1f} ms, p99 {percentile(ms, 0.99):.1f} ms, max {max(ms):.1f} ms")

        # (b) rolling replacement
        writes_before = watch.writes
        started = time.monotonic()
        for start in range(0, args.pods, args.wave):
            count = min(args.wave, args.pods - start)
            await create_pods(client, ns, count, {"app": "web"}, prefix="new", start=args.pods + start, concurrency=32)
            semaphore = asyncio.Semaphore(32)

            async def delete(i: int) -> None:
                async with semaphore:
                    await client.resource(PODS).delete(f"old-{i}", ns, grace_period_seconds=0)

            await asyncio.gather(*(delete(i) for i in range(start, start + count)))
        await watch.wait(lambda: len(watch.endpoints()) == args.pods and all(n.startswith("new-") for n in watch.endpoints()), 600, "rollout")
        await asyncio.sleep(2)
        writes = watch.writes - writes_before
        sizes = sorted((len(s.get("endpoints") or ()) for s in watch.slices.values()), reverse=True)
        ideal = math.ceil(args.pods / args.max_endpoints_per_slice)
        print(f"rolling replacement of {args.pods} Pods in waves of {args.wave}: {writes} slice writes "
              f"({writes / args.pods:.3f} per Pod replaced) in {time.monotonic() - started:.1f} s; "
              f"{len(sizes)} slices after (perfect packing: {ideal}), smallest {sizes[-1]} endpoints")
        await watch.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--flips", type=int, default=200, help="Pods flipped not-ready and back, one at a time")
    parser.add_argument("--flip-interval", type=float, default=0.02)
    parser.add_argument("--wave", type=int, default=500, help="Pods replaced per rolling-update step")
    parser.add_argument("--max-endpoints-per-slice", type=int, default=100)
    parser.add_argument("--batch-period", default="0s", help="--endpointslice-updates-batch-period")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-endpointslices-"))
    server = start_apiserver(workdir / "apiserver")
    manager = start_controller_manager(server, workdir / "controller-manager.log", "--leader-elect=false", "--secure-port=0",
                                       "--controllers=endpointslice-controller",
                                       f"--max-endpoints-per-slice={args.max_endpoints_per_slice}",
                                       f"--endpointslice-updates-batch-period={args.batch_period}")
    try:
        asyncio.run(run(args, server))
    finally:
        manager.stop()
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
