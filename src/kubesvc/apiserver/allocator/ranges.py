"""Service IP ranges and NodePort ranges: which values are usable, and where the static band
ends. Pure arithmetic, as upstream's ipallocator/bitmap.go and portallocator/allocator.go.

IP ranges (``--service-cluster-ip-range``, ServiceCIDR ``spec.cidrs``), bitmap arithmetic:

* slot ``i`` is the address ``network + 1 + i``: the network address is never usable;
* IPv4 loses the broadcast address as well; IPv6 keeps its all-ones address but is capped at
  65535 slots (``2001:db8::/112`` is ``::1``-``::ffff``; a /64 uses its first 65535
  addresses). We cap IPv4 the same way at 2^24 slots so a user ServiceCIDR wider than /8
  does not cost more than 16 MiB of bitmap;
* the static band is ``min(max(16, size/16), 256)`` slots, 0 for ranges of 16 addresses or
  fewer (``size`` counts network and broadcast): 10.96.0.0/24 -> 10.96.0.1-10.96.0.16,
  /20 and larger -> 256 slots (10.96.0.1-10.96.1.0).

NodePort ranges (``--service-node-port-range``, default 30000-32767): the static band is
``min(max(16, size/32), 128)`` ports (86 for the default range: 30000-30085).

Flag checks match kube-apiserver: at least 8 addresses, and at most 20 host bits while the
bitmap allocator is in use (IPv4 /12, IPv6 /108).

IP strings are read as netutils.ParseIPSloppy does (:func:`ip_info`, :func:`canonical_ip`).
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from dataclasses import dataclass
from typing import Any

from kubesvc.util.ipnet import parse_ip_sloppy
from kubesvc.util import ipnet

IPV6_MAX_SLOTS = 65535
IPV4_MAX_SLOTS = (1 << 24) - 1
MIN_RANGE_ADDRESSES = 8
MAX_CIDR_BITS = 20
DEFAULT_NODE_PORT_RANGE = "30000-32767"


def ip_info(raw: Any) -> tuple[str, int, int] | None:
    """(canonical form, version, integer value) of an IP string (netutils.ParseIPSloppy), or
    None. Canonical dotted quads, nearly every IP there is, skip the ipaddress module."""
    if not isinstance(raw, str):
        return None
    if ipnet.CANONICAL_IPV4.match(raw):
        return raw, 4, int.from_bytes(socket.inet_aton(raw), "big")
    parsed = parse_ip_sloppy(raw)
    if parsed is None:
        return None
    return str(parsed), parsed.version, int(parsed)


def canonical_ip(raw: Any) -> str | None:
    """The canonical form of an IP string (what names its IPAddress), or None."""
    info = ip_info(raw)
    return info[0] if info is not None else None


def ip_range_offset(range_size: int, static_subrange: bool = True) -> int:
    """calculateRangeOffset; ``range_size`` includes the network (and broadcast) address."""
    if not static_subrange or range_size <= 16:
        return 0
    return min(max(16, range_size // 16), 256)


def port_range_offset(range_size: int, static_subrange: bool = True) -> int:
    if not static_subrange or range_size <= 16:
        return 0
    return min(max(16, range_size // 32), 128)


@dataclass(frozen=True)
class IPRange:
    """One CIDR's usable addresses as slots."""

    network: ipaddress.IPv4Network | ipaddress.IPv6Network
    slots: int
    offset: int

    @classmethod
    def parse(cls, cidr: str, static_subrange: bool = True) -> "IPRange":
        network = ipaddress.ip_network(cidr.strip(), strict=False)
        size = network.num_addresses
        if network.version == 6:
            slots = min(size, IPV6_MAX_SLOTS + 1) - 1
        else:
            slots = min(size - 2, IPV4_MAX_SLOTS)
        return cls(network, max(0, slots), ip_range_offset(size, static_subrange))

    @functools.cached_property
    def cidr(self) -> str:
        return str(self.network)  # a metric label of every allocation: formatted once

    @property
    def family(self) -> str:
        return "IPv6" if self.network.version == 6 else "IPv4"

    def slot_of(self, ip: str) -> int | None:
        """The slot of ``ip`` or None when it is not usable in this range."""
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            return None
        if address.version != self.network.version:
            return None
        return self.slot_of_int(int(address))

    def slot_of_int(self, address: int) -> int | None:
        """``slot_of`` for an address of this range's family given as an integer."""
        slot = address - int(self.network.network_address) - 1
        return slot if 0 <= slot < self.slots else None

    def ip_at(self, slot: int) -> str:
        return str(self.network.network_address + 1 + slot)

    def first_ip(self) -> str:
        """network+1: the ``kubernetes`` Service's address (GetIndexedIP(range, 1))."""
        return self.ip_at(0)


def prefix_contains_ip(network: ipaddress.IPv4Network | ipaddress.IPv6Network, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Upstream's servicecidr.PrefixContainsIP: in the prefix, not its network address and,
    for IPv4, not its broadcast address (a ServiceCIDR never allocates those). Unlike
    ``IPRange.slot_of`` it ignores our bitmap's size cap."""
    if address.version != network.version or address not in network or address == network.network_address:
        return False
    return address.version == 6 or address != network.broadcast_address


def check_service_cidr_flag(cidr: str, flag: str = "--service-cluster-ip-range") -> str | None:
    """kube-apiserver's checks on one ``--service-cluster-ip-range`` value; the message or None.
    ``flag`` names the value in the "too large" message as upstream's validateMaxCIDRRange does
    (``--service-cluster-ip-range`` for the primary, ``--service-cluster-ip-range[1]`` for the
    secondary)."""
    try:
        network = ipaddress.ip_network(cidr.strip(), strict=False)
    except ValueError:
        return f"service-cluster-ip-range[0] is not a valid cidr: {cidr!r}"
    if network.num_addresses < MIN_RANGE_ADDRESSES:
        return f"the service cluster IP range must be at least {MIN_RANGE_ADDRESSES} IP addresses"
    host_bits = network.max_prefixlen - network.prefixlen
    if host_bits > MAX_CIDR_BITS:
        bits = network.max_prefixlen
        return f"specified {flag} is too large; for {bits}-bit addresses, the mask must be >= {bits - MAX_CIDR_BITS}"
    return None


@dataclass(frozen=True)
class PortRange:
    base: int
    size: int

    @classmethod
    def parse(cls, text: str) -> "PortRange":
        """``30000-32767``, ``30000+2767`` or a single port (utilnet.ParsePortRange, with its
        errors; ``""`` is the empty range)."""
        return cls(*ipnet.parse_port_range(text))

    def __str__(self) -> str:
        return f"{self.base}-{self.base + self.size - 1}"

    def slot_of(self, port: int) -> int | None:
        slot = port - self.base
        return slot if 0 <= slot < self.size else None

    def offset(self, static_subrange: bool = True) -> int:
        return port_range_offset(self.size, static_subrange)
