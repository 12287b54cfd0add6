"""Defaulting fills in what a real kube-apiserver fills in (api-compat.md G13, control-plane.md 1.6)."""

from __future__ import annotations

import copy

import pytest

from kubesvc.api.defaults import (
    apply_defaults,
    default_service_ip_families,
    normalize_cluster_ips,
    patch_allocated_values,
    pod_status_defaults,
    prepare_for_create,
)
from kubesvc.api.validation import validate_update


def defaulted(kind: str, obj: dict) -> dict:
    obj = copy.deepcopy(obj)
    apply_defaults(kind, obj)
    return obj


# ---- Service -----------------------------------------------------------------------------------


def svc_spec(**spec) -> dict:
    return {"metadata": {"name": "web", "namespace": "default"}, "spec": spec}


SERVICE_CASES = [
    # api-compat.md G13: what kubectl and the Python client print after `create`
    ("clusterip-g13", svc_spec(ports=[{"port": 80}], selector={"app": "web"}), {
        "spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}], "selector": {"app": "web"},
                 "sessionAffinity": "None", "type": "ClusterIP", "internalTrafficPolicy": "Cluster"},
        "status": {"loadBalancer": {}},
    }),
    ("named-target-port-kept", svc_spec(ports=[{"port": 80, "targetPort": "http", "protocol": "UDP"}]), {
        "spec": {"ports": [{"port": 80, "targetPort": "http", "protocol": "UDP"}], "sessionAffinity": "None", "type": "ClusterIP", "internalTrafficPolicy": "Cluster"},
        "status": {"loadBalancer": {}},
    }),
    ("zero-target-port-replaced", svc_spec(ports=[{"port": 53, "targetPort": 0}]), {
        "spec": {"ports": [{"port": 53, "targetPort": 53, "protocol": "TCP"}], "sessionAffinity": "None", "type": "ClusterIP", "internalTrafficPolicy": "Cluster"},
        "status": {"loadBalancer": {}},
    }),
    ("client-ip-timeout", svc_spec(sessionAffinity="ClientIP"), {
        "spec": {"sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}}, "type": "ClusterIP", "internalTrafficPolicy": "Cluster"},
        "status": {"loadBalancer": {}},
    }),
    ("client-ip-timeout-kept", svc_spec(sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}}), {
        "spec": {"sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}, "type": "ClusterIP", "internalTrafficPolicy": "Cluster"},
        "status": {"loadBalancer": {}},
    }),
    ("affinity-none-drops-config", svc_spec(sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}}), {
        "spec": {"sessionAffinity": "None", "type": "ClusterIP", "internalTrafficPolicy": "Cluster"},
        "status": {"loadBalancer": {}},
    }),
    ("node-port", svc_spec(type="NodePort"), {
        "spec": {"type": "NodePort", "sessionAffinity": "None", "externalTrafficPolicy": "Cluster", "internalTrafficPolicy": "Cluster"},
        "status": {"loadBalancer": {}},
    }),
    ("cluster-ip-with-external-ips", svc_spec(externalIPs=["192.0.2.1"]), {
        "spec": {"externalIPs": ["192.0.2.1"], "sessionAffinity": "None", "type": "ClusterIP", "externalTrafficPolicy": "Cluster", "internalTrafficPolicy": "Cluster"},
        "status": {"loadBalancer": {}},
    }),
    ("load-balancer", {**svc_spec(type="LoadBalancer", externalTrafficPolicy="Local"), "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}, {"hostname": "lb.example.com"}]}}}, {
        "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local", "sessionAffinity": "None", "internalTrafficPolicy": "Cluster", "allocateLoadBalancerNodePorts": True},
        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.7", "ipMode": "VIP"}, {"hostname": "lb.example.com"}]}},
    }),
    ("external-name", svc_spec(type="ExternalName", externalName="db.example.com"), {
        "spec": {"type": "ExternalName", "externalName": "db.example.com", "sessionAffinity": "None"},
        "status": {"loadBalancer": {}},
    }),
    ("no-spec-at-all", {"metadata": {"name": "web"}}, {
        "spec": {"sessionAffinity": "None", "type": "ClusterIP", "internalTrafficPolicy": "Cluster"},
        "status": {"loadBalancer": {}},
    }),
]


@pytest.mark.parametrize("manifest,expected", [c[1:] for c in SERVICE_CASES], ids=[c[0] for c in SERVICE_CASES])
def test_service_defaults(manifest, expected):
    out = defaulted("Service", manifest)
    assert {k: out[k] for k in ("spec", "status")} == expected
    assert defaulted("Service", out) == out  # idempotent


# ---- Service IP families (alloc.go initIPFamilyFields, storage_test.go TestCreateInitIPFields) --

V4 = ["IPv4"]
V4V6 = ["IPv4", "IPv6"]


def ip_svc(*, ips=None, policy=None, families=None, headless=False, selector=True, svc_type="ClusterIP") -> dict:
    spec: dict = {"type": svc_type, "ports": [{"port": 80}]}
    if selector:
        spec["selector"] = {"app": "web"}
    if headless:
        spec["clusterIP"] = "None"
    elif ips:
        spec["clusterIP"] = ips[0]
        spec["clusterIPs"] = list(ips)
    if policy:
        spec["ipFamilyPolicy"] = policy
    if families:
        spec["ipFamilies"] = list(families)
    return {"metadata": {"name": "foo", "namespace": "default"}, "spec": spec}


FAMILY_CASES = [
    # single-stack IPv4 cluster
    ("v4-unset", V4, ip_svc(), "SingleStack", ["IPv4"], []),
    ("v4-prefer-dual", V4, ip_svc(policy="PreferDualStack"), "PreferDualStack", ["IPv4"], []),
    ("v4-require-dual", V4, ip_svc(policy="RequireDualStack"), None, None, [
        'spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services',
    ]),
    ("v4-family-v6", V4, ip_svc(families=["IPv6"]), None, None, ['spec.ipFamilies[0]: Invalid value: "IPv6": not configured on this cluster']),
    ("v4-cluster-ip-v6", V4, ip_svc(ips=["2000::1"]), None, None, ['spec.clusterIPs[0]: Invalid value: ["2000::1"]: IPv6 is not configured on this cluster']),
    ("v4-headless", V4, ip_svc(headless=True), "SingleStack", ["IPv4"], []),
    ("v4-headless-selectorless", V4, ip_svc(headless=True, selector=False), "RequireDualStack", ["IPv4", "IPv6"], []),
    # dual-stack IPv4,IPv6 cluster (control-plane.md 1.6 examples)
    ("dual-unset", V4V6, ip_svc(), "SingleStack", ["IPv4"], []),
    ("dual-family-v6", V4V6, ip_svc(families=["IPv6"]), "SingleStack", ["IPv6"], []),
    ("dual-prefer", V4V6, ip_svc(policy="PreferDualStack"), "PreferDualStack", ["IPv4", "IPv6"], []),
    ("dual-cluster-ip-v6", V4V6, ip_svc(ips=["2000::1"]), "SingleStack", ["IPv6"], []),
    # upstream's test expects an error here: the policy defaults to SingleStack, not RequireDualStack
    ("dual-two-ips-policy-unset", V4V6, ip_svc(ips=["10.0.0.1", "2000::1"]), None, None, [
        "spec.ipFamilyPolicy: Invalid value: \"SingleStack\": must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified",
    ]),
    ("dual-two-ips-require", V4V6, ip_svc(ips=["10.0.0.1", "2000::1"], policy="RequireDualStack"), "RequireDualStack", ["IPv4", "IPv6"], []),
    ("dual-families-follow-ips", V4V6, ip_svc(ips=["2000::1", "10.0.0.1"], families=["IPv6"], policy="RequireDualStack"), "RequireDualStack", ["IPv6", "IPv4"], []),
    ("dual-family-ip-mismatch", V4V6, ip_svc(ips=["10.0.0.1"], families=["IPv6", "IPv4"], policy="PreferDualStack"), None, None, [
        'spec.clusterIPs[0]: Invalid value: "10.0.0.1": expected an IPv6 value as indicated by `ipFamilies[0]`',
    ]),
    ("dual-two-families-single-stack", V4V6, ip_svc(families=["IPv4", "IPv6"], policy="SingleStack"), None, None, [
        "spec.ipFamilyPolicy: Invalid value: \"SingleStack\": must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified",
    ]),
    ("dual-headless", V4V6, ip_svc(headless=True), "SingleStack", ["IPv4"], []),
    ("dual-headless-selectorless", V4V6, ip_svc(headless=True, selector=False), "RequireDualStack", ["IPv4", "IPv6"], []),
    ("v6-primary-prefer", ["IPv6", "IPv4"], ip_svc(policy="PreferDualStack"), "PreferDualStack", ["IPv6", "IPv4"], []),
]


@pytest.mark.parametrize("cluster,svc,policy,families,errors", [c[1:] for c in FAMILY_CASES], ids=[c[0] for c in FAMILY_CASES])
def test_ip_families_on_create(cluster, svc, policy, families, errors):
    svc = defaulted("Service", svc)
    normalize_cluster_ips(svc)
    assert [str(e) for e in default_service_ip_families(svc, cluster)] == errors
    if not errors:
        assert (svc["spec"]["ipFamilyPolicy"], svc["spec"]["ipFamilies"]) == (policy, families)


def test_ip_families_leave_external_name_alone():
    svc = defaulted("Service", ip_svc(svc_type="ExternalName", selector=False))
    before = copy.deepcopy(svc)
    assert default_service_ip_families(svc, V4V6) == []
    assert svc == before


def dual(policy="RequireDualStack") -> dict:
    return ip_svc(ips=["10.0.0.1", "2000::1"], families=["IPv4", "IPv6"], policy=policy)


def test_update_inherits_the_old_policy():
    old = defaulted("Service", ip_svc(ips=["10.0.0.1"], families=["IPv4"], policy="RequireDualStack"))
    new = defaulted("Service", ip_svc(ips=["10.0.0.1"], families=["IPv4"]))
    assert default_service_ip_families(new, V4V6, old) == []
    assert (new["spec"]["ipFamilyPolicy"], new["spec"]["ipFamilies"]) == ("RequireDualStack", ["IPv4", "IPv6"])


def test_update_to_single_stack_drops_the_secondary():
    old = defaulted("Service", dual())
    new = defaulted("Service", dual("SingleStack"))
    assert default_service_ip_families(new, V4V6, old) == []
    assert (new["spec"]["clusterIPs"], new["spec"]["ipFamilies"]) == (["10.0.0.1"], ["IPv4"])


def test_update_may_not_shrink_without_single_stack():
    old = defaulted("Service", dual())
    new = defaulted("Service", ip_svc(ips=["10.0.0.1"], families=["IPv4"]))
    assert [str(e) for e in default_service_ip_families(new, V4V6, old)] == [
        "spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": must be 'SingleStack' to release the secondary cluster IP",
        "spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": must be 'SingleStack' to release the secondary IP family",
    ]


def test_prefer_dual_stack_is_not_downgraded_when_the_cluster_changes():
    old = defaulted("Service", dual("PreferDualStack"))
    new = copy.deepcopy(old)
    assert default_service_ip_families(new, V4, old) == []
    assert new == old


NORMALIZE_CASES = [
    ("create-singular-only", {"clusterIP": "10.0.0.1"}, None, {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"]}),
    ("create-headless", {"clusterIP": "None"}, None, {"clusterIP": "None", "clusterIPs": ["None"]}),
    ("create-both-kept", {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.2"]}, None, {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.2"]}),
    ("update-plural-omitted", {"clusterIP": "10.0.0.1"}, {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1", "2000::1"]},
     {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1", "2000::1"]}),
    ("update-singular-cleared", {"clusterIP": "", "clusterIPs": ["10.0.0.1"]}, {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"]}, {}),  # both cleared; an empty clusterIP is omitted (omitempty)
    ("update-singular-changed", {"clusterIP": "10.0.0.2", "clusterIPs": ["10.0.0.1"]}, {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"]},
     {"clusterIP": "10.0.0.2", "clusterIPs": ["10.0.0.2"]}),
]


@pytest.mark.parametrize("spec,old_spec,expected", [c[1:] for c in NORMALIZE_CASES], ids=[c[0] for c in NORMALIZE_CASES])
def test_normalize_cluster_ips(spec, old_spec, expected):
    svc = {"spec": dict(spec)}
    normalize_cluster_ips(svc, None if old_spec is None else {"spec": old_spec})
    assert svc["spec"] == expected


def test_patch_allocated_values_keeps_what_the_server_allocated():
    old = {"spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local", "clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "healthCheckNodePort": 30999,
                    "ports": [{"name": "http", "port": 80, "nodePort": 30080}, {"name": "https", "port": 443, "nodePort": 30443}]}}
    new = {"spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local",
                    "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443, "nodePort": 30080}]}}
    patch_allocated_values(new, old)
    assert new["spec"] == {
        "type": "LoadBalancer", "externalTrafficPolicy": "Local", "clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "healthCheckNodePort": 30999,
        # 30080 is taken by the other port now, so "http" is left for the allocator
        "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443, "nodePort": 30080}],
    }


def test_patch_allocated_values_not_across_external_name():
    new = {"spec": {"type": "ExternalName", "externalName": "x.example"}}
    patch_allocated_values(new, {"spec": {"type": "ClusterIP", "clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"]}})
    assert new["spec"] == {"type": "ExternalName", "externalName": "x.example"}


# ---- Pod ---------------------------------------------------------------------------------------


def test_pod_defaults():
    pod = defaulted("Pod", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "nginx", "ports": [{"containerPort": 80}],
                                                                               "readinessProbe": {"httpGet": {"port": 80}}}]}})
    assert pod["spec"] == {
        "containers": [{
            "name": "app", "image": "nginx", "imagePullPolicy": "Always",
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "ports": [{"containerPort": 80, "protocol": "TCP"}],
            "readinessProbe": {"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"},
                               "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        }],
        "enableServiceLinks": True, "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "securityContext": {},
        "terminationGracePeriodSeconds": 30, "schedulerName": "default-scheduler",
    }
    assert defaulted("Pod", pod) == pod


@pytest.mark.parametrize("image,policy", [
    ("nginx", "Always"),
    ("nginx:latest", "Always"),
    ("nginx:1.27", "IfNotPresent"),
    ("registry.example.com:5000/team/app", "Always"),
    ("registry.example.com:5000/team/app:v2", "IfNotPresent"),
    ("nginx@sha256:" + "a" * 64, "IfNotPresent"),
    ("nginx:latest@sha256:" + "a" * 64, "Always"),
    ("Not A Reference", "IfNotPresent"),
], ids=["no-tag", "latest", "tag", "registry-no-tag", "registry-tag", "digest", "latest-and-digest", "unparsable"])
def test_image_pull_policy(image, policy):
    pod = defaulted("Pod", {"spec": {"containers": [{"name": "a", "image": image}]}})
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == policy


def test_pod_defaults_reach_nested_fields():
    pod = defaulted("Pod", {"spec": {
        "hostNetwork": True,
        "initContainers": [{"name": "init", "image": "busybox:1", "ports": [{"containerPort": 9000}]}],
        "containers": [{
            "name": "app", "image": "app:1", "imagePullPolicy": "Never",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}},
            "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "lifecycle": {"preStop": {"httpGet": {"port": 8080}}},
            "livenessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 5},
        }],
        "volumes": [{"name": "scratch"}, {"name": "conf", "configMap": {"name": "c"}},
                    {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}],
    }})
    spec = pod["spec"]
    app = spec["containers"][0]
    assert app["imagePullPolicy"] == "Never"
    assert app["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
    assert app["env"][0]["valueFrom"]["fieldRef"] == {"fieldPath": "metadata.name", "apiVersion": "v1"}
    assert app["lifecycle"]["preStop"]["httpGet"] == {"port": 8080, "path": "/", "scheme": "HTTP"}
    assert app["livenessProbe"]["periodSeconds"] == 5 and app["livenessProbe"]["timeoutSeconds"] == 1
    assert spec["initContainers"][0]["ports"] == [{"containerPort": 9000, "hostPort": 9000, "protocol": "TCP"}]
    assert spec["volumes"] == [
        {"name": "scratch", "emptyDir": {}},
        {"name": "conf", "configMap": {"name": "c", "defaultMode": 420}},
        {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "expirationSeconds": 3600}}], "defaultMode": 420}},
    ]


QOS_CASES = [
    ("best-effort", [{}], "BestEffort"),
    ("burstable-requests-only", [{"requests": {"cpu": "100m"}}], "Burstable"),
    ("guaranteed-limits-only", [{"limits": {"cpu": "1", "memory": "64Mi"}}], "Guaranteed"),
    ("guaranteed-equal-quantities", [{"limits": {"cpu": "500m", "memory": "1Gi"}, "requests": {"cpu": "0.5", "memory": "1024Mi"}}], "Guaranteed"),
    ("burstable-one-container-without-limits", [{"limits": {"cpu": "1", "memory": "1Gi"}}, {}], "Burstable"),
    ("burstable-requests-below-limits", [{"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "512Mi"}}], "Burstable"),
    ("other-resources-ignored", [{"limits": {"nvidia.com/gpu": "1"}}], "BestEffort"),
]


@pytest.mark.parametrize("resources,qos", [c[1:] for c in QOS_CASES], ids=[c[0] for c in QOS_CASES])
def test_pod_status_defaults(resources, qos):
    pod = defaulted("Pod", {"spec": {"containers": [{"name": f"c{i}", "image": "x", "resources": r} for i, r in enumerate(resources)]}})
    assert pod_status_defaults(pod) == {"phase": "Pending", "qosClass": qos}


def test_pod_status_defaults_with_scheduling_gates():
    status = pod_status_defaults({"spec": {"containers": [{"name": "a", "image": "x"}], "schedulingGates": [{"name": "example.com/wait"}]}})
    assert status["conditions"] == [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                                     "message": "Scheduling is blocked due to non-empty scheduling gates"}]


# ---- the other kinds ---------------------------------------------------------------------------

OTHER_CASES = [
    ("namespace", "Namespace", {"metadata": {"name": "team-a"}},
     {"metadata": {"name": "team-a", "labels": {"kubernetes.io/metadata.name": "team-a"}}, "status": {"phase": "Active"}}),
    ("namespace-keeps-phase", "Namespace", {"metadata": {"name": "a", "labels": {"x": "y"}}, "status": {"phase": "Terminating"}},
     {"metadata": {"name": "a", "labels": {"x": "y", "kubernetes.io/metadata.name": "a"}}, "status": {"phase": "Terminating"}}),
    ("node-allocatable", "Node", {"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "4"}}},
     {"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}}}),
    ("endpoints-protocol", "Endpoints", {"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}]},
     {"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]}]}),
    ("endpointslice-ports", "EndpointSlice", {"addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {}}], "ports": [{"port": 80}]},
     {"addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {}}], "ports": [{"port": 80, "name": "", "protocol": "TCP"}]}),
    ("event-untouched", "Event", {"metadata": {"name": "e"}, "reason": "x"}, {"metadata": {"name": "e"}, "reason": "x"}),
    ("lease-untouched", "Lease", {"metadata": {"name": "l"}, "spec": {}}, {"metadata": {"name": "l"}, "spec": {}}),
    ("ipaddress-untouched", "IPAddress", {"metadata": {"name": "10.0.0.1"}}, {"metadata": {"name": "10.0.0.1"}}),
    ("servicecidr-untouched", "ServiceCIDR", {"spec": {"cidrs": ["10.0.0.0/8"]}}, {"spec": {"cidrs": ["10.0.0.0/8"]}}),
]


@pytest.mark.parametrize("kind,manifest,expected", [c[1:] for c in OTHER_CASES], ids=[c[0] for c in OTHER_CASES])
def test_other_kind_defaults(kind, manifest, expected):
    assert defaulted(kind, manifest) == expected


PREPARE_CASES = [
    ("namespace-gets-kubernetes-finalizer", "Namespace", {"metadata": {"name": "a"}, "status": {"phase": "Terminating"}},
     {"metadata": {"name": "a"}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}),
    ("namespace-keeps-other-finalizers", "Namespace", {"metadata": {"name": "a"}, "spec": {"finalizers": ["example.com/x"]}},
     {"metadata": {"name": "a"}, "spec": {"finalizers": ["example.com/x", "kubernetes"]}, "status": {"phase": "Active"}}),
    ("service-status-reset", "Service", {"spec": {}, "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}},
     {"spec": {}, "status": {"loadBalancer": {}}}),
    ("pod-status-reset", "Pod", {"spec": {"containers": [{"name": "a", "image": "x"}]}, "status": {"phase": "Running"}},
     {"spec": {"containers": [{"name": "a", "image": "x"}]}, "status": {"phase": "Pending", "qosClass": "BestEffort"}}),
    ("service-cidr-status-reset", "ServiceCIDR", {"spec": {"cidrs": ["10.0.0.0/8"]}, "status": {"conditions": []}},
     {"spec": {"cidrs": ["10.0.0.0/8"]}, "status": {}}),
    ("lease-untouched", "Lease", {"spec": {}}, {"spec": {}}),
]


@pytest.mark.parametrize("kind,manifest,expected", [c[1:] for c in PREPARE_CASES], ids=[c[0] for c in PREPARE_CASES])
def test_prepare_for_create(kind, manifest, expected):
    obj = copy.deepcopy(manifest)
    prepare_for_create(kind, obj)
    assert obj == expected


@pytest.mark.parametrize("kind,obj", [
    ("Service", {"spec": {"ports": "80", "type": 5, "sessionAffinity": ["x"]}, "status": "up"}),
    ("Pod", {"spec": {"containers": [{"image": 7, "ports": [1], "resources": {"limits": {"cpu": "lots"}}}], "volumes": "none"}}),
    ("Namespace", {"metadata": {"name": 3, "labels": []}, "status": []}),
    ("Node", {"status": {"capacity": {"cpu": "1"}, "allocatable": []}}),
    ("Service", []),
], ids=["service", "pod", "namespace", "node", "not-an-object"])
def test_garbage_is_left_for_validation(kind, obj):
    apply_defaults(kind, obj)  # must not raise
    prepare_for_create(kind, obj)


def test_unknown_kind_is_a_programming_error():
    with pytest.raises(ValueError):
        apply_defaults("Widget", {})


def test_g13_changed_cluster_ip_on_update():
    """api-compat.md G13: a re-applied manifest with a different clusterIP and no clusterIPs is
    refused with upstream's message, after the registry's update-time Service steps."""
    old = defaulted("Service", {"metadata": {"name": "web", "namespace": "default", "resourceVersion": "4"},
                                "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}}})
    normalize_cluster_ips(old)
    old["spec"].update(clusterIP="10.0.0.10", clusterIPs=["10.0.0.10"])
    assert default_service_ip_families(old, V4) == []
    new = defaulted("Service", {"metadata": {"name": "web", "namespace": "default", "resourceVersion": "4"},
                                "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}, "clusterIP": "10.0.0.11"}})
    patch_allocated_values(new, old)
    normalize_cluster_ips(new, old)
    assert default_service_ip_families(new, V4, old) == []
    # Go prints the value as []string{"10.0.0.11"}; errors.format_value prints JSON
    assert [str(e) for e in validate_update("Service", new, old, namespaced=True)] == [
        'spec.clusterIPs[0]: Invalid value: ["10.0.0.11"]: may not change once set',
    ]
