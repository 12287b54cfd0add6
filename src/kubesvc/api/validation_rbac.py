"""Validation of rbac.authorization.k8s.io/v1 objects, as ``pkg/apis/rbac/validation/validation.go``.

Names of roles and bindings only need to be valid path segments (``ValidateRBACName``: no
``/``, no ``%``, not ``.`` or ``..``), so ``system:node`` is a fine name. Then:

* **PolicyRule** (``ValidatePolicyRule``): ``verbs`` is required; a rule is either about
  ``nonResourceURLs`` (only in a ClusterRole, and then with no apiGroups, resources or
  resourceNames) or about resources (``apiGroups`` and ``resources`` both required).
* **ClusterRole** ``aggregationRule``: at least one selector, each a valid LabelSelector.
* **Bindings**: ``roleRef.apiGroup`` must be ``rbac.authorization.k8s.io`` (defaulting fills
  it), ``roleRef.kind`` is ``Role`` or ``ClusterRole`` (only ``ClusterRole`` in a
  ClusterRoleBinding), ``roleRef.name`` is required, and ``roleRef`` never changes on update
  (``cannot change roleRef``). Subjects: a ``ServiceAccount`` has a DNS-subdomain name, an
  empty apiGroup and, in a ClusterRoleBinding, a namespace; ``User`` and ``Group`` have apiGroup
  ``rbac.authorization.k8s.io``; no other kind.

Bad values that Go prints with ``%#v`` (the RoleRef struct, a ``[]string``) are spelled as Go
does, since clients see them in the 422 message.
"""

from __future__ import annotations

from typing import Any

from kubesvc.api.errors import GoSyntax, StatusError, forbidden_field, invalid_value, not_supported, required
from kubesvc.api.validation_meta import (
    GO_NIL,
    Errs,
    child,
    each_invalid,
    elements,
    index,
    is_valid_label_value,
    name_is_dns_subdomain,
    path_segment_name,
    read,
    read_list,
    read_map,
    read_str,
    read_str_list,
    read_str_map,
    validate_labels,
    validate_object_meta,
    validate_object_meta_update,
    validate_qualified_name,
)
from kubesvc.api.selectors import selector_from_label_selector
from kubesvc.util import golang
from kubesvc.util.golang import quote as go_quote

GROUP = "rbac.authorization.k8s.io"
SUBJECT_KINDS = ["ServiceAccount", "User", "Group"]


def go_string_slice(values: list[str]) -> GoSyntax:
    """``[]string{"a", "b"}``: a string list as Go's %#v prints it."""
    return GoSyntax(golang.go_syntax_strings(values))


def go_role_ref(ref: dict) -> GoSyntax:
    """``rbac.RoleRef{APIGroup:"...", Kind:"...", Name:"..."}``: the internal type's %#v."""
    fields = ", ".join(f"{go_name}:{go_quote(str(ref.get(name) or ''))}"
                       for go_name, name in (("APIGroup", "apiGroup"), ("Kind", "kind"), ("Name", "name")))
    return GoSyntax(f"rbac.RoleRef{{{fields}}}")


# ---- roles ---------------------------------------------------------------------------------------


def validate_policy_rule(errs: Errs, rule: dict, namespaced: bool, path: str) -> Errs:
    """ValidatePolicyRule (exported upstream so other kinds embedding a PolicyRule reuse it)."""
    out: Errs = []
    verbs = read_str_list(errs, rule, "verbs", path)
    api_groups = read_str_list(errs, rule, "apiGroups", path)
    resources = read_str_list(errs, rule, "resources", path)
    resource_names = read_str_list(errs, rule, "resourceNames", path)
    urls = read_str_list(errs, rule, "nonResourceURLs", path)
    if not verbs:
        out.append(required(child(path, "verbs"), "verbs must contain at least one value"))
    if urls:
        if namespaced:
            out.append(invalid_value(child(path, "nonResourceURLs"), go_string_slice(urls),
                                     "namespaced rules cannot apply to non-resource URLs"))
        if api_groups or resources or resource_names:
            out.append(invalid_value(child(path, "nonResourceURLs"), go_string_slice(urls),
                                     "rules cannot apply to both regular resources and non-resource URLs"))
        return out
    if not api_groups:
        out.append(required(child(path, "apiGroups"), "resource rules must supply at least one api group"))
    if not resources:
        out.append(required(child(path, "resources"), "resource rules must supply at least one resource"))
    return out


def _rules(errs: Errs, obj: Any, namespaced: bool) -> Errs:
    out: Errs = []
    for i, rule in elements(errs, read_list(errs, obj, "rules", ""), "rules", dict):
        out += validate_policy_rule(errs, rule, namespaced, index("rules", i))
    return out


def validate_role(obj: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta(obj, namespaced=True, name_fn=path_segment_name)
    return errs + _rules(errs, obj, True)


def validate_role_update(new: Any, old: Any, namespaced: bool) -> Errs:
    return validate_role(new, namespaced) + validate_object_meta_update(new, old)


def validate_label_selector(errs: Errs, selector: dict, path: str) -> Errs:
    """metav1 validation.ValidateLabelSelector (label values must be valid)."""
    out = validate_labels(read_str_map(errs, selector, "matchLabels", path), child(path, "matchLabels"))
    expressions_path = child(path, "matchExpressions")
    for i, expression in elements(errs, read_list(errs, selector, "matchExpressions", path), expressions_path, dict):
        here = index(expressions_path, i)
        operator = read_str(errs, expression, "operator", here)
        values = read_str_list(errs, expression, "values", here)
        if operator in ("In", "NotIn"):
            if not values:
                out.append(required(child(here, "values"), "must be specified when `operator` is 'In' or 'NotIn'"))
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                out.append(forbidden_field(child(here, "values"),
                                           "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
        else:
            out.append(invalid_value(child(here, "operator"), operator, "not a valid selector operator"))
        out += validate_qualified_name(read_str(errs, expression, "key", here), child(here, "key"))
        for j, value in enumerate(values):
            out += each_invalid(index(child(here, "values"), j), value, is_valid_label_value(value))
    return out


def _aggregation_rule(errs: Errs, obj: Any) -> Errs:
    rule = read(errs, obj, "aggregationRule", "", dict)
    if rule is None:
        return []
    path = "aggregationRule.clusterRoleSelectors"
    selectors = read_list(errs, rule, "clusterRoleSelectors", "aggregationRule")
    out: Errs = []
    if not selectors:
        out.append(required(path, "at least one clusterRoleSelector required if aggregationRule is non-nil"))
    for i, selector in elements(errs, selectors, path, dict):
        out += validate_label_selector(errs, selector, index(path, i))
        try:
            selector_from_label_selector(selector)
        except StatusError:
            out.append(invalid_value(index(path, i), GO_NIL, "invalid label selector."))
    return out


def validate_cluster_role(obj: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta(obj, namespaced=False, name_fn=path_segment_name)
    return errs + _rules(errs, obj, False) + _aggregation_rule(errs, obj)


def validate_cluster_role_update(new: Any, old: Any, namespaced: bool) -> Errs:
    return validate_cluster_role(new, namespaced) + validate_object_meta_update(new, old)


# ---- bindings ------------------------------------------------------------------------------------


def _role_ref(errs: Errs, obj: Any, kinds: list[str]) -> Errs:
    ref = read_map(errs, obj, "roleRef", "")
    out: Errs = []
    api_group = read_str(errs, ref, "apiGroup", "roleRef")
    if api_group != GROUP:
        out.append(not_supported("roleRef.apiGroup", api_group, [GROUP]))
    kind = read_str(errs, ref, "kind", "roleRef")
    if kind not in kinds:
        out.append(not_supported("roleRef.kind", kind, kinds))
    name = read_str(errs, ref, "name", "roleRef")
    if not name:
        out.append(required("roleRef.name"))
    else:
        out += each_invalid("roleRef.name", name, path_segment_name(name, False))
    return out


def validate_subject(errs: Errs, subject: dict, namespaced: bool, path: str) -> Errs:
    """ValidateRoleBindingSubject (exported upstream for reuse)."""
    out: Errs = []
    name = read_str(errs, subject, "name", path)
    api_group = read_str(errs, subject, "apiGroup", path)
    if not name:
        out.append(required(child(path, "name")))
    kind = read_str(errs, subject, "kind", path)
    if kind == "ServiceAccount":
        if name:
            out += each_invalid(child(path, "name"), name, name_is_dns_subdomain(name, False))
        if api_group:
            out.append(not_supported(child(path, "apiGroup"), api_group, [""]))
        if not namespaced and not read_str(errs, subject, "namespace", path):
            out.append(required(child(path, "namespace")))
    elif kind in ("User", "Group"):
        if api_group != GROUP:
            out.append(not_supported(child(path, "apiGroup"), api_group, [GROUP]))
    else:
        out.append(not_supported(child(path, "kind"), kind, SUBJECT_KINDS))
    return out


def _binding(obj: Any, namespaced: bool, kinds: list[str]) -> Errs:
    errs = validate_object_meta(obj, namespaced=namespaced, name_fn=path_segment_name)
    out = _role_ref(errs, obj, kinds)
    for i, subject in elements(errs, read_list(errs, obj, "subjects", ""), "subjects", dict):
        out += validate_subject(errs, subject, namespaced, index("subjects", i))
    return errs + out


def _role_ref_unchanged(new: Any, old: Any) -> Errs:
    new_ref, old_ref = read_map([], new, "roleRef", ""), read_map([], old, "roleRef", "")
    fields = ("apiGroup", "kind", "name")
    if all((new_ref.get(f) or "") == (old_ref.get(f) or "") for f in fields):
        return []
    return [invalid_value("roleRef", go_role_ref(new_ref), "cannot change roleRef")]


def validate_role_binding(obj: Any, namespaced: bool) -> Errs:
    return _binding(obj, True, ["Role", "ClusterRole"])


def validate_role_binding_update(new: Any, old: Any, namespaced: bool) -> Errs:
    return validate_role_binding(new, namespaced) + validate_object_meta_update(new, old) + _role_ref_unchanged(new, old)


def validate_cluster_role_binding(obj: Any, namespaced: bool) -> Errs:
    return _binding(obj, False, ["ClusterRole"])


def validate_cluster_role_binding_update(new: Any, old: Any, namespaced: bool) -> Errs:
    return (validate_cluster_role_binding(new, namespaced) + validate_object_meta_update(new, old)
            + _role_ref_unchanged(new, old))
