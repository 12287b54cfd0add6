"""``spec.managedBy`` (the JobManagedBy feature, beta and on by default in 1.32): a Job naming
another controller is left alone by ours, as upstream's ``managedByExternalController`` makes
``syncJob`` and ``syncOrphanPod`` skip it, and is counted in
``job_controller_jobs_by_external_controller_total{controller_name}`` when the Job informer adds
it. The Job controller runs against a real apiserver; Jobs are applied with the real kubectl.
Expected values are written by hand from upstream."""

from __future__ import annotations

import asyncio

import yaml
from prometheus_client import CollectorRegistry

from kubesvc.client.rest import PODS
from kubesvc.controllers.job import metrics as jm
from kubesvc.controllers.job.controller import JOBS, JobController
from kubesvc.controllers.job.decisions import JOB_TRACKING_FINALIZER, managed_by_external_controller
from tests.controllers.job.test_job_policies_api import terminated, wait_condition
from tests.support.cluster import eventually, kubectl, running_task
from tests.support.workloads import fake_kubelet, running_controllers

EXTERNAL = "example.com/batch-runner"


def test_which_jobs_belong_to_another_controller():
    assert managed_by_external_controller({"spec": {}}) is None
    assert managed_by_external_controller({"spec": {"managedBy": "kubernetes.io/job-controller"}}) is None
    assert managed_by_external_controller({"spec": {"managedBy": EXTERNAL}}) == EXTERNAL


def manifest(name: str, **spec) -> str:
    return yaml.safe_dump({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox"}]}},
                                    **spec}})


async def test_a_job_managed_by_another_controller_is_left_alone(apiserver, client, namespace):
    registry = CollectorRegistry()
    metrics = jm.JobMetrics(registry)
    jobs, pods = client.resource(JOBS), client.resource(PODS)
    async with running_controllers(client, lambda c, i: JobController(c, i, metrics=metrics)):
        async with running_task(fake_kubelet(client, namespace, lambda pod: terminated(pod, 0), interval=0.2)):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=manifest("elsewhere", managedBy=EXTERNAL))
            elsewhere = await jobs.get("elsewhere", namespace)
            # the Pod the other controller made: owned by its Job, with the tracking finalizer; it succeeds
            owned = {"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "elsewhere-made", "labels": elsewhere["spec"]["template"]["metadata"]["labels"],
                                  "finalizers": [JOB_TRACKING_FINALIZER],
                                  "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "elsewhere",
                                                       "uid": elsewhere["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]},
                     "spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox"}]}}
            await pods.create(owned, namespace)
            # ours, with managedBy naming this controller explicitly, runs as any Job does
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=manifest("ours", managedBy="kubernetes.io/job-controller"))
            await wait_condition(client, namespace, "ours", "Complete")

            async def made_succeeded():
                pod = await pods.get("elsewhere-made", namespace)
                return pod if (pod.get("status") or {}).get("phase") == "Succeeded" else None

            await eventually(made_succeeded, 30, "the other controller's Pod Succeeded")
            await asyncio.sleep(1.0)  # a sync or an orphan pass, had there been one, has happened by now

            elsewhere = await jobs.get("elsewhere", namespace)
            assert elsewhere.get("status") in (None, {})  # no startTime, no counters, no conditions
            assert [p["metadata"]["name"] for p in (await pods.list(namespace))["items"]
                    if p["metadata"]["labels"].get("batch.kubernetes.io/job-name") == "elsewhere"] == ["elsewhere-made"]
            assert (await pods.get("elsewhere-made", namespace))["metadata"]["finalizers"] == [JOB_TRACKING_FINALIZER]

            # once its Job is gone the finalizer is an orphan's, removed as upstream's cleanupPodFinalizers does
            await kubectl(apiserver, "-n", namespace, "delete", "job", "elsewhere")  # background: no garbage collector runs here

            async def finalizer_removed():
                return not (await pods.get("elsewhere-made", namespace))["metadata"].get("finalizers")

            await eventually(finalizer_removed, 30, "the orphaned Pod's tracking finalizer removed")

    assert registry.get_sample_value("job_controller_jobs_by_external_controller_total", {"controller_name": EXTERNAL}) == 1
    assert registry.get_sample_value("job_controller_jobs_by_external_controller_total",
                                     {"controller_name": "kubernetes.io/job-controller"}) is None


async def test_with_the_feature_gate_off_such_a_job_is_ours(apiserver, client, namespace):
    """``--feature-gates=JobManagedBy=false``: upstream's managedByExternalController is then
    nil for every Job, so the Job controller runs it and counts nothing. Built as the
    controller-manager builds its workload controllers."""
    from kubesvc.controllers.manager import JOB, ControllerManager, ManagerConfig

    manager = ControllerManager(client, ManagerConfig(controllers={JOB}, feature_gates={"JobManagedBy": False}))

    def build(c, informers):
        manager._build_workloads(informers)
        return manager.controllers[JOB]

    async with running_controllers(client, build):
        async with running_task(fake_kubelet(client, namespace, lambda pod: terminated(pod, 0), interval=0.2)):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=manifest("elsewhere", managedBy=EXTERNAL))
            status = await wait_condition(client, namespace, "elsewhere", "Complete")
    assert status["succeeded"] == 1
    assert manager.metrics_registry.get_sample_value("job_controller_jobs_by_external_controller_total", {"controller_name": EXTERNAL}) is None


def test_kubectl_sees_managed_by_validated(apiserver, namespace):
    """What kubectl prints for a managedBy that is no domain-prefixed path, and for a change of it."""
    bad = apiserver.kubectl("-n", namespace, "apply", "-f", "-", input=manifest("badname", managedBy="my-controller"), check=False)
    assert bad.returncode == 1
    assert 'spec.managedBy: Invalid value: "my-controller": must be a domain-prefixed path (such as "acme.io/foo")' in bad.stderr
    apiserver.kubectl("-n", namespace, "apply", "-f", "-", input=manifest("fixed", managedBy=EXTERNAL, suspend=True))
    changed = apiserver.kubectl("-n", namespace, "patch", "job", "fixed", "--type=merge", "-p", '{"spec": {"managedBy": "example.com/other"}}',
                                check=False)
    assert changed.returncode == 1
    assert 'spec.managedBy: Invalid value: "example.com/other": field is immutable' in changed.stderr
