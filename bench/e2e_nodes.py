#!/usr/bin/env python3
"""Pod Ready -> reachable through its ClusterIP from *another* node, on a cluster of ``--nodes``
machines made with the real commands (``bench/e2e.py --nodes N`` runs this; issue 19).

The machines are network namespaces on one LAN bridge (tests/support/lan.py; nothing leaves
them): the first runs ``kubesvc up --cluster-init --pod-network routes``, the others ``kubesvc
join`` with the command ``kubesvc token create --print-join-command`` printed
(tests/nodejoin/joined.py, the same cluster the join tests use). The measuring half runs inside
the first machine (``ip netns exec``), as a client on that node. Each of ``--runs`` rounds
creates ``--pods`` Pods, each behind a ClusterIP Service of its own, pinned round-robin to the
nodes (``spec.nodeName``), and for each Pod, from the moment the Pod watch shows it Ready,
connects to its ClusterIP every ``--poll-interval`` until the Pod itself answers (bench/e2e.py's
server, probe and connection attempts). A Pod on another node needs that node's agent to report
Ready and the *first* node's proxy to program the endpoint, then the Pod network (direct
routes) to carry the connection; a Pod on the first node is the one-node figure, measured in
the same run on the same cluster, so the two compare under the same load:

* **Pod Ready -> reachable via ClusterIP from another node**: Pods on m2..mN, reached from m1;
* **the same node (one-node figure)**: Pods on m1, reached from m1.

Both as p50/p99 over every round's Pods, with the ratio of the medians; then the peak memory
(VmHWM) of every kubesvc process of the cluster. The cluster is stopped with Ctrl-C (SIGINT)
and its namespaces removed at the end.

    python3 bench/e2e.py --nodes 3 --pods 30 --runs 3
    python3 bench/e2e_nodes.py --nodes 3 --pods 30 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench"), str(ROOT)]

from e2e import NAMESPACE, attempt, percentile, pod_body, service_body  # noqa: E402 - bench/e2e.py, after the path


def pinned_pod(run: int, i: int, node: str) -> dict:
    pod = pod_body(run, i)
    pod["spec"]["nodeName"] = node
    return pod


async def one_round(client, run: int, args, nodes: list[str]) -> dict:
    """``--pods`` Pods pinned round-robin to ``nodes``; each Pod's node and Ready -> reached."""
    from kubesvc.client.rest import PODS, SERVICES

    services, pods = client.resource(SERVICES), client.resource(PODS)
    names = [f"e2e-{run}-{i}" for i in range(args.pods)]
    node_of = {name: nodes[i % len(nodes)] for i, name in enumerate(names)}
    vips: dict[str, str] = {}
    ready: dict[str, float] = {}
    reached: dict[str, float] = {}
    polls: list[asyncio.Task] = []
    done = asyncio.Event()

    async def poll(name: str) -> None:
        while name not in reached:
            started = time.monotonic()
            body, _ = await attempt(vips[name], args.attempt_timeout)
            if (body or "").split()[:1] == [name]:
                reached[name] = started
            else:
                await asyncio.sleep(max(0.0, started + args.poll_interval - time.monotonic()))
        if len(reached) == len(names):
            done.set()

    async def watch() -> None:
        version = (await pods.list(NAMESPACE))["metadata"]["resourceVersion"]
        while True:
            async for kind, pod in pods.watch(NAMESPACE, resource_version=version, timeout_seconds=3600):
                version = pod.get("metadata", {}).get("resourceVersion", version)
                name = pod["metadata"]["name"]
                conditions = {c.get("type"): c.get("status") for c in (pod.get("status") or {}).get("conditions") or []}
                if kind != "DELETED" and name in node_of and name not in ready and conditions.get("Ready") == "True":
                    ready[name] = time.monotonic()
                    polls.append(asyncio.create_task(poll(name)))

    for i, name in enumerate(names):
        vips[name] = (await services.create(service_body(run, i)))["spec"]["clusterIP"]
    watching = asyncio.create_task(watch())
    await asyncio.sleep(0.5)  # the watch is open
    await asyncio.gather(*(pods.create(pinned_pod(run, i, node_of[name])) for i, name in enumerate(names)))
    try:
        await asyncio.wait_for(done.wait(), args.timeout)
    except TimeoutError:
        pass
    for task in [watching, *polls]:
        task.cancel()
    await asyncio.gather(watching, *polls, return_exceptions=True)
    for name in names:
        with contextlib.suppress(Exception):
            await pods.delete(name, NAMESPACE, grace_period_seconds=0)
        with contextlib.suppress(Exception):
            await services.delete(name, NAMESPACE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(p["metadata"]["name"] in node_of for p in (await pods.list(NAMESPACE))["items"]):
        await asyncio.sleep(0.5)
    return {"pods": len(names), "node": node_of, "latency": {n: reached[n] - ready[n] for n in reached}}


async def measure(args) -> list[dict]:
    from kubesvc.client.kubeconfig import load_kubeconfig
    from kubesvc.client.rest import NODES, RestClient

    async with RestClient(load_kubeconfig(args.kubeconfig), field_manager="bench-e2e-nodes", timeout=120) as client:
        nodes = sorted(n["metadata"]["name"] for n in (await client.resource(NODES).list())["items"])
        rounds = []
        for run in range(args.runs):
            rounds.append(await one_round(client, run, args, nodes))
            print(f"  round {run}: {len(rounds[-1]['latency'])}/{args.pods} Pods reachable", flush=True)
    return rounds


def kubesvc_peak_memory(pids: list[int]) -> dict[str, float]:
    """Peak resident MiB (VmHWM) of the kubesvc processes among ``pids``, by component (the largest)."""
    peaks: dict[str, float] = {}
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if b"kubesvc" not in argv or b"-m" not in argv:
            continue
        component = argv[argv.index(b"kubesvc") + 1].decode() if argv.index(b"kubesvc") + 1 < len(argv) else "?"
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peaks[component] = max(peaks.get(component, 0.0), int(line.split()[1]) / 1024)
    return peaks


def report(rounds: list[dict], first: str) -> None:
    remote = [v for r in rounds for n, v in r["latency"].items() if r["node"][n] != first]
    local = [v for r in rounds for n, v in r["latency"].items() if r["node"][n] == first]
    total = sum(r["pods"] for r in rounds)
    print(f"--- {len(rounds)} round(s) of {rounds[0]['pods']} Pods; {len(remote) + len(local)}/{total} reachable")
    for label, values in (("Pod Ready -> reachable via ClusterIP from another node", remote),
                          ("Pod Ready -> reachable via ClusterIP on the same node (one-node figure)", local)):
        if values:
            print(f"{label}: p50 {percentile(values, 0.5) * 1000:.0f} ms, p99 {percentile(values, 0.99) * 1000:.0f} ms "
                  f"over {len(values)} Pods")
    if remote and local:
        print(f"another node / same node, p50: {percentile(remote, 0.5) / max(percentile(local, 0.5), 1e-9):.2f}x")


def outer(args) -> int:
    from tests.nodejoin.joined import joined_cluster

    with tempfile.TemporaryDirectory(prefix="bench-e2e-nodes-") as tmp:
        began = time.monotonic()
        with joined_cluster(Path(tmp), "routes", segments=1, machines=args.nodes) as cluster:
            print(f"{args.nodes} machines joined (--pod-network routes) in {time.monotonic() - began:.1f} s; "
                  f"{args.pods} Pods a round, pinned round-robin to m1..m{args.nodes}, reached from m1", flush=True)
            argv = cluster.server.ns.argv(sys.executable, str(Path(__file__).resolve()), "--inside", "--kubeconfig", cluster.server.kubeconfig,
                                          "--nodes", args.nodes, "--pods", args.pods, "--runs", args.runs, "--poll-interval", args.poll_interval,
                                          "--attempt-timeout", args.attempt_timeout, "--timeout", args.timeout)
            child = subprocess.run(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)
            result = None
            for line in child.stdout.splitlines():
                if line.startswith("RESULT "):
                    result = json.loads(line[len("RESULT "):])
                else:
                    print(line, flush=True)
            peaks = kubesvc_peak_memory([pid for ns in cluster.lan.namespaces for pid in ns.pids()])
            if child.returncode != 0 or result is None:
                print(f"the measuring half failed ({child.returncode})", file=sys.stderr)
                return 1
            report(result, "m1")
            print("peak memory (VmHWM, largest process per component, MiB): "
                  + ", ".join(f"{name} {mib:.0f}" for name, mib in sorted(peaks.items())), flush=True)
            return 0 if all(len(r["latency"]) == r["pods"] for r in result) else 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=3, help="machines: one runs up, the others join")
    parser.add_argument("--pods", type=int, default=30)
    parser.add_argument("--runs", type=int, default=3, help="rounds of --pods Pods, each deleted before the next")
    parser.add_argument("--poll-interval", type=float, default=0.01, help="seconds between connections to one ClusterIP")
    parser.add_argument("--attempt-timeout", type=float, default=0.2, help="seconds one connection may take")
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for every Pod of a round to be reachable")


def run(args) -> int:
    """The outer half with ``args`` (also what ``bench/e2e.py --nodes N`` calls)."""
    if args.nodes < 2:
        raise SystemExit("--nodes must be at least 2 (bench/e2e.py measures one node)")
    if os.geteuid() != 0:
        raise SystemExit("bench/e2e_nodes.py needs root (network namespaces, nftables)")
    return outer(args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        print("RESULT " + json.dumps(asyncio.run(measure(args))), flush=True)
        return
    sys.exit(run(args))


if __name__ == "__main__":
    main()
