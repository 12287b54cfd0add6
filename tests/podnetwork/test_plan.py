"""The Pod network's decisions without a kernel: which peers a set of Nodes gives, what the
kernel should hold for them in ``routes`` and ``vxlan`` modes, the operations that get it
there from what it holds, and the masquerade rules. Expected values are written by hand from
flannel's host-gw/vxlan layouts (``kubesvc.podnetwork.plan``'s docstring)."""

from __future__ import annotations

import json

import pytest

from kubesvc.kernel.fake.nftables import FakeNFTables
from kubesvc.kernel.routes import PodRoute
from kubesvc.podnetwork import masquerade, plan
from kubesvc.podnetwork.plan import Peer

MAC2, MAC3 = "02:00:00:00:00:02", "02:00:00:00:00:03"


def node(name, ip=None, cidrs=(), mac=None, public=None, extra_ips=()):
    annotations = {}
    if mac:
        annotations[plan.BACKEND_TYPE] = "vxlan"
        annotations[plan.BACKEND_DATA] = json.dumps({"VNI": 1, "VtepMAC": mac})
    if public:
        annotations[plan.PUBLIC_IP] = public
    addresses = [{"type": "InternalIP", "address": a} for a in ([ip] if ip else []) + list(extra_ips)]
    addresses.append({"type": "Hostname", "address": name})
    return {"metadata": {"name": name, "annotations": annotations},
            "spec": {"podCIDR": cidrs[0], "podCIDRs": list(cidrs)} if cidrs else {},
            "status": {"addresses": addresses}}


PEER_CASES = [
    ("internal-ip-and-cidr", node("n2", "192.168.77.12", ["10.244.2.0/24"]), Peer("n2", ("192.168.77.12",), ("10.244.2.0/24",))),
    ("public-ip-annotation-wins", node("n2", "192.168.77.12", ["10.244.2.0/24"], public="192.168.88.12"),
     Peer("n2", ("192.168.88.12",), ("10.244.2.0/24",))),
    ("bad-public-ip-ignored", node("n2", "192.168.77.12", ["10.244.2.0/24"], public="nope"),
     Peer("n2", ("192.168.77.12",), ("10.244.2.0/24",))),
    ("dual-stack", node("n2", "192.168.77.12", ["10.244.2.0/24", "fd00:10:244:2::/64"], extra_ips=["fd00::12"]),
     Peer("n2", ("192.168.77.12", "fd00::12"), ("10.244.2.0/24", "fd00:10:244:2::/64"))),
    ("second-ipv4-ignored", node("n2", "192.168.77.12", ["10.244.2.0/24"], extra_ips=["192.168.77.99"]),
     Peer("n2", ("192.168.77.12",), ("10.244.2.0/24",))),
    ("vtep-mac-normalized", node("n2", "192.168.77.12", ["10.244.2.0/24"], mac="02:AB:0:0:0:2"),
     Peer("n2", ("192.168.77.12",), ("10.244.2.0/24",), "02:ab:00:00:00:02")),
    ("no-cidr-yet", node("n2", "192.168.77.12"), Peer("n2", ("192.168.77.12",), ())),
    ("podcidr-only", {"metadata": {"name": "n2"}, "spec": {"podCIDR": "10.244.2.0/24"}}, Peer("n2", (), ("10.244.2.0/24",))),
    ("garbage-cidr-dropped", node("n2", "192.168.77.12", ["10.244.2.0/24", "x"]), Peer("n2", ("192.168.77.12",), ("10.244.2.0/24",))),
]


@pytest.mark.parametrize("given,expected", [c[1:] for c in PEER_CASES], ids=[c[0] for c in PEER_CASES])
def test_peer_of(given, expected):
    assert plan.peer_of(given) == expected


@pytest.mark.parametrize("annotations,expected", [
    ({plan.BACKEND_TYPE: "vxlan", plan.BACKEND_DATA: '{"VNI":1,"VtepMAC":"02:00:00:00:00:02"}'}, MAC2),
    ({plan.BACKEND_TYPE: "host-gw", plan.BACKEND_DATA: "null"}, None),
    ({plan.BACKEND_TYPE: "vxlan", plan.BACKEND_DATA: "{"}, None),
    ({plan.BACKEND_TYPE: "vxlan", plan.BACKEND_DATA: '{"VtepMAC": 5}'}, None),
    ({plan.BACKEND_TYPE: "vxlan", plan.BACKEND_DATA: '{"VtepMAC": "zz:00:00:00:00:02"}'}, None),
    ({}, None),
], ids=["vxlan", "host-gw", "bad-json", "mac-not-a-string", "mac-not-hex", "none"])
def test_vtep_mac_of(annotations, expected):
    assert plan.vtep_mac_of(annotations) == expected


def test_peers_leave_this_node_out_and_sort_by_name():
    nodes = [node("n3", "192.168.77.13", ["10.244.3.0/24"]), node("n1", "192.168.77.11", ["10.244.1.0/24"]),
             node("n2", "192.168.77.12", ["10.244.2.0/24"])]
    assert [p.name for p in plan.peers(nodes, "n1")] == ["n2", "n3"]


LAN = ["192.168.77.0/24"]
P2 = Peer("n2", ("192.168.77.12",), ("10.244.2.0/24",), MAC2)
P3 = Peer("n3", ("192.168.88.13",), ("10.244.3.0/24",), MAC3)
P2_NO_MAC = Peer("n2", ("192.168.77.12",), ("10.244.2.0/24",))
P2_DUAL = Peer("n2", ("192.168.77.12", "fd00::12"), ("10.244.2.0/24", "fd00:10:244:2::/64"), MAC2)
LAN_DUAL = ["192.168.77.0/24", "fd00::/64"]

DESIRED_CASES = [
    ("routes-via-internal-ip", "routes", [P2], LAN, {PodRoute("10.244.2.0/24", "192.168.77.12")}, {}, {}, 0),
    ("routes-peer-off-segment-left-out", "routes", [P2, P3], LAN, {PodRoute("10.244.2.0/24", "192.168.77.12")}, {}, {}, 1),
    ("routes-dual-stack", "routes", [P2_DUAL], LAN_DUAL,
     {PodRoute("10.244.2.0/24", "192.168.77.12"), PodRoute("fd00:10:244:2::/64", "fd00::12")}, {}, {}, 0),
    ("routes-ipv6-cidr-without-ipv6-address", "routes", [Peer("n2", ("192.168.77.12",), ("fd00:10:244:2::/64",))], LAN_DUAL,
     set(), {}, {}, 1),
    ("vxlan-across-routers", "vxlan", [P2, P3], LAN,
     {PodRoute("10.244.2.0/24", "10.244.2.0", "kubesvc.1", True), PodRoute("10.244.3.0/24", "10.244.3.0", "kubesvc.1", True)},
     {"10.244.2.0": MAC2, "10.244.3.0": MAC3}, {MAC2: "192.168.77.12", MAC3: "192.168.88.13"}, 0),
    ("vxlan-waits-for-the-mac", "vxlan", [P2_NO_MAC], LAN, set(), {}, {}, 1),
    ("vxlan-ipv4-only", "vxlan", [P2_DUAL], LAN_DUAL, {PodRoute("10.244.2.0/24", "10.244.2.0", "kubesvc.1", True)},
     {"10.244.2.0": MAC2}, {MAC2: "192.168.77.12"}, 0),
    ("no-cidr-no-route", "routes", [Peer("n2", ("192.168.77.12",), ())], LAN, set(), {}, {}, 0),
]


@pytest.mark.parametrize("mode,others,networks,routes,neighbours,fdb,unreachable", [c[1:] for c in DESIRED_CASES],
                         ids=[c[0] for c in DESIRED_CASES])
def test_desired(mode, others, networks, routes, neighbours, fdb, unreachable):
    want = plan.desired(mode, others, networks)
    assert set(want.routes) == routes
    assert dict(want.neighbours) == neighbours
    assert dict(want.fdb) == fdb
    assert len(want.unreachable) == unreachable, want.unreachable


R2 = PodRoute("10.244.2.0/24", "192.168.77.12")
R3 = PodRoute("10.244.3.0/24", "192.168.77.13")
R3_MOVED = PodRoute("10.244.3.0/24", "192.168.77.23")
V2 = PodRoute("10.244.2.0/24", "10.244.2.0", "kubesvc.1", True)
V3 = PodRoute("10.244.3.0/24", "10.244.3.0", "kubesvc.1", True)

SYNC_CASES = [
    ("nothing-to-do", "routes", plan.Desired(frozenset({R2, R3})), {R2, R3}, {}, {}, []),
    ("new-node", "routes", plan.Desired(frozenset({R2, R3})), {R2}, {}, {},
     ["route replace 10.244.3.0/24 via 192.168.77.13 proto 77"]),
    ("node-left", "routes", plan.Desired(frozenset({R2})), {R2, R3}, {}, {}, ["route del 10.244.3.0/24 proto 77"]),
    ("node-ip-changed", "routes", plan.Desired(frozenset({R2, R3_MOVED})), {R2, R3}, {}, {},
     ["route replace 10.244.3.0/24 via 192.168.77.23 proto 77"]),
    ("vxlan-new-node-entries-before-route", "vxlan", plan.Desired(frozenset({V2, V3}), {"10.244.2.0": MAC2, "10.244.3.0": MAC3},
                                                                  {MAC2: "192.168.77.12", MAC3: "192.168.88.13"}),
     {V2}, {"10.244.2.0": MAC2}, {MAC2: "192.168.77.12"},
     [f"neigh replace 10.244.3.0 lladdr {MAC3} dev kubesvc.1 nud permanent",
      f"fdb replace {MAC3} dev kubesvc.1 dst 192.168.88.13 self permanent",
      "route replace 10.244.3.0/24 via 10.244.3.0 dev kubesvc.1 onlink proto 77"]),
    ("vxlan-node-left-route-first", "vxlan", plan.Desired(frozenset({V2}), {"10.244.2.0": MAC2}, {MAC2: "192.168.77.12"}),
     {V2, V3}, {"10.244.2.0": MAC2, "10.244.3.0": MAC3}, {MAC2: "192.168.77.12", MAC3: "192.168.88.13"},
     ["route del 10.244.3.0/24 proto 77", "neigh del 10.244.3.0 dev kubesvc.1",
      f"fdb del {MAC3} dev kubesvc.1 dst 192.168.88.13 self"]),
    ("vxlan-node-moved", "vxlan", plan.Desired(frozenset({V3}), {"10.244.3.0": MAC3}, {MAC3: "192.168.99.13"}),
     {V3}, {"10.244.3.0": MAC3}, {MAC3.upper(): "192.168.88.13"},
     [f"fdb replace {MAC3} dev kubesvc.1 dst 192.168.99.13 self permanent"]),
    ("vxlan-mac-changed", "vxlan", plan.Desired(frozenset({V3}), {"10.244.3.0": MAC2}, {MAC2: "192.168.88.13"}),
     {V3}, {"10.244.3.0": MAC3}, {MAC3: "192.168.88.13"},
     [f"fdb del {MAC3} dev kubesvc.1 dst 192.168.88.13 self", f"neigh replace 10.244.3.0 lladdr {MAC2} dev kubesvc.1 nud permanent",
      f"fdb replace {MAC2} dev kubesvc.1 dst 192.168.88.13 self permanent"]),
]


@pytest.mark.parametrize("mode,want,routes,neighbours,fdb,expected", [c[1:] for c in SYNC_CASES], ids=[c[0] for c in SYNC_CASES])
def test_sync_ops(mode, want, routes, neighbours, fdb, expected):
    assert [str(op) for op in plan.sync_ops(mode, want, routes, neighbours, fdb)] == expected


def test_vtep_mac_is_stable_unicast_and_locally_administered():
    mac = plan.vtep_mac("node1")
    assert mac == plan.vtep_mac("node1") != plan.vtep_mac("node2")
    first = int(mac.split(":")[0], 16)
    assert first & 0x02 and not first & 0x01, mac


def test_vxlan_device_and_pod_mtu_leave_room_for_50_bytes():
    device = plan.vxlan_device("node1", "192.168.77.11", "eth0", 1500)
    assert (device.name, device.vni, device.port, device.mtu, device.local, device.dev) == ("kubesvc.1", 1, 8472, 1450, "192.168.77.11", "eth0")
    assert plan.pod_mtu("vxlan", 9000) == 8950
    assert plan.pod_mtu("routes", 1500) is None


def test_self_annotations_are_flannels():
    assert plan.self_annotations("vxlan", "192.168.77.11", MAC2) == {
        "flannel.alpha.coreos.com/backend-type": "vxlan", "flannel.alpha.coreos.com/public-ip": "192.168.77.11",
        "flannel.alpha.coreos.com/kube-subnet-manager": "true",
        "flannel.alpha.coreos.com/backend-data": '{"VNI":1,"VtepMAC":"02:00:00:00:00:02"}'}
    assert plan.self_annotations("routes", "192.168.77.11", None)["flannel.alpha.coreos.com/backend-type"] == "host-gw"


def test_masquerade_rules_are_flannels_and_apply_twice():
    expected = ["ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return",
                "ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random",
                "ip saddr != 10.244.0.0/16 ip daddr 10.244.1.0/24 return",
                "ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade fully-random"]
    assert masquerade.rules(4, ["10.244.0.0/16", "fd00:10:244::/56"], ["10.244.1.0/24", "fd00:10:244:1::/64"]) == expected
    assert masquerade.rules(6, ["fd00:10:244::/56"], ["fd00:10:244:1::/64"])[1] == \
        "ip6 saddr fd00:10:244::/56 ip6 daddr != ff00::/8 masquerade fully-random"
    nft = FakeNFTables(4, masquerade.TABLE)
    for _ in range(2):  # a restarted agent rewrites the table whole
        nft.run_sync(masquerade.transaction(4, ["10.244.0.0/16"], ["10.244.1.0/24"]))
    assert nft.rules("postrouting") == expected
