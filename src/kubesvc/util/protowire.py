"""Protocol Buffers' wire format, the one piece both hand-built encoders share: the base-128
varint (https://protobuf.dev/programming-guides/encoding/#varints). ``storage/etcd/wire.py``
writes etcd's ``TxnRequest`` with it, ``apiserver/openapi_v2.py`` the gnostic OpenAPI v2
document kubectl asks for as protobuf."""

from __future__ import annotations

_SMALL = [bytes([n]) for n in range(128)]


def varint(n: int) -> bytes:
    """A non-negative integer as protobuf's base-128 varint (a negative int64 is passed as its
    two's complement, ``n & 0xFFFFFFFFFFFFFFFF``, as protobuf encodes it)."""
    if n < 128:
        return _SMALL[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
