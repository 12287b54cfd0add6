"""Deleting conntrack entries over ctnetlink (pyroute2 ``Conntrack``), as upstream
``pkg/proxy/conntrack`` does over vishvananda/netlink: no ``conntrack`` process.

Only UDP (and SCTP) need this: a UDP "connection" that was DNATed to a backend keeps going to
that backend for as long as packets flow, even after the backend is gone, because conntrack
never sees it end. kube-proxy deletes those entries after a sync.

``delete_flows(filters, family)`` is upstream's ``ConntrackDeleteFilters``: one dump of the
family's table, every entry matching any filter deleted by its original tuple, the number
deleted returned (an entry that expired between the dump and the delete is simply not counted).
A ``FlowFilter`` holds what ``conntrack -D`` would have been given (``-p udp --orig-dst VIP
--orig-port-dst PORT --dst-nat ENDPOINT``); ``args`` spells it that way for logs and tests.
Matching (``matches``) and reading a dumped message (``parse_flow``) are pure.

Failures raise ``netlink.NetlinkFailed`` (a ``CommandFailed``: the request, the errno and the
kernel's message). ``Conntrack`` is one namespace's table as one interface; its stateful fake is
``kernel/fake/conntrack.py``.
"""

from __future__ import annotations

import errno as errno_
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kubesvc.kernel import IPV4, IPV6
from kubesvc.kernel import netlink

PROTOCOLS = {"tcp": socket.IPPROTO_TCP, "udp": socket.IPPROTO_UDP, "sctp": 132}
IPS_DST_NAT = 1 << 5  # the entry's destination was NATed (conntrack -D --dst-nat checks it)
_AF = {IPV4: socket.AF_INET, IPV6: socket.AF_INET6}


@dataclass(frozen=True)
class FlowFilter:
    """Entries of ``protocol`` ("udp", "sctp") whose original destination is ``orig_dst``
    (any when None) and port ``orig_dst_port`` (any when None), and, with ``dst_nat``, that
    were DNATed to that address (the reply comes from it)."""

    protocol: str
    orig_dst: str | None = None
    orig_dst_port: int | None = None
    dst_nat: str | None = None

    @property
    def args(self) -> list[str]:
        """The same filter as ``conntrack -D`` arguments."""
        args = ["-p", self.protocol]
        if self.orig_dst is not None:
            args += ["--orig-dst", self.orig_dst]
        if self.orig_dst_port is not None:
            args += ["--orig-port-dst", str(self.orig_dst_port)]
        if self.dst_nat is not None:
            args += ["--dst-nat", self.dst_nat]
        return args

    def __str__(self) -> str:
        return " ".join(self.args)


@dataclass(frozen=True)
class Flow:
    """One conntrack entry: its original and reply tuples and status bits."""

    protocol: int
    orig_src: str
    orig_dst: str
    orig_src_port: int | None
    orig_dst_port: int | None
    reply_src: str
    reply_dst: str
    reply_src_port: int | None
    reply_dst_port: int | None
    status: int = 0


def matches(flt: FlowFilter, flow: Flow) -> bool:
    if PROTOCOLS.get(flt.protocol) != flow.protocol:
        return False
    if flt.orig_dst is not None and flt.orig_dst != flow.orig_dst:
        return False
    if flt.orig_dst_port is not None and flt.orig_dst_port != flow.orig_dst_port:
        return False
    if flt.dst_nat is not None and (not flow.status & IPS_DST_NAT or flt.dst_nat != flow.reply_src):
        return False
    return True


def _tuple(msg: Any, family: int) -> tuple[str, str, int | None, int | None, int]:
    ip = msg.get_attr("CTA_TUPLE_IP")
    proto = msg.get_attr("CTA_TUPLE_PROTO")
    v = "V6" if family == IPV6 else "V4"
    return (ip.get_attr(f"CTA_IP_{v}_SRC"), ip.get_attr(f"CTA_IP_{v}_DST"), proto.get_attr("CTA_PROTO_SRC_PORT"),
            proto.get_attr("CTA_PROTO_DST_PORT"), proto.get_attr("CTA_PROTO_NUM"))


def parse_flow(msg: Any, family: int) -> Flow | None:
    """A dumped ``nfct_msg`` as a ``Flow`` (None without both tuples)."""
    orig, reply = msg.get_attr("CTA_TUPLE_ORIG"), msg.get_attr("CTA_TUPLE_REPLY")
    if orig is None or reply is None:
        return None
    osrc, odst, osport, odport, proto = _tuple(orig, family)
    rsrc, rdst, rsport, rdport, _ = _tuple(reply, family)
    return Flow(proto, osrc, odst, osport, odport, rsrc, rdst, rsport, rdport, msg.get_attr("CTA_STATUS") or 0)


def select(flows: Iterable[Flow], filters: Sequence[FlowFilter]) -> list[Flow]:
    """The flows any filter matches, in order."""
    return [flow for flow in flows if any(matches(f, flow) for f in filters)]


# ---- the kernel ------------------------------------------------------------------------------------

class _Table:
    """One ctnetlink socket of a family (pyroute2's ``AsyncConntrack``, driven on the netlink
    thread by a selector loop of its own: the blocking ``Conntrack`` closes its loop after each
    dump)."""

    def __init__(self, netns: str | None, family: int):
        from pyroute2.conntrack import AsyncConntrack

        self.family = family
        self.sock = netlink.open_socket(AsyncConntrack, netns, nfgen_family=_AF[family])
        self.loop = self.sock.event_loop

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            self.loop.close()

    def flows(self) -> list[Flow]:
        async def dump() -> list[Flow]:
            return [flow async for msg in await self.sock.dump() if (flow := parse_flow(msg, self.family)) is not None]
        return self.loop.run_until_complete(dump())

    def delete(self, flow: Flow) -> bool:
        """Delete one entry by its original tuple; False when it was gone already."""
        from pyroute2.netlink.nfnetlink.nfctsocket import NFCTAttrTuple

        orig = NFCTAttrTuple(family=_AF[self.family], saddr=flow.orig_src, daddr=flow.orig_dst, proto=flow.protocol,
                             sport=flow.orig_src_port, dport=flow.orig_dst_port)
        try:
            self.loop.run_until_complete(self.sock.entry("del", tuple_orig=orig))
        except Exception as err:  # noqa: BLE001
            if getattr(err, "code", None) == errno_.ENOENT:  # expired meanwhile
                return False
            raise
        return True


_tables: dict[tuple[str | None, int], _Table] = {}  # (netns, family), on the netlink thread only
netlink.on_fork(_tables.clear)


def _with_table(request: Sequence[str], netns: str | None, family: int, fn):
    try:
        table = _tables.get((netns, family))
        if table is None:
            table = _tables[(netns, family)] = _Table(netns, family)
        return fn(table)
    except Exception as err:  # noqa: BLE001 - translated once, here; a fresh socket next time
        table = _tables.pop((netns, family), None)
        if table is not None:
            try:
                table.close()
            except Exception:  # noqa: BLE001
                pass
        raise netlink.failed(request, err) from err


def _delete_matching(filters: Sequence[FlowFilter], family: int, netns: str | None) -> int:
    request = ("conntrack", "delete", "-f", "ipv6" if family == IPV6 else "ipv4", "; ".join(map(str, filters)))
    return _with_table(request, netns, family, lambda table: sum(table.delete(flow) for flow in select(table.flows(), filters)))


async def delete_flows(filters: Sequence[FlowFilter], family: int = IPV4, netns: str | None = None) -> int:
    """Delete every entry of ``family`` matching any of ``filters``; returns how many were deleted."""
    if not filters:
        return 0
    return await netlink.call_async(_delete_matching, list(filters), family, netns)


def delete_flows_sync(filters: Sequence[FlowFilter], family: int = IPV4, netns: str | None = None) -> int:
    return netlink.call(_delete_matching, list(filters), family, netns) if filters else 0


def flows_sync(family: int = IPV4, netns: str | None = None) -> list[Flow]:
    """Every entry of ``family`` (tests and debugging)."""
    request = ("conntrack", "list", "-f", "ipv6" if family == IPV6 else "ipv4")
    return netlink.call(_with_table, request, netns, family, lambda table: table.flows())


class Conntrack:
    """One namespace's conntrack table: the interface a proxier holds (``delete_flows`` of the
    stale entries after a sync; ``flows`` for tests). Its stateful fake is
    ``kernel.fake.conntrack.FakeConntrack``."""

    def __init__(self, netns: str | None = None):
        self.netns = netns

    async def delete_flows(self, filters: Sequence[FlowFilter], family: int = IPV4) -> int:
        return await delete_flows(filters, family, self.netns)

    def delete_flows_sync(self, filters: Sequence[FlowFilter], family: int = IPV4) -> int:
        return delete_flows_sync(filters, family, self.netns)

    def flows_sync(self, family: int = IPV4) -> list[Flow]:
        return flows_sync(family, self.netns)
