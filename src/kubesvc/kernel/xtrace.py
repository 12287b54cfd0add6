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
``xtables-monitor --trace``, makes one connection attempt from the namespace ``from_netns``
(the skeleton it shares with the nftables probe: ``nftrace.trace_connection``), and deletes the
rules in every case, and with them what iptables-nft made to hold them: the ``raw`` table (or
its built-in chain) when it was not there before. ``parse_monitor`` keeps the lines of the first packet (its
IP ``ID=``: the SYN, or the UDP datagram) outside the ``raw`` table.
"""

from __future__ import annotations

import json
import re

from kubesvc.kernel.exec import CommandFailed, in_netns, run
from kubesvc.kernel.nftrace import trace_connection

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


def raw_leftovers(before: dict[str, int] | None, after: dict[str, int] | None) -> tuple[list[str], bool]:
    """What of nftables' ``raw`` table the probe made and must remove once its rules are gone
    (iptables-nft creates the table and a built-in chain on the first rule inserted there, and
    deleting the rule leaves them): (the chains absent ``before`` that hold no rule ``after``,
    whether to delete the whole table: it was absent before and holds no rule now).
    ``before``/``after``: chain name -> its number of rules, None for no table."""
    if after is None:
        return [], False
    if before is None and not any(after.values()):
        return [], True
    return [chain for chain, rules in after.items() if rules == 0 and before is not None and chain not in before], False


async def raw_table(netns: str | None, family: str) -> dict[str, int] | None:
    """nftables' ``<family> raw`` table (where iptables-nft keeps iptables' raw table) as chain
    -> number of rules; None when there is no such table. CommandFailed when nft cannot tell."""
    result = await run(in_netns(netns, ["nft", "-j", "list", "table", family, "raw"]), check=False)
    if result.returncode != 0:
        if "No such file or directory" in result.stderr:
            return None
        raise CommandFailed(result.argv, result.returncode, result.stdout, result.stderr)
    chains: dict[str, int] = {}
    for item in json.loads(result.stdout).get("nftables", []):
        if "chain" in item:
            chains.setdefault(item["chain"]["name"], 0)
        elif "rule" in item:
            chains[item["rule"]["chain"]] = chains.get(item["rule"]["chain"], 0) + 1
    return chains


async def probe(*, netns: str | None, from_netns: str | None, source: str, dest: str, port: int, protocol: str,
                settle: float = 0.3) -> list[dict]:
    """Trace one real connection attempt from ``from_netns`` through the iptables of ``netns``
    (see the module docstring); raises ``ProbeUnsupported`` for legacy iptables. Leaves the
    ``raw`` table as it found it: the probe's rules deleted, and the table or chains iptables-nft
    made for them removed (``raw_leftovers``)."""
    v6 = ":" in dest
    tool, family = ("ip6tables", "ip6") if v6 else ("iptables", "ip")
    if await backend_kind(netns) == "legacy":
        raise ProbeUnsupported("legacy iptables logs TRACE to the kernel log (nf_log), which --probe does not read; "
                               "use iptables-nft (xtables-monitor --trace)")
    match = ["-s", source, "-d", dest, "-p", protocol, "--dport", str(port), "-m", "comment", "--comment", COMMENT, "-j", "TRACE"]
    inserted: list[str] = []
    try:
        before: dict[str, int] | None | bool = await raw_table(netns, family)
    except CommandFailed:
        before = False  # no nft to ask: the rules are removed, the table left as iptables leaves it

    async def install() -> None:
        for chain in ("PREROUTING", "OUTPUT"):
            await run(in_netns(netns, [tool, "-w", "5", "-t", "raw", "-I", chain, "1", *match]))
            inserted.append(chain)

    async def remove() -> None:
        for chain in inserted:
            try:
                await run(in_netns(netns, [tool, "-w", "5", "-t", "raw", "-D", chain, *match]))
            except CommandFailed:
                pass
        if before is False:
            return
        try:
            chains, whole = raw_leftovers(before, await raw_table(netns, family))
            if whole:
                await run(in_netns(netns, ["nft", "delete", "table", family, "raw"]))
            for chain in chains:
                await run(in_netns(netns, ["nft", "delete", "chain", family, "raw", chain]))
        except CommandFailed:
            pass  # another writer's rules arrived meanwhile: theirs now

    output = await trace_connection(in_netns(netns, ["xtables-monitor", "--trace", "-6" if v6 else "-4"]), install=install,
                                    remove=remove, from_netns=from_netns, dest=dest, port=port, protocol=protocol, settle=settle)
    return parse_monitor(output)
