"""The EndpointSlice controller against a real apiserver, seen as users see it: through the API,
``kubectl get endpointslices`` and ``kubectl describe svc``.

The controller runs in the test's event loop (the controller-manager's own code path, without
leader election); a separate test runs ``kubesvc controller-manager`` as a process and kills it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

from kubesvc.client.rest import ENDPOINTSLICES, PODS, SERVICES
from kubesvc.controllers.manager import ENDPOINTSLICE, ControllerManager, ManagerConfig
from tests.support.cluster import api_client, create_pods, create_service, ensure_node, eventually, new_namespace, running_task, set_pod_status

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


@contextlib.asynccontextmanager
async def endpointslice_controller(server, **config):
    async with api_client(server, "kube-controller-manager") as client:
        manager = ControllerManager(client, ManagerConfig(controllers={ENDPOINTSLICE}, leader_elect=False, secure_port=0, **config))
        async with running_task(manager.run_controllers()):
            yield manager


async def slices_of(client, namespace: str, service: str) -> list[dict]:
    listing = await client.resource(ENDPOINTSLICES).list(namespace, label_selector=f"{SERVICE_NAME_LABEL}={service}")
    return listing["items"]


def endpoint_counts(slices: list[dict]) -> list[int]:
    return sorted((len(s.get("endpoints") or []) for s in slices), reverse=True)


def by_pod(slices: list[dict]) -> dict[str, dict]:
    return {ep["targetRef"]["name"]: ep for s in slices for ep in s.get("endpoints") or []}


async def test_250_ready_pods_give_slices_of_100_100_50_and_track_readiness_and_termination(apiserver):
    async with api_client(apiserver) as client:
        await ensure_node(client, "zoned-node", zone="zone-1")
        ns = await new_namespace(client)
        # the controller's cache holds all 250 Pods before the Service appears, so one sync sees
        # them all (Pods trickling in fill slices as they come, and nothing rebalances later)
        pods = await create_pods(client, ns, 250, {"app": "web"}, node="zoned-node")
    async with api_client(apiserver) as client, endpointslice_controller(apiserver) as manager:
        await asyncio.wait_for(manager.caches_synced.wait(), 30)
        service = await create_service(client, ns, "web", {"app": "web"}, type="ClusterIP")

        async def converged():
            slices = await slices_of(client, ns, "web")
            return slices if endpoint_counts(slices) == [100, 100, 50] else None

        slices = await eventually(converged, 60, "slices of 100, 100 and 50")
        for slice_ in slices:
            meta = slice_["metadata"]
            assert meta["name"].startswith("web-") and meta["generateName"] == "web-"
            assert meta["labels"] == {SERVICE_NAME_LABEL: "web", "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}
            assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "Service", "name": "web", "uid": service["metadata"]["uid"],
                                                "controller": True, "blockOwnerDeletion": True}]
            assert "endpoints.kubernetes.io/last-change-trigger-time" in meta["annotations"]
            assert slice_["addressType"] == "IPv4"
            assert slice_["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
        endpoints = by_pod(slices)
        assert len(endpoints) == 250
        first = endpoints["pod-0"]
        assert first["addresses"] == [pods[0]["status"]["podIP"]]
        assert first["conditions"] == {"ready": True, "serving": True, "terminating": False}
        assert first["nodeName"] == "zoned-node" and first["zone"] == "zone-1"
        assert first["targetRef"] == {"kind": "Pod", "namespace": ns, "name": "pod-0", "uid": pods[0]["metadata"]["uid"]}

        # 10 Pods of one slice become not ready: only that slice is written
        target = slices[0]
        names = [ep["targetRef"]["name"] for ep in target["endpoints"]][:10]
        versions = {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in slices}
        pods_by_name = {p["metadata"]["name"]: p for p in pods}
        for name in names:
            pods_by_name[name] = await set_pod_status(client, pods_by_name[name], ready=False)

        async def not_ready_seen():
            now = await slices_of(client, ns, "web")
            eps = by_pod(now)
            return now if all(eps[n]["conditions"]["ready"] is False for n in names) else None

        after = await eventually(not_ready_seen, 30, "10 endpoints not ready")
        changed = {s["metadata"]["name"] for s in after if versions.get(s["metadata"]["name"]) != s["metadata"]["resourceVersion"]}
        assert changed == {target["metadata"]["name"]}
        assert {s["metadata"]["name"] for s in after} == set(versions)
        assert by_pod(after)[names[0]]["conditions"] == {"ready": False, "serving": False, "terminating": False}

        # deleting a (ready) Pod bound to a node: it terminates gracefully and stays listed as
        # terminating (ready false, serving true) until it is gone
        victim = "pod-200"
        await client.resource(PODS).delete(victim, ns)

        async def terminating():
            ep = by_pod(await slices_of(client, ns, "web")).get(victim)
            return ep if ep and ep["conditions"]["terminating"] else None

        ep = await eventually(terminating, 30, "terminating endpoint")
        assert ep["conditions"] == {"ready": False, "serving": True, "terminating": True}
        await client.resource(PODS).delete(victim, ns, grace_period_seconds=0)
        await eventually(lambda: _gone(client, ns, victim), 30, "endpoint removed")
        assert manager.endpointslice_metrics.num_endpoint_slices._value.get() >= 3


async def _gone(client, ns, pod_name) -> bool:
    return pod_name not in by_pod(await slices_of(client, ns, "web"))


async def test_publish_not_ready_addresses_keeps_ready_true(apiserver):
    async with api_client(apiserver) as client, endpointslice_controller(apiserver):
        await ensure_node(client, "node-a")
        ns = await new_namespace(client)
        await create_service(client, ns, "web", {"app": "web"}, publishNotReadyAddresses=True)
        await create_pods(client, ns, 3, {"app": "web"}, ready=False)

        async def three():
            eps = by_pod(await slices_of(client, ns, "web"))
            return eps if len(eps) == 3 else None

        eps = await eventually(three, 30, "3 endpoints")
        assert all(ep["conditions"] == {"ready": True, "serving": False, "terminating": False} for ep in eps.values())


async def test_service_without_pods_has_one_placeholder_and_kubectl_shows_slices(apiserver):
    async with api_client(apiserver) as client, endpointslice_controller(apiserver):
        await ensure_node(client, "node-a")
        ns = await new_namespace(client)
        await create_service(client, ns, "empty", {"app": "none"})
        slices = await eventually(lambda: slices_of(client, ns, "empty"), 30, "placeholder")
        await asyncio.sleep(0.5)  # no second slice follows
        slices = await slices_of(client, ns, "empty")
        assert len(slices) == 1 and slices[0]["endpoints"] == [] and slices[0]["ports"] == []

        await create_service(client, ns, "web", {"app": "web"})
        await create_pods(client, ns, 2, {"app": "web"})
        await eventually(lambda: _count(client, ns, "web", 2), 30, "2 endpoints")
        listed = apiserver.kubectl("get", "endpointslices", "-n", ns, "-l", f"{SERVICE_NAME_LABEL}=web", "-o", "json")
        items = json.loads(listed.stdout)["items"]
        assert len(items) == 1 and len(items[0]["endpoints"]) == 2
        table = apiserver.kubectl("get", "endpointslices", "-n", ns, "-l", f"{SERVICE_NAME_LABEL}=web").stdout
        assert "10.244.0.10,10.244.0.11" in table or "10.244.0.11,10.244.0.10" in table
        described = apiserver.kubectl("describe", "svc", "web", "-n", ns).stdout
        endpoints_line = next(line for line in described.splitlines() if line.startswith("Endpoints:"))
        assert "10.244.0.10:8080" in endpoints_line and "10.244.0.11:8080" in endpoints_line


async def _count(client, ns, service, expected) -> bool:
    return len(by_pod(await slices_of(client, ns, service))) == expected


async def test_named_target_port_resolving_differently_gives_one_slice_group_per_port(apiserver):
    async with api_client(apiserver) as client, endpointslice_controller(apiserver):
        await ensure_node(client, "node-a")
        ns = await new_namespace(client)
        await client.resource(SERVICES).create({"metadata": {"name": "named", "namespace": ns}, "spec": {
            "selector": {"app": "named"}, "ports": [{"name": "web", "port": 80, "targetPort": "http"}]}})
        await create_pods(client, ns, 2, {"app": "named"}, prefix="a", container_ports=[{"name": "http", "containerPort": 8080}])
        await create_pods(client, ns, 3, {"app": "named"}, prefix="b", start=2, container_ports=[{"name": "http", "containerPort": 9090}])

        async def grouped():
            slices = await slices_of(client, ns, "named")
            return slices if sorted(endpoint_counts(slices)) == [2, 3] else None

        slices = await eventually(grouped, 30, "two port groups")
        ports = {len(s["endpoints"]): s["ports"][0]["port"] for s in slices}
        assert ports == {2: 8080, 3: 9090}


async def test_batch_period_turns_a_burst_of_pod_changes_into_one_write(apiserver):
    async with api_client(apiserver) as client, endpointslice_controller(apiserver, endpointslice_updates_batch_period=1.0) as manager:
        await ensure_node(client, "node-a")
        ns = await new_namespace(client)
        await create_service(client, ns, "web", {"app": "web"})
        pods = await create_pods(client, ns, 20, {"app": "web"})
        await eventually(lambda: _count(client, ns, "web", 20), 30, "20 endpoints")
        await asyncio.sleep(1.5)
        updates_before = manager.endpointslice_metrics.changes.labels("update")._value.get()
        for pod in pods[:10]:
            await set_pod_status(client, pod, ready=False)

        async def ten_not_ready():
            eps = by_pod(await slices_of(client, ns, "web"))
            return sum(not ep["conditions"]["ready"] for ep in eps.values()) == 10

        await eventually(ten_not_ready, 30, "10 not ready")
        await asyncio.sleep(1.5)
        assert manager.endpointslice_metrics.changes.labels("update")._value.get() - updates_before == 1
