"""API validation for the served kinds: upstream's rules and upstream's words.

A kube-apiserver answers a bad write with 422 Invalid and one cause per broken rule, for
example ``spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive``.
kubectl prints those causes verbatim and scripts grep them, so every rule here follows a
named upstream function with its message copied exactly (Kubernetes 1.32):

* Service, Pod, Node, Namespace, Endpoints: ``pkg/apis/core/validation/validation.go``
  (``ValidateService`` and friends, ``ValidatePodCreate``/``ValidatePodSpec``,
  ``ValidateNode``, ``ValidateNamespace``, ``ValidateEndpoints``).
* Event (core/v1): ``pkg/apis/core/validation/events.go`` ``legacyValidateEvent``, followed,
  as the generic registry does for every kind, by the path-segment ObjectMeta check of
  ``rest.BeforeCreate``.
* EndpointSlice: ``pkg/apis/discovery/validation/validation.go``.
* IPAddress, ServiceCIDR: ``pkg/apis/networking/validation/validation.go``.
* Lease: ``pkg/apis/coordination/validation/validation.go``.
* Secret, ConfigMap, ServiceAccount: ``ValidateSecret`` and friends, in ``validation_config``.
* Role, ClusterRole, RoleBinding, ClusterRoleBinding: ``pkg/apis/rbac/validation/validation.go``,
  in ``validation_rbac``.

Inputs are *defaulted* objects (``kubesvc.api.defaults``), as upstream validates after
defaulting. For Services the registry also allocates before it validates (upstream's
``BeginCreate`` hook runs before ``BeforeCreate``): clusterIPs, ipFamilies and the
healthCheckNodePort are expected to be filled in, see ``defaults.default_service_ip_families``.

Each function returns the list of field errors; ``errors.invalid`` turns them into the 422.
Where Go renders a bad value with ``%#v`` (lists, structs) the value is passed as plain JSON
data and ``errors.format_value`` decides how it prints.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from kubesvc.api import validation_certificates, validation_config, validation_loadbalancer, validation_rbac
from kubesvc.api import validation_workloads as workloads
from kubesvc.api.errors import FieldError, duplicate, forbidden_field, invalid_value, not_supported, required, too_many
from kubesvc.api.validation_meta import (
    GO_NIL,
    Errs,
    Meta,
    child,
    each_invalid,
    elements,
    has_type,
    index,
    is_config_map_key,
    is_dns1123_subdomain,
    is_fully_qualified_domain_name,
    is_http_header_name,
    is_qualified_name,
    is_relaxed_env_var_name,
    is_valid_cidr,
    is_valid_ip,
    is_valid_ipv4_address,
    is_valid_ipv6_address,
    is_valid_label_value,
    is_valid_path_segment_name,
    is_valid_port_name,
    is_valid_port_num,
    name_is_dns1035_label,
    name_is_dns_label,
    name_is_dns_subdomain,
    nbytes,
    path_segment_name,
    read,
    read_int,
    read_list,
    read_map,
    read_str,
    read_str_list,
    read_str_map,
    validate_dns1123_label,
    validate_dns1123_subdomain,
    validate_kube_finalizer_name,
    validate_labels,
    validate_nonnegative,
    validate_object_meta,
    validate_object_meta_update,
    validate_qualified_name,
    validate_non_special_ip,
)
from kubesvc.util.ipnet import cidr_family, ip_family, is_dual_stack, parse_cidr_sloppy, parse_ip_sloppy

__all__ = ["validate", "validate_update", "validate_status_update", "validate_service_cluster_ips", "validate_service",
           "validate_service_metadata"]


def validate(kind: str, obj: Any, *, namespaced: bool) -> list[FieldError]:
    """Create-time validation of a defaulted object of ``kind``."""
    return _kind(kind).create(obj, namespaced)


def validate_update(kind: str, new: Any, old: Any, *, namespaced: bool) -> list[FieldError]:
    """Update (PUT/PATCH of the main resource): the create rules on ``new`` plus what may not
    change relative to ``old``."""
    return _kind(kind).update(new, old, namespaced)


def validate_status_update(kind: str, new: Any, old: Any, *, namespaced: bool) -> list[FieldError]:
    """Update through the ``/status`` subresource: metadata rules plus the kind's status rules."""
    return _kind(kind).status_update(new, old, namespaced)


# ---- small shared pieces -----------------------------------------------------------------------

_PROTOCOLS = ["SCTP", "TCP", "UDP"]  # sets.List(supportedPortProtocols): sorted


def _int_or_string(errs: Errs, obj: Any, name: str, path: str) -> int | str:
    """An IntOrString field; absent is the Go zero value, integer 0."""
    value = obj.get(name) if isinstance(obj, dict) else None
    if value is None:
        return 0
    if has_type(value, int) or isinstance(value, str):
        return value
    errs.append(FieldError("FieldValueTypeInvalid", child(path, name), "must be of type integer or string", value))
    return 0


def _validate_port_num_or_name(port: int | str, path: str) -> Errs:
    if isinstance(port, str):
        return each_invalid(path, port, is_valid_port_name(port))
    return each_invalid(path, port, is_valid_port_num(port))


def _required_or_supported(value: str, valid: list[str], path: str) -> Errs:
    if not value:
        return [required(path)]
    if value not in valid:
        return [not_supported(path, value, valid)]
    return []


def _ptr(value: Any) -> Any:
    """How Go renders a pointer field's value: the pointee, or "null" when nil."""
    return GO_NIL if value is None else value


# ---- Service (ValidateService, ValidateServiceUpdate, ValidateServiceStatusUpdate) -------------

_SESSION_AFFINITIES = ["ClientIP", "None"]
_SERVICE_TYPES = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]
_TRAFFIC_POLICIES = ["Cluster", "Local"]
_IP_FAMILIES = ["IPv4", "IPv6"]
_IP_FAMILY_POLICIES = ["PreferDualStack", "RequireDualStack", "SingleStack"]
_LB_IP_MODES = ["Proxy", "VIP"]
_MAX_AFFINITY_TIMEOUT = 86400
_ANNOTATION_TOPOLOGY_HINTS = "service.kubernetes.io/topology-aware-hints"
_ANNOTATION_TOPOLOGY_MODE = "service.kubernetes.io/topology-mode"
_ANNOTATION_LB_SOURCE_RANGES = "service.beta.kubernetes.io/load-balancer-source-ranges"


class _Port:
    def __init__(self, errs: Errs, port: dict, path: str):
        self.path = path
        self.name = read_str(errs, port, "name", path)
        self.protocol = read_str(errs, port, "protocol", path)
        self.port = read_int(errs, port, "port", path, 0)
        self.target_port = _int_or_string(errs, port, "targetPort", path)
        self.node_port = read_int(errs, port, "nodePort", path, 0)
        self.app_protocol = read(errs, port, "appProtocol", path, str)


class _ClusterIPFields:
    """The ServiceSpec fields ``_cluster_ips_related`` reads, and only those: allocation runs
    that check on every create and update, before validation reads everything else."""

    def __init__(self, errs: Errs, obj: Any):
        spec = self._spec = read_map(errs, obj, "spec", "")
        p = "spec"
        self.type = read_str(errs, spec, "type", p)
        self.cluster_ip = read_str(errs, spec, "clusterIP", p)
        self.cluster_ips = read_str_list(errs, spec, "clusterIPs", p)
        self.ip_families = read_str_list(errs, spec, "ipFamilies", p)
        self.ip_family_policy = read(errs, spec, "ipFamilyPolicy", p, str)

    @property
    def headless(self) -> bool:
        return self.cluster_ips == ["None"]


class _Service(_ClusterIPFields):
    """The ServiceSpec fields validation reads; nil pointers stay None."""

    def __init__(self, errs: Errs, obj: Any):
        super().__init__(errs, obj)
        spec, p = self._spec, "spec"
        self.ports_given = bool(read_list([], spec, "ports", p))
        self.ports = [_Port(errs, port, index("spec.ports", i)) for i, port in elements(errs, read_list(errs, spec, "ports", p), "spec.ports", dict)]
        self.selector = read_str_map(errs, spec, "selector", p)
        self.session_affinity = read_str(errs, spec, "sessionAffinity", p)
        self.session_affinity_config = read(errs, spec, "sessionAffinityConfig", p, dict)
        self.external_ips = read_str_list(errs, spec, "externalIPs", p)
        self.external_name = read_str(errs, spec, "externalName", p)
        self.external_traffic_policy = read_str(errs, spec, "externalTrafficPolicy", p)
        self.internal_traffic_policy = read(errs, spec, "internalTrafficPolicy", p, str)
        self.health_check_node_port = read_int(errs, spec, "healthCheckNodePort", p, 0)
        self.lb_source_ranges = read_str_list(errs, spec, "loadBalancerSourceRanges", p)
        self.allocate_lb_node_ports = read(errs, spec, "allocateLoadBalancerNodePorts", p, bool)
        self.lb_class = read(errs, spec, "loadBalancerClass", p, str)
        self.traffic_distribution = read(errs, spec, "trafficDistribution", p, str)
        # the annotations alone (validate_object_meta reports their errors), not all of ObjectMeta again
        self.annotations = read_str_map([], read_map([], obj, "metadata", ""), "annotations", "metadata")

    @property
    def externally_accessible(self) -> bool:
        return self.type in ("LoadBalancer", "NodePort") or (self.type == "ClusterIP" and bool(self.external_ips))

    @property
    def needs_health_check(self) -> bool:
        return self.type == "LoadBalancer" and self.external_traffic_policy == "Local"


def validate_service_metadata(obj: Any, namespaced: bool = True) -> Errs:
    """A Service's ObjectMeta rules alone: what allocation checks before it takes anything."""
    return validate_object_meta(obj, namespaced=namespaced, name_fn=name_is_dns1035_label)


def validate_service(obj: Any, *, namespaced: bool = True, metadata_valid: bool = False) -> Errs:
    """``validate("Service", ...)``; ``metadata_valid`` when the caller has just found the
    object's metadata valid with :func:`validate_service_metadata` (and not changed it since):
    a create checks it before allocating, and it is not checked twice."""
    return _validate_service(obj, namespaced, metadata_valid=metadata_valid)


def _validate_service(obj: Any, namespaced: bool, *, metadata_valid: bool = False) -> Errs:
    errs = [] if metadata_valid else validate_service_metadata(obj, namespaced)
    svc = _Service(errs, obj)
    errs += _topology_annotations(svc.annotations)
    if not svc.ports_given and not svc.headless and svc.type != "ExternalName":
        errs.append(required("spec.ports"))
    errs += _type_specific(svc)
    names: set[str] = set()
    for port in svc.ports:
        errs += _validate_service_port(port, len(svc.ports) > 1, names)
    errs += validate_labels(svc.selector, "spec.selector")
    errs += _session_affinity(svc)
    errs += _cluster_ips_related(svc)
    for i, ip in enumerate(svc.external_ips):
        errs += is_valid_ip(index("spec.externalIPs", i), ip) or validate_non_special_ip(ip, index("spec.externalIPs", i))
    errs += _required_or_supported(svc.type, _SERVICE_TYPES, "spec.type")
    if svc.type == "ClusterIP":
        errs += [forbidden_field(child(p.path, "nodePort"), "may not be used when `type` is 'ClusterIP'") for p in svc.ports if p.node_port != 0]
    errs += _duplicate_ports(svc.ports)
    errs += _source_ranges(svc)
    if svc.allocate_lb_node_ports is not None and svc.type != "LoadBalancer":
        errs.append(forbidden_field("spec.allocateLoadBalancerNodePorts", "may only be used when `type` is 'LoadBalancer'"))
    if svc.type == "LoadBalancer" and svc.allocate_lb_node_ports is None:
        errs.append(required("allocateLoadBalancerNodePorts"))  # sic: upstream's path has no "spec."
    errs += _load_balancer_class(svc)
    errs += _external_traffic_policy(svc)
    errs += _internal_traffic_policy(svc)
    errs += traffic_distribution_errors(svc.traffic_distribution)
    return errs


TRAFFIC_DISTRIBUTION_PATH = "spec.trafficDistribution"


def traffic_distribution_errors(value: str | None, *, prefer_same: bool = True) -> Errs:
    """``validateServiceTrafficDistribution``: ``PreferClose`` always; its newer spellings
    ``PreferSameZone`` and ``PreferSameNode`` only while the ``PreferSameTrafficDistribution``
    feature gate is on (alpha, off, in 1.33; beta, on, in 1.34; locked on in 1.35), otherwise
    NotSupported listing ``PreferClose`` alone. ``validate`` checks with the gate on; an
    apiserver running with it off checks again with ``prefer_same=False`` (ServiceStrategy)."""
    if value is None:
        return []
    supported = _TRAFFIC_DISTRIBUTIONS if prefer_same else _TRAFFIC_DISTRIBUTIONS_GATE_OFF
    if value not in supported:
        return [not_supported(TRAFFIC_DISTRIBUTION_PATH, value, sorted(supported))]
    return []


# 1.34 (PreferSameTrafficDistribution beta, on): PreferClose and its newer spellings
_TRAFFIC_DISTRIBUTIONS = frozenset({"PreferClose", "PreferSameZone", "PreferSameNode"})
_TRAFFIC_DISTRIBUTIONS_GATE_OFF = frozenset({"PreferClose"})


def _topology_annotations(annotations: dict[str, str]) -> Errs:
    hints, mode = annotations.get(_ANNOTATION_TOPOLOGY_HINTS), annotations.get(_ANNOTATION_TOPOLOGY_MODE)
    if hints is not None and mode is not None and hints != mode:
        return [invalid_value(index("metadata.annotations", _ANNOTATION_TOPOLOGY_MODE), mode, f"must match annotations[{_ANNOTATION_TOPOLOGY_HINTS}] when both are specified")]
    return []


def _type_specific(svc: _Service) -> Errs:
    if svc.type in ("LoadBalancer", "NodePort") and svc.headless:
        return [invalid_value("spec.clusterIPs[0]", "None", f"may not be set to 'None' for {svc.type} services")]
    if svc.type != "ExternalName":
        return []
    errs = []
    if svc.cluster_ips:
        errs.append(forbidden_field("spec.clusterIPs", "may not be set for ExternalName services"))
    if svc.ip_families:
        errs.append(forbidden_field("spec.ipFamilies", "may not be set for ExternalName services"))
    if svc.ip_family_policy is not None:
        errs.append(forbidden_field("spec.ipFamilyPolicy", "may not be set for ExternalName services"))
    cname = svc.external_name.removesuffix(".")  # a trailing dot marks the name fully qualified
    errs += validate_dns1123_subdomain(cname, "spec.externalName") if cname else [required("spec.externalName")]
    return errs


def _validate_service_port(port: _Port, require_name: bool, names: set[str]) -> Errs:
    errs: Errs = []
    name_path = child(port.path, "name")
    if require_name and not port.name:
        errs.append(required(name_path))
    elif port.name:
        errs += validate_dns1123_label(port.name, name_path)
        if port.name in names:
            errs.append(duplicate(name_path, port.name))
        names.add(port.name)
    errs += each_invalid(child(port.path, "port"), port.port, is_valid_port_num(port.port))
    errs += _required_or_supported(port.protocol, _PROTOCOLS, child(port.path, "protocol"))
    errs += _validate_port_num_or_name(port.target_port, child(port.path, "targetPort"))
    if port.app_protocol is not None:
        errs += validate_qualified_name(port.app_protocol, child(port.path, "appProtocol"))
    return errs


def _session_affinity(svc: _Service) -> Errs:
    errs = _required_or_supported(svc.session_affinity, _SESSION_AFFINITIES, "spec.sessionAffinity")
    if svc.session_affinity == "ClientIP":
        errs += _client_ip_config(svc.session_affinity_config)
    elif svc.session_affinity == "None" and svc.session_affinity_config is not None:
        errs.append(forbidden_field("spec.sessionAffinityConfig", "must not be set when session affinity is None"))
    return errs


def _client_ip_config(config: dict | None) -> Errs:
    why = "when session affinity type is ClientIP"
    path = "spec.sessionAffinityConfig"
    if config is None:
        return [required(path, why)]
    errs: Errs = []
    client_ip = read(errs, config, "clientIP", path, dict)
    if client_ip is None:
        return errs + [required(child(path, "clientIP"), why)]
    timeout = read_int(errs, client_ip, "timeoutSeconds", child(path, "clientIP"))
    timeout_path = child(path, "clientIP.timeoutSeconds")
    if timeout is None:
        return errs + [required(timeout_path, why)]
    if timeout <= 0 or timeout > _MAX_AFFINITY_TIMEOUT:
        errs.append(invalid_value(timeout_path, timeout, f"must be greater than 0 and less than {_MAX_AFFINITY_TIMEOUT}"))
    return errs


def validate_service_cluster_ips(obj: Any) -> list[FieldError]:
    """ValidateServiceClusterIPsRelatedFields: clusterIP/clusterIPs agree, ipFamilies and
    ipFamilyPolicy hold known values, at most one IP per family. Exported because allocation
    runs it before choosing families (upstream does the same); wrongly typed fields read as
    absent here and are reported by ``validate``."""
    return _cluster_ips_related(_ClusterIPFields([], obj))


def _cluster_ips_related(svc: _ClusterIPFields) -> Errs:
    if svc.type == "ExternalName":
        return []
    errs: Errs = []
    ips, families = svc.cluster_ips, svc.ip_families
    if svc.cluster_ip:
        if not ips:
            errs.append(required("spec.clusterIPs"))
        elif ips[0] != svc.cluster_ip:
            errs.append(invalid_value("spec.clusterIPs", ips, "first value must match `clusterIP`"))
    elif ips:
        errs.append(invalid_value("spec.clusterIPs", ips, "must be empty when `clusterIP` is not specified"))
    seen: set[str] = set()
    for i, family in enumerate(families):
        if family not in _IP_FAMILIES:
            errs.append(not_supported(index("spec.ipFamilies", i), family, _IP_FAMILIES))
        if family in seen:
            errs.append(duplicate(index("spec.ipFamilies", i), family))
        seen.add(family)
    if svc.ip_family_policy is not None and svc.ip_family_policy not in _IP_FAMILY_POLICIES:
        errs.append(not_supported("spec.ipFamilyPolicy", svc.ip_family_policy, _IP_FAMILY_POLICIES))
    invalid_ips = False
    for i, ip in enumerate(ips):
        if i == 0 and ip == "None":
            if len(ips) > 1:
                invalid_ips = True
                errs.append(invalid_value("spec.clusterIPs", ips, "'None' must be the first and only value"))
            continue
        ip_errs = is_valid_ip(index("spec.clusterIPs", i), ip)
        invalid_ips = invalid_ips or bool(ip_errs)
        errs += ip_errs
    if len(ips) > 2:
        errs.append(invalid_value("spec.clusterIPs", ips, "may only hold up to 2 values"))
    if invalid_ips:
        return errs  # further checks would only repeat the bad IPs
    if len(ips) > 1 and not is_dual_stack([ip_family(ip) for ip in ips]):
        errs.append(invalid_value("spec.clusterIPs", ips, "may specify no more than one IP for each IP family"))
    if not svc.headless:
        for i, (ip, family) in enumerate(zip(ips, families)):
            if family == "IPv4" and ip_family(ip) == "IPv6":
                errs.append(invalid_value(index("spec.clusterIPs", i), ip, f"expected an IPv4 value as indicated by `ipFamilies[{i}]`"))
            if family == "IPv6" and ip_family(ip) != "IPv6":
                errs.append(invalid_value(index("spec.clusterIPs", i), ip, f"expected an IPv6 value as indicated by `ipFamilies[{i}]`"))
    return errs


def _duplicate_ports(ports: list[_Port]) -> Errs:
    """(protocol, nodePort) and (protocol, port) must each be unique."""
    errs: Errs = []
    node_ports: set[tuple[str, int]] = set()
    for p in ports:
        if p.node_port == 0:
            continue
        if (p.protocol, p.node_port) in node_ports:
            errs.append(duplicate(child(p.path, "nodePort"), p.node_port))
        node_ports.add((p.protocol, p.node_port))
    service_ports: set[tuple[str, int]] = set()
    for p in ports:
        if (p.protocol, p.port) in service_ports:
            errs.append(duplicate(p.path, {"protocol": p.protocol, "port": p.port}))
        service_ports.add((p.protocol, p.port))
    return errs


def _source_ranges(svc: _Service) -> Errs:
    lb_only = "may only be used when `type` is 'LoadBalancer'"
    errs: Errs = []
    if svc.lb_source_ranges:
        path = "spec.LoadBalancerSourceRanges"  # sic: upstream's capital L
        if svc.type != "LoadBalancer":
            errs.append(forbidden_field(path, lb_only))
        for i, value in enumerate(svc.lb_source_ranges):
            errs += is_valid_cidr(index(path, i), value.strip())  # space padding tolerated
    elif _ANNOTATION_LB_SOURCE_RANGES in svc.annotations:
        path = index("metadata.annotations", _ANNOTATION_LB_SOURCE_RANGES)
        if svc.type != "LoadBalancer":
            errs.append(forbidden_field(path, lb_only))
        value = svc.annotations[_ANNOTATION_LB_SOURCE_RANGES].strip()
        if value:
            for cidr in value.split(","):
                errs += is_valid_cidr(path, cidr.strip())
    return errs


def _load_balancer_class(svc: _Service) -> Errs:
    if svc.lb_class is None:
        return []
    if svc.type == "LoadBalancer":
        return validate_qualified_name(svc.lb_class, "spec.loadBalancerClass")
    return [forbidden_field("spec.loadBalancerClass", "may only be used when `type` is 'LoadBalancer'")]


def _external_traffic_policy(svc: _Service) -> Errs:
    errs: Errs = []
    policy = svc.external_traffic_policy
    if not svc.externally_accessible:
        if policy:
            errs.append(invalid_value("spec.externalTrafficPolicy", policy, "may only be set for externally-accessible services"))
    else:
        errs += _required_or_supported(policy, _TRAFFIC_POLICIES, "spec.externalTrafficPolicy")
    hcnp = svc.health_check_node_port
    if not svc.needs_health_check:
        if hcnp != 0:
            errs.append(invalid_value("spec.healthCheckNodePort", hcnp, "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"))
    elif hcnp == 0:
        errs.append(required("spec.healthCheckNodePort"))
    else:
        errs += each_invalid("spec.healthCheckNodePort", hcnp, is_valid_port_num(hcnp))
    return errs


def _internal_traffic_policy(svc: _Service) -> Errs:
    # not forbidden for ExternalName: upstream never checked it and kept stored objects valid
    if svc.internal_traffic_policy is None:
        return [required("spec.internalTrafficPolicy")] if svc.type in ("NodePort", "LoadBalancer", "ClusterIP") else []
    if svc.internal_traffic_policy not in _TRAFFIC_POLICIES:
        return [not_supported("spec.internalTrafficPolicy", svc.internal_traffic_policy, _TRAFFIC_POLICIES)]
    return []


def _validate_service_update(new: Any, old: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta_update(new, old)
    after, before = _Service([], new), _Service([], old)
    errs += _cluster_ips_upgrade_downgrade(after, before)
    errs += _ip_families_upgrade_downgrade(after, before)
    if after.type == before.type == "LoadBalancer" and after.lb_class != before.lb_class:
        errs.append(invalid_value("spec.loadBalancerClass", _ptr(after.lb_class), "may not change once set"))
    if after.needs_health_check and before.needs_health_check and after.health_check_node_port != before.health_check_node_port:
        errs.append(forbidden_field("spec.healthCheckNodePort", "field is immutable"))
    return errs + _validate_service(new, namespaced)


def _cluster_ips_upgrade_downgrade(after: _Service, before: _Service) -> Errs:
    """Primary clusterIP never changes; a secondary may be added, or released with SingleStack
    (validateUpgradeDowngradeClusterIPs). ExternalName transitions are exempt."""
    if "ExternalName" in (after.type, before.type) or (after.headless and before.headless):
        return []
    new, old = after.cluster_ips, before.cluster_ips
    errs: Errs = []
    if len(old) == len(new):
        errs += [invalid_value(index("spec.clusterIPs", i), new, "may not change once set") for i, ip in enumerate(old) if ip != new[i]]
    elif len(old) > len(new):
        if not new:
            errs.append(invalid_value("spec.clusterIPs[0]", new, "primary clusterIP can not be unset"))
        if old and new and new[0] != old[0]:
            errs.append(invalid_value("spec.clusterIPs[0]", new, "may not change once set"))
        if len(new) == 1 and after.ip_family_policy != "SingleStack":
            errs.append(invalid_value("spec.ipFamilyPolicy", _ptr(after.ip_family_policy), "must be set to 'SingleStack' when releasing the secondary clusterIP"))
    elif old and new[0] != old[0]:
        errs.append(invalid_value("spec.clusterIPs[0]", new, "may not change once set"))
    return errs


def _ip_families_upgrade_downgrade(after: _Service, before: _Service) -> Errs:
    """validateUpgradeDowngradeIPFamilies, including upstream's quirks: the 'unset' test looks
    at clusterIPs and some errors carry clusterIPs as their value."""
    if "ExternalName" in (after.type, before.type) or after.headless or before.headless:
        return []
    new, old = after.ip_families, before.ip_families
    errs: Errs = []
    if len(old) == len(new):
        errs += [invalid_value("spec.ipFamilies[0]", new, "may not change once set") for i, family in enumerate(old) if family != new[i]]
    elif len(old) > len(new):
        if not after.cluster_ips:
            errs.append(invalid_value("spec.ipFamilies[0]", new, "primary ipFamily can not be unset"))
        if new and new[0] != old[0]:
            errs.append(invalid_value("spec.ipFamilies[0]", after.cluster_ips, "may not change once set"))
        if len(new) == 1 and after.ip_family_policy != "SingleStack":
            errs.append(invalid_value("spec.ipFamilyPolicy", _ptr(after.ip_family_policy), "must be set to 'SingleStack' when releasing the secondary ipFamily"))
    elif old and new[0] != old[0]:
        errs.append(invalid_value("spec.ipFamilies[0]", after.cluster_ips, "may not change once set"))
    return errs


def _validate_service_status_update(new: Any, old: Any, namespaced: bool) -> Errs:
    """ValidateServiceStatusUpdate: ValidateLoadBalancerStatus against the spec's type."""
    errs = validate_object_meta_update(new, old)
    svc_type = _Service([], new).type
    status = read_map(errs, new, "status", "")
    lb = read_map(errs, status, "loadBalancer", "status")
    ingress = read_list(errs, lb, "ingress", "status.loadBalancer")
    path = "status.loadBalancer.ingress"
    if svc_type != "LoadBalancer" and ingress:
        return errs + [forbidden_field(path, "may only be used when `spec.type` is 'LoadBalancer'")]
    for i, entry in elements(errs, ingress, path, dict):
        errs += _lb_ingress(errs, entry, index(path, i))
    return errs


def _lb_ingress(errs: Errs, entry: dict, path: str) -> Errs:
    out: Errs = []
    ip = read_str(errs, entry, "ip", path)
    ip_mode = read(errs, entry, "ipMode", path, str)
    hostname = read_str(errs, entry, "hostname", path)
    if ip:
        out += is_valid_ip(child(path, "ip"), ip)
    if ip_mode is None:  # LoadBalancerIPMode is on in 1.32
        if ip:
            out.append(required(child(path, "ipMode"), "must be specified when `ip` is set"))
    elif not ip:
        out.append(forbidden_field(child(path, "ipMode"), "may not be specified when `ip` is not set"))
    elif ip_mode not in _LB_IP_MODES:
        out.append(not_supported(child(path, "ipMode"), ip_mode, _LB_IP_MODES))
    if hostname:
        out += validate_dns1123_subdomain(hostname, child(path, "hostname"))
        if parse_ip_sloppy(hostname) is not None:
            out.append(invalid_value(child(path, "hostname"), hostname, "must be a DNS name, not an IP address"))
    return out


# ---- Pod (ValidatePodCreate / ValidatePodSpec, the commonly hit rules) -------------------------

_RESTART_POLICIES = ["Always", "OnFailure", "Never"]
_DNS_POLICIES = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"]
_PULL_POLICIES = ["Always", "IfNotPresent", "Never"]
_TERMINATION_MESSAGE_POLICIES = ["File", "FallbackToLogsOnError"]
_PREEMPTION_POLICIES = ["PreemptLowerPriority", "Never"]
_TAINT_EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]
_HTTP_SCHEMES = ["HTTP", "HTTPS"]
_MAX_INT32 = 2**31 - 1
_MAX_DNS_NAMESERVERS = 3
_MAX_DNS_SEARCH_PATHS = 32
_MAX_DNS_SEARCH_CHARS = 2048
_POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
_MIRROR_POD = "kubernetes.io/config.mirror"
# validateVolumeSource checks sources in this order; the Forbidden paths keep upstream's
# spellings, typo ("downwarAPI") included.
_VOLUME_SOURCES = [
    ("emptyDir", "emptyDir"), ("hostPath", "hostPath"), ("gitRepo", "gitRepo"),
    ("gcePersistentDisk", "gcePersistentDisk"), ("awsElasticBlockStore", "awsElasticBlockStore"),
    ("secret", "secret"), ("nfs", "nfs"), ("iscsi", "iscsi"), ("glusterfs", "glusterfs"),
    ("flocker", "flocker"), ("persistentVolumeClaim", "persistentVolumeClaim"), ("rbd", "rbd"),
    ("cinder", "cinder"), ("cephfs", "cephFS"), ("quobyte", "quobyte"), ("downwardAPI", "downwarAPI"),
    ("fc", "fc"), ("flexVolume", "flexVolume"), ("configMap", "configMap"), ("azureFile", "azureFile"),
    ("vsphereVolume", "vsphereVolume"), ("photonPersistentDisk", "photonPersistentDisk"),
    ("portworxVolume", "portworxVolume"), ("azureDisk", "azureDisk"), ("storageos", "storageos"),
    ("projected", "projected"), ("scaleIO", "scaleIO"), ("csi", "csi"), ("ephemeral", "ephemeral"),
    ("image", "image"),
]
_PROBE_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
_LIFECYCLE_HANDLERS = ("exec", "httpGet", "tcpSocket", "sleep")


def _validate_pod(obj: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta(obj, namespaced=namespaced, name_fn=name_is_dns_subdomain)
    spec = read_map(errs, obj, "spec", "")
    errs += _pod_annotations(Meta([], obj).annotations, spec)
    errs += _validate_pod_spec(errs, spec)
    for group in ("containers", "initContainers"):
        for i, ctr in elements([], read_list([], spec, group, "spec"), "", dict):
            image = read_str([], ctr, "image", "")
            if image != image.strip():
                errs.append(invalid_value(index(f"spec.{group}", i) + ".image", image, "must not have leading or trailing whitespace"))
    return errs


def _validate_pod_create(obj: Any, namespaced: bool) -> Errs:
    errs = _validate_pod(obj, namespaced)
    spec = read_map([], obj, "spec", "")
    if read_list([], spec, "ephemeralContainers", "spec"):
        errs.append(forbidden_field("spec.ephemeralContainers", "cannot be set on create"))
    if read_str([], spec, "nodeName", "spec") and read_list([], spec, "schedulingGates", "spec"):
        errs.append(forbidden_field("spec.nodeName", "cannot be set until all schedulingGates have been cleared"))
    errs += _pod_status_ips(errs, obj)
    return errs


def _pod_annotations(annotations: dict[str, str], spec: dict) -> Errs:
    errs: Errs = []
    if _MIRROR_POD in annotations and not read_str([], spec, "nodeName", "spec"):
        errs.append(invalid_value(index("metadata.annotations", _MIRROR_POD), annotations[_MIRROR_POD], "must set spec.nodeName if mirror pod annotation is set"))
    cost = annotations.get(_POD_DELETION_COST)
    if cost is not None and not _is_deletion_cost(cost):
        errs.append(invalid_value(index("metadata.annotations", _POD_DELETION_COST), cost, "must be a 32bit integer"))
    return errs


def _is_deletion_cost(text: str) -> bool:
    """GetDeletionCostFromPodAnnotations: an int32 without '+' or leading zeros."""
    if not text or not (text[0] == "-" or text == "0" or "1" <= text[0] <= "9"):
        return False
    body = text.removeprefix("-")
    return body.isascii() and body.isdigit() and -(2**31) <= int(text) <= _MAX_INT32


def _validate_pod_spec(errs: Errs, spec: dict) -> Errs:
    out: Errs = []
    grace = read_int(errs, spec, "terminationGracePeriodSeconds", "spec")
    if grace is None:
        out.append(required("spec.terminationGracePeriodSeconds"))
    out += _volumes(errs, read_list(errs, spec, "volumes", "spec"))
    containers = read_list(errs, spec, "containers", "spec")
    init_containers = read_list(errs, spec, "initContainers", "spec")
    out += _containers(errs, containers, grace)
    out += _init_containers(errs, init_containers, containers, grace)
    out += _host_network_ports(errs, spec, containers)
    out += _required_or_supported(read_str(errs, spec, "restartPolicy", "spec"), _RESTART_POLICIES, "spec.restartPolicy")
    dns_policy = read_str(errs, spec, "dnsPolicy", "spec")
    out += _required_or_supported(dns_policy, _DNS_POLICIES, "spec.dnsPolicy")
    out += validate_labels(read_str_map(errs, spec, "nodeSelector", "spec"), "spec.nodeSelector")
    out += _dns_config(errs, read(errs, spec, "dnsConfig", "spec", dict), dns_policy)
    for i, gate in elements(errs, read_list(errs, spec, "readinessGates", "spec"), "spec.readinessGates", dict):
        path = index("spec.readinessGates", i)
        out += validate_qualified_name(read_str(errs, gate, "conditionType", path), child(path, "conditionType"))
    out += _scheduling_gates(errs, read_list(errs, spec, "schedulingGates", "spec"))
    for name in ("serviceAccountName", "nodeName"):
        out += _subdomain_ref(errs, spec, name)
    deadline = read_int(errs, spec, "activeDeadlineSeconds", "spec")
    if deadline is not None and not 1 <= deadline <= _MAX_INT32:
        out.append(invalid_value("spec.activeDeadlineSeconds", deadline, f"must be between 1 and {_MAX_INT32}, inclusive"))
    for name in ("hostname", "subdomain"):
        if value := read_str(errs, spec, name, "spec"):
            out += validate_dns1123_label(value, child("spec", name))
    out += _tolerations(errs, read_list(errs, spec, "tolerations", "spec"), "spec.tolerations")
    out += _host_aliases(errs, read_list(errs, spec, "hostAliases", "spec"))
    out += _subdomain_ref(errs, spec, "priorityClassName")
    runtime_class = read(errs, spec, "runtimeClassName", "spec", str)
    if runtime_class is not None:
        out += each_invalid("spec.runtimeClassName", runtime_class, name_is_dns_subdomain(runtime_class, False))
    preemption = read(errs, spec, "preemptionPolicy", "spec", str)
    if preemption is not None:
        out += _required_or_supported(preemption, _PREEMPTION_POLICIES, "spec.preemptionPolicy")
    pod_os = read(errs, spec, "os", "spec", dict)
    if pod_os is not None:
        os_name = read_str(errs, pod_os, "name", "spec.os")
        if not os_name:
            out.append(required("spec.os.name", "cannot be empty"))
        elif os_name not in ("linux", "windows"):
            out.append(not_supported("spec.os", os_name, ["linux", "windows"]))
    return out


def _subdomain_ref(errs: Errs, spec: dict, name: str) -> Errs:
    """A reference by name to a DNS-subdomain-named object, checked when set."""
    value = read_str(errs, spec, name, "spec")
    return each_invalid(child("spec", name), value, name_is_dns_subdomain(value, False)) if value else []


def _volumes(errs: Errs, volumes: list) -> Errs:
    out: Errs = []
    names: set[str] = set()
    for i, volume in elements(errs, volumes, "spec.volumes", dict):
        path = index("spec.volumes", i)
        own = _volume_source(volume, path)
        name = read_str(errs, volume, "name", path)
        own += validate_dns1123_label(name, child(path, "name")) if name else [required(child(path, "name"))]
        if name in names:
            own.append(duplicate(child(path, "name"), name))
        if not own:
            names.add(name)
        out += own
    return out


def _volume_source(volume: dict, path: str) -> Errs:
    errs: Errs = []
    count = 0
    for key, error_name in _VOLUME_SOURCES:
        if volume.get(key) is None:
            continue
        if count:
            errs.append(forbidden_field(child(path, error_name), "may not specify more than 1 volume type"))
        else:
            count += 1
    if count == 0:
        errs.append(required(path, "must specify a volume type"))
    return errs


class _Container:
    def __init__(self, errs: Errs, ctr: dict, path: str):
        self.path = path
        self.raw = ctr
        self.name = read_str(errs, ctr, "name", path)
        self.image = read_str(errs, ctr, "image", path)
        self.ports = read_list(errs, ctr, "ports", path)
        self.restart_policy = read(errs, ctr, "restartPolicy", path, str)
        self.lifecycle = read(errs, ctr, "lifecycle", path, dict)


def _container_list(errs: Errs, containers: list, path: str) -> list[_Container]:
    return [_Container(errs, ctr, index(path, i)) for i, ctr in elements(errs, containers, path, dict)]


def _containers(errs: Errs, containers: list, grace: int | None) -> Errs:
    if not containers:
        return [required("spec.containers")]
    out: Errs = []
    names: set[str] = set()
    parsed = _container_list(errs, containers, "spec.containers")
    for ctr in parsed:
        out += _container_common(errs, ctr)
        if ctr.name in names:
            out.append(duplicate(child(ctr.path, "name"), ctr.name))
        names.add(ctr.name)
        out += _container_lifecycle_and_probes(errs, ctr, grace)
        if ctr.restart_policy is not None:
            out.append(forbidden_field(child(ctr.path, "restartPolicy"), "may not be set for non-init containers"))
    return out + _host_port_conflicts([(ctr.path, ctr.ports) for ctr in parsed])


def _init_containers(errs: Errs, init_containers: list, containers: list, grace: int | None) -> Errs:
    out: Errs = []
    names = {read_str([], c, "name", "") for c in containers if isinstance(c, dict)}
    for ctr in _container_list(errs, init_containers, "spec.initContainers"):
        out += _container_common(errs, ctr)
        if ctr.restart_policy is not None and ctr.restart_policy != "Always":
            out.append(not_supported(child(ctr.path, "restartPolicy"), ctr.restart_policy, ["Always"]))
        if ctr.name in names:
            out.append(duplicate(child(ctr.path, "name"), ctr.name))
        elif ctr.name:
            names.add(ctr.name)
        # upstream checks each init container alone, so its paths always say [0]
        out += _host_port_conflicts([(index("spec.initContainers", 0), ctr.ports)])
        if ctr.restart_policy == "Always":
            out += _container_lifecycle_and_probes(errs, ctr, grace)
        else:
            for field in ("lifecycle", "livenessProbe", "readinessProbe", "startupProbe"):
                if ctr.raw.get(field) is not None:
                    out.append(forbidden_field(child(ctr.path, field), "may not be set for init containers without restartPolicy=Always"))
    return out


def _container_common(errs: Errs, ctr: _Container) -> Errs:
    out: Errs = []
    name_path = child(ctr.path, "name")
    out += validate_dns1123_label(ctr.name, name_path) if ctr.name else [required(name_path)]
    if not ctr.image:
        out.append(required(child(ctr.path, "image")))
    policy = read_str(errs, ctr.raw, "terminationMessagePolicy", ctr.path)
    out += _required_or_supported(policy, _TERMINATION_MESSAGE_POLICIES, child(ctr.path, "terminationMessagePolicy"))
    out += _container_ports(errs, ctr.ports, child(ctr.path, "ports"))
    out += _env(errs, read_list(errs, ctr.raw, "env", ctr.path), child(ctr.path, "env"))
    out += _env_from(errs, read_list(errs, ctr.raw, "envFrom", ctr.path), child(ctr.path, "envFrom"))
    pull = read_str(errs, ctr.raw, "imagePullPolicy", ctr.path)
    out += _required_or_supported(pull, _PULL_POLICIES, child(ctr.path, "imagePullPolicy"))
    return out


def _container_ports(errs: Errs, ports: list, path: str) -> Errs:
    out: Errs = []
    names: set[str] = set()
    for i, port in elements(errs, ports, path, dict):
        here = index(path, i)
        name = read_str(errs, port, "name", here)
        if name:
            if msgs := is_valid_port_name(name):
                out += each_invalid(child(here, "name"), name, msgs)
            elif name in names:
                out.append(duplicate(child(here, "name"), name))
            else:
                names.add(name)
        container_port = read_int(errs, port, "containerPort", here, 0)
        if container_port == 0:
            out.append(required(child(here, "containerPort")))
        else:
            out += each_invalid(child(here, "containerPort"), container_port, is_valid_port_num(container_port))
        host_port = read_int(errs, port, "hostPort", here, 0)
        if host_port != 0:
            out += each_invalid(child(here, "hostPort"), host_port, is_valid_port_num(host_port))
        out += _required_or_supported(read_str(errs, port, "protocol", here), _PROTOCOLS, child(here, "protocol"))
    return out


def _host_port_conflicts(containers: list[tuple[str, list]]) -> Errs:
    """AccumulateUniqueHostPorts: protocol/hostIP/hostPort must be unique over (path, ports)."""
    seen: set[str] = set()
    out: Errs = []
    for path, ports in containers:
        for i, port in elements([], ports, "", dict):
            host_port = read_int([], port, "hostPort", "", 0)
            if host_port == 0:
                continue
            key = f"{read_str([], port, 'protocol', '')}/{read_str([], port, 'hostIP', '')}/{host_port}"
            if key in seen:
                out.append(duplicate(index(child(path, "ports"), i) + ".hostPort", key))
            seen.add(key)
    return out


def _env(errs: Errs, env: list, path: str) -> Errs:
    out: Errs = []
    for i, var in elements(errs, env, path, dict):
        here = index(path, i)
        name = read_str(errs, var, "name", here)
        if not name:
            out.append(required(child(here, "name")))
        else:
            out += each_invalid(child(here, "name"), name, is_relaxed_env_var_name(name))
        value_from = read(errs, var, "valueFrom", here, dict)
        if value_from is not None:
            out += _env_value_from(errs, value_from, bool(read_str(errs, var, "value", here)), child(here, "valueFrom"))
    return out


def _env_value_from(errs: Errs, source: dict, has_value: bool, path: str) -> Errs:
    out: Errs = []
    count = 0
    field_ref = read(errs, source, "fieldRef", path, dict)
    if field_ref is not None:
        count += 1
        here = child(path, "fieldRef")
        if not read_str(errs, field_ref, "apiVersion", here):
            out.append(required(child(here, "apiVersion")))
        elif not read_str(errs, field_ref, "fieldPath", here):
            out.append(required(child(here, "fieldPath")))
    resource_ref = read(errs, source, "resourceFieldRef", path, dict)
    if resource_ref is not None:
        count += 1
        if not read_str(errs, resource_ref, "resource", child(path, "resourceFieldRef")):
            out.append(required(child(path, "resourceFieldRef.resource")))
    for name in ("configMapKeyRef", "secretKeyRef"):
        selector = read(errs, source, name, path, dict)
        if selector is not None:
            count += 1
            out += _key_selector(errs, selector, child(path, name))
    if count == 0:
        out.append(invalid_value(path, "", "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"))
    elif has_value:
        out.append(invalid_value(path, "", "may not be specified when `value` is not empty"))
    elif count > 1:
        out.append(invalid_value(path, "", "may not have more than one field specified at a time"))
    return out


def _key_selector(errs: Errs, selector: dict, path: str) -> Errs:
    name = read_str(errs, selector, "name", path)
    out = each_invalid(child(path, "name"), name, name_is_dns_subdomain(name, False))
    key = read_str(errs, selector, "key", path)
    out += each_invalid(child(path, "key"), key, is_config_map_key(key)) if key else [required(child(path, "key"))]
    return out


def _env_from(errs: Errs, sources: list, path: str) -> Errs:
    out: Errs = []
    for i, source in elements(errs, sources, path, dict):
        here = index(path, i)
        if prefix := read_str(errs, source, "prefix", here):
            out += each_invalid(child(here, "prefix"), prefix, is_relaxed_env_var_name(prefix))
        count = 0
        for name in ("configMapRef", "secretRef"):
            ref = read(errs, source, name, here, dict)
            if ref is None:
                continue
            count += 1
            ref_name = read_str(errs, ref, "name", child(here, name))
            name_path = child(here, f"{name}.name")
            out += each_invalid(name_path, ref_name, name_is_dns_subdomain(ref_name, True)) if ref_name else [required(name_path)]
        if count == 0:
            out.append(invalid_value(path, "", "must specify one of: `configMapRef` or `secretRef`"))
        elif count > 1:
            out.append(invalid_value(path, "", "may not have more than one field specified at a time"))
    return out


def _container_lifecycle_and_probes(errs: Errs, ctr: _Container, grace: int | None) -> Errs:
    out: Errs = []
    if ctr.lifecycle is not None:
        for hook in ("postStart", "preStop"):
            handler = read(errs, ctr.lifecycle, hook, child(ctr.path, "lifecycle"), dict)
            if handler is not None:
                out += _handler(errs, handler, _LIFECYCLE_HANDLERS, grace, child(ctr.path, f"lifecycle.{hook}"))
    for probe_name in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = read(errs, ctr.raw, probe_name, ctr.path, dict)
        if probe is not None:
            out += _probe(errs, probe, probe_name, grace, child(ctr.path, probe_name))
    return out


def _probe(errs: Errs, probe: dict, probe_name: str, grace: int | None, path: str) -> Errs:
    out = _handler(errs, probe, _PROBE_HANDLERS, grace, path)
    for name in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"):
        out += validate_nonnegative(read_int(errs, probe, name, path, 0), child(path, name))
    probe_grace = read_int(errs, probe, "terminationGracePeriodSeconds", path)
    if probe_grace is not None and probe_grace <= 0:
        out.append(invalid_value(child(path, "terminationGracePeriodSeconds"), probe_grace, "must be greater than 0"))
    success = read_int([], probe, "successThreshold", path, 0)
    if probe_name in ("livenessProbe", "startupProbe") and success != 1:
        out.append(invalid_value(child(path, "successThreshold"), success, "must be 1"))
    if probe_name == "readinessProbe" and probe_grace is not None:
        out.append(invalid_value(child(path, "terminationGracePeriodSeconds"), probe_grace, "must not be set for readinessProbes"))
    return out


def _handler(errs: Errs, handler: dict, kinds: tuple[str, ...], grace: int | None, path: str) -> Errs:
    """Exactly one handler type (validateHandler)."""
    out: Errs = []
    count = 0
    for kind in kinds:
        action = read(errs, handler, kind, path, dict)
        if action is None:
            continue
        if count:
            out.append(forbidden_field(child(path, kind), "may not specify more than 1 handler type"))
            continue
        count += 1
        out += _ACTIONS[kind](errs, action, grace, child(path, kind))
    if count == 0:
        out.append(required(path, "must specify a handler type"))
    return out


def _exec_action(errs: Errs, action: dict, grace: int | None, path: str) -> Errs:
    return [] if read_list(errs, action, "command", path) else [required(child(path, "command"))]


def _http_get_action(errs: Errs, action: dict, grace: int | None, path: str) -> Errs:
    out: Errs = []
    if not read_str(errs, action, "path", path):
        out.append(required(child(path, "path")))
    out += _validate_port_num_or_name(_int_or_string(errs, action, "port", path), child(path, "port"))
    scheme = read_str(errs, action, "scheme", path)
    if scheme not in _HTTP_SCHEMES:
        out.append(not_supported(child(path, "scheme"), scheme, _HTTP_SCHEMES))
    for i, header in elements(errs, read_list(errs, action, "httpHeaders", path), child(path, "httpHeaders"), dict):
        name = read_str(errs, header, "name", index(child(path, "httpHeaders"), i))
        out += each_invalid(child(path, "httpHeaders"), name, is_http_header_name(name))
    return out


def _tcp_socket_action(errs: Errs, action: dict, grace: int | None, path: str) -> Errs:
    return _validate_port_num_or_name(_int_or_string(errs, action, "port", path), child(path, "port"))


def _grpc_action(errs: Errs, action: dict, grace: int | None, path: str) -> Errs:
    port = read_int(errs, action, "port", path, 0)
    return each_invalid(child(path, "port"), port, is_valid_port_num(port))


def _sleep_action(errs: Errs, action: dict, grace: int | None, path: str) -> Errs:
    seconds = read_int(errs, action, "seconds", path, 0)
    if grace is not None and (seconds <= 0 or seconds > grace):
        return [invalid_value(path, seconds, f"must be greater than 0 and less than terminationGracePeriodSeconds ({grace}). Enable AllowPodLifecycleSleepActionZeroValue feature gate for zero sleep.")]
    return []


_ACTIONS: dict[str, Callable[[Errs, dict, int | None, str], Errs]] = {
    "exec": _exec_action,
    "httpGet": _http_get_action,
    "tcpSocket": _tcp_socket_action,
    "grpc": _grpc_action,
    "sleep": _sleep_action,
}


def _host_network_ports(errs: Errs, spec: dict, containers: list) -> Errs:
    if read(errs, spec, "hostNetwork", "spec", bool) is not True:
        return []
    out: Errs = []
    for ctr in _container_list([], containers, "spec.containers"):
        for i, port in elements([], ctr.ports, "", dict):
            host_port, container_port = read_int([], port, "hostPort", "", 0), read_int([], port, "containerPort", "", 0)
            if host_port != container_port:
                out.append(invalid_value(index(child(ctr.path, "ports"), i) + ".hostPort", host_port, "must match `containerPort` when `hostNetwork` is true"))
    return out


def _dns_config(errs: Errs, config: dict | None, dns_policy: str) -> Errs:
    path = "spec.dnsConfig"
    nameservers = read_str_list(errs, config, "nameservers", path) if config is not None else []
    if dns_policy == "None":
        if config is None:
            return [required(path, "must provide `dnsConfig` when `dnsPolicy` is None")]
        if not nameservers:
            return [required(child(path, "nameservers"), "must provide at least one DNS nameserver when `dnsPolicy` is None")]
    if config is None:
        return []
    out: Errs = []
    if len(nameservers) > _MAX_DNS_NAMESERVERS:
        out.append(invalid_value(child(path, "nameservers"), nameservers, f"must not have more than {_MAX_DNS_NAMESERVERS} nameservers"))
    for i, ns in enumerate(nameservers):
        out += is_valid_ip(index(child(path, "nameservers"), i), ns)
    searches = read_str_list(errs, config, "searches", path)
    if len(searches) > _MAX_DNS_SEARCH_PATHS:
        out.append(invalid_value(child(path, "searches"), searches, f"must not have more than {_MAX_DNS_SEARCH_PATHS} search paths"))
    if len(" ".join(searches)) > _MAX_DNS_SEARCH_CHARS:
        out.append(invalid_value(child(path, "searches"), searches, f"must not have more than {_MAX_DNS_SEARCH_CHARS} characters (including spaces) in the search list"))
    for i, search in enumerate(searches):
        out += validate_dns1123_subdomain(search.removesuffix("."), index(child(path, "searches"), i))
    for i, option in elements(errs, read_list(errs, config, "options", path), child(path, "options"), dict):
        if not read_str(errs, option, "name", index(child(path, "options"), i)):
            out.append(required(index(child(path, "options"), i), "must not be empty"))
    return out


def _scheduling_gates(errs: Errs, gates: list) -> Errs:
    out: Errs = []
    seen: set[str] = set()
    for i, gate in elements(errs, gates, "spec.schedulingGates", dict):
        path = index("spec.schedulingGates", i)
        name = read_str(errs, gate, "name", path)
        out += validate_qualified_name(name, path)
        if name in seen:
            out.append(duplicate(path, name))
        seen.add(name)
    return out


def _tolerations(errs: Errs, tolerations: list, path: str) -> Errs:
    out: Errs = []
    for i, tol in elements(errs, tolerations, path, dict):
        here = index(path, i)
        key = read_str(errs, tol, "key", here)
        operator = read_str(errs, tol, "operator", here)
        value = read_str(errs, tol, "value", here)
        effect = read_str(errs, tol, "effect", here)
        if key:
            out += validate_qualified_name(key, child(here, "key"))
        if not key and operator != "Exists":
            out.append(invalid_value(child(here, "operator"), operator, 'operator must be Exists when `key` is empty, which means "match all values and all keys"'))
        if read_int(errs, tol, "tolerationSeconds", here) is not None and effect != "NoExecute":
            out.append(invalid_value(child(here, "effect"), effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
        if operator in ("Equal", ""):
            if msgs := is_valid_label_value(value):
                out.append(invalid_value(child(here, "operator"), value, ";".join(msgs)))
        elif operator == "Exists":
            if value:
                out.append(invalid_value(child(here, "operator"), value, "value must be empty when `operator` is 'Exists'"))
        else:
            out.append(not_supported(child(here, "operator"), operator, ["Equal", "Exists"]))
        if effect and effect not in _TAINT_EFFECTS:
            out.append(not_supported(child(here, "effect"), effect, _TAINT_EFFECTS))
    return out


def _host_aliases(errs: Errs, aliases: list) -> Errs:
    out: Errs = []
    for i, alias in elements(errs, aliases, "spec.hostAliases", dict):
        path = index("spec.hostAliases", i)
        out += is_valid_ip(child(path, "ip"), read_str(errs, alias, "ip", path))
        for j, hostname in enumerate(read_str_list(errs, alias, "hostnames", path)):
            out += validate_dns1123_subdomain(hostname, index(child(path, "hostnames"), j))
    return out


def _pod_status_ips(errs: Errs, obj: Any) -> Errs:
    """validatePodIPs / validateHostIPs: valid, one per family, no duplicates."""
    status = read_map(errs, obj, "status", "")
    out: Errs = []
    for field in ("podIPs", "hostIPs"):
        path = child("status", field)
        entries = [(i, e) for i, e in elements(errs, read_list(errs, status, field, "status"), path, dict)]
        ips = [(i, read_str(errs, e, "ip", index(path, i))) for i, e in entries]
        if field == "hostIPs" and ips and read_str(errs, status, "hostIP", "status") != ips[0][1]:
            out.append(invalid_value(index(path, 0) + ".ip", ips[0][1], "must be equal to `hostIP`"))
        for i, ip in ips:
            out += is_valid_ip(index(path, i), ip)
        if len(ips) > 1:
            if not is_dual_stack([ip_family(ip) for _, ip in ips]) or len(ips) > 2:
                out.append(invalid_value(path, [e for _, e in entries], "may specify no more than one IP for each IP family"))
            seen: set[str] = set()
            for (i, ip), (_, entry) in zip(ips, entries):
                if ip in seen:
                    out.append(duplicate(index(path, i), entry))
                seen.add(ip)
    return out


_POD_UPDATABLE = ",".join([
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
])


def _validate_pod_update(new: Any, old: Any, namespaced: bool) -> Errs:
    """ValidatePodUpdate. Upstream appends a Go cmp.Diff of the two specs to the
    "pod updates may not change fields" message; that diff is omitted here."""
    errs = validate_object_meta_update(new, old) + _validate_pod(new, namespaced)
    new_spec, old_spec = read_map([], new, "spec", ""), read_map([], old, "spec", "")
    for group in ("containers", "initContainers"):
        new_ctrs, old_ctrs = read_list([], new_spec, group, ""), read_list([], old_spec, group, "")
        if len(new_ctrs) != len(old_ctrs):
            return errs + [forbidden_field(child("spec", group), "pod updates may not add or remove containers")]
        for i, ctr in enumerate(new_ctrs):
            image = read_str([], ctr, "image", "")
            if not image:
                errs.append(required(index(child("spec", group), i) + ".image"))
            if image != image.strip():
                errs.append(invalid_value(index(child("spec", group), i) + ".image", image, "must not have leading or trailing whitespace"))
    deadline_errs = _active_deadline_update(new_spec, old_spec)
    if deadline_errs is not None:
        return errs + deadline_errs
    errs += _only_added_tolerations(new_spec, old_spec)
    if _munged_pod_spec(new_spec, old_spec) != _munged_pod_spec(old_spec, old_spec):
        errs.append(forbidden_field("spec", f"pod updates may not change fields other than {_POD_UPDATABLE}"))
    return errs


def _active_deadline_update(new_spec: dict, old_spec: dict) -> Errs | None:
    """Errors that end ValidatePodUpdate early; None to continue."""
    new, old = read_int([], new_spec, "activeDeadlineSeconds", ""), read_int([], old_spec, "activeDeadlineSeconds", "")
    path = "spec.activeDeadlineSeconds"
    if new is not None:
        if not 0 <= new <= _MAX_INT32:
            return [invalid_value(path, new, f"must be between 0 and {_MAX_INT32}, inclusive")]
        if old is not None and old < new:
            return [invalid_value(path, new, "must be less than or equal to previous value")]
    elif old is not None:
        return [invalid_value(path, GO_NIL, "must not update from a positive integer to nil value")]
    return None


def _only_added_tolerations(new_spec: dict, old_spec: dict) -> Errs:
    def without_seconds(tol: Any) -> Any:
        return {k: v for k, v in tol.items() if k != "tolerationSeconds"} if isinstance(tol, dict) else tol

    new = [without_seconds(t) for t in read_list([], new_spec, "tolerations", "")]
    for tol in read_list([], old_spec, "tolerations", ""):
        if without_seconds(tol) not in new:
            return [forbidden_field("spec.tolerations", "existing toleration can not be modified except its tolerationSeconds")]
    return []


def _munged_pod_spec(spec: dict, old_spec: dict) -> dict:
    """The spec with every field an update may change replaced by the old value."""
    munged = dict(spec)
    for group in ("containers", "initContainers"):
        olds = read_list([], old_spec, group, "")
        munged[group] = [
            {**ctr, "image": olds[i].get("image")} if isinstance(ctr, dict) and isinstance(olds[i], dict) else ctr
            for i, ctr in enumerate(read_list([], spec, group, ""))
        ] or None
    for field in ("activeDeadlineSeconds", "tolerations", "schedulingGates"):
        munged[field] = old_spec.get(field)
    old_grace = read_int([], old_spec, "terminationGracePeriodSeconds", "")
    if old_grace is not None and old_grace < 0 and munged.get("terminationGracePeriodSeconds") == 1:
        munged["terminationGracePeriodSeconds"] = old_grace
    return {k: v for k, v in munged.items() if v not in (None, [], {})}


def _validate_pod_status_update(new: Any, old: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta_update(new, old)
    new_spec, old_spec = read_map([], new, "spec", ""), read_map([], old, "spec", "")
    if read_str([], new_spec, "nodeName", "") != read_str([], old_spec, "nodeName", ""):
        errs.append(forbidden_field("status.nodeName", "may not be changed directly"))
    new_status, old_status = read_map(errs, new, "status", ""), read_map([], old, "status", "")
    nominated = read_str(errs, new_status, "nominatedNodeName", "status")
    if nominated and nominated != read_str([], old_status, "nominatedNodeName", ""):
        errs += each_invalid("status.nominatedNodeName", nominated, name_is_dns_subdomain(nominated, False))
    qos, old_qos = read_str(errs, new_status, "qosClass", "status"), read_str([], old_status, "qosClass", "")
    if qos != old_qos:
        errs.append(invalid_value("status.qosClass", qos, "field is immutable"))
    errs += _pod_status_ips(errs, new)
    return errs


# ---- Node --------------------------------------------------------------------------------------


def _validate_node(obj: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta(obj, namespaced=namespaced, name_fn=name_is_dns_subdomain)
    spec = read_map(errs, obj, "spec", "")
    errs += _taints(errs, read_list(errs, spec, "taints", "spec"))
    cidrs = read_str_list(errs, spec, "podCIDRs", "spec")
    for i, cidr in enumerate(cidrs):
        errs += is_valid_cidr(index("spec.podCIDRs", i), cidr)
    if len(cidrs) > 1:
        bad = next((c for c in cidrs if parse_cidr_sloppy(c) is None), None)
        if bad is not None:
            errs.append(FieldError("InternalError", "spec.podCIDRs", f"invalid PodCIDRs. failed to check with dual stack with error:invalid CIDR address: {bad}"))
        if bad is not None or not is_dual_stack([cidr_family(c) for c in cidrs]) or len(cidrs) > 2:
            errs.append(invalid_value("spec.podCIDRs", cidrs, "may specify no more than one CIDR for each IP family"))
        seen: set[str] = set()
        for i, cidr in enumerate(cidrs):
            if cidr in seen:
                errs.append(duplicate(index("spec.podCIDRs", i), cidr))
            seen.add(cidr)
    return errs


def _taints(errs: Errs, taints: list) -> Errs:
    """validateNodeTaints. Upstream reports them under ``metadata.taints`` (sic)."""
    out: Errs = []
    seen: set[tuple[str, str]] = set()
    for i, taint in elements(errs, taints, "spec.taints", dict):
        path = index("metadata.taints", i)
        key = read_str(errs, taint, "key", path)
        value = read_str(errs, taint, "value", path)
        effect = read_str(errs, taint, "effect", path)
        out += validate_qualified_name(key, child(path, "key"))
        if msgs := is_valid_label_value(value):
            out.append(invalid_value(child(path, "value"), value, ";".join(msgs)))
        out += _required_or_supported(effect, _TAINT_EFFECTS, child(path, "effect"))
        if (effect, key) in seen:
            out.append(FieldError("FieldValueDuplicate", path, "taints must be unique by key and effect pair", taint))
            continue
        seen.add((effect, key))
    return out


def _validate_node_update(new: Any, old: Any, namespaced: bool) -> Errs:
    """nodeStrategy.ValidateUpdate: ValidateNode plus ValidateNodeUpdate (whose taint check
    would only repeat ValidateNode's)."""
    return _validate_node(new, namespaced) + _node_update_rules(new, old)


def _validate_node_status_update(new: Any, old: Any, namespaced: bool) -> Errs:
    errs = _node_update_rules(new, old)
    errs += _taints(errs, read_list(errs, read_map(errs, new, "spec", ""), "taints", "spec"))
    return errs


def _node_update_rules(new: Any, old: Any) -> Errs:
    errs = validate_object_meta_update(new, old)
    new_spec, old_spec = read_map([], new, "spec", ""), read_map([], old, "spec", "")
    addresses = read_list([], read_map([], new, "status", ""), "addresses", "status")
    seen: list = []
    for i, address in enumerate(addresses):
        if address in seen:
            errs.append(duplicate(index("status.addresses", i), address))
        seen.append(address)
    old_cidrs, new_cidrs = read_str_list([], old_spec, "podCIDRs", ""), read_str_list([], new_spec, "podCIDRs", "spec")
    podcidr_msg = 'node updates may not change podCIDR except from "" to valid'
    if old_cidrs:
        if len(old_cidrs) != len(new_cidrs):
            errs.append(forbidden_field("spec.podCIDRs", podcidr_msg))
        else:
            errs += [forbidden_field("spec.podCIDRs", podcidr_msg) for a, b in zip(old_cidrs, new_cidrs) if a != b]
    old_provider = read_str([], old_spec, "providerID", "")
    if old_provider and old_provider != read_str([], new_spec, "providerID", "spec"):
        errs.append(forbidden_field("spec.providerID", 'node updates may not change providerID except from "" to valid'))
    if read_str([], new_spec, "externalID", "") != read_str([], old_spec, "externalID", ""):
        errs.append(forbidden_field("spec.externalID", "may not be updated"))
    return errs


# ---- Namespace ---------------------------------------------------------------------------------


def _validate_namespace(obj: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta(obj, namespaced=namespaced, name_fn=name_is_dns_label)
    finalizers = read_str_list(errs, read_map(errs, obj, "spec", ""), "finalizers", "spec")
    for finalizer in finalizers:
        errs += each_invalid("spec.finalizers", finalizer, is_qualified_name(finalizer))
        errs += validate_kube_finalizer_name(finalizer, "spec.finalizers")
    return errs


def _validate_namespace_update(new: Any, old: Any, namespaced: bool) -> Errs:
    return _validate_namespace(new, namespaced) + validate_object_meta_update(new, old)


def _validate_namespace_status_update(new: Any, old: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta_update(new, old)
    phase = read_str(errs, read_map(errs, new, "status", ""), "phase", "status")
    if Meta([], new).deletion_timestamp is None:
        if phase != "Active":
            errs.append(invalid_value("status.Phase", phase, "may only be 'Active' if `deletionTimestamp` is empty"))
    elif phase != "Terminating":
        errs.append(invalid_value("status.Phase", phase, "may only be 'Terminating' if `deletionTimestamp` is not empty"))
    return errs


# ---- Endpoints ---------------------------------------------------------------------------------


def _validate_endpoints(obj: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta(obj, namespaced=namespaced, name_fn=name_is_dns_subdomain)
    for i, subset in elements(errs, read_list(errs, obj, "subsets", ""), "subsets", dict):
        path = index("subsets", i)
        addresses = read_list(errs, subset, "addresses", path)
        not_ready = read_list(errs, subset, "notReadyAddresses", path)
        if not addresses and not not_ready:
            errs.append(required(path, "must specify `addresses` or `notReadyAddresses`"))
        for name, entries in (("addresses", addresses), ("notReadyAddresses", not_ready)):
            for j, address in elements(errs, entries, child(path, name), dict):
                errs += _endpoint_address(errs, address, index(child(path, name), j))
        ports = read_list(errs, subset, "ports", path)
        for j, port in elements(errs, ports, child(path, "ports"), dict):
            errs += _endpoint_port(errs, port, len(ports) > 1, index(child(path, "ports"), j))
    return errs


def _endpoint_address(errs: Errs, address: dict, path: str) -> Errs:
    ip = read_str(errs, address, "ip", path)
    valid_ip = _endpoint_ip_valid(ip)
    out = [] if valid_ip else is_valid_ip(child(path, "ip"), ip)
    if hostname := read_str(errs, address, "hostname", path):
        out += validate_dns1123_label(hostname, child(path, "hostname"))
    node_name = read(errs, address, "nodeName", path, str)
    if node_name is not None:
        out += each_invalid(child(path, "nodeName"), node_name, name_is_dns_subdomain(node_name, False))
    return out + ([] if valid_ip else validate_non_special_ip(ip, child(path, "ip")))


@functools.lru_cache(maxsize=16384)
def _endpoint_ip_valid(ip: str) -> bool:
    """An Endpoints address's IP passes both of its checks (remembered: see _slice_address_valid)."""
    return not is_valid_ip("", ip) and not validate_non_special_ip(ip, "")


def _endpoint_port(errs: Errs, port: dict, require_name: bool, path: str) -> Errs:
    out: Errs = []
    name = read_str(errs, port, "name", path)
    if require_name and not name:
        out.append(required(child(path, "name")))
    elif name:
        out += validate_dns1123_label(name, child(path, "name"))
    number = read_int(errs, port, "port", path, 0)
    out += each_invalid(child(path, "port"), number, is_valid_port_num(number))
    out += _required_or_supported(read_str(errs, port, "protocol", path), _PROTOCOLS, child(path, "protocol"))
    app_protocol = read(errs, port, "appProtocol", path, str)
    if app_protocol is not None:
        out += validate_qualified_name(app_protocol, child(path, "appProtocol"))
    return out


def _validate_endpoints_update(new: Any, old: Any, namespaced: bool) -> Errs:
    return validate_object_meta_update(new, old) + _validate_endpoints(new, namespaced)


# ---- Event (core/v1: legacy rules, then the registry's path-segment ObjectMeta check) ----------

_REPORTING_INSTANCE_LIMIT = 128
_ACTION_LIMIT = 128
_REASON_LIMIT = 128
_NOTE_LIMIT = 1024


def _legacy_event(obj: Any) -> Errs:
    errs: Errs = []
    namespace = Meta(errs, obj).namespace
    involved_namespace = read_str(errs, read_map(errs, obj, "involvedObject", ""), "namespace", "involvedObject")
    mismatch = invalid_value("involvedObject.namespace", involved_namespace, "does not match event.namespace")
    if read(errs, obj, "eventTime", "", str) is None:
        if not involved_namespace:
            if namespace not in ("", "default"):
                errs.append(mismatch)
        elif namespace != involved_namespace:
            errs.append(mismatch)
    else:
        if not involved_namespace and namespace not in ("default", "kube-system"):
            errs.append(mismatch)
        controller = read_str(errs, obj, "reportingComponent", "")
        if not controller:
            errs.append(required("reportingController"))
        errs += each_invalid("reportingController", controller, is_qualified_name(controller))
        for field, limit in (("reportingInstance", _REPORTING_INSTANCE_LIMIT), ("action", _ACTION_LIMIT), ("reason", _REASON_LIMIT)):
            value = read_str(errs, obj, field, "")
            if not value:
                errs.append(required(field))
            if nbytes(value) > limit:
                errs.append(invalid_value(field, "", f"can have at most {limit} characters"))
        if nbytes(read_str(errs, obj, "message", "")) > _NOTE_LIMIT:
            errs.append(invalid_value("message", "", f"can have at most {_NOTE_LIMIT} characters"))
    errs += each_invalid("namespace", namespace, is_dns1123_subdomain(namespace))
    return errs


def _validate_event(obj: Any, namespaced: bool) -> Errs:
    """The generic registry's own ObjectMeta pass (rest.BeforeCreate) only runs once the
    strategy's errors are clear, so it is reported separately."""
    return _legacy_event(obj) or validate_object_meta(obj, namespaced=namespaced, name_fn=path_segment_name, core=False)


def _validate_event_update(new: Any, old: Any, namespaced: bool) -> Errs:
    return validate_object_meta_update(new, old, core=False) + _legacy_event(new)


# ---- EndpointSlice (discovery.k8s.io) ----------------------------------------------------------

_ADDRESS_TYPES = ["FQDN", "IPv4", "IPv6"]
_MAX_ENDPOINTS = 1000
_MAX_ADDRESSES = 100
_MAX_PORTS = 100
_MAX_ZONE_HINTS = 8


def _validate_endpoint_slice(obj: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta(obj, namespaced=namespaced, name_fn=name_is_dns_subdomain)
    address_type = read_str(errs, obj, "addressType", "")
    errs += _required_or_supported(address_type, _ADDRESS_TYPES, "addressType")
    errs += _slice_endpoints(errs, read_list(errs, obj, "endpoints", ""), address_type)
    errs += _slice_ports(errs, read_list(errs, obj, "ports", ""))
    return errs


def _slice_endpoints(errs: Errs, endpoints: list, address_type: str) -> Errs:
    if len(endpoints) > _MAX_ENDPOINTS:
        return [too_many("endpoints", len(endpoints), _MAX_ENDPOINTS)]
    out: Errs = []
    for i, endpoint in elements(errs, endpoints, "endpoints", dict):
        path = index("endpoints", i)
        addresses = read_str_list(errs, endpoint, "addresses", path)
        address_path = child(path, "addresses")
        if not addresses:
            out.append(required(address_path, "must contain at least 1 address"))
        elif len(addresses) > _MAX_ADDRESSES:
            out.append(too_many(address_path, len(addresses), _MAX_ADDRESSES))
        for j, address in enumerate(addresses):
            if not _slice_address_valid(address, address_type):
                out += _slice_address(address, address_type, index(address_path, j))
        conditions = read_map(errs, endpoint, "conditions", path)
        for condition in ("ready", "serving", "terminating"):
            read(errs, conditions, condition, child(path, "conditions"), bool)
        node_name = read(errs, endpoint, "nodeName", path, str)
        if node_name is not None:
            out += each_invalid(child(path, "nodeName"), node_name, name_is_dns_subdomain(node_name, False))
        read(errs, endpoint, "zone", path, str)
        hostname = read(errs, endpoint, "hostname", path, str)
        if hostname is not None:
            out += validate_dns1123_label(hostname, child(path, "hostname"))
        hints = read(errs, endpoint, "hints", path, dict)
        if hints is not None:
            out += _slice_hints(errs, hints, child(path, "hints"))
    return out


@functools.lru_cache(maxsize=16384)
def _slice_address_valid(address: str, address_type: str) -> bool:
    """Whether ``_slice_address`` finds nothing wrong: a pure function of the address, asked
    again for every endpoint of a slice on every write of it (100 endpoints: most of the
    slice's validation), so remembered; the errors of a bad one are worked out where found."""
    return not _slice_address(address, address_type, "")


def _slice_address(address: str, address_type: str, path: str) -> Errs:
    if address_type == "IPv4":
        return is_valid_ipv4_address(path, address) + validate_non_special_ip(address, path)
    if address_type == "IPv6":
        return is_valid_ipv6_address(path, address) + validate_non_special_ip(address, path)
    if address_type == "FQDN":
        return is_fully_qualified_domain_name(path, address)
    return []  # unknown types fall through unvalidated, as upstream


def _slice_hints(errs: Errs, hints: dict, path: str) -> Errs:
    zones = read_list(errs, hints, "forZones", path)
    zones_path = child(path, "forZones")
    if len(zones) > _MAX_ZONE_HINTS:
        return [too_many(zones_path, len(zones), _MAX_ZONE_HINTS)]
    out: Errs = []
    seen: set[str] = set()
    for i, zone in elements(errs, zones, zones_path, dict):
        name_path = index(zones_path, i) + ".name"
        name = read_str(errs, zone, "name", index(zones_path, i))
        if name in seen:
            out.append(duplicate(name_path, name))
        seen.add(name)
        out += each_invalid(name_path, name, is_valid_label_value(name))
    return out


def _slice_ports(errs: Errs, ports: list) -> Errs:
    if len(ports) > _MAX_PORTS:
        return [too_many("ports", len(ports), _MAX_PORTS)]
    out: Errs = []
    names: set[str] = set()
    for i, port in elements(errs, ports, "ports", dict):
        path = index("ports", i)
        name = read_str(errs, port, "name", path)
        if name:
            out += validate_dns1123_label(name, child(path, "name"))
        if name in names:
            out.append(duplicate(child(path, "name"), name))
        names.add(name)
        protocol = read(errs, port, "protocol", path, str)
        if protocol is None:
            out.append(required(child(path, "protocol")))
        elif protocol not in _PROTOCOLS:
            out.append(not_supported(child(path, "protocol"), protocol, _PROTOCOLS))
        read(errs, port, "port", path, int)
        app_protocol = read(errs, port, "appProtocol", path, str)
        if app_protocol is not None:
            out += validate_qualified_name(app_protocol, child(path, "appProtocol"))
    return out


def _validate_endpoint_slice_update(new: Any, old: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta_update(new, old) + _validate_endpoint_slice(new, namespaced)
    new_type, old_type = read_str([], new, "addressType", ""), read_str([], old, "addressType", "")
    if new_type != old_type:
        errs.append(invalid_value("addressType", new_type, "field is immutable"))
    return errs


# ---- IPAddress and ServiceCIDR (networking.k8s.io) ---------------------------------------------


def _ip_address_name(name: str, prefix: bool) -> list[str]:
    """IPAddress names are IP addresses; generateName is not supported."""
    return [e.detail for e in is_valid_ip("", name)]


def _validate_ip_address(obj: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta(obj, namespaced=namespaced, name_fn=_ip_address_name)
    parent = read(errs, read_map(errs, obj, "spec", ""), "parentRef", "spec", dict)
    if parent is None:
        return errs + [required("spec.parentRef")]
    path = "spec.parentRef"
    if group := read_str(errs, parent, "group", path):
        errs += each_invalid(child(path, "group"), group, is_dns1123_subdomain(group))
    for field in ("resource", "name"):
        value = read_str(errs, parent, field, path)
        errs += each_invalid(child(path, field), value, is_valid_path_segment_name(value)) if value else [required(child(path, field))]
    if namespace := read_str(errs, parent, "namespace", path):
        errs += each_invalid(child(path, "namespace"), namespace, is_valid_path_segment_name(namespace))
    return errs


def _validate_ip_address_update(new: Any, old: Any, namespaced: bool) -> Errs:
    errs = _validate_ip_address(new, namespaced) + validate_object_meta_update(new, old)
    new_parent = read_map([], new, "spec", "").get("parentRef")
    if new_parent != read_map([], old, "spec", "").get("parentRef"):
        errs.append(invalid_value("spec.parentRef", _ptr(new_parent), "field is immutable"))
    return errs


def _validate_service_cidr(obj: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta(obj, namespaced=namespaced, name_fn=name_is_dns_subdomain)
    spec = read_map(errs, obj, "spec", "")
    errs += _service_cidr_spec(read_str_list(errs, spec, "cidrs", "spec"), spec)
    return errs


def _service_cidr_spec(cidrs: list[str], spec: dict) -> Errs:
    path = "spec.cidrs"
    if not cidrs:
        return [required(path, "at least one CIDR required")]
    if len(cidrs) > 2:
        return [invalid_value(path, spec, "may only hold up to 2 values")]
    errs: Errs = []
    for i, cidr in enumerate(cidrs):
        errs += is_valid_cidr(index(path, i), cidr)
    if len(cidrs) == 2 and cidr_family(cidrs[0]) == cidr_family(cidrs[1]) != "":
        errs.append(invalid_value(path, cidrs, "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64"))
    return errs


def _validate_service_cidr_update(new: Any, old: Any, namespaced: bool) -> Errs:
    """CIDRs are immutable, except that a single-stack ServiceCIDR may gain its second family
    (kubernetes/kubernetes#131261); the added CIDR is checked by the create rules."""
    errs = _validate_service_cidr(new, namespaced) + validate_object_meta_update(new, old)
    new_cidrs = read_str_list([], read_map([], new, "spec", ""), "cidrs", "spec")
    old_cidrs = read_str_list([], read_map([], old, "spec", ""), "cidrs", "spec")
    immutable = "field is immutable"
    if len(old_cidrs) == len(new_cidrs):
        errs += [invalid_value(index("spec.cidrs", i), new_cidrs[i], immutable) for i, cidr in enumerate(old_cidrs) if cidr != new_cidrs[i]]
    elif len(old_cidrs) == 1 and len(new_cidrs) == 2:
        if new_cidrs[0] != old_cidrs[0]:
            errs.append(invalid_value("spec.cidrs[0]", new_cidrs[0], immutable))
    else:
        errs.append(invalid_value("spec.cidrs", new_cidrs, immutable))
    return errs


# ---- Lease (coordination.k8s.io) ---------------------------------------------------------------


def _validate_lease(obj: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta(obj, namespaced=namespaced, name_fn=name_is_dns_subdomain, core=False)
    errs += _lease_spec(errs, read_map(errs, obj, "spec", ""))
    return errs


def _lease_spec(errs: Errs, spec: dict) -> Errs:
    out: Errs = []
    duration = read_int(errs, spec, "leaseDurationSeconds", "spec")
    if duration is not None and duration <= 0:
        out.append(invalid_value("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = read_int(errs, spec, "leaseTransitions", "spec")
    if transitions is not None and transitions < 0:
        out.append(invalid_value("spec.leaseTransitions", transitions, "must be greater than or equal to 0"))
    read_str(errs, spec, "holderIdentity", "spec")
    strategy = read(errs, spec, "strategy", "spec", str)
    if strategy is not None:
        # the error path repeats "strategy", as upstream's ValidateCoordinatedLeaseStrategy does
        if "/" not in strategy:
            if strategy != "OldestEmulationVersion":
                out.append(not_supported("spec.strategy.strategy", strategy, ["OldestEmulationVersion"]))
        else:
            out += each_invalid("spec.strategy.strategy", strategy, is_qualified_name(strategy))
    if read_str(errs, spec, "preferredHolder", "spec") and not strategy:
        out.append(forbidden_field("spec.preferredHolder", "may only be specified if `strategy` is defined"))
    return out


def _validate_lease_update(new: Any, old: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta_update(new, old, core=False)
    errs += _lease_spec(errs, read_map(errs, new, "spec", ""))
    return errs


# ---- dispatch ----------------------------------------------------------------------------------

Create = Callable[[Any, bool], Errs]
Update = Callable[[Any, Any, bool], Errs]


class _Rules:
    def __init__(self, create: Create, update: Update, status_update: Update | None = None):
        self.create = create
        self.update = update
        self.status_update = status_update or _meta_only_update


def _meta_only_update(new: Any, old: Any, namespaced: bool) -> Errs:
    return validate_object_meta_update(new, old)


_KINDS: dict[str, _Rules] = {
    "Service": _Rules(_validate_service, _validate_service_update, _validate_service_status_update),
    "Pod": _Rules(_validate_pod_create, _validate_pod_update, _validate_pod_status_update),
    "Node": _Rules(_validate_node, _validate_node_update, _validate_node_status_update),
    "Namespace": _Rules(_validate_namespace, _validate_namespace_update, _validate_namespace_status_update),
    "Endpoints": _Rules(_validate_endpoints, _validate_endpoints_update),
    "Event": _Rules(_validate_event, _validate_event_update),
    "EndpointSlice": _Rules(_validate_endpoint_slice, _validate_endpoint_slice_update),
    "IPAddress": _Rules(_validate_ip_address, _validate_ip_address_update),
    "ServiceCIDR": _Rules(_validate_service_cidr, _validate_service_cidr_update),
    "Lease": _Rules(_validate_lease, _validate_lease_update),
    "Secret": _Rules(validation_config.validate_secret, validation_config.validate_secret_update),
    "ConfigMap": _Rules(validation_config.validate_config_map, validation_config.validate_config_map_update),
    "ServiceAccount": _Rules(validation_config.validate_service_account,
                             validation_config.validate_service_account_update),
    "Role": _Rules(validation_rbac.validate_role, validation_rbac.validate_role_update),
    "ClusterRole": _Rules(validation_rbac.validate_cluster_role, validation_rbac.validate_cluster_role_update),
    "RoleBinding": _Rules(validation_rbac.validate_role_binding, validation_rbac.validate_role_binding_update),
    "ClusterRoleBinding": _Rules(validation_rbac.validate_cluster_role_binding,
                                 validation_rbac.validate_cluster_role_binding_update),
    "CertificateSigningRequest": _Rules(validation_certificates.validate_csr, validation_certificates.validate_csr_update,
                                        validation_certificates.validate_csr_status_update),
    "Deployment": _Rules(workloads.validate_deployment, workloads.validate_deployment_update,
                         workloads.validate_deployment_status_update),
    "ReplicaSet": _Rules(workloads.validate_replica_set, workloads.validate_replica_set_update,
                         workloads.validate_replica_set_status_update),
    "DaemonSet": _Rules(workloads.validate_daemon_set, workloads.validate_daemon_set_update,
                        workloads.validate_daemon_set_status_update),
    "ControllerRevision": _Rules(workloads.validate_controller_revision, workloads.validate_controller_revision_update),
    "ReplicationController": _Rules(workloads.validate_replication_controller, workloads.validate_replication_controller_update,
                                    workloads.validate_replication_controller_status_update),
    "Job": _Rules(workloads.validate_job, workloads.validate_job_update, workloads.validate_job_status_update),
    "CronJob": _Rules(workloads.validate_cron_job, workloads.validate_cron_job_update, workloads.validate_cron_job_status_update),
    "LoadBalancerIPPool": _Rules(validation_loadbalancer.validate_pool, validation_loadbalancer.validate_pool_update),
}


def _kind(kind: str) -> _Rules:
    try:
        return _KINDS[kind]
    except KeyError:
        raise ValueError(f"no validation rules for kind {kind!r}") from None
