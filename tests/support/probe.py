"""The client side of a kernel test: many connections (TCP) or datagrams (UDP) to one address,
tallied by which backend answered (backend_server replies ``"<name> <source ip it saw>"``).

    python -m tests.support.probe tcp 10.96.0.10 80 --count 300
    python -m tests.support.probe udp 10.96.0.10 53 --count 50 --source-port 40000 --interval 0.1 --sequence

Prints one JSON object::

    {"names": {"web-0": 151, "web-1": 149}, "sources": {"10.244.1.10": 300},
     "refused": 0, "timeouts": 0, "errors": {}, "answered": 300, "count": 300,
     "elapsed": 0.41, "sequence": ["web-0", "refused", "timeout", ...]}   # sequence: --sequence only

Each TCP attempt is a new connection from a new ephemeral port (so each is a new conntrack
flow and a new load-balancing decision); each UDP attempt a new socket, unless
``--source-port`` pins one: then one socket sends every datagram from that port, the way a
long-lived UDP client does (one conntrack flow throughout). Attempts run ``--concurrency`` at a
time, one at a time with ``--interval`` or ``--source-port``. A refusal (RST or ICMP
port-unreachable) counts as ``refused``, no answer within ``--timeout`` as ``timeouts``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import errno
import json
import socket
import sys
import time


def _outcome_of_error(exc: BaseException) -> str:
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "timeout"
    if isinstance(exc, ConnectionRefusedError) or getattr(exc, "errno", None) == errno.ECONNREFUSED:
        return "refused"
    if isinstance(exc, ConnectionResetError):
        return "reset"
    if isinstance(exc, OSError):
        return f"error:{errno.errorcode.get(exc.errno, exc.errno) if exc.errno else type(exc).__name__}"
    return f"error:{type(exc).__name__}"


async def _recv_line(loop, sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = await loop.sock_recv(sock, 256)
        if not chunk:
            break
        data += chunk
    return data


async def tcp_once(host: str, port: int, timeout: float, bind: tuple[str, int] | None) -> str:
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        if bind:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(bind)
        async with asyncio.timeout(timeout):
            await loop.sock_connect(sock, (host, port))
            data = await _recv_line(loop, sock)
        return data.decode(errors="replace").strip() or "error:empty"
    except BaseException as exc:  # noqa: BLE001 - every failure is an outcome
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return _outcome_of_error(exc)
    finally:
        sock.close()


async def udp_once(sock: socket.socket | None, host: str, port: int, timeout: float, bind: tuple[str, int] | None) -> str:
    loop = asyncio.get_running_loop()
    own = sock is None
    try:
        if own:
            sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
            sock.setblocking(False)
            if bind:
                sock.bind(bind)
            sock.connect((host, port))
        async with asyncio.timeout(timeout):
            await loop.sock_sendall(sock, b"hello\n")
            data = await loop.sock_recv(sock, 256)
        return data.decode(errors="replace").strip() or "error:empty"
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return _outcome_of_error(exc)
    finally:
        if own and sock is not None:
            sock.close()


async def run(args) -> dict:
    bind = (args.bind or "0.0.0.0", args.source_port or 0) if (args.bind or args.source_port) else None
    sequential = args.interval > 0 or args.source_port
    concurrency = 1 if sequential else max(1, args.concurrency)
    shared: socket.socket | None = None
    if args.proto == "udp" and args.source_port:
        shared = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET, socket.SOCK_DGRAM)
        shared.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        shared.setblocking(False)
        shared.bind(bind)
        shared.connect((args.host, args.port))

    outcomes: list[str | None] = [None] * args.count
    semaphore = asyncio.Semaphore(concurrency)

    async def attempt(i: int) -> None:
        async with semaphore:
            if args.proto == "tcp":
                outcomes[i] = await tcp_once(args.host, args.port, args.timeout, bind)
            else:
                outcomes[i] = await udp_once(shared, args.host, args.port, args.timeout, None if shared else bind)
            if args.interval > 0:
                await asyncio.sleep(args.interval)

    start = time.monotonic()
    if sequential:
        for i in range(args.count):
            await attempt(i)
            if args.stream:
                print(json.dumps({"i": i, "t": round(time.monotonic() - start, 3), "outcome": outcomes[i]}), flush=True)
    else:
        await asyncio.gather(*(attempt(i) for i in range(args.count)))
    elapsed = time.monotonic() - start
    if shared is not None:
        shared.close()
    return summarize(outcomes, elapsed, args.sequence)


def summarize(outcomes: list, elapsed: float, sequence: bool) -> dict:
    names: collections.Counter = collections.Counter()
    sources: collections.Counter = collections.Counter()
    errors: collections.Counter = collections.Counter()
    refused = timeouts = 0
    seq = []
    for outcome in outcomes:
        if outcome == "refused":
            refused += 1
            seq.append(outcome)
        elif outcome == "timeout":
            timeouts += 1
            seq.append(outcome)
        elif outcome.startswith("error:") or outcome == "reset":
            errors[outcome] += 1
            seq.append(outcome)
        else:
            name, _, source = outcome.partition(" ")
            names[name] += 1
            sources[source] += 1
            seq.append(name)
    result = {"names": dict(names), "sources": dict(sources), "refused": refused, "timeouts": timeouts, "errors": dict(errors),
              "answered": sum(names.values()), "count": len(outcomes), "elapsed": round(elapsed, 3)}
    if sequence:
        result["sequence"] = seq
    return result


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("proto", choices=["tcp", "udp"])
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1.0, help="seconds per attempt")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--bind", help="source address")
    parser.add_argument("--source-port", type=int, help="fixed source port (UDP: one socket for every datagram)")
    parser.add_argument("--interval", type=float, default=0.0, help="pause after each attempt (attempts run one at a time)")
    parser.add_argument("--sequence", action="store_true", help="also list each attempt's outcome in order")
    parser.add_argument("--stream", action="store_true", help="one JSON line per attempt as it happens (sequential runs)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    result = asyncio.run(run(parse(argv)))
    print(json.dumps(result), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
