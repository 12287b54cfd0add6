"""A container's environment as the kubelet builds it: upstream's ``envvars_test.go``
(``TestFromServices``), ``kubelet_pods_test.go`` (``TestMakeEnvironmentVariables``),
``expand_test.go`` and the downward API helpers' cases, with every expected value written out
by hand from upstream. Where upstream compares sorted lists, these expect kubesvc's documented
order: the container's own variables as declared, then the Service variables (Services by name).
"""

import pytest

from kubesvc.agent.envvars import (
    EnvError, ObjectRef, container_argv, container_environment, container_resource_value, env_objects, expand, pod_field_value,
    service_env_vars, services_for_pod,
)

# ---- FromServices ------------------------------------------------------------------------------


def service(name, cluster_ip, *ports, namespace="default"):
    """A Service; each port is (port, protocol) or (port, protocol, name)."""
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterIP": cluster_ip, "selector": {"bar": "baz"},
                 "ports": [{"port": p[0], "protocol": p[1], **({"name": p[2]} if len(p) > 2 else {})} for p in ports]},
    }


def test_from_services():
    """envvars_test.go TestFromServices, the version with the IPv6 and SCTP Services."""
    services = [
        service("foo-bar", "1.2.3.4", (8080, "TCP")),
        service("abc-123", "5.6.7.8", (8081, "UDP", "u-d-p"), (8081, "TCP", "t-c-p")),
        service("q-u-u-x", "9.8.7.6", (8082, "TCP"), (8083, "TCP", "8083")),
        service("svrc-clusterip-none", "None", (8082, "TCP")),
        service("svrc-clusterip-empty", "", (8082, "TCP")),
        service("super-ipv6", "2001:DB8::", (8084, "UDP", "u-d-p"), (8084, "TCP", "t-c-p")),
        service("sctp-1", "1.2.3.4", (777, "SCTP")),
    ]
    assert service_env_vars(services) == [
        ("FOO_BAR_SERVICE_HOST", "1.2.3.4"),
        ("FOO_BAR_SERVICE_PORT", "8080"),
        ("FOO_BAR_PORT", "tcp://1.2.3.4:8080"),
        ("FOO_BAR_PORT_8080_TCP", "tcp://1.2.3.4:8080"),
        ("FOO_BAR_PORT_8080_TCP_PROTO", "tcp"),
        ("FOO_BAR_PORT_8080_TCP_PORT", "8080"),
        ("FOO_BAR_PORT_8080_TCP_ADDR", "1.2.3.4"),
        ("ABC_123_SERVICE_HOST", "5.6.7.8"),
        ("ABC_123_SERVICE_PORT", "8081"),
        ("ABC_123_SERVICE_PORT_U_D_P", "8081"),
        ("ABC_123_SERVICE_PORT_T_C_P", "8081"),
        ("ABC_123_PORT", "udp://5.6.7.8:8081"),
        ("ABC_123_PORT_8081_UDP", "udp://5.6.7.8:8081"),
        ("ABC_123_PORT_8081_UDP_PROTO", "udp"),
        ("ABC_123_PORT_8081_UDP_PORT", "8081"),
        ("ABC_123_PORT_8081_UDP_ADDR", "5.6.7.8"),
        ("ABC_123_PORT_8081_TCP", "tcp://5.6.7.8:8081"),
        ("ABC_123_PORT_8081_TCP_PROTO", "tcp"),
        ("ABC_123_PORT_8081_TCP_PORT", "8081"),
        ("ABC_123_PORT_8081_TCP_ADDR", "5.6.7.8"),
        ("Q_U_U_X_SERVICE_HOST", "9.8.7.6"),
        ("Q_U_U_X_SERVICE_PORT", "8082"),
        ("Q_U_U_X_SERVICE_PORT_8083", "8083"),
        ("Q_U_U_X_PORT", "tcp://9.8.7.6:8082"),
        ("Q_U_U_X_PORT_8082_TCP", "tcp://9.8.7.6:8082"),
        ("Q_U_U_X_PORT_8082_TCP_PROTO", "tcp"),
        ("Q_U_U_X_PORT_8082_TCP_PORT", "8082"),
        ("Q_U_U_X_PORT_8082_TCP_ADDR", "9.8.7.6"),
        ("Q_U_U_X_PORT_8083_TCP", "tcp://9.8.7.6:8083"),
        ("Q_U_U_X_PORT_8083_TCP_PROTO", "tcp"),
        ("Q_U_U_X_PORT_8083_TCP_PORT", "8083"),
        ("Q_U_U_X_PORT_8083_TCP_ADDR", "9.8.7.6"),
        ("SUPER_IPV6_SERVICE_HOST", "2001:DB8::"),
        ("SUPER_IPV6_SERVICE_PORT", "8084"),
        ("SUPER_IPV6_SERVICE_PORT_U_D_P", "8084"),
        ("SUPER_IPV6_SERVICE_PORT_T_C_P", "8084"),
        ("SUPER_IPV6_PORT", "udp://[2001:DB8::]:8084"),
        ("SUPER_IPV6_PORT_8084_UDP", "udp://[2001:DB8::]:8084"),
        ("SUPER_IPV6_PORT_8084_UDP_PROTO", "udp"),
        ("SUPER_IPV6_PORT_8084_UDP_PORT", "8084"),
        ("SUPER_IPV6_PORT_8084_UDP_ADDR", "2001:DB8::"),
        ("SUPER_IPV6_PORT_8084_TCP", "tcp://[2001:DB8::]:8084"),
        ("SUPER_IPV6_PORT_8084_TCP_PROTO", "tcp"),
        ("SUPER_IPV6_PORT_8084_TCP_PORT", "8084"),
        ("SUPER_IPV6_PORT_8084_TCP_ADDR", "2001:DB8::"),
        ("SCTP_1_SERVICE_HOST", "1.2.3.4"),
        ("SCTP_1_SERVICE_PORT", "777"),
        ("SCTP_1_PORT", "sctp://1.2.3.4:777"),
        ("SCTP_1_PORT_777_SCTP", "sctp://1.2.3.4:777"),
        ("SCTP_1_PORT_777_SCTP_PROTO", "sctp"),
        ("SCTP_1_PORT_777_SCTP_PORT", "777"),
        ("SCTP_1_PORT_777_SCTP_ADDR", "1.2.3.4"),
    ]


def test_from_services_defaults_protocol_to_tcp():
    svc = {"metadata": {"name": "web"}, "spec": {"clusterIP": "10.0.0.1", "ports": [{"port": 80}]}}
    assert service_env_vars([svc]) == [
        ("WEB_SERVICE_HOST", "10.0.0.1"), ("WEB_SERVICE_PORT", "80"), ("WEB_PORT", "tcp://10.0.0.1:80"),
        ("WEB_PORT_80_TCP", "tcp://10.0.0.1:80"), ("WEB_PORT_80_TCP_PROTO", "tcp"), ("WEB_PORT_80_TCP_PORT", "80"),
        ("WEB_PORT_80_TCP_ADDR", "10.0.0.1"),
    ]


# ---- getServiceEnvVarMap's choice --------------------------------------------------------------

# kubelet_pods_test.go TestMakeEnvironmentVariables's Services (buildService).
UPSTREAM_SERVICES = [
    service("kubernetes", "1.2.3.1", (8081, "TCP"), namespace="default"),
    service("test", "1.2.3.3", (8083, "TCP"), namespace="test1"),
    service("kubernetes", "1.2.3.4", (8084, "TCP"), namespace="test2"),
    service("test", "1.2.3.5", (8085, "TCP"), namespace="test2"),
    service("test", "None", (8085, "TCP"), namespace="test2"),
    service("test", "", (8085, "TCP"), namespace="test2"),
    service("not-special", "1.2.3.8", (8088, "TCP"), namespace="default"),
    service("not-special", "None", (8088, "TCP"), namespace="default"),
    service("not-special", "", (8088, "TCP"), namespace="default"),
]


def pod(namespace, enable_service_links=False, **meta):
    spec = {"serviceAccountName": "special", "nodeName": "node-name"}
    if enable_service_links is not None:
        spec["enableServiceLinks"] = enable_service_links
    return {"metadata": {"name": "dapi-test-pod-name", "namespace": namespace, "annotations": {}, **meta}, "spec": spec}


@pytest.mark.parametrize("namespace,links,expected", [
    ("test1", False, [("default", "kubernetes", "1.2.3.1")]),
    ("test1", True, [("default", "kubernetes", "1.2.3.1"), ("test1", "test", "1.2.3.3")]),
    ("test2", False, [("default", "kubernetes", "1.2.3.1")]),
    ("test2", True, [("test2", "kubernetes", "1.2.3.4"), ("test2", "test", "1.2.3.5")]),
    ("default", False, [("default", "kubernetes", "1.2.3.1")]),
    ("default", True, [("default", "kubernetes", "1.2.3.1"), ("default", "not-special", "1.2.3.8")]),
    ("elsewhere", True, [("default", "kubernetes", "1.2.3.1")]),
], ids=["links off", "links on", "master service in pod ns, links off", "master service in pod ns replaces default",
        "pod in master service ns", "pod in master service ns, links on", "namespace without services"])
def test_services_for_pod(namespace, links, expected):
    chosen = services_for_pod(UPSTREAM_SERVICES, pod(namespace, links))
    assert [(s["metadata"]["namespace"], s["metadata"]["name"], s["spec"]["clusterIP"]) for s in chosen] == expected


def test_services_for_pod_replacement_does_not_depend_on_listing_order():
    reversed_services = list(reversed(UPSTREAM_SERVICES))
    chosen = services_for_pod(reversed_services, pod("test2", True))
    assert [(s["metadata"]["namespace"], s["metadata"]["name"]) for s in chosen] == [("test2", "kubernetes"), ("test2", "test")]


def test_services_for_pod_headless_master_service_in_pod_namespace_does_not_replace():
    services = [service("kubernetes", "None", (443, "TCP"), namespace="team"), UPSTREAM_SERVICES[0]]
    chosen = services_for_pod(services, pod("team", True))
    assert [(s["metadata"]["namespace"], s["metadata"]["name"]) for s in chosen] == [("default", "kubernetes")]


def test_services_for_pod_needs_enable_service_links():
    with pytest.raises(EnvError) as err:
        services_for_pod(UPSTREAM_SERVICES, pod("test", None))
    assert str(err.value) == "nil pod.spec.enableServiceLinks encountered, cannot construct envvars"


# ---- makeEnvironmentVariables ------------------------------------------------------------------

KUBERNETES_8081 = [
    ("KUBERNETES_SERVICE_HOST", "1.2.3.1"),
    ("KUBERNETES_SERVICE_PORT", "8081"),
    ("KUBERNETES_PORT", "tcp://1.2.3.1:8081"),
    ("KUBERNETES_PORT_8081_TCP", "tcp://1.2.3.1:8081"),
    ("KUBERNETES_PORT_8081_TCP_PROTO", "tcp"),
    ("KUBERNETES_PORT_8081_TCP_PORT", "8081"),
    ("KUBERNETES_PORT_8081_TCP_ADDR", "1.2.3.1"),
]
KUBERNETES_8084 = [
    ("KUBERNETES_SERVICE_HOST", "1.2.3.4"),
    ("KUBERNETES_SERVICE_PORT", "8084"),
    ("KUBERNETES_PORT", "tcp://1.2.3.4:8084"),
    ("KUBERNETES_PORT_8084_TCP", "tcp://1.2.3.4:8084"),
    ("KUBERNETES_PORT_8084_TCP_PROTO", "tcp"),
    ("KUBERNETES_PORT_8084_TCP_PORT", "8084"),
    ("KUBERNETES_PORT_8084_TCP_ADDR", "1.2.3.4"),
]
TEST_8083 = [
    ("TEST_SERVICE_HOST", "1.2.3.3"),
    ("TEST_SERVICE_PORT", "8083"),
    ("TEST_PORT", "tcp://1.2.3.3:8083"),
    ("TEST_PORT_8083_TCP", "tcp://1.2.3.3:8083"),
    ("TEST_PORT_8083_TCP_PROTO", "tcp"),
    ("TEST_PORT_8083_TCP_PORT", "8083"),
    ("TEST_PORT_8083_TCP_ADDR", "1.2.3.3"),
]
TEST_8085 = [
    ("TEST_SERVICE_HOST", "1.2.3.5"),
    ("TEST_SERVICE_PORT", "8085"),
    ("TEST_PORT", "tcp://1.2.3.5:8085"),
    ("TEST_PORT_8085_TCP", "tcp://1.2.3.5:8085"),
    ("TEST_PORT_8085_TCP_PROTO", "tcp"),
    ("TEST_PORT_8085_TCP_PORT", "8085"),
    ("TEST_PORT_8085_TCP_ADDR", "1.2.3.5"),
]
NOT_SPECIAL_8088 = [
    ("NOT_SPECIAL_SERVICE_HOST", "1.2.3.8"),
    ("NOT_SPECIAL_SERVICE_PORT", "8088"),
    ("NOT_SPECIAL_PORT", "tcp://1.2.3.8:8088"),
    ("NOT_SPECIAL_PORT_8088_TCP", "tcp://1.2.3.8:8088"),
    ("NOT_SPECIAL_PORT_8088_TCP_PROTO", "tcp"),
    ("NOT_SPECIAL_PORT_8088_TCP_PORT", "8088"),
    ("NOT_SPECIAL_PORT_8088_TCP_ADDR", "1.2.3.8"),
]
TEST_HOST_IP, TEST_HOST_IPV6 = "127.0.0.1", "::1"  # upstream's testKubeletHostIP(v6)


def field(path):
    return {"valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def var(name, value=None, **source):
    return {"name": name, **({"value": value} if value is not None else {}), **source}


DOWNWARD_IPS = [var("POD_IP", **field("status.podIP")), var("POD_IPS", **field("status.podIPs")),
                var("HOST_IP", **field("status.hostIP")), var("HOST_IPS", **field("status.hostIPs"))]
EXPANSION_ENV = [
    var("TEST_LITERAL", "test-test-test"),
    var("POD_NAME", **field("metadata.name")),
    var("OUT_OF_ORDER_TEST", "$(OUT_OF_ORDER_TARGET)"),
    var("OUT_OF_ORDER_TARGET", "FOO"),
    var("EMPTY_VAR"),
    var("EMPTY_TEST", "foo-$(EMPTY_VAR)"),
    var("POD_NAME_TEST2", "test2-$(POD_NAME)"),
    var("POD_NAME_TEST3", "$(POD_NAME_TEST2)-3"),
    var("LITERAL_TEST", "literal-$(TEST_LITERAL)"),
]
EXPANDED = [
    ("TEST_LITERAL", "test-test-test"),
    ("POD_NAME", "dapi-test-pod-name"),
    ("OUT_OF_ORDER_TEST", "$(OUT_OF_ORDER_TARGET)"),
    ("OUT_OF_ORDER_TARGET", "FOO"),
    ("EMPTY_VAR", ""),
    ("EMPTY_TEST", "foo-"),
    ("POD_NAME_TEST2", "test2-dapi-test-pod-name"),
    ("POD_NAME_TEST3", "test2-dapi-test-pod-name-3"),
    ("LITERAL_TEST", "literal-test-test-test"),
]
TEST_SERVICE_LITERALS = [
    var("TEST_SERVICE_HOST", "1.2.3.3"), var("TEST_SERVICE_PORT", "8083"), var("TEST_PORT", "tcp://1.2.3.3:8083"),
    var("TEST_PORT_8083_TCP", "tcp://1.2.3.3:8083"), var("TEST_PORT_8083_TCP_PROTO", "tcp"),
    var("TEST_PORT_8083_TCP_PORT", "8083"), var("TEST_PORT_8083_TCP_ADDR", "1.2.3.3"),
]
OPTIONAL_TRUE = {"optional": True}


def make_env_case(ns, links, container, expected, *, services=UPSTREAM_SERVICES, pod_ips=()):
    return ns, links, container, services, list(pod_ips), expected


MAKE_ENV_CASES = {
    "api server = Y, kubelet = Y": make_env_case(
        "test1", False, {"env": [var("FOO", "BAR"), *TEST_SERVICE_LITERALS]},
        [("FOO", "BAR"), *TEST_8083, *KUBERNETES_8081]),
    "api server = Y, kubelet = N": make_env_case(
        "test1", False, {"env": [var("FOO", "BAR"), *TEST_SERVICE_LITERALS]}, [("FOO", "BAR"), *TEST_8083], services=[]),
    "api server = N; kubelet = Y": make_env_case("test1", False, {"env": [var("FOO", "BAZ")]}, [("FOO", "BAZ"), *KUBERNETES_8081]),
    "api server = N; kubelet = Y; service env vars": make_env_case(
        "test1", True, {"env": [var("FOO", "BAZ")]}, [("FOO", "BAZ"), *KUBERNETES_8081, *TEST_8083]),
    "master service in pod ns": make_env_case("test2", False, {"env": [var("FOO", "ZAP")]}, [("FOO", "ZAP"), *KUBERNETES_8081]),
    "master service in pod ns, service env vars": make_env_case(
        "test2", True, {"env": [var("FOO", "ZAP")]}, [("FOO", "ZAP"), *KUBERNETES_8084, *TEST_8085]),
    "pod in master service ns": make_env_case("default", False, {}, KUBERNETES_8081),
    "pod in master service ns, service env vars": make_env_case("default", True, {}, [*KUBERNETES_8081, *NOT_SPECIAL_8088]),
    "downward api pod": make_env_case(
        "downward-api", False,
        {"env": [var("POD_NAME", **field("metadata.name")), var("POD_NAMESPACE", **field("metadata.namespace")),
                 var("POD_NODE_NAME", **field("spec.nodeName")), var("POD_SERVICE_ACCOUNT_NAME", **field("spec.serviceAccountName")),
                 *DOWNWARD_IPS]},
        [("POD_NAME", "dapi-test-pod-name"), ("POD_NAMESPACE", "downward-api"), ("POD_NODE_NAME", "node-name"),
         ("POD_SERVICE_ACCOUNT_NAME", "special"), ("POD_IP", "1.2.3.4"), ("POD_IPS", "1.2.3.4,fd00::6"),
         ("HOST_IP", TEST_HOST_IP), ("HOST_IPS", TEST_HOST_IP + "," + TEST_HOST_IPV6)],
        services=[], pod_ips=["1.2.3.4", "fd00::6"]),
    "downward api pod ips reverse order": make_env_case(
        "downward-api", False, {"env": DOWNWARD_IPS},
        [("POD_IP", "1.2.3.4"), ("POD_IPS", "1.2.3.4,fd00::6"), ("HOST_IP", TEST_HOST_IP),
         ("HOST_IPS", TEST_HOST_IP + "," + TEST_HOST_IPV6)],
        services=[], pod_ips=["fd00::6", "1.2.3.4"]),
    "downward api pod ips multiple ips": make_env_case(
        "downward-api", False, {"env": DOWNWARD_IPS},
        [("POD_IP", "1.2.3.4"), ("POD_IPS", "1.2.3.4,fd00::6"), ("HOST_IP", TEST_HOST_IP),
         ("HOST_IPS", TEST_HOST_IP + "," + TEST_HOST_IPV6)],
        services=[], pod_ips=["1.2.3.4", "192.168.1.1.", "fd00::6"]),
    "env expansion": make_env_case(
        "test1", False, {"env": [*EXPANSION_ENV, var("TEST_UNDEFINED", "$(UNDEFINED_VAR)")]},
        [*EXPANDED, ("TEST_UNDEFINED", "$(UNDEFINED_VAR)"), *KUBERNETES_8081]),
    "env expansion, service env vars": make_env_case(
        "test1", True,
        {"env": [*EXPANSION_ENV, var("SERVICE_VAR_TEST", "$(TEST_SERVICE_HOST):$(TEST_SERVICE_PORT)"),
                 var("TEST_UNDEFINED", "$(UNDEFINED_VAR)")]},
        [*EXPANDED, ("SERVICE_VAR_TEST", "1.2.3.3:8083"), ("TEST_UNDEFINED", "$(UNDEFINED_VAR)"), *KUBERNETES_8081, *TEST_8083]),
    "configmapkeyref_missing_optional": make_env_case(
        "test", False,
        {"env": [var("POD_NAME", valueFrom={"configMapKeyRef": {"name": "missing-config-map", "key": "key", **OPTIONAL_TRUE}})]},
        KUBERNETES_8081),
    "secretkeyref_missing_optional": make_env_case(
        "test", False,
        {"env": [var("POD_NAME", valueFrom={"secretKeyRef": {"name": "missing-secret", "key": "key", **OPTIONAL_TRUE}})]},
        KUBERNETES_8081),
    "configmap_missing_optional": make_env_case(
        "test", False, {"envFrom": [{"configMapRef": {"name": "missing-config-map", **OPTIONAL_TRUE}}]}, KUBERNETES_8081),
    "secret_missing_optional": make_env_case(
        "test", False, {"envFrom": [{"secretRef": {"name": "missing-secret", **OPTIONAL_TRUE}}]}, KUBERNETES_8081),
    "explicit variable overrides service variable": make_env_case(
        "test1", True, {"env": [var("TEST_SERVICE_HOST", "override"), var("REF", "$(TEST_SERVICE_HOST)")]},
        [("TEST_SERVICE_HOST", "override"), ("REF", "override"), *KUBERNETES_8081, *TEST_8083[1:]]),
    "redeclared variable keeps its place, takes its last value": make_env_case(
        "test1", False, {"env": [var("A", "1"), var("B", "$(A)"), var("A", "2"), var("C", "$(A)")]},
        [("A", "2"), ("B", "1"), ("C", "2"), *KUBERNETES_8081]),
    "self reference sees the service variable": make_env_case(
        "test1", True, {"env": [var("TEST_SERVICE_PORT", "$(TEST_SERVICE_PORT)0")]},
        [("TEST_SERVICE_PORT", "80830"), *KUBERNETES_8081, ("TEST_SERVICE_HOST", "1.2.3.3"), *TEST_8083[2:]]),
}


@pytest.mark.parametrize("ns,links,container,services,pod_ips,expected", list(MAKE_ENV_CASES.values()), ids=list(MAKE_ENV_CASES))
def test_make_environment_variables(ns, links, container, services, pod_ips, expected):
    the_pod = pod(ns, links)
    env = container_environment(the_pod, container, services_for_pod(services, the_pod), host_ip=TEST_HOST_IP,
                                host_ips=[TEST_HOST_IP, TEST_HOST_IPV6], pod_ips=pod_ips)
    assert env == expected


@pytest.mark.parametrize("ns,links,container,message", [
    ("test1", False, {"envFrom": [{"configMapRef": {"name": "test-config-map"}}]}, 'configmap "test-config-map" not found'),
    ("test1", False, {"envFrom": [{"secretRef": {"name": "test-secret"}}]}, 'secret "test-secret" not found'),
    ("test1", False, {"env": [var("X", valueFrom={"configMapKeyRef": {"name": "cm", "key": "k"}})]}, 'configmap "cm" not found'),
    ("test1", False, {"env": [var("X", valueFrom={"secretKeyRef": {"name": "s", "key": "k", "optional": False}})]},
     'secret "s" not found'),
    ("test", None, {"envFrom": [{"prefix": "p_", "secretRef": {"name": "test-secret"}}]},
     "nil pod.spec.enableServiceLinks encountered, cannot construct envvars"),
], ids=["configmap_missing", "secret_missing", "configmapkeyref_missing", "secretkeyref_missing, optional false",
        "nil_enableServiceLinks"])
def test_make_environment_variables_errors(ns, links, container, message):
    with pytest.raises(EnvError) as err:
        container_environment(pod(ns, links), container, [], host_ip=TEST_HOST_IP, host_ips=[TEST_HOST_IP], pod_ips=[])
    assert str(err.value) == message


# ---- fieldRef (podFieldSelectorRuntimeValue, fieldpath) ----------------------------------------

LABELLED = pod("ns", False, uid="4f1e", labels={"app": "web", "tier": "front"},
               annotations={"b": 'say "hi"\n', "a": "x", "ctl": "\a\x01\u200b", "example.com/Key": "v"})


FIELD_CASES = [
    ("metadata.name", "dapi-test-pod-name"),
    ("metadata.namespace", "ns"),
    ("metadata.uid", "4f1e"),
    ("metadata.labels['app']", "web"),
    ("metadata.labels['missing']", ""),
    ("metadata.annotations['example.com/Key']", "v"),
    ("metadata.labels", 'app="web"\ntier="front"'),
    ("metadata.annotations", 'a="x"\nb="say \\"hi\\"\\n"\nctl="\\a\\x01\\u200b"\nexample.com/Key="v"'),
    ("spec.nodeName", "node-name"),
    ("spec.host", "node-name"),
    ("spec.serviceAccountName", "special"),
]


@pytest.mark.parametrize("path,expected", FIELD_CASES, ids=[path for path, _ in FIELD_CASES])
def test_pod_field_value(path, expected):
    assert pod_field_value({"apiVersion": "v1", "fieldPath": path}, LABELLED, host_ip="10.0.0.1", host_ips=["10.0.0.1"],
                           pod_ips=[]) == expected


@pytest.mark.parametrize("field_ref,message", [
    ({"apiVersion": "v2", "fieldPath": "metadata.name"}, "unsupported pod version: v2"),
    ({"apiVersion": "v1", "fieldPath": "spec.containers"}, "field label not supported: spec.containers"),
    ({"apiVersion": "v1", "fieldPath": "metadata.name['x']"}, "field label does not support subscript: metadata.name['x']"),
    ({"apiVersion": "v1", "fieldPath": "spec.restartPolicy"}, "unsupported fieldPath: spec.restartPolicy"),
    ({"apiVersion": "v1", "fieldPath": "status.phase"}, "unsupported fieldPath: status.phase"),
    ({"apiVersion": "v1", "fieldPath": "metadata.labels['a b']"},
     "invalid key subscript in metadata.labels['a b']: name part must consist of alphanumeric characters, '-', '_' or '.', "
     "and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
     "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"),
], ids=["api version", "unknown field", "subscript on a plain field", "accepted label, not extractable (restartPolicy)",
        "accepted label, not extractable (phase)", "invalid label key"])
def test_pod_field_value_errors(field_ref, message):
    with pytest.raises(EnvError) as err:
        pod_field_value(field_ref, LABELLED, host_ip="10.0.0.1", host_ips=["10.0.0.1"], pod_ips=[])
    assert str(err.value) == message


@pytest.mark.parametrize("host_ip,host_ips,pod_ips,expected", [
    ("fd00::1", ["fd00::1", "10.0.0.1"], ["10.0.0.5", "fd00::5"], ("fd00::5", "fd00::5,10.0.0.5", "fd00::1", "fd00::1,10.0.0.1")),
    ("10.0.0.1", ["10.0.0.1"], ["10.0.0.5", "10.0.0.6"], ("10.0.0.5", "10.0.0.5", "10.0.0.1", "10.0.0.1")),
    ("10.0.0.1", [], [], ("", "", "10.0.0.1", "10.0.0.1")),
    # IsIPv4String/IsIPv6String parse sloppily: a leading-zero IPv4 is one, a zoned IPv6 is none
    ("10.0.0.1", ["10.0.0.1"], ["fe80::5%eth0", "010.0.0.5", "fd00::5"],
     ("010.0.0.5", "010.0.0.5,fd00::5", "10.0.0.1", "10.0.0.1")),
], ids=["IPv6 node prefers the IPv6 pod IP", "one IP of a family", "no pod IPs yet", "sloppy parsing"])
def test_pod_and_host_ips(host_ip, host_ips, pod_ips, expected):
    values = tuple(pod_field_value({"fieldPath": path}, LABELLED, host_ip=host_ip, host_ips=host_ips, pod_ips=pod_ips)
                   for path in ("status.podIP", "status.podIPs", "status.hostIP", "status.hostIPs"))
    assert values == expected


def test_host_ip_unknown():
    with pytest.raises(EnvError) as err:
        pod_field_value({"fieldPath": "status.hostIP"}, LABELLED, host_ip="", host_ips=[], pod_ips=[])
    assert str(err.value) == "host IP unknown; known addresses: []"


# ---- resourceFieldRef (pkg/api/v1/resource) ----------------------------------------------------

ALLOCATABLE = {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "100Gi"}


def resources(limits=None, requests=None, name="c"):
    return {"name": name, "resources": {**({"limits": limits} if limits else {}), **({"requests": requests} if requests else {})}}


@pytest.mark.parametrize("ref,container,expected", [
    ({"resource": "limits.cpu"}, resources({"cpu": "9"}), "9"),
    ({"resource": "requests.cpu"}, resources(requests={"cpu": "8"}), "8"),
    ({"resource": "requests.cpu"}, resources(requests={"cpu": "500m"}), "1"),
    ({"resource": "requests.cpu", "divisor": "100m"}, resources(requests={"cpu": "500m"}), "5"),
    ({"resource": "requests.cpu", "divisor": "1m"}, resources(requests={"cpu": "500m"}), "500"),
    ({"resource": "requests.cpu", "divisor": "1m"}, resources(requests={"cpu": "0.0005"}), "1"),
    ({"resource": "limits.memory", "divisor": "1Mi"}, resources({"memory": "1Gi"}), "1024"),
    ({"resource": "requests.memory"}, resources(requests={"memory": "100Mi"}), "104857600"),
    ({"resource": "requests.memory", "divisor": "1M"}, resources(requests={"memory": "1500k"}), "2"),
    ({"resource": "limits.ephemeral-storage", "divisor": "1Gi"}, resources({"ephemeral-storage": "2Gi"}), "2"),
    ({"resource": "limits.hugepages-2Mi", "divisor": "1Mi"}, resources({"hugepages-2Mi": "4Mi"}), "4"),
    ({"resource": "requests.hugepages-1Gi"}, resources(), "0"),
    ({"resource": "limits.cpu"}, resources(), "4"),
    ({"resource": "limits.cpu", "divisor": "1m"}, resources({"cpu": "0"}), "4000"),
    ({"resource": "limits.memory", "divisor": "1Gi"}, resources(), "8"),
    ({"resource": "limits.ephemeral-storage", "divisor": "1Gi"}, resources(), "100"),
    ({"resource": "requests.cpu"}, resources(), "0"),
    ({"resource": "limits.cpu", "divisor": "0"}, resources({"cpu": "2"}), "2"),
], ids=["limits.cpu", "requests.cpu", "requests.cpu rounded up", "cpu divisor 100m", "cpu divisor 1m",
        "millicores rounded up first", "memory in Mi", "memory in bytes", "memory rounded up", "ephemeral-storage",
        "hugepages", "hugepages unset", "cpu limit defaults to allocatable", "zero limit defaults to allocatable",
        "memory limit defaults to allocatable", "ephemeral-storage limit defaults to allocatable", "requests not defaulted",
        "zero divisor is 1"])
def test_container_resource_value(ref, container, expected):
    assert container_resource_value(ref, {"spec": {"containers": [container]}}, container, ALLOCATABLE) == expected


def test_container_resource_value_by_container_name():
    sidecar = resources({"memory": "64Mi"}, name="sidecar")
    init = resources({"cpu": "250m"}, name="init")
    the_pod = {"spec": {"containers": [resources(name="main"), sidecar], "initContainers": [init]}}
    ref = {"containerName": "sidecar", "resource": "limits.memory", "divisor": "1Mi"}
    assert container_resource_value(ref, the_pod, the_pod["spec"]["containers"][0], ALLOCATABLE) == "64"
    ref = {"containerName": "init", "resource": "limits.cpu", "divisor": "1m"}
    assert container_resource_value(ref, the_pod, the_pod["spec"]["containers"][0], ALLOCATABLE) == "250"


@pytest.mark.parametrize("ref,message", [
    ({"resource": "limits.foo"}, "unsupported container resource : limits.foo"),
    ({"resource": "cpu"}, "unsupported container resource : cpu"),
    ({"resource": "limits.cpu", "containerName": "nope"}, "container nope not found"),
], ids=["unknown resource", "no limits/requests prefix", "unknown container"])
def test_container_resource_value_errors(ref, message):
    with pytest.raises(EnvError) as err:
        container_resource_value(ref, {"spec": {"containers": [resources()]}}, resources(), ALLOCATABLE)
    assert str(err.value) == message


def test_resource_field_ref_in_environment_uses_node_allocatable():
    container = {"env": [var("CPU", valueFrom={"resourceFieldRef": {"resource": "limits.cpu"}}),
                         var("MEM", valueFrom={"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}})]}
    env = container_environment(pod("test", False), container, [], host_ip="10.0.0.1", host_ips=["10.0.0.1"], pod_ips=[],
                                node_allocatable={"cpu": "2", "memory": "512Mi"})
    assert env == [("CPU", "2"), ("MEM", "512")]


# ---- expansion (expand_test.go) ----------------------------------------------------------------

EXPANSION_CONTEXT = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}
EXPANSION_CASES = [
    ("whole string", "$(VAR_A)", "A"),
    ("repeat", "$(VAR_A)-$(VAR_A)", "A-A"),
    ("beginning", "$(VAR_A)-1", "A-1"),
    ("middle", "___$(VAR_B)___", "___B___"),
    ("end", "___$(VAR_C)", "___C"),
    ("compound", "$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"),
    ("escape & expand", "$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
    ("compound escape", "$$(VAR_A)_$$(VAR_B)", "$(VAR_A)_$(VAR_B)"),
    ("mixed in escapes", "f000-$$VAR_A", "f000-$VAR_A"),
    ("backslash escape ignored", "foo\\$(VAR_C)bar", "foo\\Cbar"),
    ("backslash escape ignored, two", "foo\\\\$(VAR_C)bar", "foo\\\\Cbar"),
    ("lots of backslashes", "foo\\\\\\\\$(VAR_A)bar", "foo\\\\\\\\Abar"),
    ("nested var references", "$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"),
    ("nested var references second type", "$(VAR_A$(VAR_B)", "$(VAR_A$(VAR_B)"),
    ("value is a reference", "$(VAR_REF)", "$(VAR_A)"),
    ("value is a reference x 2", "%%$(VAR_REF)--$(VAR_REF)%%", "%%$(VAR_A)--$(VAR_A)%%"),
    ("empty var", "foo$(VAR_EMPTY)bar", "foobar"),
    ("unterminated expression", "foo$(VAR_Awhoops!", "foo$(VAR_Awhoops!"),
    ("expression without operator", "f00__(VAR_A)__", "f00__(VAR_A)__"),
    ("shell special vars pass through", "$?_boo_$!", "$?_boo_$!"),
    ("bare operators are ignored", "$VAR_A", "$VAR_A"),
    ("undefined vars are passed through", "$(VAR_DNE)", "$(VAR_DNE)"),
    ("multiple (even) operators, var undefined", "$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"),
    ("multiple (even) operators, var defined", "$$$$$$(VAR_A)", "$$$(VAR_A)"),
    ("multiple (odd) operators, var undefined", "$$$$$$$(GOOD_ODDS)", "$$$$(GOOD_ODDS)"),
    ("multiple (odd) operators, var defined", "$$$$$$$(VAR_A)", "$$$A"),
    ("missing open expression", "$VAR_A)", "$VAR_A)"),
    ("shell syntax ignored", "${VAR_A}", "${VAR_A}"),
    ("trailing incomplete expression not consumed", "$(VAR_B)_______$(A", "B_______$(A"),
    ("trailing incomplete expression, no content, is not consumed", "$(VAR_C)_______$(", "C_______$("),
    ("operator at end of input string is preserved", "$(VAR_A)foobarzab$", "Afoobarzab$"),
    ("shell escaped incomplete expr", "foo-\\$(VAR_A", "foo-\\$(VAR_A"),
    ("lots of $( in middle", "--$($($($($--", "--$($($($($--"),
    ("lots of $( in beginning", "$($($($($--foo$(", "$($($($($--foo$("),
    ("lots of $( at end", "foo0--$($($($(", "foo0--$($($($("),
    ("escaped operators in variable names are not escaped", "$(foo$$var)", "$(foo$$var)"),
    ("newline not expanded", "\n", "\n"),
]


@pytest.mark.parametrize("text,expected", [case[1:] for case in EXPANSION_CASES], ids=[case[0] for case in EXPANSION_CASES])
def test_expand(text, expected):
    assert expand(text, EXPANSION_CONTEXT) == expected


def test_map_reference():
    """expand_test.go TestMapReference: each variable expands against those before it."""
    declared = {"FOO": "bar", "ZOO": "$(FOO)-1", "BLU": "$(ZOO)-2"}
    for name, value in [("FOO", "bar"), ("ZOO", "$(FOO)-1"), ("BLU", "$(ZOO)-2")]:
        declared[name] = expand(value, declared)
    assert declared == {"FOO": "bar", "ZOO": "bar-1", "BLU": "bar-1-2"}


# ---- the command line --------------------------------------------------------------------------


@pytest.mark.parametrize("container,expected", [
    ({"command": ["/bin/sh", "-c"], "args": ["echo $(GREETING) $$(HOME) $(MISSING)"]},
     ["/bin/sh", "-c", "echo hello $(HOME) $(MISSING)"]),
    ({"command": ["server", "--port=$(PORT)"]}, ["server", "--port=8080"]),
    ({"command": ["$(GREETING)"], "args": []}, ["hello"]),
], ids=["command and args", "command only", "empty args"])
def test_container_argv(container, expected):
    assert container_argv(container, {"GREETING": "hello", "PORT": "8080"}) == expected


@pytest.mark.parametrize("container,expected", [
    ({"args": ["sh", "-c", "echo $(GREETING)"]}, ["sh", "-c", "echo hello"]),
    ({"command": [], "args": ["sleep", "$(PORT)"]}, ["sleep", "8080"]),
], ids=["args only", "empty command, args"])
def test_args_without_command_are_the_command_line(container, expected):
    """An image without ENTRYPOINT (busybox; every image here) runs ``args`` as they are."""
    assert container_argv(container, {"GREETING": "hello", "PORT": "8080"}) == expected


@pytest.mark.parametrize("container", [
    {"name": "web", "image": "nginx:1.27"},
    {"name": "web", "image": "nginx:1.27", "command": [], "args": []},
], ids=["neither", "both empty"])
def test_container_argv_needs_a_command(container):
    with pytest.raises(EnvError) as err:
        container_argv(container, {})
    assert str(err.value) == ("kubesvc runs no images, so container 'web' needs a command: its image 'nginx:1.27' is recorded, "
                              "not pulled, and has no entrypoint here")


# ---- ConfigMaps and Secrets (TestMakeEnvironmentVariables' configmap/secret cases) --------------

CONFIG_MAP = {"metadata": {"name": "test-config-map", "namespace": "test1"},
              "data": {"REPLACE_ME": "FOO", "DUPE_TEST": "CONFIG_MAP", "1234": "abc", "1z": "abc"},
              "binaryData": {"BINARY": "YWJj"}}
SECRET = {"metadata": {"name": "test-secret", "namespace": "test1"},
          "data": {"REPLACE_ME": "Rk9P", "DUPE_TEST": "U0VDUkVU", "raw": "/w=="}}  # FOO, SECRET, 0xff
OBJECTS = {ObjectRef("configmap", "test-config-map"): CONFIG_MAP, ObjectRef("secret", "test-secret"): SECRET}


def env_of(container, objects=OBJECTS, warnings=None):
    return container_environment(pod("test1", False), container, [], host_ip=TEST_HOST_IP, host_ips=[TEST_HOST_IP], pod_ips=[],
                                 objects=objects, warnings=warnings)


def test_env_from_config_map_with_prefix_and_invalid_keys():
    warnings = []
    env = env_of({"envFrom": [{"configMapRef": {"name": "test-config-map"}},
                              {"prefix": "p_", "configMapRef": {"name": "test-config-map"}}],
                  "env": [var("TEST_LITERAL", "test-test-test"), var("EXPANSION_TEST", "$(REPLACE_ME)"),
                          var("DUPE_TEST", "ENV_VAR")]}, warnings=warnings)
    assert env == [("REPLACE_ME", "FOO"), ("DUPE_TEST", "ENV_VAR"), ("p_REPLACE_ME", "FOO"), ("p_DUPE_TEST", "CONFIG_MAP"),
                   ("p_1234", "abc"), ("p_1z", "abc"), ("TEST_LITERAL", "test-test-test"), ("EXPANSION_TEST", "FOO")]
    assert warnings == ["Keys [1234, 1z] from the EnvFrom configMap test1/test-config-map were skipped since they are considered "
                        "invalid environment variable names."]


def test_env_from_secret_decodes_and_later_sources_win():
    warnings = []
    env = env_of({"envFrom": [{"configMapRef": {"name": "test-config-map"}}, {"secretRef": {"name": "test-secret"}}]}, warnings=warnings)
    assert env == [("REPLACE_ME", "FOO"), ("DUPE_TEST", "SECRET"), ("raw", "\udcff")]
    assert warnings == ["Keys [1234, 1z] from the EnvFrom configMap test1/test-config-map were skipped since they are considered "
                        "invalid environment variable names."]
    assert "\udcff".encode(errors="surrogateescape") == b"\xff"  # what the process receives


def test_key_refs():
    env = env_of({"env": [var("A", valueFrom={"configMapKeyRef": {"name": "test-config-map", "key": "REPLACE_ME"}}),
                          var("B", valueFrom={"secretKeyRef": {"name": "test-secret", "key": "DUPE_TEST"}}),
                          var("C", valueFrom={"configMapKeyRef": {"name": "test-config-map", "key": "nope", "optional": True}}),
                          var("D", valueFrom={"secretKeyRef": {"name": "absent", "key": "k", "optional": True}}),
                          var("E", valueFrom={"configMapKeyRef": {"name": "test-config-map", "key": "BINARY", "optional": True}}),
                          var("F", "$(A)-$(B)-$(C)")]})
    assert env == [("A", "FOO"), ("B", "SECRET"), ("F", "FOO-SECRET-$(C)")]


@pytest.mark.parametrize("container,message", [
    ({"env": [var("X", valueFrom={"configMapKeyRef": {"name": "test-config-map", "key": "nope"}})]},
     "couldn't find key nope in ConfigMap test1/test-config-map"),
    ({"env": [var("X", valueFrom={"secretKeyRef": {"name": "test-secret", "key": "nope"}})]},
     "couldn't find key nope in Secret test1/test-secret"),
    ({"env": [var("X", valueFrom={"configMapKeyRef": {"name": "test-config-map", "key": "BINARY"}})]},
     "couldn't find key BINARY in ConfigMap test1/test-config-map"),
    ({"envFrom": [{"secretRef": {"name": "other"}}]}, 'secret "other" not found'),
], ids=["configmap key", "secret key", "binaryData is not read", "envFrom secret"])
def test_key_ref_errors(container, message):
    with pytest.raises(EnvError) as err:
        env_of(container)
    assert str(err.value) == message


def test_optional_env_from_missing_is_skipped():
    assert env_of({"envFrom": [{"secretRef": {"name": "absent", "optional": True}}], "env": [var("A", "a")]}) == [("A", "a")]


def test_env_objects_names_each_object_once():
    container = {"envFrom": [{"configMapRef": {"name": "a"}}, {"secretRef": {"name": "s"}}],
                 "env": [var("X", valueFrom={"configMapKeyRef": {"name": "a", "key": "k"}}),
                         var("Y", valueFrom={"secretKeyRef": {"name": "t", "key": "k"}}), var("Z", "z")]}
    assert env_objects(container) == [ObjectRef("configmap", "a"), ObjectRef("secret", "s"), ObjectRef("secret", "t")]
