"""The kernel's own trace of one real packet through iptables (``kubesvc trace --probe`` in
iptables mode), the counterpart of ``nftrace.py``.

iptables marks a packet for tracing with the ``TRACE`` target, which is valid only in the
``raw`` table (its PREROUTING and OUTPUT chains run before conntrack and every other table).
Where the trace then goes depends on which iptables this is (``iptables --version``):

* **nf_tables** (``iptables v1.8.9 (nf_tables)``, Debian's default): ``-j TRACE`` sets the
  packet's ``nftrace`` bit, and the kernel reports every rule the packet meets as nftables trace
  events; ``xtables-monitor --trace`` prints them in iptables' own syntax, one ``PACKET:`` line
  per hook and one ``TRACE:`` line per rule that matched
  (``TRACE: 2 539fad8d nat:KUBE-SERVICES:rule:0x57:JUMP:KUBE-SVC-...  -4 -t nat -A KUBE-SERVICES ...``);
* **legacy** (``(legacy)``): ``TRACE`` logs through ``nf_log`` to the kernel log (``dmesg``;
  inside a network namespace only with ``net.netfilter.nf_log_all_netns=1``), a node-wide
  stream this does not read: the probe refuses in one line there.

``probe`` inserts one ``TRACE`` rule per hook for exactly the probe's flow (source,
destination, protocol, port; commented ``kubesvc trace probe``), listens with
``xtables-monitor --trace``, makes one connection attempt from the namespace ``from_netns``,
and deletes the rules in every case. ``parse_monitor`` keeps the lines of the first packet (its
IP ``ID=``: the SYN, or the UDP datagram) outside the ``raw`` table.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys

from kubesvc.kernel.exec import CommandFailed, in_netns, run
from kubesvc.kernel.nftrace import _CONNECT

COMMENT = "kubesvc trace probe"
_PACKET = re.compile(r"^PACKET: \d+ \S+ .*?\bID=(?P<id>\d+)\b")
_TRACE = re.compile(r"^TRACE: \d+ \S+ (?P<table>[a-z]+):(?P<chain>[^:]+):(?P<kind>rule|policy|return)(?::0x[0-9a-f]+)?:"
                    r"(?P<verdict>[A-Z]+)(?::(?P<target>\S+))?\s*(?:-[46] -t \S+ (?P<rule>-A .*))?$")


class ProbeUnsupported(Exception):
    """This node's iptables cannot be probed (legacy: its traces go to the kernel log)."""


def parse_monitor(text: str) -> list[dict]:
    """The first packet's rules outside ``raw``: {"table", "chain", "rule" (``-A CHAIN ...``, None
    for a chain's policy), "verdict" (ACCEPT, DROP, JUMP:<chain>, CONTINUE, RETURN...)}."""
    first = None
    current = None
    steps: list[dict] = []
    for line in text.splitlines():
        line = line.strip()
        m = _PACKET.match(line)
        if m:
            first = first or m["id"]
            current = m["id"]
            continue
        m = _TRACE.match(line)
        if m is None or current is None or current != first or m["table"] == "raw":
            continue
        verdict = m["verdict"] + (f":{m['target']}" if m["target"] else "")
        steps.append({"table": m["table"], "chain": m["chain"], "rule": m["rule"].strip() if m["rule"] else None, "verdict": verdict})
    return steps


async def backend_kind(netns: str | None = None) -> str:
    """``nf_tables`` or ``legacy``: which iptables ``iptables --version`` says this is."""
    out = (await run(in_netns(netns, ["iptables", "--version"]))).stdout
    return "legacy" if "(legacy)" in out else "nf_tables"


async def probe(*, netns: str | None, from_netns: str | None, source: str, dest: str, port: int, protocol: str,
                settle: float = 0.3) -> list[dict]:
    """Trace one real connection attempt from ``from_netns`` through the iptables of ``netns``
    (see the module docstring); raises ``ProbeUnsupported`` for legacy iptables."""
    v6 = ":" in dest
    tool = "ip6tables" if v6 else "iptables"
    if await backend_kind(netns) == "legacy":
        raise ProbeUnsupported("legacy iptables logs TRACE to the kernel log (nf_log), which --probe does not read; "
                               "use iptables-nft (xtables-monitor --trace)")
    match = ["-s", source, "-d", dest, "-p", protocol, "--dport", str(port), "-m", "comment", "--comment", COMMENT, "-j", "TRACE"]
    inserted = []
    monitor = None
    output = ""
    try:
        for chain in ("PREROUTING", "OUTPUT"):
            await run(in_netns(netns, [tool, "-w", "5", "-t", "raw", "-I", chain, "1", *match]))
            inserted.append(chain)
        monitor = subprocess.Popen(in_netns(netns, ["xtables-monitor", "--trace", "-6" if v6 else "-4"]), stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True)
        await asyncio.sleep(settle)  # the monitor subscribes before the packet is sent
        await run(in_netns(from_netns, [sys.executable, "-c", _CONNECT, dest, str(port), protocol]), check=False)
        await asyncio.sleep(settle)
    finally:
        if monitor is not None:
            monitor.terminate()
            try:
                output = monitor.communicate(timeout=5)[0]
            except subprocess.TimeoutExpired:
                monitor.kill()
                output = monitor.communicate()[0]
        for chain in inserted:
            try:
                await run(in_netns(netns, [tool, "-w", "5", "-t", "raw", "-D", chain, *match]))
            except CommandFailed:
                pass
    return parse_monitor(output)
