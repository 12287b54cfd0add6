"""The cluster's DNS data in memory: what ``kubesvc dns`` answers from.

CoreDNS's ``kubernetes`` plugin keeps client-go informers on Services, EndpointSlices and
Namespaces and reduces each object to what DNS needs (plugin/kubernetes/object/service.go,
endpoint.go). This module is that reduction and the indexes built from it; the informer
handlers call :meth:`ClusterRecords.set_service` & co., and ``answer`` reads.

What is kept, and why (the spec's sections, schema 1.1.0):

- a **Service** (§2.3-§2.5): its kind (ClusterIP, which NodePort and LoadBalancer count as;
  headless, ``clusterIP: None``; ExternalName), every entry of ``spec.clusterIPs`` (so a
  dual-stack Service answers A and AAAA), its ports (name, protocol, port) and
  ``publishNotReadyAddresses``;
- an **EndpointSlice** (§2.4): the Service it belongs to (label ``kubernetes.io/service-name``;
  every slice with it is merged, whoever manages it and whatever its address type, as CoreDNS
  does), its ports, and each endpoint's addresses, ``hostname`` and ``ready`` (a missing
  ``ready`` counts as ready, as the EndpointSlice API says of an unknown state);
- a **Namespace**: that it exists (``<ns>.svc.<zone>`` is NODATA for one that exists,
  NXDOMAIN otherwise, as CoreDNS answers with its Namespace informer);
- a **Pod**, only in ``pods verified`` mode (CoreDNS runs its Pod informer only then): its
  namespace and ``status.podIP`` (the primary IP only, CoreDNS's ``podIPIndexFunc``). As
  CoreDNS's (controller.go, object/pod.go): Pods in phase Succeeded, Failed or Unknown are not
  kept (its list/watch carries ``fieldSelector=status.phase!=Succeeded,...``, so a Pod leaving
  for one of them is a delete); an add or update of a Pod with ``deletionTimestamp`` set is
  ignored (``ToPod``'s ``errPodTerminating``: a terminating Pod never seen before is not
  added, one already kept stays as it was until it is deleted); and only a change of the Pod
  IP counts as a change (``podModified``), so status churn leaves rendered answers valid.

An endpoint's DNS name (§2.4.1, CoreDNS ``endpointHostname``) is its ``hostname`` if set, else
the address with dots (IPv4) or colons (IPv6, as stored: compressed) turned into dashes, with a
``0`` appended when that ends in ``-`` (``fd00::`` -> ``fd00--0``).

Reverse lookups (§2.3.3, §2.4.3) use two indexes kept up to date per event: ClusterIP -> the
Services holding it, and endpoint address -> (namespace, Service, endpoint name) with a count,
since the same address may appear in several slices of one Service during churn.

``serial`` is the Unix time of the last change, the SOA serial CoreDNS reports
(``updateModified``); the clock is injected.
"""

from __future__ import annotations

import ipaddress
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

SERVICE_NAME_LABEL = "kubernetes.io/service-name"

POD_PHASES_NOT_LISTED = ("Succeeded", "Failed", "Unknown")  # CoreDNS's Pod field selector leaves them out

CLUSTER_IP = "ClusterIP"
HEADLESS = "Headless"
EXTERNAL_NAME = "ExternalName"


@dataclass(frozen=True)
class Port:
    name: str
    protocol: str  # as the API spells it: TCP, UDP, SCTP
    port: int


@dataclass(frozen=True)
class ServiceRecord:
    namespace: str
    name: str
    kind: str  # CLUSTER_IP, HEADLESS or EXTERNAL_NAME
    cluster_ips: tuple[str, ...] = ()
    ports: tuple[Port, ...] = ()
    external_name: str = ""
    publish_not_ready: bool = False


@dataclass(frozen=True)
class EndpointRecord:
    address: str
    hostname: str  # the DNS label: spec.hostname, else the dashed address
    ready: bool


@dataclass(frozen=True)
class SliceRecord:
    namespace: str
    name: str
    service: str
    ports: tuple[Port, ...]
    endpoints: tuple[EndpointRecord, ...]


def dashed_address(address: str) -> str:
    """CoreDNS's endpoint name for an address without a hostname: ``172.0.0.2`` ->
    ``172-0-0-2``, ``5678:abcd::1`` -> ``5678-abcd--1``, ``fd00::`` -> ``fd00--0``."""
    dashed = address.replace(".", "-").replace(":", "-")
    return dashed + "0" if dashed.endswith("-") else dashed


def service_record(obj: dict) -> ServiceRecord:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    ports = tuple(Port(p.get("name") or "", p.get("protocol") or "TCP", int(p.get("port") or 0)) for p in spec.get("ports") or ())
    common = {"namespace": meta.get("namespace") or "default", "name": meta.get("name") or "", "ports": ports,
              "publish_not_ready": bool(spec.get("publishNotReadyAddresses"))}
    if spec.get("type") == "ExternalName":
        return ServiceRecord(kind=EXTERNAL_NAME, external_name=spec.get("externalName") or "", **common)
    ips = [ip for ip in (spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])) if ip and ip != "None"]
    if not ips:
        return ServiceRecord(kind=HEADLESS, **common)
    return ServiceRecord(kind=CLUSTER_IP, cluster_ips=tuple(ips), **common)


def slice_record(obj: dict) -> SliceRecord | None:
    """The slice's DNS data, or None for a slice that names no Service."""
    meta = obj.get("metadata") or {}
    service = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
    if not service:
        return None
    ports = tuple(Port(p.get("name") or "", p.get("protocol") or "TCP", int(p["port"])) for p in obj.get("ports") or () if p.get("port") is not None)
    endpoints = []
    for endpoint in obj.get("endpoints") or ():
        ready = (endpoint.get("conditions") or {}).get("ready")
        hostname = endpoint.get("hostname") or ""
        for address in endpoint.get("addresses") or ():
            endpoints.append(EndpointRecord(address, hostname or dashed_address(address), ready is not False))
    return SliceRecord(meta.get("namespace") or "default", meta.get("name") or "", service, ports, tuple(endpoints))


def canonical_ip(address: str) -> str:
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return address


@dataclass
class ClusterRecords:
    """Services, EndpointSlices and Namespaces by key, with the reverse indexes; every lookup
    key is lowercase (the spec: "all comparisons between query data and data in Kubernetes
    are case-insensitive")."""

    clock: Callable[[], float] = time.time
    services: dict[tuple[str, str], ServiceRecord] = field(default_factory=dict)
    slices: dict[tuple[str, str], SliceRecord] = field(default_factory=dict)
    slices_of: dict[tuple[str, str], dict[str, SliceRecord]] = field(default_factory=dict)
    namespaces: set[str] = field(default_factory=set)
    services_in: Counter = field(default_factory=Counter)  # namespace -> Services (a namespace holding one exists)
    by_cluster_ip: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    by_endpoint_ip: dict[str, Counter] = field(default_factory=dict)  # ip -> Counter[(ns, svc, hostname)]
    pod_ips: dict[tuple[str, str], str] = field(default_factory=dict)  # (ns, pod) -> status.podIP (verified mode)
    pods_at: dict[str, Counter] = field(default_factory=dict)  # status.podIP -> Counter[namespace]
    serial: int = 0
    generation: int = 0  # bumped on every change: a cache of answers keyed on it stays exact
    listeners: list[Callable[[tuple[str, str]], None]] = field(default_factory=list)  # told (ns, svc) when a Service or its slices change

    def __post_init__(self) -> None:
        self.serial = int(self.clock())

    def _changed(self, *services: tuple[str, str]) -> None:
        self.serial = int(self.clock()) & 0xFFFFFFFF
        self.generation += 1
        for service in services:
            for listener in self.listeners:
                listener(service)

    # -- Services

    def set_service(self, obj: dict) -> None:
        record = service_record(obj)
        self._drop_service((record.namespace.lower(), record.name.lower()))
        key = (record.namespace.lower(), record.name.lower())
        self.services[key] = record
        self.services_in[key[0]] += 1
        for ip in record.cluster_ips:
            self.by_cluster_ip.setdefault(canonical_ip(ip), []).append(key)
        self._changed(key)

    def delete_service(self, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        key = ((meta.get("namespace") or "default").lower(), (meta.get("name") or "").lower())
        self._drop_service(key)
        self._changed(key)

    def _drop_service(self, key: tuple[str, str]) -> None:
        old = self.services.pop(key, None)
        if old is None:
            return
        self.services_in[key[0]] -= 1
        if self.services_in[key[0]] <= 0:
            del self.services_in[key[0]]
        for ip in old.cluster_ips:
            holders = self.by_cluster_ip.get(canonical_ip(ip), [])
            if key in holders:
                holders.remove(key)
            if not holders:
                self.by_cluster_ip.pop(canonical_ip(ip), None)

    # -- EndpointSlices

    def set_slice(self, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        key = ((meta.get("namespace") or "default").lower(), (meta.get("name") or "").lower())
        services = self._drop_slice(key)
        record = slice_record(obj)
        if record is not None:
            self.slices[key] = record
            self.slices_of.setdefault((key[0], record.service.lower()), {})[key[1]] = record
            self._count_endpoints(record, +1)
            services += ((key[0], record.service.lower()),)
        self._changed(*dict.fromkeys(services))

    def delete_slice(self, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        self._changed(*self._drop_slice(((meta.get("namespace") or "default").lower(), (meta.get("name") or "").lower())))

    def _drop_slice(self, key: tuple[str, str]) -> tuple[tuple[str, str], ...]:
        """Forget the slice; the Service it belonged to (none if it was not known)."""
        old = self.slices.pop(key, None)
        if old is None:
            return ()
        service_key = (key[0], old.service.lower())
        siblings = self.slices_of.get(service_key, {})
        siblings.pop(key[1], None)
        if not siblings:
            self.slices_of.pop(service_key, None)
        self._count_endpoints(old, -1)
        return (service_key,)

    def _count_endpoints(self, record: SliceRecord, delta: int) -> None:
        for endpoint in record.endpoints:
            if not endpoint.ready:  # CoreDNS drops not-ready endpoints when it reads the slice
                continue
            ip = canonical_ip(endpoint.address)
            owners = self.by_endpoint_ip.setdefault(ip, Counter())
            owners[(record.namespace, record.service, endpoint.hostname)] += delta
            if owners[(record.namespace, record.service, endpoint.hostname)] <= 0:
                del owners[(record.namespace, record.service, endpoint.hostname)]
            if not owners:
                del self.by_endpoint_ip[ip]

    # -- Namespaces

    def set_namespace(self, obj: dict) -> None:
        self.namespaces.add(((obj.get("metadata") or {}).get("name") or "").lower())
        self._changed()

    def delete_namespace(self, obj: dict) -> None:
        self.namespaces.discard(((obj.get("metadata") or {}).get("name") or "").lower())
        self._changed()

    # -- Pods (``pods verified`` only)

    def set_pod(self, obj: dict) -> None:
        meta, status = obj.get("metadata") or {}, obj.get("status") or {}
        key = ((meta.get("namespace") or "default").lower(), (meta.get("name") or "").lower())
        if status.get("phase") in POD_PHASES_NOT_LISTED:
            self.delete_pod(obj)
            return
        if meta.get("deletionTimestamp"):  # CoreDNS's ToPod: errPodTerminating, the event is skipped
            return
        ip = status.get("podIP") or ""
        if self.pod_ips.get(key, "") == ip:  # podModified: nothing DNS shows changed
            return
        self._drop_pod(key)
        if ip:
            self.pod_ips[key] = ip
            self.pods_at.setdefault(ip, Counter())[key[0]] += 1
        self._changed()

    def delete_pod(self, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        if self._drop_pod(((meta.get("namespace") or "default").lower(), (meta.get("name") or "").lower())):
            self._changed()

    def _drop_pod(self, key: tuple[str, str]) -> bool:
        ip = self.pod_ips.pop(key, None)
        if ip is None:
            return False
        namespaces = self.pods_at[ip]
        namespaces[key[0]] -= 1
        if namespaces[key[0]] <= 0:
            del namespaces[key[0]]
        if not namespaces:
            del self.pods_at[ip]
        return True

    def pod_exists(self, namespace: str, ip: str) -> bool:
        """A kept Pod in ``namespace`` has exactly ``ip`` as its ``status.podIP`` (CoreDNS
        compares the text: ``ip == p.PodIP``)."""
        return namespace in self.pods_at.get(ip, ())

    # -- reads

    def namespace_exists(self, namespace: str) -> bool:
        return namespace in self.namespaces or namespace in self.services_in

    def service(self, namespace: str, name: str) -> ServiceRecord | None:
        return self.services.get((namespace, name))

    def endpoints(self, service: ServiceRecord) -> list[tuple[SliceRecord, EndpointRecord]]:
        """The endpoints DNS publishes for ``service``: the ready ones of every slice (all of
        them with ``publishNotReadyAddresses``), in slice-name order."""
        slices = self.slices_of.get((service.namespace.lower(), service.name.lower()), {})
        return [(s, e) for _, s in sorted(slices.items()) for e in s.endpoints if e.ready or service.publish_not_ready]


def load(services: list[dict] = (), slices: list[dict] = (), namespaces: list[str] = (), clock: Callable[[], float] = lambda: 3.0,
         pods: list[dict] = ()) -> ClusterRecords:
    """A ClusterRecords holding these objects (tests and the bench build theirs this way)."""
    records = ClusterRecords(clock=clock)
    for obj in pods:
        records.set_pod(obj)
    for name in namespaces:
        records.set_namespace({"metadata": {"name": name}})
    for obj in services:
        records.set_service(obj)
    for obj in slices:
        records.set_slice(obj)
    return records
