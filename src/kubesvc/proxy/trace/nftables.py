"""A packet tracer over our nftables table, after upstream's ``nftablesTracer`` / ``tracePacket``
(``pkg/proxy/nftables/helpers_test.go``): where does a new connection from ``source`` to
``dest:port`` end up, and is it masqueraded? It reads the fake's table in tests and the live
table (``table_from_listing``: ``nft -j list table`` for chains and sets, ``nft list table`` for
the rules' text, which the kernel prints in its own canonical form: ``meta mark & 0x00004000 ==
0x00000000``, ``dnat ip to numgen … map @m``; both forms are read) for ``kubesvc trace``.

Like upstream it does not parse nftables in general: it recognizes, piece by piece from the
left, the forms our rule layout writes (``proxy/nftables/rules.py``), and a rule with a piece it
does not know is an error (``TraceError``), so a new rule form cannot silently pass a
packet-flow test. Unlike upstream it walks the hooks as the kernel does, from the table's base
chains rather than from fixed chain names:

1. **prerouting**, base chains in priority order (the firewall check at -110, then the DNAT
   at -100); a ``drop``/``reject`` ends the trace; a connection the node itself starts
   (``from_node``) takes **output** instead, whose chains at priority 0 (the no-endpoint and
   invalid-ClusterIP checks) already see the DNAT's destination;
2. the destination becomes the (first) DNAT target, then **forward** if that is not one of the
   node's addresses, **input** if it is (where the no-endpoint and invalid-ClusterIP checks
   reject or drop; from the node: input only for its own addresses);
3. **postrouting** with the new destination: the masquerade decision, from the packet mark
   the earlier chains set (``mark set mark or``, ``mark and … == 0 return``) and from
   ``ct status dnat ip saddr . ip daddr @hairpin-endpoints`` (a Pod reaching itself).

Each piece's meaning:

* lookups in named sets and maps use the fake's elements; ``vmap`` runs the element's verdict;
  ``dnat … to numgen random mod N offset S map @m`` lands on *every* endpoint of slots
  [S, S+N) (upstream's tracer follows every branch of its ``numgen`` vmap the same way), or,
  in an interval map, of the ranges that must exactly cover [S, S+N);
* ``numgen random mod K 0`` (our ClientIP-affinity choice) matches, and the rule's DNAT is
  recorded without ending the chain, so every endpoint is listed, as the iptables tracer does
  for ``--probability``;
* state of earlier packets never matches: ``ip saddr @affinity-…`` (a sticky client) is false,
  ``update @…`` does nothing; ``ct state new`` is true;
* ``fib saddr|daddr type local`` is true for the node's addresses (``node_ips``) and loopback.

``trace_packet`` returns (matched rules, output, masqueraded): output is the endpoints
``ip:port`` joined by ``", "``, or ``DROP`` / ``REJECT``, or ``""`` when nothing applied.
``trace`` returns the whole walk (``Walk``): every chain entered on each hook and the rule that
matched in it, the DNAT candidates with the probability of each (slots of the numgen map over
its modulus; ``1/K`` of what is left for an affinity pick), whether ClientIP affinity applies,
the masquerade, the verdict. ``tests/kernel/test_nft_trace.py`` and
``tests/kernel/test_trace_side_by_side.py`` hold the tracer's answers to real connections
through the same table in a namespace.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from kubesvc.kernel.nftables import parse_elements

TEST_LOCAL = ("127.0.0.1", "::1")


class TraceError(AssertionError):
    """A rule the tracer cannot read, or a reference it cannot follow."""


_COMMENT = re.compile(r'\s*comment "[^"]*"$')


# -- the table, as read from the kernel (the fake's ``Table`` has the same shape) ----------------


@dataclass
class Rule:
    text: str


@dataclass
class Chain:
    name: str
    base: tuple[str, str, int] | None = None  # (type, hook, priority)
    rules: list[Rule] = field(default_factory=list)


@dataclass
class Element:
    value: str = ""
    comment: str = ""


@dataclass
class Set:
    name: str
    flags: tuple[str, ...] = ()
    timeout: str = ""
    elements: dict[str, Element] = field(default_factory=dict)


@dataclass
class Table:
    family: str
    name: str
    chains: dict[str, Chain] = field(default_factory=dict)
    sets: dict[str, Set] = field(default_factory=dict)


def table_from_listing(objs: list[dict], text: str) -> Table | None:
    """The live table: chains (with their hook and numeric priority) and sets with their
    elements from ``nft -j list table`` (``objs``), each chain's rules from the text listing
    ``text`` (JSON gives rules as expression trees; their text is what a person reads and what
    the tracer parses). None when the table does not exist."""
    table = None
    for obj in objs:
        if "table" in obj:
            table = Table(obj["table"]["family"], obj["table"]["name"])
    if table is None:
        return None
    for obj in objs:
        if "chain" in obj:
            c = obj["chain"]
            base = (c["type"], c["hook"], int(c["prio"])) if "hook" in c else None
            table.chains[c["name"]] = Chain(c["name"], base)
        elif "set" in obj or "map" in obj:
            body = obj.get("set") or obj["map"]
            flags = tuple(body.get("flags", ()))
            elements = {k: Element(v, comment) for (k, v), comment in zip(parse_elements(body.get("elem", ())).items(),
                                                                          _element_comments(body.get("elem", ())))}
            timeout = f"{body['timeout']}s" if "timeout" in body else ""
            table.sets[body["name"]] = Set(body["name"], flags, timeout, elements)
    current = None
    for line in text.splitlines():
        stripped = line.strip()
        if current is None:
            m = re.match(r"^chain (\S+) \{$", stripped)
            if m:
                current = table.chains.setdefault(m[1], Chain(m[1]))
            continue
        if stripped == "}":
            current = None
        elif stripped and not stripped.endswith(";") and not re.fullmatch(r'comment "[^"]*"', stripped):
            current.rules.append(Rule(stripped))  # ``type … hook …; policy …;`` and the chain's comment are not rules
    return table


def _element_comments(elems) -> list[str]:
    """Each element's comment ("" if none), in ``parse_elements``' order."""
    out = []
    for elem in elems:
        key = elem[0] if isinstance(elem, list) else elem
        out.append(key["elem"].get("comment", "") if isinstance(key, dict) and "elem" in key else "")
    return out


@dataclass
class Packet:
    source: str
    protocol: str
    dest: str
    port: str
    local_ips: frozenset[str]
    mark: int = 0
    dnatted: bool = False


@dataclass
class Tracer:
    table: Table
    packet: Packet
    matches: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    masquerade: bool = False
    depth: int = 0
    picking: bool = False  # inside a ``numgen random mod K 0`` branch
    hook: str = ""
    chain_stack: list[str] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)  # {"hook", "chain", "rule"}; rule None: entered
    chances: list[float] = field(default_factory=list)  # beside ``outputs``: each candidate's probability
    left: float = 1.0  # the probability no earlier affinity pick took
    affinity: list[str] = field(default_factory=list)  # the affinity sets the walk passed
    comments: list[str] = field(default_factory=list)  # the comments of the map elements that matched

    def _matched(self, text: str) -> None:
        self.matches.append(text)
        self.steps.append({"hook": self.hook, "chain": self.chain_stack[-1] if self.chain_stack else "", "rule": text})

    def _candidate(self, endpoint: str, chance: float) -> None:
        self.outputs.append(endpoint)
        self.chances.append(chance)

    # -- lookups -----------------------------------------------------------------------------

    def _set(self, name: str):
        s = self.table.sets.get(name)
        if s is None:
            raise TraceError(f"no set or map {name!r}")
        return s

    def _key(self, fields: list[str]) -> str:
        p = self.packet
        values = {"daddr": _canonical(p.dest), "saddr": _canonical(p.source), "l4proto": p.protocol, "dport": p.port}
        return " . ".join(values[f] for f in fields)

    def _in_set(self, name: str, fields: list[str]) -> str | None:
        """The element (its value, "" for a set) whose key matches the packet's ``fields``."""
        s = self._set(name)
        key = self._key(fields)
        if key in s.elements:
            if getattr(s.elements[key], "comment", ""):
                self.comments.append(s.elements[key].comment)
            return s.elements[key].value
        if len(fields) == 1:  # interval sets: prefixes and ranges
            for k, elem in s.elements.items():
                if _address_in(key, [k]):
                    return elem.value
        return None

    # -- one chain ---------------------------------------------------------------------------

    def run_chain(self, name: str) -> str | None:
        """Run chain ``name``: the verdict that ended it (``accept``, ``drop``, ``reject``,
        ``dnat``, ``return``) or None when it fell off its end."""
        chain = self.table.chains.get(name)
        if chain is None:
            raise TraceError(f"no chain {name!r}")
        self.depth += 1
        if self.depth > 64:
            raise TraceError(f"chain {name!r}: jumps nest too deep (a loop?)")
        self.chain_stack.append(name)
        self.steps.append({"hook": self.hook, "chain": name, "rule": None})
        try:
            for rule in chain.rules:
                verdict = self.run_rule(rule.text)
                if verdict is not None:
                    if verdict == "return":
                        return None
                    return verdict
            return None
        finally:
            self.depth -= 1
            self.chain_stack.pop()

    def run_rule(self, text: str) -> str | None:
        rest = _COMMENT.sub("", text).strip()
        self.picking = False
        start = len(self.steps)
        while rest:
            m = None
            for pattern, handler in _PIECES:
                m = pattern.match(rest)
                if m:
                    break
            if m is None:
                raise TraceError(f"unknown rule piece {rest!r} in {text!r}")
            rest = rest[m.end():].strip()
            outcome = handler(self, m, text)
            if outcome is False:  # the match failed: next rule
                return None
            if isinstance(outcome, str):  # a verdict
                return outcome
        chain = self.chain_stack[-1] if self.chain_stack else ""
        if not any(s["rule"] == text and s["chain"] == chain for s in self.steps[start:]):
            # matched whole without a verdict (``mark set …``): a step too
            self.steps.append({"hook": self.hook, "chain": chain, "rule": text})
        return None

    # -- handlers (True: matched, go on; False: not matched; str: verdict) -------------------

    def _daddr_set(self, m, text):
        hit = self._in_set(m["set"], ["daddr"]) is not None
        return hit != bool(m["neg"])

    def _pair_set(self, m, text):
        return self._in_set(m["set"], [m["f1"], m["f2"]]) is not None

    def _addr(self, m, text):
        ip = self.packet.source if m["dir"] == "saddr" else self.packet.dest
        if m["value"].startswith("@"):  # affinity: a state of earlier packets, never matched
            if m["value"][1:] not in self.affinity:
                self.affinity.append(m["value"][1:])
            return False
        values = [v.strip() for v in m["value"].strip("{} ").split(",")] if m["value"].startswith("{") else [m["value"]]
        return _address_in(ip, values) != bool(m["neg"])

    def _fib_local(self, m, text):
        ip = self.packet.source if m["dir"] == "saddr" else self.packet.dest
        return ip in self.packet.local_ips

    def _dport(self, m, text):
        return self.packet.protocol == m["proto"] and self.packet.port == m["port"]

    def _l4proto(self, m, text):
        return self.packet.protocol == m["proto"]

    def _ct_state_new(self, m, text):
        return True

    def _ct_status_dnat(self, m, text):
        return self.packet.dnatted

    def _mark_zero(self, m, text):
        return self.packet.mark & int(m["mask"], 0) == 0

    def _mark_set(self, m, text):
        value = int(m["mask"], 0)
        self.packet.mark = self.packet.mark | value if m["op"] in ("or", "|") else self.packet.mark ^ value
        return True

    def _numgen_pick(self, m, text):
        self._matched(text)
        self.picking = 1.0 / int(m["mod"])
        return True

    def _update(self, m, text):
        self._set(m["set"])
        return True

    def _vmap(self, m, text):
        fields = ["daddr", "l4proto", "dport"] if m["daddr"] else ["l4proto", "dport"]
        verdict = self._in_set(m["map"], fields)
        if verdict is None:
            return False
        self._matched(text)
        return self._verdict(verdict)

    def _jump(self, m, text):
        self._matched(text)
        return self._verdict(f"{m['verb']} {m['chain']}")

    def _verdict(self, verdict: str):
        verb, _, chain = verdict.partition(" ")
        if verb in ("jump", "goto"):
            result = self.run_chain(chain)
            if result is not None:
                return result
            return "return" if verb == "goto" else True
        if verdict in ("drop", "reject"):
            self._candidate(verdict.upper(), 0.0)
        return verdict

    def _simple_verdict(self, m, text):
        self._matched(text)
        return self._verdict(m["verdict"])

    def _dnat_to(self, m, text):
        if self.packet.protocol != m["proto"]:
            return False
        if self.picking:  # recorded; the other branches are followed too
            chance = self.left * self.picking
            self.left -= chance
            self._candidate(m["ep"], chance)
            self.picking = False
            return False
        self._candidate(m["ep"], self.left)
        self._matched(text)
        return "dnat"

    def _dnat_map(self, m, text):
        s = self._set(m["map"])
        n, offset = int(m["mod"]), int(m["offset"] or 0)
        self._matched(text)
        if "interval" in s.flags:
            values = self._ranges(s, offset, offset + n, m["map"], text)
        else:
            values = []
            for slot in range(offset, offset + n):
                elem = s.elements.get(str(slot))
                if elem is None:
                    raise TraceError(f"slot {slot} of @{m['map']} is empty (rule {text!r})")
                values.append((1, elem.value))
        for count, value in values:
            ip, port = value.split(" . ")
            endpoint = f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
            if endpoint in self.outputs:  # an endpoint with several slots (weights)
                self.chances[self.outputs.index(endpoint)] += count / n
            else:
                self._candidate(endpoint, count / n)
        return "dnat"

    @staticmethod
    def _ranges(s, start: int, end: int, name: str, text: str) -> list[str]:
        """The values of the ranges of interval map ``s`` within [start, end), in order; they
        must cover it with no gap (a number no range holds would find no endpoint)."""
        found = []
        for key, elem in s.elements.items():
            low, _, high = key.partition("-")
            low, high = int(low), int(high or low)
            if low < end and high >= start:
                if low < start or high >= end:
                    raise TraceError(f"range {key} of @{name} crosses the block [{start}, {end}) (rule {text!r})")
                found.append((low, high, elem.value))
        found.sort()
        at = start
        for low, high, _ in found:
            if low != at:
                raise TraceError(f"numbers {at}-{low - 1} of @{name} hold no endpoint (rule {text!r})")
            at = high + 1
        if at != end:
            raise TraceError(f"numbers {at}-{end - 1} of @{name} hold no endpoint (rule {text!r})")
        return [(high - low + 1, value) for low, high, value in found]

    def _masquerade(self, m, text):
        self._matched(text)
        self.masquerade = True
        return "accept"


_FAM = r"ip6?"
_PIECES = [
    (re.compile(r"^ct state new\b"), Tracer._ct_state_new),
    (re.compile(r"^ct status dnat\b"), Tracer._ct_status_dnat),
    (re.compile(rf"^{_FAM} (?P<f1>saddr|daddr) \. {_FAM} (?P<f2>saddr|daddr) @(?P<set>\S+)"), Tracer._pair_set),
    (re.compile(rf"^(?P<daddr>{_FAM} daddr \. )?meta l4proto \. th dport vmap @(?P<map>\S+)"), Tracer._vmap),
    (re.compile(rf"^{_FAM} daddr (?P<neg>!= )?@(?P<set>\S+)"), Tracer._daddr_set),
    (re.compile(rf"^{_FAM} (?P<dir>saddr|daddr) (?P<neg>!= )?(?P<value>\{{[^}}]*\}}|\S+)"), Tracer._addr),
    (re.compile(r"^fib (?P<dir>saddr|daddr) type local\b"), Tracer._fib_local),
    (re.compile(r"^(?P<proto>tcp|udp|sctp) dport (?P<port>\d+)"), Tracer._dport),
    (re.compile(r"^mark and (?P<mask>0x[0-9a-f]+|\d+) == 0\b"), Tracer._mark_zero),
    (re.compile(r"^meta mark & (?P<mask>0x[0-9a-f]+|\d+) == 0(?:x0+)?\b"), Tracer._mark_zero),  # as the kernel lists it
    (re.compile(r"^mark set mark (?P<op>or|xor) (?P<mask>0x[0-9a-f]+|\d+)"), Tracer._mark_set),
    (re.compile(r"^meta mark set meta mark (?P<op>\||\^) (?P<mask>0x[0-9a-f]+|\d+)"), Tracer._mark_set),
    (re.compile(r"^numgen random mod (?P<mod>\d+) 0\b"), Tracer._numgen_pick),
    (re.compile(rf"^update @(?P<set>\S+) \{{ {_FAM} saddr \}}"), Tracer._update),
    (re.compile(r"^meta l4proto (?P<proto>tcp|udp|sctp) dnat (?:ip6? )?to (?P<ep>\S+)$"), Tracer._dnat_to),
    (re.compile(rf"^meta l4proto (?P<proto>tcp|udp|sctp)(?= dnat {_FAM} (?:addr|to numgen))"), Tracer._l4proto),
    (re.compile(rf"^dnat {_FAM} (?:addr \. port )?to numgen random mod (?P<mod>\d+)(?: offset (?P<offset>\d+))? map @(?P<map>\S+)$"),
     Tracer._dnat_map),
    (re.compile(r"^(?P<verb>jump|goto) (?P<chain>\S+)$"), Tracer._jump),
    (re.compile(r"^(?P<verdict>accept|drop|reject|return)$"), Tracer._simple_verdict),
    (re.compile(r"^masquerade(?: fully-random)?$"), Tracer._masquerade),
]


def _canonical(ip: str) -> str:
    return str(ipaddress.ip_address(ip))


def _address_in(ip: str, values: list[str]) -> bool:
    addr = ipaddress.ip_address(ip)
    for value in values:
        if "/" in value:
            net = ipaddress.ip_network(value, strict=False)
            if net.version == addr.version and addr in net:
                return True
        elif "-" in value:
            low, high = (ipaddress.ip_address(v) for v in value.split("-", 1))
            if low.version == addr.version and low <= addr <= high:
                return True
        elif ipaddress.ip_address(value) == addr:
            return True
    return False


def _base_chains(table: Table, hook: str) -> list[str]:
    chains = [c for c in table.chains.values() if c.base is not None and c.base[1] == hook]
    return [c.name for c in sorted(chains, key=lambda c: c.base[2])]


def _host(endpoint: str) -> str:
    return endpoint[1:endpoint.index("]")] if endpoint.startswith("[") else endpoint.rsplit(":", 1)[0]


@dataclass
class Walk:
    """A new connection's walk through the table (see the module docstring)."""

    steps: list[dict]  # {"hook", "chain", "rule"}: rule None when the chain is entered
    candidates: list[tuple[str, float]]  # DNAT targets "ip:port" and the probability of each
    masquerade: bool
    verdict: str  # "DNAT", "DROP", "REJECT", or "" (nothing of ours applied)
    affinity: list[str]  # the ClientIP affinity sets on the way (a returning client sticks)
    matches: list[str]
    comments: list[str]  # of the map elements that matched (``ns/name:port`` on no-endpoint elements)
    output: str  # upstream's tracer output: the DNAT targets and verdicts in order, ", "-joined
    redirect: int | None = None  # iptables ``REDIRECT --to-ports``: the local port (userspace mode's listener)
    listener: dict | None = None  # userspace mode: the proxy's listener the packet reaches (``trace/userspace.py``)
    ipvs: dict | None = None  # IPVS mode: the virtual server that picked (``trace/ipvs.py``)


def trace(table: Table | None, source: str, protocol: str, dest: str, port: int | str, node_ips=(), *,
          from_node: bool = False) -> Walk:
    """The walk of a new connection; see the module docstring. ``from_node``: the connection
    starts on the node itself (the output hook instead of prerouting; then input only if the
    destination is still one of the node's addresses)."""
    if table is None:
        return Walk([], [], False, "", [], [], [], "")
    local = frozenset(_canonical(ip) for ip in (*TEST_LOCAL, *node_ips))
    tracer = Tracer(table, Packet(_canonical(source), protocol, _canonical(dest), str(port), local))
    if not _run_hook(tracer, "output" if from_node else "prerouting"):
        after = "input" if tracer.packet.dest in local else ("" if from_node else "forward")
        if not (after and _run_hook(tracer, after)):
            _run_hook(tracer, "postrouting")
    dropped = [o for o in tracer.outputs if o in ("DROP", "REJECT")]
    candidates = [(o, round(c, 6)) for o, c in zip(tracer.outputs, tracer.chances) if o not in ("DROP", "REJECT")]
    verdict = dropped[0] if dropped else ("DNAT" if candidates else "")
    return Walk(tracer.steps, candidates, tracer.masquerade, verdict, tracer.affinity, tracer.matches, tracer.comments, ", ".join(tracer.outputs))


def trace_packet(nft, source: str, protocol: str, dest: str, port: int | str, node_ips=(), *,
                 from_node: bool = False) -> tuple[list[str], str, bool]:
    """(matched rules, output, masqueraded) for a new connection through ``nft.current()`` (the
    fake) or a ``Table``, the form upstream's packet-flow tests compare."""
    table = nft.current() if hasattr(nft, "current") else nft
    walk = trace(table, source, protocol, dest, port, node_ips, from_node=from_node)
    return walk.matches, walk.output, walk.masquerade


def _run_hook(tracer: Tracer, hook: str) -> bool:
    """The table's base chains on ``hook``, in priority order; True if the packet was dropped
    or rejected. A DNAT (the first output) changes the destination the later chains see."""
    tracer.hook = hook
    for chain in _base_chains(tracer.table, hook):
        if tracer.run_chain(chain) in ("drop", "reject"):
            return True
        targets = [o for o in tracer.outputs if o not in ("DROP", "REJECT")]
        if targets and not tracer.packet.dnatted:
            tracer.packet.dest = _canonical(_host(targets[0]))
            tracer.packet.dnatted = True
    return False
