"""Allocating a Service's ClusterIPs, NodePorts and healthCheckNodePort, atomically with the
Service write: upstream's pkg/registry/core/service/storage/alloc.go, step for step.

* create (``allocateCreate``): ipFamilies/ipFamilyPolicy are settled (``initIPFamilyFields``),
  then one IP per family is taken (the user's, anywhere in range; or the next free one, upper
  band first), then NodePorts for NodePort/LoadBalancer Services (ports with the same number
  share one nodePort, a user-given one is looked up forward), then the healthCheckNodePort
  for ``type: LoadBalancer`` + ``externalTrafficPolicy: Local``.
* update (``allocateUpdate``): ExternalName -> anything allocates as on create, anything ->
  ExternalName releases; single -> dual stack allocates the secondary IP, dual -> single
  releases it; NodePorts no longer used are released, new ones allocated; the health check
  port follows the need for it. ``drop_type_dependent_fields`` then wipes what the new type
  no longer uses (upstream's strategy.dropTypeDependentFields).
* delete: everything the Service holds is released.

Each step returns a :class:`Txn`: storage operations (create the IPAddress / NodePort record,
delete released ones) committed in the same transaction as the Service, so a crash between
the two cannot leak or double an allocation; the in-memory index is updated at once for
reservations (reverted if the write fails) and on commit for releases.

Errors are upstream's, to the letter: a user-chosen IP or port that is taken or out of range
is 422 ``spec.clusterIPs: Invalid value: ["10.96.0.10"]: failed to allocate IP 10.96.0.10:
provided IP is already allocated``; a full range is 500 ``Internal error occurred: failed to
allocate a serviceIP: range is full``.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from typing import Any, Callable

from kubesvc.api import defaults
from kubesvc.api.errors import StatusError, internal, invalid, invalid_value
from kubesvc.util.ipnet import ip_family
from kubesvc.apiserver.allocator import records
from kubesvc.apiserver.allocator.ipalloc import AllocationError, AlreadyAllocated, IPFamilyAllocator
from kubesvc.apiserver.allocator.metrics import AllocatorMetrics
from kubesvc.apiserver.allocator.portalloc import PortAllocator
from kubesvc.apiserver.allocator.ranges import IPRange, PortRange, canonical_ip
from kubesvc.apiserver.registry.txn import Txn
from kubesvc.storage import base as storage

log = logging.getLogger("kubesvc.apiserver.allocator")

EXTERNAL_NAME = "ExternalName"
NODE_PORT_TYPES = ("NodePort", "LoadBalancer")
DEFAULT_SERVICE_CIDR = "kubernetes"


def _spec(svc: Any) -> dict:
    spec = svc.get("spec") if isinstance(svc, dict) else None
    return spec if isinstance(spec, dict) else {}


def _ports(spec: dict) -> list[dict]:
    ports = spec.get("ports")
    return [p for p in ports if isinstance(p, dict)] if isinstance(ports, list) else []


def is_headless(spec: dict) -> bool:
    ips = spec.get("clusterIPs") or []
    return bool(ips) and ips[0] == "None"


def needs_health_check(spec: dict) -> bool:
    return spec.get("type") == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local"


def should_allocate_node_ports(spec: dict) -> bool:
    if spec.get("type") == "NodePort":
        return True
    return spec.get("type") == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts") is not False


def collect_node_ports(spec: dict) -> list[int]:
    return [p["nodePort"] for p in _ports(spec) if isinstance(p.get("nodePort"), int) and p["nodePort"]]


class ServiceAllocators:
    """The apiserver's allocators: one IP allocator per configured family (primary first) and
    the NodePort allocator, plus the metrics they report."""

    def __init__(self, cluster_cidrs: list[str], node_port_range: str = "30000-32767", *,
                 static_subrange: bool = True, node_port_static_subrange: bool = True,
                 metrics: AllocatorMetrics | None = None, rng: random.Random | None = None):
        self.rng = rng or random.Random()
        self.static_subrange = static_subrange
        self.flag_ranges = [IPRange.parse(c, static_subrange) for c in cluster_cidrs]
        self.cluster_families = [r.family for r in self.flag_ranges]
        self.families = {r.family: IPFamilyAllocator(r.family, self.rng) for r in self.flag_ranges}
        for r in self.flag_ranges:
            self.families[r.family].set_ranges([(DEFAULT_SERVICE_CIDR, r)])
        self.ports = PortAllocator(PortRange.parse(node_port_range), node_port_static_subrange, self.rng)
        self.metrics = metrics or AllocatorMetrics()
        self.metrics.watch_allocators(self)
        self.backend: storage.Backend | None = None
        self._ip_address_store = None
        self._ip_address_template: dict | None = None
        self.service_cidr_controller = None  # set by build_control_plane

    # ---- wiring and the index ----------------------------------------------------------------
    def attach(self, registry) -> None:
        self.backend = registry.backend
        self._ip_address_store = registry.store("networking.k8s.io", "ipaddresses")

    def kubernetes_service_ips(self) -> list[str]:
        """network+1 of each flag range: the ``kubernetes`` Service's clusterIPs."""
        return [r.first_ip() for r in self.flag_ranges]

    async def load(self) -> None:
        """Rebuild the index from the store: ServiceCIDRs, IPAddresses and NodePort records."""
        await self.sync_cidrs()
        by_family: dict[str, set[str]] = {f: set() for f in self.families}
        for kv in (await self.backend.list(records.IP_ADDRESS_PREFIX)).kvs:
            ip = records.ip_of_key(kv.key)
            family = "IPv6" if ":" in ip else "IPv4"  # IPAddress names are canonical IPs
            if family in by_family:
                by_family[family].add(ip)
        for family, ips in by_family.items():
            self.families[family].reset(ips)
        ports = (records.port_of_key(kv.key) for kv in (await self.backend.list(records.NODE_PORT_PREFIX)).kvs)
        self.ports.reset({port for port in ports if port is not None})

    async def sync_cidrs(self) -> None:
        """Usable ranges per family from the ServiceCIDR objects: not being deleted, Ready
        not False (upstream assumes Ready when no controller set it yet); the default
        ``kubernetes`` one first, then by creation time and name."""
        cidrs = [json.loads(kv.value) for kv in (await self.backend.list("/registry/servicecidrs/")).kvs]
        usable = [c for c in cidrs if _usable_service_cidr(c)]
        usable.sort(key=lambda c: (c["metadata"]["name"] != DEFAULT_SERVICE_CIDR, c["metadata"].get("creationTimestamp", ""), c["metadata"]["name"]))
        for family, allocator in self.families.items():
            ranges = []
            for c in usable:
                for cidr in (c.get("spec") or {}).get("cidrs") or []:
                    try:
                        r = IPRange.parse(cidr, self.static_subrange)
                    except ValueError:
                        continue
                    if r.family == family:
                        ranges.append((c["metadata"]["name"], r))
            allocator.set_ranges(ranges)

    async def sync_cidrs_after_commit(self) -> None:
        """:meth:`sync_cidrs` as a ServiceCIDR write's commit hook. The write has committed, so
        a store that cannot be read just then (etcd unreachable) must not fail its request (a
        client would retry it into AlreadyExists or a Conflict): one warning line, and the
        allocation feed's watch (allocator/follow.py) re-reads the ranges once the store
        answers, as the RBAC feed's refresh does (auth/storefeed.py)."""
        try:
            await self.sync_cidrs()
        except storage.StorageError as err:
            log.warning("reading the ServiceCIDRs after a ServiceCIDR write: %s; the allocation feed applies the change", err)

    def kick_service_cidrs(self) -> None:
        if self.service_cidr_controller is not None:
            self.service_cidr_controller.kick()

    def mark_ip(self, ip: str, taken: bool) -> None:
        allocator = self.families.get(ip_family(ip))
        if allocator is not None:
            (allocator.mark if taken else allocator.unmark)(ip)

    # ---- the three entry points --------------------------------------------------------------
    async def begin_create(self, svc: dict, dry_run: bool) -> Txn:
        await self._ensure_ip_address_template()
        request = _Request(self, svc, dry_run)
        errs = defaults.default_service_ip_families(svc, self.cluster_families)
        if errs:
            raise invalid("Service", request.name, errs)
        spec = _spec(svc)
        try:
            request.alloc_cluster_ips(spec)
            if spec.get("type") in NODE_PORT_TYPES:
                request.init_node_ports(spec)
            if needs_health_check(spec):
                request.alloc_health_check_node_port(spec)
        except BaseException:
            request.txn.revert()
            raise
        return request.txn

    async def begin_update(self, new: dict, old: dict, dry_run: bool) -> Txn:
        await self._ensure_ip_address_template()
        request = _Request(self, new, dry_run)
        errs = defaults.default_service_ip_families(new, self.cluster_families, old)
        if errs:
            raise invalid("Service", request.name, errs)
        spec, old_spec = _spec(new), _spec(old)
        try:
            await request.update_cluster_ips(spec, old_spec)
            if old_spec.get("type") in NODE_PORT_TYPES and spec.get("type") in (EXTERNAL_NAME, "ClusterIP"):
                for port in collect_node_ports(old_spec):
                    await request.release_port(port)
            if spec.get("type") in NODE_PORT_TYPES:
                await request.update_node_ports(spec, old_spec)
            await request.update_health_check_node_port(spec, old_spec)
        except BaseException:
            request.txn.revert()
            raise
        defaults.drop_type_dependent_fields(new, old)
        return request.txn

    async def begin_delete(self, svc: dict) -> Txn:
        request = _Request(self, svc, dry_run=False)
        spec = _spec(svc)
        if spec.get("type") != EXTERNAL_NAME and not is_headless(spec):
            for ip in spec.get("clusterIPs") or []:
                await request.release_ip(ip)
        for port in collect_node_ports(spec):
            await request.release_port(port)
        if needs_health_check(spec) and spec.get("healthCheckNodePort"):
            await request.release_port(spec["healthCheckNodePort"])
        return request.txn

    # ---- store records -----------------------------------------------------------------------
    async def _ensure_ip_address_template(self) -> None:
        """Run the IPAddress store's create pipeline once, for :meth:`ip_address_value`'s
        template (any IP and owner do: every field they fill is replaced per allocation)."""
        if self._ip_address_template is None and self._ip_address_store is not None:
            self._ip_address_template = await self._ip_address_store.prepare_new(
                None, records.ip_address_object(_TEMPLATE_IP, "default", "template"), field_manager="kube-apiserver")

    def ip_address_value(self, ip: str, namespace: str, name: str) -> bytes:
        """The stored IPAddress, as the IPAddress store would create it. Every one has the same
        shape, so the store's pipeline (defaults, validation, managedFields) runs once for a
        template and each allocation only fills in name, uid, family label and timestamps."""
        from kubesvc.apiserver.registry.store import encode  # the registry imports us

        template = self._ip_address_template
        # a copy of the parts that change, sharing the rest with the template (a deepcopy of
        # it was half the cost of an allocation); the object only lives until it is encoded
        now = self._ip_address_store.now_text()
        meta = {**template["metadata"], "name": ip, "uid": str(uuid.uuid4()), "creationTimestamp": now,
                "labels": {**template["metadata"]["labels"], records.LABEL_IP_FAMILY: ip_family(ip)}}
        if "managedFields" in meta:
            meta["managedFields"] = [{**entry, "time": now} for entry in meta["managedFields"]]
        obj = {**template, "metadata": meta, "spec": {**template["spec"], "parentRef": records.service_ref(namespace, name)}}
        return encode(obj)


_TEMPLATE_IP = "192.0.2.1"  # TEST-NET-1 (RFC 5737): the template's placeholder, never stored


def _usable_service_cidr(obj: dict) -> bool:
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return False
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return True


class _Request:
    """One Service write's allocations, accumulated into one Txn."""

    def __init__(self, allocators: ServiceAllocators, svc: dict, dry_run: bool):
        self.allocators = allocators
        self.svc = svc
        meta = svc.get("metadata") or {}
        self.namespace, self.name = meta.get("namespace") or "", meta.get("name") or ""
        self.dry_run = dry_run
        self.txn = Txn()
        self._released: set[str] = set()

    # ---- ClusterIPs --------------------------------------------------------------------------
    def alloc_cluster_ips(self, spec: dict) -> None:
        """allocClusterIPs: one IP per family, in family order; "" marks "choose one"."""
        if spec.get("type") == EXTERNAL_NAME or is_headless(spec):
            return
        ips = list(spec.get("clusterIPs") or [])
        families = spec.get("ipFamilies") or []
        while len(ips) < len(families):
            ips.append("")
        spec["clusterIPs"] = ips
        for i, family in enumerate(families):
            ips[i] = self.reserve_ip(family, ips[i], spec)
        if ips:
            spec["clusterIP"] = ips[0]

    async def update_cluster_ips(self, spec: dict, old_spec: dict) -> None:
        if defaults.unchanged_prefer_dual_stack(spec, old_spec):
            return
        old_type, new_type = old_spec.get("type"), spec.get("type")
        if old_type == EXTERNAL_NAME and new_type != EXTERNAL_NAME:
            self.alloc_cluster_ips(spec)
            return
        if is_headless(old_spec):
            return
        if old_type != EXTERNAL_NAME and new_type == EXTERNAL_NAME:
            for ip in old_spec.get("clusterIPs") or []:
                await self.release_ip(ip)
            return
        old_families, families = old_spec.get("ipFamilies") or [], spec.get("ipFamilies") or []
        if len(old_families) == 1 and len(families) == 2:
            ips = list(spec.get("clusterIPs") or [])
            if len(ips) < 2:
                ips.append("")
            spec["clusterIPs"] = ips
            ips[1] = self.reserve_ip(families[1], ips[1], spec)
        elif len(old_families) == 2 and len(families) == 1:
            old_ips = old_spec.get("clusterIPs") or []
            if len(old_ips) > 1:
                await self.release_ip(old_ips[1])

    def reserve_ip(self, family: str, ip: str, spec: dict) -> str:
        allocators = self.allocators
        allocator = allocators.families[family]
        scope = "static" if ip else "dynamic"
        started = time.perf_counter()
        try:
            if ip:
                chosen = canonical_ip(ip) or ip
                taken = allocator.check(chosen) if self.dry_run else allocator.allocate(chosen)
            else:
                chosen, taken = allocator.next_free() if self.dry_run else allocator.allocate_next()
        except AllocationError as exc:
            cidr = allocator.range_for(ip).range.cidr if ip and allocator.range_for(ip) else (allocator.ranges[0].range.cidr if allocator.ranges else "")
            allocators.metrics.ip_errors.labels(cidr, scope).inc()
            if ip:
                raise self._ip_invalid(spec, ip, exc) from None
            raise internal(f"failed to allocate a serviceIP: {exc}") from None
        allocators.metrics.ip_allocated(taken.range.cidr, scope, time.perf_counter() - started)
        if not self.dry_run:
            key = records.ip_address_key(chosen)
            self.txn.ops.append(storage.Create(key, allocators.ip_address_value(chosen, self.namespace, self.name)))
            self.txn.reservation(key, lambda: allocator.unmark(chosen),
                                 (lambda: self._ip_invalid(spec, ip, AlreadyAllocated())) if ip else (lambda: None))
        return ip or chosen

    def _ip_invalid(self, spec: dict, ip: str, exc: Exception) -> StatusError:
        value = list(spec.get("clusterIPs") or [])
        return invalid("Service", self.name, [invalid_value("spec.clusterIPs", value, f"failed to allocate IP {ip}: {exc}")])

    async def release_ip(self, ip: str) -> None:
        chosen = canonical_ip(ip)
        if chosen is None:
            return
        key = records.ip_address_key(chosen)
        if not await self._release_record(key, lambda kv: records.ip_address_owner(json.loads(kv.value))):
            return
        self.txn.on_commit(lambda: self.allocators.mark_ip(chosen, False))
        self.txn.on_commit(self.allocators.kick_service_cidrs)  # a ServiceCIDR waiting to go may now go

    # ---- NodePorts ---------------------------------------------------------------------------
    def init_node_ports(self, spec: dict) -> None:
        """initNodePorts: ports with the same number share a nodePort; a user-given one for
        that number (anywhere later in the list) is used rather than allocating."""
        ports = _ports(spec)
        by_service_port: dict[Any, int] = {}
        allocate = should_allocate_node_ports(spec)
        for i, port in enumerate(ports):
            node_port = port.get("nodePort") or 0
            if node_port == 0 and not allocate:
                continue
            shared = by_service_port.get(port.get("port"), 0)
            if shared == 0:
                requested = next((p.get("nodePort") for p in ports if p.get("port") == port.get("port") and p.get("nodePort")), 0)
                if requested:
                    self.reserve_port(requested, self._port_invalid(i, requested))
                    port["nodePort"] = by_service_port[port.get("port")] = requested
                else:
                    port["nodePort"] = by_service_port[port.get("port")] = self.reserve_port(0, _node_port_internal)
            elif node_port != shared:
                if node_port == 0:
                    port["nodePort"] = shared
                else:
                    self.reserve_port(node_port, self._port_invalid(i, node_port))

    async def update_node_ports(self, spec: dict, old_spec: dict) -> None:
        old_numbers = collect_node_ports(old_spec)
        reserved: set[int] = set()
        seen: list[tuple[Any, int]] = []
        allocate = should_allocate_node_ports(spec)
        for i, port in enumerate(_ports(spec)):
            node_port = port.get("nodePort") or 0
            if node_port == 0 and not allocate:
                continue
            if node_port:
                if node_port not in old_numbers and node_port not in reserved:
                    self.reserve_port(node_port, self._port_invalid(i, node_port))
                    reserved.add(node_port)
            else:
                node_port = port["nodePort"] = self.reserve_port(0, _node_port_internal)
            entry = (port.get("protocol"), node_port)
            if entry in seen:
                raise internal(f"duplicate nodePort: {{{entry[0]} {entry[1]}}}")
            seen.append(entry)
        new_numbers = collect_node_ports(spec)
        for number in old_numbers:
            if number not in new_numbers:
                await self.release_port(number)

    def alloc_health_check_node_port(self, spec: dict) -> None:
        requested = spec.get("healthCheckNodePort") or 0
        if requested:
            self.reserve_port(requested, lambda exc: internal(f"failed to allocate requested HealthCheck NodePort {requested}: {exc}"))
        else:
            spec["healthCheckNodePort"] = self.reserve_port(0, lambda exc: internal(f"failed to allocate a HealthCheck NodePort {requested}: {exc}"))

    async def update_health_check_node_port(self, spec: dict, old_spec: dict) -> None:
        needed, needs = needs_health_check(old_spec), needs_health_check(spec)
        if needs and not needed:
            self.alloc_health_check_node_port(spec)
        elif needed and not needs and old_spec.get("healthCheckNodePort"):
            await self.release_port(old_spec["healthCheckNodePort"])

    def reserve_port(self, port: int, error: Callable[[Exception], StatusError]) -> int:
        allocators = self.allocators
        allocator = allocators.ports
        scope = "static" if port else "dynamic"
        try:
            if port:
                allocator.check(port) if self.dry_run else allocator.allocate(port)
                chosen = port
            else:
                chosen = allocator.next_free() if self.dry_run else allocator.allocate_next()
        except AllocationError as exc:
            allocators.metrics.port_errors.labels(scope).inc()
            raise error(exc) from None
        allocators.metrics.port_allocations.labels(scope).inc()
        if not self.dry_run:
            key = records.node_port_key(chosen)
            self.txn.ops.append(storage.Create(key, records.node_port_record(self.namespace, self.name)))
            self.txn.reservation(key, lambda: allocator.unmark(chosen),
                                 (lambda: error(AlreadyAllocated("port"))) if port else (lambda: None))
        return chosen

    def _port_invalid(self, index: int, port: int) -> Callable[[Exception], StatusError]:
        return lambda exc: invalid("Service", self.name, [invalid_value(f"spec.ports[{index}].nodePort", port, str(exc))])

    async def release_port(self, port: int) -> None:
        key = records.node_port_key(port)
        if not await self._release_record(key, lambda kv: records.node_port_owner(kv.value)):
            return
        self.txn.on_commit(lambda: self.allocators.ports.unmark(port))

    # ---- shared ------------------------------------------------------------------------------
    async def _release_record(self, key: str, owner_of: Callable[[storage.KeyValue], tuple[str, str] | None]) -> bool:
        """Delete the allocation record in the write's transaction if this Service owns it.
        False when it belongs to another Service (a duplicate the repair loop reports)."""
        if key in self._released or self.dry_run:
            return False
        self._released.add(key)
        kv = await self.allocators.backend.get(key)
        if kv is None:
            return True
        if owner_of(kv) != (self.namespace, self.name):
            return False
        self.txn.ops.append(storage.Delete(key, kv.mod_revision))
        return True


def _node_port_internal(exc: Exception) -> StatusError:
    return internal(f"failed to allocate a nodePort: {exc}")
