"""The shared object envelope (k8s.io/apimachinery/pkg/apis/meta/v1) every kind is built from.

Every persisted Kubernetes object has the same outer shape::

    {"apiVersion": "v1", "kind": "Service", "metadata": {...ObjectMeta...}, "spec": {...}, "status": {...}}

``ObjectMeta`` carries identity (name, namespace, uid), the optimistic-concurrency token
(resourceVersion), organisation (labels, annotations), lifecycle (finalizers,
deletionTimestamp), ownership for garbage collection (ownerReferences) and server-side-apply
bookkeeping (managedFields). Lists carry ``ListMeta`` instead. The list markers below are what
strategic merge patch and server-side apply key on: ``ownerReferences`` merge by ``uid``,
``finalizers`` is a set, and a ``managedFields`` entry's ``fieldsV1`` is an opaque trie owned by
the apply machinery.

This module also holds the meta types that appear in request and response bodies around the
objects (``Status``, ``DeleteOptions``), the shared ``Condition`` and ``LabelSelector``, and
``ObjectReference`` (which lives in core/v1 upstream but is referenced from several groups).
"""

from __future__ import annotations

from kubesvc.api.schema import BOOL, INT32, INT64, STRING, STRING_MAP, TIME, Any_, F, ListOf, Obj, Scalar

META = "io.k8s.apimachinery.pkg.apis.meta.v1."

# metav1.MicroTime: an RFC3339 time with microseconds. Decoded like Time; OpenAPI names it apart.
MICRO_TIME = Scalar("date-time", "micro-time")

API_VERSION_DESCRIPTION = (
    "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized "
    "schemas to the latest internal value, and may reject unrecognized values. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"
)
KIND_DESCRIPTION = (
    "Kind is a string value representing the REST resource this object represents. Servers may infer this from the "
    "endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"
)
METADATA_DESCRIPTION = (
    "Standard object's metadata. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)

OWNER_REFERENCE = Obj(
    META + "OwnerReference",
    {
        "apiVersion": F(STRING, "API version of the referent."),
        "kind": F(STRING, "Kind of the referent."),
        "name": F(STRING, "Name of the referent."),
        "uid": F(STRING, "UID of the referent."),
        "controller": F(BOOL, "If true, this reference points to the managing controller."),
        "blockOwnerDeletion": F(BOOL, 'If true, AND if the owner has the "foregroundDeletion" finalizer, then the owner '
                                      "cannot be deleted from the key-value store until this reference is removed."),
    },
    description="OwnerReference contains enough information to let you identify an owning object. An owning object "
                "must be in the same namespace as the dependent, or be cluster-scoped, so there is no namespace field.",
    required=("apiVersion", "kind", "name", "uid"),
    map_type="atomic",
)

MANAGED_FIELDS_ENTRY = Obj(
    META + "ManagedFieldsEntry",
    {
        "manager": F(STRING, "Manager is an identifier of the workflow managing these fields."),
        "operation": F(STRING, "Operation is the type of operation which lead to this ManagedFieldsEntry being created. "
                               "The only valid values for this field are 'Apply' and 'Update'."),
        "apiVersion": F(STRING, "APIVersion defines the version of this resource that this field set applies to."),
        "time": F(TIME, "Time is the timestamp of when the ManagedFields entry was added."),
        "fieldsType": F(STRING, 'FieldsType is the discriminator for the different fields format and version. There is '
                                'currently only one possible value: "FieldsV1"'),
        "fieldsV1": F(Any_("FieldsV1 stores a set of fields in a data structure like a Trie, in JSON format."),
                      'FieldsV1 holds the first JSON version format as described in the "FieldsV1" type.'),
        "subresource": F(STRING, "Subresource is the name of the subresource used to update that object, or empty "
                                 "string if the object was updated through the main resource."),
    },
    description="ManagedFieldsEntry is a workflow-id, a FieldSet and the group version of the resource that the "
                "fieldset applies to.",
)

OBJECT_META = Obj(
    META + "ObjectMeta",
    {
        "name": F(STRING, "Name must be unique within a namespace."),
        "generateName": F(STRING, "GenerateName is an optional prefix, used by the server, to generate a unique name "
                                  "ONLY IF the Name field has not been provided."),
        "namespace": F(STRING, "Namespace defines the space within which each name must be unique."),
        "selfLink": F(STRING, "Deprecated: selfLink is a legacy read-only field that is no longer populated by the "
                              "system."),
        "uid": F(STRING, "UID is the unique in time and space value for this object."),
        "resourceVersion": F(STRING, "An opaque value that represents the internal version of this object that can be "
                                     "used by clients to determine when objects have changed."),
        "generation": F(INT64, "A sequence number representing a specific generation of the desired state."),
        "creationTimestamp": F(TIME, "CreationTimestamp is a timestamp representing the server time when this object "
                                     "was created."),
        "deletionTimestamp": F(TIME, "DeletionTimestamp is RFC 3339 date and time at which this resource will be "
                                     "deleted."),
        "deletionGracePeriodSeconds": F(INT64, "Number of seconds allowed for this object to gracefully terminate "
                                               "before it will be removed from the system."),
        "labels": F(STRING_MAP, "Map of string keys and values that can be used to organize and categorize (scope and "
                                "select) objects."),
        "annotations": F(STRING_MAP, "Annotations is an unstructured key value map stored with a resource that may be "
                                     "set by external tools to store and retrieve arbitrary metadata."),
        "ownerReferences": F(ListOf(OWNER_REFERENCE, "map", ("uid",), "merge", "uid"),
                             "List of objects depended by this object. If ALL objects in the list have been deleted, "
                             "this object will be garbage collected."),
        "finalizers": F(ListOf(STRING, "set", patch_strategy="merge"),
                        "Must be empty before the object is deleted from the registry."),
        "managedFields": F(ListOf(MANAGED_FIELDS_ENTRY),
                           "ManagedFields maps workflow-id and version to the set of fields that are managed by that "
                           "workflow."),
    },
    description="ObjectMeta is metadata that all persisted resources must have, which includes all objects users "
                "must create.",
)

LIST_META = Obj(
    META + "ListMeta",
    {
        "selfLink": F(STRING, "Deprecated: selfLink is a legacy read-only field that is no longer populated by the "
                              "system."),
        "resourceVersion": F(STRING, "String that identifies the server's internal version of this object that can be "
                                     "used by clients to determine when objects have changed."),
        "continue": F(STRING, "continue may be set if the user set a limit on the number of items returned, and "
                              "indicates that the server has more data available."),
        "remainingItemCount": F(INT64, "remainingItemCount is the number of subsequent items in the list which are not "
                                       "included in this list response."),
    },
    description="ListMeta describes metadata that synthetic resources must have, including lists and various status "
                "objects.",
)

LABEL_SELECTOR_REQUIREMENT = Obj(
    META + "LabelSelectorRequirement",
    {
        "key": F(STRING, "key is the label key that the selector applies to.", patch_strategy="merge"),
        "operator": F(STRING, "operator represents a key's relationship to a set of values. Valid operators are In, "
                              "NotIn, Exists and DoesNotExist."),
        "values": F(ListOf(STRING), "values is an array of string values."),
    },
    description="A label selector requirement is a selector that contains values, a key, and an operator that relates "
                "the key and values.",
    required=("key", "operator"),
)

LABEL_SELECTOR = Obj(
    META + "LabelSelector",
    {
        "matchLabels": F(STRING_MAP, "matchLabels is a map of {key,value} pairs."),
        "matchExpressions": F(ListOf(LABEL_SELECTOR_REQUIREMENT),
                              "matchExpressions is a list of label selector requirements. The requirements are ANDed."),
    },
    description="A label selector is a label query over a set of resources. The result of matchLabels and "
                "matchExpressions are ANDed. An empty label selector matches all objects. A null label selector "
                "matches no objects.",
    map_type="atomic",
)

CONDITION = Obj(
    META + "Condition",
    {
        "type": F(STRING, "type of condition in CamelCase or in foo.example.com/CamelCase."),
        "status": F(STRING, "status of the condition, one of True, False, Unknown."),
        "observedGeneration": F(INT64, "observedGeneration represents the .metadata.generation that the condition was "
                                       "set based upon."),
        "lastTransitionTime": F(TIME, "lastTransitionTime is the last time the condition transitioned from one status "
                                      "to another."),
        "reason": F(STRING, "reason contains a programmatic identifier indicating the reason for the condition's last "
                            "transition."),
        "message": F(STRING, "message is a human readable message indicating details about the transition."),
    },
    description="Condition contains details for one aspect of the current state of this API Resource.",
    required=("type", "status", "lastTransitionTime", "reason", "message"),
)


def keyed_by_type(item: Obj) -> ListOf:
    """A ``conditions``-style list: one entry per ``type``, merged (SMP) and owned (SSA) by ``type``."""
    return ListOf(item, "map", ("type",), "merge", "type")


OBJECT_REFERENCE = Obj(
    "io.k8s.api.core.v1.ObjectReference",
    {
        "kind": F(STRING, "Kind of the referent."),
        "namespace": F(STRING, "Namespace of the referent."),
        "name": F(STRING, "Name of the referent."),
        "uid": F(STRING, "UID of the referent."),
        "apiVersion": F(STRING, "API version of the referent."),
        "resourceVersion": F(STRING, "Specific resourceVersion to which this reference is made, if any."),
        "fieldPath": F(STRING, "If referring to a piece of an object instead of an entire object, this string should "
                               "contain a valid JSON/Go field access statement, such as "
                               "desiredState.manifest.containers[2]."),
    },
    description="ObjectReference contains enough information to let you inspect or modify the referred object.",
    map_type="atomic",
)

# ---- bodies around objects: errors and delete options ------------------------------------------

STATUS_CAUSE = Obj(
    META + "StatusCause",
    {
        "reason": F(STRING, "A machine-readable description of the cause of the error."),
        "message": F(STRING, "A human-readable description of the cause of the error."),
        "field": F(STRING, "The field of the resource that has caused this error, as named by its JSON "
                           "serialization."),
    },
    description="StatusCause provides more information about an api.Status failure, including cases when multiple "
                "errors are encountered.",
)

STATUS_DETAILS = Obj(
    META + "StatusDetails",
    {
        "name": F(STRING, "The name attribute of the resource associated with the status StatusReason."),
        "group": F(STRING, "The group attribute of the resource associated with the status StatusReason."),
        "kind": F(STRING, "The kind attribute of the resource associated with the status StatusReason."),
        "uid": F(STRING, "UID of the resource."),
        "causes": F(ListOf(STATUS_CAUSE), "The Causes array includes more details associated with the StatusReason "
                                          "failure."),
        "retryAfterSeconds": F(INT32, "If specified, the time in seconds before the operation should be retried."),
    },
    description="StatusDetails is a set of additional properties that MAY be set by the server to provide additional "
                "information about a response.",
)

STATUS = Obj(
    META + "Status",
    {
        "apiVersion": F(STRING, API_VERSION_DESCRIPTION),
        "kind": F(STRING, KIND_DESCRIPTION),
        "metadata": F(LIST_META, "Standard list metadata."),
        "status": F(STRING, 'Status of the operation. One of: "Success" or "Failure".'),
        "message": F(STRING, "A human-readable description of the status of this operation."),
        "reason": F(STRING, 'A machine-readable description of why this operation is in the "Failure" status.'),
        "details": F(STATUS_DETAILS, "Extended data associated with the reason."),
        "code": F(INT32, "Suggested HTTP return code for this status, 0 if not set."),
    },
    description="Status is a return value for calls that don't return other objects.",
    gvk=("", "v1", "Status"),
)

PRECONDITIONS = Obj(
    META + "Preconditions",
    {
        "uid": F(STRING, "Specifies the target UID."),
        "resourceVersion": F(STRING, "Specifies the target ResourceVersion"),
    },
    description="Preconditions must be fulfilled before an operation (update, delete, etc.) is carried out.",
)

DELETE_OPTIONS = Obj(
    META + "DeleteOptions",
    {
        "apiVersion": F(STRING, API_VERSION_DESCRIPTION),
        "kind": F(STRING, KIND_DESCRIPTION),
        "gracePeriodSeconds": F(INT64, "The duration in seconds before the object should be deleted."),
        "preconditions": F(PRECONDITIONS, "Must be fulfilled before a deletion is carried out."),
        "orphanDependents": F(BOOL, "Deprecated: please use the PropagationPolicy, this field will be deprecated in "
                                    "1.7."),
        "propagationPolicy": F(STRING, "Whether and how garbage collection will be performed. Acceptable values are: "
                                       "'Orphan', 'Background', 'Foreground'."),
        "dryRun": F(ListOf(STRING), "When present, indicates that modifications should not be persisted."),
        "ignoreStoreReadErrorWithClusterBreakingPotential": F(
            BOOL, "if set to true, it will trigger an unsafe deletion of the resource in case the normal deletion flow "
                  "fails with a corrupt object error."),
    },
    description="DeleteOptions may be provided when deleting an API object.",
    gvk=("", "v1", "DeleteOptions"),
)

# ---- building top-level kinds ------------------------------------------------------------------


def kind_schema(name: str, gvk: tuple[str, str, str], description: str, fields: dict, required: tuple[str, ...] = ()) -> Obj:
    """A top-level kind: ``apiVersion``, ``kind``, ``metadata`` and then the kind's own fields."""
    envelope = {
        "apiVersion": F(STRING, API_VERSION_DESCRIPTION),
        "kind": F(STRING, KIND_DESCRIPTION),
        "metadata": F(OBJECT_META, METADATA_DESCRIPTION),
    }
    return Obj(name, {**envelope, **fields}, description=description, required=required, gvk=gvk)


def list_schema(item: Obj) -> Obj:
    """The ``<Kind>List`` a collection GET returns for the top-level kind ``item``."""
    group, version, kind = item.gvk  # type: ignore[misc]
    return Obj(
        item.name + "List",
        {
            "apiVersion": F(STRING, API_VERSION_DESCRIPTION),
            "kind": F(STRING, KIND_DESCRIPTION),
            "metadata": F(LIST_META, "Standard list metadata. More info: "
                                     "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"),
            "items": F(ListOf(item), f"List of {kind} objects."),
        },
        description=f"{kind}List is a list of {kind} objects.",
        required=("items",),
        gvk=(group, version, kind + "List"),
    )
