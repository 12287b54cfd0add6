"""RBAC escalation prevention: no one grants or binds permissions they do not hold
(upstream pkg/registry/rbac/{role,clusterrole,rolebinding,clusterrolebinding}/policybased,
pkg/registry/rbac/escalation_check.go, pkg/registry/rbac/validation ``ConfirmNoEscalation``;
identity.md §2.3).

Creating or updating a **Role or ClusterRole** is allowed when the user is in
``system:masters``, or is authorized for the verb ``escalate`` on the role (its group,
resource, namespace and the request's name), or already holds every rule the role grants:
each rule is broken into atoms (group, resource, verb[, name]) and (URL, verb), and each atom
must be covered by one rule the user holds in the role's namespace (ClusterRoleBindings,
plus RoleBindings there; for a ClusterRole, ClusterRoleBindings only). Setting, changing or
removing an ``aggregationRule`` needs ``*`` on everything.

Creating or updating a **RoleBinding or ClusterRoleBinding** is allowed when the user is in
``system:masters``, or is authorized for ``bind`` on the referenced role (the binding's
namespace, "" for a ClusterRoleBinding), or holds every rule of the referenced role (which
must exist: 404 otherwise).

An update that only changes what the garbage collector needs (finalizers, ownerReferences)
is never checked. A refusal is a 403 on the object::

    roles.rbac.authorization.k8s.io "r" is forbidden: user "bob" (groups=["g1" "system:authenticated"]) is attempting to grant RBAC permissions not currently held:
    {APIGroups:[""], Resources:["pods"], Verbs:["get"]}

the missing atoms compacted (``CompactRules``), one per line in ``CompactString`` form,
sorted; ``; resolution errors: [...]`` follows when some held rules could not be resolved.
"""

from __future__ import annotations

import copy
from typing import Awaitable, Callable

from kubesvc.api import errors
from kubesvc.util.golang import quote as go_quote, quote_strings as go_string_list
from kubesvc.apiserver.auth.attributes import Attributes, RequestInfo
from kubesvc.apiserver.auth.authorizer import Authorizer
from kubesvc.apiserver.auth.context import RequestContext
from kubesvc.apiserver.auth.rbac import RBAC_GROUP, PolicyIndex
from kubesvc.util import golang
from kubesvc.apiserver.auth.rules import ALL, PolicyRule, compact_rules, compact_string, covers, rules_from_api
from kubesvc.serving.user import SYSTEM_PRIVILEGED_GROUP, UserInfo

FULL_AUTHORITY = (PolicyRule((ALL,), (ALL,), (ALL,)), PolicyRule((ALL,), non_resource_urls=(ALL,)))
AGGREGATION_NEEDS_ADMIN = "must have cluster-admin privileges to use the aggregationRule"
ROLE_RESOURCES = ("roles", "clusterroles")


def escalation_message(user: UserInfo, held: list[PolicyRule], resolution_errors: list[str], wanted: tuple[PolicyRule, ...]) -> str | None:
    """Upstream ``ConfirmNoEscalation``: None when ``held`` covers ``wanted``, else the text."""
    covered, missing = covers(held, wanted)
    if covered:
        return None
    lines = sorted({compact_string(rule) for rule in compact_rules(missing)})
    text = (f"user {go_quote(user.name)} (groups={go_string_list(user.groups)}) is attempting to grant RBAC permissions "
            "not currently held:\n" + "\n".join(lines))
    if resolution_errors:
        text += f"; resolution errors: [{golang.aggregate(resolution_errors)}]"
    return text


def only_gc_fields_changed(new: dict, old: dict | None) -> bool:
    """Upstream ``IsOnlyMutatingGCFields``: equal once ownerReferences, finalizers, selfLink
    and managedFields are taken from the old object."""
    if old is None:
        return False
    copied = copy.deepcopy(new)
    meta = copied.setdefault("metadata", {})
    old_meta = old.get("metadata") or {}
    for name in ("ownerReferences", "finalizers", "selfLink", "managedFields"):
        if name in old_meta:
            meta[name] = copy.deepcopy(old_meta[name])
        else:
            meta.pop(name, None)
    return copied == old


def has_aggregation_rule(role: dict | None) -> bool:
    rule = (role or {}).get("aggregationRule")
    return isinstance(rule, dict) and bool(rule.get("clusterRoleSelectors"))


class EscalationGuard:
    """The checks, given the authorizer chain (for ``escalate`` and ``bind``), the policy the
    user holds, and how to read a referenced role from the store (``get_role(kind,
    namespace, name)`` returning the object or raising the store's 404)."""

    def __init__(self, authorizer: Authorizer, policy: PolicyIndex, get_role: Callable[[str, str, str], Awaitable[dict]]):
        self.authorizer = authorizer
        self.policy = policy
        self.get_role = get_role

    @staticmethod
    def _privileged(user: UserInfo) -> bool:
        return SYSTEM_PRIVILEGED_GROUP in user.groups

    def _allowed(self, user: UserInfo, verb: str, resource: str, namespace: str, name: str) -> bool:
        info = RequestInfo(True, "", verb, RBAC_GROUP, "*", namespace, resource, "", name)
        return self.authorizer.authorize(Attributes(user, info)).allowed

    def _escalation_authorized(self, request: RequestContext) -> bool:
        """Upstream ``RoleEscalationAuthorized``: ``escalate`` on the request's own role."""
        info = request.info
        if not info.is_resource_request or info.api_group != RBAC_GROUP or info.resource not in ROLE_RESOURCES:
            return False
        return self._allowed(request.user, "escalate", info.resource, info.namespace, info.name)

    def _confirm(self, request: RequestContext, resource: str, name: str, wanted: tuple[PolicyRule, ...]) -> None:
        held, resolution_errors = self.policy.rules_for(request.user, request.info.namespace)
        message = escalation_message(request.user, held, resolution_errors, wanted)
        if message is not None:
            raise errors.forbidden(resource, name, RBAC_GROUP, message)

    async def check_role(self, request: RequestContext | None, resource: str, new: dict, old: dict | None) -> None:
        """A Role or ClusterRole create (``old`` None) or update."""
        if request is None or self._privileged(request.user) or only_gc_fields_changed(new, old):
            return
        if self._escalation_authorized(request):
            return
        name = (new.get("metadata") or {}).get("name") or ""
        self._confirm(request, resource, name, rules_from_api(new.get("rules")))
        if resource == "clusterroles" and (has_aggregation_rule(new) or has_aggregation_rule(old)):
            held, _ = self.policy.rules_for(request.user, request.info.namespace)
            if not covers(held, FULL_AUTHORITY)[0]:
                raise errors.forbidden(resource, name, RBAC_GROUP, AGGREGATION_NEEDS_ADMIN)

    async def check_binding(self, request: RequestContext | None, resource: str, new: dict, old: dict | None) -> None:
        """A RoleBinding or ClusterRoleBinding create (``old`` None) or update."""
        if request is None or self._privileged(request.user) or only_gc_fields_changed(new, old):
            return
        ref = new.get("roleRef") if isinstance(new.get("roleRef"), dict) else {}
        kind, role_name = ref.get("kind"), ref.get("name")
        if kind not in ("Role", "ClusterRole") or not isinstance(role_name, str):
            return  # validation refuses the roleRef (upstream would answer 500 here)
        namespace = request.info.namespace if resource == "rolebindings" else ""
        role_resource = "roles" if kind == "Role" else "clusterroles"
        if self._allowed(request.user, "bind", role_resource, namespace, role_name):
            return
        role = await self.get_role(kind, namespace, role_name)  # a missing role: the store's 404
        name = (new.get("metadata") or {}).get("name") or ""
        self._confirm(request, resource, name, rules_from_api(role.get("rules")))
