"""The overlay fake (``kernel/fake/overlay.py``) against the kernel: one namespace of the test's
own with an uplink ``eth0`` (192.168.5.1/24, a veth into a second namespace), the same
operations sent to ``kernel.vxlan.HostOverlay`` in that namespace and to the fake; each step
must be accepted by both or refused by both with the same errno, and afterwards both must
report the same VXLAN device, routes of ours, permanent neighbours and FDB entries."""

from __future__ import annotations

import errno
import sys

import pytest

from kubesvc.kernel.fake.overlay import FakeOverlay
from kubesvc.kernel.links import Address, DelLink, SetUp
from kubesvc.kernel.netlink import NetlinkFailed
from kubesvc.kernel.routes import DeleteRoute, PodRoute, ReplaceRoute
from kubesvc.kernel.vxlan import AddVxlan, DelFdb, DelNeigh, HostOverlay, ReplaceFdb, ReplaceNeigh, VxlanDevice
from tests.support.netns import Netns, veth

pytestmark = pytest.mark.kernel

MAC = "02:aa:bb:cc:dd:ee"
DEVICE = VxlanDevice("kubesvc.1", 1, "192.168.5.1", "eth0", 8472, 1450, "02:11:22:33:44:55")
V3 = PodRoute("10.244.3.0/24", "10.244.3.0", "kubesvc.1", True)
DIRECT = PodRoute("10.244.5.0/24", "192.168.5.3")

STEPS = [
    ("device", [AddVxlan(DEVICE)], None),
    ("device-name-taken", [AddVxlan(DEVICE)], errno.EEXIST),
    ("another-device-with-the-vni-and-port", [AddVxlan(VxlanDevice("kubesvc.2", 1, "192.168.5.1", "eth0", 8472, 1450, "02:11:22:33:44:57"))],
     errno.EEXIST),
    ("device-without-uplink", [AddVxlan(VxlanDevice("kubesvc.2", 2, "192.168.5.1", "nope", 8472, 1450, "02:11:22:33:44:56"))], errno.ENODEV),
    ("vtep-address-and-up", [Address("kubesvc.1", "10.244.1.0/32", replace=True), SetUp("kubesvc.1")], None),
    ("vtep-address-again", [Address("kubesvc.1", "10.244.1.0/32", replace=True)], None),
    ("onlink-route", [ReplaceRoute(V3)], None),
    ("direct-route", [ReplaceRoute(DIRECT)], None),
    ("direct-route-again", [ReplaceRoute(DIRECT)], None),
    ("gateway-off-link", [ReplaceRoute(PodRoute("10.244.4.0/24", "192.168.9.9"))], errno.ENETUNREACH),
    ("neighbour-and-fdb", [ReplaceNeigh("kubesvc.1", "10.244.3.0", MAC), ReplaceFdb("kubesvc.1", MAC, "192.168.6.3")], None),
    ("fdb-moves", [ReplaceFdb("kubesvc.1", MAC, "192.168.6.4")], None),
    ("neighbour-on-missing-link", [ReplaceNeigh("nope", "10.244.3.0", MAC)], errno.ENODEV),
    ("delete-missing-neighbour", [DelNeigh("kubesvc.1", "10.244.9.0")], errno.ENOENT),
    ("delete-missing-route", [DeleteRoute("10.244.9.0/24")], errno.ESRCH),
    ("delete-fdb-of-another-dst-is-a-no-op", [DelFdb("kubesvc.1", MAC, "192.168.6.3")], None),
    ("delete-fdb-of-a-missing-mac", [DelFdb("kubesvc.1", "02:00:00:00:00:99", "192.168.6.3")], errno.ENOENT),
    ("fdb-on-a-veth-keeps-no-destination", [ReplaceFdb("eth0", MAC, "192.168.6.3")], None),
    ("delete-direct-route", [DeleteRoute(DIRECT.dst)], None),
    ("delete-device-takes-its-entries", [DelLink("kubesvc.1")], None),
]


@pytest.fixture
def machine():
    node, peer = Netns.create("ovl"), Netns.create("ovlpeer")
    try:
        veth(node, "eth0", peer, "eth0")
        node.ip("addr", "add", "192.168.5.1/24", "dev", "eth0")
        yield node
    finally:
        node.close()
        peer.close()


async def state(kernel) -> tuple:
    info = await kernel.vxlan("kubesvc.1")
    device = None if info is None else (info.kind, info.vni, info.local, info.dev, info.port, info.mtu, info.mac, info.addresses, info.up)
    return device, await kernel.routes(), await kernel.neighbours("kubesvc.1"), await kernel.fdb("kubesvc.1")


async def outcome(kernel, ops) -> int | None:
    try:
        await kernel.apply(ops)
    except NetlinkFailed as err:
        return err.returncode
    return None


async def test_the_fake_refuses_and_holds_what_the_kernel_does(machine):
    real, fake = HostOverlay(machine.name), FakeOverlay({"eth0": (["192.168.5.1/24"], 1500)})
    uplink = await real.uplink("192.168.5.1")
    assert (uplink.name, uplink.mtu, uplink.networks) == ("eth0", 1500, ("192.168.5.0/24",))
    assert await fake.uplink("192.168.5.1") == uplink
    for name, ops, expected in STEPS:
        got_real, got_fake = await outcome(real, ops), await outcome(fake, ops)
        assert (got_real, got_fake) == (expected, expected), f"{name}: kernel {got_real}, fake {got_fake}, expected {expected}"
        assert await state(real) == await state(fake), name
    assert await state(real) == (None, set(), {}, {})


def test_down_removes_what_a_killed_agent_left(machine):
    """``kubesvc down``'s Pod network teardown (``up.teardown_pod_network``) in a namespace where an
    agent was killed: our routes, the VXLAN device and the masquerade table go; a route of someone
    else's (another protocol) stays."""
    machine.ip_batch("link add kubesvc.1 type vxlan id 1 local 192.168.5.1 dev eth0 dstport 8472 nolearning", "link set kubesvc.1 up",
                     "route add 10.244.3.0/24 via 10.244.3.0 dev kubesvc.1 onlink proto 77",
                     "route add 10.244.4.0/24 via 192.168.5.4 proto 77", "route add 10.99.0.0/24 via 192.168.5.9")
    machine.run("nft", "-f", "-", input="add table ip kubesvc-pod-network\nadd chain ip kubesvc-pod-network postrouting "
                                         "{ type nat hook postrouting priority 100 ; }\n")
    out = machine.run(sys.executable, "-c", "from pathlib import Path; from kubesvc.up import teardown_pod_network; "
                                            "print(teardown_pod_network(Path('/nonexistent')))").stdout
    assert out.strip() == "[]"
    assert machine.ip("route", "show", "proto", "77").stdout.strip() == ""
    assert "10.99.0.0/24 via 192.168.5.9" in machine.ip("route").stdout
    assert "kubesvc.1" not in machine.ip("link").stdout
    assert "kubesvc-pod-network" not in machine.run("nft", "list", "tables").stdout
