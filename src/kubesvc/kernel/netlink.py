"""The addresses of this network namespace's interfaces (what Go's ``net.InterfaceAddrs()`` gives
kube-proxy in upstream ``pkg/proxy/util``'s ``RealNetwork``).

kube-proxy needs them for ``--nodeport-addresses``: a NodePort (and a health-check node port) is
accepted only on the local addresses inside those CIDRs. We ask ``ip -j addr show`` (iproute2's
JSON output) rather than netlink directly, because pyroute2 is not installed; the parsing is a
pure function so it can be tested on canned output.
"""

from __future__ import annotations

import json

from kubesvc.kernel.exec import run, run_sync

IP_ADDR_ARGV = ("ip", "-j", "addr", "show")
_FAMILIES = {"inet": 4, "inet6": 6}


def parse_ip_addr_json(text: str, family: int | None = None) -> list[str]:
    """Every ``addr_info[].local`` in ``ip -j addr show`` output, in interface order, optionally
    only of one IP family (4 or 6); duplicates (an address on two interfaces) kept once."""
    addresses: list[str] = []
    for link in json.loads(text or "[]"):
        for info in link.get("addr_info") or []:
            address = info.get("local")
            info_family = _FAMILIES.get(info.get("family", ""))
            if not address or info_family is None:
                continue
            if family is not None and info_family != family:
                continue
            if address not in addresses:
                addresses.append(address)
    return addresses


def local_addresses(family: int | None = None) -> list[str]:
    """The addresses of every interface here (loopback included); raises ``CommandFailed``."""
    return parse_ip_addr_json(run_sync(IP_ADDR_ARGV).stdout, family)


async def local_addresses_async(family: int | None = None) -> list[str]:
    """``local_addresses`` without blocking the event loop."""
    return parse_ip_addr_json((await run(IP_ADDR_ARGV)).stdout, family)
