"""RBAC policy rules and how they match a request (upstream pkg/apis/rbac/v1
``evaluation_helpers.go`` ``RuleAllows`` and friends; identity.md §2.2).

* A resource request needs the verb (or ``*``), the API group (or ``*``; core is ``""``),
  the resource as ``resource`` or ``resource/subresource`` (or ``*``, or ``*/subresource``
  for any resource's subresource; ``pods`` does not match ``pods/log`` and, as upstream,
  ``pods/*`` is no wildcard), and, when the rule lists ``resourceNames``, the request's
  name among them (a create or a list has no name, so it never matches such a rule).
* A non-resource request needs the verb and the path: ``*``, the exact path, or an entry
  ending in ``*`` whose prefix (trailing ``*`` removed) starts the path; apiGroups and
  resources play no part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from kubesvc.util.golang import quote_strings as go_string_list
from kubesvc.apiserver.auth.attributes import RequestInfo

ALL = "*"


def strings(value) -> tuple[str, ...]:
    """The strings of a JSON list (anything else: none)."""
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, str))


@dataclass(frozen=True)
class PolicyRule:
    """One rbac/v1 PolicyRule; the tuples keep the object's order (rules reviews print them)."""

    verbs: tuple[str, ...] = ()
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    @classmethod
    def from_api(cls, rule: Mapping) -> "PolicyRule":
        if not isinstance(rule, Mapping):
            return cls()
        return cls(strings(rule.get("verbs")), strings(rule.get("apiGroups")), strings(rule.get("resources")),
                   strings(rule.get("resourceNames")), strings(rule.get("nonResourceURLs")))

    def to_api(self) -> dict:
        out: dict = {"verbs": list(self.verbs)}
        if self.api_groups:
            out["apiGroups"] = list(self.api_groups)
        if self.resources:
            out["resources"] = list(self.resources)
        if self.resource_names:
            out["resourceNames"] = list(self.resource_names)
        if self.non_resource_urls:
            out["nonResourceURLs"] = list(self.non_resource_urls)
        return out


def rules_from_api(rules) -> tuple[PolicyRule, ...]:
    return tuple(PolicyRule.from_api(r) for r in rules) if isinstance(rules, list) else ()


def verb_matches(rule: PolicyRule, verb: str) -> bool:
    return ALL in rule.verbs or verb in rule.verbs


def api_group_matches(rule: PolicyRule, group: str) -> bool:
    return ALL in rule.api_groups or group in rule.api_groups


def resource_matches(rule: PolicyRule, combined: str, subresource: str) -> bool:
    for resource in rule.resources:
        if resource == ALL or resource == combined:
            return True
        if subresource and len(resource) == len(subresource) + 2 and resource.startswith("*/") and resource.endswith(subresource):
            return True
    return False


def resource_name_matches(rule: PolicyRule, name: str) -> bool:
    return not rule.resource_names or name in rule.resource_names


def non_resource_url_matches(rule: PolicyRule, path: str) -> bool:
    for url in rule.non_resource_urls:
        if url == ALL or url == path:
            return True
        if url.endswith("*") and path.startswith(url.rstrip("*")):
            return True
    return False


def rule_allows(info: RequestInfo, rule: PolicyRule) -> bool:
    """Upstream ``RuleAllows``."""
    if info.is_resource_request:
        combined = f"{info.resource}/{info.subresource}" if info.subresource else info.resource
        return (verb_matches(rule, info.verb) and api_group_matches(rule, info.api_group)
                and resource_matches(rule, combined, info.subresource) and resource_name_matches(rule, info.name))
    return verb_matches(rule, info.verb) and non_resource_url_matches(rule, info.path)


def rules_allow(info: RequestInfo, rules: Iterable[PolicyRule]) -> bool:
    return any(rule_allows(info, rule) for rule in rules)


# ---- covering: does one set of rules hold every permission of another (escalation checks) ----


def breakdown_rule(rule: PolicyRule) -> list[PolicyRule]:
    """Upstream ``BreakdownRule``: one rule per (group, resource, verb[, name]) and (URL, verb)."""
    out: list[PolicyRule] = []
    for group in rule.api_groups:
        for resource in rule.resources:
            for verb in rule.verbs:
                if rule.resource_names:
                    out.extend(PolicyRule((verb,), (group,), (resource,), (name,)) for name in rule.resource_names)
                else:
                    out.append(PolicyRule((verb,), (group,), (resource,)))
    for url in rule.non_resource_urls:
        out.extend(PolicyRule((verb,), non_resource_urls=(url,)) for verb in rule.verbs)
    return out


def _resources_cover(owner: tuple[str, ...], wanted: tuple[str, ...]) -> bool:
    if ALL in owner or set(wanted) <= set(owner):
        return True
    for path in wanted:
        if path in owner:
            continue
        if "/" not in path or "*/" + path.split("/", 1)[1] not in owner:
            return False
    return True


def _url_covers(owner: str, path: str) -> bool:
    return owner == path or (owner.endswith("*") and path.startswith(owner.rstrip("*")))


def rule_covers(owner: PolicyRule, sub: PolicyRule) -> bool:
    """Upstream ``ruleCovers`` (component-helpers auth/rbac/validation policy_comparator.go)."""
    if not (ALL in owner.verbs or set(sub.verbs) <= set(owner.verbs)):
        return False
    if not (ALL in owner.api_groups or set(sub.api_groups) <= set(owner.api_groups)):
        return False
    if not _resources_cover(owner.resources, sub.resources):
        return False
    if not all(any(_url_covers(o, p) for o in owner.non_resource_urls) for p in sub.non_resource_urls):
        return False
    if not sub.resource_names:
        return not owner.resource_names
    return not owner.resource_names or set(sub.resource_names) <= set(owner.resource_names)


def covers(owner_rules: Iterable[PolicyRule], servant_rules: Iterable[PolicyRule]) -> tuple[bool, list[PolicyRule]]:
    """Upstream ``Covers``: (whether every atom of ``servant_rules`` is held by one owner rule,
    the atoms that are not)."""
    owners = list(owner_rules)
    missing = [sub for rule in servant_rules for sub in breakdown_rule(rule) if not any(rule_covers(o, sub) for o in owners)]
    return not missing, missing


def compact_rules(rules: Iterable[PolicyRule]) -> list[PolicyRule]:
    """Upstream ``CompactRules``: rules naming one group, one resource and at most one name
    are merged by (group, resource, name), their verbs in first-seen order; others stay."""
    compacted: list[PolicyRule] = []
    simple: dict[tuple[str, str, bool, str], list[str]] = {}
    names: dict[tuple[str, str, bool, str], tuple[str, ...]] = {}
    for rule in rules:
        if len(rule.resource_names) > 1 or rule.non_resource_urls or len(rule.api_groups) != 1 or len(rule.resources) != 1:
            compacted.append(rule)
            continue
        key = (rule.api_groups[0], rule.resources[0], bool(rule.resource_names), rule.resource_names[0] if rule.resource_names else "")
        verbs = simple.setdefault(key, [])
        names[key] = rule.resource_names
        verbs.extend(v for v in rule.verbs if v not in verbs)
    for key, verbs in simple.items():
        compacted.append(PolicyRule(tuple(verbs), (key[0],), (key[1],), names[key]))
    return compacted


def compact_string(rule: PolicyRule) -> str:
    """Upstream ``CompactString``: ``{APIGroups:["" "apps"], Resources:["pods"], Verbs:["get"]}``,
    only the non-empty fields."""
    parts = []
    for label, values in (("APIGroups", rule.api_groups), ("Resources", rule.resources), ("NonResourceURLs", rule.non_resource_urls),
                          ("ResourceNames", rule.resource_names), ("Verbs", rule.verbs)):
        if values:
            parts.append(f"{label}:{go_string_list(values)}")
    return "{" + ", ".join(parts) + "}"
