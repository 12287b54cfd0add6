"""Objects and clients for controller tests against a real apiserver: namespaces, Services,
and Pods that look as a kubelet would report them (bound to a Node, an IP, a Ready condition);
controllers run in the test's event loop, kubectl in a thread beside it, and ``eventually``."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import subprocess
import uuid

from kubesvc.client.kubeconfig import load_kubeconfig
from kubesvc.client.rest import NAMESPACES, NODES, PODS, SERVICES, ApiError, Resource, RestClient, is_not_found
from kubesvc.controllers.informers import SharedInformers


@contextlib.asynccontextmanager
async def api_client(server, field_manager: str = "test", **options):
    """A RestClient on ``server``'s kubeconfig; ``options`` (``timeout``) go to RestClient."""
    async with RestClient(load_kubeconfig(server.kubeconfig), field_manager=field_manager, **options) as client:
        yield client


async def new_namespace(client: RestClient, prefix: str = "t") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    await client.resource(NAMESPACES).create({"metadata": {"name": name}})
    return name


@contextlib.asynccontextmanager
async def temporary_namespace(client: RestClient, prefix: str = "t"):
    """A new namespace for the block, deleted after it (a failed delete is not the test's)."""
    name = await new_namespace(client, prefix)
    try:
        yield name
    finally:
        with contextlib.suppress(ApiError):
            await client.resource(NAMESPACES).delete(name)


async def get_or_none(client: RestClient, resource: Resource, name: str, namespace: str | None = None) -> dict | None:
    """The object, or None when the apiserver says it is not found."""
    try:
        return await client.resource(resource).get(name, namespace)
    except ApiError as exc:
        if is_not_found(exc):
            return None
        raise


async def kubectl(server, *args: str, **options) -> subprocess.CompletedProcess:
    """``server.kubectl`` in a thread, so the event loop (and the controllers in it) keeps running."""
    return await asyncio.to_thread(server.kubectl, *args, **options)


async def ensure_node(client: RestClient, name: str, zone: str | None = None) -> dict:
    labels = {"kubernetes.io/hostname": name}
    if zone:
        labels["topology.kubernetes.io/zone"] = zone
    try:
        return await client.resource(NODES).create({"metadata": {"name": name, "labels": labels}})
    except ApiError as exc:
        if exc.status != 409:
            raise
        return await client.resource(NODES).get(name)


async def create_service(client: RestClient, namespace: str, name: str, selector: dict | None, *, labels: dict | None = None,
                         **spec) -> dict:
    """A Service with one port, http 80 -> 8080 (``spec`` fields, ``ports`` too, replace or add)."""
    body = {"metadata": {"name": name, "namespace": namespace},
            "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}], **spec}}
    if selector is not None:
        body["spec"]["selector"] = selector
    if labels is not None:
        body["metadata"]["labels"] = labels
    return await client.resource(SERVICES).create(body)


def pod_ip(index: int, base: str = "10.244.0.0") -> str:
    return str(ipaddress.ip_address(base) + 10 + index)


async def create_pod(client: RestClient, namespace: str, name: str, labels: dict, ip: str, *, node: str | None = "node-a",
                     ready: bool = True, container_ports: list[dict] | None = None) -> dict:
    """A Running Pod with ``ip``; bound to ``node`` (``None``: to no node, so that a delete
    removes it at once instead of leaving it terminating)."""
    spec = {"containers": [{"name": "app", "image": "app", "ports": container_ports or [{"name": "http", "containerPort": 8080}]}]}
    if node is not None:
        spec["nodeName"] = node
    pod = await client.resource(PODS).create({"metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": spec})
    return await set_pod_status(client, pod, ip=ip, ready=ready)


async def set_pod_status(client: RestClient, pod: dict, *, ip: str | None = None, ready: bool) -> dict:
    """Report the Pod Running with its IP and the Ready condition, as a kubelet does."""
    status = dict(pod.get("status") or {})
    ip = ip or status.get("podIP")
    status.update({"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                   "lastTransitionTime": _now()}]})
    body = {**pod, "status": status}
    return await client.resource(PODS).update_status(body)


def _now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


async def create_pods(client: RestClient, namespace: str, count: int, labels: dict, *, prefix: str = "pod", start: int = 0,
                      concurrency: int = 16, **kwargs) -> list[dict]:
    """``count`` Running, Ready Pods, ``concurrency`` requests at a time."""
    semaphore = asyncio.Semaphore(concurrency)

    async def one(i: int) -> dict:
        async with semaphore:
            return await create_pod(client, namespace, f"{prefix}-{i}", labels, pod_ip(i), **kwargs)

    return list(await asyncio.gather(*(one(i) for i in range(start, start + count))))


async def eventually(predicate, timeout: float = 20.0, message: str = "condition", interval: float = 0.05):
    """Poll ``predicate`` (sync or async) until truthy; return its value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {message}; last: {_short(value)}")
        await asyncio.sleep(interval)


def _short(value, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


@contextlib.asynccontextmanager
async def running_task(coroutine):
    """``coroutine`` as a task for the block; cancelled and awaited after it."""
    task = asyncio.create_task(coroutine)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def running_controller(client: RestClient, controller_class, *, sync_timeout: float = 15.0, **options):
    """``controller_class(client, informers, **options)`` on SharedInformers of its own, run as
    the controller-manager runs it: the caches synced first, then ``run()`` in a task. After the
    block: the queue shut down, the task cancelled, recorded events flushed, informers stopped."""
    informers = SharedInformers(client)
    controller = controller_class(client, informers, **options)
    async with contextlib.AsyncExitStack() as stack:
        informers.start()
        stack.push_async_callback(informers.stop)
        assert await informers.wait_for_sync(sync_timeout), "informers did not sync"
        stack.push_async_callback(controller.recorder.flush)
        await stack.enter_async_context(running_task(controller.run()))
        stack.callback(controller.queue.shutdown)
        yield controller
