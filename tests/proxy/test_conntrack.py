"""Which conntrack entries a UDP endpoint change makes stale (the ``conntrack -D`` filters)."""

import pytest

from kubesvc.kernel.conntrack import Flow, FlowFilter, matches, select
from kubesvc.proxy.conntrack import stale_flow_filters
from kubesvc.proxy.types import Endpoint, ServicePort, ServicePortName

DNS = ServicePortName("kube-system", "kube-dns", "dns", "UDP")
WEB = ServicePortName("default", "web", "http", "TCP")
PORTS = {
    DNS: ServicePort(DNS, "10.96.0.10", 53, "UDP", node_port=30053, external_ips=("192.0.2.10",), load_balancer_vips=("198.51.100.1",)),
    WEB: ServicePort(WEB, "10.96.0.20", 80, "TCP"),
}


@pytest.mark.parametrize(("stale", "newly_active", "deleted", "expected"), [
    pytest.param([(DNS, Endpoint("10.244.1.5", 5353))], [], [], [
        ["-p", "udp", "--orig-dst", "10.96.0.10", "--orig-port-dst", "53", "--dst-nat", "10.244.1.5"],
        ["-p", "udp", "--orig-dst", "192.0.2.10", "--orig-port-dst", "53", "--dst-nat", "10.244.1.5"],
        ["-p", "udp", "--orig-dst", "198.51.100.1", "--orig-port-dst", "53", "--dst-nat", "10.244.1.5"],
        ["-p", "udp", "--orig-port-dst", "30053", "--dst-nat", "10.244.1.5"],
    ], id="removed UDP endpoint: every VIP and the NodePort DNATed to it"),
    pytest.param([(WEB, Endpoint("10.244.1.6", 8080))], [], [], [], id="TCP endpoints need no cleanup"),
    pytest.param([], [DNS], [], [
        ["-p", "udp", "--orig-dst", "10.96.0.10", "--orig-port-dst", "53"],
        ["-p", "udp", "--orig-dst", "192.0.2.10", "--orig-port-dst", "53"],
        ["-p", "udp", "--orig-dst", "198.51.100.1", "--orig-port-dst", "53"],
        ["-p", "udp", "--orig-port-dst", "30053"],
    ], id="UDP port getting its first endpoint: entries made while it had none"),
    pytest.param([], [], ["10.96.0.99"], [["-p", "udp", "--orig-dst", "10.96.0.99"]], id="deleted UDP ClusterIP"),
    pytest.param([(DNS, Endpoint("10.244.1.5", 5353)), (DNS, Endpoint("10.244.1.5", 5353))], [], [], 4, id="duplicates collapse"),
    pytest.param([(ServicePortName("gone", "svc", "", "UDP"), Endpoint("10.244.1.7", 53))], [], [], [], id="unknown service port"),
])
def test_stale_flow_filters(stale, newly_active, deleted, expected):
    filters = [f.args for f in stale_flow_filters(PORTS, stale, newly_active, deleted)]
    if isinstance(expected, int):
        assert len(filters) == expected
    else:
        assert filters == expected


def _flow(orig_dst="10.96.0.10", dport=53, reply_src="10.244.1.5", status=0x1A8, protocol=17):
    return Flow(protocol, "10.0.0.9", orig_dst, 40000, dport, reply_src, "10.0.0.9", 5353, 40000, status)


@pytest.mark.parametrize(("flt", "flow", "hit"), [
    (FlowFilter("udp", "10.96.0.10", 53, "10.244.1.5"), _flow(), True),
    (FlowFilter("udp", "10.96.0.10", 53, "10.244.1.6"), _flow(), False),
    (FlowFilter("udp", "10.96.0.10", 53, "10.244.1.5"), _flow(status=0x188), False),  # not DNATed
    (FlowFilter("udp", None, 53), _flow(orig_dst="192.0.2.10"), True),
    (FlowFilter("udp", "10.96.0.10", 54), _flow(), False),
    (FlowFilter("sctp", "10.96.0.10"), _flow(), False),
    (FlowFilter("udp", "10.96.0.10"), _flow(dport=9999), True),
], ids=["dnat-to-endpoint", "other-endpoint", "not-dnated", "any-address", "other-port", "other-protocol", "any-port"])
def test_flow_filter_matches_as_conntrack_delete(flt, flow, hit):
    assert matches(flt, flow) is hit
    assert select([flow], [flt]) == ([flow] if hit else [])
