"""ServiceCIDRs: where ClusterIPs come from, and the two controllers that look after them.

A **ServiceCIDR** (networking.k8s.io/v1, cluster-scoped) is a range ClusterIPs may be
allocated from: ``spec.cidrs`` holds one CIDR, or two of different families (dual stack).
The apiserver's IP allocators (``service.py``, ``ipalloc.py``) allocate from every *usable*
ServiceCIDR: not being deleted, and whose ``Ready`` condition is not ``False``; the default
one first, the others by creation time. Adding a ServiceCIDR therefore grows the Service IP
space at run time, without restarting anything.

* The **default** ServiceCIDR is named ``kubernetes`` and mirrors the apiserver's
  ``--service-cluster-ip-range`` flag (upstream: pkg/controlplane/controller/
  defaultservicecidr). It is created from the flag CIDRs; when the flag goes from single to
  dual stack keeping the same first CIDR, the object gains the second CIDR (the only change
  validation allows on ``spec.cidrs``). Any other difference is never "fixed" (the object is
  the truth once it exists: IPs were allocated from it); it is reported once as a Warning
  event ``KubernetesDefaultServiceCIDRInconsistent``. When it matches the flags and has no
  Ready condition (or Unknown), this controller sets ``Ready=True``.
* Every ServiceCIDR, the default one included, gets the finalizer
  ``networking.k8s.io/service-cidr-finalizer`` and ``Ready=True`` (upstream: the ServiceCIDR
  controller of kube-controller-manager, pkg/controller/servicecidrs; here it runs in the
  apiserver). The finalizer is what makes deletion safe: ``kubectl delete servicecidr x``
  only marks the object (``deletionTimestamp``); the allocators stop using it at once; and the
  object only goes when this controller removes the finalizer, which it does when no ClusterIP
  would be orphaned:

  - if each of its CIDRs is also covered by another ServiceCIDR (same or a larger prefix),
    every IP in it still belongs to a range: it may go;
  - otherwise, if some IPAddress managed by ``ipallocator.k8s.io`` lies in it and in no other
    ServiceCIDR, it stays, ``Ready=False`` reason ``Terminating``, message "There are still
    IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR",
    until those Services are deleted (or a covering ServiceCIDR is created);
  - it then waits a **grace period** (10 s after the deletionTimestamp) before removing the
    finalizer: upstream's allocators learn of the deletion through informers, so an
    allocation may still be in flight from a ServiceCIDR that looked usable a moment ago;
    the grace lets such IPs land (and block the deletion) instead of being orphaned. Here the
    index is updated on commit, but the grace is kept: it is what clients observe.

The decisions are pure functions (:func:`plan_default`, :func:`plan_service_cidr`,
:func:`can_delete`) over plain objects; :class:`ServiceCIDRController` reads the store,
applies the plans (status through the ``status`` subresource, finalizers through the main
resource) and runs them in a loop woken by ServiceCIDR writes.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Sequence

from kubesvc.api.conditions import transition_time
from kubesvc.api.errors import StatusError
from kubesvc.util.ipnet import parse_cidr_sloppy, parse_ip_sloppy
from kubesvc.apiserver.allocator import records
from kubesvc.apiserver.allocator.ranges import prefix_contains_ip
from kubesvc.apiserver.allocator.service import DEFAULT_SERVICE_CIDR
from kubesvc.apiserver.events import EventRecorder
from kubesvc.apiserver.registry.store import ListOptions, Registry
from kubesvc.util.aio import wait_event
from kubesvc.util.clock import Clock
from kubesvc.util.golang import parse_rfc3339

log = logging.getLogger("kubesvc.apiserver.servicecidr")

FIELD_MANAGER = "kubernetes-service-cidr-controller"  # the default ServiceCIDR's controller
CONTROLLER_FIELD_MANAGER = "service-cidr-controller"  # the finalizer / Ready controller
FINALIZER = "networking.k8s.io/service-cidr-finalizer"
DELETION_GRACE_SECONDS = 10.0

CONDITION_READY = "Ready"
REASON_TERMINATING = "Terminating"
DEFAULT_READY_MESSAGE = "Kubernetes default Service CIDR is ready"
READY_MESSAGE = "Kubernetes Service CIDR is ready"
TERMINATING_MESSAGE = "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR"
REASON_INCONSISTENT = "KubernetesDefaultServiceCIDRInconsistent"
REASON_DEFAULT_ERROR = "KubernetesDefaultServiceCIDRError"
REASON_ERROR = "KubernetesServiceCIDRError"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


# ---- small pure helpers ------------------------------------------------------------------------

def go_list(values: Iterable[str]) -> str:
    """A []string as Go's ``%v`` prints it: ``[10.96.0.0/12 fd00::/108]``."""
    return "[" + " ".join(values) + "]"


def _meta(obj: dict) -> dict:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _name(obj: dict) -> str:
    return _meta(obj).get("name") or ""


def _cidrs(obj: dict) -> list[str]:
    spec = obj.get("spec")
    cidrs = spec.get("cidrs") if isinstance(spec, dict) else None
    return [c for c in cidrs if isinstance(c, str)] if isinstance(cidrs, list) else []


# a pass looks at every ServiceCIDR's networks once per IPAddress: parse each CIDR once
_parse_cidr = functools.lru_cache(maxsize=1024)(parse_cidr_sloppy)


def _networks(obj: dict) -> list[Network]:
    return [net for net in (_parse_cidr(c) for c in _cidrs(obj)) if net is not None]


def is_deleting(obj: dict) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def has_finalizer(obj: dict) -> bool:
    return FINALIZER in (_meta(obj).get("finalizers") or [])


def find_condition(obj: dict, type_: str = CONDITION_READY) -> dict | None:
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for condition in conditions if isinstance(conditions, list) else []:
        if isinstance(condition, dict) and condition.get("type") == type_:
            return condition
    return None


def ready_condition(obj: dict, status: str, reason: str, message: str, now: datetime) -> dict | None:
    """The Ready condition to write, or None when the current one already says this (status,
    reason and message). The transition time moves only when the status does, as
    ``meta.SetStatusCondition``. ``reason`` may be "" (upstream's Ready=True carries none; the
    stored metav1.Condition then serialises ``reason: ""``, which clients require present)."""
    current = find_condition(obj)
    if current is not None and (current.get("status"), current.get("reason") or "", current.get("message") or "") == (status, reason, message):
        return None
    return {"type": CONDITION_READY, "status": status, "lastTransitionTime": transition_time(current, status, now), "reason": reason, "message": message}


def with_condition(obj: dict, condition: dict) -> dict:
    """``obj`` with ``condition`` replacing the one of its type (other types kept)."""
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    conditions = [c for c in status.get("conditions") or [] if not (isinstance(c, dict) and c.get("type") == condition["type"])]
    obj["status"] = {**status, "conditions": [*conditions, condition]}
    return obj


def containing_address(all_cidrs: Sequence[dict], ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list[str]:
    """Names of the ServiceCIDRs (deleting ones included, as upstream) containing ``ip``."""
    return [_name(c) for c in all_cidrs for net in _networks(c) if prefix_contains_ip(net, ip)]


def containing_prefix(all_cidrs: Sequence[dict], prefix: Network) -> list[str]:
    """Names of the ServiceCIDRs with a CIDR equal to or larger than ``prefix`` covering it."""
    return [_name(c) for c in all_cidrs for net in _networks(c) if net.version == prefix.version and net.supernet_of(prefix)]


# ---- the default ServiceCIDR -------------------------------------------------------------------

@dataclass(frozen=True)
class DefaultPlan:
    """What the default ServiceCIDR controller does next (at most one write)."""

    create: tuple[str, ...] | None = None   # create ``kubernetes`` with these CIDRs
    upgrade: tuple[str, ...] | None = None  # single -> dual stack: spec.cidrs becomes this
    condition: dict | None = None           # Ready condition to write through /status
    warning: tuple[str, str, str] | None = None  # (once-key, reason, message) for a Warning event


def plan_default(obj: dict | None, flag_cidrs: Sequence[str], now: datetime) -> DefaultPlan:
    """Upstream defaultservicecidr Controller.sync + syncStatus, for the current object."""
    flags = tuple(flag_cidrs)
    if obj is None:
        return DefaultPlan(create=flags)
    spec_cidrs = _cidrs(obj)
    if len(flags) == 2 and len(spec_cidrs) == 1 and flags[0] == spec_cidrs[0]:
        return DefaultPlan(upgrade=flags)
    if is_deleting(obj):
        return DefaultPlan()  # the ServiceCIDR controller owns a deleting object's status
    if list(flags) != spec_cidrs:
        message = f"The default ServiceCIDR {go_list(spec_cidrs)} does not match the controller flag configurations {go_list(flags)}"
        return DefaultPlan(warning=("inconsistent", REASON_INCONSISTENT, message))
    current = find_condition(obj)
    status = current.get("status") if current is not None else None
    if status == "False":
        # someone else said not ready: report, never overwrite (that would hot-loop)
        reason = current.get("reason") or ""
        return DefaultPlan(warning=("not-ready", reason, "Configuration matches, but " + (current.get("message") or "")))
    if status == "True":
        return DefaultPlan()
    return DefaultPlan(condition=ready_condition(obj, "True", "", DEFAULT_READY_MESSAGE, now))


# ---- every ServiceCIDR -------------------------------------------------------------------------

@dataclass(frozen=True)
class ServiceCIDRPlan:
    """What the ServiceCIDR controller does next for one object."""

    add_finalizer: bool = False
    condition: dict | None = None       # Ready condition to write through /status
    remove_finalizer: bool = False      # the Store then deletes the object
    wait_seconds: float | None = None   # deletion allowed, grace still running: look again then


def has_parent(obj: dict, all_cidrs: Sequence[dict]) -> bool:
    """Every CIDR of ``obj`` is also covered by another ServiceCIDR (same or larger prefix),
    so no IP in it can be orphaned. ``all_cidrs`` includes ``obj``."""
    name = _name(obj)
    for net in _networks(obj):
        containers = containing_prefix(all_cidrs, net)
        if not containers or containers == [name]:
            return False
    return True


def can_delete(obj: dict, all_cidrs: Sequence[dict], ipaddresses: Iterable[dict]) -> bool:
    """Upstream canDeleteCIDR: no IPAddress of the apiserver's allocator would be left in no
    ServiceCIDR. ``all_cidrs`` includes ``obj``."""
    if has_parent(obj, all_cidrs):
        return True
    name = _name(obj)
    networks = _networks(obj)
    families = {f"IPv{net.version}" for net in networks}
    for ip_obj in ipaddresses:
        labels = _meta(ip_obj).get("labels") or {}
        if labels.get(records.LABEL_MANAGED_BY) != records.IPALLOCATOR_MANAGER or labels.get(records.LABEL_IP_FAMILY) not in families:
            continue
        address = parse_ip_sloppy(_name(ip_obj))
        if address is None or not any(prefix_contains_ip(net, address) for net in networks):
            continue
        if containing_address(all_cidrs, address) == [name]:
            return False
    return True


def needs_ip_addresses(obj: dict, all_cidrs: Sequence[dict]) -> bool:
    """Whether planning ``obj`` has to look at IPAddresses (a deletion without a parent)."""
    return is_deleting(obj) and not has_parent(obj, all_cidrs)


def plan_service_cidr(obj: dict, all_cidrs: Sequence[dict], ipaddresses: Iterable[dict], now: datetime) -> ServiceCIDRPlan:
    """Upstream servicecidrs Controller.sync for one ServiceCIDR."""
    if not is_deleting(obj):
        return ServiceCIDRPlan(add_finalizer=not has_finalizer(obj), condition=ready_condition(obj, "True", "", READY_MESSAGE, now))
    if not can_delete(obj, all_cidrs, ipaddresses):
        return ServiceCIDRPlan(condition=ready_condition(obj, "False", REASON_TERMINATING, TERMINATING_MESSAGE, now))
    if not has_finalizer(obj):
        return ServiceCIDRPlan()
    try:
        elapsed = (now - parse_rfc3339(_meta(obj)["deletionTimestamp"])).total_seconds()
    except (ValueError, TypeError):
        elapsed = DELETION_GRACE_SECONDS
    if elapsed < DELETION_GRACE_SECONDS:
        return ServiceCIDRPlan(wait_seconds=DELETION_GRACE_SECONDS - elapsed)
    return ServiceCIDRPlan(remove_finalizer=True)


# ---- the controller ----------------------------------------------------------------------------

class ServiceCIDRController:
    """Both controllers in one loop: the default ``kubernetes`` ServiceCIDR first, then every
    ServiceCIDR's finalizer, Ready condition and deletion."""

    def __init__(self, registry: Registry, clock: Clock, flag_cidrs: Sequence[str]):
        """``flag_cidrs`` as upstream holds them (``net.IPNet.String()``: host bits masked)."""
        self.registry = registry
        self.clock = clock
        self.flag_cidrs = list(flag_cidrs)
        self.store = registry.store("networking.k8s.io", "servicecidrs")
        self.backend = registry.backend
        self.default_events = EventRecorder(registry, clock, FIELD_MANAGER)
        self.events = EventRecorder(registry, clock, CONTROLLER_FIELD_MANAGER)
        self._reported: set[str] = set()  # once-keys of the default controller's warnings
        self._wake = asyncio.Event()

    # ---- waking -------------------------------------------------------------------------------
    def kick(self) -> None:
        """Ask for a pass soon (cheap: commit hooks call it, on the event loop)."""
        self._wake.set()

    async def run(self, interval: float = 10.0) -> None:
        """Sync now, then whenever kicked, every ``interval`` seconds, and when a deleting
        ServiceCIDR's grace period runs out. A failed pass is logged; the next one retries."""
        while True:
            self._wake.clear()
            due: float | None = None
            try:
                due = await self.sync()
            except Exception:
                log.exception("ServiceCIDR sync failed")
            timeout = interval if due is None else min(interval, max(due, 0.01))
            await wait_event(self._wake, timeout)

    # ---- one pass -----------------------------------------------------------------------------
    async def sync(self) -> float | None:
        """One pass over all ServiceCIDRs, the default one first. Returns the seconds until a
        deleting ServiceCIDR's grace period ends (the next pass then frees it), or None."""
        try:
            await self.sync_default()
        except StatusError as exc:  # upstream these are two controllers: one failing does not stop the other
            log.warning("default ServiceCIDR: %s", exc.message)
        items, _ = await self.store.list(None, ListOptions())
        due: float | None = None
        now = self.clock.now()
        for obj in items:
            ips = await self._ip_addresses_in(obj) if needs_ip_addresses(obj, items) else []
            plan = plan_service_cidr(obj, items, ips, now)
            try:
                await self._apply(obj, plan)
            except StatusError as exc:
                if exc.code != 404:
                    log.warning("ServiceCIDR %s: %s", _name(obj), exc.message)
            if plan.wait_seconds is not None:
                due = plan.wait_seconds if due is None else min(due, plan.wait_seconds)
        return due

    async def _ip_addresses_in(self, obj: dict) -> list[dict]:
        """The IPAddresses inside ``obj``'s CIDRs: chosen by key (the name is the IP), so only
        those few are decoded."""
        networks = _networks(obj)
        found = []
        for kv in (await self.backend.list(records.IP_ADDRESS_PREFIX)).kvs:
            address = parse_ip_sloppy(kv.key[len(records.IP_ADDRESS_PREFIX):])
            if address is not None and any(prefix_contains_ip(net, address) for net in networks):
                found.append(json.loads(kv.value))
        return found

    async def sync_default(self) -> None:
        """The default ServiceCIDR controller's pass (upstream runs it until it succeeds before
        the apiserver serves): create, upgrade to dual stack, or mark Ready."""
        now = self.clock.now()
        try:
            obj: dict | None = await self.store.get(None, DEFAULT_SERVICE_CIDR)
        except StatusError as exc:
            if exc.code != 404:
                raise
            obj = None
        plan = plan_default(obj, self.flag_cidrs, now)
        if plan.create is not None:
            obj = await self._create_default(list(plan.create))
            plan = plan_default(obj, self.flag_cidrs, now)  # upstream syncs the status at once
        if plan.upgrade is not None:
            await self._upgrade_default(obj, list(plan.upgrade))
            return
        if plan.warning is not None:
            key, reason, message = plan.warning
            if key not in self._reported:
                log.info("default ServiceCIDR: %s", message)
                await self.default_events.event(obj, "Warning", reason, message)
                self._reported.add(key)
        if plan.condition is not None:
            try:
                await self.store.guaranteed_update(None, DEFAULT_SERVICE_CIDR, self._set_condition(plan.condition, allow_deleting=False),
                                             field_manager=FIELD_MANAGER, subresource="status")
            except StatusError as exc:
                log.info("error updating default ServiceCIDR status: %s", exc.message)
                await self.default_events.event(obj, "Warning", REASON_DEFAULT_ERROR, "The default ServiceCIDR Status can not be set to Ready=True")

    async def _create_default(self, cidrs: list[str]) -> dict:
        desired = {"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
                   "metadata": {"name": DEFAULT_SERVICE_CIDR}, "spec": {"cidrs": cidrs}}
        log.info("creating default ServiceCIDR with CIDRs: %s", go_list(cidrs))
        try:
            return await self.store.create(None, desired, field_manager=FIELD_MANAGER)
        except StatusError as exc:
            if exc.code == 409 and exc.reason == "AlreadyExists":
                return await self.store.get(None, DEFAULT_SERVICE_CIDR)
            await self.default_events.event(desired, "Warning", REASON_DEFAULT_ERROR, "The default ServiceCIDR can not be created")
            raise

    async def _upgrade_default(self, obj: dict, cidrs: list[str]) -> None:
        log.info("updating default ServiceCIDR from single-stack (%s) to dual-stack (%s)", go_list(_cidrs(obj)), go_list(cidrs))

        def upgrade(current: dict) -> dict:
            current.setdefault("spec", {})["cidrs"] = cidrs
            return current

        try:
            await self.store.guaranteed_update(None, DEFAULT_SERVICE_CIDR, upgrade, field_manager=FIELD_MANAGER)
        except StatusError as exc:
            message = f"The default ServiceCIDR can not be upgraded from {cidrs[0]} to dual stack {go_list(cidrs)} : {exc.message}"
            await self.default_events.event(obj, "Warning", REASON_DEFAULT_ERROR, message)

    async def _apply(self, obj: dict, plan: ServiceCIDRPlan) -> None:
        name = _name(obj)
        if plan.add_finalizer:
            await self.store.guaranteed_update(None, name, _add_finalizer, field_manager=CONTROLLER_FIELD_MANAGER)
        if plan.condition is not None:
            try:
                await self.store.guaranteed_update(None, name, self._set_condition(plan.condition, allow_deleting=True),
                                             field_manager=CONTROLLER_FIELD_MANAGER, subresource="status")
            except StatusError as exc:
                if exc.code != 404 and plan.condition["status"] == "True":
                    await self.events.event(obj, "Warning", REASON_ERROR, "The ServiceCIDR Status can not be set to Ready=True")
                raise
        if plan.remove_finalizer:
            log.info("ServiceCIDR %s: no IPAddress depends on it any more, removing the finalizer", name)
            await self.store.guaranteed_update(None, name, _remove_finalizer, field_manager=CONTROLLER_FIELD_MANAGER)

    @staticmethod
    def _set_condition(condition: dict, *, allow_deleting: bool):
        def mutate(current: dict) -> dict:
            if is_deleting(current) and not allow_deleting:
                return current
            return with_condition(current, condition)
        return mutate


def _add_finalizer(current: dict) -> dict:
    meta = current.setdefault("metadata", {})
    # no new finalizers once deletion started (the API would refuse them too)
    if not is_deleting(current) and FINALIZER not in (meta.get("finalizers") or []):
        meta["finalizers"] = [*(meta.get("finalizers") or []), FINALIZER]
    return current


def _remove_finalizer(current: dict) -> dict:
    meta = current.setdefault("metadata", {})
    finalizers = meta.get("finalizers") or []
    if FINALIZER in finalizers:
        remaining = [f for f in finalizers if f != FINALIZER]
        if remaining:
            meta["finalizers"] = remaining
        else:
            meta.pop("finalizers", None)
    return current


async def ensure_default_service_cidr(registry: Registry, cidrs: list[str]) -> ServiceCIDRController:
    """Startup: the default ServiceCIDR exists (and is Ready) before the apiserver serves.
    Returns the controller, whose :meth:`ServiceCIDRController.run` keeps it so afterwards
    (reuse it, so a flag mismatch is reported once)."""
    controller = ServiceCIDRController(registry, registry.clock, cidrs)
    await controller.sync_default()
    return controller
