"""Workload controllers in the test's event loop against a real apiserver, and a stand-in
kubelet: Pods of a namespace reported Running and Ready (or Succeeded/Failed) as a kubelet
would, by a rule the test chooses, so rollouts, Jobs and DaemonSets move without real
processes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime, timezone

from kubesvc.client.rest import PODS, ApiError, RestClient
from kubesvc.controllers.informers import SharedInformers
from tests.support.cluster import running_task


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_status(pod: dict) -> dict:
    return {**(pod.get("status") or {}), "phase": "Running", "podIP": "10.1.0.1", "podIPs": [{"ip": "10.1.0.1"}],
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now()}]}


def finished_status(pod: dict, phase: str) -> dict:
    code = 0 if phase == "Succeeded" else 1
    return {**(pod.get("status") or {}), "phase": phase,
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now()}],
            "containerStatuses": [{"name": c["name"], "ready": False, "restartCount": 0, "image": c.get("image", ""), "imageID": "",
                                   "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                                            "startedAt": now(), "finishedAt": now()}}}
                                  for c in pod["spec"]["containers"]]}


def image_of(pod: dict) -> str:
    return pod["spec"]["containers"][0].get("image", "")


async def fake_kubelet(client: RestClient, namespace: str, decide: Callable[[dict], dict | None], interval: float = 0.1) -> None:
    """Forever: every Pod of ``namespace`` not yet reported gets ``decide(pod)`` as its status
    (None: left Pending). A bound Pod being deleted is removed at once (grace period 0), as a
    kubelet does once its containers stopped."""
    pods = client.resource(PODS)
    handled: set[str] = set()
    while True:
        for pod in (await pods.list(namespace))["items"]:
            uid = pod["metadata"]["uid"]
            if pod["metadata"].get("deletionTimestamp"):
                if pod["spec"].get("nodeName") and not pod["metadata"].get("finalizers"):
                    with contextlib.suppress(ApiError):
                        await pods.delete(pod["metadata"]["name"], namespace, grace_period_seconds=0, preconditions={"uid": uid})
                continue
            if uid in handled:
                continue
            status = decide(pod)
            if status is None:
                continue
            with contextlib.suppress(ApiError):  # a conflict (bound meanwhile): next round
                await pods.update_status({**pod, "status": status})
                handled.add(uid)
        await asyncio.sleep(interval)


def ready_unless(*bad_images: str) -> Callable[[dict], dict | None]:
    """Pods become Ready unless their image is one of ``bad_images`` (those stay Pending)."""
    return lambda pod: None if image_of(pod) in bad_images else ready_status(pod)


@contextlib.asynccontextmanager
async def running_controllers(client: RestClient, *factories: Callable[[RestClient, SharedInformers], object], sync_timeout: float = 15.0):
    """Controllers made by ``factories(client, informers)`` on one SharedInformers, run as the
    controller-manager runs them; stopped (queues shut, Events flushed) after the block."""
    informers = SharedInformers(client)
    controllers = [factory(client, informers) for factory in factories]
    async with contextlib.AsyncExitStack() as stack:
        informers.start()
        stack.push_async_callback(informers.stop)
        assert await informers.wait_for_sync(sync_timeout), "informers did not sync"
        for controller in controllers:
            if getattr(controller, "recorder", None) is not None:
                stack.push_async_callback(controller.recorder.flush)
            await stack.enter_async_context(running_task(controller.run()))
            if getattr(controller, "queue", None) is not None:
                stack.callback(controller.queue.shutdown)
        yield controllers
