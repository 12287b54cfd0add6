"""The Pod network controller on the stateful fakes (``kernel/fake/overlay.py``, ``kernel/fake/nftables.py``):
what the kernel holds after ``prepare``, after syncs over changing Node lists (a node joins,
leaves, moves, changes its podCIDR or VtepMAC) and after ``stop``; the Node annotations it
publishes and the informer driving it. The real kernel: tests/kernel/test_pod_network*.py."""

from __future__ import annotations

import asyncio

import pytest

from kubesvc.kernel.fake.nftables import FakeKernel, FakeNFTables
from kubesvc.kernel.fake.overlay import FakeOverlay
from kubesvc.kernel.routes import PodRoute
from kubesvc.podnetwork import masquerade, plan
from kubesvc.podnetwork.controller import PodNetworkConfig, PodNetworkController, PodNetworkSetupError
from tests.podnetwork.test_plan import node

MAC2 = "02:00:00:00:00:02"


class FakeNodes:
    def __init__(self):
        self.patches = []

    def resource(self, _resource):
        return self

    async def patch(self, name, body):
        self.patches.append((name, body))
        return {}


class FakeInformer:
    def __init__(self, nodes):
        self.nodes = nodes
        self.handlers = []
        self.stopped = asyncio.Event()

        class Indexer:
            def list(inner):
                return list(self.nodes)
        self.indexer = Indexer()

    def add_event_handler(self, on_add, on_update, on_delete):
        self.handlers.append((on_add, on_update, on_delete))

    async def run(self):
        await self.stopped.wait()

    def stop(self):
        self.stopped.set()

    async def wait_for_sync(self):
        return True

    def changed(self, nodes):
        self.nodes = nodes
        for _, on_update, _ in self.handlers:
            on_update(None, None)


def make(mode, nodes=(), uplink_mtu=1500):
    kernel = FakeOverlay({"eth0": (["192.168.77.11/24"], uplink_mtu)})
    nft_kernel = FakeKernel()
    nft = {4: FakeNFTables(4, masquerade.TABLE, kernel=nft_kernel)}
    informer = FakeInformer(list(nodes))
    config = PodNetworkConfig("n1", mode, ["192.168.77.11"], ["10.244.1.0/24"], ["10.244.0.0/16"])
    controller = PodNetworkController(FakeNodes(), config, kernel, nft, informer_factory=lambda: informer)
    return controller, kernel, nft[4], informer


ME = node("n1", "192.168.77.11", ["10.244.1.0/24"])
N2 = node("n2", "192.168.77.12", ["10.244.2.0/24"], mac=MAC2)
N3 = node("n3", "192.168.77.13", ["10.244.3.0/24"])


async def test_prepare_vxlan_makes_the_device_and_returns_the_pod_mtu():
    controller, kernel, nft, _ = make("vxlan", uplink_mtu=9000)
    assert await controller.prepare() == 8950
    info = await kernel.vxlan("kubesvc.1")
    assert (info.kind, info.vni, info.port, info.local, info.dev, info.mtu, info.up) == ("vxlan", 1, 8472, "192.168.77.11", "eth0", 8950, True)
    assert info.mac == plan.vtep_mac("n1") and info.addresses == ("10.244.1.0/32",)
    assert nft.rules("postrouting")[0] == "ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return"
    kernel.applied.clear()
    assert await controller.prepare() == 8950  # a restarted agent keeps a device that fits
    assert not any(line.startswith(("link add", "link del")) for line in kernel.applied), kernel.applied


async def test_prepare_vxlan_replaces_a_device_that_does_not_fit():
    controller, kernel, _, _ = make("vxlan")
    await controller.prepare()
    kernel.links["eth0"].mtu = 1400  # the uplink changed
    kernel.applied.clear()
    assert await controller.prepare() == 1350
    assert [line.split(" type")[0] for line in kernel.applied[:2]] == ["link del kubesvc.1", f"link add kubesvc.1 address {plan.vtep_mac('n1')} mtu 1350"]


async def test_prepare_routes_leaves_the_mtu_and_makes_no_device():
    controller, kernel, _, _ = make("routes")
    assert await controller.prepare() is None
    assert await kernel.vxlan("kubesvc.1") is None


async def test_prepare_without_a_link_holding_the_node_ip_fails():
    controller, kernel, _, _ = make("routes")
    kernel.links["eth0"].addresses = ["192.168.99.1/24"]
    with pytest.raises(PodNetworkSetupError, match="no link here holds the node IP 192.168.77.11"):
        await controller.prepare()


async def test_routes_follow_nodes_joining_leaving_and_changing():
    controller, kernel, _, _ = make("routes")
    await controller.prepare()
    await controller.sync([ME, N2, N3])
    assert await kernel.routes() == {PodRoute("10.244.2.0/24", "192.168.77.12"), PodRoute("10.244.3.0/24", "192.168.77.13")}
    assert await controller.sync([ME, N2, N3]) == []  # nothing changed: nothing applied
    await controller.sync([ME, N2])  # n3 left
    assert await kernel.routes() == {PodRoute("10.244.2.0/24", "192.168.77.12")}
    moved = node("n2", "192.168.77.22", ["10.244.12.0/24"])  # a new address and a new podCIDR
    await controller.sync([ME, moved])
    assert await kernel.routes() == {PodRoute("10.244.12.0/24", "192.168.77.22")}


async def test_vxlan_entries_follow_the_nodes():
    controller, kernel, _, _ = make("vxlan")
    await controller.prepare()
    far = node("n3", "192.168.88.13", ["10.244.3.0/24"], mac="02:00:00:00:00:03")
    await controller.sync([ME, N2, far, node("n4", "192.168.88.14", ["10.244.4.0/24"])])  # n4 has no VtepMAC yet
    assert await kernel.routes() == {PodRoute("10.244.2.0/24", "10.244.2.0", "kubesvc.1", True),
                                     PodRoute("10.244.3.0/24", "10.244.3.0", "kubesvc.1", True)}
    assert await kernel.neighbours("kubesvc.1") == {"10.244.2.0": MAC2, "10.244.3.0": "02:00:00:00:00:03"}
    assert await kernel.fdb("kubesvc.1") == {MAC2: "192.168.77.12", "02:00:00:00:00:03": "192.168.88.13"}
    await controller.sync([ME, far])
    assert await kernel.routes() == {PodRoute("10.244.3.0/24", "10.244.3.0", "kubesvc.1", True)}
    assert await kernel.neighbours("kubesvc.1") == {"10.244.3.0": "02:00:00:00:00:03"}
    assert await kernel.fdb("kubesvc.1") == {"02:00:00:00:00:03": "192.168.88.13"}


@pytest.mark.parametrize("mode", ["routes", "vxlan"])
async def test_start_publishes_annotations_follows_the_informer_and_stop_leaves_nothing(mode, monkeypatch):
    controller, kernel, nft, informer = make(mode, [ME])
    await controller.prepare()
    await controller.start()
    name, body = controller.client.patches[0]
    annotations = body["metadata"]["annotations"]
    assert name == "n1" and annotations[plan.PUBLIC_IP] == "192.168.77.11"
    assert annotations[plan.BACKEND_TYPE] == {"routes": "host-gw", "vxlan": "vxlan"}[mode]
    informer.changed([ME, N2])
    for _ in range(100):
        if await kernel.routes():
            break
        await asyncio.sleep(0.01)
    assert {r.dst for r in await kernel.routes()} == {"10.244.2.0/24"}
    assert await controller.stop() == []
    assert await kernel.routes() == set() and set(kernel.links) == {"eth0"} and not kernel.neigh and not kernel.fdb_entries
    assert nft.current() is None


async def test_a_refused_sync_is_retried(monkeypatch):
    from kubesvc.podnetwork import controller as module

    monkeypatch.setattr(module, "RETRY_SECONDS", 0.01)
    controller, kernel, _, informer = make("routes", [ME])
    await controller.prepare()
    kernel.links["eth0"].up = False  # no connected route: the kernel refuses the next hop
    await controller.start()
    informer.changed([ME, N3])
    await asyncio.sleep(0.05)
    assert await kernel.routes() == set()
    kernel.links["eth0"].up = True
    for _ in range(100):
        if await kernel.routes():
            break
        await asyncio.sleep(0.01)
    assert await kernel.routes() == {PodRoute("10.244.3.0/24", "192.168.77.13")}
    await controller.stop()
