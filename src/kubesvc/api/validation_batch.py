"""Validation of a Job's failure and success policies and its per-index back-off limit, with
upstream's paths and words (``pkg/apis/batch/validation/validation.go``, Kubernetes 1.32/1.33:
``validateJobSpec``'s per-index part, ``validatePodFailurePolicy``, ``validateSuccessPolicy``).

* ``backoffLimitPerIndex`` / ``maxFailedIndexes`` (KEP-3850) need ``completionMode: Indexed``;
  ``maxFailedIndexes`` needs ``backoffLimitPerIndex``, is at most ``completions`` and 100,000;
  above 100,000 completions ``maxFailedIndexes`` is required and both it and ``parallelism``
  are capped at 10,000.
* ``podFailurePolicy`` (KEP-3329): at most 20 rules; each has an ``action`` (``Count``,
  ``FailIndex`` -- only with ``backoffLimitPerIndex`` --, ``FailJob``, ``Ignore``) and exactly one
  of ``onExitCodes`` (operator ``In``/``NotIn``, 1..255 distinct values in increasing order, no
  0 with ``In``, an optional ``containerName`` of the template) and ``onPodConditions`` (at most
  20 patterns: a qualified condition type and a status ``True``/``False``/``Unknown``).
* ``successPolicy`` (KEP-3998) needs ``completionMode: Indexed``: 1..20 rules, each with
  ``succeededIndexes`` (intervals ``"0,2-4"`` inside ``completions``, increasing, at most 64 KiB)
  and/or ``succeededCount`` (no more than ``completions`` nor than the indexes the rule names).

* ``managedBy`` (KEP-4368, JobManagedBy): a domain-prefixed path (``IsDomainPrefixedPath``:
  ``acme.io/foo``, the domain an RFC 1123 subdomain, the path RFC 3986 path characters) of at
  most 63 characters; immutable once set (``ValidateJobSpecUpdate``).

Go renders a bad ``[]int32`` as ``[]int32{1, 2}`` and a struct with ``%#v``; those values are
spelled the same way (:class:`errors.GoSyntax`). The pointer fields of a ``SuccessPolicy`` print
as addresses upstream, which nobody can match; they are shown by value here.
"""

from __future__ import annotations

import re
from typing import Any

from kubesvc.api.errors import FieldError, GoSyntax, duplicate, invalid_value, not_supported, required, too_long, too_many
from kubesvc.api.validation_meta import (
    Errs,
    child,
    elements,
    has_type,
    index,
    is_dns1123_subdomain,
    read,
    read_int,
    read_list,
    read_str,
    regex_error,
    validate_nonnegative,
    validate_qualified_name,
)
from kubesvc.util.golang import atoi

__all__ = ["validate_per_index", "validate_pod_failure_policy", "validate_success_policy", "parse_index_intervals", "validate_managed_by"]

MAX_FAILED_INDEXES = 100_000
COMPLETIONS_SOFT_LIMIT = 100_000
PARALLELISM_LIMIT_FOR_HIGH_COMPLETIONS = 10_000
MAX_FAILED_INDEXES_LIMIT_FOR_HIGH_COMPLETIONS = 10_000
MAX_POD_FAILURE_POLICY_RULES = 20
MAX_ON_EXIT_CODES_VALUES = 255
MAX_ON_POD_CONDITIONS_PATTERNS = 20
MAX_SUCCEEDED_INDEXES_LENGTH = 64 * 1024
MAX_SUCCESS_POLICY_RULES = 20

ACTIONS = ["Count", "FailIndex", "FailJob", "Ignore"]  # sets.List: sorted
OPERATORS = ["In", "NotIn"]
CONDITION_STATUSES = ["False", "True", "Unknown"]


def _go_quoted_list(values: list[str]) -> str:
    """``fmt.Sprintf("%q", []string{...})``: ``["a" "b"]``."""
    return "[" + " ".join(f'"{v}"' for v in values) + "]"


def _omit(path: str, detail: str) -> FieldError:
    """``field.Invalid(path, field.OmitValueType{}, detail)``: no value shown."""
    return FieldError("FieldValueInvalid", path, detail)


def _int32_slice(values: Any) -> GoSyntax:
    if values is None:
        return GoSyntax("[]int32(nil)")
    return GoSyntax("[]int32{" + ", ".join(str(v) for v in values) + "}")


def validate_per_index(errs: Errs, spec: dict) -> Errs:
    """The ``backoffLimitPerIndex`` / ``maxFailedIndexes`` rules of ``validateJobSpec``."""
    out: Errs = []
    per_index = read_int(errs, spec, "backoffLimitPerIndex", "spec")
    max_failed = read_int(errs, spec, "maxFailedIndexes", "spec")
    completions = read_int(errs, spec, "completions", "spec")
    parallelism = read_int(errs, spec, "parallelism", "spec")
    mode = read(errs, spec, "completionMode", "spec", str)
    if max_failed is not None and per_index is None:
        out.append(required("spec.backoffLimitPerIndex", "when maxFailedIndexes is specified"))
    if mode == "Indexed":
        if completions is not None and max_failed is not None and max_failed > completions:
            out.append(invalid_value("spec.maxFailedIndexes", max_failed, "must be less than or equal to completions"))
        if max_failed is not None and max_failed > MAX_FAILED_INDEXES:
            out.append(invalid_value("spec.maxFailedIndexes", max_failed, f"must be less than or equal to {MAX_FAILED_INDEXES}"))
        if completions is not None and completions > COMPLETIONS_SOFT_LIMIT and per_index is not None:
            if max_failed is None:
                out.append(required("spec.maxFailedIndexes", f"must be specified when completions is above {COMPLETIONS_SOFT_LIMIT}"))
            high = f"when completions are above {COMPLETIONS_SOFT_LIMIT} and used with backoff limit per index"
            if parallelism is not None and parallelism > PARALLELISM_LIMIT_FOR_HIGH_COMPLETIONS:
                out.append(invalid_value("spec.parallelism", parallelism,
                                         f"must be less than or equal to {PARALLELISM_LIMIT_FOR_HIGH_COMPLETIONS} {high}"))
            if max_failed is not None and max_failed > MAX_FAILED_INDEXES_LIMIT_FOR_HIGH_COMPLETIONS:
                out.append(invalid_value("spec.maxFailedIndexes", max_failed,
                                         f"must be less than or equal to {MAX_FAILED_INDEXES_LIMIT_FOR_HIGH_COMPLETIONS} {high}"))
    elif mode in (None, "NonIndexed"):
        if per_index is not None:
            out.append(invalid_value("spec.backoffLimitPerIndex", per_index, "requires indexed completion mode"))
        if max_failed is not None:
            out.append(invalid_value("spec.maxFailedIndexes", max_failed, "requires indexed completion mode"))
    return out


# ---- podFailurePolicy ----------------------------------------------------------------------------


def _container_names(spec: dict) -> set[str]:
    template = spec.get("template") if isinstance(spec.get("template"), dict) else {}
    pod_spec = template.get("spec") if isinstance(template.get("spec"), dict) else {}
    names = set()
    for key in ("containers", "initContainers"):
        for container in pod_spec.get(key) or [] if isinstance(pod_spec.get(key), list) else []:
            if isinstance(container, dict) and isinstance(container.get("name"), str):
                names.add(container["name"])
    return names


def validate_pod_failure_policy(errs: Errs, spec: dict) -> Errs:
    """``validatePodFailurePolicy`` (paths under ``spec.podFailurePolicy``)."""
    policy = read(errs, spec, "podFailurePolicy", "spec", dict)
    if policy is None:
        return []
    here = "spec.podFailurePolicy"
    rules_path = child(here, "rules")
    rules = read_list(errs, policy, "rules", here)
    out: Errs = []
    if len(rules) > MAX_POD_FAILURE_POLICY_RULES:
        out.append(too_many(rules_path, len(rules), MAX_POD_FAILURE_POLICY_RULES))
    names = _container_names(spec)
    has_per_index = has_type(spec.get("backoffLimitPerIndex"), int)
    for i, rule in elements(errs, rules, rules_path, dict):
        out += _failure_policy_rule(errs, rule, index(rules_path, i), names, has_per_index)
    return out


def _failure_policy_rule(errs: Errs, rule: dict, path: str, names: set[str], has_per_index: bool) -> Errs:
    out: Errs = []
    action_path = child(path, "action")
    action = read_str(errs, rule, "action", path)
    if action == "":
        out.append(required(action_path, f"valid values: {_go_quoted_list(ACTIONS)}"))
    elif action == "FailIndex":
        if not has_per_index:
            out.append(invalid_value(action_path, action, "requires the backoffLimitPerIndex to be set"))
    elif action not in ACTIONS:
        out.append(not_supported(action_path, action, ACTIONS))
    on_exit_codes = read(errs, rule, "onExitCodes", path, dict)
    on_conditions = read_list(errs, rule, "onPodConditions", path)
    if on_exit_codes is not None:
        out += _on_exit_codes(errs, on_exit_codes, child(path, "onExitCodes"), names)
    if on_conditions:
        out += _on_pod_conditions(errs, on_conditions, child(path, "onPodConditions"))
    if on_exit_codes is not None and on_conditions:
        out.append(_omit(path, "specifying both OnExitCodes and OnPodConditions is not supported"))
    if on_exit_codes is None and not on_conditions:
        out.append(_omit(path, "specifying one of OnExitCodes and OnPodConditions is required"))
    return out


def _on_pod_conditions(errs: Errs, patterns: list, path: str) -> Errs:
    out: Errs = []
    if len(patterns) > MAX_ON_POD_CONDITIONS_PATTERNS:
        out.append(too_many(path, len(patterns), MAX_ON_POD_CONDITIONS_PATTERNS))
    for j, pattern in elements(errs, patterns, path, dict):
        pattern_path = index(path, j)
        out += validate_qualified_name(read_str(errs, pattern, "type", pattern_path), child(pattern_path, "type"))
        status = read_str(errs, pattern, "status", pattern_path)
        status_path = child(pattern_path, "status")
        if status == "":
            out.append(required(status_path, f"valid values: {_go_quoted_list(CONDITION_STATUSES)}"))
        elif status not in CONDITION_STATUSES:
            out.append(not_supported(status_path, status, CONDITION_STATUSES))
    return out


def _on_exit_codes(errs: Errs, requirement: dict, path: str, names: set[str]) -> Errs:
    out: Errs = []
    operator = read_str(errs, requirement, "operator", path)
    operator_path = child(path, "operator")
    if operator == "":
        out.append(required(operator_path, f"valid values: {_go_quoted_list(OPERATORS)}"))
    elif operator not in OPERATORS:
        out.append(not_supported(operator_path, operator, OPERATORS))
    container = read(errs, requirement, "containerName", path, str)
    if container is not None and container not in names:
        out.append(invalid_value(child(path, "containerName"), container, "must be one of the container or initContainer names in the pod template"))
    values_path = child(path, "values")
    raw = requirement.get("values")
    values = [v for v in read_list(errs, requirement, "values", path) if has_type(v, int)]
    if not values:
        out.append(invalid_value(values_path, _int32_slice(None if raw is None else []), "at least one value is required"))
    elif len(values) > MAX_ON_EXIT_CODES_VALUES:
        out.append(too_many(values_path, len(values), MAX_ON_EXIT_CODES_VALUES))
    ordered, seen = True, set()
    for j, value in enumerate(values):
        value_path = index(values_path, j)
        if operator == "In" and value == 0:
            out.append(invalid_value(value_path, value, "must not be 0 for the In operator"))
        if value in seen:
            out.append(duplicate(value_path, value))
        else:
            seen.add(value)
        if j > 0 and values[j - 1] > value:
            ordered = False
    if not ordered:
        out.append(invalid_value(values_path, _int32_slice(values), "must be ordered"))
    return out


# ---- successPolicy -------------------------------------------------------------------------------


def parse_index_intervals(text: str, completions: int) -> tuple[int, str | None]:
    """``validateIndexesFormat``: how many indexes ``"0,2-4"`` names, or the error upstream
    reports (an interval of more than two parts, a non-number, an index not below
    ``completions``, intervals not strictly increasing)."""
    if text == "":
        return 0, None
    last, total = None, 0
    for part in text.split(","):
        limits = part.split("-")
        if len(limits) > 2:
            return 0, f'the fragment "{part}" violates the requirement that an index interval can have at most two parts separated by \'-\''
        bounds = []
        for limit in limits:
            try:  # strconv.Atoi: ASCII digits, within int64 (int() takes "²" and refuses 4 300 digits: a 500)
                value = atoi(limit)
            except ValueError:
                return 0, f'cannot convert string to integer for index: "{limit}"'
            if value >= completions:
                return 0, f'too large index: "{limit}"'
            bounds.append(value)
        first, end = bounds[0], bounds[-1]
        if len(bounds) == 2 and first >= end:
            return 0, f"non-increasing order, previous: {first}, current: {end}"
        if last is not None and last >= first:
            return 0, f"non-increasing order, previous: {last}, current: {first}"
        total += end - first + 1
        last = end
    return total, None


def _go_success_policy(policy: dict) -> GoSyntax:
    rules = []
    for rule in policy.get("rules") or [] if isinstance(policy.get("rules"), list) else []:
        if not isinstance(rule, dict):
            continue
        indexes = rule.get("succeededIndexes")
        count = rule.get("succeededCount")
        shown_indexes = "(*string)(nil)" if indexes is None else f'"{indexes}"'
        shown_count = "(*int32)(nil)" if count is None else str(count)
        rules.append(f"batch.SuccessPolicyRule{{SucceededIndexes:{shown_indexes}, SucceededCount:{shown_count}}}")
    inner = "nil" if not rules else "[]batch.SuccessPolicyRule{" + ", ".join(rules) + "}"
    return GoSyntax(f"batch.SuccessPolicy{{Rules:{inner}}}")


def validate_success_policy(errs: Errs, spec: dict) -> Errs:
    """``spec.successPolicy``: Indexed Jobs only, then ``validateSuccessPolicy``."""
    policy = read(errs, spec, "successPolicy", "spec", dict)
    if policy is None:
        return []
    here = "spec.successPolicy"
    if spec.get("completionMode") != "Indexed":
        return [invalid_value(here, _go_success_policy(policy), "requires indexed completion mode")]
    completions = read_int([], spec, "completions", "spec")
    if completions is None:
        return []  # "spec.completions: Required value: when completion mode is Indexed" says it
    rules_path = child(here, "rules")
    rules = read_list(errs, policy, "rules", here)
    out: Errs = []
    if not rules:
        out.append(required(rules_path, "at least one rules must be specified when the successPolicy is specified"))
    if len(rules) > MAX_SUCCESS_POLICY_RULES:
        out.append(too_many(rules_path, len(rules), MAX_SUCCESS_POLICY_RULES))
    for i, rule in elements(errs, rules, rules_path, dict):
        out += _success_rule(errs, rule, index(rules_path, i), completions)
    return out


def _success_rule(errs: Errs, rule: dict, path: str, completions: int) -> Errs:
    out: Errs = []
    indexes = read(errs, rule, "succeededIndexes", path, str)
    count = read_int(errs, rule, "succeededCount", path)
    if indexes is None and count is None:
        out.append(required(path, "at least one of succeededCount or succeededIndexes must be specified"))
    total = 0
    if indexes is not None:
        indexes_path = child(path, "succeededIndexes")
        if len(indexes) > MAX_SUCCEEDED_INDEXES_LENGTH:
            out.append(too_long(indexes_path, indexes, MAX_SUCCEEDED_INDEXES_LENGTH))
        total, error = parse_index_intervals(indexes, completions)
        if error is not None:
            out.append(invalid_value(indexes_path, indexes, f"error parsing succeededIndexes: {error}"))
    if count is not None:
        count_path = child(path, "succeededCount")
        out += validate_nonnegative(count, count_path)
        if count > completions:
            out.append(invalid_value(count_path, count, f"must be less than or equal to {completions} (the number of specified completions)"))
        if indexes is not None and count > total:
            out.append(invalid_value(count_path, count,
                                     f"must be less than or equal to {total} (the number of indexes in the specified succeededIndexes field)"))
    return out


# ---- status ----------------------------------------------------------------------------------------


def _true(status: Any, type_: str) -> bool:
    conditions = status.get("conditions") if isinstance(status, dict) else None
    return any(isinstance(c, dict) and c.get("type") == type_ and c.get("status") == "True" for c in conditions or [])


def validate_job_status_conditions(new: Any, old: Any) -> Errs:
    """The condition rules of ``validateJobStatus`` / ``ValidateJobStatusUpdate`` that hold
    whatever the Job (1.32: SuccessCriteriaMet may be set on any Job, as the controller delays
    Complete behind it): SuccessCriteriaMet never beside Failed or FailureTarget, never taken
    back, never added to a Job already Complete without it; a Job with a successPolicy is
    Complete only after SuccessCriteriaMet."""
    status = new.get("status") if isinstance(new, dict) else None
    old_status = old.get("status") if isinstance(old, dict) else None
    spec = new.get("spec") if isinstance(new, dict) and isinstance(new.get("spec"), dict) else {}
    path = "status.conditions"
    met = _true(status, "SuccessCriteriaMet")
    out: Errs = []
    if met and _true(status, "Failed"):
        out.append(_omit(path, "cannot set SuccessCriteriaMet=True and Failed=true conditions"))
    if met and _true(status, "FailureTarget"):
        out.append(_omit(path, "cannot set SuccessCriteriaMet=True and FailureTarget=true conditions"))
    if spec.get("successPolicy") is not None and not met and _true(status, "Complete"):
        out.append(_omit(path, "cannot set Complete=True for Job with SuccessPolicy unless SuccessCriteriaMet=True"))
    if _true(old_status, "SuccessCriteriaMet") and not met:
        out.append(_omit(path, "cannot disable the SuccessCriteriaMet=True condition"))
    if _true(old_status, "Complete") and not _true(old_status, "SuccessCriteriaMet") and met:
        out.append(_omit(path, "cannot set SuccessCriteriaMet=True for Job already has Complete=true conditions"))
    return out


MAX_MANAGED_BY_LENGTH = 63  # maxManagedByLength
_HTTP_PATH_FMT = r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+"  # httpPathFmt: RFC 3986 path characters
_HTTP_PATH = re.compile(_HTTP_PATH_FMT)


def validate_managed_by(errs: Errs, spec: dict) -> Errs:
    """``validateJobSpec``'s ``managedBy``: ``IsDomainPrefixedPath``, then at most 63 characters."""
    managed_by = read(errs, spec, "managedBy", "spec", str)  # None when unset (read_str would give "")
    if managed_by is None:
        return []
    path = "spec.managedBy"
    out = _domain_prefixed_path(path, managed_by)
    if len(managed_by) > MAX_MANAGED_BY_LENGTH:
        out.append(too_long(path, managed_by, MAX_MANAGED_BY_LENGTH))
    return out


def _domain_prefixed_path(path: str, value: str) -> Errs:
    """apimachinery's ``IsDomainPrefixedPath``."""
    if not value:
        return [required(path)]
    host, slash, rest = value.partition("/")
    if not slash or not host or not rest:
        return [invalid_value(path, value, 'must be a domain-prefixed path (such as "acme.io/foo")')]
    out: Errs = [invalid_value(path, host, detail) for detail in is_dns1123_subdomain(host)]
    if not _HTTP_PATH.fullmatch(rest):
        out.append(invalid_value(path, rest, regex_error("Invalid path", _HTTP_PATH_FMT)))
    return out
