"""Validation of the workload kinds, with upstream's rules and words (Kubernetes 1.32).

* Deployment, ReplicaSet, DaemonSet, ControllerRevision: ``pkg/apis/apps/validation/validation.go``
  (``ValidateDeploymentSpec``, ``ValidateReplicaSetSpec``, ``ValidateDaemonSetSpec``,
  ``ValidatePodTemplateSpecForReplicaSet``, ``ValidateRollingUpdateDeployment``, the status
  checks) plus the registry strategies' rule that an apps/v1 selector is immutable
  (``pkg/registry/apps/*/strategy.go``: ``field is immutable``).
* ReplicationController: ``ValidateReplicationControllerSpec`` and ``ValidatePodTemplateSpecForRC``
  in ``pkg/apis/core/validation/validation.go``.
* Job, CronJob: ``pkg/apis/batch/validation/validation.go`` (``validateJobSpec``,
  ``ValidateJobSpecUpdate``, ``validateCronJobSpec``: the schedule as robfig/cron parses it,
  ``api/cron.py``; the time zone; the concurrency policy; the job template's JobSpec rules with no
  selector of its own).

A workload's ``spec.template`` is validated as upstream's ``ValidatePodTemplateSpec`` does it:
the template's labels and annotations, then the whole Pod spec rules (the same code that
validates Pods, here with every path under ``spec.template.spec``), and no ephemeral
containers. On top, each owner adds its own: ``restartPolicy`` must be ``Always`` (``Never`` or
``OnFailure`` for a Job), no ``activeDeadlineSeconds``, and the selector must select the
template's labels (``\\`selector\\` does not match template \\`labels\\```), or the owner would
never count the Pods it creates.

Where Go renders a bad value with ``%#v`` (an ``intstr.IntOrString``, a ``*metav1.LabelSelector``)
the value is spelled the same way (:class:`errors.GoSyntax`), since scripts grep these lines.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from kubesvc.api.errors import GoSyntax, forbidden_field, invalid_value, not_supported, required
from kubesvc.api.selectors import selector_from_label_selector, selector_from_map
from kubesvc.api import validation_batch
from kubesvc.api.validation_meta import (
    GO_NIL,
    Errs,
    child,
    name_is_dns_subdomain,
    read,
    read_int,
    read_map,
    read_str,
    read_str_map,
    regex_error,
    validate_annotations,
    validate_labels,
    validate_nonnegative,
    validate_object_meta,
    validate_object_meta_update,
)
from kubesvc.api.validation_rbac import validate_label_selector
from kubesvc.api.errors import StatusError
from kubesvc.util import golang

__all__ = [
    "validate_deployment", "validate_deployment_update", "validate_deployment_status_update",
    "validate_replica_set", "validate_replica_set_update", "validate_replica_set_status_update",
    "validate_daemon_set", "validate_daemon_set_update", "validate_daemon_set_status_update",
    "validate_controller_revision", "validate_controller_revision_update",
    "validate_replication_controller", "validate_replication_controller_update",
    "validate_replication_controller_status_update",
    "validate_job", "validate_job_update", "validate_job_status_update",
    "validate_cron_job", "validate_cron_job_update", "validate_cron_job_status_update",
    "int_or_percent_value",
]

SELECTOR_MISMATCH = "`selector` does not match template `labels`"
_PERCENT = re.compile(r"^[0-9]+%$")
_PERCENT_ERROR = regex_error("a valid percent string must be a numeric string followed by an ending '%'", "[0-9]+%",
                             "1%", "93%")
_MAX_PARALLELISM_FOR_INDEXED_JOB = 100000
_STATUS_OVER_REPLICAS = "cannot be greater than status.replicas"


# ---- Go spellings of bad values ------------------------------------------------------------------


def _go_map(labels: dict[str, str]) -> str:
    """``%#v`` of a map[string]string: keys sorted, ``map[string]string(nil)`` when empty."""
    if not labels:
        return "map[string]string(nil)"
    return "map[string]string{" + ", ".join(f"{golang.quote(k)}:{golang.quote(v)}" for k, v in sorted(labels.items())) + "}"


def go_int_or_string(value: Any) -> GoSyntax:
    """``%#v`` of an intstr.IntOrString value (Type 0 is an int, 1 a string)."""
    if isinstance(value, str):
        return GoSyntax(f"intstr.IntOrString{{Type:1, IntVal:0, StrVal:{golang.quote(value)}}}")
    number = value if isinstance(value, int) and not isinstance(value, bool) else 0
    return GoSyntax(f'intstr.IntOrString{{Type:0, IntVal:{number}, StrVal:""}}')


def go_label_selector(selector: Any) -> GoSyntax:
    """``%#v`` of a *metav1.LabelSelector."""
    if not isinstance(selector, dict):
        return GoSyntax("(*v1.LabelSelector)(nil)")
    requirements = [r for r in selector.get("matchExpressions") or [] if isinstance(r, dict)]
    if requirements:
        items = []
        for r in requirements:
            values = r.get("values")
            values_text = golang.go_syntax_strings(values) if values else "[]string(nil)"
            items.append(f"v1.LabelSelectorRequirement{{Key:{golang.quote(str(r.get('key', '')))}, "
                         f"Operator:{golang.quote(str(r.get('operator', '')))}, Values:{values_text}}}")
        expressions = "[]v1.LabelSelectorRequirement{" + ", ".join(items) + "}"
    else:
        expressions = "[]v1.LabelSelectorRequirement(nil)"
    labels = selector.get("matchLabels") if isinstance(selector.get("matchLabels"), dict) else {}
    return GoSyntax(f"&v1.LabelSelector{{MatchLabels:{_go_map(labels)}, MatchExpressions:{expressions}}}")


# ---- shared pieces -------------------------------------------------------------------------------


def int_or_percent_value(value: Any) -> int:
    """``getIntOrPercentValue``: the number of a percentage string, else the integer (0 for
    anything unreadable)."""
    if isinstance(value, str):
        return int(value[:-1]) if _PERCENT.match(value) else 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _positive_int_or_percent(value: Any, path: str) -> Errs:
    """``ValidatePositiveIntOrPercent``."""
    if isinstance(value, str):
        return [] if _PERCENT.match(value) else [invalid_value(path, go_int_or_string(value), _PERCENT_ERROR)]
    if isinstance(value, int) and not isinstance(value, bool):
        return validate_nonnegative(value, path)
    return [invalid_value(path, go_int_or_string(value), "must be an integer or percentage (e.g '5%')")]


def _not_more_than_100_percent(value: Any, path: str) -> Errs:
    if isinstance(value, str) and _PERCENT.match(value) and int(value[:-1]) > 100:
        return [invalid_value(path, go_int_or_string(value), "must not be greater than 100%")]
    return []


def _int(errs: Errs, obj: Any, name: str, path: str) -> int:
    return read_int(errs, obj, name, path) or 0


def _nonnegative(errs: Errs, obj: Any, names: tuple[str, ...], path: str) -> Errs:
    out: Errs = []
    for name in names:
        value = read_int(errs, obj, name, path)
        if value is not None:
            out += validate_nonnegative(value, child(path, name))
    return out


def _under(prefix: str, errors: Errs) -> Errs:
    """Errors of the Pod spec rules (paths ``spec...``) moved under ``prefix`` (a template's spec)."""
    return [replace(e, field=prefix + e.field[len("spec"):]) if e.field == "spec" or e.field.startswith(("spec.", "spec["))
            else e for e in errors]


def validate_pod_template_spec(errs: Errs, template: dict, path: str) -> Errs:
    """``ValidatePodTemplateSpec``: metadata labels/annotations, the Pod spec, no ephemeral containers."""
    from kubesvc.api import validation as core  # the Pod rules; imported late: core imports this module

    meta_path = child(path, "metadata")
    meta = read_map(errs, template, "metadata", path)
    out = validate_labels(read_str_map(errs, meta, "labels", meta_path), child(meta_path, "labels"))
    out += validate_annotations(read_str_map(errs, meta, "annotations", meta_path), child(meta_path, "annotations"))
    spec_path = child(path, "spec")
    spec = read_map(errs, template, "spec", path)
    type_errors: Errs = []
    out += _under(spec_path, core._validate_pod_spec(type_errors, spec))
    errs += _under(spec_path, type_errors)
    if spec.get("ephemeralContainers"):
        out.append(forbidden_field(child(spec_path, "ephemeralContainers"), "ephemeral containers not allowed in pod template"))
    return out


def _template_labels(template: Any) -> dict[str, str]:
    meta = template.get("metadata") if isinstance(template, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return {k: v for k, v in labels.items() if isinstance(v, str)} if isinstance(labels, dict) else {}


def _always_restarting_template(errs: Errs, template: dict, path: str, owner: str) -> Errs:
    """The part of ``ValidatePodTemplateSpecForReplicaSet`` / ``ForRC`` / DaemonSet after the
    template's own rules: restartPolicy Always only, no activeDeadlineSeconds."""
    spec = read_map([], template, "spec", path)
    out: Errs = []
    restart_policy = read_str([], spec, "restartPolicy", "")
    if restart_policy != "Always":
        out.append(not_supported(child(path, "spec.restartPolicy"), restart_policy, ["Always"]))
    if read(errs, spec, "activeDeadlineSeconds", "", int) is not None:
        out.append(forbidden_field(child(path, "spec.activeDeadlineSeconds"), f"activeDeadlineSeconds in {owner} is not Supported"))
    return out


def _label_selector(errs: Errs, spec: dict, path: str, what: str, required_: bool = True) -> tuple[Errs, Any]:
    """The selector rules shared by Deployments and ReplicaSets (and, without ``required_``,
    DaemonSets): (errors, the selector, or None when it cannot select)."""
    selector_path = child(path, "selector")
    selector = read(errs, spec, "selector", path, dict)
    out: Errs = []
    if selector is None:
        if required_:
            out.append(required(selector_path))
    else:
        out += validate_label_selector(errs, selector, selector_path)
        if not selector.get("matchLabels") and not selector.get("matchExpressions"):
            out.append(invalid_value(selector_path, go_label_selector(selector), f"empty selector is invalid for {what}"))
    try:
        matcher = selector_from_label_selector(selector)
    except (StatusError, AttributeError, TypeError):
        out.append(invalid_value(selector_path, go_label_selector(selector), "invalid label selector"))
        return out, None
    return out, matcher


def _selector_matches_template(matcher: Any, template: Any, path: str, skip_empty: bool = True) -> Errs:
    if matcher is None or (skip_empty and matcher.is_everything()):
        return []
    labels = _template_labels(template)
    if matcher.matches(labels):
        return []
    return [invalid_value(child(path, "metadata.labels"), GoSyntax(_go_map(labels)), SELECTOR_MISMATCH)]


def _immutable_selector(new: Any, old: Any) -> Errs:
    new_selector = (new.get("spec") or {}).get("selector") if isinstance(new, dict) else None
    old_selector = (old.get("spec") or {}).get("selector") if isinstance(old, dict) else None
    if new_selector == old_selector:
        return []
    return [invalid_value("spec.selector", go_label_selector(new_selector), "field is immutable")]


def _meta(obj: Any) -> Errs:
    return validate_object_meta(obj, namespaced=True, name_fn=name_is_dns_subdomain, core=False)


def _replica_set_like_template(errs: Errs, spec: dict, matcher: Any, path: str, owner: str, pointer: bool = False) -> Errs:
    """``ValidatePodTemplateSpecForReplicaSet`` (and ForRC): selector match, the template's own
    rules, restart policy and deadline. Only the RC's template is a pointer that may be nil."""
    template_path = child(path, "template")
    template = read(errs, spec, "template", path, dict)
    if template is None:
        if pointer:
            return [required(template_path)]
        template = {}
    out = _selector_matches_template(matcher, template, template_path)
    out += validate_pod_template_spec(errs, template, template_path)
    out += _always_restarting_template(errs, template, template_path, owner)
    return out


# ---- Deployment ----------------------------------------------------------------------------------


def _deployment_strategy(errs: Errs, spec: dict) -> Errs:
    path = "spec.strategy"
    strategy = read_map(errs, spec, "strategy", "spec")
    kind = read_str(errs, strategy, "type", path)
    rolling = read(errs, strategy, "rollingUpdate", path, dict)
    if kind == "Recreate":
        if rolling is not None:
            return [forbidden_field(child(path, "rollingUpdate"), "may not be specified when strategy `type` is 'Recreate'")]
        return []
    if kind == "RollingUpdate":
        if rolling is None:
            return [required(child(path, "rollingUpdate"), "this should be defaulted and never be nil")]
        here = child(path, "rollingUpdate")
        surge, unavailable = rolling.get("maxSurge"), rolling.get("maxUnavailable")
        out = _positive_int_or_percent(unavailable, child(here, "maxUnavailable"))
        out += _positive_int_or_percent(surge, child(here, "maxSurge"))
        if int_or_percent_value(unavailable) == 0 and int_or_percent_value(surge) == 0:
            out.append(invalid_value(child(here, "maxUnavailable"), go_int_or_string(unavailable), "may not be 0 when `maxSurge` is 0"))
        out += _not_more_than_100_percent(unavailable, child(here, "maxUnavailable"))
        return out
    return [not_supported(path, GoSyntax(f"apps.DeploymentStrategy{{Type:{golang.quote(kind)}}}"), ["Recreate", "RollingUpdate"])]


def _deployment_spec(errs: Errs, obj: Any) -> Errs:
    spec = read_map(errs, obj, "spec", "")
    out = _nonnegative(errs, spec, ("replicas",), "spec")
    selector_errors, matcher = _label_selector(errs, spec, "spec", "deployment")
    out += selector_errors
    if matcher is not None:
        out += _replica_set_like_template(errs, spec, matcher, "spec", "ReplicaSet")
    out += _deployment_strategy(errs, spec)
    out += _nonnegative(errs, spec, ("minReadySeconds", "revisionHistoryLimit"), "spec")
    deadline = read_int(errs, spec, "progressDeadlineSeconds", "spec")
    if deadline is not None:
        out += validate_nonnegative(deadline, "spec.progressDeadlineSeconds")
        if deadline <= _int([], spec, "minReadySeconds", "spec"):
            out.append(invalid_value("spec.progressDeadlineSeconds", deadline, "must be greater than minReadySeconds"))
    return out


def validate_deployment(obj: Any, namespaced: bool = True) -> Errs:
    errs = _meta(obj)
    return errs + _deployment_spec(errs, obj)


def validate_deployment_update(new: Any, old: Any, namespaced: bool = True) -> Errs:
    errs = validate_object_meta_update(new, old, core=False)
    return errs + _deployment_spec(errs, new) + _immutable_selector(new, old)


def _replica_counts(errs: Errs, status: dict, counted: tuple[str, ...]) -> Errs:
    """The ``cannot be greater than`` rules of the ReplicaSet-like statuses."""
    replicas, ready, available = (_int([], status, n, "status") for n in ("replicas", "readyReplicas", "availableReplicas"))
    out: Errs = []
    for name in counted:
        value = _int([], status, name, "status")
        if value > replicas:
            out.append(invalid_value(child("status", name), value, _STATUS_OVER_REPLICAS))
    if available > ready:
        out.append(invalid_value("status.availableReplicas", available, "cannot be greater than readyReplicas"))
    return out


def validate_deployment_status_update(new: Any, old: Any, namespaced: bool = True) -> Errs:
    errs = validate_object_meta_update(new, old, core=False)
    status = read_map(errs, new, "status", "")
    errs += _nonnegative(errs, status, ("observedGeneration", "replicas", "updatedReplicas", "readyReplicas", "availableReplicas",
                                        "unavailableReplicas", "collisionCount"), "status")
    errs += _replica_counts(errs, status, ("updatedReplicas", "readyReplicas", "availableReplicas"))
    new_count = read_int([], status, "collisionCount", "status")
    old_count = read_int([], (old or {}).get("status") or {}, "collisionCount", "status")
    if new_count is not None and old_count is not None and new_count < old_count:
        errs.append(invalid_value("status.collisionCount", new_count, "cannot be decremented"))
    return errs


# ---- ReplicaSet ----------------------------------------------------------------------------------


def _replica_set_spec(errs: Errs, obj: Any) -> Errs:
    spec = read_map(errs, obj, "spec", "")
    out = _nonnegative(errs, spec, ("replicas", "minReadySeconds"), "spec")
    selector_errors, matcher = _label_selector(errs, spec, "spec", "deployment")  # sic: upstream's words for RS too
    out += selector_errors
    if matcher is not None:
        out += _replica_set_like_template(errs, spec, matcher, "spec", "ReplicaSet")
    return out


def validate_replica_set(obj: Any, namespaced: bool = True) -> Errs:
    errs = _meta(obj)
    return errs + _replica_set_spec(errs, obj)


def validate_replica_set_update(new: Any, old: Any, namespaced: bool = True) -> Errs:
    errs = validate_object_meta_update(new, old, core=False)
    return errs + _replica_set_spec(errs, new) + _immutable_selector(new, old)


def _replica_status(errs: Errs, new: Any) -> Errs:
    status = read_map(errs, new, "status", "")
    out = _nonnegative(errs, status, ("replicas", "fullyLabeledReplicas", "readyReplicas", "availableReplicas",
                                      "observedGeneration"), "status")
    return out + _replica_counts(errs, status, ("fullyLabeledReplicas", "readyReplicas", "availableReplicas"))


def validate_replica_set_status_update(new: Any, old: Any, namespaced: bool = True) -> Errs:
    errs = validate_object_meta_update(new, old, core=False)
    return errs + _replica_status(errs, new)


# ---- ReplicationController -----------------------------------------------------------------------


def _replication_controller_spec(errs: Errs, obj: Any) -> Errs:
    spec = read_map(errs, obj, "spec", "")
    out = _nonnegative(errs, spec, ("minReadySeconds",), "spec")
    selector = read_str_map(errs, spec, "selector", "spec")
    if not selector:
        out.append(required("spec.selector"))
    out += _nonnegative(errs, spec, ("replicas",), "spec")
    out += _replica_set_like_template(errs, spec, selector_from_map(selector) if selector else None, "spec",
                                      "ReplicationController", pointer=True)
    return out


def validate_replication_controller(obj: Any, namespaced: bool = True) -> Errs:
    errs = validate_object_meta(obj, namespaced=True, name_fn=name_is_dns_subdomain)
    return errs + _replication_controller_spec(errs, obj)


def validate_replication_controller_update(new: Any, old: Any, namespaced: bool = True) -> Errs:
    errs = validate_object_meta_update(new, old)
    return errs + _replication_controller_spec(errs, new)


def validate_replication_controller_status_update(new: Any, old: Any, namespaced: bool = True) -> Errs:
    errs = validate_object_meta_update(new, old)
    return errs + _replica_status(errs, new)


# ---- DaemonSet -----------------------------------------------------------------------------------


def _daemon_set_strategy(errs: Errs, spec: dict) -> Errs:
    path = "spec.updateStrategy"
    strategy = read_map(errs, spec, "updateStrategy", "spec")
    kind = read_str(errs, strategy, "type", path)
    if kind == "OnDelete":
        return []
    if kind != "RollingUpdate":
        return [not_supported(path, GoSyntax(f"apps.DaemonSetUpdateStrategy{{Type:{golang.quote(kind)}}}"), ["RollingUpdate", "OnDelete"])]
    rolling = read(errs, strategy, "rollingUpdate", path, dict)
    here = child(path, "rollingUpdate")
    if rolling is None:
        return [required(here)]
    surge, unavailable = rolling.get("maxSurge"), rolling.get("maxUnavailable")
    out = _positive_int_or_percent(unavailable, child(here, "maxUnavailable"))
    out += _positive_int_or_percent(surge, child(here, "maxSurge"))
    out += _not_more_than_100_percent(unavailable, child(here, "maxUnavailable"))
    out += _not_more_than_100_percent(surge, child(here, "maxSurge"))
    has_unavailable, has_surge = int_or_percent_value(unavailable) != 0, int_or_percent_value(surge) != 0
    if has_unavailable and has_surge:
        out.append(invalid_value(child(here, "maxSurge"), go_int_or_string(surge), "may not be set when maxUnavailable is non-zero"))
    elif not has_unavailable and not has_surge:
        out.append(required(child(here, "maxUnavailable"), "cannot be 0 when maxSurge is 0"))
    return out


def _daemon_set_spec(errs: Errs, obj: Any) -> Errs:
    spec = read_map(errs, obj, "spec", "")
    out: Errs = []
    selector = read(errs, spec, "selector", "spec", dict)
    if selector is not None:
        out += validate_label_selector(errs, selector, "spec.selector")
    template = read_map(errs, spec, "template", "spec")
    try:
        matcher = selector_from_label_selector(selector)
    except (StatusError, AttributeError, TypeError):
        matcher = None
    if matcher is not None:
        out += _selector_matches_template(matcher, template, "spec.template", skip_empty=False)
    if selector is not None and not selector.get("matchLabels") and not selector.get("matchExpressions"):
        out.append(invalid_value("spec.selector", go_label_selector(selector), "empty selector is invalid for daemonset"))
    out += validate_pod_template_spec(errs, template, "spec.template")
    out += _always_restarting_template(errs, template, "spec.template", "DaemonSet")
    out += _nonnegative(errs, spec, ("minReadySeconds",), "spec")
    out += _daemon_set_strategy(errs, spec)
    out += _nonnegative(errs, spec, ("revisionHistoryLimit",), "spec")
    return out


def validate_daemon_set(obj: Any, namespaced: bool = True) -> Errs:
    errs = _meta(obj)
    return errs + _daemon_set_spec(errs, obj)


def validate_daemon_set_update(new: Any, old: Any, namespaced: bool = True) -> Errs:
    errs = validate_object_meta_update(new, old, core=False)
    return errs + _daemon_set_spec(errs, new) + _immutable_selector(new, old)


def validate_daemon_set_status_update(new: Any, old: Any, namespaced: bool = True) -> Errs:
    errs = validate_object_meta_update(new, old, core=False)
    status = read_map(errs, new, "status", "")
    errs += _nonnegative(errs, status, ("numberMisscheduled", "currentNumberScheduled", "desiredNumberScheduled", "numberReady",
                                        "observedGeneration", "updatedNumberScheduled", "numberAvailable", "numberUnavailable",
                                        "collisionCount"), "status")
    return errs


# ---- ControllerRevision --------------------------------------------------------------------------


def validate_controller_revision(obj: Any, namespaced: bool = True) -> Errs:
    errs = _meta(obj)
    if not isinstance(obj, dict) or obj.get("data") is None:
        errs.append(required("data", "data is mandatory"))
    revision = read_int(errs, obj, "revision", "")
    if revision is not None:
        errs += validate_nonnegative(revision, "revision")
    return errs


def validate_controller_revision_update(new: Any, old: Any, namespaced: bool = True) -> Errs:
    errs = validate_object_meta_update(new, old, core=False) + validate_controller_revision(new)
    if (new or {}).get("data") != (old or {}).get("data"):
        errs.append(invalid_value("data", (new or {}).get("data"), "field is immutable"))
    return errs


# ---- Job -----------------------------------------------------------------------------------------


def _job_spec(errs: Errs, obj: Any) -> Errs:
    """``ValidateJobSpec``: the rules any JobSpec follows, then its selector."""
    spec = read_map(errs, obj, "spec", "")
    out = _job_spec_body(errs, spec)
    template = read_map([], spec, "template", "spec")
    selector = read(errs, spec, "selector", "spec", dict)
    if selector is None:
        out.append(required("spec.selector"))
    else:
        out += validate_label_selector(errs, selector, "spec.selector")
        try:
            out += _selector_matches_template(selector_from_label_selector(selector), template, "spec.template", skip_empty=False)
        except (StatusError, AttributeError, TypeError):
            pass
    return out


def _job_spec_body(errs: Errs, spec: dict) -> Errs:
    """``validateJobSpec`` (paths under ``spec``): counts, completion mode, replacement policy,
    the template and its restart policy."""
    out = _nonnegative(errs, spec, ("parallelism", "completions", "activeDeadlineSeconds", "backoffLimit",
                                    "ttlSecondsAfterFinished", "backoffLimitPerIndex", "maxFailedIndexes"), "spec")
    mode = read(errs, spec, "completionMode", "spec", str)
    out += validation_batch.validate_per_index([], spec)
    if mode is not None:
        if mode not in ("NonIndexed", "Indexed"):
            out.append(not_supported("spec.completionMode", mode, ["NonIndexed", "Indexed"]))
        elif mode == "Indexed":
            if read(errs, spec, "completions", "spec", int) is None:
                out.append(required("spec.completions", "when completion mode is Indexed"))
            parallelism = read_int(errs, spec, "parallelism", "spec")
            if parallelism is not None and parallelism > _MAX_PARALLELISM_FOR_INDEXED_JOB:
                out.append(invalid_value("spec.parallelism", parallelism,
                                         f"must be less than or equal to {_MAX_PARALLELISM_FOR_INDEXED_JOB} when completion mode is Indexed"))
    replacement = read(errs, spec, "podReplacementPolicy", "spec", str)
    failure_policy = read(errs, spec, "podFailurePolicy", "spec", dict)
    if replacement is not None:
        allowed = ["Failed"] if failure_policy is not None else ["Failed", "TerminatingOrFailed"]
        if replacement not in allowed:
            out.append(not_supported("spec.podReplacementPolicy", replacement, allowed))
    out += validation_batch.validate_pod_failure_policy(errs, spec)
    out += validation_batch.validate_success_policy(errs, spec)
    out += validation_batch.validate_managed_by(errs, spec)
    template = read_map(errs, spec, "template", "spec")
    out += validate_pod_template_spec(errs, template, "spec.template")
    restart_policy = read_str([], read_map([], template, "spec", ""), "restartPolicy", "")
    restart_path = "spec.template.spec.restartPolicy"
    if restart_policy in ("Always", ""):
        out.append(required(restart_path, 'valid values: "OnFailure", "Never"'))
    elif restart_policy not in ("OnFailure", "Never"):
        out.append(not_supported(restart_path, restart_policy, ["OnFailure", "Never"]))
    elif failure_policy is not None and restart_policy != "Never":
        out.append(invalid_value(restart_path, restart_policy, 'only "Never" is supported when podFailurePolicy is specified'))
    return out


def _job_name(obj: Any) -> Errs:
    """An Indexed Job's Pods are named ``<job>-<index>``: the largest must be a DNS label."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(spec, dict) or not isinstance(meta, dict) or spec.get("completionMode") != "Indexed":
        return []
    completions = spec.get("completions")
    name = meta.get("name")
    if not isinstance(completions, int) or isinstance(completions, bool) or completions <= 0 or not isinstance(name, str):
        return []
    from kubesvc.api.validation_meta import is_dns1123_label

    hostname = f"{name}-{completions - 1}"
    if is_dns1123_label(hostname):
        return [invalid_value("metadata.name", name, f"will not able to create pod with invalid DNS label: {hostname}")]
    return []


def validate_job(obj: Any, namespaced: bool = True) -> Errs:
    errs = _meta(obj)
    errs += _job_spec(errs, obj)
    return errs + _job_name(obj)


def _immutable(new_spec: dict, old_spec: dict, name: str) -> Errs:
    new_value, old_value = new_spec.get(name), old_spec.get(name)
    if new_value == old_value:
        return []
    shown = go_label_selector(new_value) if name == "selector" else GO_NIL if new_value is None else new_value
    return [invalid_value(child("spec", name), shown, "field is immutable")]


def validate_job_update(new: Any, old: Any, namespaced: bool = True) -> Errs:
    errs = validate_object_meta_update(new, old, core=False)
    errs += _job_spec(errs, new)
    new_spec = new.get("spec") if isinstance(new, dict) and isinstance(new.get("spec"), dict) else {}
    old_spec = old.get("spec") if isinstance(old, dict) and isinstance(old.get("spec"), dict) else {}
    for name in ("selector", "completionMode", "podFailurePolicy", "backoffLimitPerIndex", "managedBy", "successPolicy"):
        errs += _immutable(new_spec, old_spec, name)
    if _never_started_suspended(old):
        # scheduling directives may change on a suspended Job that never started (what a queue
        # controller such as Kueue does before it lets the Job run)
        if _without_scheduling_directives(new_spec.get("template")) != _without_scheduling_directives(old_spec.get("template")):
            errs.append(invalid_value("spec.template", new_spec.get("template"), "field is immutable"))
    else:
        errs += _immutable(new_spec, old_spec, "template")
    if new_spec.get("completionMode") != "Indexed" or new_spec.get("parallelism") != new_spec.get("completions"):
        errs += _immutable(new_spec, old_spec, "completions")  # elastic Indexed Jobs may scale both together
    return errs


_SCHEDULING_DIRECTIVES = ("nodeSelector", "tolerations", "affinity", "schedulingGates")


def _never_started_suspended(job: Any) -> bool:
    """``AllowMutableSchedulingDirectives``: the old Job is suspended and never started."""
    spec = job.get("spec") if isinstance(job, dict) else None
    status = job.get("status") if isinstance(job, dict) else None
    return isinstance(spec, dict) and spec.get("suspend") is True and not (status or {}).get("startTime")


def _without_scheduling_directives(template: Any) -> Any:
    """The template minus what a suspended, never started Job may change: its labels,
    annotations, nodeSelector, tolerations, affinity and scheduling gates."""
    if not isinstance(template, dict):
        return template
    meta = template.get("metadata") if isinstance(template.get("metadata"), dict) else {}
    spec = template.get("spec") if isinstance(template.get("spec"), dict) else {}
    return {**template, "metadata": {k: v for k, v in meta.items() if k not in ("labels", "annotations")},
            "spec": {k: v for k, v in spec.items() if k not in _SCHEDULING_DIRECTIVES}}


def validate_job_status_update(new: Any, old: Any, namespaced: bool = True) -> Errs:
    errs = validate_object_meta_update(new, old, core=False)
    status = read_map(errs, new, "status", "")
    errs += _nonnegative(errs, status, ("active", "succeeded", "failed", "ready", "terminating"), "status")
    return errs + validation_batch.validate_job_status_conditions(new, old)


# ---- CronJob -------------------------------------------------------------------------------------

_CONCURRENCY_POLICIES = ["Allow", "Forbid", "Replace"]
_TIME_ZONE_PART = re.compile(r"^[A-Za-z\.\-_0-9+]{1,14}$")  # validTimeZoneCharacters
_MAX_CRON_JOB_NAME = 52  # a Job's name is <cronjob>-<11 characters of schedule time>, a DNS-1035 label


def _schedule(schedule: str, time_zone: str | None, old_schedule: str | None) -> Errs:
    """``validateScheduleFormat``: robfig/cron's ParseStandard, and no TZ= in the schedule (use
    ``timeZone``), unless an old schedule already had one."""
    from kubesvc.api.cron import CronError, parse_standard

    out: Errs = []
    try:
        parse_standard(schedule)
    except CronError as err:
        out.append(invalid_value("spec.schedule", schedule, str(err)))
    allow_tz = old_schedule is not None and "TZ" in old_schedule
    if allow_tz and "TZ" in schedule and time_zone is not None:
        out.append(invalid_value("spec.schedule", schedule, "cannot use both timeZone field and TZ or CRON_TZ in schedule"))
    elif not allow_tz and "TZ" in schedule:
        out.append(invalid_value("spec.schedule", schedule, "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"))
    return out


def _time_zone(time_zone: str | None) -> Errs:
    """``validateTimeZone``: a tz database name the server knows."""
    import zoneinfo

    if time_zone is None:
        return []
    if not time_zone:
        return [invalid_value("spec.timeZone", time_zone, "timeZone must be nil or non-empty string")]
    for part in time_zone.split("/"):
        if part in (".", "..") or part.startswith("-") or not _TIME_ZONE_PART.match(part):
            return [invalid_value("spec.timeZone", time_zone, f"unknown time zone {time_zone}")]
    try:
        zoneinfo.ZoneInfo(time_zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return [invalid_value("spec.timeZone", time_zone, f"unknown time zone {time_zone}")]
    return []


def _cron_job_spec(errs: Errs, obj: Any, old: Any = None) -> Errs:
    spec = read_map(errs, obj, "spec", "")
    old_spec = read_map([], old, "spec", "") if old is not None else None
    out: Errs = []
    schedule = read_str(errs, spec, "schedule", "spec")
    time_zone = read(errs, spec, "timeZone", "spec", str)
    if not schedule:
        out.append(required("spec.schedule"))
    else:
        out += _schedule(schedule, time_zone, old_spec.get("schedule") if old_spec is not None else None)
    out += _nonnegative(errs, spec, ("startingDeadlineSeconds",), "spec")
    if old_spec is None or old_spec.get("timeZone") != time_zone:
        out += _time_zone(time_zone)
    policy = read_str(errs, spec, "concurrencyPolicy", "spec")
    if not policy:
        out.append(required("spec.concurrencyPolicy"))
    elif policy not in _CONCURRENCY_POLICIES:
        out.append(not_supported("spec.concurrencyPolicy", policy, _CONCURRENCY_POLICIES))
    job_template = read_map(errs, spec, "jobTemplate", "spec")
    job_spec = read_map(errs, job_template, "spec", "spec.jobTemplate")
    here = "spec.jobTemplate.spec"
    type_errors: Errs = []
    out += _under(here, _job_spec_body(type_errors, job_spec))
    errs += _under(here, type_errors)
    if job_spec.get("selector") is not None:
        out.append(invalid_value(child(here, "selector"), go_label_selector(job_spec.get("selector")), "`selector` will be auto-generated"))
    if job_spec.get("manualSelector") is True:
        out.append(not_supported(child(here, "manualSelector"), GoSyntax("true"), ["nil", "false"]))
    out += _nonnegative(errs, spec, ("successfulJobsHistoryLimit", "failedJobsHistoryLimit"), "spec")
    return out


def validate_cron_job(obj: Any, namespaced: bool = True) -> Errs:
    errs = _meta(obj)
    name = (obj.get("metadata") or {}).get("name") if isinstance(obj, dict) else None
    if isinstance(name, str) and len(name) > _MAX_CRON_JOB_NAME:
        errs.append(invalid_value("metadata.name", name, f"must be no more than {_MAX_CRON_JOB_NAME} characters"))
    return errs + _cron_job_spec(errs, obj)


def validate_cron_job_update(new: Any, old: Any, namespaced: bool = True) -> Errs:
    errs = validate_object_meta_update(new, old, core=False)
    return errs + _cron_job_spec(errs, new, old)


def validate_cron_job_status_update(new: Any, old: Any, namespaced: bool = True) -> Errs:
    return validate_object_meta_update(new, old, core=False)
