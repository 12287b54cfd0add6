"""Set-element transactions and small queries over nf_tables netlink, without libnftables.

Why: ``nft`` (and libnftables, the same code) fills a cache before it evaluates a transaction,
and which parts depends on the commands (nftables 1.0.6 ``src/cache.c``,
``nft_cache_evaluate``): ``add chain``/``add set`` need only the table list; ``flush set``
the sets; but ``add element`` needs tables, **every chain**, sets and objects
(``NFT_CACHE_TABLE|CHAIN|SET|OBJECT|SETELEM_MAYBE``), ``delete element`` the same plus
flowtables, and ``add rule`` the same. Chains are dumped from the kernel for all tables and
turned into nft's objects, so one element changed at 10k Services costs ~14 ms of cache and at
30k ~40 ms, whatever the transaction's size. The cache cannot be kept between calls either:
``nft_cache_update`` reuses it only while the ruleset generation is the one it was built at,
and our own commit bumps it. Nor does libnftables 1.0.6 offer a flag to skip it
(``NFT_CTX_INPUT_*`` input flags came later, and none skips the cache).

What nft sends for elements is simple, so a transaction that only adds and deletes elements
of sets whose types we know is sent here as nft would: one batch (``NFNL_MSG_BATCH_BEGIN``,
``NFT_MSG_DELSETELEM``/``NFT_MSG_NEWSETELEM`` per set, ``NFNL_MSG_BATCH_END``), applied by the
kernel atomically, no cache at all. Keys and data are encoded as nft's ``netlink_gen_key``
does: addresses and ports in network order, protocols one byte, integers from ``numgen`` in
host order, each field of a concatenation padded to 4 bytes; verdicts as
``NFTA_DATA_VERDICT``; a comment as nft's element userdata (``NFTNL_UDATA_SET_ELEM_COMMENT``,
NUL-terminated). Such elements list back from ``nft`` exactly as if ``nft`` had added them.
Ranges of an interval set with a one-field key (``flags interval``; the proxy's endpoint range
maps) are sent as nft 1.0.6 sends them to the kernel's rbtree set: a start element carrying
the data and an end element ``high + 1`` flagged ``NFT_SET_ELEM_INTERVAL_END``, keys in network
order (host-order ``numgen`` values too: nft converts the register before such a lookup).

The types come from the declarations in the transactions the caller has run
(``declared_set_types``: ``add set|map ... { type ... ; }`` or ``{ typeof ... ; }``); a
transaction with anything else, a set we have not seen declared, a set with flags, or a
type or expression outside the small vocabulary below is left to libnftables (``parse_elements_only``
returns None).

``chain_rule_count`` asks the kernel for one chain (``NFT_MSG_GETCHAIN``: gone or not) and its rules
(``NFT_MSG_GETRULE`` dump filtered by table and chain): the cost of the chain, not of the table,
and no process.
"""

from __future__ import annotations

import errno as errno_codes
import os
import re
import socket
import struct
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from kubesvc.kernel.netns import call_in

NETLINK_NETFILTER = 12
NFNL_SUBSYS_NFTABLES = 10
NFNL_MSG_BATCH_BEGIN = 0x10
NFNL_MSG_BATCH_END = 0x11
NFT_MSG_GETRULE = 7
NFT_MSG_NEWSETELEM = 12
NFT_MSG_DELSETELEM = 14
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_CREATE = 0x400
NLM_F_DUMP = 0x300
NLMSG_ERROR = 0x2
NLMSG_DONE = 0x3
NLA_F_NESTED = 0x8000
SOL_NETLINK = 270
NETLINK_CAP_ACK = 10  # errors echo only the header, not a 64 KiB message
NFTA_SET_ELEM_LIST_TABLE = 1
NFTA_SET_ELEM_LIST_SET = 2
NFTA_SET_ELEM_LIST_ELEMENTS = 3
NFTA_SET_ELEM_KEY = 1
NFTA_SET_ELEM_DATA = 2
NFTA_SET_ELEM_FLAGS = 3
NFT_SET_ELEM_INTERVAL_END = 1
NFTA_SET_ELEM_USERDATA = 6
NFTA_DATA_VALUE = 1
NFTA_DATA_VERDICT = 2
NFTA_VERDICT_CODE = 1
NFTA_VERDICT_CHAIN = 2
NFTA_RULE_TABLE = 1
NFTA_RULE_CHAIN = 2
NFTA_CHAIN_TABLE = 1
NFTA_CHAIN_NAME = 3
NFT_MSG_GETCHAIN = 4
NFTNL_UDATA_SET_ELEM_COMMENT = 0
FAMILIES = {"ip": 2, "ip6": 10, "inet": 1}

VERDICTS = {"drop": 0, "accept": 1, "continue": -1, "return": -5}
CHAIN_VERDICTS = {"jump": -3, "goto": -4}
PROTOCOLS = {"tcp": 6, "udp": 17, "sctp": 132, "icmp": 1, "icmpv6": 58}
# ``type`` names and ``typeof`` expressions → field kinds
TYPE_NAMES = {"ipv4_addr": "ipv4", "ipv6_addr": "ipv6", "inet_proto": "proto", "inet_service": "port", "verdict": "verdict"}
_TYPEOF = (
    (re.compile(r"numgen (random|inc) mod \d+( offset \d+)?"), "u32h"),
    (re.compile(r"ip (s|d)addr"), "ipv4"),
    (re.compile(r"ip6 (s|d)addr"), "ipv6"),
    (re.compile(r"(tcp|udp|sctp|th) (s|d)port"), "port"),
    (re.compile(r"meta l4proto"), "proto"),
)
INTERVAL_KINDS = ("u32h", "port", "ipv4")  # one-field keys whose ranges ``interval_elements`` encodes
MAX_ATTR = 0xFFFF - 512  # an element list is one attribute (u16 length): split before that


@dataclass(frozen=True)
class SetType:
    key: tuple[str, ...]  # field kinds
    data: tuple[str, ...] | None  # None: a set; ("verdict",): a verdict map
    interval: bool = False  # ``flags interval`` on a one-field key: elements are ranges


def _kinds(spec: str, typeof: bool) -> tuple[str, ...] | None:
    kinds = []
    for part in spec.strip().split(" . "):
        part = part.strip()
        if typeof:
            kind = next((k for pattern, k in _TYPEOF if pattern.fullmatch(part)), None)
        else:
            kind = TYPE_NAMES.get(part)
        if kind is None:
            return None
        kinds.append(kind)
    return tuple(kinds)


def declared_set_types(text: str, family: str, table: str) -> dict[str, SetType | None]:
    """The sets and maps that ``text`` declares in ``family table`` → their types; None for
    one we cannot encode (flags, other types). Scans only the ``add set|map`` lines."""
    out: dict[str, SetType | None] = {}
    for head in ("add set ", "add map "):
        prefix = f"{head}{family} {table} "
        start = 0 if text.startswith(prefix) else -1
        if start < 0:
            start = text.find("\n" + prefix)
            start = start + 1 if start >= 0 else -1
        while start >= 0:
            end = text.find("\n", start)
            line = text[start:] if end < 0 else text[start:end]
            name, _, body = line[len(prefix):].partition(" ")
            out[name] = _parse_declaration(body)
            nxt = text.find("\n" + prefix, start)
            start = nxt + 1 if nxt >= 0 else -1
    return out


def _parse_declaration(body: str) -> SetType | None:
    body = body.strip()
    if not (body.startswith("{") and body.endswith("}")):
        return None
    clauses = [c.strip() for c in body[1:-1].split(";") if c.strip()]
    spec = None
    interval = False
    for clause in clauses:
        word = clause.split(" ", 1)[0]
        if word in ("type", "typeof") and spec is None:
            spec = (word == "typeof", clause[len(word):].strip())
        elif clause == "flags interval":
            interval = True
        elif word not in ("comment", "size", "policy"):
            return None  # other flags, timeouts, elements, ...: leave it to nft
    if spec is None:
        return None
    typeof, text = spec
    key_text, colon, data_text = text.partition(" : ")
    key = _kinds(key_text, typeof)
    if key is None or "verdict" in key or (interval and len(key) != 1):
        return None  # (ranges of concatenations are pipapo elements, encoded otherwise)
    data = None
    if colon:
        data = ("verdict",) if data_text.strip() == "verdict" else _kinds(data_text, typeof)
        if data is None or ("verdict" in data and len(data) > 1):
            return None
    return SetType(key, data, interval)


# -- parsing an element-only transaction -------------------------------------------------------

# (key attr payload, data attr payload, userdata, NFTA_SET_ELEM_FLAGS)
Element = tuple[bytes, bytes | None, bytes | None, int]


@dataclass
class ElementOp:
    delete: bool
    set: str
    elements: list[Element]


_ELEMENT_LINE = re.compile(r"(add|delete) element (\S+) (\S+) (\S+) \{ (.*) \}")
_SPLIT = re.compile(r'(?:[^,"]|"[^"]*")+')


def parse_elements_only(text: str, family: str, table: str, types: dict[str, SetType | None]) -> list[ElementOp] | None:
    """``text`` as element operations if it holds nothing but ``add element`` / ``delete
    element`` lines for sets of ``family table`` whose types are known; else None."""
    ops: list[ElementOp] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _ELEMENT_LINE.fullmatch(line.strip())
        if m is None or m.group(2) != family or m.group(3) != table:
            return None
        set_type = types.get(m.group(4))
        if set_type is None:
            return None
        delete = m.group(1) == "delete"
        try:
            elements = [e for item in _SPLIT.findall(m.group(5)) for e in _encode_element(item.strip(), set_type, delete)]
        except (ValueError, OSError, KeyError, struct.error):
            return None
        ops.append(ElementOp(delete, m.group(4), elements))
    return ops


def _encode_element(item: str, set_type: SetType, delete: bool) -> list[Element]:
    """One element of the text as the kernel elements nft sends for it: one, or for a range
    of an interval set two (see ``interval_elements``)."""
    comment = None
    if ' comment "' in item:
        key_text, _, rest = item.partition(' comment "')
        comment, _, rest = rest.partition('"')
        value_text = rest.partition(" : ")[2] if rest.strip() else ""
    else:
        key_text, _, value_text = item.partition(" : ")
    data = userdata = None
    if set_type.data is not None and not delete:
        if not value_text:
            raise ValueError("a map element needs a value")
        if set_type.data == ("verdict",):
            data = nla(NFTA_DATA_VERDICT, encode_verdict(value_text.strip()), nested=True)
        else:
            data = nla(NFTA_DATA_VALUE, encode_fields(value_text, set_type.data))
    elif value_text and not delete:
        raise ValueError("a set element has no value")
    if comment and not delete:
        raw = comment.encode() + b"\0"
        if len(raw) > 255:
            raise ValueError("comment too long")
        userdata = bytes((NFTNL_UDATA_SET_ELEM_COMMENT, len(raw))) + raw
    if set_type.interval:
        return interval_elements(key_text.strip(), set_type.key[0], data, userdata)
    return [(nla(NFTA_DATA_VALUE, encode_fields(key_text, set_type.key)), data, userdata, 0)]


def interval_elements(text: str, kind: str, data: bytes | None, userdata: bytes | None) -> list[Element]:
    """A range ``low-high`` (or one value) of an interval set as nft 1.0.6 sends it to the
    rbtree set: the start ``low`` carrying the data, then an element ``high + 1`` flagged
    ``NFT_SET_ELEM_INTERVAL_END`` (none when ``high`` is the largest value). Keys are in network
    order, host-order ``numgen`` values included: nft converts the register before the lookup
    (``byteorder reg 1 = hton(reg 1, 4, 4)``). A deletion names the same two elements.
    (nft also adds an end element at 0 below a set's first range; the kernel does not need
    it and listings do not show it.)"""
    if kind not in INTERVAL_KINDS:
        raise ValueError(f"ranges of {kind} are not encoded here")
    low_text, dash, high_text = text.partition("-")
    width = {"u32h": 32, "port": 16, "ipv4": 32}[kind]

    def number(word: str) -> int:
        word = word.strip()
        if kind == "ipv4":
            return int.from_bytes(socket.inet_pton(socket.AF_INET, word), "big")
        value = int(word)
        if not 0 <= value < 1 << width:
            raise ValueError(word)
        return value

    low = number(low_text)
    high = number(high_text) if dash else low
    if high < low:
        raise ValueError(f"empty range {text!r}")
    size = width // 8
    out: list[Element] = [(nla(NFTA_DATA_VALUE, low.to_bytes(size, "big")), data, userdata, 0)]
    if high + 1 < 1 << width:
        out.append((nla(NFTA_DATA_VALUE, (high + 1).to_bytes(size, "big")), None, None, NFT_SET_ELEM_INTERVAL_END))
    return out


def encode_fields(text: str, kinds: tuple[str, ...]) -> bytes:
    parts = [p.strip() for p in text.strip().split(" . ")]
    if len(parts) != len(kinds):
        raise ValueError(f"{text!r} does not have {len(kinds)} fields")
    out = b""
    for part, kind in zip(parts, kinds):
        if kind == "ipv4":
            raw = socket.inet_pton(socket.AF_INET, part)
        elif kind == "ipv6":
            raw = socket.inet_pton(socket.AF_INET6, part)
        elif kind == "proto":
            raw = bytes((PROTOCOLS[part] if part in PROTOCOLS else int(part),))
        elif kind == "port":
            raw = struct.pack("!H", int(part))
        elif kind == "u32h":
            raw = struct.pack("=I", int(part))
        else:
            raise ValueError(kind)
        if len(kinds) > 1:
            raw += b"\0" * (-len(raw) % 4)
        out += raw
    return out


def encode_verdict(text: str) -> bytes:
    if text in VERDICTS:
        return nla(NFTA_VERDICT_CODE, struct.pack("!i", VERDICTS[text]))
    word, _, chain = text.partition(" ")
    if word not in CHAIN_VERDICTS or not chain or " " in chain:
        raise ValueError(f"unknown verdict {text!r}")
    return nla(NFTA_VERDICT_CODE, struct.pack("!i", CHAIN_VERDICTS[word])) + nla(NFTA_VERDICT_CHAIN, chain.encode() + b"\0")


# -- the wire -----------------------------------------------------------------------------------
# (public: kernel/nftables_elements.py builds its batches from the same helpers)

def nla(kind: int, payload: bytes, nested: bool = False) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind | (NLA_F_NESTED if nested else 0)) + payload + b"\0" * (-length % 4)


def message(kind: int, flags: int, seq: int, family: int, payload: bytes, res_id: int = 0) -> bytes:
    body = struct.pack("=BBH", family, 0, socket.htons(res_id)) + payload
    return struct.pack("=IHHII", 16 + len(body), kind, flags, seq, 0) + body


class NfNetlinkFailed(Exception):
    """The kernel refused an nf_tables request: ``errno`` and the operation it refused (if known).
    Not a ``CommandFailed``: ``kernel.nftables`` turns it into nft's own failure."""

    def __init__(self, code: int, what: str = ""):
        super().__init__(f"{os.strerror(code)}{f' ({what})' if what else ''}")
        self.errno = code
        self.what = what


class NftNetlink:
    """One ``NETLINK_NETFILTER`` socket in this process's network namespace."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns  # the socket is made there (a socket keeps the namespace it was made in)
        self._sock: socket.socket | None = None
        self._seq = 0
        self._lock = threading.Lock()

    def _socket(self) -> socket.socket:
        if self._sock is None:
            sock = call_in(self.netns, socket.socket, socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_NETFILTER)
            sock.bind((0, 0))
            sock.settimeout(10.0)
            self._sock = sock
        return self._sock

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None

    def _next(self) -> int:
        self._seq = (self._seq + 1) & 0x7FFFFFFF or 1
        return self._seq

    def apply(self, family: str, table: str, ops: list[ElementOp]) -> None:
        """Apply ``ops`` as one batch; raises ``NfNetlinkFailed`` (nothing applied) on refusal."""
        fam = FAMILIES[family]
        with self._lock:
            sock = self._socket()
            msgs: list[bytes] = []
            what: dict[int, str] = {}
            begin = self._next()
            msgs.append(message(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, begin, 0, b"", NFNL_SUBSYS_NFTABLES))
            head_attrs = nla(NFTA_SET_ELEM_LIST_TABLE, table.encode() + b"\0")
            for op in ops:
                kind = (NFNL_SUBSYS_NFTABLES << 8) | (NFT_MSG_DELSETELEM if op.delete else NFT_MSG_NEWSETELEM)
                flags = NLM_F_REQUEST | NLM_F_ACK | (0 if op.delete else NLM_F_CREATE)
                head = head_attrs + nla(NFTA_SET_ELEM_LIST_SET, op.set.encode() + b"\0")
                for chunk in element_chunks(op.elements):
                    seq = self._next()
                    what[seq] = f"{'delete' if op.delete else 'add'} element {family} {table} {op.set}"
                    msgs.append(message(kind, flags, seq, fam, head + nla(NFTA_SET_ELEM_LIST_ELEMENTS, chunk, nested=True)))
            msgs.append(message(NFNL_MSG_BATCH_END, NLM_F_REQUEST, self._next(), 0, b"", NFNL_SUBSYS_NFTABLES))
            data = b"".join(msgs)
            if len(data) > 4 << 20:
                raise NfNetlinkFailed(errno_codes.EMSGSIZE, "batch too large")
            grow_sndbuf(sock, len(data))
            sock.send(data)
            pending = set(what)
            failure: NfNetlinkFailed | None = None
            while pending:
                for seq, code in read_acks(sock.recv(65536)):
                    if seq == begin and code and failure is None:  # the commit itself failed
                        failure = NfNetlinkFailed(code, "commit")
                    if seq in pending:
                        pending.discard(seq)
                        if code and failure is None:
                            failure = NfNetlinkFailed(code, what.get(seq, ""))
                if failure is not None:
                    # The batch was aborted as a whole; acks still due may never come (the
                    # kernel stops early on ENOMEM), so they are drained, not awaited.
                    self._drain(sock)
                    raise failure

    def chain_rule_count(self, family: str, table: str, chain: str) -> int | None:
        """How many rules ``chain`` has; None if it or the table does not exist (asked first:
        the rule dump of a missing chain is as empty as that of an empty one)."""
        with self._lock:
            sock = self._socket()
            seq = self._next()
            payload = nla(NFTA_CHAIN_TABLE, table.encode() + b"\0") + nla(NFTA_CHAIN_NAME, chain.encode() + b"\0")
            sock.send(message((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETCHAIN, NLM_F_REQUEST | NLM_F_ACK, seq, FAMILIES[family], payload))
            while True:
                code = next((code for mseq, code in read_acks(sock.recv(1 << 16)) if mseq == seq), None)
                if code is not None:
                    break
            if code == errno_codes.ENOENT:
                return None
            if code:
                raise NfNetlinkFailed(code, f"list chain {family} {table} {chain}")
            seq = self._next()
            payload = nla(NFTA_RULE_TABLE, table.encode() + b"\0") + nla(NFTA_RULE_CHAIN, chain.encode() + b"\0")
            sock.send(message((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETRULE, NLM_F_REQUEST | NLM_F_DUMP, seq, FAMILIES[family], payload))
            rules = 0
            while True:
                data = sock.recv(1 << 20)
                for kind, mseq, offset in _messages(data):
                    if mseq != seq:
                        continue
                    if kind == NLMSG_DONE:
                        return rules
                    if kind == NLMSG_ERROR:
                        code = -struct.unpack_from("=i", data, offset + 16)[0]
                        if code in (errno_codes.ENOENT, 0):
                            return rules
                        raise NfNetlinkFailed(code, f"list chain {family} {table} {chain}")
                    rules += 1

    def _drain(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        try:
            while True:
                sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            pass
        finally:
            sock.settimeout(10.0)


def element_chunks(elements: list[Element]):
    """``elements`` as the payloads of ``NFTA_SET_ELEM_LIST_ELEMENTS``, each under ``MAX_ATTR``."""
    def encoded():
        for index, (key, data, userdata, flags) in enumerate(elements, 1):
            body = nla(NFTA_SET_ELEM_FLAGS, struct.pack("!I", flags)) if flags else b""
            body += nla(NFTA_SET_ELEM_KEY, key, nested=True)
            if data is not None:
                body += nla(NFTA_SET_ELEM_DATA, data, nested=True)
            if userdata is not None:
                body += nla(NFTA_SET_ELEM_USERDATA, userdata)
            yield nla(index & 0x7FFF or 1, body, nested=True)
    return size_chunks(encoded())


def size_chunks(encoded_elements: Iterable[bytes]) -> Iterator[bytes]:
    """Encoded list elements joined into runs, each under ``MAX_ATTR``: the element list is one
    netlink attribute with a 16-bit length, so a batch of many elements spans several messages."""
    chunk: list[bytes] = []
    size = 0
    for element in encoded_elements:
        if chunk and size + len(element) > MAX_ATTR:
            yield b"".join(chunk)
            chunk, size = [], 0
        chunk.append(element)
        size += len(element)
    if chunk:
        yield b"".join(chunk)


def _messages(data: bytes):
    """(type, sequence number, offset) of each netlink message in one datagram."""
    offset = 0
    while offset + 16 <= len(data):
        length, kind, _flags, seq = struct.unpack_from("=IHHI", data, offset)
        if length < 16:
            break
        yield kind, seq, offset
        offset += (length + 3) & ~3


def read_acks(data: bytes):
    for kind, seq, offset in _messages(data):
        if kind == NLMSG_ERROR:
            yield seq, -struct.unpack_from("=i", data, offset + 16)[0]


def grow_sndbuf(sock: socket.socket, size: int) -> None:
    if size > sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 2:
        try:
            sock.setsockopt(socket.SOL_SOCKET, 32, size * 2)  # SO_SNDBUFFORCE (root)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size * 2)


def grow_rcvbuf(sock: socket.socket, size: int) -> None:
    if size > sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2:
        try:
            sock.setsockopt(socket.SOL_SOCKET, 33, size)  # SO_RCVBUFFORCE (root)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
