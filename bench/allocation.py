#!/usr/bin/env python3
"""Service ClusterIP / NodePort allocation latency against the KEP-1880 SLO, in process.

Builds the control plane (registry + allocators, SQLite by default) in a temp dir. For each
size N it fills N ClusterIP Services through ``Store.create`` (the fill rate is printed),
then measures the latency of allocating ``--samples`` more with N held:

  (a) end to end: ``Store.create`` of a Service (allocation + defaulting + validation + one
      storage transaction holding the Service and its IPAddress record); each sample Service
      is deleted again, untimed, so the level stays at N. Beside the wall-clock figures, the
      same samples in CPU time of this thread (what the machine's other load does not add),
      and the slowest samples with what ran inside them (garbage collector passes and their
      CPU time, WAL catch-ups under the write lock): a p99.9 is the second-slowest of 2,000
      samples, so one pause decides it;
  (b) the allocator's decision alone: ``allocate_next()`` on the IP family's bitmap (the
      random-start scan) followed by an untimed ``unmark``;

(with the SQLite backend, the WAL checkpoints that ran beside those samples: see
storage/sqlite/checkpoint.py), and the duration of one repair pass (``Repair.run_once()``) with its report (leaks,
duplicates), then a second pass timed step by step (snapshot, plan, apply + index reload). The same is
done for NodePort/LoadBalancer Services at ``--nodeport-size`` (the default port range has
only 2768 ports). Latencies are printed with their share of the SLO: 99.9 % of ClusterIP
allocations under 500 ms (KEP-1880 ``allocation_duration_seconds``).

    python3 bench/allocation.py                      # 10k, 50k, 100k in 10.96.0.0/12
    python3 bench/allocation.py --sizes 2000 --samples 200
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import ipaddress
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from kubesvc.apiserver.allocator.repair import Repair  # noqa: E402
from kubesvc.apiserver.server import build_control_plane  # noqa: E402
from kubesvc.storage import open_backend  # noqa: E402
from kubesvc.util.clock import RealClock  # noqa: E402

SLO_SECONDS = 0.5  # KEP-1880: 99.9 % of ClusterIP allocations per day < 500 ms
QUANTILES = ((0.5, "p50"), (0.99, "p99"), (0.999, "p99.9"))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def fmt_seconds(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def fmt_share(seconds: float) -> str:
    share = seconds / SLO_SECONDS * 100
    return f"{share:.4f}%" if share < 0.01 else f"{share:.2f}%" if share < 10 else f"{share:.0f}%"


def latency_line(label: str, values: list[float]) -> str:
    parts = [f"{name} {fmt_seconds(percentile(values, q))}" for q, name in QUANTILES]
    p999 = percentile(values, 0.999)
    return (f"  {label}: " + "   ".join(parts) + f"   max {fmt_seconds(max(values))}"
            f"   (p99.9 = {fmt_share(p999)} of the 500 ms SLO, {SLO_SECONDS / p999:,.0f}x under)")


def service(name: str, kind: str = "ClusterIP") -> dict:
    spec: dict = {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
    if kind != "ClusterIP":
        spec["type"] = kind
    return {"metadata": {"name": name, "labels": {"bench": "allocation"}}, "spec": spec}


def disk_usage(data_dir: str) -> int:
    return sum(p.stat().st_size for p in Path(data_dir).glob("state.db*") if p.is_file())


def rss_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def describe_report(report) -> str:
    """The repair pass's report: leaks, duplicates and repairs it found, per allocator."""
    def counts(errors: dict) -> str:
        shown = {"leak": 0, "duplicate": 0, "repair": 0, **errors}
        return " ".join(f"{k}={v}" for k, v in shown.items())
    return (f"clean={report.clean}   ClusterIP: {counts(report.ip_errors)}   NodePort: {counts(report.port_errors)}   "
            f"pending leaks={report.ip_leaks_pending + report.port_leaks_pending} skipped={report.skipped} "
            f"events={len(report.events)}")


async def run_repair(registry, allocators, clock) -> str:
    gc.collect()
    repair = Repair(registry, allocators, clock)
    started = time.perf_counter()
    report = await repair.run_once()
    elapsed = time.perf_counter() - started
    lines = [f"  repair pass (Repair.run_once): {fmt_seconds(elapsed)}   report: {describe_report(report)}"]
    # a second pass, step by step (what run_once does): where the time goes
    gc.collect()
    t0 = time.perf_counter()
    snapshot = await repair.snapshot()
    t1 = time.perf_counter()
    plans = repair.plan(snapshot)
    t2 = time.perf_counter()
    await repair.apply(*plans)
    t3 = time.perf_counter()
    lines.append(f"    second pass, by step: snapshot (read + decode) {fmt_seconds(t1 - t0)}   plan {fmt_seconds(t2 - t1)}   "
                 f"apply + index reload {fmt_seconds(t3 - t2)}   total {fmt_seconds(t3 - t0)}")
    return "\n".join(lines)


class Bench:
    @classmethod
    async def open(cls, args, data_dir: str) -> "Bench":
        self = cls()
        self.args = args
        self.data_dir = data_dir
        self.clock = RealClock()
        self.backend = open_backend(args.backend, data_dir)
        self.registry, self.allocators = await build_control_plane(self.backend, self.clock, [args.cidr], args.port_range)
        self.services = self.registry.store("", "services")
        self.family = self.allocators.cluster_families[0]
        return self

    async def close(self) -> None:
        await self.backend.close()

    # ---- filling -----------------------------------------------------------------------------
    async def fill(self, prefix: str, start: int, stop: int, kinds: tuple[str, ...]) -> str:
        """Create Services ``prefix-<start>`` .. ``prefix-<stop-1>``, types taken in turn from kinds."""
        count = stop - start
        started = time.perf_counter()
        for i in range(start, stop):
            await self.services.create("default", service(f"{prefix}-{i:06d}", kinds[i % len(kinds)]), field_manager="bench")
        elapsed = time.perf_counter() - started
        rate = count / elapsed if elapsed > 0 else float("inf")
        disk = f"   store {disk_usage(self.data_dir) / 2**20:.0f} MiB on disk" if self.args.backend == "sqlite" else ""
        return (f"  fill {count} Services via Store.create in {elapsed:.1f} s = {rate:,.0f} creates/s"
                f"{disk}   RSS {rss_bytes() / 2**20:.0f} MiB")

    # ---- measuring ---------------------------------------------------------------------------
    async def end_to_end(self, prefix: str, kind: str, samples: int) -> tuple[list[float], list[tuple]]:
        """(wall-clock latencies, per sample (its CPU time, the wall time, what ran inside it: the
        garbage collector's passes by generation and their CPU time, WAL catch-ups under the write
        lock)), so the slowest samples can be told apart: this process's own work, the collector,
        a checkpoint, or the machine's other load (wall time with no CPU time behind it)."""
        latencies, details = [], []
        gc_passes: list[tuple[int, float]] = []
        gc_started = [0.0]

        def on_gc(phase: str, info: dict) -> None:
            if phase == "start":
                gc_started[0] = time.thread_time()
            else:
                gc_passes.append((info["generation"], time.thread_time() - gc_started[0]))

        gc.callbacks.append(on_gc)
        try:
            for i in range(samples):
                name = f"{prefix}-{i:06d}"
                body = service(name, kind)
                seen, catch_ups = len(gc_passes), self.checkpoints()[1]
                cpu_started = time.thread_time()
                started = time.perf_counter()
                created = await self.services.create("default", body, field_manager="bench")
                latencies.append(time.perf_counter() - started)
                details.append((time.thread_time() - cpu_started, latencies[-1], gc_passes[seen:], self.checkpoints()[1] - catch_ups))
                assert created["spec"].get("clusterIP"), created
                if kind != "ClusterIP":
                    assert created["spec"]["ports"][0].get("nodePort"), created
                await self.services.delete("default", name, {})
        finally:
            gc.callbacks.remove(on_gc)
        return latencies, details

    def ip_decision(self, samples: int) -> list[float]:
        allocator = self.allocators.families[self.family]
        latencies = []
        for _ in range(samples):
            started = time.perf_counter()
            ip, _range = allocator.allocate_next()
            latencies.append(time.perf_counter() - started)
            allocator.unmark(ip)
        return latencies

    def port_decision(self, samples: int) -> list[float]:
        allocator = self.allocators.ports
        latencies = []
        for _ in range(samples):
            started = time.perf_counter()
            port = allocator.allocate_next()
            latencies.append(time.perf_counter() - started)
            allocator.unmark(port)
        return latencies

    def checkpoints(self) -> tuple[int, int, int]:
        """The SQLite checkpointer's counts so far (passive runs, catch-ups under the write
        lock, idle truncations); zeros for the memory backend."""
        checkpointer = getattr(self.backend, "checkpointer", None)
        if checkpointer is None:
            return 0, 0, 0
        return checkpointer.passive_runs, checkpointer.catch_ups, checkpointer.truncates

    async def measure(self, label: str, kind: str, samples: int, decision) -> None:
        gc.collect()
        before = self.checkpoints()
        e2e, details = await self.end_to_end(f"{label}-sample", kind, samples)
        print(latency_line(f"Store.create ({self.args.backend}), {samples} samples", e2e), flush=True)
        print(latency_line("  the same, CPU time of this thread", [cpu for cpu, _, _, _ in details]), flush=True)
        print("    slowest samples (wall): " + "; ".join(_describe_sample(d) for d in sorted(details, key=lambda d: d[1], reverse=True)[:4]), flush=True)
        passes = [p for d in details for p in d[2]]
        for generation in sorted({g for g, _ in passes}):
            cpu = [seconds for g, seconds in passes if g == generation]
            print(f"    gc generation {generation}: {len(cpu)} passes inside the samples, CPU max {fmt_seconds(max(cpu))}, "
                  f"total {fmt_seconds(sum(cpu))}", flush=True)
        if self.args.backend == "sqlite":
            passive, catch_ups, truncates = (after - start for after, start in zip(self.checkpoints(), before))
            print(f"    WAL checkpoints beside those samples: {passive} passive, {catch_ups} caught up under the write lock "
                  f"(each a pause for the writes behind it), {truncates} idle truncations", flush=True)
        gc.collect()
        alone = decision(samples)
        print(latency_line(f"allocator decision alone, {samples} samples", alone), flush=True)
        print(await run_repair(self.registry, self.allocators, self.clock), flush=True)


def _describe_sample(detail: tuple) -> str:
    cpu, wall, passes, catch_ups = detail
    inside = [f"gc{g} {fmt_seconds(seconds)}" for g, seconds in passes] + (["a WAL catch-up"] * catch_ups)
    return f"{fmt_seconds(wall)} (CPU {fmt_seconds(cpu)}{': ' + ', '.join(inside) if inside else ''})"


def default_sizes(cidr: str) -> list[int]:
    sizes = [10000, 50000]
    if ipaddress.ip_network(cidr, strict=False).num_addresses >= 2**20:  # a /12 or wider
        sizes.append(100000)
    return sizes


async def run(args, sizes: list[int], parser: argparse.ArgumentParser) -> None:
    with tempfile.TemporaryDirectory(prefix="kubesvc-bench-alloc-") as tmp:
        bench = await Bench.open(args, tmp)
        try:
            capacity = bench.allocators.families[bench.family].ranges[0].range.slots
            print(f"backend={args.backend} cidr={args.cidr} ({capacity:,} allocatable IPs) "
                  f"samples={args.samples} python={sys.version.split()[0]} cpus={os.cpu_count()}")
            filled = 0
            for size in sizes:
                if size + 1 > capacity:
                    print(f"N={size}: skipped, the range holds only {capacity:,} IPs")
                    continue
                print(f"N={size:,} ClusterIP Services allocated", flush=True)
                print(await bench.fill("svc", filled, size, ("ClusterIP",)), flush=True)
                filled = size
                await bench.measure(f"ip{size}", "ClusterIP", args.samples, bench.ip_decision)

            if args.nodeport_size:
                ports = bench.allocators.ports
                if args.nodeport_size + 1 > ports.bitmap.size:
                    parser.error(f"--nodeport-size {args.nodeport_size}: the range holds only {ports.bitmap.size} ports")
                print(f"NodePort: N={args.nodeport_size:,} NodePort/LoadBalancer Services allocated "
                      f"(range {args.port_range}, {ports.bitmap.size} ports; "
                      f"on top of the {filled:,} ClusterIP Services above)", flush=True)
                print(await bench.fill("np", 0, args.nodeport_size, ("NodePort", "LoadBalancer")), flush=True)
                await bench.measure(f"np{args.nodeport_size}", "NodePort", args.samples, bench.port_decision)
        finally:
            await bench.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", help="comma-separated Service counts to hold while measuring "
                        "(default 10000,50000 and 100000 when the range is a /12 or wider)")
    parser.add_argument("--samples", type=int, default=2000, help="allocations measured at each size")
    parser.add_argument("--backend", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument("--cidr", default="10.96.0.0/12", help="service cluster IP range")
    parser.add_argument("--port-range", default="30000-32767", help="service node port range")
    parser.add_argument("--nodeport-size", type=int, default=2000,
                        help="NodePort/LoadBalancer Services to hold for the NodePort line (0 to skip)")
    args = parser.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",")}) if args.sizes else default_sizes(args.cidr)

    asyncio.run(run(args, sizes, parser))


if __name__ == "__main__":
    main()
