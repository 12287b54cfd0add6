"""The Pods' MTU in ``vxlan`` mode: both ends of a Pod's veth get it (a veth peer does not inherit
its MTU), as the ``ip`` line and the stateful fake show; the real kernel: tests/kernel/test_pod_network.py."""

from __future__ import annotations

from kubesvc.agent.podnet import PodNetwork, node_side_ops
from kubesvc.kernel.fake.links import FakeNetwork
from kubesvc.kernel.links import AddNetns, render

POD = PodNetwork("kubesvc-u1", [], "veth0123456789a")


def test_node_side_ops_give_both_ends_the_mtu():
    assert render(node_side_ops("cbr0", POD, True, False, 1450))[0] == \
        "link add veth0123456789a mtu 1450 type veth peer name eth0 mtu 1450 netns kubesvc-u1"
    assert render(node_side_ops("cbr0", POD, True, False))[0] == "link add veth0123456789a type veth peer name eth0 netns kubesvc-u1"


def test_both_ends_have_it_in_the_fake():
    network = FakeNetwork()
    network.apply([AddNetns("kubesvc-u1")])
    network.apply([op for op in node_side_ops("cbr0", POD, True, False, 1450) if "bridge" not in str(op) and "master" not in str(op)])
    assert network.ns().links["veth0123456789a"].mtu == 1450
    assert network.ns("kubesvc-u1").links["eth0"].mtu == 1450
