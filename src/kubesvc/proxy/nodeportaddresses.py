"""Which node addresses accept NodePorts, and which IPs are "the node's" (upstream
``pkg/proxy/util/nodeport_addresses.go``, ``cmd/kube-proxy/app/server.go`` ``detectNodeIPs`` and
``component-helpers`` ``GetNodeHostIPs``).

``--nodeport-addresses`` (config ``nodePortAddresses``) is a list of CIDRs of either family, or
the single word ``primary``:

* Each family's proxier keeps only the CIDRs of its family. None left means "every local
  address" (``0.0.0.0/0`` or ``::/0``: ``match_all``), even when the other family has CIDRs.
* A zero-length CIDR anywhere in the list wins: everything else is ignored.
* ``primary`` means the node's primary IP of each family as ``/32`` / ``/128`` (loopback
  stand-ins excluded, so an unknown node IP falls back to match-all). nftables mode defaults an
  unset list to ``primary``; iptables mode leaves it unset (match-all).
* ``contains_ipv4_loopback``: iptables accepts NodePorts on 127.0.0.1 only if the CIDRs include
  an IPv4 loopback address (and ``--iptables-localhost-nodeports``); IPv6 never.

The node's IPs: ``status.addresses`` InternalIPs first, then ExternalIPs; the first is the
primary, the first of the other family (if any) the secondary. ``--bind-address``, when it is not
``0.0.0.0``/``::``, overrides the IP of its family and makes that family primary; a family with
no IP gets its loopback address.

Parsing follows Go's "sloppy" parsers (``netutils.ParseIPSloppy``): IPv4 octets may carry leading
zeros (``010.0.0.1`` is 10.0.0.1), zones are not IPs, and an IPv4-mapped IPv6 address is IPv4.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping

from kubesvc.util.ipnet import parse_cidr_go, parse_ip_sloppy
from kubesvc.proxy.types import IPV4, IPV6

IPV4_ZERO_CIDR, IPV6_ZERO_CIDR = "0.0.0.0/0", "::/0"
NODE_PORT_ADDRESSES_PRIMARY = "primary"
# RFC 5735: 127.0.0.0/8 is the IPv4 host loopback block
IPV4_LOOPBACK_START = ipaddress.IPv4Address("127.0.0.0")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def primary_cidrs(primary_ips: Iterable[str]) -> list[str]:
    """``primary`` expanded (upstream ``newProxyServer``): each non-loopback node IP as a host CIDR."""
    cidrs = []
    for text in primary_ips:
        address = parse_ip_sloppy(text)
        if address is not None and not address.is_loopback and not address.is_unspecified:
            cidrs.append(f"{address}/{address.max_prefixlen}")
    return cidrs


class NodePortAddresses:
    """One family's view of ``--nodeport-addresses`` (upstream ``NewNodePortAddresses``)."""

    def __init__(self, cidrs: Iterable[str] | None, family: int, primary_ips: Iterable[str] = ()):
        strings = list(cidrs or ())
        if strings == [NODE_PORT_ADDRESSES_PRIMARY]:
            strings = primary_cidrs(primary_ips)
        self.family = family
        # IsIPv4CIDRString: a mapped IPv4 CIDR (::ffff:10.0.0.0/104) is IPv4 (10.0.0.0/8)
        mine = [text for text in strings if (net := parse_cidr_go(text)) is not None and net.version == family]
        if not mine:
            mine = [IPV4_ZERO_CIDR if family == IPV4 else IPV6_ZERO_CIDR]
        self.cidr_strings: tuple[str, ...] = tuple(mine)
        self.cidrs: tuple[IPNetwork, ...] = ()
        self.match_all = False
        self.contains_ipv4_loopback = False
        for text in mine:
            network = parse_cidr_go(text)
            assert network is not None
            if network.version == IPV4 and (network.network_address.is_loopback or IPV4_LOOPBACK_START in network):
                self.contains_ipv4_loopback = True
            if network.prefixlen == 0:  # a zero CIDR matches everything: ignore the rest
                self.cidrs = (network,)
                self.match_all = True
                break
            self.cidrs += (network,)

    def matches(self, ip: str) -> bool:
        address = parse_ip_sloppy(ip.partition("/")[0])
        return address is not None and any(address in network for network in self.cidrs if network.version == address.version)

    def node_ips(self, interface_addresses: Iterable[str]) -> list[str]:
        """The local addresses inside these CIDRs (upstream ``GetNodeIPs``), each once, in the
        order of the CIDRs then of the interfaces; entries may carry a ``/prefix`` (ignored)."""
        addresses = [address for address in (parse_ip_sloppy(text.partition("/")[0]) for text in interface_addresses) if address]
        found: list[str] = []
        for network in self.cidrs:
            for address in addresses:
                if address.version == network.version and address in network and str(address) not in found:
                    found.append(str(address))
        return found

    def __str__(self) -> str:
        """Go's ``%v`` of the family's CIDR strings: ``[10.0.0.0/8 192.168.0.0/16]``."""
        return "[" + " ".join(self.cidr_strings) + "]"

    def __repr__(self) -> str:
        return f"NodePortAddresses(family={self.family}, cidrs={list(self.cidr_strings)})"


def node_ips_from_node(node: Mapping | None) -> list[str]:
    """``GetNodeHostIPs``: the primary address (InternalIPs before ExternalIPs) and, if there is
    one, the first address of the other family; [] when the Node has none."""
    addresses = (((node or {}).get("status") or {}).get("addresses")) or []
    candidates: list[IPAddress] = []
    for address_type in ("InternalIP", "ExternalIP"):
        for entry in addresses:
            if entry.get("type") == address_type:
                parsed = parse_ip_sloppy(entry.get("address") or "")
                if parsed is not None:
                    candidates.append(parsed)
    if not candidates:
        return []
    chosen = [candidates[0]]
    other = next((address for address in candidates if address.version != candidates[0].version), None)
    if other is not None:
        chosen.append(other)
    return [str(address) for address in chosen]


def detect_node_ips(raw_node_ips: Iterable[str], bind_address: str) -> tuple[int, dict[int, str]]:
    """Upstream ``detectNodeIPs``: (primary family, {family: node IP}). Precedence: a specific
    ``bind_address``, then the Node's IPs, then loopback (127.0.0.1 / ::1)."""
    primary = IPV4
    node_ips = {IPV4: "127.0.0.1", IPV6: "::1"}
    raw = [address for address in (parse_ip_sloppy(text) for text in raw_node_ips) if address is not None]
    if raw:
        primary = raw[0].version
        node_ips[primary] = str(raw[0])
        if len(raw) > 1:
            node_ips[raw[1].version] = str(raw[1])
    bind_ip = parse_ip_sloppy(bind_address or "")
    if bind_ip is not None and not bind_ip.is_unspecified:
        primary = bind_ip.version
        node_ips[primary] = str(bind_ip)
    return primary, node_ips
