"""From Pods and Services to EndpointSlice content: the pure helpers every endpoint controller
shares (upstream ``staging/src/k8s.io/endpointslice``: ``utils.go``, ``util/controller_utils.go``,
``util/endpointset.go``, ``trafficdist/trafficdist.go``).

Objects are the API's JSON as dicts; nothing here does I/O.

* **Which Pods count** (``should_pod_be_in_endpoints``): not Succeeded/Failed, with an IP;
  terminating Pods only when asked (the EndpointSlice controller keeps them, marked
  ``terminating``; the legacy Endpoints controller drops them unless publishNotReadyAddresses).
* **An endpoint** (``pod_to_endpoint``): the Pod's IPs of one family, ``serving`` = Pod Ready,
  ``terminating`` = deletionTimestamp set, ``ready`` = publishNotReadyAddresses or (serving and
  not terminating); nodeName, the Node's ``topology.kubernetes.io/zone``, hostname when the Pod's
  subdomain is the Service, and a targetRef to the Pod.
* **Endpoint identity** (``endpoint_identity``): addresses, hostname and the Pod's
  namespace/name. Two endpoints with one identity are "the same endpoint", possibly changed
  (``endpoints_equal_beyond_hash``): that lets a changed condition be an in-place update.
* **Port groups** (``port_map_key``): a Service whose named targetPort resolves to different
  numbers on different Pods needs one set of slices per distinct resolution.
* **Hints** (``reconcile_hints``): ``trafficDistribution: PreferClose`` puts a same-zone hint on
  every ready endpoint; otherwise hints are removed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from datetime import datetime

from kubesvc.api.pods import is_ready as is_pod_ready
from kubesvc.api.pods import ready_condition
from kubesvc.api.validation_meta import name_is_dns_subdomain
from kubesvc.util.golang import parse_rfc3339, rfc3339_nano
from kubesvc.util.ipnet import IPV4_PROTOCOL, IPV6, IPV6_PROTOCOL, canonical_address, ip_version

LABEL_SERVICE_NAME = "kubernetes.io/service-name"
LABEL_MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
LABEL_SKIP_MIRROR = "endpointslice.kubernetes.io/skip-mirror"
LABEL_HEADLESS = "service.kubernetes.io/headless"
LABEL_TOPOLOGY_ZONE = "topology.kubernetes.io/zone"
ANNOTATION_TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time"
ANNOTATION_TOPOLOGY_MODE = "service.kubernetes.io/topology-mode"
ANNOTATION_TOPOLOGY_AWARE_HINTS = "service.kubernetes.io/topology-aware-hints"  # deprecated, wins when both are set

RESERVED_LABELS = frozenset({LABEL_SERVICE_NAME, LABEL_MANAGED_BY, LABEL_HEADLESS})
TRAFFIC_DISTRIBUTION_PREFER_CLOSE = "PreferClose"


# ---- Pods ------------------------------------------------------------------------------------

def pod_ready_transition(pod: dict) -> datetime | None:
    """The Ready condition's lastTransitionTime (the endpoint's trigger time), if any."""
    condition = ready_condition(pod)
    if condition is not None and condition.get("lastTransitionTime"):
        return parse_rfc3339(condition["lastTransitionTime"])
    return None


def is_terminating(obj: dict) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def pod_ips(pod: dict) -> list[str]:
    status = pod.get("status") or {}
    ips = [entry.get("ip") for entry in status.get("podIPs") or () if entry.get("ip")]
    if not ips and status.get("podIP"):
        ips = [status["podIP"]]
    return ips


def should_pod_be_in_endpoints(pod: dict, include_terminating: bool) -> bool:
    """Terminal Pods (Succeeded/Failed) and Pods without an IP never are; terminating ones only
    with ``include_terminating`` (``ShouldPodBeInEndpoints``)."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    if not pod_ips(pod):
        return False
    return include_terminating or not is_terminating(pod)


def should_set_hostname(pod: dict, service: dict) -> bool:
    spec = pod.get("spec") or {}
    return bool(spec.get("hostname")) and spec.get("subdomain") == service["metadata"]["name"] \
        and pod["metadata"].get("namespace") == service["metadata"].get("namespace")


def selects(service: dict) -> bool:
    """Only Services with a selector get managed endpoints (a nil selector selects nothing)."""
    spec = service.get("spec") or {}
    return spec.get("type") != "ExternalName" and bool(spec.get("selector"))


# ---- ports -----------------------------------------------------------------------------------

def find_port(pod: dict, service_port: dict) -> int | None:
    """The container port a Service port targets on this Pod (``FindPort``), by the type of the
    int-or-string ``targetPort`` as intstr reads it: a JSON number as is; a JSON string is a name,
    looked up (name and protocol) in the containers, then in sidecar init containers (``"8080"``
    is a name too: it names no port, as upstream)."""
    target = service_port.get("targetPort", service_port.get("port"))
    if isinstance(target, int):
        return target
    protocol = service_port.get("protocol", "TCP")
    spec = pod.get("spec") or {}
    sidecars = [c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"]
    for container in list(spec.get("containers") or ()) + sidecars:
        for port in container.get("ports") or ():
            if port.get("name") == target and port.get("protocol", "TCP") == protocol:
                return port.get("containerPort")
    return None


def endpoint_ports(service: dict, pod: dict) -> list[dict]:
    """One EndpointPort per Service port that resolves on the Pod (``getEndpointPorts``)."""
    spec = service.get("spec") or {}
    ports = []
    for service_port in spec.get("ports") or ():
        number = find_port(pod, service_port)
        if number is None:
            continue
        port = {"name": service_port.get("name", ""), "port": number, "protocol": service_port.get("protocol", "TCP")}
        if service_port.get("appProtocol") is not None:
            port["appProtocol"] = service_port["appProtocol"]
        ports.append(port)
    return ports


PortMapKey = tuple


def port_map_key(ports: Iterable[dict] | None) -> PortMapKey:
    """Order-independent identity of a port list; nil and [] are one key, and the fields the API
    defaults (name "", protocol TCP) compare as defaulted."""
    return tuple(sorted((p.get("name") or "", p.get("port"), p.get("protocol") or "TCP", p.get("appProtocol") or "") for p in ports or ()))


# ---- endpoints -------------------------------------------------------------------------------

def address_family(address: str) -> str:
    """``IPv6`` when ``utilnet.IsIPv6String`` (ParseIPSloppy: a mapped ``::ffff:1.2.3.4`` is
    IPv4), else ``IPv4``: a text that is no IP counts as IPv4, as upstream's endpoint controllers
    and ``getAddressTypesForService`` test it."""
    return IPV6_PROTOCOL if ip_version(address) == IPV6 else IPV4_PROTOCOL


def address_types_for_service(service: dict) -> list[str]:
    """IPv4/IPv6 from ``spec.ipFamilies``; else the ClusterIP's family; else (headless, old
    objects) both (``getAddressTypesForService``)."""
    spec = service.get("spec") or {}
    types = [f for f in spec.get("ipFamilies") or () if f in (IPV4_PROTOCOL, IPV6_PROTOCOL)]
    if types:
        return list(dict.fromkeys(types))
    cluster_ip = spec.get("clusterIP") or ""
    if cluster_ip and cluster_ip != "None":
        return [address_family(cluster_ip)]
    return [IPV4_PROTOCOL, IPV6_PROTOCOL]


def pod_to_endpoint(pod: dict, node: dict | None, service: dict, address_type: str) -> dict:
    serving = is_pod_ready(pod)
    terminating = is_terminating(pod)
    publish_not_ready = bool((service.get("spec") or {}).get("publishNotReadyAddresses"))
    meta = pod["metadata"]
    endpoint: dict = {
        "addresses": [canonical_address(ip) for ip in pod_ips(pod) if address_family(ip) == address_type],
        "conditions": {"ready": publish_not_ready or (serving and not terminating), "serving": serving, "terminating": terminating},
        "targetRef": {"kind": "Pod", "namespace": meta.get("namespace", ""), "name": meta["name"], "uid": meta.get("uid", "")},
    }
    node_name = (pod.get("spec") or {}).get("nodeName")
    if node_name:
        endpoint["nodeName"] = node_name
    zone = ((node or {}).get("metadata", {}).get("labels") or {}).get(LABEL_TOPOLOGY_ZONE)
    if zone:
        endpoint["zone"] = zone
    if should_set_hostname(pod, service):
        endpoint["hostname"] = pod["spec"]["hostname"]
    return endpoint


EndpointIdentity = tuple


def endpoint_identity(endpoint: dict) -> EndpointIdentity:
    """What makes two endpoints the same one (``hashEndpoint``): sorted addresses, hostname and
    the target's namespace/name."""
    ref = endpoint.get("targetRef") or {}
    return (tuple(sorted(endpoint.get("addresses") or ())), endpoint.get("hostname") or "", ref.get("namespace", ""), ref.get("name", ""))


def _target_ref_without_version(endpoint: dict) -> dict | None:
    ref = endpoint.get("targetRef")
    if ref is None:
        return None
    return {k: v for k, v in ref.items() if k != "resourceVersion" and v not in ("", None)}


def endpoints_equal_beyond_hash(a: dict, b: dict) -> bool:
    """Same nodeName, zone, conditions (unset differs from false) and targetRef (ignoring its
    resourceVersion): i.e. nothing outside the identity changed (``EndpointsEqualBeyondHash``)."""
    if a.get("nodeName") != b.get("nodeName") or a.get("zone") != b.get("zone"):
        return False
    conditions_a, conditions_b = a.get("conditions") or {}, b.get("conditions") or {}
    for name in ("ready", "serving", "terminating"):
        if conditions_a.get(name) != conditions_b.get(name):
            return False
    return _target_ref_without_version(a) == _target_ref_without_version(b)


class EndpointSet:
    """Endpoints by identity (``EndpointSet``); ``pop_any`` takes them in insertion order."""

    def __init__(self, endpoints: Iterable[dict] = ()):
        self._items: dict[EndpointIdentity, dict] = {}
        for endpoint in endpoints:
            self.insert(endpoint)

    def insert(self, endpoint: dict) -> None:
        self._items[endpoint_identity(endpoint)] = endpoint

    def get(self, endpoint: dict) -> dict | None:
        return self._items.get(endpoint_identity(endpoint))

    def delete(self, endpoint: dict) -> None:
        self._items.pop(endpoint_identity(endpoint), None)

    def pop_any(self) -> dict:
        key = next(iter(self._items))
        return self._items.pop(key)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self):
        return iter(list(self._items.values()))


# ---- slices ----------------------------------------------------------------------------------

def is_service_ip_set(service: dict) -> bool:
    cluster_ip = (service.get("spec") or {}).get("clusterIP") or ""
    return cluster_ip not in ("", "None")


def slice_labels(slice_labels_now: dict | None, service: dict, controller_name: str) -> tuple[dict, bool]:
    """The labels a slice of ``service`` must carry, and whether its non-reserved labels differ
    from the Service's (``setEndpointSliceLabels``): the Service's labels except the reserved
    ones, the headless marker, the service name and the managing controller."""
    current = {k: v for k, v in (slice_labels_now or {}).items() if k not in RESERVED_LABELS}
    wanted = {k: v for k, v in (service["metadata"].get("labels") or {}).items() if k not in RESERVED_LABELS}
    changed = current != wanted
    if not is_service_ip_set(service):
        wanted[LABEL_HEADLESS] = ""
    wanted[LABEL_SERVICE_NAME] = service["metadata"]["name"]
    wanted[LABEL_MANAGED_BY] = controller_name
    return wanted, changed


def controller_ref(owner: dict, api_version: str, kind: str) -> dict:
    """``metav1.NewControllerRef``: the owner that manages this object; blocks foreground deletion."""
    meta = owner["metadata"]
    return {"apiVersion": api_version, "kind": kind, "name": meta["name"], "uid": meta.get("uid", ""), "controller": True, "blockOwnerDeletion": True}


def owned_by(obj: dict, owner_uid: str, api_version: str, kind: str) -> bool:
    return any(ref.get("uid") == owner_uid and ref.get("kind") == kind and ref.get("apiVersion") == api_version
               for ref in obj["metadata"].get("ownerReferences") or ())


def generate_name_prefix(name: str) -> str:
    """``<name>-`` unless that is not a valid DNS subdomain prefix (too long): then ``name``."""
    prefix = f"{name}-"
    return name if name_is_dns_subdomain(prefix, True) else prefix


def set_trigger_time(obj: dict, trigger_time: datetime | None) -> None:
    """``endpoints.kubernetes.io/last-change-trigger-time`` (RFC 3339 with nanoseconds, UTC),
    removed when there is no trigger time."""
    annotations = obj["metadata"].setdefault("annotations", {})
    if trigger_time is None:
        annotations.pop(ANNOTATION_TRIGGER_TIME, None)
    else:
        annotations[ANNOTATION_TRIGGER_TIME] = rfc3339_nano(trigger_time)




# ---- hints -----------------------------------------------------------------------------------

def topology_hints_annotation_enabled(service: dict) -> bool:
    """``service.kubernetes.io/topology-mode`` (or the deprecated topology-aware-hints, which
    wins) set to Auto/auto (``hintsEnabled``)."""
    annotations = service["metadata"].get("annotations") or {}
    value = annotations.get(ANNOTATION_TOPOLOGY_AWARE_HINTS, annotations.get(ANNOTATION_TOPOLOGY_MODE))
    return value in ("Auto", "auto")


def wants_prefer_close(service: dict) -> bool:
    return (service.get("spec") or {}).get("trafficDistribution") == TRAFFIC_DISTRIBUTION_PREFER_CLOSE \
        and not topology_hints_annotation_enabled(service)


def _wanted_hints(endpoint: dict, prefer_close: bool) -> dict | None:
    if prefer_close and endpoint.get("zone") and (endpoint.get("conditions") or {}).get("ready"):
        return {"forZones": [{"name": endpoint["zone"]}]}
    return None


def hints_need_update(endpoints: Iterable[dict], prefer_close: bool) -> bool:
    """Whether an otherwise unchanged slice has missing, wrong or stale hints."""
    for endpoint in endpoints:
        if prefer_close and not (endpoint.get("conditions") or {}).get("ready"):
            continue  # PreferClose leaves not-ready endpoints' hints alone
        if endpoint.get("hints") != _wanted_hints(endpoint, prefer_close):
            return True
    return False


def apply_hints(endpoints: list[dict], prefer_close: bool) -> None:
    for endpoint in endpoints:
        if prefer_close and not (endpoint.get("conditions") or {}).get("ready"):
            continue
        hints = _wanted_hints(endpoint, prefer_close)
        if hints is None:
            endpoint.pop("hints", None)
        else:
            endpoint["hints"] = hints


def deepcopy_slice(obj: dict) -> dict:
    return copy.deepcopy(obj)


# ---- which Services a Pod change concerns ---------------------------------------------------

def selector_matches(selector: dict | None, labels: dict | None) -> bool:
    """A Service selector (a map; nil or empty selects nothing) against an object's labels."""
    labels = labels or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def pod_service_keys(services: Iterable[dict], pod: dict) -> set[str]:
    """Keys (``ns/name``) of the Services whose selector matches the Pod
    (``GetPodServiceMemberships``); ``services`` are those of the Pod's namespace."""
    keys = set()
    for service in services:
        if selector_matches((service.get("spec") or {}).get("selector"), pod["metadata"].get("labels")):
            keys.add(f"{service['metadata'].get('namespace', '')}/{service['metadata']['name']}")
    return keys


def pod_endpoints_changed(old: dict, new: dict) -> tuple[bool, bool]:
    """(endpoint may have changed, Service membership may have changed) (``podEndpointsChanged``)."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    membership = (old["metadata"].get("labels") or {}) != (new["metadata"].get("labels") or {}) \
        or old_spec.get("hostname") != new_spec.get("hostname") or old_spec.get("subdomain") != new_spec.get("subdomain")
    changed = old["metadata"].get("deletionTimestamp") != new["metadata"].get("deletionTimestamp") \
        or is_pod_ready(old) != is_pod_ready(new) or pod_ips(old) != pod_ips(new) \
        or (old.get("status") or {}).get("phase") != (new.get("status") or {}).get("phase")
    return changed, membership


def services_to_update_on_pod_change(services: list[dict] | Callable[[], list[dict]], old: dict, new: dict) -> set[str]:
    """``GetServicesToUpdateOnPodChange``: nothing for a resync (same resourceVersion) or an
    irrelevant change; on a label change, the Services it joined or left (all of both sets if
    the endpoint changed too). ``services`` may be a callable, called only when needed."""
    if old["metadata"].get("resourceVersion") == new["metadata"].get("resourceVersion"):
        return set()
    changed, membership = pod_endpoints_changed(old, new)
    if not changed and not membership:
        return set()
    if callable(services):
        services = services()
    now = pod_service_keys(services, new)
    if not membership:
        return now
    before = pod_service_keys(services, old)
    return now | before if changed else now ^ before
