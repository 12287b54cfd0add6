"""The pure part of LoadBalancer IPAM: which addresses a Service should have, from which pools.

No I/O here; the controller (controller.py) feeds it pools and Services and writes what it
decides. The rules, from Cilium's LB-IPAM (operator/pkg/lbipam) and MetalLB's allocator
(internal/allocator), with upstream's Service fields:

* **Which Services**: ``spec.type: LoadBalancer`` with no ``spec.loadBalancerClass`` or ours
  (``kubesvc.io/loadbalancer``). A Service of another class belongs to another implementation
  and is left alone, as upstream's service controller does (``wantsLoadBalancer`` /
  ``LoadBalancerClass`` checks in cloud-provider's controller).
* **Asked-for addresses**: the ``kubesvc.io/loadbalancer-ips`` annotation (comma-separated,
  as Cilium's ``lbipam.cilium.io/ips``) or else the deprecated but honoured
  ``spec.loadBalancerIP``. Every one must lie in an enabled pool that selects the Service and be
  free (or already this Service's); else nothing is given and the failure is reported (MetalLB's
  ``AllocationFailed`` Event: ``Failed to allocate IP for "ns/name": ...``).
* **Otherwise**: one address per family in ``spec.ipFamilies`` (so a dual-stack Service gets an
  IPv4 and an IPv6 address when pools of both families exist), keeping the ones it already has
  when they are still valid, each new one the lowest free address of the first pool (by name)
  that selects the Service and has one. None free: ``no available IPs``, the Service stays
  pending and is retried when pools or Services change.
* **Memory**: the Services' ``status.loadBalancer.ingress`` are the allocator's memory, as the
  Nodes' podCIDRs are the node IPAM's: at start every address recorded there is taken first
  (oldest Service first when two claim one), so a restarted controller never gives one twice.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from kubesvc.api.selectors import LabelSelector, everything, selector_from_label_selector

LOADBALANCER_CLASS = "kubesvc.io/loadbalancer"
ANNOTATION_IPS = "kubesvc.io/loadbalancer-ips"
NO_AVAILABLE_IPS = "no available IPs"

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Pool:
    name: str
    ranges: tuple[tuple[Address, Address], ...]  # (first, last), both included
    selector: LabelSelector = field(default_factory=everything)
    disabled: bool = False

    def contains(self, ip: Address) -> bool:
        return any(first.version == ip.version and first <= ip <= last for first, last in self.ranges)

    def serves(self, service: dict) -> bool:
        return self.selector.matches((service.get("metadata") or {}).get("labels"))


def block_range(block: dict) -> tuple[Address, Address]:
    """A pool block's (first, last) addresses. An IPv4 CIDR shorter than /31 leaves out its
    network and broadcast addresses (hosts on the LAN cannot use them)."""
    if block.get("cidr"):
        net = ipaddress.ip_network(block["cidr"], strict=False)
        if net.version == 4 and net.prefixlen < 31:
            return net.network_address + 1, net.broadcast_address - 1
        return net.network_address, net.broadcast_address
    first = ipaddress.ip_address(block["start"])
    return first, ipaddress.ip_address(block.get("stop") or block["start"])


def pool_from_object(obj: dict) -> Pool:
    spec = obj.get("spec") or {}
    selector = spec.get("serviceSelector")
    return Pool(name=obj["metadata"]["name"], ranges=tuple(block_range(b) for b in spec.get("blocks") or ()),
                selector=everything() if selector is None else selector_from_label_selector(selector),
                disabled=bool(spec.get("disabled")))


def service_key(service: dict) -> str:
    meta = service.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def is_ours(service: dict) -> bool:
    """A LoadBalancer Service this implementation gives addresses to."""
    spec = service.get("spec") or {}
    return spec.get("type") == "LoadBalancer" and spec.get("loadBalancerClass") in (None, "", LOADBALANCER_CLASS)


def requested_ips(service: dict) -> list[str]:
    """The addresses the Service asks for: the annotation, else ``spec.loadBalancerIP``."""
    annotation = ((service.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_IPS, "")
    if annotation.strip():
        return [part.strip() for part in annotation.split(",") if part.strip()]
    ip = (service.get("spec") or {}).get("loadBalancerIP") or ""
    return [ip] if ip else []


def ingress_ips(service: dict) -> list[str]:
    ingress = (((service.get("status") or {}).get("loadBalancer") or {}).get("ingress")) or []
    return [entry["ip"] for entry in ingress if isinstance(entry, dict) and entry.get("ip")]


def wanted_families(service: dict) -> list[int]:
    families = (service.get("spec") or {}).get("ipFamilies") or ["IPv4"]
    return [6 if family == "IPv6" else 4 for family in families]


class AllocationFailed(Exception):
    """What could not be given, in MetalLB's words (the Event message's tail)."""


@dataclass
class Allocator:
    pools: dict[str, Pool] = field(default_factory=dict)
    owners: dict[Address, str] = field(default_factory=dict)  # address -> "namespace/name"

    def set_pool(self, pool: Pool) -> None:
        self.pools[pool.name] = pool

    def remove_pool(self, name: str) -> None:
        self.pools.pop(name, None)

    def held_by(self, key: str) -> list[Address]:
        return sorted((ip for ip, owner in self.owners.items() if owner == key), key=lambda ip: (ip.version, ip))

    def release(self, key: str) -> list[Address]:
        released = self.held_by(key)
        for ip in released:
            del self.owners[ip]
        return released

    def occupy(self, key: str, ips: list[str]) -> None:
        """Record addresses a Service already has (at start), when they are free and pooled."""
        for text in ips:
            ip = _parse(text)
            if ip is not None and ip not in self.owners and self._pool_of(ip) is not None:
                self.owners[ip] = key

    def _pool_of(self, ip: Address) -> Pool | None:
        return next((p for _, p in sorted(self.pools.items()) if p.contains(ip)), None)

    def _usable(self, ip: Address, key: str, service: dict) -> str | None:
        """Why ``ip`` cannot be ``key``'s (None: it can)."""
        pool = self._pool_of(ip)
        if pool is None or not pool.serves(service):
            return f'["{ip}"] is not allowed in config'
        owner = self.owners.get(ip)
        if owner is not None and owner != key:
            return f'"{ip}" is already allocated to {owner}'
        if owner is None and pool.disabled:
            return f'["{ip}"] is in disabled pool {pool.name}'
        return None

    def assign(self, service: dict) -> list[str]:
        """The addresses ``service`` should have now, taken for it (and any it no longer should
        have released). Raises AllocationFailed, holding nothing new, when it cannot have them."""
        key = service_key(service)
        requested = requested_ips(service)
        if requested:
            wanted: list[Address] = []
            for text in requested:
                ip = _parse(text)
                if ip is None:
                    raise AllocationFailed(f'"{text}" is not a valid IP address')
                reason = self._usable(ip, key, service)
                if reason:
                    raise AllocationFailed(reason)
                wanted.append(ip)
            return self._hold(key, wanted)
        kept = {ip.version: ip for ip in self.held_by(key) if self._usable(ip, key, service) is None}
        for text in ingress_ips(service):  # what the status says, when the allocator has not seen it yet
            ip = _parse(text)
            if ip is not None and ip.version not in kept and self._usable(ip, key, service) is None:
                kept[ip.version] = ip
        wanted = []
        for family in wanted_families(service):
            ip = kept.get(family) or self._next_free(family, service)
            if ip is None:
                raise AllocationFailed(NO_AVAILABLE_IPS)
            wanted.append(ip)
        return self._hold(key, wanted)

    def _hold(self, key: str, wanted: list[Address]) -> list[str]:
        self.release(key)
        for ip in wanted:
            self.owners[ip] = key
        return [str(ip) for ip in wanted]

    def _next_free(self, family: int, service: dict) -> Address | None:
        for _, pool in sorted(self.pools.items()):
            if pool.disabled or not pool.serves(service):
                continue
            for first, last in pool.ranges:
                if first.version != family:
                    continue
                for number in range(int(first), int(last) + 1):  # pools are LAN-sized; the walk stops at the first free
                    ip = type(first)(number)
                    if ip not in self.owners:
                        return ip
        return None


def _parse(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None
