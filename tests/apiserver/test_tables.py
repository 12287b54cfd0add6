"""Server-side Tables, checked against upstream printers and their tests.

Expected cells come from kubernetes pkg/printers/internalversion/printers_test.go
(TestPrintPod, TestPrintPodWithRestartableInitContainer, TestPrintPodwide), from the formats
printers.go builds (``80:30080/TCP``, ``<pending>``, ``a,b,c + 1 more...``), from
apimachinery duration_test.go, and from the kubernetes.io docs' sample output
(``kubectl get ipaddress`` -> ``services/default/kubernetes``).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from kubesvc.api.errors import StatusError
from kubesvc.api.scheme import KindInfo
from kubesvc.api.schema import Obj
from kubesvc.apiserver.tables import format_labels, human_duration, to_table

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)


def ago(**delta) -> str:
    return (NOW - timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def kind(name: str, resource: str, group: str = "", namespaced: bool = True) -> KindInfo:
    return KindInfo(group, "v1", name, resource, resource[:-1], namespaced, Obj("x"))


SERVICE = kind("Service", "services")
POD = kind("Pod", "pods")
NODE = kind("Node", "nodes", namespaced=False)
NAMESPACE = kind("Namespace", "namespaces", namespaced=False)
ENDPOINTS = kind("Endpoints", "endpoints")
ENDPOINT_SLICE = kind("EndpointSlice", "endpointslices", "discovery.k8s.io")
EVENT = kind("Event", "events")
LEASE = kind("Lease", "leases", "coordination.k8s.io")
IP_ADDRESS = kind("IPAddress", "ipaddresses", "networking.k8s.io", namespaced=False)
SERVICE_CIDR = kind("ServiceCIDR", "servicecidrs", "networking.k8s.io", namespaced=False)


def cells(info: KindInfo, obj: dict) -> list:
    return to_table(info, [obj], now=NOW)["rows"][0]["cells"]


def column_names(info: KindInfo) -> list[tuple[str, int]]:
    return [(c["name"], c["priority"]) for c in to_table(info, [], now=NOW)["columnDefinitions"]]


# ---- ages ----------------------------------------------------------------------------------

MS = 0.001
HOUR, DAY, YEAR = 3600, 86400, 365 * 86400
DURATIONS = [  # upstream TestHumanDuration and TestHumanDurationBoundaries
    (1, "1s"), (70, "70s"), (190, "3m10s"), (70 * 60, "70m"), (47 * HOUR, "47h"), (49 * HOUR, "2d1h"),
    ((8 * 24 + 2) * HOUR, "8d"), (367 * DAY, "367d"), ((365 * 2 * 24 + 25) * HOUR, "2y1d"), ((365 * 8 * 24 + 2) * HOUR, "8y"),
    (-2, "<invalid>"), (-2 + 1e-9, "0s"), (0, "0s"), (1 - MS, "0s"), (120 - MS, "119s"), (120, "2m"), (121, "2m1s"),
    (600 - MS, "9m59s"), (600, "10m"), (601, "10m"), (3 * HOUR - MS, "179m"), (3 * HOUR, "3h"), (3 * HOUR + 60, "3h1m"),
    (8 * HOUR - MS, "7h59m"), (8 * HOUR, "8h"), (8 * HOUR + 59 * 60, "8h"), (2 * DAY - MS, "47h"), (2 * DAY, "2d"),
    (2 * DAY + HOUR, "2d1h"), (8 * DAY - MS, "7d23h"), (8 * DAY, "8d"), (8 * DAY + 23 * HOUR, "8d"), (2 * YEAR - MS, "729d"),
    (2 * YEAR, "2y"), (2 * YEAR + 23 * HOUR, "2y"), (2 * YEAR + DAY - MS, "2y"), (2 * YEAR + DAY, "2y1d"), (3 * YEAR, "3y"),
    (7 * YEAR, "7y"), (8 * YEAR - MS, "7y364d"), (8 * YEAR, "8y"), (8 * YEAR + 364 * DAY, "8y"), (9 * YEAR, "9y"),
]


@pytest.mark.parametrize("seconds, expected", DURATIONS, ids=[f"{s}s" for s, _ in DURATIONS])
def test_human_duration(seconds, expected):
    assert human_duration(seconds) == expected


def test_format_labels():
    assert format_labels({"tier": "fe", "app": "web"}) == "app=web,tier=fe"
    assert format_labels({}) == "<none>" and format_labels(None) == "<none>"


# ---- table shape ------------------------------------------------------------------------------

KUBERNETES_SVC = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "kubernetes", "namespace": "default", "resourceVersion": "111", "creationTimestamp": ago(seconds=5), "labels": {"component": "apiserver"}},
    "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"], "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]},
}


def test_service_list_table_has_upstream_shape():
    table = to_table(SERVICE, [KUBERNETES_SVC], now=NOW, list_meta={"resourceVersion": "112", "continue": "abc"})
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {"resourceVersion": "112", "continue": "abc"}
    assert table["rows"] == [
        {
            "cells": ["kubernetes", "ClusterIP", "10.96.0.1", "<none>", "443/TCP", "5s", "<none>"],
            "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": KUBERNETES_SVC["metadata"]},
        }
    ]
    assert table["columnDefinitions"][0] == {
        "name": "Name",
        "type": "string",
        "format": "name",
        "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
        "priority": 0,
    }
    assert table["columnDefinitions"][5]["description"].startswith("CreationTimestamp is a timestamp")
    assert "in UTC.\n\nPopulated by the system." in table["columnDefinitions"][5]["description"]


def test_single_object_table_carries_the_objects_resource_version():
    assert to_table(SERVICE, [KUBERNETES_SVC], now=NOW)["metadata"] == {"resourceVersion": "111"}


@pytest.mark.parametrize(
    "include_object, expected",
    [
        pytest.param("", {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": KUBERNETES_SVC["metadata"]}, id="default"),
        pytest.param("Metadata", {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": KUBERNETES_SVC["metadata"]}, id="metadata"),
        pytest.param("Object", KUBERNETES_SVC, id="object"),
        pytest.param("None", None, id="none"),
    ],
)
def test_include_object(include_object, expected):
    row = to_table(SERVICE, [KUBERNETES_SVC], now=NOW, include_object=include_object)["rows"][0]
    assert row.get("object") == expected


def test_include_object_fills_in_missing_type_meta():
    bare = {k: v for k, v in KUBERNETES_SVC.items() if k not in ("apiVersion", "kind")}
    row_object = to_table(SERVICE, [bare], now=NOW, include_object="Object")["rows"][0]["object"]
    assert row_object["apiVersion"] == "v1" and row_object["kind"] == "Service"


def test_unknown_include_object_is_400():
    with pytest.raises(StatusError) as caught:
        to_table(SERVICE, [], include_object="Everything")
    assert caught.value.code == 400 and caught.value.message == 'unrecognized includeObject value: "Everything"'


def test_no_headers_gives_null_column_definitions():
    table = to_table(SERVICE, [KUBERNETES_SVC], now=NOW, columns=False)
    assert table["columnDefinitions"] is None and len(table["rows"]) == 1


def test_empty_list_has_empty_rows():
    assert to_table(SERVICE, [], now=NOW, list_meta={"resourceVersion": "5"})["rows"] == []


# ---- columns per kind ---------------------------------------------------------------------------

COLUMNS = {
    "Service": [("Name", 0), ("Type", 0), ("Cluster-IP", 0), ("External-IP", 0), ("Port(s)", 0), ("Age", 0), ("Selector", 1)],
    "Pod": [("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0), ("IP", 1), ("Node", 1), ("Nominated Node", 1), ("Readiness Gates", 1)],
    "Node": [("Name", 0), ("Status", 0), ("Roles", 0), ("Age", 0), ("Version", 0), ("Internal-IP", 1), ("External-IP", 1), ("OS-Image", 1), ("Kernel-Version", 1), ("Container-Runtime", 1)],
    "Namespace": [("Name", 0), ("Status", 0), ("Age", 0)],
    "Endpoints": [("Name", 0), ("Endpoints", 0), ("Age", 0)],
    "EndpointSlice": [("Name", 0), ("AddressType", 0), ("Ports", 0), ("Endpoints", 0), ("Age", 0)],
    "Event": [("Last Seen", 0), ("Type", 0), ("Reason", 0), ("Object", 0), ("Subobject", 1), ("Source", 1), ("Message", 0), ("First Seen", 1), ("Count", 1), ("Name", 1)],
    "Lease": [("Name", 0), ("Holder", 0), ("Age", 0)],
    "IPAddress": [("Name", 0), ("ParentRef", 0)],
    "ServiceCIDR": [("Name", 0), ("CIDRs", 0), ("Age", 0)],
    "Widget": [("Name", 0), ("Created At", 0)],
}
KINDS = {i.kind: i for i in (SERVICE, POD, NODE, NAMESPACE, ENDPOINTS, ENDPOINT_SLICE, EVENT, LEASE, IP_ADDRESS, SERVICE_CIDR, kind("Widget", "widgets"))}


@pytest.mark.parametrize("kind_name", list(COLUMNS))
def test_columns(kind_name):
    assert column_names(KINDS[kind_name]) == COLUMNS[kind_name]


def test_restarts_column_is_a_string_and_the_default_created_at_a_date():
    assert to_table(POD, [], now=NOW)["columnDefinitions"][3]["type"] == "string"
    assert to_table(KINDS["Widget"], [], now=NOW)["columnDefinitions"][1]["type"] == "date"


# ---- Service -------------------------------------------------------------------------------------


def svc(spec: dict, status: dict | None = None) -> dict:
    return {"metadata": {"name": "web", "creationTimestamp": ago(minutes=3, seconds=14)}, "spec": spec, "status": status or {}}


TCP80 = [{"port": 80, "protocol": "TCP"}]


@pytest.mark.parametrize(
    "service, expected",
    [
        pytest.param(svc({"type": "ClusterIP", "clusterIP": "10.0.0.5", "clusterIPs": ["10.0.0.5"], "ports": TCP80, "selector": {"tier": "fe", "app": "web"}}), ["web", "ClusterIP", "10.0.0.5", "<none>", "80/TCP", "3m14s", "app=web,tier=fe"], id="cluster-ip"),
        pytest.param(svc({"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"], "ports": TCP80}), ["web", "ClusterIP", "None", "<none>", "80/TCP", "3m14s", "<none>"], id="headless"),
        pytest.param(svc({"type": "ClusterIP", "clusterIPs": ["10.0.0.5"], "externalIPs": ["1.2.3.4", "5.6.7.8"], "ports": [{"port": 80, "protocol": "TCP"}, {"port": 443, "protocol": "TCP"}]}), ["web", "ClusterIP", "10.0.0.5", "1.2.3.4,5.6.7.8", "80/TCP,443/TCP", "3m14s", "<none>"], id="external-ips"),
        pytest.param(svc({"type": "NodePort", "clusterIPs": ["10.0.0.5"], "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "nodePort": 30053, "protocol": "UDP"}]}), ["web", "NodePort", "10.0.0.5", "<none>", "80:30080/TCP,53:30053/UDP", "3m14s", "<none>"], id="node-port"),
        pytest.param(svc({"type": "LoadBalancer", "clusterIPs": ["10.0.0.5"], "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}]}), ["web", "LoadBalancer", "10.0.0.5", "<pending>", "80:30080/TCP", "3m14s", "<none>"], id="load-balancer-pending"),
        pytest.param(svc({"type": "LoadBalancer", "clusterIPs": ["10.0.0.5"], "externalIPs": ["9.9.9.9"], "ports": TCP80}, {"loadBalancer": {"ingress": [{"ip": "3.3.3.3"}, {"hostname": "lb.example.com"}, {"ip": "2.2.2.2"}]}}), ["web", "LoadBalancer", "10.0.0.5", "2.2.2.2,3.3.3.3,lb.example.com,9.9.9.9", "80/TCP", "3m14s", "<none>"], id="load-balancer-ingress"),
        pytest.param(svc({"type": "ExternalName", "externalName": "db.example.com"}), ["web", "ExternalName", "<none>", "db.example.com", "<none>", "3m14s", "<none>"], id="external-name"),
    ],
)
def test_service_cells(service, expected):
    assert cells(SERVICE, service) == expected


# ---- Pod -------------------------------------------------------------------------------------------

RUNNING = {"running": {}}


def pod(status: dict, *, containers: int = 2, spec: dict | None = None, deleting: bool = False, name: str = "test1") -> dict:
    metadata: dict = {"name": name}
    if deleting:
        metadata["deletionTimestamp"] = ago(seconds=1)
    return {"metadata": metadata, "spec": {"containers": [{"name": f"c{i}"} for i in range(containers)], **(spec or {})}, "status": status}


def finished(**delta) -> dict:
    return {"terminated": {"finishedAt": ago(**delta)}}


RESTARTABLE_INITS = {"initContainers": [{"name": "restartable-init-1", "restartPolicy": "Always"}, {"name": "restartable-init-2", "restartPolicy": "Always"}]}

POD_CASES = [
    pytest.param(pod({"phase": "podPhase", "containerStatuses": [{"ready": True, "restartCount": 3, "state": RUNNING}, {"restartCount": 3}]}), ["1/2", "podPhase", "6"], id="phase-and-restarts"),
    pytest.param(pod({"phase": "podPhase", "containerStatuses": [{"ready": True, "restartCount": 3, "state": RUNNING}, {"state": {"waiting": {"reason": "ContainerWaitingReason"}}, "restartCount": 3}]}), ["1/2", "ContainerWaitingReason", "6"], id="waiting-reason"),
    pytest.param(pod({"phase": "podPhase", "containerStatuses": [{"state": {"waiting": {"reason": "ContainerWaitingReason"}}, "restartCount": 3}, {"state": {"terminated": {"reason": "ContainerTerminatedReason"}}, "restartCount": 3}]}), ["0/2", "ContainerWaitingReason", "6"], id="first-container-wins"),
    pytest.param(pod({"phase": "podPhase", "containerStatuses": [{"ready": True, "restartCount": 3, "state": RUNNING}, {"ready": True, "restartCount": 3}]}), ["1/2", "podPhase", "6"], id="ready-without-running"),
    pytest.param(pod({"reason": "podReason", "phase": "podPhase", "containerStatuses": [{"ready": True, "restartCount": 3, "state": RUNNING}, {"ready": True, "restartCount": 3}]}), ["1/2", "podReason", "6"], id="pod-reason"),
    pytest.param(pod({"phase": "Running", "containerStatuses": [{"restartCount": 3, "state": {"terminated": {"signal": 9}}}]}, containers=1), ["0/1", "Signal:9", "3"], id="signal"),
    pytest.param(pod({"phase": "Running", "containerStatuses": [{"restartCount": 0, "state": {"terminated": {"exitCode": 2}}}]}, containers=1), ["0/1", "ExitCode:2", "0"], id="exit-code"),
    pytest.param(pod({"phase": "Running", "containerStatuses": [{"ready": False, "restartCount": 4, "state": RUNNING, "lastState": finished(seconds=20)}]}, containers=1), ["0/1", "Running", "4 (20s ago)"], id="restarted-20s-ago"),
    pytest.param(pod({"phase": "Running", "containerStatuses": [{"ready": True, "restartCount": 3, "state": RUNNING, "lastState": finished(days=5)}]}, containers=1), ["1/1", "Running", "3 (5d ago)"], id="restarted-5d-ago"),
    pytest.param(pod({"phase": "Running", "containerStatuses": [{"ready": True, "restartCount": 0, "state": RUNNING}, {"ready": True, "restartCount": 3, "state": RUNNING, "lastState": finished(days=10)}]}), ["2/2", "Running", "3 (10d ago)"], id="restarted-10d-ago"),
    pytest.param(pod({"phase": "Running", "containerStatuses": [{"ready": True, "restartCount": 6, "state": RUNNING, "lastState": finished(days=5)}, {"ready": True, "restartCount": 3, "state": RUNNING, "lastState": finished(days=20)}]}), ["2/2", "Running", "9 (5d ago)"], id="latest-restart-wins"),
    pytest.param(pod({"phase": "podPhase", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}), ["0/2", "SchedulingGated", "0"], id="scheduling-gated"),
    pytest.param(pod({"phase": "Succeeded", "containerStatuses": [{"ready": False, "restartCount": 0, "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}]}, containers=1), ["0/1", "Completed", "0"], id="completed"),
    pytest.param(pod({"phase": "Failed", "containerStatuses": [{"ready": False, "restartCount": 0, "state": {"terminated": {"reason": "Error", "exitCode": 1}}}]}, containers=1), ["0/1", "Error", "0"], id="error"),
    pytest.param(pod({"phase": "Succeeded", "containerStatuses": [{"state": {"terminated": {"reason": "Completed", "exitCode": 0}}}]}, containers=1, deleting=True), ["0/1", "Completed", "0"], id="succeeded-while-deleting"),
    pytest.param(pod({"phase": "Running", "containerStatuses": [{"ready": False, "state": RUNNING}]}, containers=1, deleting=True), ["0/1", "Terminating", "0"], id="terminating"),
    pytest.param(pod({"phase": "Pending"}, containers=1, deleting=True), ["0/1", "Terminating", "0"], id="pending-terminating"),
    pytest.param(pod({"phase": "Running", "reason": "NodeLost"}, containers=1, deleting=True), ["0/1", "Unknown", "0"], id="node-lost"),
    pytest.param(pod({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "containerStatuses": [{"state": {"terminated": {"reason": "Completed"}}}, {"ready": True, "state": RUNNING}]}), ["1/2", "Running", "0"], id="completed-sidecar-but-running"),
    pytest.param(pod({"phase": "Running", "containerStatuses": [{"state": {"terminated": {"reason": "Completed"}}}, {"ready": True, "state": RUNNING}]}), ["1/2", "NotReady", "0"], id="completed-and-running-not-ready"),
    pytest.param(pod({"phase": "Pending", "initContainerStatuses": [{"name": "init", "state": {"waiting": {"reason": "PodInitializing"}}}]}, spec={"initContainers": [{"name": "init"}]}), ["0/2", "Init:0/1", "0"], id="init-counting"),
    pytest.param(pod({"phase": "Pending", "initContainerStatuses": [{"name": "init", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}, spec={"initContainers": [{"name": "init"}]}), ["0/2", "Init:ImagePullBackOff", "0"], id="init-waiting"),
    pytest.param(pod({"phase": "Pending", "initContainerStatuses": [{"name": "init", "state": {"terminated": {"exitCode": 3}}}]}, spec={"initContainers": [{"name": "init"}]}), ["0/2", "Init:ExitCode:3", "0"], id="init-exit-code"),
    pytest.param(pod({"phase": "Pending", "initContainerStatuses": [{"name": "init", "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]}, spec={"initContainers": [{"name": "init"}]}), ["0/2", "Init:OOMKilled", "0"], id="init-terminated-reason"),
    # upstream TestPrintPodWithRestartableInitContainer
    pytest.param(pod({"phase": "Pending", "initContainerStatuses": [{"name": "restartable-init-1", "restartCount": 3, "state": RUNNING, "started": False, "lastState": finished(seconds=10)}, {"name": "restartable-init-2", "state": {"waiting": {}}, "started": False}], "containerStatuses": [{"state": {"waiting": {}}}], "conditions": [{"type": "Initialized", "status": "False"}]}, containers=1, spec=RESTARTABLE_INITS), ["0/3", "Init:0/2", "3 (10s ago)"], id="sidecar-not-started"),
    pytest.param(pod({"phase": "Pending", "initContainerStatuses": [{"name": "restartable-init-1", "restartCount": 3, "state": RUNNING, "started": True, "lastState": finished(seconds=10)}, {"name": "restartable-init-2", "state": RUNNING, "started": False}], "containerStatuses": [{"state": {"waiting": {}}}], "conditions": [{"type": "Initialized", "status": "False"}]}, containers=1, spec=RESTARTABLE_INITS), ["0/3", "Init:1/2", "3 (10s ago)"], id="second-sidecar-not-started"),
    pytest.param(pod({"phase": "Running", "initContainerStatuses": [{"name": "restartable-init-1", "restartCount": 3, "state": RUNNING, "started": True, "lastState": finished(seconds=10)}, {"name": "restartable-init-2", "state": RUNNING, "started": True}], "containerStatuses": [{"ready": True, "restartCount": 4, "state": RUNNING, "lastState": finished(seconds=20)}], "conditions": [{"type": "Initialized", "status": "True"}]}, containers=1, spec=RESTARTABLE_INITS), ["1/3", "Running", "7 (10s ago)"], id="sidecars-started"),
    pytest.param(pod({"phase": "Succeeded", "initContainerStatuses": [{"name": "restartable-init-1", "restartCount": 3, "state": {"terminated": {"reason": "Error", "exitCode": 137}}, "started": False, "lastState": finished(seconds=10)}, {"name": "restartable-init-2", "state": {"terminated": {"reason": "Error", "exitCode": 137}}, "started": False}], "containerStatuses": [{"restartCount": 4, "state": {"terminated": {"reason": "Completed", "exitCode": 0}}, "lastState": finished(seconds=20)}], "conditions": [{"type": "Initialized", "status": "True"}]}, containers=1, spec=RESTARTABLE_INITS), ["0/3", "Completed", "7 (10s ago)"], id="sidecars-errored-pod-completed"),
    pytest.param(pod({"phase": "Running", "initContainerStatuses": [{"name": "initinvalid"}, {"name": "init1"}, {"name": "sidecar1"}], "containerStatuses": [{"name": "containerinvalid"}, {"name": "container1"}]}, containers=1, spec={"initContainers": [{"name": "init1"}, {"name": "sidecar1", "restartPolicy": "Always"}]}), ["0/2", "Init:0/2", "0"], id="statuses-for-unknown-containers"),
]


@pytest.mark.parametrize("pod_obj, expected", POD_CASES)
def test_pod_ready_status_restarts(pod_obj, expected):
    row = cells(POD, pod_obj)
    assert row[1:4] == expected and row[4] == "<unknown>"


def test_pod_wide_cells():
    gated = pod(
        {
            "phase": "podPhase",
            "podIPs": [{"ip": "1.1.1.1"}],
            "nominatedNodeName": "node1",
            "conditions": [{"type": "condition1", "status": "False"}, {"type": "condition2", "status": "True"}],
            "containerStatuses": [{"ready": True, "restartCount": 3, "state": RUNNING}, {"restartCount": 3}],
        },
        spec={"nodeName": "test1", "readinessGates": [{"conditionType": "condition1"}, {"conditionType": "condition2"}, {"conditionType": "condition3"}]},
    )
    assert cells(POD, gated) == ["test1", "1/2", "podPhase", "6", "<unknown>", "1.1.1.1", "test1", "node1", "1/3"]
    bare = pod({"phase": "podPhase", "containerStatuses": [{"ready": True, "restartCount": 3, "state": RUNNING}, {"state": {"waiting": {"reason": "ContainerWaitingReason"}}, "restartCount": 3}]}, name="test2")
    assert cells(POD, bare) == ["test2", "1/2", "ContainerWaitingReason", "6", "<unknown>", "<none>", "<none>", "<none>", "<none>"]


def test_pod_ip_falls_back_to_pod_ip():
    assert cells(POD, pod({"phase": "Running", "podIP": "10.1.0.7"}))[5] == "10.1.0.7"


@pytest.mark.parametrize(
    "phase, conditions",
    [
        pytest.param("Succeeded", [{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}], id="succeeded"),
        pytest.param("Failed", [{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}], id="failed"),
        pytest.param("Running", None, id="running"),
    ],
)
def test_pod_row_conditions(phase, conditions):
    row = to_table(POD, [pod({"phase": phase})], now=NOW)["rows"][0]
    assert row.get("conditions") == conditions


# ---- Node, Namespace, Endpoints, EndpointSlice, Event, Lease, IPAddress, ServiceCIDR ------------


def node(*, conditions=None, unschedulable=False, labels=None) -> dict:
    return {
        "metadata": {"name": "node-1", "creationTimestamp": ago(days=5), "labels": labels or {}},
        "spec": {"unschedulable": unschedulable} if unschedulable else {},
        "status": {
            "conditions": conditions or [],
            "addresses": [{"type": "Hostname", "address": "node-1"}, {"type": "InternalIP", "address": "192.168.1.10"}],
            "nodeInfo": {"kubeletVersion": "v1.32.4", "osImage": "Debian GNU/Linux 12 (bookworm)", "kernelVersion": "6.1.0-18-amd64", "containerRuntimeVersion": "containerd://1.7.13"},
        },
    }


READY = [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}]


@pytest.mark.parametrize(
    "node_obj, status, roles",
    [
        pytest.param(node(conditions=READY), "Ready", "<none>", id="ready"),
        pytest.param(node(conditions=[{"type": "Ready", "status": "False"}]), "NotReady", "<none>", id="not-ready"),
        pytest.param(node(conditions=[{"type": "Ready", "status": "Unknown"}]), "NotReady", "<none>", id="ready-unknown"),
        pytest.param(node(), "Unknown", "<none>", id="no-ready-condition"),
        pytest.param(node(conditions=READY, unschedulable=True), "Ready,SchedulingDisabled", "<none>", id="cordoned"),
        pytest.param(node(unschedulable=True), "Unknown,SchedulingDisabled", "<none>", id="unknown-cordoned"),
        pytest.param(node(conditions=READY, labels={"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/": "x"}), "Ready", "control-plane,worker", id="roles-sorted"),
        pytest.param(node(conditions=READY, labels={"kubernetes.io/role": "master", "node-role.kubernetes.io/master": ""}), "Ready", "master", id="legacy-role-label"),
    ],
)
def test_node_status_and_roles(node_obj, status, roles):
    assert cells(NODE, node_obj)[1:3] == [status, roles]


def test_node_wide_cells():
    assert cells(NODE, node(conditions=READY)) == ["node-1", "Ready", "<none>", "5d", "v1.32.4", "192.168.1.10", "<none>", "Debian GNU/Linux 12 (bookworm)", "6.1.0-18-amd64", "containerd://1.7.13"]
    empty = {"metadata": {"name": "n"}, "status": {}}
    assert cells(NODE, empty) == ["n", "Unknown", "<none>", "<unknown>", "", "<none>", "<none>", "<unknown>", "<unknown>", "<unknown>"]


@pytest.mark.parametrize(
    "namespace, expected",
    [
        pytest.param({"metadata": {"name": "default", "creationTimestamp": ago(days=17)}, "status": {"phase": "Active"}}, ["default", "Active", "17d"], id="active"),
        pytest.param({"metadata": {"name": "gone", "creationTimestamp": ago(hours=3)}, "status": {"phase": "Terminating"}}, ["gone", "Terminating", "3h"], id="terminating"),
    ],
)
def test_namespace_cells(namespace, expected):
    assert cells(NAMESPACE, namespace) == expected


def endpoints(subsets: list) -> dict:
    return {"metadata": {"name": "web", "creationTimestamp": ago(seconds=30)}, "subsets": subsets}


@pytest.mark.parametrize(
    "ep, expected",
    [
        pytest.param(endpoints([]), "<none>", id="no-subsets"),
        pytest.param(endpoints([{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}], "ports": [{"port": 80}]}]), "10.0.0.1:80,10.0.0.2:80", id="two"),
        pytest.param(endpoints([{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}], "ports": [{"port": 80}, {"port": 443}]}]), "10.0.0.1:80,10.0.0.2:80,10.0.0.1:443 + 1 more...", id="per-port"),
        pytest.param(endpoints([{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}, {"ip": "10.0.0.3"}, {"ip": "10.0.0.4"}], "ports": [{"port": 80}]}]), "10.0.0.1:80,10.0.0.2:80,10.0.0.3:80 + 1 more...", id="more"),
        pytest.param(endpoints([{"addresses": [{"ip": "10.0.0.1"}]}]), "10.0.0.1", id="headless-no-ports"),
        pytest.param(endpoints([{"addresses": [{"ip": "fd00::1"}], "ports": [{"port": 8080}]}]), "[fd00::1]:8080", id="ipv6"),
        pytest.param(endpoints([{"notReadyAddresses": [{"ip": "10.0.0.9"}], "ports": [{"port": 80}]}]), "", id="only-not-ready"),
    ],
)
def test_endpoints_cells(ep, expected):
    assert cells(ENDPOINTS, ep) == ["web", expected, "30s"]


def endpoint_slice(ports: list, endpoints_: list) -> dict:
    return {"metadata": {"name": "web-abc12", "creationTimestamp": ago(minutes=12)}, "addressType": "IPv4", "ports": ports, "endpoints": endpoints_}


@pytest.mark.parametrize(
    "slice_obj, expected",
    [
        pytest.param(endpoint_slice([{"name": "http", "port": 80, "protocol": "TCP"}], [{"addresses": ["10.1.0.4"]}, {"addresses": ["10.1.0.5"]}]), ["80", "10.1.0.4,10.1.0.5"], id="simple"),
        pytest.param(endpoint_slice([], []), ["<unset>", "<unset>"], id="empty"),
        pytest.param(endpoint_slice([{"name": "http"}, {"port": None}, {"port": 1}, {"port": 2}, {"port": 3}], [{"addresses": ["a", "b"]}, {"addresses": ["c", "d", "e"]}]), ["http,*,1 + 2 more...", "a,b,c + 2 more..."], id="more"),
    ],
)
def test_endpoint_slice_cells(slice_obj, expected):
    assert cells(ENDPOINT_SLICE, slice_obj) == ["web-abc12", "IPv4", *expected, "12m"]


def test_event_wide_cells():
    event = {
        "metadata": {"name": "web.17c4", "namespace": "default"},
        "involvedObject": {"kind": "Service", "name": "web", "namespace": "default", "fieldPath": "spec.ports{http}"},
        "reason": "Synced",
        "message": "  endpoints updated\n",
        "type": "Normal",
        "source": {"component": "endpointslice-controller", "host": "cp-1"},
        "firstTimestamp": ago(hours=2),
        "lastTimestamp": ago(minutes=5),
        "count": 3,
    }
    assert cells(EVENT, event) == ["5m", "Normal", "Synced", "service/web", "spec.ports{http}", "endpointslice-controller, cp-1", "endpoints updated", "120m", 3, "web.17c4"]


@pytest.mark.parametrize(
    "event, expected",
    [
        pytest.param({"eventTime": ago(seconds=40), "involvedObject": {"kind": "Node"}, "reportingComponent": "kubelet"}, ["40s", "", "", "node", "", "kubelet", "", "40s", 1, ""], id="events-api-singleton"),
        pytest.param({"eventTime": ago(minutes=30), "series": {"count": 7, "lastObservedTime": ago(seconds=9)}, "involvedObject": {"kind": "Pod", "name": "p"}, "reportingComponent": "kubelet", "reportingInstance": "node-1"}, ["9s", "", "", "pod/p", "", "kubelet, node-1", "", "30m", 7, ""], id="series"),
        pytest.param({"involvedObject": {}}, ["<unknown>", "", "", "", "", "", "", "<unknown>", 1, ""], id="no-times"),
    ],
)
def test_event_time_and_count_fallbacks(event, expected):
    assert cells(EVENT, event) == expected


@pytest.mark.parametrize(
    "lease, expected",
    [
        pytest.param({"metadata": {"name": "kube-scheduler", "creationTimestamp": ago(days=3)}, "spec": {"holderIdentity": "cp-1_1234"}}, ["kube-scheduler", "cp-1_1234", "3d"], id="held"),
        pytest.param({"metadata": {"name": "free", "creationTimestamp": ago(days=3)}, "spec": {}}, ["free", "", "3d"], id="no-holder"),
    ],
)
def test_lease_cells(lease, expected):
    assert cells(LEASE, lease) == expected


@pytest.mark.parametrize(
    "parent_ref, expected",
    [
        pytest.param({"group": "", "resource": "services", "namespace": "default", "name": "kubernetes"}, "services/default/kubernetes", id="service"),
        pytest.param({"group": "gateway.networking.k8s.io", "resource": "Gateways", "name": "gw"}, "gateways.gateway.networking.k8s.io/gw", id="cluster-scoped-group"),
        pytest.param(None, "<none>", id="none"),
    ],
)
def test_ip_address_cells_keep_upstreams_unshown_age(parent_ref, expected):
    ip = {"metadata": {"name": "10.96.0.1", "creationTimestamp": ago(days=17)}, "spec": {"parentRef": parent_ref} if parent_ref else {}}
    assert cells(IP_ADDRESS, ip) == ["10.96.0.1", expected, "17d"]


def test_service_cidr_cells():
    cidr = {"metadata": {"name": "kubernetes", "creationTimestamp": ago(days=17)}, "spec": {"cidrs": ["10.96.0.0/28", "fd00:10:96::/112"]}}
    assert cells(SERVICE_CIDR, cidr) == ["kubernetes", "10.96.0.0/28,fd00:10:96::/112", "17d"]


def test_kinds_without_a_printer_get_name_and_created_at():
    widget = {"metadata": {"name": "w", "creationTimestamp": "2024-04-30T10:00:00+02:00"}}
    assert cells(KINDS["Widget"], widget) == ["w", "2024-04-30T08:00:00Z"]
    assert cells(KINDS["Widget"], {"metadata": {"name": "w"}}) == ["w", "0001-01-01T00:00:00Z"]


def test_unparseable_or_future_timestamps():
    assert cells(NAMESPACE, {"metadata": {"name": "a", "creationTimestamp": "yesterday"}, "status": {}})[2] == "<unknown>"
    assert cells(NAMESPACE, {"metadata": {"name": "a", "creationTimestamp": (NOW + timedelta(seconds=1)).isoformat()}, "status": {}})[2] == "0s"
    assert cells(NAMESPACE, {"metadata": {"name": "a", "creationTimestamp": (NOW + timedelta(minutes=1)).isoformat()}, "status": {}})[2] == "<invalid>"
