"""ServiceCIDRs: the default one mirrors ``--service-cluster-ip-range``."""

from __future__ import annotations

import contextlib

from kubesvc.api.errors import StatusError
from kubesvc.apiserver.allocator.service import DEFAULT_SERVICE_CIDR
from kubesvc.apiserver.registry.store import Registry

FIELD_MANAGER = "kubernetes-service-cidr-controller"


def ensure_default_service_cidr(registry: Registry, cidrs: list[str]) -> None:
    store = registry.store("networking.k8s.io", "servicecidrs")
    with contextlib.suppress(StatusError):
        store.create(None, {"metadata": {"name": DEFAULT_SERVICE_CIDR}, "spec": {"cidrs": cidrs}}, field_manager=FIELD_MANAGER)
