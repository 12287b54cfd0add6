#!/usr/bin/env python3
"""Where a relayed connection's CPU goes: our userspace relay against HAProxy and against the floor
of CPython's cost, in a throw-away network namespace (bench/userspace.py's server, relay and client).

Each proxy relays the same connections/s workload (``--concurrency`` in flight: connect, one byte
each way, close) for ``--seconds``, the proxies in turn, ``--repeat`` times; printed per proxy:
the medians of connections/s and of its CPU time per connection, user (its own code) and system
(the kernel's work for its calls) apart, from ``/proc/<pid>/stat``. CPU time is what a loaded
machine inflates least; the rates are only comparable within a run.

* **ours**: ``kubesvc proxy``'s ``UserspaceBackend``, as in bench/userspace.py (``--baseline SRC``:
  also the relay of another source tree, for an A/B of versions);
* **floor**: a bare relay written for this measurement only: one epoll loop, one flat function
  per event, the same system calls as ours (accept, socket, connect, two ``epoll_ctl``, recv and
  send with ``MSG_DONTWAIT``, shutdown, close), and nothing else: no endpoint choice, no retry,
  no dial timeout, no bulk path (it would lose data a full socket did not take), no error
  handling beyond dropping the connection. Not a proxy: what CPython costs at the least for
  these calls and events;
* **haproxy** (``mode tcp``, one thread), if installed.

    python3 bench/userspace_cost.py --repeat 8 --seconds 2
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import userspace as bench  # noqa: E402  (its server, relay role, client and namespace set-up)
from proxy import rerun_in_own_namespace  # noqa: E402


def floor_relay() -> None:
    """The bare relay (see the module docstring); prints ``ready <port> floor``."""
    import _socket

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    listener.bind((bench.NODE_IP, 0))
    listener.listen(1024)
    listener.setblocking(False)
    print("ready", listener.getsockname()[1], "floor", flush=True)
    ep = select.epoll()
    ep.register(listener.fileno(), select.EPOLLIN)
    IN, RDHUP, ET = select.EPOLLIN, select.EPOLLRDHUP, select.EPOLLET
    WATCH, DONTWAIT = IN | select.EPOLLOUT | RDHUP | ET, socket.MSG_DONTWAIT
    buf = memoryview(bytearray(65536))
    handlers: dict[int, tuple] = {}
    closing: list = []
    endpoint = (bench.NODE_IP, bench.SERVER_PORT)

    class Conn:
        __slots__ = ("client", "backend", "connecting", "client_done", "backend_done")

    def forward(conn, src, dst, events, src_done: str, other_done: str) -> None:
        n = src.recv_into(buf, 0, DONTWAIT)
        if n:
            dst.send(buf[:n], DONTWAIT)
            if not events & RDHUP:
                return
            n = src.recv_into(buf, 0, DONTWAIT)
        if n == 0:
            setattr(conn, src_done, True)
            if getattr(conn, other_done):
                for sock in (conn.client, conn.backend):
                    del handlers[sock.fileno()]
                    closing.append(sock)
            else:
                dst.shutdown(socket.SHUT_WR)

    def on_backend(conn, events) -> None:
        if conn.connecting:
            conn.connecting = False
            fd = conn.client.fileno()
            ep.register(fd, IN | RDHUP | ET)
            handlers[fd] = (on_client, conn)
            try:
                n = conn.client.recv_into(buf, 0, DONTWAIT)
            except BlockingIOError:
                return
            conn.backend.send(buf[:n], DONTWAIT)
        elif events & (IN | RDHUP):
            forward(conn, conn.backend, conn.client, events, "backend_done", "client_done")

    def on_client(conn, events) -> None:
        if events & (IN | RDHUP):
            forward(conn, conn.client, conn.backend, events, "client_done", "backend_done")

    lfd, accept = listener.fileno(), listener._accept
    while True:
        for fd, events in ep.poll(-1, 256):
            if fd == lfd:
                while True:
                    try:
                        cfd, _ = accept()
                    except BlockingIOError:
                        break
                    conn = Conn()
                    conn.client = _socket.socket(socket.AF_INET, socket.SOCK_STREAM, 0, cfd)
                    conn.backend = _socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
                    conn.connecting, conn.client_done, conn.backend_done = True, False, False
                    conn.backend.connect_ex(endpoint)
                    bfd = conn.backend.fileno()
                    ep.register(bfd, WATCH)
                    handlers[bfd] = (on_backend, conn)
                continue
            handler = handlers.get(fd)
            if handler is not None:
                try:
                    handler[0](handler[1], events)
                except OSError:  # (a bare relay: the connection is dropped, its sockets leak until exit)
                    pass
        for sock in closing:
            sock.close()
        closing.clear()


def user_system_seconds(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / bench.CLK_TCK, int(fields[12]) / bench.CLK_TCK


def inside(args) -> None:
    bench.setup_links()
    me = [sys.executable, str(Path(bench.__file__).resolve())]
    procs: list[subprocess.Popen] = []
    proxies: list[tuple[str, subprocess.Popen, int]] = []
    try:
        server, _ = bench.start([*me, "--role", "server"], "server")
        procs.append(server)
        for name, argv in [("ours", [*me, "--role", "relay"]),
                           *((f"baseline {src}", [*me, "--role", "relay", "--relay-src", str(Path(src).resolve())])
                             for src in args.baseline),
                           ("floor (bare Python relay)", [sys.executable, str(Path(__file__).resolve()), "--role", "floor"])]:
            proc, line = bench.start(argv, name)
            procs.append(proc)
            proxies.append((name, proc, int(line.split()[1])))
        if shutil.which("haproxy"):
            cfg = Path(tempfile.mkdtemp()) / "haproxy.cfg"
            bench.haproxy_config(cfg, bench.HAPROXY_PORT, False)
            proc = subprocess.Popen(["haproxy", "-db", "-f", str(cfg)], stdout=subprocess.DEVNULL)
            procs.append(proc)
            bench.wait_port(bench.HAPROXY_PORT)
            proxies.append(("haproxy (mode tcp, 1 thread)", proc, bench.HAPROXY_PORT))
        load_before = os.getloadavg()[0]
        results: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _, _ in proxies}
        for _, _, port in proxies:  # warm up
            bench.connections((bench.NODE_IP, port), 0.3, args.concurrency)
        for _ in range(args.repeat):
            for name, proc, port in proxies:
                user0, sys0 = user_system_seconds(proc.pid)
                started = time.perf_counter()
                rate = bench.connections((bench.NODE_IP, port), args.seconds, args.concurrency)
                count = rate * (time.perf_counter() - started)
                user1, sys1 = user_system_seconds(proc.pid)
                results[name].append((rate, 1e6 * (user1 - user0) / count, 1e6 * (sys1 - sys0) / count))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    print(f"\nconnections/s ({args.concurrency} in flight, {args.seconds:g} s each, {args.repeat} alternating runs per proxy; "
          f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after), medians [lowest-highest]:")
    print(f"{'proxy':32} {'conn/s':>18} {'CPU us/conn':>20} {'user':>18} {'system':>18}")
    for name, runs in results.items():
        cells = [[r[0] for r in runs], [r[1] + r[2] for r in runs], [r[1] for r in runs], [r[2] for r in runs]]
        print(f"{name:32} " + " ".join(f"{statistics.median(c):6.0f} [{min(c):4.0f}-{max(c):4.0f}]".rjust(w)
                                       for c, w in zip(cells, (18, 20, 18, 18))))


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--repeat", type=int, default=8, help="runs per proxy, alternating (medians count)")
    parser.add_argument("--seconds", type=float, default=2.0, help="duration of each run")
    parser.add_argument("--concurrency", type=int, default=8, help="connections in flight")
    parser.add_argument("--baseline", metavar="SRC", action="append", default=[],
                        help="also the relay of another kubesvc source tree (its src/ directory), as in bench/userspace.py")
    parser.add_argument("--role", choices=("floor",), help=argparse.SUPPRESS)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "floor":
        floor_relay()
    elif args.inside:
        inside(args)
    else:
        rerun_in_own_namespace(__file__)


if __name__ == "__main__":
    main()
