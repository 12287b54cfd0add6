"""What to change in the kernel's IPVS table to reach the desired virtual servers (pure; upstream
``syncService``/``syncEndpoint``/``cleanLegacyService`` and ``graceful_termination.go``).

The kernel's table is read back every sync (it is the truth: another process, a restart or a
failed call may have changed it), and the plan is the difference:

* a virtual server missing → add it and its real servers; one with another scheduler, flags or
  timeout → edit it in place (connections survive);
* a real server missing → add it at weight 1; one at another weight (e.g. 0 from an earlier
  graceful removal of an endpoint that came back) → set weight 1;
* a real server no longer wanted → **graceful termination**: TCP real servers with connections
  (active + inactive) are set to weight 0 — the scheduler sends them nothing new while the
  existing connections finish — and deleted by a later sync once they have none; real servers
  of UDP/SCTP or without connections are deleted at once (``IsRsGracefulTerminationNeeded``);
* a virtual server no longer wanted → delete it, unless its address is in
  ``--ipvs-exclude-cidrs`` (someone else's).

``draining`` in the result lists the real servers left at weight 0, so the proxier knows to
check again soon (upstream retries every minute).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kubesvc.proxy.ipvs.rules import VirtualServer, VirtualServerKey, is_excluded

RealServerKey = tuple[str, int]


@dataclass(frozen=True)
class CurrentRealServer:
    weight: int = 1
    active: int = 0
    inactive: int = 0


@dataclass(frozen=True)
class CurrentVirtualServer:
    """A virtual server as the kernel has it (``real_servers`` of ``server`` unused)."""

    server: VirtualServer
    real_servers: Mapping[RealServerKey, CurrentRealServer] = field(default_factory=dict)


@dataclass(frozen=True)
class Op:
    """One netlink call: ``add-service``/``edit-service``/``del-service`` (``server``),
    ``add-dest``/``edit-dest``/``del-dest`` (``server.key``, ``real_server``, ``weight``)."""

    action: str
    server: VirtualServer
    real_server: RealServerKey | None = None
    weight: int = 0

    def __str__(self) -> str:
        if self.real_server is None:
            return f"{self.action} {self.server.key}"
        ip, port = self.real_server
        host = f"[{ip}]" if ":" in ip else ip
        return f"{self.action} {self.server.key} -> {host}:{port} weight {self.weight}"


@dataclass(frozen=True)
class Plan:
    ops: tuple[Op, ...]
    draining: tuple[tuple[VirtualServerKey, RealServerKey], ...] = ()


def graceful_termination_needed(protocol: str) -> bool:
    """Only TCP real servers wait for their connections (UDP/SCTP have none to finish)."""
    return protocol == "TCP"


def plan(desired: Mapping[VirtualServerKey, VirtualServer], current: Mapping[VirtualServerKey, CurrentVirtualServer],
         exclude_cidrs: Iterable[str] = ()) -> Plan:
    exclude_cidrs = tuple(exclude_cidrs)
    ops: list[Op] = []
    draining: list[tuple[VirtualServerKey, RealServerKey]] = []
    for key in sorted(desired):
        want = desired[key]
        have = current.get(key)
        if have is None:
            ops.append(Op("add-service", want))
            existing: Mapping[RealServerKey, CurrentRealServer] = {}
        else:
            if not want.same_settings(have.server):
                ops.append(Op("edit-service", want))
            existing = have.real_servers
        for rs in sorted(want.real_servers):
            weight = want.real_servers[rs]
            if rs not in existing:
                ops.append(Op("add-dest", want, rs, weight))
            elif existing[rs].weight != weight:
                ops.append(Op("edit-dest", want, rs, weight))
        for rs in sorted(set(existing) - set(want.real_servers)):
            state = existing[rs]
            if graceful_termination_needed(key.protocol) and state.active + state.inactive > 0:
                draining.append((key, rs))
                if state.weight != 0:
                    ops.append(Op("edit-dest", want, rs, 0))
            else:
                ops.append(Op("del-dest", want, rs, state.weight))
    for key in sorted(set(current) - set(desired)):
        if not is_excluded(key.address, exclude_cidrs):
            ops.append(Op("del-service", current[key].server))
    return Plan(tuple(ops), tuple(draining))
