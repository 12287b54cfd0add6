"""From Service objects to the proxy's Service port map (upstream ``pkg/proxy/serviceport.go``
``newBaseServiceInfo`` and ``pkg/proxy/servicechangetracker.go``).

**What one Service becomes.** A proxier serves one IP family, so a Service turns into one
``ServicePort`` per ``spec.ports[]`` entry, keyed by ``ServicePortName(ns, name, port name,
protocol)``, carrying only this family's addresses:

* nothing at all for a Service kube-proxy skips (``ShouldSkipService``): ``clusterIP`` ``""`` or
  ``"None"`` (headless), or ``type: ExternalName``; nor for one without a ClusterIP of this
  family (``GetClusterIPByFamily``: ``spec.clusterIPs[i]`` where ``spec.ipFamilies[i]`` is ours;
  a Service without ``ipFamilies`` (version skew) is judged by ``spec.clusterIP``);
* ``externalIPs``, ``loadBalancerSourceRanges`` (trimmed: validation lets whitespace through)
  and LoadBalancer VIPs (``status.loadBalancer.ingress[].ip`` whose ``ipMode`` is unset or
  ``VIP``; a ``Proxy``-mode load balancer delivers to the node itself) of this family, parsed
  sloppily (``010.0.0.1`` is ``10.0.0.1``) and printed canonically, CIDRs masked;
* ``ClientIP`` affinity with ``sessionAffinityConfig.clientIP.timeoutSeconds`` (default 10800);
* ``externalTrafficPolicy: Local`` counts only for an externally reachable Service (NodePort,
  LoadBalancer, or ClusterIP with externalIPs), and the ``healthCheckNodePort`` only for a
  LoadBalancer with that policy (``NeedsHealthCheck``).

**Recording changes.** Watch handlers call ``ServiceChangeTracker.update(previous, current)``,
which keeps one ``(ports before the first unsynced change, ports now)`` pair per ``ns/name`` and
forgets the pair as soon as the two sides are equal again (add-then-delete, or an update that
touched nothing the proxy reads). A sync checks the pairs out and ``apply_service_changes``
folds them into the map, reporting which Services changed (for partial syncs) and the
ClusterIPs of UDP ports that went away (their conntrack entries must go too).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from kubesvc.util.ipnet import ip_version, parse_cidr_go, parse_ip_sloppy
from kubesvc.proxy.types import (
    DEFAULT_STICKY_MAX_AGE_SECONDS,
    FAMILY_NAMES,
    IPV6,
    ServicePort,
    ServicePortMap,
    ServicePortName,
)

log = logging.getLogger("kubesvc.proxy")

# Service types that accept traffic from outside the cluster (``apiservice.ExternallyAccessible``).
EXTERNALLY_ACCESSIBLE_TYPES = ("NodePort", "LoadBalancer")

ServiceChanges = dict[str, tuple[ServicePortMap, ServicePortMap]]


@dataclass(frozen=True)
class ServiceUpdateResult:
    """Upstream ``UpdateServiceMapResult`` (with the older ``DeletedUDPClusterIPs``)."""

    # ``ns/name`` of every Service added, changed or deleted since the last checkout.
    updated_services: frozenset[str] = frozenset()
    # ClusterIPs of UDP Service ports that no longer exist.
    deleted_udp_cluster_ips: frozenset[str] = frozenset()


# ---- one Service -> its ServicePorts ------------------------------------------------------

def should_skip_service(service: Mapping) -> bool:
    """``proxyutil.ShouldSkipService``: headless and ExternalName Services are not proxied."""
    spec = service.get("spec") or {}
    return spec.get("clusterIP", "") in ("", "None") or spec.get("type") == "ExternalName"


def cluster_ip_of_family(service: Mapping, family: int) -> str:
    """``proxyutil.GetClusterIPByFamily``; "" when the Service has none of this family."""
    spec = service.get("spec") or {}
    ip_families = spec.get("ipFamilies") or []
    if not ip_families:
        cluster_ip = spec.get("clusterIP", "")
        if cluster_ip in ("", "None"):
            return ""
        # IsIPv6String: a text that is no IP counts as IPv4 (and is refused when parsed)
        return cluster_ip if (ip_version(cluster_ip) == IPV6) == (family == IPV6) else ""
    cluster_ips = spec.get("clusterIPs") or []
    for index, name in enumerate(ip_families):
        if name == FAMILY_NAMES[family] and index < len(cluster_ips):
            return cluster_ips[index]
    return ""


def externally_accessible(service: Mapping) -> bool:
    """``apiservice.ExternallyAccessible``."""
    spec = service.get("spec") or {}
    service_type = spec.get("type") or "ClusterIP"
    return service_type in EXTERNALLY_ACCESSIBLE_TYPES or (service_type == "ClusterIP" and bool(spec.get("externalIPs")))


def external_policy_local(service: Mapping) -> bool:
    """``apiservice.ExternalPolicyLocal``: eTP Local matters only if outsiders can reach it."""
    return externally_accessible(service) and (service.get("spec") or {}).get("externalTrafficPolicy") == "Local"


def internal_policy_local(service: Mapping) -> bool:
    return (service.get("spec") or {}).get("internalTrafficPolicy") == "Local"


def needs_health_check(service: Mapping) -> bool:
    """``apiservice.NeedsHealthCheck``: a LoadBalancer with eTP Local."""
    return (service.get("spec") or {}).get("type") == "LoadBalancer" and external_policy_local(service)


def service_ports_from_service(service: Mapping | None, family: int) -> ServicePortMap:
    """``serviceToServiceMap``: the ports of this family's proxier; {} for a skipped Service."""
    if service is None or should_skip_service(service):
        return {}
    cluster_ip = cluster_ip_of_family(service, family)
    if not cluster_ip:
        return {}
    parsed_cluster_ip = parse_ip_sloppy(cluster_ip)
    meta = service.get("metadata") or {}
    if parsed_cluster_ip is None:
        log.error("Service %s/%s has an unparseable clusterIP %r; skipping it", meta.get("namespace", ""), meta.get("name", ""), cluster_ip)
        return {}
    spec = service.get("spec") or {}
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    shared = dict(
        cluster_ip=str(parsed_cluster_ip),
        external_ips=_ips_of_family(spec.get("externalIPs") or (), family),
        load_balancer_source_ranges=_cidrs_of_family((r.strip() for r in spec.get("loadBalancerSourceRanges") or ()), family),
        load_balancer_vips=_ips_of_family(_vip_mode_ingress_ips(service), family),
        external_policy_local=external_policy_local(service),
        internal_policy_local=internal_policy_local(service),
        health_check_node_port=_health_check_node_port(service),
        **_session_affinity(spec),
    )
    ports: ServicePortMap = {}
    for port in spec.get("ports") or ():
        protocol = port.get("protocol") or "TCP"
        key = ServicePortName(namespace, name, port.get("name") or "", protocol)
        ports[key] = ServicePort(name=key, port=port.get("port", 0), protocol=protocol, node_port=port.get("nodePort") or 0, **shared)
    return ports


def _session_affinity(spec: Mapping) -> dict:
    if spec.get("sessionAffinity") != "ClientIP":
        return {"client_ip_affinity": False, "sticky_max_age_seconds": 0}
    # The apiserver defaults the timeout; an object that skipped defaulting gets the same value.
    client_ip = (spec.get("sessionAffinityConfig") or {}).get("clientIP") or {}
    timeout = client_ip.get("timeoutSeconds")
    return {"client_ip_affinity": True, "sticky_max_age_seconds": DEFAULT_STICKY_MAX_AGE_SECONDS if timeout is None else timeout}


def _health_check_node_port(service: Mapping) -> int:
    if not needs_health_check(service):
        return 0
    port = (service.get("spec") or {}).get("healthCheckNodePort") or 0
    if not port:
        meta = service.get("metadata") or {}
        log.error("Service %s/%s has no healthcheck nodeport", meta.get("namespace", ""), meta.get("name", ""))
    return port


def _vip_mode_ingress_ips(service: Mapping) -> list[str]:
    """Ingress IPs a packet really arrives at (``proxyutil.IsVIPMode``: ipMode unset or VIP)."""
    ingress = (((service.get("status") or {}).get("loadBalancer") or {}).get("ingress")) or ()
    return [entry["ip"] for entry in ingress if entry.get("ip") and entry.get("ipMode") in (None, "VIP")]


def _ips_of_family(addresses, family: int) -> tuple[str, ...]:
    """``proxyutil.MapIPsByIPFamily(...)[family]``, canonical text; invalid ones are dropped."""
    return _of_family(addresses, family, parse_ip_sloppy, "IP")


def _cidrs_of_family(cidrs, family: int) -> tuple[str, ...]:
    """``proxyutil.MapCIDRsByIPFamily(...)[family]``, masked like Go's ``*net.IPNet`` (a mapped
    ``::ffff:10.0.0.0/104`` is IPv4's ``10.0.0.0/8``)."""
    return _of_family(cidrs, family, parse_cidr_go, "cidr")


def _of_family(texts, family: int, parse, kind: str) -> tuple[str, ...]:
    kept = []
    for text in texts:
        parsed = parse(text)
        if parsed is None:
            log.error("Skipping invalid %s: %s", kind, text)
        elif parsed.version == family:
            kept.append(str(parsed))
    return tuple(kept)


# ---- recording and applying changes -------------------------------------------------------

class ServiceChangeTracker:
    """Uncommitted Service changes of one family, coalesced per ``ns/name``."""

    def __init__(self, family: int):
        self.family = family
        self._items: ServiceChanges = {}

    def update(self, previous: dict | None, current: dict | None) -> bool:
        """Record ``previous`` → ``current`` (``None`` for add / delete); True while anything
        is pending, whether or not this call added it (upstream ``Update``)."""
        service = current if current is not None else previous
        if service is None:
            return False
        meta = service.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        if key in self._items:
            before = self._items[key][0]
        else:
            before = service_ports_from_service(previous, self.family)
        after = service_ports_from_service(current, self.family)
        if before == after:
            # Changes that cancel out (or touch nothing we read) need no sync.
            self._items.pop(key, None)
        else:
            self._items[key] = (before, after)
        return bool(self._items)

    def pending(self) -> int:
        return len(self._items)

    def checkout(self) -> ServiceChanges:
        """The pending ``(previous, current)`` pairs; the tracker starts empty again."""
        items, self._items = self._items, {}
        return items


class ServicePorts(dict):
    """A ``ServicePortMap`` that also knows each Service's port names (``by_service``:
    ``ns/name`` → its ``ServicePortName``s), kept by ``apply_service_changes``: a partial sync
    finds the ports of the few changed Services without reading every port of the node."""

    __slots__ = ("by_service",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.by_service: dict[str, tuple[ServicePortName, ...]] = {}
        for name in self:
            self.by_service[name.service] = (*self.by_service.get(name.service, ()), name)


def apply_service_changes(service_ports: ServicePortMap, changes: ServiceChanges) -> ServiceUpdateResult:
    """Fold checked-out changes into ``service_ports`` (in place; upstream
    ``ServicePortMap.Update``): current ports replace, ports only in previous are removed."""
    deleted_udp_cluster_ips: set[str] = set()
    by_service = service_ports.by_service if isinstance(service_ports, ServicePorts) else None
    for service, (previous, current) in changes.items():
        if by_service is not None:
            if current:
                by_service[service] = tuple(current)
            else:
                by_service.pop(service, None)
        service_ports.update(current)
        for name in previous.keys() - current.keys():
            removed = service_ports.pop(name, None)
            if removed is None:
                log.error("Service port does not exist: %s", name)
            elif removed.protocol == "UDP":
                deleted_udp_cluster_ips.add(removed.cluster_ip)
    return ServiceUpdateResult(frozenset(changes), frozenset(deleted_udp_cluster_ips))


def health_check_node_ports(service_ports: ServicePortMap) -> dict[str, int]:
    """``ServicePortMap.HealthCheckNodePorts``: ``ns/name`` → its health-check NodePort."""
    return {name.service: port.health_check_node_port for name, port in service_ports.items() if port.health_check_node_port}
