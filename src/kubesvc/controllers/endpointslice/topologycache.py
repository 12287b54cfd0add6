"""Topology Aware Routing, ``service.kubernetes.io/topology-mode: Auto``: zone hints in proportion
to each zone's CPU (upstream ``staging/src/k8s.io/endpointslice/topologycache``, KEP-2433, the
"Topology Aware Routing" concept page), as pure functions.

1. **The zones' shares** (``SetNodes``): every Ready Node that is not a control-plane node
   (``node-role.kubernetes.io/control-plane`` or ``/master`` labels) counts with its allocatable
   CPU in its ``topology.kubernetes.io/zone``. One such Node without a zone or CPU, no CPU at
   all, or fewer than two zones: no shares (hints are removed, "Insufficient Node information").
2. **Allocations** (``getAllocations``) for ``n`` ready endpoints: each zone *desires*
   ``share * n``; its *minimum* is ``ceil(desired / (1 + 0.2))`` (a zone may get at most 20 %
   more traffic per endpoint than its fair share: the overload threshold); its *maximum* is its
   minimum plus whatever the minimums leave over. More zones than endpoints, or minimums that
   add up to more than ``n``, and hints are removed (the events below say why).
3. **Hints** (``AddHints``): every ready endpoint is first hinted for its own zone (an endpoint
   without a zone removes every hint). Zones holding more than their maximum then *give*
   endpoints, in slice order, to the zones below their minimum, the neediest first: the
   given endpoint keeps its address and zone but is hinted for the receiving zone.

kube-proxy (``proxy/topology.py``) uses the zone hints only when every ready endpoint has
them and one is for its own zone; so removing them means cluster-wide routing, never none.
Each outcome is an Event on the Service, with upstream's reasons and messages
(``TopologyAwareHintsEnabled``/``TopologyAwareHintsDisabled``, ``..., addressType: IPv4``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kubesvc.api.quantity import parse_quantity

OVERLOAD_THRESHOLD = 0.2
LABEL_TOPOLOGY_ZONE = "topology.kubernetes.io/zone"
EXCLUDED_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")

INSUFFICIENT_NODE_INFO = "Insufficient Node information: allocatable CPU or zone not specified on one or more nodes"
NODES_READY_IN_ONE_ZONE_ONLY = "Nodes only ready in one zone"
INSUFFICIENT_NUMBER_OF_ENDPOINTS = "Insufficient number of endpoints"
MIN_ALLOCATION_EXCEEDS_OVERLOAD_THRESHOLD = "Unable to allocate minimum required endpoints to each zone without exceeding overload threshold"
NO_ZONE_SPECIFIED = "One or more endpoints do not have a Zone specified"
TOPOLOGY_AWARE_HINTS_ENABLED = "Topology Aware Hints has been enabled"
TOPOLOGY_AWARE_HINTS_DISABLED = "Topology Aware Hints has been disabled"
REASON_ENABLED, REASON_DISABLED = "TopologyAwareHintsEnabled", "TopologyAwareHintsDisabled"


@dataclass(frozen=True)
class Allocation:
    minimum: int
    maximum: int
    desired: float


@dataclass(frozen=True)
class HintEvent:
    type: str  # Normal | Warning
    reason: str
    message: str


def with_address_type(message: str, address_type: str) -> str:
    return f"{message}, addressType: {address_type}"


def _ready(node: Mapping) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in (node.get("status") or {}).get("conditions") or ())


def cpu_ratios(nodes: Iterable[Mapping]) -> dict[str, float] | None:
    """Each zone's share of the Ready, non-control-plane Nodes' allocatable CPU; None when
    hints cannot be computed (a counted Node without zone or CPU, no CPU, fewer than two zones)."""
    milli_by_zone: dict[str, int] = {}
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if any(label in labels for label in EXCLUDED_LABELS) or not _ready(node):
            continue
        zone = labels.get(LABEL_TOPOLOGY_ZONE, "")
        cpu = parse_quantity(((node.get("status") or {}).get("allocatable") or {}).get("cpu"))
        if not zone or not cpu:
            return None
        milli_by_zone[zone] = milli_by_zone.get(zone, 0) + int(cpu * 1000)
    total = sum(milli_by_zone.values())
    if total == 0 or len(milli_by_zone) < 2:
        return None
    return {zone: milli / total for zone, milli in milli_by_zone.items()}


def allocations(ratios: Mapping[str, float] | None, endpoints: int) -> tuple[dict[str, Allocation] | None, str | None]:
    """Per zone, how many of ``endpoints`` ready endpoints it should be hinted (or why none can be)."""
    if ratios is None:
        return None, INSUFFICIENT_NODE_INFO
    if len(ratios) < 2:
        return None, NODES_READY_IN_ONE_ZONE_ONLY
    if len(ratios) > endpoints:
        return None, f"{INSUFFICIENT_NUMBER_OF_ENDPOINTS} ({endpoints} endpoints, {len(ratios)} zones)"
    minimums: dict[str, tuple[int, float]] = {}
    remaining = endpoints
    for zone in sorted(ratios):
        desired = ratios[zone] * endpoints
        minimum = math.ceil(desired * (1 / (1 + OVERLOAD_THRESHOLD)))
        remaining -= minimum
        if remaining < 0:
            return None, f"{MIN_ALLOCATION_EXCEEDS_OVERLOAD_THRESHOLD} ({endpoints} endpoints, {len(ratios)} zones)"
        minimums[zone] = (minimum, max(desired, float(minimum)))
    spare = remaining
    return {zone: Allocation(minimum, minimum + spare, desired) for zone, (minimum, desired) in minimums.items()}, None


def _ready_endpoint(endpoint: Mapping) -> bool:
    return bool((endpoint.get("conditions") or {}).get("ready"))


def remove_hints(slices: Iterable[dict]) -> None:
    for slice_ in slices:
        for endpoint in slice_.get("endpoints") or ():
            endpoint.pop("hints", None)


def has_hints(slices: Iterable[Mapping]) -> bool:
    return any("hints" in endpoint for slice_ in slices for endpoint in slice_.get("endpoints") or ())


def _valid_hints(slice_: Mapping, wanted: Mapping[str, Allocation], counted: dict[str, int]) -> dict[str, int] | None:
    """The zone hints of an unchanged slice's ready endpoints, if each has exactly one for a zone
    being allocated and the zones stay within their maximum (``getHintsByZone``); else None."""
    found: dict[str, int] = {}
    for endpoint in slice_.get("endpoints") or ():
        if not _ready_endpoint(endpoint):
            continue
        hints = endpoint.get("hints") or {}
        zones = hints.get("forZones") or []
        if len(zones) != 1 or zones[0].get("name") not in wanted or hints.get("forNodes"):
            return None  # (node hints left by PreferSameNode would keep a proxy on its node: Auto never writes them)
        found[zones[0]["name"]] = found.get(zones[0]["name"], 0) + 1
    if any(counted.get(zone, 0) + n > wanted[zone].maximum for zone, n in found.items()):
        return None
    return found


def add_hints(creates: list[dict], updates: list[dict], unchanged: list[dict], ratios: Mapping[str, float] | None,
              address_type: str, had_hints: bool) -> tuple[list[dict], list[HintEvent]]:
    """Hint the ready endpoints of one address type's slices in proportion to ``ratios``
    (``AddHints``). Unchanged slices keep valid hints and count towards their zones; one with
    missing, foreign or surplus hints is rewritten. Returns the unchanged slices that must now
    be updated (copies, already hinted) and the Events to record (``had_hints``: whether Auto
    hints stood after the previous sync, so enabling is announced once). When hints cannot be
    balanced every hint is removed instead (those slices that carry one are returned too)."""
    ready = sum(1 for s in [*creates, *updates, *unchanged] for e in s.get("endpoints") or () if _ready_endpoint(e))
    wanted, why_not = allocations(ratios, ready)
    if wanted is None:
        return _without_hints(creates, updates, unchanged), [HintEvent("Warning", REASON_DISABLED, with_address_type(why_not or "", address_type))]
    counted: dict[str, int] = {}
    moved: list[dict] = []
    for slice_ in unchanged:
        found = _valid_hints(slice_, wanted, counted)
        if found is None:
            moved.append(copy.deepcopy(slice_))
        else:
            for zone, n in found.items():
                counted[zone] = counted.get(zone, 0) + n
    allocatable = [*creates, *updates, *moved]
    for slice_ in allocatable:
        for endpoint in slice_.get("endpoints") or ():
            if not _ready_endpoint(endpoint):
                endpoint.pop("hints", None)
                continue
            zone = endpoint.get("zone") or ""
            if not zone:
                return (_without_hints(creates, updates, unchanged),
                        [HintEvent("Warning", REASON_DISABLED, with_address_type(NO_ZONE_SPECIFIED, address_type))])
            counted[zone] = counted.get(zone, 0) + 1
            endpoint["hints"] = {"forZones": [{"name": zone}]}
    giving = {zone: counted.get(zone, 0) - a.maximum for zone, a in wanted.items() if counted.get(zone, 0) > a.maximum}
    receiving = {zone: a.minimum - counted.get(zone, 0) for zone, a in wanted.items() if counted.get(zone, 0) < a.minimum}
    _redistribute(allocatable, giving, receiving)
    return moved, ([] if had_hints else [HintEvent("Normal", REASON_ENABLED, with_address_type(TOPOLOGY_AWARE_HINTS_ENABLED, address_type))])


def _without_hints(creates: list[dict], updates: list[dict], unchanged: list[dict]) -> list[dict]:
    """Remove every hint (``RemoveHintsFromSlices``); the unchanged slices that had one, as copies to update."""
    remove_hints([*creates, *updates])
    moved = [copy.deepcopy(s) for s in unchanged if has_hints([s])]
    remove_hints(moved)
    return moved


def _redistribute(slices: list[dict], giving: dict[str, int], receiving: dict[str, int]) -> None:
    """Give endpoints of over-allocated zones to the zones most below their minimum (``redistributeHints``)."""
    for slice_ in slices:
        for endpoint in slice_.get("endpoints") or ():
            if not giving or not receiving:
                return
            zone = endpoint.get("zone") or ""
            if not _ready_endpoint(endpoint) or zone not in giving:
                continue
            target = max(sorted(receiving), key=lambda z: receiving[z])  # the neediest; ties by name
            endpoint["hints"] = {"forZones": [{"name": target}]}
            for counts, key in ((giving, zone), (receiving, target)):
                counts[key] -= 1
                if counts[key] == 0:
                    del counts[key]
