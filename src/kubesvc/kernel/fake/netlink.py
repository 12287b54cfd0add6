"""In-memory links and addresses with the interface of ``kernel.netlink.Links``: ``links`` maps a
link name to its addresses in order; indexes are given in creation order (``lo`` is 1)."""

from __future__ import annotations

import errno
import ipaddress

from kubesvc.kernel import IPV4, IPV6
from kubesvc.kernel.netlink import SCOPE_HOST, Address, NetlinkFailed, host_prefix


class FakeLinks:
    def __init__(self, links: dict[str, list[str]] | None = None):
        self.links: dict[str, list[str]] = {}
        self.index: dict[str, int] = {}
        for name, addresses in (links or {"lo": ["127.0.0.1"]}).items():
            self._add_link(name, addresses)

    def _add_link(self, name: str, addresses: list[str] | None = None) -> int:
        self.links[name] = list(addresses or [])
        self.index[name] = len(self.index) + 1
        return self.index[name]

    def _name(self, index: int) -> str:
        for name, i in self.index.items():
            if i == index:
                return name
        raise NetlinkFailed(("link", "get", str(index)), errno.ENODEV, "No such device")

    async def ensure_dummy(self, name: str) -> int:
        return self.index[name] if name in self.links else self._add_link(name)

    async def addresses(self, family: int | None = None) -> list[Address]:
        result = []
        for name, addresses in self.links.items():
            for text in addresses:
                ip = ipaddress.ip_address(text)
                fam = IPV6 if ip.version == 6 else IPV4
                if family is None or fam == family:
                    result.append(Address(self.index[name], fam, text, host_prefix(text), SCOPE_HOST if ip.is_loopback else 0))
        return result

    async def add_address(self, index: int, address: str) -> None:
        bound = self.links[self._name(index)]
        if address not in bound:
            bound.append(address)

    async def del_address(self, index: int, address: str) -> None:
        bound = self.links[self._name(index)]
        if address in bound:
            bound.remove(address)
