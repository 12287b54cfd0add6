"""The EndpointSlice mirroring controller against a real apiserver, seen as a user sees it:
``kubectl get endpointslices`` and ``kubectl get events``.

The shared informers and the controller run in the test's event loop; kubectl runs in a thread
so the controller keeps working while the test waits for it.
"""

from __future__ import annotations

import contextlib
import json

from kubesvc.client.rest import ENDPOINTS, RestClient
from kubesvc.controllers.mirroring.controller import EndpointSliceMirroringController
from tests.support.cluster import api_client, create_service, eventually, kubectl, new_namespace, running_controller

SERVICE_NAME = "kubernetes.io/service-name"
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
MIRRORING = "endpointslicemirroring-controller.k8s.io"


@contextlib.asynccontextmanager
async def mirroring_controller(server):
    """The controller on a client of its own, with the controller-manager's field manager."""
    async with api_client(server, "endpointslicemirroring-controller") as client, \
            running_controller(client, EndpointSliceMirroringController) as controller:
        yield controller


async def mirrored_slices(server, namespace: str, name: str) -> list[dict]:
    out = (await kubectl(server, "get", "endpointslices", "-n", namespace, "-l", f"{SERVICE_NAME}={name}", "-o", "json")).stdout
    return json.loads(out)["items"]


async def create_selectorless_service(client: RestClient, namespace: str, name: str) -> dict:
    return await create_service(client, namespace, name, None, ports=[{"name": "sql", "port": 5432, "targetPort": 5432, "protocol": "TCP"}])


def endpoint_ips(slices: list[dict]) -> dict[str, bool]:
    return {e["addresses"][0]: e["conditions"]["ready"] for s in slices for e in s.get("endpoints") or []}


async def test_custom_endpoints_are_mirrored_updated_and_cleaned_up(apiserver):
    async with api_client(apiserver) as client, mirroring_controller(apiserver):
        ns = await new_namespace(client, "mirror")
        await create_selectorless_service(client, ns, "db")
        endpoints = await client.resource(ENDPOINTS).create({
            "metadata": {"name": "db", "namespace": ns, "labels": {"team": "storage"},
                         "annotations": {"note": "external", "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "subsets": [{"addresses": [{"ip": "192.0.2.10", "hostname": "db-0"}],
                         "notReadyAddresses": [{"ip": "192.0.2.11"}],
                         "ports": [{"name": "sql", "port": 5432, "protocol": "TCP"}]}],
        })

        async def two_endpoints():
            slices = await mirrored_slices(apiserver, ns, "db")
            return slices if endpoint_ips(slices) == {"192.0.2.10": True, "192.0.2.11": False} else None

        (slice_,) = await eventually(two_endpoints, message="the mirrored slice")
        meta = slice_["metadata"]
        assert meta["name"].startswith("db-") and meta["generateName"] == "db-"
        assert meta["labels"] == {"team": "storage", SERVICE_NAME: "db", MANAGED_BY: MIRRORING}
        assert meta["annotations"] == {"note": "external"}
        assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "Endpoints", "name": "db", "uid": endpoints["metadata"]["uid"],
                                            "controller": True, "blockOwnerDeletion": True}]
        assert slice_["addressType"] == "IPv4"
        assert slice_["ports"] == [{"name": "sql", "port": 5432, "protocol": "TCP"}]
        assert {e["addresses"][0]: e for e in slice_["endpoints"]}["192.0.2.10"] == {
            "addresses": ["192.0.2.10"], "conditions": {"ready": True}, "hostname": "db-0"}

        # the Endpoints changes (a new address, another port, an IPv6 address): the slice is
        # rewritten in place and an IPv6 slice appears
        await kubectl(apiserver, "patch", "endpoints", "db", "-n", ns, "--type=merge", "-p", json.dumps({"subsets": [{
            "addresses": [{"ip": "192.0.2.10"}, {"ip": "192.0.2.12"}, {"ip": "2001:db8::0010"}],
            "ports": [{"name": "sql", "port": 6432, "protocol": "TCP"}]}]}))

        async def updated():
            slices = await mirrored_slices(apiserver, ns, "db")
            by_type = {s["addressType"]: s for s in slices}
            if len(slices) == 2 and endpoint_ips(slices) == {"192.0.2.10": True, "192.0.2.12": True, "2001:db8::10": True} \
                    and all(s["ports"][0]["port"] == 6432 for s in slices):
                return by_type
            return None

        by_type = await eventually(updated, message="the updated slices")
        assert by_type["IPv4"]["metadata"]["name"] == meta["name"]
        assert by_type["IPv4"]["metadata"]["uid"] == meta["uid"]

        # a user deletes a mirrored slice: it is mirrored again
        await kubectl(apiserver, "delete", "endpointslice", meta["name"], "-n", ns)

        async def recreated():
            slices = await mirrored_slices(apiserver, ns, "db")
            return slices if len(slices) == 2 and meta["name"] not in {s["metadata"]["name"] for s in slices} else None

        await eventually(recreated, message="the deleted slice mirrored again")

        # skip-mirror=true: the mirrored slices go; removing the label brings them back
        await kubectl(apiserver, "label", "endpoints", "db", "-n", ns, "endpointslice.kubernetes.io/skip-mirror=true")
        await eventually(lambda: _none_left(apiserver, ns, "db"), message="slices deleted after skip-mirror")
        await kubectl(apiserver, "label", "endpoints", "db", "-n", ns, "endpointslice.kubernetes.io/skip-mirror-")
        await eventually(lambda: _count(apiserver, ns, "db", 2), message="slices mirrored again")

        # the Service gains a selector: its slices belong to the EndpointSlice controller now
        await kubectl(apiserver, "patch", "service", "db", "-n", ns, "--type=merge", "-p", '{"spec":{"selector":{"app":"db"}}}')
        await eventually(lambda: _none_left(apiserver, ns, "db"), message="slices deleted after the selector was set")
        await kubectl(apiserver, "patch", "service", "db", "-n", ns, "--type=merge", "-p", '{"spec":{"selector":null}}')
        await eventually(lambda: _count(apiserver, ns, "db", 2), message="slices mirrored after the selector was removed")

        # the Endpoints is deleted: so are its slices
        await kubectl(apiserver, "delete", "endpoints", "db", "-n", ns)
        await eventually(lambda: _none_left(apiserver, ns, "db"), message="slices deleted with the Endpoints")


async def _count(server, ns: str, name: str, count: int) -> bool:
    return len(await mirrored_slices(server, ns, name)) == count


async def _none_left(server, ns: str, name: str) -> bool:
    return await _count(server, ns, name, 0)


async def test_endpoints_with_1001_addresses_mirror_1000_and_warn(apiserver):
    async with api_client(apiserver) as client, mirroring_controller(apiserver) as controller:
        ns = await new_namespace(client, "mirror")
        await create_selectorless_service(client, ns, "big")
        addresses = [{"ip": f"10.0.{i // 255}.{i % 255}"} for i in range(1001)]
        await client.resource(ENDPOINTS).create({
            "metadata": {"name": "big", "namespace": ns},
            "subsets": [{"addresses": addresses, "ports": [{"port": 80, "protocol": "TCP"}]}],
        })

        async def one_full_slice():
            slices = await mirrored_slices(apiserver, ns, "big")
            return slices if [len(s["endpoints"]) for s in slices] == [1000] else None

        await eventually(one_full_slice, 30, "one slice of 1000 endpoints")

        async def warning():
            await controller.recorder.flush()
            events = json.loads((await kubectl(apiserver, "get", "events", "-n", ns, "-o", "json")).stdout)["items"]
            return [e for e in events if e["reason"] == "TooManyAddressesToMirror"]

        (event,) = await eventually(warning, message="the TooManyAddressesToMirror event")
        assert event["type"] == "Warning"
        assert event["message"] == "A max of 1000 addresses can be mirrored to EndpointSlices per Endpoints subset. 1 addresses were skipped"
        assert event["involvedObject"]["kind"] == "Endpoints" and event["involvedObject"]["name"] == "big"
        assert event["source"]["component"] == "endpoint-slice-mirroring-controller"
        table = (await kubectl(apiserver, "get", "events", "-n", ns)).stdout
        assert "TooManyAddressesToMirror" in table and "endpoints/big" in table
        registry = controller.metrics.registry
        assert registry.get_sample_value("endpoint_slice_mirroring_controller_addresses_skipped_per_sync_sum") >= 1
        assert registry.get_sample_value("endpoint_slice_mirroring_controller_changes_total", {"operation": "create"}) >= 1
