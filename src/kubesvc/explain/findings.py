"""The causes of a Service that does not answer, as a pure function of what the API and the
nodes say (``explain``), each one line with the fix a user would make.

The checks follow the Kubernetes "Debug Services" task page, in its order, and use the same
rules as the components they second-guess:

- **Selector** (``spec.selector``, equality only, as the EndpointSlice controller's
  ``labels.SelectorFromSet``): no Pod matching is the commonest cause. The nearest Pods (most
  selector pairs matched) are named with the pairs they miss.
- **Readiness**: a matching Pod serves only when Ready (``podutil.IsPodReady``); a terminal
  Pod (``Succeeded``/``Failed``) never does; a terminating one only as a fallback. Why it is not
  Ready comes from its status as the kubelet writes it (``CrashLoopBackOff`` and other waiting
  reasons, a terminated container) and from the kubelet's ``Unhealthy`` Events for a failing
  readiness probe.
- **targetPort**: a name is looked up in the Pod's container ports with the Service port's
  protocol (``podutil.FindPort``); a Pod without it gets no such port in its endpoint. A number is
  used as is, so it is only suspicious when the Pods declare ports and none is that number.
- **EndpointSlices** (label ``kubernetes.io/service-name``): none at all for a Service with a
  selector means the controller is not running; a Ready Pod missing, or an endpoint of a Pod that
  is gone, means it is behind.
- **Traffic policies**: ``internalTrafficPolicy: Local`` drops a node's own Pods' traffic when
  the node has no ready endpoint; ``externalTrafficPolicy: Local`` drops external clients at a
  NodePort on such a node (kube-proxy's ``CategorizeEndpoints``).
- **Proxies**: kube-proxy's ``/healthz`` (``:10256``) says 503 when a queued change has not been
  synced within its health timeout.
- **DNS**: ``<service>.<namespace>.svc.<domain>`` asked of the ``kube-system/kube-dns`` Service.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MAX_NAMED = 3  # Pods named in one finding before "and N more"

ERROR, WARNING, INFO, OK = "error", "warning", "info", "ok"  # info: worth knowing, not a fault of this Service


@dataclass(frozen=True)
class Finding:
    cause: str  # a stable name for tools (``-o json``): selector-matches-nothing, pod-crash-looping, ...
    severity: str  # error | warning | info | ok
    message: str
    fix: str = ""

    def line(self) -> str:
        label = {ERROR: "ERROR", WARNING: "WARNING", INFO: "NOTE", OK: "OK"}[self.severity]
        return f"{label:8}{self.message}" + (f". Fix: {self.fix}" if self.fix else "")


@dataclass(frozen=True)
class ProxyHealth:
    """A node's proxy health endpoint as read: ``healthy`` None when it could not be read."""
    node: str
    address: str
    healthy: bool | None
    last_updated: str = ""
    error: str = ""
    synced: tuple[tuple[str, str], ...] = ()  # (IP family, its last successful sync) from the body's "status"


@dataclass(frozen=True)
class DnsAnswer:
    """The Service's name asked of the cluster DNS: ``addresses`` on an answer, else ``error``."""
    name: str
    server: str
    addresses: tuple[str, ...] = ()
    error: str = ""


@dataclass
class Snapshot:
    service: dict
    pods: list[dict] = field(default_factory=list)  # every Pod of the Service's namespace
    slices: list[dict] = field(default_factory=list)  # the Service's EndpointSlices
    events: list[dict] = field(default_factory=list)  # the namespace's Events about Pods
    nodes: list[dict] = field(default_factory=list)
    node: str | None = None  # the node asking (traffic policies are per node)
    proxies: list[ProxyHealth] = field(default_factory=list)
    dns: DnsAnswer | None = None
    dns_service: bool = True  # kube-system/kube-dns exists


def explain(snapshot: Snapshot) -> list[Finding]:
    """Every cause found, errors first; one ``ok`` finding when there is none."""
    service = snapshot.service
    spec = service.get("spec") or {}
    if spec.get("type") == "ExternalName":
        return [*_dns_findings(snapshot), Finding("external-name", OK, f"{_ref(service)} is an ExternalName Service: a DNS "
                                                  f"CNAME to {spec.get('externalName', '')}, with no virtual IP or endpoints by design")]
    selector = spec.get("selector") or {}
    findings: list[Finding] = []
    matched: list[dict] = []
    if selector:
        matched = [pod for pod in snapshot.pods if _matches(selector, _labels(pod))]
        if not matched:
            findings.append(_nothing_matches(service, selector, snapshot.pods))
        findings.extend(_readiness_findings(matched, snapshot.events))
        findings.extend(_target_port_findings(service, matched))
    findings.extend(_slice_findings(service, selector, matched, snapshot.slices))
    findings.extend(_policy_findings(service, snapshot))
    findings.extend(_proxy_findings(snapshot.proxies))
    findings.extend(_dns_findings(snapshot))
    findings.sort(key=lambda f: (f.severity != ERROR, f.severity != WARNING, f.severity != INFO))
    if not any(f.severity in (ERROR, WARNING) for f in findings):
        findings.append(_healthy(service, snapshot))
    return findings


def as_json(findings: Iterable[Finding]) -> list[dict]:
    return [asdict(f) for f in findings]


# -- selector -----------------------------------------------------------------------------------

def _nothing_matches(service: dict, selector: Mapping[str, str], pods: list[dict]) -> Finding:
    namespace = _namespace(service)
    wanted = _pairs(selector)
    scored = sorted(((_nearness(selector, _labels(p)), _name(p), p) for p in pods), key=lambda item: (-item[0][0], -item[0][1], item[1]))
    near = [(name, pod) for score, name, pod in scored if score[0] > 0 or set(selector) & set(_labels(pod))][:MAX_NAMED]
    if not pods:
        return Finding("selector-matches-nothing", ERROR, f"selector {wanted} matches no Pod: namespace {namespace} has no Pods",
                       f"create the Pods (or a Deployment) with labels {wanted} in {namespace}")
    if not near:
        return Finding("selector-matches-nothing", ERROR,
                       f"selector {wanted} matches no Pod in {namespace}, and no Pod there has any of its labels",
                       f"label the Pods that should serve it {wanted} (kubectl label pod NAME {_kubectl_pairs(selector)}), "
                       "or change the Service's selector")
    described = "; ".join(f"{name} has {_pairs(_labels(pod)) or 'no labels'}" for name, pod in near)
    first = near[0][0]
    return Finding("selector-matches-nothing", ERROR, f"selector {wanted} matches no Pod in {namespace} (nearest: {described})",
                   f"kubectl label pod {first} {_kubectl_pairs(selector)} --overwrite, or change the Service's selector to "
                   "the labels the Pods have")


def _nearness(selector: Mapping[str, str], labels: Mapping[str, str]) -> tuple[int, float]:
    """How near ``labels`` come to matching: the selector pairs they match, then how alike their
    values are for the selector's keys (a typo, ``app=webb`` for ``app=web``, is near)."""
    matched = sum(labels.get(k) == v for k, v in selector.items())
    alike = sum(difflib.SequenceMatcher(None, labels[k], v).ratio() for k, v in selector.items() if k in labels)
    return matched, alike


# -- readiness ----------------------------------------------------------------------------------

def _readiness_findings(pods: list[dict], events: list[dict]) -> list[Finding]:
    """One finding per cause, naming the Pods it holds back (at most MAX_NAMED of them)."""
    grouped: dict[tuple[str, str], list[tuple[str, str]]] = {}
    fixes: dict[tuple[str, str], str] = {}
    for pod in pods:
        reason = not_ready_reason(pod, events)
        if reason is None:
            continue
        cause, detail, fix = reason
        key = (cause, detail)
        grouped.setdefault(key, []).append((_name(pod), fix))
        fixes.setdefault(key, fix)
    # while some Pod serves, the others are a warning: the Service answers, with less capacity
    serving = any(_condition_true(p, "Ready") and not (p.get("metadata") or {}).get("deletionTimestamp") for p in pods)
    findings = []
    for (cause, detail), named in grouped.items():
        names = [name for name, _ in named]
        who = "Pod " + names[0] if len(names) == 1 else "Pods " + _some(names)
        severity = WARNING if serving or cause == "pod-terminating" else ERROR
        findings.append(Finding(cause, severity, f"{who} {detail}", fixes[(cause, detail)]))
    return findings


def not_ready_reason(pod: dict, events: list[dict]) -> tuple[str, str, str] | None:
    """Why a Pod is not serving: (cause, what it is doing, the fix); None when it is Ready."""
    name = _name(pod)
    status = pod.get("status") or {}
    phase = status.get("phase", "")
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "pod-terminating", "is terminating (it serves only while no other endpoint is ready)", \
            "wait for its replacement, or find what deletes it (kubectl get events)"
    if phase in ("Succeeded", "Failed"):
        return "pod-exited", f"has exited (phase {phase}) and never serves again", \
            "recreate it, or run it from a Deployment so it is replaced"
    if not (pod.get("spec") or {}).get("nodeName"):
        condition = _condition(pod, "PodScheduled")
        why = (condition or {}).get("message") or "no node chosen yet"
        return "pod-unscheduled", f"is not scheduled: {why}", "kubectl get nodes: is any node Ready and schedulable?"
    if _condition_true(pod, "Ready"):
        return None
    for container in status.get("containerStatuses") or []:
        cname = container.get("name", "")
        state = container.get("state") or {}
        waiting = state.get("waiting")
        if waiting and waiting.get("reason") == "CrashLoopBackOff":
            last = ((container.get("lastState") or {}).get("terminated") or {})
            code = f", last exit code {last['exitCode']}" if "exitCode" in last else ""
            return "pod-crash-looping", f"container {cname} is crash-looping ({container.get('restartCount', 0)} restarts{code})", \
                f"kubectl logs {name} -c {cname} --previous"
        if waiting:
            message = f": {waiting['message']}" if waiting.get("message") else ""
            return "pod-waiting", f"container {cname} is waiting ({waiting.get('reason', 'unknown')}{message})", \
                f"kubectl describe pod {name}"
        if state.get("terminated"):
            code = state["terminated"].get("exitCode")
            return "pod-container-exited", f"container {cname} has exited (exit code {code})", \
                f"kubectl logs {name} -c {cname}"
    probe_failure = _last_event(events, name, "Unhealthy", "Readiness probe")
    if probe_failure:
        return "pod-readiness-failing", f"fails its readiness probe ({probe_failure})", \
            f"make the probe match what the container serves (port, path): kubectl describe pod {name}"
    for gate in (pod.get("spec") or {}).get("readinessGates") or []:
        if not _condition_true(pod, gate.get("conditionType", "")):
            return "pod-readiness-gate", f"waits for its readiness gate {gate.get('conditionType', '')}", \
                "the controller that owns the gate sets the condition; check it is running"
    ready = _condition(pod, "Ready") or {}
    why = ": ".join(filter(None, (ready.get("reason"), ready.get("message")))) or f"phase {phase or 'unknown'}"
    return "pod-not-ready", f"is not Ready ({why})", f"kubectl describe pod {name}"


# -- targetPort ---------------------------------------------------------------------------------

def _target_port_findings(service: dict, pods: list[dict]) -> list[Finding]:
    if not pods:
        return []
    findings = []
    for port in (service.get("spec") or {}).get("ports") or []:
        target = port.get("targetPort", port.get("port"))
        protocol = port.get("protocol", "TCP")
        label = f"port {port.get('name') or port.get('port')}"
        if isinstance(target, str) and not target.isdigit():
            missing = [_name(p) for p in pods if find_port(p, target, protocol) is None]
            if not missing:
                continue
            named = sorted({c["name"] for p in pods for c in _container_ports(p) if c.get("name")})
            have = f" (their named ports: {', '.join(named)})" if named else " (they name no ports)"
            severity = ERROR if len(missing) == len(pods) else WARNING
            findings.append(Finding("target-port-name-unknown", severity,
                                    f"{label}: targetPort {target!r} names no {protocol} containerPort of "
                                    f"{'Pod' if len(missing) == 1 else 'Pods'} {_some(missing)}{have}",
                                    f"name the container port {target!r} in the Pod template (ports: - name: {target}), "
                                    "or set targetPort to the number the container listens on"))
            continue
        number = int(target)
        declaring = [p for p in pods if _container_ports(p)]
        if declaring and not any(find_port(p, number, protocol) is not None for p in declaring):
            declared = sorted({c.get("containerPort") for p in declaring for c in _container_ports(p)})
            findings.append(Finding("target-port-not-declared", WARNING,
                                    f"{label}: no container of the Pods declares {protocol} port {number} (they declare "
                                    f"{', '.join(map(str, declared))}); traffic goes to {number} anyway: is anything listening there?",
                                    "set targetPort to the port the container listens on"))
    return findings


def find_port(pod: dict, target: str | int, protocol: str) -> int | None:
    """``podutil.FindPort``: a name looked up in the containers' ports (with the protocol), a
    number used as is."""
    if isinstance(target, int):
        return target if any(c.get("containerPort") == target and c.get("protocol", "TCP") == protocol
                             for c in _container_ports(pod)) else None
    for port in _container_ports(pod):
        if port.get("name") == target and port.get("protocol", "TCP") == protocol:
            return port.get("containerPort")
    return None


# -- EndpointSlices -----------------------------------------------------------------------------

def _slice_findings(service: dict, selector: Mapping[str, str], pods: list[dict], slices: list[dict]) -> list[Finding]:
    name = _name(service)
    if not slices:
        if selector:
            return [Finding("no-endpointslice", ERROR, f"no EndpointSlice is labelled {SERVICE_NAME_LABEL}={name}: the "
                            "EndpointSlice controller has not written one",
                            "check the controller-manager runs (kubectl -n kube-system get lease kube-controller-manager; "
                            "its log in <data-dir>/logs/controller-manager.log)")]
        return [Finding("no-selector-no-endpoints", ERROR, f"{_ref(service)} has no selector and no EndpointSlice: nothing backs it",
                        f"give it a selector, or create an EndpointSlice labelled {SERVICE_NAME_LABEL}={name}")]
    if not selector:
        return []
    ready_ips = {ip: _name(p) for p in pods if _condition_true(p, "Ready") and not (p.get("metadata") or {}).get("deletionTimestamp")
                 for ip in _pod_ips(p)}
    all_ips = {ip for p in pods for ip in _pod_ips(p)}
    listed_ready = set()
    listed = set()
    for endpoint in _endpoints(slices):
        addresses = endpoint.get("addresses") or []
        listed.update(addresses)
        if (endpoint.get("conditions") or {}).get("ready") is not False:
            listed_ready.update(addresses)
    findings = []
    lagging = sorted({pod for ip, pod in ready_ips.items() if ip not in listed_ready})
    if lagging:
        findings.append(Finding("endpointslice-stale", ERROR,
                                f"the EndpointSlices lag behind the Pods: Ready {'Pod' if len(lagging) == 1 else 'Pods'} "
                                f"{_some(lagging)} not listed as ready endpoints",
                                "the EndpointSlice controller is behind or failing: check the controller-manager's log"))
    gone = sorted(listed - all_ips)
    if gone:
        findings.append(Finding("endpointslice-stale", ERROR,
                                f"the EndpointSlices list {_some(gone)}, which no matching Pod has",
                                "the EndpointSlice controller is behind or failing: check the controller-manager's log"))
    return findings


# -- traffic policies ---------------------------------------------------------------------------

def _policy_findings(service: dict, snapshot: Snapshot) -> list[Finding]:
    spec = service.get("spec") or {}
    node = snapshot.node
    internal_local = spec.get("internalTrafficPolicy") == "Local"
    external_local = spec.get("externalTrafficPolicy") == "Local" and spec.get("type") in ("NodePort", "LoadBalancer")
    if not (internal_local or external_local) or not node:
        return []
    ready_by_node = Counter(endpoint.get("nodeName", "") for endpoint in _endpoints(snapshot.slices)
                            if (endpoint.get("conditions") or {}).get("ready") is not False)
    if ready_by_node.get(node):
        return []
    elsewhere = ", ".join(sorted(n for n in ready_by_node if n)) or "none"
    findings = []
    if internal_local:
        findings.append(Finding("no-local-endpoint-internal", ERROR,
                                f"internalTrafficPolicy is Local and node {node} has no ready endpoint: connections from "
                                f"{node} and its Pods to {spec.get('clusterIP', '')} are dropped (nodes with endpoints: {elsewhere})",
                                f"run a backend Pod on {node}, or set internalTrafficPolicy: Cluster"))
    if external_local:
        ports = ", ".join(str(p["nodePort"]) for p in spec.get("ports") or [] if p.get("nodePort"))
        findings.append(Finding("no-local-endpoint-external", WARNING,
                                f"externalTrafficPolicy is Local and node {node} has no ready endpoint: external clients "
                                f"of NodePort {ports or '(none)'} on {node} are dropped (nodes with endpoints: {elsewhere})",
                                "send clients to a node with an endpoint, or set externalTrafficPolicy: Cluster "
                                "(clients' source addresses are then not kept)"))
    return findings


# -- proxies and DNS ----------------------------------------------------------------------------

def _proxy_findings(proxies: list[ProxyHealth]) -> list[Finding]:
    findings = []
    for proxy in proxies:
        if proxy.healthy is False:
            since = f" since {proxy.last_updated}" if proxy.last_updated else ""
            findings.append(Finding("proxy-not-synced", ERROR,
                                    f"the proxy on node {proxy.node} has not synced its rules{since} ({proxy.address} says unhealthy)",
                                    f"check kubesvc proxy on {proxy.node} (its log: <data-dir>/logs/proxy.log)"))
        elif proxy.healthy is None:
            findings.append(Finding("proxy-unreachable", WARNING,
                                    f"the proxy on node {proxy.node} did not answer at {proxy.address}: {proxy.error}",
                                    f"check kubesvc proxy runs on {proxy.node}"))
    return findings


def _dns_findings(snapshot: Snapshot) -> list[Finding]:
    if not snapshot.dns_service:
        return [Finding("no-cluster-dns", INFO, "there is no kube-system/kube-dns Service: Pods cannot find Services by name",
                        "start the cluster DNS (kubesvc up runs it)")]
    answer = snapshot.dns
    if answer is None:
        return []
    if answer.error:
        return [Finding("dns-not-resolving", ERROR, f"{answer.name} does not resolve at {answer.server}: {answer.error}",
                        "check the cluster DNS: kubectl -n kube-system get pods -l k8s-app=kube-dns")]
    spec = snapshot.service.get("spec") or {}
    cluster_ips = set(spec.get("clusterIPs") or [spec.get("clusterIP")]) - {None, "", "None"}
    if cluster_ips and not cluster_ips & set(answer.addresses):
        return [Finding("dns-wrong-answer", ERROR, f"{answer.name} resolves to {', '.join(answer.addresses) or 'nothing'}, "
                        f"not to the Service's {', '.join(sorted(cluster_ips))}",
                        "the cluster DNS is behind: check its log (kubectl -n kube-system logs -l k8s-app=kube-dns)")]
    return []


def _healthy(service: dict, snapshot: Snapshot) -> Finding:
    spec = service.get("spec") or {}
    per_node = Counter(endpoint.get("nodeName") or "?" for endpoint in _endpoints(snapshot.slices)
                       if (endpoint.get("conditions") or {}).get("ready") is not False)
    where = ", ".join(f"{node}: {count}" for node, count in sorted(per_node.items()))
    ports = ", ".join(str(p.get("port")) for p in spec.get("ports") or [])
    vip = spec.get("clusterIP", "")
    target = f"{vip}:{ports}" if vip and vip != "None" else f"headless, ports {ports}"
    checked = []
    if snapshot.proxies:
        checked.append(f"{len(snapshot.proxies)} proxy{'ies' if len(snapshot.proxies) != 1 else ''} synced")
    if snapshot.dns and not snapshot.dns.error:
        checked.append(f"{snapshot.dns.name} resolves")
    count = sum(per_node.values())
    return Finding("healthy", OK, f"{_ref(service)} is healthy: {count} ready endpoint{'s' if count != 1 else ''} ({where or 'none'}) "
                   f"behind {target}" + (f"; {', '.join(checked)}" if checked else ""))


# -- small helpers ------------------------------------------------------------------------------

def _endpoints(slices: list[dict]) -> Iterable[dict]:
    for item in slices:
        yield from item.get("endpoints") or []


def _matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _labels(obj: dict) -> dict:
    return (obj.get("metadata") or {}).get("labels") or {}


def _name(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("name", "")


def _namespace(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("namespace", "")


def _ref(service: dict) -> str:
    return f"svc/{_name(service)}"


def _pairs(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _kubectl_pairs(labels: Mapping[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _some(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_NAMED])
    return shown + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")


def _container_ports(pod: dict) -> list[dict]:
    return [port for c in (pod.get("spec") or {}).get("containers") or [] for port in c.get("ports") or []]


def _pod_ips(pod: dict) -> list[str]:
    status = pod.get("status") or {}
    ips = [entry.get("ip") for entry in status.get("podIPs") or [] if entry.get("ip")]
    return ips or ([status["podIP"]] if status.get("podIP") else [])


def _condition(pod: dict, kind: str) -> dict | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition
    return None


def _condition_true(pod: dict, kind: str) -> bool:
    return (_condition(pod, kind) or {}).get("status") == "True"


def _last_event(events: list[dict], pod: str, reason: str, prefix: str) -> str:
    """The newest message of ``reason`` about ``pod`` starting with ``prefix`` ("" if none)."""
    found = [e for e in events if (e.get("involvedObject") or {}).get("name") == pod and e.get("reason") == reason
             and (e.get("message") or "").startswith(prefix)]
    if not found:
        return ""
    newest = max(found, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp") or "")
    return newest.get("message", "")
