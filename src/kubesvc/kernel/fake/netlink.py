"""The proxy's view of links (``kernel.netlink.Links``: a link's index, its addresses, the
IPVS dummy device) over one namespace of the one stateful rtnetlink fake, ``FakeNetwork``
(``kernel/fake/links.py``), its changes made with the same operation values as the real one
(``AddDummy``, ``Address``/``DelAddress``). ``links`` maps a link name to its addresses (IPs, in
order); indexes are given in the order a link is first seen (``lo`` is 1)."""

from __future__ import annotations

import ipaddress

from kubesvc.kernel import IPV4, IPV6
from kubesvc.kernel.fake.links import FakeNetwork, Link
from kubesvc.kernel.links import AddDummy, DelAddress
from kubesvc.kernel.links import Address as AddressOp
from kubesvc.kernel.netlink import SCOPE_HOST, Address, host_prefix


class FakeLinks:
    def __init__(self, links: dict[str, list[str]] | None = None, network: FakeNetwork | None = None, netns: str | None = None):
        self.network, self.netns = network or FakeNetwork(), netns
        self.index: dict[str, int] = {}
        ns = self.network.ns(netns)
        for name, addresses in (links or {"lo": ["127.0.0.1"]}).items():
            ns.links.setdefault(name, Link(name))
            self._index(name)
            self.network.apply([AddressOp(name, f"{ip}/{host_prefix(ip)}", replace=True) for ip in addresses], netns)

    @property
    def links(self) -> dict[str, list[str]]:
        return {name: [cidr.split("/")[0] for cidr in link.addresses] for name, link in self.network.ns(self.netns).links.items()}

    def _index(self, name: str) -> int:
        return self.index.setdefault(name, len(self.index) + 1)

    async def ensure_dummy(self, name: str) -> int:
        if name not in self.network.ns(self.netns).links:
            self.network.apply([AddDummy(name)], self.netns)
        return self._index(name)

    async def addresses(self, family: int | None = None) -> list[Address]:
        result = []
        for name, link in self.network.ns(self.netns).links.items():
            for cidr in link.addresses:
                iface = ipaddress.ip_interface(cidr)
                fam = IPV6 if iface.version == 6 else IPV4
                if family is None or fam == family:
                    result.append(Address(self._index(name), fam, str(iface.ip), iface.network.prefixlen,
                                          SCOPE_HOST if iface.ip.is_loopback else 0))
        return result

    async def add_address(self, dev: str, address: str) -> None:
        if address not in self.links.get(dev, ()):  # already bound is fine
            self.network.apply([AddressOp(dev, f"{address}/{host_prefix(address)}")], self.netns)

    async def del_address(self, dev: str, address: str) -> None:
        if dev not in self.links or address in self.links[dev]:  # not bound is fine; no such link is not
            self.network.apply([DelAddress(dev, f"{address}/{host_prefix(address)}")], self.netns)
