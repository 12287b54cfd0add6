"""kube-controller-manager's CronJob controller (``cronjob-controller``, pkg/controller/cronjob
``cronjob_controllerv2.go`` and ``utils.go``, Kubernetes 1.32).

A sync of one CronJob:

1. Its Jobs are the ones whose controller reference names it (it never adopts). ``status.active``
   is reconciled with them: a finished Job leaves it (Event ``SawCompletedJob``; a Complete one
   moves ``lastSuccessfulTime``), an active Job missing from it is reported (``UnexpectedJob``),
   a listed Job that no longer exists is dropped (``MissingJob``).
2. Nothing more while the CronJob is being deleted, its ``timeZone`` is unknown
   (``UnknownTimeZone``) or it is suspended.
3. The most recent schedule time not yet run (``mostRecentScheduleTime``: from
   ``lastScheduleTime`` or creation, no earlier than ``now - startingDeadlineSeconds``; more than
   100 missed is Warning ``TooManyMissedTimes``). None: wait for the next one. Later than
   ``startingDeadlineSeconds`` after it: Warning ``MissSchedule``.
4. ``concurrencyPolicy``: ``Forbid`` skips while a Job runs (``JobAlreadyActive``), ``Replace``
   deletes the running ones first.
5. The Job ``<cronjob>-<scheduled time in minutes since the epoch>`` is made from
   ``jobTemplate`` (its labels and annotations, plus ``batch.kubernetes.io/cronjob-scheduled-timestamp``),
   owned by the CronJob; it joins ``status.active`` and ``lastScheduleTime`` moves.
6. Finished Jobs beyond ``successfulJobsHistoryLimit``/``failedJobsHistoryLimit`` are deleted,
   oldest first; the CronJob is looked at again at its next schedule time (+100 ms).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import zoneinfo
from collections.abc import Hashable
from datetime import datetime, timedelta, timezone

from kubesvc.api.cron import CronError, Schedule, parse_standard
from kubesvc.client.cache import split_key
from kubesvc.client.record import EventRecorder
from kubesvc.client.rest import ApiError, Resource, RestClient, is_already_exists, is_not_found
from kubesvc.controllers import controllerref
from kubesvc.controllers.informers import SharedInformers
from kubesvc.controllers.runtime import QueueController
from kubesvc.util.clock import Clock
from kubesvc.util.golang import parse_rfc3339, rfc3339

log = logging.getLogger("kubesvc.controllers.cronjob")

CRONJOBS = Resource("batch", "v1", "cronjobs", True, "CronJob")
JOBS = Resource("batch", "v1", "jobs", True, "Job")
COMPONENT = "cronjob-controller"
SCHEDULED_TIMESTAMP = "batch.kubernetes.io/cronjob-scheduled-timestamp"
NEXT_SCHEDULE_DELTA = 0.1  # seconds past the schedule time the CronJob is looked at again
MANY_MISSED = 100


def _key(obj: dict) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def _time(value) -> datetime | None:
    try:
        return parse_rfc3339(value) if isinstance(value, str) and value else None
    except ValueError:
        return None


def finished(job: dict) -> tuple[bool, str]:
    """``IsJobFinished``: (finished, the condition type that says so)."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return True, condition["type"]
    return False, ""


def most_recent_schedule_time(cron_job: dict, now: datetime, schedule: Schedule, with_deadline: bool) -> tuple[datetime, datetime | None, int]:
    """``mostRecentScheduleTime``: (earliest time considered, the latest schedule time not after
    ``now`` and after the earliest, roughly how many were missed)."""
    spec, status = cron_job.get("spec") or {}, cron_job.get("status") or {}
    earliest = _time(status.get("lastScheduleTime")) or _time(cron_job["metadata"].get("creationTimestamp")) or now
    earliest = earliest.astimezone(now.tzinfo)
    deadline = spec.get("startingDeadlineSeconds")
    if with_deadline and isinstance(deadline, int):
        earliest = max(earliest, now - timedelta(seconds=deadline))
    t1 = schedule.next(earliest)
    t2 = schedule.next(t1) if t1 is not None else None
    if t1 is None or now < t1:
        return earliest, None, 0
    if t2 is None or now < t2:
        return earliest, t1, 0
    between = round((t2 - t1).total_seconds())
    if between < 1:
        return earliest, None, 0
    missed = int((now - t1).total_seconds()) // between + 1
    most_recent = None
    t = schedule.next(t1 + timedelta(seconds=(missed - 2) * between))
    while t is not None and t <= now:
        most_recent = t
        t = schedule.next(t)
    return earliest, most_recent, missed


def job_name(cron_job: dict, scheduled: datetime) -> str:
    """``getJobName``: the name plus the scheduled time in minutes since the epoch."""
    return f"{cron_job['metadata']['name']}-{int(scheduled.timestamp()) // 60}"


def job_from_template(cron_job: dict, scheduled: datetime) -> dict:
    """``getJobFromTemplate2``."""
    template = (cron_job.get("spec") or {}).get("jobTemplate") or {}
    meta = template.get("metadata") or {}
    annotations = {**(meta.get("annotations") or {}), SCHEDULED_TIMESTAMP: scheduled.isoformat().replace("+00:00", "Z")}
    job_meta = {"name": job_name(cron_job, scheduled), "namespace": cron_job["metadata"]["namespace"], "annotations": annotations,
                "ownerReferences": [controllerref.new_controller_ref(cron_job, "batch/v1", "CronJob")]}
    if meta.get("labels"):
        job_meta["labels"] = dict(meta["labels"])
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": job_meta, "spec": copy.deepcopy(template.get("spec") or {})}


class CronJobController(QueueController):
    queue_name = "cronjob"

    def __init__(self, client: RestClient, informers: SharedInformers, *, workers: int = 5, recorder: EventRecorder | None = None,
                 clock: Clock | None = None):
        super().__init__(client, COMPONENT, workers=workers, recorder=recorder, clock=clock)
        self._cron_jobs_api = client.resource(CRONJOBS)
        self._jobs_api = client.resource(JOBS)
        self._cron_jobs = informers.informer(CRONJOBS)
        self._jobs = informers.informer(JOBS)
        self._cron_jobs.add_event_handler(self._enqueue, lambda old, new: self._enqueue(new), self._enqueue)
        self._jobs.add_event_handler(self._on_job, lambda old, new: self._on_job(new), self._on_job)

    def _enqueue(self, cron_job: dict) -> None:
        self.queue.add(_key(cron_job))

    def _on_job(self, job: dict) -> None:
        ref = controllerref.controller_ref(job)
        if ref is not None and ref.get("kind") == "CronJob":
            self.queue.add(f"{job['metadata'].get('namespace', '')}/{ref.get('name', '')}")

    def _now(self, cron_job: dict) -> tuple[datetime, str | None]:
        """Now in the CronJob's time zone (``spec.timeZone``, else a TZ= of the schedule, else UTC)."""
        zone_name = (cron_job.get("spec") or {}).get("timeZone")
        try:
            zone = zoneinfo.ZoneInfo(zone_name) if zone_name else timezone.utc
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            return self.clock.now(), zone_name
        return self.clock.now().astimezone(zone), None

    async def sync(self, key: Hashable) -> None:
        namespace, name = split_key(str(key))
        cached = self._cron_jobs.indexer.get(name, namespace)
        if cached is None:
            return
        cron_job = copy.deepcopy(cached)
        uid = cron_job["metadata"].get("uid")
        jobs = [j for j in self._jobs.indexer.by_index("namespace", namespace)
                if (controllerref.controller_ref(j) or {}).get("uid") == uid]
        status = copy.deepcopy(cron_job.get("status") or {})
        before = copy.deepcopy(status)
        requeue_after = await self._sync(cron_job, jobs, status)
        if status != before:
            await self._cron_jobs_api.update_status({**cron_job, "status": status})
        if requeue_after is not None:
            self.queue.add_after(str(key), max(requeue_after, 0.0))

    async def _sync(self, cron_job: dict, jobs: list[dict], status: dict) -> float | None:
        spec = cron_job.get("spec") or {}
        active = list(status.get("active") or [])
        present = {j["metadata"].get("uid") for j in jobs}
        for job in jobs:
            listed = any(ref.get("uid") == job["metadata"].get("uid") for ref in active)
            done, how = finished(job)
            if not listed and not done:
                self.recorder.event(cron_job, "Warning", "UnexpectedJob",
                                    f"Saw a job that the controller did not create or forgot: {job['metadata']['name']}")
            elif listed and done:
                active = [ref for ref in active if ref.get("uid") != job["metadata"].get("uid")]
                self.recorder.event(cron_job, "Normal", "SawCompletedJob", f"Saw completed job: {job['metadata']['name']}, condition: {how}")
                completed = _time((job.get("status") or {}).get("completionTime"))
                if how == "Complete" and completed is not None:
                    last = _time(status.get("lastSuccessfulTime"))
                    if last is None or completed > last:
                        status["lastSuccessfulTime"] = rfc3339(completed)
        for ref in list(active):
            if ref.get("uid") not in present and not await self._job_exists(ref, cron_job["metadata"]["namespace"]):
                active.remove(ref)
                self.recorder.event(cron_job, "Normal", "MissingJob", f"Active job went missing: {ref.get('name')}")
        self._set_active(status, active)
        if cron_job["metadata"].get("deletionTimestamp"):
            return None
        now, bad_zone = self._now(cron_job)
        if bad_zone is not None:
            self.recorder.event(cron_job, "Warning", "UnknownTimeZone", f"invalid timeZone: {bad_zone!r}: unknown time zone {bad_zone}")
            return None
        if spec.get("suspend"):
            return None
        try:
            schedule = parse_standard(spec.get("schedule") or "")
        except CronError as err:
            self.recorder.event(cron_job, "Warning", "UnparseableSchedule", f"unparseable schedule: {spec.get('schedule')!r} : {err}")
            return None
        probe = {**cron_job, "status": status}
        _, scheduled, missed = most_recent_schedule_time(probe, now, schedule, True)
        if missed > MANY_MISSED:
            self.recorder.event(cron_job, "Warning", "TooManyMissedTimes",
                                "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew")
        if scheduled is None:
            return self._until_next(probe, now, schedule)
        deadline = spec.get("startingDeadlineSeconds")
        if isinstance(deadline, int) and scheduled + timedelta(seconds=deadline) < now:
            self.recorder.event(cron_job, "Warning", "MissSchedule",
                                f"Missed scheduled time to start a job: {scheduled.astimezone(timezone.utc).strftime('%a, %d %b %Y %H:%M:%S +0000')}")
            return self._until_next(probe, now, schedule)
        name = job_name(cron_job, scheduled)
        if any(ref.get("name") == name for ref in active):
            return self._until_next(probe, now, schedule)
        policy = spec.get("concurrencyPolicy") or "Allow"
        if policy == "Forbid" and active:
            self.recorder.event(cron_job, "Normal", "JobAlreadyActive",
                                "Not starting job because prior execution is running and concurrency policy is Forbid")
            return self._until_next(probe, now, schedule)
        if policy == "Replace":
            for ref in list(active):
                await self._delete_job(cron_job, ref.get("name", ""))
                active.remove(ref)
            self._set_active(status, active)
        try:
            job = await self._jobs_api.create(job_from_template(cron_job, scheduled))
        except ApiError as exc:
            if is_already_exists(exc):
                return self._until_next(probe, now, schedule)  # made meanwhile (by us before a restart)
            self.recorder.event(cron_job, "Warning", "FailedCreate", f"Error creating job: {exc}")
            raise
        self.recorder.event(cron_job, "Normal", "SuccessfulCreate", f"Created job {job['metadata']['name']}")
        active.append({"kind": "Job", "namespace": job["metadata"]["namespace"], "name": job["metadata"]["name"],
                       "uid": job["metadata"]["uid"], "apiVersion": "batch/v1", "resourceVersion": job["metadata"]["resourceVersion"]})
        self._set_active(status, active)
        status["lastScheduleTime"] = rfc3339(scheduled.astimezone(timezone.utc))
        await self._cleanup(cron_job, jobs)
        return self._until_next({**cron_job, "status": status}, now, schedule)

    @staticmethod
    def _set_active(status: dict, active: list[dict]) -> None:
        if active:
            status["active"] = active
        else:
            status.pop("active", None)

    def _until_next(self, cron_job: dict, now: datetime, schedule: Schedule) -> float | None:
        """``nextScheduleTimeDuration``: seconds to the schedule time after the most recent one."""
        earliest, most_recent, _ = most_recent_schedule_time(cron_job, now, schedule, False)
        following = schedule.next(most_recent or earliest)
        return None if following is None else (following - now).total_seconds() + NEXT_SCHEDULE_DELTA

    async def _job_exists(self, ref: dict, namespace: str) -> bool:
        try:
            job = await self._jobs_api.get(ref.get("name", ""), namespace)
        except ApiError as exc:
            if is_not_found(exc):
                return False
            raise
        return job["metadata"].get("uid") == ref.get("uid")

    async def _delete_job(self, cron_job: dict, name: str) -> None:
        try:
            await self._jobs_api.delete(name, cron_job["metadata"]["namespace"], propagation_policy="Background")
        except ApiError as exc:
            if not is_not_found(exc):
                self.recorder.event(cron_job, "Warning", "FailedDelete", f"Deleted job: {exc}")
                raise
            return
        self.recorder.event(cron_job, "Normal", "SuccessfulDelete", f"Deleted job {name}")

    async def _cleanup(self, cron_job: dict, jobs: list[dict]) -> None:
        """``cleanupFinishedJobs``: the oldest finished Jobs beyond the history limits go."""
        spec = cron_job.get("spec") or {}
        for how, limit in (("Complete", spec.get("successfulJobsHistoryLimit")), ("Failed", spec.get("failedJobsHistoryLimit"))):
            if not isinstance(limit, int):
                continue
            done = [j for j in jobs if finished(j) == (True, how)]
            if len(done) <= limit:
                continue
            done.sort(key=lambda j: (_time((j.get("status") or {}).get("startTime")) or datetime.min.replace(tzinfo=timezone.utc),
                                     j["metadata"]["name"]))
            await asyncio.gather(*(self._delete_job(cron_job, j["metadata"]["name"]) for j in done[:len(done) - limit]),
                                 return_exceptions=True)
