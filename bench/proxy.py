#!/usr/bin/env python3
"""Node proxy: sync cost, endpoint-change latency, peak memory and first-packet latency at N
Services, each size in a throw-away network namespace.

Every size (``--sizes 1000x10,10000x2``, or ``--services``/``--endpoints-per-service`` for one)
runs in a fresh process inside a fresh network namespace (nothing touches the host's rules, and
each size's peak memory is its own), then:

1. feeds N Services × E endpoints (as Service and EndpointSlice objects, through the same change
   trackers the informers feed) to the shared proxier with the chosen mode's backend. The
   feeding is the benchmark's own work and is timed apart;
2. times the first **full sync** as the proxier runs it: applying the tracked changes to the
   Service and endpoints maps (the shared Proxier path), building the transaction and
   bookkeeping, and the kernel calls. **Python** is everything but the kernel calls (reading
   the table back, the transaction itself), so its share is what the proxy's own code costs;
   the Python inside the kernel layer (parsing and packing elements for netlink batches,
   ``NFTables.python_seconds``) counts as Python. Beside the wall times, the sync's **CPU**
   seconds: the proxy in user mode, in kernel mode (netlink batches, page faults) and its
   ``nft`` children, with the load average: on a shared machine wall time stretches with the
   load, CPU time much less;
3. makes ``--changes`` (≥ 20) **single endpoint changes** of each kind, each a partial sync of
   its own on a Service spread over the range: one endpoint **replaced** by a new address (a
   rolling update: only map elements change), then one endpoint **added** (the endpoint count
   changes: for 2..16 endpoints the Service's ranges in its endpoint range map are re-split,
   elements only, its chain untouched; past 16 endpoints (slot maps, ``numgen mod N``) and from
   one endpoint to two the chain's rule is rewritten); p50/p99/max of the whole sync, with the Python/kernel split of the median, and
   the **CPU** of each sync (the process's user + system time and any ``nft`` child's, around
   that one change; p50/p99): on a loaded machine the wall time is mostly waiting for a core;
4. reports the process's **peak RSS** (``VmHWM`` of ``/proc/self/status``: the high-water mark
   over feeding, the full sync and the changes) and its RSS at the end (``VmRSS``);
5. measures **first-packet connect latency** (TCP connect through the ClusterIP of the last
   Service, to a server in the namespace; p50/p99 over ``--connects`` new connections), the
   figure upstream's nftables blog plots against N.

    python3 bench/proxy.py --sizes 1000x2,10000x2,30000x2
    python3 bench/proxy.py --services 5000 --endpoints-per-service 50 --mode nftables
    python3 bench/proxy.py --services 10000 --endpoints-per-service 2 --mode iptables

Published anchors (performance-anchors.md): upstream nftables full sync at 5k Services / 250k
endpoints 13 min; one added Service at 10k Services 141 ms; kube-proxy's peak RSS 260 MiB at
10k Services × 2; first-packet latency flat with N for nftables, growing with N for iptables.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

SERVER_IP = "10.250.0.1"  # on a port-less bridge (no dummy driver here) inside the namespace; every endpoint's port lands here
SERVER_PORT = 8080
RESULT_PREFIX = "BENCH-RESULT "


def in_namespace(argv: list[str]) -> tuple[int, list[str]]:
    """Run ``argv`` in a new network namespace; its exit code and its output lines (echoed)."""
    name = f"ks-bench-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        proc = subprocess.Popen(["ip", "netns", "exec", name, sys.executable, *argv, "--inside"],
                                stdout=subprocess.PIPE, text=True)
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if not line.startswith(RESULT_PREFIX):
                print(line, end="", flush=True)
        return proc.wait(), lines
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def rerun_in_own_namespace(script: str) -> None:
    """The outer half of a bench that runs inside a namespace of its own: needs root, re-runs
    ``script`` with this process's arguments plus ``--inside`` in a fresh namespace, and exits
    with its code."""
    if os.geteuid() != 0:
        raise SystemExit("needs root (a network namespace of its own)")
    code, _ = in_namespace([str(Path(script).resolve()), *sys.argv[1:]])
    raise SystemExit(code)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def setup_links() -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "link", "add", "bench0", "type", "bridge"], check=True)
    subprocess.run(["ip", "link", "set", "bench0", "up"], check=True)
    subprocess.run(["ip", "addr", "add", f"{SERVER_IP}/16", "dev", "bench0"], check=True)
    # A node has a default route; here the Service range must be routable for the first lookup
    # (before DNAT) to succeed.
    subprocess.run(["ip", "route", "add", "10.0.0.0/8", "dev", "bench0"], check=True)


def serve(stop: threading.Event) -> None:
    server = socket.create_server(("0.0.0.0", SERVER_PORT), backlog=1024, reuse_port=True)
    server.settimeout(0.2)
    while not stop.is_set():
        try:
            conn, _ = server.accept()
            conn.close()
        except TimeoutError:
            continue


def service(i: int) -> dict:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": "bench", "name": f"svc{i}", "uid": f"uid-{i}", "resourceVersion": "1"},
            "spec": {"type": "ClusterIP", "clusterIP": f"10.{96 + i // 65536}.{i // 256 % 256}.{i % 256}",
                     "clusterIPs": [f"10.{96 + i // 65536}.{i // 256 % 256}.{i % 256}"], "ipFamilies": ["IPv4"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": SERVER_PORT}]}}


def endpoint_ip(i: int, j: int) -> str:
    # Every endpoint is a distinct address; only the local server's address answers, so the
    # last Service's endpoints are all SERVER_IP (its connect latency is what we measure).
    n = i * 256 + j
    return f"10.{128 + (n >> 16) % 64}.{(n >> 8) % 256}.{n % 256}"


def endpoint_slice(i: int, ips: list[str], generation: int = 1) -> dict:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"namespace": "bench", "name": f"svc{i}-abcde", "generation": generation,
                         "labels": {"kubernetes.io/service-name": f"svc{i}"}},
            "ports": [{"name": "http", "port": SERVER_PORT, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True, "serving": True, "terminating": False},
                           "nodeName": "bench-node"} for ip in ips]}


def status_mib(field: str) -> float:
    """``VmRSS``/``VmHWM`` of this process in MiB (``getrusage``'s peak if /proc is unreadable)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def connect_latencies(ip: str, count: int) -> list[float]:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        with socket.create_connection((ip, 80), timeout=2):
            samples.append(time.perf_counter() - started)
    return samples


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (with 20-99 samples p99 is the largest)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, -(-int(q * 100) * len(ordered) // 100) - 1))]


async def timed_sync(proxier) -> tuple[float, float, float]:
    """(total, Python, kernel) seconds of one ``sync_proxy_rules``: Python is everything the
    proxier did but the kernel calls, including applying the tracked changes to its maps, and
    the Python inside the kernel layer (parsing and encoding elements for netlink, which the
    proxier's ``kernel_seconds`` includes: ``NFTables.python_seconds``)."""
    nft = getattr(proxier.mode, "nft", None)
    encoding = getattr(nft, "python_seconds", 0.0)
    started = time.perf_counter()
    await proxier.sync_proxy_rules()
    total = time.perf_counter() - started
    kernel = proxier.last_result.kernel_seconds - (getattr(nft, "python_seconds", 0.0) - encoding)
    return total, total - kernel, kernel


async def bench(args: argparse.Namespace) -> dict:
    from kubesvc.proxy.backend import ProxyOptions
    from kubesvc.proxy.localdetector import new_local_detector
    from kubesvc.proxy.metrics import ProxyMetrics
    from kubesvc.proxy.proxier import Proxier
    from kubesvc.proxy.server import make_backend

    setup_links()
    stop = threading.Event()
    threading.Thread(target=serve, args=(stop,), daemon=True).start()

    options = ProxyOptions(node_name="bench-node", local_detector=new_local_detector("ClusterCIDR", 4, ["10.128.0.0/10"], []))
    metrics = ProxyMetrics()
    backend = make_backend(args.mode, options)
    proxier = Proxier(backend, options, metrics, min_sync_period=0, sync_period=30, clean_conntrack=False)
    n, e = args.services, args.endpoints_per_service
    rss_start = status_mib("VmRSS")
    fed = time.perf_counter()
    slices = {}
    for i in range(n):
        proxier.on_service_add(service(i))
        ips = [SERVER_IP] if i == n - 1 else [endpoint_ip(i, j) for j in range(e)]
        slices[i] = endpoint_slice(i, ips)
        proxier.on_endpoint_slice_add(slices[i])
    proxier.services_synced = proxier.endpoint_slices_synced = True
    fed = time.perf_counter() - fed

    cpu = os.times()
    full_total, full_python, full_kernel = await timed_sync(proxier)
    cpu = [after - before for before, after in zip(cpu, os.times())]
    full = proxier.last_result

    # Single endpoint changes, each a partial sync of its own, on Services spread over the range
    # (never the last one, whose endpoint answers the connect test): first one endpoint
    # replaced by a new address (a Pod replaced: the Service's chain stays, only elements
    # change), then one endpoint added (the count changes: for 2..16 endpoints the Service's
    # ranges are re-split, elements only; past 16, ``numgen mod N``, the rule is rewritten).
    series = {}
    targets = max(1, n - 1)
    for kind in ("replaced", "added"):
        changes = series[kind] = []
        for c in range(args.changes):
            i = min((c * targets) // args.changes + (kind == "added"), targets - 1)
            old = slices[i]
            ips = [ep["addresses"][0] for ep in old["endpoints"]]
            new_ip = f"10.{192 + (kind == 'added') * 32 + c // 65536 % 32}.{c // 256 % 256}.{c % 256}"
            if kind == "replaced":
                ips[c % len(ips)] = new_ip
            else:
                ips.append(new_ip)
            slices[i] = endpoint_slice(i, ips, old["metadata"]["generation"] + 1)
            proxier.on_endpoint_slice_update(old, slices[i])
            # CPU of the sync alone: this process (user + system, all threads; nanoseconds, not
            # os.times()'s 10 ms ticks) and any nft child it waited for
            cpu_before, children_before = time.process_time(), children_cpu()
            timed = await timed_sync(proxier)
            spent = time.process_time() - cpu_before + children_cpu() - children_before
            changes.append((*timed, proxier.last_result, spent))
        if any(result.full for _, _, _, result, _ in changes):
            raise SystemExit("an endpoint change made a full sync; the figures would not mean what they say")

    last_ip = service(n - 1)["spec"]["clusterIP"]
    latencies = connect_latencies(last_ip, args.connects) if args.connects else []
    stop.set()

    out = {
        "mode": args.mode, "services": n, "endpoints": e, "feed_s": fed,
        "full_s": full_total, "full_python_s": full_python, "full_kernel_s": full_kernel, "full_written": full.written,
        # CPU seconds of the full sync: this process in user mode (Python, and libnftables when
        # in-process), in kernel mode (netlink batches, page faults), and its nft children
        "full_cpu_user_s": cpu[0], "full_cpu_sys_s": cpu[1], "full_cpu_children_s": cpu[2] + cpu[3],
    }
    for kind, changes in series.items():
        totals = [t for t, *_ in changes]
        cpus = [c[4] for c in changes]
        median = sorted(changes, key=lambda c: c[0])[len(changes) // 2]
        out[kind] = {"p50_ms": pct(totals, 0.50) * 1e3, "p99_ms": pct(totals, 0.99) * 1e3, "max_ms": max(totals) * 1e3,
                     "cpu_p50_ms": pct(cpus, 0.50) * 1e3, "cpu_p99_ms": pct(cpus, 0.99) * 1e3,
                     "count": len(changes), "median_python_ms": median[1] * 1e3, "median_kernel_ms": median[2] * 1e3,
                     "written": median[3].written}
    return out | {
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "rss_start_mib": rss_start, "rss_end_mib": status_mib("VmRSS"), "rss_peak_mib": status_mib("VmHWM"),
        "connect_p50_us": pct(latencies, 0.5) * 1e6 if latencies else None,
        "connect_p99_us": pct(latencies, 0.99) * 1e6 if latencies else None,
        "connect_mean_us": statistics.mean(latencies) * 1e6 if latencies else None, "connects": len(latencies),
    }


def report(r: dict) -> None:
    n, e = r["services"], r["endpoints"]
    written = ", ".join(f"{k} {v}" for k, v in sorted(r["full_written"].items()))
    print(f"mode {r['mode']}: {n} Services x {e} endpoints ({n * e} endpoints)")
    print(f"  feeding the change trackers (not timed below): {r['feed_s']:.2f} s")
    print(f"  full sync:    {r['full_s']:.3f} s  (Python {r['full_python_s']:.3f} s = {100 * r['full_python_s'] / r['full_s']:.0f} %, "
          f"kernel {r['full_kernel_s']:.3f} s); written: {written}")
    print(f"  full sync CPU: proxy user {r['full_cpu_user_s']:.2f} s, proxy system {r['full_cpu_sys_s']:.2f} s, "
          f"nft children {r['full_cpu_children_s']:.2f} s (about the wall time on an idle machine; load average {r['load']})")
    for kind in ("replaced", "added"):
        c = r[kind]
        print(f"  one endpoint {kind} ({c['count']} partial syncs): p50 {c['p50_ms']:.1f} ms, p99 {c['p99_ms']:.1f} ms, "
              f"max {c['max_ms']:.1f} ms (median: Python {c['median_python_ms']:.1f} ms, kernel {c['median_kernel_ms']:.1f} ms; "
              f"written: {', '.join(f'{k} {v}' for k, v in sorted(c['written'].items()))}); "
              f"CPU p50 {c['cpu_p50_ms']:.1f} ms, p99 {c['cpu_p99_ms']:.1f} ms")
    print(f"  proxy RSS: peak {r['rss_peak_mib']:.0f} MiB (VmHWM), at the end {r['rss_end_mib']:.0f} MiB, at start {r['rss_start_mib']:.0f} MiB")
    if r["connects"]:
        print(f"  first-packet connect latency via ClusterIP: p50 {r['connect_p50_us']:.0f} µs, p99 {r['connect_p99_us']:.0f} µs, "
              f"mean {r['connect_mean_us']:.0f} µs over {r['connects']} connects")


def table(results: list[dict]) -> None:
    print("\n| mode | Services × endpoints | full sync (Python share) | full sync CPU | endpoint replaced p50 / p99 (CPU p50 / p99) "
          "| endpoint added p50 / p99 (CPU p50 / p99) | peak RSS | connect p50 / p99 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        connect = f"{r['connect_p50_us']:.0f} / {r['connect_p99_us']:.0f} µs" if r["connects"] else ""
        print(f"| {r['mode']} | {r['services']:,} × {r['endpoints']} | {r['full_s']:.2f} s ({100 * r['full_python_s'] / r['full_s']:.0f} %) "
              f"| {r['full_cpu_user_s'] + r['full_cpu_sys_s'] + r['full_cpu_children_s']:.2f} s "
              + "".join(f"| {r[k]['p50_ms']:.1f} / {r[k]['p99_ms']:.1f} ms ({r[k]['cpu_p50_ms']:.1f} / {r[k]['cpu_p99_ms']:.1f}) " for k in ("replaced", "added"))
              + f"| {r['rss_peak_mib']:.0f} MiB | {connect} |")


def parse_sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for item in text.split(","):
        services, _, endpoints = item.strip().lower().partition("x")
        sizes.append((int(services), int(endpoints or 1)))
    return sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--endpoints-per-service", type=int, default=10)
    parser.add_argument("--sizes", help="several sizes, one namespace and process each: 1000x10,10000x2 (Services x endpoints)")
    parser.add_argument("--mode", choices=["nftables", "iptables"], default="nftables")
    parser.add_argument("--changes", type=int, default=25, help="single endpoint changes timed per size (at least 20)")
    parser.add_argument("--connects", type=int, default=500)
    parser.add_argument("--json", action="store_true", help="also print each size's figures as one JSON line")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.changes < 20:
        parser.error("--changes must be at least 20 (p99 of fewer is not a percentile)")
    if os.geteuid() != 0:
        print("bench/proxy.py needs root (it creates a network namespace)", file=sys.stderr)
        return 1
    if args.inside:
        print(RESULT_PREFIX + json.dumps(asyncio.run(bench(args))), flush=True)
        return 0
    sizes = parse_sizes(args.sizes) if args.sizes else [(args.services, args.endpoints_per_service)]
    results = []
    common = [f"--mode={args.mode}", f"--changes={args.changes}", f"--connects={args.connects}"]
    for services, endpoints in sizes:
        code, lines = in_namespace([os.path.abspath(__file__), f"--services={services}",
                                    f"--endpoints-per-service={endpoints}", *common])
        if code != 0:
            return code
        result = json.loads(next(line for line in lines if line.startswith(RESULT_PREFIX))[len(RESULT_PREFIX):])
        report(result)
        if args.json:
            print(json.dumps(result))
        results.append(result)
    if len(results) > 1:
        table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
