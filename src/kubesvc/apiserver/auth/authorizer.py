"""Authorization decisions and how a denial is worded (k8s.io/apiserver pkg/authorization and
pkg/endpoints/handlers/responsewriters ``forbiddenMessage``; identity.md §2.1, §2.4).

Every authorizer answers ALLOW, DENY or NO_OPINION with a reason. The chain runs the
privileged-group authorizer first (``system:masters`` may do anything), then the modes of
``--authorization-mode`` in order; the first ALLOW or DENY wins, and if all have no opinion
the request is denied with their non-empty reasons joined by newlines.
"""

from __future__ import annotations

import enum
import html
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from kubesvc.api.errors import StatusError
from kubesvc.util.golang import quote as go_quote
from kubesvc.apiserver.auth.attributes import Attributes, RequestInfo
from kubesvc.apiserver.auth.rules import ALL, PolicyRule
from kubesvc.serving.user import SYSTEM_PRIVILEGED_GROUP, UserInfo


class Decision(enum.Enum):
    DENY = 0
    ALLOW = 1
    NO_OPINION = 2


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    reason: str = ""

    @property
    def allowed(self) -> bool:
        return self.decision is Decision.ALLOW


@dataclass
class RuleSet:
    """What a rule resolver answers (upstream ``RuleResolver.RulesFor``): the resource and
    non-resource rules a user holds in a namespace, whether the list may be incomplete, and
    the errors met while resolving (a SelfSubjectRulesReview's ``evaluationError``)."""

    resource: list[PolicyRule] = field(default_factory=list)
    non_resource: list[PolicyRule] = field(default_factory=list)
    incomplete: bool = False
    errors: list[str] = field(default_factory=list)


class Authorizer(Protocol):
    def authorize(self, attrs: Attributes) -> Verdict: ...

    def rules_for(self, user: UserInfo, namespace: str) -> RuleSet: ...


class PrivilegedGroupAuthorizer:
    """Always first in the chain: ``system:masters`` may do anything (no rule resolver:
    a SelfSubjectRulesReview shows an admin the rules RBAC binds to that group)."""

    def authorize(self, attrs: Attributes) -> Verdict:
        if SYSTEM_PRIVILEGED_GROUP in attrs.user.groups:
            return Verdict(Decision.ALLOW)
        return Verdict(Decision.NO_OPINION)

    def rules_for(self, user: UserInfo, namespace: str) -> RuleSet:
        return RuleSet()


class AlwaysAllow:
    def authorize(self, attrs: Attributes) -> Verdict:
        return Verdict(Decision.ALLOW)

    def rules_for(self, user: UserInfo, namespace: str) -> RuleSet:
        return RuleSet([PolicyRule((ALL,), (ALL,), (ALL,))], [PolicyRule((ALL,), non_resource_urls=(ALL,))])


class AlwaysDeny:
    def authorize(self, attrs: Attributes) -> Verdict:
        return Verdict(Decision.NO_OPINION, "Everything is forbidden.")

    def rules_for(self, user: UserInfo, namespace: str) -> RuleSet:
        return RuleSet()


class Union:
    def __init__(self, authorizers: Sequence[Authorizer]):
        self.authorizers = list(authorizers)

    def authorize(self, attrs: Attributes) -> Verdict:
        reasons = []
        for authorizer in self.authorizers:
            verdict = authorizer.authorize(attrs)
            if verdict.decision is not Decision.NO_OPINION:
                return verdict
            if verdict.reason:
                reasons.append(verdict.reason)
        return Verdict(Decision.NO_OPINION, "\n".join(reasons))

    def rules_for(self, user: UserInfo, namespace: str) -> RuleSet:
        """Upstream ``unionAuthzRulesHandler``: every resolver's rules, concatenated."""
        union = RuleSet()
        for authorizer in self.authorizers:
            rules = authorizer.rules_for(user, namespace)
            union.resource += rules.resource
            union.non_resource += rules.non_resource
            union.incomplete = union.incomplete or rules.incomplete
            union.errors += rules.errors
        return union


def forbidden_message(user: UserInfo, info: RequestInfo, reason: str = "") -> str:
    """``User "x" cannot <verb> resource "r[/sub]" in API group "g" in the namespace "ns"``."""
    who = f"User {go_quote(user.name)}"
    if not info.is_resource_request:
        text = f'{who} cannot {info.verb} path "{info.path}"'
    else:
        resource = info.resource + (f"/{info.subresource}" if info.subresource else "")
        scope = f'in the namespace "{info.namespace}"' if info.namespace else "at the cluster scope"
        text = f'{who} cannot {info.verb} resource "{resource}" in API group "{info.api_group}" {scope}'
    text = html.escape(text, quote=False)
    return f"{text}: {reason}" if reason else text


def forbidden(user: UserInfo, info: RequestInfo, reason: str = "") -> StatusError:
    """The 403 Status upstream's authorization filter writes."""
    message = forbidden_message(user, info, reason)
    if not info.is_resource_request:
        return StatusError(403, "Forbidden", f"forbidden: {message}", {})
    group_resource = f"{info.resource}.{info.api_group}" if info.api_group else info.resource
    details: dict = {"kind": info.resource}
    if info.api_group:
        details["group"] = info.api_group
    if info.name:
        details["name"] = info.name
        return StatusError(403, "Forbidden", f'{group_resource} "{info.name}" is forbidden: {message}', details)
    return StatusError(403, "Forbidden", f"{group_resource} is forbidden: {message}", details)

