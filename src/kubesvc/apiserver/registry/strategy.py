"""Per-kind behaviour plugged into the generic store (k8s.io/apiserver registry/rest strategies).

The generic store (``store.py``) runs the same pipeline for every kind; a Strategy decides the
kind-specific parts, as upstream's ``RESTCreateStrategy`` / ``RESTUpdateStrategy`` /
``RESTGracefulDeleteStrategy`` do:

* what a create resets (Services and Pods start with a fresh status),
* what an update of the main resource keeps from the old object (``status`` when there is a
  status subresource) and what a status update keeps (everything but ``status``),
* whether PUT may create (upstream ``AllowCreateOnUpdate``: Endpoints, Leases, Nodes, Events),
* graceful deletion (a Pod bound to a node is only marked; its kubelet deletes it),
* extra storage operations committed in the same transaction as the object (the seam the
  ClusterIP/NodePort allocators use, so an allocation and its Service commit together).
"""

from __future__ import annotations

import copy
from typing import Callable, Mapping, Sequence

from kubesvc.api import defaults, validation
from kubesvc.api.errors import FieldError
from kubesvc.api.scheme import KindInfo
from kubesvc.storage.base import Op


class Strategy:
    allow_create_on_update = False
    # "status" subresource semantics: main-resource writes cannot change status
    status_subresource = False
    # metadata.generation counts spec changes (upstream: EndpointSlices; core kinds have none)
    bumps_generation = False

    def __init__(self, info: KindInfo):
        self.info = info
        self.status_subresource = "status" in info.subresources

    # ---- create ------------------------------------------------------------------------------
    def prepare_for_create(self, obj: dict) -> None:
        defaults.prepare_for_create(self.info.kind, obj)

    def default(self, obj: dict) -> None:
        defaults.apply_defaults(self.info.kind, obj)

    def validate(self, obj: dict) -> list[FieldError]:
        return validation.validate(self.info.kind, obj, namespaced=self.info.namespaced)

    # ---- update ------------------------------------------------------------------------------
    def prepare_for_update(self, new: dict, old: dict) -> None:
        if self.status_subresource:
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)

    def prepare_for_status_update(self, new: dict, old: dict) -> None:
        status = new.get("status")
        new.clear()
        new.update(copy.deepcopy(old))
        if status is None:
            new.pop("status", None)
        else:
            new["status"] = status

    def prepare_for_finalize(self, new: dict, old: dict) -> None:
        raise NotImplementedError  # only namespaces have /finalize; routing never gets here

    def validate_update(self, new: dict, old: dict) -> list[FieldError]:
        return validation.validate_update(self.info.kind, new, old, namespaced=self.info.namespaced)

    # ---- delete ------------------------------------------------------------------------------
    def deletion_blocked(self, obj: dict) -> bool:
        """Finalizers keep a deleted object (marked with deletionTimestamp) until removed."""
        return bool((obj.get("metadata") or {}).get("finalizers"))

    def mark_deleting(self, obj: dict) -> None:
        """Extra changes when an object is marked for deletion instead of removed."""

    def graceful_delete_seconds(self, obj: dict, options: dict) -> int:
        """Seconds the object should linger marked for deletion before removal; 0 = now."""
        return 0

    # ---- allocation seam ---------------------------------------------------------------------
    def create_ops(self, obj: dict) -> Sequence[Op]:
        return ()

    def update_ops(self, new: dict, old: dict) -> Sequence[Op]:
        return ()

    def delete_ops(self, obj: dict) -> Sequence[Op]:
        return ()


class ServiceStrategy(Strategy):
    """Service specifics before allocation: clusterIP/clusterIPs normalisation, keeping
    allocated values a PUT omits, and ipFamilies/ipFamilyPolicy for the cluster's families
    (upstream does the last in the allocator's initIPFamilyFields, after validation)."""

    def __init__(self, info: KindInfo, cluster_families: Sequence[str] = ("IPv4",)):
        super().__init__(info)
        self.cluster_families = list(cluster_families)

    def prepare_for_create(self, obj: dict) -> None:
        super().prepare_for_create(obj)
        defaults.normalize_cluster_ips(obj)

    def prepare_for_update(self, new: dict, old: dict) -> None:
        super().prepare_for_update(new, old)
        defaults.patch_allocated_values(new, old)
        defaults.normalize_cluster_ips(new, old)

    def validate(self, obj: dict) -> list[FieldError]:
        return super().validate(obj) or defaults.default_service_ip_families(obj, self.cluster_families)

    def validate_update(self, new: dict, old: dict) -> list[FieldError]:
        return super().validate_update(new, old) or defaults.default_service_ip_families(new, self.cluster_families, old)


class PodStrategy(Strategy):
    def graceful_delete_seconds(self, obj: dict, options: dict) -> int:
        """Upstream podStrategy.CheckGracefulDelete: an unscheduled or terminal Pod goes at once;
        otherwise the grace period from DeleteOptions, else the spec's (default 30 s)."""
        spec = obj.get("spec") or {}
        phase = (obj.get("status") or {}).get("phase")
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            return 0
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        try:
            return max(0, int(grace))
        except (TypeError, ValueError):
            return 30


class NamespaceStrategy(Strategy):
    def prepare_for_update(self, new: dict, old: dict) -> None:
        # spec.finalizers change only through /finalize; status only through /status
        new["spec"] = copy.deepcopy(old.get("spec", {}))
        new["status"] = copy.deepcopy(old.get("status", {}))

    def deletion_blocked(self, obj: dict) -> bool:
        # spec.finalizers ("kubernetes") hold a namespace until its content is gone
        return super().deletion_blocked(obj) or bool((obj.get("spec") or {}).get("finalizers"))

    def mark_deleting(self, obj: dict) -> None:
        obj.setdefault("status", {})["phase"] = "Terminating"

    def prepare_for_finalize(self, new: dict, old: dict) -> None:
        finalizers = (new.get("spec") or {}).get("finalizers")
        new.clear()
        new.update(copy.deepcopy(old))
        new.setdefault("spec", {})["finalizers"] = finalizers if isinstance(finalizers, list) else []


class CreateOnUpdateStrategy(Strategy):
    allow_create_on_update = True


class EndpointSliceStrategy(Strategy):
    bumps_generation = True


STRATEGIES: dict[str, type[Strategy]] = {
    "Service": ServiceStrategy,
    "Pod": PodStrategy,
    "Namespace": NamespaceStrategy,
    "Endpoints": CreateOnUpdateStrategy,
    "Lease": CreateOnUpdateStrategy,
    "Node": CreateOnUpdateStrategy,
    "Event": CreateOnUpdateStrategy,
    "EndpointSlice": EndpointSliceStrategy,
}


def strategy_for(info: KindInfo, overrides: Mapping[str, Callable[[KindInfo], Strategy]] | None = None) -> Strategy:
    factory = (overrides or {}).get(info.kind) or STRATEGIES.get(info.kind, Strategy)
    return factory(info)
