"""The Job and TTL-after-finished controllers against a real apiserver, with the real kubectl:
completions with parallelism never exceeded (a watch of the Pods), each finished Pod counted
once and its tracking finalizer removed, the failure back-off (its first step, shortened from
upstream's 10 s to ``BACKOFF``'s 3 s as upstream's integration tests do, before the second Pod)
ending in BackoffLimitExceeded, and a finished Job deleted after ``ttlSecondsAfterFinished``.
A stand-in kubelet finishes each Pod by its image: ``ok`` succeeds, ``fail`` fails."""

from __future__ import annotations

import yaml
from prometheus_client import CollectorRegistry

from kubesvc.client.rest import PODS
from kubesvc.controllers.gc.controller import GarbageCollector
from kubesvc.controllers.job.controller import JOBS, JobController
from kubesvc.controllers.job.decisions import JOB_TRACKING_FINALIZER
from kubesvc.controllers.job.ttlafterfinished import TTLAfterFinishedController, TTLAfterFinishedMetrics
from kubesvc.util.golang import parse_rfc3339
from tests.support.cluster import eventually, get_or_none, kubectl, running_task
from tests.support.workloads import fake_kubelet, finished_status, image_of, running_controllers


BACKOFF = (3.0, 600.0)  # the controller's pod_failure_backoff: first delay, cap


def job_manifest(name: str, image: str, **spec) -> str:
    body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "work", "image": image, "command": ["true"]}]}}, **spec}}
    return yaml.safe_dump(body)


def finish_by_image(pod: dict) -> dict | None:
    return finished_status(pod, {"ok": "Succeeded", "fail": "Failed"}[image_of(pod)])


async def job_status(client, namespace, name) -> dict:
    return (await client.resource(JOBS).get(name, namespace)).get("status") or {}


def conditions(status: dict) -> dict:
    return {c["type"]: (c["status"], c.get("reason")) for c in status.get("conditions") or []}


async def test_completions_with_parallelism(apiserver, client, namespace):
    factories = [lambda c, i: JobController(c, i)]
    running = []
    async with running_controllers(client, *factories):
        await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=job_manifest("pi", "ok", completions=5, parallelism=2))

        async def watch():
            live = set()
            async for kind, pod in client.resource(PODS).watch(namespace):
                finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp")
                if kind == "DELETED" or finished:
                    live.discard(pod["metadata"]["name"])
                else:
                    live.add(pod["metadata"]["name"])
                running.append(len(live))

        async with running_task(watch()), running_task(fake_kubelet(client, namespace, finish_by_image, interval=0.2)):
            waited = await kubectl(apiserver, "-n", namespace, "wait", "--for=condition=complete", "job/pi", "--timeout=60s")
            assert waited.stdout.strip() == "job.batch/pi condition met"
    status = await job_status(client, namespace, "pi")
    assert status["succeeded"] == 5 and not status.get("failed") and not status.get("active")
    assert conditions(status) == {"SuccessCriteriaMet": ("True", "CompletionsReached"), "Complete": ("True", "CompletionsReached")}
    assert status["completionTime"] and status["startTime"]
    assert running and max(running) <= 2, running
    pods = (await client.resource(PODS).list(namespace))["items"]
    assert len(pods) == 5
    assert all(JOB_TRACKING_FINALIZER not in (p["metadata"].get("finalizers") or []) for p in pods)
    table = await kubectl(apiserver, "-n", namespace, "get", "job", "pi")
    assert table.stdout.split("\n")[1].split()[1:3] == ["Complete", "5/5"]


async def test_backoff_then_backoff_limit_exceeded(apiserver, client, namespace):
    async with running_controllers(client, lambda c, i: JobController(c, i, pod_failure_backoff=BACKOFF)):
        async with running_task(fake_kubelet(client, namespace, finish_by_image, interval=0.2)):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=job_manifest("flaky", "fail", backoffLimit=1))

            async def failed():
                return conditions(await job_status(client, namespace, "flaky")).get("Failed")

            assert await eventually(failed, 60, "the Job failed") == ("True", "BackoffLimitExceeded")
    status = await job_status(client, namespace, "flaky")
    assert status["failed"] == 2 and not status.get("succeeded")
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["message"] == "Job has reached the specified backoff limit"
    pods = sorted((await client.resource(PODS).list(namespace))["items"], key=lambda p: p["metadata"]["creationTimestamp"])
    assert len(pods) == 2
    first_failed = parse_rfc3339(pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"])
    second_created = parse_rfc3339(pods[1]["metadata"]["creationTimestamp"])
    # the second Pod waits out the first back-off: 3 s (1 s of timestamp rounding allowed)
    assert (second_created - first_failed).total_seconds() >= BACKOFF[0] - 1, (first_failed, second_created)
    events = await kubectl(apiserver, "-n", namespace, "get", "events", "--field-selector=involvedObject.name=flaky", "-o",
                           "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}")
    assert "BackoffLimitExceeded" in events.stdout.split()


async def test_ttl_after_finished_deletes_the_job_and_its_pods(apiserver, client, namespace):
    registry = CollectorRegistry()
    ttl_metrics = TTLAfterFinishedMetrics(registry)
    factories = [lambda c, i: JobController(c, i), lambda c, i: TTLAfterFinishedController(c, i, metrics=ttl_metrics)]
    async with running_controllers(client, *factories):
        collector = GarbageCollector(client, workers=2)
        async with running_task(fake_kubelet(client, namespace, finish_by_image, interval=0.2)), running_task(collector.run()):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=job_manifest("once", "ok", ttlSecondsAfterFinished=1))
            await eventually(lambda: job_status(client, namespace, "once"), 30, "the Job ran")

            async def gone():
                pods = (await client.resource(PODS).list(namespace))["items"]
                return await get_or_none(client, JOBS, "once", namespace) is None and not pods

            await eventually(gone, 60, "the Job and its Pod deleted after its TTL (foreground)")
    # one deletion observed, in upstream's buckets (0.1 s doubling: the 14th bound is 819.2 s)
    name = "ttl_after_finished_controller_job_deletion_duration_seconds"
    assert registry.get_sample_value(name + "_count") == 1
    assert registry.get_sample_value(name + "_bucket", {"le": "819.2"}) == 1


async def test_active_deadline_and_suspend(apiserver, client, namespace):
    """A Job running past activeDeadlineSeconds fails with DeadlineExceeded and its Pods go; a
    suspended Job has no Pods and says so (Suspended True, JobSuspended), then resumes."""
    never_finish = lambda pod: None  # noqa: E731 - the stand-in kubelet leaves every Pod Pending
    async with running_controllers(client, lambda c, i: JobController(c, i)):
        async with running_task(fake_kubelet(client, namespace, never_finish)):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=job_manifest("slow", "ok", activeDeadlineSeconds=2, parallelism=2))

            async def failed():
                return conditions(await job_status(client, namespace, "slow")).get("Failed")

            assert await eventually(failed, 30, "DeadlineExceeded") == ("True", "DeadlineExceeded")
            status = await job_status(client, namespace, "slow")
            assert next(c for c in status["conditions"] if c["type"] == "Failed")["message"] == "Job was active longer than specified deadline"

            async def pods_of(job: str) -> list[dict]:
                return [p for p in (await client.resource(PODS).list(namespace))["items"]
                        if p["metadata"]["labels"].get("job-name") == job and not p["metadata"].get("deletionTimestamp")]

            assert await eventually(lambda: _empty(pods_of("slow")), 20, "the Job's Pods deleted")

            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=job_manifest("held", "ok", parallelism=2, completions=4))
            await eventually(lambda: _count(pods_of("held"), 2), 20, "2 Pods running")
            await kubectl(apiserver, "-n", namespace, "patch", "job", "held", "--type=merge", "-p", '{"spec":{"suspend":true}}')
            await eventually(lambda: _empty(pods_of("held")), 20, "the suspended Job's Pods deleted")

            async def suspended():
                status = await job_status(client, namespace, "held")
                return conditions(status).get("Suspended") == ("True", "JobSuspended") and not status.get("active")

            await eventually(suspended, 20, "Suspended True, no active Pod")
            await kubectl(apiserver, "-n", namespace, "patch", "job", "held", "--type=merge", "-p", '{"spec":{"suspend":false}}')
            await eventually(lambda: _count(pods_of("held"), 2), 20, "2 Pods again")

            async def resumed():
                return conditions(await job_status(client, namespace, "held")).get("Suspended") == ("False", "JobResumed")

            await eventually(resumed, 20, "Suspended False, JobResumed")


async def _empty(pods) -> bool:
    return not await pods


async def _count(pods, n) -> bool:
    return len(await pods) == n


async def test_indexed_job(apiserver, client, namespace):
    """completionMode Indexed: one successful Pod per index, each with its index (annotation,
    label, JOB_COMPLETION_INDEX, hostname), completedIndexes 0-2, never more than parallelism."""
    async with running_controllers(client, lambda c, i: JobController(c, i)):
        async with running_task(fake_kubelet(client, namespace, finish_by_image, interval=0.2)):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-",
                          input=job_manifest("idx", "ok", completions=3, parallelism=2, completionMode="Indexed"))
            await kubectl(apiserver, "-n", namespace, "wait", "--for=condition=complete", "job/idx", "--timeout=60s")
    status = await job_status(client, namespace, "idx")
    assert status["completedIndexes"] == "0-2" and status["succeeded"] == 3
    pods = (await client.resource(PODS).list(namespace))["items"]
    by_index = {p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: p for p in pods}
    assert sorted(by_index) == ["0", "1", "2"] and len(pods) == 3
    for index, pod in by_index.items():
        assert pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == index
        assert pod["metadata"]["name"].startswith(f"idx-{index}-") and pod["spec"]["hostname"] == f"idx-{index}"
        assert {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
            "apiVersion": "v1", "fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}}} in pod["spec"]["containers"][0]["env"]
