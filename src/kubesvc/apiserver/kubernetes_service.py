"""The ``default/kubernetes`` Service: how Pods find the apiserver (upstream's
pkg/controlplane/controller/kubernetesservice).

It holds the first address of the primary service range (network+1, e.g. 10.96.0.1, the
first slot of the static band, so dynamic allocation never takes it), one port ``https``
443/TCP whose targetPort is the apiserver's secure port, labels ``provider: kubernetes`` and
``component: apiserver``, and ``ipFamilyPolicy: SingleStack``. The apiserver creates it at
start and puts the port back if someone changed it.
"""

from __future__ import annotations

import logging

from kubesvc.api.errors import StatusError
from kubesvc.apiserver.allocator.service import ServiceAllocators
from kubesvc.apiserver.registry.store import Registry

log = logging.getLogger("kubesvc.apiserver")

NAME, NAMESPACE = "kubernetes", "default"
FIELD_MANAGER = "kube-apiserver"


class KubernetesService:
    def __init__(self, registry: Registry, allocators: ServiceAllocators, apiserver_port: int):
        self.services = registry.store("", "services")
        self.allocators = allocators
        self.port = apiserver_port

    def desired_ports(self) -> list[dict]:
        return [{"name": "https", "protocol": "TCP", "port": 443, "targetPort": self.port}]

    def ensure(self) -> None:
        try:
            current = self.services.get(NAMESPACE, NAME)
        except StatusError as exc:
            if exc.code != 404:
                raise
            self._create()
            return
        spec = current.get("spec") or {}
        if spec.get("ports") != self.desired_ports() or spec.get("type") != "ClusterIP":
            def fix(obj: dict) -> dict:
                obj["spec"]["ports"] = self.desired_ports()
                obj["spec"]["type"] = "ClusterIP"
                return obj
            self.services.guaranteed_update(NAMESPACE, NAME, fix, field_manager=FIELD_MANAGER)

    def _create(self) -> None:
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
            self.services.create(NAMESPACE, service, field_manager=FIELD_MANAGER)
        except StatusError as exc:
            log.error("cannot create the kubernetes Service: %s", exc.message)
