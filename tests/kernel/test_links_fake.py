"""The links fake (``kernel/fake/links.py``) against the kernel, in two namespaces of the test's
own (a "node" and a "pod" one): every operation goes through ``kernel.links.apply`` (forced, so
a refusal comes back as its line) and through the fake; both must accept it or refuse it with
the same errno text, and afterwards hold the same links (kind, up, master, hairpin, addresses;
``lo`` left out: the kernel gives it its own addresses) and the same routes of ours (``proto
boot``: the kernel's own connected and local routes are left out, as the fake keeps them apart).

Cases: each refusal the fake models, then the Pod network's own plans (``agent.podnet``'s bridge,
node-side and Pod-side operations, and a Pod's removal), and the named namespaces
(``kernel.netns``: names, a taken or missing name, the processes inside).
"""

from __future__ import annotations

import ipaddress
import json
import time

import pytest

from kubesvc.agent.podnet import PodNetwork, bridge_ops, node_side_ops, pod_removal_ops, pod_side_ops
from kubesvc.kernel import links
from kubesvc.kernel import netns as knetns
from kubesvc.kernel.fake.links import FakeNetwork, Namespace
from kubesvc.kernel.links import (AddBridge, AddVeth, Address, DelAddress, DelLink, DelRoute, Route, SetHairpin, SetUp)
from tests.support.netns import Netns

pytestmark = pytest.mark.kernel


@pytest.fixture
def pair():
    node, pod = Netns.create("lnode"), Netns.create("lpod")
    fake = FakeNetwork()
    for ns in (node, pod):
        fake.named[ns.name] = Namespace()
        fake.apply([SetUp("lo")], ns.name)
    try:
        yield node, pod, fake
    finally:
        pod.close()
        node.close()


def real_state(ns: Netns) -> tuple[dict, set]:
    found = {}
    for link in json.loads(ns.ip("-j", "-d", "link", "show").stdout):
        name = link["ifname"]
        if name == "lo":
            continue
        info = links.link_info(name, ns.name)
        slave = link.get("linkinfo", {}).get("info_slave_data", {})
        found[name] = (info.kind, "UP" in link["flags"], link.get("master"), bool(slave.get("hairpin")), tuple(sorted(info.addresses)))
    routes = set()
    for family in ("-4", "-6"):
        for route in json.loads(ns.ip(family, "-j", "route", "show", "proto", "boot").stdout):
            dst = route["dst"]
            dst = ("0.0.0.0/0" if family == "-4" else "::/0") if dst == "default" else str(ipaddress.ip_network(dst))
            routes.add((dst, route.get("gateway"), route["dev"]))
    return found, routes


def fake_state(fake: FakeNetwork, ns: Netns) -> tuple[dict, set]:
    space = fake.ns(ns.name)
    found = {name: (link.kind, link.up, link.master, link.hairpin, tuple(sorted(link.addresses)))
             for name, link in space.links.items() if name != "lo"}
    return found, {(r.dst, r.via, r.dev) for r in space.routes.values()}


def both(pair, ops, where: str = "node") -> list[str]:
    node, pod, fake = pair
    ns = node if where == "node" else pod
    real = links.apply(ops, ns.name, force=True)
    assert fake.apply(ops, ns.name, force=True) == real, ops
    for space in (node, pod):
        assert fake_state(fake, space) == real_state(space), (ops, space)
    return real


def test_each_operation_is_accepted_or_refused_alike(pair):
    node, pod, fake = pair
    P = pod.name
    cases = [  # (operations in the node namespace, the refusal or None)
        ([AddBridge("br0", "02:00:00:00:00:01")], None),
        ([AddBridge("br0", "02:00:00:00:00:02")], "File exists"),
        ([AddVeth("v1", "eth0", P)], None),
        ([AddVeth("v1", "eth1", P)], "File exists"),
        ([AddVeth("v2", "eth0", P)], "File exists"),  # the far end's name is taken there
        ([AddVeth("v3", "eth0", "ks-nope-nothere")], "No such file or directory"),
        ([DelLink("nope")], 'Cannot find device "nope"'),
        ([SetUp("nope")], 'Cannot find device "nope"'),
        ([SetUp("v1", "nope")], 'Cannot find device "nope"'),
        ([SetHairpin("v1")], "Operation not supported"),  # not a bridge port
        ([Route("10.9.0.0/24", "v1", replace=False)], "Network is down"),
        ([Address("br0", "10.1.1.1/24")], None),
        ([Address("br0", "10.1.1.1/24")], "File exists"),
        ([Address("br0", "10.1.1.1/24", replace=True)], None),
        ([Address("br0", "10.1.1.1/16")], None),  # another prefix length: another address
        ([DelAddress("br0", "10.2.2.2/24")], "Cannot assign requested address"),
        ([DelAddress("nope", "10.2.2.2/24")], 'Cannot find device "nope"'),
        ([Route("10.9.0.0/24", "br0", replace=False)], "Network is down"),
        ([SetUp("br0")], None),
        ([Route("10.8.0.0/24", "br0", replace=False)], None),
        ([Route("10.8.0.0/24", "br0", replace=False)], "File exists"),
        ([Route("10.8.0.0/24", "br0")], None),  # replace
        ([Route("10.7.0.0/24", "br0", via="10.1.1.5")], None),
        ([Route("10.6.0.0/24", "br0", via="10.3.3.3")], "Network is unreachable"),
        ([DelRoute("10.5.0.0/24")], "No such process"),
        ([DelRoute("10.8.0.0/24")], None),
        ([Address("br0", "fd00::1/64")], None),
        ([Route("fd01::/64", "br0", via="fd00::5")], None),
        ([Route("fd02::/64", "br0", via="fd09::5")], "No route to host"),
        ([SetUp("v1", "br0")], None),
        ([SetHairpin("v1")], None),
        ([AddVeth("v4", "p4", P), SetUp("v4")], None),
        ([SetUp("v4", "v1")], "Operation not supported"),  # a veth is no master
        ([Route("fd03::/64", "v4")], None),
        ([DelLink("br0")], None),  # its port is freed, its routes go
        ([Route("10.10.10.10", "v1", scope_link=True), Route("0.0.0.0/0", "v1", via="10.10.10.10")], None),
        ([DelLink("v1")], None),  # and eth0 in the other namespace with it
    ]
    for ops, refusal in cases:
        errors = both(pair, ops)
        assert [e.rsplit(": ", 1)[-1] for e in errors] == ([refusal] if refusal else []), ops
    assert fake.link_names(pod.name) == {"lo", "p4"}


def test_the_pod_networks_plans(pair):
    node, pod, fake = pair
    net = PodNetwork(pod.name, ["10.244.1.2", "fd00::2"], "vethaaaaaaaaaaa")
    assert both(pair, bridge_ops("cbr0", "02:00:00:00:00:01", True, ["10.244.1.1/24", "fd00::1/64"])) == []
    for _ in range(2):  # planned again from what exists, as after an agent restart
        exists = fake.link_exists(net.host_veth, node.name)
        assert exists == (net.host_veth in links.link_names(node.name))
        assert both(pair, node_side_ops("cbr0", net, True, exists)) == []
        assert both(pair, pod_side_ops(net.ips, ["10.244.1.1", "fd00::1"]), "pod") == []
    assert both(pair, pod_removal_ops(net, False, True)) == []  # the harness removes the namespace itself
    assert fake.link_names(pod.name) == {"lo"}


def test_named_namespaces_alike(pair):
    """``kernel.netns`` and the fake's namespaces: the same names (among ours), a taken name and a
    missing one refused with the same errors, a process inside found and killed."""
    node, pod, fake = pair
    assert {node.name, pod.name} <= set(knetns.names()) and fake.names() == sorted([node.name, pod.name])
    for fn, name in ((knetns.create, node.name), (knetns.remove, "ks-nope-nothere")):
        with pytest.raises(OSError) as real:
            fn(name)
        with pytest.raises(OSError) as faked:
            getattr(fake, fn.__name__)(name)
        assert (type(faked.value), faked.value.errno) == (type(real.value), real.value.errno), fn
    process = pod.popen("sleep", "60")
    fake.spawn(pod.name)
    deadline = time.monotonic() + 5
    while not knetns.pids_in(pod.name) and time.monotonic() < deadline:  # until ip netns exec has entered it
        time.sleep(0.02)
    assert len(knetns.pids_in(pod.name)) == len(fake.pids_in(pod.name)) == 1
    assert len(knetns.kill_all_in(pod.name)) == len(fake.kill_all_in(pod.name)) == 1
    process.wait(timeout=10)
    assert knetns.pids_in(pod.name) == fake.pids_in(pod.name) == []
