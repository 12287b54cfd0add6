#!/usr/bin/env python3
"""Node proxy: sync cost and first-packet latency at N Services, in a throw-away namespace.

Re-runs itself inside a fresh network namespace (nothing touches the host's rules), then:

1. feeds N Services × E endpoints (as Service and EndpointSlice objects, through the same change
   trackers the informers feed) to the shared proxier with the chosen mode's backend;
2. times the first **full sync**: total, Python (building the transaction) and kernel (the
   one ``nft -f`` / ``iptables-restore`` call) separately, and what was written;
3. changes **one endpoint** of one Service and times the **partial sync** the same way;
4. prints the proxy's RSS;
5. measures **first-packet connect latency** (TCP connect through the ClusterIP of the last
   Service, to a server in the namespace; p50/p99 over ``--connects`` new connections), the
   figure upstream's nftables blog plots against N.

    python3 bench/proxy.py --services 1000 --endpoints-per-service 10 --mode nftables
    python3 bench/proxy.py --services 5000 --endpoints-per-service 50 --mode nftables
    python3 bench/proxy.py --services 10000 --endpoints-per-service 2 --mode iptables

Published anchors (performance-anchors.md): upstream nftables full sync at 5k Services / 250k
endpoints 13 min; one added Service at 10k Services 141 ms; first-packet latency flat with N for
nftables, growing with N for iptables.
"""

from __future__ import annotations

import argparse
import asyncio
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


def in_namespace(argv: list[str]) -> int:
    name = f"ks-bench-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        return subprocess.call(["ip", "netns", "exec", name, sys.executable, *argv, "--inside"])
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def setup_links(endpoints_per_service: int) -> None:
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


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def connect_latencies(ip: str, count: int) -> list[float]:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        with socket.create_connection((ip, 80), timeout=2):
            samples.append(time.perf_counter() - started)
    return samples


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1)))]


async def bench(args: argparse.Namespace) -> None:
    from kubesvc.proxy.backend import ProxyOptions
    from kubesvc.proxy.localdetector import new_local_detector
    from kubesvc.proxy.metrics import ProxyMetrics
    from kubesvc.proxy.proxier import Proxier
    from kubesvc.proxy.server import make_backend

    setup_links(args.endpoints_per_service)
    stop = threading.Event()
    threading.Thread(target=serve, args=(stop,), daemon=True).start()

    options = ProxyOptions(node_name="bench-node", local_detector=new_local_detector("ClusterCIDR", 4, ["10.128.0.0/10"], []))
    metrics = ProxyMetrics()
    backend = make_backend(args.mode, options, metrics)
    proxier = Proxier(backend, options, metrics, min_sync_period=0, sync_period=30, clean_conntrack=False)
    n, e = args.services, args.endpoints_per_service
    rss_before = rss_mib()
    fed = time.perf_counter()
    for i in range(n):
        proxier.on_service_add(service(i))
        ips = [SERVER_IP] * 1 if i == n - 1 else [endpoint_ip(i, j) for j in range(e)]
        proxier.on_endpoint_slice_add(endpoint_slice(i, ips))
    proxier.services_synced = proxier.endpoint_slices_synced = True
    fed = time.perf_counter() - fed

    started = time.perf_counter()
    await proxier.sync_proxy_rules()
    full_total = time.perf_counter() - started
    full = proxier.last_result

    changed = 0
    proxier.on_endpoint_slice_update({}, endpoint_slice(changed, [endpoint_ip(changed, j) for j in range(1, e + 1)] if n > 1 else [SERVER_IP], 2))
    started = time.perf_counter()
    await proxier.sync_proxy_rules()
    partial_total = time.perf_counter() - started
    partial = proxier.last_result

    last_ip = service(n - 1)["spec"]["clusterIP"]
    latencies = connect_latencies(last_ip, args.connects)
    stop.set()

    written = ", ".join(f"{k} {v}" for k, v in sorted(full.written.items()))
    print(f"mode {args.mode}: {n} Services x {e} endpoints ({n * e} endpoints)")
    print(f"  feeding the change trackers: {fed:.2f} s")
    print(f"  full sync:    {full_total:.3f} s  (Python {full.build_seconds:.3f} s, kernel {full.kernel_seconds:.3f} s); written: {written}")
    print(f"  partial sync: {partial_total * 1000:.1f} ms (Python {partial.build_seconds * 1000:.1f} ms, kernel {partial.kernel_seconds * 1000:.1f} ms)"
          f"; full={partial.full}; written: {', '.join(f'{k} {v}' for k, v in sorted(partial.written.items()))}")
    print(f"  proxy RSS: {rss_mib():.0f} MiB (before feeding {rss_before:.0f} MiB)")
    print(f"  first-packet connect latency via ClusterIP: p50 {pct(latencies, 0.5) * 1e6:.0f} µs, "
          f"p99 {pct(latencies, 0.99) * 1e6:.0f} µs, mean {statistics.mean(latencies) * 1e6:.0f} µs over {len(latencies)} connects")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--endpoints-per-service", type=int, default=10)
    parser.add_argument("--mode", choices=["nftables", "iptables"], default="nftables")
    parser.add_argument("--connects", type=int, default=500)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench/proxy.py needs root (it creates a network namespace)", file=sys.stderr)
        return 1
    if not args.inside:
        return in_namespace([os.path.abspath(__file__), *sys.argv[1:]])
    asyncio.run(bench(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
