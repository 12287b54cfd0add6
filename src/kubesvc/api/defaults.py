"""Server-side defaulting: the fields a kube-apiserver fills in that clients then print.

Upstream fills an object in three stages, and this module keeps them apart because they run
at different moments:

1. **Decode-time defaults** (``apply_defaults``) run on every object the server decodes,
   create and update alike: ``SetDefaults_*`` in ``pkg/apis/core/v1/defaults.go`` (Service,
   Pod/PodSpec/Container/Probe/HTTPGetAction/Volume, Namespace, NodeStatus, Endpoints, Secret
   type, plus the Secret conversion that merges ``stringData`` into ``data``),
   ``pkg/apis/discovery/v1/defaults.go`` (EndpointPort), ``pkg/apis/rbac/v1/defaults.go``
   (binding roleRef and subject apiGroups), plus the declarative ``+default="TCP"`` on
   ContainerPort.protocol. Events, Leases, IPAddresses, ServiceCIDRs, ConfigMaps,
   ServiceAccounts and roles have none. Where Go would serialize an empty struct the JSON form gets the
   empty object too (``status.loadBalancer: {}``, ``spec.securityContext: {}``).
2. **Create-time strategy defaults** (``prepare_for_create``): a registry's
   ``PrepareForCreate`` resets status (Pod: ``Pending`` with its QoS class; Namespace:
   ``Active`` and the ``kubernetes`` finalizer; Service: empty load-balancer status).
   These must not run on update: the namespace controller removes that finalizer on purpose.
3. **Allocation-time Service defaults**, run by the Service registry's begin-create/update
   hooks in this order (``pkg/registry/core/service/storage/storage.go``):
   ``patch_allocated_values`` on update (``patchAllocatedValues``: a PUT that omits what the
   server allocated keeps it), ``normalize_cluster_ips`` (strategy ``NormalizeClusterIPs``:
   keep clusterIP and clusterIPs in step) and ``default_service_ip_families`` (``alloc.go``
   ``initIPFamilyFields``, which needs the cluster's IP families). Then IPs and ports are
   allocated, and only then is the Service validated.

All functions mutate in place and never raise on malformed input: a field of the wrong JSON
type is left alone for validation to report.
"""

from __future__ import annotations

import base64
import re
from decimal import Decimal
from typing import Any

from kubesvc.api import defaults_workloads
from kubesvc.api.errors import FieldError, invalid_value
from kubesvc.api.quantity import parse_quantity
from kubesvc.api.validation import validate_service_cluster_ips
from kubesvc.api.validation_meta import index
from kubesvc.util.ipnet import ip_family

__all__ = [
    "apply_defaults",
    "prepare_for_create",
    "pod_status_defaults",
    "normalize_cluster_ips",
    "patch_allocated_values",
    "default_service_ip_families",
]

DEFAULT_CLIENT_IP_TIMEOUT = 10800
DEFAULT_TERMINATION_GRACE_PERIOD = 30
DEFAULT_VOLUME_MODE = 0o644


def apply_defaults(kind: str, obj: Any) -> None:
    """Decode-time defaulting (``SetDefaults_*``) of ``obj``, a decoded ``kind``, in place."""
    try:
        defaulter = _DEFAULTERS[kind]
    except KeyError:
        raise ValueError(f"no defaulting rules for kind {kind!r}") from None
    if isinstance(obj, dict):
        defaulter(obj)


def prepare_for_create(kind: str, obj: Any) -> None:
    """The defaulting part of the registry strategies' ``PrepareForCreate``."""
    if not isinstance(obj, dict):
        return
    if kind == "Service":
        obj["status"] = {"loadBalancer": {}}
    elif kind == "Pod":
        obj["status"] = pod_status_defaults(obj)
    elif kind == "Namespace":
        obj["status"] = {"phase": "Active"}
        spec = _child(obj, "spec")
        if spec is not None:
            finalizers = spec.get("finalizers")
            if not isinstance(finalizers, list):
                spec["finalizers"] = ["kubernetes"]
            elif "kubernetes" not in finalizers:
                finalizers.append("kubernetes")
    elif kind == "ServiceCIDR":
        obj["status"] = {}


# ---- helpers -----------------------------------------------------------------------------------


def _child(obj: dict, key: str) -> dict | None:
    """``obj[key]`` as a dict, created when absent or null; None when it holds something else."""
    value = obj.get(key)
    if value is None:
        value = obj[key] = {}
    return value if isinstance(value, dict) else None


def _dicts(obj: Any, key: str) -> list[dict]:
    """The dict items of the list ``obj[key]`` (nothing when it is not a list)."""
    items = obj.get(key) if isinstance(obj, dict) else None
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _default(obj: dict, key: str, value: Any) -> None:
    """Go's ``if x == "" { x = value }``: absent, null and the empty string are unset."""
    if obj.get(key) in (None, ""):
        obj[key] = value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ---- Service -----------------------------------------------------------------------------------


def _service(svc: dict) -> None:
    spec = _child(svc, "spec")
    if spec is None:
        return
    _default(spec, "sessionAffinity", "None")
    if spec["sessionAffinity"] == "None":
        spec.pop("sessionAffinityConfig", None)
    elif spec["sessionAffinity"] == "ClientIP" and not _has_client_ip_timeout(spec.get("sessionAffinityConfig")):
        spec["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": DEFAULT_CLIENT_IP_TIMEOUT}}
    _default(spec, "type", "ClusterIP")
    for port in _dicts(spec, "ports"):
        _default(port, "protocol", "TCP")
        if port.get("targetPort") in (None, 0, "") and _is_int(port.get("port")):
            port["targetPort"] = port["port"]
    svc_type = spec["type"]
    externally_accessible = svc_type in ("LoadBalancer", "NodePort") or (svc_type == "ClusterIP" and bool(spec.get("externalIPs")))
    if externally_accessible:
        _default(spec, "externalTrafficPolicy", "Cluster")
    if spec.get("internalTrafficPolicy") is None and svc_type in ("NodePort", "LoadBalancer", "ClusterIP"):
        spec["internalTrafficPolicy"] = "Cluster"
    if svc_type == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts") is None:
        spec["allocateLoadBalancerNodePorts"] = True
    status = _child(svc, "status")
    if status is None:
        return
    load_balancer = _child(status, "loadBalancer")
    if svc_type == "LoadBalancer" and load_balancer is not None:
        for ingress in _dicts(load_balancer, "ingress"):
            if ingress.get("ip") and ingress.get("ipMode") is None:
                ingress["ipMode"] = "VIP"


def _has_client_ip_timeout(config: Any) -> bool:
    client_ip = config.get("clientIP") if isinstance(config, dict) else None
    return isinstance(client_ip, dict) and client_ip.get("timeoutSeconds") is not None


def normalize_cluster_ips(svc: Any, old: Any = None) -> None:
    """NormalizeClusterIPs: old clients send only ``clusterIP``, new ones both fields."""
    spec = svc.get("spec") if isinstance(svc, dict) else None
    if not isinstance(spec, dict):
        return
    ip, ips = spec.get("clusterIP") or "", spec.get("clusterIPs") or []
    if spec.get("clusterIP") == "":
        del spec["clusterIP"]  # omitempty: an empty clusterIP is not stored or shown
    old_spec = old.get("spec") if isinstance(old, dict) else None
    if not isinstance(old_spec, dict):
        if ip and not ips:
            spec["clusterIPs"] = [ip]
        return
    old_ip, old_ips = old_spec.get("clusterIP") or "", old_spec.get("clusterIPs") or []
    if old_ips and not ips and old_ip == ip:
        spec["clusterIPs"] = ips = old_ips  # a patch that simply did not mention clusterIPs
    if old_ip != ip:
        if old_ip and not ip and ips == old_ips:
            spec.pop("clusterIPs", None)  # clearing the singular clears the plural
        if ip and ips == old_ips:
            spec["clusterIPs"] = [ip]


def patch_allocated_values(svc: Any, old: Any) -> None:
    """patchAllocatedValues: a PUT that omits what the server allocated (clusterIP(s),
    nodePorts, healthCheckNodePort) keeps the old values instead of failing validation."""
    spec = svc.get("spec") if isinstance(svc, dict) else None
    old_spec = old.get("spec") if isinstance(old, dict) else None
    if not isinstance(spec, dict) or not isinstance(old_spec, dict):
        return
    types = (spec.get("type"), old_spec.get("type"))
    if "ExternalName" not in types:
        if not spec.get("clusterIP") and old_spec.get("clusterIP"):
            spec["clusterIP"] = old_spec["clusterIP"]
        if not spec.get("clusterIPs") and old_spec.get("clusterIPs"):
            spec["clusterIPs"] = old_spec["clusterIPs"]
    if all(t in ("NodePort", "LoadBalancer") for t in types):
        _patch_node_ports(_dicts(spec, "ports"), _dicts(old_spec, "ports"))
    if all(s.get("type") == "LoadBalancer" and s.get("externalTrafficPolicy") == "Local" for s in (spec, old_spec)):
        if not spec.get("healthCheckNodePort"):
            spec["healthCheckNodePort"] = old_spec.get("healthCheckNodePort")


def _patch_node_ports(ports: list[dict], old_ports: list[dict]) -> None:
    """Refill omitted nodePorts by port name, unless the value is already used elsewhere."""
    used = {p.get("nodePort") for p in ports if p.get("nodePort")} & {p.get("nodePort") for p in old_ports if p.get("nodePort")}
    by_name = {p.get("name", ""): p.get("nodePort") for p in old_ports}
    for port in ports:
        old_value = by_name.get(port.get("name", ""))
        if not port.get("nodePort") and old_value and old_value not in used:
            port["nodePort"] = old_value


def default_service_ip_families(svc: Any, cluster_families: list[str], old: Any = None) -> list[FieldError]:
    """initIPFamilyFields: fill ipFamilyPolicy and ipFamilies for the cluster's families
    (``cluster_families[0]`` is the primary), or return the 422 causes that stop allocation.

    Policy defaults to SingleStack, to RequireDualStack for headless selector-less Services,
    and on update to the old policy. Families come from the given clusterIPs first, then the
    primary family; dual-stack policies gain the other family when the cluster has both.
    ``svc`` must already have gone through ``normalize_cluster_ips``."""
    spec = svc.get("spec") if isinstance(svc, dict) else None
    if not isinstance(spec, dict) or spec.get("type") == "ExternalName":
        return []
    old_spec = old.get("spec") if isinstance(old, dict) and isinstance(old.get("spec"), dict) else None
    if old_spec is not None and unchanged_prefer_dual_stack(spec, old_spec):
        return []
    headless_selectorless = spec.get("clusterIP") == "None" and not spec.get("selector")
    if spec.get("ipFamilyPolicy") is None:
        if old_spec is not None and old_spec.get("ipFamilyPolicy") is not None:
            spec["ipFamilyPolicy"] = old_spec["ipFamilyPolicy"]
        else:
            spec["ipFamilyPolicy"] = "RequireDualStack" if headless_selectorless else "SingleStack"
    if errs := validate_service_cluster_ips(svc):
        return errs
    policy = spec["ipFamilyPolicy"]
    errs = _update_family_prep(spec, old_spec, policy) if old_spec is not None else []
    ips, families = list(spec.get("clusterIPs") or []), list(spec.get("ipFamilies") or [])
    if policy == "SingleStack":
        if len(ips) == 2:
            errs.append(invalid_value("spec.ipFamilyPolicy", policy, "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified"))
        if len(families) == 2:
            errs.append(invalid_value("spec.ipFamilyPolicy", policy, "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"))
    for i, ip in enumerate(ips):
        if ip == "None":
            break
        family = ip_family(ip)
        if i >= len(families):
            if family in cluster_families:
                families.append(family)
            else:
                errs.append(invalid_value(index("spec.clusterIPs", i), ips, f"{family} is not configured on this cluster"))
    if errs:
        return errs
    if headless_selectorless:
        families = families or [cluster_families[0]]
        if len(families) < 2 and policy != "SingleStack":
            families.append(_other_family(families[0]))
        spec["ipFamilies"] = families
        return []
    if policy == "RequireDualStack" and len(cluster_families) < 2:
        errs.append(invalid_value("spec.ipFamilyPolicy", policy, "this cluster is not configured for dual-stack services"))
    errs += [invalid_value(index("spec.ipFamilies", i), f, "not configured on this cluster") for i, f in enumerate(families) if f not in cluster_families]
    if errs:
        return errs
    families = families or [cluster_families[0]]
    if policy != "SingleStack" and len(families) == 1 and len(cluster_families) == 2:
        families.append(_other_family(families[0]))
    spec["ipFamilies"] = families
    return []


def drop_type_dependent_fields(svc: Any, old: Any) -> None:
    """dropTypeDependentFields (upstream service strategy, PrepareForUpdate): after a type
    change, wipe what the new type does not use and the allocator released, but only where
    the user did not also change the field (a changed value must still fail validation)."""
    spec = svc.get("spec") if isinstance(svc, dict) else None
    old_spec = old.get("spec") if isinstance(old, dict) else None
    if not isinstance(spec, dict) or not isinstance(old_spec, dict):
        return
    new_type, old_type = spec.get("type"), old_spec.get("type")
    if old_type != "ExternalName" and new_type == "ExternalName":
        # sameClusterIPs: the singular and the plural both unchanged
        if (spec.get("clusterIP") or "") == (old_spec.get("clusterIP") or "") and \
                (spec.get("clusterIPs") or []) == (old_spec.get("clusterIPs") or []):
            spec.pop("clusterIP", None)
            spec.pop("clusterIPs", None)
        for key in ("ipFamilies", "ipFamilyPolicy"):
            if spec.get(key) == old_spec.get(key):
                spec.pop(key, None)
    node_port_types = ("NodePort", "LoadBalancer")
    if old_type in node_port_types and new_type not in node_port_types:
        # sameNodePorts: ports may be added, removed or changed as long as no net-new
        # nodePort value appears (the old set is a superset of the new one)
        ports, old_ports = _dicts(spec, "ports"), _dicts(old_spec, "ports")
        old_numbers = {p.get("nodePort") for p in old_ports if p.get("nodePort")}
        if all(p.get("nodePort") in old_numbers for p in ports if p.get("nodePort")):
            for port in ports:
                port.pop("nodePort", None)
    if _needs_health_check(old_spec) and not _needs_health_check(spec):
        if spec.get("healthCheckNodePort") == old_spec.get("healthCheckNodePort"):
            spec.pop("healthCheckNodePort", None)
    if old_type == "LoadBalancer" and new_type != "LoadBalancer":
        for key in ("allocateLoadBalancerNodePorts", "loadBalancerClass"):
            if key in spec and spec.get(key) == old_spec.get(key):
                spec.pop(key, None)
        if isinstance(svc.get("status"), dict):
            svc["status"]["loadBalancer"] = {}
    if _externally_accessible(old_spec) and not _externally_accessible(spec):
        if spec.get("externalTrafficPolicy") == old_spec.get("externalTrafficPolicy"):
            spec.pop("externalTrafficPolicy", None)


def _needs_health_check(spec: dict) -> bool:
    return spec.get("type") == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local"


def _externally_accessible(spec: dict) -> bool:
    return spec.get("type") in ("NodePort", "LoadBalancer") or (spec.get("type") == "ClusterIP" and bool(spec.get("externalIPs")))


def _other_family(family: str) -> str:
    return "IPv6" if family == "IPv4" else "IPv4"


def unchanged_prefer_dual_stack(spec: dict, old_spec: dict) -> bool:
    """isMatchingPreferDualStackClusterIPFields: a PreferDualStack Service is not upgraded or
    downgraded just because the cluster's dual-stackness changed."""
    return (
        spec.get("ipFamilyPolicy") == "PreferDualStack"
        and old_spec.get("ipFamilyPolicy") in (None, "PreferDualStack")
        and spec.get("type") == old_spec.get("type")
        and spec.get("type") in ("ClusterIP", "NodePort", "LoadBalancer")
        and (spec.get("clusterIPs") or []) == (old_spec.get("clusterIPs") or [])
        and (spec.get("ipFamilies") or []) == (old_spec.get("ipFamilies") or [])
    )


def _update_family_prep(spec: dict, old_spec: dict, policy: str) -> list[FieldError]:
    """SingleStack with unchanged lists is a clear request to drop the secondary; any other
    policy may not shrink the lists."""
    ips, old_ips = spec.get("clusterIPs") or [], old_spec.get("clusterIPs") or []
    families, old_families = spec.get("ipFamilies") or [], old_spec.get("ipFamilies") or []
    if policy == "SingleStack":
        if ips == old_ips and len(ips) > 1:
            spec["clusterIPs"] = ips[:1]
        if families == old_families and len(families) > 1:
            spec["ipFamilies"] = families[:1]
        return []
    errs = []
    if ips and len(ips) < len(old_ips):
        errs.append(invalid_value("spec.ipFamilyPolicy", policy, "must be 'SingleStack' to release the secondary cluster IP"))
    if families and len(families) < len(old_families):
        errs.append(invalid_value("spec.ipFamilyPolicy", policy, "must be 'SingleStack' to release the secondary IP family"))
    return errs


# ---- Pod ---------------------------------------------------------------------------------------

_CONTAINER_GROUPS = ("containers", "initContainers", "ephemeralContainers")
_SOURCE_DEFAULT_MODES = ("secret", "configMap", "downwardAPI", "projected")
_VOLUME_SOURCE_KEYS = (
    "hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs",
    "iscsi", "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker",
    "downwardAPI", "fc", "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk",
    "photonPersistentDisk", "projected", "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral",
    "image",
)


def _pod(pod: dict) -> None:
    spec = _child(pod, "spec")
    if spec is None:
        return
    for group in ("containers", "initContainers"):
        for ctr in _dicts(spec, group):
            _requests_from_limits(ctr)
    if spec.get("enableServiceLinks") is None:
        spec["enableServiceLinks"] = True
    if spec.get("hostNetwork") is True:
        for group in ("containers", "initContainers"):
            for ctr in _dicts(spec, group):
                for port in _dicts(ctr, "ports"):
                    if not port.get("hostPort") and _is_int(port.get("containerPort")):
                        port["hostPort"] = port["containerPort"]
    _pod_spec(spec)


def _requests_from_limits(ctr: dict) -> None:
    resources = ctr.get("resources")
    limits = resources.get("limits") if isinstance(resources, dict) else None
    if not isinstance(limits, dict) or not limits:
        return
    requests = resources.get("requests")
    if requests is None:
        requests = resources["requests"] = {}
    if isinstance(requests, dict):
        for name, quantity in limits.items():
            requests.setdefault(name, quantity)


def _pod_spec(spec: dict) -> None:
    _default(spec, "dnsPolicy", "ClusterFirst")
    _default(spec, "restartPolicy", "Always")
    if spec.get("securityContext") is None:
        spec["securityContext"] = {}
    if spec.get("terminationGracePeriodSeconds") is None:
        spec["terminationGracePeriodSeconds"] = DEFAULT_TERMINATION_GRACE_PERIOD
    _default(spec, "schedulerName", "default-scheduler")
    for group in _CONTAINER_GROUPS:
        for ctr in _dicts(spec, group):
            _container(ctr)
    for volume in _dicts(spec, "volumes"):
        _volume(volume)


def _container(ctr: dict) -> None:
    if ctr.get("imagePullPolicy") in (None, ""):
        image = ctr.get("image")
        ctr["imagePullPolicy"] = "Always" if isinstance(image, str) and _image_tag(image) == "latest" else "IfNotPresent"
    _default(ctr, "terminationMessagePath", "/dev/termination-log")
    _default(ctr, "terminationMessagePolicy", "File")
    for port in _dicts(ctr, "ports"):
        _default(port, "protocol", "TCP")
    for name in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = ctr.get(name)
        if isinstance(probe, dict):
            _probe(probe)
    lifecycle = ctr.get("lifecycle")
    for hook in ("postStart", "preStop"):
        handler = lifecycle.get(hook) if isinstance(lifecycle, dict) else None
        if isinstance(handler, dict):
            _http_get(handler.get("httpGet"))
    for var in _dicts(ctr, "env"):
        value_from = var.get("valueFrom")
        if isinstance(value_from, dict):
            _field_ref(value_from.get("fieldRef"))


def _probe(probe: dict) -> None:
    for name, value in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1), ("failureThreshold", 3)):
        if probe.get(name) in (None, 0):
            probe[name] = value
    _http_get(probe.get("httpGet"))


def _http_get(action: Any) -> None:
    if isinstance(action, dict):
        _default(action, "path", "/")
        _default(action, "scheme", "HTTP")


def _field_ref(selector: Any) -> None:
    if isinstance(selector, dict):
        _default(selector, "apiVersion", "v1")


def _volume(volume: dict) -> None:
    if all(volume.get(key) is None for key in _VOLUME_SOURCE_KEYS):
        volume["emptyDir"] = {}
    for key in _SOURCE_DEFAULT_MODES:
        source = volume.get(key)
        if isinstance(source, dict) and source.get("defaultMode") is None:
            source["defaultMode"] = DEFAULT_VOLUME_MODE
    host_path = volume.get("hostPath")
    if isinstance(host_path, dict) and host_path.get("type") is None:
        host_path["type"] = ""
    for item in _dicts(volume.get("downwardAPI"), "items"):
        _field_ref(item.get("fieldRef"))
    for source in _dicts(volume.get("projected"), "sources"):
        token = source.get("serviceAccountToken")
        if isinstance(token, dict) and token.get("expirationSeconds") is None:
            token["expirationSeconds"] = 3600
        for item in _dicts(source.get("downwardAPI"), "items"):
            _field_ref(item.get("fieldRef"))


# Docker reference grammar (github.com/distribution/reference), enough to find the tag:
# [domain/]path[:tag][@digest]. A name that does not parse gets IfNotPresent, as upstream.
_DOMAIN = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]*)[a-z0-9]+)*"
_REFERENCE_RE = re.compile(
    rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?"
    r"(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?",
    re.ASCII,
)


def _image_tag(image: str) -> str:
    """parsers.ParseImageName's tag: explicit, or "latest" when neither tag nor digest."""
    match = _REFERENCE_RE.fullmatch(image)
    if match is None:
        return ""
    if match["tag"]:
        return match["tag"]
    return "" if match["digest"] else "latest"


def pod_status_defaults(pod: Any) -> dict:
    """The status a new Pod starts with (pod strategy PrepareForCreate): Pending, its QoS
    class, and the PodScheduled=False condition while scheduling gates remain."""
    spec = pod.get("spec") if isinstance(pod, dict) else None
    spec = spec if isinstance(spec, dict) else {}
    status: dict[str, Any] = {"phase": "Pending", "qosClass": _qos_class(spec)}
    if spec.get("schedulingGates"):
        status["conditions"] = [{
            "type": "PodScheduled",
            "status": "False",
            "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates",
        }]
    return status


def _qos_class(spec: dict) -> str:
    """GetPodQOS (pkg/apis/core/helper/qos): only cpu and memory count."""
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    for group in ("containers", "initContainers"):
        for ctr in _dicts(spec, group):
            resources = ctr.get("resources") if isinstance(ctr.get("resources"), dict) else {}
            _add_positive(requests, resources.get("requests"))
            if not {"cpu", "memory"} <= _add_positive(limits, resources.get("limits")):
                guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and requests.keys() == limits.keys() and all(limits[k] == v for k, v in requests.items()):
        return "Guaranteed"
    return "Burstable"


def _add_positive(totals: dict[str, Decimal], resources: Any) -> set[str]:
    """Add the positive cpu/memory quantities to ``totals``; return the names that were."""
    found = set()
    if isinstance(resources, dict):
        for name in ("cpu", "memory"):
            quantity = parse_quantity(resources.get(name))
            if quantity is not None and quantity > 0:
                totals[name] = totals.get(name, Decimal(0)) + quantity
                found.add(name)
    return found


# ---- the other kinds ---------------------------------------------------------------------------


def _namespace(ns: dict) -> None:
    metadata = _child(ns, "metadata")
    name = metadata.get("name") if metadata is not None else None
    if isinstance(name, str) and name:
        labels = _child(metadata, "labels")
        if labels is not None:
            labels["kubernetes.io/metadata.name"] = name
    status = _child(ns, "status")
    if status is not None:
        _default(status, "phase", "Active")


def _node(node: dict) -> None:
    status = node.get("status")
    if isinstance(status, dict) and status.get("allocatable") is None and status.get("capacity") is not None:
        status["allocatable"] = status["capacity"]


def _endpoints(endpoints: dict) -> None:
    for subset in _dicts(endpoints, "subsets"):
        for port in _dicts(subset, "ports"):
            _default(port, "protocol", "TCP")


def _endpoint_slice(eps: dict) -> None:
    for port in _dicts(eps, "ports"):
        if port.get("name") is None:
            port["name"] = ""
        if port.get("protocol") is None:
            port["protocol"] = "TCP"


def _secret(secret: dict) -> None:
    """``stringData`` is merged into ``data`` on every write and never kept (upstream's
    v1 -> internal conversion, ``Convert_v1_Secret_To_core_Secret``); ``type`` defaults to
    ``Opaque`` (``SetDefaults_Secret``)."""
    string_data = secret.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        data = _child(secret, "data")
        if data is not None:
            for key, value in string_data.items():
                if isinstance(value, str):
                    data[key] = base64.b64encode(value.encode("utf-8", "surrogatepass")).decode("ascii")
    _default(secret, "type", "Opaque")


RBAC_GROUP = "rbac.authorization.k8s.io"


def _role_binding(binding: dict) -> None:
    """pkg/apis/rbac/v1/defaults.go: ``roleRef.apiGroup`` defaults to the RBAC group, and a
    subject's ``apiGroup`` to ``""`` for a ServiceAccount and the RBAC group for a User or Group."""
    ref = binding.get("roleRef")
    if isinstance(ref, dict) and not ref.get("apiGroup"):
        ref["apiGroup"] = RBAC_GROUP
    for subject in _dicts(binding, "subjects"):
        if not subject.get("apiGroup") and subject.get("kind") in ("User", "Group"):
            subject["apiGroup"] = RBAC_GROUP


def _nothing(obj: dict) -> None:
    """Events, Leases, IPAddresses and ServiceCIDRs have no defaulting functions upstream."""


_DEFAULTERS = {
    "Service": _service,
    "Pod": _pod,
    "Node": _node,
    "Namespace": _namespace,
    "Endpoints": _endpoints,
    "EndpointSlice": _endpoint_slice,
    "Event": _nothing,
    "IPAddress": _nothing,
    "ServiceCIDR": _nothing,
    "Lease": _nothing,
    "Secret": _secret,
    "ConfigMap": _nothing,
    "ServiceAccount": _nothing,
    "Role": _nothing,
    "ClusterRole": _nothing,
    "RoleBinding": _role_binding,
    "ClusterRoleBinding": _role_binding,
    "CertificateSigningRequest": _nothing,  # certificates/v1 has no defaulting functions
    "LoadBalancerIPPool": _nothing,
    **defaults_workloads.DEFAULTERS,  # Deployment, ReplicaSet, DaemonSet, ControllerRevision, ReplicationController, Job
}
