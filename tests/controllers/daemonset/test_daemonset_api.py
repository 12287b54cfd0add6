"""The DaemonSet controller against a real apiserver, with the real kubectl and the scheduler:
one Pod per eligible node (nodeSelector, pinned by node affinity and bound by the scheduler),
a rolling update that never has more than maxUnavailable nodes without an available Pod
(observed through a watch), ControllerRevision history and ``kubectl rollout
status|history|undo daemonset``; a node leaving the selection loses its Pod."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from kubesvc.client.rest import NODES, PODS
from kubesvc.controllers.daemonset.controller import CONTROLLERREVISIONS, DAEMONSETS, DaemonSetController
from kubesvc.controllers.scheduler.controller import Scheduler
from tests.support.apiserver import running_apiserver
from tests.support.cluster import eventually, kubectl, running_task
from tests.support.workloads import fake_kubelet, now, ready_unless, running_controllers


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory):
    """An apiserver of this module's own instead of the session's shared one. Twice in loaded
    full-suite runs the rolling update never started within `rollout status --timeout=60s`
    ("0 out of 4 new pods have been updated"), while alone (and beside four busy CPUs) the test
    takes seconds. Suspected, not proven: the test's scheduler also works through whatever the
    shared apiserver holds from other tests. Isolating the module removes that variable."""
    with running_apiserver(tmp_path_factory.mktemp("daemonset-apiserver")) as server:
        yield server


def ds_manifest(name: str, image: str, selector_value: str, **strategy) -> str:
    body = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"nodeSelector": {"w20b-pool": selector_value},
                                           "containers": [{"name": "agent", "image": image, "command": ["sleep", "3600"]}]}}}}
    if strategy:
        body["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": strategy}
    return yaml.safe_dump(body)


async def ready_node(client, name: str, pool: str) -> None:
    nodes = client.resource(NODES)
    node = await nodes.create({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "w20b-pool": pool}}})
    node["status"] = {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready",
                                      "lastHeartbeatTime": now(), "lastTransitionTime": now()}]}
    await nodes.update_status(node)


async def daemon_pods(client, namespace) -> list[dict]:
    return [p for p in (await client.resource(PODS).list(namespace))["items"] if not p["metadata"].get("deletionTimestamp")]


async def test_one_pod_per_node_rolling_update_history_and_undo(apiserver, client, namespace):
    pool = namespace
    names = [f"{namespace}-n{i}" for i in range(4)]
    for name in names:
        await ready_node(client, name, pool)
    try:
        factories = [lambda c, i: DaemonSetController(c, i), lambda c, i: Scheduler(c, i)]
        async with running_controllers(client, *factories):
            async with running_task(fake_kubelet(client, namespace, ready_unless("broken"))):
                await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=ds_manifest("agent", "v1", pool, maxUnavailable=2))
                done = await kubectl(apiserver, "-n", namespace, "rollout", "status", "daemonset/agent", "--timeout=60s")
                assert 'daemon set "agent" successfully rolled out' in done.stdout
                pods = await daemon_pods(client, namespace)
                assert sorted(p["spec"]["nodeName"] for p in pods) == names
                assert all(p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
                           ["matchFields"][0]["values"] == [p["spec"]["nodeName"]] for p in pods)

                available_nodes: list[int] = []

                def is_ready(kind: str, pod: dict) -> bool:
                    return kind != "DELETED" and not pod["metadata"].get("deletionTimestamp") and any(
                        c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or [])

                async def watch():
                    listed = await client.resource(PODS).list(namespace)
                    ready = {p["metadata"]["name"]: is_ready("ADDED", p) for p in listed["items"]}
                    async for kind, pod in client.resource(PODS).watch(namespace, resource_version=listed["metadata"]["resourceVersion"]):
                        ready[pod["metadata"]["name"]] = is_ready(kind, pod)
                        available_nodes.append(sum(ready.values()))

                async with running_task(watch()):
                    await asyncio.sleep(0.3)
                    await kubectl(apiserver, "-n", namespace, "set", "image", "daemonset/agent", "agent=v2")
                    await kubectl(apiserver, "-n", namespace, "rollout", "status", "daemonset/agent", "--timeout=60s")
                    await asyncio.sleep(0.3)
                assert min(available_nodes) == 2, available_nodes  # 4 nodes, maxUnavailable 2: used, never exceeded
                assert {p["spec"]["containers"][0]["image"] for p in await daemon_pods(client, namespace)} == {"v2"}
                revisions = (await client.resource(CONTROLLERREVISIONS).list(namespace))["items"]
                assert sorted(r["revision"] for r in revisions) == [1, 2]
                history = await kubectl(apiserver, "-n", namespace, "rollout", "history", "daemonset/agent")
                assert history.stdout.split("\n")[0].strip() == "daemonset.apps/agent"
                assert [line.split()[0] for line in history.stdout.strip().split("\n")[2:]] == ["1", "2"]

                undo = await kubectl(apiserver, "-n", namespace, "rollout", "undo", "daemonset/agent")
                assert undo.stdout.strip() == "daemonset.apps/agent rolled back"
                await kubectl(apiserver, "-n", namespace, "rollout", "status", "daemonset/agent", "--timeout=60s")
                await eventually(lambda: _images(client, namespace, {"v1"}, 4), 30, "back on v1")
                ds = await client.resource(DAEMONSETS).get("agent", namespace)
                assert ds["status"]["desiredNumberScheduled"] == ds["status"]["numberAvailable"] == ds["status"]["updatedNumberScheduled"] == 4

                # a node taken out of the pool loses its Pod
                node = await client.resource(NODES).get(names[0])
                node["metadata"]["labels"]["w20b-pool"] = "elsewhere"
                await client.resource(NODES).update(node)
                await eventually(lambda: _images(client, namespace, {"v1"}, 3), 30, "3 Pods left")
                table = await kubectl(apiserver, "-n", namespace, "get", "ds", "agent")
                assert table.stdout.split("\n")[1].split()[1:6] == ["3", "3", "3", "3", "3"]
    finally:
        for name in names:
            await client.resource(NODES).delete(name)


async def _images(client, namespace, images, count) -> bool:
    pods = await daemon_pods(client, namespace)
    return len(pods) == count and {p["spec"]["containers"][0]["image"] for p in pods} == images


async def test_surge_update_and_failed_pod_replaced(apiserver, client, namespace):
    """maxSurge 1 (maxUnavailable 0): a node's new Pod starts beside the old one, which goes
    only once the new one is Ready, so every node always has a Ready Pod; a daemon Pod that
    fails is deleted (FailedDaemonPod) and replaced on its node."""
    pool = namespace
    names = [f"{namespace}-s{i}" for i in range(3)]
    for name in names:
        await ready_node(client, name, pool)
    try:
        factories = [lambda c, i: DaemonSetController(c, i), lambda c, i: Scheduler(c, i)]
        async with running_controllers(client, *factories):
            async with running_task(fake_kubelet(client, namespace, ready_unless("broken"))):
                await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=ds_manifest("agent", "v1", pool, maxUnavailable=0, maxSurge=1))
                await kubectl(apiserver, "-n", namespace, "rollout", "status", "daemonset/agent", "--timeout=60s")
                ready_per_node: list[dict[str, int]] = []

                def node_ready(pods: dict[str, dict]) -> dict[str, int]:
                    counts = dict.fromkeys(names, 0)
                    for pod in pods.values():
                        node = pod["spec"].get("nodeName")
                        if node in counts and not pod["metadata"].get("deletionTimestamp") and any(
                                c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or []):
                            counts[node] += 1
                    return counts

                async def watch():
                    listed = await client.resource(PODS).list(namespace)
                    pods = {p["metadata"]["name"]: p for p in listed["items"]}
                    async for kind, pod in client.resource(PODS).watch(namespace, resource_version=listed["metadata"]["resourceVersion"]):
                        if kind == "DELETED":
                            pods.pop(pod["metadata"]["name"], None)
                        else:
                            pods[pod["metadata"]["name"]] = pod
                        ready_per_node.append(node_ready(pods))

                async with running_task(watch()):
                    await asyncio.sleep(0.3)
                    await kubectl(apiserver, "-n", namespace, "set", "image", "daemonset/agent", "agent=v2")
                    await kubectl(apiserver, "-n", namespace, "rollout", "status", "daemonset/agent", "--timeout=60s")
                    await asyncio.sleep(0.3)
                assert all(min(counts.values()) >= 1 for counts in ready_per_node), ready_per_node
                assert any(max(counts.values()) == 2 for counts in ready_per_node)  # it surged
                assert max(sum(counts.values()) for counts in ready_per_node) == 4  # 3 nodes + maxSurge 1, never more
                await eventually(lambda: _images(client, namespace, {"v2"}, 3), 30, "3 v2 Pods")

                victim = (await daemon_pods(client, namespace))[0]
                victim["status"]["phase"] = "Failed"
                await client.resource(PODS).update_status(victim)

                async def replaced():
                    pods = await daemon_pods(client, namespace)
                    return (len(pods) == 3 and victim["metadata"]["name"] not in {p["metadata"]["name"] for p in pods}
                            and victim["spec"]["nodeName"] in {p["spec"].get("nodeName") for p in pods})

                await eventually(replaced, 30, "the failed Pod replaced on its node")
    finally:
        for name in names:
            await client.resource(NODES).delete(name)
