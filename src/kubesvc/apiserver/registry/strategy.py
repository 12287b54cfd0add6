"""Per-kind behaviour plugged into the generic store (k8s.io/apiserver registry/rest strategies).

The generic store (``store.py``) runs the same pipeline for every kind; a Strategy decides the
kind-specific parts, as upstream's ``RESTCreateStrategy`` / ``RESTUpdateStrategy`` /
``RESTGracefulDeleteStrategy`` do:

* what a create resets (Services and Pods start with a fresh status),
* what an update of the main resource keeps from the old object (``status`` when there is a
  status subresource) and what a status update keeps (everything but ``status``),
* whether PUT may create (upstream ``AllowCreateOnUpdate``: Endpoints, Leases, Nodes, Events),
* graceful deletion (a Pod bound to a node is only marked; its kubelet deletes it),
* the default garbage-collection policy a DELETE without one gets (upstream
  ``GarbageCollectionDeleteStrategy``): none for most kinds, ``Unsupported`` for Events, which
  then never get the ``orphan`` / ``foregroundDeletion`` finalizers,
* what a write does besides storing the object (``begin_create`` / ``begin_update`` /
  ``begin_delete`` return a :class:`Txn`): the ClusterIP/NodePort allocators add their
  records to the object's storage transaction, so an allocation and its Service commit
  together; the allocators' index learns of IPAddress and ServiceCIDR writes on commit.
"""

from __future__ import annotations

from typing import Callable, Mapping, Protocol

from kubesvc.api import defaults, validation
from kubesvc.api.decode import copy_json
from kubesvc.api.errors import FieldError
from kubesvc.api.scheme import KindInfo
from kubesvc.apiserver.registry.txn import Txn

_ABSENT = object()


class Allocations(Protocol):
    """What the Service, IPAddress and ServiceCIDR strategies need of the ClusterIP/NodePort
    allocators (``allocator.service.ServiceAllocators`` implements it). The registry names
    this protocol, not the allocator package, which sits above it (it reads and writes through
    the registry): upstream's ``registry/core/service/storage`` holds its allocators behind
    interfaces the same way."""

    async def begin_create(self, svc: dict, dry_run: bool) -> Txn:
        """Allocate a new Service's ClusterIPs and NodePorts into a transaction."""

    async def begin_update(self, new: dict, old: dict, dry_run: bool) -> Txn:
        """Allocate what an update adds and release what it drops."""

    async def begin_delete(self, svc: dict) -> Txn:
        """Release a deleted Service's ClusterIPs and NodePorts."""

    def mark_ip(self, ip: str, taken: bool) -> None:
        """An IPAddress object was written (taken) or deleted: keep the allocators' index."""

    async def sync_cidrs(self) -> None:
        """ServiceCIDRs changed: recompute the usable ranges (reads them from the store)."""

    async def sync_cidrs_after_commit(self) -> None:
        """``sync_cidrs`` after a committed ServiceCIDR write: a store that cannot be read then
        is logged, never raised (the write has committed; the allocators' watch catches up)."""


class Strategy:
    allow_create_on_update = False
    # "status" subresource semantics: main-resource writes cannot change status
    status_subresource = False
    # metadata.generation counts spec changes (upstream: EndpointSlices; core kinds have none)
    bumps_generation = False
    # upstream RESTGracefulDeleteStrategy: a DELETE may only mark the object, for a grace period
    graceful_deletion = False
    # upstream DefaultGarbageCollectionPolicy: "" (none: Background), "OrphanDependents",
    # "DeleteDependents" or "Unsupported" (never set the garbage collector's finalizers)
    gc_policy = ""

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
                new["status"] = copy_json(old["status"])
            else:
                new.pop("status", None)

    def prepare_for_status_update(self, new: dict, old: dict) -> None:
        """Everything but status is the live object's (a copy of it). The parts ``new`` already
        holds equal (a status write's metadata and spec, decoded from the live object) are kept
        rather than copied again: equal decoded JSON, and new's own."""
        status = new.get("status")
        kept: dict = {}
        for key, value in old.items():
            if key == "status":
                if status is not None:
                    kept[key] = status
                continue
            mine = new.get(key, _ABSENT)
            kept[key] = mine if type(mine) is type(value) and mine == value else copy_json(value)
        if status is not None:
            kept.setdefault("status", status)
        new.clear()
        new.update(kept)

    def generation_changed(self, new: dict, old: dict) -> bool:
        """Whether an update is a new generation (only asked when ``bumps_generation``)."""
        return new.get("spec") != old.get("spec")

    def prepare_for_finalize(self, new: dict, old: dict) -> None:
        raise NotImplementedError  # only namespaces have /finalize; routing never gets here

    def prepare_for_subresource_update(self, subresource: str, new: dict, old: dict) -> None:
        """A view subresource other than status/finalize (certificatesigningrequests/approval)."""
        self.prepare_for_update(new, old)

    def validate_update(self, new: dict, old: dict) -> list[FieldError]:
        return validation.validate_update(self.info.kind, new, old, namespaced=self.info.namespaced)

    def validate_subresource_update(self, subresource: str, new: dict, old: dict) -> list[FieldError]:
        """A subresource write (status, finalize, approval); the main resource's rules unless a
        kind has its own (CertificateSigningRequests: upstream's per-subresource validation)."""
        return self.validate_update(new, old)

    # ---- delete ------------------------------------------------------------------------------
    def deletion_blocked(self, obj: dict) -> bool:
        """Finalizers keep a deleted object (marked with deletionTimestamp) until removed."""
        return bool((obj.get("metadata") or {}).get("finalizers"))

    def mark_deleting(self, obj: dict) -> None:
        """Extra changes when an object is marked for deletion instead of removed."""

    def graceful_delete_seconds(self, obj: dict, options: dict) -> int:
        """Seconds the object should linger marked for deletion before removal; 0 = now.
        Only asked when ``graceful_deletion`` (upstream ``CheckGracefulDelete``)."""
        return 0

    # ---- side effects committed with the write ------------------------------------------------
    # Called after defaulting and before validation (upstream's BeginCreate/BeginUpdate hooks
    # run before BeforeCreate/BeforeUpdate), for the main resource and every subresource.
    async def begin_create(self, obj: dict, dry_run: bool) -> Txn:
        return Txn()

    async def begin_update(self, new: dict, old: dict, dry_run: bool, subresource: str) -> Txn:
        return Txn()

    async def begin_delete(self, obj: dict) -> Txn:
        return Txn()


class ServiceStrategy(Strategy):
    """clusterIP/clusterIPs normalisation, keeping allocated values a PUT omits, and the
    allocators (ipFamilies/ipFamilyPolicy are settled there, as upstream's initIPFamilyFields).
    With the ``PreferSameTrafficDistribution`` gate off (``prefer_same_traffic_distribution``),
    ``trafficDistribution`` may only be ``PreferClose``, on create and update alike: upstream's
    ``validateServiceTrafficDistribution`` reads the gate, with no exception for a stored value."""

    def __init__(self, info: KindInfo, allocators: Allocations, *, prefer_same_traffic_distribution: bool = True):
        super().__init__(info)
        self.allocators = allocators
        self.prefer_same_traffic_distribution = prefer_same_traffic_distribution
        self._metadata_valid: dict[int, dict] = {}  # id -> object whose metadata begin_create found valid

    def _gated(self, errors: list[FieldError], obj: dict) -> list[FieldError]:
        if self.prefer_same_traffic_distribution:
            return errors
        value = (obj.get("spec") or {}).get("trafficDistribution") if isinstance(obj.get("spec"), dict) else None
        return ([e for e in errors if e.field != validation.TRAFFIC_DISTRIBUTION_PATH]
                + validation.traffic_distribution_errors(value if isinstance(value, str) else None, prefer_same=False))

    def validate(self, obj: dict) -> list[FieldError]:
        checked = self._metadata_valid.pop(id(obj), None) is obj  # begin_create found it valid just before
        return self._gated(validation.validate_service(obj, namespaced=self.info.namespaced, metadata_valid=checked), obj)

    def validate_update(self, new: dict, old: dict) -> list[FieldError]:
        return self._gated(super().validate_update(new, old), new)

    def prepare_for_create(self, obj: dict) -> None:
        super().prepare_for_create(obj)
        defaults.normalize_cluster_ips(obj)

    def prepare_for_update(self, new: dict, old: dict) -> None:
        super().prepare_for_update(new, old)
        defaults.patch_allocated_values(new, old)
        defaults.normalize_cluster_ips(new, old)

    async def begin_create(self, obj: dict, dry_run: bool) -> Txn:
        if validation.validate_service_metadata(obj):
            return Txn()  # nothing to allocate for: validation reports the bad metadata
        # allocation changes only the spec: validate (next, in the store's create) need not
        # check this metadata again; an object whose create failed in between is forgotten
        # with the rest once there are many
        if len(self._metadata_valid) >= 64:
            self._metadata_valid.clear()
        self._metadata_valid[id(obj)] = obj
        return await self.allocators.begin_create(obj, dry_run)

    async def begin_update(self, new: dict, old: dict, dry_run: bool, subresource: str) -> Txn:
        if subresource:
            return Txn()
        return await self.allocators.begin_update(new, old, dry_run)

    async def begin_delete(self, obj: dict) -> Txn:
        return await self.allocators.begin_delete(obj)


class IPAddressStrategy(Strategy):
    """IPAddress writes through the API (users, the repair loop) keep the allocators' index
    exact: an IPAddress created by hand takes its IP out of the pool."""

    def __init__(self, info: KindInfo, allocators: Allocations):
        super().__init__(info)
        self.allocators = allocators

    async def begin_create(self, obj: dict, dry_run: bool) -> Txn:
        return self._mark(obj, True, dry_run)

    async def begin_delete(self, obj: dict) -> Txn:
        return self._mark(obj, False, False)

    def _mark(self, obj: dict, taken: bool, dry_run: bool) -> Txn:
        txn = Txn()
        if not dry_run:
            name = (obj.get("metadata") or {}).get("name") or ""
            txn.on_commit(lambda: self.allocators.mark_ip(name, taken))
        return txn


class ServiceCIDRStrategy(Strategy):
    """Any committed ServiceCIDR change (spec, Ready condition, deletion) re-reads the usable
    ranges, so a new ServiceCIDR serves the very next Service create."""

    def __init__(self, info: KindInfo, allocators: Allocations, on_change: Callable[[], None] = lambda: None):
        super().__init__(info)
        self.allocators = allocators
        self.on_change = on_change

    def prepare_for_create(self, obj: dict) -> None:
        super().prepare_for_create(obj)
        obj.pop("status", None)

    async def begin_create(self, obj: dict, dry_run: bool) -> Txn:
        return self._resync(dry_run)

    async def begin_update(self, new: dict, old: dict, dry_run: bool, subresource: str) -> Txn:
        return self._resync(dry_run)

    async def begin_delete(self, obj: dict) -> Txn:
        return self._resync(False)

    def _resync(self, dry_run: bool) -> Txn:
        txn = Txn()
        if not dry_run:
            txn.on_commit(self.allocators.sync_cidrs_after_commit)
            txn.on_commit(self.on_change)
        return txn


class PodStrategy(Strategy):
    graceful_deletion = True

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

    def prepare_for_status_update(self, new: dict, old: dict) -> None:
        """podStatusStrategy.PrepareForUpdate: besides the live spec and metadata, a status
        without ``qosClass`` keeps the live one ("the Pod QoS is immutable and populated at
        creation time ... backfill it for backward compatibility"): a client that writes the
        status without it (an older kubelet, a hand-made PUT) is not refused as changing it."""
        super().prepare_for_status_update(new, old)
        status, live = new.get("status"), old.get("status")
        if isinstance(status, dict) and isinstance(live, dict) and not status.get("qosClass") and live.get("qosClass"):
            status["qosClass"] = live["qosClass"]

    def validate_subresource_update(self, subresource: str, new: dict, old: dict) -> list[FieldError]:
        """podStatusStrategy.ValidateUpdate: a status write is checked by ValidatePodStatusUpdate
        (metadata, the status' node name, nominated node, QoS class and IPs), not by the whole
        Pod's update rules: its spec is the live one, copied by prepare_for_status_update."""
        if subresource == "status":
            return validation.validate_status_update(self.info.kind, new, old, namespaced=self.info.namespaced)
        return super().validate_subresource_update(subresource, new, old)


class NamespaceStrategy(Strategy):
    def prepare_for_update(self, new: dict, old: dict) -> None:
        # spec.finalizers change only through /finalize; status only through /status
        new["spec"] = copy_json(old.get("spec", {}))
        new["status"] = copy_json(old.get("status", {}))

    def deletion_blocked(self, obj: dict) -> bool:
        # spec.finalizers ("kubernetes") hold a namespace until its content is gone
        return super().deletion_blocked(obj) or bool((obj.get("spec") or {}).get("finalizers"))

    def mark_deleting(self, obj: dict) -> None:
        obj.setdefault("status", {})["phase"] = "Terminating"

    def generation_changed(self, new: dict, old: dict) -> bool:
        """Whether an update is a new generation (only asked when ``bumps_generation``)."""
        return new.get("spec") != old.get("spec")

    def prepare_for_finalize(self, new: dict, old: dict) -> None:
        finalizers = (new.get("spec") or {}).get("finalizers")
        new.clear()
        new.update(copy_json(old))
        new.setdefault("spec", {})["finalizers"] = finalizers if isinstance(finalizers, list) else []


class CreateOnUpdateStrategy(Strategy):
    allow_create_on_update = True


class EventStrategy(CreateOnUpdateStrategy):
    """Events are never garbage-collection owners (upstream eventStrategy returns
    ``rest.Unsupported``); the garbage collector does not watch them either."""

    gc_policy = "Unsupported"


class EndpointSliceStrategy(Strategy):
    """EndpointSlices have no spec: everything outside metadata, and the labels, count as the
    generation (upstream ``endpointslice`` strategy ``PrepareForUpdate``). The EndpointSlice
    controller relies on it to tell its own writes from a stale cache.

    With the ``PreferSameTrafficDistribution`` gate off (``prefer_same_traffic_distribution``),
    endpoints' ``hints.forNodes`` are dropped on create, and on update unless the stored slice
    already has them on some endpoint (upstream's ``dropDisabledFieldsOnCreate`` /
    ``dropDisabledFieldsOnUpdate``; zone hints, TopologyAwareHints, are GA and always kept)."""

    bumps_generation = True

    def __init__(self, info: KindInfo, *, prefer_same_traffic_distribution: bool = True):
        super().__init__(info)
        self.prefer_same_traffic_distribution = prefer_same_traffic_distribution

    def prepare_for_create(self, obj: dict) -> None:
        super().prepare_for_create(obj)
        if not self.prefer_same_traffic_distribution:
            _drop_node_hints(obj)

    def prepare_for_update(self, new: dict, old: dict) -> None:
        super().prepare_for_update(new, old)
        if not self.prefer_same_traffic_distribution and not any(
                isinstance(hints := (e.get("hints") if isinstance(e, dict) else None), dict) and hints.get("forNodes") is not None
                for e in _endpoints(old)):
            _drop_node_hints(new)

    def generation_changed(self, new: dict, old: dict) -> bool:
        def body(obj: dict) -> dict:
            return {k: v for k, v in obj.items() if k not in ("metadata", "apiVersion", "kind")}

        return body(new) != body(old) or (new["metadata"].get("labels") or {}) != (old["metadata"].get("labels") or {})


def _endpoints(endpoint_slice: dict) -> list:
    endpoints = endpoint_slice.get("endpoints")
    return endpoints if isinstance(endpoints, list) else []


def _drop_node_hints(endpoint_slice: dict) -> None:
    for endpoint in _endpoints(endpoint_slice):
        hints = endpoint.get("hints") if isinstance(endpoint, dict) else None
        if isinstance(hints, dict):
            hints.pop("forNodes", None)


def _csr_strategy(info: KindInfo) -> Strategy:
    """Without authorization (tests) no signer checks; ``auth.modes`` gives the chain."""
    from kubesvc.apiserver.registry.certificates import CSRStrategy

    return CSRStrategy(info, None)


def _workload_strategy(info: KindInfo) -> Strategy:
    """Deployments, ReplicaSets, DaemonSets, ReplicationControllers, Jobs (``registry/workloads.py``)."""
    from kubesvc.apiserver.registry.workloads import strategy

    return strategy(info)


STRATEGIES: dict[str, Callable[[KindInfo], Strategy]] = {
    "Pod": PodStrategy,
    "Namespace": NamespaceStrategy,
    "Endpoints": CreateOnUpdateStrategy,
    "Lease": CreateOnUpdateStrategy,
    "Node": CreateOnUpdateStrategy,
    "Event": EventStrategy,
    "EndpointSlice": EndpointSliceStrategy,
    "CertificateSigningRequest": _csr_strategy,
    **{kind: _workload_strategy for kind in ("Deployment", "ReplicaSet", "DaemonSet", "ReplicationController", "Job", "CronJob")},
}


def allocation_strategies(allocators: Allocations, on_service_cidr_change: Callable[[], None] = lambda: None, *,
                          feature_gates: Mapping[str, bool] | None = None) -> dict[str, Callable[[KindInfo], Strategy]]:
    """Strategy overrides wiring Services, IPAddresses and ServiceCIDRs to the allocators (and
    the Service and EndpointSlice strategies to the ``PreferSameTrafficDistribution`` gate)."""
    prefer_same = (feature_gates or {}).get("PreferSameTrafficDistribution", True)
    return {
        "Service": lambda info: ServiceStrategy(info, allocators, prefer_same_traffic_distribution=prefer_same),
        "EndpointSlice": lambda info: EndpointSliceStrategy(info, prefer_same_traffic_distribution=prefer_same),
        "IPAddress": lambda info: IPAddressStrategy(info, allocators),
        "ServiceCIDR": lambda info: ServiceCIDRStrategy(info, allocators, on_service_cidr_change),
    }


def strategy_for(info: KindInfo, overrides: Mapping[str, Callable[[KindInfo], Strategy]] | None = None) -> Strategy:
    factory = (overrides or {}).get(info.kind) or STRATEGIES.get(info.kind, Strategy)
    return factory(info)
