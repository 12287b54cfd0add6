"""Mirroring a custom Endpoints object into EndpointSlices: the pure decision.

A Service without a selector has no Pods to take endpoints from: its Endpoints object is
written by someone else (a person, an operator, a controller for something outside the
cluster). kube-proxy and everything newer read EndpointSlices only, so the mirroring
controller copies such Endpoints into slices it manages, labelled
``endpointslice.kubernetes.io/managed-by: endpointslicemirroring-controller.k8s.io`` and
``kubernetes.io/service-name: <name>``. This is upstream's
``pkg/controller/endpointslicemirroring/{reconciler,reconciler_helpers,utils}.go`` as one pure
function, :func:`reconcile`, returning a :class:`Plan` that the controller performs.

**Whether to mirror at all** (:func:`skip_reason`). Nothing is mirrored, and every mirrored
slice is deleted, when the Endpoints is gone; when it carries the label
``endpointslice.kubernetes.io/skip-mirror: "true"`` (the legacy Endpoints controller sets it on
the Endpoints it writes itself: those Services already have slices; other values such as
``"false"`` do not count) or the old leader-election annotation
``control-plane.alpha.kubernetes.io/leader``; when the Service of the same name is missing; or
when that Service has a selector (then the EndpointSlice controller owns its slices).

**Canonical subsets** (:func:`repack_subsets`, upstream ``RepackSubsets``). The Endpoints API
allows one address to appear in many subsets. Subsets are first expanded to (port, address,
ready) facts, addresses identified by (IP, targetRef.uid), not-ready winning over ready, and
regrouped: one subset per distinct set of addresses, carrying every port those addresses
serve. So two subsets with the same port and different addresses become one, and two subsets
with different ports and the same address become one subset with two ports.

**One slice per subset and address family.** For each repacked subset, ``addresses`` (ready)
then ``notReadyAddresses`` (ready=false) are taken until ``max_endpoints_per_subset`` (default
1000, the EndpointSlice API's own cap) are in; an invalid IP is skipped and does not count.
Each valid address becomes an endpoint with ``addresses: [<canonical IP>]``,
``conditions: {ready}`` only, and hostname, nodeName and targetRef copied. Endpoints are split by
family: a slice holds one ``addressType``, so a dual-stack subset gives two slices. The slice
key is (address type, port map key). Skipped addresses are reported as Warning Events on the
Endpoints: ``InvalidIPAddress`` and ``TooManyAddressesToMirror``.

**Slice content** (:func:`new_endpoint_slice`). All the Endpoints' labels, with the two reserved
ones above overwriting; its annotations except ``endpoints.kubernetes.io/last-change-trigger-time``
and ``kubectl.kubernetes.io/last-applied-configuration``; the Endpoints as controlling owner
(``v1``/``Endpoints``), so garbage collection removes the slices with it; generateName
``<endpoints-name>-``.

**Few writes** (``reconcileByPortMapping``). Per key, only the first existing slice is kept;
the others are deleted. The kept one is left alone when nothing changed: no endpoint added,
removed or changed (identity = addresses, hostname, targetRef namespace/name; changed = any
other field differs), the Endpoints' labels equal the slice's labels minus the two reserved ones,
the filtered annotations equal the slice's, and no Endpoints ownerReference of the slice names
another uid (the Endpoints was deleted and recreated). Otherwise it is rewritten whole. A key
with nothing desired loses its slices; slices of keys no longer desired are deleted.

**Finally** (``finalize``), creates are *recycled*: a create takes the name of a slice about to
be deleted with the same address type and becomes an update of it. While the Endpoints is being
deleted (``deletionTimestamp``) nothing is created.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field

from kubesvc.controllers.endpointslice.reconciler import PortGroupStats
from kubesvc.controllers.endpointslice.util import (
    ANNOTATION_TRIGGER_TIME,
    LABEL_MANAGED_BY,
    LABEL_SERVICE_NAME,
    LABEL_SKIP_MIRROR,
    EndpointSet,
    PortMapKey,
    controller_ref,
    endpoints_equal_beyond_hash,
    generate_name_prefix,
    port_map_key,
)
from kubesvc.util.ipnet import FAMILY_NAMES, IPV4_PROTOCOL, IPV6_PROTOCOL, parse_ip_sloppy

CONTROLLER_NAME = "endpointslicemirroring-controller.k8s.io"
ANNOTATION_LEADER = "control-plane.alpha.kubernetes.io/leader"  # resourcelock.LeaderElectionRecordAnnotationKey
ANNOTATION_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
DEFAULT_MAX_ENDPOINTS_PER_SUBSET = 1000
ENDPOINTS_API_VERSION, ENDPOINTS_KIND = "v1", "Endpoints"

# Event reasons (upstream events.go)
REASON_INVALID_IP_ADDRESS = "InvalidIPAddress"
REASON_TOO_MANY_ADDRESSES = "TooManyAddressesToMirror"

SliceKey = tuple[str, PortMapKey]  # (addressType, port map key): upstream addrTypePortMapKey


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str


@dataclass
class Plan:
    """What to write for one Endpoints, and what to report about it.

    ``mirrored`` is False when the Endpoints is not (or no longer) mirrored: then ``deletes``
    holds every mirrored slice, ``reason`` says why, and nothing else applies.
    """

    creates: list[dict] = field(default_factory=list)
    updates: list[dict] = field(default_factory=list)
    deletes: list[dict] = field(default_factory=list)
    mirrored: bool = True
    reason: str = ""
    # endpoint changes (the *_per_sync histograms)
    added: int = 0
    updated: int = 0
    removed: int = 0
    # addresses not mirrored: invalid IPs plus those over the per-subset cap
    skipped: int = 0
    invalid: int = 0
    events: list[Event] = field(default_factory=list)
    port_groups: dict[SliceKey, PortGroupStats] = field(default_factory=dict)

    @property
    def writes(self) -> int:
        return len(self.creates) + len(self.updates) + len(self.deletes)


# ---- whether to mirror -----------------------------------------------------------------------

def skip_mirror(labels: dict | None) -> bool:
    """The skip-mirror label is set to exactly ``"true"``."""
    return (labels or {}).get(LABEL_SKIP_MIRROR) == "true"


def has_leader_election(annotations: dict | None) -> bool:
    return ANNOTATION_LEADER in (annotations or {})


def should_mirror(endpoints: dict | None) -> bool:
    """Upstream ``shouldMirror``: an Endpoints, without skip-mirror=true, without the leader
    annotation. (Whether its Service allows mirroring is checked separately.)"""
    if endpoints is None:
        return False
    meta = endpoints.get("metadata") or {}
    return not skip_mirror(meta.get("labels")) and not has_leader_election(meta.get("annotations"))


def has_selector(service: dict) -> bool:
    """``spec.selector != nil``; an empty map counts as none, as it does once it has been
    through the apiserver (it serializes with omitempty)."""
    return bool((service.get("spec") or {}).get("selector"))


def skip_reason(endpoints: dict | None, service: dict | None) -> str | None:
    """Why the mirrored slices must go (upstream ``syncEndpoints`` order), or None to mirror."""
    if endpoints is None:
        return "Endpoints not found"
    if not should_mirror(endpoints):
        return "Endpoints should not be mirrored"
    if service is None:
        return "Service not found"
    if has_selector(service):
        return "Service now has selector"
    return None


# ---- canonical subsets -----------------------------------------------------------------------

def _address_key(address: dict) -> tuple[str, str]:
    return address.get("ip", ""), (address.get("targetRef") or {}).get("uid", "")


def _port_identity(port: dict) -> tuple:
    return port.get("name") or "", port.get("port"), port.get("protocol") or "", port.get("appProtocol")


def _address_sort_key(address: dict) -> tuple:
    """``LessEndpointAddress``: IP bytes, then no targetRef before a targetRef, then its uid."""
    ref = address.get("targetRef")
    return address.get("ip", "").encode(), ref is not None, (ref or {}).get("uid", "")


def _port_sort_key(port: dict) -> tuple:
    name, number, protocol, app_protocol = _port_identity(port)
    return name, number if isinstance(number, int) else 0, protocol, app_protocol or ""


def repack_subsets(subsets: Iterable[dict] | None) -> list[dict]:
    """The canonical form of Endpoints subsets (upstream ``RepackSubsets``): one subset per
    distinct set of (address, ready), each with every port that set serves.

    Addresses are identified by (IP, targetRef.uid); the first occurrence supplies the other
    fields. For one port, not-ready wins over ready. Subsets without ports or without
    addresses vanish. Addresses are sorted by IP then uid, ports and subsets in a fixed order
    (upstream sorts those by hash; the order carries no meaning).
    """
    all_addresses: dict[tuple[str, str], dict] = {}
    ports: dict[tuple, dict] = {}
    ready_by_port: dict[tuple, dict[tuple[str, str], bool]] = {}

    def map_address(address: dict, port: dict, ready: bool) -> None:
        key = _address_key(address)
        all_addresses.setdefault(key, copy.deepcopy(address))
        port_id = _port_identity(port)
        ports.setdefault(port_id, port)
        readiness = ready_by_port.setdefault(port_id, {})
        if readiness.get(key, True):  # unseen, or ready so far: not ready always wins
            readiness[key] = ready

    for subset in subsets or ():
        for port in subset.get("ports") or ():
            for address in subset.get("addresses") or ():
                map_address(address, port, True)
            for address in subset.get("notReadyAddresses") or ():
                map_address(address, port, False)

    ports_by_set: dict[tuple, list[dict]] = {}
    for port_id, readiness in ready_by_port.items():
        address_set = tuple(sorted(readiness.items()))
        ports_by_set.setdefault(address_set, []).append(copy.deepcopy(ports[port_id]))

    final = []
    for address_set, set_ports in ports_by_set.items():
        ready = sorted((all_addresses[key] for key, is_ready in address_set if is_ready), key=_address_sort_key)
        not_ready = sorted((all_addresses[key] for key, is_ready in address_set if not is_ready), key=_address_sort_key)
        subset: dict = {}
        if ready:
            subset["addresses"] = [copy.deepcopy(a) for a in ready]
        if not_ready:
            subset["notReadyAddresses"] = [copy.deepcopy(a) for a in not_ready]
        subset["ports"] = sorted(set_ports, key=_port_sort_key)
        final.append(subset)
    final.sort(key=lambda s: ([_port_sort_key(p) for p in s["ports"]],
                              [_address_sort_key(a) for a in s.get("addresses", [])],
                              [_address_sort_key(a) for a in s.get("notReadyAddresses", [])]))
    return final


# ---- addresses and ports to EndpointSlice fields ---------------------------------------------

def parse_ip(text: str) -> tuple[str, str] | None:
    """(canonical string, address type) for an IP as Go's ``ParseIPSloppy`` reads it (IPv4 with
    leading zeros allowed, as decimal), or None if it is not an IP. An IPv4-mapped IPv6 address
    is IPv4, as Go's ``To4`` says."""
    ip = parse_ip_sloppy(text) if isinstance(text, str) else None
    return (str(ip), FAMILY_NAMES[ip.version]) if ip is not None else None


def address_to_endpoint(address: dict, ready: bool) -> tuple[dict, str] | None:
    """An Endpoints address as a slice endpoint, with its address type (``addressToEndpoint``);
    None for an invalid IP."""
    parsed = parse_ip(address.get("ip", ""))
    if parsed is None:
        return None
    ip, address_type = parsed
    endpoint: dict = {"addresses": [ip], "conditions": {"ready": ready}}
    if address.get("targetRef") is not None:
        endpoint["targetRef"] = copy.deepcopy(address["targetRef"])
    if address.get("nodeName") is not None:
        endpoint["nodeName"] = address["nodeName"]
    if address.get("hostname"):
        endpoint["hostname"] = address["hostname"]
    return endpoint, address_type


def endpoint_slice_ports(ports: Iterable[dict] | None) -> list[dict]:
    """Endpoints ports copied 1:1 into EndpointSlice ports (``epPortsToEpsPorts``)."""
    result = []
    for port in ports or ():
        converted = {"name": port.get("name") or "", "port": port.get("port"), "protocol": port.get("protocol") or "TCP"}
        if port.get("appProtocol") is not None:
            converted["appProtocol"] = port["appProtocol"]
        result.append(converted)
    return result


def mirrored_annotations(endpoints: dict) -> dict:
    """The Endpoints' annotations minus the trigger time and kubectl's last-applied copy."""
    annotations = (endpoints.get("metadata") or {}).get("annotations") or {}
    return {k: v for k, v in annotations.items() if k not in (ANNOTATION_TRIGGER_TIME, ANNOTATION_LAST_APPLIED)}


def new_endpoint_slice(endpoints: dict, ports: list[dict], address_type: str, slice_name: str = "") -> dict:
    """A mirrored slice (``newEndpointSlice``): named ``slice_name`` for an update, else
    generateName ``<endpoints-name>-``; labels, annotations and owner as the module says."""
    meta = endpoints["metadata"]
    labels = dict(meta.get("labels") or {})
    labels[LABEL_SERVICE_NAME] = meta["name"]
    labels[LABEL_MANAGED_BY] = CONTROLLER_NAME
    slice_meta: dict = {
        "namespace": meta.get("namespace", ""),
        "labels": labels,
        "ownerReferences": [controller_ref(endpoints, ENDPOINTS_API_VERSION, ENDPOINTS_KIND)],
    }
    annotations = mirrored_annotations(endpoints)
    if annotations:
        slice_meta["annotations"] = annotations
    if slice_name:
        slice_meta["name"] = slice_name
    else:
        slice_meta["generateName"] = generate_name_prefix(meta["name"])
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": slice_meta,
        "addressType": address_type,
        "ports": ports,
        "endpoints": [],
    }


def slice_key(slice_: dict) -> SliceKey:
    return slice_.get("addressType", ""), port_map_key(slice_.get("ports"))


# ---- the reconciler --------------------------------------------------------------------------

@dataclass
class _Totals:
    added: int = 0
    updated: int = 0
    removed: int = 0


def total_changes(existing: dict, desired: EndpointSet) -> _Totals:
    """Endpoint adds, updates and removes needed to turn ``existing`` into ``desired``."""
    totals = _Totals()
    matches = 0
    for endpoint in existing.get("endpoints") or ():
        wanted = desired.get(endpoint)
        if wanted is None:
            totals.removed += 1
        else:
            matches += 1
            if not endpoints_equal_beyond_hash(wanted, endpoint):
                totals.updated += 1
    totals.added = len(desired) - matches
    return totals


def owned_by_other_endpoints(endpoints: dict, slice_: dict) -> bool:
    """The slice names an Endpoints owner with another uid: the Endpoints was recreated
    (kubernetes/kubernetes#125359)."""
    uid = endpoints["metadata"].get("uid", "")
    return any(ref.get("kind") == ENDPOINTS_KIND and ref.get("uid", "") != uid
               for ref in slice_["metadata"].get("ownerReferences") or ())


def _unchanged(endpoints: dict, slice_: dict, totals: _Totals) -> bool:
    if totals.added or totals.updated or totals.removed:
        return False
    slice_labels = {k: v for k, v in (slice_["metadata"].get("labels") or {}).items() if k not in (LABEL_MANAGED_BY, LABEL_SERVICE_NAME)}
    if (endpoints["metadata"].get("labels") or {}) != slice_labels:
        return False
    if mirrored_annotations(endpoints) != (slice_["metadata"].get("annotations") or {}):
        return False
    return not owned_by_other_endpoints(endpoints, slice_)


def reconcile(endpoints: dict | None, service: dict | None, existing_slices: Iterable[dict], *,
              max_endpoints_per_subset: int = DEFAULT_MAX_ENDPOINTS_PER_SUBSET) -> Plan:
    """What to write so the mirrored slices match the Endpoints.

    ``existing_slices`` are the slices labelled ``kubernetes.io/service-name=<name>`` and
    managed by this controller in the Endpoints' namespace, first-kept first.
    """
    existing = list(existing_slices)
    reason = skip_reason(endpoints, service)
    if reason is not None:
        return Plan(deletes=existing, mirrored=False, reason=reason)
    assert endpoints is not None
    plan = Plan()

    # desired state: endpoints per (address type, ports)
    desired: dict[SliceKey, EndpointSet] = {}
    ports_by_key: dict[SliceKey, list[dict]] = {}
    for subset in repack_subsets(endpoints.get("subsets")):
        ports = endpoint_slice_ports(subset.get("ports"))
        keys = {}
        for address_type in (IPV4_PROTOCOL, IPV6_PROTOCOL):
            keys[address_type] = key = (address_type, port_map_key(ports))
            desired.setdefault(key, EndpointSet())
            ports_by_key[key] = ports
        addresses = subset.get("addresses") or []
        not_ready = subset.get("notReadyAddresses") or []
        taken = 0
        for group, ready in ((addresses, True), (not_ready, False)):
            for address in group:
                if taken >= max_endpoints_per_subset:
                    break
                converted = address_to_endpoint(address, ready)
                if converted is None:
                    plan.invalid += 1
                    continue
                endpoint, address_type = converted
                desired[keys[address_type]].insert(endpoint)
                taken += 1
        plan.skipped += len(addresses) + len(not_ready) - taken

    if plan.invalid:
        plan.events.append(Event("Warning", REASON_INVALID_IP_ADDRESS,
                                 f"Skipped {plan.invalid} invalid IP addresses when mirroring to EndpointSlices"))
    if plan.skipped > plan.invalid:
        plan.events.append(Event("Warning", REASON_TOO_MANY_ADDRESSES,
                                 f"A max of {max_endpoints_per_subset} addresses can be mirrored to EndpointSlices per Endpoints subset. "
                                 f"{plan.skipped} addresses were skipped"))

    existing_by_key: dict[SliceKey, list[dict]] = {}
    for slice_ in existing:
        existing_by_key.setdefault(slice_key(slice_), []).append(slice_)

    for key, wanted in desired.items():
        count = len(wanted)
        group = existing_by_key.get(key, [])
        creates, updates, deletes = _reconcile_key(plan, endpoints, group, wanted, ports_by_key[key], key[0], max_endpoints_per_subset)
        plan.creates += creates
        plan.updates += updates
        plan.deletes += deletes
        plan.port_groups[key] = PortGroupStats(count, len(group) + len(creates) - len(deletes))

    for key, slices in existing_by_key.items():
        if key not in desired:
            plan.deletes.extend(slices)

    recycle_slices(plan)
    if (endpoints.get("metadata") or {}).get("deletionTimestamp"):
        plan.creates = []
    return plan


def _reconcile_key(plan: Plan, endpoints: dict, existing: list[dict], desired: EndpointSet, ports: list[dict],
                   address_type: str, max_endpoints: int) -> tuple[list[dict], list[dict], list[dict]]:
    """One key (``reconcileByPortMapping``): (creates, updates, deletes)."""
    if not len(desired):
        plan.removed += sum(len(s.get("endpoints") or ()) for s in existing)
        return [], [], list(existing)
    deletes: list[dict] = []
    if not existing:
        plan.added += len(desired)
    else:
        deletes = list(existing[1:])
        totals = total_changes(existing[0], desired)
        plan.added += totals.added
        plan.updated += totals.updated
        plan.removed += totals.removed
        if _unchanged(endpoints, existing[0], totals):
            return [], [], deletes
    name = existing[0]["metadata"]["name"] if existing else ""
    slice_ = new_endpoint_slice(endpoints, copy.deepcopy(ports), address_type, name)
    while len(desired) and len(slice_["endpoints"]) < max_endpoints:
        slice_["endpoints"].append(desired.pop_any())
    if name:
        return [], [slice_], deletes
    return [slice_], [], deletes


def recycle_slices(plan: Plan) -> None:
    """Turn creates into updates of slices that would be deleted (``recycleSlices``): per
    address type, the i-th create takes the name of the i-th delete of that type."""
    creates_by_type: dict[str, list[dict]] = {}
    deletes_by_type: dict[str, list[dict]] = {}
    for slice_ in plan.creates:
        creates_by_type.setdefault(slice_.get("addressType", ""), []).append(slice_)
    for slice_ in plan.deletes:
        deletes_by_type.setdefault(slice_.get("addressType", ""), []).append(slice_)
    for address_type, creates in creates_by_type.items():
        doomed = deletes_by_type.get(address_type, [])
        for create, delete in zip(creates, doomed):
            plan.creates = [s for s in plan.creates if s is not create]
            plan.deletes = [s for s in plan.deletes if s is not delete]
            create["metadata"]["name"] = delete["metadata"]["name"]
            plan.updates.append(create)
