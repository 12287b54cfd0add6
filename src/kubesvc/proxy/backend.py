"""The contract between the shared proxier (``proxy/proxier.py``) and one kernel mode.

The shared proxier owns everything every mode has in common (change trackers, the
EndpointSliceCache, the bounded-frequency runner, health, metrics of changes and timings,
conntrack cleanup, the decision full-or-partial). Once per sync it hands the mode one
``SyncRequest``: the whole desired state plus which Services changed since the last
successful sync. The mode turns it into one kernel transaction (pure ``rules.py``), applies it
(thin ``proxier.py``) and answers with a ``SyncResult``, or raises ``SyncFailed`` after
counting its own failure metric. A failed sync makes the next request full.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from kubesvc.proxy.localdetector import NO_OP_DETECTOR, LocalDetector
from kubesvc.proxy.types import IPV4, EndpointsMap, ServicePortMap


@dataclass(frozen=True)
class ProxyOptions:
    """Per-family settings the rule builders need (from flags / KubeProxyConfiguration)."""

    family: int = IPV4
    node_name: str = ""
    masquerade_all: bool = False
    masquerade_bit: int = 14
    local_detector: LocalDetector = NO_OP_DETECTOR
    localhost_nodeports: bool = True  # iptables only, IPv4 only
    prefer_same_node: bool = False  # feature gate PreferSameTrafficDistribution

    @property
    def masquerade_mark(self) -> str:
        """``fmt.Sprintf("%#08x", 1<<bit)``: Go pads the digits, not the prefix, so the default
        bit 14 is ``0x00004000``."""
        return f"0x{1 << self.masquerade_bit:08x}"


@dataclass(frozen=True)
class SyncRequest:
    full: bool
    service_ports: ServicePortMap
    endpoints: EndpointsMap
    # ``namespace/name`` of Services whose Service object or endpoints changed since the last
    # successful sync; a partial sync rewrites only their chains.
    changed_services: frozenset[str] = frozenset()
    node_labels: Mapping[str, str] = field(default_factory=dict)
    # This family's node addresses that accept NodePorts; None = every local address
    # (``--nodeport-addresses`` unset in iptables mode, or ``0.0.0.0/0``).
    nodeport_ips: tuple[str, ...] | None = None
    # The node's primary IP of this family (upstream ``proxier.nodeIP``), "" if unknown.
    node_ip: str = ""
    # ServiceCIDR ``spec.cidrs`` of this family (nftables drops unallocated ClusterIPs in them).
    service_cidrs: tuple[str, ...] = ()


@dataclass
class SyncResult:
    full: bool
    # Service ports with endpoints but none local for a Local policy
    # (``sync_proxy_rules_no_local_endpoints_total{traffic_policy}``).
    no_local_internal: int = 0
    no_local_external: int = 0
    # Seconds spent building the kernel input vs. waiting for the kernel tool (bench/proxy.py).
    build_seconds: float = 0.0
    kernel_seconds: float = 0.0
    # What was sent: iptables rules per table, or nftables chains/rules/elements.
    written: dict[str, int] = field(default_factory=dict)


class SyncFailed(Exception):
    """The kernel rejected the transaction (or a tool failed); retry with a full sync."""


class Backend(Protocol):
    mode: str

    async def sync(self, request: SyncRequest) -> SyncResult: ...

    async def start(self, request_full_sync: Callable[[], None]) -> None:
        """Start background checks (iptables canary chains); call ``request_full_sync`` when
        someone else changed the kernel state."""

    async def stop(self) -> None: ...
