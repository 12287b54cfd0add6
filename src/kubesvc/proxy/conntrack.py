"""Which conntrack entries go stale when UDP Services and endpoints change (upstream
``pkg/proxy/conntrack/cleanup.go``, the targeted form kube-proxy used before its reconciler):

* an endpoint that is no longer serving traffic for a UDP port: entries DNATed to it from the
  ClusterIP, each externalIP and LoadBalancer IP (``--orig-dst <vip> --dst-nat <endpoint ip>``)
  and from the NodePort (``--dport <nodePort> --dst-nat <endpoint ip>``);
* a UDP port that had no endpoint and now has one: entries to the ClusterIP/VIPs/NodePort
  created while packets were rejected or dropped (clients that keep sending would otherwise
  never be DNATed);
* a deleted UDP ClusterIP: every entry to it.

These are decisions only, as ``kernel.conntrack.FlowFilter`` values (what ``conntrack -D`` would
be given); the proxier deletes the matching entries over netlink (``kernel.conntrack.delete_flows``)
after a successful sync, so the rules that send the next packet elsewhere are already in place.
"""

from __future__ import annotations

from collections.abc import Iterable

from kubesvc.kernel.conntrack import FlowFilter
from kubesvc.proxy.types import Endpoint, ServicePort, ServicePortMap, ServicePortName

CONNTRACK_PROTOCOLS = {"UDP": "udp", "SCTP": "sctp"}


def _vips(port: ServicePort) -> list[str]:
    return [port.cluster_ip, *port.external_ips, *port.load_balancer_vips]


def stale_flow_filters(service_ports: ServicePortMap,
                       stale_endpoints: Iterable[tuple[ServicePortName, Endpoint]],
                       newly_active: Iterable[ServicePortName],
                       deleted_cluster_ips: Iterable[str]) -> list[FlowFilter]:
    """The filters of the entries to delete, without duplicates."""
    filters: dict[FlowFilter, None] = {}

    def add(flt: FlowFilter) -> None:
        filters.setdefault(flt)

    for name, endpoint in stale_endpoints:
        port = service_ports.get(name)
        proto = CONNTRACK_PROTOCOLS.get(name.protocol)
        if port is None or proto is None:
            continue
        for vip in _vips(port):
            add(FlowFilter(proto, vip, port.port, endpoint.ip))
        if port.node_port:
            add(FlowFilter(proto, None, port.node_port, endpoint.ip))
    for name in newly_active:
        port = service_ports.get(name)
        proto = CONNTRACK_PROTOCOLS.get(name.protocol)
        if port is None or proto is None:
            continue
        for vip in _vips(port):
            add(FlowFilter(proto, vip, port.port))
        if port.node_port:
            add(FlowFilter(proto, None, port.node_port))
    for ip in deleted_cluster_ips:
        add(FlowFilter("udp", ip))
    return list(filters)
