"""``pods/NAME/eviction`` (policy/v1 Eviction) against a real apiserver: discovery names it as
``kubectl drain`` looks for it; an eviction answers Status Success 201 and deletes the Pod
marked ``DisruptionTarget`` (reason ``EvictionByEvictionAPI``), gracefully for a bound Pod, at
once for an unscheduled one; a dry run changes nothing; a name mismatch, a missing Pod and a
failing precondition are upstream's 400, 404 and 409; and ``kubectl drain`` evicts a node's Pods."""

from __future__ import annotations

import contextlib

import pytest

from kubesvc.client.rest import NODES, PODS, ApiError
from tests.support.cluster import get_or_none, kubectl, running_task
from tests.support.workloads import fake_kubelet


def eviction(name: str, **delete_options) -> dict:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
    if delete_options:
        body["deleteOptions"] = delete_options
    return body


async def make_pod(client, namespace: str, name: str, node: str | None = None, phase: str = "Running") -> dict:
    spec = {"containers": [{"name": "app", "image": "app"}]}
    if node:
        spec["nodeName"] = node
    pods = client.resource(PODS)
    pod = await pods.create({"metadata": {"name": name}, "spec": spec}, namespace)
    return await pods.update_status({**pod, "status": {**pod.get("status", {}), "phase": phase}})


def disruption(pod: dict) -> tuple | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c["type"] == "DisruptionTarget":
            return c["status"], c.get("reason"), c.get("message"), bool(c.get("lastTransitionTime"))
    return None


async def test_discovery_lists_pods_eviction_as_policy_v1(client):
    resources = {r["name"]: r for r in (await client.get("/api/v1"))["resources"]}
    entry = resources["pods/eviction"]
    assert (entry["group"], entry["version"], entry["kind"], entry["verbs"], entry["namespaced"]) == ("policy", "v1", "Eviction", ["create"], True)


async def test_eviction_marks_and_deletes(client, namespace):
    pods = client.resource(PODS)
    await make_pod(client, namespace, "bound", node=f"{namespace}-n1")
    await make_pod(client, namespace, "unscheduled", phase="Pending")

    answer = await client.create(f"/api/v1/namespaces/{namespace}/pods/bound/eviction", eviction("bound"))
    assert answer == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
    bound = await pods.get("bound", namespace)
    assert bound["metadata"]["deletionTimestamp"] and bound["metadata"]["deletionGracePeriodSeconds"] == 30  # graceful: its kubelet stops it
    assert disruption(bound) == ("True", "EvictionByEvictionAPI", "Eviction API: evicting", True)

    await client.create(f"/api/v1/namespaces/{namespace}/pods/unscheduled/eviction", eviction("unscheduled"))
    assert await get_or_none(client, PODS, "unscheduled", namespace) is None  # no node: deleted at once

    # a policy/v1beta1 Eviction is taken too, as upstream does
    await make_pod(client, namespace, "old-client", node=f"{namespace}-n1")
    await client.create(f"/api/v1/namespaces/{namespace}/pods/old-client/eviction", {**eviction("old-client"), "apiVersion": "policy/v1beta1"})
    assert disruption(await pods.get("old-client", namespace))[:2] == ("True", "EvictionByEvictionAPI")

    # the Eviction's deleteOptions are the delete's
    await make_pod(client, namespace, "short", node=f"{namespace}-n1")
    await client.create(f"/api/v1/namespaces/{namespace}/pods/short/eviction", eviction("short", gracePeriodSeconds=5))
    assert (await pods.get("short", namespace))["metadata"]["deletionGracePeriodSeconds"] == 5


async def test_dry_run_and_errors(client, namespace):
    pods = client.resource(PODS)
    await make_pod(client, namespace, "p", node=f"{namespace}-n1")
    await client.create(f"/api/v1/namespaces/{namespace}/pods/p/eviction", eviction("p"), {"dryRun": "All"})
    await client.create(f"/api/v1/namespaces/{namespace}/pods/p/eviction", eviction("p", dryRun=["All"]))
    pod = await pods.get("p", namespace)
    assert not pod["metadata"].get("deletionTimestamp") and disruption(pod) is None

    cases = [
        ("p", eviction("other"), 400, "BadRequest", "name in URL does not match name in Eviction object"),
        ("nope", eviction("nope"), 404, "NotFound", 'pods "nope" not found'),
        ("p", eviction("p", preconditions={"uid": "not-its-uid"}), 409, "Conflict",
         f"Operation cannot be fulfilled on pods \"p\": Precondition failed: UID in precondition: not-its-uid, UID in object meta: {pod['metadata']['uid']}"),
        ("p", {**eviction("p"), "metadata": {"name": "p", "namespace": "elsewhere"}}, 400, "BadRequest",
         "the namespace of the provided object does not match the namespace sent on the request"),
    ]
    for name, body, code, reason, message in cases:
        with pytest.raises(ApiError) as raised:
            await client.create(f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body)
        assert (raised.value.status, raised.value.reason, raised.value.message) == (code, reason, message)
    assert not (await pods.get("p", namespace))["metadata"].get("deletionTimestamp")


async def test_kubectl_drain_evicts_the_nodes_pods(apiserver, client, namespace):
    node = f"{namespace}-drained"
    await client.resource(NODES).create({"metadata": {"name": node}})
    try:
        for name in ("a", "b"):
            await make_pod(client, namespace, name, node=node)
        await make_pod(client, namespace, "elsewhere", node=f"{namespace}-other")
        async with running_task(fake_kubelet(client, namespace, lambda pod: None, interval=0.1)):  # removes what is being deleted
            drained = await kubectl(apiserver, "drain", node, "--force", "--timeout=60s")
        assert f"node/{node} drained" in drained.stdout, drained
        assert f"evicting pod {namespace}/a" in drained.stderr + drained.stdout and f"evicting pod {namespace}/b" in drained.stderr + drained.stdout
        left = sorted(p["metadata"]["name"] for p in (await client.resource(PODS).list(namespace))["items"])
        assert left == ["elsewhere"]
        assert (await client.resource(NODES).get(node))["spec"]["unschedulable"] is True
    finally:
        with contextlib.suppress(ApiError):
            await client.resource(NODES).delete(node)
