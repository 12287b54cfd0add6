"""A container's environment and command line, computed as the kubelet computes them.

Every container kubelet starts gets, besides its own ``env``, variables that point at the
Services it may talk to (upstream ``pkg/kubelet/envvars/envvars.go`` ``FromServices``): for a
Service ``redis-primary`` with cluster IP ``10.0.0.11`` and one TCP port 6379::

    REDIS_PRIMARY_SERVICE_HOST=10.0.0.11
    REDIS_PRIMARY_SERVICE_PORT=6379
    REDIS_PRIMARY_PORT=tcp://10.0.0.11:6379            # Docker-links style, first port only
    REDIS_PRIMARY_PORT_6379_TCP=tcp://10.0.0.11:6379
    REDIS_PRIMARY_PORT_6379_TCP_PROTO=tcp
    REDIS_PRIMARY_PORT_6379_TCP_PORT=6379
    REDIS_PRIMARY_PORT_6379_TCP_ADDR=10.0.0.11

Which Services a Pod sees is ``getServiceEnvVarMap`` (``pkg/kubelet/kubelet_pods.go``): the
``kubernetes`` Service of ``default`` always (in-cluster clients find the apiserver through
``KUBERNETES_SERVICE_HOST``), and, when ``spec.enableServiceLinks`` is true, every Service of the
Pod's own namespace, a same-namespace ``kubernetes`` replacing the default one. Headless
Services (no cluster IP) give nothing.

``makeEnvironmentVariables`` then resolves the container's ``env`` in order: a ``value`` has its
``$(VAR)`` references expanded (``third_party/forked/golang/expansion``) against the variables
declared so far and the Service variables; a ``valueFrom`` reads the Pod (the downward API:
``fieldRef``, ``resourceFieldRef``) or a ConfigMap/Secret key (``configMapKeyRef``,
``secretKeyRef``). Before ``env``, every ``envFrom`` source adds each key of its ConfigMap's
``data`` (not ``binaryData``) or Secret's decoded ``data``, ``prefix`` prepended; a key that is
then no valid variable name (``IsEnvVarName``: ``[-._a-zA-Z][-._a-zA-Z0-9]*``) is skipped, and
the skipped keys, sorted, make one ``InvalidEnvironmentVariableNames`` warning
(``Keys [1badkey, 2alsobad] from the EnvFrom configMap default/myconfig were skipped since they
are considered invalid environment variable names.``). A ConfigMap or Secret that is missing
fails the container (``CreateContainerConfigError`` with ``configmap "x" not found``) unless the
reference is ``optional``: then the variable (or the whole ``envFrom`` source) is left out; so is
a missing key of an optional ``configMapKeyRef``/``secretKeyRef``, and a missing key of a required
one fails with ``couldn't find key K in ConfigMap ns/name``. The objects are read before this
pure step (``env_objects`` names them) and passed in. An explicit variable wins over a Service
variable of the same name.

Finally the command line: ``command`` and ``args`` with ``$(VAR)`` expanded against the finished
environment (``ExpandContainerCommandAndArgs``). A runtime runs the image's ENTRYPOINT with
``args`` when ``command`` is empty; kubesvc runs no images, whose ENTRYPOINT is thus empty, so
``args`` alone are the command line (``args[0]`` the program, as with busybox, whose image has no
entrypoint), and a container with neither cannot start.

Order. The kubelet builds these as Go maps, so its order is random. Ours is deterministic:
``services_for_pod`` returns Services sorted by name (the key of upstream's map, which also
decides which one survives for a name), and ``container_environment`` returns the container's
own variables in declaration order (``envFrom`` keys first, in source order, then ``env``; a
redeclared name keeps its first place and takes its last value), followed by the remaining
Service variables in ``FromServices`` order. This is upstream's comment turned into an order:
"Create the container's environment in the order variables are declared; add remaining service
environment vars".

Everything here is pure: objects are plain dicts in Kubernetes JSON shape.
"""

from __future__ import annotations

import math
import os
import re
from collections import ChainMap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from kubesvc.api.quantity import parse_quantity
from kubesvc.api.validation_config import secret_bytes
from kubesvc.util.golang import quote as go_quote  # Go's %q to the letter (annotation values may hold control characters)
from kubesvc.api.validation_meta import is_qualified_name
from kubesvc.util.ipnet import IPV4, IPV6, ip_version, join_host_port

MASTER_SERVICE_NAMESPACE = "default"
MASTER_SERVICES = frozenset({"kubernetes"})

# Limits the kubelet fills from node allocatable when a container sets none (MergeContainerResourceLimits).
_DEFAULTED_LIMITS = ("cpu", "memory", "ephemeral-storage")
# Field paths the downward API accepts (ConvertDownwardAPIFieldLabel); spec.host is spec.nodeName.
_DOWNWARD_API_FIELDS = frozenset({
    "metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
    "spec.restartPolicy", "spec.serviceAccountName", "spec.schedulerName", "status.phase", "status.hostIP",
    "status.hostIPs", "status.podIP", "status.podIPs",
})


class EnvError(Exception):
    """The container cannot be configured; the kubelet reports the message as the container's
    ``CreateContainerConfigError`` waiting message (and an ``Error: <message>`` event)."""


# ---- Service variables (envvars.go) ------------------------------------------------------------


def service_env_vars(services: Iterable[dict]) -> list[tuple[str, str]]:
    """``FromServices``: the variables for ``services``, in their order."""
    result: list[tuple[str, str]] = []
    for svc in services:
        spec = svc.get("spec") or {}
        cluster_ip = spec.get("clusterIP") or ""
        ports = spec.get("ports") or []
        # Headless Services have no address to point at; a Service without ports cannot pass
        # validation (upstream would index ports[0] and panic).
        if not _is_service_ip_set(svc) or not ports:
            continue
        prefix = _env_var_name(svc["metadata"]["name"])
        result.append((f"{prefix}_SERVICE_HOST", cluster_ip))
        result.append((f"{prefix}_SERVICE_PORT", str(ports[0]["port"])))
        # Every named port (only the first may be unnamed).
        for port in ports:
            if port.get("name"):
                result.append((f"{prefix}_SERVICE_PORT_{_env_var_name(port['name'])}", str(port["port"])))
        result.extend(_docker_link_vars(prefix, cluster_ip, ports))
    return result


def _docker_link_vars(prefix: str, cluster_ip: str, ports: list[dict]) -> list[tuple[str, str]]:
    result = []
    for i, port in enumerate(ports):
        protocol = port.get("protocol") or "TCP"
        url = f"{protocol.lower()}://{join_host_port(cluster_ip, port['port'])}"
        if i == 0:
            result.append((f"{prefix}_PORT", url))  # Docker special-cases the first port
        port_prefix = f"{prefix}_PORT_{port['port']}_{protocol.upper()}"
        result += [
            (port_prefix, url),
            (f"{port_prefix}_PROTO", protocol.lower()),
            (f"{port_prefix}_PORT", str(port["port"])),
            (f"{port_prefix}_ADDR", cluster_ip),
        ]
    return result


def _env_var_name(name: str) -> str:
    """``makeEnvVariableName``: dashes to underscores, upper case (no handling of dots or a
    leading digit: Service and port names cannot have them)."""
    return name.replace("-", "_").upper()


def _is_service_ip_set(svc: dict) -> bool:
    return ((svc.get("spec") or {}).get("clusterIP") or "") not in ("", "None")


def services_for_pod(services: Iterable[dict], pod: dict) -> list[dict]:
    """``getServiceEnvVarMap``'s choice of Services for ``pod``, sorted by name."""
    enable_service_links = _enable_service_links(pod)
    namespace = pod["metadata"].get("namespace", "")
    by_name: dict[str, dict] = {}
    for svc in services:
        if not _is_service_ip_set(svc):
            continue
        name, svc_namespace = svc["metadata"]["name"], svc["metadata"].get("namespace", "")
        # The master Service always counts, even without service links; a Service of the Pod's
        # own namespace with the same name replaces it, whichever is listed first.
        if svc_namespace == MASTER_SERVICE_NAMESPACE and name in MASTER_SERVICES:
            by_name.setdefault(name, svc)
        elif svc_namespace == namespace and enable_service_links:
            by_name[name] = svc
    return [by_name[name] for name in sorted(by_name)]


def _enable_service_links(pod: dict) -> bool:
    value = (pod.get("spec") or {}).get("enableServiceLinks")
    if value is None:
        raise EnvError("nil pod.spec.enableServiceLinks encountered, cannot construct envvars")
    return bool(value)


# ---- $(VAR) expansion (third_party/forked/golang/expansion) ------------------------------------


def expand(text: str, mapping: Mapping[str, str]) -> str:
    """``expansion.Expand`` with ``MappingFuncFor(mapping)``: ``$(NAME)`` becomes its value,
    ``$$`` a literal ``$``; an unknown name, a ``$`` not starting a reference and an
    unterminated ``$(`` are kept as written."""
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            read, is_var, advance = _read_variable_name(text[cursor + 1:])
            if is_var:
                out.append(mapping[read] if read in mapping else f"$({read})")
            else:
                out.append(read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


def _read_variable_name(rest: str) -> tuple[str, bool, int]:
    """``tryReadVariableName`` for the text after a ``$``: (text to emit or the name, whether it
    is a name, how many characters it consumed)."""
    if rest[0] == "$":  # escaped operator
        return "$", False, 1
    if rest[0] == "(":
        closer = rest.find(")", 1)
        if closer != -1:
            return rest[1:closer], True, closer + 1
        return "$(", False, 1  # incomplete reference: emit it and read on after the "("
    return "$" + rest[0], False, 1


# ---- the container's environment (makeEnvironmentVariables) ------------------------------------


@dataclass(frozen=True)
class ObjectRef:
    """A ConfigMap or Secret a Pod reads (its environment or its volumes), in the Pod's namespace."""

    kind: str  # "configmap" | "secret"
    name: str


ObjectLookup = Mapping[ObjectRef, "dict | None"]  # each read object, None when it is not found
_ENV_VAR_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")


def env_objects(container: dict) -> list[ObjectRef]:
    """The ConfigMaps and Secrets ``container``'s ``envFrom`` and ``env`` read, in order, once each."""
    refs: dict[ObjectRef, None] = {}
    for source in container.get("envFrom") or []:
        for kind, ref_key in (("configmap", "configMapRef"), ("secret", "secretRef")):
            if isinstance(source.get(ref_key), dict):
                refs[ObjectRef(kind, source[ref_key].get("name") or "")] = None
    for var in container.get("env") or []:
        value_from = var.get("valueFrom") or {}
        for kind, ref_key in (("configmap", "configMapKeyRef"), ("secret", "secretKeyRef")):
            if isinstance(value_from.get(ref_key), dict):
                refs[ObjectRef(kind, value_from[ref_key].get("name") or "")] = None
    return list(refs)


def container_environment(pod: dict, container: dict, services: Iterable[dict], *, host_ip: str, host_ips: list[str],
                          pod_ips: list[str], node_allocatable: Mapping[str, str] | None = None,
                          objects: ObjectLookup | None = None, warnings: list[str] | None = None) -> list[tuple[str, str]]:
    """The environment the kubelet gives ``container``: its ``envFrom`` and ``env`` resolved,
    then the Service variables it did not override (order: see the module docstring).

    ``services`` are the Services the Pod sees (``services_for_pod``). ``host_ip``/``host_ips``
    are the node's addresses (``status.hostIP(s)``), ``pod_ips`` the Pod's. ``node_allocatable``
    (a ResourceList, e.g. ``{"cpu": "4", "memory": "8Gi"}``) stands in for limits a container
    does not set when a ``resourceFieldRef`` reads them, as the kubelet does; by default the
    host's CPU count and memory. ``objects`` holds the ConfigMaps and Secrets ``env_objects``
    names (absent or None: not found). The ``InvalidEnvironmentVariableNames`` messages are
    appended to ``warnings``. Raises :class:`EnvError` where the kubelet fails the container.
    """
    _enable_service_links(pod)  # checked before anything else, Services or not, as upstream does
    objects = objects or {}
    namespace = pod["metadata"].get("namespace") or ""
    service_env = dict(service_env_vars(services))
    declared: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        declared.update(_env_from(source, namespace, objects, warnings))
    for var in container.get("env") or []:
        value = var.get("value") or ""
        value_from = var.get("valueFrom")
        if value:
            # MappingFuncFor(declared, serviceEnv): live, so a reference sees what is declared so far.
            value = expand(value, ChainMap(declared, service_env))
        elif value_from:
            resolved = _value_from(value_from, pod, container, host_ip=host_ip, host_ips=host_ips, pod_ips=pod_ips,
                                   node_allocatable=node_allocatable, objects=objects)
            if resolved is None:
                continue  # an optional ConfigMap/Secret (or key) that is not there: no variable at all
            value = resolved
        declared[var["name"]] = value
    return list(declared.items()) + [(name, value) for name, value in service_env.items() if name not in declared]


def _object_data(kind: str, obj: dict) -> dict[str, str]:
    """A ConfigMap's ``data`` (``binaryData`` is not read for the environment) or a Secret's
    decoded ``data``; bytes that are no UTF-8 survive to the process (surrogate escapes)."""
    data = obj.get("data") or {}
    if kind == "secret":
        return {k: secret_bytes(v).decode(errors="surrogateescape") for k, v in data.items()}
    return {k: v for k, v in data.items() if isinstance(v, str)}


def _env_from(source: dict, namespace: str, objects: ObjectLookup, warnings: list[str] | None) -> dict[str, str]:
    """One ``envFrom`` source's variables (none when it is optional and missing)."""
    for kind, ref_key, label in (("configmap", "configMapRef", "configMap"), ("secret", "secretRef", "secret")):
        ref = source.get(ref_key)
        if ref is None:
            continue
        obj = objects.get(ObjectRef(kind, ref.get("name") or ""))
        if obj is None:
            if ref.get("optional"):
                return {}
            raise EnvError(_not_found(kind, ref))
        prefix = source.get("prefix") or ""
        result, invalid = {}, []
        for key, value in _object_data(kind, obj).items():
            name = prefix + key
            if _ENV_VAR_NAME.fullmatch(name):
                result[name] = value
            else:
                invalid.append(name)
        if invalid and warnings is not None:
            warnings.append(f"Keys [{', '.join(sorted(invalid))}] from the EnvFrom {label} {namespace}/{ref.get('name') or ''} "
                            "were skipped since they are considered invalid environment variable names.")
        return result
    return {}


def _not_found(kind: str, ref: dict) -> str:
    """The NotFound error of the kubelet's ConfigMap/Secret manager (``configmap "x" not found``)."""
    return f'{kind} {go_quote(ref.get("name", ""))} not found'


def _value_from(value_from: dict, pod: dict, container: dict, *, host_ip: str, host_ips: list[str], pod_ips: list[str],
                node_allocatable: Mapping[str, str] | None, objects: ObjectLookup) -> str | None:
    """A ``valueFrom``'s value; None when the variable is to be left out."""
    if (field_ref := value_from.get("fieldRef")) is not None:
        return pod_field_value(field_ref, pod, host_ip=host_ip, host_ips=host_ips, pod_ips=pod_ips)
    if (resource_ref := value_from.get("resourceFieldRef")) is not None:
        allocatable = node_allocatable if node_allocatable is not None else host_allocatable()
        return container_resource_value(resource_ref, pod, container, allocatable)
    for kind, ref_key, label in (("configmap", "configMapKeyRef", "ConfigMap"), ("secret", "secretKeyRef", "Secret")):
        ref = value_from.get(ref_key)
        if ref is None:
            continue
        obj = objects.get(ObjectRef(kind, ref.get("name") or ""))
        if obj is None:
            if ref.get("optional"):
                return None
            raise EnvError(_not_found(kind, ref))
        data, key = _object_data(kind, obj), ref.get("key") or ""
        if key not in data:
            if ref.get("optional"):
                return None
            raise EnvError(f"couldn't find key {key} in {label} {pod['metadata'].get('namespace') or ''}/{ref.get('name') or ''}")
        return data[key]
    return ""  # no source the kubelet knows: the variable is set, empty


# ---- downward API: fieldRef (podFieldSelectorRuntimeValue, pkg/fieldpath) ----------------------


def pod_field_value(field_ref: dict, pod: dict, *, host_ip: str, host_ips: list[str], pod_ips: list[str]) -> str:
    """``podFieldSelectorRuntimeValue``: the value of ``fieldRef.fieldPath`` for ``pod``. An
    absent ``apiVersion`` is taken as ``v1``, the API's default."""
    path = _downward_api_field(field_ref.get("apiVersion") or "v1", field_ref.get("fieldPath") or "")
    # The IPs in the node's family preference, at most one of each family (#97979).
    pod_ips = _sort_pod_ips(pod_ips, host_ip or (host_ips[0] if host_ips else ""))
    spec = pod.get("spec") or {}
    if path == "spec.nodeName":
        return spec.get("nodeName") or ""
    if path == "spec.serviceAccountName":
        return spec.get("serviceAccountName") or ""
    if path in ("status.hostIP", "status.hostIPs"):
        node_ips = list(host_ips) or ([host_ip] if host_ip else [])
        if not node_ips:
            raise EnvError("host IP unknown; known addresses: []")
        return (host_ip or node_ips[0]) if path == "status.hostIP" else ",".join(node_ips)
    if path == "status.podIP":
        return pod_ips[0] if pod_ips else ""
    if path == "status.podIPs":
        return ",".join(pod_ips)
    return extract_field_path(pod.get("metadata") or {}, path)


def _downward_api_field(api_version: str, field_path: str) -> str:
    """``ConvertDownwardAPIFieldLabel``: the internal field path, or the kubelet's error."""
    if api_version != "v1":
        raise EnvError(f"unsupported pod version: {api_version}")
    subscripted = _split_subscript(field_path)
    if subscripted is not None:
        if subscripted[0] not in ("metadata.annotations", "metadata.labels"):
            raise EnvError(f"field label does not support subscript: {field_path}")
        return field_path
    if field_path == "spec.host":  # old v1 clients
        return "spec.nodeName"
    if field_path not in _DOWNWARD_API_FIELDS:
        raise EnvError(f"field label not supported: {field_path}")
    return field_path


def _split_subscript(field_path: str) -> tuple[str, str] | None:
    """``SplitMaybeSubscriptedPath``: ``metadata.labels['app']`` -> (``metadata.labels``, ``app``)."""
    if not field_path.endswith("']"):
        return None
    path, sep, subscript = field_path[:-2].partition("['")
    if not sep or not path:
        return None
    return path, subscript


def extract_field_path(metadata: dict, path: str) -> str:
    """``fieldpath.ExtractFieldPathAsString`` on the Pod's metadata."""
    subscripted = _split_subscript(path)
    if subscripted is not None:
        field, key = subscripted
        # Annotation keys are checked lower-cased, label keys as written.
        errs = is_qualified_name(key.lower() if field == "metadata.annotations" else key)
        if errs:
            raise EnvError(f"invalid key subscript in {path}: {';'.join(errs)}")
        return (metadata.get(field.removeprefix("metadata.")) or {}).get(key, "")
    if path in ("metadata.annotations", "metadata.labels"):
        return _format_map(metadata.get(path.removeprefix("metadata.")) or {})
    if path in ("metadata.name", "metadata.namespace", "metadata.uid"):
        return metadata.get(path.removeprefix("metadata.")) or ""
    raise EnvError(f"unsupported fieldPath: {path}")


def _format_map(values: Mapping[str, str]) -> str:
    """``fieldpath.FormatMap``: ``key="value"`` lines, keys sorted."""
    return "\n".join(f"{key}={go_quote(values[key])}" for key in sorted(values))


def _sort_pod_ips(pod_ips: list[str], node_ip: str) -> list[str]:
    """``sortPodIPs``: the first valid IP of the node's family, then the first of the other
    (``utilnet.IsIPv4String``/``IsIPv6String``: ParseIPSloppy, so ``010.0.0.1`` is an IPv4 and a
    zoned ``fe80::1%eth0`` no IP)."""
    primary = IPV6 if ip_version(node_ip) == IPV6 else IPV4
    ordered = []
    for version in (primary, IPV4 + IPV6 - primary):
        ordered += [ip for ip in pod_ips if ip_version(ip) == version][:1]
    return ordered


# ---- downward API: resourceFieldRef (pkg/api/v1/resource) -------------------------------------


def host_allocatable() -> dict[str, str]:
    """This host's CPUs and memory as a ResourceList, the default node allocatable (asked of
    the kernel only when a ``resourceFieldRef`` needs a limit the container does not set)."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"cpu": str(os.cpu_count() or 1), "memory": str(memory)}


def container_resource_value(resource_ref: dict, pod: dict, container: dict, node_allocatable: Mapping[str, str]) -> str:
    """``containerResourceRuntimeValue`` on the Pod with limits defaulted to node allocatable
    (``defaultPodLimitsForDownwardAPI``): the amount in units of ``divisor``, rounded up."""
    name = resource_ref.get("containerName")
    if name:
        spec = pod.get("spec") or {}
        found = [c for group in ("containers", "initContainers") for c in spec.get(group) or [] if c.get("name") == name]
        if not found:
            raise EnvError(f"container {name} not found")
        container = found[0]
    resources = container.get("resources") or {}
    limits = _with_default_limits(resources.get("limits") or {}, node_allocatable)
    requests = resources.get("requests") or {}
    divisor = _quantity(resource_ref.get("divisor") or "0") or Decimal(1)
    resource = resource_ref.get("resource") or ""
    kind, _, resource_name = resource.partition(".")
    amounts = {"limits": limits, "requests": requests}.get(kind)
    if amounts is None or not (resource_name in _DEFAULTED_LIMITS or resource_name.startswith("hugepages-")):
        raise EnvError(f"unsupported container resource : {resource}")
    amount = _quantity(amounts.get(resource_name) or "0")
    if resource_name == "cpu":  # in millicores, each rounded up first (Quantity.MilliValue)
        return str(_ceil_div(math.ceil(amount * 1000), math.ceil(divisor * 1000)))
    return str(_ceil_div(math.ceil(amount), math.ceil(divisor)))  # Quantity.Value rounds up too


def _with_default_limits(limits: Mapping[str, str], node_allocatable: Mapping[str, str]) -> dict[str, str]:
    """``MergeContainerResourceLimits``: a missing or zero cpu/memory/ephemeral-storage limit
    becomes the node's allocatable amount."""
    merged = dict(limits)
    for name in _DEFAULTED_LIMITS:
        if not _quantity(merged.get(name) or "0") and name in node_allocatable:
            merged[name] = node_allocatable[name]
    return merged


def _quantity(value: str | int) -> Decimal:
    quantity = parse_quantity(value)
    if quantity is None:
        raise EnvError("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    return quantity


def _ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


# ---- the command line (ExpandContainerCommandAndArgs) ------------------------------------------


_NO_ENTRYPOINT = ("kubesvc runs no images, so container {name!r} needs a command: its image {image!r} is recorded, "
                  "not pulled, and has no entrypoint here")


def container_argv(container: dict, env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args`` with ``$(VAR)`` expanded against the container's environment;
    ``args`` alone when there is no ``command`` (an image without ENTRYPOINT, the only kind here)."""
    argv = [*(container.get("command") or []), *(container.get("args") or [])]
    if not argv:
        raise EnvError(_NO_ENTRYPOINT.format(name=container.get("name", ""), image=container.get("image", "")))
    return [expand(part, env) for part in argv]
