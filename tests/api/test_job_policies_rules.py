"""Validation of a Job's podFailurePolicy, backoffLimitPerIndex/maxFailedIndexes and
successPolicy with upstream's paths and messages (pkg/apis/batch/validation/validation.go,
validation_test.go's cases), each expected line written out by hand."""

from __future__ import annotations

import pytest

from kubesvc.api.validation import validate_update
from tests.api.test_workloads_rules import SELECTOR, TEMPLATE, defaulted, errors

NEVER = {**TEMPLATE, "spec": {**TEMPLATE["spec"], "restartPolicy": "Never"}}


def job(**spec) -> dict:
    return {"selector": SELECTOR, "template": NEVER, **spec}


def indexed(completions=4, **spec) -> dict:
    return job(completionMode="Indexed", completions=completions, **spec)


def exit_rule(action="FailJob", **on_exit_codes) -> dict:
    return {"action": action, "onExitCodes": {"operator": "In", "values": [42], **on_exit_codes}}


@pytest.mark.parametrize("spec, message", [
    (job(backoffLimitPerIndex=1), "spec.backoffLimitPerIndex: Invalid value: 1: requires indexed completion mode"),
    (job(maxFailedIndexes=1), "spec.maxFailedIndexes: Invalid value: 1: requires indexed completion mode"),
    (indexed(maxFailedIndexes=1), "spec.backoffLimitPerIndex: Required value: when maxFailedIndexes is specified"),
    (indexed(backoffLimitPerIndex=1, maxFailedIndexes=5), "spec.maxFailedIndexes: Invalid value: 5: must be less than or equal to completions"),
    (indexed(completions=200_000, backoffLimitPerIndex=1, parallelism=20_000),
     "spec.maxFailedIndexes: Required value: must be specified when completions is above 100000"),
    (indexed(completions=200_000, backoffLimitPerIndex=1, parallelism=20_000, maxFailedIndexes=1),
     "spec.parallelism: Invalid value: 20000: must be less than or equal to 10000 when completions are above 100000 and used with "
     "backoff limit per index"),
    (indexed(backoffLimitPerIndex=-1), "spec.backoffLimitPerIndex: Invalid value: -1: must be greater than or equal to 0"),
], ids=["per-index-nonindexed", "max-failed-nonindexed", "max-failed-alone", "max-failed-over-completions", "high-completions",
        "high-parallelism", "negative"])
def test_per_index_rules(spec, message):
    assert message in errors("Job", spec), errors("Job", spec)


@pytest.mark.parametrize("rule, message", [
    ({"onExitCodes": {"operator": "In", "values": [1]}},
     'spec.podFailurePolicy.rules[0].action: Required value: valid values: ["Count" "FailIndex" "FailJob" "Ignore"]'),
    (exit_rule("Retry"),
     'spec.podFailurePolicy.rules[0].action: Unsupported value: "Retry": supported values: "Count", "FailIndex", "FailJob", "Ignore"'),
    (exit_rule("FailIndex"), 'spec.podFailurePolicy.rules[0].action: Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set'),
    ({"action": "FailJob"}, "spec.podFailurePolicy.rules[0]: Invalid value: specifying one of OnExitCodes and OnPodConditions is required"),
    ({**exit_rule(), "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
     "spec.podFailurePolicy.rules[0]: Invalid value: specifying both OnExitCodes and OnPodConditions is not supported"),
    (exit_rule(operator="Between"),
     'spec.podFailurePolicy.rules[0].onExitCodes.operator: Unsupported value: "Between": supported values: "In", "NotIn"'),
    (exit_rule(operator=""), 'spec.podFailurePolicy.rules[0].onExitCodes.operator: Required value: valid values: ["In" "NotIn"]'),
    (exit_rule(values=[]), "spec.podFailurePolicy.rules[0].onExitCodes.values: Invalid value: []int32{}: at least one value is required"),
    (exit_rule(values=[0, 1]), "spec.podFailurePolicy.rules[0].onExitCodes.values[0]: Invalid value: 0: must not be 0 for the In operator"),
    (exit_rule(values=[5, 3]), "spec.podFailurePolicy.rules[0].onExitCodes.values: Invalid value: []int32{5, 3}: must be ordered"),
    (exit_rule(values=[3, 3]), "spec.podFailurePolicy.rules[0].onExitCodes.values[1]: Duplicate value: 3"),
    (exit_rule(containerName="nope"),
     'spec.podFailurePolicy.rules[0].onExitCodes.containerName: Invalid value: "nope": must be one of the container or initContainer '
     "names in the pod template"),
    ({"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "Maybe"}]},
     'spec.podFailurePolicy.rules[0].onPodConditions[0].status: Unsupported value: "Maybe": supported values: "False", "True", "Unknown"'),
    ({"action": "Ignore", "onPodConditions": [{"type": "Bad Type", "status": "True"}]},
     'spec.podFailurePolicy.rules[0].onPodConditions[0].type: Invalid value: "Bad Type": name part must consist of alphanumeric characters'),
], ids=["no-action", "unknown-action", "fail-index-needs-per-index", "neither", "both", "operator", "no-operator", "no-values", "zero-in",
        "unordered", "duplicate", "container", "status", "type"])
def test_pod_failure_policy_rules(rule, message):
    found = errors("Job", job(podFailurePolicy={"rules": [rule]}))
    assert any(line.startswith(message) for line in found), found


def test_pod_failure_policy_accepts_upstream_examples():
    rules = [exit_rule(containerName="c", values=[1, 42]),
             {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
             {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [0, 3]}}]
    assert errors("Job", job(podFailurePolicy={"rules": rules})) == []
    assert errors("Job", indexed(backoffLimitPerIndex=0, podFailurePolicy={"rules": [exit_rule("FailIndex")]})) == []
    too_many = errors("Job", job(podFailurePolicy={"rules": [exit_rule()] * 21}))
    assert "spec.podFailurePolicy.rules: Too many: must have at most 20 items" in too_many, too_many


@pytest.mark.parametrize("spec, message", [
    (job(successPolicy={"rules": [{"succeededCount": 1}]}),
     "spec.successPolicy: Invalid value: batch.SuccessPolicy{Rules:[]batch.SuccessPolicyRule{batch.SuccessPolicyRule{"
     "SucceededIndexes:(*string)(nil), SucceededCount:1}}}: requires indexed completion mode"),
    (indexed(successPolicy={"rules": []}),
     "spec.successPolicy.rules: Required value: at least one rules must be specified when the successPolicy is specified"),
    (indexed(successPolicy={"rules": [{}]}),
     "spec.successPolicy.rules[0]: Required value: at least one of succeededCount or succeededIndexes must be specified"),
    (indexed(successPolicy={"rules": [{"succeededIndexes": "0-9"}]}),
     'spec.successPolicy.rules[0].succeededIndexes: Invalid value: "0-9": error parsing succeededIndexes: too large index: "9"'),
    (indexed(successPolicy={"rules": [{"succeededIndexes": "2,1"}]}),
     'spec.successPolicy.rules[0].succeededIndexes: Invalid value: "2,1": error parsing succeededIndexes: non-increasing order, '
     "previous: 2, current: 1"),
    (indexed(successPolicy={"rules": [{"succeededIndexes": "1-2-3"}]}),
     'spec.successPolicy.rules[0].succeededIndexes: Invalid value: "1-2-3": error parsing succeededIndexes: the fragment "1-2-3" '
     "violates the requirement that an index interval can have at most two parts separated by '-'"),
    (indexed(successPolicy={"rules": [{"succeededIndexes": "a"}]}),
     'spec.successPolicy.rules[0].succeededIndexes: Invalid value: "a": error parsing succeededIndexes: cannot convert string to '
     'integer for index: "a"'),
    (indexed(successPolicy={"rules": [{"succeededCount": 5}]}),
     "spec.successPolicy.rules[0].succeededCount: Invalid value: 5: must be less than or equal to 4 (the number of specified completions)"),
    (indexed(successPolicy={"rules": [{"succeededIndexes": "0,2", "succeededCount": 3}]}),
     "spec.successPolicy.rules[0].succeededCount: Invalid value: 3: must be less than or equal to 2 (the number of indexes in the "
     "specified succeededIndexes field)"),
], ids=["nonindexed", "no-rules", "empty-rule", "too-large", "order", "three-parts", "not-a-number", "count-over-completions",
        "count-over-indexes"])
def test_success_policy_rules(spec, message):
    assert message in errors("Job", spec), errors("Job", spec)


def test_success_policy_accepted_and_immutable():
    spec = indexed(successPolicy={"rules": [{"succeededIndexes": "0,2-3", "succeededCount": 2}]})
    assert errors("Job", spec) == []
    old = defaulted("Job", spec, resourceVersion="1")
    new = defaulted("Job", {**spec, "successPolicy": {"rules": [{"succeededCount": 1}]}}, resourceVersion="1")
    found = [str(e) for e in validate_update("Job", new, old, namespaced=True)]
    assert any(line.startswith("spec.successPolicy: Invalid value: ") and line.endswith("field is immutable") for line in found), found


def _with_conditions(spec: dict, *types: str) -> dict:
    job = defaulted("Job", spec, resourceVersion="1")
    job["status"] = {"conditions": [{"type": t, "status": "True"} for t in types]}
    return job


@pytest.mark.parametrize("spec, old, new, message", [
    (job(), (), ("SuccessCriteriaMet", "Failed"), "cannot set SuccessCriteriaMet=True and Failed=true conditions"),
    (job(), (), ("SuccessCriteriaMet", "FailureTarget"), "cannot set SuccessCriteriaMet=True and FailureTarget=true conditions"),
    (indexed(successPolicy={"rules": [{"succeededCount": 1}]}), (), ("Complete",),
     "cannot set Complete=True for Job with SuccessPolicy unless SuccessCriteriaMet=True"),
    (job(), ("SuccessCriteriaMet",), (), "cannot disable the SuccessCriteriaMet=True condition"),
    (job(), ("Complete",), ("Complete", "SuccessCriteriaMet"), "cannot set SuccessCriteriaMet=True for Job already has Complete=true conditions"),
], ids=["met-and-failed", "met-and-failure-target", "policy-complete-without-met", "met-taken-back", "met-after-complete"])
def test_status_condition_rules(spec, old, new, message):
    from kubesvc.api.validation import validate_status_update

    found = [str(e) for e in validate_status_update("Job", _with_conditions(spec, *new), _with_conditions(spec, *old), namespaced=True)]
    assert f"status.conditions: Invalid value: {message}" in found, found


def test_status_conditions_the_controller_writes_are_accepted():
    from kubesvc.api.validation import validate_status_update

    spec = indexed(successPolicy={"rules": [{"succeededCount": 1}]})
    steps = [(), ("SuccessCriteriaMet",), ("SuccessCriteriaMet", "Complete")]
    for old, new in zip(steps, steps[1:]):
        assert validate_status_update("Job", _with_conditions(spec, *new), _with_conditions(spec, *old), namespaced=True) == []
    assert validate_status_update("Job", _with_conditions(job(), "FailureTarget", "Failed"), _with_conditions(job(), "FailureTarget"),
                                  namespaced=True) == []


@pytest.mark.parametrize("limit", ["²", "9" * 5000, "99999999999999999999"], ids=["unicode-digit", "5000-digits", "past-int64"])
def test_an_index_strconv_atoi_refuses_is_a_field_error_not_a_500(limit):
    """strconv.Atoi's rules: ASCII digits within int64, however long the text (int() took "²"
    and raised on 5 000 digits: a 500 out of validation; review 20)."""
    found = errors("Job", indexed(successPolicy={"rules": [{"succeededIndexes": "0-" + limit}]}))
    assert len(found) == 1 and found[0].startswith("spec.successPolicy.rules[0].succeededIndexes: Invalid value: "), found
    assert found[0].endswith(f'error parsing succeededIndexes: cannot convert string to integer for index: "{limit}"'), found
