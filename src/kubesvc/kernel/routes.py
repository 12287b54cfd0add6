"""Routes to other nodes' Pod CIDRs, marked as ours by their routing protocol number.

What the cross-node Pod network (``kubesvc.podnetwork``) installs is one route per remote
podCIDR, as flannel's host-gw backend and kube-router's direct routes do::

    ip route replace 10.244.3.0/24 via 192.168.77.13 proto 77             # routes (host-gw)
    ip route replace 10.244.3.0/24 via 10.244.3.0 dev kubesvc.1 onlink proto 77   # vxlan

The second is flannel's VXLAN route: the next hop is the remote node's VTEP address (the first
address of its podCIDR, held by its VXLAN device), which no connected route covers, so it is
``onlink``: the kernel takes the gateway as reachable on that device and resolves it through
the permanent neighbour entry the VXLAN module writes (``kernel.vxlan``).

Every route we add carries ``proto 77`` (``RTPROT_KUBESVC``; numbers above ``RTPROT_STATIC``
(4) are free for routing daemons, iproute2's ``rt_protos`` names 8..192 for theirs, and 77 is
none of them). A dump filtered by that number is exactly what we made: a restarted agent finds
the routes of a node that left while it was down, and ``stop`` deletes them all, without a
record file and without ever touching a route someone else added (kube-router does the same
with its own protocol number, flannel keeps the list of leases it routed in memory).

Operations are values printing as their ``ip`` line and run by ``kernel.links.Session`` like
the Pod network's (:func:`apply_async`); :func:`read_routes` is the dump, parsed by the pure
:func:`parse_routes`. ``kernel/fake/overlay.py`` is the stateful fake of this module and of
``kernel.vxlan``.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

RTPROT_KUBESVC = 77
RTNH_F_ONLINK = 4


@dataclass(frozen=True, order=True)
class PodRoute:
    """A route to a remote podCIDR ``dst`` through ``via``; ``dev`` None lets the kernel pick the
    link whose connected route covers ``via`` (host-gw), ``onlink`` forces ``via`` onto ``dev``."""

    dst: str
    via: str
    dev: str | None = None
    onlink: bool = False

    def __str__(self) -> str:
        return (f"{self.dst} via {self.via}" + (f" dev {self.dev}" if self.dev else "") + (" onlink" if self.onlink else "")
                + f" proto {RTPROT_KUBESVC}")


@dataclass(frozen=True)
class ReplaceRoute:
    route: PodRoute

    def __str__(self) -> str:
        return f"route replace {self.route}"

    def run(self, ipr: Any) -> None:
        r = self.route
        extra: dict[str, Any] = {"oif": ipr.index(r.dev)} if r.dev else {}
        if r.onlink:
            extra["flags"] = RTNH_F_ONLINK
        ipr.route("replace", dst=str(ipaddress.ip_network(r.dst)), gateway=r.via, proto=RTPROT_KUBESVC, **extra)


@dataclass(frozen=True)
class DeleteRoute:
    """Delete our route to ``dst`` (only one with our protocol number)."""

    dst: str

    def __str__(self) -> str:
        return f"route del {self.dst} proto {RTPROT_KUBESVC}"

    def run(self, ipr: Any) -> None:
        ipr.route("del", dst=str(ipaddress.ip_network(self.dst)), proto=RTPROT_KUBESVC)


def parse_routes(messages: Iterable[Mapping[str, Any]], names: Mapping[int, str]) -> set[PodRoute]:
    """Our routes from ``RTM_NEWROUTE`` messages (pyroute2's ``rtmsg`` or dicts with its keys:
    ``family``, ``dst_len``, ``proto``, ``flags``, ``RTA_DST``, ``RTA_GATEWAY``, ``RTA_OIF``);
    ``names`` maps interface indexes to names. A route without an explicit device (host-gw)
    comes back with the one the kernel chose: ``dev`` is kept only for ``onlink`` routes, the
    only ones we name a device for."""
    found = set()
    for msg in messages:
        if msg.get("proto") != RTPROT_KUBESVC or not msg.get("RTA_GATEWAY"):
            continue
        family = msg.get("family")
        dst = msg.get("RTA_DST") or ("::" if family == socket.AF_INET6 else "0.0.0.0")
        onlink = bool((msg.get("flags") or 0) & RTNH_F_ONLINK)
        network = ipaddress.ip_network(f"{dst}/{msg.get('dst_len') or 0}", strict=False)
        dev = names.get(msg.get("RTA_OIF") or 0) if onlink else None
        found.add(PodRoute(str(network), msg.get("RTA_GATEWAY"), dev, onlink))
    return found
