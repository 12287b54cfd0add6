#!/usr/bin/env python3
"""Userspace proxy mode: throughput and connections/s through our relay, against direct and
HAProxy, in a throw-away network namespace (nothing touches the host).

Re-runs itself inside a fresh namespace, then starts, each as its own process:

* a **server**: one epoll loop accepting every connection and reading its command, ``C`` (send
  one byte, close once the client has) answered in the loop; ``D n`` (send n bytes) and ``U n``
  (receive until EOF into a 4 MiB buffer, then acknowledge the count) handed to a thread of
  their own;
* **userspace**: ``kubesvc proxy``'s ``UserspaceBackend`` (its TCP relay on a thread and epoll
  loop of its own; the proxy's event loop uvloop if installed, unless ``--relay-loop asyncio``;
  bulk streams spliced, unless ``--relay-copy``) with one Service
  10.96.0.1:80 whose endpoint is the server, synced once, measured twice: through the real
  portal rule (``iptables-restore``: DNAT in nat ``OUTPUT``) and at the relay's own port, as
  HAProxy is reached;
* **haproxy** (``mode tcp``, one thread, a plain TCP proxy) on the same address in front of
  the same server, if installed (``apt-get install -y haproxy``, or ``scripts/install.sh``);
  with ``--haproxy-splice`` a second one with ``option splice-auto`` (kernel splicing, as our
  relay does for bulk streams);

and measures from this process (the client), for each path: bulk download and upload (MB/s, one
connection of ``--bytes``), and new connections per second (``--concurrency`` connections in
flight from one epoll loop, each: connect, send one byte, receive one byte, close; for
``--seconds``). The client and the server are made cheap, so that direct is as fast as this
machine allows and the proxy, not the bench, is what a proxied figure measures: bulk data is
sent with ``send`` from memory in 4 MiB calls and received with ``recv_into`` a 4 MiB buffer;
a new connection's byte is sent and read without waiting for the event loop where the kernel
has it ready. Like with like: the same client and server processes and the same connection
pattern on every path, and HAProxy given what our relay has (one thread: ``nbthread 1``).
Closed connections leave conntrack's table after 2 s in the bench's namespace (120 s by
default, which would fill the table within a few rounds and make the kernel drop SYNs); SYN
retransmissions, listen-queue and conntrack drops are counted per path and printed.

Every path gets the same workload, interleaved: ``--repeat`` rounds, each measuring every path
once (in rotated order), so that a noisy neighbour hits all of them alike. Printed: each
figure's median over the rounds, and its ratio to direct as the median of the round-by-round
ratios (direct measured in the same round), with their range. Then the CPU each process used
while measuring (% of one core: user and system time from ``/proc``), and what the rest of the
machine used meanwhile (kernel threads, other processes): client, proxy and server share the
machine's cores, so these tell who limits a figure, and how noisy the run was; and each
process's CPU time per GB and per connection (the client's and the server's should match
across paths; the proxy's is what it adds).

Per connection: latency from connect to close (p50, p99 over every connection of every round);
after the rounds, each proxy's system calls per connection (``strace -c -f`` attached while
``--strace-connections`` connections go through it) and its peak RSS (``VmHWM``). Last, our
relay against the targets: throughput over direct and connections/s over HAProxy, round by
round. The load average before and after is printed: on a shared machine, compare only
figures from the same run.

    python3 bench/userspace.py --bytes 1073741824 --seconds 5

Anchors (performance-anchors.md): the Go userspace kube-proxy reached 0.36 of direct
throughput; HAProxy 83k conn/s and ~20 Gbit/s per core on dedicated hardware; a minimal
Python Protocol proxy ~0.4 of direct loopback on a 2-vCPU VM.
"""

from __future__ import annotations

import argparse
import errno
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from proxy import rerun_in_own_namespace  # noqa: E402  (bench/proxy.py: re-run this script in a fresh namespace)

NODE_IP = "10.250.0.1"  # on a port-less bridge in the namespace
SERVER_PORT = 8080
CLUSTER_IP = "10.96.0.1"
HAPROXY_PORT = 9090
HAPROXY_SPLICE_PORT = 9091
RECV_BUFFER = 4 << 20
SEND_CHUNK = 4 << 20
CLK_TCK = os.sysconf("SC_CLK_TCK")
CONNTRACK_TIME_WAIT = 2  # seconds, in the bench's namespace (see setup_links)


def setup_links() -> None:
    for argv in (["ip", "link", "set", "lo", "up"], ["ip", "link", "add", "bench0", "type", "bridge"],
                 ["ip", "link", "set", "bench0", "up"], ["ip", "addr", "add", f"{NODE_IP}/16", "dev", "bench0"],
                 ["ip", "route", "add", "10.96.0.0/12", "dev", "bench0"],
                 # this namespace only: room for many short connections
                 ["sysctl", "-qw", "net.ipv4.ip_local_port_range=1024 65535", "net.ipv4.tcp_tw_reuse=1"]):
        subprocess.run(argv, check=True)
    # Every connection of every path is tracked (the portal rules load conntrack into this
    # namespace), and a closed one stays in the table for nf_conntrack_tcp_timeout_time_wait
    # (120 s): a few rounds at a few thousand connections/s would fill the table (262144 here),
    # and the kernel would then drop new SYNs, costing whichever path runs next a 1 s
    # retransmission per connection. Expired sooner in this namespace, no path meets a full table
    # (the drops and retransmissions per path are printed to show it).
    subprocess.run(["sysctl", "-qw", f"net.netfilter.nf_conntrack_tcp_timeout_time_wait={CONNTRACK_TIME_WAIT}"], check=False)


# Bulk data is sent with send() from memory, as applications do: sendfile() from tmpfs would
# hand the kernel 4 KiB page-cache pages, which loopback receivers copy out more slowly than
# the 32 KiB page fragments send() fills (direct fell from ~3 to ~2 GB/s here), flattering
# every proxy's ratio.
_PAYLOAD = memoryview(bytes(range(256)) * (SEND_CHUNK // 256))


def send_bytes(sock: socket.socket, n: int) -> None:
    """Send ``n`` bytes (blocking)."""
    while n > 0:
        n -= sock.send(_PAYLOAD[:min(n, SEND_CHUNK)])


def recv_count(sock: socket.socket) -> int:
    buf = bytearray(RECV_BUFFER)
    total = 0
    while got := sock.recv_into(buf):
        total += got
    return total


# ---- server (its own process) ----------------------------------------------------------------


def serve() -> None:
    listener = socket.create_server(("0.0.0.0", SERVER_PORT), backlog=4096)
    listener.setblocking(False)
    lfd = listener.fileno()
    poll = select.epoll()
    poll.register(lfd, select.EPOLLIN)
    conns: dict[int, tuple[socket.socket, bytearray]] = {}
    print("ready", flush=True)

    def bulk(conn: socket.socket, cmd: bytes) -> None:
        with conn:
            (n,) = struct.unpack("!Q", cmd[1:])
            if cmd[:1] == b"D":
                send_bytes(conn, n)
                conn.shutdown(socket.SHUT_WR)
                conn.recv(1)
            else:
                conn.sendall(struct.pack("!Q", recv_count(conn)))

    def command(conn: socket.socket, cmd: bytearray, registered: bool) -> None:
        """Read (more of) the command and act on it once complete; after ``C``, wait for the
        client to close first (so that TIME_WAIT, and its reuse, stay with the connecting side:
        new connections never meet an old one's 4-tuple)."""
        fd = conn.fileno()
        try:
            data = conn.recv(1 if cmd[:1] == b"C" else 9 - len(cmd))
        except BlockingIOError:
            if not registered:
                conns[fd] = (conn, cmd)
                poll.register(fd, select.EPOLLIN)
            return
        except OSError:
            data = b""
        if not data or cmd[:1] == b"C":  # the client is gone (or, after C, closes): so do we
            if registered:
                del conns[fd]  # (closing removes it from the epoll set)
            conn.close()
            return
        cmd += data
        if cmd[:1] == b"C":
            try:
                conn.send(b"c")
            except OSError:
                pass
        elif len(cmd) == 9:
            if registered:
                del conns[fd]
                poll.unregister(fd)
            conn.setblocking(True)
            threading.Thread(target=bulk, args=(conn, bytes(cmd)), daemon=True).start()
            return
        if not registered:
            conns[fd] = (conn, cmd)
            poll.register(fd, select.EPOLLIN)

    while True:
        for fd, _ in poll.poll():
            if fd == lfd:
                while True:
                    try:
                        conn, _ = listener.accept()
                    except BlockingIOError:
                        break
                    conn.setblocking(False)
                    command(conn, bytearray(), registered=False)  # the client has likely sent it already
            else:
                command(*conns[fd], registered=True)


# ---- our relay (its own process) --------------------------------------------------------------


def relay(args) -> None:
    if args.relay_src:  # a baseline: kubesvc from another source tree
        sys.path.insert(0, args.relay_src)
    import asyncio

    from kubesvc.proxy.backend import ProxyOptions, SyncRequest
    from kubesvc.proxy.metrics import ProxyMetrics
    from kubesvc.proxy.proxier import Proxier
    from kubesvc.proxy.types import Endpoint, ServicePort, ServicePortName
    from kubesvc.proxy.userspace import relay as relay_module
    from kubesvc.proxy.userspace.proxier import UserspaceBackend
    from kubesvc.util.process import install_uvloop

    if args.relay_loop == "uvloop":
        install_uvloop()
    if args.relay_copy:
        relay_module.SPLICE = False  # the listeners' default
    if os.environ.get("BENCH_DEBUG"):
        import logging
        logging.basicConfig(level=logging.DEBUG)

    async def main() -> None:
        name = ServicePortName("bench", "svc", "tcp", "TCP")
        request = SyncRequest(full=True, service_ports={name: ServicePort(name, CLUSTER_IP, 80, "TCP")},
                              endpoints={name: (Endpoint(NODE_IP, SERVER_PORT, is_local=True),)}, node_ip=NODE_IP)
        options = ProxyOptions(node_name="bench")
        backend = UserspaceBackend(options, program_kernel=not args.relay_src)  # (a baseline: no portal rules)
        await Proxier(backend, options, ProxyMetrics()).run_sync(request)
        loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
        if hasattr(relay_module, "relay_loop"):  # TCP relayed on a thread and epoll loop of its own
            loop = "epoll-thread"
        how = "copy+splice" if getattr(relay_module, "SPLICE", False) else "copy"
        print(f"ready {backend.proxy_port(name)} {loop},{how}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


# ---- client (this process) -------------------------------------------------------------------


def download(addr, n: int) -> float:
    with socket.create_connection(addr) as s:
        start = time.perf_counter()
        s.sendall(b"D" + struct.pack("!Q", n))
        total = recv_count(s)
        elapsed = time.perf_counter() - start
        s.sendall(b"x")
    assert total == n, (total, n)
    return n / elapsed / 1e6


def upload(addr, n: int) -> float:
    with socket.create_connection(addr) as s:
        start = time.perf_counter()
        s.sendall(b"U" + struct.pack("!Q", n))
        send_bytes(s, n)
        s.shutdown(socket.SHUT_WR)
        ack = s.recv(8)
        elapsed = time.perf_counter() - start
    assert struct.unpack("!Q", ack)[0] == n
    return n / elapsed / 1e6


def connections(addr, seconds: float, concurrency: int, latencies: list[float] | None = None, limit: int = 0) -> float:
    """Connections per second, ``concurrency`` in flight: connect, ``C``, read ``c``, close; for
    ``seconds`` (or ``limit`` connections started). Each one's time from connect to the answer
    is appended to ``latencies``."""
    poll = select.epoll()
    family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
    open_: dict[int, tuple[socket.socket, float]] = {}
    count = failed = slow = started = 0

    def start_one() -> None:
        nonlocal started
        started += 1
        s = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
        err = s.connect_ex(addr)
        if err not in (0, errno.EINPROGRESS):
            s.close()
            raise OSError(err, os.strerror(err))
        open_[s.fileno()] = (s, time.perf_counter())
        try:  # on loopback the handshake is usually over already
            s.send(b"C")
        except BlockingIOError:
            poll.register(s.fileno(), select.EPOLLOUT)
        else:
            poll.register(s.fileno(), select.EPOLLIN)

    def finish(fd: int) -> None:
        nonlocal slow
        s, began = open_.pop(fd)
        took = time.perf_counter() - began
        s.close()  # (closing removes it from the epoll set)
        slow += took > 0.2  # a lost SYN waits 1 s for its retransmission
        if latencies is not None:
            latencies.append(took)

    start = time.perf_counter()
    deadline = start + seconds
    for _ in range(min(concurrency, limit) if limit else concurrency):
        start_one()
    while open_:
        now = time.perf_counter()
        for fd, events in poll.poll(1.0):
            s = open_[fd][0]
            if events & select.EPOLLOUT:  # connected (or failed)
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    failed += 1
                    finish(fd)
                else:
                    s.send(b"C")
                    poll.modify(fd, select.EPOLLIN)
                    continue
            else:
                try:
                    ok = s.recv(1) == b"c"
                except OSError:
                    ok = False
                count += ok
                failed += not ok
                finish(fd)
            if (started < limit) if limit else now < deadline:
                start_one()
    elapsed = time.perf_counter() - start
    poll.close()
    if failed or slow:
        print(f"  {addr}: {failed} connections failed, {slow} took over 200 ms", file=sys.stderr)
    return count / elapsed


def start(argv: list[str], what: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("ready"):
        proc.kill()
        raise SystemExit(f"{what} did not start: {line!r}")
    return proc, line


def wait_port(port: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((NODE_IP, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def haproxy_config(path: Path, port: int, splice: bool) -> None:
    path.write_text(f"""global
    maxconn 4000
    nbthread 1
defaults
    mode tcp
    timeout connect 5s
    timeout client 60s
    timeout server 60s
listen bench
    bind {NODE_IP}:{port}
    {"option splice-auto" if splice else ""}
    server s1 {NODE_IP}:{SERVER_PORT}
""")


def cpu_seconds(pid: int | None) -> float:
    """CPU seconds used so far by ``pid`` (None: this process)."""
    if pid is None:
        return time.process_time()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def user_seconds(pid: int) -> float:
    """The user part of ``cpu_seconds`` (for a proxy: its own code, not the kernel's work)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11]) / CLK_TCK


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (not idle, not waiting for I/O) so far."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / CLK_TCK


def drop_counters() -> dict[str, int]:
    """This namespace's counts of what turns a figure into a measure of the kernel's drops rather
    than of a proxy: SYNs retransmitted, SYNs dropped by a full listen queue, packets conntrack
    dropped (its table full)."""
    counters = {}
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], values.split()[1:]))
            counters["syn retransmits"] = int(table.get("TCPSynRetrans", 0))
            counters["listen drops"] = int(table.get("ListenDrops", 0))
    try:
        rows = Path("/proc/net/stat/nf_conntrack").read_text().split("\n")
        names = rows[0].split()
        counters["conntrack drops"] = sum(int(row.split()[names.index(col)], 16)
                                          for row in rows[1:] if row.strip() for col in ("drop", "early_drop"))
    except (OSError, ValueError, IndexError):
        pass
    return counters


PHASES = ("download", "upload", "conns")


class Path_:
    """One way from the client to the server, with its figures round by round."""

    def __init__(self, name: str, addr, proxy_pid: int | None = None):
        self.name, self.addr, self.proxy_pid = name, addr, proxy_pid
        self.ours = False  # our relay at HEAD (measured against the targets)
        self.values: dict[str, list[float]] = {phase: [] for phase in PHASES}
        self.cpu: dict[str, list[float]] = {phase: [0.0] * 5 for phase in PHASES}  # seconds, client, server, proxy, rest
        self.units: dict[str, float] = {phase: 0.0 for phase in PHASES}
        self.proxy_user: dict[str, float] = {phase: 0.0 for phase in PHASES}  # seconds, of the proxy's cpu
        self.latencies: list[float] = []  # of every connection in the connections/s runs
        self.syscalls: dict[str, float] | None = None  # per connection, from strace -c
        self.drops: dict[str, int] = {}  # drop_counters() summed over this path's runs
        self.peak_rss_kib = 0

    def run(self, phase: str, server_pid: int, fn, *args) -> None:
        pids = [None, server_pid] + ([self.proxy_pid] if self.proxy_pid else [])
        before = [cpu_seconds(p) for p in pids]
        user_before = user_seconds(self.proxy_pid) if self.proxy_pid else 0.0
        busy = machine_busy_seconds()
        drops = drop_counters()
        t0 = time.perf_counter()
        value = fn(self.addr, *args)
        elapsed = time.perf_counter() - t0
        for name, count in drop_counters().items():
            self.drops[name] = self.drops.get(name, 0) + count - drops.get(name, 0)
        used = [cpu_seconds(p) - b for p, b in zip(pids, before)]
        if self.proxy_pid:
            self.proxy_user[phase] += user_seconds(self.proxy_pid) - user_before
        rest = machine_busy_seconds() - busy - sum(used)
        self.values[phase].append(value)
        self.units[phase] += value * elapsed  # bytes (MB) or connections
        acc = self.cpu[phase]
        for i, v in enumerate((elapsed, *used[:2], used[2] if self.proxy_pid else 0.0, rest)):
            acc[i] += v


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident set (``VmHWM``), KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def syscalls_per_connection(pid: int, addr, count: int, concurrency: int) -> dict[str, float] | None:
    """``strace -c -f`` on ``pid`` while ``count`` connections go through it: system calls per
    connection, by name (``total`` too). None without strace."""
    if not shutil.which("strace"):
        return None
    out = Path(tempfile.mkdtemp()) / "strace"
    tracer = subprocess.Popen(["strace", "-c", "-f", "-o", str(out), "-p", str(pid)], stderr=subprocess.PIPE, text=True)
    tracer.stderr.readline()  # "strace: Process N attached"
    time.sleep(0.2)  # (its threads too)
    connections(addr, 3600, concurrency, limit=count)
    tracer.send_signal(signal.SIGINT)
    tracer.wait()
    calls: dict[str, float] = {}
    for line in out.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[3].isdigit():  # % time, seconds, usecs/call, calls, [errors,] syscall
            calls[parts[-1]] = int(parts[3]) / count
    return calls


def ratios(path: Path_, peer: Path_, phase: str) -> list[float]:
    """``path``'s figure over ``peer``'s, round by round (both measured in the same round)."""
    return [v / d for v, d in zip(path.values[phase], peer.values[phase])]


def spread(values: list[float]) -> str:
    return f"{median(values):5.2f} [{min(values):4.2f}-{max(values):4.2f}]"


def report(paths: list[Path_], args, load: tuple[float, float]) -> None:
    direct = paths[0]
    cpus = f"CPUs {args.cpus}" if args.cpus else f"{os.cpu_count()} CPUs"
    print("\nLike with like: one client process and one server process on every path, the same connection pattern;\n"
          "our relay relays on one thread (its epoll loop), HAProxy runs nbthread 1, mode tcp.")
    print(f"\n{args.bytes / 2**20:.0f} MiB per bulk transfer, connections for {args.seconds:g} s with {args.concurrency} in flight; "
          f"{args.repeat} interleaved rounds; {cpus} shared by client, proxy and server; load average "
          f"{load[0]:.1f} before, {load[1]:.1f} after.\n"
          f"Each figure is the median over the rounds; each ratio the median of the round-by-round ratios to direct "
          f"(measured in the same round) [lowest-highest].\n")
    print(f"{'path':50} {'download MB/s':>13} {'ratio':>17} {'upload MB/s':>12} {'ratio':>17} {'conn/s':>8} {'ratio':>17}")
    for p in paths:
        cells = []
        for phase, width in zip(PHASES, (13, 12, 8)):
            cells.append(f"{median(p.values[phase]):{width}.0f} {spread(ratios(p, direct, phase))}")
        print(f"{p.name:50} {' '.join(cells)}")
    print("\nPer connection (connect, 1 byte each way, close), over every connection of every round: latency from\n"
          "connect to close; the proxy's system calls (strace -c -f over "
          f"{args.strace_connections} connections after the rounds), peak RSS of the proxy (VmHWM):")
    print(f"{'path':50} {'p50 us':>7} {'p99 us':>7} {'syscalls':>9}  {'peak RSS':>9}  most frequent calls per connection")
    for p in paths:
        calls = p.syscalls or {}
        top = sorted(((n, c) for c, n in calls.items() if c != "total"), reverse=True)[:8]
        print(f"{p.name:50} {1e6 * percentile(p.latencies, 0.5):7.0f} {1e6 * percentile(p.latencies, 0.99):7.0f} "
              f"{calls.get('total', float('nan')):9.1f}  "
              + (f"{p.peak_rss_kib / 1024:6.1f} MiB" if p.proxy_pid else f"{'-':>9}") + "  "
              + ", ".join(f"{c} {n:.2f}" for n, c in top))
    dropped = [(p.name, p.drops) for p in paths if any(p.drops.values())]
    print("\nKernel drops while measuring (SYNs retransmitted, SYNs dropped by a full listen queue, packets dropped by\n"
          "conntrack): " + ("none on any path." if not dropped else "a path with drops measured them, not only the proxy:"))
    for name, drops in dropped:
        print(f"  {name:50} " + ", ".join(f"{what} {count}" for what, count in drops.items()))
    print("\nCPU used while measuring, % of one core (client / server / proxy / rest of the machine: kernel threads,\n"
          "other processes), over all rounds; a process near 100 is what limits its path's figure:")
    print(f"{'path':50} {'download':>21} {'upload':>21} {'connections':>21}")
    for p in paths:
        cells = []
        for phase in PHASES:
            elapsed, *used = p.cpu[phase]
            cells.append(" / ".join("  -" if i == 2 and not p.proxy_pid else f"{max(0.0, 100 * u / elapsed):3.0f}"
                                    for i, u in enumerate(used)))
        print(f"{p.name:50} {cells[0]:>21} {cells[1]:>21} {cells[2]:>21}")
    print("\nCPU time per unit, by process (client / server / proxy): the same client and server on every path, so\n"
          "their columns should match across paths; the proxy's is what it adds:")
    print(f"{'path':50} {'download ms/GB':>20} {'upload ms/GB':>20} {'us/connection':>20}")
    for p in paths:
        cells = []
        for phase, scale in (("download", 1e6), ("upload", 1e6), ("conns", 1e6)):  # (units: MB, connections)
            per = [scale * p.cpu[phase][i] / p.units[phase] for i in (1, 2, 3)]
            cells.append(" / ".join("  -" if i == 2 and not p.proxy_pid else f"{v:4.0f}" for i, v in enumerate(per)))
        print(f"{p.name:50} {cells[0]:>20} {cells[1]:>20} {cells[2]:>20}")
    print("\nWhat the proxy itself costs (its CPU time per unit relayed; lower is better), and of that its own\n"
          "code's share (user time; the rest is the kernel's work for its system calls):")
    print(f"{'path':50} {'download s/GB':>14} {'upload s/GB':>12} {'us/connection':>14} {'user us/conn':>13}")
    for p in paths[1:]:
        down, up, conns = (p.cpu[phase][3] / p.units[phase] for phase in PHASES)
        print(f"{p.name:50} {1000 * down:14.2f} {1000 * up:12.2f} {1e6 * conns:14.0f} "
              f"{1e6 * p.proxy_user['conns'] / p.units['conns']:13.0f}")
    cpus = len(args.cpus.split(",")) if args.cpus else os.cpu_count()
    print(f"\nWhat {cpus} CPUs allow at most: the CPU time one GB costs the client, server and proxy together (the\n"
          "rest of the machine left out); bytes per CPU-second against direct's; and the ceiling: the throughput if\n"
          "that kept every CPU busy with nothing else running, over direct's measured median (on a quiet machine, a\n"
          "ratio above the ceiling is physically out of reach here, however the processes are placed):")
    print(f"{'path':50} {'download s/GB':>14} {'x direct':>9} {'ceiling':>8} {'upload s/GB':>12} {'x direct':>9} {'ceiling':>8}")
    for p in paths:
        cells = []
        for phase in ("download", "upload"):
            per_gb = 1000 * sum(p.cpu[phase][1:4]) / p.units[phase]
            direct_per_gb = 1000 * sum(direct.cpu[phase][1:4]) / direct.units[phase]
            cells.append(f"{per_gb:{14 if phase == 'download' else 12}.2f} {direct_per_gb / per_gb:9.2f} "
                         f"{cpus / per_gb * 1000 / median(direct.values[phase]):8.2f}")
        print(f"{p.name:50} {' '.join(cells)}")
    print()
    for ours in [p for p in paths if p.ours]:
        print(f"{ours.name}: download {spread(ratios(ours, direct, 'download'))}, upload "
              f"{spread(ratios(ours, direct, 'upload'))} of direct (target >= 0.6)")
        for peer in [p for p in paths[1:] if not p.ours]:
            target = " (target >= 1.0)" if peer.name.startswith("haproxy") else ""
            print(f"{ours.name}: connections/s {spread(ratios(ours, peer, 'conns'))} x {peer.name}{target}; "
                  f"throughput x {peer.name}: download {spread(ratios(ours, peer, 'download'))}, upload "
                  f"{spread(ratios(ours, peer, 'upload'))}")
    print("anchor: Go userspace kube-proxy 0.36 of direct throughput (kubernetes PR #16344)")


def inside(args) -> None:
    setup_links()
    load_before = os.getloadavg()[0]
    if args.cpus:  # client (this process), server and proxies all on these CPUs
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    me = [sys.executable, str(Path(__file__).resolve())]
    procs = []
    try:
        server, _ = start([*me, "--role", "server"], "server")
        procs.append(server)
        paths = [Path_("direct", (NODE_IP, SERVER_PORT))]
        relay_argv = [*me, "--role", "relay", "--relay-loop", args.relay_loop] + (["--relay-copy"] if args.relay_copy else [])
        proxy, line = start(relay_argv, "userspace relay")
        procs.append(proxy)
        _, port, how = line.split()
        paths.append(Path_(f"userspace ({how}, via {CLUSTER_IP}:80)", (CLUSTER_IP, 80), proxy.pid))
        # the same relay addressed as HAProxy is (its own port, no portal DNAT in the client's path)
        paths.append(Path_(f"userspace ({how}, its port)", (NODE_IP, int(port)), proxy.pid))
        paths[1].ours = paths[2].ours = True
        for src in args.baseline:  # A/B: the relay of another source tree, at its own port, in the same rounds
            base, line = start(relay_argv + ["--relay-src", str(Path(src).resolve())], "baseline relay")
            procs.append(base)
            _, port, how = line.split()
            paths.append(Path_(f"baseline {Path(src).resolve().parent.name} ({how}, its port)", (NODE_IP, int(port)), base.pid))
        if shutil.which("haproxy") and not args.no_haproxy:
            for port, splice in ((HAPROXY_PORT, False), *(((HAPROXY_SPLICE_PORT, True),) if args.haproxy_splice else ())):
                cfg = Path(tempfile.mkdtemp()) / "haproxy.cfg"
                haproxy_config(cfg, port, splice)
                ha = subprocess.Popen(["haproxy", "-db", "-f", str(cfg)], stdout=subprocess.DEVNULL)
                procs.append(ha)
                wait_port(port)
                paths.append(Path_(f"haproxy (mode tcp, 1 thread{', splice-auto' if splice else ''})", (NODE_IP, port), ha.pid))
        elif not args.no_haproxy:
            print("haproxy not installed: skipped (apt-get install -y haproxy)")
        for p in paths:  # warm up
            connections(p.addr, 0.2, args.concurrency)
            download(p.addr, 1 << 20)
        for round_no in range(args.repeat):
            k = round_no % len(paths)
            for p in paths[k:] + paths[:k]:
                p.run("download", server.pid, download, args.bytes)
                p.run("upload", server.pid, upload, args.bytes)
                p.run("conns", server.pid, connections, args.seconds, args.concurrency, p.latencies)
        for p in paths[1:]:
            if args.strace_connections:
                p.syscalls = syscalls_per_connection(p.proxy_pid, p.addr, args.strace_connections, args.concurrency)
            p.peak_rss_kib = peak_rss_kib(p.proxy_pid)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    report(paths, args, (load_before, os.getloadavg()[0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--bytes", type=int, default=512 * 2**20, help="bytes per bulk transfer (default 512 MiB)")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved rounds over all paths (medians count)")
    parser.add_argument("--seconds", type=float, default=2.0, help="duration of each connections/s run")
    parser.add_argument("--concurrency", type=int, default=8, help="connections in flight in the connections/s run")
    parser.add_argument("--relay-loop", choices=("uvloop", "asyncio"), default="uvloop",
                        help="event loop of our relay (uvloop: where installed)")
    parser.add_argument("--relay-copy", action="store_true", help="our relay copies through a buffer instead of splice(2)")
    parser.add_argument("--cpus", help="run client, server and proxies on these CPUs only, e.g. 0 (one core: what each "
                                           "path costs, without the scheduler's placement of three processes on the cores)")
    parser.add_argument("--strace-connections", type=int, default=2000,
                        help="count each proxy's system calls (strace -c -f) over this many connections after the rounds (0: not)")
    parser.add_argument("--baseline", metavar="SRC", action="append", default=[],
                        help="also measure the relay of another kubesvc source tree (its src/ directory, e.g. after "
                        "`git archive <commit> | tar -x -C /tmp/base`: /tmp/base/src) in the same rounds, at its own "
                        "port: an A/B of versions in one run (repeatable)")
    parser.add_argument("--no-haproxy", action="store_true")
    parser.add_argument("--haproxy-splice", action="store_true", help="also HAProxy with option splice-auto")
    parser.add_argument("--role", choices=("server", "relay"), help=argparse.SUPPRESS)
    parser.add_argument("--relay-src", help=argparse.SUPPRESS)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "server":
        serve()
    elif args.role == "relay":
        relay(args)
    elif args.inside:
        inside(args)
    else:
        rerun_in_own_namespace(__file__)


if __name__ == "__main__":
    main()
