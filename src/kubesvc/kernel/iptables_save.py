"""Parsing ``iptables-save`` output, after upstream's ``pkg/util/iptables/testing/parse.go``
(``ParseIPTablesDump``, ``ParseRule``): the tables, their chains and each rule's parameters
(addresses, ports, marks, conntrack states, ``recent`` affinity, ``statistic`` probability,
the jump and its DNAT destination). Pure text parsing: the fake kernel (``kernel/fake/
iptables.py``) keeps its state in this form, and ``kubesvc trace`` (``proxy/trace/iptables.py``)
reads a node's live dump with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_WORD = re.compile(r'(?:^|\s)("[^"]*"|[^"]\S*)')
_DECLARE_TABLE = re.compile(r"^\*(.*)$")
_DECLARE_CHAIN = re.compile(r"^:([^ ]*) (?:-|ACCEPT|DROP) \[([0-9]*):([0-9]*)\]$")  # a built-in chain has its policy
_ADD_RULE = re.compile(r"^-A ([^ ]*) (.*)$")
_DELETE_CHAIN = re.compile(r"^-X (.*)$")


@dataclass
class Value:
    value: str
    negated: bool = False

    def matches(self, other: str) -> bool:
        return (self.value != other) if self.negated else (self.value == other)


# param -> (attribute, takes a value, negatable)
_PARAMS = {
    "-A": ("chain", True, False),
    "--comment": ("comment", True, False),
    "-p": ("protocol", True, True),
    "-s": ("source_address", True, True),
    "--src-type": ("source_type", True, True),
    "--sport": ("source_port", True, True),
    "-d": ("destination_address", True, True),
    "--dst-type": ("destination_type", True, True),
    "--dport": ("destination_port", True, True),
    "--match-set": ("match_set", True, True),
    "-j": ("jump", True, False),
    "--random-fully": ("random_fully", False, False),
    "--probability": ("probability", True, False),
    "--to-destination": ("dnat_destination", True, False),
    "--to-ports": ("redirect_ports", True, False),
    "--rcheck": ("affinity_check", False, True),
    "--mark": ("mark_check", True, True),
    "--ctstate": ("ctstate_check", True, True),
    "--name": ("affinity_name", True, False),
    "--seconds": ("affinity_seconds", True, False),
    "--set": ("affinity_set", False, True),
    "--reap": ("affinity_reap", False, False),
    "--mode": ("statistic_mode", True, False),
}


@dataclass
class Rule:
    raw: str
    chain: str = ""
    comment: Value | None = None
    protocol: Value | None = None
    source_address: Value | None = None
    source_type: Value | None = None
    source_port: Value | None = None
    destination_address: Value | None = None
    destination_type: Value | None = None
    destination_port: Value | None = None
    match_set: Value | None = None
    jump: Value | None = None
    random_fully: bool | None = None
    probability: Value | None = None
    dnat_destination: Value | None = None
    redirect_ports: Value | None = None
    affinity_check: bool | None = None
    mark_check: Value | None = None
    ctstate_check: Value | None = None
    affinity_name: Value | None = None
    affinity_seconds: Value | None = None
    affinity_set: bool | None = None
    affinity_reap: bool | None = None
    statistic_mode: Value | None = None


def parse_rule(raw: str) -> Rule:
    """upstream ``ParseRule(rule, strict=false)``."""
    rule = Rule(raw=raw)
    words = [w.strip('"') for w in _WORD.findall(raw)]
    if len(words) < 2 or words[0] != "-A":
        raise ValueError('bad iptables rule (does not start with "-A CHAIN")')
    if len(words) < 3:
        raise ValueError("bad iptables rule (no match rules)")
    negated = False
    w = 0
    while w < len(words):
        word = words[w]
        if word == "-m" and w < len(words) - 1:
            w += 2
            continue
        if word == "!":
            negated = True
            w += 1
            continue
        spec = _PARAMS.get(word)
        if spec is not None:
            attr, takes_value, negatable = spec
            if negated and not negatable:
                raise ValueError(f"cannot negate parameter {word!r}")
            if takes_value and w == len(words) - 1:
                raise ValueError(f"parameter {word!r} requires an argument")
            if not takes_value:
                setattr(rule, attr, not negated)
                w += 1
            elif attr == "chain":
                rule.chain = words[w + 1]
                w += 2
            else:
                setattr(rule, attr, Value(words[w + 1], negated))
                w += 2
        else:
            w += 1
        negated = False
    return rule


@dataclass
class Chain:
    name: str
    packets: int = 0
    bytes: int = 0
    rules: list[Rule] = field(default_factory=list)
    deleted: bool = False


@dataclass
class Table:
    name: str
    chains: list[Chain] = field(default_factory=list)

    def chain(self, name: str) -> Chain | None:
        return next((c for c in self.chains if c.name == name), None)


@dataclass
class Dump:
    tables: list[Table] = field(default_factory=list)

    def table(self, name: str) -> Table | None:
        return next((t for t in self.tables if t.name == name), None)

    def chain(self, table: str, chain: str) -> Chain | None:
        t = self.table(table)
        return t.chain(chain) if t else None

    def to_text(self) -> str:
        out = []
        for t in self.tables:
            out.append(f"*{t.name}")
            out += [f":{c.name} - [{c.packets}:{c.bytes}]" for c in t.chains]
            out += [r.raw for c in t.chains for r in c.rules]
            out += [f"-X {c.name}" for c in t.chains if c.deleted]
            out.append("COMMIT")
        return "".join(line + "\n" for line in out)


def parse_dump(data: str) -> Dump:
    """upstream ``ParseIPTablesDump``."""
    dump = Dump()
    state = "table"
    table: Table | None = None
    for line in data.strip("\n").split("\n"):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if state == "table":
            m = _DECLARE_TABLE.match(line)
            if not m:
                raise ValueError(f"could not parse iptables data (table {len(dump.tables) + 1} starts with {line!r} not a table name)")
            table = Table(m.group(1))
            dump.tables.append(table)
            state = "chains"
            continue
        if state == "chains":
            m = _DECLARE_CHAIN.match(line)
            if m:
                table.chains.append(Chain(m.group(1), int(m.group(2) or 0), int(m.group(3) or 0)))
                continue
            state = "rules"
        if m := _ADD_RULE.match(line):
            chain = table.chain(m.group(1))
            if chain is None:
                raise ValueError(f"error parsing rule {line!r}: no such chain {m.group(1)!r}")
            if chain.deleted:
                raise ValueError(f"cannot add rules to deleted chain {m.group(1)!r}")
            chain.rules.append(parse_rule(line))
        elif m := _DELETE_CHAIN.match(line):
            chain = table.chain(m.group(1))
            if chain is None:
                raise ValueError(f"error parsing rule {line!r}: no such chain {m.group(1)!r}")
            if chain.rules:
                raise ValueError(f"cannot delete chain {m.group(1)!r} after adding rules")
            chain.deleted = True
        elif line == "COMMIT":
            state = "table"
        else:
            raise ValueError(f"error parsing rule {line!r}")
    if state != "table":
        raise ValueError("could not parse iptables data (no COMMIT line?)")
    return dump
