"""A stateful iptables kernel for tests, ported from upstream's test helpers:

* ``parse_dump`` / ``Dump.to_text`` / ``parse_rule``: ``pkg/util/iptables/testing/parse.go`` (in
  ``kernel/iptables_save.py``, re-exported here);
* ``FakeIptables``: a stateful stand-in for the kernel behind ``kernel.iptables.Iptables`` and
  ``IptablesSync`` (``FakeIptablesAsync`` / ``FakeIptablesSync``). It models what the kernel
  rejects (jumps to missing chains, deleting a chain that is still referenced, a failed restore
  changes nothing) rather than recording calls;
* ``trace_packet`` / ``check_flows``: upstream's ``iptablesTracer`` and ``runPacketFlowTests``
  (``pkg/proxy/iptables/proxier_test.go``), which walk a packet through the fake's rules and
  report where it lands and whether it was marked for masquerade. ``TEST_NODE_IPS`` are the
  fake node's own addresses (upstream's ``testNodeIPs``): ``--src-type``/``--dst-type LOCAL``
  match them.

The golden-output helpers of upstream's proxier tests (rule sorting, jump checks) live with
the tests (``tests/proxy/iptables/golden.py``).
"""

from __future__ import annotations

import copy
import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass

from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.iptables import Iptables
# dump parsing (upstream parse.go) lives in kernel/iptables_save.py (kubesvc trace reads live
# dumps with it); its names stay importable from here for the tests
from kubesvc.kernel.iptables_save import (_ADD_RULE, _DECLARE_CHAIN, _DELETE_CHAIN, Chain, Dump, Rule, Table,  # noqa: F401
                                          Value, parse_dump, parse_rule)

_INSERT_RULE = re.compile(r"^-I ([^ ]*) (?:([0-9]+) )?(.*)$")


# ---- a stateful fake kernel ----------------------------------------------------------------------

BUILTIN_CHAINS = {
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
}
STANDARD_TARGETS = {"ACCEPT", "REJECT", "DROP", "MARK", "RETURN", "DNAT", "SNAT", "MASQUERADE"}
_TARGETS = STANDARD_TARGETS | {"LOG", "REDIRECT", "TPROXY", "CT", "NOTRACK", "TCPMSS", "CONNMARK"}


def _quote(arg: str) -> str:
    return f'"{arg}"' if (" " in arg or not arg) else arg


class FakeIptables:
    """The kernel's iptables state for one family, with both ``Iptables`` (async) and
    ``IptablesSync`` entry points. Rules are kept as restore-syntax text."""

    def __init__(self, family: int = 4):
        self.family = family
        self.nft = True
        # table -> chain -> list of raw rule texts ("-A CHAIN ...")
        self.tables: dict[str, dict[str, list[str]]] = {t: {c: [] for c in cs} for t, cs in BUILTIN_CHAINS.items()}
        self.restores: list[str] = []
        self.fail_next_restore: str | None = None
        self.calls: list[tuple[str, ...]] = []

    # -- helpers
    def _fail(self, op: str, message: str, input_text: str | None = None, code: int = 1):
        raise CommandFailed(("fake-iptables", op), code, "", message, input_text)

    def _table(self, table: str) -> dict[str, list[str]]:
        if table not in self.tables:
            self._fail("-t", f"can't initialize iptables table `{table}'")
        return self.tables[table]

    @staticmethod
    def _references(chains: dict[str, list[str]], target: str) -> list[str]:
        return [r for rules in chains.values() for r in rules if (j := parse_rule(r).jump) is not None and j.value == target]

    def _check_jumps(self, table: str, chains: dict[str, list[str]], op: str, text: str | None) -> None:
        for rules in chains.values():
            for raw in rules:
                j = parse_rule(raw).jump
                if j is not None and j.value not in _TARGETS and j.value not in chains:
                    self._fail(op, f"iptables-restore: line: Couldn't load target `{j.value}':No such file or directory", text, 2)

    # -- sync API (IptablesSync)
    def version_sync(self) -> tuple[int, int, int]:
        return (1, 8, 9)

    def available(self) -> bool:
        return True

    def restore_sync(self, text: str, *, table: str | None = None, noflush: bool = True, counters: bool = True) -> None:
        self.calls.append(("restore", table or ""))
        if self.fail_next_restore is not None:
            message, self.fail_next_restore = self.fail_next_restore, None
            self._fail("restore", message, text)
        new = copy.deepcopy(self.tables)
        current: dict[str, list[str]] | None = None
        current_name = ""
        deleted: dict[str, set[str]] = {}
        for number, line in enumerate(text.split("\n"), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("*"):
                current_name = line[1:]
                if table is not None and current_name != table:
                    self._fail("restore", f"line {number}: table `{current_name}' not selected by -T", text)
                current = new.setdefault(current_name, {c: [] for c in BUILTIN_CHAINS.get(current_name, ())})
                if not noflush:
                    for name in list(current):
                        if name in BUILTIN_CHAINS.get(current_name, ()):
                            current[name] = []
                        else:
                            del current[name]
                continue
            if current is None:
                self._fail("restore", f"line {number}: no table", text)
            if line == "COMMIT":
                for chain in deleted.get(current_name, ()):
                    if self._references(current, chain):
                        self._fail("restore", f"line {number}: CHAIN_DEL failed ({chain}): chain is referenced (Device or resource busy)", text, 4)
                self._check_jumps(current_name, current, "restore", text)
                current = None
                continue
            if m := _DECLARE_CHAIN.match(line):
                current[m.group(1)] = []  # create, or flush an existing chain
            elif line.startswith(":"):  # built-in chain with a policy
                name = line[1:].split(" ", 1)[0]
                current.setdefault(name, [])
                current[name] = []
            elif m := _ADD_RULE.match(line):
                if m.group(1) not in current:
                    self._fail("restore", f"line {number}: chain {m.group(1)} does not exist", text)
                current[m.group(1)].append(line)
            elif m := _INSERT_RULE.match(line):  # -I CHAIN [N] ...: at position N (1, the top, by default)
                chain, position, rest = m.group(1), int(m.group(2) or 1), m.group(3)
                if chain not in current:
                    self._fail("restore", f"line {number}: chain {chain} does not exist", text)
                current[chain].insert(position - 1, f"-A {chain} {rest}")
            elif m := _DELETE_CHAIN.match(line):
                name = m.group(1)
                if name not in current:
                    self._fail("restore", f"line {number}: chain {name} does not exist", text)
                if current[name]:
                    self._fail("restore", f"line {number}: chain {name} is not empty", text)
                del current[name]
                deleted.setdefault(current_name, set()).add(name)
            else:
                self._fail("restore", f"line {number}: bad line {line!r}", text)
        if current is not None:
            self._fail("restore", "no COMMIT line", text)
        self.tables = new
        self.restores.append(text)

    def save_sync(self, table: str | None = None) -> str:
        out = []
        for name in ([table] if table else list(self.tables)):
            chains = self.tables.get(name, {c: [] for c in BUILTIN_CHAINS.get(name, ())})
            out.append(f"*{name}")
            builtin = BUILTIN_CHAINS.get(name, ())
            out += [f":{c} ACCEPT [0:0]" for c in chains if c in builtin]
            out += [f":{c} - [0:0]" for c in sorted(chains) if c not in builtin]
            out += [r for rules in chains.values() for r in rules]
            out.append("COMMIT")
        return "".join(line + "\n" for line in out)

    def chain_exists_sync(self, table: str, chain: str) -> bool:
        return chain in self.tables.get(table, {})

    def ensure_chain_sync(self, table: str, chain: str) -> bool:
        chains = self._table(table)
        if chain in chains:
            return True
        chains[chain] = []
        return False

    def delete_chain_sync(self, table: str, chain: str) -> None:
        chains = self._table(table)
        if chain not in chains:
            self._fail("-X", "iptables: No chain/target/match by that name.")
        if chains[chain] or self._references(chains, chain):
            self._fail("-X", "iptables: Directory not empty / Too many links.")
        del chains[chain]

    def flush_chain_sync(self, table: str, chain: str) -> None:
        chains = self._table(table)
        if chain not in chains:
            self._fail("-F", "iptables: No chain/target/match by that name.")
        chains[chain] = []

    def _raw(self, chain: str, args) -> str:
        return " ".join(["-A", chain, *(_quote(a) for a in args)])

    def rule_exists_sync(self, table: str, chain: str, *args: str) -> bool:
        return self._raw(chain, args) in self.tables.get(table, {}).get(chain, [])

    def ensure_rule_sync(self, position: str, table: str, chain: str, *args: str) -> bool:
        chains = self._table(table)
        if chain not in chains:
            self._fail(position, f"iptables: No chain/target/match by that name ({chain}).")
        raw = self._raw(chain, args)
        if raw in chains[chain]:
            return True
        target = parse_rule(raw).jump
        if target is not None and target.value not in _TARGETS and target.value not in chains:
            self._fail(position, f"Couldn't load target `{target.value}'", code=2)
        if position == "-I":
            chains[chain].insert(0, raw)
        else:
            chains[chain].append(raw)
        return False

    def delete_rule_sync(self, table: str, chain: str, *args: str) -> bool:
        rules = self.tables.get(table, {}).get(chain)
        raw = self._raw(chain, args)
        if rules is None or raw not in rules:
            return False
        rules.remove(raw)
        return True

    # -- inspection
    def rules(self, table: str, chain: str) -> list[Rule]:
        return [parse_rule(r) for r in self.tables.get(table, {}).get(chain, [])]


class FakeIptablesAsync(FakeIptables):
    """``kernel.iptables.Iptables``' interface over the fake."""

    async def version(self):
        return self.version_sync()

    async def restore(self, text, *, table=None, noflush=True, counters=True):
        self.restore_sync(text, table=table, noflush=noflush, counters=counters)

    async def save(self, table):
        return self.save_sync(table)

    async def chain_exists(self, table, chain):
        return self.chain_exists_sync(table, chain)

    async def ensure_chain(self, table, chain):
        return self.ensure_chain_sync(table, chain)

    async def delete_chain(self, table, chain):
        self.delete_chain_sync(table, chain)

    async def rule_exists(self, table, chain, *args):
        return self.rule_exists_sync(table, chain, *args)

    async def ensure_rule(self, position, table, chain, *args):
        return self.ensure_rule_sync(position, table, chain, *args)

    ensure_jumps = Iptables.ensure_jumps  # the real composite, over this fake's save and restore


class FakeIptablesSync(FakeIptables):
    """``kernel.iptables.IptablesSync``' interface over the fake (for ``cleanup_leftovers``)."""

    def version(self):
        return self.version_sync()

    def restore(self, text, *, table=None, noflush=True, counters=True):
        self.restore_sync(text, table=table, noflush=noflush, counters=counters)

    def save(self, table=None):
        return self.save_sync(table)

    def chain_exists(self, table, chain):
        return self.chain_exists_sync(table, chain)

    def delete_chain(self, table, chain):
        self.delete_chain_sync(table, chain)

    def rule_exists(self, table, chain, *args):
        return self.rule_exists_sync(table, chain, *args)

    def delete_rule(self, table, chain, *args):
        return self.delete_rule_sync(table, chain, *args)


def share_state(a: FakeIptables, b: FakeIptables) -> None:
    """Let ``b`` see (and change) ``a``'s kernel state."""
    b.__dict__ = a.__dict__


# ---- the packet tracer (upstream iptablesTracer) -----------------------------------------------

TEST_NODE_NAME = "test-node"
TEST_NODE_IP = "192.168.0.2"
TEST_NODE_IP_ALT = "192.168.1.2"
TEST_EXTERNAL_IP = "192.168.99.11"
TEST_NODE_IPV6 = "2001:db8::1"
TEST_NODE_IPV6_ALT = "2001:db8:1::2"
TEST_EXTERNAL_CLIENT = "203.0.113.2"
TEST_EXTERNAL_CLIENT_BLOCKED = "203.0.113.130"
TEST_NODE_IPS = (TEST_NODE_IP, TEST_NODE_IP_ALT, TEST_EXTERNAL_IP, TEST_NODE_IPV6, TEST_NODE_IPV6_ALT)


def _address_matches(address: Value, ip: str) -> bool:
    packet = ipaddress.ip_address(ip)
    if "/" in address.value:
        net = ipaddress.ip_network(address.value, strict=False)
        matches = packet.version == net.version and packet in net
    else:
        matches = packet == ipaddress.ip_address(address.value)
    return matches != address.negated


class Tracer:
    def __init__(self, ipt: FakeIptables, node_ips=TEST_NODE_IPS):
        self.ipt = ipt
        self.local_ips = {"127.0.0.1", "::1", *node_ips}
        self.matches: list[str] = []
        self.outputs: list[str] = []
        self.mark_masq = False

    def rule_matches(self, rule: Rule, src: str, proto: str, dst: str, dport: str) -> bool:
        if rule.source_address is not None and not _address_matches(rule.source_address, src):
            return False
        if rule.source_type is not None and not rule.source_type.matches("LOCAL" if src in self.local_ips else "not-matched"):
            return False
        if rule.protocol is not None and not rule.protocol.matches(proto):
            return False
        if rule.destination_address is not None and not _address_matches(rule.destination_address, dst):
            return False
        if rule.destination_type is not None and not rule.destination_type.matches("LOCAL" if dst in self.local_ips else "not-matched"):
            return False
        if rule.destination_port is not None and not rule.destination_port.matches(dport):
            return False
        # rules that look at past state (affinity, marks, conntrack) never match
        if rule.affinity_check is not None or rule.mark_check is not None or rule.ctstate_check is not None:
            return False
        return True

    def run_chain(self, table: str, chain: str, src: str, proto: str, dst: str, dport: str) -> bool:
        for rule in self.ipt.rules(table, chain):
            if rule.jump is None or not self.rule_matches(rule, src, proto, dst, dport):
                continue
            self.matches.append(rule.raw)
            target = rule.jump.value
            if target == "KUBE-MARK-MASQ":
                self.mark_masq = True
                continue
            if target in ("ACCEPT", "REJECT", "DROP"):
                self.outputs.append(target)
                return True
            if target == "DNAT":
                self.outputs.append(rule.dnat_destination.value)
                return True
            terminated = self.run_chain(table, target, src, proto, dst, dport)
            if terminated and rule.probability is None:
                return True
        return False


def trace_packet(ipt: FakeIptables, src: str, proto: str, dst: str, dport: int | str, node_ips=TEST_NODE_IPS):
    """(matched rules, destinations joined by ", " or ACCEPT/DROP/REJECT or "", masqueraded)."""
    tracer = Tracer(ipt, node_ips)
    dport = str(dport)
    tracer.run_chain("nat", "PREROUTING", src, proto, dst, dport)
    if tracer.outputs:
        first = tracer.outputs[0]
        dst = first[1:first.index("]")] if first.startswith("[") else first.split(":")[0]
    for chain in ("KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES", "KUBE-NODEPORTS", "KUBE-PROXY-FIREWALL"):
        tracer.run_chain("filter", chain, src, proto, dst, dport)
    return tracer.matches, ", ".join(tracer.outputs), tracer.mark_masq


@dataclass
class Flow:
    name: str
    source: str
    dest: str
    port: int
    output: str
    masq: bool = False
    protocol: str = "tcp"


def check_flows(ipt: FakeIptables, flows: list[Flow], node_ips=TEST_NODE_IPS) -> None:
    """upstream ``runPacketFlowTests``: every failing flow is reported together."""
    run_flows(lambda flow: trace_packet(ipt, flow.source, flow.protocol, flow.dest, flow.port, node_ips), flows)


def run_flows(trace: Callable[[Flow], tuple[list[str], str, bool]], flows: list[Flow]) -> None:
    """Each flow through ``trace`` (→ matched rules, output, masqueraded); an AssertionError
    lists every flow that came out otherwise, with the rules it matched. Both fakes' tracers
    (this module's and ``proxy/trace/nftables.py``) report through it."""
    errors = []
    for flow in flows:
        matches, output, masq = trace(flow)
        problems = []
        if output != flow.output:
            problems.append(f"wrong output: expected {flow.output!r} got {output!r}")
        if masq != flow.masq:
            problems.append(f"wrong masq: expected {flow.masq} got {masq}")
        if problems:
            errors.append(f"{flow.name!r} ({flow.protocol} {flow.source} -> {flow.dest}:{flow.port}): " + "; ".join(problems)
                          + "\n  by matching:\n    " + "\n    ".join(matches))
    assert not errors, "\n".join(errors)
