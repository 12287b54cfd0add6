"""The banded bitmap (upstream allocationBitmap + randomScanStrategyWithOffset) and the IP /
NodePort allocators over it.

Expected values come from the reference (/work/shared/reference/control-plane.md §1.2, §1.3,
§2): upstream's ``TestAllocateReserved`` (ipallocator /25 and portallocator 30000-30128),
``TestAllocateTiny``, ``TestAllocateSmall``, and the AllocateNext algorithm: a random start in
the upper band scanning upward with wrap-around inside that band, the lower band only once the
upper one is full, explicit allocation anywhere.
"""

from __future__ import annotations

import ipaddress
import random

import pytest

from kubesvc.apiserver.allocator.bitmap import BandedBitmap
from kubesvc.apiserver.allocator.ipalloc import AlreadyAllocated, IPFamilyAllocator, MismatchedNetwork, NotInRange, RangeFull
from kubesvc.apiserver.allocator.portalloc import PortAllocator, PortNotInRange
from kubesvc.apiserver.allocator.ranges import IPRange, PortRange


class FixedStart:
    """A stand-in for random.Random whose ``randrange(low, high)`` returns a chosen point of
    the band (``"low"``, ``"high"`` = high-1, or an int clamped into the band)."""

    def __init__(self, where):
        self.where = where
        self.calls: list[tuple[int, int]] = []

    def randrange(self, low, high):
        self.calls.append((low, high))
        if self.where == "low":
            return low
        if self.where == "high":
            return high - 1
        return min(max(self.where, low), high - 1)


def ip_allocator(cidr: str, rng=None, static_subrange: bool = True) -> IPFamilyAllocator:
    ip_range = IPRange.parse(cidr, static_subrange)
    allocator = IPFamilyAllocator(ip_range.family, rng or random.Random(0))
    allocator.set_ranges([("kubernetes", ip_range)])
    return allocator


def ips(first: str, last: str) -> set[str]:
    a, b = int(ipaddress.ip_address(first)), int(ipaddress.ip_address(last))
    return {str(ipaddress.ip_address(i)) for i in range(a, b + 1)}


# ---- BandedBitmap --------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 42], ids=lambda s: f"seed{s}")
def test_bitmap_allocate_reserved_fills_upper_band_first(seed):
    # /25: 126 slots, offset 16 -> 110 AllocateNext calls take exactly slots 16..125
    bitmap = BandedBitmap(126, 16)
    rng = random.Random(seed)
    taken = [bitmap.allocate_next(rng) for _ in range(110)]
    assert sorted(taken) == list(range(16, 126))
    assert bitmap.free == 16
    # the lower band is still allocatable explicitly
    for slot in range(16):
        assert bitmap.allocate(slot) is True
    assert bitmap.free == 0
    assert bitmap.allocate_next(rng) is None


@pytest.mark.parametrize("seed", [0, 7, 99], ids=lambda s: f"seed{s}")
def test_bitmap_lower_band_only_after_upper_band_is_full(seed):
    bitmap = BandedBitmap(126, 16)
    rng = random.Random(seed)
    upper = [bitmap.allocate_next(rng) for _ in range(110)]
    lower = [bitmap.allocate_next(rng) for _ in range(16)]
    assert set(upper) == set(range(16, 126))
    assert sorted(lower) == list(range(16))
    assert bitmap.allocate_next(rng) is None
    assert bitmap.next_free(rng) is None


WRAP_CASES = [
    # (id, size, offset, pre-taken slots, start point, expected slot)
    ("start is free", 10, 0, [], 4, 4),
    ("scan upward from start", 10, 0, [4, 5], 4, 6),
    ("wrap to band start", 10, 0, [7, 8, 9], 7, 0),
    ("wrap inside upper band, not into lower", 20, 4, [17, 18, 19], 17, 4),
    ("wrap skips taken band start", 20, 4, [4, 5, 17, 18, 19], 18, 6),
    ("upper full -> lower band from its start point", 20, 4, list(range(4, 20)), 2, 2),
    ("upper full -> lower band wraps", 20, 4, list(range(4, 20)) + [2, 3], 2, 0),
]


@pytest.mark.parametrize(("size", "offset", "taken", "start", "expected"), [row[1:] for row in WRAP_CASES], ids=[row[0] for row in WRAP_CASES])
def test_bitmap_random_start_and_wrap_around(size, offset, taken, start, expected):
    bitmap = BandedBitmap(size, offset)
    for slot in taken:
        assert bitmap.allocate(slot)
    assert bitmap.allocate_next(FixedStart(start)) == expected
    assert bitmap.has(expected)


def test_bitmap_start_is_drawn_inside_the_band():
    bitmap = BandedBitmap(20, 4)
    rng = FixedStart("low")
    bitmap.allocate_next(rng)
    assert rng.calls == [(4, 20)]  # upper band only while it has room
    for slot in range(4, 20):
        bitmap.allocate(slot)
    rng.calls.clear()
    bitmap.allocate_next(rng)
    assert rng.calls == [(4, 20), (0, 4)]


def test_bitmap_random_start_is_random():
    # seeded: over 50 seeds the first dynamic slot is not always the same one
    firsts = {BandedBitmap(254, 16).allocate_next(random.Random(seed)) for seed in range(50)}
    assert len(firsts) > 10
    assert all(16 <= slot < 254 for slot in firsts)


@pytest.mark.parametrize(("size", "offset"), [(0, 0), (1, 0), (14, 0), (126, 16), (2768, 86)], ids=["empty", "one", "/28", "/25", "ports"])
def test_bitmap_full_returns_none(size, offset):
    bitmap = BandedBitmap(size, offset)
    rng = random.Random(5)
    got = [bitmap.allocate_next(rng) for _ in range(size)]
    assert sorted(got) == list(range(size))
    assert bitmap.used == size and bitmap.free == 0
    assert bitmap.allocate_next(rng) is None


def test_bitmap_release_makes_a_slot_reusable():
    bitmap = BandedBitmap(126, 16)
    rng = random.Random(3)
    for _ in range(126):
        bitmap.allocate_next(rng)
    bitmap.release(9)  # 192.168.1.10 in upstream's TestAllocateReserved
    assert bitmap.free == 1 and not bitmap.has(9)
    assert bitmap.allocate_next(rng) == 9
    assert bitmap.free == 0
    bitmap.release(9)
    bitmap.release(9)  # releasing a free slot is a no-op
    assert bitmap.free == 1


def test_bitmap_explicit_allocation():
    bitmap = BandedBitmap(10, 2)
    assert bitmap.allocate(0) is True
    assert bitmap.allocate(0) is False  # already taken
    assert bitmap.allocate(9) is True
    assert bitmap.slots() == [0, 9]
    assert bitmap.used == 2
    with pytest.raises(IndexError, match=r"offset 10 out of range \[0,10\]"):
        bitmap.allocate(10)
    with pytest.raises(IndexError):
        bitmap.allocate(-1)


def test_bitmap_next_free_does_not_take():
    bitmap = BandedBitmap(5, 0)
    slot = bitmap.next_free(FixedStart("low"))
    assert slot == 0 and not bitmap.has(0) and bitmap.used == 0


def test_bitmap_offset_beyond_size_is_rejected():
    with pytest.raises(ValueError, match=r"offset 5 out of range \[0,4\]"):
        BandedBitmap(4, 5)


# ---- IP allocator (one family, one range) --------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2], ids=lambda s: f"seed{s}")
def test_ip_allocate_reserved(seed):
    """Upstream TestAllocateReserved: /25, dynamic block = 126-16 = 110 addresses."""
    allocator = ip_allocator("192.168.1.0/25", random.Random(seed))
    dynamic = {allocator.allocate_next()[0] for _ in range(110)}
    assert dynamic == ips("192.168.1.17", "192.168.1.126")
    # every static address is allocatable explicitly
    for i in range(1, 17):
        allocator.allocate(f"192.168.1.{i}")
    with pytest.raises(RangeFull, match="^range is full$"):
        allocator.allocate_next()
    # release one and the next dynamic allocation finds it
    allocator.unmark("192.168.1.10")
    assert allocator.allocate_next()[0] == "192.168.1.10"


def test_ip_allocate_next_takes_the_lower_band_when_upper_is_full():
    allocator = ip_allocator("192.168.1.0/25", random.Random(11))
    for _ in range(110):
        allocator.allocate_next()
    lower = {allocator.allocate_next()[0] for _ in range(16)}
    assert lower == ips("192.168.1.1", "192.168.1.16")


@pytest.mark.parametrize(("cidr", "expected"), [
    ("192.168.1.0/32", set()),                                 # TestAllocateTiny
    ("192.168.1.240/30", {"192.168.1.241", "192.168.1.242"}),   # TestAllocateSmall
    ("192.168.1.0/28", ips("192.168.1.1", "192.168.1.14")),     # offset 0: everything dynamic
    ("fd00::/127", {"fd00::1"}),
    ("fd00::/126", {"fd00::1", "fd00::2", "fd00::3"}),
], ids=["v4-32", "v4-30", "v4-28", "v6-127", "v6-126"])
def test_ip_tiny_ranges(cidr, expected):
    allocator = ip_allocator(cidr)
    got = {allocator.allocate_next()[0] for _ in range(len(expected))}
    assert got == expected
    with pytest.raises(RangeFull):
        allocator.allocate_next()


MISMATCH = "the provided network does not match the current range"
EXPLICIT_ERRORS = [
    # (id, cidr, pre-taken, ip, error type, message) -- §1.4/§1.5: MetaAllocator.getAllocator
    # gives ErrMismatchedNetwork when no prefix contains the IP (PrefixContainsIP excludes the
    # network address and the IPv4 broadcast)
    ("taken", "10.96.0.0/24", ["10.96.0.10"], "10.96.0.10", AlreadyAllocated, "provided IP is already allocated"),
    ("network address", "10.96.0.0/24", [], "10.96.0.0", MismatchedNetwork, MISMATCH),
    ("broadcast", "10.96.0.0/24", [], "10.96.0.255", MismatchedNetwork, MISMATCH),
    ("outside", "10.96.0.0/24", [], "10.97.0.1", MismatchedNetwork, MISMATCH),
    ("v6 outside", "fd00:10:96::/112", [], "fd00:10:97::1", MismatchedNetwork, MISMATCH),
    ("v6 network address", "fd00:10:96::/112", [], "fd00:10:96::", MismatchedNetwork, MISMATCH),
    # inside the /64 prefix but past the 65535 slots of the bitmap index (our documented cap)
    ("v6 past the bitmap cap", "fd00:10:96::/64", [], "fd00:10:96::1:0", NotInRange, "provided IP fd00:10:96::1:0 is not in the valid range"),
]


@pytest.mark.parametrize(("cidr", "taken", "ip", "error", "message"), [row[1:] for row in EXPLICIT_ERRORS], ids=[row[0] for row in EXPLICIT_ERRORS])
def test_ip_explicit_allocation_errors(cidr, taken, ip, error, message):
    allocator = ip_allocator(cidr)
    for t in taken:
        allocator.allocate(t)
    with pytest.raises(error) as info:
        allocator.allocate(ip)
    assert str(info.value) == message
    assert ip not in allocator.taken or ip in taken


@pytest.mark.parametrize("ip", ["10.96.0.1", "10.96.0.16", "10.96.0.17", "10.96.0.254"], ids=["first", "last-static", "first-dynamic", "last"])
def test_ip_explicit_allocation_anywhere_in_range(ip):
    allocator = ip_allocator("10.96.0.0/24")
    allocator.allocate(ip)
    assert ip in allocator.taken


def test_ip_without_static_subrange_uses_the_whole_range():
    # offset 0: a start at the very bottom of the range takes network+1
    assert ip_allocator("10.96.0.0/24", FixedStart("low"), static_subrange=False).allocate_next()[0] == "10.96.0.1"
    assert ip_allocator("10.96.0.0/24", FixedStart("low")).allocate_next()[0] == "10.96.0.17"


# ---- NodePort allocator ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2], ids=lambda s: f"seed{s}")
def test_port_allocate_reserved(seed):
    """Upstream portallocator TestAllocateReserved: 30000-30128 (size 129, offset 16)."""
    allocator = PortAllocator(PortRange.parse("30000-30128"), rng=random.Random(seed))
    dynamic = {allocator.allocate_next() for _ in range(129 - 16)}
    assert dynamic == set(range(30016, 30129))
    for port in range(30000, 30016):
        allocator.allocate(port)
    with pytest.raises(RangeFull, match="^range is full$"):
        allocator.allocate_next()
    assert allocator.ports() == list(range(30000, 30129))


def test_port_default_range_prefers_30086_and_up():
    allocator = PortAllocator(PortRange.parse("30000-32767"), rng=FixedStart("low"))
    assert allocator.allocate_next() == 30086
    allocator = PortAllocator(PortRange.parse("30000-32767"), rng=FixedStart("high"))
    assert allocator.allocate_next() == 32767


PORT_ERRORS = [
    # (id, port, message) -- TestAllocate (etcd) for 29999, 32768 and -2; ErrAllocated
    ("below", 29999, "provided port is not in the valid range. The range of valid ports is 30000-32767"),
    ("above", 32768, "provided port is not in the valid range. The range of valid ports is 30000-32767"),
    ("negative", -2, "provided port is not in the valid range. The range of valid ports is 30000-32767"),
    ("taken", 30001, "provided port is already allocated"),
]


@pytest.mark.parametrize(("port", "message"), [row[1:] for row in PORT_ERRORS], ids=[row[0] for row in PORT_ERRORS])
def test_port_explicit_errors(port, message):
    allocator = PortAllocator(PortRange.parse("30000-32767"))
    allocator.allocate(30001)
    with pytest.raises((PortNotInRange, AlreadyAllocated)) as info:
        allocator.allocate(port)
    assert str(info.value) == message


def test_port_release():
    allocator = PortAllocator(PortRange.parse("30000-30015"), rng=random.Random(1))  # size 16: offset 0
    got = {allocator.allocate_next() for _ in range(16)}
    assert got == set(range(30000, 30016))
    allocator.unmark(30007)
    assert not allocator.has(30007)
    assert allocator.allocate_next() == 30007
