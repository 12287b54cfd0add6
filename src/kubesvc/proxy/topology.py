"""Which endpoints a packet to a Service port may go to (upstream ``pkg/proxy/topology.go``,
``CategorizeEndpoints``), as one pure function shared by every mode.

* **Cluster endpoints** serve ``internalTrafficPolicy: Cluster`` / ``externalTrafficPolicy:
  Cluster``: every ready endpoint, narrowed to this node's zone (or this node) when every ready
  endpoint carries hints and some hint names us. With no ready endpoint at all, the endpoints
  that are still serving while terminating take over (KEP-1669, topology ignored).
* **Local endpoints** serve a ``Local`` policy: the ready endpoints on this node; if none,
  the serving-and-terminating ones on this node (so a rolling update of the last local Pod
  does not drop traffic while it drains).
* ``all_reachable`` is the union both policies may use (the endpoint chains to program).
* ``has_any`` tells "no endpoints anywhere" (REJECT) from "none usable here" (DROP).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kubesvc.proxy.types import Endpoint, ServicePort

LABEL_TOPOLOGY_ZONE = "topology.kubernetes.io/zone"
PREFER_SAME_ZONE = "PreferSameZone"
PREFER_SAME_NODE = "PreferSameNode"


@dataclass(frozen=True, slots=True)
class CategorizedEndpoints:
    cluster: tuple[Endpoint, ...] = ()
    local: tuple[Endpoint, ...] = ()
    all_reachable: tuple[Endpoint, ...] = ()
    has_any: bool = False


NO_ENDPOINTS = CategorizedEndpoints()


def categorize_endpoints(
    endpoints: Sequence[Endpoint],
    service_port: ServicePort,
    node_name: str,
    node_labels: Mapping[str, str] | None = None,
    *,
    prefer_same_node: bool = False,
) -> CategorizedEndpoints:
    """``prefer_same_node`` is the ``PreferSameTrafficDistribution`` feature gate."""
    if not endpoints:
        return NO_ENDPOINTS
    cluster: tuple[Endpoint, ...] = ()
    has_any = False
    if service_port.uses_cluster_endpoints:
        zone = (node_labels or {}).get(LABEL_TOPOLOGY_ZONE, "")
        mode = topology_mode_from_hints(endpoints, node_name, zone, prefer_same_node)
        if mode:
            cluster = tuple(ep for ep in endpoints if ep.ready and _available_for_topology(ep, mode, node_name, zone))
        else:  # no topology: every ready endpoint (the common case, once per Service port per full sync)
            cluster = tuple([ep for ep in endpoints if ep.ready])
        if not cluster:
            cluster = tuple(ep for ep in endpoints if ep.serving and ep.terminating)
        has_any = bool(cluster)
        if not service_port.uses_local_endpoints:
            return CategorizedEndpoints(cluster, (), cluster, has_any)
    else:
        mode = ""

    has_local_ready = has_local_serving_terminating = False
    for ep in endpoints:
        if ep.ready:
            has_any = True
            has_local_ready = has_local_ready or ep.is_local
        elif ep.serving and ep.terminating:
            has_any = True
            has_local_serving_terminating = has_local_serving_terminating or ep.is_local
    if has_local_ready:
        local = tuple(ep for ep in endpoints if ep.is_local and ep.ready)
    elif has_local_serving_terminating:
        local = tuple(ep for ep in endpoints if ep.is_local and ep.serving and ep.terminating)
    else:
        local = ()

    if not service_port.uses_cluster_endpoints:
        return CategorizedEndpoints((), local, local, has_any)
    if mode == "" and has_local_ready:
        # Every ready local endpoint is already a cluster endpoint.
        return CategorizedEndpoints(cluster, local, cluster, has_any)
    seen = {ep.endpoint for ep in cluster}
    union = cluster + tuple(ep for ep in local if ep.endpoint not in seen)
    return CategorizedEndpoints(cluster, local, union, has_any)


def topology_mode_from_hints(endpoints: Sequence[Endpoint], node_name: str, zone: str, prefer_same_node: bool) -> str:
    """Hints count only when every ready endpoint has them and some endpoint is hinted to us;
    otherwise a partial rollout of hints would send all traffic to the hinted few."""
    ready = [ep for ep in endpoints if ep.ready]
    if not ready:
        return ""
    if prefer_same_node and all(ep.node_hints for ep in ready) and any(node_name in ep.node_hints for ep in ready):
        return PREFER_SAME_NODE
    if all(ep.zone_hints for ep in ready) and any(zone in ep.zone_hints for ep in ready):
        return PREFER_SAME_ZONE
    return ""


def _available_for_topology(ep: Endpoint, mode: str, node_name: str, zone: str) -> bool:
    if mode == PREFER_SAME_NODE:
        return node_name in ep.node_hints
    if mode == PREFER_SAME_ZONE:
        return zone in ep.zone_hints
    return True
