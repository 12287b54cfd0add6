"""Services and endpoints as the shared proxier hands them to the backend, built the way
upstream's ``makeTestService``/``makeTestEndpointSlice`` tests describe them, and a backend on
the fake kernel set up like upstream's ``NewFakeProxier``."""

from __future__ import annotations

from kubesvc.kernel.fake.iptables import TEST_NODE_IP, TEST_NODE_NAME, FakeIptablesAsync
from kubesvc.proxy.backend import ProxyOptions, SyncRequest
from kubesvc.proxy.iptables.proxier import IptablesBackend
from kubesvc.proxy.proxier import Proxier
from kubesvc.proxy.iptables.rules import Features
from kubesvc.proxy.localdetector import LocalDetector
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.types import IPV4, IPV6, Endpoint, ServicePort, ServicePortName

POD_CIDR = {IPV4: "10.0.0.0/8", IPV6: "fd00:10::/64"}
# upstream NewFakeProxier: HasRandomFully false, both nfacct counters available
UPSTREAM_FAKE_FEATURES = Features(random_fully=False, nfacct_ct_state_invalid=True, nfacct_localhost_nodeports=True)


def spn(ns: str, name: str, port: str = "p80", protocol: str = "TCP") -> ServicePortName:
    return ServicePortName(ns, name, port, protocol)


def port(ns: str, name: str, port_name: str = "p80", port: int = 80, protocol: str = "TCP", *, cluster_ip: str,
         node_port: int = 0, external_ips=(), lb_ips=(), source_ranges=(), health_check_node_port: int = 0,
         etp_local: bool = False, itp_local: bool = False, affinity_seconds: int | None = None) -> ServicePort:
    """One Service port. ``health_check_node_port`` only for LoadBalancer + eTP Local (as the
    Service change tracker sets it)."""
    return ServicePort(
        name=spn(ns, name, port_name, protocol), cluster_ip=cluster_ip, port=port, protocol=protocol,
        node_port=node_port, client_ip_affinity=affinity_seconds is not None, sticky_max_age_seconds=affinity_seconds or 0,
        external_ips=tuple(external_ips), load_balancer_source_ranges=tuple(source_ranges), load_balancer_vips=tuple(lb_ips),
        health_check_node_port=health_check_node_port, external_policy_local=etp_local, internal_policy_local=itp_local)


def ep(ip: str, port: int = 80, node: str | None = None, *, ready: bool = True, serving: bool = True,
       terminating: bool = False) -> Endpoint:
    return Endpoint(ip=ip, port=port, is_local=node == TEST_NODE_NAME, ready=ready, serving=serving, terminating=terminating)


class Cluster:
    """The Service port map and endpoints map, plus which Services changed since the last
    request (what ``ServiceChangeTracker``/``EndpointsChangeTracker`` would report)."""

    def __init__(self, node_ip: str = TEST_NODE_IP, nodeport_ips: tuple[str, ...] | None = None):
        self.ports: dict[ServicePortName, ServicePort] = {}
        self.endpoints: dict[ServicePortName, tuple[Endpoint, ...]] = {}
        self.changed: set[str] = set()
        self.node_ip = node_ip
        self.nodeport_ips = nodeport_ips

    def add(self, *ports: ServicePort) -> Cluster:
        for p in ports:
            self.ports[p.name] = p
            self.changed.add(p.name.service)
        return self

    def delete_service(self, ns: str, name: str) -> None:
        for key in [k for k in self.ports if k.namespace == ns and k.name == name]:
            del self.ports[key]
        self.changed.add(f"{ns}/{name}")

    def set_endpoints(self, name: ServicePortName, *endpoints: Endpoint) -> Cluster:
        """Endpoints of one Service port, deduplicated and sorted as the EndpointSliceCache does."""
        unique = {}
        for e in endpoints:
            if e.endpoint not in unique or not e.terminating:
                unique[e.endpoint] = e
        if unique:
            self.endpoints[name] = tuple(sorted(unique.values(), key=lambda e: e.endpoint))
        else:
            self.endpoints.pop(name, None)
        self.changed.add(name.service)
        return self

    def request(self, full: bool = False, **extra) -> SyncRequest:
        changed, self.changed = frozenset(self.changed), set()
        extra.setdefault("node_ip", self.node_ip)
        extra.setdefault("nodeport_ips", self.nodeport_ips)
        return SyncRequest(full=full, service_ports=dict(self.ports), endpoints=dict(self.endpoints),
                           changed_services=changed, **extra)


def fake_backend(family: int = IPV4, *, features: Features = UPSTREAM_FAKE_FEATURES, detector: bool = True,
                 metrics: ProxyMetrics | None = None, **options) -> tuple[Proxier, FakeIptablesAsync]:
    """upstream ``NewFakeProxier``: node ``test-node``, pod CIDR local detector, localhost
    NodePorts on, masquerade bit 14; the iptables mode inside the shared proxier (``run_sync``
    takes requests directly; ``.mode`` is the ``IptablesBackend``)."""
    ipt = FakeIptablesAsync(family)
    detect = LocalDetector(cidr=POD_CIDR[family], family=family) if detector else LocalDetector(family=family)
    opts = ProxyOptions(family=family, node_name=TEST_NODE_NAME, local_detector=detect, **options)
    mode = IptablesBackend(opts, ipt=ipt, features=features)
    return Proxier(mode, opts, metrics if metrics is not None else ProxyMetrics()), ipt
