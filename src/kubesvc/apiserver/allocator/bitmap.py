"""A bitmap of slots with a reserved lower band: upstream's ``allocationBitmap`` with
``randomScanStrategyWithOffset`` (pkg/registry/core/service/allocator/bitmap.go).

Slots ``[0, offset)`` are the *static* band, ``[offset, size)`` the *dynamic* band (KEP-3070
for Service IPs, KEP-3668 for NodePorts). ``allocate_next`` picks a random start in the
dynamic band and scans upward for a free slot, wrapping within the band; only when the
dynamic band is full does it do the same in the static band. A user-chosen slot
(``allocate``) is accepted in either band, so the static band stays nearly free for the
Services that need a well-known address (kube-dns at 10.96.0.10).

One byte per slot, so a scan is ``bytearray.find`` (memchr speed): a /12 range is 1 MiB.
"""

from __future__ import annotations

import random

_FREE = b"\x00"


class BandedBitmap:
    __slots__ = ("size", "offset", "_bits", "_used")

    def __init__(self, size: int, offset: int):
        if not 0 <= offset <= size:
            raise ValueError(f"offset {offset} out of range [0,{size}]")
        self.size = size
        self.offset = offset
        self._bits = bytearray(size)
        self._used = 0

    @property
    def used(self) -> int:
        return self._used

    @property
    def free(self) -> int:
        return self.size - self._used

    def has(self, slot: int) -> bool:
        return 0 <= slot < self.size and self._bits[slot] == 1

    def allocate(self, slot: int) -> bool:
        """Mark ``slot``; False if it was already taken."""
        if not 0 <= slot < self.size:
            raise IndexError(f"offset {slot} out of range [0,{self.size}]")
        if self._bits[slot]:
            return False
        self._bits[slot] = 1
        self._used += 1
        return True

    def release(self, slot: int) -> None:
        if 0 <= slot < self.size and self._bits[slot]:
            self._bits[slot] = 0
            self._used -= 1

    def next_free(self, rng: random.Random) -> int | None:
        """The slot ``allocate_next`` would take, without taking it (dry run)."""
        slot = self._scan(self.offset, self.size, rng)
        if slot is None:
            slot = self._scan(0, self.offset, rng)
        return slot

    def allocate_next(self, rng: random.Random) -> int | None:
        slot = self.next_free(rng)
        if slot is not None:
            self._bits[slot] = 1
            self._used += 1
        return slot

    def _scan(self, low: int, high: int, rng: random.Random) -> int | None:
        if high <= low:
            return None
        start = rng.randrange(low, high)
        found = self._bits.find(_FREE, start, high)
        if found < 0:
            found = self._bits.find(_FREE, low, start)
        return found if found >= 0 else None

    def slots(self) -> list[int]:
        """Every taken slot, ascending."""
        bits, out, i = self._bits, [], -1
        while True:
            i = bits.find(b"\x01", i + 1)
            if i < 0:
                return out
            out.append(i)
