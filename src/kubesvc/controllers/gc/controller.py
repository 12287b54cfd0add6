"""The garbage collector's shell: monitors, the graph task, two worker pools, and the API calls.

Shape (upstream GarbageCollector + GraphBuilder)::

    discovery (every resync_period)          one Informer ("monitor") per deletable resource
          |  start/stop monitors                   |  add / update / delete
          v                                        v
                       graph changes queue  ->  Graph.process()  (one task)
                                                   |  Effects
                        +--------------------------+------------------------+
                        v                                                   v
            attempt-to-delete WorkQueue                          attempt-to-orphan WorkQueue
            (workers: read live objects, classify owners,        (workers: patch the owner's
             delete / patch ownerReferences / finish a            ownerReference out of every
             foreground deletion)                                 dependent, drop "orphan")

A monitor is the controller-manager's shared informer of its resource when a controller
already asked for one (``informers``: Pods, ReplicaSets, Services...), as upstream's
ObjectOrMetadataInformerFactory hands the garbage collector the typed informer where there is
one: each Pod update is then one watch event decoded once, not a second watch of every Pod.

Workers start once every monitor has listed (or ``initial_sync_timeout`` passed): acting on a
half-built graph could, e.g., finish an orphaning before the dependents were seen. A failed
item is retried with per-item exponential backoff, without limit (upstream's queues have none).
Writes go to the apiserver only; the graph changes only when the informers report them.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
from dataclasses import dataclass, replace
from typing import Callable

from kubesvc.client.informer import Informer
from kubesvc.client.record import EventRecorder
from kubesvc.client.rest import ApiError, ClientError, Resource, RestClient, is_conflict, is_not_found
from kubesvc.client.workqueue import WorkQueue
from kubesvc.controllers.gc import decisions
from kubesvc.controllers.gc.decisions import Delete, Keep, QueueDependents, RemoveFinalizer, RemoveOwnerReferences
from kubesvc.controllers.gc.graph import ADD, DELETE, FINALIZER_ORPHAN, UPDATE, Effects, Graph, GraphEvent, Node, ObjectReference
from kubesvc.controllers.gc.resources import IGNORED_RESOURCES, deletable_resources, discover, mapping
from kubesvc.controllers.runtime import run_workers

log = logging.getLogger("kubesvc.controllers.gc")

DEFAULT_WORKERS = 20  # kube-controller-manager --concurrent-gc-syncs
COMPONENT = "garbage-collector-controller"
_RETRY_FOREVER = sys.maxsize
# client-go retry.DefaultBackoff, for removing a finalizer on conflicts
_CONFLICT_STEPS, _CONFLICT_FIRST_DELAY, _CONFLICT_FACTOR = 4, 0.01, 5.0


class GCError(Exception):
    """A garbage-collection step failed; the item is retried."""


class _VirtualDeleteEnqueued(Exception):
    """The item does not exist: a virtual delete event was queued for the graph; done."""


class _NamespacedOwnerOfClusterScoped(Exception):
    """A cluster-scoped object names a namespaced owner: never resolvable; done."""


class _NotObservedYet(GCError):
    """A virtual node whose object exists but no informer reported yet: check again later."""


@dataclass
class _Monitor:
    informer: Informer
    task: asyncio.Task | None  # None: a shared informer, run by its owner
    handler: object = None  # the handlers registered on a shared informer


class GarbageCollector:
    """Deletes objects whose owners are gone, and carries out Orphan and Foreground deletions.

    ``await run()`` until cancelled; ``await wait_for_sync(timeout)`` for the first complete
    graph. ``workers`` coroutines serve each of the two queues."""

    def __init__(self, client: RestClient, workers: int = DEFAULT_WORKERS, *, resync_period: float = 30.0,
                 initial_sync_timeout: float = 30.0, ignored_resources: frozenset = IGNORED_RESOURCES, informers=None):
        self.client = client
        self.informers = informers  # SharedInformers whose informers the monitors share, if given
        self.workers = workers
        self.resync_period = resync_period
        self.initial_sync_timeout = initial_sync_timeout
        self.ignored_resources = ignored_resources
        self.graph = Graph()
        self.attempt_to_delete = WorkQueue()
        self.attempt_to_orphan = WorkQueue()
        self.recorder = EventRecorder(client, COMPONENT)
        self._graph_changes: asyncio.Queue[GraphEvent] = asyncio.Queue()
        self._monitors: dict[Resource, _Monitor] = {}
        self._mapping: dict[tuple[str, str], Resource] = {}
        self._discovered = False

    # ---- lifecycle ---------------------------------------------------------------------------
    async def run(self) -> None:
        log.info("Starting controller garbagecollector")
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._process_graph_changes())
                group.create_task(self._resync_monitors_forever())
                group.create_task(self._run_workers())
        finally:
            self.attempt_to_delete.shutdown()
            self.attempt_to_orphan.shutdown()
            await self._stop_monitors(list(self._monitors))
            log.info("Shutting down controller garbagecollector")

    def has_synced(self) -> bool:
        """Discovery ran, every monitor has listed, and the graph has taken in every event."""
        return (self._discovered and bool(self._monitors) and all(m.informer.has_synced() for m in self._monitors.values())
                and self._graph_changes.empty())

    async def wait_for_sync(self, timeout: float | None = None) -> bool:
        async def synced() -> None:
            while not self.has_synced():
                await asyncio.sleep(0.02)

        try:
            await asyncio.wait_for(synced(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def _run_workers(self) -> None:
        if await self.wait_for_sync(self.initial_sync_timeout):
            log.info("Garbage collector: all resource monitors have synced")
        else:
            log.info("Garbage collector: not all resource monitors could be synced, proceeding anyways")
        async with asyncio.TaskGroup() as group:
            group.create_task(run_workers("garbagecollector attempt-to-delete", self.attempt_to_delete,
                                          self._attempt_to_delete_worker, self.workers, _RETRY_FOREVER))
            group.create_task(run_workers("garbagecollector attempt-to-orphan", self.attempt_to_orphan,
                                          self._attempt_to_orphan_worker, self.workers, _RETRY_FOREVER))

    # ---- monitors (upstream Sync / syncMonitors) ------------------------------------------------
    async def _resync_monitors_forever(self) -> None:
        current: set[Resource] = set()
        while True:
            try:
                lists = await discover(self.client)
                resources = deletable_resources(lists, self.ignored_resources)
                self._mapping = mapping(lists)
                if not resources:
                    log.info("no resources reported by discovery, skipping garbage collector sync")
                elif resources != current:
                    log.info("syncing garbage collector with updated resources from discovery: added %s, removed %s",
                             sorted(r.plural for r in resources - current), sorted(r.plural for r in current - resources))
                    await self._sync_monitors(resources)
                    current = resources
                    self._discovered = True
            except ClientError as exc:
                log.warning("garbage collector discovery failed: %s", exc)
            await asyncio.sleep(self.resync_period)

    async def _sync_monitors(self, resources: set[Resource]) -> None:
        await self._stop_monitors([r for r in self._monitors if r not in resources])
        for resource in resources - set(self._monitors):
            shared = self.informers.existing(resource) if self.informers is not None else None
            if shared is not None:  # the controllers' informer: each object decoded once, one watch to serve
                self._monitors[resource] = _Monitor(shared, None, shared.add_event_handler(*self._handlers(resource)))
                continue
            informer = Informer(self.client, resource)
            informer.add_event_handler(*self._handlers(resource))
            self._monitors[resource] = _Monitor(informer, asyncio.create_task(informer.run()))

    async def _stop_monitors(self, resources: list[Resource]) -> None:
        stopped = [self._monitors.pop(r) for r in resources]
        for monitor in stopped:
            if monitor.task is None:
                monitor.informer.remove_event_handler(monitor.handler)
            else:
                monitor.informer.stop()
        tasks = [m.task for m in stopped if m.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def _handlers(self, resource: Resource) -> tuple[Callable, Callable, Callable]:
        api_version, kind, put = resource.api_version, resource.kind, self._graph_changes.put_nowait

        def on_add(obj: dict) -> None:
            put(GraphEvent(ADD, obj, api_version, kind))

        def on_update(old: dict, new: dict) -> None:
            put(GraphEvent(UPDATE, new, api_version, kind, old=old))

        def on_delete(obj: dict) -> None:
            put(GraphEvent(DELETE, obj, api_version, kind))

        return on_add, on_update, on_delete

    # ---- the graph (upstream processGraphChanges) ---------------------------------------------
    async def _process_graph_changes(self) -> None:
        while True:
            event = await self._graph_changes.get()
            try:
                effects = self.graph.process(event)
            except Exception:  # a malformed object must not stop the graph
                log.exception("garbage collector: cannot process %s event", event.type)
                continue
            self._apply(effects)

    def _apply(self, fx: Effects) -> None:
        for node in fx.attempt_to_delete:
            self.attempt_to_delete.add(node)
        for node in fx.attempt_to_delete_rate_limited:
            self.attempt_to_delete.add_rate_limited(node)
        for node in fx.attempt_to_orphan:
            self.attempt_to_orphan.add(node)
        for dependent, owner_uid in fx.invalid_namespace_refs:
            self._report_invalid_namespace_owner_ref(dependent, owner_uid)

    def _report_invalid_namespace_owner_ref(self, dependent: Node, owner_uid: str) -> None:
        ref = next((r for r in dependent.owners if r.get("uid") == owner_uid), None)
        if ref is None:
            return
        ident = dependent.identity
        invalid = ObjectReference.from_owner_reference(ref, ident.namespace)
        obj = {"apiVersion": ident.api_version, "kind": ident.kind, "metadata": {"name": ident.name, "namespace": ident.namespace, "uid": ident.uid}}
        self.recorder.event(obj, "Warning", "OwnerRefInvalidNamespace", f'ownerRef {invalid} does not exist in namespace "{ident.namespace}"')

    def _enqueue_virtual_delete(self, identity: ObjectReference) -> None:
        meta = {"name": identity.name, "uid": identity.uid}
        if identity.namespace:
            meta["namespace"] = identity.namespace
        self._graph_changes.put_nowait(GraphEvent(DELETE, {"metadata": meta}, identity.api_version, identity.kind, virtual=True))

    # ---- attempt to delete (upstream attemptToDeleteWorker / attemptToDeleteItem) ---------------
    async def _attempt_to_delete_worker(self, node: Node) -> None:
        current = self.graph.get(node.identity.uid)
        if node.virtual and (current is None or current.observed):
            return  # gone from the graph, or replaced by the observed node (queued on its own)
        if current is not None and (current.identity.api_version, current.identity.kind) != (node.identity.api_version, node.identity.kind):
            node = node.clone()
            node.identity = replace(node.identity, api_version=current.identity.api_version, kind=current.identity.kind)
        try:
            await self._attempt_to_delete_item(node)
        except (_VirtualDeleteEnqueued, _NamespacedOwnerOfClusterScoped):
            return
        if node.virtual:
            raise _NotObservedYet(f"{node.identity} exists but was not observed by an informer yet")

    async def _attempt_to_delete_item(self, item: Node) -> None:
        if item.being_deleted and not item.deleting_dependents:
            return  # on its one-way trip to deletion; its dependents are handled when it goes
        try:
            latest = await self._get(item.identity)
        except ApiError as err:
            if not is_not_found(err):
                raise
            latest = None
        if latest is None or (latest.get("metadata") or {}).get("uid") != item.identity.uid:
            self._enqueue_virtual_delete(item.identity)
            raise _VirtualDeleteEnqueued
        if item.deleting_dependents:
            await self._process_deleting_dependents(item)
            return
        refs = list((latest.get("metadata") or {}).get("ownerReferences") or [])
        if not refs:
            return
        owners = decisions.classify([(ref, await self._owner_state(ref, item)) for ref in refs])
        decision = decisions.decide_attempt_to_delete(latest, owners, item)
        log.debug("garbage collector: %s: %s", item.identity, decision)
        if isinstance(decision, Keep):
            return
        if isinstance(decision, RemoveOwnerReferences):
            uids = decision.owner_uids
            await self._patch(item, decisions.delete_owner_refs_strategic_patch(item.identity.uid, uids),
                              lambda current: decisions.delete_owner_refs_merge_patch(current, uids))
            return
        assert isinstance(decision, Delete)
        if decision.unblock_first:
            await self._patch(item, decisions.unblock_owner_refs_strategic_patch(item),
                              lambda current: decisions.unblock_owner_refs_merge_patch(current, item))
        log.info("garbage collector: deleting %s, propagationPolicy %s", item.identity, decision.policy)
        try:
            await self._delete(item.identity, latest["metadata"].get("resourceVersion", ""), refs, decision.policy)
        except ApiError as err:
            if not is_not_found(err):
                raise
            self._enqueue_virtual_delete(item.identity)
            raise _VirtualDeleteEnqueued from None

    async def _owner_state(self, ref: dict, item: Node) -> str:
        """upstream isDangling (then classification of an existing owner)."""
        absent = self.graph.absent_owners
        key = ObjectReference.from_owner_reference(ref, "")
        if absent.has(key):
            return decisions.DANGLING
        namespaced_key = replace(key, namespace=item.identity.namespace)
        if absent.has(namespaced_key):
            return decisions.DANGLING
        resource = self._resource(ref.get("apiVersion", ""), ref.get("kind", ""))
        if not resource.namespaced:
            namespaced_key = key
        elif not item.identity.namespace:
            log.info("garbage collector: %s is cluster-scoped, but refers to a namespaced owner %s", item.identity, key)
            raise _NamespacedOwnerOfClusterScoped
        try:
            owner = await self.client.get(resource.path(item.identity.namespace if resource.namespaced else None, ref.get("name", "")))
        except ApiError as err:
            if not is_not_found(err):
                raise
            owner = None
        state = decisions.owner_state(owner, ref)
        if state == decisions.DANGLING:
            absent.add(namespaced_key)
        return state

    async def _process_deleting_dependents(self, item: Node) -> None:
        decision = decisions.decide_deleting_dependents(item)
        if isinstance(decision, RemoveFinalizer):
            log.info("garbage collector: removing %s finalizer from %s", decision.finalizer, item.identity)
            await self._remove_finalizer(item, decision.finalizer)
            return
        assert isinstance(decision, QueueDependents)
        for dep in decision.dependents:
            self.attempt_to_delete.add(dep)

    # ---- attempt to orphan (upstream attemptToOrphanWorker) -------------------------------------
    async def _attempt_to_orphan_worker(self, owner: Node) -> None:
        uid = owner.identity.uid
        dependents = list(owner.dependents)

        async def orphan(dep: Node) -> None:
            try:
                await self._patch(dep, decisions.delete_owner_refs_strategic_patch(dep.identity.uid, [uid]),
                                  lambda current: decisions.delete_owner_refs_merge_patch(current, [uid]))
            except ApiError as err:
                if not is_not_found(err):
                    raise GCError(f"orphaning {dep.identity} failed, {err}") from err

        results = await asyncio.gather(*(orphan(dep) for dep in dependents), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise GCError(f"failed to orphan dependents of owner {owner.identity}, got errors: {', '.join(map(str, failures))}")
        await self._remove_finalizer(owner, FINALIZER_ORPHAN)

    # ---- API calls (upstream operations.go, patch.go) --------------------------------------------
    def _resource(self, api_version: str, kind: str) -> Resource:
        resource = self._mapping.get((api_version, kind))
        if resource is None:
            raise GCError(f"unable to get REST mapping for {kind}.{api_version}")
        return resource

    def _path(self, identity: ObjectReference) -> str:
        resource = self._resource(identity.api_version, identity.kind)
        if resource.namespaced and not identity.namespace:
            raise _NamespacedOwnerOfClusterScoped
        return resource.path(identity.namespace if resource.namespaced else None, identity.name)

    async def _get(self, identity: ObjectReference) -> dict:
        return await self.client.get(self._path(identity))

    async def _cached_or_get(self, identity: ObjectReference) -> dict:
        """upstream getMetadata: the monitor's copy if it has one, else a live GET."""
        resource = self._resource(identity.api_version, identity.kind)
        monitor = self._monitors.get(resource)
        if monitor is not None:
            cached = monitor.informer.indexer.get(identity.name, identity.namespace if resource.namespaced else None)
            if cached is not None:
                return cached
        return await self._get(identity)

    async def _delete(self, identity: ObjectReference, resource_version: str, owners: list[dict], policy: str) -> None:
        """Delete with uid and resourceVersion preconditions; if only the resourceVersion
        moved (the ownerReferences are as decided on), delete again with the uid alone."""
        path = self._path(identity)
        try:
            await self.client.request("DELETE", path, None, decisions.delete_options(identity.uid, policy, resource_version))
        except ApiError as err:
            if not (is_conflict(err) and resource_version):
                raise
            live = await self.client.get(path)  # a 404 here propagates: the object is gone
            meta = live.get("metadata") or {}
            if meta.get("uid") == identity.uid and meta.get("resourceVersion") != resource_version and (meta.get("ownerReferences") or []) == owners:
                await self._delete(identity, "", owners, policy)
                return
            raise

    async def _patch(self, item: Node, strategic: dict, merge: Callable[[dict], dict]) -> dict:
        """Strategic merge patch; a JSON merge patch where the resource has none (415)."""
        path = self._path(item.identity)
        try:
            return await self.client.patch(path, strategic, "strategic")
        except ApiError as err:
            if err.status != 415:
                raise
        current = await self._cached_or_get(item.identity)
        return await self.client.patch(path, merge(current), "merge")

    async def _remove_finalizer(self, owner: Node, finalizer: str) -> None:
        """Patch ``finalizer`` out at the read resourceVersion, retrying conflicts (client-go
        retry.RetryOnConflict with DefaultBackoff)."""
        delay = _CONFLICT_FIRST_DELAY
        for step in range(_CONFLICT_STEPS):
            try:
                current = await self._get(owner.identity)
            except ApiError as err:
                if is_not_found(err):
                    return
                raise GCError(f"cannot finalize owner {owner.identity}, because cannot get it: {err}. The garbage collector will retry later") from err
            if (current.get("metadata") or {}).get("uid") != owner.identity.uid:
                return  # the owner is gone; the name belongs to a new object
            patch = decisions.remove_finalizer_patch(current, finalizer)
            if patch is None:
                return
            try:
                await self.client.patch(self._path(owner.identity), patch, "merge")
                return
            except ApiError as err:
                if not is_conflict(err):
                    raise
            if step + 1 < _CONFLICT_STEPS:
                await asyncio.sleep(delay * (1 + 0.1 * random.random()))
                delay *= _CONFLICT_FACTOR
        raise GCError(f"updateMaxRetries({_CONFLICT_STEPS}) has reached. The garbage collector will retry later for owner {owner.identity}")

