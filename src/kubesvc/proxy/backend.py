"""The contract between the shared proxier (``proxy/proxier.py``) and one kernel mode.

The shared proxier is the skeleton every mode runs in (upstream ``syncProxyRules`` minus the
mode-specific middle): change trackers, the EndpointSliceCache, the bounded-frequency runner,
health, conntrack cleanup, and the one decision full-or-partial. Once per sync it builds one
``SyncRequest`` (the whole desired state plus which Services changed since the last successful
sync) and drives the mode through four steps:

1. ``tidy(state)``: kernel housekeeping left over from earlier syncs (nftables deletes
   chains that went stale a second ago); a failure there makes this sync full, as upstream;
2. ``observe(request, state)``: read what the plan needs from the kernel and make sure the
   fixed hooks exist (nftables lists its table on a full sync; iptables lists the nat chains
   and, on a full sync, ensures the jumps from the built-in chains);
3. ``plan(request, previous, observed) -> KernelPlan``: pure; the kernel input and the
   ``next_state`` the mode is in once the kernel accepted it;
4. ``apply(plan)``: one kernel call (or the short fixed sequence IPVS needs).

Only after ``apply`` returns does the proxier commit ``plan.next_state``: a failed sync leaves
the previous state as it was, and the next sync is full. Failure metrics (``failure_metric``,
and ``partial_failure_metric`` for a failed partial sync), the ``SyncResult``, the gauges of
what was written, starting/stopping the mode's background tasks, and the two-family loop of
``cleanup_leftovers`` are the proxier's; a mode names its counters and gauges, it never
touches ``ProxyMetrics``.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kubesvc.proxy.localdetector import NO_OP_DETECTOR, LocalDetector
from kubesvc.proxy.types import FAMILY_NAMES, IPV4, EndpointsMap, ServicePortMap


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
    # Whether this sync is full: the shared proxier decides (``proxier.full_sync_due``); a
    # request handed to ``Proxier.run_sync`` with ``full=True`` asks for one.
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


S = TypeVar("S")


@dataclass
class KernelPlan(Generic[S]):
    """One sync's kernel input and the state the mode is in once the kernel accepted it."""

    kernel_input: Any
    next_state: S
    no_local_internal: int = 0
    no_local_external: int = 0
    # What is sent (``Mode.written_gauge``): iptables rules per table, nftables chains/rules/elements.
    written: dict[str, int] = field(default_factory=dict)
    # What the mode owns in the kernel after it (``Mode.total_gauge``), same keys.
    totals: dict[str, int] = field(default_factory=dict)


class Mode(Generic[S]):
    """One kernel mode for one IP family (see the module docstring for the four steps).

    The defaults do nothing, so a mode overrides only the steps it has."""

    mode = ""
    # ``ProxyMetrics`` attributes: counters (labelled by family) of failed syncs, and gauges
    # (labelled by the ``written``/``totals`` key and family) of what a sync wrote and owns.
    failure_metric = ""
    partial_failure_metric = ""
    cleanup_failure_metric = ""
    written_gauge = ""
    total_gauge = ""

    def __init__(self, options: ProxyOptions):
        self.options = options
        self.family = options.family
        self.family_name = FAMILY_NAMES[options.family]

    def initial_state(self) -> S:
        return None  # type: ignore[return-value]

    async def tidy(self, state: S) -> S:
        """Housekeeping before the full/partial decision; returns the state after it. Raising
        counts ``cleanup_failure_metric`` and makes this sync full (it is not a failed sync)."""
        return state

    async def observe(self, request: SyncRequest, state: S) -> Any:
        """Kernel reads (and idempotent fixed setup) the plan needs; raising fails the sync."""
        return None

    def plan(self, request: SyncRequest, previous: S, observed: Any) -> KernelPlan[S]:
        raise NotImplementedError

    async def apply(self, plan: KernelPlan[S]) -> None:
        """Hand ``plan.kernel_input`` to the kernel; raising fails the sync."""

    def background(self, request_full_sync: Callable[[], None], state: Callable[[], S]) -> list[Coroutine[Any, Any, None]]:
        """Checks that run between syncs (iptables canaries, the nftables tamper check) and call
        ``request_full_sync`` when someone else changed the kernel; ``state()`` is the committed state."""
        return []

    async def close(self) -> None:
        """After the background tasks are cancelled: drop what lives only while running."""
