"""LoadBalancer addresses on a LAN, end to end in network namespaces (tests/kernel/conftest.py:
two node namespaces on a LAN bridge, each running ``kubesvc proxy``, and a client namespace on
the LAN that is no node): the service-lb-controller (a controller-manager of this module) gives
a LoadBalancer Service an address of a LAN pool, ``kubesvc lb-announcer`` on each node elects
one holder that answers ARP for it (running as kube-proxy's identity, as ``up`` runs it, its
Leases in ``kubesvc-lb``), the client connects to it; when the holder's machine dies
(its announcer and proxy killed, its LAN link down) the other node takes the Lease over within
the lease time, announces gratuitously, and the client connects again. The pool's last address
given, the next Service stays pending with an AllocationFailed Event."""

from __future__ import annotations

import asyncio
import json
import signal

import pytest

from kubesvc.client.rest import LEASES, SERVICES
from kubesvc.controllers.loadbalancer import announceraccess
from tests.support.apiserver import start_controller_manager
from tests.support.cluster import eventually, get_or_none
from tests.support.slowdown import scaled

pytestmark = pytest.mark.kernel

MODES = ["nftables"]
NODE_COUNT = 2
POOL = ("192.168.77.200", "192.168.77.201")  # on the LAN: the client ARPs for them (no route via a node)
LEASE_DURATION = 3.0


@pytest.fixture
def announcers(kernel_env, tmp_path):
    server = kernel_env.server
    manager = start_controller_manager(server, tmp_path / "cm-lb.log", "--controllers=service-lb-controller", "--leader-elect=false",
                                       "--secure-port=0")
    server.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "kubesvc.io/v1alpha1", "kind": "LoadBalancerIPPool", "metadata": {"name": "lan"},
        "spec": {"blocks": [{"start": POOL[0], "stop": POOL[1]}]}}))
    server.kubectl("apply", "-f", "-", input="\n".join(json.dumps(obj) for _, obj in announceraccess.access_objects()))
    processes = {}
    for node in kernel_env.nodes:
        log = open(tmp_path / f"announcer-{node.name}.log", "wb")
        processes[node.name] = node.ns.popen(*node.ns.python(
            "kubesvc", "lb-announcer", f"--kubeconfig={server.component_kubeconfig('proxy')}", f"--node-name={node.name}", "--interface=eth0",
            f"--lease-duration={LEASE_DURATION}", "--renew-deadline=2", "--retry-period=0.5", "--v=2"), stdout=log, stderr=log)
    try:
        yield processes
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()
        for node in kernel_env.nodes:
            node.ns.ip("link", "set", "eth0", "up")
        server.kubectl("delete", "lbippool", "lan", "--ignore-not-found")
        manager.stop()


def ingress_ip(service: dict) -> str | None:
    ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return ingress[0]["ip"] if ingress else None


async def test_a_lan_client_reaches_the_address_and_follows_it_when_the_holder_dies(kt, announcers):
    n1, n2 = kt.nodes
    for node, name in ((n1, "web-1"), (n2, "web-2")):
        await kt.pod(node, name, {"app": "web"})
    await kt.service("web", {"app": "web"}, type="LoadBalancer")

    async def address():
        return ingress_ip(await kt.client.resource(SERVICES).get("web", kt.namespace))

    vip = await eventually(address, scaled(10), "web's address")
    assert vip == POOL[0]
    answered = lambda r: len(r["names"]) >= 1  # noqa: E731
    await kt.until(kt.external, "tcp", vip, 80, 1, answered, what="the LAN client reaching the LoadBalancer address", timeout=1.0)

    async def holder():
        lease = await get_or_none(kt.client, LEASES, "kubesvc-lb-" + vip.replace(".", "-"), announceraccess.LEASE_NAMESPACE)
        return ((lease or {}).get("spec") or {}).get("holderIdentity")

    first = await eventually(holder, scaled(10), "a holder")
    dead, survivor = (n1, n2) if first == n1.name else (n2, n1)
    # the holder's machine dies: no announcer, no proxy, no link
    announcers[dead.name].send_signal(signal.SIGKILL)
    kt.env.proxies[dead.name].kill()
    dead.ns.ip("link", "set", "eth0", "down")
    async def survivor_holds():
        return await holder() == survivor.name

    await eventually(survivor_holds, scaled(LEASE_DURATION + 10), "the survivor taking the Lease")
    await kt.until(kt.external, "tcp", vip, 80, 1, answered, what="the client reconnecting through the survivor", timeout=1.0)
    dead.ns.ip("link", "set", "eth0", "up")

    # the pool's second and last address, then nothing: pending with an Event
    await kt.service("second", {"app": "web"}, type="LoadBalancer")
    await kt.service("third", {"app": "web"}, type="LoadBalancer")

    async def second_address():
        return ingress_ip(await kt.client.resource(SERVICES).get("second", kt.namespace))

    assert await eventually(second_address, scaled(10), "second's address") == POOL[1]

    def allocation_failed():
        events = json.loads(kt.env.server.kubectl("get", "events", "-n", kt.namespace, "--field-selector=involvedObject.name=third",
                                                  "-o", "json").stdout)["items"]
        return [e["message"] for e in events if e["reason"] == "AllocationFailed"]

    messages = await eventually(lambda: asyncio.to_thread(allocation_failed), scaled(10), "AllocationFailed on third")
    assert messages == [f'Failed to allocate IP for "{kt.namespace}/third": no available IPs']
    assert ingress_ip(await kt.client.resource(SERVICES).get("third", kt.namespace)) is None
