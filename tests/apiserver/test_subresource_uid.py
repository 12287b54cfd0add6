"""A subresource write naming another uid is refused, as upstream refuses it for every write
(BeforeUpdate validates the common metadata: ``metadata.uid ... field is immutable``): this is
what pins a status patch that carries the Pod's uid (client-go's ``PatchPodStatus``, PodGC's
``Failed`` mark) to that very Pod, so a same-name successor is never marked or force-deleted.
Against a real apiserver; the expected texts are upstream's, written by hand."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from kubesvc.client.rest import PODS, ApiError
from kubesvc.controllers.informers import SharedInformers
from kubesvc.controllers.podgc import decisions as gc
from kubesvc.controllers.podgc.controller import PodGCController, PodGCMetrics


def pod(name: str, node: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}}


@pytest.mark.parametrize("patch_type", ["strategic", "merge"])
async def test_a_status_patch_with_another_uid_is_422_and_changes_nothing(client, namespace, patch_type):
    pods = client.resource(PODS)
    created = await pods.create(pod("p", f"{namespace}-n1"), namespace)
    with pytest.raises(ApiError) as refused:
        await pods.patch("p", {"metadata": {"uid": "other"}, "status": {"phase": "Failed"}}, namespace, patch_type=patch_type, subresource="status")
    assert (refused.value.status, refused.value.reason, refused.value.message) == (
        422, "Invalid", 'Pod "p" is invalid: metadata.uid: Invalid value: "other": field is immutable')
    after = await pods.get("p", namespace)
    assert after["status"]["phase"] == "Pending" and after["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    # its own uid: applied
    patched = await pods.patch("p", {"metadata": {"uid": created["metadata"]["uid"]}, "status": {"phase": "Failed"}}, namespace,
                               patch_type=patch_type, subresource="status")
    assert patched["status"]["phase"] == "Failed"


@pytest.mark.parametrize("phase", ["Running", "Failed"])
async def test_podgc_leaves_a_same_name_successor_alone(client, namespace, phase):
    """PodGC decided on a Pod of its snapshot (an orphan, here; Running: it is marked Failed
    first, Failed: deleted at once); by the time it writes, that Pod was replaced by another of
    the same name: the successor is neither marked Failed nor deleted. The refused Failed mark
    is counted as an error (upstream's PatchPodStatus error is); a delete whose uid is no longer
    the name's is not (the Pod decided on is gone)."""
    pods = client.resource(PODS)
    gone = await pods.create(pod("web-0", f"{namespace}-gone-node"), namespace)
    gone = await pods.update_status({**gone, "status": {**gone["status"], "phase": phase}})
    await pods.delete("web-0", namespace, grace_period_seconds=0)
    successor = await pods.create(pod("web-0", f"{namespace}-live-node"), namespace)
    registry = CollectorRegistry()
    controller = PodGCController(client, SharedInformers(client), metrics=PodGCMetrics(registry))
    await controller._delete(gone, gc.REASON_ORPHANED, gc.ORPHANED_CONDITION)
    now = await pods.get("web-0", namespace)
    assert now["metadata"]["uid"] == successor["metadata"]["uid"]
    assert now["status"]["phase"] == "Pending" and not now["metadata"].get("deletionTimestamp")
    labels = {"namespace": namespace, "reason": "orphaned"}
    assert registry.get_sample_value("pod_gc_collector_force_delete_pod_errors_total", labels) == (1.0 if phase == "Running" else None)
