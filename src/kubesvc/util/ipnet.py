"""IP addresses, CIDRs, host:port and port ranges as Kubernetes reads them: one home for what
upstream spreads over Go's ``net`` package, ``k8s.io/utils/net`` (netutils) and
``k8s.io/apimachinery/pkg/util/net`` (utilnet).

- :func:`parse_ip_sloppy` / :func:`parse_cidr_sloppy` are ``netutils.ParseIPSloppy`` and
  ``ParseCIDRSloppy``: Go's ``net.ParseIP`` of Go 1.16, which still took leading zeros in IPv4
  octets as *decimal* (``010.0.0.1`` is 10.0.0.1). Kubernetes keeps that for objects stored
  before Go 1.17 refused them. No zone (``%eth0``) is an IP. An IPv4-mapped IPv6 address
  (``::ffff:1.2.3.4``) is IPv4, as Go's ``To4()`` sees it; in a CIDR it keeps its 128-bit mask.
  :func:`canonical_address` is the parsed address's ``String()`` (cached; :data:`CANONICAL_IPV4`
  matches the dotted quads that are canonical already, the common case, without parsing), and
  :func:`to_cidr` is ``utilproxy.ToCIDR`` (a host as ``/32`` or ``/128``). :func:`parse_cidr_go`
  is the parsed CIDR as Go's ``IPNet`` then acts (a mapped ``::ffff:10.0.0.0/104`` is
  ``10.0.0.0/8``, of family IPv4): what the proxy sorts by family and writes into rules.
- Families, defined here once. :data:`IPV4` / :data:`IPV6` are the numbers ``4`` / ``6``
  (Python's ``ip.version``), as ``kernel/`` and ``proxy/`` pass a family around (one proxier
  per family). :data:`IPV4_PROTOCOL` / :data:`IPV6_PROTOCOL` are the API's names, ``"IPv4"`` /
  ``"IPv6"`` (``v1.IPv4Protocol``, which ``discovery.AddressTypeIPv4`` equals), as
  ``Service.spec.ipFamilies`` and ``EndpointSlice.addressType`` carry them;
  :data:`FAMILY_NAMES` maps the one to the other. :func:`ip_family` and :func:`cidr_family` are
  ``netutils.IPFamilyOfString`` / ``IPFamilyOfCIDRString``: a name, or "" for neither;
  :func:`ip_version` the number (or None), ``ip_version(x) == IPV6`` being ``IsIPv6String``.
- :func:`join_host_port` / :func:`split_host_port` are ``net.JoinHostPort`` /
  ``net.SplitHostPort``: brackets around a host with a colon; Go's reasons (``missing port in
  address``, ``too many colons in address`` ...).
- :func:`parse_port_range` is ``utilnet.ParsePortRange``: ``""`` (no range), ``N``, ``N-M``
  or ``N+K``, each number read with ``strconv.Atoi`` (whose error it passes on as it is).
- :func:`parse_cidr_pair` reads a dual-stack flag value (``10.0.0.0/16,fd00::/108``): one
  CIDR, or two of different families, as kube-apiserver's ``--service-cluster-ip-range`` and
  the node's pod CIDRs take them; :func:`parse_ip_pair` the same for IPs (``--node-ip``). (Strict by default, a kubesvc choice: host bits set are an
  error here, where ``ParseCIDRSloppy`` would clear them.)
"""

from __future__ import annotations

import functools
import ipaddress
import re

from kubesvc.util import golang

IPAddr = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNet = ipaddress.IPv4Network | ipaddress.IPv6Network

IPV4, IPV6 = 4, 6
IPV4_PROTOCOL, IPV6_PROTOCOL = "IPv4", "IPv6"
FAMILY_NAMES = {IPV4: IPV4_PROTOCOL, IPV6: IPV6_PROTOCOL}

_DECIMAL_RE = re.compile("[0-9]+")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
# Dotted-quad text that ParseIPSloppy would print unchanged (no leading zeros, octets <= 255):
# nearly every Pod and Service IP, and matching it is far cheaper than parsing it.
CANONICAL_IPV4 = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}\Z")


# ---- netutils.ParseIPSloppy / ParseCIDRSloppy ----------------------------------------------------


def _parse_ipv4_sloppy(value: str) -> ipaddress.IPv4Address | None:
    parts = value.split(".")
    if len(parts) != 4 or not all(_DECIMAL_RE.fullmatch(p) for p in parts):
        return None
    # Go's dtoi reads any number of leading zeros ("0000…0009" is 9); int() of a long digit
    # string would raise (Python's 4300-digit limit) where Go answers, so they go first
    digits = [p.lstrip("0") or "0" for p in parts]
    if max(map(len, digits)) > 3:
        return None
    a, b, c, d = octets = [int(p) for p in digits]
    if max(octets) > 255:
        return None
    # from the number: ipaddress's own parse of the text costs ~10 us, several per Service write
    return ipaddress.IPv4Address(a << 24 | b << 16 | c << 8 | d)


def parse_ip_sloppy(value: str) -> IPAddr | None:
    """ParseIPSloppy; IPv4-mapped IPv6 comes back as IPv4, as Go's To4() sees it."""
    if ":" not in value:
        return _parse_ipv4_sloppy(value)
    if "%" in value:
        return None
    head, _, tail = value.rpartition(":")
    if "." in tail:
        v4 = _parse_ipv4_sloppy(tail)
        if v4 is None:
            return None
        value = f"{head}:{v4}"
    try:
        ip = ipaddress.IPv6Address(value)
    except ValueError:
        return None
    return ip.ipv4_mapped or ip


def parse_cidr_sloppy(value: str) -> IPNet | None:
    """ParseCIDRSloppy's network (host bits cleared, as Go returns it), or None."""
    addr, sep, mask = value.partition("/")
    if not sep or not _DECIMAL_RE.fullmatch(mask):
        return None
    ip: IPAddr | None = _parse_ipv4_sloppy(addr)
    if ip is None and ":" in addr and "%" not in addr:
        mapped = parse_ip_sloppy(addr)
        # a mapped address keeps its 16-byte form (and 128-bit mask) in a CIDR
        ip = ipaddress.IPv6Address(f"::ffff:{mapped}") if isinstance(mapped, ipaddress.IPv4Address) else mapped
    if ip is None or int(mask) > ip.max_prefixlen:
        return None
    return ipaddress.ip_network(f"{ip}/{int(mask)}", strict=False)


def parse_cidr_go(value: str) -> IPNet | None:
    """ParseCIDRSloppy's network as Go then treats it: a mapped IPv4 CIDR (``::ffff:10.0.0.0/104``,
    a prefix of 96 or more) is the IPv4 network it stands for (``10.0.0.0/8``), the family
    ``IPFamilyOfCIDR`` gives it and the text ``IPNet.String()`` prints for it. What kube-proxy
    sorts by family (``MapCIDRsByIPFamily``, ``--nodeport-addresses``, the cluster CIDRs of
    the local detector) and writes into rules."""
    net = parse_cidr_sloppy(value)
    if net is not None and net.version == 6:
        mapped = net.network_address.ipv4_mapped
        if mapped is not None:
            return ipaddress.IPv4Network(f"{mapped}/{net.prefixlen - 96}")
    return net


@functools.lru_cache(maxsize=1 << 16)
def _canonical(address: str) -> str:
    ip = parse_ip_sloppy(address)
    return str(ip) if ip is not None else address


def canonical_address(address: str) -> str:
    """``ParseIPSloppy(address).String()`` (``010.001.2.3`` is ``10.1.2.3``, ``::ffff:1.2.3.4``
    is ``1.2.3.4``, IPv6 compressed), or ``address`` as it is when it is no IP. Cached: the
    controllers and the proxy re-derive every endpoint on every sync, and the same Pod IPs come
    back each time."""
    return address if CANONICAL_IPV4.match(address) else _canonical(address)


# ---- families ----------------------------------------------------------------------------------


def ip_family(value: str) -> str:
    """"IPv4", "IPv6" or "" (not an IP): netutils.IPFamilyOfString."""
    if CANONICAL_IPV4.match(value):  # most IPs asked about: no parse needed
        return "IPv4"
    ip = parse_ip_sloppy(value)
    if ip is None:
        return ""
    return FAMILY_NAMES[ip.version]


@functools.lru_cache(maxsize=1 << 12)
def _ip_version_with_colon(value: str) -> int | None:
    ip = parse_ip_sloppy(value)
    return None if ip is None else ip.version


def ip_version(value: str) -> int | None:
    """:data:`IPV4`, :data:`IPV6` or None (not an IP), as ParseIPSloppy reads ``value`` (a mapped
    ``::ffff:1.2.3.4`` is 4, a zoned ``fe80::1%eth0`` is no IP). ``ip_version(x) == IPV6`` is
    ``netutils.IsIPv6String``, the test upstream's callers make (an unparseable text counts as
    IPv4 there). Cheap on the hot path: text without a colon is never IPv6 and is parsed only as
    a dotted quad; IPv6 texts are cached."""
    if ":" in value:
        return _ip_version_with_colon(value)
    return IPV4 if CANONICAL_IPV4.match(value) or _parse_ipv4_sloppy(value) is not None else None


def cidr_family(value: str) -> str:
    """"IPv4", "IPv6" or "" (not a CIDR): netutils.IPFamilyOfCIDRString (a mapped IPv4 is IPv4)."""
    net = parse_cidr_sloppy(value)
    if net is None:
        return ""
    if net.version == 6 and net.network_address.ipv4_mapped is None:
        return IPV6_PROTOCOL
    return IPV4_PROTOCOL


def is_dual_stack(families: list[str]) -> bool:
    """netutils.IsDualStackIPs: both families present (a third entry does not matter here)."""
    return IPV4_PROTOCOL in families and IPV6_PROTOCOL in families


def to_cidr(ip: str) -> str:
    """``utilproxy.ToCIDR``: a host address as ``/32`` or ``/128``."""
    return f"{ip}/128" if ":" in ip else f"{ip}/32"


# ---- net.JoinHostPort / SplitHostPort ------------------------------------------------------------


def join_host_port(host: str, port: int | str) -> str:
    """``net.JoinHostPort``: ``[host]:port`` when the host has a colon, else ``host:port``."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def split_host_port(text: str) -> tuple[str, str]:
    """``net.SplitHostPort``; ValueError with Go's reason."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError("missing ']' in address")
        if end + 1 == len(text) or text[end + 1] != ":":
            raise ValueError("missing port in address")
        host, port = text[1:end], text[end + 2:]
        if "[" in host or "]" in port or "[" in port:
            raise ValueError("unexpected '[' or ']' in address")
        return host, port
    colon = text.rfind(":")
    if colon < 0:
        raise ValueError("missing port in address")
    host, port = text[:colon], text[colon + 1:]
    if ":" in host:
        raise ValueError("too many colons in address")
    if "[" in text or "]" in text:
        raise ValueError("unexpected '[' or ']' in address")
    return host, port


# ---- utilnet.ParsePortRange ----------------------------------------------------------------------


def parse_port_range(text: str) -> tuple[int, int]:
    """``(base, size)`` of ``N``, ``N-M`` or ``N+K`` (``(0, 0)`` for ``""``); ValueError with
    upstream's text (a number Atoi refuses: its ``strconv.Atoi: parsing ...`` error)."""
    value = text.strip()
    if not value:
        return 0, 0
    hyphen, plus = value.find("-"), value.find("+")
    if hyphen >= 0 and plus >= 0:
        raise ValueError(f"unable to parse port range: {value}")
    if hyphen >= 0:
        low, high = golang.atoi(value[:hyphen]), golang.atoi(value[hyphen + 1:])
    elif plus >= 0:
        low = golang.atoi(value[:plus])
        high = low + golang.atoi(value[plus + 1:])
    else:
        low = high = golang.atoi(value)
    if low > 65535 or high > 65535:
        raise ValueError(f"the port range cannot be greater than 65535: {value}")
    if high < low:
        raise ValueError(f"end port cannot be less than start port: {value}")
    return low, high - low + 1


# ---- dual-stack pairs (IPs or CIDRs) -------------------------------------------------------------


def _parse_pair(value: str, parse_one, kind: str) -> list:
    """``a`` or ``a,b`` (spaces and empty items ignored): one item, or two of different families."""
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not 1 <= len(parts) <= 2:
        raise ValueError(f"specify one {kind}, or two of different IP families")
    items = [parse_one(part) for part in parts]
    if len({item.version for item in items}) != len(items):
        raise ValueError(f"the two {kind}s must be of different IP families")
    return items


def parse_cidr_pair(value: str, *, strict: bool = True) -> list[IPNet]:
    """One CIDR, or two of different families. ``strict``: host bits must be clear
    (``10.0.0.1/24`` is refused). ValueError otherwise."""
    def one(part: str) -> IPNet:
        try:
            return ipaddress.ip_network(part, strict=strict)
        except ValueError as exc:
            raise ValueError(f"invalid CIDR address: {part}: {exc}") from None

    return _parse_pair(value, one, "CIDR")


def parse_ip_pair(value: str) -> list[IPAddr]:
    """One IP, or two of different families, each read by ParseIPSloppy (as the kubelet's
    ``nodeutil.ParseNodeIPArgument`` reads ``--node-ip``). ValueError otherwise."""
    def one(part: str) -> IPAddr:
        ip = parse_ip_sloppy(part)
        if ip is None:
            raise ValueError(f"invalid IP address: {part}")
        return ip

    return _parse_pair(value, one, "IP")
