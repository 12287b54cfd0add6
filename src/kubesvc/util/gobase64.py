"""Go's ``encoding/base64.StdEncoding`` decoder, error offsets included.

Kubernetes sends ``[]byte`` fields (Secret ``data``, ConfigMap ``binaryData``) as base64 strings
in JSON; Go's JSON decoder turns a bad one into the request's 400 with the decoder's error text,
``illegal base64 data at input byte 4``. Python's ``base64`` module accepts and rejects other
inputs and reports no offsets, so the decoder is ported here (``decodeQuantum`` in
``src/encoding/base64/base64.go``): the standard alphabet, ``=`` padding required, ``\\r`` and
``\\n`` skipped anywhere, and the offset of the first byte that made the input invalid.
"""

from __future__ import annotations

_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_DECODE = {byte: value for value, byte in enumerate(_ALPHABET)}
_PAD = ord("=")
_NEWLINES = (ord("\n"), ord("\r"))


class CorruptInputError(ValueError):
    """Go's ``base64.CorruptInputError``: the byte offset where decoding failed."""

    def __init__(self, offset: int):
        super().__init__(f"illegal base64 data at input byte {offset}")
        self.offset = offset


def decode(text: str | bytes) -> bytes:
    """``base64.StdEncoding.DecodeString``; raises :class:`CorruptInputError` as Go does."""
    src = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    out = bytearray()
    si = 0
    while si < len(src):
        si = _quantum(src, si, out)
    return bytes(out)


def _skip_newlines(src: bytes, si: int) -> int:
    while si < len(src) and src[si] in _NEWLINES:
        si += 1
    return si


def _quantum(src: bytes, si: int, out: bytearray) -> int:
    """One 4-character group into ``out``; the next input offset (``decodeQuantum``)."""
    values = [0, 0, 0, 0]
    length = 4
    j = 0
    trailing_error: CorruptInputError | None = None
    while j < 4:
        if si == len(src):
            if j == 0:
                return si
            raise CorruptInputError(si - j)  # padding is required: a short group is corrupt
        byte = src[si]
        si += 1
        value = _DECODE.get(byte)
        if value is not None:
            values[j] = value
            j += 1
            continue
        if byte in _NEWLINES:
            continue
        if byte != _PAD:
            raise CorruptInputError(si - 1)
        if j in (0, 1):  # padding too early
            raise CorruptInputError(si - 1)
        if j == 2:  # "==" expected: the second "=" must follow (after newlines)
            si = _skip_newlines(src, si)
            if si == len(src):
                raise CorruptInputError(len(src))
            if src[si] != _PAD:
                raise CorruptInputError(si - 1)
            si += 1
        si = _skip_newlines(src, si)
        if si < len(src):
            trailing_error = CorruptInputError(si)  # garbage after the padding
        length = j
        break
    number = values[0] << 18 | values[1] << 12 | values[2] << 6 | values[3]
    out.extend(number.to_bytes(3, "big")[: length - 1])
    if trailing_error is not None:
        raise trailing_error
    return si
