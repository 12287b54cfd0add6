"""The Service map as data: API objects in, boxes in five columns and the edges between them out
(pure functions; the page only draws what this returns).

The columns follow the path a connection to a Service takes through the API's objects:

    Service -> EndpointSlice -> endpoint -> Pod -> Node

* An EndpointSlice belongs to its Service by the ``kubernetes.io/service-name`` label (as
  kube-proxy's EndpointSliceCache joins them), not by owner reference: a mirrored or hand-made
  slice counts too.
* An endpoint's state is read from its conditions the way the EndpointSlice API defines them
  (``discovery.k8s.io/v1`` EndpointConditions): ``ready`` and ``serving`` nil mean unknown and
  are taken as true, ``terminating`` nil as false. Four states, each drawn in its own colour:
  ``ready``; ``serving-terminating`` (terminating but still serving: kube-proxy falls back to
  these only when a Service has no ready endpoint); ``terminating`` (and not serving); and
  ``not-ready``.
* A Pod's state is its ``Ready`` condition, ``terminating`` once it has a deletionTimestamp.
* A Service shows what decides where its traffic may go: ``internalTrafficPolicy``,
  ``externalTrafficPolicy`` (only meaningful for NodePort and LoadBalancer Services),
  ``trafficDistribution``, ``sessionAffinity``; an endpoint shows its topology ``hints``
  (``forZones``/``forNodes``) and zone.
* A Node shows its Ready condition and its proxy's health as read from the proxy's health
  endpoint (kube-proxy's ``/healthz`` on port 10256: healthy, and ``lastUpdated``, the time of
  its last successful sync, per IP family), read by ``explain.gather.proxy_health``.

Rows: each Service gets a band as tall as its endpoints (at least one row); its slices sit at
the first row of their endpoints. Pods and Nodes are shared (two Services may select the same
Pods), so each is drawn once, in the order it is first reached, and Pods no slice names follow.
"""

from __future__ import annotations

from collections.abc import Iterable

from kubesvc.explain.findings import SERVICE_NAME_LABEL, ProxyHealth

COLUMNS = ("service", "slice", "endpoint", "pod", "node")

READY, SERVING_TERMINATING, TERMINATING, NOT_READY = "ready", "serving-terminating", "terminating", "not-ready"
UNKNOWN, HEALTHY, UNHEALTHY = "unknown", "healthy", "unhealthy"


def endpoint_state(conditions: dict | None) -> str:
    """One of the four states of an EndpointSlice endpoint (nil ready/serving: true; nil terminating: false)."""
    conditions = conditions or {}
    ready = conditions.get("ready") is not False
    serving = conditions.get("serving", conditions.get("ready")) is not False
    terminating = conditions.get("terminating") is True
    if terminating:
        return SERVING_TERMINATING if serving else TERMINATING
    return READY if ready else NOT_READY


def pod_state(pod: dict) -> str:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return TERMINATING
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return READY if condition.get("status") == "True" else NOT_READY
    return NOT_READY


def node_state(node: dict) -> str:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return READY if condition.get("status") == "True" else NOT_READY
    return UNKNOWN


def proxy_state(health: ProxyHealth | None) -> str:
    if health is None or health.healthy is None:
        return UNKNOWN
    return HEALTHY if health.healthy else UNHEALTHY


def service_id(service: dict) -> str:
    return f"service/{_namespace(service)}/{_name(service)}"


def pod_id(namespace: str, name: str) -> str:
    return f"pod/{namespace}/{name}"


def node_id(name: str) -> str:
    return f"node/{name}"


def traffic(service: dict) -> dict:
    """What decides where the Service's traffic may go, as the page shows it (defaults filled as the API defaults them)."""
    spec = service.get("spec") or {}
    kind = spec.get("type") or "ClusterIP"
    shown = {
        "type": kind,
        "clusterIPs": spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else []),
        "ports": [_port_text(p) for p in spec.get("ports") or []],
        "internalTrafficPolicy": spec.get("internalTrafficPolicy") or "Cluster",
        "sessionAffinity": spec.get("sessionAffinity") or "None",
    }
    if kind in ("NodePort", "LoadBalancer"):
        shown["externalTrafficPolicy"] = spec.get("externalTrafficPolicy") or "Cluster"
    if spec.get("trafficDistribution"):
        shown["trafficDistribution"] = spec["trafficDistribution"]
    if spec.get("selector"):
        shown["selector"] = ",".join(f"{k}={v}" for k, v in sorted(spec["selector"].items()))
    return shown


def policy_line(shown: dict) -> str:
    """``internal Cluster, external Local, affinity ClientIP, PreferClose``: the traffic settings in one line."""
    parts = [f"internal {shown['internalTrafficPolicy']}"]
    if "externalTrafficPolicy" in shown:
        parts.append(f"external {shown['externalTrafficPolicy']}")
    if shown["sessionAffinity"] != "None":
        parts.append(f"affinity {shown['sessionAffinity']}")
    if "trafficDistribution" in shown:
        parts.append(shown["trafficDistribution"])
    return ", ".join(parts)


def hints_text(endpoint: dict) -> str:
    """``zones: a, b; nodes: n1`` from an endpoint's hints; empty without hints."""
    hints = endpoint.get("hints") or {}
    parts = []
    zones = [z.get("name", "") for z in hints.get("forZones") or []]
    nodes = [n.get("name", "") for n in hints.get("forNodes") or []]
    if zones:
        parts.append("zones: " + ", ".join(zones))
    if nodes:
        parts.append("nodes: " + ", ".join(nodes))
    return "; ".join(parts)


def service_map(services: Iterable[dict], slices: Iterable[dict], pods: Iterable[dict], nodes: Iterable[dict],
                proxies: Iterable[ProxyHealth] = ()) -> dict:
    """``{"boxes": [...], "edges": [...], "rows": N}``: every box has ``id``, ``kind`` (its
    column's name), ``column``, ``row``, ``label``, ``state`` and ``details`` (lines of text);
    an edge joins two box ids. Sorted by namespace and name, so the same objects give the same map."""
    services = sorted(services, key=_key)
    pods = sorted(pods, key=_key)
    nodes = sorted(nodes, key=_key)
    health = {p.node: p for p in proxies}
    slices_of: dict[tuple[str, str], list[dict]] = {}
    for item in sorted(slices, key=_key):
        owner = ((item.get("metadata") or {}).get("labels") or {}).get(SERVICE_NAME_LABEL)
        if owner:
            slices_of.setdefault((_namespace(item), owner), []).append(item)
    pod_by_name = {(_namespace(p), _name(p)): p for p in pods}
    boxes: list[dict] = []
    edges: list[dict] = []
    pod_rows: dict[str, int] = {}
    node_rows: dict[str, int] = {}

    def place_pod(namespace: str, name: str) -> str:
        ident = pod_id(namespace, name)
        if ident not in pod_rows:
            pod_rows[ident] = len(pod_rows)
            pod = pod_by_name.get((namespace, name))
            boxes.append(_pod_box(ident, namespace, name, pod, pod_rows[ident]))
            node_name = ((pod or {}).get("spec") or {}).get("nodeName")
            if node_name:
                edges.append({"from": ident, "to": place_node(node_name)})
        return ident

    def place_node(name: str) -> str:
        ident = node_id(name)
        if ident not in node_rows:
            node_rows[ident] = len(node_rows)
        return ident

    row = 0
    for service in services:
        sid = service_id(service)
        shown = traffic(service)
        details = [f"{shown['type']} {', '.join(shown['clusterIPs'])}".rstrip(), "ports: " + ", ".join(shown["ports"])]
        details.append(policy_line(shown))
        own = slices_of.get((_namespace(service), _name(service)), [])
        endpoints = [(item, ep) for item in own for ep in item.get("endpoints") or []]
        states = [endpoint_state(ep.get("conditions")) for _, ep in endpoints]
        boxes.append({"id": sid, "kind": "service", "column": 0, "row": row, "label": f"{_namespace(service)}/{_name(service)}",
                      "state": _service_state(states), "details": details, "traffic": shown,
                      "namespace": _namespace(service), "name": _name(service)})
        slice_row = endpoint_row = row
        for item in own:
            slice_ident = f"slice/{_namespace(item)}/{_name(item)}"
            count = len(item.get("endpoints") or [])
            ports = [_port_text(p) for p in item.get("ports") or []]
            boxes.append({"id": slice_ident, "kind": "slice", "column": 1, "row": slice_row, "label": _name(item),
                          "state": _service_state([endpoint_state(e.get("conditions")) for e in item.get("endpoints") or []]),
                          "details": [f"{item.get('addressType', '')}, {count} endpoint{'s' if count != 1 else ''}",
                                      "ports: " + (", ".join(ports) or "(none)")]})
            edges.append({"from": sid, "to": slice_ident})
            for index, endpoint in enumerate(item.get("endpoints") or []):
                ident = f"endpoint/{_namespace(item)}/{_name(item)}/{index}"
                state = endpoint_state(endpoint.get("conditions"))
                where = ", ".join(x for x in (f"node {endpoint['nodeName']}" if endpoint.get("nodeName") else "",
                                               f"zone {endpoint['zone']}" if endpoint.get("zone") else "") if x)
                details = [f"{state}" + (f", {where}" if where else ""), "hints: " + (hints_text(endpoint) or "none")]
                details.append(", ".join(f"{k}={v}" for k, v in sorted((endpoint.get("conditions") or {}).items())) or "no conditions")
                boxes.append({"id": ident, "kind": "endpoint", "column": 2, "row": endpoint_row,
                              "label": ", ".join(endpoint.get("addresses") or []), "state": state, "details": details,
                              "hints": hints_text(endpoint)})
                edges.append({"from": slice_ident, "to": ident})
                ref = endpoint.get("targetRef") or {}
                if ref.get("kind") == "Pod" and ref.get("name"):
                    edges.append({"from": ident, "to": place_pod(ref.get("namespace") or _namespace(item), ref["name"])})
                elif endpoint.get("nodeName"):
                    edges.append({"from": ident, "to": place_node(endpoint["nodeName"])})
                endpoint_row += 1
            slice_row = max(slice_row + 1, endpoint_row)
        row = max(row + 1, slice_row, endpoint_row)
    for pod in pods:
        place_pod(_namespace(pod), _name(pod))
    for node in nodes:
        place_node(_name(node))
    node_by_name = {_name(n): n for n in nodes}
    for ident, node_row in node_rows.items():
        name = ident.split("/", 1)[1]
        boxes.append(_node_box(ident, name, node_by_name.get(name), health.get(name), node_row))
    rows = max([row, len(pod_rows), len(node_rows)] or [0])
    return {"boxes": boxes, "edges": edges, "rows": rows}


def _pod_box(ident: str, namespace: str, name: str, pod: dict | None, row: int) -> dict:
    if pod is None:  # a slice names a Pod the API no longer has (deleted, slice not yet updated)
        return {"id": ident, "kind": "pod", "column": 3, "row": row, "label": f"{namespace}/{name}", "state": UNKNOWN,
                "details": ["not found"]}
    status = pod.get("status") or {}
    ips = ", ".join(p.get("ip", "") for p in status.get("podIPs") or []) or status.get("podIP") or "(no IP)"
    state = pod_state(pod)
    return {"id": ident, "kind": "pod", "column": 3, "row": row, "label": f"{namespace}/{name}", "state": state,
            "details": [f"{state}, {status.get('phase', 'Pending')}", ips]}


def _node_box(ident: str, name: str, node: dict | None, health: ProxyHealth | None, row: int) -> dict:
    proxy = proxy_state(health)
    shown = "unreachable" if health is not None and health.healthy is None else proxy if health is not None else "not read"
    details = [f"node {node_state(node) if node else 'not found'}, proxy {shown}"]
    if health is not None:
        details.append(health.error if health.healthy is None else last_sync(health))
    return {"id": ident, "kind": "node", "column": 4, "row": row, "label": name,
            "state": READY if node is not None and node_state(node) == READY and proxy == HEALTHY else
            (NOT_READY if node is not None and (node_state(node) == NOT_READY or proxy == UNHEALTHY) else UNKNOWN),
            "details": details,
            "proxy": {"state": proxy, "lastUpdated": health.last_updated if health else "", "error": health.error if health else "",
                      "url": health.address if health else ""}}


def last_sync(health: ProxyHealth) -> str:
    """``last sync IPv4 10:00:58`` (per family, the time of day of its last successful sync, UTC as
    the proxy reports it); ``never synced`` when no family has."""
    times = [(family, _time_of_day(stamp)) for family, stamp in health.synced if stamp and not stamp.startswith("0001-")]
    if not times:
        return "never synced" if health.synced else f"reported {_time_of_day(health.last_updated) or 'nothing'}"
    return "last sync " + ", ".join(f"{family} {when}" for family, when in times)


def _time_of_day(stamp: str) -> str:
    """``10:00:58`` from Go's RFC 3339 ``2026-11-27T10:00:58.123456789Z``."""
    _, sep, clock = stamp.partition("T")
    return clock[:8] if sep else stamp


def _service_state(states: list[str]) -> str:
    """A Service (or slice) is ``ready`` with a ready endpoint, ``serving-terminating`` with only
    those to fall back on, else ``not-ready`` (no endpoint at all included)."""
    if READY in states:
        return READY
    if SERVING_TERMINATING in states:
        return SERVING_TERMINATING
    return NOT_READY


def _port_text(port: dict) -> str:
    name = f"{port['name']}:" if port.get("name") else ""
    target = port.get("targetPort")
    number = port.get("port")
    text = f"{name}{number}" + (f"->{target}" if target is not None and target != number else "")
    if port.get("nodePort"):
        text += f" (node {port['nodePort']})"
    return f"{text}/{port.get('protocol') or 'TCP'}"


def _key(obj: dict) -> tuple[str, str]:
    return _namespace(obj), _name(obj)


def _name(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("name", "")


def _namespace(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("namespace", "")
