"""Access reviews: the authorizer answering questions (upstream
pkg/registry/authorization/{subjectaccessreview,localsubjectaccessreview,
selfsubjectaccessreview,selfsubjectrulesreview}/rest.go and
pkg/apis/authorization/validation; identity.md §7.1, §7.3).

* ``SubjectAccessReview``: may ``spec.user`` (with exactly ``spec.groups``, ``uid`` and
  ``extra``: nothing is added) do ``spec.resourceAttributes`` or
  ``spec.nonResourceAttributes``? Needs ``create subjectaccessreviews`` (system:auth-delegator,
  nodes, the controller-manager).
* ``LocalSubjectAccessReview``: the same, for the URL's namespace only (``admin`` may ask).
* ``SelfSubjectAccessReview``: may the caller do it (``kubectl auth can-i``)?
* ``SelfSubjectRulesReview``: every rule the caller holds in ``spec.namespace``, as the rule
  resolvers of the authorizer chain list them (``kubectl auth can-i --list``); a node's list
  is ``incomplete`` (the Node authorizer cannot enumerate its rules).

The answer is the review with ``status``: ``allowed`` (always present), ``denied`` (only an
explicit deny), ``reason`` and ``evaluationError`` when set. An empty ``version`` in
``resourceAttributes`` means every version. Nothing is stored.
"""

from __future__ import annotations

from aiohttp import web

from kubesvc.api import errors
from kubesvc.api.errors import FieldError, GoSyntax, invalid_value
from kubesvc.util.golang import quote as go_quote
from kubesvc.apiserver.auth.attributes import Attributes, RequestInfo
from kubesvc.apiserver.auth.authorizer import Decision
from kubesvc.util import golang
from kubesvc.apiserver.auth.rules import PolicyRule, strings
from kubesvc.serving.user import UserInfo
from kubesvc.apiserver import appkeys

GROUP = "authorization.k8s.io"


def _non_resource_go(attrs: dict) -> GoSyntax:
    return GoSyntax(f"authorization.NonResourceAttributes{{Path:{go_quote(str(attrs.get('path') or ''))}, "
                    f"Verb:{go_quote(str(attrs.get('verb') or ''))}}}")


def validate_spec(spec: dict, *, needs_subject: bool, local: bool) -> list[FieldError]:
    """Upstream ``ValidateSubjectAccessReviewSpec`` (and the Self / Local variants)."""
    found: list[FieldError] = []
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if resource is not None and non_resource is not None:
        found.append(invalid_value("spec.nonResourceAttributes", _non_resource_go(non_resource),
                                   "cannot be specified in combination with resourceAttributes"))
    if resource is None and non_resource is None:
        found.append(invalid_value("spec.resourceAttributes", "null", "exactly one of nonResourceAttributes or resourceAttributes must be specified"))
    if local and non_resource is not None:
        found.append(invalid_value("spec.nonResourceAttributes", _non_resource_go(non_resource), "disallowed on this kind of request"))
    if needs_subject and not spec.get("user") and not spec.get("groups"):
        found.append(invalid_value("spec.user", str(spec.get("user") or ""), "at least one of user or group must be specified"))
    return found


def _metadata_errors(meta: dict, *, allow_namespace: bool) -> list[FieldError]:
    extra = {k: v for k, v in meta.items() if k not in ("managedFields", "creationTimestamp") and v not in (None, "", {}, [])}
    if allow_namespace:
        extra.pop("namespace", None)
    if not extra:
        return []
    return [invalid_value("metadata", meta, "must be empty except for namespace" if allow_namespace else "must be empty")]


def attributes_from_spec(user: UserInfo, spec: dict) -> Attributes:
    """Upstream ``ResourceAttributesFrom`` / ``NonResourceAttributesFrom``."""
    resource = spec.get("resourceAttributes")
    if isinstance(resource, dict):
        field_selector = resource.get("fieldSelector") if isinstance(resource.get("fieldSelector"), dict) else {}
        label_selector = resource.get("labelSelector") if isinstance(resource.get("labelSelector"), dict) else {}
        info = RequestInfo(True, "", str(resource.get("verb") or ""), str(resource.get("group") or ""), str(resource.get("version") or "*"),
                           str(resource.get("namespace") or ""), str(resource.get("resource") or ""), str(resource.get("subresource") or ""),
                           str(resource.get("name") or ""), str(field_selector.get("rawSelector") or ""), str(label_selector.get("rawSelector") or ""))
    else:
        non_resource = spec.get("nonResourceAttributes") or {}
        info = RequestInfo(False, str(non_resource.get("path") or ""), str(non_resource.get("verb") or ""))
    return Attributes(user, info)


def subject_from_spec(spec: dict) -> UserInfo:
    extra = spec.get("extra") if isinstance(spec.get("extra"), dict) else {}
    return UserInfo(str(spec.get("user") or ""), str(spec.get("uid") or ""), strings(spec.get("groups")),
                    {str(k): strings(v) for k, v in extra.items()})


def decide(request: web.Request, attrs: Attributes) -> dict:
    verdict = request.app[appkeys.AUTHORIZER].authorize(attrs)
    status: dict = {"allowed": verdict.decision is Decision.ALLOW}
    if verdict.decision is Decision.DENY:
        status["denied"] = True
    if verdict.reason:
        status["reason"] = verdict.reason
    return status


def _answer(body: dict, status: dict) -> dict:
    meta = dict(body.get("metadata") or {})
    meta.setdefault("creationTimestamp", None)
    return {"metadata": meta, "spec": body.get("spec") or {}, "status": status}


def _spec(body: dict) -> dict:
    spec = body.get("spec")
    return spec if isinstance(spec, dict) else {}


def _checked_spec(kind: str, body: dict, *, needs_subject: bool, local: bool) -> dict:
    """The review's spec once its spec and metadata validate (else upstream's 422)."""
    spec = _spec(body)
    found = validate_spec(spec, needs_subject=needs_subject, local=local) + _metadata_errors(body.get("metadata") or {}, allow_namespace=local)
    if found:
        raise errors.invalid(kind, "", found, GROUP)
    return spec


async def subject_access_review(request: web.Request, create) -> dict:
    spec = _checked_spec("SubjectAccessReview", create.body, needs_subject=True, local=False)
    return _answer(create.body, decide(request, attributes_from_spec(subject_from_spec(spec), spec)))


async def local_subject_access_review(request: web.Request, create) -> dict:
    spec = _checked_spec("LocalSubjectAccessReview", create.body, needs_subject=True, local=True)
    namespace = create.namespace or ""
    if not namespace:
        raise errors.bad_request(f"namespace is required on this type: {namespace}")
    asked = (spec.get("resourceAttributes") or {}).get("namespace") or ""
    if asked != namespace:
        raise errors.bad_request(f"spec.resourceAttributes.namespace must match namespace: {namespace}")
    create.body.setdefault("metadata", {})["namespace"] = namespace
    return _answer(create.body, decide(request, attributes_from_spec(subject_from_spec(spec), spec)))


async def self_subject_access_review(request: web.Request, create) -> dict:
    spec = _checked_spec("SelfSubjectAccessReview", create.body, needs_subject=False, local=False)
    return _answer(create.body, decide(request, attributes_from_spec(request["user"], spec)))


def _resource_rule(rule: PolicyRule) -> dict:
    return PolicyRule(rule.verbs, rule.api_groups, rule.resources, rule.resource_names).to_api()


def _non_resource_rule(rule: PolicyRule) -> dict:
    return PolicyRule(rule.verbs, non_resource_urls=rule.non_resource_urls).to_api()


async def self_subject_rules_review(request: web.Request, create) -> dict:
    """Upstream answers with ``status`` only: the spec is not echoed."""
    namespace = _spec(create.body).get("namespace") or ""
    if not namespace:
        raise errors.bad_request("no namespace on request")
    rules = request.app[appkeys.AUTHORIZER].rules_for(request["user"], str(namespace))
    status: dict = {"resourceRules": [_resource_rule(r) for r in rules.resource],
                    "nonResourceRules": [_non_resource_rule(r) for r in rules.non_resource], "incomplete": rules.incomplete}
    if rules.errors:
        status["evaluationError"] = golang.aggregate(rules.errors)
    return {"metadata": {"creationTimestamp": None}, "spec": {}, "status": status}


def register_review_handlers(app: web.Application) -> None:
    app[appkeys.CREATE_HANDLERS].update({
        (GROUP, "subjectaccessreviews"): subject_access_review,
        (GROUP, "localsubjectaccessreviews"): local_subject_access_review,
        (GROUP, "selfsubjectaccessreviews"): self_subject_access_review,
        (GROUP, "selfsubjectrulesreviews"): self_subject_rules_review,
    })
