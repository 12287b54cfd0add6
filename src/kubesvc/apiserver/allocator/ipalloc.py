"""ClusterIP allocation for one IP family across its Service CIDRs (upstream's MetaAllocator,
pkg/registry/core/service/ipallocator/cidrallocator.go, over bitmap ranges).

The store is the truth: an IP is allocated when its IPAddress object exists. This allocator
is the apiserver's in-memory index of those objects, so that choosing a free IP is a bitmap
scan instead of a store query. It is kept exact by the apiserver's own writes (every
IPAddress create/delete goes through the registry, which tells it on commit) and rebuilt by
the repair loop; a stale entry can never double-allocate, because creating the IPAddress in
the Service's transaction fails when the key exists.

Ranges are tried in order (the default ``kubernetes`` ServiceCIDR first, then the others by
creation), each upper band before its lower band: a ServiceCIDR added at run time only
serves new Services once the default one is full. A user-chosen IP is accepted if any
usable range contains it.
"""

from __future__ import annotations

import ipaddress
import random
from dataclasses import dataclass, field

from kubesvc.apiserver.allocator.bitmap import BandedBitmap
from kubesvc.apiserver.allocator.ranges import IPRange, prefix_contains_ip
from kubesvc.util.ipnet import CANONICAL_IPV4


class AllocationError(Exception):
    """An allocator error; ``str()`` is upstream's message."""


class RangeFull(AllocationError):
    def __init__(self) -> None:
        super().__init__("range is full")


class AlreadyAllocated(AllocationError):
    def __init__(self, what: str = "IP") -> None:
        super().__init__(f"provided {what} is already allocated")


class NotInRange(AllocationError):
    def __init__(self, ip: str) -> None:
        super().__init__(f"provided IP {ip} is not in the valid range")


class MismatchedNetwork(AllocationError):
    """MetaAllocator.getAllocator: no (ready) ServiceCIDR contains the IP."""

    def __init__(self) -> None:
        super().__init__("the provided network does not match the current range")


def _address(ip: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if CANONICAL_IPV4.match(ip):  # what the allocator hands out: from its number, not parsed again (~10 us)
        a, b, c, d = ip.split(".")
        return ipaddress.IPv4Address(int(a) << 24 | int(b) << 16 | int(c) << 8 | int(d))
    try:
        return ipaddress.ip_address(ip)
    except ValueError:
        return None


@dataclass
class CIDRBitmap:
    name: str  # the ServiceCIDR's name
    range: IPRange
    bitmap: BandedBitmap = field(init=False)

    def __post_init__(self) -> None:
        self.bitmap = BandedBitmap(self.range.slots, min(self.range.offset, self.range.slots))


class IPFamilyAllocator:
    def __init__(self, family: str, rng: random.Random | None = None):
        self.family = family
        self.rng = rng or random.Random()
        self.ranges: list[CIDRBitmap] = []
        self.taken: set[str] = set()

    # ---- index maintenance -------------------------------------------------------------------
    def set_ranges(self, ranges: list[tuple[str, IPRange]]) -> None:
        """Replace the usable ranges (ServiceCIDR name, range), in allocation order."""
        current = [(r.name, r.range) for r in self.ranges]
        if current == ranges:
            return
        self.ranges = [CIDRBitmap(name, rng) for name, rng in ranges]
        for ip in self.taken:
            self._set(ip, True)

    def reset(self, ips: set[str]) -> None:
        self.taken = set()
        for r in self.ranges:
            r.bitmap = BandedBitmap(r.range.slots, r.bitmap.offset)
        for ip in ips:
            self.mark(ip)

    def mark(self, ip: str) -> None:
        if ip not in self.taken:
            self.taken.add(ip)
            self._set(ip, True)

    def unmark(self, ip: str) -> None:
        if ip in self.taken:
            self.taken.discard(ip)
            self._set(ip, False)

    def _set(self, ip: str, on: bool) -> None:
        address = _address(ip)
        if address is None:
            return
        for r in self.ranges:
            slot = r.range.slot_of_int(int(address))
            if slot is not None:
                if on:
                    r.bitmap.allocate(slot)
                else:
                    r.bitmap.release(slot)

    # ---- decisions ---------------------------------------------------------------------------
    def range_for(self, ip: str) -> CIDRBitmap | None:
        for r in self.ranges:
            if r.range.slot_of(ip) is not None:
                return r
        return None

    def check(self, ip: str) -> CIDRBitmap:
        """The range a user-chosen IP would be taken from, or the allocator error."""
        r = self.range_for(ip)
        if r is None:
            # upstream's MetaAllocator answers ErrMismatchedNetwork when no ServiceCIDR prefix
            # contains the IP (servicecidr.PrefixContainsIP: not the network address, not the
            # IPv4 broadcast); ErrNotInRange remains for an IPv6 address inside a prefix but
            # past the 65535 slots the bitmap index covers
            address = _address(ip)
            if address is not None and any(prefix_contains_ip(c.range.network, address) for c in self.ranges):
                raise NotInRange(ip)
            raise MismatchedNetwork()
        if ip in self.taken:
            raise AlreadyAllocated()
        return r

    def allocate(self, ip: str) -> CIDRBitmap:
        r = self.check(ip)
        self.mark(ip)
        return r

    def next_free(self) -> tuple[str, CIDRBitmap]:
        for r in self.ranges:
            slot = r.bitmap.next_free(self.rng)
            if slot is not None:
                return r.range.ip_at(slot), r
        raise RangeFull()

    def allocate_next(self) -> tuple[str, CIDRBitmap]:
        ip, r = self.next_free()
        self.mark(ip)
        return ip, r
