"""The Kubernetes names behind a walk and the reasons an endpoint is left out
(``proxy/trace/objects.py``), and the command's argument forms (``cmd/trace.py``)."""

from __future__ import annotations

import pytest

from kubesvc.cmd.trace import parse_destination, service_port
from kubesvc.proxy.trace.objects import excluded_because, service_port_of, slice_endpoints


def test_the_service_port_from_chain_names_or_an_element_comment():
    assert service_port_of(["nat-prerouting", "services", "external-ABCDEFGH-ns/web/tcp/http"]) == {
        "namespace": "ns", "name": "web", "protocol": "TCP", "port": "http"}
    assert service_port_of(["filter-input", "reject-chain"], ["ns/empty:p80"], "udp") == {
        "namespace": "ns", "name": "empty", "protocol": "UDP", "port": "p80"}
    assert service_port_of(["services"]) is None


SLICE = {"metadata": {"name": "web-x1"}, "ports": [{"name": "http", "port": 8080}, {"name": "metrics", "port": 9090}],
         "endpoints": [
             {"addresses": ["10.1.1.2"], "nodeName": "n1", "targetRef": {"kind": "Pod", "namespace": "ns", "name": "a"},
              "conditions": {"ready": True, "serving": True, "terminating": False}, "hints": {"forZones": [{"name": "z1"}]}},
             {"addresses": ["10.1.2.2"], "nodeName": "n2", "targetRef": {"kind": "Pod", "namespace": "ns", "name": "b"},
              "conditions": {"ready": False, "serving": True, "terminating": True}},
             {"addresses": ["10.1.3.2"], "nodeName": "n2", "targetRef": {"kind": "Pod", "namespace": "ns", "name": "c"},
              "conditions": {"ready": False, "serving": False, "terminating": False}},
         ]}


def test_slice_endpoints():
    eps = slice_endpoints([SLICE], "http")
    assert [(e["address"], e["pod"], e["node"], e["ports"], e["ready"], e["terminating"]) for e in eps] == [
        ("10.1.1.2", "ns/a", "n1", [8080], True, False), ("10.1.2.2", "ns/b", "n2", [8080], False, True),
        ("10.1.3.2", "ns/c", "n2", [8080], False, False)]
    assert eps[0]["hintZones"] == ["z1"]


@pytest.mark.parametrize("address,kw,reason", [
    ("10.1.3.2", {}, "not ready"),
    ("10.1.2.2", {}, "terminating (used only while no endpoint is ready)"),
    ("10.1.1.2", {"local_policy": True, "node": "n3"}, "on node n1, and the traffic policy is Local"),
    ("10.1.1.2", {"node_labels": {"topology.kubernetes.io/zone": "z2"}}, "hinted to zone(s) z1, this node is in z2"),
    ("10.1.1.2", {}, "not in this node's rules (its proxy has not synced the change?)"),
])
def test_why_an_endpoint_is_excluded(address, kw, reason):
    ep = next(e for e in slice_endpoints([SLICE], "http") if e["address"] == address)
    args = {"any_ready": True, "local_policy": False, "node": "n1", "node_labels": {}, **kw}
    assert excluded_because(ep, **args) == reason


@pytest.mark.parametrize("dst,parsed", [
    ("172.30.0.10:80", ("172.30.0.10", "80", "tcp")),
    ("172.30.0.10:53/udp", ("172.30.0.10", "53", "udp")),
    ("[fd00::10]:80/sctp", ("fd00::10", "80", "sctp")),
    ("default/web", ("default/web", None, "tcp")),
    ("default/web:http/tcp", ("default/web", "http", "tcp")),
])
def test_destinations(dst, parsed):
    assert parse_destination(dst) == parsed


def test_service_port_by_number_name_or_first():
    svc = {"metadata": {"name": "web"}, "spec": {"ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                                                             {"name": "http", "port": 80, "protocol": "TCP"}]}}
    assert service_port(svc, None, "tcp") == 80
    assert service_port(svc, "dns", "udp") == 53
    assert service_port(svc, "53", "udp") == 53


def test_the_service_port_owning_an_address_and_port():
    """IPVS mode's rules name no Service: the one whose ClusterIP, externalIP, LB ingress IP or
    (on a node address) NodePort the destination is."""
    from kubesvc.proxy.trace.objects import service_port_owning
    web = {"metadata": {"namespace": "ns", "name": "web"},
           "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "externalIPs": ["192.168.99.13"],
                    "ports": [{"name": "http", "port": 80, "nodePort": 30080}, {"name": "dns", "port": 53, "protocol": "UDP"}]},
           "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}
    headless = {"metadata": {"namespace": "ns", "name": "headless"}, "spec": {"clusterIP": "None", "ports": [{"port": 80}]}}
    owner = {"namespace": "ns", "name": "web", "protocol": "TCP", "port": "http"}
    for dest, port in (("10.96.0.10", 80), ("192.168.99.13", 80), ("1.2.3.4", 80), ("192.168.50.1", 30080)):
        assert service_port_owning([headless, web], dest, port, "tcp", ["192.168.50.1"]) == owner, (dest, port)
    assert service_port_owning([web], "10.96.0.10", 53, "udp")["port"] == "dns"
    assert service_port_owning([web], "10.96.0.10", 53, "tcp") is None
    assert service_port_owning([web], "10.96.0.10", 81, "tcp") is None
    assert service_port_owning([web], "192.168.50.9", 30080, "tcp", ["192.168.50.1"]) is None  # not this node's address
