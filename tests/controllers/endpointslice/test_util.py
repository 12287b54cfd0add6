"""The helpers from Pods and Services to slice content, against upstream's tables
(``staging/src/k8s.io/endpointslice/utils_test.go`` and ``util/controller_utils_test.go``;
``TestFindPort`` from ``pkg/api/v1/pod/util_test.go``)."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone

import pytest

from kubesvc.controllers.endpointslice.reconciler import CONTROLLER_NAME, new_slice
from kubesvc.controllers.endpointslice.util import (
    ANNOTATION_TOPOLOGY_AWARE_HINTS,
    ANNOTATION_TOPOLOGY_MODE,
    ANNOTATION_TRIGGER_TIME,
    LABEL_HEADLESS,
    LABEL_MANAGED_BY,
    LABEL_SERVICE_NAME,
    address_family,
    address_types_for_service,
    endpoint_identity,
    endpoint_ports,
    endpoints_equal_beyond_hash,
    find_port,
    generate_name_prefix,
    pod_endpoints_changed,
    pod_service_keys,
    pod_to_endpoint,
    port_map_key,
    services_to_update_on_pod_change,
    set_trigger_time,
    should_pod_be_in_endpoints,
    should_set_hostname,
    slice_labels,
    topology_hints_annotation_enabled,
)
from kubesvc.util.golang import rfc3339_nano
from tests.controllers.endpointslice.builders import new_node, new_pod, new_service

MANAGED = {LABEL_SERVICE_NAME: "foo", LABEL_MANAGED_BY: CONTROLLER_NAME}


def _service(labels=None, annotations=None, **spec) -> dict:
    """utils_test.go's base Service: foo/test, ClusterIP 1.1.1.1, port 80, selector foo=bar."""
    svc = {"metadata": {"name": "foo", "namespace": "test", "uid": "uid-foo"},
           "spec": {"clusterIP": "1.1.1.1", "ports": [{"port": 80}], "selector": {"foo": "bar"}}}
    svc["spec"].update(spec)
    if labels is not None:
        svc["metadata"]["labels"] = labels
    if annotations is not None:
        svc["metadata"]["annotations"] = annotations
    return svc


# ---- TestNewEndpointSlice ----------------------------------------------------------------------

NEW_SLICE_CASES = {
    "Service without labels": (_service(), MANAGED),
    "Service with labels": (_service(labels={"foo": "bar"}), {**MANAGED, "foo": "bar"}),
    "Headless Service with labels": (_service(labels={"foo": "bar"}, clusterIP="None"), {**MANAGED, LABEL_HEADLESS: "", "foo": "bar"}),
    "Service with multiple labels": (_service(labels={"foo": "bar", "foo2": "bar2"}), {**MANAGED, "foo": "bar", "foo2": "bar2"}),
    "Evil service hijacking endpoint slices labels": (_service(labels={LABEL_SERVICE_NAME: "bad", LABEL_MANAGED_BY: "actor", "foo": "bar"}),
                                                      {**MANAGED, "foo": "bar"}),
    "Service with annotations": (_service(annotations={"foo": "bar"}), MANAGED),
}


@pytest.mark.parametrize("service, labels", list(NEW_SLICE_CASES.values()), ids=list(NEW_SLICE_CASES))
def test_new_endpoint_slice(service, labels):
    """TestNewEndpointSlice: generateName ``<service>-``, the Service as controller owner, its
    non-reserved labels (never its annotations), the given ports and address type, no endpoints."""
    ports = [{"name": "foo", "protocol": "TCP"}]
    assert new_slice(service, ports, "IPv4", CONTROLLER_NAME) == {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "labels": labels,
            "generateName": "foo-",
            "namespace": "test",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "foo", "uid": "uid-foo",
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "ports": ports,
        "addressType": "IPv4",
        "endpoints": [],
    }


@pytest.mark.parametrize("name, want", [
    ("foo", "foo-"),
    ("a" * 252, "a" * 252 + "-"),
    ("a" * 254, "a" * 254),
], ids=["short name", "prefix at the DNS subdomain limit", "prefix too long"])
def test_get_endpoint_slice_prefix(name, want):
    """getEndpointSlicePrefix: ``<name>-`` unless that fails NameIsDNSSubdomain(prefix=true)."""
    assert generate_name_prefix(name) == want


# ---- TestPodToEndpoint -------------------------------------------------------------------------

SVC = new_service()
SVC_PUBLISH = new_service("publishnotready", publishNotReadyAddresses=True)
NODE1 = new_node("node-1", zone="us-central1-a", **{"topology.kubernetes.io/region": "us-central1"})


def _pod(ready=True, terminating=False, hostname=None, ips=None) -> dict:
    pod = new_pod(1, ready=ready, terminating=terminating, ips=ips)
    if hostname:
        pod["spec"].update(hostname=hostname, subdomain=SVC["metadata"]["name"])
    return pod


def _ep(ready, serving, terminating, address="1.2.3.5", zone=None, hostname=None) -> dict:
    endpoint = {"addresses": [address], "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
                "nodeName": "node-1", "targetRef": {"kind": "Pod", "namespace": "test", "name": "pod1", "uid": "uid-pod1"}}
    if zone:
        endpoint["zone"] = zone
    if hostname:
        endpoint["hostname"] = hostname
    return endpoint


POD_TO_ENDPOINT_CASES = {
    "Ready pod": (_pod(), None, SVC, _ep(True, True, False)),
    "Ready pod + publishNotReadyAddresses": (_pod(), None, SVC_PUBLISH, _ep(True, True, False)),
    "Unready pod": (_pod(ready=False), None, SVC, _ep(False, False, False)),
    "Unready pod + publishNotReadyAddresses": (_pod(ready=False), None, SVC_PUBLISH, _ep(True, False, False)),
    "Ready pod + node labels": (_pod(), NODE1, SVC, _ep(True, True, False, zone="us-central1-a")),
    "Multi IP Ready pod + node labels": (_pod(ips=["1.2.3.4", "1234::5678:0000:0000:9abc:def0"]), NODE1, SVC,
                                         _ep(True, True, False, address="1.2.3.4", zone="us-central1-a")),
    "Ready pod + hostname": (_pod(hostname="example-hostname"), NODE1, SVC,
                             _ep(True, True, False, zone="us-central1-a", hostname="example-hostname")),
    "Ready terminating pod": (_pod(terminating=True), None, SVC, _ep(False, True, True)),
    "Not ready terminating pod": (_pod(ready=False, terminating=True), None, SVC, _ep(False, False, True)),
    "Ready terminating pod + publishNotReadyAddresses": (_pod(terminating=True), None, SVC_PUBLISH, _ep(True, True, True)),
}


@pytest.mark.parametrize("pod, node, service, want", list(POD_TO_ENDPOINT_CASES.values()), ids=list(POD_TO_ENDPOINT_CASES))
def test_pod_to_endpoint(pod, node, service, want):
    """TestPodToEndpoint: serving = Pod Ready; terminating = deletionTimestamp set; ready =
    publishNotReadyAddresses or (serving and not terminating)."""
    assert pod_to_endpoint(pod, node, service, "IPv4") == want


def test_pod_to_endpoint_ipv6_is_restringified():
    """getEndpointAddresses parses and re-stringifies: only the slice's family, canonical form."""
    pod = _pod(ips=["1.2.3.4", "1234::5678:0000:0000:9abc:def0"])
    assert pod_to_endpoint(pod, None, SVC, "IPv6")["addresses"] == ["1234::5678:0:0:9abc:def0"]


@pytest.mark.parametrize("pod_ips, want", [
    (["010.001.002.003"], {"IPv4": ["10.1.2.3"], "IPv6": []}),
    (["::ffff:1.2.3.4"], {"IPv4": ["1.2.3.4"], "IPv6": []}),
    (["1.2.3.4", "2001:DB8::1"], {"IPv4": ["1.2.3.4"], "IPv6": ["2001:db8::1"]}),
], ids=["IPv4 with leading zeros", "IPv4-mapped IPv6", "upper-case IPv6"])
def test_pod_to_endpoint_irregular_ips(pod_ips, want):
    """getEndpointAddresses: ``utilnet.ParseIPSloppy`` then ``IsIPv6`` / ``String()``: an IP the
    apiserver accepted in an irregular form lands in its family's slice in canonical form
    (IPv4-mapped IPv6 is IPv4, as Go's To4 sees it)."""
    pod = _pod(ips=pod_ips)
    got = {family: pod_to_endpoint(pod, None, SVC, family)["addresses"] for family in ("IPv4", "IPv6")}
    assert got == want


# ---- TestShouldSetHostname ---------------------------------------------------------------------

def _simple_pod(namespace, hostname, subdomain) -> dict:
    return {"metadata": {"name": "p", "namespace": namespace}, "spec": {"hostname": hostname, "subdomain": subdomain}}


@pytest.mark.parametrize("pod, service, want", [
    (_simple_pod("ns", "foo", "svc-name"), new_service("svc-name", "ns"), True),
    (_simple_pod("ns", "", "svc-name"), new_service("svc-name", "ns"), False),
    (_simple_pod("ns", "hostname", "subdomain"), new_service("name", "ns"), False),
    (_simple_pod("ns1", "hostname", "svc-name"), new_service("svc-name", "ns2"), False),
], ids=["all matching", "all matching, hostname not set", "all set, different name/subdomain", "all set, different namespace"])
def test_should_set_hostname(pod, service, want):
    """TestShouldSetHostname."""
    assert should_set_hostname(pod, service) is want


# ---- TestGetEndpointPorts / TestFindPort -------------------------------------------------------

GET_ENDPOINT_PORTS_CASES = {
    "service with AppProtocol on one port": (
        [{"name": "http", "port": 80, "targetPort": 80, "protocol": "TCP", "appProtocol": "example.com/custom-protocol"}],
        [{"ports": []}],
        [{"name": "http", "port": 80, "protocol": "TCP", "appProtocol": "example.com/custom-protocol"}]),
    "service with named port and AppProtocol on one port": (
        [{"name": "http", "port": 80, "targetPort": 80, "protocol": "TCP"},
         {"name": "https", "protocol": "TCP", "targetPort": "https", "appProtocol": "https"}],
        [{"ports": [{"name": "https", "containerPort": 443, "protocol": "TCP"}]}],
        [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "https", "port": 443, "protocol": "TCP", "appProtocol": "https"}]),
    "unresolvable named port is left out": (
        [{"name": "http", "port": 80, "targetPort": 80, "protocol": "TCP"}, {"name": "https", "protocol": "TCP", "targetPort": "https"}],
        [{"ports": []}],
        [{"name": "http", "port": 80, "protocol": "TCP"}]),
    "headless service without ports": ([], [{"ports": []}], []),
}


@pytest.mark.parametrize("ports, containers, want", list(GET_ENDPOINT_PORTS_CASES.values()), ids=list(GET_ENDPOINT_PORTS_CASES))
def test_get_endpoint_ports(ports, containers, want):
    """TestGetEndpointPorts."""
    service = {"metadata": {"name": "foo", "namespace": "test"}, "spec": {"ports": ports, "clusterIP": "None" if not ports else "10.0.0.1"}}
    pod = {"metadata": {"name": "p", "namespace": "test"}, "spec": {"containers": containers}}
    assert endpoint_ports(service, pod) == want


def _cports(*ports) -> list[dict]:
    return [{"name": n, "containerPort": p, "protocol": proto} for n, p, proto in ports]


FIND_PORT_CASES = {
    "valid int, no ports": ([{}], None, 93, 93),
    "valid int, with ports": ([{"ports": _cports(("", 11, "TCP"), ("p", 22, "TCP"))}], None, 93, 93),
    "valid str, no ports": ([{}], None, "p", None),
    "valid str, one ctr with ports": ([{"ports": _cports(("", 11, "UDP"), ("p", 22, "TCP"), ("q", 33, "TCP"))}], None, "q", 33),
    "valid str, two ctr with ports": ([{}, {"ports": _cports(("", 11, "UDP"), ("p", 22, "TCP"), ("q", 33, "TCP"))}], None, "q", 33),
    "valid str, two ctr with same port": ([{}, {"ports": _cports(("", 11, "UDP"), ("p", 22, "TCP"), ("q", 22, "TCP"))}], None, "q", 22),
    "valid str, invalid protocol": ([{}, {"ports": _cports(("a", 11, "snmp"))}], None, "a", None),
    "valid hostPort": ([{}, {"ports": [{"name": "a", "containerPort": 11, "hostPort": 81, "protocol": "TCP"}]}], None, "a", 11),
    "first matching container wins": ([{"ports": _cports(("a", 11, "TCP"))}, {"ports": _cports(("a", 22, "TCP"))}], None, "a", 11),
    "sidecar container port": ([{}], [{"restartPolicy": "Always", "ports": _cports(("a", 44, "TCP"))}], "a", 44),
    "containers before sidecars": ([{"ports": _cports(("a", 11, "TCP"))}], [{"restartPolicy": "Always", "ports": _cports(("a", 44, "TCP"))}], "a", 11),
    "plain init container port is ignored": ([{}], [{"ports": _cports(("a", 44, "TCP"))}], "a", None),
    # (ours) intstr by its type: a JSON string is a name even when it is all digits
    "digit string is a name, not a number": ([{"ports": _cports(("", 8080, "TCP"))}], None, "8080", None),
    "non-ASCII digit string is a name": ([{"ports": _cports(("", 8080, "TCP"))}], None, "\u0668\u0660", None),
}


@pytest.mark.parametrize("containers, init_containers, target, want", list(FIND_PORT_CASES.values()), ids=list(FIND_PORT_CASES))
def test_find_port(containers, init_containers, target, want):
    """TestFindPort: a number as is; a name by name and protocol in the containers, then in
    sidecar (restartPolicy Always) init containers."""
    spec: dict = {"containers": containers}
    if init_containers is not None:
        spec["initContainers"] = init_containers
    assert find_port({"metadata": {"name": "p"}, "spec": spec}, {"protocol": "TCP", "targetPort": target}) == want


# ---- TestSetEndpointSliceLabels ----------------------------------------------------------------

WITH_HEADLESS = {**MANAGED, LABEL_HEADLESS: ""}
SET_LABELS_CASES = {
    "Service without labels and empty endpoint slice": (None, _service(), MANAGED, False),
    "Headless service with labels and empty endpoint slice": (None, _service(labels={"foo": "bar"}, clusterIP="None"), {**WITH_HEADLESS, "foo": "bar"}, True),
    "Headless service without labels and empty endpoint slice": (None, _service(clusterIP="None"), WITH_HEADLESS, False),
    "Non Headless service with Headless label and empty endpoint slice": (None, _service(labels={LABEL_HEADLESS: ""}), MANAGED, False),
    "Headless Service change to ClusterIP Service with headless label": (WITH_HEADLESS, _service(labels={LABEL_HEADLESS: ""}), MANAGED, False),
    "Headless Service change to ClusterIP Service": (WITH_HEADLESS, _service(), MANAGED, False),
    "Headless service and endpoint slice with same labels": ({**MANAGED, "foo": "bar"}, _service(labels={"foo": "bar"}, clusterIP="None"),
                                                             {**WITH_HEADLESS, "foo": "bar"}, False),
    "Service with labels and empty endpoint slice": (None, _service(labels={"foo": "bar"}), {**MANAGED, "foo": "bar"}, True),
    "Slice with labels and service without labels": ({**MANAGED, "foo": "bar"}, _service(), MANAGED, True),
    "Slice with headless label and service with ClusterIP": (WITH_HEADLESS, _service(), MANAGED, False),
    "Slice with reserved labels and service with labels": (MANAGED, _service(labels={"foo": "bar"}), {**MANAGED, "foo": "bar"}, True),
    "Evil service trying to hijack slice labels only well-known slice labels": (
        MANAGED, _service(labels={LABEL_SERVICE_NAME: "bad", LABEL_MANAGED_BY: "actor", LABEL_HEADLESS: "invalid"}), MANAGED, False),
    "Evil service trying to hijack slice labels with updates": (
        MANAGED, _service(labels={LABEL_SERVICE_NAME: "bad", LABEL_MANAGED_BY: "actor", "foo": "bar"}), {**MANAGED, "foo": "bar"}, True),
}


@pytest.mark.parametrize("current, service, want_labels, want_updated", list(SET_LABELS_CASES.values()), ids=list(SET_LABELS_CASES))
def test_set_endpoint_slice_labels(current, service, want_labels, want_updated):
    """TestSetEndpointSliceLabels: only the non-reserved labels decide "changed"."""
    assert slice_labels(copy.deepcopy(current), service, CONTROLLER_NAME) == (want_labels, want_updated)


# ---- TestSupportedServiceAddressType / Test_hintsEnabled ---------------------------------------

@pytest.mark.parametrize("spec, want", [
    ({"clusterIP": "10.0.0.10"}, {"IPv4"}),
    ({"clusterIP": "2000::1"}, {"IPv6"}),
    ({"ipFamilies": ["IPv4"]}, {"IPv4"}),
    ({"ipFamilies": ["IPv6"]}, {"IPv6"}),
    ({"ipFamilies": ["IPv4", "IPv6"]}, {"IPv4", "IPv6"}),
    ({"ipFamilies": ["IPv6", "IPv4"]}, {"IPv4", "IPv6"}),
    ({"clusterIP": "None"}, {"IPv4", "IPv6"}),
    ({"selector": {"foo": "bar"}, "clusterIP": "None"}, {"IPv4", "IPv6"}),
    ({"clusterIP": "None", "ipFamilies": ["IPv4", "IPv6"]}, {"IPv4", "IPv6"}),
    ({"selector": {"foo": "bar"}, "clusterIP": "None", "ipFamilies": ["IPv4", "IPv6"]}, {"IPv4", "IPv6"}),
], ids=["v4 service with no ip families (cluster upgrade)", "v6 service with no ip families (cluster upgrade)", "v4 service",
        "v6 services", "v4,v6 service", "v6,v4 service", "headless with no selector and no families (old api-server)",
        "headless with selector and no families (old api-server)", "headless with no selector with families",
        "headless with selector with families"])
def test_supported_service_address_type(spec, want):
    """TestSupportedServiceAddressType."""
    types = address_types_for_service({"metadata": {"name": "s"}, "spec": spec})
    assert len(types) == len(want) and set(types) == want


@pytest.mark.parametrize("address, family", [
    ("10.0.0.1", "IPv4"), ("010.0.0.1", "IPv4"), ("fd00::1", "IPv6"), ("::ffff:10.0.0.1", "IPv4"),
    # (ours) utilnet.IsIPv6String decides: what is no IP counts as IPv4, colon or not
    ("fe80::1%eth0", "IPv4"), ("not-an-ip", "IPv4"), ("", "IPv4"),
])
def test_address_family(address, family):
    assert address_family(address) == family


HINTS_ENABLED_CASES = {
    "empty annotations": (None, False),
    "different annotations": ({"topology-hints": "enabled"}, False),
    "hints annotation == enabled": ({ANNOTATION_TOPOLOGY_AWARE_HINTS: "enabled"}, False),
    "hints annotation == aUto": ({ANNOTATION_TOPOLOGY_AWARE_HINTS: "aUto"}, False),
    "hints annotation == auto": ({ANNOTATION_TOPOLOGY_AWARE_HINTS: "auto"}, True),
    "hints annotation == Auto": ({ANNOTATION_TOPOLOGY_AWARE_HINTS: "Auto"}, True),
    "hints annotation == disabled": ({ANNOTATION_TOPOLOGY_AWARE_HINTS: "disabled"}, False),
    "mode annotation == enabled": ({ANNOTATION_TOPOLOGY_MODE: "enabled"}, False),
    "mode annotation == aUto": ({ANNOTATION_TOPOLOGY_MODE: "aUto"}, False),
    "mode annotation == auto": ({ANNOTATION_TOPOLOGY_MODE: "auto"}, True),
    "mode annotation == Auto": ({ANNOTATION_TOPOLOGY_MODE: "Auto"}, True),
    "mode annotation == disabled": ({ANNOTATION_TOPOLOGY_MODE: "disabled"}, False),
    "mode annotation == disabled, hints annotation == auto": ({ANNOTATION_TOPOLOGY_MODE: "disabled", ANNOTATION_TOPOLOGY_AWARE_HINTS: "auto"}, True),
    "mode annotation == auto, hints annotation == disabled": ({ANNOTATION_TOPOLOGY_MODE: "auto", ANNOTATION_TOPOLOGY_AWARE_HINTS: "disabled"}, False),
}


@pytest.mark.parametrize("annotations, want", list(HINTS_ENABLED_CASES.values()), ids=list(HINTS_ENABLED_CASES))
def test_hints_enabled(annotations, want):
    """Test_hintsEnabled: the deprecated annotation wins when both are set."""
    assert topology_hints_annotation_enabled(_service(annotations=annotations)) is want


# ---- TestShouldPodBeInEndpoints ----------------------------------------------------------------

def _status_pod(phase, pod_ip="1.2.3.4", pod_ips=None, terminating=False) -> dict:
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {}, "status": {"phase": phase, "podIP": pod_ip}}
    if pod_ips is not None:
        pod["status"]["podIPs"] = pod_ips
    if terminating:
        pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return pod


SHOULD_BE_IN_ENDPOINTS_CASES = {
    "Failed pod with Never RestartPolicy": (_status_pod("Failed"), False, False),
    "Succeeded pod with Never RestartPolicy": (_status_pod("Succeeded"), False, False),
    "Succeeded pod with OnFailure RestartPolicy": (_status_pod("Succeeded"), False, False),
    "Empty Pod IPs, Running pod with OnFailure RestartPolicy": (_status_pod("Running", pod_ip="", pod_ips=[]), False, False),
    "Terminating Pod with includeTerminating=false": (_status_pod("Running", terminating=True), False, False),
    "Failed pod with Always RestartPolicy": (_status_pod("Failed"), False, False),
    "Pending pod with Never RestartPolicy": (_status_pod("Pending"), False, True),
    "Unknown pod with OnFailure RestartPolicy": (_status_pod("Unknown"), False, True),
    "Running pod with Never RestartPolicy": (_status_pod("Running"), False, True),
    "Multiple Pod IPs, Running pod with OnFailure RestartPolicy": (
        _status_pod("Running", pod_ip="", pod_ips=[{"ip": "1.2.3.4"}, {"ip": "1234::5678:0000:0000:9abc:def0"}]), False, True),
    "Terminating Pod with includeTerminating=true": (_status_pod("Running", terminating=True), True, True),
}


@pytest.mark.parametrize("pod, include_terminating, want", list(SHOULD_BE_IN_ENDPOINTS_CASES.values()), ids=list(SHOULD_BE_IN_ENDPOINTS_CASES))
def test_should_pod_be_in_endpoints(pod, include_terminating, want):
    """TestShouldPodBeInEndpoints (readiness is no filter; terminal phases and IP-less Pods are)."""
    assert should_pod_be_in_endpoints(pod, include_terminating) is want


# ---- which Services a Pod change concerns ------------------------------------------------------

def _services(*names) -> list[dict]:
    return [{"metadata": {"name": n, "namespace": "test"}, "spec": {"selector": {n: "1"}}} for n in names]


def _member_pod(services, ready=False, rv="1") -> dict:
    return {"metadata": {"name": "pod", "namespace": "test", "resourceVersion": rv, "labels": {s: "1" for s in services}},
            "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


DETERMINE_CASES = {
    "no services changed": ("abc", "abc", set(), set("abc")),
    "all old services removed, new services added": ("abc", "def", set("abcdef"), set("abcdef")),
    "all old services removed, no new services added": ("abc", "", set("abc"), set("abc")),
    "no old services, but new services added": ("", "abc", set("abc"), set("abc")),
    "one service removed, one service added, two unchanged": ("abc", "bcd", set("ad"), set("abcd")),
    "no services": ("", "", set(), set()),
}


@pytest.mark.parametrize("old, new, xor, union", list(DETERMINE_CASES.values()), ids=list(DETERMINE_CASES))
@pytest.mark.parametrize("pod_changed", [False, True], ids=["podChanged=false", "podChanged=true"])
def test_determine_needed_service_updates(old, new, xor, union, pod_changed):
    """TestDetermineNeededServiceUpdates, through GetServicesToUpdateOnPodChange: a label change
    alone concerns the Services joined or left; with an endpoint change too, all of them."""
    services = _services(*"abcdef")
    before = _member_pod(old, rv="1")
    after = _member_pod(new, ready=pod_changed, rv="2")
    want = union if pod_changed else xor
    assert services_to_update_on_pod_change(services, before, after) == {f"test/{s}" for s in want}


def test_resync_concerns_no_service():
    """GetPodUpdateProjectionKey: an update with an unchanged resourceVersion is a resync."""
    services = _services("a")
    assert services_to_update_on_pod_change(services, _member_pod("a", rv="1"), _member_pod("", ready=True, rv="1")) == set()


@pytest.mark.parametrize("index, want", [(0, {"test/service-0"}), (1, {"test/service-1"}), (2, {"test/service-2"}), (3, set()), (4, set())],
                         ids=lambda v: f"get servicesMemberships for pod-{v}" if isinstance(v, int) else None)
def test_get_pod_services_to_update(index, want):
    """TestGetPodServicesToUpdate."""
    services = [{"metadata": {"name": f"service-{i}", "namespace": "test"}, "spec": {"selector": {"app": f"test-{i}"}}} for i in range(3)]
    services.append({"metadata": {"name": "no-selector", "namespace": "test"}, "spec": {}})  # nil selector: matches nothing
    pod = {"metadata": {"name": f"test-pod-{index}", "namespace": "test", "labels": {"app": f"test-{index}", "label": f"label-{index}"}}}
    assert pod_service_keys(services, pod) == want


def _modify(fn):
    def build():
        old = {"metadata": {"namespace": "test", "name": "pod", "labels": {"foo": "bar"}}, "spec": {},
               "status": {"conditions": [{"type": "Ready", "status": "False"}]}}
        new = copy.deepcopy(old)
        fn(old, new)
        return old, new
    return build


def _ips(pod, *ips):
    pod["status"]["podIP"] = ips[0]
    pod["status"]["podIPs"] = [{"ip": ip} for ip in ips]


POD_CHANGED_CASES = {
    "no changes": (_modify(lambda old, new: None), False, False),
    "change ResourceVersion": (_modify(lambda old, new: new["metadata"].update(resourceVersion="changed")), False, False),
    "add primary IPv4": (_modify(lambda old, new: _ips(new, "1.2.3.4")), True, False),
    "modify primary IPv4": (_modify(lambda old, new: (_ips(old, "1.2.3.4"), _ips(new, "2.3.4.5"))), True, False),
    "add primary IPv6": (_modify(lambda old, new: _ips(new, "fd00:10:96::1")), True, False),
    "modify primary IPv6": (_modify(lambda old, new: (_ips(old, "fd00:10:96::1"), _ips(new, "fd00:10:96::2"))), True, False),
    "add secondary IP": (_modify(lambda old, new: (_ips(old, "1.2.3.4"), _ips(new, "1.2.3.4", "fd00:10:96::1"))), True, False),
    "modify secondary IP": (_modify(lambda old, new: (_ips(old, "1.2.3.4", "fd00:10:96::1"), _ips(new, "1.2.3.4", "fd00:10:96::2"))), True, False),
    "remove secondary IP": (_modify(lambda old, new: (_ips(old, "1.2.3.4", "fd00:10:96::1"), _ips(new, "1.2.3.4"))), True, False),
    "change readiness": (_modify(lambda old, new: new["status"]["conditions"][0].update(status="True")), True, False),
    "mark for deletion": (_modify(lambda old, new: new["metadata"].update(deletionTimestamp="2024-01-01T00:00:00Z")), True, False),
    "add label": (_modify(lambda old, new: new["metadata"]["labels"].update(label="new")), False, True),
    "modify label": (_modify(lambda old, new: (old["metadata"]["labels"].update(label="old"), new["metadata"]["labels"].update(label="new"))), False, True),
    "remove label": (_modify(lambda old, new: old["metadata"]["labels"].update(label="old")), False, True),
    # podEndpointsChanged's hostNameAndDomainAreEqual (not in upstream's table)
    "change hostname": (_modify(lambda old, new: new["spec"].update(hostname="h")), False, True),
    "change subdomain": (_modify(lambda old, new: new["spec"].update(subdomain="s")), False, True),
}


@pytest.mark.parametrize("build, pod_changed, labels_changed", list(POD_CHANGED_CASES.values()), ids=list(POD_CHANGED_CASES))
def test_pod_changed(build, pod_changed, labels_changed):
    """Test_podChanged: (endpoint may have changed, Service membership may have changed)."""
    old, new = build()
    assert pod_endpoints_changed(old, new) == (pod_changed, labels_changed)


def test_pod_changed_node_name():
    """Test_podChanged "change NodeName": upstream says (false, false)."""
    old, new = _modify(lambda old, new: new["spec"].update(nodeName="changed"))()
    assert pod_endpoints_changed(old, new) == (False, False)


# ---- TestEndpointsEqualBeyondHash / endpoint identity / port map keys --------------------------

def _eq_ep(ready=True, serving=None, terminating=None, name="pod0", rv=None, zone=None, node=None) -> dict:
    conditions = {"ready": ready}
    if serving is not None:
        conditions["serving"] = serving
    if terminating is not None:
        conditions["terminating"] = terminating
    ref = {"kind": "Pod", "namespace": "default", "name": name}
    if rv is not None:
        ref["resourceVersion"] = rv
    endpoint = {"conditions": conditions, "addresses": ["10.0.0.1"], "targetRef": ref}
    if zone:
        endpoint["zone"] = zone
    if node:
        endpoint["nodeName"] = node
    return endpoint


EQUAL_BEYOND_HASH_CASES = {
    "No change": (_eq_ep(node="node-1"), _eq_ep(node="node-1"), True),
    "NodeName changed": (_eq_ep(node="node-1"), _eq_ep(node="node-2"), False),
    "Zone changed": (_eq_ep(zone="zone-1"), _eq_ep(zone="zone-2"), False),
    "Ready condition changed": (_eq_ep(zone="zone-1", node="node-1"), _eq_ep(ready=False, zone="zone-1", node="node-1"), False),
    "Serving condition changed from nil to true": (_eq_ep(zone="zone-1", node="node-1"),
                                                   _eq_ep(serving=True, terminating=False, zone="zone-1", node="node-1"), False),
    "Serving condition changed from false to true": (_eq_ep(serving=False, terminating=False, zone="zone-1", node="node-1"),
                                                     _eq_ep(serving=True, terminating=False, zone="zone-1", node="node-1"), False),
    "Pod name changed": (_eq_ep(zone="zone-1", node="node-1"), _eq_ep(name="pod1", zone="zone-1", node="node-1"), False),
    "Pod resourceVersion changed": (_eq_ep(rv="1", zone="zone-1", node="node-1"), _eq_ep(rv="2", zone="zone-1", node="node-1"), True),
    "Pod resourceVersion removed": (_eq_ep(rv="1", zone="zone-1", node="node-1"), _eq_ep(rv="", zone="zone-1", node="node-1"), True),
}


@pytest.mark.parametrize("ep1, ep2, want", list(EQUAL_BEYOND_HASH_CASES.values()), ids=list(EQUAL_BEYOND_HASH_CASES))
def test_endpoints_equal_beyond_hash(ep1, ep2, want):
    """TestEndpointsEqualBeyondHash."""
    assert endpoints_equal_beyond_hash(ep1, ep2) is want


IDENTITY_BASE = {"addresses": ["10.0.0.2", "10.0.0.1"], "hostname": "h",
                 "targetRef": {"kind": "Pod", "namespace": "ns", "name": "p", "uid": "1"},
                 "conditions": {"ready": True}, "nodeName": "n1", "zone": "z1"}


def test_endpoint_identity():
    """hashEndpoint: sorted addresses, hostname and the target's namespace/name; nothing else."""
    base = IDENTITY_BASE
    same = {**base, "addresses": ["10.0.0.1", "10.0.0.2"], "conditions": {"ready": False}, "nodeName": "n2", "zone": "z2",
            "targetRef": {**base["targetRef"], "uid": "2"}}
    assert endpoint_identity(base) == endpoint_identity(same)


@pytest.mark.parametrize("change", [
    {"addresses": ["10.0.0.1"]}, {"hostname": "other"}, {"targetRef": {**IDENTITY_BASE["targetRef"], "name": "q"}},
    {"targetRef": {**IDENTITY_BASE["targetRef"], "namespace": "other"}},
], ids=["addresses", "hostname", "target name", "target namespace"])
def test_endpoint_identity_changes_with(change):
    assert endpoint_identity({**IDENTITY_BASE, **change}) != endpoint_identity(IDENTITY_BASE)


def test_new_port_map_key():
    """TestNewPortMapKey_NilVsEmptySlice, and the key does not depend on the ports' order."""
    assert port_map_key(None) == port_map_key([])
    a, b = {"name": "a", "port": 80, "protocol": "TCP"}, {"name": "b", "port": 81, "protocol": "UDP"}
    assert port_map_key([a, b]) == port_map_key([b, a])
    assert port_map_key([a]) != port_map_key([{**a, "port": 8080}])
    assert port_map_key([a]) != port_map_key([{**a, "appProtocol": "http"}])


# ---- the trigger-time annotation ---------------------------------------------------------------

@pytest.mark.parametrize("moment, want", [
    (datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc), "2024-01-02T03:04:05Z"),
    (datetime(2024, 1, 2, 3, 4, 5, 120000, tzinfo=timezone.utc), "2024-01-02T03:04:05.12Z"),
    (datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=timezone.utc), "2024-01-02T03:04:05.123456Z"),
    (datetime(2024, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2))), "2024-01-02T03:04:05Z"),
], ids=["whole seconds", "trailing zeros dropped", "microseconds", "non-UTC offset converted to UTC"])
def test_format_rfc3339_nano(moment, want):
    """addTriggerTimeAnnotation: ``triggerTime.UTC().Format(time.RFC3339Nano)``."""
    assert rfc3339_nano(moment) == want


def test_trigger_time_annotation_set_and_cleared():
    """addTriggerTimeAnnotation: set to the trigger time, removed when there is none."""
    slice_ = {"metadata": {"name": "s", "annotations": {"keep": "me"}}}
    set_trigger_time(slice_, datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc))
    assert slice_["metadata"]["annotations"] == {"keep": "me", ANNOTATION_TRIGGER_TIME: "2024-01-02T03:04:05Z"}
    set_trigger_time(slice_, None)
    assert slice_["metadata"]["annotations"] == {"keep": "me"}
