"""A packet tracer over our iptables layout (``proxy/iptables/rules.py``), read from a node's
live ``iptables-save`` (``kernel/iptables_save.py`` parses it), after upstream's
``iptablesTracer`` (``pkg/proxy/iptables/proxier_test.go``) but walking the hooks as the
kernel does rather than fixed chains:

1. **nat PREROUTING** (from the node itself: **nat OUTPUT**): ``KUBE-SERVICES`` and what it
   jumps to; a DNAT changes the destination the later hooks see;
2. **filter INPUT** when the destination is one of the node's addresses, else **filter
   FORWARD** (from the node: **filter OUTPUT**): ``KUBE-SERVICES`` (REJECT for no endpoints,
   DROP for no local endpoints), ``KUBE-PROXY-FIREWALL`` (source ranges), ``KUBE-FORWARD``;
3. **nat POSTROUTING**: ``KUBE-POSTROUTING`` masquerades what ``KUBE-MARK-MASQ`` marked.

Each parameter as the kernel would see a new connection: ``--ctstate`` matches ``NEW`` (and
``DNAT`` once translated); ``-m recent --rcheck`` (a client seen before: ClientIP affinity)
never matches and its name is recorded; ``-m mark --mark V/M`` tests the packet's mark, which
``-j MARK --set-xmark V/M`` changes; ``--src-type``/``--dst-type LOCAL`` match the node's
addresses and loopback. A ``-m statistic --probability P`` jump is followed like every branch
of it (as upstream's tracer does), each DNAT target weighted by the chance of reaching it; the
walk goes on with the first target as the destination. ``-j REDIRECT --to-ports P`` (userspace
mode's portals) sends the packet to port P of the node itself (``Walk.redirect``); a packet
delivered to the node (filter INPUT) never reaches POSTROUTING. ``-m set --match-set NAME FLAGS``
(IPVS mode) is matched against the node's ipsets when the walk has them (``trace/ipvs.py``), and
raises ``TraceError`` otherwise, as does any parameter the tracer does not model. ``MARK``'s
``--or-mark``/``--xor-mark`` (as written; ``iptables-save`` lists ``--set-xmark``) are read too.
"""

from __future__ import annotations

import ipaddress
import re

from kubesvc.kernel.iptables_save import Dump, Rule, Value
from kubesvc.proxy.trace.nftables import TEST_LOCAL, TraceError, Walk, _canonical, _host

_SHORT_MARK = re.compile(r"--(or|xor|and)-mark (0x[0-9a-fA-F]+|\d+)")
_XMARK = re.compile(r"--set-xmark (0x[0-9a-fA-F]+|\d+)(?:/(0x[0-9a-fA-F]+|\d+))?")


def _address(value: Value, ip: str) -> bool:
    packet = ipaddress.ip_address(ip)
    if "/" in value.value:
        net = ipaddress.ip_network(value.value, strict=False)
        hit = packet.version == net.version and packet in net
    else:
        hit = packet == ipaddress.ip_address(value.value)
    return hit != value.negated


_MATCH_SET = re.compile(r"--match-set (\S+) (\S+)")


class _Tracer:
    def __init__(self, dump: Dump, source: str, protocol: str, dest: str, port: str, local: frozenset[str], sets=None):
        self.dump, self.source, self.protocol, self.dest, self.port, self.local = dump, source, protocol, dest, port, local
        self.sets = sets  # IPVS mode: a ``trace.ipvs.Sets`` (``ipset save``), for ``-m set --match-set``
        self.mark = 0
        self.dnatted = False
        self.hook = ""
        self.stack: list[str] = []
        self.steps: list[dict] = []
        self.matches: list[str] = []
        self.candidates: list[tuple[str, float]] = []
        self.outputs: list[str] = []
        self.affinity: list[str] = []
        self.comments: list[str] = []
        self.share = 1.0  # the chance that a new connection reaches the rule being read
        self.masquerade = False
        self.redirect: int | None = None

    def matches_rule(self, rule: Rule) -> bool:
        if rule.match_set is not None:
            m = _MATCH_SET.search(rule.raw)
            if self.sets is None or m is None:
                raise TraceError(f"an ipset match is not modelled: {rule.raw!r}")
            if self.sets.matches(m[1], m[2], self) == rule.match_set.negated:
                return False
        if rule.source_address is not None and not _address(rule.source_address, self.source):
            return False
        if rule.destination_address is not None and not _address(rule.destination_address, self.dest):
            return False
        if rule.source_type is not None and not rule.source_type.matches("LOCAL" if self.source in self.local else "-"):
            return False
        if rule.destination_type is not None and not rule.destination_type.matches("LOCAL" if self.dest in self.local else "-"):
            return False
        if rule.protocol is not None and not rule.protocol.matches(self.protocol):
            return False
        if rule.destination_port is not None and not rule.destination_port.matches(self.port):
            return False
        if rule.affinity_check:  # ``--rcheck``: a client seen before; a new one is not
            if rule.affinity_name and rule.affinity_name.value not in self.affinity:
                self.affinity.append(rule.affinity_name.value)
            return False
        if rule.mark_check is not None:
            value, _, mask = rule.mark_check.value.partition("/")
            hit = self.mark & int(mask or "0xffffffff", 0) == int(value, 0)
            if hit == rule.mark_check.negated:
                return False
        if rule.ctstate_check is not None:
            states = {"NEW", *(("DNAT",) if self.dnatted else ())}
            hit = bool(states & set(rule.ctstate_check.value.split(",")))
            if hit == rule.ctstate_check.negated:
                return False
        return True

    def run_chain(self, table: str, name: str) -> str | None:
        """The verdict that ended the chain (``accept``, ``drop``, ``reject``, ``dnat``,
        ``masquerade``), or None when it returned or fell off its end."""
        chain = self.dump.chain(table, name)
        if chain is None:
            raise TraceError(f"no chain {table}/{name}")
        if len(self.stack) > 64:
            raise TraceError(f"chain {name!r}: jumps nest too deep (a loop?)")
        self.stack.append(name)
        self.steps.append({"hook": self.hook, "chain": name, "rule": None})
        try:
            for rule in chain.rules:
                if rule.jump is None or not self.matches_rule(rule):
                    continue
                self.matches.append(rule.raw)
                self.steps.append({"hook": self.hook, "chain": name, "rule": rule.raw})
                if rule.comment is not None:
                    self.comments.append(rule.comment.value)
                verdict = self.target(table, rule)
                if verdict == "return":
                    return None
                if verdict is not None:
                    return verdict
            return None
        finally:
            self.stack.pop()

    def target(self, table: str, rule: Rule) -> str | None:
        target = rule.jump.value
        if target == "MARK":
            m = _XMARK.search(rule.raw)
            short = _SHORT_MARK.search(rule.raw)
            if m is not None:
                value, mask = int(m[1], 0), int(m[2] or "0xffffffff", 0)
                self.mark = (self.mark & ~mask) ^ value
            elif short is not None:  # as written (iptables-save lists them as --set-xmark)
                bits = int(short[2], 0)
                self.mark = {"or": self.mark | bits, "xor": self.mark ^ bits, "and": self.mark & bits}[short[1]]
            else:
                raise TraceError(f"a MARK target the tracer does not read: {rule.raw!r}")
            return None
        if target == "RETURN":
            return "return"
        if target in ("ACCEPT", "DROP", "REJECT"):
            if target != "ACCEPT":
                self.outputs.append(target)
            return target.lower()
        if target == "DNAT":
            self.candidates.append((rule.dnat_destination.value, self.share))
            self.outputs.append(rule.dnat_destination.value)
            return "dnat"
        if target == "REDIRECT":  # to a port of the node itself (userspace mode: the proxy's listener)
            if rule.redirect_ports is None:
                raise TraceError(f"a REDIRECT without --to-ports: {rule.raw!r}")
            self.redirect = int(rule.redirect_ports.value.split("-")[0])
            self.outputs.append(f"REDIRECT {self.redirect}")
            return "dnat"
        if target == "MASQUERADE":
            self.masquerade = True
            return "accept"
        share, mark, first = self.share, self.mark, not self.candidates
        if rule.probability is None:
            verdict = self.run_chain(table, target)
            if verdict == "dnat" and not first:  # the last branch: the walk goes on as the first branch's packet
                self.mark = mark
            return verdict
        chance = float(rule.probability.value)
        self.share = share * chance
        verdict = self.run_chain(table, target)
        self.share = share * (1 - chance)
        if verdict != "dnat":
            raise TraceError(f"a probability branch that does not DNAT: {rule.raw!r}")
        if not first:  # the walk goes on as the first branch's packet
            self.mark = mark
        return None


def trace(dump: Dump | None, source: str, protocol: str, dest: str, port: int | str, node_ips=(), *,
          from_node: bool = False) -> Walk:
    """The walk of a new connection through a parsed ``iptables-save`` (see the module docstring)."""
    local = frozenset(_canonical(ip) for ip in (*TEST_LOCAL, *node_ips))
    t = _Tracer(dump or Dump(), _canonical(source), protocol, _canonical(dest), str(port), local)
    verdict = ""
    if dump is not None and dump.table("nat") is not None:
        t.hook = "output" if from_node else "prerouting"
        t.run_chain("nat", "OUTPUT" if from_node else "PREROUTING")
        if t.candidates:
            t.dest, t.dnatted = _canonical(_host(t.candidates[0][0])), True
        elif t.redirect is not None:  # the kernel's choice: the primary address of the interface it came in on
            own = sorted(local - set(TEST_LOCAL))
            t.dest, t.port, t.dnatted = (own[0] if own else "127.0.0.1"), str(t.redirect), True
        filter_chain = "OUTPUT" if from_node else ("INPUT" if t.dest in local else "FORWARD")
        ended = None
        if dump.chain("filter", filter_chain) is not None:
            t.hook = filter_chain.lower()
            ended = t.run_chain("filter", filter_chain)
        if ended in ("drop", "reject"):
            verdict = ended.upper()
        elif from_node or filter_chain != "INPUT":  # delivered here, a packet never reaches POSTROUTING
            t.hook = "postrouting"
            t.run_chain("nat", "POSTROUTING")
    candidates = [(ep, round(share, 6)) for ep, share in t.candidates]
    verdict = verdict or ("DNAT" if candidates else "")
    return Walk(t.steps, candidates, t.masquerade and bool(candidates), verdict, t.affinity, t.matches, t.comments,
                ", ".join(t.outputs), redirect=t.redirect)
