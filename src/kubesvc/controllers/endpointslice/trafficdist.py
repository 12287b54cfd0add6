"""Hints for ``spec.trafficDistribution`` (upstream ``staging/src/k8s.io/endpointslice/trafficdist``,
KEP-4444 and KEP-3015), as pure functions over slices' endpoints.

* ``PreferSameZone``, and ``PreferClose`` (its older spelling, deprecated since 1.34): every
  *ready* endpoint with a zone gets ``hints.forZones: [its zone]`` (one without a zone: none).
* ``PreferSameNode``: every ready endpoint gets ``hints.forNodes: [its node]`` *and* its zone
  hint, so a proxy that does not know node hints (or whose node has no endpoint) still prefers
  the zone.
* Anything else (unset, unknown): no hints at all, on any endpoint.

``PreferSameZone`` and ``PreferSameNode`` exist behind the ``PreferSameTrafficDistribution``
feature gate (alpha in 1.33, beta and on by default in 1.34, our default); with it off they are
treated as unset. Not-ready endpoints are left as they are by the two heuristics (upstream skips
them). ``service.kubernetes.io/topology-mode: Auto`` wins over the field (``topologycache``).

The proxy's side is ``proxy/topology.py`` (``CategorizeEndpoints``): node hints first when
every ready endpoint has them and one names this node, then zone hints likewise, else every
endpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

PREFER_CLOSE = "PreferClose"
PREFER_SAME_ZONE = "PreferSameZone"
PREFER_SAME_NODE = "PreferSameNode"
ZONE, NODE = "zone", "node"


def heuristic(traffic_distribution: str | None, prefer_same_enabled: bool = True) -> str:
    """``zone``, ``node`` or "" (no hints) for a Service's ``trafficDistribution``."""
    if traffic_distribution == PREFER_CLOSE or (prefer_same_enabled and traffic_distribution == PREFER_SAME_ZONE):
        return ZONE
    if prefer_same_enabled and traffic_distribution == PREFER_SAME_NODE:
        return NODE
    return ""


def _ready(endpoint: Mapping) -> bool:
    return bool((endpoint.get("conditions") or {}).get("ready"))


def wanted_hints(endpoint: Mapping, mode: str) -> dict | None:
    """The hints a ready endpoint should carry under ``mode``."""
    hints: dict = {}
    if mode == NODE and endpoint.get("nodeName"):
        hints["forNodes"] = [{"name": endpoint["nodeName"]}]
    if mode in (ZONE, NODE) and endpoint.get("zone"):
        hints["forZones"] = [{"name": endpoint["zone"]}]
    return hints or None


def needs_update(endpoints: Iterable[Mapping], mode: str) -> bool:
    """Whether an otherwise unchanged slice has missing, wrong or stale hints."""
    for endpoint in endpoints:
        if not mode:
            if "hints" in endpoint:
                return True
        elif _ready(endpoint) and endpoint.get("hints") != wanted_hints(endpoint, mode):
            return True
    return False


def apply(endpoints: Iterable[dict], mode: str) -> None:
    for endpoint in endpoints:
        if mode and not _ready(endpoint):
            continue
        hints = wanted_hints(endpoint, mode) if mode else None
        if hints is None:
            endpoint.pop("hints", None)
        else:
            endpoint["hints"] = hints
