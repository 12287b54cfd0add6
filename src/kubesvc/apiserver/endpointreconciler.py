"""Where Pods reach the API: the ``default/kubernetes`` Endpoints and EndpointSlice, kept at the
advertise addresses of the live apiservers (upstream's lease endpoint reconciler,
``pkg/controlplane/reconcilers/lease.go`` with the 1.32 ``endpointsadapter.go``; the default
``--endpoint-reconciler-type=lease``).

Every apiserver, every ``EndpointInterval`` (10 s), in the ``kubernetes`` Service controller:

1. **Renews its lease**: a storage key ``/registry/masterleases/<advertise IP>`` holding an
   Endpoints-shaped value with its address, alive for 15 s (upstream's etcd TTL; here an expiry
   time in the value: expired keys count as absent and are deleted on sight). An apiserver that
   stops renewing drops out within 15 s.
2. **Lists the live leases**. None at all (its own was just written) means storage is not to be
   trusted: ``no API server IP addresses were listed in storage, refusing to erase all
   endpoints for the kubernetes Service``.
3. **Endpoints** ``default/kubernetes``: label ``endpointslice.kubernetes.io/skip-mirror:
   "true"`` (the mirroring controller leaves it alone), one subset with every live address
   (sorted, as ``RepackSubsets`` leaves them) and the port ``{name: https, port: <secure port>,
   protocol: TCP}``. Written only when the format, the addresses or the label are wrong, or the
   ports are and ports are reconciled (on the first pass after start; later only when empty,
   as upstream's ``reconcilePorts``).
4. **EndpointSlice** ``default/kubernetes`` (``endpointSliceFromEndpoints``): label
   ``kubernetes.io/service-name: kubernetes`` and no ``managed-by`` label (the EndpointSlice
   controller ignores it: the Service has no selector), ``addressType`` IPv4 (IPv6 when every
   address is), an endpoint per address with ``ready: true``, the same ports; updated when
   endpoints, ports or labels differ.

On shutdown the apiserver deletes its lease and reconciles once more, so its address leaves at
once; the last one leaves the objects empty. A loopback advertise address (``kubesvc
apiserver`` bound to 127.0.0.1 without ``--advertise-address``) is unreachable from Pods and
invalid in Endpoints: nothing is reconciled then (upstream would pick the host's default
interface instead).
"""

from __future__ import annotations

import asyncio
import copy
import ipaddress
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from kubesvc.api.errors import StatusError
from kubesvc.apiserver.registry.store import Registry
from kubesvc.storage import base as storage
from kubesvc.util.clock import Clock
from kubesvc.util.golang import parse_rfc3339, rfc3339

log = logging.getLogger("kubesvc.apiserver")

NAME, NAMESPACE = "kubernetes", "default"
LEASE_PREFIX = "/registry/masterleases/"
LEASE_TTL = timedelta(seconds=15)  # upstream's DefaultEndpointReconcilerTTL
INTERVAL = 10.0  # upstream's DefaultEndpointReconcilerInterval
LABEL_SKIP_MIRROR = "endpointslice.kubernetes.io/skip-mirror"
LABEL_SERVICE_NAME = "kubernetes.io/service-name"
FIELD_MANAGER = "kube-apiserver"
NO_LEASES = "no API server IP addresses were listed in storage, refusing to erase all endpoints for the kubernetes Service"


def endpoint_ports(secure_port: int) -> list[dict]:
    """``createEndpointPortSpec(securePort, "https")``."""
    return [{"name": "https", "port": secure_port, "protocol": "TCP"}]


# ---- decisions (pure) -------------------------------------------------------------------------


def reconciled_endpoints(current: dict | None, ips: list[str], ports: list[dict], reconcile_ports: bool) -> dict | None:
    """The Endpoints to write (None: ``current`` is right). ``doReconcile`` with
    ``checkEndpointSubsetFormatWithLease`` and ``setSkipMirrorTrue``."""
    endpoints = copy.deepcopy(current) if current else {"metadata": {"name": NAME, "namespace": NAMESPACE}}
    labels = endpoints["metadata"].setdefault("labels", {})
    skip_mirror_changed = labels.get(LABEL_SKIP_MIRROR) != "true"
    labels[LABEL_SKIP_MIRROR] = "true"
    subsets = endpoints.get("subsets") or []
    format_ok = len(subsets) == 1
    addresses = [a.get("ip") for a in (subsets[0].get("addresses") or [])] if format_ok else []
    ips_ok = format_ok and len(addresses) == len(ips) and len(set(addresses)) == len(addresses) and set(addresses) == set(ips)
    ports_ok = format_ok and (not reconcile_ports or (subsets[0].get("ports") or []) == ports)
    if current is not None and not skip_mirror_changed and format_ok and ips_ok and ports_ok:
        return None
    if not format_ok:
        subsets = [{"addresses": [], "ports": ports}]
    subset = dict(subsets[0])
    if not format_ok or not ips_ok:
        subset["addresses"] = [{"ip": ip} for ip in sorted(ips)]  # RepackSubsets sorts them
    if not ports_ok or not subset.get("ports"):
        subset["ports"] = ports
    subset.pop("notReadyAddresses", None)
    endpoints["subsets"] = [subset] if subset["addresses"] else []  # RepackSubsets drops an empty subset
    return endpoints


def endpoint_slice_for(endpoints: dict) -> dict:
    """``endpointSliceFromEndpoints``: the slice the reconciler keeps beside the Endpoints."""
    subsets = endpoints.get("subsets") or []
    subset = subsets[0] if subsets else {}
    ready = [a.get("ip", "") for a in subset.get("addresses") or []]
    not_ready = [a.get("ip", "") for a in subset.get("notReadyAddresses") or []]
    every = ready + not_ready
    ipv6 = bool(every) and all(":" in ip for ip in every)
    family = "IPv6" if ipv6 else "IPv4"
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": endpoints["metadata"]["name"], "namespace": endpoints["metadata"]["namespace"],
                     "labels": {LABEL_SERVICE_NAME: endpoints["metadata"]["name"]}},
        "addressType": family,
        "endpoints": [{"addresses": [ip], "conditions": {"ready": is_ready}}
                      for ips, is_ready in ((ready, True), (not_ready, False)) for ip in ips if (":" in ip) == ipv6],
        "ports": [{"name": p.get("name", ""), "port": p.get("port"), "protocol": p.get("protocol", "TCP")} for p in subset.get("ports") or []],
    }


def slice_differs(current: dict, desired: dict) -> bool:
    return any(current.get(k) != desired.get(k) for k in ("endpoints", "ports")) or \
        (current.get("metadata") or {}).get("labels") != desired["metadata"]["labels"]


# ---- master leases in storage -----------------------------------------------------------------


@dataclass
class MasterLeases:
    """Upstream ``storageLeases`` on the Backend: one key per apiserver, expiring."""

    backend: storage.Backend
    clock: Clock
    ttl: timedelta = LEASE_TTL

    def _value(self, ip: str, expires: datetime) -> bytes:
        return json.dumps({"kind": "Endpoints", "apiVersion": "v1", "metadata": {"name": ip},
                           "subsets": [{"addresses": [{"ip": ip}]}], "expiresAt": rfc3339(expires)}).encode()

    async def update(self, ip: str) -> None:
        key, value = LEASE_PREFIX + ip, self._value(ip, self.clock.now() + self.ttl)
        for _ in range(5):  # another apiserver of the same address racing: write after it
            current = await self.backend.get(key)
            try:
                if current is None:
                    await self.backend.create(key, value)
                else:
                    await self.backend.update(key, value, current.mod_revision)
                return
            except (storage.KeyExists, storage.RevisionMismatch, storage.KeyNotFound):
                continue

    async def live(self) -> list[str]:
        """The addresses of unexpired leases (expired ones are deleted)."""
        now = self.clock.now()
        ips = []
        for kv in (await self.backend.list(LEASE_PREFIX)).kvs:
            try:
                lease = json.loads(kv.value)
                ip = lease["subsets"][0]["addresses"][0]["ip"]
                expired = parse_rfc3339(lease["expiresAt"]) <= now
            except (ValueError, KeyError, IndexError, TypeError):
                ip, expired = "", True
            if expired:
                try:
                    await self.backend.delete(kv.key, kv.mod_revision)
                except storage.StorageError:
                    pass  # renewed or removed meanwhile
            elif ip:
                ips.append(ip)
        return ips

    async def remove(self, ip: str) -> None:
        try:
            await self.backend.delete(LEASE_PREFIX + ip)
        except storage.KeyNotFound:
            pass


# ---- the reconciler ----------------------------------------------------------------------------


def reachable_address(ip: str | None) -> bool:
    if not ip:
        return False
    address = ipaddress.ip_address(ip)
    return not (address.is_loopback or address.is_unspecified)


class EndpointReconciler:
    """Upstream's leaseEndpointReconciler for this apiserver's ``advertise`` address."""

    def __init__(self, registry: Registry, advertise: str | None, secure_port: int, clock: Clock):
        self.registry = registry
        self.advertise = advertise
        self.ports = endpoint_ports(secure_port)
        self.leases = MasterLeases(registry.backend, clock)
        self.endpoints = registry.store("", "endpoints")
        self.slices = registry.store("discovery.k8s.io", "endpointslices")
        self._stopping = False

    @property
    def enabled(self) -> bool:
        return reachable_address(self.advertise)

    async def reconcile(self, reconcile_ports: bool = False) -> None:
        """``ReconcileEndpoints``: renew our lease, then make the objects match the live leases."""
        if not self.enabled or self._stopping:
            return
        await self.leases.update(self.advertise)
        await self._sync(reconcile_ports)

    async def remove(self) -> None:
        """``StopReconciling`` + ``RemoveEndpoints``: our address leaves now."""
        if not self.enabled:
            return
        self._stopping = True
        await self.leases.remove(self.advertise)
        await self._sync(reconcile_ports=True)

    async def _sync(self, reconcile_ports: bool) -> None:
        ips = await self.leases.live()
        if not ips and not self._stopping:
            raise RuntimeError(NO_LEASES)
        current = await self._get(self.endpoints)
        desired = reconciled_endpoints(current, ips, self.ports, reconcile_ports)
        if desired is None:
            endpoints = current
        else:
            log.warning("resetting endpoints for master service %r to %s", NAME, sorted(ips))
            endpoints = await self._write(self.endpoints, current, desired)
        await self._ensure_slice(endpoints)

    async def _get(self, store) -> dict | None:
        try:
            return await store.get(NAMESPACE, NAME)
        except StatusError as err:
            if err.code == 404:
                return None
            raise

    async def _write(self, store, current: dict | None, desired: dict) -> dict:
        if current is None:
            try:
                return await store.create(NAMESPACE, desired, field_manager=FIELD_MANAGER)
            except StatusError as err:
                if err.code != 409:
                    raise
                return desired  # another apiserver made it: the next pass looks again
        result, _ = await store.update(NAMESPACE, NAME, desired, field_manager=FIELD_MANAGER)
        return result

    async def _ensure_slice(self, endpoints: dict) -> None:
        desired = endpoint_slice_for(endpoints)
        current = await self._get(self.slices)
        if current is not None and current.get("addressType") != desired["addressType"]:
            await self.slices.delete(NAMESPACE, NAME, {})  # a family change needs a new slice
            current = None
        if current is None:
            await self._write(self.slices, None, desired)
        elif slice_differs(current, desired):
            updated = {**desired, "metadata": {**current["metadata"], "labels": desired["metadata"]["labels"]}}
            await self._write(self.slices, current, updated)

    async def run(self, interval: float = INTERVAL) -> None:
        """First pass reconciles ports too, as upstream's start; then every ``interval``."""
        reconcile_ports = True
        while True:
            try:
                await self.reconcile(reconcile_ports)
                reconcile_ports = False
            except Exception as err:  # noqa: BLE001 - a conflict or a store hiccup: the next pass retries
                log.warning("unable to sync kubernetes service endpoints: %s", err)
            await asyncio.sleep(interval)
