"""The agent itself (``Agent._on_pod``) given a Pod bound to its node and already deleted before
it ran any of it: the Pod is reported Failed, its container ``ContainerStatusUnknown`` (as the
kubelet's ``TerminatePod``), and deleted with grace 0; a finalizer keeps the object so the
status can be read. A terminal Pod keeps the status it has. Against a real apiserver; the
network teardown (a kernel operation) is replaced, as this Pod never had any."""

from __future__ import annotations

import asyncio

from kubesvc.agent import agent as agent_module
from kubesvc.agent.agent import Agent, AgentConfig
from kubesvc.client.rest import PODS
from tests.support.cluster import eventually

FINALIZER = "example.com/keep"


async def deleted_pod(pods, namespace: str, name: str, phase: str | None = None) -> dict:
    body = {"metadata": {"name": name, "finalizers": [FINALIZER]},
            "spec": {"nodeName": "node-j2", "restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox"}]}}
    pod = await pods.create(body, namespace)
    if phase:
        pod = await pods.update_status({**pod, "status": {**pod.get("status", {}), "phase": phase}}, namespace)
    await pods.delete(name, namespace)
    return await pods.get(name, namespace)


async def test_the_agent_fails_a_deleted_pod_it_never_ran(client, namespace, tmp_path, monkeypatch):
    async def no_network(network, uid):
        return None

    monkeypatch.setattr(agent_module.podnet, "remove_pod", no_network)
    agent = Agent(client, AgentConfig(node_name="node-j2", pod_cidrs=["10.244.9.0/24"], node_ips=["10.9.0.7"], data_dir=tmp_path))
    pods = client.resource(PODS)
    unrun = await deleted_pod(pods, namespace, "unrun")
    done = await deleted_pod(pods, namespace, "done", phase="Succeeded")
    assert unrun["metadata"].get("deletionTimestamp") and (unrun.get("status") or {}).get("phase") == "Pending"
    try:
        agent._on_pod(unrun)
        agent._on_pod(done)
        await asyncio.gather(*agent._tasks)

        async def failed():
            pod = await pods.get("unrun", namespace)
            return pod if pod["status"].get("phase") == "Failed" else None

        pod = await eventually(failed, 10, "the Pod Failed")
        (container,) = pod["status"]["containerStatuses"]
        assert container["state"] == {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown",
                                                     "message": "The container could not be located when the pod was terminated"}}
        assert pod["status"]["hostIP"] == "10.9.0.7"
        assert (await pods.get("done", namespace))["status"]["phase"] == "Succeeded"
        assert unrun["metadata"]["uid"] in agent._done  # never run here later
        # deleted with grace 0 (the finalizer holds the object)
        assert (await pods.get("unrun", namespace))["metadata"]["deletionGracePeriodSeconds"] == 0
    finally:
        for name in ("unrun", "done"):
            await pods.patch(name, {"metadata": {"finalizers": None}}, namespace)
