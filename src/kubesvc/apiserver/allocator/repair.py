"""The repair loops: upstream's ClusterIP repair for the IPAddress allocator
(pkg/registry/core/service/ipallocator/controller/repairip.go) and the NodePort repair
(pkg/registry/core/service/portallocator/controller/repair.go), over our store records.

Both compare what Services claim with what the store has allocated, and fix what a crash, an
operator writing storage by hand or a bug left inconsistent. They are built in three layers:

* :func:`take_snapshot`: Services, IPAddresses, ServiceCIDRs and NodePort records, all read
  at one storage revision, so the comparison never mixes two moments. Only the fields the
  decisions need are decoded (:class:`ServiceView`, :class:`IPAddressView`): 100k Services
  take about a second;
* :func:`plan_ip_repair` and :func:`plan_port_repair`: pure decisions over that snapshot,
  returning :class:`Finding` s (an event to record, a metric type, and maybe one store
  operation);
* :class:`Repair`: applies a plan. The snapshot may be a few milliseconds old, so a finding
  about a Service is dropped when the Service, read again (once per pass), no longer holds
  the value, and a leaked allocation is kept when its owner holds it now. The writes are
  conditional: IPAddresses are created and deleted through the IPAddress Store (so the
  allocator index hooks run) with the resourceVersion read as a precondition, NodePort
  records are written on the backend at the revision read; an allocation record created,
  rewritten or deleted since makes the write fail (a 404/409), which drops the finding and
  is not an error. Then the allocators' index is compared with the store's keys and reloaded
  (``load()``) only if they differ, e.g. after keys were written behind the apiserver's
  back; the repair's own writes keep it exact.

:meth:`Repair.run` reads the store in pages on the event loop (the storage calls are
coroutines), decodes each page, decides and compares in a worker thread, and acts on the event
loop, so a pass over 100k Services stalls the loop for milliseconds, not seconds.

Progress: upstream's repair loops report only what they found (events, the ``*_repair_*_errors``
counters). A pass over a large store takes seconds, so ours also says how far it is: log lines
when it has read the store (the counts), acted, and completed (``elapsed``), at INFO once the
pass has run a second (DEBUG before), and gauges of our own: ``kubesvc_apiserver_service_repair_phase``
(snapshot, apply, index; 1 for the current phase), ``..._pass_duration_seconds`` and
``..._last_pass_timestamp_seconds``.

ClusterIPs (repairip.go's Service loop, then its IPAddress loop):

====================  ==========================================================  ===========
Service's IP          what happens                                                 metric type
====================  ==========================================================  ===========
not an IP             ``ClusterIPNotValid``                                       invalid
in no ServiceCIDR     ``ClusterIPOutOfRange``                                     outOfRange
no IPAddress          ``ClusterIPNotAllocated`` "... is not allocated; repairing", repair
                      the IPAddress is created
IPAddress of another  ``ClusterIPAlreadyAllocated`` on this Service, nothing       duplicate
Service claiming it   changed
IPAddress whose       ``ClusterIPNotAllocated`` "... has a wrong reference;        repair
parent is not a       repairing", the IPAddress is recreated for this Service
claiming Service
wrong labels          recreated, no event                                         repair
====================  ==========================================================  ===========

"In a ServiceCIDR" is upstream's servicecidr.ContainsIP over every ServiceCIDR object: the
whole prefix but its network address (and the IPv4 broadcast address), whatever part of it
the allocator's bitmap covers.

An IPAddress labelled ``managed-by: ipallocator.k8s.io`` that no Service accounts for is
deleted (metric type leak) with an event on the IPAddress: ``IPAddressNotAllocated`` when its
parentRef is not a Service, or when the Service does not exist and the IPAddress is older
than the grace period (60 s: a Service create may still be in flight);
``IPAddressWrongReference`` when the Service exists but does not list the IP.

Events are Warnings on the Service (action ``ClusterIPAllocation``; ``ClusterIPValidation``
for ``ClusterIPNotValid``, as upstream) or on the IPAddress (``IPAddressAllocation``).

Where this differs from upstream: ``ClusterIPNotValid`` shows the raw value (upstream prints
the unparsed IP, ``<nil>``); an IPAddress whose parent exists but does not list the IP is
recreated for the Service that does list it in the same pass (upstream deletes it in the
IPAddress loop and recreates it on the next sync); a duplicate IPAddress with wrong labels is
left alone (upstream recreates it for the second claimant, taking it from the first).

NodePorts: every Service's nodePorts (the same number with different protocols counts once,
with the same protocol twice) and the healthCheckNodePort of a LoadBalancer Service with
``externalTrafficPolicy: Local`` (upstream counts it whenever set; validation allows it only
then, and only then does a Service delete release it): ``PortOutOfRange``, ``PortNotAllocated`` (the record is
created), ``PortAlreadyAllocated`` (on every claimant but the holder); a record owned by a
Service that does not use the port while another does is given to that one. A record no
Service uses is a leak: kept on the first and second consecutive detection, deleted on the
third ("the node port %d appears to have leaked: cleaning up", no event). Upstream has one
bitmap and no owners: there the second Service in list order gets ``PortAlreadyAllocated``;
here every claimant but the record's owner does.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, AsyncIterator, Callable, Literal

import msgspec

from kubesvc.api import scheme
from kubesvc.api.errors import StatusError
from kubesvc.apiserver.allocator import records
from kubesvc.apiserver.allocator.ranges import PortRange, canonical_ip, ip_info
from kubesvc.apiserver.allocator.service import EXTERNAL_NAME, ServiceAllocators, is_headless, needs_health_check
from kubesvc.apiserver.events import EventRecorder
from kubesvc.apiserver.registry.store import Registry, decode
from kubesvc.storage import base as storage
from kubesvc.util.clock import Clock
from kubesvc.util.golang import parse_rfc3339

log = logging.getLogger("kubesvc.apiserver.repair")

IP_CONTROLLER = "ipallocator-repair-controller"
PORT_CONTROLLER = "portallocator-repair-controller"
FIELD_MANAGER = "kube-apiserver"
NUM_REPAIRS_BEFORE_LEAK_CLEANUP = 3
LEAK_GRACE_SECONDS = 60.0

# event actions (events/v1 ``action``)
CLUSTER_IP_ALLOCATION = "ClusterIPAllocation"
CLUSTER_IP_VALIDATION = "ClusterIPValidation"
IP_ADDRESS_ALLOCATION = "IPAddressAllocation"
PORT_ALLOCATION = "PortAllocation"

_decode = msgspec.json.Decoder().decode

ServiceKey = tuple[str, str]  # (namespace, name)


# ---- what a Service claims, what an IPAddress says ------------------------------------------


class ServiceView(msgspec.Struct, frozen=True, gc=False):
    """What the repair needs of a Service: the raw clusterIPs it holds (empty for
    ExternalName and headless Services) and its nodePorts as ``collect_service_node_ports``."""

    cluster_ips: tuple[str, ...] = ()
    node_ports: tuple[int, ...] = ()


class IPAddressView(msgspec.Struct, frozen=True, gc=False):
    """What the repair needs of an IPAddress."""

    revision: int = 0
    family_label: str = ""
    managed: bool = False  # labelled managed-by ipallocator.k8s.io
    parent: tuple[str, str, str, str] | None = None  # (group, resource, namespace, name)
    created: str = ""  # creationTimestamp


# The stored JSON, only the fields read (msgspec skips the rest, managedFields included,
# without building them: decoding 100k Services this way is several times cheaper than
# building dicts, and gc=False keeps them out of the cyclic GC's way).
class _Port(msgspec.Struct, gc=False):
    nodePort: int | None = None
    protocol: str | None = None


class _ServiceSpec(msgspec.Struct, gc=False):
    type: str | None = None
    clusterIP: str | None = None
    clusterIPs: list[str] | None = None
    ports: list[_Port] | None = None
    healthCheckNodePort: int | None = None
    externalTrafficPolicy: str | None = None


class _Service(msgspec.Struct, gc=False):
    spec: _ServiceSpec | None = None


class _Meta(msgspec.Struct, gc=False):
    labels: dict[str, str] | None = None
    creationTimestamp: str | None = None


class _ParentRef(msgspec.Struct, gc=False):
    group: str | None = None
    resource: str | None = None
    namespace: str | None = None
    name: str | None = None


class _IPAddressSpec(msgspec.Struct, gc=False):
    parentRef: _ParentRef | None = None


class _IPAddress(msgspec.Struct, gc=False):
    metadata: _Meta | None = None
    spec: _IPAddressSpec | None = None


_decode_service = msgspec.json.Decoder(_Service).decode
_decode_ip_address = msgspec.json.Decoder(_IPAddress).decode


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _cluster_ips(cluster_ip: str, cluster_ips: list | None) -> tuple[str, ...]:
    """upstream's ``IsServiceIPSet`` (clusterIP neither "" nor "None"), then every clusterIP."""
    ips = cluster_ips or ([cluster_ip] if cluster_ip else [])
    if not ips or ips[0] in ("", "None", None):
        return ()
    return tuple(ip if isinstance(ip, str) else str(ip) for ip in ips)


def _node_ports(ports: list[tuple[int, str]], health: int) -> tuple[int, ...]:
    """upstream collectServiceNodePorts: every non-zero (nodePort, protocol); the same nodePort
    with a *different* protocol counts once, with the *same* protocol it is listed again (a
    duplicate); plus ``health`` (as TCP), the healthCheckNodePort of a Service that needs
    one (0: none)."""
    found: list[int] = []
    seen: dict[int, set[str]] = {}
    for node_port, protocol in ports:
        if not node_port:
            continue
        protocols = seen.get(node_port)
        if protocols is None:
            seen[node_port] = {protocol}
            found.append(node_port)
        elif protocol in protocols:
            found.append(node_port)
        else:
            protocols.add(protocol)
    if health:
        protocols = seen.get(health)
        if protocols is None or "TCP" in protocols:
            found.append(health)
    return tuple(found)


def view_service(svc: dict) -> ServiceView:
    """The view of a Service object (any JSON: wrong types count as absent)."""
    spec = _dict(svc.get("spec"))
    if not isinstance(spec.get("clusterIPs"), (list, type(None))):
        spec = {**spec, "clusterIPs": None}
    ports = [(_int(p.get("nodePort")), _str(p.get("protocol")) or "TCP") for p in spec.get("ports") or [] if isinstance(p, dict)]
    has_ips = spec.get("type") != EXTERNAL_NAME and not is_headless(spec)
    return ServiceView(_cluster_ips(_str(spec.get("clusterIP")), spec.get("clusterIPs")) if has_ips else (),
                       _node_ports(ports, _int(spec.get("healthCheckNodePort")) if needs_health_check(spec) else 0))


def _view_stored_service(raw: _Service) -> ServiceView:
    spec = raw.spec or _ServiceSpec()
    ports = [(p.nodePort or 0, p.protocol or "TCP") for p in spec.ports or ()]
    health = (spec.healthCheckNodePort or 0) if spec.type == "LoadBalancer" and spec.externalTrafficPolicy == "Local" else 0
    return ServiceView(_cluster_ips(spec.clusterIP or "", spec.clusterIPs) if spec.type != EXTERNAL_NAME else (),
                       _node_ports(ports, health))


def view_ip_address(obj: dict, revision: int = 0) -> IPAddressView:
    meta = _dict(obj.get("metadata"))
    labels = _dict(meta.get("labels"))
    ref = _dict(obj.get("spec")).get("parentRef")
    parent = tuple(_str(ref.get(k)) for k in ("group", "resource", "namespace", "name")) if isinstance(ref, dict) else None
    return IPAddressView(revision, _str(labels.get(records.LABEL_IP_FAMILY)),
                         labels.get(records.LABEL_MANAGED_BY) == records.IPALLOCATOR_MANAGER, parent, _str(meta.get("creationTimestamp")))


def _view_stored_ip_address(raw: _IPAddress, revision: int) -> IPAddressView:
    meta = raw.metadata or _Meta()
    labels = meta.labels or {}
    ref = raw.spec.parentRef if raw.spec is not None else None
    parent = (ref.group or "", ref.resource or "", ref.namespace or "", ref.name or "") if ref is not None else None
    return IPAddressView(revision, labels.get(records.LABEL_IP_FAMILY, ""),
                         labels.get(records.LABEL_MANAGED_BY) == records.IPALLOCATOR_MANAGER, parent, meta.creationTimestamp or "")


def collect_service_node_ports(svc: dict) -> list[int]:
    """The nodePorts the port repair counts for a Service (see :func:`_node_ports`)."""
    return list(view_service(svc).node_ports)


def claimed_ips(view: ServiceView) -> set[str]:
    """The canonical IPs a Service holds (what an IPAddress's parent must list)."""
    return {ip for raw in view.cluster_ips if (ip := canonical_ip(raw)) is not None}


# ---- the snapshot ---------------------------------------------------------------------------


@dataclass(frozen=True)
class NodePortRecord:
    owner: ServiceKey | None  # None: the value does not parse
    revision: int  # mod_revision of the record


@dataclass(frozen=True)
class Snapshot:
    """Everything the repair decisions look at, as of one storage revision."""

    revision: int
    services: dict[ServiceKey, ServiceView]  # in key order (namespace, then name)
    ip_addresses: dict[str, IPAddressView]  # IPAddress name -> view
    service_cidrs: list[str]  # every ServiceCIDR object's spec.cidrs
    node_ports: dict[int, NodePortRecord]


# The snapshot reads in pages, so that no single list holds the backend (and the event loop's
# writes) for long; the run loop decodes each page in a worker thread.
_PAGE = 20_000
_SERVICE_PREFIX = scheme.by_resource("", "v1", "services").key_prefix()
_SERVICE_CIDR_PREFIX = scheme.by_resource("networking.k8s.io", "v1", "servicecidrs").key_prefix()


async def _pages(backend: storage.Backend, prefix: str, revision: int) -> AsyncIterator[list[storage.KeyValue]]:
    """Every key under ``prefix`` at ``revision``, ``_PAGE`` keys at a time."""
    start = prefix
    while True:
        result = await backend.list(prefix, revision=revision, limit=_PAGE, start_key=start)
        yield result.kvs
        if not result.more or not result.kvs:
            return
        start = result.kvs[-1].key + "\x00"


async def _each_page(backend: storage.Backend, prefix: str, revision: int, take: Callable[[list[storage.KeyValue]], None],
                     offload: bool) -> None:
    """``take(page)`` for every page; in a worker thread with ``offload`` (``take`` is pure
    decoding into the caller's collections, and the loop awaits it before the next page)."""
    async for page in _pages(backend, prefix, revision):
        if offload:
            await asyncio.to_thread(take, page)
        else:
            take(page)


def _decode_stored(kv: storage.KeyValue, typed: Callable[[bytes], Any], stored_view: Callable[..., Any],
                   dict_view: Callable[..., Any], *args: Any) -> Any:
    """``stored_view(typed(value), *args)``; ``dict_view(object, *args)`` when a field has an
    unexpected type; None when the value is not JSON."""
    try:
        return stored_view(typed(kv.value), *args)
    except msgspec.ValidationError:
        pass  # a field of an unexpected type: read it leniently
    except (msgspec.DecodeError, UnicodeDecodeError):
        log.warning("repair: cannot decode %s; ignoring it", kv.key)
        return None
    obj = _decode(kv.value)
    return dict_view(obj, *args) if isinstance(obj, dict) else None


async def take_snapshot(backend: storage.Backend, revision: int = 0, *, offload: bool = False) -> Snapshot:
    """Read the four collections at one revision (0: the current one). With ``offload`` each
    page is decoded in a worker thread (100k Services take seconds to decode)."""
    at = revision or await backend.current_revision()
    services: dict[ServiceKey, ServiceView] = {}
    ip_addresses: dict[str, IPAddressView] = {}
    cidrs: list[str] = []
    node_ports: dict[int, NodePortRecord] = {}

    def take_services(page: list[storage.KeyValue]) -> None:
        for kv in page:
            namespace, _, name = kv.key[len(_SERVICE_PREFIX):].partition("/")
            view = _decode_stored(kv, _decode_service, _view_stored_service, view_service)
            if view is not None and name:
                services[(namespace, name)] = view

    def take_ip_addresses(page: list[storage.KeyValue]) -> None:
        for kv in page:
            view = _decode_stored(kv, _decode_ip_address, _view_stored_ip_address, view_ip_address, kv.mod_revision)
            if view is not None:
                ip_addresses[records.ip_of_key(kv.key)] = view

    def take_cidrs(page: list[storage.KeyValue]) -> None:
        for kv in page:
            obj = _decode_kv(kv)
            if obj is not None:
                cidrs.extend(c for c in _dict(obj.get("spec")).get("cidrs") or [] if isinstance(c, str))

    def take_node_ports(page: list[storage.KeyValue]) -> None:
        for kv in page:
            port = records.port_of_key(kv.key)
            if port is not None:
                node_ports[port] = NodePortRecord(records.node_port_owner(kv.value), kv.mod_revision)

    await _each_page(backend, _SERVICE_PREFIX, at, take_services, offload)
    await _each_page(backend, records.IP_ADDRESS_PREFIX, at, take_ip_addresses, offload)
    await _each_page(backend, _SERVICE_CIDR_PREFIX, at, take_cidrs, offload)
    await _each_page(backend, records.NODE_PORT_PREFIX, at, take_node_ports, offload)
    return Snapshot(at, services, ip_addresses, cidrs, node_ports)


def _decode_kv(kv: storage.KeyValue) -> dict | None:
    """The whole object, with its resourceVersion (for events and act-time checks), as the
    store decodes it; None when it is not a JSON object with an object as metadata."""
    try:
        return decode(kv)
    except (ValueError, TypeError, AttributeError):  # not JSON, not an object, odd metadata
        log.warning("repair: cannot decode %s; ignoring it", kv.key)
        return None


# ---- findings and plans ---------------------------------------------------------------------


@dataclass(frozen=True)
class IPOp:
    """One IPAddress write. ``create``: the IPAddress for ``service``; ``recreate``: delete the
    IPAddress seen at ``revision`` and create it for ``service``; ``delete``: delete the
    IPAddress seen at ``revision`` (``service`` is its parent, if it names a Service)."""

    verb: Literal["create", "recreate", "delete"]
    ip: str
    service: ServiceKey | None
    revision: int = 0


@dataclass(frozen=True)
class PortOp:
    """One NodePort record write: ``create`` it for ``owner``, ``update`` (give the record seen
    at ``revision`` to ``owner``) or ``delete`` the record seen at ``revision``."""

    verb: Literal["create", "update", "delete"]
    port: int
    owner: ServiceKey | None
    revision: int = 0


@dataclass(frozen=True)
class Finding:
    """One inconsistency. ``subject`` is what the event is about: ``("service", ns, name)`` or
    ``("ipaddress", name)``. ``claim`` is the value the subject Service must still hold at act
    time (a raw clusterIP, or a port) for the finding to stand. ``reason`` None: no event."""

    type: str  # metric type: repair, duplicate, outOfRange, invalid, leak
    subject: tuple
    reason: str | None = None
    message: str | None = None
    action: str = ""
    claim: Any = None
    op: IPOp | PortOp | None = None
    log: str = ""


@dataclass
class IPRepairPlan:
    revision: int
    findings: list[Finding] = field(default_factory=list)
    pending_leaks: list[str] = field(default_factory=list)  # orphans still within the grace period


@dataclass
class PortRepairPlan:
    findings: list[Finding] = field(default_factory=list)
    # the counters for the next pass: one per leaked port kept this pass
    leak_counters: dict[int, int] = field(default_factory=dict)


def _is_service_ref(parent: tuple[str, str, str, str] | None) -> bool:
    return parent is not None and parent[0] == "" and parent[1] == "services"


def _go_parent_ref(parent: tuple[str, str, str, str] | None) -> str:
    """How Go's ``%v`` prints a *ParentReference: ``&{group resource namespace name}``."""
    return "<nil>" if parent is None else "&{" + " ".join(parent) + "}"


def service_cidr_ranges(cidrs: list[str]) -> list[tuple[int, int, int]]:
    """(version, first, last) integer bounds of the addresses each CIDR contains: exactly those
    ``ranges.prefix_contains_ip`` accepts (upstream's servicecidr.ContainsIP: the whole
    prefix, not the allocator's capped bitmap), as integers so that 100k checks need no
    parsing."""
    bounds = []
    for cidr in cidrs:
        try:
            network = ipaddress.ip_network(cidr.strip(), strict=False)
        except ValueError:
            continue
        first = int(network.network_address) + 1
        last = int(network.broadcast_address) - (1 if network.version == 4 else 0)
        if first <= last:
            bounds.append((network.version, first, last))
    return bounds


def _age_seconds(created: str, now: datetime) -> float:
    try:
        return (now - parse_rfc3339(created)).total_seconds()
    except (TypeError, ValueError, AttributeError):
        return float("inf")  # upstream assumes it is set; a zero time is ancient


def plan_ip_repair(snapshot: Snapshot, now: datetime, grace: float = LEAK_GRACE_SECONDS) -> IPRepairPlan:
    """repairip.go's two loops over one snapshot: every Service's ClusterIPs against the
    IPAddresses, then every allocator-managed IPAddress against the Services."""
    plan = IPRepairPlan(snapshot.revision)
    ranges = service_cidr_ranges(snapshot.service_cidrs)
    infos: dict[str, tuple[str, int, int] | None] = {}

    def info(raw: str) -> tuple[str, int, int] | None:
        if raw not in infos:
            infos[raw] = ip_info(raw)
        return infos[raw]

    claims: dict[ServiceKey, tuple[str, ...]] = {}
    for key, svc in snapshot.services.items():
        if svc.cluster_ips:
            claims[key] = tuple(i[0] for raw in svc.cluster_ips if (i := info(raw)) is not None)
    ips = snapshot.ip_addresses
    # IPs the Service loop settled (found right, or (re)created for a Service): the
    # IPAddress loop leaves them alone, and a later claimant sees the planned owner
    settled: dict[str, ServiceKey] = {}

    for key, svc in snapshot.services.items():
        if not svc.cluster_ips:
            continue
        namespace, name = key
        subject = ("service", namespace, name)
        for raw in svc.cluster_ips:
            parsed = info(raw)
            if parsed is None:
                plan.findings.append(Finding(
                    "invalid", subject, "ClusterIPNotValid", f"Cluster IP {raw} is not a valid IP; please recreate Service",
                    CLUSTER_IP_VALIDATION, claim=raw,
                    log=f"the ClusterIP {raw} for Service {namespace}/{name} is not a valid IP; please recreate Service"))
                continue
            ip, version, value = parsed
            family = "IPv6" if version == 6 else "IPv4"
            if not any(v == version and first <= value <= last for v, first, last in ranges):
                plan.findings.append(Finding(
                    "outOfRange", subject, "ClusterIPOutOfRange",
                    f"Cluster IP [{family}]: {ip} is not within any configured Service CIDR; please recreate service",
                    CLUSTER_IP_ALLOCATION, claim=raw,
                    log=f"the ClusterIP [{family}]: {ip} for Service {namespace}/{name} is not within any service CIDR; please recreate"))
                continue
            owner = settled.get(ip)
            if owner is not None or ip not in ips:
                if owner is None:
                    plan.findings.append(Finding(
                        "repair", subject, "ClusterIPNotAllocated", f"Cluster IP [{family}]: {ip} is not allocated; repairing",
                        CLUSTER_IP_ALLOCATION, claim=raw, op=IPOp("create", ip, key),
                        log=f"the ClusterIP [{family}]: {ip} for Service {namespace}/{name} is not allocated; repairing"))
                    settled[ip] = key
                elif owner != key:
                    plan.findings.append(_ip_duplicate(subject, family, ip, raw))
                continue
            address = ips[ip]
            parent = address.parent
            if _is_service_ref(parent) and (parent[2], parent[3]) != key and ip in claims.get((parent[2], parent[3]), ()):
                plan.findings.append(_ip_duplicate(subject, family, ip, raw))
                settled[ip] = (parent[2], parent[3])
                continue
            settled[ip] = key
            if not _is_service_ref(parent) or (parent[2], parent[3]) != key:
                plan.findings.append(Finding(
                    "repair", subject, "ClusterIPNotAllocated",
                    f"the ClusterIP [{family}]: {ip} for Service {namespace}/{name} has a wrong reference; repairing",
                    CLUSTER_IP_ALLOCATION, claim=raw, op=IPOp("recreate", ip, key, address.revision),
                    log=f"the ClusterIP [{family}]: {ip} for Service {namespace}/{name} has a wrong reference; repairing"))
            elif address.family_label != family or not address.managed:
                plan.findings.append(Finding("repair", subject, claim=raw, op=IPOp("recreate", ip, key, address.revision),
                                             log=f"the IPAddress {ip} for Service {namespace}/{name} has wrong labels; recreating"))

    for name, address in ips.items():
        if name in settled or not address.managed:
            continue
        subject = ("ipaddress", name)
        parent = address.parent
        if not _is_service_ref(parent):
            message = f"IPAddress {name} appears to have been modified, not referencing a Service {_go_parent_ref(parent)}: cleaning up"
            plan.findings.append(Finding("leak", subject, "IPAddressNotAllocated", message, IP_ADDRESS_ALLOCATION,
                                         op=IPOp("delete", name, None, address.revision), log=message))
            continue
        owner = (parent[2], parent[3])
        if owner not in snapshot.services:
            if _age_seconds(address.created, now) > grace:
                plan.findings.append(Finding(
                    "leak", subject, "IPAddressNotAllocated",
                    f"IPAddress: {name} for Service {owner[0]}/{owner[1]} appears to have leaked: cleaning up",
                    IP_ADDRESS_ALLOCATION, op=IPOp("delete", name, owner, address.revision),
                    log=f"IPAddress {name} appears to have leaked: cleaning up"))
            else:
                plan.pending_leaks.append(name)
            continue
        parsed = info(name)
        if parsed is None or parsed[0] not in claims.get(owner, ()):
            plan.findings.append(Finding(
                "leak", subject, "IPAddressWrongReference",
                f"IPAddress: {name} for Service {owner[0]}/{owner[1]} has a wrong reference; cleaning up",
                IP_ADDRESS_ALLOCATION, op=IPOp("delete", name, owner, address.revision),
                log=f"the IPAddress: {name} for Service {owner[0]}/{owner[1]} has a wrong reference {_go_parent_ref(parent)}; cleaning up"))
    return plan


def _ip_duplicate(subject: tuple, family: str, ip: str, raw: str) -> Finding:
    return Finding(
        "duplicate", subject, "ClusterIPAlreadyAllocated",
        f"Cluster IP [{family}]:{ip} was assigned to multiple services; please recreate service",
        CLUSTER_IP_ALLOCATION, claim=raw,
        log=f"the cluster IP [{family}]:{ip} for service {subject[1]}/{subject[2]} was assigned to other services; please recreate")


def plan_port_repair(snapshot: Snapshot, port_range: PortRange, leak_counters: dict[int, int] | None = None) -> PortRepairPlan:
    """portallocator/controller/repair.go over one snapshot. ``leak_counters`` is the previous
    pass's :attr:`PortRepairPlan.leak_counters` (not modified)."""
    previous = leak_counters or {}
    plan = PortRepairPlan()
    claimants: dict[int, list[ServiceKey]] = {}
    for key, svc in snapshot.services.items():
        for port in svc.node_ports:
            claimants.setdefault(port, []).append(key)

    for port in sorted(claimants):
        keys = claimants[port]
        if port_range.slot_of(port) is None:
            for namespace, name in keys:
                plan.findings.append(Finding(
                    "outOfRange", ("service", namespace, name), "PortOutOfRange",
                    f"Port {port} is not within the port range {port_range}; please recreate service", PORT_ALLOCATION, claim=port,
                    log=f"the port {port} for service {name}/{namespace} is not within the port range {port_range}; please recreate"))
            continue
        record = snapshot.node_ports.get(port)
        owner = record.owner if record is not None else None
        holder = owner if owner in keys else keys[0]
        if record is None:
            plan.findings.append(Finding(
                "repair", ("service", *holder), "PortNotAllocated", f"Port {port} is not allocated; repairing", PORT_ALLOCATION,
                claim=port, op=PortOp("create", port, holder),
                log=f"the node port {port} for service {holder[1]}/{holder[0]} is not allocated; repairing"))
        elif owner != holder:
            plan.findings.append(Finding(
                "repair", ("service", *holder), claim=port, op=PortOp("update", port, holder, record.revision),
                log=f"the node port {port} is recorded for {owner}, used by service {holder[0]}/{holder[1]}; giving it to the latter"))
        holder_seen = False
        for namespace, name in keys:
            if (namespace, name) == holder and not holder_seen:
                holder_seen = True
                continue
            plan.findings.append(Finding(
                "duplicate", ("service", namespace, name), "PortAlreadyAllocated",
                f"Port {port} was assigned to multiple services; please recreate service", PORT_ALLOCATION, claim=port,
                log=f"the node port {port} for service {name}/{namespace} was assigned to multiple services; please recreate"))

    for port, record in sorted(snapshot.node_ports.items()):
        if port in claimants:
            continue
        count = previous.get(port)
        if count is None:
            log.debug("the node port %d may have leaked: flagging for later clean up", port)
            count = NUM_REPAIRS_BEFORE_LEAK_CLEANUP - 1
        if count > 0:
            plan.leak_counters[port] = count - 1  # pretend it is still in use until count expires
        else:
            plan.findings.append(Finding("leak", ("nodeport", port), op=PortOp("delete", port, record.owner, record.revision),
                                         log=f"the node port {port} appears to have leaked: cleaning up"))
    return plan


# ---- the shell ------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexState:
    """A copy of the allocators' index and the store revision it was taken at."""

    revision: int
    ips: dict[str, frozenset[str]]  # family -> allocated IPs
    ports: frozenset[int]


@dataclass
class RepairReport:
    """What one pass did. ``ip_errors`` / ``port_errors`` count the findings acted on (or
    reported) by metric type, as the ``*_repair_*_errors_total{type}`` metrics do; findings
    that no longer held at act time are counted in ``skipped`` only."""

    revision: int = 0
    ip_errors: dict[str, int] = field(default_factory=dict)
    port_errors: dict[str, int] = field(default_factory=dict)
    ip_leaks_pending: int = 0  # orphan IPAddresses kept because they are younger than the grace period
    port_leaks_pending: int = 0  # leaked NodePort records kept until their third detection
    skipped: int = 0
    events: list[tuple[str, str]] = field(default_factory=list)  # (reason, message) recorded

    @property
    def clean(self) -> bool:
        return not (self.ip_errors or self.port_errors or self.ip_leaks_pending or self.port_leaks_pending or self.skipped)


# a Service as stored now and its view, or None when it is gone
CurrentService = tuple[dict, ServiceView] | None


class Repair:
    """Both repair loops over one Registry and its allocators."""

    def __init__(self, registry: "Registry", allocators: "ServiceAllocators", clock: Clock, *,
                 leak_grace_seconds: float = LEAK_GRACE_SECONDS, index_follows_store: bool = False):
        self.registry = registry
        self.allocators = allocators
        self.clock = clock
        self.leak_grace_seconds = leak_grace_seconds
        self.index_follows_store = index_follows_store  # see _settle_index
        self._differences: frozenset = frozenset()  # the index's differences from the store at the last pass
        self.backend = registry.backend
        self.metrics = allocators.metrics
        self.ip_addresses = registry.store("networking.k8s.io", "ipaddresses")
        self.services = registry.store("", "services")
        self.ip_events = EventRecorder(registry, clock, IP_CONTROLLER)
        self.port_events = EventRecorder(registry, clock, PORT_CONTROLLER)
        self.port_leaks: dict[int, int] = {}  # the last applied pass's PortRepairPlan.leak_counters

    # ---- one pass ----------------------------------------------------------------------------
    async def snapshot(self, *, offload: bool = False) -> Snapshot:
        return await take_snapshot(self.backend, offload=offload)

    def plan(self, snapshot: Snapshot) -> tuple[IPRepairPlan, PortRepairPlan]:
        """Both loops' decisions over ``snapshot`` (pure: safe in a worker thread)."""
        return (plan_ip_repair(snapshot, self.clock.now(), self.leak_grace_seconds),
                plan_port_repair(snapshot, self.allocators.ports.range, self.port_leaks))

    async def _snapshot_and_plan(self, *, offload: bool = False) -> tuple[IPRepairPlan, PortRepairPlan]:
        """A failure counts in both loops' reconcile_errors metric. With ``offload`` the
        decoding and the deciding run in a worker thread."""
        try:
            started = time.monotonic()
            snapshot = await self.snapshot(offload=offload)
            self._progress("repair: read the store at revision %d: %d Services, %d IPAddresses, %d NodePort records elapsed=%.3fs",
                           snapshot.revision, len(snapshot.services), len(snapshot.ip_addresses), len(snapshot.node_ports),
                           time.monotonic() - started)
            return await asyncio.to_thread(self.plan, snapshot) if offload else self.plan(snapshot)
        except Exception:
            self.metrics.ip_repair_reconcile_errors.inc()
            self.metrics.port_repair_reconcile_errors.inc()
            raise

    async def run_once(self) -> RepairReport:
        """Snapshot, decide, act, reload the index. Raises the first failure after counting it
        in the reconcile_errors metric of the loop it belongs to (both for the snapshot)."""
        return await self.apply(*await self._snapshot_and_plan())

    async def apply(self, ip_plan: IPRepairPlan, port_plan: PortRepairPlan, *, reload_index: bool = True) -> RepairReport:
        """Act on the plans; then (unless told not to) make the allocators' index equal
        the store."""
        report = RepairReport(ip_plan.revision)
        services: dict[ServiceKey, CurrentService] = {}  # each Service is read once per pass
        failure: BaseException | None = None
        try:
            await self._apply_ips(ip_plan, report, services)
        except Exception as exc:
            self.metrics.ip_repair_reconcile_errors.inc()
            failure = exc
        try:
            await self._apply_ports(port_plan, report, services)
        except Exception as exc:
            self.metrics.port_repair_reconcile_errors.inc()
            failure = failure or exc
        if reload_index:
            await self.reload_index()
        if failure is not None:
            raise failure
        return report

    async def reload_index(self) -> bool:
        """Make the allocators' index equal the store. A full ``load()`` parses every
        allocated IP (seconds for 100k, on the event loop), so first compare the store's
        keys with the index; True when a reload was needed."""
        return await self._settle_index(await self.index_differences(await self.index_state()))

    async def _settle_index(self, differences: frozenset | None) -> bool:
        """Refresh the ServiceCIDR ranges if the index matches the store, else reload it all
        (``load()`` refreshes the ranges too); True when reloaded.

        With ``index_follows_store`` (allocator/follow.py feeds the index from storage
        watches, as every apiserver of several does), a difference is usually another
        apiserver's write the watch has not delivered yet: the index is reloaded only when a
        difference is still there at the next pass (a broken feed), not at every pass of a
        busy cluster (a reload of 100k IPs stalls the loop for seconds)."""
        if differences == frozenset():
            self._differences = frozenset()
            await self.allocators.sync_cidrs()
            return False
        if self.index_follows_store and differences is not None and not differences & self._differences:
            self._differences = differences
            await self.allocators.sync_cidrs()
            return False
        self._differences = frozenset()
        log.info("repair: the allocators' index differs from the store; reloading it")
        await self.allocators.load()
        return True

    async def index_state(self) -> IndexState:
        """The index as of now, with the store revision it should match (call on the loop)."""
        return IndexState(await self.backend.current_revision(),
                          {family: frozenset(allocator.taken) for family, allocator in self.allocators.families.items()},
                          frozenset(self.allocators.ports.ports()))

    async def store_matches_index(self, state: IndexState, *, offload: bool = False) -> bool:
        """Whether the store's IPAddress and NodePort keys at ``state.revision`` are the
        index's (with ``offload``, each page's keys are parsed in a worker thread)."""
        return await self.index_differences(state, offload=offload) == frozenset()

    async def index_differences(self, state: IndexState, *, offload: bool = False) -> frozenset | None:
        """The IPs and ports where the store's keys at ``state.revision`` and the index
        differ (("ip", ip) and ("port", port)); None when that revision is compacted away."""
        stored: dict[str, set[str]] = {family: set() for family in state.ips}
        port_range = self.allocators.ports.range
        stored_ports: set[int] = set()

        def take_ips(page: list[storage.KeyValue]) -> None:
            for kv in page:
                ip = records.ip_of_key(kv.key)
                family = stored.get("IPv6" if ":" in ip else "IPv4")
                if family is not None:
                    family.add(ip)

        def take_ports(page: list[storage.KeyValue]) -> None:
            for kv in page:
                port = records.port_of_key(kv.key)
                if port is not None and port_range.slot_of(port) is not None:
                    stored_ports.add(port)

        try:
            await _each_page(self.backend, records.IP_ADDRESS_PREFIX, state.revision, take_ips, offload)
            await _each_page(self.backend, records.NODE_PORT_PREFIX, state.revision, take_ports, offload)
        except storage.Compacted:
            return None
        differing = {("port", port) for port in stored_ports ^ state.ports}
        for family, ips in state.ips.items():
            differing.update(("ip", ip) for ip in stored[family] ^ ips)
        return frozenset(differing)

    async def run(self, interval: float) -> None:
        """A pass now, then every ``interval`` seconds. Reading happens on the event loop in
        pages (the storage calls are coroutines); decoding each page and deciding happen in a
        worker thread (the decisions are pure), and so does comparing the index with the
        store; acting and reloading the index happen on the event loop, where every other
        allocator write happens."""
        while True:
            try:
                self._pass_started = started = time.monotonic()
                self._phase("snapshot")
                plans = await self._snapshot_and_plan(offload=True)
                self._phase("apply")
                report = await self.apply(*plans, reload_index=False)
                self._progress("repair: acted on %d findings at revision %d elapsed=%.3fs", len(plans[0].findings) + len(plans[1].findings),
                               report.revision, time.monotonic() - started)
                self._phase("index")
                await self._settle_index(await self.index_differences(await self.index_state(), offload=True))
                elapsed = time.monotonic() - started
                self.metrics.repair_pass_duration.observe(elapsed)
                self.metrics.repair_last_pass.set(time.time())
                self._progress("repair pass complete revision=%d elapsed=%.3fs", report.revision, elapsed)
                if not report.clean:
                    log.info("repair pass at revision %d: ClusterIPs %s, NodePorts %s, %d pending leaks, %d skipped",
                             report.revision, report.ip_errors, report.port_errors,
                             report.ip_leaks_pending + report.port_leaks_pending, report.skipped)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("repair pass failed; retrying in %.1fs", interval)
            finally:
                self._phase(None)
            await asyncio.sleep(interval)

    PHASES = ("snapshot", "apply", "index")
    SLOW_PASS = 1.0  # seconds: a pass this long (a large store) says how far it is at INFO, a quick one at DEBUG
    _pass_started = float("inf")

    def _phase(self, current: str | None) -> None:
        for phase in self.PHASES:
            self.metrics.repair_phase.labels(phase).set(1 if phase == current else 0)

    def _progress(self, message: str, *args) -> None:
        slow = time.monotonic() - self._pass_started >= self.SLOW_PASS
        log.log(logging.INFO if slow else logging.DEBUG, message, *args)

    # ---- acting ------------------------------------------------------------------------------
    async def _service_now(self, key: ServiceKey, services: dict[ServiceKey, CurrentService]) -> CurrentService:
        """The Service as stored now and its view, read once per pass (``services``)."""
        if key not in services:
            kv = await self.backend.get(self.services.info.key(*key))
            obj = _decode_kv(kv) if kv is not None else None
            services[key] = (obj, view_service(obj)) if obj is not None else None
        return services[key]

    async def _record(self, recorder: EventRecorder, finding: Finding, obj: dict | None, report: RepairReport) -> None:
        if finding.log:
            log.warning("%s", finding.log)
        if finding.reason is None or obj is None:
            return
        await recorder.event(obj, "Warning", finding.reason, finding.message or "", action=finding.action)
        report.events.append((finding.reason, finding.message or ""))

    def _count(self, counts: dict[str, int], type_: str) -> None:
        counts[type_] = counts.get(type_, 0) + 1

    async def _apply_ips(self, plan: IPRepairPlan, report: RepairReport, services: dict[ServiceKey, CurrentService]) -> None:
        report.ip_leaks_pending = len(plan.pending_leaks)
        for finding in plan.findings:
            obj = await self._ip_finding_holds(finding, services)
            if obj is None or not await self._apply_ip_op(finding.op):
                report.skipped += 1
                continue
            await self._record(self.ip_events, finding, obj, report)
            self._count(report.ip_errors, finding.type)
            self.metrics.ip_repair_errors.labels(finding.type).inc()

    async def _ip_finding_holds(self, finding: Finding, services: dict[ServiceKey, CurrentService]) -> dict | None:
        """The current object the finding's event is about, if the finding still stands (an
        IPAddress changed since is left to the write's resourceVersion precondition)."""
        if finding.subject[0] == "service":
            current = await self._service_now(finding.subject[1:], services)
            return current[0] if current is not None and finding.claim in current[1].cluster_ips else None
        op = finding.op
        assert isinstance(op, IPOp)
        parent = await self._service_now(op.service, services) if op.service is not None else None
        if parent is not None and canonical_ip(op.ip) in claimed_ips(parent[1]):
            return None  # the parent holds it now
        kv = await self.backend.get(records.ip_address_key(op.ip))
        return _decode_kv(kv) if kv is not None else None

    async def _apply_ip_op(self, op: IPOp | PortOp | None) -> bool:
        """Perform the write; False when a concurrent change got there first (404/409)."""
        if op is None:
            return True
        assert isinstance(op, IPOp)
        try:
            if op.verb in ("recreate", "delete"):
                await self.ip_addresses.delete(None, op.ip, {"preconditions": {"resourceVersion": str(op.revision)}})
            if op.verb in ("create", "recreate"):
                namespace, name = op.service
                await self.ip_addresses.create(None, records.ip_address_object(op.ip, namespace, name), field_manager=FIELD_MANAGER)
        except StatusError as exc:
            if exc.code in (404, 409):
                log.info("repair: IPAddress %s changed concurrently (%s); leaving it to the next pass", op.ip, exc.message)
                return False
            raise
        return True

    async def _apply_ports(self, plan: PortRepairPlan, report: RepairReport, services: dict[ServiceKey, CurrentService]) -> None:
        self.port_leaks = plan.leak_counters
        report.port_leaks_pending = len(plan.leak_counters)
        for finding in plan.findings:
            obj: dict | None = {}
            if finding.subject[0] == "service":
                current = await self._service_now(finding.subject[1:], services)
                if current is None or finding.claim not in current[1].node_ports:
                    report.skipped += 1
                    continue
                obj = current[0]
            if not await self._apply_port_op(finding.op, services):
                report.skipped += 1
                continue
            await self._record(self.port_events, finding, obj, report)
            self._count(report.port_errors, finding.type)
            self.metrics.port_repair_errors.labels(finding.type).inc()

    async def _apply_port_op(self, op: IPOp | PortOp | None, services: dict[ServiceKey, CurrentService]) -> bool:
        """Write the record on the backend (and tell the index, as a Service write's commit
        would); False when a concurrent change got there first."""
        if op is None:
            return True
        assert isinstance(op, PortOp)
        key = records.node_port_key(op.port)
        try:
            if op.verb == "create":
                await self.backend.create(key, records.node_port_record(*op.owner))
                self.allocators.ports.mark(op.port)
            elif op.verb == "update":
                await self.backend.update(key, records.node_port_record(*op.owner), op.revision)
            else:
                owner = await self._service_now(op.owner, services) if op.owner is not None else None
                if owner is not None and op.port in owner[1].node_ports:
                    return False  # its owner uses it now
                await self.backend.delete(key, op.revision)
                self.allocators.ports.unmark(op.port)
        except (storage.KeyExists, storage.KeyNotFound, storage.RevisionMismatch) as exc:
            log.info("repair: NodePort record %d changed concurrently (%s); leaving it to the next pass", op.port, exc)
            return False
        return True
