"""The Job controller's shell (pkg/controller/job/job_controller.go; NonIndexed and Indexed Jobs,
podFailurePolicy, backoffLimitPerIndex and successPolicy as ``policies`` decides them):
informers enqueue Job keys, a worker syncs one from the caches (``decisions`` decides).

A sync: claims the Job's Pods (selector ``batch.kubernetes.io/controller-uid``); finds the Pods
that finished since the last count; decides whether the Job failed (back-off limit, active
deadline) or succeeded; otherwise creates Pods (slow start, after the failure back-off) or
deletes the excess; then writes the status through ``uncountedTerminatedPods`` and removes the
Pods' tracking finalizers, so each finished Pod is counted once. Pods are created only when
the controller's expectations are met (every earlier create and delete seen by the
informer), and a Pod whose finalizer removal is not yet seen is not counted again.

A tracking finalizer left on a Pod whose Job is gone or finished is removed as soon as the Pod
is finished or being deleted (upstream's orphan queue), so such Pods do not hang Terminating.

A Job whose ``spec.managedBy`` names another controller is counted in
``jobs_by_external_controller_total`` when the informer adds it and is otherwise left alone:
no sync, no Pods, no status, its Pods' finalizers kept while it exists (upstream's
``managedByExternalController`` in ``addJob``, ``syncJob`` and ``syncOrphanPod``).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Hashable

from kubesvc.api.pods import is_ready
from kubesvc.api.selectors import selector_from_label_selector
from kubesvc.client.cache import split_key
from kubesvc.client.record import EventRecorder
from kubesvc.client.rest import PODS, ApiError, Resource, RestClient, is_not_found
from kubesvc.client.workqueue import ItemExponentialBackoff, WorkQueue
from kubesvc.controllers import controllerref
from kubesvc.controllers.expectations import Expectations
from kubesvc.controllers.job import decisions as jd
from kubesvc.controllers.job import metrics as jm
from kubesvc.controllers.job import policies
from kubesvc.controllers.informers import SharedInformers
from kubesvc.controllers.podcontrol import PodControl, pod_from_template, slow_start_batch
from kubesvc.controllers.runtime import omitempty, run_workers
from kubesvc.util.clock import Clock, RealClock
from kubesvc.util.golang import rfc3339

log = logging.getLogger("kubesvc.controllers.job")

JOBS = Resource("batch", "v1", "jobs", True, "Job")
COMPONENT = "job-controller"
REMOVE_FINALIZER_PATCH = {"metadata": {"$deleteFromPrimitiveList/finalizers": [jd.JOB_TRACKING_FINALIZER]}}


def _key(obj: dict) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


class JobController:
    def __init__(self, client: RestClient, informers: SharedInformers, *, workers: int = 5, recorder: EventRecorder | None = None,
                 clock: Clock | None = None, metrics: jm.JobMetrics | None = None,
                 pod_failure_backoff: tuple[float, float] = (jd.DEFAULT_BACKOFF, jd.MAX_BACKOFF), job_managed_by: bool = True):
        self.client = client
        # the JobManagedBy feature gate (beta, on in 1.32): off, spec.managedBy is not looked at
        self.job_managed_by = job_managed_by
        self.workers = workers
        self.clock = clock or RealClock()
        self.metrics = metrics or jm.JobMetrics()
        # (first delay, cap) of the Pod failure back-off: 10 s doubling to 10 min, as upstream;
        # tests shorten it as upstream's integration tests set DefaultJobPodFailureBackOff
        self.pod_failure_backoff = pod_failure_backoff
        self.recorder = recorder or EventRecorder(client, COMPONENT, self.clock)
        # API errors: 1 s doubling to 1 min (DefaultJobApiBackOff, MaxJobApiBackOff)
        self.queue = WorkQueue(ItemExponentialBackoff(1.0, 60.0), clock=self.clock)
        self.orphan_queue = WorkQueue(ItemExponentialBackoff(1.0, 60.0), clock=self.clock)
        self.expectations = Expectations(self.clock)
        self._finalizer_expectations: dict[str, set[str]] = {}  # job key -> pod uids
        self._backoff: dict[str, jd.BackoffRecord] = {}
        self._jobs_api = client.resource(JOBS)
        self._pods_api = client.resource(PODS)
        self._pod_control = PodControl(client, self.recorder)
        self._jobs = informers.informer(JOBS)
        self._pods = informers.pods
        self._jobs.add_event_handler(self._on_job_add, self._on_job_update, self._on_job_delete)
        self._pods.add_event_handler(self._on_pod_add, self._on_pod_update, self._on_pod_delete)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(run_workers("job", self.queue, self.sync, self.workers))
            group.create_task(run_workers("job-orphan-pods", self.orphan_queue, self._remove_orphan_finalizer, 1))

    # ---- handlers ----------------------------------------------------------------------------

    def _enqueue(self, job: dict) -> None:
        self.queue.add(_key(job))

    def _external(self, job: dict) -> str | None:
        """``managedByExternalController``: the other controller ``spec.managedBy`` names, if any."""
        return jd.managed_by_external_controller(job) if self.job_managed_by else None

    def _on_job_add(self, job: dict) -> None:
        self._enqueue(job)
        controller_name = self._external(job)
        if controller_name is not None:
            self.metrics.by_external_controller.labels(controller_name).inc()

    def _on_job_update(self, old: dict, new: dict) -> None:
        self._enqueue(new)
        # a new activeDeadlineSeconds: look again when it passes
        after = jd.seconds_to_active_deadline(new, self.clock.now())
        if after is not None and after > 0 and (old.get("spec") or {}).get("activeDeadlineSeconds") != (new.get("spec") or {}).get("activeDeadlineSeconds"):
            self.queue.add_after(_key(new), after)

    def _on_job_delete(self, job: dict) -> None:
        self._enqueue(job)
        for pod in self._pods.indexer.by_index("namespace", job["metadata"].get("namespace", "")):
            if jd.has_tracking_finalizer(pod):
                self._check_orphan(pod)

    def _job_of(self, pod: dict) -> dict | None:
        return controllerref.resolve(controllerref.controller_ref(pod), "Job", self._jobs.indexer, pod["metadata"].get("namespace"))

    def _check_orphan(self, pod: dict) -> None:
        if not jd.has_tracking_finalizer(pod):
            return
        ref = controllerref.controller_ref(pod)
        if ref is not None and ref.get("kind") != "Job":
            return
        job = self._job_of(pod)
        if job is not None and self._external(job) is not None:
            return  # its own controller removes the finalizer
        if job is None or jd.is_finished(job):
            if not jd.is_active(pod):
                self.orphan_queue.add(_key(pod))

    def _on_pod_add(self, pod: dict) -> None:
        self.metrics.pod_changed(None, pod)
        job = self._job_of(pod)
        if job is None:
            self._check_orphan(pod)
            return
        key = _key(job)
        if pod["metadata"].get("deletionTimestamp"):
            self.expectations.deletion_observed(key, _key(pod))
        self.expectations.creation_observed(key)
        self.queue.add(key)

    def _on_pod_update(self, old: dict, new: dict) -> None:
        self.metrics.pod_changed(old, new)
        if old["metadata"].get("resourceVersion") == new["metadata"].get("resourceVersion"):
            return
        job = self._job_of(new)
        if job is None:
            self._check_orphan(new)
            return
        key = _key(job)
        if new["metadata"].get("deletionTimestamp") and not old["metadata"].get("deletionTimestamp"):
            self.expectations.deletion_observed(key, _key(new))
        if not jd.has_tracking_finalizer(new):
            self._finalizer_expectations.get(key, set()).discard(new["metadata"].get("uid"))
        self.queue.add(key)

    def _on_pod_delete(self, pod: dict) -> None:
        self.metrics.pod_changed(pod, None)
        job = self._job_of(pod)
        if job is None:
            return
        key = _key(job)
        self.expectations.deletion_observed(key, _key(pod))
        self._finalizer_expectations.get(key, set()).discard(pod["metadata"].get("uid"))
        self.queue.add(key)

    async def _remove_orphan_finalizer(self, key: Hashable) -> None:
        namespace, name = split_key(str(key))
        pod = self._pods.indexer.get(name, namespace)
        if pod is None or not jd.has_tracking_finalizer(pod):
            return
        job = self._job_of(pod)
        if job is not None and (not jd.is_finished(job) or self._external(job) is not None):
            return  # adopted again, or another controller's Job: its finalizer is not ours to remove
        await self._remove_finalizer(pod)

    async def _remove_finalizer(self, pod: dict) -> None:
        try:
            await self._pods_api.patch(pod["metadata"]["name"], REMOVE_FINALIZER_PATCH, pod["metadata"]["namespace"], patch_type="strategic")
        except ApiError as exc:
            if not is_not_found(exc):
                raise

    # ---- the sync ----------------------------------------------------------------------------

    async def sync(self, key: Hashable) -> None:
        key = str(key)
        namespace, name = split_key(key)
        cached = self._jobs.indexer.get(name, namespace)
        if cached is None:
            self.expectations.delete(key)
            self._finalizer_expectations.pop(key, None)
            self._backoff.pop(key, None)
            return
        if self._external(cached) is not None:
            return  # another controller's Job (checked here too: a queued key may now name one)
        job = copy.deepcopy(cached)
        if jd.is_finished(job):
            self._backoff.pop(key, None)
            for pod in self._claimed_pods(job):
                if jd.has_tracking_finalizer(pod) and not jd.is_active(pod):
                    await self._remove_finalizer(pod)
            return
        # job_sync_duration_seconds / job_syncs_total: the action is what this sync did
        # (reconciling unless manageJob ran), the result whether it raised
        started, progress = self.clock.monotonic(), {"action": jm.RECONCILING}
        try:
            await self._sync_unfinished(key, job, progress)
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                self.metrics.observe_sync(job, True, progress["action"], self.clock.monotonic() - started)
            raise
        self.metrics.observe_sync(job, False, progress["action"], self.clock.monotonic() - started)

    async def _sync_unfinished(self, key: str, job: dict, progress: dict) -> None:
        satisfied = self.expectations.satisfied(key)
        now = self.clock.now()
        pods = await self._claim(job)
        status = copy.deepcopy(job.get("status") or {})
        uncounted = status.get("uncountedTerminatedPods") or {}
        uncounted_succeeded = set(uncounted.get("succeeded") or [])
        uncounted_failed = set(uncounted.get("failed") or [])
        expected_removals = self._finalizer_expectations.setdefault(key, set())
        active = [p for p in pods if jd.is_active(p)]
        terminating = [p for p in pods if jd.is_terminating(p)]
        newly_succeeded, newly_failed = [], []
        for pod in pods:
            uid = pod["metadata"].get("uid")
            if not jd.has_tracking_finalizer(pod) or uid in uncounted_succeeded or uid in uncounted_failed or uid in expected_removals:
                continue
            if jd.phase(pod) == "Succeeded":
                newly_succeeded.append(pod)
            elif jd.is_failed(pod, job):
                newly_failed.append(pod)
        newly_succeeded = newly_succeeded[:jd.MAX_UNCOUNTED_PODS]
        newly_failed = newly_failed[:max(0, jd.MAX_UNCOUNTED_PODS - len(newly_succeeded))]
        # a failure an Ignore rule of the pod failure policy matches is not counted
        newly_ignored = [p for p in newly_failed if not policies.counts_as_failure(job, p)]
        newly_failed = [p for p in newly_failed if p not in newly_ignored]
        succeeded = int(status.get("succeeded") or 0) + len(uncounted_succeeded) + len(newly_succeeded)
        failed = int(status.get("failed") or 0) + len(uncounted_failed) + len(newly_failed)
        suspended = bool((job.get("spec") or {}).get("suspend"))
        if not suspended and not status.get("startTime"):
            status["startTime"] = rfc3339(now)
            job.setdefault("status", {})["startTime"] = status["startTime"]
        conditions = status.setdefault("conditions", [])
        # (condition type, reason, message) the Job finishes with, if it does: an earlier
        # SuccessCriteriaMet stands; then the failures; then the success rules
        finished: tuple[str, str, str] | None = None
        met = jd.condition(job, jd.SUCCESS_CRITERIA_MET)
        if met is not None:
            finished = (jd.SUCCESS_CRITERIA_MET, met.get("reason", ""), met.get("message", ""))
        else:
            failure = jd.failure(job, failed, now, policies.fail_job_message(job, pods), pods)
            if failure is not None:
                finished = (jd.FAILURE_TARGET, *failure)
            elif not suspended:
                # every sync asks again for the deadline: a delayed add is kept only if it is the
                # earliest one waiting, so one made by an earlier sync may have been dropped
                after = jd.seconds_to_active_deadline(job, now)
                if after is not None:
                    self.queue.add_after(key, max(after, 0))
        succeeded_indexes: set[int] | None = None
        failed_indexes: set[int] | None = None
        delayed: dict[int, dict] = {}
        if jd.is_indexed(job):
            succeeded_indexes = jd.parse_indexes(status.get("completedIndexes"), jd.completions(job))
            succeeded_indexes |= {i for p in pods if jd.phase(p) == "Succeeded" and (i := jd.pod_index(p, job)) is not None}
            status["completedIndexes"] = jd.format_indexes(succeeded_indexes)
            if policies.has_backoff_limit_per_index(job):
                failed_indexes = policies.failed_indexes(job, pods)
                status["failedIndexes"] = jd.format_indexes(failed_indexes)
                if finished is None and (per_index := policies.per_index_failure(job, failed_indexes, succeeded_indexes)):
                    finished = (jd.FAILURE_TARGET, *per_index)
                delayed = policies.pods_with_delayed_deletion(job, pods, active, succeeded_indexes, failed_indexes)
            if finished is None and (matched := policies.match_success_policy(job, succeeded_indexes)):
                finished = (jd.SUCCESS_CRITERIA_MET, policies.SUCCESS_POLICY_REASON, matched)
            complete = len(succeeded_indexes) >= jd.completions(job)
        else:
            complete = jd.is_complete(job, succeeded, len(active))
        if finished is None and complete:
            finished = (jd.SUCCESS_CRITERIA_MET, *jd.COMPLETIONS_REACHED)
        finishing = finished is not None
        # a Job being deleted (foreground deletion, a finalizer) gets no new Pods: manageJob is
        # not called for it (upstream's `job.DeletionTimestamp == nil`); its Pods are still counted
        being_deleted = bool(job["metadata"].get("deletionTimestamp"))
        if not finishing and delayed:
            # a failed Pod of an index to retry keeps its finalizer (uncounted) until its
            # replacement carries the index's failure count on (canRemoveFinalizer)
            held = {p["metadata"].get("uid") for p in delayed.values()}
            newly_failed = [p for p in newly_failed if p["metadata"].get("uid") not in held]
            newly_ignored = [p for p in newly_ignored if p["metadata"].get("uid") not in held]
        record = jd.next_backoff_record(self._backoff.get(key, jd.BackoffRecord()), newly_succeeded, newly_failed + newly_ignored)
        policy_actions = self._policy_actions(job, newly_failed + newly_ignored)
        if finishing:
            jd.set_condition(conditions, jd.new_condition(*finished, now))
            if active and finished[0] == jd.FAILURE_TARGET:
                # deleteActivePods: deleted with their finalizers, and counted as failed (a Job
                # that failed fails its Pods still running), unless the pod failure policy
                # ignores them or an Indexed Pod has no valid index
                await self._delete_active_pods(job, key, active)
                counted = {p["metadata"].get("uid") for p in newly_failed}
                newly_failed += [p for p in active if p["metadata"].get("uid") not in counted and jd.has_tracking_finalizer(p)
                                 and policies.counts_as_failure(job, p) and (not jd.is_indexed(job) or jd.pod_index(p, job) is not None)]
                newly_ignored += [p for p in active if jd.has_tracking_finalizer(p) and p not in newly_failed]
                terminating += active
                active = []
            elif active:
                await self._delete_pods(job, key, active)
                terminating += active
                active = []
        elif satisfied and not being_deleted:
            active = await self._manage(job, key, active, succeeded, terminating, record, now, succeeded_indexes, failed_indexes, delayed,
                                        failed=failed, progress=progress)
        if not finishing and not being_deleted and not jd.condition(job, jd.FAILURE_TARGET):
            self._suspend_conditions(job, conditions, suspended, status, now)
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if is_ready(p))
        status["terminating"] = len(terminating)
        self._backoff[key] = record
        await self._track_and_remove_finalizers(job, key, status, pods, newly_succeeded, newly_failed, finishing, now, newly_ignored,
                                                policy_actions)

    @staticmethod
    def _policy_actions(job: dict, failed_pods: list[dict]) -> dict[str, int]:
        """Failed Pods by the pod failure policy action of the rule they matched (none matched:
        not counted), for pod_failures_handled_by_failure_policy_total."""
        policy = (job.get("spec") or {}).get("podFailurePolicy")
        actions: dict[str, int] = {}
        if policy:
            for pod in failed_pods:
                if (action := policies.match_pod_failure_policy(policy, pod)[2]) is not None:
                    actions[action] = actions.get(action, 0) + 1
        return actions

    def _claimed_pods(self, job: dict) -> list[dict]:
        uid = job["metadata"].get("uid")
        return [p for p in self._pods.indexer.by_index("namespace", job["metadata"].get("namespace", ""))
                if (controllerref.controller_ref(p) or {}).get("uid") == uid]

    async def _claim(self, job: dict) -> list[dict]:
        try:
            selector = selector_from_label_selector((job.get("spec") or {}).get("selector"))
        except Exception:
            return []
        candidates = self._pods.indexer.by_index("namespace", job["metadata"].get("namespace", ""))

        async def fresh():
            try:
                return await self._jobs_api.get(job["metadata"]["name"], job["metadata"]["namespace"])
            except ApiError as exc:
                if is_not_found(exc):
                    return None
                raise

        return await controllerref.claim(job, candidates, selector, self._pods_api, "batch/v1", "Job", fresh)

    async def _manage(self, job: dict, key: str, active: list[dict], succeeded: int, terminating: list[dict],
                      record: jd.BackoffRecord, now, succeeded_indexes: set[int] | None = None,
                      failed_indexes: set[int] | None = None, delayed: dict[int, dict] | None = None, *, failed: int = 0,
                      progress: dict | None = None) -> list[dict]:
        """``manageJob``: delete the excess or create what is missing; returns the active Pods.
        Indexed: Pods of no index, of a succeeded index or a second one of an index go first,
        and new Pods take the lowest indexes still missing (and not failed). With
        ``backoffLimitPerIndex`` each index waits its own back-off, not the Job's. Sets
        ``progress["action"]``: pods_deleted, pods_created (also while waiting out the
        back-off, as upstream) or tracking."""
        progress = progress if progress is not None else {}
        progress["action"] = jm.TRACKING
        if (job.get("spec") or {}).get("suspend"):
            progress["action"] = jm.PODS_DELETED
            if active:
                await self._delete_pods(job, key, active)
            return []
        if succeeded_indexes is not None:
            excess = jd.excess_indexed_pods(job, succeeded_indexes, active)
            if excess:
                progress["action"] = jm.PODS_DELETED
                await self._delete_pods(job, key, excess[:jd.MAX_POD_CREATE_DELETE_PER_SYNC])
                return [p for p in active if p not in excess]
            succeeded = len(succeeded_indexes)
        want = jd.want_active(job, succeeded, len(active))
        if len(active) > want:
            # newest and least ready go first (ActivePods order, reversed: controller_utils)
            victims = sorted(active, key=lambda p: (is_ready(p), p["metadata"].get("creationTimestamp") or ""))[:len(active) - want]
            progress["action"] = jm.PODS_DELETED
            await self._delete_pods(job, key, victims[:jd.MAX_POD_CREATE_DELETE_PER_SYNC])
            return [p for p in active if p not in victims]
        diff = want - len(active)
        if jd.only_replace_failed(job):
            diff -= len(terminating)
        if diff <= 0:
            return active
        progress["action"] = jm.PODS_CREATED
        per_index = failed_indexes is not None
        wait = 0.0 if per_index else jd.remaining_backoff(record, now, *self.pod_failure_backoff)
        if wait > 0:
            self.queue.add_after(key, wait)
            return active
        diff = min(diff, jd.MAX_POD_CREATE_DELETE_PER_SYNC)
        if succeeded_indexes is not None:
            indexes = jd.indexes_to_create(job, succeeded_indexes, active, diff, failed_indexes or set())
            if per_index:
                # getPodCreationInfoForIndependentIndexes: those done waiting now, else look
                # again when the first one is
                waits = {index: policies.remaining_backoff_of_index((delayed or {}).get(index), now, *self.pod_failure_backoff)
                         for index in indexes}
                ready = [index for index in indexes if waits[index] == 0]
                if not ready and waits:
                    self.queue.add_after(key, min(waits.values()))
                indexes = ready
            made = [jd.indexed_template(job, index, policies.failure_count_annotations(job, (delayed or {}).get(index)) if per_index else None)
                    for index in indexes]
        else:
            made = [((job.get("spec") or {}).get("template") or {}, jd.pod_name_prefix(job["metadata"]["name"]))] * diff
        pods = [pod_from_template(template, job, "batch/v1", "Job", generate_name=prefix, extra_finalizers=(jd.JOB_TRACKING_FINALIZER,))
                for template, prefix in made]
        diff = len(pods)
        if not diff:
            return active
        self.expectations.expect_creations(key, diff)
        failures = []

        async def create_one() -> None:
            try:
                await self._pod_control.create(job, pods.pop(0))
            except Exception as exc:
                self.expectations.creation_observed(key)  # its event will never come
                failures.append(exc)
                raise

        created, error = await slow_start_batch(diff, create_one)
        self.metrics.creations(jm.creation_reason(job, failed, len(terminating)), created, len(failures))
        if error is not None:
            skipped = diff - created - 1
            for _ in range(max(0, skipped)):
                self.expectations.creation_observed(key)
            raise error
        return active

    async def _delete_active_pods(self, job: dict, key: str, pods: list[dict]) -> None:
        """``deleteActivePods``: DELETE, the tracking finalizer kept (the status counts the
        Pods before it comes off)."""
        self.expectations.expect_deletions(key, [_key(p) for p in pods])
        errors = []
        for pod in pods:
            try:
                await self._pod_control.delete(job, pod)
            except ApiError as exc:
                self.expectations.deletion_observed(key, _key(pod))
                if not is_not_found(exc):
                    errors.append(exc)
        if errors:
            raise errors[0]

    async def _delete_pods(self, job: dict, key: str, pods: list[dict]) -> None:
        """Tracking finalizer off first, then DELETE (``deleteJobPods``): a Pod the controller
        deletes is not counted as failed."""
        self.expectations.expect_deletions(key, [_key(p) for p in pods])
        errors = []
        for pod in pods:
            try:
                if jd.has_tracking_finalizer(pod):
                    # not looked at again until the informer shows it without the finalizer
                    self._finalizer_expectations.setdefault(key, set()).add(pod["metadata"].get("uid"))
                    await self._remove_finalizer(pod)
                await self._pod_control.delete(job, pod)
            except ApiError as exc:
                self.expectations.deletion_observed(key, _key(pod))
                if jd.has_tracking_finalizer(pod):  # the finalizer may still be on: look at it again
                    self._finalizer_expectations.get(key, set()).discard(pod["metadata"].get("uid"))
                errors.append(exc)
        if errors:
            raise errors[0]

    def _suspend_conditions(self, job: dict, conditions: list[dict], suspended: bool, status: dict, now) -> None:
        if suspended:
            if jd.set_condition(conditions, jd.new_condition(jd.SUSPENDED, "JobSuspended", "Job suspended", now)):
                self.recorder.event(job, "Normal", "Suspended", "Job suspended")
        elif jd.condition(job, jd.SUSPENDED) is not None:
            if jd.set_condition(conditions, jd.new_condition(jd.SUSPENDED, "JobResumed", "Job resumed", now, status="False")):
                self.recorder.event(job, "Normal", "Resumed", "Job resumed")
                status["startTime"] = rfc3339(now)  # the active deadline counts from the resume

    async def _track_and_remove_finalizers(self, job: dict, key: str, status: dict, pods: list[dict], newly_succeeded: list[dict],
                                           newly_failed: list[dict], finishing: bool, now, newly_ignored: list[dict] = (),
                                           policy_actions: dict[str, int] | None = None) -> None:
        """``trackJobStatusAndRemoveFinalizers``: finished Pods into ``uncountedTerminatedPods``
        (written), their finalizers off, then into ``succeeded``/``failed`` (written); the
        final condition once nothing is left terminating or uncounted. A failure the pod
        failure policy ignores only loses its finalizer."""
        before = job.get("status") or {}  # replaced, never changed, by the writes below
        uncounted = status.get("uncountedTerminatedPods") or {}
        succeeded_uids = list(uncounted.get("succeeded") or []) + [p["metadata"]["uid"] for p in newly_succeeded]
        failed_uids = list(uncounted.get("failed") or []) + [p["metadata"]["uid"] for p in newly_failed]
        status["uncountedTerminatedPods"] = {"succeeded": succeeded_uids, "failed": failed_uids} if succeeded_uids or failed_uids else {}
        if newly_succeeded or newly_failed:
            await self._write_status(job, status)
        for action, count in (policy_actions or {}).items():
            self.metrics.failure_policy.labels(action).inc(count)
        by_uid = {p["metadata"].get("uid"): p for p in pods}
        expected = self._finalizer_expectations.setdefault(key, set())
        for uid in succeeded_uids + failed_uids + [p["metadata"]["uid"] for p in newly_ignored]:
            pod = by_uid.get(uid)
            if pod is not None and jd.has_tracking_finalizer(pod) and uid not in expected:
                expected.add(uid)
                try:
                    await self._remove_finalizer(pod)
                except ApiError:
                    expected.discard(uid)
                    raise
        # every uncounted Pod's finalizer is now off (or the Pod gone): count them
        status["succeeded"] = int(status.get("succeeded") or 0) + len(succeeded_uids)
        status["failed"] = int(status.get("failed") or 0) + len(failed_uids)
        status["uncountedTerminatedPods"] = {}
        conditions = status.setdefault("conditions", [])
        finished_now: tuple[str, str] | None = None  # (Complete or Failed, reason) once written
        if finishing and status.get("terminating", 0) == 0 and status.get("active", 0) == 0:
            target = next((c for c in conditions if c.get("type") == jd.FAILURE_TARGET and c.get("status") == "True"), None)
            if target is not None:
                if jd.set_condition(conditions, jd.new_condition(jd.FAILED, target.get("reason", ""), target.get("message", ""), now)):
                    self.recorder.event(job, "Warning", target.get("reason", ""), target.get("message", ""))
                    finished_now = (jd.FAILED, target.get("reason", ""))
            elif jd.set_condition(conditions, jd.new_condition(jd.COMPLETE, *self._success_reason(conditions), now)):
                status["completionTime"] = rfc3339(now)
                self.recorder.event(job, "Normal", "Completed", "Job completed")
                finished_now = (jd.COMPLETE, self._success_reason(conditions)[0])
        if omitempty(status) != omitempty(job.get("status") or {}):
            await self._write_status(job, status)
            self.metrics.pods_counted(job, before, status)
            if finished_now is not None:
                self.metrics.job_finished(job, *finished_now)

    @staticmethod
    def _success_reason(conditions: list[dict]) -> tuple[str, str]:
        """Complete carries SuccessCriteriaMet's reason and message (SuccessPolicy or
        CompletionsReached)."""
        met = next((c for c in conditions if c.get("type") == jd.SUCCESS_CRITERIA_MET and c.get("status") == "True"), None)
        return (met.get("reason", ""), met.get("message", "")) if met is not None else jd.COMPLETIONS_REACHED

    async def _write_status(self, job: dict, status: dict) -> None:
        job["status"] = copy.deepcopy(status)
        updated = await self._jobs_api.update_status(job)
        job["metadata"]["resourceVersion"] = updated["metadata"].get("resourceVersion")
