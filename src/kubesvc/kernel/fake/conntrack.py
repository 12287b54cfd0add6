"""A stateful conntrack table behind the interface of ``kernel.conntrack.Conntrack``
(``delete_flows``, ``delete_flows_sync``, ``flows_sync``), for tests.

Entries are ``kernel.conntrack.Flow`` values, one table per family, and come in as
``conntrack -I`` makes them (``insert``): the original tuple as given, the reply tuple its
inverse, or with ``dst_nat`` (``--dst-nat IP[:PORT]``) the reply coming *from* that address, and
the entry marked ``IPS_DST_NAT``, as a DNAT rule's first packet leaves it. The kernel keeps both
directions of every entry in one hash: an entry whose original or reply tuple is already one of
another's is refused (EEXIST), as ``conntrack -I`` is ("Such conntrack exists").

Deleting is upstream's ``ConntrackDeleteFilters`` over the same pure matching as the kernel
module (``kernel.conntrack.select``): one pass over the table, every entry any filter matches
deleted, the count returned. Held to the kernel by ``tests/kernel/test_conntrack_fake.py``.
"""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Sequence

from kubesvc.kernel import IPV4, IPV6
from kubesvc.kernel.conntrack import IPS_DST_NAT, PROTOCOLS, Flow, FlowFilter, select
from kubesvc.kernel.netlink import NetlinkFailed


def _family(ip: str) -> int:
    return IPV6 if ipaddress.ip_address(ip).version == 6 else IPV4


def _split(target: str) -> tuple[str, int | None]:
    """``IP``, ``IP:PORT`` or ``[IPv6]:PORT``."""
    if target.startswith("["):
        host, _, port = target[1:].partition("]:")
        return host, int(port) if port else None
    if target.count(":") == 1:
        host, port = target.split(":")
        return host, int(port)
    return target, None


class FakeConntrack:
    def __init__(self):
        self.tables: dict[int, list[Flow]] = {IPV4: [], IPV6: []}

    # -- the interface of kernel.conntrack.Conntrack

    async def delete_flows(self, filters: Sequence[FlowFilter], family: int = IPV4) -> int:
        return self.delete_flows_sync(filters, family)

    def delete_flows_sync(self, filters: Sequence[FlowFilter], family: int = IPV4) -> int:
        doomed = select(self.tables[family], list(filters)) if filters else []
        self.tables[family] = [flow for flow in self.tables[family] if flow not in doomed]
        return len(doomed)

    def flows_sync(self, family: int = IPV4) -> list[Flow]:
        return list(self.tables[family])

    # -- making entries

    def insert(self, protocol: str, src: str, dst: str, sport: int, dport: int, *, dst_nat: str | None = None) -> Flow:
        """``conntrack -I -p PROTOCOL -s SRC -d DST --sport SPORT --dport DPORT [--dst-nat IP[:PORT]]``."""
        family = _family(src)
        if _family(dst) != family:
            raise NetlinkFailed(("conntrack", "-I"), errno.EINVAL, "Invalid argument")
        reply_src, reply_src_port, status = dst, dport, 0
        if dst_nat is not None:
            nat_ip, nat_port = _split(dst_nat)
            reply_src, reply_src_port, status = nat_ip, nat_port or dport, IPS_DST_NAT
        flow = Flow(PROTOCOLS[protocol], src, dst, sport, dport, reply_src, src, reply_src_port, sport, status)
        taken = {t for f in self.tables[family] for t in _tuples(f)}
        if any(t in taken for t in _tuples(flow)):
            raise NetlinkFailed(("conntrack", "-I"), errno.EEXIST, "File exists")
        self.tables[family].append(flow)
        return flow


def _tuples(flow: Flow) -> tuple[tuple, tuple]:
    """An entry's two hashed tuples (protocol, source, destination, ports)."""
    return ((flow.protocol, flow.orig_src, flow.orig_dst, flow.orig_src_port, flow.orig_dst_port),
            (flow.protocol, flow.reply_src, flow.reply_dst, flow.reply_src_port, flow.reply_dst_port))
