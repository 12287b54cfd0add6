"""Chain names and probabilities must match upstream byte for byte (users and tools grep them)."""

import pytest

from kubesvc.proxy.iptables import naming
from kubesvc.proxy.backend import ProxyOptions
from kubesvc.proxy.iptables.rules import probability
from kubesvc.proxy.types import ServicePortName

# (service port, protocol, endpoint or None, expected chain) — values from upstream proxier_test.go
CASES = [
    (("ns1", "svc1", "p80"), "TCP", None, "KUBE-SVC-XPGD46QRK7WJZT7O"),
    (("ns1", "svc1", "p80"), "TCP", "10.180.0.1:80", "KUBE-SEP-SXIVWICOYRO3J4NJ"),
    (("ns2", "svc2", "p80"), "TCP", None, "KUBE-SVC-GNZBNJ2PO5MGZ6GT"),
    (("ns2", "svc2", "p80"), "TCP", "10.180.0.2:80", "KUBE-SEP-RS4RBKLTHTF2IUXJ"),
    (("ns3", "svc3", "p80"), "TCP", None, "KUBE-SVC-X27LE4BHSL4DOUIK"),
    (("ns4", "svc4", "p80"), "TCP", None, "KUBE-SVC-4SW47YFZTEDKD3PK"),
    (("ns4", "svc4", "p80"), "TCP", "10.180.0.4:80", "KUBE-SEP-UKSFD7AGPMPPLUHC"),
    (("ns4", "svc4", "p80"), "TCP", "10.180.0.5:80", "KUBE-SEP-C6EBXVWJJZMIWKLZ"),
    (("ns5", "svc5", "p80"), "TCP", None, "KUBE-SVC-NUKIZ6OKUXPJNT4C"),
    (("ns5", "svc5", "p80"), "TCP", "10.180.0.3:80", "KUBE-SEP-I77PXRDZVX7PMWMN"),
    (("ns2", "svc2", "p8080"), "TCP", None, "KUBE-SVC-2VJB64SDSIJUP5T6"),
    (("ns1", "svc1", "p80"), "TCP", "10.0.0.0:80", "KUBE-SEP-DKGQUZGBKLTPAR56"),
    (("ns3", "svc3", "p8081"), "TCP", "203.0.113.4:8081", "KUBE-SEP-RUVVH7YV3PHQBDOS"),
    (("ns4", "svc4", "p8082"), "TCP", None, "KUBE-SVC-EBDQOQU5SJFXRIL3"),
    (("ns4", "svc4", "p8082"), "TCP", "10.4.0.1:8082", "KUBE-SEP-SU5STNODRYEWJAUF"),
]


@pytest.mark.parametrize("name,protocol,endpoint,expected", CASES, ids=[c[3] for c in CASES])
def test_upstream_chain_names(name, protocol, endpoint, expected):
    spn = ServicePortName(*name, protocol)
    got = naming.service_chain(spn) if endpoint is None else naming.endpoint_chain(spn, endpoint)
    assert got == expected


def test_four_service_chains_share_the_hash():
    chains = naming.service_chains(ServicePortName("ns5", "svc5", "p80", "TCP"))
    assert chains == ("KUBE-SVC-NUKIZ6OKUXPJNT4C", "KUBE-SVL-NUKIZ6OKUXPJNT4C", "KUBE-EXT-NUKIZ6OKUXPJNT4C", "KUBE-FW-NUKIZ6OKUXPJNT4C")
    assert all(len(c) <= 28 for c in chains)


def test_protocol_is_part_of_the_hash_but_not_the_name():
    tcp = ServicePortName("ns", "svc", "dns", "TCP")
    udp = ServicePortName("ns", "svc", "dns", "UDP")
    assert str(tcp) == str(udp)
    assert naming.service_chain(tcp) != naming.service_chain(udp)


@pytest.mark.parametrize("chain,expected", [
    ("KUBE-SVC-XPGD46QRK7WJZT7O", True), ("KUBE-SVL-X", True), ("KUBE-EXT-X", True), ("KUBE-FW-X", True),
    ("KUBE-SEP-X", True), ("KUBE-SERVICES", False), ("KUBE-NODEPORTS", False), ("KUBE-MARK-MASQ", False),
    ("KUBE-FIREWALL", False), ("FOO", False),
])
def test_is_service_chain_name(chain, expected):
    assert naming.is_service_chain_name(chain) is expected


# upstream TestComputeProbability
@pytest.mark.parametrize("n,expected", [
    (1, "1.0000000000"), (2, "0.5000000000"), (10, "0.1000000000"), (100, "0.0100000000"), (1000, "0.0010000000"),
    (10000, "0.0001000000"), (100000, "0.0000100000"), (100001, "0.0000099999"), (3, "0.3333333333"),
])
def test_probability(n, expected):
    assert probability(n) == expected


def test_probabilities_strictly_decrease():
    previous = 0.0
    for i in range(100000, 1, -1):
        current = float(probability(i))
        assert current > previous, i
        previous = current


@pytest.mark.parametrize("bit,mark", [(14, "0x00004000"), (0, "0x00000001"), (31, "0x80000000")])
def test_masquerade_mark_is_gos_percent_hash_08x(bit, mark):
    assert ProxyOptions(masquerade_bit=bit).masquerade_mark == mark
