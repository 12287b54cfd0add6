#!/usr/bin/env python3
"""The whole chain: Pod Ready -> reachable through its ClusterIP ("network programming latency"),
hop by hop, and 100 Pods created -> all bound.

In a fresh network namespace (``ks-bench-e2e-<hex>``) it starts ``kubesvc up`` as a user does
(``nsenter --net``, so the Pod namespaces the agent makes are ordinary host namespaces), then
re-runs its measuring half inside that namespace (``nsenter --net ... bench/e2e.py --inside``).
Each of ``--runs`` rounds:

1. creates ``--pods`` Services, each selecting exactly one Pod-to-be (port 80 -> 8080);
2. watches Pods and EndpointSlices from the current resourceVersion and creates the ``--pods``
   Pods at once (``--concurrency`` requests in flight): a small stdlib TCP server answering
   with the Pod's name and the wall-clock time of the first connection it accepted (the
   kubelet-style ``tcpSocket`` readiness probe, period 1 s), so Ready means listening;
3. for each Pod, from the moment the watch shows it Ready, connects to its Service's ClusterIP
   every ``--poll-interval`` seconds (all Pods concurrently) until the answer is that Pod's;
4. meanwhile scrapes the proxy's ``/metrics`` (127.0.0.1:10249) every ``--scrape-interval``:
   each change of ``kubeproxy_sync_proxy_rules_last_timestamp_seconds`` is one finished sync
   (its end; its length from ``sync_proxy_rules_duration_seconds`` sum/count deltas);
5. deletes the round's Pods and Services and waits until they are gone.

The hops of one Pod (upstream's chain: kubelet status manager -> EndpointSlice controller ->
kube-proxy's informer and BoundedFrequencyRunner -> the kernel):

* **agent**: the probe's connection accepted by the Pod -> the watch shows ``Ready`` True
  (probe result, status PATCH, watch delivery);
* **slice**: Ready in the API -> an EndpointSlice shows the Pod's endpoint ready (controller's
  informer, queue, reconcile, slice write, watch delivery);
* **proxy wait**: that slice -> the start of the proxy sync that programmed it (the proxy's
  informer, then the runner: ``minSyncPeriod`` after the previous sync at most);
* **proxy sync**: that sync's length;
* **kernel**: the sync's end -> the first successful connection (at most ``--poll-interval`` late).

"The sync that programmed it" is the latest sync that started before the first successful
connection (syncs are at least ``minSyncPeriod`` apart). The proxy's watch may see a slice
before the bench's does, so "proxy wait" can be slightly negative; "kernel" includes the
bench's own lateness (a try every ``--poll-interval``; tries overlap, so a SYN lost before the
rules changed delays nothing). Also printed: the proxy's own
``network_programming_duration_seconds`` (trigger-time annotation -> sync end, upstream's
metric; its trigger times are whole seconds, so it reads coarse), the gaps between syncs, and
from the first Pod create to the last Pod bound. At the end, SIGINT (Ctrl-C) stops ``kubesvc
up``; the namespace is checked for leftovers and deleted. Figures pool all rounds; each round's
p99 is printed too.

    python3 bench/e2e.py --pods 100
    python3 bench/e2e.py --pods 20 --runs 1 --poll-interval 0.005

``--deployment N`` measures workloads instead (issue 20): each round creates one Deployment of
``N`` replicas of the same server behind one ClusterIP Service. The node is cordoned first
(``kubectl cordon``: ``spec.unschedulable``), so the ReplicaSet controller creates all N Pods
(timed: **created -> N Pods exist**, its slow-start batches 1, 2, 4, ...) and the scheduler finds
no place for any of them (each gets ``PodScheduled`` False, ``Unschedulable``); then the node is
uncordoned and the scheduler, woken by the Node change as kube-scheduler is, places the whole
backlog at once: **scheduler binds per second** is first bind -> last bind of that backlog (the
scheduler's own rate; without the backlog, binds follow the ReplicaSet's creates one by one and
the figure measured the creation pace, 3.7-4.9/s under load), with each Pod's uncordon -> bound
and **uncordon -> all N Ready** from the Pod watch and the Deployment's status; then **a
rolling update** (a new template: ``kubectl set image``'s
PATCH) until the Deployment reports every replica updated and available; then **deleting the
Deployment** (background propagation: the garbage collector removes its ReplicaSets and Pods)
until no Pod is left, counting the **proxy syncs** from the delete until its last sync that
ran while the Service still had endpoints in the slice watch, plus one (upstream's
``minSyncPeriod`` is what batches the churn of N terminating Pods into a handful). Figures are
medians and p99 over ``--runs`` rounds.

    python3 bench/e2e.py --deployment 100 --runs 3

With ``--deployment``, the requests the apiserver served from the uncordon until every Pod was
bound are printed per round (its /metrics: count and mean latency), and ``--profile DIR``
records each component with py-spy over that window (raw collapsed stacks, idle samples off:
``DIR/bind-<round>-<component>.txt``), to see where the CPU per bind goes. The CPU per bind
of each component is printed with its main thread's alone ("<component> (event loop)", from
/proc: the one core its requests, watches and handlers share; a profiler's samples under load
count threads waiting for a CPU as busy, /proc does not). The backlog's
longest pauses between two binds are printed too: a rate bounded by CPU per bind binds evenly,
one held up by a stalled component shows a few long pauses (on a loaded machine, 0.2-1.2 s).
Beside them, per bind, the time each component's event loop was ready to run and waited for
a CPU (the kernel's run-queue delay, /proc/<pid>/task/<pid>/schedstat), and how busy the
machine's CPUs were meanwhile: with other work on the machine (2 cores here, shared), a loop
that waits 3x as long as it runs binds at a third of its own rate, and its pauses are the
load's (seen: the apiserver's loop running 4.4-5.2 ms and waiting 12-17 ms per bind, every CPU
busy).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]

from upns import UpFailed, UpInNamespace, component_of, cpu_report, cpu_seconds  # noqa: E402 - bench/upns.py, after the path

NAMESPACE = "default"
LABEL = "bench-e2e"
METRICS_URL = "http://127.0.0.1:10249/metrics"
# The Pod's server: its name and when it accepted its first connection (the readiness probe's).
# A thread per connection: the kubelet-style probe connects and only closes once the agent gets
# round to it, and a serial server would keep the bench's requests waiting behind it meanwhile.
SERVER = """\
import os, socket, threading, time
name = os.environ["POD_NAME"].encode()
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("", 8080))
sock.listen(128)
first = None

def answer(conn):
    body = name + b" " + first + b"\\n"
    conn.settimeout(2)
    try:
        conn.recv(1024)
        conn.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n%s" % (len(body), body))
    except OSError:
        pass
    conn.close()

while True:
    conn, _ = sock.accept()
    if first is None:
        first = b"%.6f" % time.time()
    threading.Thread(target=answer, args=(conn,), daemon=True).start()
"""
SYNC_METRICS = re.compile(r'^kubeproxy_(sync_proxy_rules_last_timestamp_seconds|sync_proxy_rules_duration_seconds_sum|'
                          r'sync_proxy_rules_duration_seconds_count)\{ip_family="IPv4"\} (\S+)$', re.M)
PROGRAMMING_BUCKET = re.compile(r'^kubeproxy_network_programming_duration_seconds_bucket\{ip_family="IPv4",le="([^"]+)"\} (\S+)$', re.M)
API_METRIC = re.compile(r'^apiserver_request_(total|duration_seconds_sum)\{([^}]*)\} (\S+)$', re.M)
API_LABEL = re.compile(r'(\w+)="([^"]*)"')
HOPS = (("agent", "probe accepted -> Ready in the API (agent status write)"),
        ("slice", "Ready in the API -> EndpointSlice endpoint ready"),
        ("wait", "slice ready -> proxy sync starts (informer + runner)"),
        ("sync", "proxy sync (start -> end)"),
        ("kernel", "proxy sync end -> first connection through the ClusterIP"),
        ("latency", "Pod Ready -> reachable via ClusterIP"))
SLOWEST = 5  # Pods per round whose hops are printed one by one


def namespace_components() -> list[tuple[int, str, list[str]]]:
    """(pid, component, /proc/<pid>/stat fields after the name) of every ``kubesvc`` process in
    this process's network namespace (the measuring half runs in ``up``'s; other ``up``s on the
    machine are in theirs)."""
    own, found = os.stat("/proc/self/ns/net").st_ino, []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino != own:
                continue
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found.append((int(entry), component_of(int(entry)), fields))
    return found


def components_cpu() -> dict[str, float]:
    """CPU seconds so far of each ``kubesvc`` component in this process's network namespace,
    and of its main thread alone as "<component> (event loop)": the loop is the one core a
    component's requests, watches and handlers share, its other threads (SQLite's checkpointer,
    the agent's netlink, namespace and file work) run beside it. Read from /proc, so what the
    machine's load does not inflate, unlike a sampling profiler's counts of runnable threads."""
    tick, totals = os.sysconf("SC_CLK_TCK"), {}
    for pid, name, fields in namespace_components():
        if name in ("apiserver", "controller-manager", "agent", "proxy"):
            totals[name] = totals.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
            with contextlib.suppress(OSError):
                main = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                totals[f"{name} (event loop)"] = totals.get(f"{name} (event loop)", 0.0) + (int(main[11]) + int(main[12])) / tick
    return totals


def components_waited() -> dict[str, float]:
    """Seconds so far that each ``kubesvc`` component's event loop (its main thread) was ready
    to run and waited for a CPU (the scheduler's run-queue delay, ``/proc/<pid>/task/<pid>/schedstat``
    second field), and as "machine busy" the CPU seconds every CPU of the machine spent busy
    (``/proc/stat``): a pause in which a loop waited, on a machine whose CPUs were all busy, is
    the machine's load, not the component's own work."""
    waited = {}
    for pid, name, _ in namespace_components():
        if name in ("apiserver", "controller-manager", "agent", "proxy"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                waited[name] = waited.get(name, 0.0) + int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[1]) / 1e9
    cpu = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    waited["machine busy"] = (sum(cpu[:8]) - cpu[3] - cpu[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait (guest is in user)
    return waited


def component_pids() -> dict[str, int]:
    """The pid of each ``kubesvc`` component in this process's network namespace."""
    return {name: pid for pid, name, _ in namespace_components() if name in ("apiserver", "controller-manager", "agent")}


class Profiles:
    """``--profile DIR``: py-spy records each component (raw collapsed stacks, idle off) over a
    window, e.g. uncordon -> all bound, to see where the CPU per bind goes."""

    def __init__(self, directory: str | None, label: str):
        self.directory, self.label, self.children = directory, label, []

    async def start(self) -> None:
        if not self.directory:
            return
        os.makedirs(self.directory, exist_ok=True)
        for name, pid in component_pids().items():
            out = os.path.join(self.directory, f"{self.label}-{name}.txt")
            self.children.append(subprocess.Popen(["py-spy", "record", "-p", str(pid), "-r", "250", "-f", "raw", "-o", out, "--nonblocking"],
                                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        await asyncio.sleep(1.0)  # py-spy attached

    async def stop(self) -> None:
        for child in self.children:
            child.send_signal(2)
        for child in self.children:
            await asyncio.to_thread(child.wait)
        self.children = []


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def figures(values: list[float], unit: str = "ms") -> str:
    scale = 1000.0 if unit == "ms" else 1.0
    v = [x * scale for x in values]
    return (f"min {min(v):8.1f} {unit}   p50 {percentile(v, 0.5):8.1f} {unit}   p90 {percentile(v, 0.9):8.1f} {unit}   p99 {percentile(v, 0.99):8.1f} {unit}   "
            f"max {max(v):8.1f} {unit}")


def bucket_quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """The upper bound of the bucket holding quantile ``q`` of a cumulative histogram delta."""
    total = buckets[-1][1] if buckets else 0
    if not total:
        return None
    for bound, count in buckets:
        if count >= q * total:
            return bound
    return None


def api_requests(text: str) -> dict[str, list[float]]:
    """``"VERB resource[/subresource]": [requests, seconds spent]`` from the apiserver's /metrics."""
    found: dict[str, list[float]] = {}
    for metric, labels, value in API_METRIC.findall(text):
        label = dict(API_LABEL.findall(labels))
        resource = label.get("resource", "") + (f"/{label['subresource']}" if label.get("subresource") else "")
        entry = found.setdefault(f"{label.get('verb', '')} {resource}", [0.0, 0.0])
        entry[0 if metric == "total" else 1] += float(value)
    return found


def api_report(before: dict[str, list[float]], after: dict[str, list[float]], most: int = 8) -> str:
    """The round's busiest request kinds: count and mean server latency."""
    rows = []
    for kind, (count, seconds) in after.items():
        was = before.get(kind, [0.0, 0.0])
        n, spent = count - was[0], seconds - was[1]
        if n > 0 and not kind.startswith("WATCH"):
            rows.append((n, kind, spent / n))
    rows.sort(reverse=True)
    return ", ".join(f"{kind} {n:.0f} ({mean * 1000:.0f} ms)" for n, kind, mean in rows[:most])


# ---------------------------------------------------------------------------------------------
# the measuring half (inside the namespace)


def service_body(run: int, i: int) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"e2e-{run}-{i}", "namespace": NAMESPACE},
            "spec": {"selector": {LABEL: f"r{run}-p{i}"}, "ports": [{"protocol": "TCP", "port": 80, "targetPort": 8080}]}}


def pod_body(run: int, i: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"e2e-{run}-{i}", "namespace": NAMESPACE, "labels": {LABEL: f"r{run}-p{i}"}},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "server", "image": "registry.k8s.io/e2e-test-images/agnhost:2.52",
                                     "command": ["python3", "-S", "-u", "-c", SERVER],
                                     "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                                     "ports": [{"containerPort": 8080}],
                                     "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]}}


async def attempt(host: str, timeout: float) -> tuple[str | None, str]:
    """One connection to ``host``:80 and ``GET /``: the body (or None) and, for none, why
    ("refused", "timeout", an errno name, "empty")."""
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
        return body.strip() or None, "empty"
    except TimeoutError:
        return None, "timeout"
    except ConnectionRefusedError:
        return None, "refused"
    except OSError as err:
        return None, errno.errorcode.get(err.errno or 0, "error")
    finally:
        sock.close()


class SyncScraper:
    """The proxy's finished syncs from its ``/metrics``: (start, end) on this process's monotonic
    clock, one per change of the last-sync timestamp."""

    def __init__(self, interval: float):
        self.interval = interval
        self.syncs: list[tuple[float, float]] = []
        self.scrapes = 0
        self.merged = 0  # syncs that finished between two scrapes with another one (a slow scrape)
        self._last: dict[str, float] = {}
        self._wall_offset = time.time() - time.monotonic()

    async def text(self, session) -> str:
        async with session.get(METRICS_URL) as response:
            return await response.text()

    def record(self, text: str) -> None:
        values = {name: float(value) for name, value in SYNC_METRICS.findall(text)}
        last, self._last = self._last, values
        stamp = values.get("sync_proxy_rules_last_timestamp_seconds")
        if not last or stamp is None or stamp == last.get("sync_proxy_rules_last_timestamp_seconds"):
            return
        runs = values["sync_proxy_rules_duration_seconds_count"] - last["sync_proxy_rules_duration_seconds_count"]
        self.merged += max(0, int(runs) - 1)
        took = (values["sync_proxy_rules_duration_seconds_sum"] - last["sync_proxy_rules_duration_seconds_sum"]) / max(runs, 1)
        end = stamp - self._wall_offset
        self.syncs.append((end - took, end))

    async def run(self) -> None:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            while True:
                try:
                    self.record(await self.text(session))
                    self.scrapes += 1
                except (aiohttp.ClientError, OSError, KeyError):
                    pass
                await asyncio.sleep(self.interval)

    async def programming_buckets(self) -> list[tuple[float, float]]:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            text = await self.text(session)
        return [(float(bound), float(count)) for bound, count in PROGRAMMING_BUCKET.findall(text) if bound != "+Inf"]


async def one_round(client, run: int, args) -> dict:
    from kubesvc.client.rest import ENDPOINTSLICES, PODS, SERVICES

    n = args.pods
    wall_offset = time.time() - time.monotonic()
    created: dict[str, float] = {}
    scheduled: dict[str, float] = {}
    has_ip: dict[str, float] = {}
    ready: dict[str, float] = {}
    slice_ready: dict[str, float] = {}
    accepted: dict[str, float] = {}
    reached: dict[str, float] = {}
    failures: dict[str, list[tuple[float, str]]] = {}  # each failed attempt: when it began, why
    attempts = {"count": 0}
    vips: dict[str, str] = {}
    tasks: list[asyncio.Task] = []
    all_reached = asyncio.Event()

    async def poll(name: str) -> None:
        """A connection to the Pod's ClusterIP begun every ``--poll-interval``, whether or not the
        one before has finished (a SYN lost before the rules changed must not hold back the next
        try), until one is answered by this Pod; the Pod was reached when the earliest such
        try began (tries still in flight are waited for: an earlier one may answer last)."""
        vip = vips[name]
        answered = asyncio.Event()
        tries: set[asyncio.Task] = set()

        async def one(started: float) -> None:
            attempts["count"] += 1
            body, why = await attempt(vip, args.attempt_timeout)
            answer = (body or "").split()
            if answer and answer[0] == name:
                if started < reached.get(name, float("inf")):
                    reached[name] = started
                    if len(answer) > 1:
                        accepted[name] = float(answer[1]) - wall_offset
                answered.set()
            else:
                failures.setdefault(name, []).append((started, why if body is None else "other Pod"))

        next_at = time.monotonic()
        while not answered.is_set():
            task = asyncio.create_task(one(time.monotonic()))
            tries.add(task)
            task.add_done_callback(tries.discard)
            next_at = max(next_at + args.poll_interval, time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(answered.wait(), next_at - time.monotonic())
        await asyncio.gather(*tries, return_exceptions=True)
        if len(reached) == n:
            all_reached.set()

    def start_polling(name: str) -> None:
        # From Ready on: nothing routes to a Pod before (the proxy programs ready endpoints
        # only), and idle polling would take CPU from the system under test.
        tasks.append(asyncio.create_task(poll(name)))

    def observe_pod(pod: dict) -> None:
        name = pod["metadata"]["name"]
        if name not in vips:
            return
        status = pod.get("status") or {}
        now = time.monotonic()
        if (pod.get("spec") or {}).get("nodeName") and name not in scheduled:
            scheduled[name] = now
        if status.get("podIP") and name not in has_ip:
            has_ip[name] = now
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        if conditions.get("Ready") == "True" and name not in ready:
            ready[name] = now
            start_polling(name)

    slice_writes: list[float] = []  # when the watch showed each change of one of this round's slices

    def observe_slice(slice_: dict) -> None:
        now = time.monotonic()
        if (slice_["metadata"].get("labels") or {}).get("kubernetes.io/service-name") in vips:
            slice_writes.append(now)
        for endpoint in slice_.get("endpoints") or []:
            name = (endpoint.get("targetRef") or {}).get("name")
            if name in vips and name not in slice_ready and (endpoint.get("conditions") or {}).get("ready"):
                slice_ready[name] = now

    services, pods, slices = client.resource(SERVICES), client.resource(PODS), client.resource(ENDPOINTSLICES)
    semaphore = asyncio.Semaphore(args.concurrency)

    async def create_service(i: int) -> None:
        async with semaphore:
            obj = await services.create(service_body(run, i))
            vips[f"e2e-{run}-{i}"] = obj["spec"]["clusterIP"]

    began = time.monotonic()
    await asyncio.gather(*(create_service(i) for i in range(n)))
    print(f"  round {run}: {n} Services created in {time.monotonic() - began:.2f} s", flush=True)

    async def watch(resource, observe) -> None:
        version = (await resource.list(NAMESPACE))["metadata"]["resourceVersion"]
        while True:
            async for kind, obj in resource.watch(NAMESPACE, resource_version=version, timeout_seconds=3600):
                version = obj.get("metadata", {}).get("resourceVersion", version)
                if kind in ("ADDED", "MODIFIED"):
                    observe(obj)

    watchers = [asyncio.create_task(watch(pods, observe_pod)), asyncio.create_task(watch(slices, observe_slice))]
    scraper = SyncScraper(args.scrape_interval)
    scraping = asyncio.create_task(scraper.run())
    programmed_before = await scraper.programming_buckets()
    await asyncio.sleep(0.5)  # both watches open, a first scrape taken

    async def create_pod(i: int) -> None:
        async with semaphore:
            await pods.create(pod_body(run, i))
            created[f"e2e-{run}-{i}"] = time.monotonic()

    api_before = api_requests(await client.get("/metrics"))
    first_create = time.monotonic()
    await asyncio.gather(*(create_pod(i) for i in range(n)))
    print(f"  round {run}: {n} Pods created in {time.monotonic() - first_create:.2f} s", flush=True)
    try:
        await asyncio.wait_for(all_reached.wait(), args.timeout)
    except TimeoutError:
        print(f"  round {run}: timed out after {args.timeout} s: {len(ready)} Ready, {len(reached)} reachable", flush=True)
    wall = max(reached.values(), default=time.monotonic()) - first_create
    await asyncio.sleep(2 * args.scrape_interval + 0.05)  # the last sync's metrics
    programmed_after = await scraper.programming_buckets()
    api = api_report(api_before, api_requests(await client.get("/metrics")))
    for task in [*watchers, scraping, *tasks]:
        task.cancel()
    await asyncio.gather(*watchers, scraping, *tasks, return_exceptions=True)

    hops: dict[str, list[float]] = {key: [] for key, _ in HOPS}
    slowest = []
    during_sync: list[float] = []  # the proxy waits of Pods whose slice came while a sync ran
    last_failures: dict[str, int] = {}  # the last failed attempt before reaching: why, begun before or after the sync's end
    for name, at in reached.items():
        if name not in ready:
            continue
        hops["latency"].append(at - ready[name])
        own: dict[str, float] = {"latency": at - ready[name]}  # this Pod's hops, for the slowest Pods' lines
        slowest.append((name, own))
        if name in accepted:
            hops["agent"].append(own.setdefault("agent", ready[name] - accepted[name]))
        if name in slice_ready:
            hops["slice"].append(own.setdefault("slice", slice_ready[name] - ready[name]))
            # the EndpointSlice controller's backlog: Pods Ready before this one and not yet in a
            # slice when it became Ready, and the slice writes it made meanwhile
            own["ahead"] = sum(1 for p, t in ready.items() if t < ready[name] and slice_ready.get(p, float("inf")) > ready[name])
            own["writes"] = sum(1 for t in slice_writes if ready[name] < t < slice_ready[name])
        sync = max((s for s in scraper.syncs if s[0] <= at), default=None)
        if sync is not None and name in slice_ready:
            hops["wait"].append(own.setdefault("wait", sync[0] - slice_ready[name]))
            hops["sync"].append(own.setdefault("sync", sync[1] - sync[0]))
            hops["kernel"].append(own.setdefault("kernel", at - sync[1]))
            # a slice the proxy got while a sync ran waits for that sync's end + minSyncPeriod
            # (upstream's runner: min interval from the end of one run to the next's start)
            if any(start < slice_ready[name] < end for start, end in scraper.syncs):
                during_sync.append(own["wait"])
            failed_at, why = max(((t, w) for t, w in failures.get(name, []) if t < at), default=(None, "none"))
            if failed_at is not None:
                when = "after" if failed_at >= sync[1] else "before"
                last_failures[f"{why} {when}"] = last_failures.get(f"{why} {when}", 0) + 1
    starts = [s for s, _ in scraper.syncs]
    ends = [e for _, e in scraper.syncs]
    gaps = [start - end for start, end in zip(starts[1:], ends)]
    before = dict(programmed_before)
    programmed = [(bound, count - before.get(bound, 0.0)) for bound, count in programmed_after]
    bound_times = [scheduled[name] for name in scheduled if name in created]

    # this round's objects away before the next round
    await asyncio.gather(*(pods.delete(f"e2e-{run}-{i}", NAMESPACE) for i in range(n)), return_exceptions=True)
    await asyncio.gather(*(services.delete(f"e2e-{run}-{i}", NAMESPACE) for i in range(n)), return_exceptions=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        left = [p for p in (await pods.list(NAMESPACE))["items"] if p["metadata"]["name"].startswith(f"e2e-{run}-")]
        if not left:
            break
        await asyncio.sleep(0.5)

    return {"pods": n, "wall": wall, "attempts": attempts["count"],
            "ready": [ready[name] - created[name] for name in ready if name in created],
            "scheduled": [scheduled[name] - created[name] for name in scheduled if name in created],
            "all_bound": (max(bound_times) - first_create) if len(bound_times) == n else None,
            "ip": [has_ip[name] - created[name] for name in has_ip if name in created],
            "hops": hops, "reached": len(reached), "ready_count": len(ready),
            "syncs": len(scraper.syncs), "scrapes": scraper.scrapes, "merged_syncs": scraper.merged, "sync_gaps": gaps,
            "api": api,
            "programming": {"p50": bucket_quantile(programmed, 0.5), "p99": bucket_quantile(programmed, 0.99),
                            "count": programmed[-1][1] if programmed else 0},
            "last_failures": last_failures, "negative": sum(1 for v in hops["latency"] if v < 0), "during_sync": during_sync,
            "slowest": sorted(slowest, key=lambda kv: -kv[1]["latency"])[:SLOWEST]}


DEPLOYMENT = "e2e-web"


def deployment_body(replicas: int, version: str) -> dict:
    template = pod_body(0, 0)
    template["metadata"] = {"labels": {LABEL: DEPLOYMENT}}
    template["spec"]["containers"][0]["image"] = f"registry.k8s.io/e2e-test-images/agnhost:{version}"
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {LABEL: DEPLOYMENT}}, "template": template}}


async def deployment_round(client, run: int, args) -> dict:
    """One Deployment of ``--deployment`` replicas: created -> all Ready, binds/s, a rolling
    update, and the proxy syncs that deleting it takes."""
    from kubesvc.client.rest import ENDPOINTSLICES, NODES, PODS, SERVICES, Resource

    deployments = client.resource(Resource("apps", "v1", "deployments", True, "Deployment"))
    nodes = client.resource(NODES)
    pods, services, slices = client.resource(PODS), client.resource(SERVICES), client.resource(ENDPOINTSLICES)
    n = args.deployment
    seen: dict[str, float] = {}  # a Pod's first event (its creation, to the watch's resolution)
    unschedulable: set[str] = set()  # Pods the scheduler reported PodScheduled False (the backlog)
    cpu_at: dict[str, dict[str, float]] = {}  # components' CPU seconds at the uncordon and when the last of the backlog is bound
    waited_at: dict[str, dict[str, float]] = {}  # their event loops' seconds waiting for a CPU, and the machine's busy CPU seconds, at the same moments
    ready: dict[str, float] = {}
    bound: dict[str, float] = {}
    gone: dict[str, float] = {}
    endpoints_seen: list[tuple[float, int]] = []  # (when, ready endpoints of the Service in its slices)
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
               "spec": {"selector": {LABEL: DEPLOYMENT}, "ports": [{"protocol": "TCP", "port": 80, "targetPort": 8080}]}}
    await services.create(service)

    def observe_pod(kind: str, pod: dict) -> None:
        name, now = pod["metadata"]["name"], time.monotonic()
        if kind == "DELETED":
            gone.setdefault(name, now)
            return
        seen.setdefault(name, now)
        if (pod.get("spec") or {}).get("nodeName"):
            bound.setdefault(name, now)
            if len(bound) == n and "bound" not in cpu_at:
                cpu_at["bound"], waited_at["bound"] = components_cpu(), components_waited()
        conditions = {c.get("type"): c.get("status") for c in (pod.get("status") or {}).get("conditions") or []}
        if conditions.get("PodScheduled") == "False":
            unschedulable.add(name)
        if conditions.get("Ready") == "True":
            ready.setdefault(name, now)

    slice_endpoints: dict[str, int] = {}

    def observe_slice(kind: str, slice_: dict) -> None:
        if (slice_["metadata"].get("labels") or {}).get("kubernetes.io/service-name") != DEPLOYMENT:
            return
        name = slice_["metadata"]["name"]
        if kind == "DELETED":
            slice_endpoints.pop(name, None)
        else:
            slice_endpoints[name] = sum(1 for e in slice_.get("endpoints") or [] if (e.get("conditions") or {}).get("ready"))
        endpoints_seen.append((time.monotonic(), sum(slice_endpoints.values())))

    async def watch(resource, observe) -> None:
        version = (await resource.list(NAMESPACE))["metadata"]["resourceVersion"]
        while True:
            async for kind, obj in resource.watch(NAMESPACE, resource_version=version, timeout_seconds=3600):
                version = obj.get("metadata", {}).get("resourceVersion", version)
                observe(kind, obj)

    watchers = [asyncio.create_task(watch(pods, observe_pod)), asyncio.create_task(watch(slices, observe_slice))]
    scraper = SyncScraper(args.scrape_interval)
    scraping = asyncio.create_task(scraper.run())
    await asyncio.sleep(0.5)

    async def status_done(generation_at_least: int) -> bool:
        d = await deployments.get(DEPLOYMENT, NAMESPACE)
        st = d.get("status") or {}
        return (st.get("observedGeneration", 0) >= max(generation_at_least, d["metadata"].get("generation", 0))
                and st.get("updatedReplicas") == n and st.get("availableReplicas") == n and st.get("replicas") == n)

    async def wait_for(predicate, what: str) -> float:
        began = time.monotonic()
        while not await predicate():
            if time.monotonic() - began > args.timeout:
                raise TimeoutError(f"round {run}: {what} not reached in {args.timeout} s")
            await asyncio.sleep(0.1)
        return time.monotonic()

    node_names = [node["metadata"]["name"] for node in (await nodes.list())["items"]]

    async def cordon(unschedulable_: bool) -> None:  # kubectl cordon / uncordon: a strategic merge patch of spec.unschedulable
        await asyncio.gather(*(nodes.patch(name, {"spec": {"unschedulable": unschedulable_}}, patch_type="strategic") for name in node_names))

    async def backlog_complete() -> bool:
        return len(unschedulable) >= n

    profiles = Profiles(args.profile, f"bind-{run}")
    await cordon(True)
    try:
        created_at = time.monotonic()
        await deployments.create(deployment_body(n, "v1"))
        first = await deployments.get(DEPLOYMENT, NAMESPACE)
        await wait_for(backlog_complete, f"{n} Pods created and found unschedulable on the cordoned node")
        pods_created = max(seen.values()) - created_at
        await profiles.start()
        api_before = api_requests(await client.get("/metrics"))
    finally:
        cpu_at["released"], waited_at["released"] = components_cpu(), components_waited()
        released_at = time.monotonic()
        await cordon(False)
    await wait_for(lambda: asyncio.sleep(0, len(bound) >= n), "every Pod bound")
    await profiles.stop()
    print(f"  round {run}: requests from the uncordon until every Pod was bound (+ <0.1 s): "
          f"{api_report(api_before, api_requests(await client.get('/metrics')), 12)}", flush=True)
    all_ready = await wait_for(lambda: status_done(first["metadata"].get("generation", 1)), "all Ready") - released_at
    first_pods = set(ready)
    bind_times = sorted(bound[p] for p in first_pods if p in bound)
    binds_per_second = (len(bind_times) - 1) / (bind_times[-1] - bind_times[0]) if len(bind_times) > 1 and bind_times[-1] > bind_times[0] else None
    # CPU per bind while the backlog was bound (the agent starting the first Pods meanwhile included)
    bind_cpu = {name: (cpu_at["bound"].get(name, 0.0) - seconds) / n * 1000 for name, seconds in cpu_at["released"].items()} if "bound" in cpu_at else {}
    bind_waited = {name: (waited_at["bound"].get(name, 0.0) - seconds) / n * 1000 for name, seconds in waited_at["released"].items()} if "bound" in waited_at else {}
    print(f"  round {run}: {n} Pods created (node cordoned) in {pods_created:.2f} s; uncordoned -> all bound "
          f"{bind_times[-1] - released_at:.2f} s, {binds_per_second or 0:.0f} binds/s; uncordoned -> all Ready {all_ready:.2f} s; "
          f"CPU per bind meanwhile: {', '.join(f'{name} {ms:.1f} ms' for name, ms in sorted(bind_cpu.items()))}", flush=True)
    # the share of the machine's CPUs that were busy meanwhile (every process, ours and others')
    busy = bind_waited.pop("machine busy", 0.0) * n / 1000 / ((bind_times[-1] - released_at) * (os.cpu_count() or 1)) if bind_waited else None
    if bind_waited:
        print(f"  round {run}: per bind meanwhile, event loops waiting for a CPU: "
              f"{', '.join(f'{name} {ms:.1f} ms' for name, ms in sorted(bind_waited.items()))}; the machine's {os.cpu_count()} CPUs "
              f"{100 * busy:.0f} % busy", flush=True)

    update_at = time.monotonic()
    patched = await deployments.patch(DEPLOYMENT, {"spec": {"template": {"spec": {"containers": [
        {"name": "server", "image": "registry.k8s.io/e2e-test-images/agnhost:v2"}]}}}}, NAMESPACE, patch_type="strategic")
    rolled = await wait_for(lambda: status_done(patched["metadata"].get("generation", 2)), "rolling update") - update_at
    print(f"  round {run}: rolling update {rolled:.2f} s", flush=True)

    await asyncio.sleep(2.0)  # quiet: the syncs from here on are the delete's
    syncs_before = len(scraper.syncs)
    delete_at = time.monotonic()
    await deployments.delete(DEPLOYMENT, NAMESPACE, propagation_policy="Background")

    async def no_pods() -> bool:
        return not [p for p in (await pods.list(NAMESPACE))["items"] if (p["metadata"].get("labels") or {}).get(LABEL) == DEPLOYMENT]

    deleted = await wait_for(no_pods, "every Pod gone") - delete_at
    await asyncio.sleep(2.0 + 2 * args.scrape_interval)
    emptied = next((t for t, count in endpoints_seen if t >= delete_at and count == 0), None)
    delete_syncs = [s for s in scraper.syncs[syncs_before:] if emptied is None or s[0] <= emptied + 0.05]
    for task in [*watchers, scraping]:
        task.cancel()
    await asyncio.gather(*watchers, scraping, return_exceptions=True)
    await services.delete(DEPLOYMENT, NAMESPACE)
    to_bound = [bound[p] - released_at for p in first_pods if p in bound]
    return {"replicas": n, "pods_created": pods_created, "all_ready": all_ready, "binds_per_second": binds_per_second,
            "all_bound": bind_times[-1] - released_at if bind_times else None, "rolling_update": rolled,
            "bind_cpu_ms": bind_cpu,
            "bind_waited_ms": bind_waited, "machine_busy": None if busy is None else 100 * busy,
            "bind_p50": percentile(to_bound, 0.5) if to_bound else None, "bind_p99": percentile(to_bound, 0.99) if to_bound else None,
            "bind_gaps": bind_gaps(bind_times),
            "delete_all_gone": deleted, "delete_syncs": len(delete_syncs) + (1 if emptied is not None else 0),
            "endpoints_emptied": None if emptied is None else emptied - delete_at}


def bind_gaps(bind_times: list[float]) -> list[float]:
    """The pauses between consecutive binds of the backlog, longest first: a rate limited by
    CPU per bind binds evenly, one held up by a stalled component (an event loop busy
    elsewhere, a process the machine's load keeps waiting) shows a few long pauses."""
    return sorted((b - a for a, b in zip(bind_times, bind_times[1:])), reverse=True)


def deployment_report(rounds: list[dict]) -> None:
    for r in rounds:
        gaps = r.get("bind_gaps") or []
        r["longest_bind_gap"] = gaps[0] if gaps else None
        r["five_longest_bind_gaps"] = sum(gaps[:5]) if gaps else None

    def line(label: str, key: str, unit: str = "s") -> None:
        values = [r[key] for r in rounds if r[key] is not None]
        if values:
            print(f"{label + ':':<58} median {percentile(values, 0.5):8.2f} {unit}   p99 {percentile(values, 0.99):8.2f} {unit}   "
                  f"({', '.join(f'{v:.2f}' for v in values)})")

    print(f"--- {len(rounds)} round(s), a Deployment of {rounds[0]['replicas']} replicas behind one ClusterIP Service")
    line("Deployment created -> its Pods exist (ReplicaSet's batches)", "pods_created")
    line("scheduler binds per second (the backlog; first -> last bind)", "binds_per_second", "/s")
    line("node uncordoned -> every Pod bound", "all_bound")
    line("node uncordoned -> a Pod bound, p50 of the round", "bind_p50")
    line("node uncordoned -> a Pod bound, p99 of the round", "bind_p99")
    line("the backlog's longest pause between two binds", "longest_bind_gap")
    line("the backlog's time spent in its 5 longest pauses", "five_longest_bind_gaps")
    line("node uncordoned -> all replicas Ready", "all_ready")
    for name in sorted({name for r in rounds for name in r.get("bind_cpu_ms") or {}}):
        values = [r["bind_cpu_ms"][name] for r in rounds if name in (r.get("bind_cpu_ms") or {})]
        print(f"{'  CPU per bind (uncordon -> all bound), ' + name + ':':<58} median {percentile(values, 0.5):8.2f} ms   "
              f"({', '.join(f'{v:.2f}' for v in values)})")
    for name in sorted({name for r in rounds for name in r.get("bind_waited_ms") or {}}):
        values = [r["bind_waited_ms"][name] for r in rounds if name in (r.get("bind_waited_ms") or {})]
        print(f"{'  waiting for a CPU per bind, ' + name + ' (event loop):':<58} median {percentile(values, 0.5):8.2f} ms   "
              f"({', '.join(f'{v:.2f}' for v in values)})")
    line("the machine's CPUs busy meanwhile (every process)", "machine_busy", "%")
    line("rolling update (new template -> all updated, available)", "rolling_update")
    line("delete (background) -> every Pod gone", "delete_all_gone")
    line("delete -> the Service's slices hold no ready endpoint", "endpoints_emptied")
    line("proxy syncs from the delete to the empty Service", "delete_syncs", "syncs")


async def measure(args) -> list[dict]:
    from kubesvc.client.kubeconfig import load_kubeconfig
    from kubesvc.client.rest import RestClient

    rounds = []
    async with RestClient(load_kubeconfig(args.kubeconfig), field_manager="bench-e2e", timeout=120) as client:
        for run in range(args.runs):
            rounds.append(await (deployment_round if args.deployment else one_round)(client, run, args))
    return rounds


def inside(args) -> None:
    try:
        import uvloop  # noqa: F401

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    result = asyncio.run(measure(args))
    print("RESULT " + json.dumps(result), flush=True)


def slowest_report(rounds: list[dict]) -> str:
    """The slowest Pods of all rounds (Ready -> reachable), each hop of each in ms, and the
    EndpointSlice controller's backlog when it became Ready: where a p99 comes from."""
    pods = sorted((own for r in rounds for _, own in r.get("slowest") or []), key=lambda own: -own["latency"])[:SLOWEST]
    lines = [f"the {len(pods)} slowest Pods, hop by hop (ms; backlog: Pods Ready before it and not yet in a slice / "
             f"slice writes seen until its own):"]
    for own in pods:
        hops = "  ".join(f"{key} {own[key] * 1000:.0f}" if key in own else f"{key} -" for key, _ in HOPS)
        backlog = f"  backlog {own['ahead']} / {own['writes']}" if "ahead" in own else ""
        lines.append(f"  {hops}{backlog}")
    return "\n".join(lines)


def report(rounds: list[dict]) -> None:
    """Pooled figures over every round, each round's p99 beside them."""

    def pooled(pick) -> list[float]:
        return [v for r in rounds for v in pick(r)]

    def per_round_p99(pick) -> str:
        return ", ".join(f"{percentile(pick(r), 0.99) * 1000:.0f}" for r in rounds if pick(r))

    n = sum(r["pods"] for r in rounds)
    print(f"--- {len(rounds)} round(s) of {rounds[0]['pods']} Pods ({n} Pods in all)")
    for label, key in (("Pod created -> bound to the node", "scheduled"), ("Pod created -> has an IP", "ip"),
                       ("Pod created -> Ready", "ready")):
        values = pooled(lambda r, key=key: r[key])
        if values:
            print(f"{label + ':':<58} {figures(values)}")
    bound = [r["all_bound"] for r in rounds]
    print(f"{'Pods created -> all bound (first create -> last bound):':<58} "
          + ", ".join("incomplete" if b is None else f"{b:.2f} s" for b in bound))
    print("hops (each Pod's):")
    for key, label in HOPS:
        values = pooled(lambda r, key=key: r["hops"][key])
        if values:
            print(f"  {label + ':':<56} {figures(values)}   (p99 per round: {per_round_p99(lambda r, key=key: r['hops'][key])} ms)")
    gaps = pooled(lambda r: r["sync_gaps"])
    if gaps:
        print(f"  {'proxy: end of a sync -> start of the next:':<56} {figures(gaps)}")
    for r in rounds:
        prog = r["programming"]
        if prog["count"]:
            print(f"  proxy's network_programming_duration_seconds ({prog['count']:.0f} observations, bucket bounds): "
                  f"p50 <= {prog['p50']} s, p99 <= {prog['p99']} s")
    for r in rounds:
        merged = f" ({r['merged_syncs']} more merged into them by slow scrapes)" if r["merged_syncs"] else ""
        print(f"round: {r['syncs']} proxy syncs{merged} seen in {r['scrapes']} scrapes; wall time first Pod created -> last reachable "
              f"{r['wall']:.2f} s; {r['attempts']} connection attempts; {r['reached']}/{r['pods']} reachable"
              + (f"; {r['negative']} reachable before the watch showed them Ready" if r["negative"] else "")
              + (f"; {len(r['during_sync'])} slices came while a proxy sync ran (their proxy wait p50 "
                 f"{percentile(r['during_sync'], 0.5) * 1000:.0f} ms)" if r.get("during_sync") else "")
              + (f"; the last failed attempt (why, begun before/after the sync's end): {r['last_failures']}" if r["last_failures"] else ""))
    for r in rounds:
        print(f"round: apiserver requests from the first create to the last reach (count, mean server time): {r['api']}")
    print(slowest_report(rounds))
    latency = pooled(lambda r: r["hops"]["latency"])
    if latency:
        print(f"Pod Ready -> reachable via ClusterIP: p50 {percentile(latency, 0.5) * 1000:.0f} ms, "
              f"p99 {percentile(latency, 0.99) * 1000:.0f} ms over {len(latency)} Pods")


# ---------------------------------------------------------------------------------------------
# the outer half (the host): namespace, kubesvc up, Ctrl-C, cleanup


def outer(args) -> int:
    status = 1
    try:
        with UpInNamespace("ks-bench-e2e", src=args.src.resolve()) as up:
            print(f"kubesvc up ({up.src}) in {up.netns}: up in {up.started_in:.2f} s", flush=True)
            if args.deployment:
                print(f"a Deployment of {args.deployment} replicas behind one ClusterIP Service, {args.runs} round(s)", flush=True)
            else:
                print(f"{args.pods} Pods, each behind a ClusterIP Service of its own; polling each ClusterIP every "
                      f"{args.poll_interval * 1000:.0f} ms once its Pod is Ready", flush=True)
            argv = up.nsenter(sys.executable, str(Path(__file__).resolve()), "--inside", "--kubeconfig", up.kubeconfig,
                              "--pods", args.pods, "--runs", args.runs, "--poll-interval", args.poll_interval,
                              "--scrape-interval", args.scrape_interval, "--concurrency", args.concurrency,
                              "--timeout", args.timeout, "--attempt-timeout", args.attempt_timeout, "--deployment", args.deployment,
                              *(["--profile", str(Path(args.profile).resolve())] if args.profile else []))
            cpu_before, began = cpu_seconds(up.process.pid), time.monotonic()
            child = subprocess.run(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=up.env)
            cpu = cpu_report(cpu_before, cpu_seconds(up.process.pid), time.monotonic() - began)
            result = None
            for out in child.stdout.splitlines():
                if out.startswith("RESULT "):
                    result = json.loads(out[len("RESULT "):])
                else:
                    print(out, flush=True)
            if child.returncode != 0 or result is None:
                print(f"the measuring half failed ({child.returncode})", file=sys.stderr)
                return 1
            if args.deployment:
                deployment_report(result)
            else:
                report(result)
            print(f"kubesvc up during the rounds: {cpu}; load {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
            status = 0 if args.deployment or all(r["reached"] == r["pods"] for r in result) else 1
    except UpFailed as err:
        print(err, file=sys.stderr)
        return 1
    return status if up.clean else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3, help="rounds of --pods Pods, each deleted before the next")
    parser.add_argument("--scrape-interval", type=float, default=0.25,
                        help="seconds between scrapes of the proxy's /metrics (below minSyncPeriod, so no sync is missed)")
    parser.add_argument("--poll-interval", type=float, default=0.01, help="seconds between connections to one ClusterIP")
    parser.add_argument("--attempt-timeout", type=float, default=0.2,
                        help="seconds one connection may take (tries overlap: a slow one does not hold back the next)")
    parser.add_argument("--concurrency", type=int, default=16, help="create requests in flight")
    parser.add_argument("--deployment", type=int, default=0, metavar="N",
                        help="measure a Deployment of N replicas (created -> Ready, binds/s, rolling update, delete's proxy syncs) instead")
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for every Pod to be reachable")
    parser.add_argument("--nodes", type=int, default=1,
                        help="above 1: that many machines (up + joins), Pod Ready -> reachable from another node beside the "
                             "same node's figure (bench/e2e_nodes.py, with --pods, --runs, --poll-interval, --attempt-timeout, --timeout)")
    parser.add_argument("--src", type=Path, default=ROOT / "src",
                        help="the src directory whose kubesvc up is measured (e.g. another commit's: git archive <commit> src | tar -x -C DIR)")
    parser.add_argument("--profile", metavar="DIR", help="with --deployment: py-spy record (raw, collapsed stacks) of the apiserver, "
                        "controller-manager and agent from the uncordon until every Pod is bound, into DIR")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(args)
        return
    if args.nodes > 1:
        import e2e_nodes  # bench/e2e_nodes.py

        sys.exit(e2e_nodes.run(args))
    if os.geteuid() != 0:
        raise SystemExit("bench/e2e.py needs root (network namespaces, nftables)")
    sys.exit(outer(args))


if __name__ == "__main__":
    main()
