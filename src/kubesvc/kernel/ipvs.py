"""The IPVS table over generic netlink (pyroute2 ``IPVS``; upstream ``pkg/proxy/ipvs/util``'s
``Interface`` over moby/ipvs): read every virtual server of one family with its real servers and
their connection counts, add/edit/delete one virtual or real server, flush, set the connection
timeouts. Plain data in and out (``ServiceKey``, ``Service``, ``Destination``): the proxy's own
types are translated in ``proxy/ipvs/table.py``.

Blocking: each call runs on the netlink thread (``kernel.netlink.call``), where the socket lives
(pyroute2's blocking API drives a loop of its own that cannot run inside the proxy's uvloop).
A refused call raises ``IpvsError``, a ``NetlinkFailed`` (so a ``CommandFailed``): the request
(``ipvs add-dest 10.96.0.1:80/TCP -> 10.1.1.2:8080 weight 1``), the errno and the kernel's message.

``kernel.fake.ipvs.FakeIpvs`` keeps the same state in memory with the kernel's refusals.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import NamedTuple

from kubesvc.kernel import IPV6, netlink
from kubesvc.kernel.netlink import NetlinkFailed

PROTOCOLS = {"TCP": socket.IPPROTO_TCP, "UDP": socket.IPPROTO_UDP, "SCTP": 132}
PROTOCOL_NAMES = {number: name for name, number in PROTOCOLS.items()}
FWD_MASQ = 0  # IP_VS_CONN_F_MASQ: NAT to the real server
ACTIONS = ("add-service", "edit-service", "del-service", "add-dest", "edit-dest", "del-dest")


class ServiceKey(NamedTuple):
    """What identifies a virtual server: address, protocol ("TCP", "UDP", "SCTP"), port."""

    address: str
    protocol: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}/{self.protocol}"


@dataclass(frozen=True)
class Service:
    """A virtual server: scheduler, flags (``IP_VS_SVC_F_PERSISTENT``...) and persistence timeout."""

    key: ServiceKey
    scheduler: str = ""
    flags: int = 0
    timeout: int = 0


@dataclass(frozen=True)
class Destination:
    """A real server: its weight and, as read back, its active/inactive connection counts."""

    address: str
    port: int
    weight: int = 1
    active: int = 0
    inactive: int = 0

    @property
    def key(self) -> tuple[str, int]:
        return (self.address, self.port)


Table = dict[ServiceKey, tuple[Service, dict[tuple[str, int], Destination]]]


def describe(action: str, key: ServiceKey, dest: Destination | None = None) -> str:
    """One call as text (``edit-service 10.96.0.1:80/TCP``, ``add-dest ... -> ip:port weight 1``)."""
    if dest is None:
        return f"{action} {key}"
    host = f"[{dest.address}]" if ":" in dest.address else dest.address
    return f"{action} {key} -> {host}:{dest.port} weight {dest.weight}"


class IpvsError(NetlinkFailed):
    """An IPVS netlink call was refused (``request`` describes it)."""

    def __init__(self, request: str, code: int, message: str):
        super().__init__(("ipvs", request), code, message)


def _error(request: str, err: BaseException) -> IpvsError:
    failed = netlink.failed((request,), err)
    return IpvsError(request, failed.returncode, failed.stderr)


def _service_key(key: ServiceKey) -> dict:
    return {"addr": key.address, "port": key.port, "protocol": PROTOCOLS[key.protocol]}


class NetlinkIpvs:
    """The kernel's IPVS table (needs the ``ip_vs`` module), optionally of a named netns."""

    def __init__(self, netns: str | None = None) -> None:
        def open_():
            from pyroute2 import IPVS

            return netlink.open_socket(IPVS, netns)
        try:
            self._ipvs = netlink.call(open_)
        except Exception as err:  # noqa: BLE001
            raise _error("open", err) from err

    def close(self) -> None:
        netlink.call(self._ipvs.close)

    # ---- reading ------------------------------------------------------------------------------

    def dump(self, family: int) -> Table:
        """Every non-fwmark virtual server of ``family`` with its real servers."""
        try:
            return netlink.call(self._dump, family)
        except IpvsError:
            raise
        except Exception as err:  # noqa: BLE001
            raise _error("dump", err) from err

    def _dump(self, family: int) -> Table:
        from pyroute2 import IPVSService

        af = socket.AF_INET6 if family == IPV6 else socket.AF_INET
        result: Table = {}
        for msg in self._ipvs.service("dump"):
            attrs = msg.get("IPVS_CMD_ATTR_SERVICE")
            if attrs is None or attrs.get("IPVS_SVC_ATTR_AF") != af or attrs.get("IPVS_SVC_ATTR_FWMARK"):
                continue
            protocol = PROTOCOL_NAMES.get(attrs.get("IPVS_SVC_ATTR_PROTOCOL"))
            if protocol is None:
                continue
            key = ServiceKey(attrs.get("IPVS_SVC_ATTR_ADDR"), protocol, attrs.get("IPVS_SVC_ATTR_PORT"))
            flags = attrs.get("IPVS_SVC_ATTR_FLAGS")
            service = Service(key, attrs.get("IPVS_SVC_ATTR_SCHED_NAME") or "", (flags or {}).get("flags", 0) if flags else 0,
                              attrs.get("IPVS_SVC_ATTR_TIMEOUT") or 0)
            dests: dict[tuple[str, int], Destination] = {}
            for dmsg in self._ipvs.dest("dump", service=IPVSService(**_service_key(key))):
                d = dmsg.get("IPVS_CMD_ATTR_DEST")
                if d is None:
                    continue
                dest = Destination(d.get("IPVS_DEST_ATTR_ADDR"), d.get("IPVS_DEST_ATTR_PORT"), d.get("IPVS_DEST_ATTR_WEIGHT") or 0,
                                   d.get("IPVS_DEST_ATTR_ACTIVE_CONNS") or 0, d.get("IPVS_DEST_ATTR_INACT_CONNS") or 0)
                dests[dest.key] = dest
            result[key] = (service, dests)
        return result

    # ---- changing -----------------------------------------------------------------------------

    def apply(self, action: str, service: Service, dest: Destination | None = None) -> None:
        """One of ``ACTIONS`` on ``service`` (and ``dest`` for the ``*-dest`` ones)."""
        try:
            netlink.call(self._apply, action, service, dest)
        except Exception as err:  # noqa: BLE001 - pyroute2's NetlinkError and friends: translated once, here
            raise _error(describe(action, service.key, dest), err) from err

    def _apply(self, action: str, service: Service, dest: Destination | None) -> None:
        from pyroute2 import IPVSDest, IPVSService

        key = service.key
        if action in ("add-service", "edit-service"):
            svc = IPVSService(**_service_key(key), sched_name=service.scheduler, timeout=service.timeout,
                              flags={"flags": service.flags, "mask": 0xFFFFFFFF})
            self._ipvs.service("add" if action == "add-service" else "set", service=svc)
        elif action == "del-service":
            self._ipvs.service("del", service=IPVSService(**_service_key(key)))
        else:
            assert dest is not None
            d = IPVSDest(addr=dest.address, port=dest.port, weight=dest.weight, fwd_method=FWD_MASQ)
            command = {"add-dest": "add", "edit-dest": "set", "del-dest": "del"}[action]
            self._ipvs.dest(command, service=IPVSService(**_service_key(key)), dest=d)

    def flush(self, family: int) -> None:
        for service, _ in self.dump(family).values():
            self.apply("del-service", service)

    def set_timeouts(self, tcp: float, tcp_fin: float, udp: float) -> None:
        """IPVS's connection timeouts in seconds (``ipvsadm --set``; upstream
        ``ConfigureTimeouts``); a 0 leaves that one as it is. One ``IPVS_CMD_SET_CONFIG``."""
        from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST
        from pyroute2.netlink.generic import ipvs as genl

        msg = genl.ipvsmsg()
        msg["cmd"] = genl.IPVS_CMD_SET_CONFIG
        msg["version"] = genl.GENL_VERSION
        # pyroute2 types these attributes as raw bytes ("hex"): the kernel reads a host-order u32
        msg["attrs"] = [(name, struct.pack("=I", int(seconds))) for name, seconds in (
            ("IPVS_CMD_ATTR_TIMEOUT_TCP", tcp), ("IPVS_CMD_ATTR_TIMEOUT_TCP_FIN", tcp_fin), ("IPVS_CMD_ATTR_TIMEOUT_UDP", udp))
            if seconds > 0]
        try:
            netlink.call(lambda: self._ipvs._run_with_cleanup(self._ipvs.asyncore._do_request, msg, msg_flags=NLM_F_REQUEST | NLM_F_ACK))
        except Exception as err:  # noqa: BLE001
            raise _error(f"set-timeouts tcp={tcp:g} tcpfin={tcp_fin:g} udp={udp:g}", err) from err
