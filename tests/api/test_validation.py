"""Validation answers with upstream's exact cause texts (Kubernetes 1.32).

Each case builds a manifest as a client would send it, runs decode-time defaulting (as the
registry does before validating) and compares ``str(FieldError)`` - the text kubectl prints
after ``* `` - with what kube-apiserver says.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubesvc.api.defaults import apply_defaults
from kubesvc.api.errors import invalid
from kubesvc.api.validation import validate, validate_service_cluster_ips, validate_status_update, validate_update

NAMESPACED = {
    "Service": True, "Pod": True, "Node": False, "Namespace": False, "Endpoints": True, "Event": True,
    "EndpointSlice": True, "IPAddress": False, "ServiceCIDR": False, "Lease": True,
}

DNS1035 = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
DNS1123_LABEL = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
DNS1123_SUBDOMAIN = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
QNAME_NAME = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
LABEL_VALUE = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
PORT_RANGE = "must be between 1 and 65535, inclusive"
BAD_IP = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
BAD_CIDR = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"


def defaulted(kind: str, obj: dict) -> dict:
    obj = copy.deepcopy(obj)
    apply_defaults(kind, obj)
    return obj


def causes(kind: str, obj: dict) -> list[str]:
    return [str(e) for e in validate(kind, defaulted(kind, obj), namespaced=NAMESPACED[kind])]


def update_causes(kind: str, new: dict, old: dict) -> list[str]:
    return [str(e) for e in validate_update(kind, defaulted(kind, new), defaulted(kind, old), namespaced=NAMESPACED[kind])]


# ---- Service -----------------------------------------------------------------------------------


def service(name: str = "web", **spec) -> dict:
    """A Service as the allocator leaves it: one port, a selector, an IPv4 clusterIP."""
    base = {
        "ports": [{"port": 80}],
        "selector": {"app": "web"},
        "clusterIP": "10.0.0.10",
        "clusterIPs": ["10.0.0.10"],
        "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
    }
    base.update(spec)
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"}, "spec": {k: v for k, v in base.items() if v is not None}}


def lb(**spec) -> dict:
    return service(type="LoadBalancer", ports=[{"port": 80, "nodePort": 30080}], **spec)


SERVICE_CASES = [
    ("valid-clusterip", service(), []),
    # api-compat.md section 5: exactly the two causes kubectl prints as bullets
    ("api-compat-bad-name-and-port", service("Bad_Name", ports=[{"port": 70000, "targetPort": 8080}]), [
        f'metadata.name: Invalid value: "Bad_Name": {DNS1035}',
        f"spec.ports[0].port: Invalid value: 70000: {PORT_RANGE}",
    ]),
    # without targetPort it defaults to port, so upstream reports it too
    ("port-out-of-range-defaults-target-port", service(ports=[{"port": 70000}]), [
        f"spec.ports[0].port: Invalid value: 70000: {PORT_RANGE}",
        f"spec.ports[0].targetPort: Invalid value: 70000: {PORT_RANGE}",
    ]),
    ("api-compat-noports", service("noports", ports=None), ["spec.ports: Required value"]),
    ("headless-needs-no-ports", service(ports=None, clusterIP="None", clusterIPs=["None"]), []),
    ("name-too-long", service("a" * 64), [f'metadata.name: Invalid value: "{"a" * 64}": must be no more than 63 characters']),
    ("ports-need-names", service(ports=[{"port": 80}, {"port": 81}]), [
        "spec.ports[0].name: Required value",
        "spec.ports[1].name: Required value",
    ]),
    ("port-name-duplicate", service(ports=[{"name": "http", "port": 80}, {"name": "http", "port": 81}]), [
        'spec.ports[1].name: Duplicate value: "http"',
    ]),
    ("port-name-format", service(ports=[{"name": "Http", "port": 80}]), [f'spec.ports[0].name: Invalid value: "Http": {DNS1123_LABEL}']),
    ("port-name-dots", service(ports=[{"name": "a.b", "port": 80}]), ['spec.ports[0].name: Invalid value: "a.b": must not contain dots']),
    ("protocol-unsupported", service(ports=[{"port": 80, "protocol": "ICMP"}]), [
        'spec.ports[0].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"',
    ]),
    ("target-port-name-charset", service(ports=[{"port": 80, "targetPort": "my_port"}]), [
        'spec.ports[0].targetPort: Invalid value: "my_port": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)',
    ]),
    ("target-port-name-rules", service(ports=[{"port": 80, "targetPort": "-a--very-long-name-"}]), [
        'spec.ports[0].targetPort: Invalid value: "-a--very-long-name-": must be no more than 15 characters',
        'spec.ports[0].targetPort: Invalid value: "-a--very-long-name-": must not contain consecutive hyphens',
        'spec.ports[0].targetPort: Invalid value: "-a--very-long-name-": must not begin or end with a hyphen',
    ]),
    ("target-port-name-needs-letter", service(ports=[{"port": 80, "targetPort": "8080"}]), [
        'spec.ports[0].targetPort: Invalid value: "8080": must contain at least one letter (a-z)',
    ]),
    ("node-port-on-clusterip", service(ports=[{"port": 80, "nodePort": 30080}]), [
        "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'",
    ]),
    ("node-port-duplicate", service(type="NodePort", ports=[{"name": "a", "port": 80, "nodePort": 30080}, {"name": "b", "port": 81, "nodePort": 30080}]), [
        "spec.ports[1].nodePort: Duplicate value: 30080",
    ]),
    # Go prints the whole core.ServicePort with %#v; errors.format_value prints JSON
    ("port-protocol-duplicate", service(ports=[{"name": "a", "port": 80}, {"name": "b", "port": 80, "targetPort": 81}]), [
        'spec.ports[1]: Duplicate value: {"protocol":"TCP","port":80}',
    ]),
    ("same-port-other-protocol-ok", service(ports=[{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53}]), []),
    ("app-protocol-qualified-name", service(ports=[{"port": 80, "appProtocol": "a/b/c"}]), [
        "spec.ports[0].appProtocol: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
    ]),
    ("type-unsupported", service(type="Internal"), [
        'spec.type: Unsupported value: "Internal": supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort"',
    ]),
    ("session-affinity-unsupported", service(sessionAffinity="Sticky"), [
        'spec.sessionAffinity: Unsupported value: "Sticky": supported values: "ClientIP", "None"',
    ]),
    ("client-ip-timeout-zero", service(sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 0}}), [
        "spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 0: must be greater than 0 and less than 86400",
    ]),
    ("client-ip-timeout-max-ok", service(sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 86400}}), []),
    ("client-ip-timeout-over", service(sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 86401}}), [
        "spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 86401: must be greater than 0 and less than 86400",
    ]),
    ("selector-label-value", service(selector={"app": "-bad-"}), [f'spec.selector: Invalid value: "-bad-": {LABEL_VALUE}']),
    ("cluster-ip-not-an-ip", service(clusterIP="10.0.0.300", clusterIPs=["10.0.0.300"]), [
        f'spec.clusterIPs[0]: Invalid value: "10.0.0.300": {BAD_IP}',
    ]),
    ("cluster-ips-first-must-match", service(clusterIPs=["10.0.0.11"]), [
        'spec.clusterIPs: Invalid value: ["10.0.0.11"]: first value must match `clusterIP`',
    ]),
    ("cluster-ips-without-cluster-ip", service(clusterIP=None), [
        'spec.clusterIPs: Invalid value: ["10.0.0.10"]: must be empty when `clusterIP` is not specified',
    ]),
    ("cluster-ip-without-cluster-ips", service(clusterIPs=None), ["spec.clusterIPs: Required value"]),
    ("cluster-ips-none-not-alone", service(clusterIP="None", clusterIPs=["None", "10.0.0.1"], ipFamilies=None), [
        "spec.clusterIPs: Invalid value: [\"None\",\"10.0.0.1\"]: 'None' must be the first and only value",
    ]),
    ("cluster-ips-same-family", service(clusterIPs=["10.0.0.10", "10.0.0.11"], ipFamilies=None, ipFamilyPolicy="RequireDualStack"), [
        'spec.clusterIPs: Invalid value: ["10.0.0.10","10.0.0.11"]: may specify no more than one IP for each IP family',
    ]),
    ("cluster-ips-three", service(clusterIPs=["10.0.0.10", "2000::1", "10.0.0.11"], ipFamilies=None, ipFamilyPolicy="RequireDualStack"), [
        'spec.clusterIPs: Invalid value: ["10.0.0.10","2000::1","10.0.0.11"]: may only hold up to 2 values',
    ]),
    ("ip-family-unsupported-and-duplicate", service(ipFamilies=["IPv4", "IPv4", "IPv5"], ipFamilyPolicy="RequireDualStack"), [
        'spec.ipFamilies[1]: Duplicate value: "IPv4"',
        'spec.ipFamilies[2]: Unsupported value: "IPv5": supported values: "IPv4", "IPv6"',
    ]),
    ("ip-family-policy-unsupported", service(ipFamilyPolicy="DualStack"), [
        'spec.ipFamilyPolicy: Unsupported value: "DualStack": supported values: "PreferDualStack", "RequireDualStack", "SingleStack"',
    ]),
    ("ip-family-mismatch", service(ipFamilies=["IPv6"]), [
        'spec.clusterIPs[0]: Invalid value: "10.0.0.10": expected an IPv6 value as indicated by `ipFamilies[0]`',
    ]),
    ("headless-load-balancer", lb(clusterIP="None", clusterIPs=["None"]), [
        "spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for LoadBalancer services",
    ]),
    ("headless-node-port", service(type="NodePort", clusterIP="None", clusterIPs=["None"]), [
        "spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for NodePort services",
    ]),
    ("external-name-valid", service(type="ExternalName", externalName="db.example.com.", ports=None, selector=None, clusterIP=None, clusterIPs=None, ipFamilies=None, ipFamilyPolicy=None), []),
    ("external-name-required", service(type="ExternalName", ports=None, clusterIP=None, clusterIPs=None, ipFamilies=None, ipFamilyPolicy=None), ["spec.externalName: Required value"]),
    ("external-name-forbids-ip-fields", service(type="ExternalName", externalName="Db_Host"), [
        "spec.clusterIPs: Forbidden: may not be set for ExternalName services",
        "spec.ipFamilies: Forbidden: may not be set for ExternalName services",
        "spec.ipFamilyPolicy: Forbidden: may not be set for ExternalName services",
        f'spec.externalName: Invalid value: "Db_Host": {DNS1123_SUBDOMAIN}',
    ]),
    ("external-ips", service(externalIPs=["abc", "127.0.0.1", "0.0.0.0", "169.254.1.1", "224.0.0.1"]), [
        f'spec.externalIPs[0]: Invalid value: "abc": {BAD_IP}',
        'spec.externalIPs[1]: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)',
        'spec.externalIPs[2]: Invalid value: "0.0.0.0": may not be unspecified (0.0.0.0)',
        'spec.externalIPs[3]: Invalid value: "169.254.1.1": may not be in the link-local range (169.254.0.0/16, fe80::/10)',
        'spec.externalIPs[4]: Invalid value: "224.0.0.1": may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)',
    ]),
    ("external-ips-leading-zeros-accepted", service(externalIPs=["010.001.002.003"]), []),
    ("external-traffic-policy-internal-service", service(externalTrafficPolicy="Local"), [
        'spec.externalTrafficPolicy: Invalid value: "Local": may only be set for externally-accessible services',
    ]),
    ("external-traffic-policy-unsupported", service(type="NodePort", externalTrafficPolicy="Nearest"), [
        'spec.externalTrafficPolicy: Unsupported value: "Nearest": supported values: "Cluster", "Local"',
    ]),
    ("health-check-node-port-not-needed", service(type="NodePort", healthCheckNodePort=30999), [
        "spec.healthCheckNodePort: Invalid value: 30999: may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
    ]),
    ("health-check-node-port-required", lb(externalTrafficPolicy="Local"), ["spec.healthCheckNodePort: Required value"]),
    ("health-check-node-port-given", lb(externalTrafficPolicy="Local", healthCheckNodePort=30999), []),
    ("source-ranges-not-lb", service(loadBalancerSourceRanges=["10.0.0.0/8"]), [
        "spec.LoadBalancerSourceRanges: Forbidden: may only be used when `type` is 'LoadBalancer'",
    ]),
    ("source-ranges-invalid", lb(loadBalancerSourceRanges=[" 10.0.0.0/8 ", "10.0.0.0"]), [
        f'spec.LoadBalancerSourceRanges[1]: Invalid value: "10.0.0.0": {BAD_CIDR}',
    ]),
    ("allocate-node-ports-not-lb", service(allocateLoadBalancerNodePorts=False), [
        "spec.allocateLoadBalancerNodePorts: Forbidden: may only be used when `type` is 'LoadBalancer'",
    ]),
    ("load-balancer-class-not-lb", service(loadBalancerClass="example.com/lb"), [
        "spec.loadBalancerClass: Forbidden: may only be used when `type` is 'LoadBalancer'",
    ]),
    ("internal-traffic-policy-unsupported", service(internalTrafficPolicy="Node"), [
        'spec.internalTrafficPolicy: Unsupported value: "Node": supported values: "Cluster", "Local"',
    ]),
    ("traffic-distribution", service(trafficDistribution="PreferSameRack"), [
        'spec.trafficDistribution: Unsupported value: "PreferSameRack": supported values: "PreferClose", "PreferSameNode", "PreferSameZone"',
    ]),
    ("traffic-distribution-prefer-close", service(trafficDistribution="PreferClose"), []),
    ("traffic-distribution-prefer-same-zone", service(trafficDistribution="PreferSameZone"), []),  # 1.34: PreferSameTrafficDistribution beta
    ("traffic-distribution-prefer-same-node", service(trafficDistribution="PreferSameNode"), []),
    ("topology-annotations-disagree", {**service(), "metadata": {"name": "web", "namespace": "default", "annotations": {
        "service.kubernetes.io/topology-aware-hints": "Auto", "service.kubernetes.io/topology-mode": "Disabled"}}}, [
        'metadata.annotations[service.kubernetes.io/topology-mode]: Invalid value: "Disabled": must match annotations[service.kubernetes.io/topology-aware-hints] when both are specified',
    ]),
    ("wrong-json-types", {**service(ports=[{"port": 80}, "eighty"], selector=["app"]), "metadata": {"name": "web", "namespace": "default", "labels": ["a"]}}, [
        'metadata.labels: Invalid value: ["a"]: must be of type object',
        'spec.ports[1]: Invalid value: "eighty": must be of type object',
        'spec.selector: Invalid value: ["app"]: must be of type object',
    ]),
]


@pytest.mark.parametrize("manifest,expected", [c[1:] for c in SERVICE_CASES], ids=[c[0] for c in SERVICE_CASES])
def test_service(manifest, expected):
    assert causes("Service", manifest) == expected


def test_service_status_message_matches_api_compat():
    """The whole 422 message kubectl prints for the api-compat.md section 5 examples."""
    svc = defaulted("Service", service("noports", ports=None))
    assert invalid("Service", "noports", validate("Service", svc, namespaced=True)).message == 'Service "noports" is invalid: spec.ports: Required value'
    svc = defaulted("Service", service("Bad_Name", ports=[{"port": 70000, "targetPort": 8080}]))
    assert invalid("Service", "Bad_Name", validate("Service", svc, namespaced=True)).message == (
        f'Service "Bad_Name" is invalid: [metadata.name: Invalid value: "Bad_Name": {DNS1035}, spec.ports[0].port: Invalid value: 70000: {PORT_RANGE}]'
    )


def test_cluster_ips_check_alone_is_what_allocation_runs_first():
    svc = defaulted("Service", service(clusterIP="nope", clusterIPs=["nope"], ports=[{"port": 0}]))
    assert [str(e) for e in validate_service_cluster_ips(svc)] == [f'spec.clusterIPs[0]: Invalid value: "nope": {BAD_IP}']


def with_meta(obj: dict, **meta) -> dict:
    return {**obj, "metadata": {**obj["metadata"], **meta}}


OLD = with_meta(service(), resourceVersion="5", uid="u1")
OLD_DUAL = with_meta(service(clusterIPs=["10.0.0.10", "2000::10"], ipFamilies=["IPv4", "IPv6"], ipFamilyPolicy="RequireDualStack"), resourceVersion="5", uid="u1")

SERVICE_UPDATE_CASES = [
    ("unchanged", OLD, OLD, []),
    ("resource-version-required", with_meta(OLD, resourceVersion=None), OLD, ['metadata.resourceVersion: Invalid value: "": must be specified for an update']),
    ("name-immutable", with_meta(OLD, name="other"), OLD, ['metadata.name: Invalid value: "other": field is immutable']),
    ("uid-immutable", with_meta(OLD, uid="u2"), OLD, ['metadata.uid: Invalid value: "u2": field is immutable']),
    # Go renders the list as []string{"10.0.0.11"} (G13); errors.format_value prints JSON
    ("cluster-ip-may-not-change", with_meta(service(clusterIP="10.0.0.11", clusterIPs=["10.0.0.11"]), resourceVersion="5", uid="u1"), OLD, [
        'spec.clusterIPs[0]: Invalid value: ["10.0.0.11"]: may not change once set',
    ]),
    ("primary-cluster-ip-can-not-be-unset", with_meta(service(clusterIP=None, clusterIPs=None), resourceVersion="5", uid="u1"), OLD, [
        "spec.clusterIPs[0]: Invalid value: []: primary clusterIP can not be unset",
    ]),
    ("add-secondary-ok", OLD_DUAL, OLD, []),
    ("release-secondary-needs-single-stack", with_meta(OLD_DUAL, resourceVersion="6") | {"spec": {**OLD_DUAL["spec"], "clusterIPs": ["10.0.0.10"], "ipFamilies": ["IPv4"]}}, OLD_DUAL, [
        "spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": must be set to 'SingleStack' when releasing the secondary clusterIP",
        "spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": must be set to 'SingleStack' when releasing the secondary ipFamily",
    ]),
    ("release-secondary-single-stack-ok", with_meta(OLD_DUAL, resourceVersion="6") | {"spec": {**OLD_DUAL["spec"], "clusterIPs": ["10.0.0.10"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack"}}, OLD_DUAL, []),
    ("to-external-name-skips-ip-rules", with_meta(service(type="ExternalName", externalName="example.com", clusterIP=None, clusterIPs=None, ipFamilies=None, ipFamilyPolicy=None), resourceVersion="5", uid="u1"), OLD, []),
    ("health-check-node-port-immutable",
     with_meta(lb(externalTrafficPolicy="Local", healthCheckNodePort=31000), resourceVersion="5", uid="u1"),
     with_meta(lb(externalTrafficPolicy="Local", healthCheckNodePort=30999), resourceVersion="5", uid="u1"),
     ["spec.healthCheckNodePort: Forbidden: field is immutable"]),
    ("load-balancer-class-immutable",
     with_meta(lb(loadBalancerClass="example.com/b"), resourceVersion="5", uid="u1"),
     with_meta(lb(loadBalancerClass="example.com/a"), resourceVersion="5", uid="u1"),
     ['spec.loadBalancerClass: Invalid value: "example.com/b": may not change once set']),
]


@pytest.mark.parametrize("new,old,expected", [c[1:] for c in SERVICE_UPDATE_CASES], ids=[c[0] for c in SERVICE_UPDATE_CASES])
def test_service_update(new, old, expected):
    assert update_causes("Service", new, old) == expected


def lb_status(svc: dict, *ingress: dict) -> dict:
    return {**svc, "status": {"loadBalancer": {"ingress": list(ingress)}}}


SERVICE_STATUS_CASES = [
    ("lb-ingress-ok", lb_status(lb(), {"ip": "192.0.2.1", "ipMode": "VIP"}, {"hostname": "lb.example.com"}), []),
    ("ingress-only-for-lb", lb_status(service(), {"ip": "192.0.2.1", "ipMode": "VIP"}), [
        "status.loadBalancer.ingress: Forbidden: may only be used when `spec.type` is 'LoadBalancer'",
    ]),
    ("ingress-checks", lb_status(lb(), {"ip": "nope", "ipMode": "VIP"}, {"ip": "192.0.2.2"}, {"ipMode": "Proxy", "hostname": "192.0.2.3"}), [
        f'status.loadBalancer.ingress[0].ip: Invalid value: "nope": {BAD_IP}',
        "status.loadBalancer.ingress[1].ipMode: Required value: must be specified when `ip` is set",
        "status.loadBalancer.ingress[2].ipMode: Forbidden: may not be specified when `ip` is not set",
        'status.loadBalancer.ingress[2].hostname: Invalid value: "192.0.2.3": must be a DNS name, not an IP address',
    ]),
]


@pytest.mark.parametrize("new,expected", [c[1:] for c in SERVICE_STATUS_CASES], ids=[c[0] for c in SERVICE_STATUS_CASES])
def test_service_status_update(new, expected):
    new = with_meta(new, resourceVersion="5")
    old = defaulted("Service", with_meta(new, resourceVersion="4"))
    assert [str(e) for e in validate_status_update("Service", new, old, namespaced=True)] == expected


# ---- ObjectMeta (shared by every kind) ---------------------------------------------------------

META_CASES = [
    ("name-required", {"namespace": "default"}, ["metadata.name: Required value: name or generateName is required"]),
    ("namespace-required", {"name": "web"}, ["metadata.namespace: Required value"]),
    ("namespace-format", {"name": "web", "namespace": "Default"}, [f'metadata.namespace: Invalid value: "Default": {DNS1123_LABEL}']),
    ("generate-name-trailing-dash-ok", {"generateName": "web-", "name": "web-x7k2p", "namespace": "default"}, []),
    ("generate-name-format", {"generateName": "Web-", "name": "web-x7k2p", "namespace": "default"}, [f'metadata.generateName: Invalid value: "Web-": {DNS1035}']),
    ("generation-negative", {"name": "web", "namespace": "default", "generation": -1}, ["metadata.generation: Invalid value: -1: must be greater than or equal to 0"]),
    ("label-key-and-value", {"name": "web", "namespace": "default", "labels": {"a/b/c": "ok", "k": "v" * 64}}, [
        "metadata.labels: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
        f'metadata.labels: Invalid value: "{"v" * 64}": must be no more than 63 characters',
    ]),
    ("label-key-prefix", {"name": "web", "namespace": "default", "labels": {"/x": "y", "Ex.com/": ""}}, [
        'metadata.labels: Invalid value: "/x": prefix part must be non-empty',
        f'metadata.labels: Invalid value: "Ex.com/": prefix part {DNS1123_SUBDOMAIN}',
        'metadata.labels: Invalid value: "Ex.com/": name part must be non-empty',
        f'metadata.labels: Invalid value: "Ex.com/": {QNAME_NAME}',
    ]),
    ("annotation-keys-case-insensitive", {"name": "web", "namespace": "default", "annotations": {"Example.COM/Key": "x"}}, []),
    ("annotations-too-big", {"name": "web", "namespace": "default", "annotations": {"a": "x" * 262144}}, [
        "metadata.annotations: Too long: may not be more than 262144 bytes",
    ]),
    ("finalizers", {"name": "web", "namespace": "default", "finalizers": ["foo", "example.com/ok", "kubernetes"]}, [
        'metadata.finalizers[0]: Invalid value: "foo": name is neither a standard finalizer name nor is it fully qualified',
    ]),
    ("finalizers-conflict", {"name": "web", "namespace": "default", "finalizers": ["orphan", "foregroundDeletion"]}, [
        'metadata.finalizers: Invalid value: ["orphan","foregroundDeletion"]: finalizer orphan and foregroundDeletion cannot be both set',
    ]),
    ("owner-references", {"name": "web", "namespace": "default", "ownerReferences": [{"apiVersion": "apps/", "kind": ""}, {"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "1"}]}, [
        'metadata.ownerReferences.apiVersion: Invalid value: "apps/": version must not be empty',
        'metadata.ownerReferences.kind: Invalid value: "": kind must not be empty',
        'metadata.ownerReferences.name: Invalid value: "": name must not be empty',
        'metadata.ownerReferences.uid: Invalid value: "": uid must not be empty',
        'metadata.ownerReferences: Invalid value: {"apiVersion":"v1","kind":"Event","name":"e","uid":"1"}: /v1, Kind=Event is disallowed from being an owner',
    ]),
    ("owner-references-two-controllers", {"name": "web", "namespace": "default", "ownerReferences": [
        {"apiVersion": "v1", "kind": "Service", "name": "a", "uid": "1", "controller": True},
        {"apiVersion": "v1", "kind": "Pod", "name": "b", "uid": "2", "controller": True}]}, [
        'metadata.ownerReferences: Invalid value: [{"apiVersion":"v1","kind":"Service","name":"a","uid":"1","controller":true},{"apiVersion":"v1","kind":"Pod","name":"b","uid":"2","controller":true}]: Only one reference can have Controller set to true. Found "true" in references for Service/a and Pod/b',
    ]),
    ("managed-fields", {"name": "web", "namespace": "default", "managedFields": [{"manager": "kubectl\x07", "operation": "Patch", "fieldsType": "FieldsV2"}]}, [
        'metadata.managedFields[0].operation: Invalid value: "Patch": must be `Apply` or `Update`',
        'metadata.managedFields[0].fieldsType: Invalid value: "FieldsV2": must be `FieldsV1`',
        'metadata.managedFields[0].manager: Invalid value: "kubectl\\a": invalid character U+0007 (at position 7)',
    ]),
]


@pytest.mark.parametrize("meta,expected", [c[1:] for c in META_CASES], ids=[c[0] for c in META_CASES])
def test_object_meta(meta, expected):
    assert causes("Service", {**service(), "metadata": meta}) == expected


def test_cluster_scoped_kind_forbids_namespace():
    assert causes("Namespace", {"metadata": {"name": "team-a", "namespace": "default"}}) == ["metadata.namespace: Forbidden: not allowed on this type"]


def test_no_new_finalizers_while_deleting():
    old = with_meta(OLD, deletionTimestamp="2024-01-01T00:00:00Z", finalizers=["example.com/a"])
    new = with_meta(old, finalizers=["example.com/a", "example.com/c", "example.com/b"])
    assert update_causes("Service", new, old) == [
        'metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{"example.com/b", "example.com/c"}',
    ]


# ---- Pod ---------------------------------------------------------------------------------------


def pod(**spec) -> dict:
    base = {"containers": [{"name": "app", "image": "nginx:1.27"}]}
    base.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "default"}, "spec": {k: v for k, v in base.items() if v is not None}}


def ctr(**fields) -> dict:
    return {"name": "app", "image": "nginx:1.27", **fields}


POD_CASES = [
    ("valid", pod(), []),
    ("containers-required", pod(containers=None), ["spec.containers: Required value"]),
    ("image-required", pod(containers=[{"name": "app"}]), ["spec.containers[0].image: Required value"]),
    ("image-whitespace", pod(containers=[ctr(image=" nginx")]), ['spec.containers[0].image: Invalid value: " nginx": must not have leading or trailing whitespace']),
    ("container-names", pod(containers=[ctr(name="App"), ctr(name="web"), ctr(name="web")]), [
        f'spec.containers[0].name: Invalid value: "App": {DNS1123_LABEL}',
        'spec.containers[2].name: Duplicate value: "web"',
    ]),
    ("container-ports", pod(containers=[ctr(ports=[{"containerPort": 0, "protocol": "ICMP"}, {"name": "Web", "containerPort": 70000, "hostPort": 70000}])]), [
        "spec.containers[0].ports[0].containerPort: Required value",
        'spec.containers[0].ports[0].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"',
        'spec.containers[0].ports[1].name: Invalid value: "Web": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)',
        f"spec.containers[0].ports[1].containerPort: Invalid value: 70000: {PORT_RANGE}",
        f"spec.containers[0].ports[1].hostPort: Invalid value: 70000: {PORT_RANGE}",
    ]),
    ("host-port-conflict", pod(containers=[ctr(ports=[{"containerPort": 80, "hostPort": 8080}]), ctr(name="b", ports=[{"containerPort": 81, "hostPort": 8080}])]), [
        'spec.containers[1].ports[0].hostPort: Duplicate value: "TCP//8080"',
    ]),
    ("env", pod(containers=[ctr(env=[{"name": ""}, {"name": "A=B"}, {"name": "X", "valueFrom": {}}, {"name": "Y", "value": "v", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])]), [
        "spec.containers[0].env[0].name: Required value",
        "spec.containers[0].env[1].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='",
        'spec.containers[0].env[2].valueFrom: Invalid value: "": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`',
        'spec.containers[0].env[3].valueFrom: Invalid value: "": may not be specified when `value` is not empty',
    ]),
    ("env-key-refs", pod(containers=[ctr(env=[{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "bad key"}, "configMapKeyRef": {"name": "c", "key": "k"}}}])]), [
        "spec.containers[0].env[0].valueFrom.secretKeyRef.key: Invalid value: \"bad key\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
        'spec.containers[0].env[0].valueFrom: Invalid value: "": may not have more than one field specified at a time',
    ]),
    ("probe-handlers", pod(containers=[ctr(readinessProbe={"exec": {"command": ["true"]}, "tcpSocket": {"port": 80}}, livenessProbe={"periodSeconds": -1})]), [
        "spec.containers[0].livenessProbe: Required value: must specify a handler type",
        "spec.containers[0].livenessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0",
        "spec.containers[0].readinessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type",
    ]),
    ("probe-actions", pod(containers=[ctr(startupProbe={"httpGet": {"port": "HTTP", "scheme": "FTP", "httpHeaders": [{"name": "X Y"}]}, "successThreshold": 2},
                                          readinessProbe={"grpc": {"port": 0}, "terminationGracePeriodSeconds": 5})]), [
        'spec.containers[0].readinessProbe.grpc.port: Invalid value: 0: must be between 1 and 65535, inclusive',
        "spec.containers[0].readinessProbe.terminationGracePeriodSeconds: Invalid value: 5: must not be set for readinessProbes",
        'spec.containers[0].startupProbe.httpGet.port: Invalid value: "HTTP": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)',
        'spec.containers[0].startupProbe.httpGet.port: Invalid value: "HTTP": must contain at least one letter (a-z)',
        'spec.containers[0].startupProbe.httpGet.scheme: Unsupported value: "FTP": supported values: "HTTP", "HTTPS"',
        "spec.containers[0].startupProbe.httpGet.httpHeaders: Invalid value: \"X Y\": a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')",
        "spec.containers[0].startupProbe.successThreshold: Invalid value: 2: must be 1",
    ]),
    ("lifecycle-sleep", pod(containers=[ctr(lifecycle={"preStop": {"sleep": {"seconds": 60}}})]), [
        "spec.containers[0].lifecycle.preStop.sleep: Invalid value: 60: must be greater than 0 and less than terminationGracePeriodSeconds (30). Enable AllowPodLifecycleSleepActionZeroValue feature gate for zero sleep.",
    ]),
    ("restart-policy", pod(restartPolicy="Sometimes"), ['spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"']),
    ("dns-policy-none-needs-config", pod(dnsPolicy="None"), ["spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None"]),
    ("dns-config", pod(dnsConfig={"nameservers": ["1.1.1.1", "x"], "searches": ["Bad_Domain"]}), [
        f'spec.dnsConfig.nameservers[1]: Invalid value: "x": {BAD_IP}',
        f'spec.dnsConfig.searches[0]: Invalid value: "Bad_Domain": {DNS1123_SUBDOMAIN}',
    ]),
    ("init-containers", pod(initContainers=[ctr(restartPolicy="OnFailure", readinessProbe={"exec": {"command": ["true"]}})]), [
        'spec.initContainers[0].restartPolicy: Unsupported value: "OnFailure": supported values: "Always"',
        'spec.initContainers[0].name: Duplicate value: "app"',
        "spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
    ]),
    ("regular-container-restart-policy", pod(containers=[ctr(restartPolicy="Always")]), ["spec.containers[0].restartPolicy: Forbidden: may not be set for non-init containers"]),
    ("host-network-ports", pod(hostNetwork=True, containers=[ctr(ports=[{"containerPort": 80, "hostPort": 8080}])]), [
        "spec.containers[0].ports[0].hostPort: Invalid value: 8080: must match `containerPort` when `hostNetwork` is true",
    ]),
    ("volumes", pod(volumes=[{"name": "a", "emptyDir": {}, "hostPath": {"path": "/x"}, "downwardAPI": {}}, {"name": "a"}, {"name": "Bad", "configMap": {"name": "c"}}]), [
        "spec.volumes[0].hostPath: Forbidden: may not specify more than 1 volume type",
        "spec.volumes[0].downwarAPI: Forbidden: may not specify more than 1 volume type",
        f'spec.volumes[2].name: Invalid value: "Bad": {DNS1123_LABEL}',
    ]),
    ("names-of-references", pod(serviceAccountName="Default", nodeName="node_1", hostname="a.b"), [
        f'spec.serviceAccountName: Invalid value: "Default": {DNS1123_SUBDOMAIN}',
        f'spec.nodeName: Invalid value: "node_1": {DNS1123_SUBDOMAIN}',
        'spec.hostname: Invalid value: "a.b": must not contain dots',
    ]),
    ("tolerations", pod(tolerations=[{"operator": "Equal", "value": "x"}, {"key": "k", "operator": "Exists", "value": "v", "effect": "Never", "tolerationSeconds": 5}]), [
        'spec.tolerations[0].operator: Invalid value: "Equal": operator must be Exists when `key` is empty, which means "match all values and all keys"',
        'spec.tolerations[1].effect: Invalid value: "Never": effect must be \'NoExecute\' when `tolerationSeconds` is set',
        "spec.tolerations[1].operator: Invalid value: \"v\": value must be empty when `operator` is 'Exists'",
        'spec.tolerations[1].effect: Unsupported value: "Never": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"',
    ]),
    ("deletion-cost", {**pod(), "metadata": {"name": "web-0", "namespace": "default", "annotations": {"controller.kubernetes.io/pod-deletion-cost": "+5"}}}, [
        'metadata.annotations[controller.kubernetes.io/pod-deletion-cost]: Invalid value: "+5": must be a 32bit integer',
    ]),
    ("ephemeral-on-create", pod(ephemeralContainers=[{"name": "debug", "image": "busybox"}]), ["spec.ephemeralContainers: Forbidden: cannot be set on create"]),
    ("container-port-as-string", pod(containers=[ctr(ports=[{"containerPort": "80"}])]), [
        'spec.containers[0].ports[0].containerPort: Invalid value: "80": must be of type integer',
        "spec.containers[0].ports[0].containerPort: Required value",
    ]),
]


@pytest.mark.parametrize("manifest,expected", [c[1:] for c in POD_CASES], ids=[c[0] for c in POD_CASES])
def test_pod(manifest, expected):
    assert causes("Pod", manifest) == expected


POD_OLD = with_meta(pod(), resourceVersion="3")
POD_UPDATE_CASES = [
    ("image-may-change", with_meta(pod(containers=[ctr(image="nginx:1.28")]), resourceVersion="3"), []),
    ("other-fields-may-not", with_meta(pod(restartPolicy="Never"), resourceVersion="3"), [
        "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
    ]),
    ("containers-may-not-be-added", with_meta(pod(containers=[ctr(), ctr(name="b")]), resourceVersion="3"), ["spec.containers: Forbidden: pod updates may not add or remove containers"]),
    ("deadline-only-decreases", with_meta(pod(activeDeadlineSeconds=50), resourceVersion="3"), []),
]


@pytest.mark.parametrize("new,expected", [c[1:] for c in POD_UPDATE_CASES], ids=[c[0] for c in POD_UPDATE_CASES])
def test_pod_update(new, expected):
    assert update_causes("Pod", new, POD_OLD) == expected


def test_pod_status_update():
    old = defaulted("Pod", with_meta(pod(nodeName="n1"), resourceVersion="3"))
    new = copy.deepcopy(old)
    new["spec"]["nodeName"] = "n2"
    new["status"] = {"podIPs": [{"ip": "10.1.0.5"}, {"ip": "10.1.0.6"}], "qosClass": "Guaranteed"}
    assert [str(e) for e in validate_status_update("Pod", new, old, namespaced=True)] == [
        "status.nodeName: Forbidden: may not be changed directly",
        'status.qosClass: Invalid value: "Guaranteed": field is immutable',
        'status.podIPs: Invalid value: [{"ip":"10.1.0.5"},{"ip":"10.1.0.6"}]: may specify no more than one IP for each IP family',
    ]


# ---- the other kinds ---------------------------------------------------------------------------

OTHER_CASES = [
    ("node-valid", "Node", {"metadata": {"name": "node-1"}, "spec": {"podCIDRs": ["10.244.1.0/24", "fd00::/64"]}}, []),
    ("node-taints", "Node", {"metadata": {"name": "node-1"}, "spec": {"taints": [{"key": "k", "effect": ""}, {"key": "k", "value": "v", "effect": "NoSchedule"}, {"key": "k", "effect": "NoSchedule"}]}}, [
        "metadata.taints[0].effect: Required value",
        'metadata.taints[2]: Duplicate value: {"key":"k","effect":"NoSchedule"}: taints must be unique by key and effect pair',
    ]),
    ("node-pod-cidrs", "Node", {"metadata": {"name": "node-1"}, "spec": {"podCIDRs": ["10.244.1.0/24", "10.244.1.0/24"]}}, [
        'spec.podCIDRs: Invalid value: ["10.244.1.0/24","10.244.1.0/24"]: may specify no more than one CIDR for each IP family',
        'spec.podCIDRs[1]: Duplicate value: "10.244.1.0/24"',
    ]),
    ("namespace-name", "Namespace", {"metadata": {"name": "Team_A"}}, [f'metadata.name: Invalid value: "Team_A": {DNS1123_LABEL}']),
    ("namespace-finalizers", "Namespace", {"metadata": {"name": "a"}, "spec": {"finalizers": ["kubernetes", "foo", "-x/y"]}}, [
        'spec.finalizers: Invalid value: "foo": name is neither a standard finalizer name nor is it fully qualified',
        f'spec.finalizers: Invalid value: "-x/y": prefix part {DNS1123_SUBDOMAIN}',
    ]),
    ("endpoints", "Endpoints", {"metadata": {"name": "web", "namespace": "default"}, "subsets": [
        {},
        {"addresses": [{"ip": "x", "hostname": "A"}, {"ip": "127.0.0.1", "nodeName": "n_1"}], "ports": [{"port": 80}, {"name": "b", "port": 0}]}]}, [
        "subsets[0]: Required value: must specify `addresses` or `notReadyAddresses`",
        f'subsets[1].addresses[0].ip: Invalid value: "x": {BAD_IP}',
        f'subsets[1].addresses[0].hostname: Invalid value: "A": {DNS1123_LABEL}',
        'subsets[1].addresses[0].ip: Invalid value: "x": must be a valid IP address',
        f'subsets[1].addresses[1].nodeName: Invalid value: "n_1": {DNS1123_SUBDOMAIN}',
        'subsets[1].addresses[1].ip: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)',
        "subsets[1].ports[0].name: Required value",
        f"subsets[1].ports[1].port: Invalid value: 0: {PORT_RANGE}",
    ]),
    ("event-namespace-mismatch", "Event", {"metadata": {"name": "web.1", "namespace": "default"}, "involvedObject": {"kind": "Pod", "namespace": "other"}}, [
        'involvedObject.namespace: Invalid value: "other": does not match event.namespace',
    ]),
    ("event-path-segment-name", "Event", {"metadata": {"name": "a/b%c", "namespace": "default"}, "involvedObject": {"namespace": "default"}}, [
        "metadata.name: Invalid value: \"a/b%c\": may not contain '/'",
        "metadata.name: Invalid value: \"a/b%c\": may not contain '%'",
    ]),
    ("event-series-api-fields", "Event", {"metadata": {"name": "e", "namespace": "default"}, "eventTime": "2024-01-01T00:00:00.000000Z", "involvedObject": {}}, [
        "reportingController: Required value",
        "reportingController: Invalid value: \"\": name part must be non-empty",
        f'reportingController: Invalid value: "": {QNAME_NAME}',
        "reportingInstance: Required value",
        "action: Required value",
        "reason: Required value",
    ]),
    ("slice-valid", "EndpointSlice", {"metadata": {"name": "web-abc", "namespace": "default"}, "addressType": "IPv4",
                                      "endpoints": [{"addresses": ["10.1.0.5"], "conditions": {"ready": True}, "nodeName": "node-1", "zone": "a"}],
                                      "ports": [{"name": "http", "port": 8080}]}, []),
    ("slice-address-type", "EndpointSlice", {"metadata": {"name": "web-abc", "namespace": "default"}, "addressType": "IP"}, [
        'addressType: Unsupported value: "IP": supported values: "FQDN", "IPv4", "IPv6"',
    ]),
    ("slice-address-type-required", "EndpointSlice", {"metadata": {"name": "web-abc", "namespace": "default"}}, ["addressType: Required value"]),
    ("slice-endpoints", "EndpointSlice", {"metadata": {"name": "web-abc", "namespace": "default"}, "addressType": "IPv4", "endpoints": [
        {"addresses": []}, {"addresses": ["::1", "0.0.0.0"], "hostname": "H", "nodeName": "n_1", "conditions": {"ready": "yes"}}, {"addresses": ["10.0.0.1"] * 101}]}, [
        # JSON type errors are collected while reading, ahead of the rule errors
        'endpoints[1].conditions.ready: Invalid value: "yes": must be of type boolean',
        "endpoints[0].addresses: Required value: must contain at least 1 address",
        'endpoints[1].addresses[0]: Invalid value: "::1": must be a valid IPv4 address',
        'endpoints[1].addresses[0]: Invalid value: "::1": may not be in the loopback range (127.0.0.0/8, ::1/128)',
        'endpoints[1].addresses[1]: Invalid value: "0.0.0.0": may not be unspecified (0.0.0.0)',
        f'endpoints[1].nodeName: Invalid value: "n_1": {DNS1123_SUBDOMAIN}',
        f'endpoints[1].hostname: Invalid value: "H": {DNS1123_LABEL}',
        "endpoints[2].addresses: Too many: must have at most 100 items",
    ]),
    # an address's verdict is remembered: the same addresses again, good and bad, at other places
    ("slice-addresses-again", "EndpointSlice", {"metadata": {"name": "web-abc", "namespace": "default"}, "addressType": "IPv4", "endpoints": [
        {"addresses": ["10.1.0.5"]}, {"addresses": ["127.0.0.1"]}, {"addresses": ["10.1.0.5", "127.0.0.1"]}]}, [
        'endpoints[1].addresses[0]: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)',
        'endpoints[2].addresses[1]: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)',
    ]),
    ("endpoints-addresses-again", "Endpoints", {"metadata": {"name": "web", "namespace": "default"}, "subsets": [
        {"addresses": [{"ip": "10.1.0.5"}, {"ip": "169.254.1.1"}], "ports": [{"port": 80}]},
        {"notReadyAddresses": [{"ip": "169.254.1.1"}, {"ip": "10.1.0.5"}], "ports": [{"port": 80}]}]}, [
        'subsets[0].addresses[1].ip: Invalid value: "169.254.1.1": may not be in the link-local range (169.254.0.0/16, fe80::/10)',
        'subsets[1].notReadyAddresses[0].ip: Invalid value: "169.254.1.1": may not be in the link-local range (169.254.0.0/16, fe80::/10)',
    ]),
    ("slice-fqdn", "EndpointSlice", {"metadata": {"name": "web-abc", "namespace": "default"}, "addressType": "FQDN",
                                     "endpoints": [{"addresses": ["db.example.com.", "localhost", "Bad_Host.example"]}]}, [
        'endpoints[0].addresses[1]: Invalid value: "localhost": should be a domain with at least two segments separated by dots',
        f'endpoints[0].addresses[2]: Invalid value: "Bad_Host.example": {DNS1123_SUBDOMAIN}',
    ]),
    ("slice-ports", "EndpointSlice", {"metadata": {"name": "web-abc", "namespace": "default"}, "addressType": "IPv6",
                                      "ports": [{"port": 80}, {"port": 81}, {"name": "Http", "protocol": "ICMP"}]}, [
        'ports[1].name: Duplicate value: ""',
        f'ports[2].name: Invalid value: "Http": {DNS1123_LABEL}',
        'ports[2].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"',
    ]),
    ("slice-too-many-ports", "EndpointSlice", {"metadata": {"name": "web-abc", "namespace": "default"}, "addressType": "IPv4", "ports": [{"port": p} for p in range(1, 102)]}, [
        "ports: Too many: must have at most 100 items",
    ]),
    ("ip-address-valid", "IPAddress", {"metadata": {"name": "10.96.0.10"}, "spec": {"parentRef": {"group": "", "resource": "services", "namespace": "default", "name": "web"}}}, []),
    ("ip-address-name-and-parent", "IPAddress", {"metadata": {"name": "10.96.0.300"}, "spec": {"parentRef": {"group": "Core", "resource": "", "name": ".."}}}, [
        f'metadata.name: Invalid value: "10.96.0.300": {BAD_IP}',
        f'spec.parentRef.group: Invalid value: "Core": {DNS1123_SUBDOMAIN}',
        "spec.parentRef.resource: Required value",
        "spec.parentRef.name: Invalid value: \"..\": may not be '..'",
    ]),
    ("ip-address-parent-required", "IPAddress", {"metadata": {"name": "2001:db8::1"}}, ["spec.parentRef: Required value"]),
    ("service-cidr-valid", "ServiceCIDR", {"metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.96.0.0/16", "fd00::/108"]}}, []),
    ("service-cidr-required", "ServiceCIDR", {"metadata": {"name": "extra"}, "spec": {}}, ["spec.cidrs: Required value: at least one CIDR required"]),
    ("service-cidr-three", "ServiceCIDR", {"metadata": {"name": "extra"}, "spec": {"cidrs": ["10.0.0.0/8", "fd00::/64", "11.0.0.0/8"]}}, [
        'spec.cidrs: Invalid value: {"cidrs":["10.0.0.0/8","fd00::/64","11.0.0.0/8"]}: may only hold up to 2 values',
    ]),
    ("service-cidr-one-per-family", "ServiceCIDR", {"metadata": {"name": "extra"}, "spec": {"cidrs": ["10.0.0.0/8", "192.168.0.0/16"]}}, [
        'spec.cidrs: Invalid value: ["10.0.0.0/8","192.168.0.0/16"]: may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64',
    ]),
    ("service-cidr-invalid", "ServiceCIDR", {"metadata": {"name": "extra"}, "spec": {"cidrs": ["10.0.0.0/33"]}}, [
        f'spec.cidrs[0]: Invalid value: "10.0.0.0/33": {BAD_CIDR}',
    ]),
    ("lease", "Lease", {"metadata": {"name": "kube-scheduler", "namespace": "kube-system"}, "spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1, "preferredHolder": "a"}}, [
        "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
        "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0",
        "spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined",
    ]),
    ("lease-valid", "Lease", {"metadata": {"name": "kube-scheduler", "namespace": "kube-system"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}, []),
]


@pytest.mark.parametrize("kind,manifest,expected", [c[1:] for c in OTHER_CASES], ids=[c[0] for c in OTHER_CASES])
def test_other_kinds(kind, manifest, expected):
    assert causes(kind, manifest) == expected


def rv(obj: dict, version: str = "7") -> dict:
    return with_meta(obj, resourceVersion=version)


UPDATE_CASES = [
    ("slice-address-type-immutable", "EndpointSlice",
     rv({"metadata": {"name": "s", "namespace": "default"}, "addressType": "IPv6"}),
     rv({"metadata": {"name": "s", "namespace": "default"}, "addressType": "IPv4"}),
     ['addressType: Invalid value: "IPv6": field is immutable']),
    ("ip-address-parent-immutable", "IPAddress",
     rv({"metadata": {"name": "10.0.0.1"}, "spec": {"parentRef": {"resource": "services", "name": "b"}}}),
     rv({"metadata": {"name": "10.0.0.1"}, "spec": {"parentRef": {"resource": "services", "name": "a"}}}),
     ['spec.parentRef: Invalid value: {"resource":"services","name":"b"}: field is immutable']),
    ("service-cidr-add-secondary", "ServiceCIDR",
     rv({"metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.96.0.0/16", "fd00::/108"]}}),
     rv({"metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.96.0.0/16"]}}),
     []),
    ("service-cidr-add-same-family", "ServiceCIDR",
     rv({"metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.96.0.0/16", "10.97.0.0/16"]}}),
     rv({"metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.96.0.0/16"]}}),
     ['spec.cidrs: Invalid value: ["10.96.0.0/16","10.97.0.0/16"]: may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64']),
    ("service-cidr-change", "ServiceCIDR",
     rv({"metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.97.0.0/16"]}}),
     rv({"metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.96.0.0/16"]}}),
     ['spec.cidrs[0]: Invalid value: "10.97.0.0/16": field is immutable']),
    ("service-cidr-remove", "ServiceCIDR",
     rv({"metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.96.0.0/16"]}}),
     rv({"metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.96.0.0/16", "fd00::/108"]}}),
     ['spec.cidrs: Invalid value: ["10.96.0.0/16"]: field is immutable']),
    ("node-pod-cidr-immutable", "Node",
     rv({"metadata": {"name": "n"}, "spec": {"podCIDRs": ["10.244.2.0/24"], "providerID": "b"}}),
     rv({"metadata": {"name": "n"}, "spec": {"podCIDRs": ["10.244.1.0/24"], "providerID": "a"}}),
     ['spec.podCIDRs: Forbidden: node updates may not change podCIDR except from "" to valid',
      'spec.providerID: Forbidden: node updates may not change providerID except from "" to valid']),
    ("namespace-name-immutable", "Namespace", rv({"metadata": {"name": "b"}}), rv({"metadata": {"name": "a"}}),
     ['metadata.name: Invalid value: "b": field is immutable']),
    ("lease-renew", "Lease",
     rv({"metadata": {"name": "l", "namespace": "kube-system"}, "spec": {"holderIdentity": "b", "leaseDurationSeconds": 15}}),
     rv({"metadata": {"name": "l", "namespace": "kube-system"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}),
     []),
]


@pytest.mark.parametrize("kind,new,old,expected", [c[1:] for c in UPDATE_CASES], ids=[c[0] for c in UPDATE_CASES])
def test_updates(kind, new, old, expected):
    assert update_causes(kind, new, old) == expected


@pytest.mark.parametrize("deleting,phase,expected", [
    (False, "Active", []),
    (False, "Terminating", ["status.Phase: Invalid value: \"Terminating\": may only be 'Active' if `deletionTimestamp` is empty"]),
    (True, "Active", ["status.Phase: Invalid value: \"Active\": may only be 'Terminating' if `deletionTimestamp` is not empty"]),
], ids=["active", "terminating-without-deletion", "active-while-deleting"])
def test_namespace_status_update(deleting, phase, expected):
    meta = {"name": "a", "resourceVersion": "2"} | ({"deletionTimestamp": "2024-01-01T00:00:00Z"} if deleting else {})
    ns = {"metadata": meta, "status": {"phase": phase}}
    assert [str(e) for e in validate_status_update("Namespace", ns, ns, namespaced=False)] == expected


def test_unknown_kind_is_a_programming_error():
    with pytest.raises(ValueError):
        validate("Widget", {}, namespaced=True)


# ---- garbage in, field errors out --------------------------------------------------------------

KEYS = [
    "metadata", "name", "namespace", "labels", "annotations", "finalizers", "ownerReferences", "managedFields",
    "generateName", "generation", "resourceVersion", "deletionTimestamp", "uid", "spec", "status", "type", "ports",
    "port", "targetPort", "nodePort", "protocol", "clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy",
    "selector", "sessionAffinity", "sessionAffinityConfig", "clientIP", "timeoutSeconds", "externalIPs",
    "externalName", "externalTrafficPolicy", "internalTrafficPolicy", "healthCheckNodePort",
    "loadBalancerSourceRanges", "allocateLoadBalancerNodePorts", "loadBalancerClass", "trafficDistribution",
    "loadBalancer", "ingress", "ip", "ipMode", "hostname", "containers", "initContainers", "image", "env",
    "valueFrom", "fieldRef", "envFrom", "livenessProbe", "readinessProbe", "httpGet", "exec", "command",
    "lifecycle", "preStop", "sleep", "seconds", "volumes", "emptyDir", "tolerations", "dnsConfig", "nameservers",
    "restartPolicy", "dnsPolicy", "hostNetwork", "containerPort", "hostPort", "resources", "limits", "requests",
    "cpu", "memory", "podCIDRs", "taints", "effect", "key", "value", "subsets", "addresses", "notReadyAddresses",
    "nodeName", "addressType", "endpoints", "conditions", "ready", "hints", "forZones", "parentRef", "resource",
    "cidrs", "leaseDurationSeconds", "strategy", "involvedObject", "eventTime", "podIPs", "schedulingGates",
]
SCALARS = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats() | st.sampled_from([
    "", "None", "TCP", "ClusterIP", "LoadBalancer", "NodePort", "ExternalName", "ClientIP", "Local", "IPv4", "IPv6",
    "10.0.0.1", "::1", "10.0.0.0/8", "a", "A_b", "-", "1e3", "500m", "nginx:latest", "kubernetes", "a/b/c",
    "RequireDualStack", "PreferDualStack", "SingleStack", "FQDN", "Always", "\ud800", "a" * 300,
]) | st.text(max_size=12)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), inner, max_size=6),
    max_leaves=40,
)


def _mutations(template: dict):
    """A valid manifest with random subtrees replaced by random JSON."""
    paths = []

    def walk(node, path):
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, path + (k,))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, path + (i,))

    walk(template, ())
    return st.lists(st.tuples(st.sampled_from(paths), JSON), max_size=4).map(lambda edits: _apply(template, edits))


def _apply(template: dict, edits) -> dict:
    obj = copy.deepcopy(template)
    for path, value in edits:
        if not path:
            continue
        node = obj
        try:
            for step in path[:-1]:
                node = node[step]
            node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            pass
    return obj


TEMPLATES = {
    "Service": lb(externalTrafficPolicy="Local", healthCheckNodePort=30999, sessionAffinity="ClientIP", externalIPs=["192.0.2.9"]),
    "Pod": pod(containers=[ctr(ports=[{"containerPort": 80}], env=[{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
                               livenessProbe={"httpGet": {"port": 80}}, lifecycle={"preStop": {"sleep": {"seconds": 1}}})],
               volumes=[{"name": "v"}], tolerations=[{"key": "k"}], dnsConfig={"nameservers": ["1.1.1.1"]}),
    "Node": {"metadata": {"name": "n"}, "spec": {"podCIDRs": ["10.0.0.0/24"], "taints": [{"key": "k", "effect": "NoSchedule"}]}, "status": {"capacity": {"cpu": "1"}}},
    "Namespace": {"metadata": {"name": "a"}, "spec": {"finalizers": ["kubernetes"]}},
    "Endpoints": {"metadata": {"name": "e", "namespace": "d"}, "subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 1}]}]},
    "Event": {"metadata": {"name": "e", "namespace": "d"}, "involvedObject": {"namespace": "d"}, "eventTime": "x"},
    "EndpointSlice": {"metadata": {"name": "s", "namespace": "d"}, "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"], "hints": {"forZones": [{"name": "a"}]}}], "ports": [{"port": 1}]},
    "IPAddress": {"metadata": {"name": "10.0.0.1"}, "spec": {"parentRef": {"resource": "services", "name": "a"}}},
    "ServiceCIDR": {"metadata": {"name": "c"}, "spec": {"cidrs": ["10.0.0.0/8"]}},
    "Lease": {"metadata": {"name": "l", "namespace": "d"}, "spec": {"leaseDurationSeconds": 1, "strategy": "x/y"}},
}


def _never_raises(kind: str, obj, old) -> None:
    apply_defaults(kind, obj)
    apply_defaults(kind, old)
    for errs in (
        validate(kind, obj, namespaced=NAMESPACED[kind]),
        validate_update(kind, obj, old, namespaced=NAMESPACED[kind]),
        validate_status_update(kind, obj, old, namespaced=NAMESPACED[kind]),
    ):
        assert all(isinstance(str(e), str) for e in errs)


# 50 garbage objects per kind and run: drawing these deep recursive values is most of the cost
# (hypothesis itself, about 0.08 s each), 150 made the ten kinds the suite's slowest minutes;
# every run draws new ones, so the runs add up.
@pytest.mark.parametrize("kind", sorted(TEMPLATES))
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_garbage_never_raises(kind, data):
    obj = data.draw(_mutations(TEMPLATES[kind]) | JSON)
    old = data.draw(_mutations(TEMPLATES[kind]) | JSON)
    _never_raises(kind, obj, old)


@pytest.mark.parametrize("bad,shown", [
    ("web²", '"web²"'),           # printable non-ASCII stays as it is (JSON would write \u00b2)
    ("a\tb", '"a\\tb"'),          # Go's named escapes
    ("x\x7f", '"x\\x7f"'),        # other ASCII controls as \x..
    ('say "hi"', '"say \\"hi\\""'),
], ids=["non-ascii", "tab", "del", "quotes"])
def test_a_bad_string_value_is_shown_as_go_quotes_it(bad, shown):
    """field.Error prints a string BadValue with %q (apimachinery field/errors.go ErrorBody):
    strconv.Quote's escapes, not JSON's. The expected texts are Go's, written by hand."""
    messages = causes("Service", {**service(), "metadata": {"name": "web", "namespace": "default", "finalizers": [bad]}})
    assert f"metadata.finalizers[0]: Invalid value: {shown}: name is neither a standard finalizer name nor is it fully qualified" in messages
