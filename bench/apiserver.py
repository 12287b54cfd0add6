#!/usr/bin/env python3
"""Apiserver throughput and latency on this machine.

Starts a private ``kubesvc apiserver`` (SQLite by default, the admin's client certificate as
authentication) on 127.0.0.1 and prints, each as medians and p99 over repeated runs:

* fill: N Services created by C concurrent clients (creates/s over the whole fill, p50/p99);
  each client a raw keep-alive TLS connection sending bodies encoded before the clock starts
  and reading only each response's status and length (``--client raw``, the default), so the
  bench's own CPU, printed beside the server's, stays small on a machine whose cores it shares
  with the server (``--client aiohttp``: a Python client's view, its encode and parse included);
* creates at N: a further batch of ``--batch`` creates after the fill, timed on their own
  (latency and creates/s at N objects, not averaged over the way from 0 to N), then another
  batch on each server of the comparison below;
* list of the N Services, ``--list-runs`` times, one page and pages of 500 (as kubectl pages):
  the time to the response's last byte with a client that reads the bytes and parses nothing
  (the server's share), the time to its first byte (from storage the server sends the
  headers once the body is built: its time without the transfer; the watch cache sends them
  first and streams the body in pieces, so there it is the time to start), and apart from
  those the client's own JSON decoding of that body; the
  first list, not counted in these, is shown apart (the watch cache encodes an object on its
  first read, so that list pays for the objects written since);
* watch delivery: from sending a create to each of W watchers (a label selector that
  matches only the bench's writes) receiving its event, ``--watch-writes`` writes, the writes'
  own latency beside it and the server's CPU per write and its W deliveries (counted once the
  watchers are connected). The watchers are raw TLS connections that parse nothing (no HTTP
  client, no JSON), so with W of them in this one process the client's per-event work does
  not queue into the figure;
* the server's CPU time per create and per list (from /proc: what the machine's load does
  not inflate, unlike the wall-clock figures);
* the server's peak RSS (VmHWM), and the same list and watch figures from a peer in the same
  run: the same data directory served again with ``--peer-flags`` (default
  ``--watch-cache=false``: lists and watches from storage, the path before the watch cache),
  with the ratio peer / default.

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

``--storage etcd`` (or ``sqlite,etcd``) runs the throughput part once per storage in one run,
SQLite first (etcd: a fresh single-member etcd, tests/support/etcd.py, with etcd's own raft timing
as kubesvc's managed members run, its data on disk unless ``--etcd-tmpfs``, and the apiserver on
``--storage-backend etcd3``), and ends with one table:
creates/s (fill and at N), create p99 at N, CPU per create (apiserver plus etcd), the list of
all N Services from the watch cache (p50, p99) and the watch fan-out to W watchers (p50, p99),
one column per storage, the ratio to SQLite's, and issue 18's goals (within 2x of SQLite on
every figure; that list in at most 200 ms).

``--only paired --before-src DIR`` compares this tree's server with another tree's (DIR: its
``src``, e.g. ``git archive <commit> src | tar -x -C /tmp/before``) on a shared machine: both
servers (SQLite, or with ``--storage etcd`` each on an etcd of its own whose CPU is counted
with the server's) run at once, and ``--pairs`` batches of ``--batch`` creates go to one then the
other (the order alternating), so the two batches of a pair meet the same load; it prints each
server's median CPU per create and the median over pairs of after/before.

    python3 bench/apiserver.py --services 10000 --concurrency 8 --watchers 100
    python3 bench/apiserver.py --only throughput --storage etcd --peer-flags ''
    python3 bench/apiserver.py --only authz --role-bindings 1000 --authz-runs 5
    python3 bench/apiserver.py --only paired --before-src /tmp/before/src --pairs 20 --batch 300
    python3 bench/apiserver.py --only paired --storage etcd --before-src /tmp/before/src --pairs 20 --batch 300

``--only pod-requests`` prints the apiserver event loop's CPU per request (its main thread, from
/proc: the one core every request and watch shares) for each request a Pod's life brings, sent
as the components send them, ``--pods`` of a kind at a time by ``--concurrency`` clients: the
ReplicaSet controller's create, the scheduler's binding, the agent's (node identity) token
request bound to the Pod and its three status merge-patches (Pending, Running, Ready), an Event
create and its strategic-merge series PATCH, an EndpointSlice PUT of ``--slice-endpoints``
endpoints flipping one endpoint's readiness, and a GET, for reference; each a median over
``--rounds``. With ``--before-src DIR`` the other tree's apiserver runs at the same time and the
two take turns kind by kind (who goes first alternating by round), with the median over rounds
of after/before; on this machine an A/A run (both the same tree) still reads 0.6-1.4 for one
kind over 4 rounds when others load it (CPU time per request rises with the load of the other
hardware thread), so take many rounds:

    python3 bench/apiserver.py --only pod-requests --rounds 4
    python3 bench/apiserver.py --only pod-requests --before-src /tmp/before/src --rounds 6
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import ssl
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.apiserver import RunningAPIServer, start_apiserver  # noqa: E402
from tests.support.etcd import start_etcd  # noqa: E402

SERVICES = "/api/v1/namespaces/default/services"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.2f} ms"


def spread(values: list[float]) -> str:
    """p50 and p99 of samples (seconds) as milliseconds."""
    return f"p50 {ms(statistics.median(values))}   p99 {ms(percentile(values, .99))}"


def service(name: str, labels: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels or {"bench": "1"}},
            "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set (VmHWM), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def own_cpu_seconds() -> float:
    """This (client) process's CPU time so far: what the bench itself takes from the machine's
    cores while it measures the server."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _raw_tls(server, args) -> ssl.SSLContext | None:
    """The admin's TLS context for the raw create client, or None for aiohttp (``--client``)."""
    return server.tls_context() if args.client == "raw" else None


def cpu_seconds(pid: int) -> float:
    """The process's CPU time so far (user + system): a server's cost per request that the
    machine's load does not inflate, unlike the wall-clock times."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _RawCreates(asyncio.Protocol):
    """One keep-alive TLS connection that POSTs pre-encoded Service bodies one after another and
    reads each response only as far as its status line and Content-Length: no HTTP client and no
    JSON on the bench's side, so the client's own CPU (an aiohttp session spent ~0.8 ms per create,
    as much as half the server's) does not compete with the server for the machine's cores."""

    def __init__(self, head: bytes, queue: list[tuple[str, bytes]], latencies: list[float], done: asyncio.Future):
        self.head, self.queue, self.latencies, self.done = head, queue, latencies, done
        self.buffer = b""
        self.started = 0.0
        self.transport = None
        self.name = ""

    def connection_made(self, transport) -> None:
        self.transport = transport  # the first request goes when the clock starts (_send_next)

    def _send_next(self) -> None:
        if not self.queue:
            self.transport.close()
            return
        self.name, body = self.queue.pop()
        self.started = time.perf_counter()
        self.transport.write(self.head + str(len(body)).encode() + b"\r\n\r\n" + body)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buffer[:end]
        length = int(_CONTENT_LENGTH.search(head).group(1))
        if len(self.buffer) < end + 4 + length:
            return
        status = head[9:12]
        self.buffer = self.buffer[end + 4 + length:]
        self.latencies.append(time.perf_counter() - self.started)
        if status != b"201":
            self.done.set_exception(AssertionError(f"create {self.name}: {head[:200]!r}"))
            self.transport.close()
            return
        self._send_next()

    def connection_lost(self, exc) -> None:
        if not self.done.done():
            if self.queue:
                self.done.set_exception(exc or ConnectionError("connection closed before the last create"))
            else:
                self.done.set_result(None)


_CONTENT_LENGTH = re.compile(rb"(?i)content-length: *([0-9]+)")


async def create_all(session, base, names, concurrency, tls: ssl.SSLContext | None = None) -> tuple[list[float], float]:
    """Create the Services named, ``concurrency`` at a time: (latencies, elapsed). With ``tls``
    (the admin's client context) each of the ``concurrency`` clients is a raw keep-alive
    connection (``_RawCreates``: bodies encoded before the clock starts, nothing parsed but the
    status line and Content-Length); without, aiohttp's session (its encode and parse counted)."""
    latencies: list[float] = []
    if tls is not None:
        url = urllib.parse.urlsplit(base)
        head = (f"POST {SERVICES} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
                f"Accept: application/json\r\nContent-Length: ").encode()
        bodies = [(name, json.dumps(service(name), separators=(",", ":")).encode()) for name in reversed(names)]
        queues: list[list[tuple[str, bytes]]] = [bodies[i::concurrency] for i in range(concurrency)]
        loop = asyncio.get_running_loop()
        connected = []
        for queue in queues:  # connect (TLS handshakes) before the clock starts
            done = loop.create_future()
            protocol = _RawCreates(head, [], latencies, done)
            transport, _ = await loop.create_connection(lambda protocol=protocol: protocol, url.hostname, url.port, ssl=tls,
                                                        server_hostname=url.hostname)
            connected.append((protocol, queue, done))
        started = time.perf_counter()
        for protocol, queue, _ in connected:
            protocol.queue = queue
            protocol._send_next()
        await asyncio.gather(*(done for _, _, done in connected))
        return latencies, time.perf_counter() - started
    queue = list(reversed(names))

    async def worker():
        while queue:
            name = queue.pop()
            started = time.perf_counter()
            async with session.post(base + SERVICES, json=service(name)) as response:
                await response.read()
                assert response.status == 201, await response.text()
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - started


_CONTINUE = re.compile(rb'"continue":"([^"]*)"')


async def list_raw(session, base, page: int) -> tuple[float, list[bytes]]:
    """One list (all pages): the summed time from each request to its response's last byte,
    the body read as bytes and not parsed (the continue token is found by a regular
    expression in the list's metadata, outside the timing), the summed time to each response's
    headers (from storage sent once the whole body is built: the server's own time without
    the transfer; the watch cache streams the body after them), and the bodies."""
    elapsed, headers, bodies, token = 0.0, 0.0, [], ""
    while True:
        params = {"limit": str(page)} if page else {}
        if token:
            params["continue"] = token
        started = time.perf_counter()
        async with session.get(base + SERVICES, params=params) as response:
            headers += time.perf_counter() - started
            body = await response.read()
        elapsed += time.perf_counter() - started
        assert response.status == 200, body[:300]
        bodies.append(body)
        match = _CONTINUE.search(body, 0, 4096) if page else None
        if not match:
            return elapsed, headers, bodies
        token = match.group(1).decode()


_CACHE_LISTS = re.compile(r'^apiserver_cache_list_total\{[^}]*resource="services"[^}]*\} ([0-9.e+]+)$', re.M)


async def cache_lists(session, base) -> float:
    """Service lists the watch cache served so far (its ``apiserver_cache_list_total``)."""
    async with session.get(base + "/metrics") as response:
        return sum(float(value) for value in _CACHE_LISTS.findall(await response.text()))


async def list_figures(session, base, runs: int, expected: int, pid: int) -> dict:
    """Per page size: server times (to last byte), the client's decoding time of each run, the
    bytes of one list, the server's CPU time per list and how many of the requests the watch
    cache served (the rest went to storage)."""
    figures = {}
    for page in (0, 500):
        first, _, _ = await list_raw(session, base, page)  # warm: connection, caches (the watch cache encodes on first read)
        served, built, decoded = [], [], []
        from_cache = await cache_lists(session, base)
        cpu_before = cpu_seconds(pid)
        for _ in range(runs):
            elapsed, headers, bodies = await list_raw(session, base, page)
            built.append(headers)
            started = time.perf_counter()
            count = sum(len(json.loads(body)["items"]) for body in bodies)
            decoded.append(time.perf_counter() - started)
            served.append(elapsed)
            assert count == expected, (count, expected)
        cpu = (cpu_seconds(pid) - cpu_before) / runs
        from_cache = int(await cache_lists(session, base) - from_cache)
        requests = runs * len(bodies)
        figures[page] = (served, decoded, sum(len(b) for b in bodies), cpu, first, built, f"{from_cache}/{requests} from the watch cache")
    return figures


_NAME = re.compile(rb'"name":"(watched-[0-9]+)"')


class _RawWatch(asyncio.Protocol):
    """One watcher on its own TLS connection that parses nothing: the time each bench object's
    name arrives in a complete line (the server's delivery, without an HTTP client's per-event
    work, which with 100 watchers in one client process would queue behind each other)."""

    def __init__(self, sent: dict[bytes, float], latencies: list[float], writes: int, connected, done: asyncio.Future):
        self.sent, self.latencies, self.writes, self.connected, self.done = sent, latencies, writes, connected, done
        self.partial = b""
        self.seen = 0
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        arrived = time.perf_counter()
        if self.connected is not None and b" 200 " in data[:64]:  # the response's headers: the watch is open
            connected, self.connected = self.connected, None
            connected()
        data = self.partial + data
        complete = data.rfind(b"\n") + 1
        self.partial = data[complete:]
        for match in _NAME.finditer(data, 0, complete):
            self.latencies.append(arrived - self.sent[match.group(1)])
            self.seen += 1
        if self.seen >= self.writes and not self.done.done():
            self.done.set_result(None)
            self.transport.close()

    def connection_lost(self, exc) -> None:
        if not self.done.done():
            self.done.set_exception(exc or ConnectionError("watch ended early"))


async def watch_latency(session, base, watchers: int, writes: int, round_: int, tls: ssl.SSLContext, pid: int) -> tuple[list[float], list[float], float]:
    """(delivery latencies, the writes' own latencies, the server's CPU seconds per write and its
    deliveries, counted once the watchers are connected): from sending a create to each watcher
    receiving its ADDED event. The watchers are raw TLS connections that find the object's name
    in each line with a regular expression (``_RawWatch``): no HTTP client, no JSON parsing, so
    the client's own work does not count (as the list figures' raw client)."""
    async with session.get(base + SERVICES, params={"limit": "1"}) as response:
        rv = (await response.json())["metadata"]["resourceVersion"]
    label = f"watch-{round_}"
    sent: dict[bytes, float] = {}
    latencies: list[float] = []
    ready = asyncio.Event()
    connected = 0

    def one_connected():
        nonlocal connected
        connected += 1
        if connected == watchers:
            ready.set()

    loop = asyncio.get_running_loop()
    url = urllib.parse.urlsplit(base)
    query = urllib.parse.urlencode({"watch": "true", "resourceVersion": rv, "timeoutSeconds": "300", "labelSelector": f"bench={label}"})
    request = f"GET {SERVICES}?{query} HTTP/1.1\r\nHost: {url.netloc}\r\nAccept: application/json\r\n\r\n".encode()
    finished = []
    for _ in range(watchers):
        done = loop.create_future()
        transport, _ = await loop.create_connection(lambda: _RawWatch(sent, latencies, writes, one_connected, done),
                                                    url.hostname, url.port, ssl=tls, server_hostname=url.hostname)
        transport.write(request)
        finished.append(done)
    await asyncio.wait_for(ready.wait(), 60)
    await asyncio.sleep(0.5)
    cpu_before = cpu_seconds(pid)  # the watchers' TLS handshakes are not the writes' cost
    write_latencies = []
    for i in range(writes):
        name = f"watched-{round_ * 100000 + i}"
        body = service(name, {"bench": label})
        sent[name.encode()] = started = time.perf_counter()
        async with session.post(base + SERVICES, json=body) as response:
            await response.read()
            assert response.status == 201
        write_latencies.append(time.perf_counter() - started)
        await asyncio.sleep(0.05)
    await asyncio.wait_for(asyncio.gather(*finished), 120)
    return latencies, write_latencies, (cpu_seconds(pid) - cpu_before) / writes


async def run(args) -> None:
    if args.only == "paired":
        await run_paired(args)
        return
    if args.only == "pod-requests":
        await run_pod_requests(args)
        return
    if args.only in ("all", "throughput"):
        storages = args.storage.split(",")
        if "etcd" in storages and "sqlite" not in storages:
            storages.insert(0, "sqlite")  # etcd is measured beside SQLite, in the same run
        figures: dict[str, list[dict]] = {storage: [] for storage in storages}
        for round_ in range(args.rounds):  # ABBA...: a load that drifts during the run weighs on each storage alike
            for storage in storages if round_ % 2 == 0 else list(reversed(storages)):
                figures[storage].append(await run_throughput(args, storage))
        print_storage_ratios(figures, args)
    if args.only in ("all", "authz"):
        await run_authz(args)


def _session(server) -> aiohttp.ClientSession:
    # as the admin (client certificate), keep-alive connections
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=server.tls_context(), limit=0))


async def serve_figures(server, args, expected: int, round_: int) -> dict:
    """Creates at N, list and watch figures from one running server."""
    pid = server.process.pid
    async with _session(server) as session:
        cpu_before = cpu_seconds(pid)
        creates, elapsed = await create_all(session, server.url, [f"more{round_}-{i:06d}" for i in range(args.batch)], args.concurrency,
                                            _raw_tls(server, args))
        cpu = (cpu_seconds(pid) - cpu_before) / args.batch
        lists = await list_figures(session, server.url, args.list_runs, expected + args.batch, pid)
        watch, writes, watch_cpu = await watch_latency(session, server.url, args.watchers, args.watch_writes, round_, server.tls_context(), pid)
    return {"creates": (creates, args.batch / elapsed, cpu), "lists": lists, "watch": watch, "writes": writes, "watch_cpu": watch_cpu,
            "rss": peak_rss_mib(pid)}


def print_serving(label: str, figures: dict, n: int, args) -> None:
    creates, rate, cpu = figures["creates"]
    print(f"  [{label}] creates at {n} ({args.batch} more): {rate:8.0f} creates/s   {spread(creates)}   server CPU {cpu * 1e6:6.0f} us/create")
    n += args.batch
    for page, (served, decoded, size, cpu, first, built, source) in figures["lists"].items():
        what = f"one page, {source}" if not page else f"pages of {page}, {source}"
        print(f"  [{label}] list {n} ({what}, {size / 2**20:.1f} MiB): server (to last byte) {spread(served)}   "
              f"to first byte {spread(built)}   server CPU {ms(cpu)}/list   client decode p50 {ms(statistics.median(decoded))}   "
              f"(first, untimed run: {ms(first)})")
    print(f"  [{label}] watch, {args.watchers} watchers x {args.watch_writes} writes: delivery {spread(figures['watch'])}   "
          f"(the write itself {spread(figures['writes'])})   server CPU {ms(figures['watch_cpu'])}/write and its {args.watchers} deliveries")
    print(f"  [{label}] server peak RSS {figures['rss']:.0f} MiB")


LIST_GOAL = 0.200  # seconds: issue 18's goal for a list of 10k Services from the watch cache
RATIO_GOAL = 2.0  # every figure within 2x of the first storage's (SQLite)


def storage_rows(figures: dict[str, list[dict]], services: int, watchers: int) -> list[tuple[str, dict, bool]]:
    """The compared figures: (label, value per storage: the median over its rounds, higher is better)."""
    n = next(iter(figures.values()))[0]["listed"]

    def per_storage(figure) -> dict[str, float]:
        return {storage: statistics.median(figure(f) for f in rounds) for storage, rounds in figures.items()}

    return [
        (f"fill 0 -> {services}, creates/s", per_storage(lambda f: f["fill_rate"]), True),
        (f"creates/s at {services}", per_storage(lambda f: f["batch_rate"]), True),
        (f"create p99 at {services}, ms", per_storage(lambda f: percentile(f["batch"], .99) * 1e3), False),
        ("server+etcd CPU per create, us", per_storage(lambda f: f["cpu_create"] * 1e6), False),
        ("server CPU per list (one page), ms", per_storage(lambda f: f["lists"][0][3] * 1e3), False),
        (f"list {n} (watch cache, one page) p50, ms", per_storage(lambda f: statistics.median(f["lists"][0][0]) * 1e3), False),
        (f"list {n} (watch cache, one page) p99, ms", per_storage(lambda f: percentile(f["lists"][0][0], .99) * 1e3), False),
        (f"watch fan-out to {watchers} watchers p50, ms", per_storage(lambda f: statistics.median(f["watch"]) * 1e3), False),
        (f"watch fan-out to {watchers} watchers p99, ms", per_storage(lambda f: percentile(f["watch"], .99) * 1e3), False),
    ]


def print_storage_ratios(figures: dict, args) -> None:
    """One table: each storage's figures side by side, each over the first storage's (all from
    this run), and whether issue 18's goals are met (within 2x of SQLite on every figure; a
    list of 10k Services from the watch cache in at most 200 ms, p99)."""
    storages = list(figures)
    first = storages[0]
    rounds = len(figures[first])
    print(f"\n{rounds} round(s) per storage, the order alternating (ABBA...); each figure the median over its rounds")
    print(f"{'figure':44s}" + "".join(f"{s:>12s}" for s in storages)
          + "".join(f"{s + '/' + first:>14s}" for s in storages[1:]) + "   goal")
    for label, values, higher_better in storage_rows(figures, args.services, args.watchers):
        row = f"{label:44s}" + "".join(f"{values[s]:12.1f}" for s in storages)
        verdicts = []
        for s in storages[1:]:
            ratio = values[s] / values[first]
            row += f"{ratio:13.2f}x"
            within = ratio >= 1 / RATIO_GOAL if higher_better else ratio <= RATIO_GOAL
            verdicts.append(f"{s} {'met' if within else 'MISSED'}")
        goal = (f"{'>=' if higher_better else '<='} {1 / RATIO_GOAL if higher_better else RATIO_GOAL:g}x of {first}: "
                + ", ".join(verdicts)) if verdicts else ""
        if "list" in label and "p99" in label:
            goal += ("; " if goal else "") + "<= 200 ms: " + ", ".join(
                f"{s} {'met' if values[s] <= LIST_GOAL * 1e3 else 'MISSED'}" for s in storages)
        print(row + "   " + goal)
    for s in storages:
        share = statistics.median(f["cpu_create_etcd"] for f in figures[s]) * 1e6
        if share:  # where an etcd create's CPU goes: the apiserver (its gRPC calls, watch) and the etcd process
            apiserver = statistics.median(f["cpu_create"] - f["cpu_create_etcd"] for f in figures[s]) * 1e6
            print(f"  {s}: of the CPU per create, the etcd process {share:.0f} us, the apiserver {apiserver:.0f} us (medians over rounds)")


async def run_throughput(args, storage: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="kubesvc-bench-") as tmp:
        data = Path(tmp)
        # etcd's own raft timing (100 ms heartbeats), as kubesvc's managed members run, not the
        # tests' 10 ms ticks whose idle CPU would be counted into every create
        etcd = start_etcd(tmpfs=args.etcd_tmpfs, fast_election=False) if storage == "etcd" else None
        extra = etcd.flags() if etcd else [f"--storage-backend={storage}"]
        server = start_apiserver(data, *extra)
        try:
            async with _session(server) as session:
                async with session.get(server.url + SERVICES) as response:
                    existing = len((await response.json())["items"])  # default/kubernetes
                names = [f"svc-{i:06d}" for i in range(args.services)]
                cpu_before, etcd_before, client_before = cpu_seconds(server.process.pid), etcd and cpu_seconds(etcd.process.pid), own_cpu_seconds()
                fill, fill_elapsed = await create_all(session, server.url, names, args.concurrency, _raw_tls(server, args))
                cpu_fill, etcd_fill, client_fill = cpu_seconds(server.process.pid), etcd and cpu_seconds(etcd.process.pid), own_cpu_seconds()
                batch_names = [f"batch-{i:06d}" for i in range(args.batch)]
                batch, batch_elapsed = await create_all(session, server.url, batch_names, args.concurrency, _raw_tls(server, args))
                cpu_batch, etcd_batch, client_batch = cpu_seconds(server.process.pid), etcd and cpu_seconds(etcd.process.pid), own_cpu_seconds()
            total = existing + args.services + args.batch
            print(f"storage={storage} services={args.services} concurrency={args.concurrency} client={args.client} list runs={args.list_runs}")
            print(f"  fill 0 -> {args.services}: {args.services / fill_elapsed:8.0f} creates/s   {spread(fill)}   "
                  f"server CPU {(cpu_fill - cpu_before) / args.services * 1e6:6.0f} us/create"
                  + (f" + etcd's {(etcd_fill - etcd_before) / args.services * 1e6:6.0f} us/create" if etcd else "")
                  + f"   (the bench's own CPU {(client_fill - client_before) / args.services * 1e6:4.0f} us/create)")
            print(f"  creates at {args.services} ({args.batch} more): {args.batch / batch_elapsed:8.0f} creates/s   {spread(batch)}   "
                  f"server CPU {(cpu_batch - cpu_fill) / args.batch * 1e6:6.0f} us/create"
                  + (f" + etcd's {(etcd_batch - etcd_fill) / args.batch * 1e6:6.0f} us/create" if etcd else "")
                  + f"   (the bench's own CPU {(client_batch - client_fill) / args.batch * 1e6:4.0f} us/create)")
            ours = await serve_figures(server, args, total, 0)
            ours["cpu_create"] = (cpu_batch - cpu_fill + ((etcd_batch - etcd_fill) if etcd else 0)) / args.batch
            ours["cpu_create_etcd"] = ((etcd_batch - etcd_fill) if etcd else 0) / args.batch  # etcd's own share of it
        finally:
            server.stop()
            if etcd:
                etcd.stop()
        print_serving("default", ours, total, args)
        ours.update(fill_rate=args.services / fill_elapsed, batch=batch, batch_rate=args.batch / batch_elapsed, listed=total + args.batch)
        if storage != "sqlite" or not args.peer_flags:
            return ours
        try:
            peer_server = start_apiserver(data, *extra, *args.peer_flags.split())
        except RuntimeError as exc:
            print(f"  [peer {args.peer_flags}] not run: the server did not start ({str(exc)[:200]})")
            return ours
        try:
            peer = await serve_figures(peer_server, args, total + args.batch + args.watch_writes, 1)
        finally:
            peer_server.stop()
        print_serving(f"peer {args.peer_flags}", peer, total + args.batch + args.watch_writes, args)
        for page in (0, 500):
            ratio = statistics.median(peer["lists"][page][0]) / statistics.median(ours["lists"][page][0])
            cpu_ratio = peer["lists"][page][3] / ours["lists"][page][3]
            print(f"  list ({'one page' if not page else f'pages of {page}'}), peer / default: server time p50 {ratio:5.2f}x   "
                  f"server CPU {cpu_ratio:5.2f}x")
        ratio = percentile(peer["watch"], .99) / percentile(ours["watch"], .99)
        print(f"  watch delivery, peer / default: p99 {ratio:5.2f}x   server CPU per write and its deliveries "
              f"{peer['watch_cpu'] / ours['watch_cpu']:5.2f}x")
    return ours


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
        server = APIServer(ServerConfig(data_dir=Path(tmp), storage_backend=args.storage.split(",")[0].replace("etcd", "sqlite"), secure_port=0))
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
                        await authorize_request(request)
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


def _start_with_src(data: Path, src: str | None, storage_flags: list[str]) -> RunningAPIServer:
    """An apiserver on ``storage_flags`` running the package under ``src`` (PYTHONPATH), or this tree's."""
    saved = os.environ.get("PYTHONPATH")
    if src:
        os.environ["PYTHONPATH"] = src
    try:
        return start_apiserver(data, *storage_flags)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


async def run_paired(args) -> None:
    """Server CPU per create of the tree at ``--before-src`` and of this one, measured pairwise
    at the same time (see the module docstring): on a machine others load, a figure taken a
    minute later is not comparable, a batch taken right after another mostly is."""
    if not args.before_src:
        raise SystemExit("--only paired needs --before-src DIR (the other tree's src directory)")
    storage = args.storage.split(",")[-1]  # sqlite, or etcd: each server on an etcd of its own, its CPU counted too
    if storage not in ("sqlite", "etcd"):
        raise SystemExit("--only paired: --storage sqlite or etcd")
    with tempfile.TemporaryDirectory(prefix="kubesvc-bench-") as before_dir, tempfile.TemporaryDirectory(prefix="kubesvc-bench-") as after_dir:
        etcds = {name: start_etcd(tmpfs=args.etcd_tmpfs, fast_election=False) for name in ("before", "after")} if storage == "etcd" else {}
        flags = {name: etcds[name].flags() if etcds else ["--storage-backend=sqlite"] for name in ("before", "after")}
        servers = {}
        try:
            servers = {"before": _start_with_src(Path(before_dir), args.before_src, flags["before"]),
                       "after": _start_with_src(Path(after_dir), None, flags["after"])}

            def spent(name: str) -> float:  # the server's CPU, and its etcd's
                return cpu_seconds(servers[name].process.pid) + (cpu_seconds(etcds[name].process.pid) if etcds else 0)

            sessions = {name: _session(server) for name, server in servers.items()}
            for name, server in servers.items():  # connections, caches and the IPAddress template warm
                await create_all(sessions[name], server.url, [f"warm-{i:06d}" for i in range(300)], args.concurrency, server.tls_context())
            cpu: dict[str, list[float]] = {"before": [], "after": []}
            ratios = []
            for pair in range(args.pairs):
                for name in ("before", "after") if pair % 2 == 0 else ("after", "before"):
                    server = servers[name]
                    started = spent(name)
                    await create_all(sessions[name], server.url, [f"p{pair}-{i:06d}" for i in range(args.batch)], args.concurrency,
                                     server.tls_context())
                    cpu[name].append((spent(name) - started) / args.batch)
                ratios.append(cpu["after"][-1] / cpu["before"][-1])
            for session in sessions.values():
                await session.close()
        finally:
            for server in servers.values():
                server.stop()
            for etcd in etcds.values():
                etcd.stop()
    what = "server+etcd CPU" if etcds else "server CPU"
    print(f"paired: {args.pairs} pairs of {args.batch} creates, {args.concurrency} raw TLS clients, "
          f"{'etcd (one each)' if etcds else 'SQLite'}, both servers running at once")
    for name in ("before", "after"):
        print(f"  {name:6s} ({args.before_src if name == 'before' else 'this tree'}): {what} per create median "
              f"{statistics.median(cpu[name]) * 1e6:6.0f} us   p10 {percentile(cpu[name], .1) * 1e6:6.0f} us   p90 {percentile(cpu[name], .9) * 1e6:6.0f} us")
    print(f"  after/before per pair: median {statistics.median(ratios):.3f}   p10 {percentile(ratios, .1):.3f}   p90 {percentile(ratios, .9):.3f}")


# ---- --only pod-requests ---------------------------------------------------------------------

_POD_SPEC = {"containers": [{"name": "web", "image": "busybox", "command": ["python3", "-c", "pass"], "ports": [{"containerPort": 8080}],
                             "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]}
_BENCH_NODE = "bench-node"
_OWNER_UID = "0b6c5d8e-1111-2222-3333-444455556666"


def loop_cpu_seconds(pid: int) -> float:
    """CPU time so far of the process's main thread: the event loop every request runs on."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _agent_statuses(uid: str, i: int) -> list[dict]:
    """The agent's three status merge-patches of a Pod (podworker: containers creating, started,
    ready), each carrying the uid precondition."""
    now = "2026-01-01T00:00:00Z"

    def conditions(ready: bool, started: bool) -> list[dict]:
        unready = {} if ready else {"reason": "ContainersNotReady", "message": "containers with unready status: [web]"}
        return [{"type": "PodReadyToStartContainers", "status": str(started), "lastProbeTime": None, "lastTransitionTime": now},
                {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": now},
                {"type": "Ready", "status": str(ready), "lastProbeTime": None, "lastTransitionTime": now, **unready},
                {"type": "ContainersReady", "status": str(ready), "lastProbeTime": None, "lastTransitionTime": now, **unready},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now}]

    def containers(state: dict, ready: bool) -> list[dict]:
        return [{"name": "web", "state": state, "lastState": {}, "ready": ready, "restartCount": 0, "image": "busybox", "imageID": "",
                 "started": "running" in state, **({"containerID": "kubesvc://web"} if "running" in state else {})}]

    ip = f"10.244.{i // 250}.{i % 250 + 2}"
    running = {"running": {"startedAt": now}}
    return [{"metadata": {"uid": uid}, "status": status} for status in (
        {"phase": "Pending", "conditions": conditions(False, False), "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}], "startTime": now,
         "containerStatuses": containers({"waiting": {"reason": "ContainerCreating"}}, False), "qosClass": "BestEffort"},
        {"phase": "Running", "conditions": conditions(False, True), "podIP": ip, "podIPs": [{"ip": ip}], "containerStatuses": containers(running, False)},
        {"conditions": conditions(True, True), "containerStatuses": containers(running, True)})]


def _endpoint_slice(name: str, endpoints: int) -> dict:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": "web", "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
            "addressType": "IPv4", "ports": [{"name": "", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [f"10.244.{k // 250}.{k % 250 + 2}"], "conditions": {"ready": True, "serving": True, "terminating": False},
                           "nodeName": _BENCH_NODE, "targetRef": {"kind": "Pod", "namespace": "default", "name": f"web-{k}"}} for k in range(endpoints)]}


class PodRequests:
    """One apiserver and the clients of ``--only pod-requests``: the admin (controllers, scheduler)
    and the node's agent (``system:node:bench-node``, Node authorizer and NodeRestriction)."""

    def __init__(self, server: RunningAPIServer, admin, node):
        self.server, self.admin, self.node = server, admin, node

    @classmethod
    async def start(cls, data: Path, src: str | None) -> "PodRequests":
        from kubesvc.client.kubeconfig import load_kubeconfig
        from kubesvc.client.rest import RestClient

        server = _start_with_src(data, src, ["--storage-backend=sqlite", "--enable-admission-plugins=ServiceAccount,NodeRestriction"])
        admin = RestClient(load_kubeconfig(server.kubeconfig))
        node = RestClient(load_kubeconfig(server.node_kubeconfig(_BENCH_NODE)))
        await admin.create("/api/v1/namespaces/default/serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
        await node.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": _BENCH_NODE}})
        return cls(server, admin, node)

    async def close(self) -> None:
        await self.admin.close()
        await self.node.close()
        self.server.stop()

    async def phases(self, tag: str, pods: int, concurrency: int, slice_endpoints: int):
        """One phase of ``pods`` requests per kind, in a Pod's order: yields (kind, loop CPU
        seconds per request) after each, so that two servers' phases can take turns."""
        pid, ns, admin, node = self.server.process.pid, "/api/v1/namespaces/default", self.admin, self.node
        gate = asyncio.Semaphore(concurrency)

        async def phase(send, count: int = pods) -> tuple[list, float]:
            async def one(i: int):
                async with gate:
                    return await send(i)
            started = loop_cpu_seconds(pid)
            out = await asyncio.gather(*(one(i) for i in range(count)))
            return out, (loop_cpu_seconds(pid) - started) / count

        owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": _OWNER_UID, "controller": True, "blockOwnerDeletion": True}]
        created, cost = await phase(lambda i: admin.create(f"{ns}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{tag}-{i}", "labels": {"app": "web"}, "ownerReferences": owner}, "spec": _POD_SPEC}))
        yield "POST pods", cost
        uids = [pod["metadata"]["uid"] for pod in created]
        _, cost = await phase(lambda i: admin.create(f"{ns}/pods/{tag}-{i}/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": f"{tag}-{i}"}, "target": {"kind": "Node", "name": _BENCH_NODE}}))
        yield "POST pods/binding", cost
        _, cost = await phase(lambda i: node.create(f"{ns}/serviceaccounts/default/token", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": None, "expirationSeconds": 3607, "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": f"{tag}-{i}", "uid": uids[i]}}}))
        yield "POST serviceaccounts/token", cost
        for step, what in enumerate(("Pending", "Running", "Ready")):
            _, cost = await phase(lambda i, step=step: node.patch(f"{ns}/pods/{tag}-{i}/status", _agent_statuses(uids[i], i)[step], "merge"))
            yield f"PATCH pods/status ({what})", cost
        _, cost = await phase(lambda i: admin.create(f"{ns}/events", {
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{tag}-{i}.bench"}, "reason": "Scheduled", "type": "Normal", "count": 1,
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": f"{tag}-{i}", "uid": uids[i], "apiVersion": "v1"},
            "message": f"Successfully assigned default/{tag}-{i} to {_BENCH_NODE}", "source": {"component": "default-scheduler"},
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z", "reportingComponent": "default-scheduler"}))
        yield "POST events", cost
        _, cost = await phase(lambda i: admin.patch(f"{ns}/events/{tag}-{i}.bench", {"count": 2, "lastTimestamp": "2026-01-01T00:00:01Z"}, "strategic"))
        yield "PATCH events", cost
        slices = max(1, pods // 4)  # PUTs of one slice each (one at a time per slice: no conflicts), enough for the clock tick
        bodies = []
        for i in range(slices):
            live = await admin.create("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", _endpoint_slice(f"{tag}-{i}", slice_endpoints))
            conditions = live["endpoints"][i % slice_endpoints]["conditions"]
            conditions["ready"] = not conditions["ready"]
            bodies.append(live)
        _, cost = await phase(lambda i: admin.update(f"/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/{tag}-{i}", bodies[i]), slices)
        yield "PUT endpointslices", cost
        _, cost = await phase(lambda i: admin.get(f"{ns}/pods/{tag}-{i}"))
        yield "GET pods", cost
        for i in range(pods):
            await admin.delete(f"{ns}/pods/{tag}-{i}", {"gracePeriodSeconds": 0})


async def run_pod_requests(args) -> None:
    """``--only pod-requests`` (see the module docstring)."""
    names = ("before", "after") if args.before_src else ("after",)
    with tempfile.TemporaryDirectory(prefix="kubesvc-bench-") as before_dir, tempfile.TemporaryDirectory(prefix="kubesvc-bench-") as after_dir:
        servers: dict[str, PodRequests] = {}
        try:
            if args.before_src:
                servers["before"] = await PodRequests.start(Path(before_dir), args.before_src)
            servers["after"] = await PodRequests.start(Path(after_dir), None)
            for name, server in servers.items():  # connections, caches, the ServiceAccount's first token
                async for _ in server.phases("warm", 20, args.concurrency, args.slice_endpoints):
                    pass
            cost: dict[str, list[dict[str, float]]] = {name: [] for name in names}
            for round_ in range(args.rounds):
                # the servers take turns phase by phase (the order alternating by round), so the two
                # figures of a kind meet the same moment of the machine's load
                order = names if round_ % 2 == 0 else tuple(reversed(names))
                runs = {name: servers[name].phases(f"{name[0]}{round_}", args.pods, args.concurrency, args.slice_endpoints) for name in order}
                for name in order:
                    cost[name].append({})
                done = False
                while not done:
                    for name in order:
                        try:
                            kind, spent = await runs[name].__anext__()
                        except StopAsyncIteration:
                            done = True
                            continue
                        cost[name][-1][kind] = spent
        finally:
            for server in servers.values():
                await server.close()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"pod-requests: the apiserver event loop's CPU per request, median of {args.rounds} rounds of {args.pods} requests per kind, "
          f"{args.concurrency} clients, EndpointSlices of {args.slice_endpoints} endpoints (load {load})")
    kinds = list(cost["after"][0])
    for kind in kinds:
        after = [c[kind] for c in cost["after"]]
        line = f"  {kind:34s} {statistics.median(after) * 1e3:6.2f} ms"
        if args.before_src:
            before = [c[kind] for c in cost["before"]]
            ratios = [a / b for a, b in zip(after, before) if b]
            line = (f"  {kind:34s} before {statistics.median(before) * 1e3:6.2f} ms   after {statistics.median(after) * 1e3:6.2f} ms   "
                    f"after/before {statistics.median(ratios) if ratios else float('nan'):.3f}")
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--services", type=int, default=10000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--watchers", type=int, default=100)
    parser.add_argument("--watch-writes", type=int, default=50)
    parser.add_argument("--batch", type=int, default=1000, help="creates timed after the fill (latency at N)")
    parser.add_argument("--client", choices=["raw", "aiohttp"], default="raw",
                        help="creates from raw keep-alive TLS connections with pre-encoded bodies (the server's figure), "
                             "or from an aiohttp session (what a Python client sees, its own encode and parse included)"),
    parser.add_argument("--list-runs", type=int, default=10)
    parser.add_argument("--peer-flags", default="--watch-cache=false",
                        help="apiserver flags of the peer serving the same data in the same run ('' for none)")
    parser.add_argument("--storage", default="sqlite",
                        help="sqlite, memory or etcd, or a comma list of them measured one after another (ratios to the first)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="throughput runs per storage, alternating the order (ABBA...); figures are medians over rounds")
    parser.add_argument("--etcd-tmpfs", action="store_true", help="etcd's data on tmpfs (no fsync cost) instead of disk")
    parser.add_argument("--only", choices=["all", "throughput", "authz", "paired", "pod-requests"], default="all")
    parser.add_argument("--before-src", default="", help="--only paired or pod-requests: the src directory of the tree to compare this one with")
    parser.add_argument("--pairs", type=int, default=20, help="--only paired: batches per server (each of --batch creates)")
    parser.add_argument("--pods", type=int, default=100, help="--only pod-requests: requests of each kind per round")
    parser.add_argument("--slice-endpoints", type=int, default=100, help="--only pod-requests: endpoints of each EndpointSlice PUT")
    parser.add_argument("--role-bindings", type=int, default=1000)
    parser.add_argument("--authz-runs", type=int, default=5)
    parser.add_argument("--authz-requests", type=int, default=2000, help="requests per identity and run")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
