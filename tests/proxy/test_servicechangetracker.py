"""Upstream ``pkg/proxy/serviceport_test.go`` / ``service_test.go`` (``TestServiceToServiceMap``,
``TestBuildServiceMap*``, ...), ported case by case, plus cases of ours marked "(ours)".

``LoadBalancerIPMode`` is GA, so only upstream's "feature gate enabled" ipMode cases apply.
"""

import pytest

from kubesvc.proxy.servicechangetracker import (
    ServiceChangeTracker,
    apply_service_changes,
    cluster_ip_of_family,
    health_check_node_ports,
    service_ports_from_service,
)
from kubesvc.proxy.types import IPV4, IPV6, ServicePort, ServicePortName
from tests.support.builders import service, service_port

CLUSTER_V4, EXTERNAL_V4, RANGE_V4 = "10.0.0.1", "8.8.8.8", "0.0.0.0/1"
CLUSTER_V6, EXTERNAL_V6, RANGE_V6 = "2001:db8:85a3:0:0:8a2e:370:7334", "2001:db8:85a3:0:0:8a2e:370:7335", "2001:db8::/32"
CLUSTER_V6_TEXT, EXTERNAL_V6_TEXT = "2001:db8:85a3::8a2e:370:7334", "2001:db8:85a3::8a2e:370:7335"


def expected(namespace: str, name: str, port_name: str, protocol: str, cluster_ip: str, number: int, **fields) -> tuple:
    key = ServicePortName(namespace, name, port_name, protocol)
    return key, ServicePort(key, cluster_ip, number, protocol, **fields)


def lb(namespace: str, name: str, cluster_ip: str, *ports: dict, ingress: list, **spec) -> dict:
    return service(namespace, name, *ports, type="LoadBalancer", clusterIP=cluster_ip, loadBalancerIP="5.6.7.8", ingress=ingress, **spec)


LB_PORTS = (service_port("port3", "UDP", 8675, 30061), service_port("port4", "UDP", 8676, 30062))


def lb_expected(vips: tuple[str, ...]) -> dict:
    return dict([expected("ns1", "load-balancer", "port3", "UDP", "172.16.55.11", 8675, node_port=30061, load_balancer_vips=vips),
                 expected("ns1", "load-balancer", "port4", "UDP", "172.16.55.11", 8676, node_port=30062, load_balancer_vips=vips)])


def dual(name: str, cluster_ip: str, external_ips: list, ranges: list, **spec) -> dict:
    return service("test", name, service_port("testPort", "TCP", 12345), clusterIP=cluster_ip, externalIPs=external_ips,
                   loadBalancerSourceRanges=ranges, ingress=[{"ip": EXTERNAL_V4}, {"ip": EXTERNAL_V6}], **spec)


SERVICE_TO_SERVICE_MAP = {
    "nothing": (IPV4, None, {}),
    "headless service": (IPV4, service("ns2", "headless", service_port("rpc", "UDP", 1234), type="ClusterIP", clusterIP="None"), {}),
    "headless sctp service": (IPV4, service("ns2", "headless", service_port("sip", "SCTP", 7777), type="ClusterIP", clusterIP="None"), {}),
    "headless service without port": (IPV4, service("ns2", "headless-without-port", type="ClusterIP", clusterIP="None"), {}),
    "cluster ip service": (
        IPV4, service("ns2", "cluster-ip", service_port("p1", "UDP", 1234, 4321), service_port("p2", "UDP", 1235, 5321), type="ClusterIP", clusterIP="172.16.55.4"),
        dict([expected("ns2", "cluster-ip", "p1", "UDP", "172.16.55.4", 1234, node_port=4321),
              expected("ns2", "cluster-ip", "p2", "UDP", "172.16.55.4", 1235, node_port=5321)])),
    "nodeport service": (
        IPV4, service("ns2", "node-port", service_port("port1", "UDP", 345, 678), service_port("port2", "TCP", 344, 677), type="NodePort", clusterIP="172.16.55.10"),
        dict([expected("ns2", "node-port", "port1", "UDP", "172.16.55.10", 345, node_port=678),
              expected("ns2", "node-port", "port2", "TCP", "172.16.55.10", 344, node_port=677)])),
    "load balancer service": (IPV4, lb("ns1", "load-balancer", "172.16.55.11", *LB_PORTS, ingress=[{"ip": "10.1.2.4"}]), lb_expected(("10.1.2.4",))),
    "load balancer service ipMode VIP feature gate enabled": (
        IPV4, lb("ns1", "load-balancer", "172.16.55.11", *LB_PORTS, ingress=[{"ip": "10.1.2.4", "ipMode": "VIP"}]), lb_expected(("10.1.2.4",))),
    "load balancer service ipMode Proxy feature gate enabled": (
        IPV4, lb("ns1", "load-balancer", "172.16.55.11", *LB_PORTS, ingress=[{"ip": "10.1.2.4", "ipMode": "Proxy"}]), lb_expected(())),
    "load balancer service with only local traffic policy": (
        IPV4, lb("ns1", "only-local-load-balancer", "172.16.55.12", service_port("portx", "UDP", 8677, 30063), service_port("porty", "UDP", 8678, 30064),
                 ingress=[{"ip": "10.1.2.3"}], externalTrafficPolicy="Local", healthCheckNodePort=345),
        dict([expected("ns1", "only-local-load-balancer", "portx", "UDP", "172.16.55.12", 8677, node_port=30063, health_check_node_port=345,
                       load_balancer_vips=("10.1.2.3",), external_policy_local=True),
              expected("ns1", "only-local-load-balancer", "porty", "UDP", "172.16.55.12", 8678, node_port=30064, health_check_node_port=345,
                       load_balancer_vips=("10.1.2.3",), external_policy_local=True)])),
    "external name service": (
        IPV4, service("ns2", "external-name", service_port("portz", "UDP", 1235, 5321), type="ExternalName", clusterIP="172.16.55.4",
                      externalName="foo2.bar.com"), {}),
    "service with ipv6 clusterIP under ipv4 mode, service should be filtered": (IPV4, dual("invalidIPv6InIPV4Mode", CLUSTER_V6, [], []), {}),
    "service with ipv4 clusterIP under ipv6 mode, service should be filtered": (IPV6, dual("invalidIPv4InIPV6Mode", CLUSTER_V4, [], []), {}),
    "service with ipv4 configurations under ipv4 mode": (
        IPV4, dual("validIPv4", CLUSTER_V4, [EXTERNAL_V4], [RANGE_V4]),
        dict([expected("test", "validIPv4", "testPort", "TCP", CLUSTER_V4, 12345, external_ips=(EXTERNAL_V4,),
                       load_balancer_source_ranges=(RANGE_V4,), load_balancer_vips=(EXTERNAL_V4,))])),
    "service with ipv6 configurations under ipv6 mode": (
        IPV6, dual("validIPv6", CLUSTER_V6, [EXTERNAL_V6], [RANGE_V6]),
        dict([expected("test", "validIPv6", "testPort", "TCP", CLUSTER_V6_TEXT, 12345, external_ips=(EXTERNAL_V6_TEXT,),
                       load_balancer_source_ranges=(RANGE_V6,), load_balancer_vips=(EXTERNAL_V6_TEXT,))])),
    "service with both ipv4 and ipv6 configurations under ipv4 mode, ipv6 fields should be filtered": (
        IPV4, dual("filterIPv6InIPV4Mode", CLUSTER_V4, [EXTERNAL_V4, EXTERNAL_V6], [RANGE_V4, RANGE_V6]),
        dict([expected("test", "filterIPv6InIPV4Mode", "testPort", "TCP", CLUSTER_V4, 12345, external_ips=(EXTERNAL_V4,),
                       load_balancer_source_ranges=(RANGE_V4,), load_balancer_vips=(EXTERNAL_V4,))])),
    "service with both ipv4 and ipv6 configurations under ipv6 mode, ipv4 fields should be filtered": (
        IPV6, dual("filterIPv4InIPV6Mode", CLUSTER_V6, [EXTERNAL_V4, EXTERNAL_V6], [RANGE_V4, RANGE_V6]),
        dict([expected("test", "filterIPv4InIPV6Mode", "testPort", "TCP", CLUSTER_V6_TEXT, 12345, external_ips=(EXTERNAL_V6_TEXT,),
                       load_balancer_source_ranges=(RANGE_V6,), load_balancer_vips=(EXTERNAL_V6_TEXT,))])),
    "service with extra space in LoadBalancerSourceRanges": (
        IPV4, service("test", "extra-space", service_port("testPort", "TCP", 12345), clusterIP=CLUSTER_V4, loadBalancerSourceRanges=[" 10.1.2.0/28"]),
        dict([expected("test", "extra-space", "testPort", "TCP", CLUSTER_V4, 12345, load_balancer_source_ranges=("10.1.2.0/28",))])),
    # ---- ours ----
    "dual-stack: each family gets its own clusterIPs entry (ours)": (
        IPV6, service("ns", "dual", service_port("p", "TCP", 80), clusterIP="10.0.0.5", clusterIPs=["10.0.0.5", "fd00::5"], ipFamilies=["IPv4", "IPv6"]),
        dict([expected("ns", "dual", "p", "TCP", "fd00::5", 80)])),
    "single-stack with ipFamilies: no clusterIP of the other family (ours)": (
        IPV6, service("ns", "v4only", service_port("p", "TCP", 80), clusterIP="10.0.0.5", clusterIPs=["10.0.0.5"], ipFamilies=["IPv4"]), {}),
    "legacy leading zeros are parsed sloppily and printed canonically (ours)": (
        IPV4, service("ns", "sloppy", service_port("p", "TCP", 80), clusterIP="172.30.0.041", externalIPs=["010.001.002.003"],
                      loadBalancerSourceRanges=["10.1.2.3/24"]),
        dict([expected("ns", "sloppy", "p", "TCP", "172.30.0.41", 80, external_ips=("10.1.2.3",), load_balancer_source_ranges=("10.1.2.0/24",))])),
    "ClientIP affinity with a timeout (ours)": (
        IPV4, service("ns", "sticky", service_port("p", "TCP", 80), clusterIP="10.0.0.6", sessionAffinity="ClientIP",
                      sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}}),
        dict([expected("ns", "sticky", "p", "TCP", "10.0.0.6", 80, client_ip_affinity=True, sticky_max_age_seconds=60)])),
    "ClientIP affinity without config defaults to 10800 seconds (ours)": (
        IPV4, service("ns", "sticky", service_port("p", "TCP", 80), clusterIP="10.0.0.6", sessionAffinity="ClientIP"),
        dict([expected("ns", "sticky", "p", "TCP", "10.0.0.6", 80, client_ip_affinity=True, sticky_max_age_seconds=10800)])),
    "eTP Local on a ClusterIP Service with externalIPs counts, without a health check (ours)": (
        IPV4, service("ns", "ext", service_port("p", "TCP", 80), type="ClusterIP", clusterIP="10.0.0.7", externalIPs=["192.0.2.1"],
                      externalTrafficPolicy="Local", healthCheckNodePort=30000),
        dict([expected("ns", "ext", "p", "TCP", "10.0.0.7", 80, external_ips=("192.0.2.1",), external_policy_local=True)])),
    "eTP Local on a plain ClusterIP Service is ignored (ours)": (
        IPV4, service("ns", "plain", service_port("p", "TCP", 80), type="ClusterIP", clusterIP="10.0.0.8", externalTrafficPolicy="Local"),
        dict([expected("ns", "plain", "p", "TCP", "10.0.0.8", 80)])),
    "NodePort with eTP Local: local policy but no health check (ours)": (
        IPV4, service("ns", "np", service_port("p", "TCP", 80, 30080), type="NodePort", clusterIP="10.0.0.9", externalTrafficPolicy="Local",
                      healthCheckNodePort=30001),
        dict([expected("ns", "np", "p", "TCP", "10.0.0.9", 80, node_port=30080, external_policy_local=True)])),
    "iTP Local (ours)": (
        IPV4, service("ns", "itp", service_port("p", "TCP", 80), clusterIP="10.0.0.10", internalTrafficPolicy="Local"),
        dict([expected("ns", "itp", "p", "TCP", "10.0.0.10", 80, internal_policy_local=True)])),
    "LoadBalancer ingress without ip (hostname only) is not a VIP (ours)": (
        IPV4, lb("ns1", "load-balancer", "172.16.55.11", *LB_PORTS, ingress=[{"hostname": "lb.example.com"}]), lb_expected(())),
}


@pytest.mark.parametrize(("family", "svc", "want"), list(SERVICE_TO_SERVICE_MAP.values()), ids=list(SERVICE_TO_SERVICE_MAP))
def test_service_to_service_map(family, svc, want):
    assert service_ports_from_service(svc, family) == want


# ---- the tracker ----------------------------------------------------------------------------

def apply(tracker: ServiceChangeTracker, ports: dict):
    return apply_service_changes(ports, tracker.checkout())


def test_service_map_update_headless():
    tracker, ports = ServiceChangeTracker(IPV4), {}
    tracker.update(None, SERVICE_TO_SERVICE_MAP["headless service"][1])
    tracker.update(None, SERVICE_TO_SERVICE_MAP["headless service without port"][1])
    result = apply(tracker, ports)
    assert ports == {}
    assert result.updated_services == frozenset()
    assert health_check_node_ports(ports) == {}


def test_update_service_type_external_name():
    tracker, ports = ServiceChangeTracker(IPV4), {}
    tracker.update(None, service("ns2", "external-name", service_port("blah", "UDP", 1235, 5321), type="ExternalName", clusterIP="172.16.55.4",
                                 externalName="foo2.bar.com"))
    result = apply(tracker, ports)
    assert ports == {} and result.updated_services == frozenset()
    assert health_check_node_ports(ports) == {}


ADD_REMOVE_SERVICES = [
    service("ns2", "cluster-ip", service_port("port1", "UDP", 1234, 4321), service_port("port2", "UDP", 1235, 5321), type="ClusterIP", clusterIP="172.16.55.4"),
    service("ns2", "node-port", service_port("port1", "UDP", 345, 678), service_port("port2", "TCP", 344, 677), type="NodePort", clusterIP="172.16.55.10"),
    lb("ns1", "load-balancer", "172.16.55.11", service_port("foobar", "UDP", 8675, 30061), service_port("baz", "UDP", 8676, 30062), ingress=[{"ip": "10.1.2.4"}]),
    lb("ns1", "only-local-load-balancer", "172.16.55.12", service_port("foobar2", "UDP", 8677, 30063), service_port("baz", "UDP", 8678, 30064),
       ingress=[{"ip": "10.1.2.3"}], externalTrafficPolicy="Local", healthCheckNodePort=345),
]


def test_build_service_map_add_remove():
    tracker, ports = ServiceChangeTracker(IPV4), {}
    for svc in ADD_REMOVE_SERVICES:
        tracker.update(None, svc)
    result = apply(tracker, ports)
    assert len(ports) == 8
    assert result.updated_services == {"ns2/cluster-ip", "ns2/node-port", "ns1/load-balancer", "ns1/only-local-load-balancer"}
    # The only-local load balancer is the one with a health check.
    assert health_check_node_ports(ports) == {"ns1/only-local-load-balancer": 345}

    # services[0] loses both its ports (the new one is named "p2"); the rest are deleted.
    one_service = service("ns2", "cluster-ip", service_port("p2", "UDP", 1235, 5321), type="ClusterIP", clusterIP="172.16.55.4")
    tracker.update(ADD_REMOVE_SERVICES[0], one_service)
    for svc in ADD_REMOVE_SERVICES[1:]:
        tracker.update(svc, None)
    result = apply(tracker, ports)
    assert list(ports) == [ServicePortName("ns2", "cluster-ip", "p2", "UDP")]
    assert len(result.updated_services) == 4
    assert health_check_node_ports(ports) == {}
    # All services but one were deleted; the remaining one lost UDP ports too, so its
    # ClusterIP is there as well (from upstream's older version of this test).
    assert result.deleted_udp_cluster_ips == {"172.16.55.10", "172.16.55.4", "172.16.55.11", "172.16.55.12"}


def test_build_service_map_service_update():
    tracker, ports = ServiceChangeTracker(IPV4), {}
    v1 = service("ns1", "svc1", service_port("p1", "UDP", 1234, 4321), service_port("p2", "TCP", 1235, 5321), type="ClusterIP", clusterIP="172.16.55.4")
    v2 = lb("ns1", "svc1", "172.16.55.4", service_port("p1", "UDP", 1234, 4321), service_port("p2", "TCP", 1235, 5321),
            ingress=[{"ip": "10.1.2.3"}], externalTrafficPolicy="Local", healthCheckNodePort=345)

    tracker.update(None, v1)
    result = apply(tracker, ports)
    assert len(ports) == 2 and len(result.updated_services) == 1
    assert health_check_node_ports(ports) == {}

    # Change service to load-balancer
    tracker.update(v1, v2)
    result = apply(tracker, ports)
    assert len(ports) == 2 and len(result.updated_services) == 1
    assert len(health_check_node_ports(ports)) == 1

    # No change; make sure the service map stays the same and there are no health-check changes
    tracker.update(v2, v2)
    result = apply(tracker, ports)
    assert len(ports) == 2 and len(result.updated_services) == 0
    assert len(health_check_node_ports(ports)) == 1

    # And back to ClusterIP
    tracker.update(v2, v1)
    result = apply(tracker, ports)
    assert len(ports) == 2 and len(result.updated_services) == 1
    assert health_check_node_ports(ports) == {}
    assert result.deleted_udp_cluster_ips == frozenset()


def test_service_cache_leaks():
    tracker = ServiceChangeTracker(IPV4)
    svc = service("ns1", "svc1", service_port("p1", "UDP", 1234, 4321), service_port("p2", "TCP", 1235, 5321), type="ClusterIP", clusterIP="172.16.55.4")
    assert tracker.update(None, svc) is True
    assert tracker.pending() == 1
    assert tracker.update(svc, None) is False
    assert tracker.pending() == 0


V1 = service("ns", "a", service_port("p", "TCP", 80), clusterIP="10.0.0.1")
V2 = service("ns", "a", service_port("p", "TCP", 81), clusterIP="10.0.0.1")
V2_RELABELLED = {**V2, "metadata": {**V2["metadata"], "labels": {"x": "y"}}}
B = service("ns", "b", service_port("p", "TCP", 80), clusterIP="10.0.0.2")

# (ours) name: (updates, pending after, checked-out pairs as (previous ports, current ports) per key)
TRACKER_CASES = {
    "add": ([(None, V1)], 1, {"ns/a": ({}, {80})}),
    "add then update coalesces to one change": ([(None, V1), (V1, V2)], 1, {"ns/a": ({}, {81})}),
    "update then revert is no change": ([(V1, V2), (V2, V1)], 0, {}),
    "update touching nothing the proxy reads is no change": ([(V2, V2_RELABELLED)], 0, {}),
    "update then delete keeps the original previous": ([(V1, V2), (V2, None)], 1, {"ns/a": ({80}, set())}),
    "two services": ([(None, V1), (None, B)], 2, {"ns/a": ({}, {80}), "ns/b": ({}, {80})}),
    "nothing at all": ([(None, None)], 0, {}),
}


@pytest.mark.parametrize(("updates", "pending", "want"), list(TRACKER_CASES.values()), ids=list(TRACKER_CASES))
def test_service_change_tracker(updates, pending, want):
    tracker = ServiceChangeTracker(IPV4)
    for previous, current in updates:
        returned = tracker.update(previous, current)
    assert returned == bool(pending)
    assert tracker.pending() == pending
    got = {key: ({p.port for p in before.values()}, {p.port for p in after.values()}) for key, (before, after) in tracker.checkout().items()}
    assert got == {key: (set(before), after) for key, (before, after) in want.items()}
    assert tracker.pending() == 0


def test_apply_changes_keeps_ports_that_survive_an_update():
    """(ours) A port present before and after is replaced, not deleted (upstream ``filter``)."""
    tracker, ports = ServiceChangeTracker(IPV4), {}
    tracker.update(None, V1)
    apply(tracker, ports)
    tracker.update(V1, service("ns", "a", service_port("p", "TCP", 80), service_port("q", "UDP", 53), clusterIP="10.0.0.1"))
    result = apply(tracker, ports)
    assert sorted(k.port for k in ports) == ["p", "q"]
    assert result.deleted_udp_cluster_ips == frozenset()


@pytest.mark.parametrize(("cluster_ip", "family", "want"), [
    ("10.0.0.1", IPV4, "10.0.0.1"),
    ("10.0.0.1", IPV6, ""),
    ("fd00::1", IPV6, "fd00::1"),
    ("::ffff:10.0.0.1", IPV4, "::ffff:10.0.0.1"),  # a mapped address is IPv4 (Go's To4)
    ("not-an-ip", IPV4, "not-an-ip"),  # IsIPv6String is false: the IPv4 proxier gets it (and refuses it)
    ("fe80::1%eth0", IPV6, ""),  # a zone is no IP
])
def test_cluster_ip_of_family_without_ip_families(cluster_ip, family, want):
    """GetClusterIPByFamily for an object older than dual-stack: IsIPv6String decides."""
    assert cluster_ip_of_family({"spec": {"clusterIP": cluster_ip}}, family) == want


def test_mapped_ipv4_source_range_is_ipv4():
    """MapCIDRsByIPFamily: a mapped IPv4 CIDR is IPv4, written as Go prints it."""
    svc = service("ns", "lb", service_port("p", 80, "TCP"), type="LoadBalancer", clusterIP="10.0.0.1", clusterIPs=["10.0.0.1", "fd00::1"],
                  ipFamilies=["IPv4", "IPv6"], loadBalancerSourceRanges=["::ffff:10.0.0.0/104", "fd00::/64"])
    (v4,) = service_ports_from_service(svc, IPV4).values()
    (v6,) = service_ports_from_service(svc, IPV6).values()
    assert v4.load_balancer_source_ranges == ("10.0.0.0/8",) and v6.load_balancer_source_ranges == ("fd00::/64",)
