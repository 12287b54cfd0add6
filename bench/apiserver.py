#!/usr/bin/env python3
"""Apiserver throughput and latency on this machine.

Starts a private ``kubesvc apiserver`` (SQLite by default) on 127.0.0.1 and prints:
creates/s and p50/p99 create latency (N Services, C concurrent clients), list latency for all
N Services (one page and paged by 500, as kubectl does), and watch delivery latency from a
write to each of W concurrent watchers.

Then the per-request cost of authentication and authorization (``--authz``) with
``--role-bindings`` RoleBindings (1,000) in the namespace asked about, in the same run for a
non-admin user (allowed by one of them, through RBAC) and for ``system:masters`` (allowed
first, by the privileged-group authorizer), both authenticated by client certificates
from the cluster CA:

* in-process: the apiserver's own request filter (x509 authentication, impersonation
  check, request attributes, the authorizer chain) timed call by call on requests carrying
  each identity's certificate; this is the whole added cost of authn+authz per request;
* over HTTPS: GETs of one ConfigMap, the two identities interleaved on keep-alive
  connections; the user's extra latency over the admin's is what RBAC adds on the wire.

Each is repeated ``--authz-runs`` times; the figures are medians over runs of each run's
median and p99.

    python3 bench/apiserver.py --services 10000 --concurrency 8 --watchers 100
    python3 bench/apiserver.py --only authz --role-bindings 1000 --authz-runs 5
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
    if args.only in ("all", "throughput"):
        await run_throughput(args)
    if args.only in ("all", "authz"):
        await run_authz(args)


async def run_throughput(args) -> None:
    with tempfile.TemporaryDirectory(prefix="kubesvc-bench-") as tmp:
        extra = [f"--storage-backend={args.storage}"]
        server = start_apiserver(Path(tmp), *extra)
        try:
            connector = aiohttp.TCPConnector(ssl=server.tls_context(), limit=0)  # as the admin (client certificate)
            async with aiohttp.ClientSession(connector=connector) as session:
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


# ---- authentication + authorization cost ------------------------------------------------------

BENCH_NAMESPACE = "authz-bench"
BENCH_USER = "bench-user"


def _role_binding(i: int) -> dict:
    subjects = [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": f"user-{i}"},
                {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": f"group-{i % 50}"},
                {"kind": "ServiceAccount", "name": f"sa-{i}", "namespace": BENCH_NAMESPACE}]
    if i == 777:
        subjects.append({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": BENCH_USER})
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": f"rb-{i:04d}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}, "subjects": subjects}


def _summary(runs: list[list[float]]) -> tuple[float, float]:
    """Median over runs of each run's median and p99, in microseconds."""
    return (statistics.median(statistics.median(r) for r in runs) * 1e6, statistics.median(percentile(r, .99) for r in runs) * 1e6)


class _PeerCertificate:
    """What the TLS transport of a connection shows the request filter: the verified client certificate."""

    def __init__(self, der: bytes):
        self._der = der

    def get_extra_info(self, name: str, default=None):
        return self if name == "ssl_object" else default

    def getpeercert(self, binary_form: bool = False):
        return self._der


async def run_authz(args) -> None:
    from aiohttp.test_utils import make_mocked_request
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    from kubesvc.apiserver.app import authorize_request
    from kubesvc.serving import pki
    from kubesvc.apiserver.server import APIServer, ServerConfig

    with tempfile.TemporaryDirectory(prefix="kubesvc-bench-authz-") as tmp:
        server = APIServer(ServerConfig(data_dir=Path(tmp), storage_backend=args.storage, secure_port=0))
        await server.start()
        try:
            ca = pki.cluster_ca(Path(tmp))
            identities = {"system:masters": ca.client("admin", pki.ADMIN), BENCH_USER: ca.client("bench-user", pki.Identity(BENCH_USER, ("bench",)))}
            sessions = {}
            for name, pair in identities.items():
                tls = ssl.create_default_context(cafile=str(ca.cert_path))
                tls.load_cert_chain(pair.cert, pair.key)
                sessions[name] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls, limit=1))
            admin = sessions["system:masters"]
            base = server.url
            async with admin.post(f"{base}/api/v1/namespaces", json={"metadata": {"name": BENCH_NAMESPACE}}) as response:
                assert response.status == 201, await response.text()
            ns_path = f"{base}/api/v1/namespaces/{BENCH_NAMESPACE}"
            async with admin.post(f"{ns_path}/configmaps", json={"metadata": {"name": "cm"}, "data": {"k": "v"}}) as response:
                assert response.status == 201, await response.text()
            queue = list(range(args.role_bindings))

            async def create_bindings():
                while queue:
                    body = _role_binding(queue.pop())
                    async with admin.post(f"{base}/apis/rbac.authorization.k8s.io/v1/namespaces/{BENCH_NAMESPACE}/rolebindings", json=body) as response:
                        assert response.status == 201, await response.text()

            await asyncio.gather(*(create_bindings() for _ in range(8)))
            print(f"authn+authz: {args.role_bindings} RoleBindings in {BENCH_NAMESPACE}, {args.authz_runs} runs x {args.authz_requests} "
                  f"requests per identity; {BENCH_USER} is allowed by rb-0777 (ClusterRole view)")

            # in-process: the request filter alone
            app = server.runner.app
            path = f"/api/v1/namespaces/{BENCH_NAMESPACE}/configmaps/cm"
            ders = {name: x509.load_pem_x509_certificate(pair.cert.read_bytes()).public_bytes(Encoding.DER) for name, pair in identities.items()}
            filter_runs: dict[str, list[list[float]]] = {name: [] for name in identities}
            for _ in range(args.authz_runs):
                samples: dict[str, list[float]] = {name: [] for name in identities}
                for _ in range(args.authz_requests):
                    for name, der in ders.items():
                        request = make_mocked_request("GET", path, app=app, transport=_PeerCertificate(der))
                        started = time.perf_counter()
                        authorize_request(request)
                        samples[name].append(time.perf_counter() - started)
                        assert request["user"].name == (BENCH_USER if name == BENCH_USER else pki.ADMIN_USER)
                for name in identities:
                    filter_runs[name].append(samples[name])
            for name in identities:
                p50, p99 = _summary(filter_runs[name])
                print(f"  request filter, in-process, {name:15s}: p50 {p50:7.1f} us   p99 {p99:7.1f} us")

            # over HTTPS: the same GET, identities interleaved
            wire_runs: dict[str, list[list[float]]] = {name: [] for name in identities}
            url = base + path
            for _ in range(args.authz_runs):
                samples = {name: [] for name in identities}
                for _ in range(args.authz_requests):
                    for name, session in sessions.items():
                        started = time.perf_counter()
                        async with session.get(url) as response:
                            await response.read()
                            assert response.status == 200, (name, response.status)
                        samples[name].append(time.perf_counter() - started)
                for name in identities:
                    wire_runs[name].append(samples[name])
            summaries = {name: _summary(runs) for name, runs in wire_runs.items()}
            for name, (p50, p99) in summaries.items():
                print(f"  GET over HTTPS,          {name:15s}: p50 {p50 / 1e3:7.3f} ms   p99 {p99 / 1e3:7.3f} ms")
            (user50, user99), (admin50, admin99) = summaries[BENCH_USER], summaries["system:masters"]
            print(f"  RBAC's extra on the wire ({BENCH_USER} - system:masters): p50 {(user50 - admin50) / 1e3:+7.3f} ms   "
                  f"p99 {(user99 - admin99) / 1e3:+7.3f} ms")
            for session in sessions.values():
                await session.close()
        finally:
            await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--services", type=int, default=10000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--watchers", type=int, default=100)
    parser.add_argument("--watch-writes", type=int, default=20)
    parser.add_argument("--storage", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument("--only", choices=["all", "throughput", "authz"], default="all")
    parser.add_argument("--role-bindings", type=int, default=1000)
    parser.add_argument("--authz-runs", type=int, default=5)
    parser.add_argument("--authz-requests", type=int, default=2000, help="requests per identity and run")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
