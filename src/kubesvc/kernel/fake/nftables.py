"""A stateful nftables kernel for tests, in the spirit of knftables' ``Fake`` (``fake.go``).

``FakeNFTables`` has the interface of ``kernel.nftables.NFTables`` (``run``/``run_sync`` take
the ``nft -f`` text our proxy writes; ``list_table``, ``chain_rule_count``,
``delete_table_sync``) over a ``FakeKernel`` that holds every table of every family, as the
kernel does (an ``ip`` and an ``ip6`` fake can share one). Unlike knftables' fake, which takes
typed objects, this one parses the text, because the text is what our rules builder produces.

What it models (each checked against nft 1.0.6 on Linux 6.x by ``tests/kernel/test_nft_fake.py``):

* **Atomicity**: a transaction applies to a copy of the state, which replaces the state only
  if every command succeeded; a rejected transaction changes nothing (``nft -f`` sends one
  netlink batch; the kernel aborts it whole).
* **Order within a transaction**: each command is checked against the state the earlier
  commands of the same transaction left, as the kernel checks each message of a batch:
  ``add chain X`` then ``delete chain X`` works, ``flush chain A`` releases A's jumps before a
  later ``delete chain B``.
* **What nft rejects**, with its errno text (``CommandFailed.stderr`` reads
  ``/dev/stdin:LINE:COL: Error: ...`` as nft prints it):

  - ``No such file or directory``: a command on a missing table, chain, set or map (``add
    rule``, ``flush``, ``delete``, ``add element``); a rule that jumps to or goes to a missing
    chain, or names a missing set (``@name``); a map element whose verdict names a missing
    chain; ``delete element`` of a missing element; ``flush map`` on a set (and the reverse);
  - ``File exists``: ``create`` of an existing table, chain, set or element (also a key
    repeated within one ``create element``); ``add`` of an element that exists with another
    value; ``add set``/``add map`` over an existing one of another type, or over a map/set of
    the other kind; ``add chain`` with a hook over an existing regular chain;
  - ``Device or resource busy``: deleting a chain still jumped to by a rule or named by a map
    element's verdict, or a set still named by a rule;
  - ``Operation not supported``: changing an existing base chain's type, hook or priority;
  - ``syntax error``: ``destroy`` (nft before 1.0.8 has no such command; ``FakeKernel(destroy=True)``
    models a newer one), and anything this parser does not understand;
  - ``Invalid argument``: a map element without a value;
  - ``Operation not supported`` also for a jump or goto (rule or map element) to a base chain;
  - a key or value that does not fit the set's type (an IPv6 address in an ``ipv4_addr`` set,
    a concatenation of the wrong length), a prefix or range in a set without ``flags interval``,
    a value for a set's element (``set is not a map``).

  Not modelled: overlapping intervals, element timeouts and expiry, rule expressions beyond the
  objects they name (a rule's text is not type-checked), ``insert``/``replace``/rule handles
  beyond ``delete rule … handle N``.

* **What nft accepts** and a test might not expect: ``add`` of an existing element with the
  same value (comments are not compared; the first one stays), a key repeated within one
  ``add element``, ``delete chain`` of a chain that still has rules (the kernel removes them),
  ``delete set`` on a map and ``delete map`` on a set, ``flush table`` (flushes every chain's
  rules, leaves set elements alone).

Rules are kept as the text written (whitespace collapsed): the fake checks what they reference,
not what they mean. ``proxy.trace.nftables`` interprets the forms our rule layout uses.
``dump()`` writes the state back as an ``nft -f`` script (tables, chains, sets, rules, elements,
in an order whose references are valid); loading it into a fresh namespace gives the ruleset
that applying the original transactions gives, which is how the tests compare the fake with nft.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.nftables import KUBE_PROXY_TABLE, family_name

ENOENT = "No such file or directory"
EEXIST = "File exists"
EBUSY = "Device or resource busy"
EOPNOTSUPP = "Operation not supported"
EINVAL = "Invalid argument"

FAMILIES = ("ip", "ip6", "inet", "arp", "bridge", "netdev")
VERDICTS = ("accept", "drop", "return", "continue")
PROTOCOLS = {"1": "icmp", "6": "tcp", "17": "udp", "58": "ipv6-icmp", "132": "sctp"}

# ``typeof`` expressions → the datatype nft derives from them
_TYPEOF = (
    (re.compile(r"^ip (s|d)addr$"), "ipv4_addr"),
    (re.compile(r"^ip6 (s|d)addr$"), "ipv6_addr"),
    (re.compile(r"^(tcp|udp|sctp|th) (s|d)port$"), "inet_service"),
    (re.compile(r"^meta l4proto$"), "inet_proto"),
    (re.compile(r"^(meta )?mark$"), "mark"),
    (re.compile(r"^numgen (random|inc) mod \d+( offset \d+)?$"), "integer"),
)


class NftError(Exception):
    """One rejected command: ``message`` is nft's text after ``Error: ``."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def _process(errno_text: str) -> NftError:
    return NftError(f"Could not process rule: {errno_text}")


# -- state ------------------------------------------------------------------------------------


@dataclass
class Rule:
    text: str
    handle: int


@dataclass
class Chain:
    name: str
    handle: int
    base: tuple[str, str, int] | None = None  # (type, hook, priority)
    policy: str = ""
    comment: str = ""
    rules: list[Rule] = field(default_factory=list)


@dataclass
class Element:
    value: str = ""
    comment: str = ""


@dataclass
class Set:
    name: str
    handle: int
    kind: str  # "set" | "map"
    key: tuple[str, ...]  # datatypes of the key's parts
    data: tuple[str, ...] = ()  # datatypes of a map's value ("verdict" for a vmap)
    spec: str = ""  # the type clause as written: "type A . B : verdict" or "typeof …"
    flags: tuple[str, ...] = ()
    timeout: str = ""
    comment: str = ""
    elements: dict[str, Element] = field(default_factory=dict)


@dataclass
class Table:
    family: str
    name: str
    handle: int
    comment: str = ""
    chains: dict[str, Chain] = field(default_factory=dict)
    sets: dict[str, Set] = field(default_factory=dict)


@dataclass
class FakeKernel:
    """Every table of every family (one network namespace's ruleset)."""

    tables: dict[tuple[str, str], Table] = field(default_factory=dict)
    destroy: bool = False  # nft ≥ 1.0.8 knows ``destroy``; the nft we test with (1.0.6) does not
    next_handle: int = 1
    transactions: list[str] = field(default_factory=list)  # every accepted transaction, in order

    def table(self, family: str, name: str) -> Table | None:
        return self.tables.get((family, name))

    def dump(self) -> str:
        """Every table as one ``nft -f`` script (see ``dump_table``)."""
        return "".join(dump_table(t) for t in self.tables.values())

    def apply(self, text: str) -> None:
        """Apply ``text`` all or nothing; ``NftError`` names the failing line."""
        tx = _Tx(self.tables, self.next_handle, self.destroy)
        for line_no, command in split_commands(text):
            try:
                tx.command(command)
            except NftError as err:
                raise NftError(f"/dev/stdin:{line_no}:1-{len(command)}: Error: {err.message}\n{command}") from None
        self.tables = tx.tables
        self.next_handle = tx.handle
        self.transactions.append(text)


# -- parsing ----------------------------------------------------------------------------------

_TOKEN = re.compile(r'"[^"]*"|[{},;]|[^\s{},;"]+')


def split_commands(text: str) -> Iterator[tuple[int, str]]:
    """(line number, command) for each command: newlines and ``;`` outside braces and quotes end one."""
    line, counted = 1, 0
    for offset, command in _split_top(text, "\n;"):
        line += text.count("\n", counted, offset)
        counted = offset
        if not command.startswith("#"):
            yield line, command


def _unquote(word: str) -> str:
    return word[1:-1] if len(word) >= 2 and word[0] == word[-1] == '"' else word


def _block(tokens: list[str]) -> list[list[str]]:
    """``{ a b ; c d ; }`` → [[a, b], [c, d]]; ``tokens`` starts at ``{``."""
    if not tokens:
        return []
    if tokens[0] != "{" or tokens[-1] != "}":
        raise NftError("syntax error, unexpected " + (tokens[0] if tokens else "end of file"))
    clauses: list[list[str]] = [[]]
    for tok in tokens[1:-1]:
        if tok == ";":
            clauses.append([])
        else:
            clauses[-1].append(tok)
    return [c for c in clauses if c]


def _split_top(text: str, seps: str) -> list[tuple[int, str]]:
    """``text`` split at any of ``seps`` outside braces and quotes: (offset, stripped piece)
    for each non-empty piece."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(text + seps[0]):
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch == "{":
            depth += 1
        elif not quoted and ch == "}":
            depth -= 1
        elif not quoted and depth == 0 and ch in seps:
            piece = text[start:i]
            if piece.strip():
                parts.append((start + len(piece) - len(piece.lstrip()), piece.strip()))
            start = i + 1
    return parts


def _types(spec: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``type A . B : C`` / ``typeof expr . expr : expr`` → (key datatypes, data datatypes)."""
    kind, _, rest = spec.partition(" ")
    key, _, data = rest.partition(" : ")

    def one(part: str) -> str:
        part = part.strip()
        if kind == "type":
            return part
        for pattern, datatype in _TYPEOF:
            if pattern.match(part):
                return datatype
        raise NftError(f"syntax error, unexpected typeof expression {part!r}")

    return tuple(one(p) for p in key.split(" . ")), tuple(one(p) for p in data.split(" . ")) if data else ()


def normalize(datatype: str, word: str) -> str:
    """One part of a key or value in nft's own listing form; ``NftError`` if it does not fit."""
    try:
        if datatype in ("ipv4_addr", "ipv6_addr"):
            version = 4 if datatype == "ipv4_addr" else 6
            if "/" in word:
                net = ipaddress.ip_network(word, strict=False)
                if net.version != version:
                    raise ValueError
                return str(net)
            if "-" in word:
                low, high = (normalize(datatype, w) for w in word.split("-", 1))
                return f"{low}-{high}"
            addr = ipaddress.ip_address(word)
            if addr.version != version:
                raise ValueError
            return str(addr)
        if datatype == "inet_proto":
            word = PROTOCOLS.get(word, word)
            if word not in PROTOCOLS.values():
                raise ValueError
            return word
        if datatype == "inet_service":
            port = int(word, 0)
            if not 0 <= port <= 65535:
                raise ValueError
            return str(port)
        if datatype in ("integer", "mark"):
            if "-" in word:  # a range (allowed in interval sets only, checked by the caller)
                low, high = (int(normalize(datatype, w), 0) for w in word.split("-", 1))
                if high < low:
                    raise ValueError
                return str(low) if low == high else f"{low}-{high}" if datatype == "integer" else f"0x{low:08x}-0x{high:08x}"
            number = int(word, 0)
            if not 0 <= number < 1 << 32:
                raise ValueError
            return str(number) if datatype == "integer" else f"0x{number:08x}"
    except ValueError:
        if datatype in ("ipv4_addr", "ipv6_addr"):
            raise NftError("Could not resolve hostname: Address family for hostname not supported") from None
        raise NftError(f"syntax error, {word!r} is not a valid {datatype}") from None
    if datatype == "verdict":
        raise NftError("syntax error, a verdict is not one word")
    return word


def _verdict(text: str) -> str:
    words = text.split()
    if len(words) == 1 and words[0] in VERDICTS:
        return words[0]
    if len(words) == 2 and words[0] in ("jump", "goto"):
        return f"{words[0]} {_unquote(words[1])}"
    raise NftError(f"syntax error, unexpected {text!r}")


def _value(datatypes: tuple[str, ...], text: str) -> str:
    if datatypes == ("verdict",):
        return _verdict(text)
    parts = [p.strip() for p in text.split(" . ")]
    if len(parts) != len(datatypes):
        raise NftError(f"datatype mismatch, expected {len(datatypes)} parts, {text!r} has {len(parts)}")
    return " . ".join(normalize(t, p) for t, p in zip(datatypes, parts))


_ELEMENT = re.compile(r'^(?P<key>.*?)(?:\s+timeout\s+\S+)?(?:\s+comment\s+"(?P<comment>[^"]*)")?(?:\s+:\s+(?P<value>.*))?$')


def parse_elements(s: Set, body: str) -> list[tuple[str, Element]]:
    """``{ k1, k2 comment "c" : v }`` (without the braces) → [(key, Element)] for set ``s``."""
    out = []
    for _, item in _split_top(body, ","):
        m = _ELEMENT.match(item)
        key = _value(s.key, m.group("key").strip())
        for kind, mark in (("prefix", "/"), ("range", "-")):
            if mark in key and "interval" not in s.flags:
                raise NftError(f"You must add 'flags interval' to your set declaration if you want to add {kind} elements")
        value = m.group("value")
        if s.kind == "map" and value is not None:
            value = _value(s.data, value.strip())
        elif value is not None:
            raise NftError("set is not a map")
        out.append((key, Element(value or "", m.group("comment") or "")))
    return out


def _references(rule: str) -> tuple[list[str], list[str]]:
    """(chains a rule jumps or goes to, sets and maps it names), as knftables' checkRuleRefs;
    quoted strings (comments, interface names) name nothing."""
    words = re.sub(r'"[^"]*"', " ", rule).replace("{", " ").replace("}", " ").replace(",", " ").split()
    chains = [_unquote(words[i + 1]) for i, w in enumerate(words[:-1]) if w in ("jump", "goto")]
    sets = [w[1:] for w in words if w.startswith("@")]
    return chains, sets


def _check_target(table: Table, name: str) -> None:
    """A jump or goto target must exist and must not be a base chain."""
    chain = table.chains.get(name)
    if chain is None:
        raise _process(ENOENT)
    if chain.base is not None:
        raise _process(EOPNOTSUPP)


# -- applying commands -------------------------------------------------------------------------

_COMMAND = re.compile(r"^(?P<verb>\w+)\s+(?P<obj>table|chain|rule|set|map|element)\s+(?P<rest>.*)$", re.S)


class _Tx:
    """One transaction's commands over a copy of ``tables`` that the caller keeps only on
    success. The copy is made on write, object by object (a table, a chain's rule list, a
    set's elements), so a small transaction on a large ruleset costs little; rules and
    elements themselves are never changed in place."""

    def __init__(self, tables: dict[tuple[str, str], Table], handle: int, destroy: bool):
        self.tables = dict(tables)
        self.handle = handle
        self.destroy = destroy
        self.owned: set[int] = set()  # ids of the objects this transaction copied or made

    def _handle(self) -> int:
        self.handle += 1
        return self.handle - 1

    def _mine(self, obj):
        self.owned.add(id(obj))
        return obj

    def _own_table(self, table: Table) -> Table:
        if id(table) in self.owned:
            return table
        mine = self._mine(dataclasses.replace(table, chains=dict(table.chains), sets=dict(table.sets)))
        self.tables[(table.family, table.name)] = mine
        return mine

    def _own_chain(self, table: Table, name: str) -> Chain:
        chain = table.chains[name]
        if id(chain) not in self.owned:
            chain = table.chains[name] = self._mine(dataclasses.replace(chain, rules=list(chain.rules)))
        return chain

    def _own_set(self, table: Table, name: str) -> Set:
        s = table.sets[name]
        if id(s) not in self.owned:
            s = table.sets[name] = self._mine(dataclasses.replace(s, elements=dict(s.elements)))
        return s

    def command(self, command: str) -> None:
        m = _COMMAND.match(command)
        if m is None:
            raise NftError(f"syntax error, unexpected {command.split()[0]!r}")
        verb, obj, rest = m["verb"], m["obj"], m["rest"]
        if verb == "destroy" and not self.destroy:
            raise NftError(f"syntax error, unexpected {obj}, expecting string")
        if verb not in ("add", "create", "delete", "destroy", "flush"):
            raise NftError(f"syntax error, unexpected {verb} (not modelled by the fake)")
        tokens = _TOKEN.findall(rest)
        family = tokens[0] if tokens and tokens[0] in FAMILIES else "ip"
        if tokens and tokens[0] in FAMILIES:
            tokens = tokens[1:]
        if not tokens:
            raise NftError("syntax error, unexpected end of file")
        table_name = _unquote(tokens[0])
        if obj == "table":
            return self._table(verb, family, table_name, tokens[1:])
        table = self.tables.get((family, table_name))
        if table is None:
            if verb == "destroy":
                return
            raise _process(ENOENT)
        table = self._own_table(table)
        if len(tokens) < 2:
            raise NftError("syntax error, unexpected end of file")
        name = _unquote(tokens[1])
        if obj == "chain":
            self._chain(verb, table, name, tokens[2:])
        elif obj in ("set", "map"):
            self._set(verb, obj, table, name, tokens[2:])
        elif obj == "element":
            body = rest[rest.index("{") + 1:rest.rindex("}")] if "{" in rest else ""
            self._element(verb, table, name, body)
        else:
            self._rule(verb, table, name, rest, tokens)

    # tables
    def _table(self, verb: str, family: str, name: str, tokens: list[str]) -> None:
        key = (family, name)
        table = self.tables.get(key)
        if verb in ("add", "create"):
            if table is not None:
                if verb == "create":
                    raise _process(EEXIST)
                return
            table = self.tables[key] = self._mine(Table(family, name, self._handle()))
            for clause in _block(tokens):
                if clause[0] == "comment":
                    table.comment = _unquote(clause[1])
        elif verb == "flush":
            if table is None:
                raise _process(ENOENT)
            table = self._own_table(table)
            for name in table.chains:
                self._own_chain(table, name).rules = []
        elif table is None:
            if verb == "delete":
                raise _process(ENOENT)
        else:
            del self.tables[key]

    # chains
    def _chain(self, verb: str, table: Table, name: str, tokens: list[str]) -> None:
        chain = table.chains.get(name)
        if verb in ("add", "create"):
            base, policy, comment = None, "", ""
            for clause in _block(tokens):
                if clause[0] == "type":
                    if len(clause) != 6 or clause[2] != "hook" or clause[4] != "priority":
                        raise NftError("syntax error in a base chain's type clause")
                    base = (clause[1], clause[3], int(clause[5]))
                elif clause[0] == "policy":
                    policy = clause[1]
                elif clause[0] == "comment":
                    comment = _unquote(clause[1])
            if chain is not None:
                if verb == "create":
                    raise _process(EEXIST)
                if base is not None and chain.base is None:
                    raise _process(EEXIST)
                if base is not None and base != chain.base:
                    raise _process(EOPNOTSUPP)
                return
            table.chains[name] = self._mine(Chain(name, self._handle(), base, policy, comment))
            return
        if chain is None:
            if verb == "destroy":
                return
            raise _process(ENOENT)
        if verb == "flush":
            self._own_chain(table, name).rules = []
            return
        if self._chain_in_use(table, name):  # its own rules go with it: they do not count
            raise _process(EBUSY)
        del table.chains[name]

    @staticmethod
    def _chain_in_use(table: Table, name: str) -> bool:
        for chain in table.chains.values():
            if chain.name == name:
                continue
            for rule in chain.rules:
                if name in _references(rule.text)[0]:
                    return True
        target = (f"jump {name}", f"goto {name}")
        return any(e.value in target for s in table.sets.values() if s.data == ("verdict",) for e in s.elements.values())

    # sets and maps
    def _set(self, verb: str, kind: str, table: Table, name: str, tokens: list[str]) -> None:
        s = table.sets.get(name)
        if verb in ("add", "create"):
            new = Set(name, 0, kind, ())
            for clause in _block(tokens):
                head = clause[0]
                if head in ("type", "typeof"):
                    new.spec = " ".join(clause)
                    new.key, new.data = _types(new.spec)
                elif head == "flags":
                    new.flags = tuple("".join(clause[1:]).split(","))
                elif head == "timeout":
                    new.timeout = clause[1]
                elif head == "comment":
                    new.comment = _unquote(clause[1])
                elif head not in ("size", "policy", "counter"):
                    raise NftError(f"syntax error, unexpected {head} (not modelled by the fake)")
            if not new.spec:
                raise NftError("set definition does not specify key")
            if (kind == "map") != bool(new.data):
                raise NftError(f"syntax error, a {kind}'s type {new.spec!r}")
            if s is not None:
                if verb == "create" or s.kind != kind or (s.key, s.data) != (new.key, new.data):
                    raise _process(EEXIST)
                return
            new.handle = self._handle()
            table.sets[name] = self._mine(new)
            return
        if s is None or (verb == "flush" and s.kind != kind):
            if verb == "destroy":
                return
            raise NftError(ENOENT) if verb == "flush" else _process(ENOENT)
        if verb == "flush":
            self._own_set(table, name).elements = {}
            return
        if any(name in _references(r.text)[1] for c in table.chains.values() for r in c.rules):
            raise _process(EBUSY)
        del table.sets[name]

    # elements
    def _element(self, verb: str, table: Table, name: str, body: str) -> None:
        if name not in table.sets:
            raise NftError(ENOENT)
        s = self._own_set(table, name)
        items = parse_elements(s, body)
        if verb in ("add", "create"):
            for key, elem in items:
                if s.kind == "map" and not elem.value:
                    raise _process(EINVAL)
                have = s.elements.get(key)
                if have is not None:
                    if verb == "create" or have.value != elem.value:
                        raise _process(EEXIST)
                    continue
                if elem.value.startswith(("jump ", "goto ")):
                    _check_target(table, elem.value.split(" ", 1)[1])
                s.elements[key] = elem
        elif verb in ("delete", "destroy"):
            for key, _ in items:
                if key not in s.elements:
                    if verb == "destroy":
                        continue
                    raise _process(ENOENT)
                del s.elements[key]
        else:
            raise NftError("syntax error, unexpected element")

    # rules
    def _rule(self, verb: str, table: Table, chain_name: str, rest: str, tokens: list[str]) -> None:
        if chain_name not in table.chains:
            raise _process(ENOENT)
        chain = self._own_chain(table, chain_name)
        if verb in ("delete", "destroy"):
            if len(tokens) != 4 or tokens[2] != "handle":
                raise NftError("syntax error, a rule is deleted by handle")
            handle = int(tokens[3])
            for i, rule in enumerate(chain.rules):
                if rule.handle == handle:
                    del chain.rules[i]
                    return
            if verb == "delete":
                raise _process(ENOENT)
            return
        if verb != "add":
            raise NftError(f"syntax error, unexpected rule after {verb}")
        words = rest.split(None, 3 if rest.split(None, 1)[0] in FAMILIES else 2)
        body = " ".join(words[-1].split()) if len(words) == (4 if words[0] in FAMILIES else 3) else ""
        if not body:
            raise NftError("syntax error, unexpected end of file")
        chains, sets = _references(body)
        for target in chains:
            _check_target(table, target)
        for name in sets:
            if name not in table.sets:
                raise NftError(f"{ENOENT}; no set {name!r} in table {table.family} {table.name!r}")
        if re.search(r"\bvmap @", body):
            for name in re.findall(r"\bvmap @(\S+)", body):
                if table.sets[name].data != ("verdict",):
                    raise NftError("Expression is not a map")
        chain.rules.append(Rule(body, self._handle()))


# -- dumping -----------------------------------------------------------------------------------


def _element_text(key: str, elem: Element) -> str:
    text = key + (f' comment "{elem.comment}"' if elem.comment else "")
    return f"{text} : {elem.value}" if elem.value else text


def dump_table(table: Table) -> str:
    """``table`` as an ``nft -f`` script that recreates it in an empty ruleset."""
    p = f"{table.family} {table.name}"
    out = [f'add table {p}' + (f' {{ comment "{table.comment}" ; }}' if table.comment else "")]
    for chain in table.chains.values():
        clauses = []
        if chain.base:
            ctype, hook, prio = chain.base
            clauses.append(f"type {ctype} hook {hook} priority {prio}")
        if chain.policy:
            clauses.append(f"policy {chain.policy}")
        if chain.comment:
            clauses.append(f'comment "{chain.comment}"')
        out.append(f"add chain {p} {chain.name}" + (f" {{ {' ; '.join(clauses)} ; }}" if clauses else ""))
    for s in table.sets.values():
        clauses = [s.spec]
        if s.flags:
            clauses.append("flags " + ",".join(s.flags))
        if s.timeout:
            clauses.append(f"timeout {s.timeout}")
        if s.comment:
            clauses.append(f'comment "{s.comment}"')
        out.append(f"add {s.kind} {p} {s.name} {{ {' ; '.join(clauses)} ; }}")
    for chain in table.chains.values():
        out.extend(f"add rule {p} {chain.name} {rule.text}" for rule in chain.rules)
    for s in table.sets.values():
        if s.elements:
            out.append(f"add element {p} {s.name} {{ {', '.join(_element_text(k, e) for k, e in s.elements.items())} }}")
    return "".join(line + "\n" for line in out)


# -- ``nft -j`` listing ------------------------------------------------------------------------


def _json_part(datatype: str, word: str):
    if datatype in ("inet_service", "integer"):
        if "-" in word:
            return {"range": [int(w) for w in word.split("-", 1)]}
        return int(word)
    if datatype in ("ipv4_addr", "ipv6_addr") and "/" in word:
        addr, length = word.split("/")
        return {"prefix": {"addr": addr, "len": int(length)}}
    return word


def _json_value(datatypes: tuple[str, ...], text: str):
    if datatypes == ("verdict",):
        verb, _, target = text.partition(" ")
        return {verb: {"target": target}} if target else {verb: None}
    parts = [_json_part(t, w) for t, w in zip(datatypes, text.split(" . "))]
    return {"concat": parts} if len(parts) > 1 else parts[0]


def list_json(table: Table, *, terse: bool = False) -> list[dict]:
    """What ``nft -j [-t] list table`` prints for ``table`` (its ``nftables`` array, without
    metainfo): the table, its sets and maps (with ``elem`` unless ``terse``), chains and rules.
    Rules carry no ``expr`` (the fake keeps their text in ``text`` instead)."""
    fam = table.family
    out: list[dict] = [{"table": {"family": fam, "name": table.name, "handle": table.handle}}]
    for s in table.sets.values():
        body: dict = {"family": fam, "name": s.name, "table": table.name, "handle": s.handle,
                      "type": list(s.key) if len(s.key) > 1 else s.key[0]}
        if s.kind == "map":
            body["map"] = list(s.data) if len(s.data) > 1 else s.data[0]
        if s.flags:
            body["flags"] = list(s.flags)
        if s.elements and not terse:
            elems = []
            for key, elem in s.elements.items():
                k = _json_value(s.key, key)
                if elem.comment:
                    k = {"elem": {"val": k, "comment": elem.comment}}
                elems.append([k, _json_value(s.data, elem.value)] if s.kind == "map" else k)
            body["elem"] = elems
        out.append({s.kind: body})
    for chain in table.chains.values():
        body = {"family": fam, "table": table.name, "name": chain.name, "handle": chain.handle}
        if chain.base:
            body.update(type=chain.base[0], hook=chain.base[1], prio=chain.base[2], policy=chain.policy or "accept")
        out.append({"chain": body})
    for chain in table.chains.values():
        out.extend({"rule": {"family": fam, "table": table.name, "chain": chain.name, "handle": r.handle, "text": r.text}}
                   for r in chain.rules)
    return out


# -- the NFTables interface --------------------------------------------------------------------


class FakeNFTables:
    """``kernel.nftables.NFTables`` over a ``FakeKernel``: one table of one family."""

    def __init__(self, family: int = 4, table: str = KUBE_PROXY_TABLE, *, kernel: FakeKernel | None = None):
        self.family = family
        self.family_name = family_name(family)
        self.table = table
        self.netns = None
        self.nft = "nft"
        self.in_process = False
        self.kernel = kernel if kernel is not None else FakeKernel()
        self.fail_next: str | None = None  # the stderr of a failure to inject into the next run

    def argv(self, *args: str) -> list[str]:
        return [self.nft, *args]

    # transactions
    def run_sync(self, text: str) -> None:
        argv = self.argv("-f", "-")
        if self.fail_next is not None:
            message, self.fail_next = self.fail_next, None
            raise CommandFailed(argv, 1, "", message, text)
        try:
            self.kernel.apply(text)
        except NftError as err:
            raise CommandFailed(argv, 1, "", err.message + "\n", text) from None

    async def run(self, text: str) -> None:
        self.run_sync(text)

    # listing
    def current(self) -> Table | None:
        return self.kernel.table(self.family_name, self.table)

    async def list_table(self, *, terse: bool = False) -> list[dict]:
        table = self.current()
        return [] if table is None else list_json(table, terse=terse)

    async def list_table_text(self) -> str:
        """Our table's chains and rules in ``nft list table``'s layout (what ``kubesvc trace``
        reads from it: a base chain's ``type … hook … priority N; policy …;`` line, then each
        rule as written; sets and elements are read from ``list_table``); "" if it does not exist.
        The kernel prints rules in its own canonical forms, which the fake does not rewrite."""
        table = self.current()
        if table is None:
            return ""
        out = [f"table {table.family} {table.name} {{"]
        for chain in table.chains.values():
            out.append(f"\tchain {chain.name} {{")
            if chain.base is not None:
                kind, hook, priority = chain.base
                out.append(f"\t\ttype {kind} hook {hook} priority {priority}; policy {chain.policy or 'accept'};")
            out += [f"\t\t{rule.text}" for rule in chain.rules]
            out.append("\t}")
        out.append("}")
        return "\n".join(out) + "\n"

    async def chain_rule_count(self, chain: str) -> int | None:
        table = self.current()
        c = table.chains.get(chain) if table is not None else None
        return None if c is None else len(c.rules)

    # cleanup
    def delete_table_sync(self) -> bool:
        if self.current() is None:
            return False
        self.run_sync(f"delete table {self.family_name} {self.table}\n")
        return True

    # inspection (tests)
    def dump(self) -> str:
        """Our table as an ``nft -f`` script (empty if it does not exist)."""
        table = self.current()
        return "" if table is None else dump_table(table)

    def rules(self, chain: str) -> list[str]:
        table = self.current()
        c = table.chains.get(chain) if table is not None else None
        return [r.text for r in c.rules] if c is not None else []

    def elements(self, name: str) -> dict[str, str]:
        table = self.current()
        s = table.sets.get(name) if table is not None else None
        return {k: e.value for k, e in s.elements.items()} if s is not None else {}
