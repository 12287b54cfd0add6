"""authorization.k8s.io/v1: asking the server's authorizer a question, never stored.

Each kind is a question POSTed to the server and answered in the same object's ``status``
(201 Created; nothing is persisted, there is no GET, LIST, WATCH or DELETE):

* **SubjectAccessReview** "may *this user* (``spec.user``/``groups``/``uid``/``extra``) do
  this?", where *this* is either ``resourceAttributes`` (namespace, verb, group, version,
  resource, subresource, name, optional field/label selectors) or ``nonResourceAttributes``
  (path, verb). Used by components that authorize callers through the apiserver (a kubelet
  checking who may read logs).
* **LocalSubjectAccessReview**: the same, namespaced: the URL's namespace must be the one asked
  about, so a namespace ``admin`` can be allowed to ask it.
* **SelfSubjectAccessReview**: "may *I* ...?" (``kubectl auth can-i``).
* **SelfSubjectRulesReview**: "what may I do in ``spec.namespace``?" (``kubectl auth can-i
  --list``), answered with resource and non-resource rules and whether the list is complete.

``status.allowed`` is always serialised (no ``omitempty`` upstream); ``denied`` is true only on
an explicit deny. Field names follow k8s.io/api ``authorization/v1/types.go``.
"""

from __future__ import annotations

from kubesvc.api.kinds.meta import LABEL_SELECTOR_REQUIREMENT, META, kind_schema
from kubesvc.api.scheme import KindInfo, register
from kubesvc.api.schema import BOOL, STRING, F, ListOf, MapOf, Obj

AUTHZ = "io.k8s.api.authorization.v1."
GROUP = "authorization.k8s.io"

_SELECTOR_NOTE = (
    "Webhook authors are encouraged to * ensure rawSelector and requirements are not both set * consider the "
    "requirements field if set * not try to parse or consider the rawSelector field if set. This is to avoid another "
    "CVE-2022-2880 (i.e. getting different systems to agree on how exactly to parse a query is not something we "
    "want), see https://www.oxeye.io/resources/golang-parameter-smuggling-attack for more details. For the "
    "*SubjectAccessReview endpoints of the kube-apiserver: * If rawSelector is empty and requirements are empty, the "
    "request is not limited. * If rawSelector is present and requirements are empty, the rawSelector will be parsed "
    "and limited if the parsing succeeds. * If rawSelector is empty and requirements are present, the requirements "
    "should be honored * If rawSelector is present and requirements are present, the request is invalid."
)
_RAW_SELECTOR = ("rawSelector is the serialization of a field selector that would be included in a query parameter. "
                 "Webhook implementations are encouraged to ignore rawSelector. The kube-apiserver's "
                 "*SubjectAccessReview will parse the rawSelector as long as the requirements are not present.")

FIELD_SELECTOR_REQUIREMENT = Obj(
    META + "FieldSelectorRequirement",
    {
        "key": F(STRING, "key is the field selector key that the requirement applies to."),
        "operator": F(STRING, "operator represents a key's relationship to a set of values. Valid operators are In, "
                              "NotIn, Exists, DoesNotExist. The list of operators may grow in the future."),
        "values": F(ListOf(STRING), "values is an array of string values. If the operator is In or NotIn, the values "
                                    "array must be non-empty. If the operator is Exists or DoesNotExist, the values "
                                    "array must be empty."),
    },
    description="FieldSelectorRequirement is a selector that contains values, a key, and an operator that relates the "
                "key and values.",
    required=("key", "operator"),
)

FIELD_SELECTOR_ATTRIBUTES = Obj(
    AUTHZ + "FieldSelectorAttributes",
    {
        "rawSelector": F(STRING, _RAW_SELECTOR),
        "requirements": F(ListOf(FIELD_SELECTOR_REQUIREMENT),
                          "requirements is the parsed interpretation of a field selector. All requirements must be met "
                          "for a resource instance to match the selector. Webhook implementations should handle "
                          "requirements, but how to handle them is up to the webhook. Since requirements can only limit "
                          "the request, it is safe to authorize as unlimited request if the requirements are not "
                          "understood."),
    },
    description="FieldSelectorAttributes indicates a field limited access. " + _SELECTOR_NOTE,
)

LABEL_SELECTOR_ATTRIBUTES = Obj(
    AUTHZ + "LabelSelectorAttributes",
    {
        "rawSelector": F(STRING, _RAW_SELECTOR),
        "requirements": F(ListOf(LABEL_SELECTOR_REQUIREMENT),
                          "requirements is the parsed interpretation of a label selector. All requirements must be met "
                          "for a resource instance to match the selector. Webhook implementations should handle "
                          "requirements, but how to handle them is up to the webhook. Since requirements can only limit "
                          "the request, it is safe to authorize as unlimited request if the requirements are not "
                          "understood."),
    },
    description="LabelSelectorAttributes indicates a label limited access. " + _SELECTOR_NOTE,
)

RESOURCE_ATTRIBUTES = Obj(
    AUTHZ + "ResourceAttributes",
    {
        "namespace": F(STRING, 'Namespace is the namespace of the action being requested.  Currently, there is no '
                               'distinction between no namespace and all namespaces "" (empty) is defaulted for '
                               'LocalSubjectAccessReviews "" (empty) is empty for cluster-scoped resources "" (empty) '
                               'means "all" for namespace scoped resources from a SubjectAccessReview or '
                               'SelfSubjectAccessReview'),
        "verb": F(STRING, 'Verb is a kubernetes resource API verb, like: get, list, watch, create, update, delete, '
                          'proxy.  "*" means all.'),
        "group": F(STRING, 'Group is the API Group of the Resource.  "*" means all.'),
        "version": F(STRING, 'Version is the API Version of the Resource.  "*" means all.'),
        "resource": F(STRING, 'Resource is one of the existing resource types.  "*" means all.'),
        "subresource": F(STRING, 'Subresource is one of the existing resource types.  "" means none.'),
        "name": F(STRING, 'Name is the name of the resource being requested for a "get" or deleted for a "delete". "" '
                          '(empty) means all.'),
        "fieldSelector": F(FIELD_SELECTOR_ATTRIBUTES, "fieldSelector describes the limitation on access based on field. "
                                                      " It can only limit access, not broaden it."),
        "labelSelector": F(LABEL_SELECTOR_ATTRIBUTES, "labelSelector describes the limitation on access based on "
                                                      "labels.  It can only limit access, not broaden it."),
    },
    description="ResourceAttributes includes the authorization attributes available for resource requests to the "
                "Authorizer interface",
)

NON_RESOURCE_ATTRIBUTES = Obj(
    AUTHZ + "NonResourceAttributes",
    {
        "path": F(STRING, "Path is the URL path of the request"),
        "verb": F(STRING, "Verb is the standard HTTP verb"),
    },
    description="NonResourceAttributes includes the authorization attributes available for non-resource requests to "
                "the Authorizer interface",
)

_RESOURCE_ATTRIBUTES_DOC = "ResourceAuthorizationAttributes describes information for a resource access request"
_NON_RESOURCE_ATTRIBUTES_DOC = "NonResourceAttributes describes information for a non-resource access request"

SUBJECT_ACCESS_REVIEW_SPEC = Obj(
    AUTHZ + "SubjectAccessReviewSpec",
    {
        "resourceAttributes": F(RESOURCE_ATTRIBUTES, _RESOURCE_ATTRIBUTES_DOC),
        "nonResourceAttributes": F(NON_RESOURCE_ATTRIBUTES, _NON_RESOURCE_ATTRIBUTES_DOC),
        "user": F(STRING, 'User is the user you\'re testing for. If you specify "User" but not "Groups", then is it '
                          'interpreted as "What if User were not a member of any groups'),
        "groups": F(ListOf(STRING), "Groups is the groups you're testing for."),
        "extra": F(MapOf(ListOf(STRING)), "Extra corresponds to the user.Info.GetExtra() method from the authenticator. "
                                          " Since that is input to the authorizer it needs a reflection here."),
        "uid": F(STRING, "UID information about the requesting user."),
    },
    description="SubjectAccessReviewSpec is a description of the access request.  Exactly one of ResourceAuthorizationAttributes "
                "and NonResourceAttributes must be set",
)

SELF_SUBJECT_ACCESS_REVIEW_SPEC = Obj(
    AUTHZ + "SelfSubjectAccessReviewSpec",
    {
        "resourceAttributes": F(RESOURCE_ATTRIBUTES, _RESOURCE_ATTRIBUTES_DOC),
        "nonResourceAttributes": F(NON_RESOURCE_ATTRIBUTES, _NON_RESOURCE_ATTRIBUTES_DOC),
    },
    description="SelfSubjectAccessReviewSpec is a description of the access request.  Exactly one of "
                "ResourceAuthorizationAttributes and NonResourceAttributes must be set",
)

SUBJECT_ACCESS_REVIEW_STATUS = Obj(
    AUTHZ + "SubjectAccessReviewStatus",
    {
        "allowed": F(BOOL, "Allowed is required. True if the action would be allowed, false otherwise."),
        "denied": F(BOOL, "Denied is optional. True if the action would be denied, otherwise false. If both allowed is "
                          "false and denied is false, then the authorizer has no opinion on whether to authorize the "
                          "action. Denied may not be true if Allowed is true."),
        "reason": F(STRING, "Reason is optional.  It indicates why a request was allowed or denied."),
        "evaluationError": F(STRING, "EvaluationError is an indication that some error occurred during the "
                                     "authorization check. It is entirely possible to get an error and be able to "
                                     "continue determine authorization status in spite of it. For instance, RBAC can be "
                                     "missing a role, but enough roles are still present and bound to reason about the "
                                     "request."),
    },
    description="SubjectAccessReviewStatus",
    required=("allowed",),
)

RESOURCE_RULE = Obj(
    AUTHZ + "ResourceRule",
    {
        "verbs": F(ListOf(STRING), 'Verb is a list of kubernetes resource API verbs, like: get, list, watch, create, '
                                   'update, delete, proxy.  "*" means all.'),
        "apiGroups": F(ListOf(STRING), 'APIGroups is the name of the APIGroup that contains the resources.  If multiple '
                                       'API groups are specified, any action requested against one of the enumerated '
                                       'resources in any API group will be allowed.  "*" means all.'),
        "resources": F(ListOf(STRING), 'Resources is a list of resources this rule applies to.  "*" means all in the '
                                       'specified apiGroups.\n "*/foo" represents the subresource \'foo\' for all '
                                       'resources in the specified apiGroups.'),
        "resourceNames": F(ListOf(STRING), 'ResourceNames is an optional white list of names that the rule applies '
                                           'to.  An empty set means that everything is allowed.  "*" means all.'),
    },
    description="ResourceRule is the list of actions the subject is allowed to perform on resources. The list ordering "
                "isn't significant, may contain duplicates, and possibly be incomplete.",
    required=("verbs",),
)

NON_RESOURCE_RULE = Obj(
    AUTHZ + "NonResourceRule",
    {
        "verbs": F(ListOf(STRING), 'Verb is a list of kubernetes non-resource API verbs, like: get, post, put, delete, '
                                   'patch, head, options.  "*" means all.'),
        "nonResourceURLs": F(ListOf(STRING), 'NonResourceURLs is a set of partial urls that a user should have access '
                                             'to.  *s are allowed, but only as the full, final step in the path.  "*" '
                                             'means all.'),
    },
    description="NonResourceRule holds information that describes a rule for the non-resource",
    required=("verbs",),
)

SUBJECT_RULES_REVIEW_STATUS = Obj(
    AUTHZ + "SubjectRulesReviewStatus",
    {
        "resourceRules": F(ListOf(RESOURCE_RULE), "ResourceRules is the list of actions the subject is allowed to "
                                                  "perform on resources. The list ordering isn't significant, may "
                                                  "contain duplicates, and possibly be incomplete."),
        "nonResourceRules": F(ListOf(NON_RESOURCE_RULE), "NonResourceRules is the list of actions the subject is "
                                                         "allowed to perform on non-resources. The list ordering isn't "
                                                         "significant, may contain duplicates, and possibly be "
                                                         "incomplete."),
        "incomplete": F(BOOL, "Incomplete is true when the rules returned by this call are incomplete. This is most "
                              "commonly encountered when an authorizer, such as an external authorizer, doesn't support "
                              "rules evaluation."),
        "evaluationError": F(STRING, "EvaluationError can appear in combination with Rules. It indicates an error "
                                     "occurred during rule evaluation, such as an authorizer that doesn't support rule "
                                     "evaluation, and that ResourceRules and/or NonResourceRules may be incomplete."),
    },
    description="SubjectRulesReviewStatus contains the result of a rules check. This check can be incomplete depending "
                "on the set of authorizers the server is configured with and any errors experienced during evaluation. "
                "Because authorization rules are additive, if a rule appears in a list it's safe to assume the subject "
                "has that permission, even if that list is incomplete.",
    required=("resourceRules", "nonResourceRules", "incomplete"),
)

def _access_review(kind: str, description: str, spec: Obj, spec_doc: str) -> Obj:
    """A kind asking one access question: the question in ``spec``, the answer in ``status``."""
    return kind_schema(AUTHZ + kind, (GROUP, "v1", kind), description, {
        "spec": F(spec, spec_doc),
        "status": F(SUBJECT_ACCESS_REVIEW_STATUS, "Status is filled in by the server and indicates whether the request "
                                                  "is allowed or not"),
    }, required=("spec",))


SUBJECT_ACCESS_REVIEW = _access_review(
    "SubjectAccessReview", "SubjectAccessReview checks whether or not a user or group can perform an action.",
    SUBJECT_ACCESS_REVIEW_SPEC, "Spec holds information about the request being evaluated",
)

LOCAL_SUBJECT_ACCESS_REVIEW = _access_review(
    "LocalSubjectAccessReview",
    "LocalSubjectAccessReview checks whether or not a user or group can perform an action in a given namespace. Having "
    "a namespace scoped resource makes it much easier to grant namespace scoped policy that includes permissions "
    "checking.",
    SUBJECT_ACCESS_REVIEW_SPEC, "Spec holds information about the request being evaluated.  spec.namespace must be "
                                "equal to the namespace you made the request against.  If empty, it is defaulted.",
)

SELF_SUBJECT_ACCESS_REVIEW = _access_review(
    "SelfSubjectAccessReview",
    'SelfSubjectAccessReview checks whether or the current user can perform an action.  Not filling in a '
    'spec.namespace means "in all namespaces".  Self is a special case, because users should always be able to check '
    'whether they can perform an action',
    SELF_SUBJECT_ACCESS_REVIEW_SPEC, "Spec holds information about the request being evaluated.  user and groups must "
                                     "be empty",
)

SELF_SUBJECT_RULES_REVIEW = kind_schema(
    AUTHZ + "SelfSubjectRulesReview", (GROUP, "v1", "SelfSubjectRulesReview"),
    "SelfSubjectRulesReview enumerates the set of actions the current user can perform within a namespace. The "
    "returned list of actions may be incomplete depending on the server's authorization mode, and any errors "
    "experienced during the evaluation. SelfSubjectRulesReview should be used by UIs to show/hide actions, or to "
    "quickly let an end user reason about their permissions. It should NOT Be used by external systems to drive "
    "authorization decisions as this raises confused deputy, cache lifetime/revocation, and correctness concerns. "
    "SubjectAccessReview, and LocalAccessReview are the correct way to defer authorization decisions to the API "
    "server.",
    {
        "spec": F(Obj(AUTHZ + "SelfSubjectRulesReviewSpec", {
            "namespace": F(STRING, "Namespace to evaluate rules for. Required."),
        }, description="SelfSubjectRulesReviewSpec defines the specification for SelfSubjectRulesReview."),
            "Spec holds information about the request being evaluated."),
        "status": F(SUBJECT_RULES_REVIEW_STATUS, "Status is filled in by the server and indicates the set of actions a "
                                                 "user can perform."),
    },
    required=("spec",),
)

register(KindInfo(GROUP, "v1", "LocalSubjectAccessReview", "localsubjectaccessreviews", "localsubjectaccessreview",
                  namespaced=True, schema=LOCAL_SUBJECT_ACCESS_REVIEW, create_only=True))
register(KindInfo(GROUP, "v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews", "selfsubjectaccessreview",
                  namespaced=False, schema=SELF_SUBJECT_ACCESS_REVIEW, create_only=True))
register(KindInfo(GROUP, "v1", "SelfSubjectRulesReview", "selfsubjectrulesreviews", "selfsubjectrulesreview",
                  namespaced=False, schema=SELF_SUBJECT_RULES_REVIEW, create_only=True))
register(KindInfo(GROUP, "v1", "SubjectAccessReview", "subjectaccessreviews", "subjectaccessreview",
                  namespaced=False, schema=SUBJECT_ACCESS_REVIEW, create_only=True))
