"""A full sync's bulk element additions as one nf_tables netlink batch, ahead of its ``nft -f``.

Why: at 5k Services × 50 endpoints a full sync adds ~510k elements (250k endpoint slots, 250k
hairpin pairs). ``nft`` parses each into expression objects, evaluates and encodes it: ~3 s of
its ~5 s for the whole transaction (``perf``: 58 % of its samples in libnftables, libc and
libgmp; 31 % in the kernel's batch processing, 24 % inserting the elements). The same elements
packed here from pre-packed headers cost ~1 µs each in Python; the kernel's share is the same.

What may go ahead of the transaction (decided by the planner, ``proxy/nftables/rules.py``):
additions of keys a set does not hold, to sets no rule of the kernel reads them from before the
transaction lands (slot maps: a rule reads only the slots of its own block; the hairpin pair
set: a pair matters only for traffic DNATed to that address). So the packet path sees the
transaction atomically still. The batch is sent as nft would send it (``NFNL_MSG_BATCH_BEGIN``,
``NFT_MSG_NEWSETELEM`` per ≤ 64 KiB of elements of one set, ``NFNL_MSG_BATCH_END``), encoded as
``kernel/nftables_netlink.py`` describes (nft's ``netlink_gen_key``), so the elements list back
exactly as if ``nft`` had added them. The kernel applies the batch whole or not at all.

Only sets and maps whose key and data are addresses, protocols, ports and ``numgen`` integers
are encoded, verdict maps (``goto``/``jump`` a chain, or a plain verdict; never a comment:
commented elements stay in the text), and ranges of interval maps (the endpoint range maps) as
``kernel/nftables_netlink.py`` encodes them; ``encode`` answers None for anything else and the
caller sends the text as it is.
"""

from __future__ import annotations

import errno as errno_codes
import socket
import struct
import sys
from collections.abc import Callable, ItemsView, Iterable, Iterator, Mapping, Sequence, ValuesView
from itertools import chain as concatenated
from itertools import islice

from kubesvc.kernel.netns import call_in
from kubesvc.kernel.nftables_netlink import (
    FAMILIES,
    INTERVAL_KINDS,
    MAX_ATTR,
    NETLINK_CAP_ACK,
    NETLINK_NETFILTER,
    NFNL_MSG_BATCH_BEGIN,
    NFNL_MSG_BATCH_END,
    NFNL_SUBSYS_NFTABLES,
    NFTA_DATA_VALUE,
    NFTA_DATA_VERDICT,
    NFTA_SET_ELEM_DATA,
    NFTA_SET_ELEM_LIST_ELEMENTS,
    NFTA_SET_ELEM_LIST_SET,
    NFTA_SET_ELEM_LIST_TABLE,
    NFT_MSG_NEWSETELEM,
    NLA_F_NESTED,
    NLM_F_ACK,
    NLM_F_CREATE,
    NLM_F_REQUEST,
    PROTOCOLS,
    SOL_NETLINK,
    Element,
    NfNetlinkFailed,
    SetType,
    element_chunks,
    encode_fields,
    encode_verdict,
    grow_rcvbuf,
    grow_sndbuf,
    interval_elements,
    message,
    nla,
    read_acks,
    size_chunks,
)

NFTA_LIST_ELEM = 1  # nft's attribute type for each element of a list (the kernel does not read it)
NESTED = NLA_F_NESTED

_pton = socket.inet_pton
_BYTEORDER = sys.byteorder


def _field(kind: str, concat: bool) -> tuple[Callable[[str], bytes], int] | None:
    """One field's text → its bytes (padded to 4 in a concatenation), and its length."""
    if kind == "ipv4":
        return (lambda s: _pton(socket.AF_INET, s)), 4
    if kind == "ipv6":
        return (lambda s: _pton(socket.AF_INET6, s)), 16
    if kind == "port":
        if concat:
            return (lambda s: int(s).to_bytes(2, "big") + b"\0\0"), 4
        return (lambda s: int(s).to_bytes(2, "big")), 2
    if kind == "proto":
        def proto(s: str) -> bytes:
            n = PROTOCOLS.get(s)
            return bytes((int(s) if n is None else n,)) + (b"\0\0\0" if concat else b"")
        return proto, 4 if concat else 1
    if kind == "u32h":
        return (lambda s: int(s).to_bytes(4, _BYTEORDER)), 4
    return None


def _value(kinds: tuple[str, ...]) -> tuple[Callable[[str], bytes], int] | None:
    """A key's or data's text (``a . b``) → its bytes, and their length."""
    fields = [_field(kind, len(kinds) > 1) for kind in kinds]
    if any(f is None for f in fields):
        return None
    size = sum(n for _, n in fields)  # type: ignore[misc]
    if len(fields) == 1:
        return fields[0][0], size  # type: ignore[index]
    if kinds == ("ipv4", "ipv4") or kinds == ("ipv6", "ipv6"):  # the hairpin pair: one address twice, or two
        family = socket.AF_INET if kinds[0] == "ipv4" else socket.AF_INET6

        def pair(s: str) -> bytes:
            a, _, b = s.partition(" . ")
            first = _pton(family, a)
            return first + (first if b == a else _pton(family, b))
        return pair, size
    encoders = [f for f, _ in fields]  # type: ignore[misc]

    def concat(s: str) -> bytes:
        parts = s.split(" . ")
        if len(parts) != len(encoders):
            raise ValueError(f"{s!r} does not have {len(encoders)} fields")
        return b"".join([enc(part) for enc, part in zip(encoders, parts)])
    return concat, size


class Slots(Mapping):
    """An endpoint map's slots as blocks of consecutive ``numgen`` numbers: slot ``base + i`` holds
    the ``i``-th endpoint of its block, an ``(address, port, ...)`` sequence. Reads as the dict
    ``{"<slot>": "<address> . <port>"}`` (how ``nft`` lists the map), made without a string per
    slot: ``encode`` packs it from the addresses, and ``text`` writes its elements in one go.
    (At 5k Services × 50, 250k slots not held as two strings and a dict entry each.)"""

    __slots__ = ("blocks",)

    def __init__(self) -> None:
        self.blocks: list[tuple[int, Sequence[Sequence]]] = []

    def add(self, base: int, endpoints: Sequence[Sequence]) -> None:
        self.blocks.append((base, endpoints))

    def __len__(self) -> int:
        return sum(len(endpoints) for _, endpoints in self.blocks)

    def __iter__(self) -> Iterator[str]:
        return concatenated.from_iterable(map(str, range(base, base + len(endpoints))) for base, endpoints in self.blocks)

    def __getitem__(self, key: str) -> str:
        if isinstance(key, str) and key.isascii() and key.isdigit() and (key == "0" or key[0] != "0"):
            n = int(key)
            for base, endpoints in self.blocks:
                if base <= n < base + len(endpoints):
                    endpoint = endpoints[n - base]
                    return f"{endpoint[0]} . {endpoint[1]}"
        raise KeyError(key)

    def items(self) -> ItemsView:
        return _SlotItems(self)

    def values(self) -> ValuesView:
        return _SlotValues(self)

    def text(self) -> str:
        """The elements as an ``add element`` line lists them: ``0 : 10.0.0.1 . 80, ...``."""
        return ", ".join([f"{base + i} : {endpoint[0]} . {endpoint[1]}"
                          for base, endpoints in self.blocks for i, endpoint in enumerate(endpoints)])


class _SlotItems(ItemsView):
    def __iter__(self):
        return ((str(base + i), f"{endpoint[0]} . {endpoint[1]}")
                for base, endpoints in self._mapping.blocks for i, endpoint in enumerate(endpoints))


class _SlotValues(ValuesView):
    def __iter__(self):
        return (f"{endpoint[0]} . {endpoint[1]}" for _, endpoints in self._mapping.blocks for endpoint in endpoints)


class Joined(Mapping):
    """Mappings with disjoint keys read as one, without a copy: a container's elements over the
    renders that hold them."""

    __slots__ = ("parts",)

    def __init__(self, parts: list[Mapping[str, str]]):
        self.parts = parts

    def __getitem__(self, key: str) -> str:
        for part in self.parts:
            value = part.get(key)
            if value is not None:
                return value
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return concatenated.from_iterable(self.parts)

    def __len__(self) -> int:
        return sum(map(len, self.parts))

    def items(self) -> ItemsView:
        return _JoinedItems(self)

    def values(self) -> ValuesView:
        return _JoinedValues(self)


class _JoinedItems(ItemsView):
    def __iter__(self):
        return concatenated.from_iterable(part.items() for part in self._mapping.parts)


class _JoinedValues(ValuesView):
    def __iter__(self):
        return concatenated.from_iterable(part.values() for part in self._mapping.parts)


def _slot_blocks(elements: Mapping[str, str]) -> list[tuple[int, Sequence[Sequence]]] | None:
    """The blocks of ``elements`` when it is made of ``Slots`` (as such, or ``Joined``); else None."""
    if isinstance(elements, Slots):
        return elements.blocks
    if isinstance(elements, Joined) and all(isinstance(part, Slots) for part in elements.parts):
        return [block for part in elements.parts for block in part.blocks]
    return None


def _head(length: int, kind: int) -> bytes:
    return struct.pack("=HH", length, kind)


def encode(set_type: SetType, elements: Mapping[str, str]) -> Iterator[bytes] | None:
    """``{key text: data text}`` (data ``""`` for a set) → the payloads of
    ``NFTA_SET_ELEM_LIST_ELEMENTS``, each under 64 KiB, made as they are iterated (a malformed
    element raises ``ValueError``/``OSError``/``OverflowError`` then); None when the type is not
    one this module encodes."""
    if getattr(set_type, "interval", False):
        return _ranges(set_type, elements)
    key = _value(set_type.key)
    if key is None:
        return None
    key_of, key_len = key
    # NFTA_LIST_ELEM { NFTA_SET_ELEM_KEY { NFTA_DATA_VALUE key } [NFTA_SET_ELEM_DATA { NFTA_DATA_VALUE data }] }
    key_pad = b"\0" * (-key_len % 4)
    key_attr = 4 + 4 + key_len + len(key_pad)
    if set_type.data is None:
        size = 4 + key_attr
        head = _head(size, NFTA_LIST_ELEM | NESTED) + _head(key_attr, 1 | NESTED) + _head(4 + key_len, 1)
        if set_type.key in (("ipv4", "ipv4"), ("ipv6", "ipv6")):
            return _pairs(head, set_type.key, elements, MAX_ATTR // size)
        return _chunks(lambda k, v: head + key_of(k) + key_pad, elements, MAX_ATTR // size)
    if set_type.data == ("verdict",):
        return _verdicts(key_of, key_len, elements)
    data = None if "verdict" in set_type.data else _value(set_type.data)
    if data is None:
        return None
    data_of, data_len = data
    data_pad = b"\0" * (-data_len % 4)
    data_attr = 4 + 4 + data_len + len(data_pad)
    size = 4 + key_attr + data_attr
    head = _head(size, NFTA_LIST_ELEM | NESTED) + _head(key_attr, 1 | NESTED) + _head(4 + key_len, 1)
    mid = key_pad + _head(data_attr, 2 | NESTED) + _head(4 + data_len, 1)
    if set_type.key == ("u32h",) and set_type.data in (("ipv4", "port"), ("ipv6", "port")):
        blocks = _slot_blocks(elements)
        if blocks is not None:
            return _slot_blocks_packed(head, mid, set_type.data[0], blocks, MAX_ATTR // size)
        return _slots(head, mid, set_type.data[0], elements, MAX_ATTR // size)
    return _chunks(lambda k, v: head + key_of(k) + mid + data_of(v) + data_pad, elements, MAX_ATTR // size)


def _verdicts(key_of: Callable[[str], bytes], key_len: int, elements: Mapping[str, str]) -> Iterator[bytes]:
    """Verdict map elements (``... : goto <chain>``; no comments here), each as long as its
    chain's name makes it, so chunked by size."""
    key_pad = b"\0" * (-key_len % 4)
    key_attr = _head(8 + key_len + len(key_pad), 1 | NESTED) + _head(4 + key_len, 1)

    def encoded() -> Iterator[bytes]:
        for key, value in elements.items():
            body = key_attr + key_of(key) + key_pad + nla(NFTA_SET_ELEM_DATA, nla(NFTA_DATA_VERDICT, encode_verdict(value), nested=True), nested=True)
            yield _head(4 + len(body), NFTA_LIST_ELEM | NESTED) + body
    return size_chunks(encoded())


def _ranges(set_type: SetType, elements: Mapping[str, str]) -> Iterator[bytes] | None:
    """Ranges ``low-high`` of an interval set or map (the endpoint range maps): each the two
    kernel elements nft 1.0.6 sends to the rbtree set, a start carrying the data and an end
    ``high + 1`` flagged ``NFT_SET_ELEM_INTERVAL_END``, keys in network order, encoded by
    ``kernel/nftables_netlink.py`` as a partial sync's ranges are. nft spends far more on a
    range than on a plain element (its interval code sorts, merges and checks overlaps of the
    whole set), so these are worth sending ahead even when they are few."""
    kind = set_type.key[0]
    if kind not in INTERVAL_KINDS or (set_type.data is not None and "verdict" in set_type.data):
        return None
    data_kinds = set_type.data
    if kind == "u32h" and data_kinds in (("ipv4", "port"), ("ipv6", "port")):
        return _slot_ranges(data_kinds[0], elements)

    def kernel_elements() -> Iterator[Element]:
        try:
            for key, value in elements.items():
                data = None if data_kinds is None else nla(NFTA_DATA_VALUE, encode_fields(value, data_kinds))
                yield from interval_elements(key, kind, data, None)
        except struct.error as err:  # a port past 65535: refused as any other malformed element
            raise ValueError(str(err)) from err
    return element_chunks(kernel_elements())


def _slot_ranges(kind: str, elements: Mapping[str, str]) -> Iterator[bytes]:
    """The endpoint range maps' elements written out (one pack per kernel element, as
    ``_slots``): ``low-high`` of ``numgen`` numbers → ``address . port``; the same bytes as
    the generic path but for the elements' attribute type (nft's NFTA_LIST_ELEM, which
    the kernel does not read)."""
    family, size = (socket.AF_INET, 4) if kind == "ipv4" else (socket.AF_INET6, 16)
    data_len = size + 4  # address, port, 2 bytes of padding
    data_attr = 4 + 4 + data_len
    start_size = 4 + 12 + data_attr
    # NFTA_LIST_ELEM { KEY { VALUE low } DATA { VALUE address . port } }
    start = struct.Struct(f"=HHHHHHIHHHH{size}sH2x").pack
    start_heads = (start_size, NFTA_LIST_ELEM | NESTED, 12, 1 | NESTED, 8, 1)
    data_heads = (data_attr, 2 | NESTED, 4 + data_len, 1)
    # NFTA_LIST_ELEM { FLAGS NFT_SET_ELEM_INTERVAL_END (big-endian) KEY { VALUE high + 1 } }
    end = struct.Struct("=HHHHIHHHHI").pack
    end_heads = (24, NFTA_LIST_ELEM | NESTED, 8, 3)
    end_flags = socket.htonl(1)
    htonl, htons, pton = socket.htonl, socket.htons, _pton
    per_chunk = MAX_ATTR // (start_size + 24)
    items = iter(elements.items())
    while part := list(islice(items, per_chunk)):
        out = []
        for key, value in part:
            low_text, dash, high_text = key.partition("-")
            low = int(low_text)
            high = int(high_text) if dash else low
            if not 0 <= low <= high <= 0xFFFFFFFF:
                raise ValueError(f"{key!r} is not a range of u32")
            address, _, port = value.partition(" . ")
            out.append(start(*start_heads, htonl(low), *data_heads, pton(family, address), htons(int(port))))
            if high < 0xFFFFFFFF:  # none past the top of the space (as nft)
                out.append(end(*end_heads, end_flags, 12, 1 | NESTED, 8, 1, htonl(high + 1)))
        yield b"".join(out)


def _chunks(element: Callable[[str, str], bytes], elements: Mapping[str, str], per_chunk: int) -> Iterator[bytes]:
    items = iter(elements.items())
    while part := list(islice(items, per_chunk)):
        yield b"".join([element(k, v) for k, v in part])


# The two shapes of nearly every element of a full sync, written out (one pack per element,
# no per-field calls): at 5k Services × 50 there are 250k of each.

def _slots(head: bytes, mid: bytes, kind: str, elements: Mapping[str, str], per_chunk: int) -> Iterator[bytes]:
    """Slot map elements: ``numgen`` slot (host order) → ``address . port``."""
    family, size = (socket.AF_INET, 4) if kind == "ipv4" else (socket.AF_INET6, 16)
    pack = struct.Struct(f"={len(head)}sI{len(mid)}s{size}sH2x").pack
    htons, pton = socket.htons, _pton
    items = iter(elements.items())
    while part := list(islice(items, per_chunk)):
        yield b"".join([pack(head, int(k), mid, pton(family, (a := v.partition(" . "))[0]), htons(int(a[2]))) for k, v in part])


def _slot_blocks_packed(head: bytes, mid: bytes, kind: str, blocks: list[tuple[int, Sequence[Sequence]]],
                        per_chunk: int) -> Iterator[bytes]:
    """``Slots`` elements packed from their endpoints' addresses and ports (no text at all)."""
    family, size = (socket.AF_INET, 4) if kind == "ipv4" else (socket.AF_INET6, 16)
    pack = struct.Struct(f"={len(head)}sI{len(mid)}s{size}sH2x").pack
    htons, pton = socket.htons, _pton
    items = ((base + i, endpoint) for base, endpoints in blocks for i, endpoint in enumerate(endpoints))
    while part := list(islice(items, per_chunk)):
        yield b"".join([pack(head, slot, mid, pton(family, endpoint[0]), htons(endpoint[1])) for slot, endpoint in part])


def _pairs(head: bytes, kinds: tuple[str, ...], elements: Mapping[str, str], per_chunk: int) -> Iterator[bytes]:
    """Hairpin pairs ``address . address`` (the same address twice, but any pair is encoded)."""
    family = socket.AF_INET if kinds[0] == "ipv4" else socket.AF_INET6
    pton = _pton

    def pair(k: str) -> bytes:
        a, sep, b = k.partition(" . ")
        if not sep:
            raise ValueError(f"{k!r} is not a pair")
        return head + pton(family, a) + pton(family, b)
    keys = iter(elements)
    while part := list(islice(keys, per_chunk)):
        # the usual pair, one address twice, without a call; anything else through pair()
        yield b"".join([head + raw + raw if (a := k.partition(" . "))[0] == a[2] and (raw := pton(family, a[0])) else pair(k)
                        for k in part])


class Batch:
    """One nf_tables batch of element additions, built before it is sent (the Python part)."""

    def __init__(self, family: str, table: str, sets: list[tuple[str, Iterable[bytes]]]):
        fam = FAMILIES[family]
        seq = 1
        data = bytearray(message(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, seq, 0, b"", NFNL_SUBSYS_NFTABLES))
        self.begin = seq
        self.sets = [name for name, _ in sets]
        self.what: dict[int, str] = {}
        kind = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWSETELEM
        flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE
        table_attr = nla(NFTA_SET_ELEM_LIST_TABLE, table.encode() + b"\0")
        for name, payloads in sets:
            head = table_attr + nla(NFTA_SET_ELEM_LIST_SET, name.encode() + b"\0")
            for payload in payloads:
                seq += 1
                self.what[seq] = f"add element {family} {table} {name}"
                data += message(kind, flags, seq, fam, head + _head(4 + len(payload), NFTA_SET_ELEM_LIST_ELEMENTS | NESTED) + payload)
        seq += 1
        data += message(NFNL_MSG_BATCH_END, NLM_F_REQUEST, seq, 0, b"", NFNL_SUBSYS_NFTABLES)
        self.data = data


def send(netns: str | None, batch: Batch) -> None:
    """Send ``batch``; raises ``NfNetlinkFailed`` (nothing applied) if the kernel refuses any of it."""
    sock = call_in(netns, socket.socket, socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_NETFILTER)
    try:
        sock.bind((0, 0))
        sock.settimeout(30.0)
        try:
            sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
        except OSError:
            pass
        data = batch.data
        grow_sndbuf(sock, len(data))
        grow_rcvbuf(sock, len(batch.what) * 1024)  # an ack per message, each a buffer of its own (as nft)
        sent = sock.send(data)
        if sent != len(data):
            raise NfNetlinkFailed(errno_codes.EMSGSIZE, "batch truncated")
        pending = set(batch.what)
        while pending:
            for mseq, code in read_acks(sock.recv(1 << 20)):
                if code and (mseq == batch.begin or mseq in pending):
                    raise NfNetlinkFailed(code, "commit" if mseq == batch.begin else batch.what[mseq])
                pending.discard(mseq)
    finally:
        sock.close()

