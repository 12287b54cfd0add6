"""A VXLAN device with static neighbour and forwarding entries, as flannel's vxlan backend keeps them.

Flannel (``pkg/backend/vxlan``, "directRouting" off) gives every node one kernel VXLAN device,
``flannel.<VNI>``: VNI 1, UDP port 8472 (the Linux default, older than IANA's 4789), ``local``
the node's public IP on the interface holding it, learning off, MTU the interface's minus 50
(VXLAN's outer IPv4 + UDP + VXLAN + inner Ethernet headers), and the first address of the
node's podCIDR as a /32 (the VTEP address). For each other node it writes, from that node's
annotations (``flannel.alpha.coreos.com/backend-data: {"VNI":1,"VtepMAC":"..."}`` and
``public-ip``)::

    ip neigh replace 10.244.3.0 lladdr <VtepMAC> dev flannel.1 nud permanent   # ARP, never asked
    bridge fdb replace <VtepMAC> dev flannel.1 dst 192.168.77.13 self permanent  # where that MAC lives
    ip route replace 10.244.3.0/24 via 10.244.3.0 dev flannel.1 onlink           # kernel.routes

so a packet to a remote Pod is routed to the remote VTEP address, gets the remote VTEP's MAC
from the neighbour table and is encapsulated to the remote node's IP found in the FDB: no
multicast, no learning, no ARP over the tunnel. Deleting the device takes its neighbours, FDB
entries and routes along.

Ours is ``kubesvc.<VNI>`` (``kubesvc.1``), so a real flannel on the same machine is never
touched. Operations are values printing as their ``ip``/``bridge`` line, run by
``kernel.links.Session`` on ``kernel.netlink``'s cached socket; :class:`HostOverlay` is the
door (``uplink``, ``vxlan``, ``routes``, ``neighbours``, ``fdb``, ``apply``) the Pod network
controller goes through, and ``kernel/fake/overlay.py`` its stateful fake.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kubesvc.kernel import netlink
from kubesvc.kernel.routes import PodRoute, parse_routes

NUD_PERMANENT = 0x80
NTF_SELF = 0x02
VXLAN_OVERHEAD = 50  # outer IPv4 (20) + UDP (8) + VXLAN (8) + inner Ethernet (14)
DEFAULT_PORT = 8472
DEFAULT_VNI = 1


@dataclass(frozen=True)
class VxlanDevice:
    """What a VXLAN device is made with: ``dev`` the uplink holding ``local``."""

    name: str
    vni: int
    local: str
    dev: str
    port: int
    mtu: int
    mac: str

    def __str__(self) -> str:
        return (f"{self.name} address {self.mac} mtu {self.mtu} type vxlan id {self.vni} local {self.local} dev {self.dev} "
                f"dstport {self.port} nolearning")


@dataclass(frozen=True)
class VxlanInfo:
    """What the kernel reports of an existing link ``name`` (``kind`` not vxlan: someone else's)."""

    kind: str | None
    vni: int | None = None
    local: str | None = None
    dev: str | None = None
    port: int | None = None
    mtu: int | None = None
    mac: str | None = None
    learning: bool = False
    addresses: tuple[str, ...] = ()
    up: bool = False


@dataclass(frozen=True)
class Uplink:
    """The link holding an address, its MTU and the subnets of its addresses (of every family)."""

    name: str
    mtu: int
    networks: tuple[str, ...] = ()


def matches(info: VxlanInfo | None, want: VxlanDevice) -> bool:
    """Whether an existing device can be kept as it is (flannel's ``ensureLink`` compares VNI,
    local address, port and link; anything else makes it delete and recreate the device)."""
    return (info is not None and info.kind == "vxlan" and not info.learning
            and (info.vni, info.local, info.dev, info.port, info.mtu, (info.mac or "").lower())
            == (want.vni, want.local, want.dev, want.port, want.mtu, want.mac.lower()))


# ---- operations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AddVxlan:
    device: VxlanDevice

    def __str__(self) -> str:
        return f"link add {self.device}"

    def run(self, ipr: Any) -> None:
        d = self.device
        ipr.link("add", ifname=d.name, kind="vxlan", vxlan_id=d.vni, vxlan_local=d.local, vxlan_port=d.port, vxlan_learning=0,
                 vxlan_link=ipr.index(d.dev), mtu=d.mtu, address=d.mac)


@dataclass(frozen=True)
class ReplaceNeigh:
    dev: str
    ip: str
    mac: str

    def __str__(self) -> str:
        return f"neigh replace {self.ip} lladdr {self.mac} dev {self.dev} nud permanent"

    def run(self, ipr: Any) -> None:
        ipr.ipr.neigh("replace", dst=self.ip, lladdr=self.mac, ifindex=ipr.index(self.dev), state=NUD_PERMANENT)


@dataclass(frozen=True)
class DelNeigh:
    dev: str
    ip: str

    def __str__(self) -> str:
        return f"neigh del {self.ip} dev {self.dev}"

    def run(self, ipr: Any) -> None:
        ipr.ipr.neigh("del", dst=self.ip, ifindex=ipr.index(self.dev))


@dataclass(frozen=True)
class ReplaceFdb:
    dev: str
    mac: str
    dst: str

    def __str__(self) -> str:
        return f"fdb replace {self.mac} dev {self.dev} dst {self.dst} self permanent"

    def run(self, ipr: Any) -> None:
        ipr.ipr.fdb("replace", ifindex=ipr.index(self.dev), lladdr=self.mac, dst=self.dst, flags=NTF_SELF, state=NUD_PERMANENT)


@dataclass(frozen=True)
class DelFdb:
    dev: str
    mac: str
    dst: str

    def __str__(self) -> str:
        return f"fdb del {self.mac} dev {self.dev} dst {self.dst} self"

    def run(self, ipr: Any) -> None:
        ipr.ipr.fdb("del", ifindex=ipr.index(self.dev), lladdr=self.mac, dst=self.dst, flags=NTF_SELF)


# ---- parsing (pure) -------------------------------------------------------------------------


def parse_vxlan(link: Mapping[str, Any], addresses: Iterable[Mapping[str, Any]], names: Mapping[int, str]) -> VxlanInfo:
    """A ``VxlanInfo`` from pyroute2's ``ifinfmsg`` (or a dict with its keys) and the link's ``ifaddrmsg``s."""
    info = link.get("IFLA_LINKINFO") or {}
    kind = info.get("IFLA_INFO_KIND")
    found = tuple(f"{a.get('IFA_LOCAL') or a.get('IFA_ADDRESS')}/{a.get('prefixlen')}" for a in addresses
                  if (a.get("IFA_LOCAL") or a.get("IFA_ADDRESS") or "fe80:").lower()[:5] != "fe80:")
    up = bool((link.get("flags") or 0) & 1)  # IFF_UP
    if kind != "vxlan":
        return VxlanInfo(kind, addresses=found, up=up)
    data = info.get("IFLA_INFO_DATA") or {}
    return VxlanInfo(kind, data.get("IFLA_VXLAN_ID"), data.get("IFLA_VXLAN_LOCAL"), names.get(data.get("IFLA_VXLAN_LINK") or 0),
                     data.get("IFLA_VXLAN_PORT"), link.get("IFLA_MTU"), link.get("IFLA_ADDRESS"), bool(data.get("IFLA_VXLAN_LEARNING")),
                     found, up)


def parse_neighbours(messages: Iterable[Mapping[str, Any]], index: int) -> dict[str, str]:
    """``{ip: mac}`` of the permanent neighbour entries on link ``index``."""
    return {m.get("NDA_DST"): m.get("NDA_LLADDR") for m in messages
            if m.get("ifindex") == index and (m.get("state") or 0) & NUD_PERMANENT and m.get("NDA_DST") and m.get("NDA_LLADDR")}


def parse_fdb(messages: Iterable[Mapping[str, Any]], index: int) -> dict[str, str]:
    """``{mac: remote ip}`` of the FDB entries with a destination on VXLAN link ``index``."""
    return {m.get("NDA_LLADDR"): m.get("NDA_DST") for m in messages if m.get("ifindex") == index and m.get("NDA_DST") and m.get("NDA_LLADDR")}


# ---- the door ---------------------------------------------------------------------------------


class OverlayKernel(Protocol):
    """What the Pod network controller asks of the kernel (``HostOverlay``; ``FakeOverlay`` in tests)."""

    async def uplink(self, ip: str) -> Uplink | None: ...
    async def vxlan(self, name: str) -> VxlanInfo | None: ...
    async def routes(self) -> set[PodRoute]: ...
    async def neighbours(self, dev: str) -> dict[str, str]: ...
    async def fdb(self, dev: str) -> dict[str, str]: ...
    async def apply(self, ops: Sequence[Any]) -> None: ...


def _names(ipr) -> dict[int, str]:
    return {link["index"]: link.get("IFLA_IFNAME") for link in ipr.get_links()}


def _uplink(ipr, ip: str) -> Uplink | None:
    want = ipaddress.ip_address(ip)
    found = netlink.parse_addresses(ipr.get_addr())
    for address in found:
        if ipaddress.ip_address(address.address) == want:
            link = ipr.get_links(address.index)[0]
            networks = tuple(str(ipaddress.ip_interface(f"{a.address}/{a.prefixlen}").network) for a in found
                             if a.index == address.index and a.scope == 0)
            return Uplink(link.get("IFLA_IFNAME"), link.get("IFLA_MTU"), networks)
    return None


def _vxlan(ipr, name: str) -> VxlanInfo | None:
    found = ipr.link_lookup(ifname=name)
    if not found:
        return None
    return parse_vxlan(ipr.get_links(found[0])[0], ipr.get_addr(index=found[0]), _names(ipr))


def _index(ipr, dev: str) -> int | None:
    found = ipr.link_lookup(ifname=dev)
    return found[0] if found else None


def _neighbours(ipr, dev: str) -> dict[str, str]:
    index = _index(ipr, dev)
    return {} if index is None else parse_neighbours(ipr.get_neighbours(ifindex=index), index)


def _fdb(ipr, dev: str) -> dict[str, str]:
    index = _index(ipr, dev)
    return {} if index is None else parse_fdb(ipr.fdb("dump", ifindex=index), index)


class HostOverlay:
    """The real kernel, through ``kernel.netlink``'s thread and its socket for ``netns`` (None:
    this process's network namespace; tests name one of theirs)."""

    def __init__(self, netns: str | None = None):
        self.netns = netns

    async def _call(self, request: tuple[str, ...], fn, *args):
        return await netlink.call_async(netlink._route_call(request, self.netns, lambda ipr: fn(ipr, *args)))

    async def uplink(self, ip: str) -> Uplink | None:
        return await self._call(("addr", "show", "to", ip), _uplink, ip)

    async def vxlan(self, name: str) -> VxlanInfo | None:
        return await self._call(("link", "show", name), _vxlan, name)

    async def routes(self) -> set[PodRoute]:
        from kubesvc.kernel.routes import RTPROT_KUBESVC

        def dump(ipr) -> set[PodRoute]:
            return parse_routes([*ipr.get_routes(family=2, proto=RTPROT_KUBESVC), *ipr.get_routes(family=10, proto=RTPROT_KUBESVC)],
                                _names(ipr))
        return await self._call(("route", "show", "proto", str(RTPROT_KUBESVC)), dump)

    async def neighbours(self, dev: str) -> dict[str, str]:
        return await self._call(("neigh", "show", "dev", dev), _neighbours, dev)

    async def fdb(self, dev: str) -> dict[str, str]:
        return await self._call(("fdb", "show", "dev", dev), _fdb, dev)

    async def apply(self, ops: Sequence[Any]) -> None:
        """``ops`` in order on the cached socket; ``NetlinkFailed`` at the first refusal."""
        if not ops:
            return

        def body(ipr) -> None:
            from kubesvc.kernel import links

            links.Session(self.netns, links.Borrowed(ipr)).apply(list(ops))
        await self._call(("batch",), body)
