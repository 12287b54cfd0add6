"""Upstream ``pkg/proxy/topology_test.go`` ``TestCategorizeEndpoints``, case by case.

Endpoints are written as upstream's ``BaseEndpointInfo`` literals: fields not named are Go zero
values (so ``serving`` is false unless a case sets it, unlike ``Endpoint``'s default). Upstream
tells ``nil`` ("the Service never uses this kind") from an empty set; ``categorize_endpoints``
returns an empty tuple for both, so both are written ``set()`` here.
"""

import pytest

from kubesvc.proxy.topology import LABEL_TOPOLOGY_ZONE, categorize_endpoints
from kubesvc.proxy.types import Endpoint, ServicePort, ServicePortName

ZONE_A = {LABEL_TOPOLOGY_ZONE: "zone-a"}
NAME = ServicePortName("ns", "svc", "p", "TCP")


def ep(text: str, *, ready: bool = False, serving: bool = False, terminating: bool = False, local: bool = False,
       zones: tuple[str, ...] = (), nodes: tuple[str, ...] = ()) -> Endpoint:
    ip, _, port = text.rpartition(":")
    return Endpoint(ip, int(port), local, ready, serving, terminating, frozenset(zones), frozenset(nodes))


def svc(*, internal_local: bool = False, external_local: bool = False, node_port: int = 0) -> ServicePort:
    return ServicePort(NAME, "10.96.0.1", 80, "TCP", node_port=node_port,
                       internal_policy_local=internal_local, external_policy_local=external_local)


def ready(text: str, **kw) -> Endpoint:
    return ep(text, ready=True, **kw)


def terminating(text: str, **kw) -> Endpoint:
    return ep(text, serving=True, terminating=True, **kw)


HINTED_ABCA = [ready("10.1.2.3:80", zones=("zone-a",)), ready("10.1.2.4:80", zones=("zone-b",)),
               ready("10.1.2.5:80", zones=("zone-c",)), ready("10.1.2.6:80", zones=("zone-a",))]
NODE_HINTED = [ready("10.1.2.3:80", zones=("zone-a",), nodes=("node-1",)), ready("10.1.2.4:80", zones=("zone-b",), nodes=("node-2",)),
               ready("10.1.2.5:80", zones=("zone-c",), nodes=("node-3",)), ready("10.1.2.6:80", zones=("zone-a",), nodes=("node-4",))]
ALL4 = {"10.1.2.3:80", "10.1.2.4:80", "10.1.2.5:80", "10.1.2.6:80"}

# name: (node labels, service port, endpoints, cluster, local, all (None: derived as upstream),
#        only remote endpoints, node name, PreferSameTrafficDistribution)
CASES = {
    "should use topology since all endpoints have hints, node has a zone label and and there are endpoints for the node's zone":
        (ZONE_A, svc(), HINTED_ABCA, {"10.1.2.3:80", "10.1.2.6:80"}, None, None, False, "", False),
    "externalTrafficPolicy: Local, topology ignored for Local endpoints":
        (ZONE_A, svc(external_local=True, node_port=8080),
         [ready("10.1.2.3:80", zones=("zone-a",), local=True), ready("10.1.2.4:80", zones=("zone-b",), local=True),
          ready("10.1.2.5:80", zones=("zone-c",)), ready("10.1.2.6:80", zones=("zone-a",))],
         {"10.1.2.3:80", "10.1.2.6:80"}, {"10.1.2.3:80", "10.1.2.4:80"}, {"10.1.2.3:80", "10.1.2.4:80", "10.1.2.6:80"}, False, "", False),
    "internalTrafficPolicy: Local, topology ignored for Local endpoints":
        (ZONE_A, svc(internal_local=True, node_port=8080),
         [ready("10.1.2.3:80", zones=("zone-a",), local=True), ready("10.1.2.4:80", zones=("zone-b",), local=True),
          ready("10.1.2.5:80", zones=("zone-c",)), ready("10.1.2.6:80", zones=("zone-a",))],
         {"10.1.2.3:80", "10.1.2.6:80"}, {"10.1.2.3:80", "10.1.2.4:80"}, {"10.1.2.3:80", "10.1.2.4:80", "10.1.2.6:80"}, False, "", False),
    "empty node labels":
        ({}, svc(), [ready("10.1.2.3:80", zones=("zone-a",))], {"10.1.2.3:80"}, None, None, False, "", False),
    "empty zone label":
        ({LABEL_TOPOLOGY_ZONE: ""}, svc(), [ready("10.1.2.3:80", zones=("zone-a",))], {"10.1.2.3:80"}, None, None, False, "", False),
    "node in different zone, no endpoint filtering":
        ({LABEL_TOPOLOGY_ZONE: "zone-b"}, svc(), [ready("10.1.2.3:80", zones=("zone-a",))], {"10.1.2.3:80"}, None, None, False, "", False),
    "unready endpoint":
        (ZONE_A, svc(), [*HINTED_ABCA[:3], ep("10.1.2.6:80", zones=("zone-a",))], {"10.1.2.3:80"}, None, None, False, "", False),
    "only unready endpoints in same zone (should not filter)":
        (ZONE_A, svc(), [ep("10.1.2.3:80", zones=("zone-a",)), *HINTED_ABCA[1:3], ep("10.1.2.6:80", zones=("zone-a",))],
         {"10.1.2.4:80", "10.1.2.5:80"}, None, None, False, "", False),
    "missing hints, no filtering applied":
        (ZONE_A, svc(), [*HINTED_ABCA[:2], ready("10.1.2.5:80"), HINTED_ABCA[3]], ALL4, None, None, False, "", False),
    "multiple hints per endpoint, filtering includes any endpoint with zone included":
        ({LABEL_TOPOLOGY_ZONE: "zone-c"}, svc(),
         [ready("10.1.2.3:80", zones=("zone-a", "zone-b", "zone-c")), ready("10.1.2.4:80", zones=("zone-b", "zone-c")),
          ready("10.1.2.5:80", zones=("zone-b", "zone-d")), ready("10.1.2.6:80", zones=("zone-c",))],
         {"10.1.2.3:80", "10.1.2.4:80", "10.1.2.6:80"}, None, None, False, "", False),
    "PreferSameNode falls back to same-zone when feature gate disabled":
        (ZONE_A, svc(), NODE_HINTED, {"10.1.2.3:80", "10.1.2.6:80"}, None, None, False, "node-1", False),
    "PreferSameNode available":
        (ZONE_A, svc(), NODE_HINTED, {"10.1.2.3:80"}, None, None, False, "node-1", True),
    "PreferSameNode ignored if some endpoints unhinted":
        (ZONE_A, svc(), [NODE_HINTED[0], ready("10.1.2.4:80"), *NODE_HINTED[2:]], ALL4, None, None, False, "node-1", True),
    "PreferSameNode falls back to PreferSameZone if no endpoint for node":
        (ZONE_A, svc(), NODE_HINTED, {"10.1.2.3:80", "10.1.2.6:80"}, None, None, False, "node-0", True),
    "conflicting topology and localness require merging allEndpoints":
        (ZONE_A, svc(external_local=True, node_port=8080),
         [ready("10.0.0.0:80", zones=("zone-a",), local=True), ready("10.0.0.1:80", zones=("zone-b",), local=True),
          ready("10.0.0.2:80", zones=("zone-a",)), ready("10.0.0.3:80", zones=("zone-b",))],
         {"10.0.0.0:80", "10.0.0.2:80"}, {"10.0.0.0:80", "10.0.0.1:80"}, {"10.0.0.0:80", "10.0.0.1:80", "10.0.0.2:80"}, False, "", False),
    "internalTrafficPolicy: Local, with empty endpoints":
        ({}, svc(internal_local=True), [], None, set(), None, False, "", False),
    "internalTrafficPolicy: Local, but all endpoints are remote":
        ({}, svc(internal_local=True), [ready("10.0.0.0:80"), ready("10.0.0.1:80")], None, set(), None, True, "", False),
    "internalTrafficPolicy: Local, all endpoints are local":
        ({}, svc(internal_local=True), [ready("10.0.0.0:80", local=True), ready("10.0.0.1:80", local=True)],
         None, {"10.0.0.0:80", "10.0.0.1:80"}, None, False, "", False),
    "internalTrafficPolicy: Local, some endpoints are local":
        ({}, svc(internal_local=True), [ready("10.0.0.0:80", local=True), ready("10.0.0.1:80")], None, {"10.0.0.0:80"}, None, False, "", False),
    "Cluster traffic policy, endpoints not Ready":
        ({}, svc(), [ep("10.0.0.0:80"), ep("10.0.0.1:80")], set(), None, None, False, "", False),
    "Cluster traffic policy, some endpoints are Ready":
        ({}, svc(), [ep("10.0.0.0:80"), ready("10.0.0.1:80")], {"10.0.0.1:80"}, None, None, False, "", False),
    "Cluster traffic policy, all endpoints are terminating":
        ({}, svc(), [terminating("10.0.0.0:80", local=True), terminating("10.0.0.1:80")],
         {"10.0.0.0:80", "10.0.0.1:80"}, None, None, False, "", False),
    "iTP: Local, eTP: Cluster, some endpoints local":
        ({}, svc(internal_local=True, node_port=8080), [ready("10.0.0.0:80", local=True), ready("10.0.0.1:80")],
         {"10.0.0.0:80", "10.0.0.1:80"}, {"10.0.0.0:80"}, {"10.0.0.0:80", "10.0.0.1:80"}, False, "", False),
    "iTP: Cluster, eTP: Local, some endpoints local":
        ({}, svc(external_local=True, node_port=8080), [ready("10.0.0.0:80", local=True), ready("10.0.0.1:80")],
         {"10.0.0.0:80", "10.0.0.1:80"}, {"10.0.0.0:80"}, {"10.0.0.0:80", "10.0.0.1:80"}, False, "", False),
    "iTP: Local, eTP: Local, some endpoints local":
        ({}, svc(internal_local=True, external_local=True, node_port=8080), [ready("10.0.0.0:80", local=True), ready("10.0.0.1:80")],
         {"10.0.0.0:80", "10.0.0.1:80"}, {"10.0.0.0:80"}, {"10.0.0.0:80", "10.0.0.1:80"}, False, "", False),
    "iTP: Local, eTP: Local, all endpoints remote":
        ({}, svc(internal_local=True, external_local=True, node_port=8080), [ready("10.0.0.0:80"), ready("10.0.0.1:80")],
         {"10.0.0.0:80", "10.0.0.1:80"}, set(), {"10.0.0.0:80", "10.0.0.1:80"}, False, "", False),
    "iTP: Local, eTP: Local, all endpoints remote and terminating":
        ({}, svc(internal_local=True, external_local=True, node_port=8080), [terminating("10.0.0.0:80"), terminating("10.0.0.1:80")],
         {"10.0.0.0:80", "10.0.0.1:80"}, set(), {"10.0.0.0:80", "10.0.0.1:80"}, True, "", False),
    "iTP: Cluster, eTP: Local, with terminating endpoints":
        ({}, svc(external_local=True, node_port=8080),
         [ready("10.0.0.0:80"), ep("10.0.0.1:80", local=True), terminating("10.0.0.2:80", local=True), terminating("10.0.0.3:80")],
         {"10.0.0.0:80"}, {"10.0.0.2:80"}, {"10.0.0.0:80", "10.0.0.2:80"}, False, "", False),
    "externalTrafficPolicy ignored if not externally accessible":
        ({}, svc(external_local=True), [ready("10.0.0.0:80"), ready("10.0.0.1:80", local=True)],
         {"10.0.0.0:80", "10.0.0.1:80"}, None, {"10.0.0.0:80", "10.0.0.1:80"}, False, "", False),
    "no cluster endpoints for iTP:Local internal-only service":
        ({}, svc(internal_local=True), [ready("10.0.0.0:80"), ready("10.0.0.1:80", local=True)],
         None, {"10.0.0.1:80"}, {"10.0.0.1:80"}, False, "", False),
    "externalTrafficPolicy: Local, externally accessible, with empty endpoints":
        ({}, svc(external_local=True, node_port=8080), [], set(), set(), set(), False, "", False),
    "externalTrafficPolicy: Local, externally accessible, but all endpoints are remote":
        ({}, svc(external_local=True, node_port=8080), [ready("10.0.0.0:80"), ready("10.0.0.1:80")],
         {"10.0.0.0:80", "10.0.0.1:80"}, set(), {"10.0.0.0:80", "10.0.0.1:80"}, False, "", False),
    "externalTrafficPolicy: Local, externally accessible, all endpoints are local":
        ({}, svc(external_local=True, node_port=8080), [ready("10.0.0.0:80", local=True), ready("10.0.0.1:80", local=True)],
         {"10.0.0.0:80", "10.0.0.1:80"}, {"10.0.0.0:80", "10.0.0.1:80"}, {"10.0.0.0:80", "10.0.0.1:80"}, False, "", False),
    "externalTrafficPolicy: Local, externally accessible, some endpoints are local":
        ({}, svc(external_local=True, node_port=8080), [ready("10.0.0.0:80", local=True), ready("10.0.0.1:80")],
         {"10.0.0.0:80", "10.0.0.1:80"}, {"10.0.0.0:80"}, {"10.0.0.0:80", "10.0.0.1:80"}, False, "", False),
}


def texts(endpoints) -> list[str]:
    return sorted(e.endpoint for e in endpoints)


@pytest.mark.parametrize(("labels", "service_port", "endpoints", "cluster", "local", "everything", "only_remote", "node", "prefer_same_node"),
                         list(CASES.values()), ids=list(CASES))
def test_categorize_endpoints(labels, service_port, endpoints, cluster, local, everything, only_remote, node, prefer_same_node):
    result = categorize_endpoints(endpoints, service_port, node, labels, prefer_same_node=prefer_same_node)
    # As upstream: "all" may be left out when only one of cluster/local is in use.
    if cluster is not None and local is None:
        everything = cluster
    elif local is not None and cluster is None:
        everything = local
    assert texts(result.cluster) == sorted(cluster or ())
    assert texts(result.local) == sorted(local or ())
    assert texts(result.all_reachable) == sorted(everything)
    # Every reachable endpoint appears once, even when it is both a cluster and a local one.
    assert len(result.all_reachable) == len(set(texts(result.all_reachable)))
    assert result.has_any == (bool(everything) or only_remote)
