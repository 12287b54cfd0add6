"""The IPVS table over generic netlink (pyroute2 ``IPVS``), reduced to what the proxier needs:
read every virtual server of one family with its real servers and their connection counts, and
apply one ``plan.Op``. Blocking (netlink calls are quick); the proxier runs it in a thread.

``FakeIpvs`` keeps the same state in memory and rejects what the kernel rejects (adding what
exists, touching what does not), for unit tests of the proxier.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from kubesvc.proxy.ipvs.plan import CurrentRealServer, CurrentVirtualServer, Op
from kubesvc.proxy.ipvs.rules import VirtualServer, VirtualServerKey
from kubesvc.proxy.types import IPV6

PROTOCOLS = {"TCP": socket.IPPROTO_TCP, "UDP": socket.IPPROTO_UDP, "SCTP": 132}
PROTOCOL_NAMES = {number: name for name, number in PROTOCOLS.items()}
FWD_MASQ = 0  # IP_VS_CONN_F_MASQ: NAT to the real server


class IpvsError(Exception):
    """A netlink call failed; carries the operation."""


class NetlinkIpvs:
    """The kernel's IPVS table (``pyroute2.IPVS``); needs the ``ip_vs`` module.

    pyroute2's blocking API drives an asyncio loop of its own, per thread. A loop made by the
    default policy is uvloop's in the proxy, and uvloop cannot open a netlink socket; so every
    call runs on one thread of ours whose loop is a plain selector loop, made for it."""

    def __init__(self) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ipvs-netlink")
        try:
            self._ipvs = self._call(self._open)
        except BaseException:
            self._thread.shutdown(wait=False)
            raise

    @staticmethod
    def _open():
        from pyroute2 import IPVS

        return IPVS(use_event_loop=asyncio.SelectorEventLoop())

    def _call(self, fn, *args):
        return self._thread.submit(fn, *args).result()

    def close(self) -> None:
        try:
            self._call(self._ipvs.close)
        finally:
            self._thread.shutdown(wait=False)

    def dump(self, family: int) -> dict[VirtualServerKey, CurrentVirtualServer]:
        return self._call(self._dump, family)

    def apply(self, op: Op) -> None:
        self._call(self._apply, op)

    def _dump(self, family: int) -> dict[VirtualServerKey, CurrentVirtualServer]:
        from pyroute2 import IPVSService

        af = socket.AF_INET6 if family == IPV6 else socket.AF_INET
        result: dict[VirtualServerKey, CurrentVirtualServer] = {}
        for msg in self._ipvs.service("dump"):
            attrs = msg.get("IPVS_CMD_ATTR_SERVICE")
            if attrs is None or attrs.get("IPVS_SVC_ATTR_AF") != af or attrs.get("IPVS_SVC_ATTR_FWMARK"):
                continue
            protocol = PROTOCOL_NAMES.get(attrs.get("IPVS_SVC_ATTR_PROTOCOL"))
            if protocol is None:
                continue
            key = VirtualServerKey(attrs.get("IPVS_SVC_ATTR_ADDR"), protocol, attrs.get("IPVS_SVC_ATTR_PORT"))
            flags = attrs.get("IPVS_SVC_ATTR_FLAGS")
            server = VirtualServer(key, attrs.get("IPVS_SVC_ATTR_SCHED_NAME") or "", (flags or {}).get("flags", 0) if flags else 0,
                                   attrs.get("IPVS_SVC_ATTR_TIMEOUT") or 0)
            reals: dict[tuple[str, int], CurrentRealServer] = {}
            for dmsg in self._ipvs.dest("dump", service=IPVSService(**_service_key(key))):
                d = dmsg.get("IPVS_CMD_ATTR_DEST")
                if d is None:
                    continue
                reals[(d.get("IPVS_DEST_ATTR_ADDR"), d.get("IPVS_DEST_ATTR_PORT"))] = CurrentRealServer(
                    d.get("IPVS_DEST_ATTR_WEIGHT") or 0, d.get("IPVS_DEST_ATTR_ACTIVE_CONNS") or 0,
                    d.get("IPVS_DEST_ATTR_INACT_CONNS") or 0)
            result[key] = CurrentVirtualServer(server, reals)
        return result

    def _apply(self, op: Op) -> None:
        from pyroute2 import IPVSDest, IPVSService

        key = op.server.key
        try:
            if op.action in ("add-service", "edit-service"):
                service = IPVSService(**_service_key(key), sched_name=op.server.scheduler, timeout=op.server.timeout,
                                      flags={"flags": op.server.flags, "mask": 0xFFFFFFFF})
                self._ipvs.service("add" if op.action == "add-service" else "set", service=service)
            elif op.action == "del-service":
                self._ipvs.service("del", service=IPVSService(**_service_key(key)))
            else:
                assert op.real_server is not None
                ip, port = op.real_server
                dest = IPVSDest(addr=ip, port=port, weight=op.weight, fwd_method=FWD_MASQ)
                command = {"add-dest": "add", "edit-dest": "set", "del-dest": "del"}[op.action]
                self._ipvs.dest(command, service=IPVSService(**_service_key(key)), dest=dest)
        except Exception as err:  # pyroute2's NetlinkError and friends: translate once, here
            raise IpvsError(f"{op}: {err}") from err

    def flush(self, family: int) -> None:
        for current in self.dump(family).values():
            self.apply(Op("del-service", current.server))

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
            self._call(lambda: self._ipvs._run_with_cleanup(self._ipvs.asyncore._do_request, msg, msg_flags=NLM_F_REQUEST | NLM_F_ACK))
        except Exception as err:
            raise IpvsError(f"setting IPVS timeouts: {err}") from err


def _service_key(key: VirtualServerKey) -> dict:
    return {"addr": key.address, "port": key.port, "protocol": PROTOCOLS[key.protocol]}


class FakeIpvs:
    """An in-memory IPVS table with the kernel's refusals; ``connections`` sets a real server's
    (active, inactive) counts as traffic would."""

    def __init__(self, initial: Mapping[VirtualServerKey, CurrentVirtualServer] | None = None):
        self.servers: dict[VirtualServerKey, VirtualServer] = {}
        self.reals: dict[VirtualServerKey, dict[tuple[str, int], CurrentRealServer]] = {}
        for key, current in (initial or {}).items():
            self.servers[key] = current.server
            self.reals[key] = dict(current.real_servers)
        self.calls: list[str] = []

    def dump(self, family: int) -> dict[VirtualServerKey, CurrentVirtualServer]:
        return {key: CurrentVirtualServer(server, dict(self.reals[key])) for key, server in self.servers.items()
                if (":" in key.address) == (family == IPV6)}

    def apply(self, op: Op) -> None:
        key = op.server.key
        self.calls.append(str(op))
        if op.action == "add-service":
            if key in self.servers:
                raise IpvsError(f"{op}: File exists")
            self.servers[key], self.reals[key] = op.server, {}
            return
        if key not in self.servers:
            raise IpvsError(f"{op}: No such process")
        if op.action == "edit-service":
            self.servers[key] = op.server
        elif op.action == "del-service":
            del self.servers[key], self.reals[key]
        else:
            reals = self.reals[key]
            rs = op.real_server
            exists = rs in reals
            if (op.action == "add-dest") == exists:
                raise IpvsError(f"{op}: {'File exists' if exists else 'No such file or directory'}")
            if op.action == "del-dest":
                del reals[rs]
            else:
                old = reals.get(rs, CurrentRealServer(0))
                reals[rs] = CurrentRealServer(op.weight, old.active, old.inactive)

    def connections(self, key: VirtualServerKey, rs: tuple[str, int], active: int, inactive: int = 0) -> None:
        old = self.reals[key][rs]
        self.reals[key][rs] = CurrentRealServer(old.weight, active, inactive)

    def flush(self, family: int) -> None:
        for key in list(self.dump(family)):
            del self.servers[key], self.reals[key]

    def set_timeouts(self, tcp: float, tcp_fin: float, udp: float) -> None:
        self.calls.append(f"set-timeouts tcp={tcp:g} tcpfin={tcp_fin:g} udp={udp:g}")
