"""Objects and clients for controller tests against a real apiserver: namespaces, Services,
and Pods that look as a kubelet would report them (bound to a Node, an IP, a Ready condition)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import uuid

from kubesvc.client.kubeconfig import load_kubeconfig
from kubesvc.client.rest import NAMESPACES, NODES, PODS, SERVICES, ApiError, RestClient


@contextlib.asynccontextmanager
async def api_client(server, field_manager: str = "test"):
    async with RestClient(load_kubeconfig(server.kubeconfig), field_manager=field_manager) as client:
        yield client


async def new_namespace(client: RestClient, prefix: str = "t") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    await client.resource(NAMESPACES).create({"metadata": {"name": name}})
    return name


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


async def create_service(client: RestClient, namespace: str, name: str, selector: dict | None, **spec) -> dict:
    body = {"metadata": {"name": name, "namespace": namespace},
            "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}], **spec}}
    if selector is not None:
        body["spec"]["selector"] = selector
    return await client.resource(SERVICES).create(body)


def pod_ip(index: int, base: str = "10.244.0.0") -> str:
    return str(ipaddress.ip_address(base) + 10 + index)


async def create_pod(client: RestClient, namespace: str, name: str, labels: dict, ip: str, *, node: str = "node-a",
                     ready: bool = True, container_ports: list[dict] | None = None) -> dict:
    pods = client.resource(PODS)
    pod = await pods.create({
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app", "ports": container_ports or [{"name": "http", "containerPort": 8080}]}]},
    })
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
            raise AssertionError(f"timed out waiting for {message}")
        await asyncio.sleep(interval)
