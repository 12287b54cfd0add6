"""``kubesvc explain``'s judgement, one case per cause of a Service that does not answer (and
the healthy case), on objects as the API returns them."""

from __future__ import annotations

import copy

import pytest

from kubesvc.explain.findings import DnsAnswer, ProxyHealth, Snapshot, explain

NS = "default"


def service(name="web", selector=None, ports=None, **spec) -> dict:
    return {"metadata": {"name": name, "namespace": NS},
            "spec": {"selector": {"app": "web"} if selector is None else selector, "clusterIP": "10.96.0.20",
                     "clusterIPs": ["10.96.0.20"], "type": "ClusterIP", "ipFamilies": ["IPv4"],
                     "ports": ports or [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}], **spec}}


def pod(name, ip, labels=None, node="node-a", ready=True, ports=None, **status) -> dict:
    conditions = [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True" if ready else "False"}]
    return {"metadata": {"name": name, "namespace": NS, "labels": {"app": "web"} if labels is None else labels},
            "spec": {"nodeName": node, "containers": [{"name": "app", "ports": ports if ports is not None else
                                                        [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]}]},
            "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "conditions": conditions,
                       "containerStatuses": [{"name": "app", "ready": ready, "restartCount": 0, "state": {"running": {}}}],
                       **status}}


def slice_of(name, *endpoints) -> dict:
    return {"metadata": {"name": f"{name}-abcde", "namespace": NS, "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": ready}, "nodeName": node} for ip, node, ready in endpoints]}


def healthy_snapshot() -> Snapshot:
    return Snapshot(service=service(), pods=[pod("web-1", "10.244.0.5"), pod("web-2", "10.244.1.6", node="node-b")],
                    slices=[slice_of("web", ("10.244.0.5", "node-a", True), ("10.244.1.6", "node-b", True))],
                    node="node-a", proxies=[ProxyHealth("node-a", "http://10.0.0.1:10256/healthz", True)],
                    dns=DnsAnswer("web.default.svc.cluster.local", "10.96.0.10", ("10.96.0.20",)))


def causes(snapshot: Snapshot) -> list[tuple[str, str]]:
    return [(f.cause, f.severity) for f in explain(snapshot)]


def test_a_healthy_service_is_said_to_be_healthy():
    findings = explain(healthy_snapshot())
    assert [(f.cause, f.severity) for f in findings] == [("healthy", "ok")]
    assert findings[0].line() == ("OK      svc/web is healthy: 2 ready endpoints (node-a: 1, node-b: 1) behind 10.96.0.20:80; "
                                  "1 proxy synced, web.default.svc.cluster.local resolves")


def test_a_selector_that_matches_nothing_names_the_nearest_pods_and_the_fix():
    snap = healthy_snapshot()
    snap.pods = [pod("web-1", "10.244.0.5", labels={"app": "webapp", "tier": "front"}), pod("db-1", "10.244.0.9", labels={"app": "db"})]
    snap.slices = [slice_of("web")]
    (finding,) = [f for f in explain(snap) if f.severity == "error"]
    assert finding.cause == "selector-matches-nothing"
    # both miss app=web; web-1's value is the nearer (a typo is the usual cause)
    assert finding.message == "selector app=web matches no Pod in default (nearest: web-1 has app=webapp,tier=front; db-1 has app=db)"
    assert finding.fix.startswith("kubectl label pod web-1 app=web --overwrite")


def test_a_selector_in_an_empty_namespace():
    snap = healthy_snapshot()
    snap.pods, snap.slices = [], [slice_of("web")]
    assert explain(snap)[0].message == "selector app=web matches no Pod: namespace default has no Pods"


@pytest.mark.parametrize("status, cause, message", [
    ({"containerStatuses": [{"name": "app", "ready": False, "restartCount": 7, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                             "lastState": {"terminated": {"exitCode": 2}}}]},
     "pod-crash-looping", "Pod web-1 container app is crash-looping (7 restarts, last exit code 2)"),
    ({"containerStatuses": [{"name": "app", "ready": False, "restartCount": 0,
                             "state": {"waiting": {"reason": "CreateContainerConfigError", "message": 'configmap "cfg" not found'}}}]},
     "pod-waiting", "Pod web-1 container app is waiting (CreateContainerConfigError: configmap \"cfg\" not found)"),
    ({"containerStatuses": [{"name": "app", "ready": False, "restartCount": 0, "state": {"terminated": {"exitCode": 1}}}]},
     "pod-container-exited", "Pod web-1 container app has exited (exit code 1)"),
    ({"phase": "Failed"}, "pod-exited", "Pod web-1 has exited (phase Failed) and never serves again"),
])
def test_pods_that_are_not_ready_say_why(status, cause, message):
    snap = healthy_snapshot()
    broken = pod("web-1", "10.244.0.5", ready=False, **status)
    snap.pods = [broken]
    snap.slices = [slice_of("web", ("10.244.0.5", "node-a", False))]
    found = [f for f in explain(snap) if f.cause == cause]
    assert [(f.severity, f.message) for f in found] == [("error", message)]


def test_a_failing_readiness_probe_is_read_from_the_kubelets_events():
    snap = healthy_snapshot()
    snap.pods = [pod("web-1", "10.244.0.5", ready=False)]
    snap.slices = [slice_of("web", ("10.244.0.5", "node-a", False))]
    snap.events = [
        {"involvedObject": {"kind": "Pod", "name": "web-1"}, "reason": "Unhealthy", "lastTimestamp": "2026-11-27T07:00:00Z",
         "message": "Readiness probe failed: Get \"http://10.244.0.5:8081/ready\": connection refused"},
        {"involvedObject": {"kind": "Pod", "name": "web-1"}, "reason": "Unhealthy", "lastTimestamp": "2026-11-27T07:00:10Z",
         "message": "Readiness probe failed: HTTP probe failed with statuscode: 500"},
        {"involvedObject": {"kind": "Pod", "name": "web-2"}, "reason": "Unhealthy", "lastTimestamp": "2026-11-27T07:00:20Z",
         "message": "Readiness probe failed: other pod"},
    ]
    (finding,) = [f for f in explain(snap) if f.cause == "pod-readiness-failing"]
    assert finding.message == "Pod web-1 fails its readiness probe (Readiness probe failed: HTTP probe failed with statuscode: 500)"


def test_one_unready_pod_beside_a_ready_one_is_a_warning():
    snap = healthy_snapshot()
    snap.pods[1] = pod("web-2", "10.244.1.6", node="node-b", ready=False)
    snap.slices = [slice_of("web", ("10.244.0.5", "node-a", True), ("10.244.1.6", "node-b", False))]
    assert causes(snap) == [("pod-not-ready", "warning")]


def test_an_unscheduled_pod_carries_the_schedulers_message():
    snap = healthy_snapshot()
    unscheduled = pod("web-1", "", node="")
    unscheduled["spec"].pop("nodeName")
    unscheduled["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "message": "0/1 nodes are available: 1 node(s) were unschedulable."}]}
    snap.pods, snap.slices = [unscheduled], [slice_of("web")]
    (finding,) = [f for f in explain(snap) if f.cause == "pod-unscheduled"]
    assert finding.message == "Pod web-1 is not scheduled: 0/1 nodes are available: 1 node(s) were unschedulable."


def test_a_target_port_name_no_pod_declares():
    snap = healthy_snapshot()
    snap.service = service(ports=[{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "web"}])
    findings = [f for f in explain(snap) if f.cause == "target-port-name-unknown"]
    assert [(f.severity, f.message) for f in findings] == [
        ("error", "port http: targetPort 'web' names no TCP containerPort of Pods web-1, web-2 (their named ports: http)")]
    assert findings[0].fix.startswith("name the container port 'web' in the Pod template")


def test_a_target_port_name_found_with_another_protocol_is_not_found():
    snap = healthy_snapshot()
    snap.service = service(ports=[{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": "http"}])
    assert ("target-port-name-unknown", "error") in causes(snap)


def test_a_numeric_target_port_no_container_declares_is_a_warning():
    snap = healthy_snapshot()
    snap.service = service(ports=[{"port": 80, "protocol": "TCP", "targetPort": 9090}])
    (finding,) = [f for f in explain(snap) if f.cause == "target-port-not-declared"]
    assert finding.severity == "warning"
    assert finding.message.startswith("port 80: no container of the Pods declares TCP port 9090 (they declare 8080)")
    # Pods that declare no ports at all: nothing to compare with, nothing said
    snap.pods = [pod("web-1", "10.244.0.5", ports=[]), pod("web-2", "10.244.1.6", node="node-b", ports=[])]
    assert causes(snap) == [("healthy", "ok")]


def test_no_endpointslice_for_a_service_with_a_selector():
    snap = healthy_snapshot()
    snap.slices = []
    assert causes(snap)[0] == ("no-endpointslice", "error")


def test_a_service_without_selector_or_slices():
    snap = healthy_snapshot()
    snap.service = service(selector={})
    snap.slices = []
    assert causes(snap) == [("no-selector-no-endpoints", "error")]


def test_stale_slices_missing_a_ready_pod_or_listing_a_gone_one():
    snap = healthy_snapshot()
    snap.slices = [slice_of("web", ("10.244.0.5", "node-a", True), ("10.244.9.9", "node-b", True))]
    messages = [f.message for f in explain(snap) if f.cause == "endpointslice-stale"]
    assert messages == ["the EndpointSlices lag behind the Pods: Ready Pod web-2 not listed as ready endpoints",
                        "the EndpointSlices list 10.244.9.9, which no matching Pod has"]


def test_internal_traffic_policy_local_without_a_local_endpoint():
    snap = healthy_snapshot()
    snap.service = service(internalTrafficPolicy="Local")
    snap.node = "node-c"
    (finding,) = [f for f in explain(snap) if f.severity != "ok"]
    assert (finding.cause, finding.severity) == ("no-local-endpoint-internal", "error")
    assert finding.message == ("internalTrafficPolicy is Local and node node-c has no ready endpoint: connections from node-c "
                               "and its Pods to 10.96.0.20 are dropped (nodes with endpoints: node-a, node-b)")
    snap.node = "node-a"
    assert causes(snap) == [("healthy", "ok")]


def test_external_traffic_policy_local_without_a_local_endpoint():
    snap = healthy_snapshot()
    snap.service = service(type="NodePort", externalTrafficPolicy="Local",
                           ports=[{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080, "nodePort": 30080}])
    snap.node = "node-c"
    assert causes(snap) == [("no-local-endpoint-external", "warning")]
    assert "external clients of NodePort 30080 on node-c are dropped" in explain(snap)[0].message


def test_a_proxy_that_has_not_synced_and_one_that_does_not_answer():
    snap = healthy_snapshot()
    snap.proxies = [ProxyHealth("node-a", "http://10.0.0.1:10256/healthz", False, last_updated="2026-11-27T06:00:00Z"),
                    ProxyHealth("node-b", "http://10.0.0.2:10256/healthz", None, error="connection refused")]
    assert causes(snap) == [("proxy-not-synced", "error"), ("proxy-unreachable", "warning")]
    assert explain(snap)[0].message == ("the proxy on node node-a has not synced its rules since 2026-11-27T06:00:00Z "
                                        "(http://10.0.0.1:10256/healthz says unhealthy)")


def test_dns_that_does_not_resolve_or_answers_wrong_or_is_missing():
    snap = healthy_snapshot()
    snap.dns = DnsAnswer("web.default.svc.cluster.local", "10.96.0.10", error="NXDOMAIN")
    assert causes(snap) == [("dns-not-resolving", "error")]
    snap.dns = DnsAnswer("web.default.svc.cluster.local", "10.96.0.10", ("10.96.0.99",))
    assert causes(snap) == [("dns-wrong-answer", "error")]
    snap.dns, snap.dns_service = None, False  # a cluster without DNS: said, and the Service is still healthy
    assert causes(snap) == [("no-cluster-dns", "info"), ("healthy", "ok")]


def test_an_external_name_service_has_no_endpoints_by_design():
    snap = healthy_snapshot()
    snap.service = {"metadata": {"name": "ext", "namespace": NS}, "spec": {"type": "ExternalName", "externalName": "example.org"}}
    snap.dns = None
    assert causes(snap) == [("external-name", "ok")]


def test_explain_does_not_change_what_it_reads():
    snap = healthy_snapshot()
    snap.pods[0]["status"]["conditions"][1]["status"] = "False"
    before = copy.deepcopy(snap)
    explain(snap)
    assert snap == before
