"""NodePort allocation (upstream's portallocator, pkg/registry/core/service/portallocator).

Like the IP allocator, an in-memory index over what the store holds: a NodePort is
allocated when its record ``/registry/servicenodeports/<port>`` exists, written in the same
transaction as the Service. Ports, not (port, protocol) pairs, are allocated: one Service's
TCP and UDP port 53 share one nodePort, and no other Service may use that number.
"""

from __future__ import annotations

import random

from kubesvc.apiserver.allocator.bitmap import BandedBitmap
from kubesvc.apiserver.allocator.ipalloc import AllocationError, AlreadyAllocated, RangeFull
from kubesvc.apiserver.allocator.ranges import PortRange


class PortNotInRange(AllocationError):
    def __init__(self, port_range: PortRange) -> None:
        super().__init__(f"provided port is not in the valid range. The range of valid ports is {port_range}")


class PortAllocator:
    def __init__(self, port_range: PortRange, static_subrange: bool = True, rng: random.Random | None = None):
        self.range = port_range
        self.rng = rng or random.Random()
        self.bitmap = BandedBitmap(port_range.size, port_range.offset(static_subrange))

    def has(self, port: int) -> bool:
        slot = self.range.slot_of(port)
        return slot is not None and self.bitmap.has(slot)

    def reset(self, ports: set[int]) -> None:
        self.bitmap = BandedBitmap(self.bitmap.size, self.bitmap.offset)
        for port in ports:
            self.mark(port)

    def mark(self, port: int) -> None:
        slot = self.range.slot_of(port)
        if slot is not None:
            self.bitmap.allocate(slot)

    def unmark(self, port: int) -> None:
        slot = self.range.slot_of(port)
        if slot is not None:
            self.bitmap.release(slot)

    def check(self, port: int) -> None:
        slot = self.range.slot_of(port)
        if slot is None:
            raise PortNotInRange(self.range)
        if self.bitmap.has(slot):
            raise AlreadyAllocated("port")

    def allocate(self, port: int) -> None:
        self.check(port)
        self.mark(port)

    def next_free(self) -> int:
        slot = self.bitmap.next_free(self.rng)
        if slot is None:
            raise RangeFull()
        return self.range.base + slot

    def allocate_next(self) -> int:
        port = self.next_free()
        self.mark(port)
        return port

    def ports(self) -> list[int]:
        return [self.range.base + slot for slot in self.bitmap.slots()]
