"""The one place proxy and controller tests build their inputs. Services and endpoints as the
shared proxier hands them to a mode's backend (the fakes, the golden rules, the kernel tests),
built the way upstream's proxier tests
describe them (``makeTestService``, ``makeServicePortName``, ``makeTestEndpointSlice`` in
pkg/proxy/{iptables,nftables,ipvs}/proxier_test.go):

- :func:`spn`, :func:`port`, :func:`ep`: one Service port name, one Service port (ClusterIP,
  NodePort, externalIPs, LoadBalancer VIPs and source ranges, traffic policies, affinity), one
  endpoint (local when its node is :data:`TEST_NODE_NAME`, upstream's ``testHostname``);
- :class:`Cluster`: the Service port map and the endpoints map as the change trackers keep them,
  and the ``SyncRequest`` a sync gets (with the Services changed since the last one);
- :func:`request`: one ``SyncRequest`` straight from ``[(port, endpoints), ...]``;
- :func:`options`: a mode's ``ProxyOptions`` (a pod-CIDR local detector);

and the API objects the informers of the proxy and the controllers deliver (JSON shape, API
field names): :func:`service` with :func:`service_port`, :func:`endpoint_slice` with
:func:`endpoint` and :func:`slice_port`, :func:`pod`, :func:`node`. A test's own fixtures
(upstream's ``newPod``, a Ready Node...) are thin wrappers over these.
"""

from __future__ import annotations

from kubesvc.kernel.fake.iptables import TEST_NODE_IP, TEST_NODE_NAME
from kubesvc.proxy.backend import ProxyOptions, SyncRequest
from kubesvc.proxy.localdetector import LocalDetector
from kubesvc.proxy.types import IPV4, IPV6, Endpoint, ServicePort, ServicePortName

POD_CIDR = {IPV4: "10.0.0.0/8", IPV6: "fd00:10::/64"}


def spn(ns: str, name: str, port: str = "p80", protocol: str = "TCP") -> ServicePortName:
    return ServicePortName(ns, name, port, protocol)


def port(ns: str, name: str, port_name: str = "p80", port: int = 80, protocol: str = "TCP", *, cluster_ip: str,
         node_port: int = 0, external_ips=(), lb_ips=(), source_ranges=(), health_check_node_port: int = 0,
         etp_local: bool = False, itp_local: bool = False, affinity_seconds: int | None = None) -> ServicePort:
    """One Service port. ``health_check_node_port`` only for LoadBalancer + eTP Local (as the
    Service change tracker sets it); ``affinity_seconds``: ClientIP affinity with that timeout."""
    return ServicePort(
        name=spn(ns, name, port_name, protocol), cluster_ip=cluster_ip, port=port, protocol=protocol,
        node_port=node_port, client_ip_affinity=affinity_seconds is not None, sticky_max_age_seconds=affinity_seconds or 0,
        external_ips=tuple(external_ips), load_balancer_source_ranges=tuple(source_ranges), load_balancer_vips=tuple(lb_ips),
        health_check_node_port=health_check_node_port, external_policy_local=etp_local, internal_policy_local=itp_local)


def ep(ip: str, port: int = 80, node: str | None = None, *, ready: bool = True, serving: bool = True,
       terminating: bool = False) -> Endpoint:
    """One endpoint on ``node`` (local when that is :data:`TEST_NODE_NAME`)."""
    return Endpoint(ip=ip, port=port, is_local=node == TEST_NODE_NAME, ready=ready, serving=serving, terminating=terminating)


def options(cidr: str = "10.0.0.0/8", family: int = IPV4, *, node_name: str = "node1", **kw) -> ProxyOptions:
    """A mode's options: a local detector for the pod CIDR ``cidr`` (none if empty)."""
    detector = LocalDetector(cidr=cidr, family=family) if cidr else LocalDetector(family=family)
    return ProxyOptions(family=family, node_name=node_name, local_detector=detector, **kw)


def request(ports: list[tuple[ServicePort, tuple[Endpoint, ...]]], *, full: bool = True, changed: set[str] | None = None,
            nodeport_ips: tuple[str, ...] | None = None, node_ip: str = "", service_cidrs: tuple[str, ...] = (),
            node_labels: dict | None = None) -> SyncRequest:
    """The ``SyncRequest`` for these Service ports and their endpoints (sorted as the
    EndpointSliceCache hands them over)."""
    service_ports = {sp.name: sp for sp, _ in ports}
    endpoints = {sp.name: tuple(sorted(eps, key=lambda e: e.endpoint)) for sp, eps in ports if eps}
    return SyncRequest(full=full, service_ports=service_ports, endpoints=endpoints,
                       changed_services=frozenset(changed or ()), node_labels=node_labels or {},
                       nodeport_ips=nodeport_ips, node_ip=node_ip, service_cidrs=service_cidrs)


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



# ---------------------------------------------------------------------------------------------
# API objects, as an informer delivers them

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def service_port(name: str, protocol: str = "TCP", number: int = 80, node_port: int = 0) -> dict:
    """One entry of a Service's ``spec.ports``."""
    return {"name": name, "protocol": protocol, "port": number, "nodePort": node_port}


def service(ns: str, name: str, *ports: dict, ingress: list | None = None, metadata: dict | None = None, **spec) -> dict:
    """A Service; ``spec`` keys are the API's field names (``type``, ``clusterIP``, ``selector``...),
    ``ingress`` its ``status.loadBalancer.ingress``, ``metadata`` more metadata (uid, labels...)."""
    obj = {"metadata": {"namespace": ns, "name": name, "annotations": {}, **(metadata or {})}, "spec": {"ports": list(ports), **spec},
           "status": {}}
    if ingress is not None:
        obj["status"]["loadBalancer"] = {"ingress": ingress}
    return obj


def endpoint(ip: str, node: str | None = None, **conditions) -> dict:
    """One entry of an EndpointSlice's ``endpoints``: its address, node and ``conditions``."""
    out: dict = {"addresses": [ip]}
    if node is not None:
        out["nodeName"] = node
    if conditions:
        out["conditions"] = conditions
    return out


def slice_port(name: str | None, number: int | None, protocol: str = "TCP") -> dict:
    """One entry of an EndpointSlice's ``ports``."""
    return {"name": name, "port": number, "protocol": protocol}


def endpoint_slice(ns: str, service: str, name: str, endpoints: list, ports: list | None, address_type: str = "IPv4",
                   annotations: dict | None = None) -> dict:
    """An EndpointSlice of Service ``service`` (the service-name label); no ``ports`` key when ``ports`` is None."""
    obj = {"metadata": {"namespace": ns, "name": name, "annotations": annotations or {}, "labels": {SERVICE_NAME_LABEL: service}},
           "addressType": address_type, "endpoints": endpoints}
    if ports is not None:
        obj["ports"] = ports
    return obj


def pod(ns: str, name: str, *, ips: tuple[str, ...] | list[str] = (), ready: bool = True, ready_since: str | None = None,
        node: str | None = None, labels: dict | None = None, containers: list[dict] | None = None, terminating: bool = False,
        **metadata) -> dict:
    """A running Pod with ``ips`` (none: not yet given one), Ready or not (since ``ready_since``,
    the condition's lastTransitionTime), on ``node``; ``metadata`` more metadata (uid,
    resourceVersion...); ``terminating``: being deleted."""
    meta: dict = {"namespace": ns, "name": name, **({"labels": labels} if labels is not None else {}), **metadata}
    if terminating:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    spec: dict = {"containers": containers if containers is not None else [{"name": "c"}]}
    if node:
        spec["nodeName"] = node
    status: dict = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if ready_since is not None:
        status["conditions"][0]["lastTransitionTime"] = ready_since
    if ips:
        status["podIP"] = ips[0]
        status["podIPs"] = [{"ip": ip} for ip in ips]
    return {"metadata": meta, "spec": spec, "status": status}


def node(name: str, *, addresses: tuple[tuple[str, str], ...] = (), taints=(), deleted: bool = False, labels: dict | None = None,
         ready: str | None = None, unschedulable: bool = False) -> dict:
    """A Node: ``addresses`` as (type, address) pairs, ``taints`` as keys (NoSchedule) or taint
    objects, being deleted or not, its Ready condition's status (None: no conditions), cordoned or not."""
    obj: dict = {"metadata": {"name": name},
                 "spec": {"taints": [{"key": taint, "effect": "NoSchedule"} if isinstance(taint, str) else taint for taint in taints]},
                 "status": {"addresses": [{"type": kind, "address": address} for kind, address in addresses]}}
    if labels is not None:
        obj["metadata"]["labels"] = labels
    if deleted:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if ready is not None:
        obj["status"]["conditions"] = [{"type": "Ready", "status": ready}]
    if unschedulable:
        obj["spec"]["unschedulable"] = True
    return obj
