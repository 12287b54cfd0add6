"""rbac.authorization.k8s.io/v1: who may do what, as data the RBAC authorizer reads.

A **Role** (namespaced) or **ClusterRole** (cluster-wide) is a list of ``rules``; each
``PolicyRule`` allows ``verbs`` on ``resources`` (and optionally only the ``resourceNames``) of
the listed ``apiGroups`` (``""`` is the core group, ``*`` any), or, in a ClusterRole only, on
``nonResourceURLs`` such as ``/healthz`` (a trailing ``*`` matches a prefix). Rules only
allow: there is no deny.

A **RoleBinding** grants the rules of one role (``roleRef``: a Role of its own namespace or a
ClusterRole, then limited to that namespace) to ``subjects``; a **ClusterRoleBinding** grants a
ClusterRole everywhere. A subject is a ``User`` or ``Group`` (``apiGroup``
``rbac.authorization.k8s.io``) or a ``ServiceAccount`` (core group, with its ``namespace``).
``roleRef`` is immutable: to point a binding elsewhere, delete and recreate it, which is why
``bind`` on the new role is checked then (escalation prevention, in the authorizer).

A ClusterRole with an ``aggregationRule`` has its ``rules`` filled by the clusterrole
aggregation controller: the union of the rules of every ClusterRole matching one of
``clusterRoleSelectors`` (``admin``/``edit``/``view`` are built this way).

Field names and markers follow k8s.io/api ``rbac/v1/types.go``: every list is atomic for
server-side apply, ``Subject`` and ``RoleRef`` are atomic structs, and ``rules`` and
``roleRef.apiGroup`` have no ``omitempty`` (Go prints them even when empty).
"""

from __future__ import annotations

from kubesvc.api.kinds.meta import LABEL_SELECTOR, kind_schema
from kubesvc.api.scheme import KindInfo, register
from kubesvc.api.schema import STRING, F, ListOf, Obj

RBAC = "io.k8s.api.rbac.v1."
GROUP = "rbac.authorization.k8s.io"

POLICY_RULE = Obj(
    RBAC + "PolicyRule",
    {
        "verbs": F(ListOf(STRING), "Verbs is a list of Verbs that apply to ALL the ResourceKinds contained in this "
                                   "rule. '*' represents all verbs."),
        "apiGroups": F(ListOf(STRING), 'APIGroups is the name of the APIGroup that contains the resources.  If '
                                       'multiple API groups are specified, any action requested against one of the '
                                       'enumerated resources in any API group will be allowed. "" represents the core '
                                       'API group and "*" represents all API groups.'),
        "resources": F(ListOf(STRING), "Resources is a list of resources this rule applies to. '*' represents all "
                                       "resources."),
        "resourceNames": F(ListOf(STRING), "ResourceNames is an optional white list of names that the rule applies "
                                           "to.  An empty set means that everything is allowed."),
        "nonResourceURLs": F(ListOf(STRING), 'NonResourceURLs is a set of partial urls that a user should have access '
                                             'to.  *s are allowed, but only as the full, final step in the path Since '
                                             'non-resource URLs are not namespaced, this field is only applicable for '
                                             'ClusterRoles referenced from a ClusterRoleBinding. Rules can either apply '
                                             'to API resources (such as "pods" or "secrets") or non-resource URL paths '
                                             '(such as "/api"),  but not both.'),
    },
    description="PolicyRule holds information that describes a policy rule, but does not contain information about "
                "who the rule applies to or which namespace the rule applies to.",
    required=("verbs",),
)

SUBJECT = Obj(
    RBAC + "Subject",
    {
        "kind": F(STRING, 'Kind of object being referenced. Values defined by this API group are "User", "Group", and '
                          '"ServiceAccount". If the Authorizer does not recognized the kind value, the Authorizer '
                          'should report an error.'),
        "apiGroup": F(STRING, 'APIGroup holds the API group of the referenced subject. Defaults to "" for '
                              'ServiceAccount subjects. Defaults to "rbac.authorization.k8s.io" for User and Group '
                              'subjects.'),
        "name": F(STRING, "Name of the object being referenced."),
        "namespace": F(STRING, 'Namespace of the referenced object.  If the object kind is non-namespace, such as '
                               '"User" or "Group", and this value is not empty the Authorizer should report an error.'),
    },
    description="Subject contains a reference to the object or user identities a role binding applies to.  This can "
                "either hold a direct API object reference, or a value for non-objects such as user and group names.",
    required=("kind", "name"),
    map_type="atomic",
)

ROLE_REF = Obj(
    RBAC + "RoleRef",
    {
        "apiGroup": F(STRING, "APIGroup is the group for the resource being referenced"),
        "kind": F(STRING, "Kind is the type of resource being referenced"),
        "name": F(STRING, "Name is the name of resource being referenced"),
    },
    description="RoleRef contains information that points to the role being used",
    required=("apiGroup", "kind", "name"),
    map_type="atomic",
)

AGGREGATION_RULE = Obj(
    RBAC + "AggregationRule",
    {
        "clusterRoleSelectors": F(ListOf(LABEL_SELECTOR),
                                  "ClusterRoleSelectors holds a list of selectors which will be used to find "
                                  "ClusterRoles and create the rules. If any of the selectors match, then the "
                                  "ClusterRole's permissions will be added"),
    },
    description="AggregationRule describes how to locate ClusterRoles to aggregate into the ClusterRole",
)

_METADATA = "Standard object's metadata."

ROLE = kind_schema(
    RBAC + "Role", (GROUP, "v1", "Role"),
    "Role is a namespaced, logical grouping of PolicyRules that can be referenced as a unit by a RoleBinding.",
    {"rules": F(ListOf(POLICY_RULE), "Rules holds all the PolicyRules for this Role")},
)

CLUSTER_ROLE = kind_schema(
    RBAC + "ClusterRole", (GROUP, "v1", "ClusterRole"),
    "ClusterRole is a cluster level, logical grouping of PolicyRules that can be referenced as a unit by a "
    "RoleBinding or ClusterRoleBinding.",
    {
        "rules": F(ListOf(POLICY_RULE), "Rules holds all the PolicyRules for this ClusterRole"),
        "aggregationRule": F(AGGREGATION_RULE, "AggregationRule is an optional field that describes how to build the "
                                               "Rules for this ClusterRole. If AggregationRule is set, then the Rules "
                                               "are controller managed and direct changes to Rules will be stomped by "
                                               "the controller."),
    },
)

ROLE_BINDING = kind_schema(
    RBAC + "RoleBinding", (GROUP, "v1", "RoleBinding"),
    "RoleBinding references a role, but does not contain it.  It can reference a Role in the same namespace or a "
    "ClusterRole in the global namespace. It adds who information via Subjects and namespace information by which "
    "namespace it exists in.  RoleBindings in a given namespace only have effect in that namespace.",
    {
        "subjects": F(ListOf(SUBJECT), "Subjects holds references to the objects the role applies to."),
        "roleRef": F(ROLE_REF, "RoleRef can reference a Role in the current namespace or a ClusterRole in the global "
                               "namespace. If the RoleRef cannot be resolved, the Authorizer must return an error. This "
                               "field is immutable."),
    },
    required=("roleRef",),
)

CLUSTER_ROLE_BINDING = kind_schema(
    RBAC + "ClusterRoleBinding", (GROUP, "v1", "ClusterRoleBinding"),
    "ClusterRoleBinding references a ClusterRole, but not contain it.  It can reference a ClusterRole in the global "
    "namespace, and adds who information via Subject.",
    {
        "subjects": F(ListOf(SUBJECT), "Subjects holds references to the objects the role applies to."),
        "roleRef": F(ROLE_REF, "RoleRef can only reference a ClusterRole in the global namespace. If the RoleRef cannot "
                               "be resolved, the Authorizer must return an error. This field is immutable."),
    },
    required=("roleRef",),
)

# Upstream serves these with no short names and no categories (kubectl's "all" leaves them out).
register(KindInfo(GROUP, "v1", "ClusterRoleBinding", "clusterrolebindings", "clusterrolebinding", namespaced=False,
                  schema=CLUSTER_ROLE_BINDING))
register(KindInfo(GROUP, "v1", "ClusterRole", "clusterroles", "clusterrole", namespaced=False, schema=CLUSTER_ROLE))
register(KindInfo(GROUP, "v1", "RoleBinding", "rolebindings", "rolebinding", namespaced=True, schema=ROLE_BINDING))
register(KindInfo(GROUP, "v1", "Role", "roles", "role", namespaced=True, schema=ROLE))
