#!/usr/bin/env python3
"""Userspace proxy mode: throughput and connections/s through our relay, against direct and
HAProxy, in a throw-away network namespace (nothing touches the host).

Re-runs itself inside a fresh namespace, then starts, each as its own process:

* a **server** (threads, blocking sockets): per connection a one-byte command, ``D`` send N
  bytes, ``U`` receive until EOF and acknowledge, ``C`` send one byte and close;
* **userspace**: ``kubesvc proxy``'s ``UserspaceBackend`` (uvloop if installed) with one Service
  10.96.0.1:80 whose endpoint is the server, synced once, so the client goes through the real
  portal rule (``iptables-restore``: DNAT in nat ``OUTPUT``) to the relay;
* **haproxy** (``mode tcp``, one thread) in front of the same server, if installed
  (``apt-get install -y haproxy``);

and measures from this process, one client at a time, for each path: bulk download and upload
(MB/s, one connection of ``--bytes``), and new connections per second (connect, one byte,
close, for ``--seconds``). Prints each figure and its ratio to direct.

    python3 bench/userspace.py --bytes 1073741824 --seconds 5

Anchors (performance-anchors.md): the Go userspace kube-proxy reached 0.36 of direct
throughput; HAProxy 83k conn/s and ~20 Gbit/s per core on dedicated hardware; a minimal
Python Protocol proxy ~0.4 of direct loopback on a 2-vCPU VM.
"""

from __future__ import annotations

import argparse
import os
import shutil
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

from proxy import in_namespace  # noqa: E402  (bench/proxy.py: re-run this script in a fresh namespace)

NODE_IP = "10.250.0.1"  # on a port-less bridge in the namespace
SERVER_PORT = 8080
CLUSTER_IP = "10.96.0.1"
HAPROXY_PORT = 9090
CHUNK = 1 << 20


def setup_links() -> None:
    for argv in (["ip", "link", "set", "lo", "up"], ["ip", "link", "add", "bench0", "type", "bridge"],
                 ["ip", "link", "set", "bench0", "up"], ["ip", "addr", "add", f"{NODE_IP}/16", "dev", "bench0"],
                 ["ip", "route", "add", "10.96.0.0/12", "dev", "bench0"]):
        subprocess.run(argv, check=True)


# ---- server (its own process) ----------------------------------------------------------------


def serve() -> None:
    listener = socket.create_server(("0.0.0.0", SERVER_PORT), backlog=4096, reuse_port=True)
    print("ready", flush=True)
    payload = b"\0" * CHUNK

    def handle(conn: socket.socket) -> None:
        with conn:
            cmd = conn.recv(9)
            if cmd[:1] == b"C":
                conn.sendall(b"c")
            elif cmd[:1] == b"D":
                (n,) = struct.unpack("!Q", cmd[1:9] if len(cmd) == 9 else cmd[1:] + conn.recv(9 - len(cmd)))
                view = memoryview(payload)
                while n > 0:
                    sent = conn.send(view[:min(n, CHUNK)])
                    n -= sent
                conn.shutdown(socket.SHUT_WR)
                conn.recv(1)
            elif cmd[:1] == b"U":
                buf = bytearray(CHUNK)
                total = len(cmd) - 1
                while (got := conn.recv_into(buf)):
                    total += got
                conn.sendall(struct.pack("!Q", total))

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


# ---- our relay (its own process) --------------------------------------------------------------


def relay() -> None:
    import asyncio

    from kubesvc.proxy.backend import ProxyOptions, SyncRequest
    from kubesvc.proxy.types import Endpoint, ServicePort, ServicePortName
    from kubesvc.proxy.userspace.proxier import UserspaceBackend
    from kubesvc.util.process import install_uvloop

    install_uvloop()
    if os.environ.get("BENCH_DEBUG"):
        import logging
        logging.basicConfig(level=logging.DEBUG)

    async def main() -> None:
        name = ServicePortName("bench", "svc", "tcp", "TCP")
        request = SyncRequest(full=True, service_ports={name: ServicePort(name, CLUSTER_IP, 80, "TCP")},
                              endpoints={name: (Endpoint(NODE_IP, SERVER_PORT, is_local=True),)}, node_ip=NODE_IP)
        backend = UserspaceBackend(ProxyOptions(node_name="bench"))
        await backend.sync(request)
        print(f"ready {backend.proxy_port(name)} {type(asyncio.get_running_loop()).__module__}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


# ---- client (this process) -------------------------------------------------------------------


def download(addr, n: int) -> float:
    with socket.create_connection(addr) as s:
        start = time.perf_counter()
        s.sendall(b"D" + struct.pack("!Q", n))
        buf = bytearray(CHUNK)
        total = 0
        while (got := s.recv_into(buf)):
            total += got
        elapsed = time.perf_counter() - start
        s.sendall(b"x")
    assert total == n, (total, n)
    return n / elapsed / 1e6


def upload(addr, n: int) -> float:
    payload = memoryview(b"\0" * CHUNK)
    with socket.create_connection(addr) as s:
        start = time.perf_counter()
        s.sendall(b"U")
        left = n
        while left > 0:
            s.sendall(payload[:min(left, CHUNK)])
            left -= CHUNK
        s.shutdown(socket.SHUT_WR)
        ack = s.recv(8)
        elapsed = time.perf_counter() - start
    assert struct.unpack("!Q", ack)[0] == n
    return n / elapsed / 1e6


def connections(addr, seconds: float) -> float:
    count = 0
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < deadline:
        with socket.create_connection(addr) as s:
            s.sendall(b"C")
            got = s.recv(1)
            assert got == b"c", (count, got, addr)
        count += 1
    return count / (time.perf_counter() - start)


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
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def haproxy_config(path: Path) -> None:
    path.write_text(f"""global
    maxconn 8000
    nbthread 1
defaults
    mode tcp
    timeout connect 5s
    timeout client 60s
    timeout server 60s
listen bench
    bind 127.0.0.1:{HAPROXY_PORT}
    server s1 {NODE_IP}:{SERVER_PORT}
""")


def measure(name: str, addr, args) -> dict:
    connections(addr, 0.3)  # warm up
    return {"name": name, "download": max(download(addr, args.bytes) for _ in range(args.repeat)),
            "upload": max(upload(addr, args.bytes) for _ in range(args.repeat)),
            "conns": connections(addr, args.seconds)}


def inside(args) -> None:
    setup_links()
    me = [sys.executable, str(Path(__file__).resolve())]
    procs = []
    try:
        server, _ = start([*me, "--role", "server"], "server")
        procs.append(server)
        rows = [measure("direct", (NODE_IP, SERVER_PORT), args)]
        proxy, line = start([*me, "--role", "relay"], "userspace relay")
        procs.append(proxy)
        _, port, loop = line.split()
        rows.append(measure(f"userspace ({loop.split('.')[0]}, via {CLUSTER_IP}:80)", (CLUSTER_IP, 80), args))
        if shutil.which("haproxy") and not args.no_haproxy:
            cfg = Path(tempfile.mkdtemp()) / "haproxy.cfg"
            haproxy_config(cfg)
            ha = subprocess.Popen(["haproxy", "-db", "-f", str(cfg)], stdout=subprocess.DEVNULL)
            procs.append(ha)
            wait_port(HAPROXY_PORT)
            rows.append(measure("haproxy (mode tcp, 1 thread)", ("127.0.0.1", HAPROXY_PORT), args))
        else:
            print("haproxy not installed: skipped (apt-get install -y haproxy)")
    finally:
        for p in procs:
            p.kill()
            p.wait()
    direct = rows[0]
    print(f"\n{args.bytes / 2**20:.0f} MiB per bulk transfer (best of {args.repeat}), connections for {args.seconds:.0f} s; "
          f"{os.cpu_count()} CPUs shared by client, proxy and server\n")
    print(f"{'path':44} {'download MB/s':>14} {'ratio':>6} {'upload MB/s':>12} {'ratio':>6} {'conn/s':>8} {'ratio':>6}")
    for r in rows:
        print(f"{r['name']:44} {r['download']:14.0f} {r['download'] / direct['download']:6.2f} {r['upload']:12.0f} "
              f"{r['upload'] / direct['upload']:6.2f} {r['conns']:8.0f} {r['conns'] / direct['conns']:6.2f}")
    print("\nanchor: Go userspace kube-proxy 0.36 of direct throughput (kubernetes PR #16344)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=512 * 2**20, help="bytes per bulk transfer")
    parser.add_argument("--repeat", type=int, default=3, help="bulk transfers per direction (the best counts)")
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of the connections/s run")
    parser.add_argument("--no-haproxy", action="store_true")
    parser.add_argument("--role", choices=("server", "relay"), help=argparse.SUPPRESS)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "server":
        serve()
    elif args.role == "relay":
        relay()
    elif args.inside:
        inside(args)
    else:
        if os.geteuid() != 0:
            raise SystemExit("needs root (a network namespace of its own)")
        raise SystemExit(in_namespace([str(Path(__file__).resolve()), *sys.argv[1:]]))


if __name__ == "__main__":
    main()
