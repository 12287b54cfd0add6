"""The proxier's view of the kernel's IPVS table: ``kernel.ipvs`` speaks plain data (``Service``,
``Destination``), the planner speaks ``rules.VirtualServer`` and ``plan.Op``; this translates
both ways and nothing else. ``IpvsTable`` wraps ``kernel.ipvs.NetlinkIpvs`` or the fake
(``kernel.fake.ipvs.FakeIpvs``) alike.
"""

from __future__ import annotations

from kubesvc.kernel.ipvs import Destination, Service, ServiceKey, Table
from kubesvc.proxy.ipvs.plan import CurrentRealServer, CurrentVirtualServer, Op
from kubesvc.proxy.ipvs.rules import VirtualServer, VirtualServerKey


def kernel_key(key: VirtualServerKey) -> ServiceKey:
    return ServiceKey(key.address, key.protocol, key.port)


def kernel_service(server: VirtualServer) -> Service:
    return Service(kernel_key(server.key), server.scheduler, server.flags, server.timeout)


def current(table: Table) -> dict[VirtualServerKey, CurrentVirtualServer]:
    """The kernel's table as the planner reads it."""
    result: dict[VirtualServerKey, CurrentVirtualServer] = {}
    for key, (service, dests) in table.items():
        vkey = VirtualServerKey(key.address, key.protocol, key.port)
        server = VirtualServer(vkey, service.scheduler, service.flags, service.timeout)
        result[vkey] = CurrentVirtualServer(server, {rs: CurrentRealServer(d.weight, d.active, d.inactive) for rs, d in dests.items()})
    return result


class IpvsTable:
    """``dump``/``apply`` in the planner's terms over a kernel IPVS interface (blocking)."""

    def __init__(self, ipvs):
        self.kernel = ipvs

    def dump(self, family: int) -> dict[VirtualServerKey, CurrentVirtualServer]:
        return current(self.kernel.dump(family))

    def apply(self, op: Op) -> None:
        dest = Destination(op.real_server[0], op.real_server[1], op.weight) if op.real_server is not None else None
        self.kernel.apply(op.action, kernel_service(op.server), dest)

    def flush(self, family: int) -> None:
        self.kernel.flush(family)

    def set_timeouts(self, tcp: float, tcp_fin: float, udp: float) -> None:
        self.kernel.set_timeouts(tcp, tcp_fin, udp)
