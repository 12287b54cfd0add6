"""kube-controller-manager's ReplicaSet controller (``replicaset-controller``) and, through the
same code, its ReplicationController manager (``replication-controller``), as upstream's
``ReplicationManager`` wraps the ReplicaSet controller with RC<->RS adapters "as if
ReplicationController were an older API version of ReplicaSet" (pkg/controller/replication).

A sync of one ReplicaSet (``syncReplicaSet``):

1. Expectations (``controllers/expectations.py``) say whether every create and delete of the
   last sync has come back through the Pod informer; only then may this sync create or delete.
2. The active Pods of the namespace are **claimed** (``controllers/controllerref.py``):
   matching orphans adopted, owned Pods whose labels no longer match released.
3. ``manageReplicas``: too few Pods, create the missing ones (at most 500 per sync) in
   slow-start batches of 1, 2, 4, ... (``controllers/podcontrol.py``); too many, delete the ones
   ranked first (``decisions.pods_to_delete``: unscheduled, pending, not ready, cheaper, doubled
   up on a node, newer...), all at once.
4. The status (replicas, fullyLabeledReplicas, readyReplicas, availableReplicas,
   observedGeneration, the ReplicaFailure condition) is written when it changed; with
   ``minReadySeconds`` the ReplicaSet is looked at again when its Pods may have become
   available.

Informer events drive it: a Pod's create/delete lowers its owner's expectations and queues it;
an orphan Pod queues every ReplicaSet whose selector matches (one may adopt it); a Pod turning
Ready with ``minReadySeconds`` queues its owner again ``minReadySeconds + 1`` s later.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from dataclasses import dataclass

from kubesvc.api.pods import is_ready
from kubesvc.api.selectors import LabelSelector, selector_from_label_selector
from kubesvc.api.errors import StatusError
from kubesvc.client.cache import split_key
from kubesvc.client.record import EventRecorder
from kubesvc.client.rest import PODS, ApiError, Resource, RestClient, is_namespace_terminating, is_not_found
from kubesvc.controllers import controllerref
from kubesvc.controllers.expectations import Expectations
from kubesvc.controllers.informers import SharedInformers
from kubesvc.controllers.podcontrol import PodControl, pod_from_template, slow_start_batch
from kubesvc.controllers.replicaset import decisions
from kubesvc.controllers.runtime import QueueController
from kubesvc.util.clock import Clock

log = logging.getLogger("kubesvc.controllers.replicaset")

REPLICASETS = Resource("apps", "v1", "replicasets", True, "ReplicaSet")
REPLICATIONCONTROLLERS = Resource("", "v1", "replicationcontrollers", True, "ReplicationController")
STATUS_UPDATE_RETRIES = 1


@dataclass(frozen=True)
class Flavour:
    """What differs between the ReplicaSet controller and the ReplicationController manager."""

    resource: Resource
    api_version: str
    kind: str
    component: str  # the Events' source
    queue_name: str

    def selector(self, owner: dict) -> dict | None:
        """The owner's selector as a LabelSelector object (an RC's map becomes matchLabels)."""
        selector = (owner.get("spec") or {}).get("selector")
        if self.kind == "ReplicationController":
            return {"matchLabels": selector} if isinstance(selector, dict) and selector else None
        return selector if isinstance(selector, dict) else None


REPLICA_SET = Flavour(REPLICASETS, "apps/v1", "ReplicaSet", "replicaset-controller", "replicaset")
REPLICATION_CONTROLLER = Flavour(REPLICATIONCONTROLLERS, "v1", "ReplicationController", "replication-controller", "replicationmanager")


def _key(obj: dict) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


class ReplicaSetController(QueueController):
    def __init__(self, client: RestClient, informers: SharedInformers, *, flavour: Flavour = REPLICA_SET, workers: int = 5,
                 burst_replicas: int = decisions.BURST_REPLICAS, recorder: EventRecorder | None = None, clock: Clock | None = None):
        super().__init__(client, flavour.component, workers=workers, recorder=recorder, clock=clock)
        self.flavour = flavour
        self.queue_name = flavour.queue_name
        self.burst_replicas = burst_replicas
        self.expectations = Expectations(self.clock)
        self._owners_api = client.resource(flavour.resource)
        self._pods_api = client.resource(PODS)
        self._pod_control = PodControl(client, self.recorder)
        self._owners = informers.informer(flavour.resource)
        self._pods = informers.pods
        self._owners.add_event_handler(self._enqueue, self._on_owner_update, self._on_owner_delete)
        self._pods.add_event_handler(self._on_pod_add, self._on_pod_update, self._on_pod_delete)

    # ---- informer handlers -------------------------------------------------------------------

    def _enqueue(self, owner: dict) -> None:
        self.queue.add(_key(owner))

    def _on_owner_update(self, old: dict, new: dict) -> None:
        self._enqueue(new)

    def _on_owner_delete(self, owner: dict) -> None:
        key = _key(owner)
        self.expectations.delete(key)
        self.queue.add(key)

    def _owner_of(self, pod: dict, ref: dict | None) -> dict | None:
        """``resolveControllerRef``: the owner the reference names, if it is ours and still the same object."""
        return controllerref.resolve(ref, self.flavour.kind, self._owners.indexer, pod["metadata"].get("namespace"))

    def _matching_owners(self, pod: dict) -> list[dict]:
        """``getPodReplicaSets``: the owners in the Pod's namespace whose selector selects it."""
        labels = pod["metadata"].get("labels") or {}
        if not labels:
            return []
        found = []
        for owner in self._owners.indexer.by_index("namespace", pod["metadata"].get("namespace", "")):
            selector = self._selector(owner)
            if selector is not None and not selector.is_everything() and selector.matches(labels):
                found.append(owner)
        return found

    def _on_pod_add(self, pod: dict) -> None:
        if pod["metadata"].get("deletionTimestamp"):
            self._on_pod_delete(pod)  # a restarted manager sees a Pod pending graceful deletion as added
            return
        ref = controllerref.controller_ref(pod)
        if ref is not None:
            owner = self._owner_of(pod, ref)
            if owner is not None:
                key = _key(owner)
                self.expectations.creation_observed(key)
                self.queue.add(key)
            return
        for owner in self._matching_owners(pod):
            self._enqueue(owner)

    def _on_pod_update(self, old: dict, new: dict) -> None:
        if old["metadata"].get("resourceVersion") == new["metadata"].get("resourceVersion"):
            return  # a periodic resync: nothing changed
        labels_changed = (old["metadata"].get("labels") or {}) != (new["metadata"].get("labels") or {})
        if new["metadata"].get("deletionTimestamp"):
            self._on_pod_delete(new)
            if labels_changed:
                self._on_pod_delete(old)
            return
        new_ref, old_ref = controllerref.controller_ref(new), controllerref.controller_ref(old)
        ref_changed = (new_ref or {}).get("uid") != (old_ref or {}).get("uid")
        if ref_changed and old_ref is not None:
            owner = self._owner_of(old, old_ref)
            if owner is not None:
                self._enqueue(owner)
        if new_ref is not None:
            owner = self._owner_of(new, new_ref)
            if owner is not None:
                self._enqueue(owner)
                min_ready = int((owner.get("spec") or {}).get("minReadySeconds") or 0)
                if min_ready > 0 and not is_ready(old) and is_ready(new):
                    self.queue.add_after(_key(owner), min_ready + 1)
            return
        if labels_changed or ref_changed:
            for owner in self._matching_owners(new):
                self._enqueue(owner)

    def _on_pod_delete(self, pod: dict) -> None:
        owner = self._owner_of(pod, controllerref.controller_ref(pod))
        if owner is None:
            return
        key = _key(owner)
        self.expectations.deletion_observed(key, _key(pod))
        self.queue.add(key)

    # ---- the sync ----------------------------------------------------------------------------

    def _selector(self, owner: dict) -> LabelSelector | None:
        try:
            return selector_from_label_selector(self.flavour.selector(owner))
        except StatusError:
            return None

    async def sync(self, key: Hashable) -> None:
        key = str(key)
        namespace, name = split_key(key)
        cached = self._owners.indexer.get(name, namespace)
        if cached is None:
            self.expectations.delete(key)
            return
        owner = cached  # read only: the writes build new objects (a deep copy was 0.16 ms a sync, one per Pod event of a burst)
        needs_sync = self.expectations.satisfied(key)
        selector = self._selector(owner)
        if selector is None:
            log.warning("%s %s has an invalid selector", self.flavour.kind, key)
            return
        active = [pod for pod in self._pods.indexer.by_index("namespace", namespace) if decisions.is_active(pod)]
        pods = await controllerref.claim(owner, active, selector, self._pods_api, self.flavour.api_version, self.flavour.kind,
                                         lambda: self._fresh(namespace, name))
        manage_error: Exception | None = None
        if needs_sync and not owner["metadata"].get("deletionTimestamp"):
            try:
                await self._manage_replicas(key, owner, pods)
            except Exception as exc:  # reported in the status, then retried
                manage_error = exc
        spec = owner.get("spec") or {}
        desired = int(spec.get("replicas") if spec.get("replicas") is not None else 1)
        min_ready = int(spec.get("minReadySeconds") or 0)
        template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        status = owner.get("status") or {}
        new_status = decisions.calculate_status(status, template_labels, min_ready, pods, desired,
                                                str(manage_error) if manage_error is not None else None, self.clock.now())
        updated = await self._write_status(owner, new_status)
        if manage_error is None and min_ready > 0:
            written = updated.get("status") or {}
            if (written.get("readyReplicas") or 0) == desired and (written.get("availableReplicas") or 0) != desired:
                self.queue.add_after(key, min_ready)
        if manage_error is not None:
            raise manage_error

    async def _fresh(self, namespace: str, name: str) -> dict | None:
        try:
            return await self._owners_api.get(name, namespace)
        except ApiError as exc:
            if is_not_found(exc):
                return None
            raise

    async def _manage_replicas(self, key: str, owner: dict, pods: list[dict]) -> None:
        spec = owner.get("spec") or {}
        desired = int(spec.get("replicas") if spec.get("replicas") is not None else 1)
        diff = len(pods) - desired
        if diff < 0:
            count = min(-diff, self.burst_replicas)
            self.expectations.expect_creations(key, count)
            template = spec.get("template") or {}

            async def create() -> None:
                pod = pod_from_template(template, owner, self.flavour.api_version, self.flavour.kind)
                try:
                    await self._pod_control.create(owner, pod)
                except ApiError as exc:
                    if is_namespace_terminating(exc):
                        return  # the namespace goes away with the Pods; nothing to retry
                    raise

            successes, error = await slow_start_batch(count, create)
            for _ in range(count - successes):  # skipped or failed: their events will never come
                self.expectations.creation_observed(key)
            if error is not None:
                raise error
        elif diff > 0:
            count = min(diff, self.burst_replicas)
            doomed = decisions.pods_to_delete(pods, self._related_pods(owner), count, self.clock.now())
            self.expectations.expect_deletions(key, [_key(pod) for pod in doomed])

            async def delete(pod: dict) -> None:
                try:
                    await self._pod_control.delete(owner, pod)
                except Exception:
                    self.expectations.deletion_observed(key, _key(pod))
                    raise

            results = await asyncio.gather(*(delete(pod) for pod in doomed), return_exceptions=True)
            errors = [r for r in results if isinstance(r, Exception)]
            if errors:
                raise errors[0]

    def _related_pods(self, owner: dict) -> list[dict]:
        """``getIndirectlyRelatedPods``: Pods of every owner with the same controller (the
        ReplicaSets of one Deployment); none when this owner has no controller."""
        ref = controllerref.controller_ref(owner)
        if ref is None:
            return []
        namespace = owner["metadata"].get("namespace", "")
        related: dict[str, dict] = {}
        pods = self._pods.indexer.by_index("namespace", namespace)
        for sibling in self._owners.indexer.by_index("namespace", namespace):
            sibling_ref = controllerref.controller_ref(sibling)
            if sibling_ref is None or sibling_ref.get("uid") != ref.get("uid"):
                continue
            selector = self._selector(sibling)
            if selector is None:
                continue
            for pod in pods:
                if selector.matches(pod["metadata"].get("labels") or {}):
                    related.setdefault(pod["metadata"].get("uid", ""), pod)
        return list(related.values())

    async def _write_status(self, owner: dict, new_status: dict) -> dict:
        """``updateReplicaSetStatus``: written only when it changed, one retry after a re-read."""
        generation = int(owner["metadata"].get("generation") or 0)
        if decisions.status_unchanged(owner.get("status") or {}, new_status, generation):
            return owner
        new_status = {**new_status, "observedGeneration": generation}
        current = owner
        for attempt in range(STATUS_UPDATE_RETRIES + 1):
            try:
                return await self._owners_api.update_status({**current, "status": new_status})
            except ApiError:
                if attempt >= STATUS_UPDATE_RETRIES:
                    raise
                current = await self._owners_api.get(owner["metadata"]["name"], owner["metadata"].get("namespace"))
        return owner


def replication_manager(client: RestClient, informers: SharedInformers, **options) -> ReplicaSetController:
    """The ReplicationController manager: the ReplicaSet controller over ReplicationControllers."""
    return ReplicaSetController(client, informers, flavour=REPLICATION_CONTROLLER, **options)
