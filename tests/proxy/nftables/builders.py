"""Small constructors for Service ports, endpoints and sync requests."""

from __future__ import annotations

from kubesvc.proxy.backend import ProxyOptions, SyncRequest
from kubesvc.proxy.localdetector import LocalDetector
from kubesvc.proxy.types import IPV6, Endpoint, ServicePort, ServicePortName


def spn(svc: str, port: str = "p80", protocol: str = "TCP") -> ServicePortName:
    ns, name = svc.split("/")
    return ServicePortName(ns, name, port, protocol)


def svc_port(svc: str, cluster_ip: str, port: int = 80, *, port_name: str = "p80", protocol: str = "TCP", **kw) -> ServicePort:
    return ServicePort(spn(svc, port_name, protocol), cluster_ip, port, protocol, **kw)


def ep(ip: str, port: int = 80, *, local: bool = False, ready: bool = True, serving: bool = True,
       terminating: bool = False) -> Endpoint:
    return Endpoint(ip, port, is_local=local, ready=ready, serving=serving, terminating=terminating)


def options(cidr: str = "10.0.0.0/8", family: int = 4, **kw) -> ProxyOptions:
    detector = LocalDetector(cidr=cidr, family=family) if cidr else LocalDetector(family=family)
    return ProxyOptions(family=family, node_name="node1", local_detector=detector, **kw)


def request(ports: list[tuple[ServicePort, tuple[Endpoint, ...]]], *, full: bool = True, changed: set[str] | None = None,
            nodeport_ips: tuple[str, ...] | None = None, node_ip: str = "", service_cidrs: tuple[str, ...] = (),
            node_labels: dict | None = None) -> SyncRequest:
    service_ports = {sp.name: sp for sp, _ in ports}
    endpoints = {sp.name: tuple(sorted(eps, key=lambda e: e.endpoint)) for sp, eps in ports if eps}
    return SyncRequest(full=full, service_ports=service_ports, endpoints=endpoints,
                       changed_services=frozenset(changed or ()), node_labels=node_labels or {},
                       nodeport_ips=nodeport_ips, node_ip=node_ip, service_cidrs=service_cidrs)


V6 = IPV6
