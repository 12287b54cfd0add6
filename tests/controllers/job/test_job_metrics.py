"""The Job controller's metrics (upstream's names and labels, pkg/controller/job/metrics): pure
label decisions, then two Jobs run against a real apiserver and the counters a Prometheus
scrape would read. Expected values are counted by hand from what the Jobs do."""

from __future__ import annotations

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from kubesvc.controllers.job import metrics as jm
from kubesvc.controllers.job.controller import JobController
from kubesvc.controllers.job.decisions import JOB_TRACKING_FINALIZER
from tests.support.cluster import kubectl, running_task
from tests.support.workloads import fake_kubelet, running_controllers
from tests.controllers.job.test_job_policies_api import job_of, terminated, wait_condition


def job(**spec) -> dict:
    return {"metadata": {"name": "j"}, "spec": spec}


@pytest.mark.parametrize("spec, failed, terminating, reason", [
    ({}, 0, 0, "new"),
    ({}, 1, 0, "recreate_terminating_or_failed"),
    ({}, 0, 2, "recreate_terminating_or_failed"),
    ({"podReplacementPolicy": "Failed"}, 1, 0, "recreate_failed"),
    ({"podReplacementPolicy": "Failed"}, 0, 1, "recreate_terminating_or_failed"),
], ids=["first", "after-failure", "terminating", "replace-failed", "replace-failed-but-terminating"])
def test_creation_reason(spec, failed, terminating, reason):
    assert jm.creation_reason(job(**spec), failed, terminating) == reason


def pod(phase: str, finalizer: bool) -> dict:
    return {"metadata": {"name": "p", "finalizers": [JOB_TRACKING_FINALIZER] if finalizer else []}, "status": {"phase": phase}}


@pytest.mark.parametrize("old, new, event", [
    (None, pod("Running", True), None),
    (None, pod("Failed", True), "add"),
    (pod("Running", True), pod("Succeeded", True), "add"),
    (pod("Succeeded", True), pod("Succeeded", False), "delete"),
    (pod("Failed", True), None, "delete"),
    (pod("Failed", False), None, None),
    (pod("Succeeded", True), pod("Succeeded", True), None),
], ids=["running-added", "finished-added", "finishes", "finalizer-removed", "deleted-with-finalizer", "deleted-without", "unchanged"])
def test_terminated_pods_tracking_finalizer(old, new, event):
    metrics = jm.JobMetrics(registry := CollectorRegistry())
    metrics.pod_changed(old, new)
    counted = {e: registry.get_sample_value("job_controller_terminated_pods_tracking_finalizer_total", {"event": e}) for e in ("add", "delete")}
    assert counted == {e: (1.0 if e == event else None) for e in ("add", "delete")}


def test_indexed_pods_finished_counts_completed_indexes():
    metrics = jm.JobMetrics(registry := CollectorRegistry())
    indexed = job(completionMode="Indexed", completions=2**31 - 1)
    metrics.pods_counted(indexed, {"completedIndexes": "0-2", "failed": 1}, {"completedIndexes": "0-4,9", "failed": 3})
    assert registry.get_sample_value("job_controller_job_pods_finished_total", {"completion_mode": "Indexed", "result": "succeeded"}) == 3
    assert registry.get_sample_value("job_controller_job_pods_finished_total", {"completion_mode": "Indexed", "result": "failed"}) == 2
    assert registry.get_sample_value("job_controller_job_finished_indexes_total", {"status": "succeeded", "backoffLimit": "global"}) == 3
    per_index = job(completionMode="Indexed", completions=10, backoffLimitPerIndex=1)
    metrics.pods_counted(per_index, {"completedIndexes": "0", "failedIndexes": ""}, {"completedIndexes": "0,1", "failedIndexes": "3,5-6"})
    assert registry.get_sample_value("job_controller_job_finished_indexes_total", {"status": "succeeded", "backoffLimit": "perIndex"}) == 1
    assert registry.get_sample_value("job_controller_job_finished_indexes_total", {"status": "failed", "backoffLimit": "perIndex"}) == 3


async def test_metrics_of_a_completed_and_a_failed_job(apiserver, client, namespace):
    """"done": 2 completions, 2 in parallel, both succeed. "broken": its one Pod exits 1, which
    a Count rule of its pod failure policy matches; backoffLimit 0 fails it."""
    def manifest(name, **spec):
        return yaml.safe_dump({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                               "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox"}]}},
                                        **spec}})

    registry = CollectorRegistry()
    metrics = jm.JobMetrics(registry)
    count_rule = {"rules": [{"action": "Count", "onExitCodes": {"operator": "In", "values": [1]}}]}
    async with running_controllers(client, lambda c, i: JobController(c, i, metrics=metrics)):
        decide = lambda pod: terminated(pod, 0 if job_of(pod) == "done" else 1)  # noqa: E731
        async with running_task(fake_kubelet(client, namespace, decide, interval=0.2)):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=manifest("done", completions=2, parallelism=2))
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=manifest("broken", backoffLimit=0, podFailurePolicy=count_rule))
            await wait_condition(client, namespace, "done", "Complete")
            await wait_condition(client, namespace, "broken", "Failed")

    def value(name, **labels):
        return registry.get_sample_value("job_controller_" + name, labels) or 0.0

    assert value("jobs_finished_total", completion_mode="NonIndexed", result="succeeded", reason="CompletionsReached") == 1
    assert value("jobs_finished_total", completion_mode="NonIndexed", result="failed", reason="BackoffLimitExceeded") == 1
    assert value("job_pods_finished_total", completion_mode="NonIndexed", result="succeeded") == 2
    assert value("job_pods_finished_total", completion_mode="NonIndexed", result="failed") == 1
    assert value("pod_failures_handled_by_failure_policy_total", action="Count") == 1
    assert value("job_pods_creation_total", reason="new", status="succeeded") == 3
    assert value("job_pods_creation_total", reason="new", status="failed") == 0
    # three finished Pods appeared with the tracking finalizer and lost it (other namespaces' Pods may add more)
    assert value("terminated_pods_tracking_finalizer_total", event="add") >= 3
    assert value("terminated_pods_tracking_finalizer_total", event="delete") >= 3
    # each Job's first sync created its Pods; every sync is in the histogram too
    assert value("job_syncs_total", completion_mode="NonIndexed", result="success", action="pods_created") >= 2
    syncs = sum(value("job_syncs_total", completion_mode="NonIndexed", result=r, action=a)
                for r in ("success", "error") for a in ("reconciling", "tracking", "pods_created", "pods_deleted"))
    observed = sum(value("job_sync_duration_seconds_count", completion_mode="NonIndexed", result=r, action=a)
                   for r in ("success", "error") for a in ("reconciling", "tracking", "pods_created", "pods_deleted"))
    assert syncs == observed >= 4
    text = generate_latest(registry).decode()
    assert 'job_controller_job_sync_duration_seconds_bucket{action="pods_created",completion_mode="NonIndexed",le="0.004"' in text
    assert 'le="65.536"' in text  # the 15th bucket: 0.004 * 2**14
