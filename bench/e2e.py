#!/usr/bin/env python3
"""The whole chain: Pod Ready -> reachable through its ClusterIP ("network programming latency").

In a fresh network namespace (``ks-bench-e2e-<hex>``) it starts ``kubesvc up`` as a user does
(``nsenter --net``, so the Pod namespaces the agent makes are ordinary host namespaces), then
re-runs its measuring half inside that namespace (``nsenter --net ... bench/e2e.py --inside``):

1. creates ``--pods`` Services, each selecting exactly one Pod-to-be (port 80 -> 8080);
2. watches Pods from the current resourceVersion and creates the ``--pods`` Pods at once
   (``--concurrency`` requests in flight): a small stdlib TCP server answering ``GET /`` with
   the Pod's name, with a ``tcpSocket`` readiness probe (period 1 s), so Ready means listening;
3. for each Pod, from the moment its IP shows in the watch, connects to its Service's
   ClusterIP every ``--poll-interval`` seconds (all Pods concurrently) until the answer is that
   Pod's name.

Per Pod, the latency is from the watch event that first shows its ``Ready`` condition True to
the first successful connection through the ClusterIP (status write -> EndpointSlice
controller -> slice write -> proxy watch -> rate-limited sync -> nftables): p50/p90/p99/max,
the wall time from the first create to the last Pod reachable, and for context Pod create ->
Ready. At the end, SIGINT (Ctrl-C) stops ``kubesvc up``; the namespace is checked for
leftovers and deleted.

    python3 bench/e2e.py --pods 100
    python3 bench/e2e.py --pods 20 --poll-interval 0.005
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import secrets
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

UP_LINE = re.compile(r"kubesvc is up at https://127\.0\.0\.1:(\d+); kubeconfig: (\S+)")
NAMESPACE = "default"
LABEL = "bench-e2e"
SERVER = """\
import os, socket
name = os.environ["POD_NAME"].encode() + b"\\n"
reply = b"HTTP/1.0 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n%s" % (len(name), name)
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("", 8080))
sock.listen(128)
while True:
    conn, _ = sock.accept()
    conn.settimeout(2)
    try:
        conn.recv(1024)
        conn.sendall(reply)
    except OSError:
        pass
    conn.close()
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def figures(values: list[float], unit: str = "ms") -> str:
    scale = 1000.0 if unit == "ms" else 1.0
    v = [x * scale for x in values]
    return (f"min {min(v):8.1f} {unit}   p50 {percentile(v, 0.5):8.1f} {unit}   p90 {percentile(v, 0.9):8.1f} {unit}   p99 {percentile(v, 0.99):8.1f} {unit}   "
            f"max {max(v):8.1f} {unit}")


# ---------------------------------------------------------------------------------------------
# the measuring half (inside the namespace)


def service_body(i: int) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"e2e-{i}", "namespace": NAMESPACE},
            "spec": {"selector": {LABEL: f"p{i}"}, "ports": [{"protocol": "TCP", "port": 80, "targetPort": 8080}]}}


def pod_body(i: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"e2e-{i}", "namespace": NAMESPACE, "labels": {LABEL: f"p{i}"}},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "server", "image": "registry.k8s.io/e2e-test-images/agnhost:2.52",
                                     "command": ["python3", "-S", "-u", "-c", SERVER],
                                     "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                                     "ports": [{"containerPort": 8080}],
                                     "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]}}


async def attempt(host: str, timeout: float) -> str | None:
    """One connection to ``host``:80 and ``GET /``: the first line of the body, or None."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        async with asyncio.timeout(timeout):
            await loop.sock_connect(sock, (host, 80))
            await loop.sock_sendall(sock, b"GET / HTTP/1.0\r\n\r\n")
            data = b""
            while True:
                chunk = await loop.sock_recv(sock, 4096)
                if not chunk:
                    break
                data += chunk
        _, _, body = data.decode(errors="replace").partition("\r\n\r\n")
        return body.strip() or None
    except (OSError, TimeoutError):
        return None
    finally:
        sock.close()


async def measure(args) -> dict:
    from kubesvc.client.kubeconfig import load_kubeconfig
    from kubesvc.client.rest import PODS, SERVICES, RestClient

    n = args.pods
    created: dict[str, float] = {}
    scheduled: dict[str, float] = {}
    has_ip: dict[str, float] = {}
    ready: dict[str, float] = {}
    reached: dict[str, float] = {}
    attempts = {"count": 0}
    vips: dict[str, str] = {}
    pollers: list[asyncio.Task] = []
    all_reached = asyncio.Event()

    async def poll(name: str) -> None:
        vip = vips[name]
        next_at = time.monotonic()
        while True:
            started = time.monotonic()
            attempts["count"] += 1
            answer = await attempt(vip, args.attempt_timeout)
            if answer == name:
                reached[name] = started
                if len(reached) == n:
                    all_reached.set()
                return
            next_at += args.poll_interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    def observe(pod: dict) -> None:
        name = pod["metadata"]["name"]
        if name not in vips:
            return
        status = pod.get("status") or {}
        now = time.monotonic()
        if (pod.get("spec") or {}).get("nodeName") and name not in scheduled:
            scheduled[name] = now
        if status.get("podIP") and name not in has_ip:
            has_ip[name] = now
            pollers.append(asyncio.create_task(poll(name)))
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        if conditions.get("Ready") == "True" and name not in ready:
            ready[name] = now
            if name not in has_ip:
                has_ip[name] = now
                pollers.append(asyncio.create_task(poll(name)))

    async with RestClient(load_kubeconfig(args.kubeconfig), field_manager="bench-e2e", timeout=120) as client:
        services, pods = client.resource(SERVICES), client.resource(PODS)
        semaphore = asyncio.Semaphore(args.concurrency)

        async def create_service(i: int) -> None:
            async with semaphore:
                obj = await services.create(service_body(i))
                vips[f"e2e-{i}"] = obj["spec"]["clusterIP"]

        began = time.monotonic()
        await asyncio.gather(*(create_service(i) for i in range(n)))
        print(f"  {n} Services created in {time.monotonic() - began:.2f} s", flush=True)

        version = (await pods.list(NAMESPACE))["metadata"]["resourceVersion"]

        async def watch() -> None:
            nonlocal version
            while True:
                async for kind, obj in pods.watch(NAMESPACE, resource_version=version, timeout_seconds=3600):
                    version = obj.get("metadata", {}).get("resourceVersion", version)
                    if kind in ("ADDED", "MODIFIED"):
                        observe(obj)

        watcher = asyncio.create_task(watch())

        async def create_pod(i: int) -> None:
            async with semaphore:
                await pods.create(pod_body(i))
                created[f"e2e-{i}"] = time.monotonic()

        first_create = time.monotonic()
        await asyncio.gather(*(create_pod(i) for i in range(n)))
        print(f"  {n} Pods created in {time.monotonic() - first_create:.2f} s", flush=True)
        try:
            await asyncio.wait_for(all_reached.wait(), args.timeout)
        except TimeoutError:
            print(f"  timed out after {args.timeout} s: {len(ready)} Ready, {len(reached)} reachable", flush=True)
        wall = max(reached.values(), default=time.monotonic()) - first_create
        for task in [watcher, *pollers]:
            task.cancel()
        await asyncio.gather(watcher, *pollers, return_exceptions=True)

    latencies = {name: reached[name] - ready[name] for name in reached if name in ready}
    return {"pods": n, "wall": wall, "attempts": attempts["count"],
            "ready": [ready[name] - created[name] for name in ready if name in created],
            "scheduled": [scheduled[name] - created[name] for name in scheduled if name in created],
            "ip": [has_ip[name] - created[name] for name in has_ip if name in created],
            "latency": list(latencies.values()), "reached": len(reached), "ready_count": len(ready),
            "negative": sum(1 for v in latencies.values() if v < 0),
            "slowest": sorted(latencies.items(), key=lambda kv: -kv[1])[:3]}


def inside(args) -> None:
    try:
        import uvloop  # noqa: F401

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    result = asyncio.run(measure(args))
    print("RESULT " + json.dumps(result), flush=True)


# ---------------------------------------------------------------------------------------------
# the outer half (the host): namespace, kubesvc up, Ctrl-C, cleanup


def nsenter(netns: str, *argv: str) -> list[str]:
    return ["nsenter", f"--net=/run/netns/{netns}", *map(str, argv)]


def leftovers(netns: str) -> list[str]:
    found = []
    links = subprocess.run(["ip", "-n", netns, "-o", "link", "show"], capture_output=True, text=True).stdout.splitlines()
    if [line for line in links if ": lo:" not in line]:
        found.append(f"links: {[line.split(':')[1].strip() for line in links]}")
    routes = subprocess.run(["ip", "-n", netns, "route"], capture_output=True, text=True).stdout.strip()
    if routes:
        found.append(f"routes: {routes!r}")
    tables = subprocess.run(nsenter(netns, "nft", "list", "tables"), capture_output=True, text=True).stdout.strip()
    if tables:
        found.append(f"nft tables: {tables!r}")
    return found


def outer(args) -> int:
    netns = f"ks-bench-e2e-{secrets.token_hex(3)}"
    workdir = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    subprocess.run(["ip", "netns", "add", netns], check=True)
    up: subprocess.Popen | None = None
    log_path = workdir / "up.log"
    status = 1
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
        started = time.monotonic()
        with open(log_path, "ab") as log:
            up = subprocess.Popen(nsenter(netns, sys.executable, "-m", "kubesvc", "up", "--data-dir", workdir / "data", "--secure-port", "0"),
                                  stdout=subprocess.PIPE, stderr=log, cwd=ROOT)
        line = b""
        with selectors.DefaultSelector() as sel:
            sel.register(up.stdout, selectors.EVENT_READ)
            while time.monotonic() - started < 60 and up.poll() is None:
                if sel.select(timeout=0.2):
                    line = up.stdout.readline()
                    break
        match = UP_LINE.search(line.decode(errors="replace"))
        if not match:
            print(f"kubesvc up did not start: {line!r}\n{log_path.read_text()[-3000:]}", file=sys.stderr)
            return 1
        print(f"kubesvc up in {netns}: up in {time.monotonic() - started:.2f} s", flush=True)
        print(f"{args.pods} Pods, each behind a ClusterIP Service of its own; polling each ClusterIP every "
              f"{args.poll_interval * 1000:.0f} ms once its Pod has an IP", flush=True)
        argv = nsenter(netns, sys.executable, str(Path(__file__).resolve()), "--inside", "--kubeconfig", match.group(2),
                       "--pods", args.pods, "--poll-interval", args.poll_interval, "--concurrency", args.concurrency,
                       "--timeout", args.timeout, "--attempt-timeout", args.attempt_timeout)
        child = subprocess.run(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        result = None
        for out in child.stdout.splitlines():
            if out.startswith("RESULT "):
                result = json.loads(out[len("RESULT "):])
            else:
                print(out, flush=True)
        if child.returncode != 0 or result is None:
            print(f"the measuring half failed ({child.returncode})", file=sys.stderr)
            return 1
        if result["scheduled"]:
            print(f"Pod created -> bound to the node ({len(result['scheduled'])} Pods): {figures(result['scheduled'])}")
        if result["ip"]:
            print(f"Pod created -> has an IP ({len(result['ip'])} Pods):        {figures(result['ip'])}")
        if result["ready"]:
            print(f"Pod created -> Ready ({len(result['ready'])} Pods):            {figures(result['ready'])}")
        if result["latency"]:
            print(f"Pod Ready -> reachable via ClusterIP ({len(result['latency'])} Pods): {figures(result['latency'])}")
        print(f"wall time, first Pod created -> last Pod reachable: {result['wall']:.2f} s; "
              f"{result['attempts']} connection attempts; {result['reached']}/{result['pods']} reachable")
        if result["negative"]:
            print(f"  note: {result['negative']} Pods were reachable before the watch showed them Ready")
        status = 0 if result["reached"] == result["pods"] else 1
    finally:
        if up is not None:
            stopping = time.monotonic()
            if up.poll() is None:
                up.send_signal(signal.SIGINT)
            try:
                code = up.wait(timeout=60)
            except subprocess.TimeoutExpired:
                up.kill()
                code = up.wait()
                print("kubesvc up did not stop within 60 s of SIGINT: killed", file=sys.stderr)
                status = 1
            if up.stdout is not None:
                up.stdout.close()
            left = leftovers(netns)
            print(f"Ctrl-C: kubesvc up exited {code} after {time.monotonic() - stopping:.2f} s; "
                  f"{'nothing left in ' + netns if not left else 'LEFT: ' + '; '.join(left)}")
            if code != 0 or left:
                print(log_path.read_text(errors="replace")[-3000:], file=sys.stderr)
                status = 1
                with contextlib.suppress(Exception):
                    subprocess.run(nsenter(netns, sys.executable, "-m", "kubesvc", "down", "--data-dir", workdir / "data"), cwd=ROOT,
                                   timeout=120)
        subprocess.run(["ip", "netns", "del", netns], check=False)
        shutil.rmtree(workdir, ignore_errors=True)
    return status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--poll-interval", type=float, default=0.01, help="seconds between connections to one ClusterIP")
    parser.add_argument("--attempt-timeout", type=float, default=0.5, help="seconds one connection may take")
    parser.add_argument("--concurrency", type=int, default=16, help="create requests in flight")
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for every Pod to be reachable")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(args)
        return
    if os.geteuid() != 0:
        raise SystemExit("bench/e2e.py needs root (network namespaces, nftables)")
    sys.exit(outer(args))


if __name__ == "__main__":
    main()
