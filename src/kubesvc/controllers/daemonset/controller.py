"""The DaemonSet controller's shell (pkg/controller/daemon/daemon_controller.go, update.go):
informers enqueue DaemonSet keys; a worker syncs one from the caches.

What wakes a DaemonSet: its own changes; a Pod it controls (or an orphan it selects) added,
changed or deleted; a Node added, changed (labels, taints) or deleted (every DaemonSet); a
ControllerRevision it owns changed. A sync (``syncDaemonSet``):

1. selector ``{}`` -> Warning ``SelectingAll``, nothing else; being deleted -> nothing;
2. **history** (``constructHistory``): claims ControllerRevisions, finds the one whose data is
   the current template (else creates ``<ds>-<hash>`` with revision max + 1, or bumps the
   found one's revision), so ``kubectl rollout history|undo daemonset`` work;
3. with expectations met: **manage** (create a Pod on each node that should run one and has
   none, delete failed/succeeded/extra ones and those on nodes that should not run one, and
   those pinned to nodes that no longer exist), then the **rolling update** (``decisions``);
   then history cleanup beyond ``revisionHistoryLimit`` (never a revision a live Pod uses);
4. the status (written if it changed; ``observedGeneration`` only once expectations are met).

Failed daemon Pods are killed with a per-node back-off (1 s doubling to 15 min) and a Warning
``FailedDaemonPod`` Event, so a crashing Pod is not recreated in a tight loop.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Hashable

from kubesvc.api.selectors import LabelSelector, selector_from_label_selector
from kubesvc.client.cache import split_key
from kubesvc.client.record import EventRecorder
from kubesvc.client.rest import PODS, ApiError, Resource, RestClient, is_already_exists, is_not_found
from kubesvc.controllers import controllerref
from kubesvc.controllers.daemonset import decisions as dd
from kubesvc.controllers.deployment.util import compute_hash
from kubesvc.controllers.expectations import Expectations
from kubesvc.controllers.history import revisions as hist
from kubesvc.controllers.informers import SharedInformers
from kubesvc.controllers.podcontrol import PodControl, pod_from_template, slow_start_batch
from kubesvc.controllers.runtime import QueueController, omitempty
from kubesvc.util.clock import Clock

log = logging.getLogger("kubesvc.controllers.daemonset")

DAEMONSETS = Resource("apps", "v1", "daemonsets", True, "DaemonSet")
CONTROLLERREVISIONS = Resource("apps", "v1", "controllerrevisions", True, "ControllerRevision")
COMPONENT = "daemonset-controller"
BURST_REPLICAS = 250
FAILED_POD_BACKOFF = (1.0, 900.0)  # flowcontrol.NewBackOff(1s, 15m)


def _key(obj: dict) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


class DaemonSetController(QueueController):
    queue_name = "daemonset"

    def __init__(self, client: RestClient, informers: SharedInformers, *, workers: int = 2, recorder: EventRecorder | None = None,
                 clock: Clock | None = None):
        super().__init__(client, COMPONENT, workers=workers, recorder=recorder, clock=clock)
        self.expectations = Expectations(self.clock)
        self._failed_backoff: dict[str, tuple[float, float]] = {}  # key -> (delay, last kill monotonic)
        self._ds_api = client.resource(DAEMONSETS)
        self._revisions_api = client.resource(CONTROLLERREVISIONS)
        self._pods_api = client.resource(PODS)
        self._pod_control = PodControl(client, self.recorder)
        self._daemonsets = informers.informer(DAEMONSETS)
        self._revisions = informers.informer(CONTROLLERREVISIONS)
        self._pods = informers.pods
        self._nodes = informers.nodes
        self._daemonsets.add_event_handler(self._enqueue, lambda old, new: self._enqueue(new), self._on_ds_delete)
        self._pods.add_event_handler(self._on_pod_add, self._on_pod_update, self._on_pod_delete)
        self._nodes.add_event_handler(self._enqueue_all, self._on_node_update, self._enqueue_all)
        self._revisions.add_event_handler(self._on_owned, lambda old, new: self._on_owned(new), self._on_owned)

    # ---- handlers ----------------------------------------------------------------------------

    def _enqueue(self, ds: dict) -> None:
        self.queue.add(_key(ds))

    def _on_ds_delete(self, ds: dict) -> None:
        self.expectations.delete(_key(ds))
        self._enqueue(ds)

    def _enqueue_all(self, _node: dict | None = None) -> None:
        for ds in self._daemonsets.indexer.list():
            self._enqueue(ds)

    def _on_node_update(self, old: dict, new: dict) -> None:
        def relevant(node: dict) -> tuple:
            return (node["metadata"].get("labels"), (node.get("spec") or {}).get("taints"), (node.get("spec") or {}).get("unschedulable"))

        if relevant(old) != relevant(new):
            self._enqueue_all()

    def _owner(self, obj: dict) -> dict | None:
        return controllerref.resolve(controllerref.controller_ref(obj), "DaemonSet", self._daemonsets.indexer, obj["metadata"].get("namespace"))

    def _on_owned(self, obj: dict) -> None:
        ds = self._owner(obj)
        if ds is not None:
            self._enqueue(ds)

    def _selecting(self, pod: dict) -> list[dict]:
        found = []
        for ds in self._daemonsets.indexer.by_index("namespace", pod["metadata"].get("namespace", "")):
            try:
                selector = selector_from_label_selector((ds.get("spec") or {}).get("selector"))
            except Exception:
                continue
            if not selector.is_everything() and selector.matches(pod["metadata"].get("labels")):
                found.append(ds)
        return found

    def _on_pod_add(self, pod: dict) -> None:
        ds = self._owner(pod)
        if ds is not None:
            self.expectations.creation_observed(_key(ds))
            self._enqueue(ds)
        elif controllerref.controller_ref(pod) is None:
            for ds in self._selecting(pod):
                self._enqueue(ds)

    def _on_pod_update(self, old: dict, new: dict) -> None:
        if old["metadata"].get("resourceVersion") == new["metadata"].get("resourceVersion"):
            return
        ds = self._owner(new)
        if ds is not None:
            if new["metadata"].get("deletionTimestamp") and not old["metadata"].get("deletionTimestamp"):
                self.expectations.deletion_observed(_key(ds), _key(new))
            self._enqueue(ds)
            # minReadySeconds: look again when it has become available
            min_ready = int((ds.get("spec") or {}).get("minReadySeconds") or 0)
            if min_ready and dd.is_ready(new) and not dd.is_ready(old):
                self.queue.add_after(_key(ds), min_ready + 1)
        elif controllerref.controller_ref(new) is None:
            for ds in self._selecting(new):
                self._enqueue(ds)
        old_ds = self._owner(old)
        if old_ds is not None and old_ds is not ds:
            self._enqueue(old_ds)

    def _on_pod_delete(self, pod: dict) -> None:
        ds = self._owner(pod)
        if ds is not None:
            self.expectations.deletion_observed(_key(ds), _key(pod))
            self._enqueue(ds)

    # ---- the sync ----------------------------------------------------------------------------

    async def sync(self, key: Hashable) -> None:
        key = str(key)
        namespace, name = split_key(key)
        cached = self._daemonsets.indexer.get(name, namespace)
        if cached is None:
            self.expectations.delete(key)
            return
        ds = copy.deepcopy(cached)
        try:
            selector = selector_from_label_selector((ds.get("spec") or {}).get("selector"))
        except Exception:
            return
        if selector.is_everything():
            self.recorder.event(ds, "Warning", "SelectingAll", "This daemon set is selecting all pods. A non-empty selector is required.")
            return
        if ds["metadata"].get("deletionTimestamp"):
            return
        nodes = sorted(self._nodes.indexer.list(), key=lambda n: n["metadata"]["name"])
        current, old = await self._construct_history(ds, selector)
        hash_ = (current["metadata"].get("labels") or {}).get(dd.UNIQUE_LABEL_KEY, "")
        if not self.expectations.satisfied(key):
            await self._update_status(ds, selector, nodes, hash_, observed=False)
            return
        pods = await self._claim_pods(ds, selector)
        await self._manage(ds, key, nodes, pods, hash_)
        if self.expectations.satisfied(key) and ((ds.get("spec") or {}).get("updateStrategy") or {}).get("type", dd.ROLLING_UPDATE) == dd.ROLLING_UPDATE:
            node_pods = self._node_pods(self._owned_pods(ds))
            should_run = {n["metadata"]["name"]: dd.node_should_run(ds, n)[0] for n in nodes}
            for node_name in list(node_pods):
                should_run.setdefault(node_name, False)
            to_delete, create_on = dd.rolling_update(ds, {n: node_pods.get(n, []) for n in should_run}, should_run, hash_, self.clock.now())
            await self._sync_nodes(ds, key, to_delete, create_on, hash_)
        await self._cleanup_history(ds, old)
        await self._update_status(ds, selector, nodes, hash_, observed=True)

    # ---- Pods ----------------------------------------------------------------------------------

    def _owned_pods(self, ds: dict) -> list[dict]:
        uid = ds["metadata"].get("uid")
        return [p for p in self._pods.indexer.by_index("namespace", ds["metadata"].get("namespace", ""))
                if (controllerref.controller_ref(p) or {}).get("uid") == uid]

    async def _claim_pods(self, ds: dict, selector: LabelSelector) -> list[dict]:
        candidates = self._pods.indexer.by_index("namespace", ds["metadata"].get("namespace", ""))

        async def fresh():
            try:
                return await self._ds_api.get(ds["metadata"]["name"], ds["metadata"]["namespace"])
            except ApiError as exc:
                if is_not_found(exc):
                    return None
                raise

        return await controllerref.claim(ds, candidates, selector, self._pods_api, "apps/v1", "DaemonSet", fresh)

    @staticmethod
    def _node_pods(pods: list[dict], include_deleted_terminal: bool = False) -> dict[str, list[dict]]:
        """``getNodesToDaemonPods``: Pods by the node they run on or are pinned to."""
        by_node: dict[str, list[dict]] = {}
        for pod in pods:
            terminal = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            if not include_deleted_terminal and terminal and pod["metadata"].get("deletionTimestamp"):
                continue
            node = dd.target_node(pod)
            if node:
                by_node.setdefault(node, []).append(pod)
        return by_node

    async def _manage(self, ds: dict, key: str, nodes: list[dict], pods: list[dict], hash_: str) -> None:
        node_pods = self._node_pods(pods)
        surge, _ = dd.surge_and_unavailable(ds, sum(1 for n in nodes if dd.node_should_run(ds, n)[0]))
        now = self.clock.now()
        create_on, delete = [], []
        node_names = set()
        for node in nodes:
            name = node["metadata"]["name"]
            node_names.add(name)
            should_run, should_continue = dd.node_should_run(ds, node)
            on_node = node_pods.get(name, [])
            if should_run and not on_node:
                create_on.append(name)
                continue
            if not on_node:
                continue
            to_delete, failed, _succeeded = dd.pods_to_delete_on_node(ds, on_node, should_continue, surge, hash_, now)
            for pod in failed:
                backoff_key = f"{ds['metadata']['uid']}/{ds.get('status', {}).get('observedGeneration', 0)}/{name}"
                if self._in_backoff(backoff_key):
                    self.queue.add_after(key, self._failed_backoff[backoff_key][0])
                    to_delete = [p for p in to_delete if p is not pod]
                    continue
                self.recorder.event(ds, "Warning", "FailedDaemonPod",
                                    f"Found failed daemon pod {pod['metadata']['namespace']}/{pod['metadata']['name']} on node {name}, will try to kill it")
            for pod in _succeeded:
                self.recorder.event(ds, "Normal", "SucceededDaemonPod",
                                    f"Found succeeded daemon pod {pod['metadata']['namespace']}/{pod['metadata']['name']} on node {name}, will try to delete it")
            delete += to_delete
        # Pods pinned to nodes that are gone
        for node_name, on_node in node_pods.items():
            if node_name not in node_names:
                delete += [p for p in on_node if not p["metadata"].get("deletionTimestamp")]
        await self._sync_nodes(ds, key, delete, create_on, hash_)

    def _in_backoff(self, backoff_key: str) -> bool:
        """``failedPodsBackoff``: first kill at once, then 1 s doubling to 15 min per node."""
        now = self.clock.monotonic()
        delay, last = self._failed_backoff.get(backoff_key, (0.0, 0.0))
        if delay and now - last < delay:
            return True
        self._failed_backoff[backoff_key] = (min(max(delay * 2, FAILED_POD_BACKOFF[0]), FAILED_POD_BACKOFF[1]), now)
        return False

    async def _sync_nodes(self, ds: dict, key: str, delete: list[dict], create_on: list[str], hash_: str) -> None:
        """``syncNodes``: creates (slow start, at most 250) and deletes under expectations."""
        create_on = create_on[:BURST_REPLICAS]
        delete = delete[:BURST_REPLICAS]
        if not create_on and not delete:
            return
        self.expectations.expect(key, creations=len(create_on), deletions=[_key(p) for p in delete])
        errors: list[Exception] = []
        pending = list(create_on)

        async def create_one() -> None:
            node_name = pending.pop(0)
            template = dd.pod_template_for_node(ds, node_name, hash_)
            try:
                await self._pod_control.create(ds, pod_from_template(template, ds, "apps/v1", "DaemonSet"))
            except Exception:
                self.expectations.creation_observed(key)
                raise

        if create_on:
            created, error = await slow_start_batch(len(create_on), create_one)
            if error is not None:
                for _ in range(len(create_on) - created - 1):
                    self.expectations.creation_observed(key)
                errors.append(error)
        for pod in delete:
            try:
                await self._pod_control.delete(ds, pod)
            except ApiError as exc:
                self.expectations.deletion_observed(key, _key(pod))
                errors.append(exc)
        if errors:
            raise errors[0]

    # ---- history -------------------------------------------------------------------------------

    async def _construct_history(self, ds: dict, selector: LabelSelector) -> tuple[dict, list[dict]]:
        candidates = self._revisions.indexer.by_index("namespace", ds["metadata"].get("namespace", ""))

        async def fresh():
            try:
                return await self._ds_api.get(ds["metadata"]["name"], ds["metadata"]["namespace"])
            except ApiError as exc:
                if is_not_found(exc):
                    return None
                raise

        histories = await controllerref.claim(ds, candidates, selector, self._revisions_api, "apps/v1", "DaemonSet", fresh)
        data = dd.history_data(ds)
        current, old = [], []
        for history in histories:
            if dd.UNIQUE_LABEL_KEY not in (history["metadata"].get("labels") or {}):
                history = copy.deepcopy(history)
                history["metadata"].setdefault("labels", {})[dd.UNIQUE_LABEL_KEY] = history["metadata"]["name"]
                history = await self._revisions_api.update(history)
            (current if history.get("data") == data else old).append(history)
        next_revision = hist.max_revision(old) + 1
        if not current:
            return await self._snapshot(ds, next_revision), old
        current = hist.sort_revisions(current)
        keep = current[-1]
        for duplicate in current[:-1]:  # dedupCurHistories: one current revision
            try:
                await self._revisions_api.delete(duplicate["metadata"]["name"], duplicate["metadata"]["namespace"])
            except ApiError as exc:
                if not is_not_found(exc):
                    raise
        if hist.revision_number(keep) < next_revision:
            keep = copy.deepcopy(keep)
            keep["revision"] = next_revision
            keep = await self._revisions_api.update(keep)
        return keep, old

    async def _snapshot(self, ds: dict, revision: int) -> dict:
        collision_count = (ds.get("status") or {}).get("collisionCount")
        hash_ = compute_hash((ds.get("spec") or {}).get("template") or {}, collision_count)
        template_labels = (((ds.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
        history = hist.new_controller_revision(ds, controllerref.new_controller_ref(ds, "apps/v1", "DaemonSet"), template_labels,
                                               dd.history_data(ds), revision, hash_, dd.UNIQUE_LABEL_KEY,
                                               annotations=ds["metadata"].get("annotations"))
        try:
            return await self._revisions_api.create(history)
        except ApiError as exc:
            if not is_already_exists(exc):
                raise
        existing = await self._revisions_api.get(history["metadata"]["name"], ds["metadata"]["namespace"])
        if existing.get("data") == history["data"]:
            return existing
        current = await self._ds_api.get(ds["metadata"]["name"], ds["metadata"]["namespace"])
        if (current.get("status") or {}).get("collisionCount") != collision_count:
            raise RuntimeError(f"found a stale collision count of DaemonSet {ds['metadata']['name']!r}; will retry until it is updated")
        current.setdefault("status", {})["collisionCount"] = int(collision_count or 0) + 1
        await self._ds_api.update_status(current)
        raise RuntimeError(f"hash collision for ControllerRevision {history['metadata']['name']}")

    async def _cleanup_history(self, ds: dict, old: list[dict]) -> None:
        limit = (ds.get("spec") or {}).get("revisionHistoryLimit")
        limit = 10 if limit is None else int(limit)
        to_kill = len(old) - limit
        if to_kill <= 0:
            return
        live = {(p["metadata"].get("labels") or {}).get(dd.UNIQUE_LABEL_KEY) for p in self._owned_pods(ds)}
        for history in hist.sort_revisions(old):
            if to_kill <= 0:
                break
            if (history["metadata"].get("labels") or {}).get(dd.UNIQUE_LABEL_KEY) in live:
                continue
            try:
                await self._revisions_api.delete(history["metadata"]["name"], history["metadata"]["namespace"])
            except ApiError as exc:
                if not is_not_found(exc):
                    raise
            to_kill -= 1

    # ---- status --------------------------------------------------------------------------------

    async def _update_status(self, ds: dict, selector: LabelSelector, nodes: list[dict], hash_: str, *, observed: bool) -> None:
        now = self.clock.now()
        counts = dd.status_counts(ds, nodes, self._node_pods(self._owned_pods(ds)), hash_, now)
        status = copy.deepcopy(ds.get("status") or {})
        status.update(counts)
        if observed:
            status["observedGeneration"] = int(ds["metadata"].get("generation") or 0)
        if omitempty(status) != omitempty(ds.get("status") or {}):
            ds["status"] = status
            updated = await self._ds_api.update_status(ds)
            ds["metadata"]["resourceVersion"] = updated["metadata"].get("resourceVersion")
        min_ready = int((ds.get("spec") or {}).get("minReadySeconds") or 0)
        if min_ready and counts["numberReady"] != counts["numberAvailable"]:
            self.queue.add_after(_key(ds), min_ready)
