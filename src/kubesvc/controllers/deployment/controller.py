"""The Deployment controller's shell (pkg/controller/deployment/deployment_controller.go,
sync.go, rolling.go, recreate.go, progress.go): informers enqueue Deployment keys, a worker
syncs one, reading only caches and writing ReplicaSets and the Deployment's status.

What wakes a Deployment: its own add/update/delete; a ReplicaSet it controls (or an orphan
its selector matches) added, changed or deleted; a Pod of one of its ReplicaSets deleted (a
Recreate rollout waits for the old Pods to be gone). A sync:

1. claims ReplicaSets (adopting orphans whose labels match, releasing ones that stopped
   matching: ``controllers.controllerref``);
2. being deleted: status only. Paused: proportional scaling and history cleanup only.
   A **scaling event** (an active ReplicaSet last scaled for another size): proportional
   scaling. Otherwise one step of ``Recreate`` or ``RollingUpdate`` (``rolling``);
3. writes the status (``status``), and when nothing changed but a rollout is under way,
   looks again when its progress deadline would pass.

Every ReplicaSet write is an Update at the cached resourceVersion: a decision made on a stale
cache fails with a Conflict and is retried on fresh data, so the surge and availability bounds
hold even when the cache lags our own writes.

``kubectl rollout undo`` (1.32) patches the template back itself; the pre-apps/v1 request,
the ``deprecated.deployment.rollback.to`` annotation, is still honoured (``rollback.go``).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Hashable

from kubesvc.api.selectors import LabelSelector, selector_from_label_selector
from kubesvc.client.cache import split_key
from kubesvc.client.record import EventRecorder
from kubesvc.client.rest import ApiError, Resource, RestClient, is_already_exists, is_not_found
from kubesvc.controllers import controllerref
from kubesvc.controllers.deployment import rolling, status as dstatus, util
from kubesvc.controllers.informers import SharedInformers
from kubesvc.controllers.runtime import QueueController, omitempty
from kubesvc.util.clock import Clock

log = logging.getLogger("kubesvc.controllers.deployment")

DEPLOYMENTS = Resource("apps", "v1", "deployments", True, "Deployment")
REPLICASETS = Resource("apps", "v1", "replicasets", True, "ReplicaSet")
COMPONENT = "deployment-controller"
MAX_RETRIES = 15


class HashCollision(Exception):
    pass


def _key(obj: dict) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def _selector(deployment: dict) -> LabelSelector | None:
    try:
        return selector_from_label_selector((deployment.get("spec") or {}).get("selector"))
    except Exception:  # an invalid selector (the API refuses them): select nothing
        return None


class DeploymentController(QueueController):
    queue_name, max_retries = "deployment", MAX_RETRIES

    def __init__(self, client: RestClient, informers: SharedInformers, *, workers: int = 5, recorder: EventRecorder | None = None,
                 clock: Clock | None = None):
        super().__init__(client, COMPONENT, workers=workers, recorder=recorder, clock=clock)
        self._deployments_api = client.resource(DEPLOYMENTS)
        self._rss_api = client.resource(REPLICASETS)
        self._deployments = informers.informer(DEPLOYMENTS)
        self._rss = informers.informer(REPLICASETS)
        self._pods = informers.pods
        self._deployments.add_event_handler(self._enqueue, lambda old, new: self._enqueue(new), self._enqueue)
        self._rss.add_event_handler(self._on_rs_add, self._on_rs_update, self._on_rs_delete)
        self._pods.add_event_handler(None, None, self._on_pod_delete)

    # ---- event handlers: record and return -------------------------------------------------

    def _enqueue(self, deployment: dict) -> None:
        self.queue.add(_key(deployment))

    def _owner(self, obj: dict) -> dict | None:
        """``resolveControllerRef``: the Deployment a controller reference names (uid checked)."""
        return controllerref.resolve(controllerref.controller_ref(obj), "Deployment", self._deployments.indexer, obj["metadata"].get("namespace"))

    def _deployments_selecting(self, rs: dict) -> list[dict]:
        """``getDeploymentsForReplicaSet``: the Deployments whose selector matches an orphan."""
        found = []
        for deployment in self._deployments.indexer.by_index("namespace", rs["metadata"].get("namespace", "")):
            selector = _selector(deployment)
            if selector is not None and not selector.is_everything() and selector.matches(rs["metadata"].get("labels")):
                found.append(deployment)
        return found

    def _on_rs_add(self, rs: dict) -> None:
        if rs["metadata"].get("deletionTimestamp"):
            self._on_rs_delete(rs)
            return
        if controllerref.controller_ref(rs) is not None:
            owner = self._owner(rs)
            if owner is not None:
                self._enqueue(owner)
            return
        for deployment in self._deployments_selecting(rs):
            self._enqueue(deployment)

    def _on_rs_update(self, old: dict, new: dict) -> None:
        if old["metadata"].get("resourceVersion") == new["metadata"].get("resourceVersion"):
            return  # a resync: nothing changed
        old_ref, new_ref = controllerref.controller_ref(old), controllerref.controller_ref(new)
        if old_ref != new_ref and old_ref is not None:
            owner = self._owner(old)
            if owner is not None:
                self._enqueue(owner)
        if new_ref is not None:
            owner = self._owner(new)
            if owner is not None:
                self._enqueue(owner)
            return
        if old["metadata"].get("labels") != new["metadata"].get("labels") or old_ref != new_ref:
            for deployment in self._deployments_selecting(new):
                self._enqueue(deployment)

    def _on_rs_delete(self, rs: dict) -> None:
        owner = self._owner(rs)
        if owner is not None:
            self._enqueue(owner)

    def _on_pod_delete(self, pod: dict) -> None:
        """Only Recreate waits for Pods to be gone (``deletePod``)."""
        rs_ref = controllerref.controller_ref(pod)
        if rs_ref is None or rs_ref.get("kind") != "ReplicaSet":
            return
        rs = self._rss.indexer.get(rs_ref.get("name", ""), pod["metadata"].get("namespace"))
        if rs is None or rs["metadata"].get("uid") != rs_ref.get("uid"):
            return
        owner = self._owner(rs)
        if owner is not None and not util.is_rolling(owner):
            self._enqueue(owner)

    # ---- the sync ----------------------------------------------------------------------------

    async def sync(self, key: Hashable) -> None:
        namespace, name = split_key(str(key))
        cached = self._deployments.indexer.get(name, namespace)
        if cached is None:
            return
        d = copy.deepcopy(cached)
        selector = _selector(d)
        if selector is None or selector.is_everything():
            self.recorder.event(d, "Warning", "SelectingAll", "This deployment is selecting all pods. A non-empty selector is required.")
            if int((d.get("status") or {}).get("observedGeneration") or 0) < int(d["metadata"].get("generation") or 0):
                d.setdefault("status", {})["observedGeneration"] = d["metadata"].get("generation")
                await self._deployments_api.update_status(d)
            return
        rs_list = await self._claim_replica_sets(d, selector)
        pod_map = self._pods_by_replica_set(d, selector, rs_list)
        if d["metadata"].get("deletionTimestamp"):
            await self._sync_status_only(d, rs_list)
            return
        await self._check_paused_conditions(d)
        if d["spec"].get("paused"):
            await self._sync_scale(d, rs_list)
            return
        if util.rollback_to(d) is not None:
            await self._rollback(d, rs_list)
            return
        if util.is_scaling_event(d, rs_list):
            await self._sync_scale(d, rs_list)
            return
        if util.is_rolling(d):
            await self._rollout_rolling(d, rs_list)
        else:
            await self._rollout_recreate(d, rs_list, pod_map)

    async def _claim_replica_sets(self, d: dict, selector: LabelSelector) -> list[dict]:
        candidates = self._rss.indexer.by_index("namespace", d["metadata"].get("namespace", ""))

        async def fresh():
            try:
                return await self._deployments_api.get(d["metadata"]["name"], d["metadata"].get("namespace"))
            except ApiError as exc:
                if is_not_found(exc):
                    return None
                raise

        claimed = await controllerref.claim(d, candidates, selector, self._rss_api, "apps/v1", "Deployment", fresh)
        return [copy.deepcopy(rs) for rs in claimed]

    def _pods_by_replica_set(self, d: dict, selector: LabelSelector, rs_list: list[dict]) -> dict[str, list[dict]]:
        """``getPodMapForDeployment``: the Deployment's Pods by the uid of the ReplicaSet that
        controls them (terminal ones included)."""
        uids = {rs["metadata"]["uid"] for rs in rs_list}
        pod_map: dict[str, list[dict]] = {uid: [] for uid in uids}
        for pod in self._pods.indexer.by_index("namespace", d["metadata"].get("namespace", "")):
            if not selector.matches(pod["metadata"].get("labels")):
                continue
            ref = controllerref.controller_ref(pod)
            if ref is not None and ref.get("uid") in uids:
                pod_map[ref["uid"]].append(pod)
        return pod_map

    # ---- ReplicaSets ---------------------------------------------------------------------------

    async def _get_all_and_sync_revision(self, d: dict, rs_list: list[dict], create: bool) -> tuple[dict | None, list[dict]]:
        _, all_old = util.find_old_replica_sets(rs_list, util.find_new_replica_set(d, rs_list))
        new_rs = await self._get_new_replica_set(d, rs_list, all_old, create)
        if new_rs is not None:
            all_old = [rs for rs in all_old if rs["metadata"].get("uid") != new_rs["metadata"].get("uid")]
        return new_rs, all_old

    async def _get_new_replica_set(self, d: dict, rs_list: list[dict], old_rss: list[dict], create: bool) -> dict | None:
        """``getNewReplicaSet``: the existing new ReplicaSet with its annotations synced, or
        (``create``) a new one; the Deployment's revision annotation follows it."""
        existing = util.find_new_replica_set(d, rs_list)
        new_revision = str(util.max_revision(old_rss) + 1)
        now = self.clock.now()
        if existing is not None:
            rs_copy = copy.deepcopy(existing)
            annotations_updated = util.set_new_rs_annotations(d, rs_copy, new_revision, exists=True)
            min_ready = (d["spec"].get("minReadySeconds") or 0) != (rs_copy["spec"].get("minReadySeconds") or 0)
            if annotations_updated or min_ready:
                rs_copy["spec"]["minReadySeconds"] = d["spec"].get("minReadySeconds") or 0
                return await self._rss_api.update(rs_copy)
            status = copy.deepcopy(d.get("status") or {})
            needs_status = False
            if util.has_progress_deadline(d) and dstatus.get_condition(status, dstatus.PROGRESSING) is None:
                dstatus.set_condition(status, dstatus.new_condition(dstatus.PROGRESSING, "True", dstatus.FOUND_NEW_RS_REASON,
                                                                    f'Found new replica set "{rs_copy["metadata"]["name"]}"', now))
                needs_status = True
            await self._set_revision(d, util.annotations(rs_copy).get(util.REVISION_ANNOTATION, ""), status if needs_status else None)
            return rs_copy
        if not create:
            return None
        template = copy.deepcopy(d["spec"].get("template") or {})
        collision_count = (d.get("status") or {}).get("collisionCount")
        pod_hash = util.compute_hash(template, collision_count)
        template.setdefault("metadata", {})
        template["metadata"]["labels"] = {**(template["metadata"].get("labels") or {}), util.DEFAULT_UNIQUE_LABEL_KEY: pod_hash}
        selector = copy.deepcopy(d["spec"]["selector"])
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), util.DEFAULT_UNIQUE_LABEL_KEY: pod_hash}
        new_rs = {
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": f"{d['metadata']['name']}-{pod_hash}", "namespace": d["metadata"]["namespace"],
                         "ownerReferences": [controllerref.new_controller_ref(d, "apps/v1", "Deployment")],
                         "labels": dict(template["metadata"]["labels"])},
            "spec": {"replicas": 0, "minReadySeconds": d["spec"].get("minReadySeconds") or 0, "selector": selector, "template": template},
        }
        new_rs["spec"]["replicas"] = util.new_rs_new_replicas(d, old_rss + [new_rs], new_rs)
        util.set_new_rs_annotations(d, new_rs, new_revision, exists=False)
        already_exists = False
        try:
            created = await self._rss_api.create(new_rs)
        except ApiError as exc:
            if is_already_exists(exc):
                created = await self._existing_for_collision(d, new_rs)
                already_exists = True
            else:
                message = f'Failed to create new replica set "{new_rs["metadata"]["name"]}": {exc}'
                if util.has_progress_deadline(d) and "NamespaceTerminating" not in str(exc.body):
                    status = copy.deepcopy(d.get("status") or {})
                    dstatus.set_condition(status, dstatus.new_condition(dstatus.PROGRESSING, "False", dstatus.FAILED_RS_CREATE_REASON, message, now))
                    await self._write_status(d, status)
                self.recorder.event(d, "Warning", dstatus.FAILED_RS_CREATE_REASON, message)
                raise
        if not already_exists and new_rs["spec"]["replicas"] > 0:
            self.recorder.event(d, "Normal", "ScalingReplicaSet",
                                f"Scaled up replica set {created['metadata']['name']} to {new_rs['spec']['replicas']}")
        status = None
        if not already_exists and util.has_progress_deadline(d):
            status = copy.deepcopy(d.get("status") or {})
            dstatus.set_condition(status, dstatus.new_condition(dstatus.PROGRESSING, "True", dstatus.NEW_RS_REASON,
                                                                f'Created new replica set "{created["metadata"]["name"]}"', now))
        await self._set_revision(d, new_revision, status)
        return created

    async def _existing_for_collision(self, d: dict, new_rs: dict) -> dict:
        """Create said AlreadyExists: ours with our template (a stale cache) is the new
        ReplicaSet; anything else is a hash collision: bump ``collisionCount`` and retry."""
        name, namespace = new_rs["metadata"]["name"], new_rs["metadata"]["namespace"]
        rs = self._rss.indexer.get(name, namespace) or await self._rss_api.get(name, namespace)
        ref = controllerref.controller_ref(rs)
        if ref is not None and ref.get("uid") == d["metadata"]["uid"] and util.equal_ignore_hash(d["spec"]["template"], rs["spec"].get("template") or {}):
            return rs
        status = copy.deepcopy(d.get("status") or {})
        status["collisionCount"] = int(status.get("collisionCount") or 0) + 1
        await self._write_status(d, status)
        raise HashCollision(f"hash collision for ReplicaSet {namespace}/{name}: collisionCount now {status['collisionCount']}")

    async def _set_revision(self, d: dict, revision: str, status: dict | None) -> None:
        """``SetDeploymentRevision`` + UpdateStatus, which upstream's status strategy lets carry
        the annotation. A status write that drops metadata changes is followed by an Update of
        the Deployment (the deployment-controller role may update, not patch, Deployments)."""
        needs_annotation = bool(revision) and util.annotations(d).get(util.REVISION_ANNOTATION) != revision
        if not needs_annotation and status is None:
            return
        if needs_annotation:
            d["metadata"]["annotations"] = {**util.annotations(d), util.REVISION_ANNOTATION: revision}
        updated = await self._write_status(d, status if status is not None else copy.deepcopy(d.get("status") or {}))
        if needs_annotation and util.annotations(updated).get(util.REVISION_ANNOTATION) != revision:
            d["metadata"]["annotations"] = {**util.annotations(d), util.REVISION_ANNOTATION: revision}
            updated = await self._deployments_api.update(d)
            d["metadata"] = updated["metadata"]

    async def _write_status(self, d: dict, status: dict) -> dict:
        d["status"] = status
        updated = await self._deployments_api.update_status(d)
        d["metadata"]["resourceVersion"] = updated["metadata"].get("resourceVersion")
        return updated

    async def _scale(self, rs: dict, size: int, d: dict, *, refresh_annotations: bool = True) -> dict:
        """``scaleReplicaSet``: one Update of the size and the replica annotations."""
        desired = util.replicas(d)
        max_replicas = desired + util.max_surge(d)
        size_changes = util.replicas(rs) != size
        if not size_changes and not (refresh_annotations and util.replicas_annotations_need_update(rs, desired, max_replicas)):
            return rs
        old_size = util.replicas(rs)
        rs_copy = copy.deepcopy(rs)
        rs_copy["spec"]["replicas"] = size
        util.set_replicas_annotations(rs_copy, desired, max_replicas)
        updated = await self._rss_api.update(rs_copy)
        if size_changes:
            direction = "up" if old_size < size else "down"
            self.recorder.event(d, "Normal", "ScalingReplicaSet", f"Scaled {direction} replica set {rs['metadata']['name']} to {size} from {old_size}")
        return updated

    async def _scale_named(self, d: dict, rss: list[dict], sizes: dict[str, int], **options) -> list[dict]:
        result = []
        for rs in rss:
            name = rs["metadata"]["name"]
            result.append(await self._scale(rs, sizes[name], d, **options) if name in sizes else rs)
        return result

    # ---- the strategies ------------------------------------------------------------------------

    async def _rollout_rolling(self, d: dict, rs_list: list[dict]) -> None:
        new_rs, old_rss = await self._get_all_and_sync_revision(d, rs_list, True)
        all_rss = old_rss + [new_rs]
        new_size = rolling.new_replica_set_size(d, all_rss, new_rs)
        if new_size is not None:
            new_rs = await self._scale(new_rs, new_size, d)
            await self._sync_rollout_status(d, old_rss + [new_rs], new_rs)
            return
        active_old = util.filter_active(old_rss)
        sizes = rolling.old_replica_set_sizes(d, all_rss, active_old, new_rs)
        if sizes:
            old_rss = await self._scale_named(d, old_rss, sizes)
            await self._sync_rollout_status(d, old_rss + [new_rs], new_rs)
            return
        if dstatus.deployment_complete(d, d.get("status") or {}):
            await self._cleanup(d, old_rss)
        await self._sync_rollout_status(d, all_rss, new_rs)

    async def _rollout_recreate(self, d: dict, rs_list: list[dict], pod_map: dict[str, list[dict]]) -> None:
        new_rs, old_rss = await self._get_all_and_sync_revision(d, rs_list, False)
        active_old = util.filter_active(old_rss)
        if active_old:
            old_rss = await self._scale_named(d, old_rss, {rs["metadata"]["name"]: 0 for rs in active_old}, refresh_annotations=False)
            await self._sync_rollout_status(d, old_rss + [new_rs], new_rs)
            return
        if _old_pods_running(new_rs, old_rss, pod_map):
            await self._sync_rollout_status(d, old_rss + [new_rs], new_rs)
            return
        if new_rs is None:
            new_rs, old_rss = await self._get_all_and_sync_revision(d, rs_list, True)
        if util.replicas(new_rs) != util.replicas(d):
            new_rs = await self._scale(new_rs, util.replicas(d), d)
        if dstatus.deployment_complete(d, d.get("status") or {}):
            await self._cleanup(d, old_rss)
        await self._sync_rollout_status(d, old_rss + [new_rs], new_rs)

    async def _sync_scale(self, d: dict, rs_list: list[dict]) -> None:
        """``sync``: proportional scaling (a scaling event, or paused), cleanup when paused,
        then the status."""
        new_rs, old_rss = await self._get_all_and_sync_revision(d, rs_list, False)
        sizes = util.proportional_sizes(d, new_rs, old_rss)
        # only the proportional split rewrites the replica annotations of unchanged sets
        proportional = util.find_active_or_latest(new_rs, old_rss) is None and not util.is_saturated(d, new_rs)
        every = ([new_rs] if new_rs is not None else []) + old_rss
        for index, rs in enumerate(every):
            name = rs["metadata"]["name"]
            if name in sizes:
                every[index] = await self._scale(rs, sizes[name], d, refresh_annotations=proportional or util.replicas(rs) != sizes[name])
        new_rs = every[0] if new_rs is not None else None
        old_rss = every[1:] if new_rs is not None else every
        if d["spec"].get("paused") and util.rollback_to(d) is None:
            await self._cleanup(d, old_rss)
        await self._sync_status(d, old_rss + [new_rs], new_rs)

    async def _rollback(self, d: dict, rs_list: list[dict]) -> None:
        """``rollback``: the ``deprecated.deployment.rollback.to`` request (the old
        ``spec.rollbackTo``; kubectl 1.32 patches the template itself). The template of the
        ReplicaSet with that revision goes back into the Deployment; the request is cleared in
        every case, with one Update."""
        new_rs, old_rss = await self._get_all_and_sync_revision(d, rs_list, True)
        every = old_rss + ([new_rs] if new_rs is not None else [])
        target = util.rollback_to(d)
        if target == 0:
            target = util.last_revision(every)
            if target == 0:
                self.recorder.event(d, "Warning", "DeploymentRollbackRevisionNotFound", "Unable to find last revision.")
                await self._clear_rollback(d)
                return
        rs = next((rs for rs in every if util.revision(rs) == target), None)
        if rs is None:
            self.recorder.event(d, "Warning", "DeploymentRollbackRevisionNotFound", "Unable to find the revision to rollback to.")
            await self._clear_rollback(d)
            return
        if util.equal_ignore_hash(d["spec"]["template"], rs["spec"].get("template") or {}):
            self.recorder.event(d, "Warning", "DeploymentRollbackTemplateUnchanged",
                                f'The rollback revision contains the same template as current deployment "{d["metadata"]["name"]}"')
            await self._clear_rollback(d)
            return
        await self._clear_rollback(util.rolled_back(d, rs))
        self.recorder.event(d, "Normal", "DeploymentRollback", f'Rolled back deployment "{d["metadata"]["name"]}" to revision {target}')

    async def _clear_rollback(self, d: dict) -> None:
        """``updateDeploymentAndClearRollbackTo``."""
        d["metadata"]["annotations"] = {k: v for k, v in util.annotations(d).items() if k != util.ROLLBACK_TO_ANNOTATION}
        await self._deployments_api.update(d)

    async def _sync_status_only(self, d: dict, rs_list: list[dict]) -> None:
        new_rs, old_rss = await self._get_all_and_sync_revision(d, rs_list, False)
        await self._sync_status(d, old_rss + [new_rs], new_rs)

    async def _cleanup(self, d: dict, old_rss: list[dict]) -> None:
        for rs in util.replica_sets_to_clean_up(d, old_rss):
            try:
                await self._rss_api.delete(rs["metadata"]["name"], rs["metadata"]["namespace"])
            except ApiError as exc:
                if not is_not_found(exc):
                    raise

    # ---- status --------------------------------------------------------------------------------

    async def _check_paused_conditions(self, d: dict) -> None:
        status = dstatus.paused_condition_update(d, self.clock.now())
        if status is not None:
            await self._write_status(d, status)

    async def _sync_status(self, d: dict, all_rss: list[dict | None], new_rs: dict | None) -> None:
        """``syncDeploymentStatus``: the counts and Available, written if they changed."""
        status = dstatus.calculate_status(d, [rs for rs in all_rss if rs is not None], new_rs, self.clock.now())
        if omitempty(status) != omitempty(d.get("status") or {}):
            await self._write_status(d, status)

    async def _sync_rollout_status(self, d: dict, all_rss: list[dict | None], new_rs: dict | None) -> None:
        """``syncRolloutStatus``: also Progressing; unchanged -> look again at the deadline."""
        now = self.clock.now()
        status = dstatus.rollout_status(d, [rs for rs in all_rss if rs is not None], new_rs, now)
        if omitempty(status) == omitempty(d.get("status") or {}):
            after = dstatus.requeue_after(d, status, now)
            if after == 0:
                self.queue.add_rate_limited(_key(d))
            elif after is not None:
                self.queue.add_after(_key(d), after)
            return
        await self._write_status(d, status)


def _old_pods_running(new_rs: dict | None, old_rss: list[dict], pod_map: dict[str, list[dict]]) -> bool:
    """``oldPodsRunning``: an old ReplicaSet still reports Pods, or a Pod of one is not yet
    Succeeded/Failed (terminating ones included: Recreate waits until they are gone)."""
    if sum(util.status_int(rs, "replicas") for rs in old_rss) > 0:
        return True
    new_uid = new_rs["metadata"].get("uid") if new_rs is not None else None
    for uid, pods in pod_map.items():
        if uid == new_uid:
            continue
        if any((pod.get("status") or {}).get("phase") not in ("Failed", "Succeeded") for pod in pods):
            return True
    return False
