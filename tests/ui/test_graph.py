"""The Service map as data (kubesvc.ui.graph): states from conditions as the EndpointSlice API
defines them, the boxes and edges a user sees for a Service, its slices, endpoints, Pods and
Nodes, and the traffic settings and hints shown."""

from __future__ import annotations

import pytest

from kubesvc.explain.findings import ProxyHealth
from kubesvc.ui import graph


@pytest.mark.parametrize("conditions, state", [
    ({"ready": True, "serving": True, "terminating": False}, "ready"),
    ({}, "ready"),  # nil ready and serving: unknown, taken as ready; nil terminating: false
    (None, "ready"),
    ({"ready": False, "serving": False, "terminating": False}, "not-ready"),
    ({"ready": False}, "not-ready"),  # serving defaults to ready's value
    ({"ready": False, "serving": True, "terminating": True}, "serving-terminating"),
    ({"ready": False, "serving": False, "terminating": True}, "terminating"),
    ({"ready": False, "terminating": True}, "terminating"),
], ids=["all-true", "empty", "none", "not-ready", "ready-false-only", "serving-terminating", "terminating", "terminating-serving-nil"])
def test_endpoint_state(conditions, state):
    assert graph.endpoint_state(conditions) == state


def pod(name, node="n1", ready=True, deleting=False, ip="10.244.0.2", namespace="default"):
    meta = {"name": name, "namespace": namespace}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node},
            "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


@pytest.mark.parametrize("obj, state", [
    (pod("a"), "ready"), (pod("a", ready=False), "not-ready"), (pod("a", deleting=True), "terminating"),
    ({"metadata": {"name": "p"}, "status": {}}, "not-ready"),
], ids=["ready", "not-ready", "terminating", "no-conditions"])
def test_pod_state(obj, state):
    assert graph.pod_state(obj) == state


def service(name, selector=None, **spec):
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": selector or {"app": name}, "clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"],
                     "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}], **spec}}


def endpoint(pod_name, ip, ready=True, serving=None, terminating=False, node="n1", **extra):
    conditions = {"ready": ready, "serving": ready if serving is None else serving, "terminating": terminating}
    return {"addresses": [ip], "conditions": conditions, "nodeName": node,
            "targetRef": {"kind": "Pod", "namespace": "default", "name": pod_name}, **extra}


def slice_(name, service_name, *endpoints):
    return {"metadata": {"name": name, "namespace": "default", "labels": {"kubernetes.io/service-name": service_name}},
            "addressType": "IPv4", "ports": [{"port": 8080, "protocol": "TCP"}], "endpoints": list(endpoints)}


def node(name, ready=True):
    return {"metadata": {"name": name}, "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def boxes_by_id(result):
    return {b["id"]: b for b in result["boxes"]}


def edges(result):
    return {(e["from"], e["to"]) for e in result["edges"]}


def test_a_service_with_two_pods_on_one_node():
    result = graph.service_map(
        [service("web")], [slice_("web-abc", "web", endpoint("web-1", "10.244.0.2"), endpoint("web-2", "10.244.0.3", ready=False))],
        [pod("web-1"), pod("web-2", ready=False, ip="10.244.0.3")], [node("n1")],
        [ProxyHealth("n1", "http://10.0.0.1:10256/healthz", True, last_updated="2026-11-27T10:00:00Z",
                     synced=(("IPv4", "2026-11-27T09:59:58.123456Z"), ("IPv6", "0001-01-01T00:00:00Z")))])
    boxes = boxes_by_id(result)
    assert {b: boxes[b]["state"] for b in boxes} == {
        "service/default/web": "ready", "slice/default/web-abc": "ready",
        "endpoint/default/web-abc/0": "ready", "endpoint/default/web-abc/1": "not-ready",
        "pod/default/web-1": "ready", "pod/default/web-2": "not-ready", "node/n1": "ready"}
    assert edges(result) == {
        ("service/default/web", "slice/default/web-abc"),
        ("slice/default/web-abc", "endpoint/default/web-abc/0"), ("slice/default/web-abc", "endpoint/default/web-abc/1"),
        ("endpoint/default/web-abc/0", "pod/default/web-1"), ("endpoint/default/web-abc/1", "pod/default/web-2"),
        ("pod/default/web-1", "node/n1"), ("pod/default/web-2", "node/n1")}
    assert [(b["column"], b["row"]) for b in result["boxes"] if b["kind"] == "endpoint"] == [(2, 0), (2, 1)]
    assert boxes["node/n1"]["proxy"] == {"state": "healthy", "lastUpdated": "2026-11-27T10:00:00Z", "error": "",
                                         "url": "http://10.0.0.1:10256/healthz"}
    assert boxes["node/n1"]["details"] == ["node ready, proxy healthy", "last sync IPv4 09:59:58"]  # IPv6 never synced
    assert boxes["endpoint/default/web-abc/1"]["details"] == ["not-ready, node n1", "hints: none", "ready=False, serving=False, terminating=False"]
    assert boxes["service/default/web"]["details"] == ["ClusterIP 10.96.0.20", "ports: 80->8080/TCP", "internal Cluster"]
    assert result["rows"] == 2


def test_pods_behind_two_services_are_drawn_once_and_services_get_their_own_bands():
    both = [endpoint("b-1", "10.244.0.2"), endpoint("b-2", "10.244.0.3")]
    result = graph.service_map(
        [service("a-svc", {"app": "b"}), service("b-svc", {"app": "b"})],
        [slice_("a-1", "a-svc", *both), slice_("b-1", "b-svc", *both)],
        [pod("b-1"), pod("b-2", ip="10.244.0.3")], [node("n1")])
    boxes = boxes_by_id(result)
    assert [b["id"] for b in result["boxes"] if b["kind"] == "pod"] == ["pod/default/b-1", "pod/default/b-2"]
    assert (boxes["service/default/a-svc"]["row"], boxes["service/default/b-svc"]["row"]) == (0, 2)
    assert (boxes["slice/default/b-1"]["row"], boxes["endpoint/default/b-1/1"]["row"]) == (2, 3)
    assert ("endpoint/default/b-1/0", "pod/default/b-1") in edges(result)
    assert boxes["node/n1"]["state"] == "unknown"  # no proxy health read
    assert boxes["node/n1"]["details"] == ["node ready, proxy not read"]


def test_a_service_without_endpoints_is_not_ready_and_pods_no_slice_names_are_still_shown():
    result = graph.service_map([service("lonely")], [], [pod("stray", node="n2")], [node("n2", ready=False)],
                               [ProxyHealth("n2", "http://x:10256/healthz", None, error="connection refused")])
    boxes = boxes_by_id(result)
    assert boxes["service/default/lonely"]["state"] == "not-ready"
    assert boxes["pod/default/stray"]["row"] == 0
    assert boxes["node/n2"]["state"] == "not-ready"
    assert boxes["node/n2"]["details"] == ["node not-ready, proxy unreachable", "connection refused"]
    assert ("pod/default/stray", "node/n2") in edges(result)


def test_terminating_fallbacks_hints_and_traffic_policies_are_shown():
    svc = service("lb", type="LoadBalancer", externalTrafficPolicy="Local", internalTrafficPolicy="Local",
                  trafficDistribution="PreferClose", sessionAffinity="ClientIP",
                  ports=[{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080, "protocol": "TCP"}])
    eps = [endpoint("old", "10.244.0.2", ready=False, serving=True, terminating=True, zone="zone-a",
                    hints={"forZones": [{"name": "zone-a"}], "forNodes": [{"name": "n1"}]}),
           endpoint("gone", "10.244.0.3", ready=False, serving=False, terminating=True)]
    result = graph.service_map([svc], [slice_("lb-1", "lb", *eps)], [pod("old", deleting=True)], [node("n1")])
    boxes = boxes_by_id(result)
    assert boxes["service/default/lb"]["state"] == "serving-terminating"
    assert boxes["service/default/lb"]["details"] == [
        "LoadBalancer 10.96.0.20", "ports: http:80->8080 (node 30080)/TCP", "internal Local, external Local, affinity ClientIP, PreferClose"]
    first = boxes["endpoint/default/lb-1/0"]
    assert (first["state"], first["hints"]) == ("serving-terminating", "zones: zone-a; nodes: n1")
    assert first["details"][:2] == ["serving-terminating, node n1, zone zone-a", "hints: zones: zone-a; nodes: n1"]
    assert boxes["endpoint/default/lb-1/1"]["state"] == "terminating"
    assert boxes["pod/default/old"]["state"] == "terminating"
    assert boxes["pod/default/gone"]["state"] == "unknown"  # the slice names a Pod the API no longer has
    assert boxes["pod/default/gone"]["details"] == ["not found"]


def test_the_same_objects_give_the_same_map_in_any_order():
    svcs = [service("a"), service("b")]
    slices = [slice_("a-1", "a", endpoint("p", "10.244.0.2")), slice_("b-1", "b", endpoint("q", "10.244.0.3"))]
    pods = [pod("p"), pod("q", ip="10.244.0.3")]
    assert graph.service_map(svcs, slices, pods, [node("n1")]) == graph.service_map(svcs[::-1], slices[::-1], pods[::-1], [node("n1")])
