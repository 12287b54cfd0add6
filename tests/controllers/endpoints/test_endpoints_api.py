"""The Endpoints controller against a real apiserver, observed the way a user observes it:
``kubectl get endpoints`` and ``kubectl describe endpoints``.

Each test runs SharedInformers and the controller in its own event loop and works in its own
namespace. Pods are plain API objects: their status (IP, phase, Ready) is written through the
``status`` subresource, as a kubelet would.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from kubesvc.client.rest import ENDPOINTS, EVENTS, PODS, RestClient
from kubesvc.controllers.endpoints import EndpointsController
from kubesvc.controllers.endpoints.desired import ANNOTATION_LEADER, ANNOTATION_OVER_CAPACITY
from tests.support.cluster import create_pod, create_pods, create_service, eventually, get_or_none, kubectl, pod_ip, running_controller, set_pod_status


def endpoints_controller(client: RestClient):
    return running_controller(client, EndpointsController, sync_timeout=10)


@pytest.fixture
async def controller(client):
    async with endpoints_controller(client) as c:
        yield c


def get_endpoints(client: RestClient, namespace: str, name: str):
    return get_or_none(client, ENDPOINTS, name, namespace)


def ips(endpoints: dict | None, field: str = "addresses") -> list[str]:
    return sorted(a["ip"] for s in (endpoints or {}).get("subsets") or () for a in s.get(field) or ())


async def create_web_service(client: RestClient, namespace: str, name: str = "web", **spec) -> dict:
    """A Service labelled tier=frontend, selecting app=<name>, its port aimed at the Pods' named port."""
    return await create_service(client, namespace, name, {"app": name}, labels={"tier": "frontend"},
                                ports=[{"name": "http", "port": 80, "targetPort": "http"}], **spec)


async def describe(apiserver, namespace: str, name: str) -> tuple[list[str], list[str]]:
    """(Addresses, NotReadyAddresses) as ``kubectl describe endpoints`` prints them. (This
    kubectl's ``describe service`` reads EndpointSlices, not Endpoints.)"""
    out = (await kubectl(apiserver, "describe", "endpoints", name, "-n", namespace)).stdout
    fields = {}
    for line in out.splitlines():
        key, _, value = line.strip().partition(":")
        if key in ("Addresses", "NotReadyAddresses"):
            fields[key] = [] if value.strip() == "<none>" else sorted(value.strip().split(","))
    return fields["Addresses"], fields["NotReadyAddresses"]


async def test_endpoints_follow_pod_readiness_and_deletion(apiserver, client, namespace, controller):
    await create_web_service(client, namespace)
    web0 = await create_pod(client, namespace, "web-0", {"app": "web"}, "10.244.0.10", node="node-a")
    web1 = await create_pod(client, namespace, "web-1", {"app": "web"}, "10.244.0.11", node="node-a", ready=False)
    await create_pod(client, namespace, "other", {"app": "other"}, "10.244.0.99", node=None)

    await eventually(lambda: _has(client, namespace, ready=["10.244.0.10"], not_ready=["10.244.0.11"]), message="first endpoints")
    endpoints = json.loads((await kubectl(apiserver, "get", "endpoints", "web", "-n", namespace, "-o", "json")).stdout)
    assert endpoints["metadata"]["labels"] == {"tier": "frontend"}
    assert endpoints["subsets"] == [{
        "addresses": [{"ip": "10.244.0.10", "nodeName": "node-a",
                       "targetRef": {"kind": "Pod", "namespace": namespace, "name": "web-0", "uid": endpoints["subsets"][0]["addresses"][0]["targetRef"]["uid"]}}],
        "notReadyAddresses": [{"ip": "10.244.0.11", "nodeName": "node-a",
                               "targetRef": {"kind": "Pod", "namespace": namespace, "name": "web-1", "uid": endpoints["subsets"][0]["notReadyAddresses"][0]["targetRef"]["uid"]}}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }]
    assert "endpoints.kubernetes.io/last-change-trigger-time" in endpoints["metadata"]["annotations"]
    table = (await kubectl(apiserver, "get", "endpoints", "web", "-n", namespace)).stdout
    assert "10.244.0.10:8080" in table and "10.244.0.11" not in table  # the table lists ready addresses
    assert await describe(apiserver, namespace, "web") == (["10.244.0.10"], ["10.244.0.11"])

    await set_pod_status(client, web1, ready=True)
    await eventually(lambda: _has(client, namespace, ready=["10.244.0.10", "10.244.0.11"], not_ready=[]), message="web-1 ready")
    assert await describe(apiserver, namespace, "web") == (["10.244.0.10", "10.244.0.11"], [])

    await set_pod_status(client, web0, ready=False)
    await eventually(lambda: _has(client, namespace, ready=["10.244.0.11"], not_ready=["10.244.0.10"]), message="web-0 not ready")
    assert await describe(apiserver, namespace, "web") == (["10.244.0.11"], ["10.244.0.10"])

    # a Pod on a node is deleted gracefully: terminating, it leaves the Endpoints at once
    await kubectl(apiserver, "delete", "pod", "web-1", "-n", namespace, "--wait=false")
    await eventually(lambda: _has(client, namespace, ready=[], not_ready=["10.244.0.10"]), message="web-1 gone")
    assert await describe(apiserver, namespace, "web") == ([], ["10.244.0.10"])

    # deleting the Service deletes its Endpoints
    await kubectl(apiserver, "delete", "svc", "web", "-n", namespace)
    await eventually(lambda: _absent(client, namespace, "web"), message="endpoints deleted with the service")
    result = await kubectl(apiserver, "get", "endpoints", "web", "-n", namespace, check=False)
    assert result.returncode != 0 and "NotFound" in result.stderr


async def _has(client, namespace, ready, not_ready, name="web"):
    endpoints = await get_endpoints(client, namespace, name)
    return endpoints is not None and ips(endpoints) == sorted(ready) and ips(endpoints, "notReadyAddresses") == sorted(not_ready)


async def _absent(client, namespace, name):
    return await get_endpoints(client, namespace, name) is None


async def test_publish_not_ready_addresses_and_headless(apiserver, client, namespace, controller):
    await create_web_service(client, namespace, "peers", clusterIP="None", publishNotReadyAddresses=True)
    await create_pod(client, namespace, "peer-0", {"app": "peers"}, "10.244.1.10", node=None, ready=False)
    await eventually(lambda: _has(client, namespace, ["10.244.1.10"], [], name="peers"), message="unready pod published")
    endpoints = json.loads((await kubectl(apiserver, "get", "endpoints", "peers", "-n", namespace, "-o", "json")).stdout)
    assert endpoints["metadata"]["labels"] == {"tier": "frontend", "service.kubernetes.io/headless": ""}


async def test_over_capacity_truncates_to_1000_and_annotates(apiserver, client, namespace, controller):
    await create_web_service(client, namespace, "big")
    await create_pods(client, namespace, 1001, {"app": "big"}, prefix="big", concurrency=64, node=None)

    async def truncated():
        endpoints = await get_endpoints(client, namespace, "big")
        return endpoints is not None and len(ips(endpoints)) == 1000 and endpoints
    await eventually(truncated, timeout=60, message="1000 addresses")
    endpoints = json.loads((await kubectl(apiserver, "get", "endpoints", "big", "-n", namespace, "-o", "json")).stdout)
    assert endpoints["metadata"]["annotations"][ANNOTATION_OVER_CAPACITY] == "truncated"
    assert sum(len(s.get("addresses") or ()) + len(s.get("notReadyAddresses") or ()) for s in endpoints["subsets"]) == 1000

    # at the cap again: all 1000 listed, the annotation removed
    await client.resource(PODS).delete("big-0", namespace)

    async def at_cap():
        endpoints = await get_endpoints(client, namespace, "big")
        return (endpoints is not None and ANNOTATION_OVER_CAPACITY not in (endpoints["metadata"].get("annotations") or {})
                and pod_ip(0) not in ips(endpoints) and len(ips(endpoints)) == 1000)
    await eventually(at_cap, timeout=60, message="annotation removed at capacity")
    result = (await kubectl(apiserver, "get", "endpoints", "big", "-n", namespace, "-o", "jsonpath={.metadata.annotations}")).stdout
    assert "over-capacity" not in result


async def test_deleted_endpoints_are_recreated(apiserver, client, namespace, controller):
    await create_web_service(client, namespace)
    await create_pod(client, namespace, "web-0", {"app": "web"}, "10.244.2.10", node=None)
    await eventually(lambda: _has(client, namespace, ["10.244.2.10"], []), message="endpoints")
    await kubectl(apiserver, "delete", "endpoints", "web", "-n", namespace)
    await eventually(lambda: _has(client, namespace, ["10.244.2.10"], []), message="endpoints recreated")


async def test_leftover_endpoints_deleted_at_start_but_not_leader_records(apiserver, client, namespace):
    endpoints = client.resource(ENDPOINTS)
    await endpoints.create({"metadata": {"name": "orphan", "namespace": namespace},
                            "subsets": [{"addresses": [{"ip": "10.9.9.9"}], "ports": [{"port": 1}]}]})
    await endpoints.create({"metadata": {"name": "leader", "namespace": namespace, "annotations": {ANNOTATION_LEADER: "{}"}}})
    await create_service(client, namespace, "manual", selector=None)  # no selector: hand-written Endpoints
    await endpoints.create({"metadata": {"name": "manual", "namespace": namespace},
                            "subsets": [{"addresses": [{"ip": "10.9.9.8"}], "ports": [{"name": "http", "port": 1}]}]})
    async with endpoints_controller(client):
        await eventually(lambda: _absent(client, namespace, "orphan"), message="orphan deleted")
        await asyncio.sleep(0.3)
        names = (await kubectl(apiserver, "get", "endpoints", "-n", namespace, "-o", "name")).stdout.split()
        assert sorted(names) == ["endpoints/leader", "endpoints/manual"]
        assert ips(await get_endpoints(client, namespace, "manual")) == ["10.9.9.8"]


async def test_failed_writes_are_reported_as_events(apiserver, client, namespace, controller):
    """A loopback Pod IP is not a valid endpoint address: the apiserver refuses the write."""
    await create_pod(client, namespace, "web-0", {"app": "web"}, "127.0.0.1", node=None)
    await eventually(lambda: _cached_ip(controller, namespace, "web-0", "127.0.0.1"), message="pod in the controller's cache")
    await create_web_service(client, namespace)

    async def events(reason: str):
        listed = await client.resource(EVENTS).list(namespace)
        return [e for e in listed["items"] if e["reason"] == reason]
    event = (await eventually(lambda: events("FailedToCreateEndpoint"), message="FailedToCreateEndpoint event"))[0]
    assert event["type"] == "Warning" and event["source"]["component"] == "endpoint-controller"
    assert event["involvedObject"]["kind"] == "Endpoints" and event["involvedObject"]["name"] == "web"
    assert event["message"].startswith(f"Failed to create endpoint for service {namespace}/web: ")
    assert "127.0.0.1" in event["message"]
    assert await get_endpoints(client, namespace, "web") is None

    # the bad Pod goes, a good one comes: the create succeeds on retry
    await client.resource(PODS).delete("web-0", namespace)
    await create_pod(client, namespace, "web-1", {"app": "web"}, "10.244.3.11", node=None)
    await eventually(lambda: _has(client, namespace, ["10.244.3.11"], []), message="endpoints created")

    await create_pod(client, namespace, "web-2", {"app": "web"}, "127.0.0.2", node=None)
    event = (await eventually(lambda: events("FailedToUpdateEndpoint"), message="FailedToUpdateEndpoint event"))[0]
    assert event["message"].startswith(f"Failed to update endpoint {namespace}/web: ")
    table = (await kubectl(apiserver, "get", "events", "-n", namespace)).stdout
    assert "FailedToCreateEndpoint" in table and "FailedToUpdateEndpoint" in table
    assert ips(await get_endpoints(client, namespace, "web")) == ["10.244.3.11"]


async def _cached_ip(controller, namespace: str, name: str, ip: str) -> bool:
    pod = controller._pods.indexer.get(name, namespace)
    return pod is not None and (pod.get("status") or {}).get("podIP") == ip
