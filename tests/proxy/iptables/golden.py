"""Golden-output helpers of upstream's ``pkg/proxy/iptables/proxier_test.go``:

* ``sort_iptables_rules``: upstream's golden outputs are in this sorted order, as Services come
  out of a Go map;
* ``check_rule_jumps``: ``checkIPTablesRuleJumps``;
* ``count_rules`` / ``chain_rules``: ``countRules`` and ``assertIPTablesChainEqual``'s view.
"""

from __future__ import annotations

import functools
import re

from kubesvc.kernel.fake.iptables import STANDARD_TARGETS, Rule, parse_dump

def _comment_service(rule: Rule) -> str | None:
    if rule.comment is None:
        return None
    name = rule.comment.value
    i = min((i for i in (name.find(" "), name.find(":")) if i != -1), default=-1)
    return name[:i] if i != -1 else name


def _order_by_comment(a: Rule, b: Rule) -> bool:
    na, nb = _comment_service(a), _comment_service(b)
    if na is None or nb is None:
        return False
    return na < nb


def _stable_sort(rules: list[Rule], less) -> None:
    rules.sort(key=functools.cmp_to_key(lambda a, b: -1 if less(a, b) else (1 if less(b, a) else 0)))


def _chain_key(name: str) -> tuple:
    if name == "KUBE-NODEPORTS":
        return (0, "")
    if name == "KUBE-SERVICES":
        return (1, "")
    return (2 if name.startswith("KUBE-") else 3, name)


def sort_iptables_rules(data: str) -> str:
    """upstream ``sortIPTablesRules``: tables and chains sorted, KUBE-NODEPORTS and KUBE-SERVICES
    rules ordered by Service name (the nodeports jump kept last), other rule orders kept."""
    dump = parse_dump(data)
    dump.tables.sort(key=lambda t: t.name)
    for t in dump.tables:
        t.chains.sort(key=lambda c: _chain_key(c.name))
    for table, chain in (("filter", "KUBE-NODEPORTS"), ("nat", "KUBE-NODEPORTS"), ("filter", "KUBE-SERVICES")):
        c = dump.chain(table, chain)
        if c is not None:
            _stable_sort(c.rules, _order_by_comment)
    c = dump.chain("nat", "KUBE-SERVICES")
    if c is not None:
        def less(a: Rule, b: Rule) -> bool:
            if a.comment is not None and "must be the last rule" in a.comment.value:
                return False
            if b.comment is not None and "must be the last rule" in b.comment.value:
                return True
            return _order_by_comment(a, b)
        _stable_sort(c.rules, less)
    return dump.to_text()


_TOP_LEVEL = {"KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-FORWARD",
              "KUBE-MARK-MASQ", "KUBE-PROXY-FIREWALL", "KUBE-FIREWALL"}


def _find_all(lines: list[str], pattern: str) -> set[str]:
    regex = re.compile(pattern)
    return {m.group(1) for line in lines if (m := regex.search(line))}


def check_rule_jumps(data: str) -> None:
    """upstream ``checkIPTablesRuleJumps``: every jump goes to a created, non-empty chain and
    every created chain is used."""
    tables: dict[str, list[str]] = {}
    current: list[str] = []
    for line in data.strip("\n").split("\n"):
        if line.startswith("*"):
            current = tables.setdefault(line[1:], [])
        current.append(line)
    for name, lines in tables.items():
        created = _find_all(lines, r"^:([^ ]*)") - _find_all(lines, r"-X ([^ ]*)")
        filled = _find_all(lines, r"-A ([^ ]*)")
        jumped = _find_all(lines, r"-j ([^ ]*)") - STANDARD_TARGETS
        missing = (jumped - created) | (filled - created)
        assert not missing, f"some chains in {name} are used but were not created: {sorted(missing)}"
        empty = jumped - filled - {"KUBE-NODEPORTS"}
        assert not empty, f"some chains in {name} are jumped to but have no rules: {sorted(empty)}"
        extra = created - jumped - _TOP_LEVEL
        assert not extra, f"some chains in {name} are created but not used: {sorted(extra)}"


def count_rules(data: str, table: str) -> int:
    t = parse_dump(data).table(table)
    return sum(len(c.rules) for c in t.chains) if t else 0


def chain_rules(data: str, table: str, chain: str) -> str:
    """upstream ``assertIPTablesChainEqual``'s view: the raw rules of one chain."""
    c = parse_dump(data.lstrip(" \t\n")).chain(table, chain)
    return "".join(r.raw + "\n" for r in c.rules) if c else ""
