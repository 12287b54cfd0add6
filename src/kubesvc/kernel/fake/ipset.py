"""A stateful ``ipset``: the sets of one network namespace, behind the interface of
``kernel.ipset.Ipset`` (``restore``, ``destroy_sync``, ``version_sync``), for tests.

It keeps what the kernel keeps (each set's name, type, family and members) and rejects what
``ipset(8)`` v7 rejects, with its messages (held to the real tool by
``tests/kernel/test_ipset_fake.py``):

* ``create`` of an existing name fails, unless ``-exist`` is given *and* the type is the same
  (the kernel then ignores the other options, even the family); names are at most 31 characters;
* ``add`` of a member already there fails ("it's already added") and ``del`` of one that is not
  ("it's not added"), both unless ``-exist``; a member is parsed by its set's type (``hash:ip``,
  ``hash:ip,port``, ``hash:ip,port,ip``, ``hash:ip,port,net``, ``bitmap:port``): one
  element per ``,``-separated dimension, ``[proto:]port`` with ``tcp`` the default protocol,
  addresses of the set's family only, a net stored as its network;
* every command but ``create`` names an existing set ("The set with the given name does not
  exist"); ``swap`` wants both sets and the same type and family; ``destroy`` refuses a set a
  rule still names (``reference``) and, without a name, destroys every set;
* ``restore`` is *not* a transaction: what was sent before a failing line stays applied, and the
  error names the line (``Error in line N: ...``). The tool batches consecutive ``add``/``del``
  lines of one set, so a batch not yet sent is lost with a line the tool itself refuses (see
  ``FakeIpset.restore_sync``); this is why the IPVS mode never flushes a live set in place.

Members are kept in one canonical text (``ipset save``'s: ``1.2.3.4,tcp:80``, ``81`` for a
``bitmap:port``), so ``canonical_member`` also reads the real ``ipset save`` for comparison.
"""

from __future__ import annotations

import ipaddress
import shlex
from dataclasses import dataclass, field

from kubesvc.kernel.exec import CommandFailed

VERSION = "ipset v7.17, protocol version: 7\n"
PREFIX = "ipset v7.17: "
MAX_NAME = 31
PROTOCOLS = ("tcp", "udp", "sctp", "udplite")
# each type's dimensions, in order: ip, port (with protocol), net
TYPES = {"hash:ip": ("ip",), "hash:ip,port": ("ip", "port"), "hash:ip,port,ip": ("ip", "port", "ip"),
         "hash:ip,port,net": ("ip", "port", "net"), "bitmap:port": ("port",)}

NO_SET = "The set with the given name does not exist"
EXISTS = "Set cannot be created: set with the same name already exists"
ADDED = "Element cannot be added to the set: it's already added"
NOT_ADDED = "Element cannot be deleted from the set: it's not added"
SWAP_TYPES = "The sets cannot be swapped: their type does not match"
SWAP_SECOND = "Sets cannot be swapped: the second set does not exist"
IN_USE = "Set cannot be destroyed: it is in use by a kernel component"
OUT_OF_RANGE = "Element is out of the range of the set"


VERBS = {"-N": "create", "n": "create", "-A": "add", "a": "add", "-D": "del", "d": "del", "-W": "swap", "w": "swap",
         "-F": "flush", "f": "flush", "-X": "destroy", "x": "destroy"}


class IpsetError(Exception):
    """One command refused; the message is ipset's, without its ``ipset vX:`` prefix."""


@dataclass(eq=False)
class IpSet:
    type: str
    family: str | None  # "inet" / "inet6"; None for a bitmap:port
    port_range: tuple[int, int] | None = None
    members: set[str] = field(default_factory=set)

    def same_kind(self, other: "IpSet") -> bool:
        return (self.type, self.family) == (other.type, other.family)


def _ip(text: str, family: str | None) -> str:
    version = 6 if family == "inet6" else 4
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        raise IpsetError(f"Syntax error: cannot parse {text}: resolving to IPv{version} address failed") from None
    if ip.version != version:
        raise IpsetError(f"Syntax error: cannot parse {text}: resolving to IPv{version} address failed")
    return str(ip)


def _net(text: str, family: str | None) -> str:
    address, _, prefix = text.partition("/")
    ip = _ip(address, family)
    if not prefix:
        return ip
    bits = 128 if family == "inet6" else 32
    if not prefix.isdigit() or not 0 < int(prefix) <= bits:
        raise IpsetError("The value of the CIDR parameter of the IP address is invalid")
    if int(prefix) == bits:
        return ip
    return str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))


def _port(text: str, with_protocol: bool) -> str:
    proto, sep, number = text.rpartition(":")
    proto = proto if sep else "tcp"
    if proto not in PROTOCOLS:
        raise IpsetError(f"Syntax error: cannot parse '{proto}' as a protocol")
    if not number.isdigit() or int(number) > 65535:
        raise IpsetError(f"Syntax error: cannot parse '{number}' as a {proto} port")
    return f"{proto}:{int(number)}" if with_protocol else str(int(number))


def canonical_member(kind: IpSet, text: str) -> str:
    """``text`` as ``ipset save`` would list it in a set of ``kind``; raises ``IpsetError``."""
    dims = TYPES[kind.type]
    parts = text.split(",")
    if len(parts) < len(dims):
        raise IpsetError(f"Syntax error: Second element is missing from {text}.")
    if len(parts) > len(dims):
        names = {1: "one", 2: "two"}
        raise IpsetError(f"Syntax error: {names.get(len(parts) - 1, len(parts) - 1).capitalize()} elem separators in {text}, "
                         f"but settype {kind.type} supports {names.get(len(dims) - 1, 'none')}.")
    out = []
    for dim, part in zip(dims, parts):
        if dim == "ip":
            out.append(_ip(part, kind.family))
        elif dim == "net":
            out.append(_net(part, kind.family))
        else:
            out.append(_port(part, with_protocol=kind.type != "bitmap:port"))
    if kind.port_range is not None and not kind.port_range[0] <= int(out[0]) <= kind.port_range[1]:
        raise IpsetError(OUT_OF_RANGE)
    return ",".join(out)


def _check_name(name: str) -> None:
    if len(name) > MAX_NAME:
        raise IpsetError(f"Syntax error: setname '{name}' is longer than {MAX_NAME} characters")


def _create_spec(set_type: str, options: list[str]) -> IpSet:
    if set_type not in TYPES:
        raise IpsetError(f"Syntax error: typename '{set_type}' is unknown")
    values = dict(zip(options[::2], options[1::2]))
    if set_type == "bitmap:port":
        if "range" not in values:
            raise IpsetError("Mandatory option `range' is missing")
        low, _, high = values["range"].partition("-")
        return IpSet(set_type, None, (int(low), int(high or low)))
    family = values.get("family", "inet")
    if family not in ("inet", "inet6"):
        raise IpsetError(f"Syntax error: unknown family {family}")
    return IpSet(set_type, family)


class FakeIpset:
    """One namespace's ipsets. ``sets`` maps a name to its ``IpSet``; ``referenced`` holds the
    names a rule still uses (a test marks them); ``restores`` every text given to ``restore``."""

    def __init__(self):
        self.sets: dict[str, IpSet] = {}
        self.referenced: set[str] = set()
        self.restores: list[str] = []

    # -- the interface of kernel.ipset.Ipset

    async def restore(self, text: str) -> None:
        self.restore_sync(text)

    def destroy_sync(self, name: str) -> bool:
        try:
            self.command("destroy", name)
        except CommandFailed:
            return False
        return True

    def version_sync(self) -> str:
        return VERSION

    # -- state

    def members(self, name: str) -> set[str]:
        return set(self.sets[name].members)

    def state(self) -> dict[str, tuple[str, str | None, frozenset[str]]]:
        """Name -> (type, family, members): what a comparison with ``ipset save`` looks at."""
        return {name: (s.type, s.family, frozenset(s.members)) for name, s in self.sets.items()}

    # -- the tool

    def restore_sync(self, text: str) -> None:
        """``ipset restore``, as the tool runs it: consecutive ``add``/``del`` lines of one set are
        sent as one batch when a line of another kind comes (or the input ends), and the kernel
        applies a batch up to its first refused member; every other line is sent at once. A line
        the tool itself refuses (a member it cannot parse, a set it cannot find to parse one for)
        drops the batch not yet sent. The first failure ends the restore; what was sent stays."""
        self.restores.append(text)
        pending: list[tuple[int, str, IpSet, str, bool]] = []  # (line, verb, set, member, -exist)
        number = 0

        def fail(err: IpsetError, line: int):
            return CommandFailed(("ipset", "restore"), 1, "", f"{PREFIX}Error in line {line}: {err}\n", text)

        def send() -> None:
            batch = list(pending)
            pending.clear()
            for line, verb, found, member, exist in batch:
                try:
                    self._member(verb, found, member, exist)
                except IpsetError as err:
                    raise fail(err, line) from None

        for number, line in enumerate(text.splitlines(), 1):
            words = shlex.split(line, comments=True)
            if not words:
                continue
            exist = "-exist" in words or "-!" in words
            words = [w for w in words if w not in ("-exist", "-!")]
            verb = VERBS.get(words[0], words[0])
            try:
                if verb in ("add", "del"):
                    same = bool(pending) and pending[-1][1] == verb and pending[-1][2] is self.sets.get(words[1])
                    found = self._get(words[1])  # the tool asks the kernel for the set's type
                    member = canonical_member(found, words[2])
                    if not same:
                        send()
                    pending.append((number, verb, found, member, exist))
                    continue
                if verb == "create":
                    _check_name(words[1])
                    _create_spec(words[2], words[3:])
            except IpsetError as err:
                raise fail(err, number) from None
            send()
            try:
                self._apply(words + (["-exist"] if exist else []))
            except IpsetError as err:
                raise fail(err, number) from None
        send()

    def command(self, *argv: str) -> None:
        """One ``ipset ARGV...`` command line; raises ``CommandFailed`` as the tool exits 1."""
        try:
            self._apply(list(argv))
        except IpsetError as err:
            raise CommandFailed(("ipset", *argv), 1, "", f"{PREFIX}{err}\n") from None

    def _apply(self, words: list[str]) -> None:
        exist = "-exist" in words or "-!" in words
        words = [w for w in words if w not in ("-exist", "-!")]
        verb, args = VERBS.get(words[0], words[0]), words[1:]
        if verb == "create":
            self._create(args[0], args[1], args[2:], exist)
        elif verb in ("add", "del"):
            found = self._get(args[0])
            self._member(verb, found, canonical_member(found, args[1]), exist)
        elif verb == "swap":
            first = self._get(args[0])
            if args[1] not in self.sets:
                raise IpsetError(SWAP_SECOND)
            if not first.same_kind(self.sets[args[1]]):
                raise IpsetError(SWAP_TYPES)
            self.sets[args[0]], self.sets[args[1]] = self.sets[args[1]], first
        elif verb == "flush":
            for found in ([self._get(args[0])] if args else list(self.sets.values())):
                found.members.clear()
        elif verb == "destroy":
            names = [args[0]] if args else list(self.sets)
            for name in names:
                self._get(name)
                if name in self.referenced:
                    raise IpsetError(IN_USE)
            for name in names:
                del self.sets[name]
        else:
            raise NotImplementedError(f"the ipset fake does not model {verb!r}")

    @staticmethod
    def _member(verb: str, found: IpSet, member: str, exist: bool) -> None:
        if verb == "add":
            if member in found.members and not exist:
                raise IpsetError(ADDED)
            found.members.add(member)
        else:
            if member not in found.members and not exist:
                raise IpsetError(NOT_ADDED)
            found.members.discard(member)

    def _get(self, name: str) -> IpSet:
        if name not in self.sets:
            raise IpsetError(NO_SET)
        return self.sets[name]

    def _create(self, name: str, set_type: str, options: list[str], exist: bool) -> None:
        _check_name(name)
        spec = _create_spec(set_type, options)
        if name in self.sets:
            if exist and self.sets[name].type == spec.type:
                return
            raise IpsetError(EXISTS)
        self.sets[name] = spec


def parse_save(text: str) -> dict[str, tuple[str, str | None, frozenset[str]]]:
    """The real ``ipset save``'s text in the shape of ``FakeIpset.state()``."""
    sets: dict[str, IpSet] = {}
    for line in text.splitlines():
        words = line.split()
        if words and words[0] == "create":
            sets[words[1]] = _create_spec(words[2], words[3:])
        elif words and words[0] == "add":
            sets[words[1]].members.add(canonical_member(sets[words[1]], words[2]))
    return {name: (s.type, s.family, frozenset(s.members)) for name, s in sets.items()}
