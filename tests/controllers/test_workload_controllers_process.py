"""The workload controllers inside ``kubesvc controller-manager`` as a cluster runs it: each as
its own kube-system ServiceAccount (``--use-service-account-credentials``), so RBAC's
``system:controller:<name>`` roles must grant everything they do. A Deployment gets its
ReplicaSet and revision, a Job runs to Complete and is deleted by its TTL, a DaemonSet gets a
Pod on a Ready node (bound by the pod-scheduler), and the pod-garbage-collector-controller marks
an unscheduled Pod being deleted (held by a finalizer) Failed."""

from __future__ import annotations

import yaml

from kubesvc.client.rest import NODES, PODS
from kubesvc.controllers.deployment.controller import DEPLOYMENTS, REPLICASETS
from kubesvc.controllers.job.controller import JOBS
from tests.controllers.job.test_job_api import finish_by_image, job_manifest
from tests.support.apiserver import start_controller_manager
from tests.support.cluster import eventually, get_or_none, kubectl, running_task
from tests.support.workloads import fake_kubelet, now


async def test_workload_controllers_run_with_their_own_credentials(apiserver, client, namespace, tmp_path):
    flags = ("--leader-elect=false", "--secure-port=0", "--concurrent-deployment-syncs=2", "--concurrent-daemonset-syncs=1",
             "--concurrent-job-syncs=2", "--concurrent-ttl-after-finished-syncs=1",
             "--controllers=deployment-controller,daemonset-controller,job-controller,ttl-after-finished-controller,"
             "garbage-collector-controller,pod-scheduler,pod-garbage-collector-controller")
    pods = client.resource(PODS)
    await pods.create({"metadata": {"name": "unscheduled", "labels": {"app": "podgc"}, "finalizers": ["example.com/hold"]},
                       "spec": {"containers": [{"name": "c", "image": "v1"}]}}, namespace)
    await pods.delete("unscheduled", namespace)  # Terminating, never to be scheduled: PodGC's first pass takes it
    manager = start_controller_manager(apiserver, tmp_path / "cm.log", *flags)
    node_name = f"{namespace}-node"
    try:
        deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                      "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                               "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "v1"}]}}}}
        await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(deployment))

        async def replica_set():
            items = (await client.resource(REPLICASETS).list(namespace))["items"]
            d = await client.resource(DEPLOYMENTS).get("web", namespace)
            return items and (d["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision") == "1" and items

        rss = await eventually(replica_set, 30, "the Deployment's ReplicaSet and revision")
        assert rss[0]["spec"]["replicas"] == 2 and rss[0]["metadata"]["ownerReferences"][0]["name"] == "web"

        async with running_task(fake_kubelet(client, namespace, finish_by_image, interval=0.2)):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=job_manifest("once", "ok", ttlSecondsAfterFinished=2))
            await eventually(lambda: get_or_none(client, JOBS, "once", namespace), 10, "the Job")

            async def job_gone():
                return await get_or_none(client, JOBS, "once", namespace) is None

            await eventually(job_gone, 60, "the Job completed and deleted after its TTL")

        nodes = client.resource(NODES)
        node = await nodes.create({"metadata": {"name": node_name, "labels": {"w20b-pool": namespace}}})
        node["status"] = {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now(),
                                          "lastTransitionTime": now()}]}
        await nodes.update_status(node)
        daemon = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
                  "spec": {"selector": {"matchLabels": {"app": "agent"}},
                           "template": {"metadata": {"labels": {"app": "agent"}},
                                        "spec": {"nodeSelector": {"w20b-pool": namespace}, "containers": [{"name": "c", "image": "v1"}]}}}}
        await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(daemon))

        async def daemon_pod_bound():
            pods = [p for p in (await client.resource(PODS).list(namespace))["items"] if p["metadata"]["labels"].get("app") == "agent"]
            return len(pods) == 1 and pods[0]["spec"].get("nodeName") == node_name

        await eventually(daemon_pod_bound, 30, "the daemon Pod bound to the node")
        history = await kubectl(apiserver, "-n", namespace, "rollout", "history", "daemonset/agent")
        assert [line.split()[0] for line in history.stdout.strip().split("\n")[2:]] == ["1"]

        async def unscheduled_failed():
            return (await pods.get("unscheduled", namespace))["status"].get("phase") == "Failed"

        await eventually(unscheduled_failed, 10, "the unscheduled terminating Pod marked Failed by PodGC")
    finally:
        await pods.patch("unscheduled", {"metadata": {"finalizers": None}}, namespace)
        code = manager.stop()
        await client.resource(NODES).delete(node_name) if await get_or_none(client, NODES, node_name) else None
    log = manager.log()
    assert code == 0, log[-3000:]
    assert "forbidden" not in log.lower(), [line for line in log.splitlines() if "forbidden" in line.lower()][:5]
