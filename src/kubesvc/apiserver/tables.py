"""Server-side printing: objects as a ``meta.k8s.io/v1`` Table, which is what ``kubectl get`` shows.

kubectl has no compiled-in printers for built-in kinds; it asks for
``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and lays out whatever columns the
server sends (``priority: 1`` columns only with ``-o wide``). The shape (metav1.Table)::

    {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
     "metadata": {"resourceVersion": "111", "continue": "..."},
     "columnDefinitions": [{"name": "Name", "type": "string", "format": "name",
                            "description": "...", "priority": 0}, ...],
     "rows": [{"cells": ["web", "ClusterIP", ...],
               "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                          "metadata": {...}}}]}

``includeObject`` picks ``rows[].object``: ``Metadata`` (the default) embeds the metadata, which
``-A`` and ``--show-labels`` read; ``Object`` embeds the whole object, which ``--sort-by``
needs; ``None`` leaves it out. With ``columns=False`` (TableOptions.noHeaders, used for watch
events after the first) ``columnDefinitions`` is null.

Columns and cell formats are ported from kubernetes ``pkg/printers/internalversion/printers.go``
(the kube-apiserver always prints "wide", so priority-1 cells are always present), ages from
apimachinery ``pkg/util/duration.HumanDuration``, and column descriptions are the Go types'
SwaggerDoc() strings. Kinds without a printer (Role, ClusterRole) get
``rest.NewDefaultTableConvertor``'s ``Name``/``Created At`` table. Upstream's IPAddress printer
declares two columns but fills three cells (the age is not shown); that is kept byte for byte.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping

from kubesvc.api.errors import bad_request
from kubesvc.api.scheme import KindInfo
from kubesvc.util import golang, ipnet

JSONObject = Mapping[str, Any]

# ---- column definitions ---------------------------------------------------------------------

_NAME_DOC = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
_CREATED_DOC = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"


def _column(name: str, description: str, *, type_: str = "string", format_: str = "", priority: int = 0) -> dict:
    return {"name": name, "type": type_, "format": format_, "description": description, "priority": priority}


_NAME = _column("Name", _NAME_DOC, format_="name")
_AGE = _column("Age", _CREATED_DOC)

_SERVICE_COLUMNS = [
    _NAME,
    _column("Type", 'type determines how the Service is exposed. Defaults to ClusterIP. Valid options are ExternalName, ClusterIP, NodePort, and LoadBalancer. "ClusterIP" allocates a cluster-internal IP address for load-balancing to endpoints. Endpoints are determined by the selector or if that is not specified, by manual construction of an Endpoints object or EndpointSlice objects. If clusterIP is "None", no virtual IP is allocated and the endpoints are published as a set of endpoints rather than a virtual IP. "NodePort" builds on ClusterIP and allocates a port on every node which routes to the same endpoints as the clusterIP. "LoadBalancer" builds on NodePort and creates an external load-balancer (if supported in the current cloud) which routes to the same endpoints as the clusterIP. "ExternalName" aliases this service to the specified externalName. Several other fields do not apply to ExternalName services. More info: https://kubernetes.io/docs/concepts/services-networking/service/#publishing-services-service-types'),
    _column("Cluster-IP", 'clusterIP is the IP address of the service and is usually assigned randomly. If an address is specified manually, is in-range (as per system configuration), and is not in use, it will be allocated to the service; otherwise creation of the service will fail. This field may not be changed through updates unless the type field is also being changed to ExternalName (which requires this field to be blank) or the type field is being changed from ExternalName (in which case this field may optionally be specified, as describe above).  Valid values are "None", empty string (""), or a valid IP address. Setting this to "None" makes a "headless service" (no virtual IP), which is useful when direct endpoint connections are preferred and proxying is not required.  Only applies to types ClusterIP, NodePort, and LoadBalancer. If this field is specified when creating a Service of type ExternalName, creation will fail. This field will be wiped when updating a Service to type ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies'),
    _column("External-IP", "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.  These IPs are not managed by Kubernetes.  The user is responsible for ensuring that traffic arrives at a node with this IP.  A common example is external load-balancers that are not part of the Kubernetes system."),
    _column("Port(s)", "The list of ports that are exposed by this service. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies"),
    _AGE,
    _column("Selector", "Route service traffic to pods with label keys and values matching this selector. If empty or not present, the service is assumed to have an external process managing its endpoints, which Kubernetes will not modify. Only applies to types ClusterIP, NodePort, and LoadBalancer. Ignored if type is ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/", priority=1),
]

_POD_COLUMNS = [
    _NAME,
    _column("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    _column("Status", "The aggregate status of the containers in this pod."),
    _column("Restarts", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
    _AGE,
    _column("IP", "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.", priority=1),
    _column("Node", "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used to express a desire for the pod to be scheduled on a specific node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename", priority=1),
    _column("Nominated Node", "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled.", priority=1),
    _column("Readiness Gates", 'If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to "True" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates', priority=1),
]

_NODE_ADDRESSES_DOC = "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change during the lifetime of a Node. However, there are some exceptions where this may not be possible, such as Pods that inherit a Node's address in its own status or consumers of the downward API (status.hostIP)."
_NODE_COLUMNS = [
    _NAME,
    _column("Status", "The status of the node"),
    _column("Roles", "The roles of the node"),
    _AGE,
    _column("Version", "Kubelet Version reported by the node."),
    _column("Internal-IP", _NODE_ADDRESSES_DOC, priority=1),
    _column("External-IP", _NODE_ADDRESSES_DOC, priority=1),
    _column("OS-Image", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).", priority=1),
    _column("Kernel-Version", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).", priority=1),
    _column("Container-Runtime", "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).", priority=1),
]

_NAMESPACE_COLUMNS = [_NAME, _column("Status", "The status of the namespace"), _AGE]

_ENDPOINTS_COLUMNS = [
    _NAME,
    _column("Endpoints", "The set of all endpoints is the union of all subsets. Addresses are placed into subsets according to the IPs they share. A single address with multiple ports, some of which are ready and some of which are not (because they come from different containers) will result in the address being displayed in different subsets for the different ports. No address will appear in both Addresses and NotReadyAddresses in the same subset. Sets of addresses and ports that comprise a service."),
    _AGE,
]

_ENDPOINT_SLICE_COLUMNS = [
    _NAME,
    _column("AddressType", "addressType specifies the type of address carried by this EndpointSlice. All addresses in this slice must be the same type. This field is immutable after creation. The following address types are currently supported: * IPv4: Represents an IPv4 Address. * IPv6: Represents an IPv6 Address. * FQDN: Represents a Fully Qualified Domain Name."),
    _column("Ports", 'ports specifies the list of network ports exposed by each endpoint in this slice. Each port must have a unique name. When ports is empty, it indicates that there are no defined ports. When a port is defined with a nil port value, it indicates "all ports". Each slice may include a maximum of 100 ports.'),
    _column("Endpoints", "endpoints is a list of unique endpoints in this slice. Each slice may include a maximum of 1000 endpoints."),
    _AGE,
]

_EVENT_COLUMNS = [
    _column("Last Seen", "The time at which the most recent occurrence of this event was recorded."),
    _column("Type", "Type of this event (Normal, Warning), new types could be added in the future"),
    _column("Reason", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
    _column("Object", "The object that this event is about."),
    _column("Subobject", 'If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, if the object reference is to a container within a pod, this would take on a value like: "spec.containers{name}" (where "name" refers to the name of the container that triggered the event) or if no container name is specified "spec.containers[2]" (container with index 2 in this pod). This syntax is chosen only to have some well-defined way of referencing a part of an object.', priority=1),
    _column("Source", "The component reporting this event. Should be a short machine understandable string.", priority=1),
    _column("Message", "A human-readable description of the status of this operation."),
    _column("First Seen", "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)", priority=1),
    _column("Count", "The number of times this event has occurred.", priority=1),
    _column("Name", _NAME_DOC, format_="name", priority=1),
]

_LEASE_COLUMNS = [
    _NAME,
    _column("Holder", "holderIdentity contains the identity of the holder of a current lease. If Coordinated Leader Election is used, the holder identity must be equal to the elected LeaseCandidate.metadata.name field."),
    _AGE,
]

_CSR_COLUMNS = [  # printers.go certificateSigningRequestColumnDefinitions ("Requestor" documents spec.request there)
    _NAME,
    _AGE,
    _column("SignerName", 'signerName indicates the requested signer, and is a qualified name.\n\nList/watch requests for CertificateSigningRequests can filter on this field using a "spec.signerName=NAME" fieldSelector.\n\nWell-known Kubernetes signers are:\n 1. "kubernetes.io/kube-apiserver-client": issues client certificates that can be used to authenticate to kube-apiserver.\n  Requests for this signer are never auto-approved by kube-controller-manager, can be issued by the "csrsigning" controller in kube-controller-manager.\n 2. "kubernetes.io/kube-apiserver-client-kubelet": issues client certificates that kubelets use to authenticate to kube-apiserver.\n  Requests for this signer can be auto-approved by the "csrapproving" controller in kube-controller-manager, and can be issued by the "csrsigning" controller in kube-controller-manager.\n 3. "kubernetes.io/kubelet-serving" issues serving certificates that kubelets use to serve TLS endpoints, which kube-apiserver can connect to securely.\n  Requests for this signer are never auto-approved by kube-controller-manager, and can be issued by the "csrsigning" controller in kube-controller-manager.\n\nMore details are available at https://k8s.io/docs/reference/access-authn-authz/certificate-signing-requests/#kubernetes-signers\n\nCustom signerNames can also be specified. The signer defines:\n 1. Trust distribution: how trust (CA bundles) are distributed.\n 2. Permitted subjects: and behavior when a disallowed subject is requested.\n 3. Required, permitted, or forbidden x509 extensions in the request (including whether subjectAltNames are allowed, which types, restrictions on allowed values) and behavior when a disallowed extension is requested.\n 4. Required, permitted, or forbidden key usages / extended key usages.\n 5. Expiration/certificate lifetime: whether it is fixed by the signer, configurable by the admin.\n 6. Whether or not requests for CA certificates are allowed.'),
    _column("Requestor", 'request contains an x509 certificate signing request encoded in a "CERTIFICATE REQUEST" PEM block. When serialized as JSON or YAML, the data is additionally base64-encoded.'),
    _column("RequestedDuration", "expirationSeconds is the requested duration of validity of the issued certificate. The certificate signer may issue a certificate with a different validity duration so a client must check the delta between the notBefore and and notAfter fields in the issued certificate to determine the actual duration.\n\nThe minimum valid value for expirationSeconds is 600, i.e. 10 minutes."),
    _column("Condition", 'conditions applied to the request. Known conditions are "Approved", "Denied", and "Failed".'),
]

_IP_ADDRESS_COLUMNS = [
    _NAME,
    _column("ParentRef", "ParentRef references the resource that an IPAddress is attached to. An IPAddress must reference a parent object."),
]

_SERVICE_CIDR_COLUMNS = [
    _NAME,
    _column("CIDRs", 'cidrs defines the IP blocks in CIDR notation (e.g. "192.168.0.0/24" or "2001:db8::/64") from which to assign service cluster IPs. Max of two CIDRs is allowed, one of each IP family. This field is immutable.'),
    _AGE,
]

_SECRET_COLUMNS = [
    _NAME,
    _column("Type", "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types"),
    _column("Data", "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4"),
    _AGE,
]

_SERVICE_ACCOUNT_COLUMNS = [
    _NAME,
    _column("Secrets", 'Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use. Pods are only limited to this list if this service account has a "kubernetes.io/enforce-mountable-secrets" annotation set to "true". The "kubernetes.io/enforce-mountable-secrets" annotation is deprecated since v1.32. Prefer separate namespaces to isolate access to mounted secrets. This field should not be used to find auto-generated service account token secrets for use outside of pods. Instead, tokens can be requested directly using the TokenRequest API, or service account token secrets can be manually created. More info: https://kubernetes.io/docs/concepts/configuration/secret'),
    _AGE,
]

_CONFIG_MAP_COLUMNS = [
    _NAME,
    _column("Data", "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process."),
    _AGE,
]


def _binding_columns(kind: str, role_ref_doc: str) -> list[dict]:
    """RoleBinding / ClusterRoleBinding: the role, then (wide) who it is bound to."""
    binding = kind[0].lower() + kind[1:]
    return [
        _NAME,
        _column("Role", role_ref_doc),
        _AGE,
        _column("Users", f"Users in the {binding}", priority=1),
        _column("Groups", f"Groups in the {binding}", priority=1),
        _column("ServiceAccounts", f"ServiceAccounts in the {binding}", priority=1),
    ]


# the descriptions are rbac/v1beta1's, as upstream's printer takes them
_ROLE_BINDING_COLUMNS = _binding_columns("RoleBinding", "roleRef can reference a Role in the current namespace or a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.")
_CLUSTER_ROLE_BINDING_COLUMNS = _binding_columns("ClusterRoleBinding", "roleRef can only reference a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.")

_DEFAULT_COLUMNS = [_NAME, _column("Created At", _CREATED_DOC, type_="date")]


# ---- time ---------------------------------------------------------------------------------


def human_duration(seconds: float) -> str:
    """apimachinery duration.HumanDuration: about 2-3 significant figures ("3m10s", "2d1h")."""
    whole_seconds = int(seconds)  # truncates toward zero, like Go's int(d.Seconds())
    if whole_seconds < -1:
        return "<invalid>"
    if whole_seconds < 0:
        return "0s"
    if whole_seconds < 60 * 2:
        return f"{whole_seconds}s"
    minutes = int(seconds // 60)
    if minutes < 10:
        rest = whole_seconds % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = int(seconds // 3600)
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rest = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if rest == 0 else f"{hours // 24 // 365}y{rest}d"
    return f"{hours // 24 // 365}y"


def _parse_time(value: Any) -> datetime | None:
    """An RFC 3339 metav1.Time / MicroTime; None when unset (Go's zero time) or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return golang.parse_rfc3339(value)
    except ValueError:
        return None


class _Clock:
    def __init__(self, now: datetime):
        self.now = now

    def since(self, value: Any) -> str:
        """printers.translateTimestampSince: "<unknown>" for an unset time."""
        moment = _parse_time(value)
        if moment is None:
            return "<unknown>"
        return human_duration((self.now - moment).total_seconds())


# ---- small helpers --------------------------------------------------------------------------


def _get(obj: Any, *path: str) -> Any:
    for step in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(step)
    return obj


def _list(obj: Any, *path: str) -> list:
    value = _get(obj, *path)
    return value if isinstance(value, list) else []


def _str(obj: Any, *path: str) -> str:
    value = _get(obj, *path)
    return value if isinstance(value, str) else ""


def _int(obj: Any, *path: str) -> int:
    value = _get(obj, *path)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def format_labels(labels: Mapping[str, str] | None) -> str:
    """labels.FormatLabels: ``k=v`` pairs sorted by key and joined by commas, or ``<none>``."""
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels)) if labels else "<none>"


def _list_with_more(items: list[str], limit: int = 3) -> str:
    """printers' "a,b,c + 2 more..." truncation (listWithMoreString); "<unset>" when empty."""
    text = ",".join(items[:limit])
    if len(items) > limit:
        return f"{text} + {len(items) - limit} more..."
    return text or "<unset>"


# ---- printers: one function per kind, each returning a row's cells ----------------------------


def _service_external_ip(spec: JSONObject, status: JSONObject) -> str:
    svc_type = spec.get("type", "")
    external_ips = [ip for ip in spec.get("externalIPs") or [] if isinstance(ip, str)]
    if svc_type in ("ClusterIP", "NodePort"):
        return ",".join(external_ips) if external_ips else "<none>"
    if svc_type == "LoadBalancer":
        ingress = {i.get("ip") or i.get("hostname") for i in _list(status, "loadBalancer", "ingress") if isinstance(i, Mapping)}
        lb_ips = sorted(i for i in ingress if i)
        if lb_ips or external_ips:
            return ",".join(lb_ips + external_ips)
        return "<pending>"
    if svc_type == "ExternalName":
        return _str(spec, "externalName")
    return "<unknown>"


def _service_ports(ports: Iterable[Any]) -> str:
    pieces = []
    for port in ports:
        protocol = _str(port, "protocol")
        node_port = _int(port, "nodePort")
        if node_port > 0:
            pieces.append(f"{_int(port, 'port')}:{node_port}/{protocol}")
        else:
            pieces.append(f"{_int(port, 'port')}/{protocol}")
    return ",".join(pieces) or "<none>"


def _service_cells(svc: JSONObject, clock: _Clock) -> list:
    spec, status = svc.get("spec") or {}, svc.get("status") or {}
    cluster_ips = _list(spec, "clusterIPs")
    cluster_ip = cluster_ips[0] if cluster_ips else _str(spec, "clusterIP") or "<none>"
    return [
        _str(svc, "metadata", "name"),
        _str(spec, "type"),
        cluster_ip,
        _service_external_ip(spec, status),
        _service_ports(_list(spec, "ports")),
        clock.since(_get(svc, "metadata", "creationTimestamp")),
        format_labels(spec.get("selector")),
    ]


def _is_restartable_init_container(container: Any) -> bool:
    return _str(container, "restartPolicy") == "Always"


def _has_condition(status: JSONObject, condition_type: str) -> bool:
    return any(_str(c, "type") == condition_type and _str(c, "status") == "True" for c in _list(status, "conditions"))


def _terminated_reason(terminated: JSONObject, prefix: str) -> str:
    if terminated.get("reason"):
        return prefix + terminated["reason"]
    if _int(terminated, "signal"):
        return f"{prefix}Signal:{_int(terminated, 'signal')}"
    return f"{prefix}ExitCode:{_int(terminated, 'exitCode')}"


class _Restarts:
    """Counts restarts and remembers the latest ``lastState.terminated.finishedAt``."""

    def __init__(self) -> None:
        self.count = 0
        self.last: datetime | None = None

    def add(self, container_status: JSONObject) -> None:
        self.count += _int(container_status, "restartCount")
        finished = _parse_time(_get(container_status, "lastState", "terminated", "finishedAt"))
        if finished is not None and (self.last is None or self.last < finished):
            self.last = finished


def _pod_cells(pod: JSONObject, clock: _Clock) -> list:
    """printPod: READY, STATUS (the reason a human wants), RESTARTS with "(5m ago)", wide cells."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    init_specs = _list(spec, "initContainers")
    init_by_name = {_str(c, "name"): c for c in init_specs}
    total = len(_list(spec, "containers")) + sum(1 for c in init_specs if _is_restartable_init_container(c))
    ready = 0
    phase = _str(status, "phase")
    reason = _str(status, "reason") or phase
    if any(_str(c, "type") == "PodScheduled" and _str(c, "reason") == "SchedulingGated" for c in _list(status, "conditions")):
        reason = "SchedulingGated"

    all_init, restartable_init = _Restarts(), _Restarts()
    initializing = False
    for i, cs in enumerate(_list(status, "initContainerStatuses")):
        all_init.add(cs)
        restartable = _is_restartable_init_container(init_by_name.get(_str(cs, "name")))
        if restartable:
            restartable_init.add(cs)
        terminated, waiting = _get(cs, "state", "terminated"), _get(cs, "state", "waiting")
        if isinstance(terminated, Mapping) and _int(terminated, "exitCode") == 0:
            continue
        if restartable and _get(cs, "started") is True:
            ready += 1 if _get(cs, "ready") is True else 0
            continue
        if isinstance(terminated, Mapping):
            reason = _terminated_reason(terminated, "Init:")
        elif _str(waiting, "reason") and _str(waiting, "reason") != "PodInitializing":
            reason = "Init:" + _str(waiting, "reason")
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break

    restarts = all_init
    if not initializing or _has_condition(status, "Initialized"):
        restarts = restartable_init
        has_running = False
        for cs in reversed(_list(status, "containerStatuses")):
            restarts.add(cs)
            terminated, waiting = _get(cs, "state", "terminated"), _get(cs, "state", "waiting")
            if _str(waiting, "reason"):
                reason = _str(waiting, "reason")
            elif isinstance(terminated, Mapping):
                reason = _terminated_reason(terminated, "")
            elif _get(cs, "ready") is True and isinstance(_get(cs, "state", "running"), Mapping):
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            reason = "Running" if _has_condition(status, "Ready") else "NotReady"

    if _get(pod, "metadata", "deletionTimestamp"):
        if _str(status, "reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"

    restarts_text = str(restarts.count)
    if restarts.count and restarts.last is not None:
        restarts_text += f" ({human_duration((clock.now - restarts.last).total_seconds())} ago)"

    pod_ips = _list(status, "podIPs")
    pod_ip = _str(pod_ips[0], "ip") if pod_ips else _str(status, "podIP")
    gates = [_str(g, "conditionType") for g in _list(spec, "readinessGates")]
    readiness = "<none>"
    if gates:
        conditions = {_str(c, "type"): _str(c, "status") for c in reversed(_list(status, "conditions"))}
        readiness = f"{sum(1 for g in gates if conditions.get(g) == 'True')}/{len(gates)}"
    return [
        _str(pod, "metadata", "name"),
        f"{ready}/{total}",
        reason,
        restarts_text,
        clock.since(_get(pod, "metadata", "creationTimestamp")),
        pod_ip or "<none>",
        _str(spec, "nodeName") or "<none>",
        _str(status, "nominatedNodeName") or "<none>",
        readiness,
    ]


_ROLE_LABEL_PREFIX = "node-role.kubernetes.io/"


def _node_roles(labels: Mapping[str, str]) -> str:
    roles = set()
    for key, value in labels.items():
        if key.startswith(_ROLE_LABEL_PREFIX) and key[len(_ROLE_LABEL_PREFIX) :]:
            roles.add(key[len(_ROLE_LABEL_PREFIX) :])
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    return ",".join(sorted(roles)) or "<none>"


def _node_address(status: JSONObject, address_type: str) -> str:
    for address in _list(status, "addresses"):
        if _str(address, "type") == address_type:
            return _str(address, "address")
    return "<none>"


def _node_cells(node: JSONObject, clock: _Clock) -> list:
    status = node.get("status") or {}
    ready = [c for c in _list(status, "conditions") if _str(c, "type") == "Ready"]
    states = []
    if ready:
        states.append("Ready" if _str(ready[-1], "status") == "True" else "NotReady")
    else:
        states.append("Unknown")
    if _get(node, "spec", "unschedulable") is True:
        states.append("SchedulingDisabled")
    info = status.get("nodeInfo") or {}
    return [
        _str(node, "metadata", "name"),
        ",".join(states),
        _node_roles(_get(node, "metadata", "labels") or {}),
        clock.since(_get(node, "metadata", "creationTimestamp")),
        _str(info, "kubeletVersion"),
        _node_address(status, "InternalIP"),
        _node_address(status, "ExternalIP"),
        _str(info, "osImage") or "<unknown>",
        _str(info, "kernelVersion") or "<unknown>",
        _str(info, "containerRuntimeVersion") or "<unknown>",
    ]


def _namespace_cells(ns: JSONObject, clock: _Clock) -> list:
    return [_str(ns, "metadata", "name"), _str(ns, "status", "phase"), clock.since(_get(ns, "metadata", "creationTimestamp"))]


def _format_endpoints(subsets: list) -> str:
    """printers.formatEndpoints: the first three ip:port pairs, then "+ N more..."."""
    if not subsets:
        return "<none>"
    shown: list[str] = []
    total = 0
    for subset in subsets:
        ips = [_str(a, "ip") for a in _list(subset, "addresses")]
        ports = _list(subset, "ports")
        if not ports:  # headless services may have no ports
            total += len(ips)
            shown.extend(ips[: max(0, 3 - len(shown))])
            continue
        for port in ports:
            total += len(ips)
            shown.extend(ipnet.join_host_port(ip, _int(port, "port")) for ip in ips[: max(0, 3 - len(shown))])
    text = ",".join(shown)
    return f"{text} + {total - 3} more..." if total > 3 else text


def _endpoints_cells(ep: JSONObject, clock: _Clock) -> list:
    return [_str(ep, "metadata", "name"), _format_endpoints(_list(ep, "subsets")), clock.since(_get(ep, "metadata", "creationTimestamp"))]


def _endpoint_slice_cells(slice_: JSONObject, clock: _Clock) -> list:
    ports = []
    for port in _list(slice_, "ports"):
        number, name = _get(port, "port"), _get(port, "name")
        ports.append(str(number) if isinstance(number, int) else name if isinstance(name, str) else "*")
    addresses = [a for e in _list(slice_, "endpoints") for a in _list(e, "addresses")]
    return [
        _str(slice_, "metadata", "name"),
        _str(slice_, "addressType"),
        _list_with_more(ports),
        _list_with_more(addresses),
        clock.since(_get(slice_, "metadata", "creationTimestamp")),
    ]


def _event_cells(event: JSONObject, clock: _Clock) -> list:
    first_seen = clock.since(event.get("firstTimestamp")) if _parse_time(event.get("firstTimestamp")) else clock.since(event.get("eventTime"))
    last_seen = clock.since(event.get("lastTimestamp")) if _parse_time(event.get("lastTimestamp")) else first_seen
    count = _int(event, "count")
    if isinstance(event.get("series"), Mapping):
        last_seen = clock.since(_get(event, "series", "lastObservedTime"))
        count = _int(event, "series", "count")
    elif count == 0:
        count = 1  # singleton events from the events.k8s.io API carry no count
    kind, name = _str(event, "involvedObject", "kind").lower(), _str(event, "involvedObject", "name")
    component = _str(event, "source", "component") or _str(event, "reportingComponent")
    instance = _str(event, "source", "host") or _str(event, "reportingInstance")
    return [
        last_seen,
        _str(event, "type"),
        _str(event, "reason"),
        f"{kind}/{name}" if name else kind,
        _str(event, "involvedObject", "fieldPath"),
        f"{component}, {instance}" if instance else component,
        _str(event, "message").strip(),
        first_seen,
        count,
        _str(event, "metadata", "name"),
    ]


def _lease_cells(lease: JSONObject, clock: _Clock) -> list:
    return [_str(lease, "metadata", "name"), _str(lease, "spec", "holderIdentity"), clock.since(_get(lease, "metadata", "creationTimestamp"))]


def csr_condition(csr: JSONObject) -> str:
    """Upstream ``extractCSRStatus``: Denied over Approved over Pending, then ,Failed and ,Issued."""
    types = {_str(c, "type") for c in _list(csr, "status", "conditions") if isinstance(c, Mapping)}
    text = "Denied" if "Denied" in types else "Approved" if "Approved" in types else "Pending"
    if "Failed" in types:
        text += ",Failed"
    if _str(csr, "status", "certificate"):
        text += ",Issued"
    return text


def _csr_cells(csr: JSONObject, clock: _Clock) -> list:
    seconds = _get(csr, "spec", "expirationSeconds")
    duration = human_duration(seconds) if isinstance(seconds, int) and not isinstance(seconds, bool) else "<none>"
    return [_str(csr, "metadata", "name"), clock.since(_get(csr, "metadata", "creationTimestamp")),
            _str(csr, "spec", "signerName") or "<none>", _str(csr, "spec", "username"), duration, csr_condition(csr)]


def _ip_address_cells(ip: JSONObject, clock: _Clock) -> list:
    parent = _get(ip, "spec", "parentRef")
    parent_text = "<none>"
    if isinstance(parent, Mapping):
        group, resource = _str(parent, "group"), _str(parent, "resource")
        parent_text = (f"{resource}.{group}" if group else resource).lower()
        if _str(parent, "namespace"):
            parent_text += "/" + _str(parent, "namespace")
        parent_text += "/" + _str(parent, "name")
    return [_str(ip, "metadata", "name"), parent_text, clock.since(_get(ip, "metadata", "creationTimestamp"))]


def _service_cidr_cells(cidr: JSONObject, clock: _Clock) -> list:
    cidrs = [c for c in _list(cidr, "spec", "cidrs") if isinstance(c, str)]
    return [_str(cidr, "metadata", "name"), ",".join(cidrs), clock.since(_get(cidr, "metadata", "creationTimestamp"))]


def _secret_cells(secret: JSONObject, clock: _Clock) -> list:
    data = _get(secret, "data")
    return [_str(secret, "metadata", "name"), _str(secret, "type"), len(data) if isinstance(data, Mapping) else 0,
            clock.since(_get(secret, "metadata", "creationTimestamp"))]


def _service_account_cells(sa: JSONObject, clock: _Clock) -> list:
    return [_str(sa, "metadata", "name"), len(_list(sa, "secrets")), clock.since(_get(sa, "metadata", "creationTimestamp"))]


def _config_map_cells(cm: JSONObject, clock: _Clock) -> list:
    count = sum(len(value) for value in (_get(cm, "data"), _get(cm, "binaryData")) if isinstance(value, Mapping))
    return [_str(cm, "metadata", "name"), count, clock.since(_get(cm, "metadata", "creationTimestamp"))]


def subjects_strings(subjects: Iterable[Any]) -> tuple[list[str], list[str], list[str], list[str]]:
    """rbac.SubjectsStrings: (users, groups, "namespace/name" service accounts, others)."""
    users: list[str] = []
    groups: list[str] = []
    service_accounts: list[str] = []
    others: list[str] = []
    for subject in subjects:
        if not isinstance(subject, Mapping):
            continue
        kind, name, namespace = _str(subject, "kind"), _str(subject, "name"), _str(subject, "namespace")
        if kind == "ServiceAccount":
            service_accounts.append(f"{namespace}/{name}")
        elif kind == "User":
            users.append(name)
        elif kind == "Group":
            groups.append(name)
        else:
            others.append(f"{kind}/{namespace}/{name}")
    return users, groups, service_accounts, others


def _binding_cells(binding: JSONObject, clock: _Clock) -> list:
    users, groups, service_accounts, _ = subjects_strings(_list(binding, "subjects"))
    role = f'{_str(binding, "roleRef", "kind")}/{_str(binding, "roleRef", "name")}'
    return [_str(binding, "metadata", "name"), role, clock.since(_get(binding, "metadata", "creationTimestamp")),
            ", ".join(users), ", ".join(groups), ", ".join(service_accounts)]


def _default_cells(obj: JSONObject, clock: _Clock) -> list:
    created = _parse_time(_get(obj, "metadata", "creationTimestamp"))
    created_text = golang.rfc3339(created) if created else "0001-01-01T00:00:00Z"
    return [_str(obj, "metadata", "name"), created_text]


_Printer = Callable[[JSONObject, _Clock], list]

# the workload kinds' printers use this module's helpers above, so they are imported only here
from kubesvc.apiserver import tables_workloads  # noqa: E402

PRINTERS: dict[str, tuple[list[dict], _Printer]] = {
    "Service": (_SERVICE_COLUMNS, _service_cells),
    "Pod": (_POD_COLUMNS, _pod_cells),
    "Node": (_NODE_COLUMNS, _node_cells),
    "Namespace": (_NAMESPACE_COLUMNS, _namespace_cells),
    "Endpoints": (_ENDPOINTS_COLUMNS, _endpoints_cells),
    "EndpointSlice": (_ENDPOINT_SLICE_COLUMNS, _endpoint_slice_cells),
    "Event": (_EVENT_COLUMNS, _event_cells),
    "Lease": (_LEASE_COLUMNS, _lease_cells),
    "IPAddress": (_IP_ADDRESS_COLUMNS, _ip_address_cells),
    "ServiceCIDR": (_SERVICE_CIDR_COLUMNS, _service_cidr_cells),
    "Secret": (_SECRET_COLUMNS, _secret_cells),
    "ServiceAccount": (_SERVICE_ACCOUNT_COLUMNS, _service_account_cells),
    "ConfigMap": (_CONFIG_MAP_COLUMNS, _config_map_cells),
    "RoleBinding": (_ROLE_BINDING_COLUMNS, _binding_cells),
    "ClusterRoleBinding": (_CLUSTER_ROLE_BINDING_COLUMNS, _binding_cells),
    "CertificateSigningRequest": (_CSR_COLUMNS, _csr_cells),
    # Deployment, ReplicaSet, ReplicationController, DaemonSet, Job, ControllerRevision
    **tables_workloads.printers(_NAME, _AGE),
}

_POD_PHASE_CONDITIONS = {
    "Succeeded": [{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}],
    "Failed": [{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}],
}


# ---- the table --------------------------------------------------------------------------------

INCLUDE_OBJECT_VALUES = ("Metadata", "Object", "None")


def _row_object(info: KindInfo, obj: JSONObject, include_object: str) -> dict | None:
    if include_object == "Object":
        return {"apiVersion": info.api_version, "kind": info.kind, **obj}
    if include_object == "None":
        return None
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata") or {}}


def to_table(
    info: KindInfo,
    objs: list[dict],
    *,
    include_object: str = "Metadata",
    now: datetime | None = None,
    list_meta: dict | None = None,
    columns: bool = True,
) -> dict:
    """Render ``objs`` (all of ``info``'s kind) as a Table.

    ``list_meta`` is the list's metadata (resourceVersion, continue, remainingItemCount);
    without it the table describes a single object and carries that object's resourceVersion,
    as upstream's GET-as-Table does. ``include_object`` is the TableOptions value ("" means
    Metadata); an unknown value is a 400. Rows share the input dicts (no copies).
    """
    include_object = include_object or "Metadata"
    if include_object not in INCLUDE_OBJECT_VALUES:
        raise bad_request(f'unrecognized includeObject value: "{include_object}"')
    clock = _Clock(now or datetime.now(timezone.utc))
    column_definitions, printer = PRINTERS.get(info.kind, (_DEFAULT_COLUMNS, _default_cells))
    rows = []
    for obj in objs:
        row: dict[str, Any] = {"cells": printer(obj, clock)}
        if info.kind == "Pod" and _str(obj, "status", "phase") in _POD_PHASE_CONDITIONS:
            row["conditions"] = _POD_PHASE_CONDITIONS[_str(obj, "status", "phase")]
        row_object = _row_object(info, obj, include_object)
        if row_object is not None:
            row["object"] = row_object
        rows.append(row)
    if list_meta is not None:
        metadata = dict(list_meta)
    else:
        resource_version = _str(objs[0], "metadata", "resourceVersion") if len(objs) == 1 else ""
        metadata = {"resourceVersion": resource_version} if resource_version else {}
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": list(column_definitions) if columns else None,
        "rows": rows,
    }
