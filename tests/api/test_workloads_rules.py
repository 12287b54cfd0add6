"""Defaulting and validation of the workload kinds as upstream's (pkg/apis/apps/v1/defaults.go,
batch/v1/defaults.go, core/v1 SetDefaults_ReplicationController; apps, batch and core
validation), table-driven, expected values written out by hand."""

from __future__ import annotations

import copy

import pytest

from kubesvc.api.defaults import apply_defaults
from kubesvc.api.validation import validate, validate_status_update, validate_update

TEMPLATE = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
SELECTOR = {"matchLabels": {"app": "x"}}


def obj(kind: str, spec: dict, **meta) -> dict:
    return {"metadata": {"name": "w", "namespace": "default", **meta}, "spec": copy.deepcopy(spec)}


def defaulted(kind: str, spec: dict, **meta) -> dict:
    o = obj(kind, spec, **meta)
    apply_defaults(kind, o)
    return o


def errors(kind: str, spec: dict, **meta) -> list[str]:
    return [str(e) for e in validate(kind, defaulted(kind, spec, **meta), namespaced=True)]


# ---- defaults ------------------------------------------------------------------------------------

def test_deployment_keeps_what_is_set_and_recreate_gets_no_rolling_update():
    spec = defaulted("Deployment", {"replicas": 0, "revisionHistoryLimit": 0, "strategy": {"rollingUpdate": {"maxSurge": 1}}})["spec"]
    assert spec["replicas"] == 0 and spec["revisionHistoryLimit"] == 0
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "25%"}}
    assert defaulted("Deployment", {"strategy": {"type": "Recreate"}})["spec"]["strategy"] == {"type": "Recreate"}


def test_template_gets_pod_spec_defaults_but_not_pod_only_ones():
    spec = defaulted("ReplicaSet", {"template": copy.deepcopy(TEMPLATE)})["spec"]["template"]["spec"]
    assert spec["restartPolicy"] == "Always" and spec["dnsPolicy"] == "ClusterFirst" and spec["terminationGracePeriodSeconds"] == 30
    assert "enableServiceLinks" not in spec  # SetDefaults_Pod's, not PodSpec's


def test_daemon_set_defaults():
    spec = defaulted("DaemonSet", {})["spec"]
    assert spec["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    assert spec["revisionHistoryLimit"] == 10
    assert defaulted("DaemonSet", {"updateStrategy": {"type": "OnDelete"}})["spec"]["updateStrategy"] == {"type": "OnDelete"}


@pytest.mark.parametrize("spec, meta, selector, labels", [
    ({"template": TEMPLATE}, {}, {"app": "x"}, {"app": "x"}),
    ({"template": TEMPLATE, "selector": {"app": "y"}}, {"labels": {"mine": "1"}}, {"app": "y"}, {"mine": "1"}),
    ({}, {}, None, None),
], ids=["from-template", "kept", "no-template"])
def test_replication_controller_selector_and_labels_from_template(spec, meta, selector, labels):
    rc = defaulted("ReplicationController", spec, **meta)
    assert rc["spec"].get("selector") == selector and rc["metadata"].get("labels") == labels
    assert rc["spec"]["replicas"] == 1
    assert ("template" in rc["spec"]) == ("template" in spec)


@pytest.mark.parametrize("given, expected", [
    ({}, {"completions": 1, "parallelism": 1, "backoffLimit": 6}),
    ({"completions": 5}, {"completions": 5, "parallelism": 1, "backoffLimit": 6}),
    ({"parallelism": 3}, {"parallelism": 3, "backoffLimit": 6}),
    ({"backoffLimitPerIndex": 1, "completionMode": "Indexed", "completions": 2},
     {"completions": 2, "parallelism": 1, "backoffLimit": 2**31 - 1}),
], ids=["nothing", "completions", "parallelism", "per-index"])
def test_job_counts(given, expected):
    spec = defaulted("Job", given)["spec"]
    assert {k: spec.get(k) for k in ("completions", "parallelism", "backoffLimit") if k in spec} == expected
    assert spec["suspend"] is False and spec["podReplacementPolicy"] == "TerminatingOrFailed"


def test_job_failure_policy_defaults():
    spec = defaulted("Job", {"podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}})["spec"]
    assert spec["podReplacementPolicy"] == "Failed"
    assert spec["podFailurePolicy"]["rules"][0]["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]


@pytest.mark.parametrize("garbage", [5, "x", {"rules": 5}, {"rules": [5, {"onPodConditions": 7}]}, {"rules": [{"onPodConditions": [3]}]}])
def test_job_failure_policy_garbage_never_raises(garbage):
    job = defaulted("Job", {"podFailurePolicy": garbage, "template": TEMPLATE})
    validate("Job", job, namespaced=True)


# ---- validation ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, spec, message", [
    ("ReplicaSet", {"selector": {}, "template": TEMPLATE},
     "spec.selector: Invalid value: &v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: "
     "empty selector is invalid for deployment"),
    ("ReplicaSet", {"selector": SELECTOR, "template": {**TEMPLATE, "spec": {**TEMPLATE["spec"], "activeDeadlineSeconds": 5}}},
     "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in ReplicaSet is not Supported"),
    ("ReplicaSet", {"selector": {"matchExpressions": [{"key": "app", "operator": "In"}]}, "template": TEMPLATE},
     "spec.selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"),
    ("ReplicaSet", {"selector": SELECTOR, "template": {**TEMPLATE, "spec": {**TEMPLATE["spec"], "ephemeralContainers": [{"name": "e"}]}}},
     "spec.template.spec.ephemeralContainers: Forbidden: ephemeral containers not allowed in pod template"),
    ("ReplicationController", {"template": {"spec": TEMPLATE["spec"]}}, "spec.selector: Required value"),
    ("ReplicationController", {"selector": {"app": "y"}, "template": TEMPLATE},
     'spec.template.metadata.labels: Invalid value: map[string]string{"app":"x"}: `selector` does not match template `labels`'),
    ("ReplicationController", {"selector": {"app": "x"}}, "spec.template: Required value"),
    ("DaemonSet", {"selector": SELECTOR, "template": TEMPLATE, "updateStrategy": {"rollingUpdate": {"maxSurge": 1}}},
     'spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: intstr.IntOrString{Type:0, IntVal:1, StrVal:""}: '
     "may not be set when maxUnavailable is non-zero"),
    ("DaemonSet", {"selector": SELECTOR, "template": TEMPLATE, "updateStrategy": {"rollingUpdate": {"maxUnavailable": 0}}},
     "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"),
    ("DaemonSet", {"selector": SELECTOR, "template": TEMPLATE, "updateStrategy": {"type": "Sometimes"}},
     'spec.updateStrategy: Unsupported value: apps.DaemonSetUpdateStrategy{Type:"Sometimes"}: supported values: "RollingUpdate", "OnDelete"'),
    ("DaemonSet", {"selector": {"matchLabels": {"app": "y"}}, "template": TEMPLATE},
     'spec.template.metadata.labels: Invalid value: map[string]string{"app":"x"}: `selector` does not match template `labels`'),
    ("Job", {"selector": SELECTOR, "template": {**TEMPLATE, "spec": {**TEMPLATE["spec"], "restartPolicy": "Never"}}, "completionMode": "Indexed",
             "parallelism": 2}, "spec.completions: Required value: when completion mode is Indexed"),
    ("Job", {"selector": SELECTOR, "template": {**TEMPLATE, "spec": {**TEMPLATE["spec"], "restartPolicy": "Never"}}, "backoffLimit": -1},
     "spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0"),
    ("Job", {"selector": SELECTOR, "template": {**TEMPLATE, "spec": {**TEMPLATE["spec"], "restartPolicy": "OnFailure"}},
             "podFailurePolicy": {"rules": []}},
     'spec.template.spec.restartPolicy: Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy is specified'),
], ids=["rs-empty-selector", "rs-deadline", "rs-in-without-values", "rs-ephemeral", "rc-no-selector", "rc-mismatch", "rc-no-template",
        "ds-both-set", "ds-both-zero", "ds-type", "ds-mismatch", "job-indexed-no-completions", "job-backoff", "job-failure-policy-restart"])
def test_upstream_messages(kind, spec, message):
    spec = {k: v for k, v in spec.items() if v is not None}
    assert message in errors(kind, spec), errors(kind, spec)


def test_indexed_job_name_must_leave_room_for_the_index():
    spec = {"selector": SELECTOR, "completionMode": "Indexed", "completions": 100,
            "template": {**TEMPLATE, "spec": {**TEMPLATE["spec"], "restartPolicy": "Never"}}}
    name = "a" * 61
    assert f"metadata.name: Invalid value: \"{name}\": will not able to create pod with invalid DNS label: {name}-99" in \
        [str(e) for e in validate("Job", {**defaulted("Job", spec), "metadata": {"name": name, "namespace": "d"}}, namespaced=True)]


def test_job_selector_and_template_are_immutable():
    old = defaulted("Job", {"selector": SELECTOR, "template": {**TEMPLATE, "spec": {**TEMPLATE["spec"], "restartPolicy": "Never"}}},
                    resourceVersion="1")
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "other"
    new["spec"]["completions"] = 3
    messages = [str(e) for e in validate_update("Job", new, old, namespaced=True)]
    assert any(m.startswith("spec.template: Invalid value:") and m.endswith("field is immutable") for m in messages)
    assert "spec.completions: Invalid value: 3: field is immutable" in messages


def test_replica_set_status_rules():
    old = defaulted("ReplicaSet", {"selector": SELECTOR, "template": TEMPLATE}, resourceVersion="1")
    new = {**copy.deepcopy(old), "status": {"replicas": 2, "fullyLabeledReplicas": 3, "readyReplicas": 1, "availableReplicas": -1}}
    assert [str(e) for e in validate_status_update("ReplicaSet", new, old, namespaced=True)] == [
        "status.availableReplicas: Invalid value: -1: must be greater than or equal to 0",
        "status.fullyLabeledReplicas: Invalid value: 3: cannot be greater than status.replicas",
    ]


def test_deployment_collision_count_cannot_go_down():
    old = {**defaulted("Deployment", {"selector": SELECTOR, "template": TEMPLATE}, resourceVersion="1"), "status": {"collisionCount": 2}}
    new = {**copy.deepcopy(old), "status": {"collisionCount": 1}}
    assert [str(e) for e in validate_status_update("Deployment", new, old, namespaced=True)] == [
        "status.collisionCount: Invalid value: 1: cannot be decremented"]


def test_controller_revision():
    assert "data: Required value: data is mandatory" in [str(e) for e in validate("ControllerRevision", {"metadata": {"name": "r", "namespace": "d"},
                                                                                                        "revision": 1}, namespaced=True)]
    old = {"metadata": {"name": "r", "namespace": "d", "resourceVersion": "1"}, "data": {"a": 1}, "revision": 1}
    assert "data: Invalid value: {\"a\":2}: field is immutable" in [
        str(e) for e in validate_update("ControllerRevision", {**old, "data": {"a": 2}}, old, namespaced=True)]


@pytest.mark.parametrize("schedule, message", [
    ("x", "expected exactly 5 fields, found 1: [x]"),
    ("a * * * *", 'failed to parse int from a: strconv.Atoi: parsing "a": invalid syntax'),
    ("* 24 * * *", "end of range (24) above maximum (23): 24"),
    ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
    ("5-1 * * * *", "beginning of range (5) beyond end of range (1): 5-1"),
    ("*/0 * * * *", "step of range should be a positive number: */0"),
    ("@fortnightly", "unrecognized descriptor: @fortnightly"),
    ("@every 1x", 'failed to parse duration @every 1x: time: invalid duration "1x"'),
], ids=["fields", "not-a-number", "hour", "day-of-month", "backwards", "zero-step", "descriptor", "every"])
def test_cron_job_schedules_as_robfig_cron_parses_them(schedule, message):
    spec = {"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": {**TEMPLATE["spec"], "restartPolicy": "Never"}}}}}
    assert f'spec.schedule: Invalid value: "{schedule}": {message}' in errors("CronJob", spec)


@pytest.mark.parametrize("schedule", ["*/5 * * * *", "0 0 1 jan-mar mon-fri", "@hourly", "@every 90s", "0,30 9-17/2 * * ?"])
def test_cron_job_good_schedules_and_defaults(schedule):
    spec = {"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": {**TEMPLATE["spec"], "restartPolicy": "Never"}}}}}
    assert errors("CronJob", spec) == []
    defaulted_spec = defaulted("CronJob", spec)["spec"]
    assert (defaulted_spec["concurrencyPolicy"], defaulted_spec["suspend"], defaulted_spec["successfulJobsHistoryLimit"],
            defaulted_spec["failedJobsHistoryLimit"]) == ("Allow", False, 3, 1)
    assert "backoffLimit" not in defaulted_spec["jobTemplate"]["spec"]  # the Job's own defaults wait for the Job


@pytest.mark.parametrize("change, message", [
    ({"timeZone": "Mars/Olympus"}, 'spec.timeZone: Invalid value: "Mars/Olympus": unknown time zone Mars/Olympus'),
    ({"timeZone": ""}, 'spec.timeZone: Invalid value: "": timeZone must be nil or non-empty string'),
    ({"concurrencyPolicy": "Sometimes"}, 'spec.concurrencyPolicy: Unsupported value: "Sometimes": supported values: "Allow", "Forbid", "Replace"'),
    ({"jobTemplate": {"spec": {"selector": SELECTOR, "template": {"spec": {**TEMPLATE["spec"], "restartPolicy": "Never"}}}}},
     "spec.jobTemplate.spec.selector: Invalid value: &v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"x\"}, "
     "MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: `selector` will be auto-generated"),
    ({"jobTemplate": {"spec": {"template": TEMPLATE}}},
     'spec.jobTemplate.spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"'),
], ids=["unknown-zone", "empty-zone", "policy", "selector", "restart-policy"])
def test_cron_job_rules(change, message):
    spec = {"schedule": "@daily", "jobTemplate": {"spec": {"template": {"spec": {**TEMPLATE["spec"], "restartPolicy": "Never"}}}}, **change}
    assert message in errors("CronJob", spec), errors("CronJob", spec)


def test_cron_job_time_zone_from_the_tz_database():
    spec = {"schedule": "@daily", "timeZone": "Europe/Berlin",
            "jobTemplate": {"spec": {"template": {"spec": {**TEMPLATE["spec"], "restartPolicy": "Never"}}}}}
    assert errors("CronJob", spec) == []


def test_a_suspended_job_that_never_started_may_change_its_scheduling_directives():
    old = defaulted("Job", {"suspend": True, "selector": SELECTOR, "template": {**TEMPLATE, "spec": {**TEMPLATE["spec"], "restartPolicy": "Never"}}},
                    resourceVersion="1")
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "gpu"}
    new["spec"]["template"]["metadata"]["annotations"] = {"queue": "a"}
    assert validate_update("Job", new, old, namespaced=True) == []
    started = {**old, "status": {"startTime": "2026-01-01T00:00:00Z"}}
    assert any(str(e).endswith("field is immutable") for e in validate_update("Job", new, started, namespaced=True))
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "other"
    assert any(str(e).startswith("spec.template: Invalid value:") for e in validate_update("Job", new, old, namespaced=True))
