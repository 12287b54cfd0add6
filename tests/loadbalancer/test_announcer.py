"""The L2 announcer (controllers/loadbalancer/announcer.py): who may announce (table), which
addresses (only a pool's that selects the Service: a status claiming the LAN gateway is never
answered for), and two nodes' announcers against a real apiserver: exactly one holds each
address's Lease and announces it (gratuitously, once, on takeover); when the holder stops the
other takes over and announces; with externalTrafficPolicy: Local only the node with a ready
local endpoint stands."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from kubesvc.client.informer import Informer
from kubesvc.client.rest import ENDPOINTSLICES, LEASES, SERVICES
from kubesvc.client.kubeconfig import load_kubeconfig
from kubesvc.client.rest import ClientError, RestClient
from kubesvc.controllers.loadbalancer import announceraccess
from kubesvc.controllers.loadbalancer.allocator import pool_from_object
from kubesvc.controllers.loadbalancer.announcer import Announcer, eligible, lease_name, pooled, wanted_announcements
from kubesvc.controllers.loadbalancer.controller import LOADBALANCER_IP_POOLS
from tests.support.apiserver import running_apiserver
from tests.support.cluster import api_client, eventually, get_or_none, new_namespace
from tests.support.slowdown import scaled


def lb(name: str, ips=("10.70.0.1",), policy: str = "Cluster", **spec) -> dict:
    return {"metadata": {"name": name, "namespace": "ns"},
            "spec": {"type": "LoadBalancer", "externalTrafficPolicy": policy, **spec},
            "status": {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"} for ip in ips]}}}


def endpoint_slice(*endpoints: tuple[str, bool | None]) -> dict:
    return {"endpoints": [{"addresses": ["10.244.0.9"], "nodeName": node, "conditions": {} if ready is None else {"ready": ready}}
                          for node, ready in endpoints]}


@pytest.mark.parametrize("policy, slices, node, expected", [
    ("Cluster", [], "a", True),
    ("Local", [], "a", False),
    ("Local", [endpoint_slice(("a", True))], "a", True),
    ("Local", [endpoint_slice(("a", None))], "a", True),  # ready unset means ready
    ("Local", [endpoint_slice(("a", False), ("b", True))], "a", False),
    ("Local", [endpoint_slice(("b", True))], "a", False),
])
def test_who_may_announce(policy, slices, node, expected):
    assert eligible(lb("s", policy=policy), slices, node) is expected


def pool(name: str, *blocks: dict, selector: dict | None = None, disabled: bool = False) -> dict:
    return {"apiVersion": "kubesvc.io/v1alpha1", "kind": "LoadBalancerIPPool", "metadata": {"name": name},
            "spec": {"blocks": list(blocks), **({"serviceSelector": selector} if selector is not None else {}),
                     **({"disabled": True} if disabled else {})}}


POOLS = [pool_from_object(pool("lan", {"cidr": "10.70.0.0/28"})), pool_from_object(pool("v6", {"cidr": "fd00::/120"})),
         pool_from_object(pool("team", {"start": "10.71.0.5", "stop": "10.71.0.6"}, selector={"matchLabels": {"team": "x"}})),
         pool_from_object(pool("off", {"start": "10.72.0.1"}, disabled=True))]


@pytest.mark.parametrize("address, labels, expected", [
    ("10.70.0.1", {}, True),
    ("10.70.0.0", {}, False),       # the CIDR's network address: never given, never answered
    ("10.70.0.16", {}, False),      # just past the pool
    ("192.168.77.1", {}, False),    # e.g. the LAN gateway, written into status by hand
    ("10.71.0.5", {"team": "x"}, True),
    ("10.71.0.5", {"team": "y"}, False),  # in a pool that does not select this Service
    ("10.72.0.1", {}, True),        # a disabled pool keeps what it gave
    ("fd00::1", {}, True),
    ("not-an-ip", {}, False),
], ids=["in-pool", "network-address", "past-the-pool", "lan-gateway", "selected", "not-selected", "disabled-pool", "ipv6", "garbage"])
def test_only_pool_addresses_are_announced(address, labels, expected):
    service = lb("s", ips=(address,))
    service["metadata"]["labels"] = labels
    assert pooled(address, service, POOLS) is expected


def test_wanted_announcements_skip_other_classes_and_unpooled_addresses():
    services = [lb("a", ips=("10.70.0.1", "fd00::1")), lb("other", ips=("10.70.0.2",), loadBalancerClass="example.com/x"),
                lb("claims-the-gateway", ips=("192.168.77.1", "10.70.0.3")),
                {"metadata": {"name": "plain", "namespace": "ns"}, "spec": {"type": "ClusterIP"}}]
    assert wanted_announcements(services, lambda s: [], "a", POOLS) == {"10.70.0.1": "ns", "fd00::1": "ns", "10.70.0.3": "ns"}
    assert wanted_announcements(services, lambda s: [], "a", []) == {}  # no pool: nothing at all
    assert lease_name("10.70.0.1") == "kubesvc-lb-10-70-0-1"


@contextlib.asynccontextmanager
async def node_announcer(client, node: str, announced: list):
    services, slices, pools = Informer(client, SERVICES), Informer(client, ENDPOINTSLICES), Informer(client, LOADBALANCER_IP_POOLS)

    async def announce(address: str) -> None:
        announced.append((node, address))

    announcer = Announcer(client, services, slices, pools, node, announce=announce, lease_duration=2.0, renew_deadline=1.5,
                          retry_period=0.3)
    tasks = [asyncio.create_task(t) for t in (services.run(), slices.run(), pools.run(), announcer.run())]
    try:
        yield announcer
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def test_one_node_holds_each_address_and_the_other_takes_over(tmp_path):
    """The announcers run as kube-proxy's identity (what ``up`` gives them), their Leases in
    ``kubesvc-lb``."""
    leases_ns = announceraccess.LEASE_NAMESPACE

    async def scenario(server):
        async with api_client(server) as admin, \
                RestClient(load_kubeconfig(server.component_kubeconfig("proxy")), user_agent="test-announcer") as client:
            await announceraccess.ensure(admin)
            await announceraccess.ensure(admin)  # twice: what exists is left alone
            ns = await new_namespace(admin)
            svc = await admin.resource(SERVICES).create({"metadata": {"name": "web", "namespace": ns},
                                                          "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}})
            svc["status"] = {"loadBalancer": {"ingress": [{"ip": "10.70.0.1", "ipMode": "VIP"}]}}
            await admin.resource(SERVICES).update_status(svc)
            # a status claiming an address of no pool (say the LAN gateway): never announced
            claim = await admin.resource(SERVICES).create({"metadata": {"name": "gateway", "namespace": ns},
                                                            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}})
            claim["status"] = {"loadBalancer": {"ingress": [{"ip": "192.168.77.1", "ipMode": "VIP"}]}}
            await admin.resource(SERVICES).update_status(claim)
            await admin.resource(LOADBALANCER_IP_POOLS).create(pool("lan", {"cidr": "10.70.0.0/28"}))
            announced: list = []
            async with node_announcer(client, "node-a", announced) as a:
                await eventually(lambda: a.holding == {"10.70.0.1"}, scaled(10), "node-a holds the address")
                async with node_announcer(client, "node-b", announced) as b:
                    await asyncio.sleep(scaled(1.0))
                    assert b.holding == set()  # a candidate only
                    lease = await get_or_none(admin, LEASES, "kubesvc-lb-10-70-0-1", leases_ns)
                    assert lease["spec"]["holderIdentity"] == "node-a"
                    assert a.holding == {"10.70.0.1"}
                    assert await get_or_none(admin, LEASES, "kubesvc-lb-192-168-77-1", leases_ns) is None
                    assert announced == [("node-a", "10.70.0.1")]
                # node-a is still the holder here; now it stops, node-b alone remains
            announced.clear()
            async with node_announcer(client, "node-b", announced) as b:
                await eventually(lambda: b.holding == {"10.70.0.1"}, scaled(10), "node-b takes over")
                assert announced == [("node-b", "10.70.0.1")]
                # the pool goes: the address is no pool's any more, node-b stops answering; back with it
                await admin.resource(LOADBALANCER_IP_POOLS).delete("lan")
                await eventually(lambda: b.holding == set(), scaled(10), "node-b stops with the pool gone")
                await admin.resource(LOADBALANCER_IP_POOLS).create(pool("lan", {"cidr": "10.70.0.0/28"}))
                await eventually(lambda: b.holding == {"10.70.0.1"}, scaled(10), "node-b announces again")
                # the Service switches to Local with no endpoint on node-b: it steps down
                await admin.resource(SERVICES).patch("web", {"spec": {"externalTrafficPolicy": "Local"}}, namespace=ns)
                await eventually(lambda: b.holding == set(), scaled(10), "node-b steps down")
                lease = await get_or_none(admin, LEASES, "kubesvc-lb-10-70-0-1", leases_ns)
                assert lease["spec"].get("holderIdentity", "") == ""  # released

    with running_apiserver(tmp_path / "server") as server:
        asyncio.run(scenario(server))


def test_the_announcer_identity_may_write_leases_only_in_kubesvc_lb(tmp_path):
    """kube-proxy's identity, which the announcers run as: a Lease in ``kubesvc-lb`` yes, one in
    kube-system (where the controller-manager's and scheduler's live) or a Service's namespace
    403 Forbidden."""
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "kube-controller-manager"},
             "spec": {"holderIdentity": "intruder"}}

    async def scenario(server):
        async with api_client(server) as admin, \
                RestClient(load_kubeconfig(server.component_kubeconfig("proxy")), user_agent="test-announcer") as proxy:
            await announceraccess.ensure(admin)
            ns = await new_namespace(admin)
            created = await proxy.resource(LEASES).create(lease, namespace=announceraccess.LEASE_NAMESPACE)
            assert created["spec"]["holderIdentity"] == "intruder"
            for namespace in ("kube-system", ns):
                with pytest.raises(ClientError) as err:
                    await proxy.resource(LEASES).create(lease, namespace=namespace)
                assert err.value.status == 403

    with running_apiserver(tmp_path / "server") as server:
        asyncio.run(scenario(server))


def test_up_names_the_interface_by_the_node_ip():
    from kubesvc.cmd.lb_announcer import interface_holding
    from kubesvc.kernel.links import LinkInfo

    links = {"cbr0": LinkInfo("bridge", ("10.244.0.1/24",)), "eth0": LinkInfo(None, ("192.168.1.5/24", "fd00::5/64")), "gone": None}
    assert interface_holding("192.168.1.5", links) == "eth0"
    assert interface_holding("fd00:0::5", links) == "eth0"
    assert interface_holding("192.168.1.6", links) is None

