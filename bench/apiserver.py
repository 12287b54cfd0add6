#!/usr/bin/env python3
"""Apiserver throughput and latency on this machine.

Starts a private ``kubesvc apiserver`` (SQLite by default) on 127.0.0.1 and prints:
creates/s and p50/p99 create latency (N Services, C concurrent clients), list latency for all
N Services (one page and paged by 500, as kubectl does), and watch delivery latency from a
write to each of W concurrent watchers.

    python3 bench/apiserver.py --services 10000 --concurrency 8 --watchers 100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.apiserver import start_apiserver  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def service(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": {"bench": "1"}},
            "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}


async def create_all(session, base, names, concurrency) -> list[float]:
    latencies: list[float] = []
    queue = list(reversed(names))

    async def worker():
        while queue:
            name = queue.pop()
            started = time.perf_counter()
            async with session.post(f"{base}/api/v1/namespaces/default/services", json=service(name)) as response:
                await response.read()
                assert response.status == 201, await response.text()
            latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


async def list_latency(session, base, page: int) -> tuple[float, int]:
    started = time.perf_counter()
    count, token = 0, ""
    while True:
        params = {"limit": str(page)} if page else {}
        if token:
            params["continue"] = token
        async with session.get(f"{base}/api/v1/namespaces/default/services", params=params) as response:
            body = await response.json()
        count += len(body["items"])
        token = body["metadata"].get("continue", "")
        if not token:
            return time.perf_counter() - started, count


async def watch_latency(session, base, watchers: int, writes: int) -> list[float]:
    async with session.get(f"{base}/api/v1/namespaces/default/services", params={"limit": "1"}) as response:
        rv = (await response.json())["metadata"]["resourceVersion"]
    sent: dict[str, float] = {}
    latencies: list[float] = []
    ready = asyncio.Event()
    connected = 0

    async def watcher():
        nonlocal connected
        params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "120", "labelSelector": "bench=watch"}
        async with session.get(f"{base}/api/v1/namespaces/default/services", params=params, timeout=aiohttp.ClientTimeout(total=None)) as response:
            connected += 1
            if connected == watchers:
                ready.set()
            seen = 0
            async for line in response.content:
                event = json.loads(line)
                name = event["object"]["metadata"]["name"]
                latencies.append(time.perf_counter() - sent[name])
                seen += 1
                if seen == writes:
                    return

    tasks = [asyncio.create_task(watcher()) for _ in range(watchers)]
    await asyncio.wait_for(ready.wait(), 60)
    await asyncio.sleep(0.5)
    for i in range(writes):
        name = f"watched-{i}"
        body = service(name)
        body["metadata"]["labels"] = {"bench": "watch"}
        sent[name] = time.perf_counter()
        async with session.post(f"{base}/api/v1/namespaces/default/services", json=body) as response:
            await response.read()
        await asyncio.sleep(0.05)
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    return latencies


async def run(args) -> None:
    with tempfile.TemporaryDirectory(prefix="kubesvc-bench-") as tmp:
        extra = [f"--storage-backend={args.storage}"]
        server = start_apiserver(Path(tmp), *extra)
        try:
            tls = ssl.create_default_context(cafile=str(server.ca_file))
            connector = aiohttp.TCPConnector(ssl=tls, limit=0)
            headers = {"Authorization": f"Bearer {server.token}"}
            async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
                names = [f"svc-{i:06d}" for i in range(args.services)]
                started = time.perf_counter()
                latencies = await create_all(session, server.url, names, args.concurrency)
                elapsed = time.perf_counter() - started
                print(f"storage={args.storage} services={args.services} concurrency={args.concurrency}")
                print(f"create: {args.services / elapsed:8.0f} creates/s   p50 {percentile(latencies, .5) * 1e3:7.2f} ms   "
                      f"p99 {percentile(latencies, .99) * 1e3:7.2f} ms")
                for page in (0, 500):
                    runs = [await list_latency(session, server.url, page) for _ in range(3)]
                    best = min(r[0] for r in runs)
                    label = "one page" if not page else f"pages of {page}"
                    print(f"list {runs[0][1]} services ({label}): best of 3 {best * 1e3:8.1f} ms")
                watch = await watch_latency(session, server.url, args.watchers, args.watch_writes)
                print(f"watch: {args.watchers} watchers x {args.watch_writes} writes: delivery p50 {statistics.median(watch) * 1e3:6.2f} ms   "
                      f"p99 {percentile(watch, .99) * 1e3:6.2f} ms   max {max(watch) * 1e3:6.2f} ms")
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--services", type=int, default=10000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--watchers", type=int, default=100)
    parser.add_argument("--watch-writes", type=int, default=20)
    parser.add_argument("--storage", choices=["sqlite", "memory"], default="sqlite")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
