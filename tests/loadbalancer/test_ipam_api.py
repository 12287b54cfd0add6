"""service-lb-controller in a real ``kubesvc controller-manager`` against a real apiserver,
observed with the real kubectl: LoadBalancerIPPools created with kubectl, a LoadBalancer
Service's EXTERNAL-IP in ``kubectl get svc`` (ingress with ``ipMode: VIP``), the asked-for
address honoured, refused ones and an exhausted pool an ``AllocationFailed`` Event (the Service
stays ``<pending>``), addresses freed by a delete or a type change, another class's Service
left alone, and a restarted controller keeping every address where it was.

Each test has a pool of its own that selects only its Services (label ``lbtest: <name>``)."""

from __future__ import annotations

import json
import time

import pytest

from tests.support.apiserver import running_apiserver, start_controller_manager
from tests.support.slowdown import scaled

MANAGER_ARGS = ("--controllers=service-lb-controller", "--leader-elect=false", "--secure-port=0")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    data = tmp_path_factory.mktemp("lb-ipam")
    with running_apiserver(data / "server") as server:
        server.manager = start_controller_manager(server, data / "cm.log", *MANAGER_ARGS)
        try:
            yield server
        finally:
            server.manager.stop()


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def apply(server, obj: dict) -> None:
    server.kubectl("apply", "-f", "-", input=json.dumps(obj))


def make_pool(server, test: str, *blocks: dict) -> None:
    apply(server, {"apiVersion": "kubesvc.io/v1alpha1", "kind": "LoadBalancerIPPool", "metadata": {"name": test},
                   "spec": {"blocks": list(blocks), "serviceSelector": {"matchLabels": {"lbtest": test}}}})


def make_service(server, test: str, name: str, *, annotations: dict | None = None, **spec) -> None:
    apply(server, {"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": name, "namespace": "default", "labels": {"lbtest": test}, "annotations": annotations or {}},
                   "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "targetPort": 8080}], "selector": {"app": name}, **spec}})


def ingress(server, name: str) -> list[dict]:
    svc = json.loads(server.kubectl("get", "svc", name, "-o", "json").stdout)
    return ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []


def external_ip_column(server, name: str) -> str:
    return server.kubectl("get", "svc", name, "--no-headers").stdout.split()[3]


def events(server, name: str, reason: str) -> list[str]:
    items = json.loads(server.kubectl("get", "events", f"--field-selector=involvedObject.name={name}", "-o", "json").stdout)["items"]
    return [e["message"] for e in items if e["reason"] == reason]


def test_a_service_gets_an_address_from_the_pool_shown_by_kubectl(cluster):
    make_pool(cluster, "basic", {"start": "10.77.1.10", "stop": "10.77.1.19"})
    assert "basic" in cluster.kubectl("get", "lbippool").stdout
    make_service(cluster, "basic", "web")
    assert wait_for(lambda: ingress(cluster, "web"), what="web's address") == [{"ip": "10.77.1.10", "ipMode": "VIP"}]
    assert external_ip_column(cluster, "web") == "10.77.1.10"
    assert wait_for(lambda: events(cluster, "web", "IPAllocated"), what="IPAllocated") == ['Assigned IP ["10.77.1.10"]']


def test_the_asked_for_address_is_given_and_refusals_are_events(cluster):
    make_pool(cluster, "ask", {"cidr": "10.77.2.0/28"})
    make_service(cluster, "ask", "ask-field", loadBalancerIP="10.77.2.7")
    assert wait_for(lambda: ingress(cluster, "ask-field"), what="ask-field's address") == [{"ip": "10.77.2.7", "ipMode": "VIP"}]
    make_service(cluster, "ask", "ask-annotation", annotations={"kubesvc.io/loadbalancer-ips": "10.77.2.9"})
    assert wait_for(lambda: ingress(cluster, "ask-annotation"), what="annotated address")[0]["ip"] == "10.77.2.9"
    make_service(cluster, "ask", "ask-outside", loadBalancerIP="192.0.2.1")
    assert wait_for(lambda: events(cluster, "ask-outside", "AllocationFailed"), what="AllocationFailed") == [
        'Failed to allocate IP for "default/ask-outside": ["192.0.2.1"] is not allowed in config']
    make_service(cluster, "ask", "ask-taken", annotations={"kubesvc.io/loadbalancer-ips": "10.77.2.7"})
    assert wait_for(lambda: events(cluster, "ask-taken", "AllocationFailed"), what="AllocationFailed") == [
        'Failed to allocate IP for "default/ask-taken": "10.77.2.7" is already allocated to default/ask-field']
    assert ingress(cluster, "ask-outside") == [] and external_ip_column(cluster, "ask-taken") == "<pending>"


def test_exhaustion_leaves_a_service_pending_until_an_address_is_freed(cluster):
    make_pool(cluster, "full", {"cidr": "10.77.3.0/30"})  # two usable addresses: .1 and .2
    for name in ("full-a", "full-b"):
        make_service(cluster, "full", name)
    got = {wait_for(lambda n=name: ingress(cluster, n), what=name)[0]["ip"] for name in ("full-a", "full-b")}
    assert got == {"10.77.3.1", "10.77.3.2"}
    make_service(cluster, "full", "full-c")
    assert wait_for(lambda: events(cluster, "full-c", "AllocationFailed"), what="AllocationFailed") == [
        'Failed to allocate IP for "default/full-c": no available IPs']
    assert external_ip_column(cluster, "full-c") == "<pending>"
    freed = ingress(cluster, "full-a")[0]["ip"]
    cluster.kubectl("delete", "svc", "full-a")
    assert wait_for(lambda: ingress(cluster, "full-c"), what="full-c's address")[0]["ip"] == freed


def test_a_type_change_releases_and_clears_another_class_is_left_alone(cluster):
    make_pool(cluster, "change", {"start": "10.77.4.1"})
    make_service(cluster, "change", "change-a")
    assert wait_for(lambda: ingress(cluster, "change-a"), what="change-a's address")[0]["ip"] == "10.77.4.1"
    cluster.kubectl("patch", "svc", "change-a", "-p", json.dumps({"spec": {"type": "ClusterIP", "ports": [{"port": 80, "targetPort": 8080}]}}))
    wait_for(lambda: not ingress(cluster, "change-a"), what="change-a's status cleared")
    make_service(cluster, "change", "change-b")
    assert wait_for(lambda: ingress(cluster, "change-b"), what="change-b's address")[0]["ip"] == "10.77.4.1"
    make_service(cluster, "change", "change-other", loadBalancerClass="example.com/other-lb")
    time.sleep(scaled(1.0))  # nothing is to happen: give the controller the time it would need
    assert ingress(cluster, "change-other") == [] and events(cluster, "change-other", "AllocationFailed") == []


def test_an_invalid_pool_is_refused(cluster):
    bad = {"apiVersion": "kubesvc.io/v1alpha1", "kind": "LoadBalancerIPPool", "metadata": {"name": "bad"},
           "spec": {"blocks": [{"start": "10.77.9.9", "stop": "10.77.9.1"}]}}
    result = cluster.kubectl("create", "-f", "-", input=json.dumps(bad), check=False)
    assert result.returncode != 0
    assert 'spec.blocks[0].stop: Invalid value: "10.77.9.1": must not be before `start`' in result.stderr


def test_a_restarted_controller_keeps_every_address(cluster, tmp_path):
    make_pool(cluster, "restart", {"start": "10.77.5.1", "stop": "10.77.5.3"})
    for name in ("restart-a", "restart-b"):
        make_service(cluster, "restart", name)
    before = {n: wait_for(lambda n=n: ingress(cluster, n), what=n)[0]["ip"] for n in ("restart-a", "restart-b")}
    cluster.manager.stop()
    cluster.manager = start_controller_manager(cluster, tmp_path / "cm2.log", *MANAGER_ARGS)
    make_service(cluster, "restart", "restart-c")
    assert wait_for(lambda: ingress(cluster, "restart-c"), what="restart-c's address")[0]["ip"] == "10.77.5.3"
    assert {n: ingress(cluster, n)[0]["ip"] for n in ("restart-a", "restart-b")} == before


def test_up_s_default_pool_is_created_and_serves_every_service(cluster):
    """What ``up --loadbalancer-pool`` does once the control plane is up (ensure_default_pool):
    a pool named default without a selector; a changed flag replaces its blocks. Last in this
    module: the default pool serves every Service."""
    import asyncio

    from kubesvc.client.kubeconfig import load_kubeconfig
    from kubesvc.client.rest import RestClient
    from kubesvc.controllers.loadbalancer.defaultpool import ensure_default_pool, parse_pool_flag

    async def ensure(flag: str) -> None:
        async with RestClient(load_kubeconfig(cluster.kubeconfig)) as client:
            await ensure_default_pool(client, parse_pool_flag(flag))

    asyncio.run(ensure("10.77.6.5-10.77.6.5"))
    asyncio.run(ensure("10.77.7.5-10.77.7.6"))  # a restart of up with another value
    pool = json.loads(cluster.kubectl("get", "lbippool", "default", "-o", "json").stdout)
    assert pool["spec"] == {"blocks": [{"start": "10.77.7.5", "stop": "10.77.7.6"}]}
    apply(cluster, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "plain", "namespace": "default"},
                    "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}})
    assert wait_for(lambda: ingress(cluster, "plain"), what="plain's address") == [{"ip": "10.77.7.5", "ipMode": "VIP"}]
