"""The system objects the apiserver keeps: the ``default/kubernetes`` Service and the system
namespaces (identity.md §8.2).

The Service is how Pods find the apiserver (upstream's
pkg/controlplane/controller/kubernetesservice). It holds the first address of the primary
service range (network+1, e.g. 10.96.0.1, the first slot of the static band, so dynamic
allocation never takes it), one port ``https`` 443/TCP whose targetPort is the apiserver's
secure port, labels ``provider: kubernetes`` and ``component: apiserver``, and
``ipFamilyPolicy: SingleStack``. The apiserver creates it at start and puts the port back if
someone changed it.

``SystemObjects`` is the loop that keeps them, as upstream's post-start controllers do: the
kubernetes Service controller recreates a missing Service every ``EndpointInterval`` (10 s),
the system-namespaces controller a missing ``kube-system``, ``kube-public``, ``default`` or
``kube-node-lease`` every minute. Here one pass does both every second (a few key lookups), so
a deleted Service is back within about a second, and always within upstream's 10 s. The
immortal namespaces cannot be deleted at all (NamespaceLifecycle admission); while
``kube-node-lease`` terminates its create is refused, and it comes back once it is gone.
"""

from __future__ import annotations

import asyncio
import logging

from kubesvc.api.errors import StatusError
from kubesvc.apiserver.allocator.service import ServiceAllocators
from kubesvc.apiserver.registry.store import Registry

log = logging.getLogger("kubesvc.apiserver")

NAME, NAMESPACE = "kubernetes", "default"
FIELD_MANAGER = "kube-apiserver"
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
RECONCILE_INTERVAL = 1.0


async def ensure_system_namespaces(registry: Registry) -> list[str]:
    """Create the system namespaces that are missing; the names created."""
    namespaces = registry.store("", "namespaces")
    created = []
    for name in SYSTEM_NAMESPACES:
        if await namespaces.backend.get(namespaces.info.key(None, name)) is not None:
            continue
        try:
            await namespaces.create(None, {"metadata": {"name": name}}, field_manager=FIELD_MANAGER)
        except StatusError as exc:
            if exc.code != 409:  # AlreadyExists: someone else was quicker
                raise
            continue
        created.append(name)
    return created


class KubernetesService:
    def __init__(self, registry: Registry, allocators: ServiceAllocators, apiserver_port: int):
        self.services = registry.store("", "services")
        self.allocators = allocators
        self.port = apiserver_port
        self._last_error: str | None = None

    def desired_ports(self) -> list[dict]:
        return [{"name": "https", "protocol": "TCP", "port": 443, "targetPort": self.port}]

    async def ensure(self) -> None:
        try:
            current = await self.services.get(NAMESPACE, NAME)
        except StatusError as exc:
            if exc.code != 404:
                raise
            await self._create()
            return
        spec = current.get("spec") or {}
        if spec.get("ports") != self.desired_ports() or spec.get("type") != "ClusterIP":
            def fix(obj: dict) -> dict:
                obj["spec"]["ports"] = self.desired_ports()
                obj["spec"]["type"] = "ClusterIP"
                return obj
            await self.services.guaranteed_update(NAMESPACE, NAME, fix, field_manager=FIELD_MANAGER)

    async def exists(self) -> bool:
        return await self.services.backend.get(self.services.info.key(NAMESPACE, NAME)) is not None

    async def _create(self) -> None:
        service = {
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": {"provider": "kubernetes", "component": "apiserver"}},
            "spec": {
                "type": "ClusterIP",
                "clusterIP": self.allocators.kubernetes_service_ips()[0],
                "ipFamilyPolicy": "SingleStack",
                "sessionAffinity": "None",
                "ports": self.desired_ports(),
            },
        }
        try:
            await self.services.create(NAMESPACE, service, field_manager=FIELD_MANAGER)
        except StatusError as exc:
            if exc.message != self._last_error:  # once, not every pass of the loop
                log.error("cannot create the kubernetes Service: %s", exc.message)
            self._last_error = exc.message


class SystemObjects:
    """The loop that keeps the system namespaces and the kubernetes Service (module docstring)."""

    def __init__(self, registry: Registry, service: KubernetesService, interval: float = RECONCILE_INTERVAL):
        self.registry = registry
        self.service = service
        self.interval = interval

    async def reconcile(self) -> None:
        for name in await ensure_system_namespaces(self.registry):
            log.warning("recreated namespace %s", name)
        if not await self.service.exists():
            await self.service.ensure()
            if await self.service.exists():
                log.warning("recreated service %s/%s", NAMESPACE, NAME)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.reconcile()
            except Exception:  # keep the loop alive; the next pass retries
                log.exception("keeping the system namespaces and the kubernetes Service failed")
