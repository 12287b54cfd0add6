"""``ServicePorts``: the Service port map with its per-Service index, kept by
``apply_service_changes``, and an nftables partial sync that finds the changed Services'
ports through it plans exactly what the scan of every port plans."""

from __future__ import annotations

import dataclasses

from kubesvc.proxy.nftables import rules
from kubesvc.proxy.servicechangetracker import ServiceChangeTracker, ServicePorts, apply_service_changes
from kubesvc.proxy.types import IPV4, ServicePortName
from tests.support.builders import ep, options, port, request, service, service_port


def _index(ports: ServicePorts) -> dict[str, set[ServicePortName]]:
    return {svc: set(names) for svc, names in ports.by_service.items()}


def _scanned(ports: dict) -> dict[str, set[ServicePortName]]:
    out: dict[str, set[ServicePortName]] = {}
    for name in ports:
        out.setdefault(name.service, set()).add(name)
    return out


def test_index_follows_adds_updates_and_deletes():
    tracker, ports = ServiceChangeTracker(IPV4), ServicePorts()
    a1 = service("ns", "a", service_port("p1", "TCP", 80, 8080), service_port("p2", "UDP", 53, 5353), type="ClusterIP", clusterIP="10.0.0.1")
    b1 = service("ns", "b", service_port("p1", "TCP", 80, 8080), type="ClusterIP", clusterIP="10.0.0.2")
    for svc in (a1, b1):
        tracker.update(None, svc)
    apply_service_changes(ports, tracker.checkout())
    assert _index(ports) == _scanned(ports) and len(ports.by_service["ns/a"]) == 2

    a2 = service("ns", "a", service_port("p3", "TCP", 81, 8081), type="ClusterIP", clusterIP="10.0.0.1")  # ports replaced
    tracker.update(a1, a2)
    tracker.update(b1, None)  # deleted
    apply_service_changes(ports, tracker.checkout())
    assert _index(ports) == _scanned(ports) == {"ns/a": {ServicePortName("ns", "a", "p3", "TCP")}}
    assert ServicePorts(dict(ports)).by_service == ports.by_service  # built from a plain map too


def test_partial_plan_through_the_index_equals_the_scan():
    ports = [(port("ns", f"svc{i}", cluster_ip=f"172.30.0.{i + 1}"), (ep(f"10.1.0.{i + 1}"), ep(f"10.1.1.{i + 1}"))) for i in range(5)]
    opts = options()
    first = request(ports, full=True)
    state = rules.build_sync(first, opts, rules.NftState(), rules.KernelSnapshot(), 0.0).next_state
    changed = dataclasses.replace(first, full=False, changed_services=frozenset({ports[2][0].name.service}),
                                  endpoints={**first.endpoints, ports[2][0].name: (ep("10.9.9.9"), ep("10.1.1.3"))})
    scanned = rules.build_sync(changed, opts, state, None, 1.0)
    indexed = rules.build_sync(dataclasses.replace(changed, service_ports=ServicePorts(changed.service_ports)), opts, state, None, 1.0)
    assert indexed.text == scanned.text and "10.9.9.9" in indexed.text
