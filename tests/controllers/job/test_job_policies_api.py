"""A Job's podFailurePolicy, backoffLimitPerIndex and successPolicy end to end: the Job
controller against a real apiserver, Jobs applied with the real kubectl and read back with
kubectl and the official ``kubernetes`` client. A stand-in kubelet reports each Pod as the agent
would: a container terminated with a chosen exit code, a Pod killed by an eviction
(``DisruptionTarget``), or a Pod left running; the test asserts what a user sees (conditions,
reasons, messages, counters, ``completedIndexes``/``failedIndexes``)."""

from __future__ import annotations

import asyncio

import yaml

from kubesvc.client.rest import PODS
from kubesvc.controllers.job.controller import JOBS, JobController
from kubesvc.controllers.job.decisions import COMPLETION_INDEX_KEY, JOB_TRACKING_FINALIZER
from kubesvc.util.golang import parse_rfc3339
from tests.support.cluster import eventually, kubectl, running_task
from tests.controllers.job.test_job_api import BACKOFF
from tests.support.workloads import fake_kubelet, now, ready_status, running_controllers


def manifest(name: str, **spec) -> str:
    body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "work", "image": "busybox", "command": ["true"]}]}}, **spec}}
    return yaml.safe_dump(body)


def terminated(pod: dict, code: int, conditions: list[dict] = ()) -> dict:
    """The status the agent writes for a Pod whose container exited with ``code``."""
    return {**(pod.get("status") or {}), "phase": "Succeeded" if code == 0 else "Failed",
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now()}, *conditions],
            "containerStatuses": [{"name": c["name"], "ready": False, "restartCount": 0, "image": c.get("image", ""), "imageID": "",
                                   "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                                            "startedAt": now(), "finishedAt": now()}}}
                                  for c in pod["spec"]["containers"]]}


def evicted(pod: dict) -> dict:
    """A Pod the eviction API killed: Failed with ``DisruptionTarget`` (reason
    ``EvictionByEvictionAPI``) and its container stopped by SIGTERM (143)."""
    disruption = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                  "message": "Eviction API: evicting", "lastTransitionTime": now()}
    return terminated(pod, 143, [disruption])


def job_of(pod: dict) -> str:
    return pod["metadata"]["labels"]["batch.kubernetes.io/job-name"]


def index_of(pod: dict) -> int | None:
    value = (pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX_KEY)
    return None if value is None else int(value)


async def job_status(client, namespace: str, name: str) -> dict:
    return (await client.resource(JOBS).get(name, namespace)).get("status") or {}


def conditions(status: dict) -> dict:
    return {c["type"]: (c["status"], c.get("reason"), c.get("message")) for c in status.get("conditions") or []}


async def wait_condition(client, namespace: str, name: str, type_: str, timeout: float = 60) -> dict:
    """The Job's status once its ``type_`` condition is True; on a timeout the message carries
    the last status seen (a Job that Failed instead, or still waits on a Pod, says so)."""
    last: dict = {}

    async def done():
        last["status"] = await job_status(client, namespace, name)
        return last["status"] if conditions(last["status"]).get(type_, ("",))[0] == "True" else None

    try:
        return await eventually(done, timeout, f"{name} {type_}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the Job's last status: {last.get('status')}") from None


async def job_pods(client, namespace: str, name: str) -> list[dict]:
    return [p for p in (await client.resource(PODS).list(namespace))["items"] if job_of(p) == name]


async def test_pod_failure_policy_fail_job_and_ignored_disruption(apiserver, client, namespace):
    """FailJob on exit code 42 fails the Job at its first failure (backoffLimit 6 untouched),
    naming the container, Pod and rule; a Pod evicted (DisruptionTarget) under an Ignore rule
    is replaced without counting as failed, and the Job completes."""
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"containerName": "work", "operator": "In", "values": [42]}},
                        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    evictions = []

    def decide(pod):
        if job_of(pod) == "exit42":
            return terminated(pod, 42)
        if not evictions:  # the first Pod of "disrupted" is evicted, every later one succeeds
            evictions.append(pod["metadata"]["name"])
            return evicted(pod)
        return terminated(pod, 0)

    async with running_controllers(client, lambda c, i: JobController(c, i, pod_failure_backoff=BACKOFF)):
        async with running_task(fake_kubelet(client, namespace, decide, interval=0.2)):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=manifest("exit42", podFailurePolicy=policy))
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-",
                          input=manifest("disrupted", podFailurePolicy=policy, completions=2, parallelism=2, backoffLimit=0))
            failed = await wait_condition(client, namespace, "exit42", "Failed")
            waited = await kubectl(apiserver, "-n", namespace, "wait", "--for=condition=complete", "job/disrupted", "--timeout=60s")
            assert waited.stdout.strip() == "job.batch/disrupted condition met"

    (pod,) = await job_pods(client, namespace, "exit42")
    message = f"Container work for pod {namespace}/{pod['metadata']['name']} failed with exit code 42 matching FailJob rule at index 0"
    assert conditions(failed)["FailureTarget"] == ("True", "PodFailurePolicy", message)
    assert conditions(failed)["Failed"] == ("True", "PodFailurePolicy", message)
    assert failed["failed"] == 1 and not failed.get("active")
    events = await kubectl(apiserver, "-n", namespace, "get", "events", "--field-selector=involvedObject.name=exit42",
                           "-o", "jsonpath={range .items[*]}{.reason}:{.message}{\"\\n\"}{end}")
    assert f"PodFailurePolicy:{message}" in events.stdout.splitlines()

    status = await job_status(client, namespace, "disrupted")
    assert status["succeeded"] == 2 and not status.get("failed"), status  # backoffLimit 0, yet the eviction did not fail it
    assert conditions(status)["Complete"][:2] == ("True", "CompletionsReached")
    pods = await job_pods(client, namespace, "disrupted")
    assert len(pods) == 3 and evictions[0] in {p["metadata"]["name"] for p in pods}
    assert all(JOB_TRACKING_FINALIZER not in (p["metadata"].get("finalizers") or []) for p in pods)


async def test_backoff_limit_per_index(apiserver, client, namespace):
    """backoffLimitPerIndex: a FailIndex rule fails index 1 at once (no retry) while 0 and 2
    succeed: failedIndexes "1", completedIndexes "0,2", Failed with FailedIndexes. With
    maxFailedIndexes 0 one failed index fails the Job (MaxFailedIndexesExceeded) and its
    running Pods are deleted, counted as failed. Every Pod carries its index's failure count; with
    backoffLimitPerIndex 1 a failed index is retried once, after its back-off (3 s here, 10 s by default), by a Pod
    whose count says 1, and the failed Pod is counted once that replacement exists."""
    def decide(pod):
        index = index_of(pod)
        if job_of(pod) == "perindex":
            return terminated(pod, 3 if index == 1 else 0)
        if job_of(pod) == "retried":
            return terminated(pod, 1)
        seen_maxfailed.add(index)
        if index != 0:
            return ready_status(pod)  # "maxfailed": 1 and 2 keep running
        # index 0 fails once its siblings exist, so the controller sees them running when it fails
        return terminated(pod, 1) if {1, 2} <= seen_maxfailed else None

    seen_maxfailed: set[int] = set()

    fail_index = {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}}]}
    async with running_controllers(client, lambda c, i: JobController(c, i, pod_failure_backoff=BACKOFF)):
        async with running_task(fake_kubelet(client, namespace, decide, interval=0.2)):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-",
                          input=manifest("perindex", completionMode="Indexed", completions=3, parallelism=3, backoffLimitPerIndex=1,
                                         podFailurePolicy=fail_index))
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-",
                          input=manifest("maxfailed", completionMode="Indexed", completions=3, parallelism=3, backoffLimitPerIndex=0,
                                         maxFailedIndexes=0))
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-",
                          input=manifest("retried", completionMode="Indexed", completions=1, backoffLimitPerIndex=1))
            per_index = await wait_condition(client, namespace, "perindex", "Failed")
            max_failed = await wait_condition(client, namespace, "maxfailed", "Failed")
            await eventually(lambda: _none_running(client, namespace, "maxfailed"), 30, "maxfailed's running Pods deleted")
            retried = await wait_condition(client, namespace, "retried", "Failed", timeout=90)

    assert conditions(per_index)["Failed"] == ("True", "FailedIndexes", "Job has failed indexes")
    assert (per_index["failedIndexes"], per_index["completedIndexes"], per_index["failed"], per_index["succeeded"]) == ("1", "0,2", 1, 2)
    pods = await job_pods(client, namespace, "perindex")
    assert sorted(index_of(p) for p in pods) == [0, 1, 2]  # index 1 was not retried
    assert {p["metadata"]["annotations"]["batch.kubernetes.io/job-index-failure-count"] for p in pods} == {"0"}

    assert conditions(max_failed)["FailureTarget"] == conditions(max_failed)["Failed"] == (
        "True", "MaxFailedIndexesExceeded", "Job has exceeded the specified maximal number of failed indexes")
    # its two running Pods were deleted as the Job failed: they count as failed (upstream does the same)
    assert max_failed["failedIndexes"] == "0" and max_failed["failed"] == 3 and not max_failed.get("succeeded")

    assert conditions(retried)["Failed"] == ("True", "FailedIndexes", "Job has failed indexes")
    assert (retried["failedIndexes"], retried["failed"], retried.get("completedIndexes", "")) == ("0", 2, "")
    first, second = sorted(await job_pods(client, namespace, "retried"), key=lambda p: p["metadata"]["creationTimestamp"])
    assert [p["metadata"]["annotations"]["batch.kubernetes.io/job-index-failure-count"] for p in (first, second)] == ["0", "1"]
    first_failed = parse_rfc3339(first["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"])
    # the retry waited out the index's back-off: 3 s (1 s of timestamp rounding allowed)
    assert (parse_rfc3339(second["metadata"]["creationTimestamp"]) - first_failed).total_seconds() >= BACKOFF[0] - 1
    assert all(JOB_TRACKING_FINALIZER not in (p["metadata"].get("finalizers") or []) for p in (first, second))

    from kubernetes import client as k8s, config

    api = config.new_client_from_config(config_file=str(apiserver.kubeconfig))
    read = await asyncio.to_thread(k8s.BatchV1Api(api).read_namespaced_job_status, "perindex", namespace)
    assert read.spec.backoff_limit == 2**31 - 1 and read.spec.backoff_limit_per_index == 1
    assert read.spec.pod_failure_policy.rules[0].action == "FailIndex" and read.spec.pod_replacement_policy == "Failed"
    assert read.status.failed_indexes == "1" and read.status.completed_indexes == "0,2"
    assert [(c.type, c.reason) for c in read.status.conditions if c.type == "Failed"] == [("Failed", "FailedIndexes")]


async def _none_running(client, namespace, name) -> bool:
    return not [p for p in await job_pods(client, namespace, name) if not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


async def test_success_policy(apiserver, client, namespace):
    """successPolicy succeededIndexes "0": once index 0 succeeded the Job meets its success
    criteria (SuccessCriteriaMet, reason SuccessPolicy, "Matched rules at index 0"), the Pods
    still running are deleted and the Job is Complete with the same reason."""
    def decide(pod):
        return terminated(pod, 0) if index_of(pod) == 0 else ready_status(pod)

    async with running_controllers(client, lambda c, i: JobController(c, i)):
        async with running_task(fake_kubelet(client, namespace, decide, interval=0.2)):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-",
                          input=manifest("leader", completionMode="Indexed", completions=3, parallelism=3,
                                         successPolicy={"rules": [{"succeededIndexes": "0"}]}))
            await kubectl(apiserver, "-n", namespace, "wait", "--for=condition=complete", "job/leader", "--timeout=60s")
            await eventually(lambda: _none_running(client, namespace, "leader"), 30, "the other Pods deleted")
    status = await job_status(client, namespace, "leader")
    assert conditions(status)["SuccessCriteriaMet"] == conditions(status)["Complete"] == ("True", "SuccessPolicy", "Matched rules at index 0")
    assert status["completedIndexes"] == "0" and status["succeeded"] == 1 and not status.get("failed") and status["completionTime"]
    table = await kubectl(apiserver, "-n", namespace, "get", "job", "leader")
    assert table.stdout.split("\n")[1].split()[1:3] == ["Complete", "1/3"]


async def test_kubectl_shows_policy_validation_errors(apiserver, namespace):
    bad = manifest("bad", completionMode="Indexed", completions=2, backoffLimitPerIndex=0,
                   podFailurePolicy={"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [0]}}]},
                   successPolicy={"rules": [{"succeededIndexes": "1-5"}]})
    result = await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=bad, check=False)
    assert result.returncode != 0
    assert "spec.podFailurePolicy.rules[0].onExitCodes.values[0]: Invalid value: 0: must not be 0 for the In operator" in result.stderr
    assert ('spec.successPolicy.rules[0].succeededIndexes: Invalid value: "1-5": error parsing succeededIndexes: too large index: "5"'
            in result.stderr)


async def test_kubectl_explain_the_policies(apiserver):
    """The policies are typed in the OpenAPI document: kubectl explain walks into them."""
    exit_codes = (await kubectl(apiserver, "explain", "job.spec.podFailurePolicy.rules.onExitCodes")).stdout
    assert "FIELD: onExitCodes <PodFailurePolicyOnExitCodesRequirement>" in exit_codes
    assert all(f"  {name}\t<" in exit_codes for name in ("containerName", "operator", "values")), exit_codes
    rules = (await kubectl(apiserver, "explain", "job.spec.successPolicy.rules")).stdout
    assert "  succeededCount\t<integer>" in rules and "  succeededIndexes\t<string>" in rules, rules
