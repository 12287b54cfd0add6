#!/usr/bin/env python3
"""Pods created -> bound, inside ``kubesvc up`` (issue 17: "100 Pods created -> all bound <= 1 s").

In a fresh network namespace (``ks-bench-sched-<hex>``) it starts ``kubesvc up`` as a user does
(``nsenter --net``), then re-runs its measuring half inside that namespace: per round, in a new
Kubernetes namespace, it watches Pods from the current resourceVersion and creates ``--pods``
Pods at once (``--concurrency`` requests in flight; each runs ``sleep``, so the agent's work
per Pod is a namespace and a process). Per round it reports the wall time from the first create
sent to the last Pod seen bound (``spec.nodeName`` in the watch), and per Pod the time from its
create's answer to its binding. Printed: the median and worst over ``--rounds`` of that wall
time, p50/p99 over every Pod of every round, the binding rate, and the peak RSS of ``up`` and the
processes it started. At the end, SIGINT (Ctrl-C) stops ``up``; the namespace is checked for
leftovers and deleted.

``--peer-src DIR`` runs the same rounds, back to back in the same invocation, against another
checkout's ``src`` (``git archive <commit> src | tar -x -C DIR``): the before/after comparison
under the same machine load.

    python3 bench/scheduler.py --pods 100 --rounds 3
    python3 bench/scheduler.py --pods 100 --rounds 3 --peer-src /tmp/base
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from upns import UpFailed, UpInNamespace, child_env, process_tree  # noqa: E402 - bench/upns.py, after the path


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


# ---------------------------------------------------------------------------------------------
# the measuring half (inside the namespace)


def pod_body(namespace: str, i: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"sched-{i}", "namespace": namespace},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "sleep", "image": "busybox", "command": ["sleep", "3600"]}]}}


async def one_round(client, namespace: str, n: int, concurrency: int, timeout: float) -> dict:
    from kubesvc.client.rest import NAMESPACES, PODS

    await client.resource(NAMESPACES).create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    pods = client.resource(PODS)
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    everyone_bound = asyncio.Event()
    version = (await pods.list(namespace))["metadata"]["resourceVersion"]

    async def watch() -> None:
        nonlocal version
        while True:
            async for kind, obj in pods.watch(namespace, resource_version=version, timeout_seconds=3600):
                version = obj.get("metadata", {}).get("resourceVersion", version)
                name = obj.get("metadata", {}).get("name")
                if kind in ("ADDED", "MODIFIED") and (obj.get("spec") or {}).get("nodeName") and name not in bound:
                    bound[name] = time.monotonic()
                    if len(bound) == n:
                        everyone_bound.set()

    watcher = asyncio.create_task(watch())
    semaphore = asyncio.Semaphore(concurrency)

    async def create(i: int) -> None:
        async with semaphore:
            await pods.create(pod_body(namespace, i))
            created[f"sched-{i}"] = time.monotonic()

    first = time.monotonic()
    await asyncio.gather(*(create(i) for i in range(n)))
    all_created = time.monotonic() - first
    try:
        await asyncio.wait_for(everyone_bound.wait(), timeout)
    except TimeoutError:
        pass
    watcher.cancel()
    await asyncio.gather(watcher, return_exceptions=True)
    return {"wall": (max(bound.values()) - first) if len(bound) == n else None, "bound": len(bound), "created": all_created,
            "latencies": [bound[name] - created[name] for name in bound if name in created]}


async def measure(args) -> list[dict]:
    from kubesvc.client.kubeconfig import load_kubeconfig
    from kubesvc.client.rest import RestClient

    async with RestClient(load_kubeconfig(args.kubeconfig), field_manager="bench-scheduler", timeout=120) as client:
        return [await one_round(client, f"bench-sched-{r}-{secrets.token_hex(2)}", args.pods, args.concurrency, args.timeout)
                for r in range(args.rounds)]


def inside(args) -> None:
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    print("RESULT " + json.dumps(asyncio.run(measure(args))), flush=True)


# ---------------------------------------------------------------------------------------------
# the outer half (the host): namespace, kubesvc up, Ctrl-C, cleanup


def peak_rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        name = re.search(r"^Name:\s*(\S+)", status, re.M)
        if name and name.group(1).startswith("python"):  # up and its components, not the Pods' sleeps
            match = re.search(r"^VmHWM:\s*(\d+) kB", status, re.M)
            total += int(match.group(1)) if match else 0
    return total / 1024


def run_once(label: str, src: Path, args) -> list[dict] | None:
    try:
        with UpInNamespace("ks-bench-sched", src=src, label=label) as up:
            print(f"{label}: kubesvc up ({src}) in {up.netns}, up in {up.started_in:.2f} s", flush=True)
            time.sleep(args.settle)  # the Node registered and every informer synced
            argv = up.nsenter(sys.executable, str(Path(__file__).resolve()), "--inside", "--kubeconfig", up.kubeconfig, "--pods", args.pods,
                              "--rounds", args.rounds, "--concurrency", args.concurrency, "--timeout", args.timeout)
            child = subprocess.run(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=child_env(ROOT / "src"))
            assert up.process is not None
            rss = peak_rss_mib(process_tree(up.process.pid))
            for out in child.stdout.splitlines():
                if out.startswith("RESULT "):
                    rounds = json.loads(out[len("RESULT "):])
                    for r in rounds:
                        r["rss"] = rss
                    return rounds
            print(f"{label}: the measuring half failed ({child.returncode})", file=sys.stderr)
            return None
    except UpFailed as err:
        print(err, file=sys.stderr)
        return None


def report(label: str, rounds: list[dict], n: int) -> float | None:
    walls = [r["wall"] for r in rounds if r["wall"] is not None]
    latencies = [v for r in rounds for v in r["latencies"]]
    incomplete = [r["bound"] for r in rounds if r["wall"] is None]
    if incomplete:
        print(f"{label}: {len(incomplete)} round(s) did not bind every Pod in time (bound: {incomplete})")
    if not walls:
        return None
    median = statistics.median(walls)
    print(f"{label}: {n} Pods created -> all bound: median {median:.2f} s, worst {max(walls):.2f} s over {len(walls)} rounds "
          f"({n / median:.0f} Pods/s); per Pod created -> bound p50 {percentile(latencies, 0.5) * 1000:.0f} ms, "
          f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms; creates alone: median {statistics.median(r['created'] for r in rounds):.2f} s; "
          f"peak RSS of up and its components {rounds[0]['rss']:.0f} MiB")
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16, help="create requests in flight")
    parser.add_argument("--timeout", type=float, default=120, help="seconds to wait for every Pod of a round to be bound")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds between up's announcement and the first round")
    parser.add_argument("--peer-src", type=Path, default=None, help="another checkout's src directory, measured in the same run")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(args)
        return
    if os.geteuid() != 0:
        raise SystemExit("bench/scheduler.py needs root (network namespaces, nftables)")
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} on {os.cpu_count()} cores", flush=True)
    results = {}
    for label, src in [("this tree", ROOT / "src"), *([("peer", args.peer_src.resolve())] if args.peer_src else [])]:
        rounds = run_once(label, src, args)
        if rounds is None:
            sys.exit(1)
        results[label] = report(label, rounds, args.pods)
    if args.peer_src and all(results.values()):
        print(f"all bound: this tree / peer = {results['this tree'] / results['peer']:.2f}")


if __name__ == "__main__":
    main()
