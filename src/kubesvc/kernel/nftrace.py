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
import subprocess
import sys

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


async def probe(*, netns: str | None, from_netns: str | None, source: str, dest: str, port: int, protocol: str,
                settle: float = 0.3) -> list[dict]:
    """Trace one real connection attempt from ``from_netns`` (None: this namespace) through the
    rules of ``netns`` (None: this one); see the module docstring."""
    fam = "ip6" if ":" in dest else "ip"
    match = f"{fam} saddr {source} {fam} daddr {dest} {protocol} dport {port} meta nftrace set 1"
    table = (f"table {fam} {TRACE_TABLE} {{\n"
             f"  chain pre {{ type filter hook prerouting priority -350; {match}; }}\n"
             f"  chain out {{ type filter hook output priority -350; {match}; }}\n}}\n")
    await run(in_netns(netns, ["nft", "-f", "-"]), table)
    monitor = None
    try:
        monitor = subprocess.Popen(in_netns(netns, ["nft", "monitor", "trace"]), stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True)
        await asyncio.sleep(settle)  # the monitor subscribes before the packet is sent
        await run(in_netns(from_netns, [sys.executable, "-c", _CONNECT, dest, str(port), protocol]), check=False)
        await asyncio.sleep(settle)
    finally:
        output = ""
        if monitor is not None:
            monitor.terminate()
            try:
                output = monitor.communicate(timeout=5)[0]
            except subprocess.TimeoutExpired:
                monitor.kill()
                output = monitor.communicate()[0]
        await run(in_netns(netns, ["nft", "delete", "table", fam, TRACE_TABLE]), check=False)
    return parse_monitor(output)
