"""An Eviction is a create, admitted before anything is written (upstream admits it ahead of
``EvictionREST``), and the delete behind it checks its options as any delete does, against a
real apiserver (Node,RBAC with NodeRestriction, as ``kubesvc up`` runs it):

* NodeRestriction's ``admitPodEviction``: a node evicts only Pods bound to itself; another
  node's Pod is refused 403 and left exactly as it was (no ``DisruptionTarget`` written);
* NamespaceLifecycle: no eviction in a namespace being deleted (403, cause
  ``NamespaceTerminating``, which ``kubectl drain`` looks for);
* ``ValidateDeleteOptions``: a ``dryRun`` other than ``All`` or an unknown
  ``propagationPolicy`` is 422 and deletes nothing, for an Eviction's ``deleteOptions`` and a
  DELETE's body alike.

Expected texts are upstream's, written by hand."""

from __future__ import annotations

import contextlib
import json
import uuid

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from kubesvc.client.rest import NAMESPACES, PODS, ApiError

EVICTION = {"apiVersion": "policy/v1", "kind": "Eviction"}


def core(kubeconfig) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=str(kubeconfig)))


def pod_on(name: str, node: str | None) -> dict:
    spec = {"containers": [{"name": "c", "image": "i"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name}, "spec": spec}


def disruption_target(pod: dict) -> list:
    return [c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == "DisruptionTarget"]


async def test_a_node_evicts_only_its_own_pods_and_a_refusal_writes_nothing(apiserver, client, namespace):
    suffix = uuid.uuid4().hex[:6]
    n1, n2 = f"ev1-{suffix}", f"ev2-{suffix}"
    node1, node2 = core(apiserver.node_kubeconfig(n1)), core(apiserver.node_kubeconfig(n2))
    pods = client.resource(PODS)
    await pods.create(pod_on("theirs", n2), namespace)
    await pods.create(pod_on("mine", n1), namespace)
    before = await pods.get("theirs", namespace)

    with pytest.raises(ApiException) as refused:
        node1.create_namespaced_pod_eviction("theirs", namespace, k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name="theirs")))
    assert refused.value.status == 403
    assert json.loads(refused.value.body)["message"] == (
        f'pods "theirs" is forbidden: node {n1} can only evict pods with spec.nodeName set to itself')
    after = await pods.get("theirs", namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]  # nothing written
    assert not disruption_target(after) and not after["metadata"].get("deletionTimestamp")

    node1.create_namespaced_pod_eviction("mine", namespace, k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name="mine")))
    mine = await pods.get("mine", namespace)
    assert mine["metadata"].get("deletionTimestamp") and [c["reason"] for c in disruption_target(mine)] == ["EvictionByEvictionAPI"]
    del node2


async def test_bad_delete_options_are_422_and_delete_nothing(client, namespace):
    pods = client.resource(PODS)
    await pods.create(pod_on("p", f"{namespace}-n1"), namespace)
    before = await pods.get("p", namespace)
    path = f"/api/v1/namespaces/{namespace}/pods/p/eviction"
    cases = [
        ({"dryRun": ["Bogus"]}, 'DeleteOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"Bogus"}: supported values: "All"'),
        ({"propagationPolicy": "Bogus"},
         'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Bogus": '
         'supported values: "Foreground", "Background", "Orphan", "nil"'),
    ]
    for options, message in cases:
        with pytest.raises(ApiError) as raised:
            await client.create(path, {**EVICTION, "metadata": {"name": "p"}, "deleteOptions": options})
        assert (raised.value.status, raised.value.reason, raised.value.message) == (422, "Invalid", message)
        with pytest.raises(ApiError) as deleting:  # the plain DELETE with the same options in its body
            await client.delete(f"/api/v1/namespaces/{namespace}/pods/p", body=options)
        assert (deleting.value.status, deleting.value.message) == (422, message)
    with pytest.raises(ApiError) as mismatch:
        await client.create(path, {**EVICTION, "metadata": {"name": "p"}, "deleteOptions": {"dryRun": ["Bogus"]}}, {"dryRun": "All"})
    assert (mismatch.value.status, mismatch.value.message) == (400, "Non-matching dry-run options in request and content: [All] and [Bogus]")
    after = await pods.get("p", namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert not disruption_target(after) and not after["metadata"].get("deletionTimestamp")


async def test_no_eviction_in_a_namespace_being_deleted(client, namespace):
    doomed = f"{namespace}-doomed"
    await client.resource(NAMESPACES).create({"metadata": {"name": doomed}})
    pods = client.resource(PODS)
    try:
        await pods.create({**pod_on("held", f"{namespace}-n1"), "metadata": {"name": "held", "finalizers": ["example.com/hold"]}}, doomed)
        await client.resource(NAMESPACES).delete(doomed)
        with pytest.raises(ApiError) as refused:
            await client.create(f"/api/v1/namespaces/{doomed}/pods/held/eviction", {**EVICTION, "metadata": {"name": "held"}})
        assert (refused.value.status, refused.value.message) == (
            403, f'pods "held" is forbidden: unable to create new content in namespace {doomed} because it is being terminated')
        assert not disruption_target(await pods.get("held", doomed))
    finally:
        with contextlib.suppress(ApiError):
            await pods.patch("held", {"metadata": {"finalizers": None}}, doomed)
