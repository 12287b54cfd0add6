"""What a Service's legacy ``Endpoints`` object should say, and whether it must be written
(upstream ``pkg/controller/endpoint/endpoints_controller.go`` ``syncService``, and
``pkg/api/v1/endpoints/util.go`` ``RepackSubsets``). Pure: dicts in, dicts out.

**The object.** One ``Endpoints`` per Service, with the Service's name, listing where its
traffic may go as *subsets*: each subset is a set of addresses that all serve the same set of
ports. ``addresses`` are ready to take traffic, ``notReadyAddresses`` are not (yet). Older
consumers (and some DNS and ingress implementations) still read it; EndpointSlices replaced it.

**Which Pods** (``desired_subsets``): those the Service's selector picks in its namespace that

* are not Succeeded or Failed and have an IP (``ShouldPodBeInEndpoints``);
* are not terminating (``deletionTimestamp`` set), unless the Service has
  ``publishNotReadyAddresses`` (then they stay, and count as ready);
* have an IP of the Service's primary family: ``spec.ipFamilies[0]``; for objects from an old
  apiserver without ipFamilies the ClusterIP's family, or for a headless one the family of the
  Pod's ``podIP``. A Pod without such an IP is left out.

Each address names the Pod (``targetRef`` kind/namespace/name/uid, no resourceVersion), its
node, and ``hostname`` when the Pod's ``spec.subdomain`` is the Service's name. It is ready iff
the Pod's Ready condition is True or the Service publishes not-ready addresses.

**Ports.** Per Service port, the port its ``targetPort`` resolves to on the Pod (a number, or a
named container port): a Pod where a named port does not resolve does not serve that port.
A headless Service (``clusterIP: None``) without ports gets its addresses with no ports at all;
a non-headless one without ports gets nothing.

**Repacking** (``repack_subsets``): the per-Pod, per-port subsets are regrouped into the
canonical form: addresses (identified by IP + Pod uid) grouped by the exact set of ports they
serve; an address not ready for some port is not ready for it (not-ready wins); everything
sorted, so that equal content compares equal.

**The 1000 cap** (``truncate_subsets``): at most 1000 addresses (ready + not ready) are
stored. Above that, the object is truncated and annotated
``endpoints.kubernetes.io/over-capacity: truncated`` (the annotation goes away at or below the
cap): ready addresses are kept before not-ready ones, and each subset keeps a share of the
budget proportional to its size (``ceil(n / total * budget)``, the last subsets taking what is
left). If the ready ones alone exceed 1000, all not-ready ones are dropped.

**Metadata.** Labels are the Service's labels plus ``service.kubernetes.io/headless: ""`` for a
Service without a ClusterIP. Other annotations on an existing object are kept;
``endpoints.kubernetes.io/last-change-trigger-time`` is set to the sync's trigger time (see
``endpointslice.triggertime``) on every write, and removed by a write that has none.

**When to write** (``plan_endpoints``): always when the object does not exist (a create);
otherwise only if the subsets differ (ignoring ``targetRef.resourceVersion``), or the labels
other than the headless marker differ from the Service's, or the capacity annotation is wrong
for what is stored (present at or below the cap, or the stored object is over it). As upstream,
the headless marker and the trigger-time annotation alone never cause a write, and an
over-capacity object is compared untruncated (so it is rewritten on every sync); a write that
would store exactly what is there is skipped. An ``Endpoints`` carrying the leader-election
annotation ``control-plane.alpha.kubernetes.io/leader`` is never written.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from kubesvc.controllers.endpointslice.util import (
    ANNOTATION_TRIGGER_TIME,
    LABEL_HEADLESS,
    address_family,
    find_port,
    is_pod_ready,
    is_service_ip_set,
    pod_ips,
    should_pod_be_in_endpoints,
    should_set_hostname,
)
from kubesvc.util.golang import rfc3339_nano
from kubesvc.util.ipnet import IPV4_PROTOCOL, IPV6_PROTOCOL

MAX_CAPACITY = 1000  # addresses (ready + not ready) stored per Endpoints object (maxCapacity)
ANNOTATION_OVER_CAPACITY = "endpoints.kubernetes.io/over-capacity"
TRUNCATED = "truncated"
ANNOTATION_LEADER = "control-plane.alpha.kubernetes.io/leader"  # resourcelock.LeaderElectionRecordAnnotationKey
CLUSTER_IP_NONE = "None"


# ---- one Pod -> one address ------------------------------------------------------------------

def service_ip_family(service: dict, pod: dict) -> str:
    """The family of the address a Pod contributes (``podToEndpointAddressForService``)."""
    spec = service.get("spec") or {}
    families = spec.get("ipFamilies") or ()
    if families:
        return IPV6_PROTOCOL if families[0] == IPV6_PROTOCOL else IPV4_PROTOCOL
    cluster_ip = spec.get("clusterIP") or ""
    if cluster_ip and cluster_ip != CLUSTER_IP_NONE:
        return address_family(cluster_ip)
    # legacy headless Service (no ipFamilies): trust the Pod's primary IP (IsIPv6String too)
    return address_family((pod.get("status") or {}).get("podIP") or "")


def endpoint_address(service: dict, pod: dict) -> dict | None:
    """The Pod's address for this Service, or None if it has no IP of the Service's family."""
    family = service_ip_family(service, pod)
    ip = next((ip for ip in pod_ips(pod) if address_family(ip) == family), None)
    if ip is None:
        return None
    meta = pod["metadata"]
    address: dict = {"ip": ip}
    if should_set_hostname(pod, service):
        address["hostname"] = pod["spec"]["hostname"]
    node_name = (pod.get("spec") or {}).get("nodeName")
    if node_name:  # upstream always sets a pointer; an empty nodeName would fail validation
        address["nodeName"] = node_name
    address["targetRef"] = {"kind": "Pod", "namespace": meta.get("namespace", ""), "name": meta["name"], "uid": meta.get("uid", "")}
    return address


def endpoint_port(service_port: dict, number: int) -> dict:
    """``endpointPortFromServicePort``: the Service port's name, protocol and appProtocol."""
    port: dict = {}
    if service_port.get("name"):
        port["name"] = service_port["name"]
    port["port"] = number
    port["protocol"] = service_port.get("protocol") or "TCP"
    if service_port.get("appProtocol") is not None:
        port["appProtocol"] = service_port["appProtocol"]
    return port


# ---- all Pods -> subsets ---------------------------------------------------------------------

@dataclass(frozen=True)
class Subsets:
    """The repacked (sorted, untruncated) subsets and how many addresses went in."""

    subsets: list[dict]
    ready: int
    not_ready: int


def desired_subsets(service: dict, pods: Iterable[dict]) -> Subsets:
    """The subsets the Service's selected ``pods`` give (before the 1000 cap)."""
    spec = service.get("spec") or {}
    publish_not_ready = bool(spec.get("publishNotReadyAddresses"))
    service_ports = spec.get("ports") or []
    headless = spec.get("clusterIP") == CLUSTER_IP_NONE
    raw: list[dict] = []
    ready = not_ready = 0
    for pod in pods:
        if not should_pod_be_in_endpoints(pod, include_terminating=publish_not_ready):
            continue
        address = endpoint_address(service, pod)
        if address is None:
            continue  # no IP of the Service's family (e.g. mid dual-stack upgrade)
        field = "addresses" if publish_not_ready or is_pod_ready(pod) else "notReadyAddresses"
        if not service_ports:
            if headless:  # a headless Service may have no ports: the addresses alone
                raw.append({field: [address]})
                ready, not_ready = ready + (field == "addresses"), not_ready + (field != "addresses")
            continue
        for service_port in service_ports:
            number = find_port(pod, service_port)
            if number is None:
                continue
            raw.append({field: [address], "ports": [endpoint_port(service_port, number)]})
            ready, not_ready = ready + (field == "addresses"), not_ready + (field != "addresses")
    return Subsets(repack_subsets(raw), ready, not_ready)


# ---- RepackSubsets / SortSubsets ------------------------------------------------------------

_NO_PORT = ("", -1, "", None)  # the sentinel upstream maps port-less addresses under


def _port_key(port: dict) -> tuple:
    return (port.get("name") or "", port.get("port"), port.get("protocol") or "", port.get("appProtocol"))


def _address_key(address: dict) -> tuple[str, str]:
    """Addresses are one address when IP and target uid agree (``addressKey``)."""
    return (address.get("ip") or "", (address.get("targetRef") or {}).get("uid") or "")


def _address_order(address: dict) -> tuple:
    """``LessEndpointAddress``: by IP, then no targetRef first, then by target uid."""
    ref = address.get("targetRef")
    return (address.get("ip") or "", ref is not None, (ref or {}).get("uid") or "")


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def repack_subsets(subsets: Iterable[dict]) -> list[dict]:
    """Regroup addresses by the exact set of ports they serve (``RepackSubsets``).

    Every (address, port) pair is collected, an address not ready for a port in any subset is
    not ready for it; then ports with identical address sets (readiness included) share a
    subset. Addresses without ports are kept (as a subset without ports). The result is sorted
    (``sort_subsets``) and new; the input is not modified.
    """
    addresses: dict[tuple, dict] = {}
    ports: dict[tuple, dict | None] = {}
    by_port: dict[tuple, dict[tuple, bool]] = {}
    for subset in subsets:
        subset_ports = subset.get("ports") or [None]
        for port in subset_ports:
            port_key = _NO_PORT if port is None else _port_key(port)
            ports.setdefault(port_key, port)
            ready_by_address = by_port.setdefault(port_key, {})
            for field, ready in (("addresses", True), ("notReadyAddresses", False)):
                for address in subset.get(field) or ():
                    key = _address_key(address)
                    addresses.setdefault(key, address)  # the first one seen is kept whole
                    if ready_by_address.get(key, True):  # not ready always trumps ready
                        ready_by_address[key] = ready
    groups: dict[tuple, list[dict]] = {}
    members: dict[tuple, dict[tuple, bool]] = {}
    for port_key, ready_by_address in by_port.items():
        signature = tuple(sorted(ready_by_address.items()))
        members[signature] = ready_by_address
        group = groups.setdefault(signature, [])
        if port_key != _NO_PORT:
            group.append(ports[port_key])
    final = []
    for signature, group_ports in groups.items():
        subset: dict = {}
        ready = [copy.deepcopy(addresses[key]) for key, is_ready in members[signature].items() if is_ready]
        not_ready = [copy.deepcopy(addresses[key]) for key, is_ready in members[signature].items() if not is_ready]
        if ready:
            subset["addresses"] = ready
        if not_ready:
            subset["notReadyAddresses"] = not_ready
        if group_ports:
            subset["ports"] = [copy.deepcopy(p) for p in group_ports]
        final.append(subset)
    return sort_subsets(final)


def sort_subsets(subsets: list[dict]) -> list[dict]:
    """``SortSubsets``, in place: addresses by IP and target uid, ports and subsets in a fixed
    content order (upstream orders those by an md5 of their Go representation; any fixed order
    serves: the point is that equal content is laid out identically)."""
    for subset in subsets:
        for field in ("addresses", "notReadyAddresses"):
            if subset.get(field):
                subset[field].sort(key=_address_order)
        if subset.get("ports"):
            subset["ports"].sort(key=_canonical)
    subsets.sort(key=_canonical)
    return subsets


# ---- the 1000 cap ----------------------------------------------------------------------------

def truncate_subsets(subsets: list[dict], max_capacity: int = MAX_CAPACITY) -> tuple[list[dict], bool]:
    """``truncateEndpoints``: (the subsets cut to ``max_capacity`` addresses, whether cut).

    Ready addresses are kept first. Each subset keeps ``ceil(n / total * budget)`` of the kind
    being cut, capped by what the budget has left; when the ready ones alone are over, every
    not-ready address goes.
    """
    total_ready = sum(len(s.get("addresses") or ()) for s in subsets)
    total_not_ready = sum(len(s.get("notReadyAddresses") or ()) for s in subsets)
    if total_ready + total_not_ready <= max_capacity:
        return subsets, False
    truncate_ready = total_ready > max_capacity
    budget, total = (max_capacity, total_ready) if truncate_ready else (max_capacity - total_ready, total_not_ready)
    can_be_added = budget
    result = []
    for subset in subsets:
        subset = dict(subset)
        field = "addresses" if truncate_ready else "notReadyAddresses"
        in_subset = len(subset.get(field) or ())
        to_be_added = min(math.ceil(in_subset / total * budget), can_be_added)
        kept = (subset.get(field) or [])[:to_be_added]
        if kept:
            subset[field] = kept
        else:
            subset.pop(field, None)
        if truncate_ready:
            subset.pop("notReadyAddresses", None)
        can_be_added -= len(kept)
        result.append(subset)
    return result, True


def capacity_annotation_set_correctly(annotations: dict | None, subsets: list[dict] | None) -> bool:
    """``capacityAnnotationSetCorrectly``: stored subsets over the cap always need a write (to
    truncate them); at or below it, the annotation must be absent."""
    stored = sum(len(s.get("addresses") or ()) + len(s.get("notReadyAddresses") or ()) for s in subsets or ())
    if stored > MAX_CAPACITY:
        return False
    return ANNOTATION_OVER_CAPACITY not in (annotations or {})


# ---- comparison ------------------------------------------------------------------------------

def _semantic(value):
    """The value as Go's semantic equality sees it after a JSON round trip: unset, "" and empty
    lists/maps are all the zero value; ``targetRef.resourceVersion`` is ignored
    (``semanticIgnoreResourceVersion``)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key == "targetRef" and isinstance(item, dict):
                item = {k: v for k, v in item.items() if k != "resourceVersion"}
            item = _semantic(item)
            if item not in (None, "", [], {}):
                out[key] = item
        return out
    if isinstance(value, list):
        return [_semantic(item) for item in value]
    return value


def subsets_equal_ignore_resource_version(a: list[dict] | None, b: list[dict] | None) -> bool:
    """Same subsets in the same order, ignoring the Pods' resourceVersions in targetRefs."""
    return _semantic(a or []) == _semantic(b or [])


def is_leader_election_record(endpoints: dict | None) -> bool:
    return endpoints is not None and ANNOTATION_LEADER in ((endpoints.get("metadata") or {}).get("annotations") or {})


# ---- the decision ----------------------------------------------------------------------------

@dataclass(frozen=True)
class EndpointsWrite:
    """The object to POST (``create``) or PUT, and the address counts for logging."""

    endpoints: dict
    create: bool
    ready: int
    not_ready: int


def plan_endpoints(service: dict, pods: Iterable[dict], current: dict | None, trigger_time: datetime | None) -> EndpointsWrite | None:
    """The write that makes ``current`` (the cached Endpoints, None if absent) what ``service``
    and its selected ``pods`` say, or None when nothing needs writing."""
    if is_leader_election_record(current):
        return None
    wanted = desired_subsets(service, pods)
    service_meta = service["metadata"]
    service_labels = dict(service_meta.get("labels") or {})
    create = current is None or not (current.get("metadata") or {}).get("resourceVersion")
    if not create:
        current_meta = current.get("metadata") or {}
        compare_labels = {k: v for k, v in (current_meta.get("labels") or {}).items() if k != LABEL_HEADLESS}
        if (subsets_equal_ignore_resource_version(current.get("subsets"), wanted.subsets)
                and compare_labels == service_labels
                and capacity_annotation_set_correctly(current_meta.get("annotations"), current.get("subsets"))):
            return None
        new = copy.deepcopy(current)
    else:
        new = {"metadata": {"name": service_meta["name"], "namespace": service_meta.get("namespace", "")}}
    new["apiVersion"], new["kind"] = "v1", "Endpoints"
    meta = new["metadata"]
    annotations = dict(meta.get("annotations") or {})
    if trigger_time is not None:
        annotations[ANNOTATION_TRIGGER_TIME] = rfc3339_nano(trigger_time)
    else:  # nothing new triggered this write: no claim about when the change happened
        annotations.pop(ANNOTATION_TRIGGER_TIME, None)
    subsets, truncated = truncate_subsets(wanted.subsets)
    # a subset whose every address was cut would fail validation ("must specify `addresses` or
    # `notReadyAddresses`"); upstream would keep it and fail every write, here it goes
    subsets = [s for s in subsets if s.get("addresses") or s.get("notReadyAddresses")]
    if truncated:
        annotations[ANNOTATION_OVER_CAPACITY] = TRUNCATED
    else:
        annotations.pop(ANNOTATION_OVER_CAPACITY, None)
    labels = dict(service_labels)
    if is_service_ip_set(service):
        labels.pop(LABEL_HEADLESS, None)
    else:
        labels[LABEL_HEADLESS] = ""
    new["subsets"] = subsets
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    if labels:
        meta["labels"] = labels
    else:
        meta.pop("labels", None)
    if not create and _unchanged(current, new):
        return None  # e.g. an over-capacity object already truncated exactly so
    return EndpointsWrite(new, create, wanted.ready, wanted.not_ready)


def _unchanged(current: dict, new: dict) -> bool:
    current_meta, new_meta = current.get("metadata") or {}, new.get("metadata") or {}
    return (_semantic(current.get("subsets") or []) == _semantic(new.get("subsets") or [])
            and (current_meta.get("labels") or {}) == (new_meta.get("labels") or {})
            and (current_meta.get("annotations") or {}) == (new_meta.get("annotations") or {}))
