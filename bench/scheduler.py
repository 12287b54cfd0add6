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

``--backlog N`` measures the scheduler's own path without ``up`` and without an agent: a private
``kubesvc apiserver`` on 127.0.0.1 and a ``kubesvc controller-manager`` (every controller, as
``up`` runs it), one hand-made Ready Node (no agent: nobody starts the Pods, so the figure is
bindings alone). Per round the Node is cordoned, ``N`` Pods are created and wait unschedulable,
then the Node is uncordoned and the scheduler binds the backlog: printed are binds/s (first ->
last bind in the Pod watch), uncordon -> all bound, the CPU per bind of the apiserver and the
controller-manager over that window (from /proc: what the machine's load does not inflate),
the TLS connections the controller-manager opened meanwhile, and the requests the apiserver
served (its /metrics). At the end: the median and p99 over ``--rounds`` of each figure, each
Pod's uncordon -> bound (p50, p99 over every Pod of every round), and the peak RSS (VmHWM)
of the apiserver and the controller-manager.

    python3 bench/scheduler.py --backlog 300 --rounds 5
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

import aiohttp

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


# ---------------------------------------------------------------------------------------------
# --backlog: apiserver + controller-manager, no agent


def cpu_seconds_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def established_from(pid: int, port: int) -> int:
    """TCP connections of ``pid`` to ``port`` (the controller-manager's to the apiserver)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[9] in inodes and int(fields[2].split(":")[1], 16) == port and fields[3] == "01":
            count += 1
    return count


API_REQUESTS = re.compile(r'^apiserver_request_total\{([^}]*)\} (\S+)$', re.M)


def request_counts(text: str) -> dict[str, float]:
    counts: dict[str, float] = {}
    for labels, value in API_REQUESTS.findall(text):
        label = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if label.get("verb") in ("WATCH", "LIST", "GET") and label.get("resource") in ("leases",):
            continue
        kind = f"{label.get('verb')} {label.get('resource', '')}{'/' + label['subresource'] if label.get('subresource') else ''}"
        counts[kind] = counts.get(kind, 0.0) + float(value)
    return counts


NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bench-node", "labels": {"kubernetes.io/hostname": "bench-node"}},
        "spec": {}}


async def backlog_round(session, base: str, namespace: str, n: int, pids: dict[str, int], port: int, timeout: float,
                        profile: str | None = None) -> dict:
    pods_url = f"{base}/api/v1/namespaces/{namespace}/pods"
    node_url = f"{base}/api/v1/nodes/bench-node"
    merge = {"Content-Type": "application/strategic-merge-patch+json"}
    async with session.post(f"{base}/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}) as r:
        assert r.status == 201, await r.text()
    async with session.patch(node_url, json={"spec": {"unschedulable": True}}, headers=merge) as r:
        assert r.status == 200, await r.text()
    bound: dict[str, float] = {}
    unschedulable: set[str] = set()
    all_bound, all_waiting = asyncio.Event(), asyncio.Event()
    async with session.get(pods_url) as r:
        version = (await r.json())["metadata"]["resourceVersion"]

    async def watch() -> None:
        async with session.get(pods_url, params={"watch": "1", "resourceVersion": version, "timeoutSeconds": "3600"},
                               timeout=aiohttp.ClientTimeout(total=None)) as r:
            async for line in r.content:
                pod = json.loads(line)["object"]
                name = pod["metadata"]["name"]
                if (pod.get("spec") or {}).get("nodeName"):
                    bound.setdefault(name, time.monotonic())
                    if len(bound) == n:
                        all_bound.set()
                elif any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in (pod.get("status") or {}).get("conditions") or []):
                    unschedulable.add(name)
                    if len(unschedulable) == n:
                        all_waiting.set()

    scheduled: set[str] = set()
    all_scheduled = asyncio.Event()
    events_url = f"{base}/api/v1/namespaces/{namespace}/events"

    async def watch_events() -> None:
        async with session.get(events_url, params={"watch": "1", "timeoutSeconds": "3600"}, timeout=aiohttp.ClientTimeout(total=None)) as r:
            async for line in r.content:
                event = json.loads(line)["object"]
                if event.get("reason") == "Scheduled":
                    scheduled.add((event.get("involvedObject") or {}).get("name"))
                    if len(scheduled) == n:
                        all_scheduled.set()

    watcher = asyncio.create_task(watch())
    event_watcher = asyncio.create_task(watch_events())
    semaphore = asyncio.Semaphore(16)

    async def create(i: int) -> None:
        async with semaphore, session.post(pods_url, json=pod_body(namespace, i)) as r:
            assert r.status == 201, await r.text()

    await asyncio.gather(*(create(i) for i in range(n)))
    await asyncio.wait_for(all_waiting.wait(), timeout)
    await asyncio.sleep(1.0)  # the scheduler's PodScheduled patches and Events settle
    async with session.get(f"{base}/metrics") as r:
        requests_before = request_counts(await r.text())
    connections = established_from(pids["controller-manager"], port)
    profilers = [subprocess.Popen(["py-spy", "record", "-p", str(pid), "-r", "250", "-f", "raw", "-o", f"{profile}/{namespace}-{name}.txt",
                                   "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for name, pid in pids.items()] if profile else []
    if profilers:
        os.makedirs(profile, exist_ok=True)
        await asyncio.sleep(1.0)  # attached
    cpu_before = {name: cpu_seconds_of(pid) for name, pid in pids.items()}
    released = time.monotonic()
    async with session.patch(node_url, json={"spec": {"unschedulable": False}}, headers=merge) as r:
        assert r.status == 200, await r.text()
    await asyncio.wait_for(all_bound.wait(), timeout)
    cpu = {name: (cpu_seconds_of(pid) - cpu_before[name]) / n for name, pid in pids.items()}
    new_connections = established_from(pids["controller-manager"], port) - connections

    try:
        await asyncio.wait_for(all_scheduled.wait(), timeout)  # the Scheduled Events, sent after the bindings
    except TimeoutError:
        pass
    cpu_events = {name: (cpu_seconds_of(pid) - cpu_before[name]) / n for name, pid in pids.items()}
    for profiler in profilers:
        profiler.send_signal(2)
        profiler.wait()
    async with session.get(f"{base}/metrics") as r:
        requests = {kind: count - requests_before.get(kind, 0.0) for kind, count in request_counts(await r.text()).items()}
    watcher.cancel()
    event_watcher.cancel()
    await asyncio.gather(watcher, event_watcher, return_exceptions=True)
    times = sorted(bound.values())
    async with session.delete(f"{base}/api/v1/namespaces/{namespace}") as r:
        await r.read()
    return {"binds_per_second": (n - 1) / (times[-1] - times[0]) if times[-1] > times[0] else None,
            "all_bound": times[-1] - released, "to_bound": [t - released for t in times], "cpu_ms": {name: seconds * 1000 for name, seconds in cpu.items()},
            "cpu_events_ms": {name: seconds * 1000 for name, seconds in cpu_events.items()},
            "new_connections": new_connections, "requests": {k: v for k, v in requests.items() if v > 0}}


async def run_backlog(args) -> None:
    import tempfile

    sys.path.insert(0, str(ROOT))
    from tests.support.apiserver import start_apiserver

    os.environ.update(child_env(args.src.resolve()))  # the apiserver too runs --src's kubesvc

    with tempfile.TemporaryDirectory(prefix="kubesvc-bench-sched-") as tmp:
        server = start_apiserver(Path(tmp))
        manager = None
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=server.tls_context(), limit=0)) as session:
                node = json.loads(json.dumps(NODE))
                async with session.post(f"{server.url}/api/v1/nodes", json=node) as r:
                    assert r.status == 201, await r.text()
                status = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                                     "allocatable": {"pods": "10000", "cpu": "64", "memory": "256Gi"},
                                     "capacity": {"pods": "10000", "cpu": "64", "memory": "256Gi"}}}
                async with session.patch(f"{server.url}/api/v1/nodes/bench-node/status", json=status,
                                         headers={"Content-Type": "application/merge-patch+json"}) as r:
                    assert r.status == 200, await r.text()
                data = Path(tmp)
                from kubesvc.serving import pki

                manager = subprocess.Popen([sys.executable, "-m", "kubesvc", "controller-manager",
                                            "--kubeconfig", str(pki.kubeconfig_path(data, "controller-manager")),
                                            "--scheduler-kubeconfig", str(pki.kubeconfig_path(data, "scheduler")),
                                            "--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=true"],
                                           stdout=subprocess.DEVNULL, stderr=open(data / "controller-manager.log", "ab"),
                                           env=child_env(args.src))
                await asyncio.sleep(args.settle + 3)  # informers synced
                pids = {"apiserver": server.process.pid, "controller-manager": manager.pid}
                port = int(server.url.rsplit(":", 1)[1])
                print(f"backlog of {args.backlog} Pods, apiserver + controller-manager ({args.src}), no agent; "
                      f"load {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
                rounds = []
                peak_mib: dict[str, float] = {}
                for r in range(args.rounds):
                    result = await backlog_round(session, server.url, f"bench-backlog-{r}", args.backlog, pids, port, args.timeout,
                                                 args.profile)
                    rounds.append(result)
                    peak_mib = {name: peak_rss_mib([pid]) for name, pid in pids.items()}  # VmHWM: the peak so far
                    print(f"  round {r}: {result['binds_per_second'] or 0:.0f} binds/s, uncordon -> all bound {result['all_bound']:.2f} s; "
                          f"CPU per bind: {', '.join(f'{k} {v:.2f} ms' for k, v in result['cpu_ms'].items())} "
                          f"(with its Scheduled Event, written after: {', '.join(f'{k} {v:.2f} ms' for k, v in result['cpu_events_ms'].items())}); "
                          f"controller-manager opened {result['new_connections']} connections; requests: "
                          f"{', '.join(f'{k} {v:.0f}' for k, v in sorted(result['requests'].items(), key=lambda kv: -kv[1]))}", flush=True)
        finally:
            if manager is not None:
                manager.send_signal(2)
                try:
                    manager.wait(15)
                except subprocess.TimeoutExpired:
                    manager.kill()
            server.stop()
    print(backlog_summary(args.backlog, rounds, peak_mib))


def backlog_summary(n: int, rounds: list[dict], peak_mib: dict[str, float]) -> str:
    """The --backlog figures over every round: median and p99 over the rounds of each round's
    figure, each Pod's uncordon -> bound pooled over every round, and the processes' peak RSS."""
    def over_rounds(label: str, pick, fmt: str, unit: str) -> str:
        values = [pick(r) for r in rounds]
        return f"{label} median {format(statistics.median(values), fmt)}{unit}, p99 {format(percentile(values, 0.99), fmt)}{unit}"

    to_bound = [t for r in rounds for t in r["to_bound"]]
    return "\n".join([
        f"backlog {n} (over {len(rounds)} rounds; p99 over rounds, or over every Pod of every round where it says so):",
        "  " + over_rounds("binds/s", lambda r: r["binds_per_second"] or 0, ".0f", "")
        + "; " + over_rounds("uncordon -> all bound", lambda r: r["all_bound"], ".2f", " s")
        + f"; uncordon -> a Pod bound over all {len(to_bound)} Pods: p50 {percentile(to_bound, 0.5):.2f} s, p99 {percentile(to_bound, 0.99):.2f} s",
        *(f"  CPU per bind, {name}: " + over_rounds("binds alone", lambda r, name=name: r["cpu_ms"][name], ".2f", " ms")
          + "; " + over_rounds("with the Scheduled Events", lambda r, name=name: r["cpu_events_ms"][name], ".2f", " ms")
          for name in ("apiserver", "controller-manager")),
        "  peak RSS (VmHWM): " + ", ".join(f"{name} {mib:.0f} MiB" for name, mib in peak_mib.items()),
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16, help="create requests in flight")
    parser.add_argument("--timeout", type=float, default=120, help="seconds to wait for every Pod of a round to be bound")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds between up's announcement and the first round")
    parser.add_argument("--peer-src", type=Path, default=None, help="another checkout's src directory, measured in the same run")
    parser.add_argument("--backlog", type=int, default=0, metavar="N",
                        help="instead: N Pods bound by the controller-manager's scheduler against a private apiserver, no up, no agent")
    parser.add_argument("--profile", metavar="DIR", help="with --backlog: py-spy record (raw) of both processes over each round's binds")
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="with --backlog: the src directory whose components run")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(args)
        return
    if args.backlog:
        asyncio.run(run_backlog(args))
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
