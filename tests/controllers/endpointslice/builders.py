"""Objects for the EndpointSlice reconciler tests, in API JSON shape, modelled on upstream's test
helpers (``staging/src/k8s.io/endpointslice/utils_test.go``: ``newPod``,
``newServiceAndEndpointMeta``, ``newEmptyEndpointSlice``; ``reconciler_test.go``: the fake
clientset that names created slices and bumps generations).

``Cluster`` stands in for the apiserver behind the controller shell: it holds the slices, runs
the pure ``reconcile`` against them, checks that the inputs were not mutated (they are informer
cache objects), and applies the plan as the controller would (creates get a name and uid from
``generateName``, updates must name an existing slice and keep its addressType, deletes must
name an existing slice).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable

from kubesvc.controllers.endpointslice.reconciler import CONTROLLER_NAME, Plan, reconcile
from kubesvc.controllers.endpointslice.util import (
    LABEL_MANAGED_BY,
    LABEL_SERVICE_NAME,
    address_family,
    controller_ref,
    pod_to_endpoint,
)
from tests.support import builders

NS = "test"
DEFAULT_MAX = 100
TOPOLOGY_ZONE = "topology.kubernetes.io/zone"


def pod_ip(n: int) -> str:
    """Upstream's ``1.2.3.<4+n>``, continued into 1.2.4.x and on so every pod has a valid IP."""
    value = 4 + n
    return f"1.2.{3 + value // 256}.{value % 256}"


def new_pod(n: int, ns: str = NS, ready: bool = True, terminating: bool = False, node: str = "node-1",
            ips: list[str] | None = None) -> dict:
    """``newPod(n, namespace, ready, 1, terminating)``."""
    return {"apiVersion": "v1", "kind": "Pod",
            **builders.pod(ns, f"pod{n}", ips=ips if ips is not None else [pod_ip(n)], ready=ready, node=node, labels={"foo": "bar"},
                           containers=[{"name": "container-1"}], terminating=terminating, uid=f"uid-pod{n}", resourceVersion=str(n))}


def set_ready(pod: dict, ready: bool) -> dict:
    pod["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return pod


def new_service(name: str = "foo", ns: str = NS, **spec: object) -> dict:
    """``newServiceAndEndpointMeta``: one TCP port named after the Service targeting 80, selector
    foo=bar, single-stack IPv4, no clusterIP (so, like upstream's fixture, it counts as headless
    for the headless label)."""
    spec = {"selector": {"foo": "bar"}, "ipFamilies": ["IPv4"], **spec}
    ports = spec.pop("ports", [{"name": name, "targetPort": 80, "protocol": "TCP"}])
    return {"apiVersion": "v1", "kind": "Service", **builders.service(ns, name, *ports, metadata={"uid": f"{ns}-{name}"}, **spec)}


def service_ports(service: dict, port: int = 80) -> list[dict]:
    """The endpointMeta ports of ``newServiceAndEndpointMeta``."""
    return [{"name": service["metadata"]["name"], "port": port, "protocol": "TCP"}]


def new_node(name: str = "node-1", zone: str | None = None, **labels: str) -> dict:
    all_labels = dict(labels)
    if zone:
        all_labels[TOPOLOGY_ZONE] = zone
    return {"apiVersion": "v1", "kind": "Node", **builders.node(name, labels=all_labels)}


def nodes_by_name(*nodes: dict) -> dict[str, dict]:
    return {node["metadata"]["name"]: node for node in nodes}


DEFAULT_NODES = nodes_by_name(new_node("node-1"))


def new_empty_slice(n: int, service: dict, ports: list[dict] | None = None, address_type: str = "IPv4",
                    name: str | None = None) -> dict:
    """``newEmptyEndpointSlice``: named ``<service>-<n>``, owned by the Service, no labels."""
    meta = service["metadata"]
    name = name or f"{meta['name']}-{n}"
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": meta["namespace"], "uid": f"uid-slice-{name}",
                     "generation": 1, "resourceVersion": "1",
                     "ownerReferences": [controller_ref(service, "v1", "Service")]},
        "addressType": address_type,
        "ports": copy.deepcopy(ports if ports is not None else service_ports(service)),
        "endpoints": [],
    }


def endpoints_for(pods: Iterable[dict], service: dict, node: dict | None = None, address_type: str = "IPv4") -> list[dict]:
    """``podToEndpoint(pod, &corev1.Node{}, &svc, addressType)`` for each pod."""
    return [pod_to_endpoint(pod, node if node is not None else {}, service, address_type) for pod in pods]


def lengths(slices: Iterable[dict]) -> list[int]:
    """Endpoint counts, sorted (upstream's expectUnorderedSlicesWithLengths)."""
    return sorted(len(s.get("endpoints") or ()) for s in slices)


def port_group_totals(plan: Plan) -> tuple[int, int]:
    """(endpoints desired, slices there will be) over all port groups: the Service's share of the
    endpoints_desired and num_endpoint_slices gauges."""
    return (sum(g.endpoints for g in plan.port_groups.values()), sum(g.slices for g in plan.port_groups.values()))


class Cluster:
    """The slices of one namespace as the apiserver holds them, written only through plans."""

    def __init__(self, slices: Iterable[dict] = ()):
        self.slices: dict[str, dict] = {}
        self._names = itertools.count(1)
        for slice_ in slices:
            self.slices[slice_["metadata"]["name"]] = copy.deepcopy(slice_)

    def list(self) -> list[dict]:
        return [copy.deepcopy(s) for s in self.slices.values()]

    def lengths(self) -> list[int]:
        return lengths(self.slices.values())

    def reconcile(self, service: dict, pods: list[dict], nodes: dict[str, dict] | None = None, *,
                  max_endpoints: int = DEFAULT_MAX, existing: list[dict] | None = None, apply: bool = True) -> Plan:
        """Reconcile against ``existing`` (default: every slice held) and apply the plan."""
        existing = self.list() if existing is None else existing
        nodes = DEFAULT_NODES if nodes is None else nodes
        before = copy.deepcopy((service, pods, existing, nodes))
        plan = reconcile(service, pods, existing, nodes, max_endpoints_per_slice=max_endpoints, controller_name=CONTROLLER_NAME)
        assert (service, pods, existing, nodes) == before, "reconcile mutated its inputs (informer cache objects)"
        for written in plan.creates:
            check_slice(written, service, max_endpoints, created=True)
        for written in plan.updates:
            check_slice(written, service, max_endpoints, created=False)
        if apply:
            self.apply(plan)
        return plan

    def apply(self, plan: Plan) -> None:
        """finalize: creates, then updates, then deletes (the fake clientset's rules)."""
        for slice_ in plan.creates:
            meta = slice_["metadata"]
            assert not meta.get("name") and meta.get("generateName"), "a create names no slice; the apiserver generates it"
            created = copy.deepcopy(slice_)
            n = next(self._names)
            created["metadata"].update(name=f"{meta['generateName']}{n:05d}", uid=f"uid-created-{n}", generation=1,
                                       resourceVersion=str(n))
            del created["metadata"]["generateName"]
            self.slices[created["metadata"]["name"]] = created
        for slice_ in plan.updates:
            name = slice_["metadata"].get("name")
            assert name in self.slices, f"update of a slice that does not exist: {name!r}"
            current = self.slices[name]
            assert slice_["addressType"] == current["addressType"], "addressType is immutable"
            updated = copy.deepcopy(slice_)
            updated["metadata"]["uid"] = current["metadata"]["uid"]
            updated["metadata"]["generation"] = int(current["metadata"].get("generation") or 0) + 1
            self.slices[name] = updated
        for slice_ in plan.deletes:
            name = slice_["metadata"].get("name")
            assert name in self.slices, f"delete of a slice that does not exist: {name!r}"
            del self.slices[name]


def check_slice(slice_: dict, service: dict, max_endpoints: int, created: bool) -> None:
    """What every slice the controller writes must satisfy. (An update of a slice whose only
    difference is missing reserved labels keeps them missing, as upstream does: the fixtures'
    slices, like upstream's newEmptyEndpointSlice, have no labels.)"""
    meta = slice_["metadata"]
    labels = meta.get("labels") or {}
    if created:
        assert labels.get(LABEL_SERVICE_NAME) == service["metadata"]["name"]
        assert labels.get(LABEL_MANAGED_BY) == CONTROLLER_NAME
    assert meta.get("namespace") == service["metadata"]["namespace"]
    assert controller_ref(service, "v1", "Service") in (meta.get("ownerReferences") or [])
    endpoints = slice_.get("endpoints") or []
    assert len(endpoints) <= max_endpoints
    for endpoint in endpoints:
        assert endpoint["addresses"], "an endpoint without addresses is never written"
        assert all(address_family(a) == slice_["addressType"] for a in endpoint["addresses"])
