"""A stateful fake of ``kernel.vxlan.HostOverlay`` (and of the routes ``kernel.routes`` makes):
one network namespace's links (uplinks given by the test, VXLAN devices), their addresses, our
routes, permanent neighbours and FDB entries, refusing what the kernel refuses with its errno
(the rules checked on a real kernel by ``tests/kernel/test_pod_network_kernel.py``):

* a VXLAN device whose name is taken, or with the VNI and port of another: EEXIST; its uplink
  missing: ENODEV. Deleting a link takes its routes, neighbours and FDB entries along;
* an address already on a link: EEXIST (``replace`` is idempotent);
* a route through a gateway no connected route (an address on a link that is up) covers:
  ENETUNREACH, unless ``onlink`` on a named device that is up (down: ENETDOWN); deleting a
  route that is not there: ESRCH;
* a neighbour or FDB entry on a missing link: ENODEV (an FDB entry on a link that is no VXLAN
  device is accepted and keeps no destination); deleting one that is not there: ENOENT, except an FDB
  entry of a known MAC with another destination, which the kernel accepts and leaves alone.
"""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field

from kubesvc.kernel.fake.links import MESSAGES, Refused
from kubesvc.kernel.links import Address, DelLink, SetUp
from kubesvc.kernel.netlink import NetlinkFailed
from kubesvc.kernel.routes import DeleteRoute, PodRoute, ReplaceRoute
from kubesvc.kernel.vxlan import AddVxlan, DelFdb, DelNeigh, ReplaceFdb, ReplaceNeigh, Uplink, VxlanDevice, VxlanInfo

MESSAGES = {**MESSAGES, errno.ENODEV: "No such device", errno.EINVAL: "Invalid argument"}


@dataclass(eq=False)
class FakeLink:
    name: str
    mtu: int = 1500
    up: bool = True
    addresses: list[str] = field(default_factory=list)
    vxlan: VxlanDevice | None = None


class FakeOverlay:
    """``uplinks``: ``{name: (["192.168.77.11/24", ...], mtu)}``, up."""

    def __init__(self, uplinks: dict[str, tuple[list[str], int]] | None = None):
        self.links: dict[str, FakeLink] = {name: FakeLink(name, mtu, True, list(addrs)) for name, (addrs, mtu) in (uplinks or {}).items()}
        self.pod_routes: dict[str, PodRoute] = {}
        self.neigh: dict[tuple[str, str], str] = {}  # (dev, ip) -> mac
        self.fdb_entries: dict[tuple[str, str], str] = {}  # (dev, mac) -> remote ip
        self.applied: list[str] = []  # every operation carried out, as its ip line

    # -- the door

    async def uplink(self, ip: str) -> Uplink | None:
        for link in self.links.values():
            if any(ipaddress.ip_interface(a).ip == ipaddress.ip_address(ip) for a in link.addresses):
                return Uplink(link.name, link.mtu, tuple(str(ipaddress.ip_interface(a).network) for a in link.addresses))
        return None

    async def vxlan(self, name: str) -> VxlanInfo | None:
        link = self.links.get(name)
        if link is None:
            return None
        if link.vxlan is None:
            return VxlanInfo(None, addresses=tuple(link.addresses), up=link.up)
        d = link.vxlan
        return VxlanInfo("vxlan", d.vni, d.local, d.dev, d.port, link.mtu, d.mac, False, tuple(link.addresses), link.up)

    async def routes(self) -> set[PodRoute]:
        return set(self.pod_routes.values())

    async def neighbours(self, dev: str) -> dict[str, str]:
        return {ip: mac for (d, ip), mac in self.neigh.items() if d == dev}

    async def fdb(self, dev: str) -> dict[str, str]:
        return {mac: ip for (d, mac), ip in self.fdb_entries.items() if d == dev}

    async def apply(self, ops: Sequence[object]) -> None:
        for op in ops:
            try:
                self._run(op)
            except Refused as err:
                raise NetlinkFailed(op, err.code, str(err)) from None
            self.applied.append(str(op))

    # -- the kernel's rules

    def _link(self, name: str) -> FakeLink:
        if name not in self.links:
            raise Refused(errno.ENODEV, MESSAGES[errno.ENODEV])
        return self.links[name]

    def _covered(self, gateway: str, dev: str | None) -> bool:
        ip = ipaddress.ip_address(gateway)
        return any(link.up and (dev is None or link.name == dev) and ip in ipaddress.ip_interface(a).network
                   for link in self.links.values() for a in link.addresses if ipaddress.ip_interface(a).version == ip.version)

    def _run(self, op: object) -> None:
        if isinstance(op, AddVxlan):
            d = op.device
            if d.name in self.links or any(l.vxlan and (l.vxlan.vni, l.vxlan.port) == (d.vni, d.port) for l in self.links.values()):
                raise Refused(errno.EEXIST, MESSAGES[errno.EEXIST])
            self._link(d.dev)
            self.links[d.name] = FakeLink(d.name, d.mtu, False, [], d)
        elif isinstance(op, Address):
            link = self._link(op.dev)
            if op.cidr in link.addresses:
                if not op.replace:
                    raise Refused(errno.EEXIST, MESSAGES[errno.EEXIST])
            else:
                link.addresses.append(op.cidr)
        elif isinstance(op, SetUp):
            self._link(op.name).up = True
        elif isinstance(op, DelLink):
            self._link(op.name)
            del self.links[op.name]
            self.pod_routes = {k: r for k, r in self.pod_routes.items() if r.dev != op.name}
            self.neigh = {k: v for k, v in self.neigh.items() if k[0] != op.name}
            self.fdb_entries = {k: v for k, v in self.fdb_entries.items() if k[0] != op.name}
        elif isinstance(op, ReplaceRoute):
            r = op.route
            if r.onlink:
                if r.dev is None:
                    raise Refused(errno.EINVAL, MESSAGES[errno.EINVAL])
                if not self._link(r.dev).up:
                    raise Refused(errno.ENETDOWN, MESSAGES[errno.ENETDOWN])
            else:
                if r.dev is not None:
                    self._link(r.dev)
                if not self._covered(r.via, r.dev):
                    raise Refused(errno.ENETUNREACH, MESSAGES[errno.ENETUNREACH])
            self.pod_routes[str(ipaddress.ip_network(r.dst))] = r
        elif isinstance(op, DeleteRoute):
            if self.pod_routes.pop(str(ipaddress.ip_network(op.dst)), None) is None:
                raise Refused(errno.ESRCH, MESSAGES[errno.ESRCH])
        elif isinstance(op, ReplaceNeigh):
            self._link(op.dev)
            self.neigh[(op.dev, op.ip)] = op.mac
        elif isinstance(op, DelNeigh):
            self._link(op.dev)
            if self.neigh.pop((op.dev, op.ip), None) is None:
                raise Refused(errno.ENOENT, MESSAGES[errno.ENOENT])
        elif isinstance(op, ReplaceFdb):
            if self._link(op.dev).vxlan is not None:  # elsewhere the kernel adds the MAC to the link's own list, no destination
                self.fdb_entries[(op.dev, op.mac)] = op.dst
        elif isinstance(op, DelFdb):
            self._link(op.dev)
            if (op.dev, op.mac) not in self.fdb_entries:
                raise Refused(errno.ENOENT, MESSAGES[errno.ENOENT])
            if self.fdb_entries[(op.dev, op.mac)] == op.dst:  # another destination of a known MAC: the kernel says nothing, does nothing
                del self.fdb_entries[(op.dev, op.mac)]
        else:
            raise TypeError(f"FakeOverlay cannot run {op!r}")
