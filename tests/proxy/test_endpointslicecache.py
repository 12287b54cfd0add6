"""Upstream ``pkg/proxy/endpointslicecache_test.go`` and ``endpointschangetracker_test.go``
(``TestEndpointsMapFromESC``, ``TestEsDataChanged``, ``TestUpdateEndpointsMap``,
``TestLastChangeTriggerTime``, ``TestEndpointSliceUpdate``, ``TestCheckoutChanges``,
``TestGetLocalEndpointIPs``), ported case by case, plus cases of ours marked "(ours)".

``TestUpdateEndpointsMap`` states, instead of upstream's ``ConntrackCleanupRequired`` flag, the
stale endpoints and newly active ports of the older ``detectStaleConntrackEntries``.
"""

from datetime import datetime, timedelta, timezone

import pytest

from kubesvc.proxy.endpointslicecache import (
    ANNOTATION_LAST_CHANGE_TRIGGER_TIME,
    EndpointsChangeTracker,
    apply_endpoint_changes,
    local_ready_endpoints,
)
from kubesvc.proxy.types import IPV4, IPV6, Endpoint, ServicePortName
from tests.support.builders import endpoint, endpoint_slice, slice_port

HOST = "test-hostname"


def spn(namespace: str, name: str, port: str, protocol: str = "UDP") -> ServicePortName:
    return ServicePortName(namespace, name, port, protocol)


def ep(text: str, *, local: bool = False, ready: bool = True, serving: bool = True, terminating: bool = False, **hints) -> Endpoint:
    ip, _, port = text.rpartition(":")
    return Endpoint(ip.strip("[]"), int(port), local, ready, serving, terminating, **hints)


def numbered_slice(namespace: str, service: str, number: int, endpoints: list, ports: list | None = None) -> dict:
    """Upstream ``makeTestEndpointSlice``: named ``<service>-<n>``."""
    return endpoint_slice(namespace, service, f"{service}-{number}", endpoints, ports)


def generate_slice(service: str, namespace: str, slice_number: int, count: int, unready_mod: int, terminating_mod: int,
                   hosts: list[str], port_numbers: list[int | None], offset: int | None = None) -> dict:
    """Upstream ``generateEndpointSliceWithOffset``: endpoint i (from 1) is 10.0.<offset>.<i>,
    unready when i % unready_mod == 0, terminating when i % terminating_mod == 0, on
    hosts[i % len(hosts)]."""
    offset = slice_number if offset is None else offset
    endpoints = []
    for i in range(1, count + 1):
        ready_condition, terminating_condition = i % unready_mod != 0, i % terminating_mod == 0
        item = endpoint(f"10.0.{offset}.{i}", ready=ready_condition and not terminating_condition, serving=ready_condition,
                        terminating=terminating_condition)
        if hosts:
            item["nodeName"] = hosts[i % len(hosts)]
        endpoints.append(item)
    ports = [slice_port(f"port-{i}", number, "TCP") for i, number in enumerate(port_numbers)]
    return endpoint_slice(namespace, service, f"{service}-{slice_number}", endpoints, ports)


def as_lists(endpoints_map) -> dict:
    return {key: list(value) for key, value in endpoints_map.items()}


def current_change(tracker: EndpointsChangeTracker, service: str) -> dict:
    return as_lists(tracker.checkout().services.get(service, ({}, {}))[1])


# ---- TestEndpointsMapFromESC ------------------------------------------------------------------

P0, P1 = spn("ns1", "svc1", "port-0", "TCP"), spn("ns1", "svc1", "port-1", "TCP")

ENDPOINTS_MAP_FROM_ESC = {
    "1 slice, 2 hosts, ports 80,443": (
        "host1", [generate_slice("svc1", "ns1", 1, 3, 999, 999, ["host1", "host2"], [80, 443])],
        {P0: [ep("10.0.1.1:80"), ep("10.0.1.2:80", local=True), ep("10.0.1.3:80")],
         P1: [ep("10.0.1.1:443"), ep("10.0.1.2:443", local=True), ep("10.0.1.3:443")]}),
    "2 slices, same port": (
        "", [generate_slice("svc1", "ns1", 1, 3, 999, 999, [], [80]), generate_slice("svc1", "ns1", 2, 3, 999, 999, [], [80])],
        {P0: [ep(f"10.0.{s}.{i}:80") for s in (1, 2) for i in (1, 2, 3)]}),
    # Same slice name: the second version replaces the first.
    "2 overlapping slices, same port": (
        "", [generate_slice("svc1", "ns1", 1, 3, 999, 999, [], [80]), generate_slice("svc1", "ns1", 1, 4, 999, 999, [], [80])],
        {P0: [ep(f"10.0.1.{i}:80") for i in (1, 2, 3, 4)]}),
    "2 slices, overlapping endpoints, some endpoints unready in 1 or both": (
        "", [generate_slice("svc1", "ns1", 1, 10, 3, 999, [], [80]), generate_slice("svc1", "ns1", 1, 10, 6, 999, [], [80])],
        {P0: [ep("10.0.1.10:80"), *(ep(f"10.0.1.{i}:80", ready=i != 6, serving=i != 6) for i in range(1, 10))]}),
    "2 slices, overlapping endpoints, some endpoints unready and some endpoints terminating": (
        "", [generate_slice("svc1", "ns1", 1, 10, 3, 5, [], [80]), generate_slice("svc1", "ns1", 1, 10, 6, 5, [], [80])],
        {P0: [ep("10.0.1.10:80", ready=False, terminating=True), ep("10.0.1.1:80"), ep("10.0.1.2:80"), ep("10.0.1.3:80"), ep("10.0.1.4:80"),
              ep("10.0.1.5:80", ready=False, terminating=True), ep("10.0.1.6:80", ready=False, serving=False),
              ep("10.0.1.7:80"), ep("10.0.1.8:80"), ep("10.0.1.9:80")]}),
    "2 slices, overlapping endpoints, all unready": (
        "", [generate_slice("svc1", "ns1", 1, 10, 1, 999, [], [80]), generate_slice("svc1", "ns1", 1, 10, 1, 999, [], [80])],
        {P0: [ep("10.0.1.10:80", ready=False, serving=False), *(ep(f"10.0.1.{i}:80", ready=False, serving=False) for i in range(1, 10))]}),
    "3 slices with different services and namespaces": (
        "", [generate_slice("svc1", "ns1", 1, 3, 999, 999, [], [80]), generate_slice("svc2", "ns1", 2, 3, 999, 999, [], [80]),
             generate_slice("svc1", "ns2", 3, 3, 999, 999, [], [80])],
        {P0: [ep("10.0.1.1:80"), ep("10.0.1.2:80"), ep("10.0.1.3:80")]}),
    "Nil port should not break anything": (
        "host1", [generate_slice("svc1", "ns1", 1, 3, 999, 999, ["host1", "host2"], [None])], {}),
    "Different endpoints with duplicate IPs should not be filtered": (
        "host1", [generate_slice("svc1", "ns1", 1, 2, 999, 999, ["host1", "host2"], [80], offset=1),
                  generate_slice("svc1", "ns1", 2, 2, 999, 999, ["host1", "host2"], [8080], offset=1)],
        {P0: [ep("10.0.1.1:80"), ep("10.0.1.1:8080"), ep("10.0.1.2:80", local=True), ep("10.0.1.2:8080", local=True)]}),
}


@pytest.mark.parametrize(("host", "slices", "want"), list(ENDPOINTS_MAP_FROM_ESC.values()), ids=list(ENDPOINTS_MAP_FROM_ESC))
def test_endpoints_map_from_esc(host, slices, want):
    tracker = EndpointsChangeTracker(IPV4, host)
    for endpoint_slice in slices:
        tracker.endpoint_slice_update(endpoint_slice, False)
    assert current_change(tracker, "ns1/svc1") == want


# ---- TestEsDataChanged -------------------------------------------------------------------------

PORT80, PORT443 = slice_port("http", 80, "TCP"), slice_port("https", 443, "TCP")
EP1, EP2 = endpoint("10.0.1.0"), endpoint("10.0.1.1")

ES_DATA_CHANGED = {
    "identical slices, ports only": ([PORT80], [], [PORT80], [], False),
    "identical slices, ports out of order": ([PORT443, PORT80], [], [PORT80, PORT443], [], True),
    "port removed": ([PORT443, PORT80], [], [PORT443], [], True),
    "port added": ([PORT443], [], [PORT443, PORT80], [], True),
    "identical with endpoints": ([PORT443], [EP1, EP2], [PORT443], [EP1, EP2], False),
    "identical with endpoints out of order": ([PORT443], [EP1, EP2], [PORT443], [EP2, EP1], True),
    "identical with endpoint added": ([PORT443], [EP1], [PORT443], [EP2, EP1], True),
}


@pytest.mark.parametrize(("ports_before", "endpoints_before", "ports_after", "endpoints_after", "changed"),
                         list(ES_DATA_CHANGED.values()), ids=list(ES_DATA_CHANGED))
def test_es_data_changed(ports_before, endpoints_before, ports_after, endpoints_after, changed):
    tracker = EndpointsChangeTracker(IPV4, "")
    initial = endpoint_slice("bar", "svc1", "foo", endpoints_before, ports_before)
    tracker.endpoint_slice_update(initial, False)
    tracker.checkout()
    assert tracker.endpoint_slice_update(endpoint_slice("bar", "svc1", "foo", endpoints_after, ports_after), False) is changed
    assert initial == endpoint_slice("bar", "svc1", "foo", endpoints_before, ports_before), "the cache must not mutate slices"


# ---- TestUpdateEndpointsMap --------------------------------------------------------------------

UNNAMED = [slice_port("", 11, "UDP")]
P11, P12 = slice_port("p11", 11, "UDP"), slice_port("p12", 12, "UDP")
empty_endpoint = ([], None)
unnamed_port = ([endpoint("1.1.1.1")], UNNAMED)
unnamed_port_ready = ([endpoint("1.1.1.1", ready=True, serving=True, terminating=False)], UNNAMED)
unnamed_port_terminating = ([endpoint("1.1.1.1", ready=False, serving=True, terminating=True)], UNNAMED)
unnamed_port_local = ([endpoint("1.1.1.1", HOST)], UNNAMED)
named_port_local = ([endpoint("1.1.1.1", HOST)], [P11])
named_port = ([endpoint("1.1.1.1")], [P11])
named_port_renamed = ([endpoint("1.1.1.1")], [slice_port("p11-2", 11, "UDP")])
named_port_renumbered = ([endpoint("1.1.1.1")], [slice_port("p11", 22, "UDP")])
named_ports_local_no_local = ([endpoint("1.1.1.1"), endpoint("1.1.1.2", HOST)], [P11, P12])
multiple_subsets_s1 = ([endpoint("1.1.1.1")], [P11])
multiple_subsets_s2 = ([endpoint("1.1.1.2")], [P12])
multiple_subsets_with_local_s1 = ([endpoint("1.1.1.1")], [P11])
multiple_subsets_with_local_s2 = ([endpoint("1.1.1.2", HOST)], [P12])
multiple_subsets_multiple_ports_local_s1 = ([endpoint("1.1.1.1", HOST)], [P11, P12])
multiple_subsets_multiple_ports_local_s2 = ([endpoint("1.1.1.3")], [slice_port("p13", 13, "UDP")])
multiple_subsets_ips_ports1_s1 = ([endpoint("1.1.1.1"), endpoint("1.1.1.2", HOST)], [P11, P12])
multiple_subsets_ips_ports1_s2 = ([endpoint("1.1.1.3"), endpoint("1.1.1.4", HOST)], [slice_port("p13", 13, "UDP"), slice_port("p14", 14, "UDP")])
multiple_subsets_ips_ports2 = ([endpoint("2.2.2.1"), endpoint("2.2.2.2", HOST)], [slice_port("p21", 21, "UDP"), slice_port("p22", 22, "UDP")])
complex_before1 = ([endpoint("1.1.1.1")], [P11])
complex_before2_s1 = ([endpoint("2.2.2.2", HOST), endpoint("2.2.2.22", HOST)], [slice_port("p22", 22, "UDP")])
complex_before2_s2 = ([endpoint("2.2.2.3", HOST)], [slice_port("p23", 23, "UDP")])
complex_before4_s1 = ([endpoint("4.4.4.4", HOST), endpoint("4.4.4.5", HOST)], [slice_port("p44", 44, "UDP")])
complex_before4_s2 = ([endpoint("4.4.4.6", HOST)], [slice_port("p45", 45, "UDP")])
complex_after1_s1 = ([endpoint("1.1.1.1"), endpoint("1.1.1.11")], [P11])
complex_after1_s2 = ([endpoint("1.1.1.2")], [P12, slice_port("p122", 122, "UDP")])
complex_after3 = ([endpoint("3.3.3.3")], [slice_port("p33", 33, "UDP")])
complex_after4 = ([endpoint("4.4.4.4", HOST)], [slice_port("p44", 44, "UDP")])


def s(namespace: str, service: str, number: int, content: tuple) -> dict:
    return numbered_slice(namespace, service, number, *content)


EP1_UNNAMED, EP1_P11, EP1_P12 = spn("ns1", "ep1", ""), spn("ns1", "ep1", "p11"), spn("ns1", "ep1", "p12")
IPS_PORTS_MAP = {
    EP1_P11: [ep("1.1.1.1:11"), ep("1.1.1.2:11", local=True)], EP1_P12: [ep("1.1.1.1:12"), ep("1.1.1.2:12", local=True)],
    spn("ns1", "ep1", "p13"): [ep("1.1.1.3:13"), ep("1.1.1.4:13", local=True)],
    spn("ns1", "ep1", "p14"): [ep("1.1.1.3:14"), ep("1.1.1.4:14", local=True)],
    spn("ns2", "ep2", "p21"): [ep("2.2.2.1:21"), ep("2.2.2.2:21", local=True)],
    spn("ns2", "ep2", "p22"): [ep("2.2.2.1:22"), ep("2.2.2.2:22", local=True)],
}

# name: (previous slices, current slices, previous map, expected map, stale endpoints,
#        newly active ports, local ready endpoints, changed services)
UPDATE_ENDPOINTS_MAP = {
    "empty": ([], [], {}, {}, set(), set(), {}, set()),
    "no change, unnamed port": (
        [s("ns1", "ep1", 1, unnamed_port)], [s("ns1", "ep1", 1, unnamed_port)],
        {EP1_UNNAMED: [ep("1.1.1.1:11")]}, {EP1_UNNAMED: [ep("1.1.1.1:11")]}, set(), set(), {}, set()),
    "no change, named port, local": (
        [s("ns1", "ep1", 1, named_port_local)], [s("ns1", "ep1", 1, named_port_local)],
        {EP1_P11: [ep("1.1.1.1:11", local=True)]}, {EP1_P11: [ep("1.1.1.1:11", local=True)]}, set(), set(), {"ns1/ep1": 1}, set()),
    "no change, multiple slices": (
        [s("ns1", "ep1", 1, multiple_subsets_s1), s("ns1", "ep1", 2, multiple_subsets_s2)],
        [s("ns1", "ep1", 1, multiple_subsets_s1), s("ns1", "ep1", 2, multiple_subsets_s2)],
        {EP1_P11: [ep("1.1.1.1:11")], EP1_P12: [ep("1.1.1.2:12")]}, {EP1_P11: [ep("1.1.1.1:11")], EP1_P12: [ep("1.1.1.2:12")]},
        set(), set(), {}, set()),
    "no change, multiple slices, multiple ports, local": (
        [s("ns1", "ep1", 1, multiple_subsets_multiple_ports_local_s1), s("ns1", "ep1", 2, multiple_subsets_multiple_ports_local_s2)],
        [s("ns1", "ep1", 1, multiple_subsets_multiple_ports_local_s1), s("ns1", "ep1", 2, multiple_subsets_multiple_ports_local_s2)],
        {EP1_P11: [ep("1.1.1.1:11", local=True)], EP1_P12: [ep("1.1.1.1:12", local=True)], spn("ns1", "ep1", "p13"): [ep("1.1.1.3:13")]},
        {EP1_P11: [ep("1.1.1.1:11", local=True)], EP1_P12: [ep("1.1.1.1:12", local=True)], spn("ns1", "ep1", "p13"): [ep("1.1.1.3:13")]},
        set(), set(), {"ns1/ep1": 1}, set()),
    "no change, multiple services, slices, IPs, and ports": (
        [s("ns1", "ep1", 1, multiple_subsets_ips_ports1_s1), s("ns1", "ep1", 2, multiple_subsets_ips_ports1_s2),
         s("ns2", "ep2", 1, multiple_subsets_ips_ports2)],
        [s("ns1", "ep1", 1, multiple_subsets_ips_ports1_s1), s("ns1", "ep1", 2, multiple_subsets_ips_ports1_s2),
         s("ns2", "ep2", 1, multiple_subsets_ips_ports2)],
        IPS_PORTS_MAP, IPS_PORTS_MAP, set(), set(), {"ns1/ep1": 2, "ns2/ep2": 1}, set()),
    "add an EndpointSlice": (
        [None], [s("ns1", "ep1", 1, unnamed_port_local)],
        {}, {EP1_UNNAMED: [ep("1.1.1.1:11", local=True)]}, set(), {EP1_UNNAMED}, {"ns1/ep1": 1}, {"ns1/ep1"}),
    "remove an EndpointSlice": (
        [s("ns1", "ep1", 1, unnamed_port_local)], [None],
        {EP1_UNNAMED: [ep("1.1.1.1:11", local=True)]}, {}, {(EP1_UNNAMED, ep("1.1.1.1:11", local=True))}, set(), {}, {"ns1/ep1"}),
    "add an IP and port": (
        [s("ns1", "ep1", 1, named_port)], [s("ns1", "ep1", 1, named_ports_local_no_local)],
        {EP1_P11: [ep("1.1.1.1:11")]},
        {EP1_P11: [ep("1.1.1.1:11"), ep("1.1.1.2:11", local=True)], EP1_P12: [ep("1.1.1.1:12"), ep("1.1.1.2:12", local=True)]},
        set(), {EP1_P12}, {"ns1/ep1": 1}, {"ns1/ep1"}),
    "remove an IP and port": (
        [s("ns1", "ep1", 1, named_ports_local_no_local)], [s("ns1", "ep1", 1, named_port)],
        {EP1_P11: [ep("1.1.1.1:11"), ep("1.1.1.2:11", local=True)], EP1_P12: [ep("1.1.1.1:12"), ep("1.1.1.2:12", local=True)]},
        {EP1_P11: [ep("1.1.1.1:11")]},
        {(EP1_P11, ep("1.1.1.2:11", local=True)), (EP1_P12, ep("1.1.1.1:12")), (EP1_P12, ep("1.1.1.2:12", local=True))},
        set(), {}, {"ns1/ep1"}),
    "add a slice to an endpoint": (
        [s("ns1", "ep1", 1, named_port), None],
        [s("ns1", "ep1", 1, multiple_subsets_with_local_s1), s("ns1", "ep1", 2, multiple_subsets_with_local_s2)],
        {EP1_P11: [ep("1.1.1.1:11")]}, {EP1_P11: [ep("1.1.1.1:11")], EP1_P12: [ep("1.1.1.2:12", local=True)]},
        set(), {EP1_P12}, {"ns1/ep1": 1}, {"ns1/ep1"}),
    "remove a slice from an endpoint": (
        [s("ns1", "ep1", 1, multiple_subsets_s1), s("ns1", "ep1", 2, multiple_subsets_s2)], [s("ns1", "ep1", 1, named_port), None],
        {EP1_P11: [ep("1.1.1.1:11")], EP1_P12: [ep("1.1.1.2:12")]}, {EP1_P11: [ep("1.1.1.1:11")]},
        {(EP1_P12, ep("1.1.1.2:12"))}, set(), {}, {"ns1/ep1"}),
    "rename a port": (
        [s("ns1", "ep1", 1, named_port)], [s("ns1", "ep1", 1, named_port_renamed)],
        {EP1_P11: [ep("1.1.1.1:11")]}, {spn("ns1", "ep1", "p11-2"): [ep("1.1.1.1:11")]},
        {(EP1_P11, ep("1.1.1.1:11"))}, {spn("ns1", "ep1", "p11-2")}, {}, {"ns1/ep1"}),
    "renumber a port": (
        [s("ns1", "ep1", 1, named_port)], [s("ns1", "ep1", 1, named_port_renumbered)],
        {EP1_P11: [ep("1.1.1.1:11")]}, {EP1_P11: [ep("1.1.1.1:22")]}, {(EP1_P11, ep("1.1.1.1:11"))}, set(), {}, {"ns1/ep1"}),
    "complex add and remove": (
        [s("ns1", "ep1", 1, complex_before1), None, s("ns2", "ep2", 1, complex_before2_s1), s("ns2", "ep2", 2, complex_before2_s2),
         None, None, s("ns4", "ep4", 1, complex_before4_s1), s("ns4", "ep4", 2, complex_before4_s2)],
        [s("ns1", "ep1", 1, complex_after1_s1), s("ns1", "ep1", 2, complex_after1_s2), None, None,
         s("ns3", "ep3", 1, complex_after3), None, s("ns4", "ep4", 1, complex_after4), None],
        {EP1_P11: [ep("1.1.1.1:11")],
         spn("ns2", "ep2", "p22"): [ep("2.2.2.22:22", local=True), ep("2.2.2.2:22", local=True)],
         spn("ns2", "ep2", "p23"): [ep("2.2.2.3:23", local=True)],
         spn("ns4", "ep4", "p44"): [ep("4.4.4.4:44", local=True), ep("4.4.4.5:44", local=True)],
         spn("ns4", "ep4", "p45"): [ep("4.4.4.6:45", local=True)]},
        {EP1_P11: [ep("1.1.1.11:11"), ep("1.1.1.1:11")], EP1_P12: [ep("1.1.1.2:12")], spn("ns1", "ep1", "p122"): [ep("1.1.1.2:122")],
         spn("ns3", "ep3", "p33"): [ep("3.3.3.3:33")], spn("ns4", "ep4", "p44"): [ep("4.4.4.4:44", local=True)]},
        {(spn("ns2", "ep2", "p22"), ep("2.2.2.22:22", local=True)), (spn("ns2", "ep2", "p22"), ep("2.2.2.2:22", local=True)),
         (spn("ns2", "ep2", "p23"), ep("2.2.2.3:23", local=True)), (spn("ns4", "ep4", "p44"), ep("4.4.4.5:44", local=True)),
         (spn("ns4", "ep4", "p45"), ep("4.4.4.6:45", local=True))},
        {EP1_P12, spn("ns1", "ep1", "p122"), spn("ns3", "ep3", "p33")},
        {"ns4/ep4": 1}, {"ns1/ep1", "ns2/ep2", "ns3/ep3", "ns4/ep4"}),
    "change from 0 endpoint address to 1 unnamed port": (
        [s("ns1", "ep1", 1, empty_endpoint)], [s("ns1", "ep1", 1, unnamed_port)],
        {}, {EP1_UNNAMED: [ep("1.1.1.1:11")]}, set(), {EP1_UNNAMED}, {}, {"ns1/ep1"}),
    "change from ready to terminating pod": (
        [s("ns1", "ep1", 1, unnamed_port_ready)], [s("ns1", "ep1", 1, unnamed_port_terminating)],
        {EP1_UNNAMED: [ep("1.1.1.1:11")]}, {EP1_UNNAMED: [ep("1.1.1.1:11", ready=False, terminating=True)]},
        {(EP1_UNNAMED, ep("1.1.1.1:11"))}, set(), {}, {"ns1/ep1"}),
    "change from terminating to empty pod": (
        [s("ns1", "ep1", 1, unnamed_port_terminating)], [s("ns1", "ep1", 1, empty_endpoint)],
        {EP1_UNNAMED: [ep("1.1.1.1:11", ready=False, terminating=True)]}, {}, set(), set(), {}, {"ns1/ep1"}),
}


@pytest.mark.parametrize(("previous_slices", "current_slices", "previous_map", "want", "stale", "newly_active", "local", "changed"),
                         list(UPDATE_ENDPOINTS_MAP.values()), ids=list(UPDATE_ENDPOINTS_MAP))
def test_update_endpoints_map(previous_slices, current_slices, previous_map, want, stale, newly_active, local, changed):
    tracker, endpoints = EndpointsChangeTracker(IPV4, HOST), {}
    for endpoint_slice in previous_slices:
        if endpoint_slice is not None:
            tracker.endpoint_slice_update(endpoint_slice, False)
    apply_endpoint_changes(endpoints, tracker.checkout())
    assert as_lists(endpoints) == previous_map

    for before, after in zip(previous_slices, current_slices, strict=True):
        if after is not None:
            tracker.endpoint_slice_update(after, False)
        elif before is not None:
            tracker.endpoint_slice_update(before, True)
    result = apply_endpoint_changes(endpoints, tracker.checkout())
    assert as_lists(endpoints) == want
    assert result.updated_services == changed
    assert set(result.stale_udp_endpoints) == stale and len(result.stale_udp_endpoints) == len(stale)
    assert set(result.newly_active_udp_services) == newly_active and len(result.newly_active_udp_services) == len(newly_active)
    assert local_ready_endpoints(endpoints) == local


# ---- TestLastChangeTriggerTime -----------------------------------------------------------------

START = datetime(2018, 1, 1, tzinfo=timezone.utc)
T_1, T0 = START - timedelta(seconds=1), START + timedelta(seconds=1)
T1, T2, T3 = T0 + timedelta(seconds=1), T0 + timedelta(seconds=2), T0 + timedelta(seconds=3)


def triggered(namespace: str, name: str, moment: datetime | None, port: int = 11) -> dict:
    annotations = {} if moment is None else {ANNOTATION_LAST_CHANGE_TRIGGER_TIME: moment.strftime("%Y-%m-%dT%H:%M:%SZ")}
    return endpoint_slice(namespace, name, name, [endpoint("1.1.1.1")], [slice_port("p11", port, "TCP")], annotations=annotations)


LAST_CHANGE_TRIGGER_TIME = {
    "Single addEndpoints": ([(triggered("ns", "ep1", T0), False)], {"ns/ep1": [T0]}),
    "addEndpoints then updatedEndpoints": ([(triggered("ns", "ep1", T0), False), (triggered("ns", "ep1", T1, port=12), False)],
                                           {"ns/ep1": [T0, T1]}),
    "Add two endpoints then modify one": ([(triggered("ns", "ep1", T1), False), (triggered("ns", "ep2", T2), False),
                                           (triggered("ns", "ep1", T3, port=12), False)], {"ns/ep1": [T1, T3], "ns/ep2": [T2]}),
    "Endpoints without annotation set": ([(triggered("ns", "ep1", None), False)], {}),
    "Endpoints create before tracker started": ([(triggered("ns", "ep1", T_1), False)], {}),
    "addEndpoints then deleteEndpoints": ([(triggered("ns", "ep1", T1), False), (triggered("ns", "ep1", T1), True)], {}),
    "add then delete then add again": ([(triggered("ns", "ep1", T1), False), (triggered("ns", "ep1", T1), True),
                                        (triggered("ns", "ep1", T2, port=12), False)], {"ns/ep1": [T2]}),
    "delete": ([(triggered("ns", "ep1", T1), True)], {}),
    # ---- ours ----
    "unparseable annotation is ignored (ours)": (
        [({**triggered("ns", "ep1", None), "metadata": {**triggered("ns", "ep1", None)["metadata"],
                                                        "annotations": {ANNOTATION_LAST_CHANGE_TRIGGER_TIME: "yesterday"}}}, False)], {}),
    "nanosecond annotation (ours)": (
        [({**triggered("ns", "ep1", None), "metadata": {**triggered("ns", "ep1", None)["metadata"],
                                                        "annotations": {ANNOTATION_LAST_CHANGE_TRIGGER_TIME: "2018-01-01T00:00:01.123456789Z"}}}, False)],
        {"ns/ep1": [T0 + timedelta(microseconds=123456)]}),
    "update reverted before the sync: nothing to measure (ours)": (
        [(triggered("ns", "ep1", T_1), False), "checkout", (triggered("ns", "ep1", T1, port=12), False), (triggered("ns", "ep1", T2), False)], {}),
}


@pytest.mark.parametrize(("scenario", "want"), list(LAST_CHANGE_TRIGGER_TIME.values()), ids=list(LAST_CHANGE_TRIGGER_TIME))
def test_last_change_trigger_time(scenario, want):
    tracker = EndpointsChangeTracker(IPV4, HOST, start_time=START)
    for step in scenario:
        if step == "checkout":
            tracker.checkout()
        else:
            tracker.endpoint_slice_update(*step)
    assert apply_endpoint_changes({}, tracker.checkout()).last_change_trigger_times == want


# ---- TestEndpointSliceUpdate -------------------------------------------------------------------

FQDN_SLICE = {**generate_slice("svc1", "ns1", 2, 5, 999, 999, ["host1"], [80, 443]), "addressType": "FQDN"}
STARTING_1_2 = [generate_slice("svc1", "ns1", 1, 3, 999, 999, ["host1", "host2"], [80, 443]),
                generate_slice("svc1", "ns1", 2, 2, 999, 999, ["host1", "host2"], [80, 443])]

ENDPOINT_SLICE_UPDATE = {
    "add a simple slice that doesn't already exist": (
        [], generate_slice("svc1", "ns1", 1, 3, 999, 999, ["host1", "host2"], [80, 443]), False, True,
        {P0: [ep("10.0.1.1:80"), ep("10.0.1.2:80", local=True), ep("10.0.1.3:80")],
         P1: [ep("10.0.1.1:443"), ep("10.0.1.2:443", local=True), ep("10.0.1.3:443")]}),
    "add the same slice that already exists": (
        [generate_slice("svc1", "ns1", 1, 3, 999, 999, ["host1", "host2"], [80, 443])],
        generate_slice("svc1", "ns1", 1, 3, 999, 999, ["host1", "host2"], [80, 443]), False, False, None),
    "add an FQDN slice (invalid address type)": (
        [generate_slice("svc1", "ns1", 1, 3, 999, 999, ["host1", "host2"], [80, 443])], FQDN_SLICE, False, False, None),
    "add a slice that overlaps with existing state": (
        STARTING_1_2, generate_slice("svc1", "ns1", 1, 5, 999, 999, ["host1"], [80, 443]), False, True,
        {key: [*(ep(f"10.0.1.{i}:{n}", local=True) for i in range(1, 6)), ep(f"10.0.2.1:{n}"), ep(f"10.0.2.2:{n}", local=True)]
         for key, n in ((P0, 80), (P1, 443))}),
    "add a slice that overlaps with existing state and partial ports": (
        STARTING_1_2, generate_slice("svc1", "ns1", 3, 5, 999, 999, ["host1"], [80], offset=1), False, True,
        {P0: [*(ep(f"10.0.1.{i}:80", local=True) for i in range(1, 6)), ep("10.0.2.1:80"), ep("10.0.2.2:80", local=True)],
         P1: [ep("10.0.1.1:443"), ep("10.0.1.2:443", local=True), ep("10.0.1.3:443"), ep("10.0.2.1:443"), ep("10.0.2.2:443", local=True)]}),
    "remove a slice that overlaps with existing state": (
        STARTING_1_2, generate_slice("svc1", "ns1", 1, 5, 999, 999, ["host1"], [80, 443]), True, True,
        {P0: [ep("10.0.2.1:80"), ep("10.0.2.2:80", local=True)], P1: [ep("10.0.2.1:443"), ep("10.0.2.2:443", local=True)]}),
    "remove a slice that doesn't even exist in current state": (
        [generate_slice("svc1", "ns1", 1, 5, 999, 999, ["host1"], [80, 443]), generate_slice("svc1", "ns1", 2, 2, 999, 999, ["host1"], [80, 443])],
        generate_slice("svc1", "ns1", 3, 5, 999, 999, ["host1"], [80, 443]), True, False, None),
    "transition all endpoints to unready state": (
        [generate_slice("svc1", "ns1", 1, 3, 999, 999, ["host1", "host2"], [80, 443])],
        generate_slice("svc1", "ns1", 1, 3, 1, 999, ["host1"], [80, 443]), False, True,
        {key: [ep(f"10.0.1.{i}:{n}", local=True, ready=False, serving=False) for i in (1, 2, 3)] for key, n in ((P0, 80), (P1, 443))}),
    "transition all endpoints to ready state": (
        [generate_slice("svc1", "ns1", 1, 2, 1, 999, ["host1", "host2"], [80, 443])],
        generate_slice("svc1", "ns1", 1, 2, 999, 999, ["host1"], [80, 443]), False, True,
        {key: [ep(f"10.0.1.{i}:{n}", local=True) for i in (1, 2)] for key, n in ((P0, 80), (P1, 443))}),
    "transition some endpoints to ready state": (
        [generate_slice("svc1", "ns1", 1, 3, 2, 999, ["host1"], [80, 443]), generate_slice("svc1", "ns1", 2, 2, 2, 999, ["host1"], [80, 443])],
        generate_slice("svc1", "ns1", 1, 3, 3, 999, ["host1"], [80, 443]), False, True,
        {key: [ep(f"10.0.1.1:{n}", local=True), ep(f"10.0.1.2:{n}", local=True), ep(f"10.0.1.3:{n}", local=True, ready=False, serving=False),
               ep(f"10.0.2.1:{n}", local=True), ep(f"10.0.2.2:{n}", local=True, ready=False, serving=False)] for key, n in ((P0, 80), (P1, 443))}),
    "transition some endpoints to terminating state": (
        [generate_slice("svc1", "ns1", 1, 3, 2, 2, ["host1"], [80, 443]), generate_slice("svc1", "ns1", 2, 2, 2, 2, ["host1"], [80, 443])],
        generate_slice("svc1", "ns1", 1, 3, 3, 2, ["host1"], [80, 443]), False, True,
        {key: [ep(f"10.0.1.1:{n}", local=True), ep(f"10.0.1.2:{n}", local=True, ready=False, terminating=True),
               ep(f"10.0.1.3:{n}", local=True, ready=False, serving=False), ep(f"10.0.2.1:{n}", local=True),
               ep(f"10.0.2.2:{n}", local=True, ready=False, serving=False, terminating=True)] for key, n in ((P0, 80), (P1, 443))}),
}


@pytest.mark.parametrize(("starting", "endpoint_slice", "remove", "returned", "want"),
                         list(ENDPOINT_SLICE_UPDATE.values()), ids=list(ENDPOINT_SLICE_UPDATE))
def test_endpoint_slice_update(starting, endpoint_slice, remove, returned, want):
    tracker = EndpointsChangeTracker(IPV4, "host1")
    for start in starting:
        tracker.endpoint_slice_update(start, False)
    tracker.checkout()
    assert tracker.endpoint_slice_update(endpoint_slice, remove) is returned
    changes = tracker.checkout().services
    if want is None:
        assert changes == {}
    else:
        assert as_lists(changes["ns1/svc1"][1]) == want


# ---- TestCheckoutChanges ---------------------------------------------------------------------

CHECKOUT_CHANGES = {
    "empty slices": ([], [], None),
    "adding initial slice": (
        [], [generate_slice("svc1", "ns1", 1, 3, 3, 2, ["host1"], [80])],
        ({}, {P0: [ep("10.0.1.1:80"), ep("10.0.1.2:80", ready=False, terminating=True), ep("10.0.1.3:80", ready=False, serving=False)]})),
    "removing port in update": (
        [generate_slice("svc1", "ns1", 1, 3, 3, 999, ["host1"], [80, 443])], [generate_slice("svc1", "ns1", 1, 3, 3, 999, ["host1"], [80])],
        ({P0: [ep("10.0.1.1:80"), ep("10.0.1.2:80"), ep("10.0.1.3:80", ready=False, serving=False)],
          P1: [ep("10.0.1.1:443"), ep("10.0.1.2:443"), ep("10.0.1.3:443", ready=False, serving=False)]},
         {P0: [ep("10.0.1.1:80"), ep("10.0.1.2:80"), ep("10.0.1.3:80", ready=False, serving=False)]})),
}


@pytest.mark.parametrize(("applied", "pending", "want"), list(CHECKOUT_CHANGES.values()), ids=list(CHECKOUT_CHANGES))
def test_checkout_changes(applied, pending, want):
    tracker = EndpointsChangeTracker(IPV4, "")
    for endpoint_slice in applied:
        tracker.endpoint_slice_update(endpoint_slice, False)
    tracker.checkout()
    for endpoint_slice in pending:
        tracker.endpoint_slice_update(endpoint_slice, False)
    changes = list(tracker.checkout().services.values())
    if want is None:
        assert changes == []
    else:
        assert [(as_lists(before), as_lists(after)) for before, after in changes] == [want]


# ---- TestGetLocalEndpointIPs -------------------------------------------------------------------

GET_LOCAL_ENDPOINT_IPS = {
    "nothing": ({}, {}),
    "unnamed port": ({spn("ns1", "ep1", "", "TCP"): (ep("1.1.1.1:11"),)}, {}),
    "unnamed port local": ({spn("ns1", "ep1", "", "TCP"): (ep("1.1.1.1:11", local=True),)}, {"ns1/ep1": 1}),
    "named local and non-local ports for the same IP": (
        {spn("ns1", "ep1", "p11", "TCP"): (ep("1.1.1.1:11"), ep("1.1.1.2:11", local=True)),
         spn("ns1", "ep1", "p12", "TCP"): (ep("1.1.1.1:12"), ep("1.1.1.2:12", local=True))}, {"ns1/ep1": 1}),
    "named local and non-local ports for different IPs": (
        {spn("ns1", "ep1", "p11", "TCP"): (ep("1.1.1.1:11"),),
         spn("ns2", "ep2", "p22", "TCP"): (ep("2.2.2.2:22", local=True), ep("2.2.2.22:22", local=True)),
         spn("ns2", "ep2", "p23", "TCP"): (ep("2.2.2.3:23", local=True),),
         spn("ns4", "ep4", "p44", "TCP"): (ep("4.4.4.4:44", local=True), ep("4.4.4.5:44")),
         spn("ns4", "ep4", "p45", "TCP"): (ep("4.4.4.6:45", local=True),)}, {"ns2/ep2": 3, "ns4/ep4": 2}),
    "named local and non-local ports for different IPs, some not ready": (
        {spn("ns1", "ep1", "p11", "TCP"): (ep("1.1.1.1:11"),),
         spn("ns2", "ep2", "p22", "TCP"): (ep("2.2.2.2:22", local=True), ep("2.2.2.22:22", local=True)),
         spn("ns2", "ep2", "p23", "TCP"): (ep("2.2.2.3:23", local=True, ready=False, terminating=True),),
         spn("ns4", "ep4", "p44", "TCP"): (ep("4.4.4.4:44", local=True), ep("4.4.4.5:44")),
         spn("ns4", "ep4", "p45", "TCP"): (ep("4.4.4.6:45", local=True),)}, {"ns2/ep2": 2, "ns4/ep4": 2}),
    "all endpoints are terminating": (
        {spn("ns1", "ep1", "p11", "TCP"): (ep("1.1.1.1:11", ready=False, terminating=True),),
         spn("ns2", "ep2", "p22", "TCP"): (ep("2.2.2.2:22", local=True, ready=False, terminating=True),)}, {}),
}


@pytest.mark.parametrize(("endpoints", "want"), list(GET_LOCAL_ENDPOINT_IPS.values()), ids=list(GET_LOCAL_ENDPOINT_IPS))
def test_get_local_endpoint_ips(endpoints, want):
    assert local_ready_endpoints(endpoints) == want


# ---- ours: what a slice contributes -------------------------------------------------------------

SVC = spn("ns", "svc", "p", "TCP")
PORT = [slice_port("p", 80, "TCP")]

SLICE_CONTENTS = {
    "slice of the other family is ignored": (IPV4, [endpoint_slice("ns", "svc", "a", [endpoint("fd00::1")], PORT, address_type="IPv6")], {}),
    "FQDN slice is ignored": (IPV4, [endpoint_slice("ns", "svc", "a", [endpoint("example.com")], PORT, address_type="FQDN")], {}),
    "slice without the service-name label is ignored": (
        IPV4, [{**endpoint_slice("ns", "svc", "a", [endpoint("10.0.0.1")], PORT), "metadata": {"namespace": "ns", "name": "a"}}], {}),
    "IPv6 endpoint, canonical text and bracketed endpoint": (
        IPV6, [endpoint_slice("ns", "svc", "a", [endpoint("FD00:0::1")], PORT, address_type="IPv6")], {SVC: ["[fd00::1]:80"]}),
    "legacy leading zeros parsed sloppily": (IPV4, [endpoint_slice("ns", "svc", "a", [endpoint("010.000.000.001")], PORT)], {SVC: ["10.0.0.1:80"]}),
    "only addresses[0] counts": (IPV4, [endpoint_slice("ns", "svc", "a", [{"addresses": ["10.0.0.1", "10.0.0.2"]}], PORT)], {SVC: ["10.0.0.1:80"]}),
    "endpoint without addresses is ignored": (IPV4, [endpoint_slice("ns", "svc", "a", [{"addresses": []}, endpoint("10.0.0.3")], PORT)],
                                              {SVC: ["10.0.0.3:80"]}),
    "port without name, without number or 0 is ignored; empty name is a name": (
        IPV4, [endpoint_slice("ns", "svc", "a", [endpoint("10.0.0.1")],
                          [{"port": 80, "protocol": "TCP"}, slice_port("q", None, "TCP"), slice_port("r", 0, "TCP"), slice_port("", 81, "TCP")])],
        {spn("ns", "svc", "", "TCP"): ["10.0.0.1:81"]}),
    "slice and Service port matched by name and protocol": (
        IPV4, [endpoint_slice("ns", "svc", "a", [endpoint("10.0.0.1")], [slice_port("dns", 53, "UDP"), slice_port("dns", 53, "TCP")])],
        {spn("ns", "svc", "dns", "UDP"): ["10.0.0.1:53"], spn("ns", "svc", "dns", "TCP"): ["10.0.0.1:53"]}),
    "sorted as strings": (IPV4, [endpoint_slice("ns", "svc", "a", [endpoint("10.0.0.2"), endpoint("10.0.0.10")], PORT)],
                          {SVC: ["10.0.0.10:80", "10.0.0.2:80"]}),
}


@pytest.mark.parametrize(("family", "slices", "want"), list(SLICE_CONTENTS.values()), ids=list(SLICE_CONTENTS))
def test_slice_contents(family, slices, want):
    tracker = EndpointsChangeTracker(family, HOST)
    for endpoint_slice in slices:
        tracker.endpoint_slice_update(endpoint_slice, False)
    got = {key: [e.endpoint for e in value] for key, value in current_change(tracker, "ns/svc").items()}
    assert got == want


RUNNING = endpoint("10.0.0.1", "node-new", ready=True, serving=True, terminating=False)
TERMINATING = endpoint("10.0.0.1", "node-old", ready=False, serving=True, terminating=True)
RUNNING_EP = ep("10.0.0.1:80")

DUPLICATES = {
    "running copy in the first slice wins": ([("a", [RUNNING]), ("b", [TERMINATING])], RUNNING_EP),
    "running copy in the second slice wins": ([("a", [TERMINATING]), ("b", [RUNNING])], RUNNING_EP),
    "running copy wins inside one slice": ([("a", [RUNNING, TERMINATING])], RUNNING_EP),
    "running copy wins inside one slice, either order": ([("a", [TERMINATING, RUNNING])], RUNNING_EP),
    "two terminating copies: the first stays": (
        [("a", [TERMINATING]), ("b", [endpoint("10.0.0.1", HOST, ready=False, serving=False, terminating=True)])],
        ep("10.0.0.1:80", ready=False, terminating=True)),
}


@pytest.mark.parametrize(("slices", "want"), list(DUPLICATES.values()), ids=list(DUPLICATES))
def test_duplicate_endpoints(slices, want):
    tracker = EndpointsChangeTracker(IPV4, HOST)
    for name, endpoints in slices:
        tracker.endpoint_slice_update(endpoint_slice("ns", "svc", name, endpoints, PORT), False)
    assert current_change(tracker, "ns/svc") == {SVC: [want]}


HINTED = endpoint("10.0.0.1")
HINTED["hints"] = {"forZones": [{"name": "zone-a"}], "forNodes": [{"name": "node-1"}]}


@pytest.mark.parametrize(("prefer_same_node", "want"), [
    (False, ep("10.0.0.1:80", zone_hints=frozenset({"zone-a"}))),
    (True, ep("10.0.0.1:80", zone_hints=frozenset({"zone-a"}), node_hints=frozenset({"node-1"}))),
], ids=["node hints ignored without PreferSameTrafficDistribution", "node hints with PreferSameTrafficDistribution"])
def test_hints(prefer_same_node, want):
    tracker = EndpointsChangeTracker(IPV4, HOST, prefer_same_node=prefer_same_node)
    tracker.endpoint_slice_update(endpoint_slice("ns", "svc", "a", [HINTED], PORT), False)
    assert current_change(tracker, "ns/svc") == {SVC: [want]}


# ---- ours: change bookkeeping -----------------------------------------------------------------

A1 = endpoint_slice("ns", "svc", "a", [endpoint("10.0.0.1")], PORT)
A2 = endpoint_slice("ns", "svc", "a", [endpoint("10.0.0.2")], PORT)
A1_RELABELLED = {**A1, "metadata": {**A1["metadata"], "resourceVersion": "7"}}
A_TWO = endpoint_slice("ns", "svc", "a", [endpoint("10.0.0.1"), endpoint("10.0.0.2")], PORT)
A_TWO_REVERSED = endpoint_slice("ns", "svc", "a", [endpoint("10.0.0.2"), endpoint("10.0.0.1")], PORT)
B1 = endpoint_slice("ns", "svc", "b", [endpoint("10.0.0.9")], PORT)

# name: (applied slices, then (slice, removed) updates with the expected return value,
#        pending() after, the Services checked out with a change)
BOOKKEEPING = {
    "update back to the applied slice withdraws the pending change": ([A1], [(A2, False, True), (A1, False, False)], 0, set()),
    "delete of a slice never applied is no change": ([], [(A1, False, True), (A1, True, False)], 0, set()),
    "metadata-only update is no change": ([A1], [(A1_RELABELLED, False, False)], 0, set()),
    "reordered endpoints: recorded, but the endpoints map is the same": ([A_TWO], [(A_TWO_REVERSED, False, True)], 1, set()),
    "pending counts Services with changes": ([], [(A1, False, True), (B1, False, True), (A2, False, True)], 1, {"ns/svc"}),
    "delete of an applied slice": ([A1, B1], [(A1, True, True), (A1, True, False)], 1, {"ns/svc"}),
}


@pytest.mark.parametrize(("applied", "updates", "pending", "changed"), list(BOOKKEEPING.values()), ids=list(BOOKKEEPING))
def test_change_bookkeeping(applied, updates, pending, changed):
    tracker = EndpointsChangeTracker(IPV4, HOST)
    for endpoint_slice in applied:
        tracker.endpoint_slice_update(endpoint_slice, False)
    tracker.checkout()
    for endpoint_slice, removed, returned in updates:
        assert tracker.endpoint_slice_update(endpoint_slice, removed) is returned
    assert tracker.pending() == pending
    assert set(tracker.checkout().services) == changed
    assert tracker.pending() == 0


def test_unchanged_slices_keep_their_objects():
    """(ours) A port fed only by untouched slices keeps the very same tuple (and Endpoint
    objects) when another slice of the Service changes; nothing is re-read."""
    tracker = EndpointsChangeTracker(IPV4, HOST)
    other = endpoint_slice("ns", "svc", "b", [endpoint("10.0.1.1")], [slice_port("q", 90, "TCP")])
    tracker.endpoint_slice_update(A_TWO, False)
    tracker.endpoint_slice_update(other, False)
    endpoints = {}
    apply_endpoint_changes(endpoints, tracker.checkout())
    before_q = endpoints[spn("ns", "svc", "q", "TCP")]

    grown = endpoint_slice("ns", "svc", "a", [endpoint("10.0.0.1"), endpoint("10.0.0.2"), endpoint("10.0.0.3")], PORT)
    tracker.endpoint_slice_update(grown, False)
    result = apply_endpoint_changes(endpoints, tracker.checkout())
    assert result.updated_services == {"ns/svc"}
    assert endpoints[spn("ns", "svc", "q", "TCP")] is before_q
    assert [e.endpoint for e in endpoints[SVC]] == ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"]


CONNTRACK = {
    "SCTP endpoints go stale too": ("SCTP", True),
    "TCP endpoints need no conntrack cleanup": ("TCP", False),
}


@pytest.mark.parametrize(("protocol", "cleaned"), list(CONNTRACK.values()), ids=list(CONNTRACK))
def test_conntrack_protocols(protocol, cleaned):
    """(ours) Which protocols report stale endpoints and newly active ports."""
    tracker, endpoints = EndpointsChangeTracker(IPV4, HOST), {}
    key = spn("ns", "svc", "p", protocol)
    tracker.endpoint_slice_update(endpoint_slice("ns", "svc", "a", [endpoint("10.0.0.1")], [slice_port("p", 80, protocol)]), False)
    added = apply_endpoint_changes(endpoints, tracker.checkout())
    tracker.endpoint_slice_update(endpoint_slice("ns", "svc", "a", [endpoint("10.0.0.2")], [slice_port("p", 80, protocol)]), False)
    replaced = apply_endpoint_changes(endpoints, tracker.checkout())
    assert added.newly_active_udp_services == ([key] if cleaned else [])
    assert replaced.stale_udp_endpoints == ([(key, ep("10.0.0.1:80"))] if cleaned else [])
    assert replaced.newly_active_udp_services == []
