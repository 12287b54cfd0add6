"""The RBAC authorizer (upstream plugin/pkg/auth/authorizer/rbac ``RBACAuthorizer``,
pkg/registry/rbac/validation ``DefaultRuleResolver``, pkg/apis/rbac/v1 evaluation helpers;
identity.md §2.2, §7.1).

A request is allowed when one rule of a role bound to its user allows it. Bindings are
visited in upstream's order: every ClusterRoleBinding, then, for a namespaced request, the
RoleBindings of that namespace; within each, the binding's first subject that matches the
user names it, and the first allowing rule stops the visit with the reason
``RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to Group "g"`` (a RoleBinding
prints as ``"b/ns"``, a ServiceAccount subject as ``"name/ns"``). Nothing allowing is
NoOpinion (RBAC never denies), with an empty reason unless a binding's role was missing:
then ``RBAC: <the lookup errors>``.

Rule matching is upstream's ``RuleAllows`` (:mod:`kubesvc.apiserver.auth.rules`).

Subjects: ``User`` by name, ``Group`` by membership, ``ServiceAccount`` by the username
``system:serviceaccount:<ns>:<name>`` where an empty subject namespace means the binding's
(never matching in a ClusterRoleBinding).

Upstream evaluates every binding on every request from its informer caches. Here the
bindings are also indexed by subject (:class:`PolicyIndex`), so a request only looks at the
bindings naming its user, its groups or its ServiceAccount; the visiting order (bindings by
name, ClusterRoleBindings first) and so the reasons are the same as a full scan. The index
is kept current from the store (:mod:`kubesvc.apiserver.auth.storefeed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping

from kubesvc.apiserver.auth.attributes import Attributes
from kubesvc.apiserver.auth.authorizer import Decision, RuleSet, Verdict
from kubesvc.apiserver.auth.rules import PolicyRule, rule_allows, rules_from_api
from kubesvc.serving.user import SERVICE_ACCOUNT_PREFIX, UserInfo
from kubesvc.util import golang

RBAC_GROUP = "rbac.authorization.k8s.io"


# ---- subjects and bindings ----------------------------------------------------------------


@dataclass(frozen=True)
class Subject:
    kind: str
    name: str
    namespace: str = ""

    @classmethod
    def from_api(cls, subject) -> "Subject":
        if not isinstance(subject, Mapping):
            return cls("", "")
        return cls(str(subject.get("kind") or ""), str(subject.get("name") or ""), str(subject.get("namespace") or ""))

    def describe(self, binding_namespace: str) -> str:
        """Upstream ``describeSubject``."""
        if self.kind == "ServiceAccount":
            return f'{self.kind} "{self.name}/{self.namespace or binding_namespace}"'
        return f'{self.kind} "{self.name}"'

    def index_key(self, binding_namespace: str) -> tuple[str, str] | None:
        """What a user must have for this subject to match: ("User", name), ("Group", g), or
        ("User", the ServiceAccount's username); None when it can never match."""
        if self.kind == "User":
            return ("User", self.name)
        if self.kind == "Group":
            return ("Group", self.name)
        if self.kind == "ServiceAccount":
            namespace = self.namespace or binding_namespace
            return ("User", f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{self.name}") if namespace else None
        return None


def applies_to_user(user: UserInfo, subject: Subject, namespace: str) -> bool:
    """Upstream ``appliesToUser``; ``namespace`` is the binding's ("" for a ClusterRoleBinding)."""
    if subject.kind == "User":
        return user.name == subject.name
    if subject.kind == "Group":
        return subject.name in user.groups
    if subject.kind == "ServiceAccount":
        sa_namespace = subject.namespace or namespace
        return bool(sa_namespace) and user.name == f"{SERVICE_ACCOUNT_PREFIX}{sa_namespace}:{subject.name}"
    return False


def first_applying_subject(user: UserInfo, subjects: Iterable[Subject], namespace: str) -> Subject | None:
    for subject in subjects:
        if applies_to_user(user, subject, namespace):
            return subject
    return None


@dataclass(frozen=True)
class Binding:
    """A RoleBinding (namespace set) or ClusterRoleBinding (namespace "")."""

    name: str
    namespace: str
    role_kind: str
    role_name: str
    subjects: tuple[Subject, ...]

    @classmethod
    def from_api(cls, obj: Mapping) -> "Binding":
        meta = obj.get("metadata") or {}
        ref = obj.get("roleRef") if isinstance(obj.get("roleRef"), Mapping) else {}
        subjects = obj.get("subjects") if isinstance(obj.get("subjects"), list) else []
        return cls(str(meta.get("name") or ""), str(meta.get("namespace") or ""), str(ref.get("kind") or ""),
                   str(ref.get("name") or ""), tuple(Subject.from_api(s) for s in subjects))

    def describe(self, subject: Subject) -> str:
        """Upstream clusterRoleBindingDescriber / roleBindingDescriber."""
        if self.namespace:
            return f'RoleBinding "{self.name}/{self.namespace}" of {self.role_kind} "{self.role_name}" to {subject.describe(self.namespace)}'
        return f'ClusterRoleBinding "{self.name}" of {self.role_kind} "{self.role_name}" to {subject.describe("")}'


# ---- the index ----------------------------------------------------------------------------


Visitor = Callable[[Binding, Subject, PolicyRule], bool]


class PolicyIndex:
    """Roles, ClusterRoles and their bindings, the bindings indexed by subject.

    ``set_*`` / ``delete_*`` keep it current (the store feed calls them on every write).
    Lookups are read-only and never fail: a binding whose role is missing is reported as a
    resolution error, as upstream's rule resolver does."""

    def __init__(self) -> None:
        self.roles: dict[tuple[str, str], tuple[PolicyRule, ...]] = {}
        self.cluster_roles: dict[str, tuple[PolicyRule, ...]] = {}
        self.role_bindings: dict[tuple[str, str], Binding] = {}
        self.cluster_role_bindings: dict[str, Binding] = {}
        # subject key -> names of ClusterRoleBindings; (namespace, subject key) -> RoleBinding names
        self._cluster_by_subject: dict[tuple[str, str], set[str]] = {}
        self._namespaced_by_subject: dict[tuple[str, tuple[str, str]], set[str]] = {}

    # ---- writes ------------------------------------------------------------------------
    def set_role(self, namespace: str, name: str, rules: tuple[PolicyRule, ...]) -> None:
        self.roles[(namespace, name)] = rules

    def delete_role(self, namespace: str, name: str) -> None:
        self.roles.pop((namespace, name), None)

    def set_cluster_role(self, name: str, rules: tuple[PolicyRule, ...]) -> None:
        self.cluster_roles[name] = rules

    def delete_cluster_role(self, name: str) -> None:
        self.cluster_roles.pop(name, None)

    def set_binding(self, binding: Binding) -> None:
        self.delete_binding(binding.namespace, binding.name)
        if binding.namespace:
            self.role_bindings[(binding.namespace, binding.name)] = binding
        else:
            self.cluster_role_bindings[binding.name] = binding
        for key in self._keys(binding):
            if binding.namespace:
                self._namespaced_by_subject.setdefault((binding.namespace, key), set()).add(binding.name)
            else:
                self._cluster_by_subject.setdefault(key, set()).add(binding.name)

    def delete_binding(self, namespace: str, name: str) -> None:
        old = self.role_bindings.pop((namespace, name), None) if namespace else self.cluster_role_bindings.pop(name, None)
        if old is None:
            return
        for key in self._keys(old):
            index = self._namespaced_by_subject if namespace else self._cluster_by_subject
            full_key = (namespace, key) if namespace else key
            names = index.get(full_key)
            if names is not None:
                names.discard(name)
                if not names:
                    del index[full_key]

    def apply(self, kind: str, namespace: str, name: str, obj: dict | None) -> None:
        """One stored change of an RBAC object (``obj`` None: deleted)."""
        if kind == "Role":
            self.set_role(namespace, name, rules_from_api(obj.get("rules"))) if obj is not None else self.delete_role(namespace, name)
        elif kind == "ClusterRole":
            self.set_cluster_role(name, rules_from_api(obj.get("rules"))) if obj is not None else self.delete_cluster_role(name)
        elif kind in ("RoleBinding", "ClusterRoleBinding"):
            namespace = namespace if kind == "RoleBinding" else ""
            if obj is None:
                self.delete_binding(namespace, name)
            else:
                self.set_binding(Binding.from_api({**obj, "metadata": {"name": name, "namespace": namespace}}))

    @staticmethod
    def _keys(binding: Binding) -> set[tuple[str, str]]:
        return {k for k in (s.index_key(binding.namespace) for s in binding.subjects) if k is not None}

    # ---- reads -------------------------------------------------------------------------
    @staticmethod
    def _user_keys(user: UserInfo) -> list[tuple[str, str]]:
        return [("User", user.name), *(("Group", g) for g in user.groups)]

    def bindings_for(self, user: UserInfo, namespace: str) -> Iterator[Binding]:
        """Upstream's visiting order restricted to bindings that may name the user:
        ClusterRoleBindings by name, then the namespace's RoleBindings by name."""
        keys = self._user_keys(user)
        names: set[str] = set()
        for key in keys:
            names |= self._cluster_by_subject.get(key, set())
        for name in sorted(names):
            yield self.cluster_role_bindings[name]
        if namespace:
            names = set()
            for key in keys:
                names |= self._namespaced_by_subject.get((namespace, key), set())
            for name in sorted(names):
                yield self.role_bindings[(namespace, name)]

    def role_reference_rules(self, binding: Binding) -> tuple[PolicyRule, ...]:
        """Upstream ``GetRoleReferenceRules`` against the listers; KeyError carries the text."""
        if binding.role_kind == "ClusterRole":
            rules = self.cluster_roles.get(binding.role_name)
            if rules is None:
                raise LookupError(f'clusterrole.{RBAC_GROUP} "{binding.role_name}" not found')
            return rules
        if binding.role_kind == "Role":
            rules = self.roles.get((binding.namespace, binding.role_name))
            if rules is None:
                raise LookupError(f'role.{RBAC_GROUP} "{binding.role_name}" not found')
            return rules
        raise LookupError(f'unsupported role reference kind: "{binding.role_kind}"')

    def visit_rules_for(self, user: UserInfo, namespace: str, visitor: Visitor) -> list[str]:
        """Upstream ``VisitRulesFor``: ``visitor(binding, subject, rule)`` for each rule of each
        binding naming the user until it returns False; returns the resolution errors."""
        errors: list[str] = []
        for binding in self.bindings_for(user, namespace):
            subject = first_applying_subject(user, binding.subjects, binding.namespace)
            if subject is None:
                continue
            try:
                rules = self.role_reference_rules(binding)
            except LookupError as exc:
                errors.append(str(exc))
                continue
            for rule in rules:
                if not visitor(binding, subject, rule):
                    return errors
        return errors

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[PolicyRule], list[str]]:
        """Every rule the user holds in ``namespace`` (cluster-wide ones included), unmerged."""
        rules: list[PolicyRule] = []

        def collect(binding: Binding, subject: Subject, rule: PolicyRule) -> bool:
            rules.append(rule)
            return True

        errors = self.visit_rules_for(user, namespace, collect)
        return rules, errors


class RBACAuthorizer:
    """``--authorization-mode=RBAC``."""

    def __init__(self, index: PolicyIndex):
        self.index = index

    def authorize(self, attrs: Attributes) -> Verdict:
        allowed_by: list[str] = []

        def check(binding: Binding, subject: Subject, rule: PolicyRule) -> bool:
            if rule_allows(attrs.info, rule):
                allowed_by.append(binding.describe(subject))
                return False
            return True

        errors = self.index.visit_rules_for(attrs.user, attrs.info.namespace, check)
        if allowed_by:
            return Verdict(Decision.ALLOW, f"RBAC: allowed by {allowed_by[0]}")
        return Verdict(Decision.NO_OPINION, f"RBAC: {golang.aggregate(errors)}" if errors else "")

    def rules_for(self, user: UserInfo, namespace: str) -> RuleSet:
        """Upstream ``RBACAuthorizer.RulesFor``: a rule with resources is a resource rule, one
        with nonResourceURLs a non-resource rule (a rule with both is both)."""
        rules, errors = self.index.rules_for(user, namespace)
        return RuleSet([r for r in rules if r.resources], [r for r in rules if r.non_resource_urls], False, errors)

