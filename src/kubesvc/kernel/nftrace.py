"""The kernel's own trace of one real packet (``nft monitor trace``, the nftables wiki's
"Ruleset debug/tracing"): a table of ours, ``kubesvc-trace``, sets ``meta nftrace set 1`` on
packets from ``source`` to ``dest:port`` at priority -350 (before every other chain) on the
prerouting and output hooks; while ``nft monitor trace`` listens, one connection is attempted
from the namespace ``from_netns``; the table is removed in every case.

``parse_monitor`` reads the monitor's lines of the first traced packet (the connection's first
one: its SYN, or the UDP datagram) in our ``kube-proxy`` table: each chain the packet entered
(``packet:`` lines) and each rule that matched with the kernel's verdict (``rule … (verdict
…)``), in order.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Awaitable, Callable

from kubesvc.kernel.exec import in_netns, run

TRACE_TABLE = "kubesvc-trace"
_LINE = re.compile(r"^trace id (?P<id>\S+) (?P<family>ip6?) (?P<table>\S+) (?P<chain>\S+) (?P<what>packet:|rule|policy|verdict)(?P<rest>.*)$")
_RULE = re.compile(r"^ (?P<rule>.*) \(verdict (?P<verdict>[^)]*)\)\s*$")

# One connection attempt (TCP connect, or a UDP datagram) from inside a namespace, bounded.
_CONNECT = ("import socket,sys; h,p,k=sys.argv[1],int(sys.argv[2]),sys.argv[3]; "
            "s=socket.socket(socket.AF_INET6 if ':' in h else socket.AF_INET, socket.SOCK_DGRAM if k=='udp' else socket.SOCK_STREAM); "
            "s.settimeout(1.0)\n"
            "try:\n s.connect((h,p)); s.send(b'x') if k=='udp' else None\nexcept OSError: pass")


def parse_monitor(text: str, table: str = "kube-proxy") -> list[dict]:
    """The first traced packet's steps in ``table``: {"chain", "rule" (None: entered), "verdict"}."""
    first = None
    steps: list[dict] = []
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m is None:
            continue
        first = first or m["id"]
        if m["id"] != first or m["table"] != table:
            continue
        if m["what"] == "packet:":
            steps.append({"chain": m["chain"], "rule": None, "verdict": None})
        elif m["what"] == "rule":
            r = _RULE.match(m["rest"])
            if r:
                steps.append({"chain": m["chain"], "rule": r["rule"].strip(), "verdict": r["verdict"]})
    return steps


MONITOR_STOP_GRACE = 5.0  # seconds a monitor has to exit after SIGTERM before it is killed


async def trace_connection(monitor: list[str], *, install: Callable[[], Awaitable[None]], remove: Callable[[], Awaitable[None]],
                           from_netns: str | None, dest: str, port: int, protocol: str, settle: float = 0.3) -> str:
    """The probe's skeleton, shared by the nftables and the iptables probe (``xtrace.py``):
    ``install()`` what marks the flow for tracing, start ``monitor`` (a command printing the
    kernel's trace events), give it ``settle`` seconds to subscribe, make one connection attempt
    (TCP connect or a UDP datagram) from ``from_netns``, give the events ``settle`` seconds, stop
    the monitor's process group (SIGTERM, then SIGKILL after ``MONITOR_STOP_GRACE``) and ``remove()`` what was
    installed, in every case (also after a failed or partial install). What the monitor printed.
    Nothing here blocks the event loop: the monitor's output is read as it comes."""
    proc = None
    chunks: list[bytes] = []
    try:
        await install()
        proc = await asyncio.create_subprocess_exec(*monitor, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
        reading = asyncio.create_task(_drain(proc.stdout, chunks))  # meanwhile: a full pipe would stall the monitor
        await asyncio.sleep(settle)  # the monitor subscribes before the packet is sent
        await run(in_netns(from_netns, [sys.executable, "-c", _CONNECT, dest, str(port), protocol]), check=False)
        await asyncio.sleep(settle)
    finally:
        if proc is not None:
            await _stop(proc)
            try:  # the rest of its output; a child it left holding the pipe must not hold us
                await asyncio.wait_for(reading, MONITOR_STOP_GRACE)
            except asyncio.TimeoutError:
                pass
        await remove()
    return b"".join(chunks).decode(errors="replace")


async def _drain(stream: asyncio.StreamReader, chunks: list[bytes]) -> None:
    while chunk := await stream.read(65536):
        chunks.append(chunk)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM to the monitor's process group, SIGKILL after the grace (the group: a child of
    the monitor holding its output pipe would keep the wait going)."""
    import signal

    from kubesvc.kernel.process import kill_group

    if proc.returncode is None:
        kill_group(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), MONITOR_STOP_GRACE)
            return
        except asyncio.TimeoutError:
            kill_group(proc.pid, signal.SIGKILL)
    await proc.wait()


async def probe(*, netns: str | None, from_netns: str | None, source: str, dest: str, port: int, protocol: str,
                settle: float = 0.3) -> list[dict]:
    """Trace one real connection attempt from ``from_netns`` (None: this namespace) through the
    rules of ``netns`` (None: this one); see the module docstring."""
    fam = "ip6" if ":" in dest else "ip"
    match = f"{fam} saddr {source} {fam} daddr {dest} {protocol} dport {port} meta nftrace set 1"
    table = (f"table {fam} {TRACE_TABLE} {{\n"
             f"  chain pre {{ type filter hook prerouting priority -350; {match}; }}\n"
             f"  chain out {{ type filter hook output priority -350; {match}; }}\n}}\n")

    async def install() -> None:
        await run(in_netns(netns, ["nft", "-f", "-"]), table)

    async def remove() -> None:
        await run(in_netns(netns, ["nft", "delete", "table", fam, TRACE_TABLE]), check=False)

    output = await trace_connection(in_netns(netns, ["nft", "monitor", "trace"]), install=install, remove=remove,
                                    from_netns=from_netns, dest=dest, port=port, protocol=protocol, settle=settle)
    return parse_monitor(output)
