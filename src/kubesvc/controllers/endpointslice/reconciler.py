"""The EndpointSlice distribution algorithm: which slices to create, update and delete so that a
Service's slices list exactly the endpoints its Pods give, with as few writes as possible.

This is upstream's reconciler (``staging/src/k8s.io/endpointslice/reconciler.go``), described
in the EndpointSlices concept page ("Distribution of EndpointSlices"), as a pure function: it
returns a :class:`Plan`; the controller performs it. Per address type (IPv4/IPv6) and per port
group (``util.port_map_key``):

1. **Existing slices**: drop endpoints no longer desired and replace changed ones with their
   desired version. A slice left empty is deleted; a changed one is updated; one whose only
   difference is the Service's (non-reserved) labels is updated for them; the rest are
   *unchanged*.
2. **Fill the slices already being updated** with new endpoints, fullest first, up to
   ``max_endpoints_per_slice``: they are written anyway, so this costs nothing.
3. **Place the rest**: fewer than a slice's worth left, and an unchanged slice they all fit in?
   Use the one that ends up closest to full. Otherwise create new slices. One create is
   preferred to several updates, and nothing is ever rebalanced.

Then per address type: slices of port groups no longer desired, and slices not owned by this
Service's uid, are deleted. When every slice would be deleted and none created, a *placeholder*
(no ports, no endpoints) is wanted instead, so a Service with no endpoints still has one slice;
an existing identical placeholder is left alone. Finally creates are *recycled*: a create takes
the name of a slice about to be deleted (same address type, owned by the Service) and becomes
an update of it. Slices of address types the Service no longer has are deleted.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kubesvc.controllers.endpointslice import topologycache, trafficdist
from kubesvc.controllers.endpointslice.util import (
    EndpointSet,
    PortMapKey,
    address_types_for_service,
    controller_ref,
    endpoint_ports,
    endpoints_equal_beyond_hash,
    generate_name_prefix,
    owned_by,
    pod_to_endpoint,
    port_map_key,
    should_pod_be_in_endpoints,
    slice_labels,
    topology_hints_annotation_enabled,
)

CONTROLLER_NAME = "endpointslice-controller.k8s.io"
SERVICE_API_VERSION, SERVICE_KIND = "v1", "Service"


@dataclass
class PortGroupStats:
    """Per port group: endpoints desired and slices there will be (the metrics cache's input)."""

    endpoints: int
    slices: int


@dataclass
class Plan:
    creates: list[dict] = field(default_factory=list)
    updates: list[dict] = field(default_factory=list)
    deletes: list[dict] = field(default_factory=list)
    added: int = 0
    removed: int = 0
    # per (address type, port group); the Service's share of the controller's gauges
    port_groups: dict[tuple[str, PortMapKey], PortGroupStats] = field(default_factory=dict)
    # Pods skipped because their Node is unknown: the sync is retried, the writes still happen
    errors: list[str] = field(default_factory=list)
    events: list[topologycache.HintEvent] = field(default_factory=list)  # topology-mode Auto's, for the Service
    hints_populated: bool = False  # Auto hints stand after this plan (for the next sync's Topology)

    @property
    def writes(self) -> int:
        return len(self.creates) + len(self.updates) + len(self.deletes)


@dataclass(frozen=True)
class Topology:
    """What hints need beyond the Service and its slices: each zone's share of the Nodes' CPU
    (``topologycache.cpu_ratios``; None: cannot be computed) and the ``PreferSameTrafficDistribution``
    feature gate (PreferSameZone/PreferSameNode)."""

    zone_cpu: Mapping[str, float] | None = None
    prefer_same_traffic_distribution: bool = True
    hints_populated: bool = False  # Auto hints were set by an earlier sync (the controller remembers: hintsPopulatedByService)


def new_slice(service: dict, ports: list[dict], address_type: str, controller_name: str = CONTROLLER_NAME) -> dict:
    """A slice to create for ``service`` (``newEndpointSlice``): generateName ``<service>-``,
    the Service as controlling owner, its labels."""
    meta = service["metadata"]
    labels, _ = slice_labels({}, service, controller_name)
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "generateName": generate_name_prefix(meta["name"]),
            "namespace": meta.get("namespace", ""),
            "labels": labels,
            "ownerReferences": [controller_ref(service, SERVICE_API_VERSION, SERVICE_KIND)],
        },
        "addressType": address_type,
        "ports": ports,
        "endpoints": [],
    }


def _service_owns(slice_: dict, service: dict) -> bool:
    return owned_by(slice_, service["metadata"].get("uid", ""), SERVICE_API_VERSION, SERVICE_KIND)


def reconcile(service: dict, pods: Iterable[dict], existing_slices: Iterable[dict], nodes: Mapping[str, dict], *,
              max_endpoints_per_slice: int, controller_name: str = CONTROLLER_NAME, topology: Topology | None = None) -> Plan:
    """What to write so the Service's slices match its Pods (``Reconciler.Reconcile``).

    ``existing_slices`` are the slices labelled with the Service's name and managed by this
    controller (without those being deleted); ``nodes`` maps node names to Nodes; ``topology``
    the zones' CPU shares and the feature gate the hints need (default: no shares, gate on).
    """
    plan = Plan()
    pods = list(pods)
    supported = address_types_for_service(service)
    unsupported: list[dict] = []
    by_type: dict[str, list[dict]] = {t: [] for t in supported}
    for slice_ in existing_slices:
        if slice_.get("addressType") in by_type:
            by_type[slice_["addressType"]].append(slice_)
        else:
            unsupported.append(slice_)
    for address_type in supported:
        _reconcile_address_type(plan, service, pods, by_type[address_type], nodes, address_type, max_endpoints_per_slice, controller_name,
                                topology or Topology())
    plan.deletes.extend(unsupported)
    return plan


def _desired_endpoints(service: dict, pods: list[dict], nodes: Mapping[str, dict], address_type: str,
                       errors: list[str]) -> tuple[dict[PortMapKey, EndpointSet], dict[PortMapKey, list[dict]]]:
    endpoints_by_key: dict[PortMapKey, EndpointSet] = {}
    ports_by_key: dict[PortMapKey, list[dict]] = {}
    publish_not_ready = bool((service.get("spec") or {}).get("publishNotReadyAddresses"))
    meta = service["metadata"]
    for pod in pods:
        if not should_pod_be_in_endpoints(pod, include_terminating=True):
            continue
        ports = endpoint_ports(service, pod)
        key = port_map_key(ports)
        endpoints = endpoints_by_key.setdefault(key, EndpointSet())
        ports_by_key.setdefault(key, ports)
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        node = nodes.get(node_name)
        if node is None and not publish_not_ready:
            errors.append(f"skipping Pod {pod['metadata']['name']} for Service {meta.get('namespace')}/{meta['name']}: Node {node_name} Not Found")
            continue
        endpoint = pod_to_endpoint(pod, node, service, address_type)
        if endpoint["addresses"]:
            endpoints.insert(endpoint)
    return endpoints_by_key, ports_by_key


def _reconcile_address_type(plan: Plan, service: dict, pods: list[dict], existing: list[dict], nodes: Mapping[str, dict],
                            address_type: str, max_endpoints: int, controller_name: str, topology: Topology) -> None:
    creates: list[dict] = []
    updates: list[dict] = []
    deletes: list[dict] = []
    existing_by_key: dict[PortMapKey, list[dict]] = {}
    for slice_ in existing:
        if _service_owns(slice_, service):
            existing_by_key.setdefault(port_map_key(slice_.get("ports")), []).append(slice_)
        else:
            deletes.append(slice_)

    desired_by_key, ports_by_key = _desired_endpoints(service, pods, nodes, address_type, plan.errors)
    for key, desired in desired_by_key.items():
        endpoints_count = len(desired)
        group_existing = existing_by_key.get(key, [])
        group = _reconcile_port_group(service, group_existing, desired, ports_by_key[key], address_type, max_endpoints, controller_name)
        plan.added += group.added
        plan.removed += group.removed
        plan.port_groups[(address_type, key)] = PortGroupStats(endpoints_count, len(group_existing) + len(group.creates) - len(group.deletes))
        creates += group.creates
        updates += group.updates
        deletes += group.deletes
    for key, slices in existing_by_key.items():
        if key not in desired_by_key:
            deletes.extend(slices)

    if len(existing) == len(deletes) and not creates:
        placeholder = new_slice(service, [], address_type, controller_name)
        if len(deletes) == 1 and _same_placeholder(deletes[0], placeholder):
            deletes = []
        else:
            creates.append(placeholder)
        plan.port_groups[(address_type, port_map_key([]))] = PortGroupStats(0, 1)

    _reconcile_hints(plan, service, existing, creates, updates, deletes, address_type, topology)
    _recycle(service, creates, updates, deletes)
    plan.creates += creates
    plan.updates += updates
    plan.deletes += deletes


@dataclass
class _GroupResult:
    creates: list[dict]
    updates: list[dict]
    deletes: list[dict]
    added: int
    removed: int


def _reconcile_port_group(service: dict, existing: list[dict], desired: EndpointSet, ports: list[dict], address_type: str,
                          max_endpoints: int, controller_name: str) -> _GroupResult:
    """Steps 1-3 of the module docstring for one port group (``reconcileByPortMapping``)."""
    by_name: dict[str, dict] = {}
    unchanged: list[str] = []  # names, in the order the slices came
    to_update: list[str] = []
    to_delete: list[str] = []
    removed = 0

    # 1. keep desired endpoints (in their desired version), drop the others
    for slice_ in existing:
        name = slice_["metadata"]["name"]
        by_name[name] = slice_
        old_endpoints = slice_.get("endpoints") or []
        kept: list[dict] = []
        endpoint_changed = False
        for endpoint in old_endpoints:
            wanted = desired.get(endpoint)
            if wanted is None:
                continue
            kept.append(wanted)
            if not endpoints_equal_beyond_hash(wanted, endpoint):
                endpoint_changed = True
            desired.delete(endpoint)
        labels, labels_changed = slice_labels(slice_["metadata"].get("labels"), service, controller_name)
        if endpoint_changed or len(kept) != len(old_endpoints):
            removed += max(0, len(old_endpoints) - len(kept))
            if not kept:
                to_delete.append(name)
            else:
                by_name[name] = _copy_with(slice_, endpoints=kept, labels=labels)
                to_update.append(name)
        elif labels_changed:
            by_name[name] = _copy_with(slice_, labels=labels)
            to_update.append(name)
        else:
            unchanged.append(name)

    added = len(desired)

    # 2. top up the slices that are being written anyway, fullest first
    if desired and to_update:
        for name in sorted(to_update, key=lambda n: -len(by_name[n]["endpoints"])):
            endpoints = by_name[name]["endpoints"]
            while desired and len(endpoints) < max_endpoints:
                endpoints.append(desired.pop_any())

    # 3. the rest: into one unchanged slice if they all fit, else into new slices
    creates: list[dict] = []
    while desired:
        target = None
        if len(desired) < max_endpoints and unchanged:
            fill_name = _slice_to_fill([by_name[n] for n in unchanged], len(desired), max_endpoints)
            if fill_name is not None:
                target = by_name[fill_name] = _copy_with(by_name[fill_name])
                unchanged.remove(fill_name)
                to_update.append(fill_name)
        if target is None:
            target = new_slice(service, copy.deepcopy(ports), address_type, controller_name)
            creates.append(target)
        endpoints = target.setdefault("endpoints", [])
        while desired and len(endpoints) < max_endpoints:
            endpoints.append(desired.pop_any())

    return _GroupResult(creates, [by_name[n] for n in to_update], [by_name[n] for n in to_delete], added, removed)


def _slice_to_fill(slices: list[dict], count: int, max_endpoints: int) -> str | None:
    """The slice that ends closest to full after taking ``count`` more, the first exact fit
    winning (``getSliceToFill``)."""
    closest_gap, closest = max_endpoints, None
    for slice_ in slices:
        gap = max_endpoints - (count + len(slice_.get("endpoints") or ()))
        if 0 <= gap < closest_gap:
            closest_gap, closest = gap, slice_["metadata"]["name"]
            if gap == 0:
                break
    return closest


def _copy_with(slice_: dict, **changes) -> dict:
    copied = copy.deepcopy(slice_)
    if "endpoints" in changes:
        copied["endpoints"] = changes["endpoints"]
    else:
        copied["endpoints"] = copied.get("endpoints") or []
    if "labels" in changes:
        copied["metadata"]["labels"] = changes["labels"]
    return copied


def _same_placeholder(existing: dict, placeholder: dict) -> bool:
    """``placeholderSliceCompare``: namespace, labels, owners' UIDs, address type, ports and
    endpoints (nil and empty alike); names and timestamps do not matter."""
    a, b = existing["metadata"], placeholder["metadata"]
    return (a.get("namespace") == b.get("namespace")
            and (a.get("labels") or {}) == (b.get("labels") or {})
            and _owner_refs(a) == _owner_refs(b)
            and existing.get("addressType") == placeholder.get("addressType")
            and (existing.get("ports") or []) == (placeholder.get("ports") or [])
            and (existing.get("endpoints") or []) == (placeholder.get("endpoints") or []))


def _owner_refs(meta: dict) -> list[str]:
    """Owners compared by UID only (kubernetes/kubernetes#141593)."""
    return [ref.get("uid", "") for ref in meta.get("ownerReferences") or ()]


def _reconcile_hints(plan: Plan, service: dict, existing: list[dict], creates: list[dict], updates: list[dict], deletes: list[dict],
                     address_type: str, topology: Topology) -> None:
    """Hints, as upstream's reconciler sets them: ``topology-mode: Auto`` gets proportional zone
    hints (``topologycache``; its Events go into the plan); otherwise every hint is removed from
    the slices being written and ``trafficDistribution``'s heuristic applies (``trafficdist``),
    pulling an unchanged slice whose hints are wrong into the updates."""
    changed = {s["metadata"]["name"] for s in updates + deletes}
    unchanged = [s for s in existing if s["metadata"]["name"] not in changed]
    if topology_hints_annotation_enabled(service):
        moved, events = topologycache.add_hints(creates, updates, unchanged, topology.zone_cpu, address_type, topology.hints_populated)
        updates.extend(moved)
        plan.events += events
        plan.hints_populated = not any(e.reason == topologycache.REASON_DISABLED for e in plan.events)
        return
    if topology.hints_populated:  # the annotation went away
        plan.events.append(topologycache.HintEvent("Warning", topologycache.REASON_DISABLED,
                                                   topologycache.with_address_type(topologycache.TOPOLOGY_AWARE_HINTS_DISABLED, address_type)))
    topologycache.remove_hints(creates + updates)
    mode = trafficdist.heuristic((service.get("spec") or {}).get("trafficDistribution"), topology.prefer_same_traffic_distribution)
    for slice_ in unchanged:
        if trafficdist.needs_update(slice_.get("endpoints") or (), mode):
            updates.append(_copy_with(slice_))
    for slice_ in creates + updates:
        trafficdist.apply(slice_["endpoints"], mode)


def _recycle(service: dict, creates: list[dict], updates: list[dict], deletes: list[dict]) -> None:
    """Turn creates into updates of slices about to be deleted (``finalize``): the last create
    takes the name of the first deletable slice of the same address type owned by the Service."""
    i = 0
    while i < len(deletes) and creates:
        doomed, create = deletes[i], creates[-1]
        if doomed.get("addressType") == create.get("addressType") and _service_owns(doomed, service):
            recycled = copy.deepcopy(create)
            recycled["metadata"].pop("generateName", None)
            recycled["metadata"]["name"] = doomed["metadata"]["name"]  # a fresh object under the old name, as upstream
            creates.pop()
            updates.append(recycled)
            del deletes[i]
        else:
            i += 1
