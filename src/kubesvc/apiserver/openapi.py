"""OpenAPI v3 documents (``/openapi/v3``), generated from the kind table and the schema tree.

kubectl reads these documents for three things:

* **Validation mode.** Before ``apply``, ``create -f``, ``replace`` and ``edit`` it looks up the
  operation for the object's group/version/kind (``x-kubernetes-group-version-kind`` on a
  ``post``, ``put`` or ``patch``). If that operation lists a ``fieldValidation`` query parameter
  it sends ``fieldValidation=Strict`` and leaves checking to the server (``kubesvc.api.decode``);
  without one it refuses the command unless given ``--validate=false``.
* **Strategic merge patches.** ``kubectl apply`` computes the patch from the schema's
  ``x-kubernetes-patch-merge-key``/``-patch-strategy``, but only if the ``patch`` operation
  accepts ``application/strategic-merge-patch+json``.
* **explain.** ``kubectl explain svc.spec.ports`` walks ``components.schemas`` from the kind
  carrying ``x-kubernetes-group-version-kind``, following ``allOf: [{$ref}]`` links.

A create-only kind (an access review, TokenReview, SelfSubjectReview) has one path, its
collection, with one operation, ``post``; the TokenRequest of ``serviceaccounts/{name}/token``
is described as the ``post`` of that subresource.

``GET /openapi/v3`` is an index of one document per group/version; each entry's URL carries
``?hash=<sha512 of the document>``. kubectl caches documents by URL, so a changed document must
get a new hash, which a content hash guarantees. Documents are built and serialized once.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from typing import Iterable

from kubesvc.api.kinds.meta import DELETE_OPTIONS, STATUS, list_schema
from kubesvc.api.scheme import KindInfo, all_kinds
from kubesvc.api.schema import Any_, Field, ListOf, MapOf, Obj, Scalar, Type
from kubesvc.apiserver import openapi_v2
from kubesvc.apiserver.subresources import ActionSubresource, actions_of

REF_PREFIX = "#/components/schemas/"
PATCH_CONTENT_TYPES = (
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
)

_META = "io.k8s.apimachinery.pkg.apis.meta.v1."
_TIME = _META + "Time"
_MICRO_TIME = _META + "MicroTime"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_PATCH = _META + "Patch"

# Named schemas that are not structs: upstream's custom-marshalled types.
_NAMED_SCALARS = {
    _TIME: {
        "description": "Time is a wrapper around time.Time which supports correct marshaling to YAML and JSON.  "
                       "Wrappers are provided for many of the factory methods that the time package offers.",
        "type": "string",
        "format": "date-time",
    },
    _MICRO_TIME: {
        "description": "MicroTime is version of Time with microsecond level precision.",
        "type": "string",
        "format": "date-time",
    },
    _INT_OR_STRING: {
        "description": "IntOrString is a type that can hold an int32 or a string.  When used in JSON or YAML "
                       "marshalling and unmarshalling, it produces or consumes the inner type.  This allows you to "
                       "have, for example, a JSON field that can accept a name or number.",
        "format": "int-or-string",
        "oneOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    },
    _QUANTITY: {
        "description": "Quantity is a fixed-point representation of a number. It provides convenient "
                       "marshaling/unmarshaling in JSON and YAML, in addition to String() and AsInt64() accessors.",
        "oneOf": [{"type": "string"}, {"type": "number"}],
    },
    _PATCH: {
        "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.",
        "type": "object",
    },
}


class OpenAPI:
    """The served documents, one per group/version, keyed by their path under ``/openapi/v3/``
    (``api/v1``, ``apis/discovery.k8s.io/v1``)."""

    def __init__(self, kinds: Iterable[KindInfo] | None = None):
        by_group_version: dict[tuple[str, str], list[KindInfo]] = defaultdict(list)
        for info in all_kinds() if kinds is None else kinds:
            by_group_version[(info.group, info.version)].append(info)
        self._documents: dict[str, bytes] = {}
        self._hashes: dict[str, str] = {}
        self._swagger: tuple[bytes, bytes, str] | None = None
        for (group, version), infos in by_group_version.items():
            path = f"apis/{group}/{version}" if group else f"api/{version}"
            body = json.dumps(group_version_document(group, version, infos), sort_keys=True,
                              separators=(",", ":")).encode()
            self._documents[path] = body
            self._hashes[path] = hashlib.sha512(body).hexdigest().upper()

    def index(self) -> dict:
        """The ``GET /openapi/v3`` body: where each group/version document is, content-addressed."""
        return {"paths": {path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
                          for path, digest in self._hashes.items()}}

    def document(self, path: str) -> bytes | None:
        """The serialized document for ``api/v1`` or ``apis/<group>/<version>``; None if unknown."""
        return self._documents.get(path.strip("/"))

    def etag(self, path: str) -> str | None:
        """The document's content hash (unquoted), the same one its index URL carries."""
        return self._hashes.get(path.strip("/"))

    def swagger(self, protobuf: bool) -> tuple[bytes, str]:
        """``GET /openapi/v2``: the one Swagger 2.0 document derived from these (built on first
        use: only kubectl's validation of a ``kind: List`` reads it), as gnostic protobuf or JSON,
        and its ETag."""
        if self._swagger is None:
            document = openapi_v2.swagger_document(json.loads(body) for body in self._documents.values())
            as_json = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
            self._swagger = (as_json, openapi_v2.encode_document(document), hashlib.sha512(as_json).hexdigest().upper())
        as_json, as_protobuf, digest = self._swagger
        return (as_protobuf if protobuf else as_json), digest


def group_version_document(group: str, version: str, kinds: Iterable[KindInfo]) -> dict:
    components = ComponentSchemas()
    paths: dict[str, dict] = {}
    for info in kinds:
        paths.update(_ResourcePaths(info, components).paths())
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "unversioned"},
        "paths": paths,
        "components": {
            "schemas": components.schemas,
            "securitySchemes": {"BearerToken": {"type": "apiKey", "in": "header", "name": "authorization",
                                                "description": "Bearer Token authentication"}},
        },
    }


# ---- components.schemas ----------------------------------------------------------------------


class ComponentSchemas:
    """Turns schema nodes into OpenAPI schemas, collecting every struct they reach as a named
    component (so a document holds exactly the components its paths need)."""

    def __init__(self) -> None:
        self.schemas: dict[str, dict] = {}

    def ref(self, obj: Obj) -> str:
        if obj.name not in self.schemas:
            self.schemas[obj.name] = {}  # claimed first, so recursive types terminate
            self.schemas[obj.name] = self._struct(obj)
        return REF_PREFIX + obj.name

    def named(self, name: str) -> str:
        self.schemas.setdefault(name, _NAMED_SCALARS[name])
        return REF_PREFIX + name

    def _struct(self, obj: Obj) -> dict:
        schema: dict = {"type": "object"}
        if obj.description:
            schema["description"] = obj.description
        if obj.fields:
            schema["properties"] = {name: self.property(field) for name, field in obj.fields.items()}
        if obj.required:
            schema["required"] = list(obj.required)
        if obj.map_type == "atomic":
            schema["x-kubernetes-map-type"] = "atomic"
        if obj.gvk:
            group, version, kind = obj.gvk
            schema["x-kubernetes-group-version-kind"] = [{"group": group, "kind": kind, "version": version}]
        return schema

    def property(self, field: Field) -> dict:
        schema = self.schema(field.type)
        if field.description:
            schema["description"] = field.description
        if field.patch_strategy:
            schema["x-kubernetes-patch-strategy"] = field.patch_strategy
        return schema

    def schema(self, node: Type, element: bool = False) -> dict:
        """The schema of a value of type ``node``; ``element``: a list item or map value, whose
        scalar schema carries the Go zero value as ``default``, as upstream's do."""
        if isinstance(node, Obj):
            # upstream adds "default": {} to struct elements; left out because it does not satisfy
            # the referenced schema's "required" and so makes the document invalid OpenAPI
            return {"allOf": [{"$ref": self.ref(node)}]}
        if isinstance(node, ListOf):
            return self._list(node)
        if isinstance(node, MapOf):
            schema = {"type": "object", "additionalProperties": self.schema(node.value, element=True)}
            if node.map_type == "atomic":
                schema["x-kubernetes-map-type"] = "atomic"
            return schema
        if isinstance(node, Any_):
            schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            if node.description:
                schema["description"] = node.description
            return schema
        return self._scalar(node, element)

    def _list(self, node: ListOf) -> dict:
        schema: dict = {"type": "array", "items": self.schema(node.item, element=True),
                        "x-kubernetes-list-type": node.list_type}
        if node.map_keys:
            schema["x-kubernetes-list-map-keys"] = list(node.map_keys)
        if node.patch_strategy:
            schema["x-kubernetes-patch-strategy"] = node.patch_strategy
        if node.patch_merge_key:
            schema["x-kubernetes-patch-merge-key"] = node.patch_merge_key
        return schema

    def _scalar(self, node: Scalar, element: bool) -> dict:
        named = {"int-or-string": _INT_OR_STRING, "quantity": _QUANTITY,
                 "date-time": _MICRO_TIME if node.format == "micro-time" else _TIME}.get(node.kind)
        if named:
            return {"allOf": [{"$ref": self.named(named)}]}
        schema: dict = dict(_PLAIN_SCALARS[node.kind])
        if node.kind == "integer":
            schema["format"] = node.format or "int64"
        if node.enum:
            schema["enum"] = list(node.enum)
        if element:
            schema["default"] = _ELEMENT_DEFAULTS[node.kind]
        return schema


_PLAIN_SCALARS = {
    "string": {"type": "string"},
    "byte": {"type": "string", "format": "byte"},
    "integer": {"type": "integer"},
    "number": {"type": "number", "format": "double"},
    "boolean": {"type": "boolean"},
}
_ELEMENT_DEFAULTS = {"string": "", "byte": "", "integer": 0, "number": 0, "boolean": False}

# ---- paths -----------------------------------------------------------------------------------


def _query(name: str, type_: str, description: str) -> dict:
    return {"name": name, "in": "query", "description": description, "schema": {"type": type_, "uniqueItems": True}}


_PRETTY = _query("pretty", "string", "If 'true', then the output is pretty printed.")
_DRY_RUN = _query("dryRun", "string", "When present, indicates that modifications should not be persisted. Valid "
                                      "values are: - All: all dry run stages will be processed")
_FIELD_MANAGER = _query("fieldManager", "string", "fieldManager is a name associated with the actor or entity that "
                                                  "is making these changes. It is required for apply requests "
                                                  "(application/apply-patch) but optional for non-apply patch types.")
_FIELD_VALIDATION = _query("fieldValidation", "string",
                           "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/"
                           "PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: unknown fields "
                           "are silently dropped from the object. - Warn: a warning is sent via the standard warning "
                           "response header for each unknown field that is dropped. - Strict: the request fails with "
                           "a BadRequest error if any unknown fields would be dropped from the object.")
_FORCE = _query("force", "boolean", 'Force is going to "force" Apply requests. It means user will re-acquire '
                                    "conflicting fields owned by other people. Force flag must be unset for non-apply "
                                    "patch requests.")
_DELETE_PARAMETERS = [
    _DRY_RUN,
    _query("gracePeriodSeconds", "integer", "The duration in seconds before the object should be deleted."),
    _query("orphanDependents", "boolean", "Deprecated: please use the PropagationPolicy."),
    _query("propagationPolicy", "string", "Whether and how garbage collection will be performed: 'Orphan', "
                                          "'Background' or 'Foreground'."),
]
_SELECTION_PARAMETERS = [
    _query("continue", "string", "The continue option should be set when retrieving more results from the server."),
    _query("fieldSelector", "string", "A selector to restrict the list of returned objects by their fields. Defaults "
                                      "to everything."),
    _query("labelSelector", "string", "A selector to restrict the list of returned objects by their labels. Defaults "
                                      "to everything."),
    _query("limit", "integer", "limit is a maximum number of responses to return for a list call."),
    _query("resourceVersion", "string", "resourceVersion sets a constraint on what resource versions a request may be "
                                        "served from."),
    _query("resourceVersionMatch", "string", "resourceVersionMatch determines how resourceVersion is applied to list "
                                             "calls."),
    _query("timeoutSeconds", "integer", "Timeout for the list/watch call."),
]
_WATCH_PARAMETERS = [
    _query("allowWatchBookmarks", "boolean", 'allowWatchBookmarks requests watch events with type "BOOKMARK".'),
    _query("sendInitialEvents", "boolean", "`sendInitialEvents=true` may be set together with `watch=true`."),
    _query("watch", "boolean", "Watch for changes to the described resources and return them as a stream of add, "
                               "update, and remove notifications. Specify resourceVersion."),
]
_LIST_PARAMETERS = sorted(_SELECTION_PARAMETERS + _WATCH_PARAMETERS, key=lambda parameter: parameter["name"])
_DELETE_COLLECTION_PARAMETERS = sorted(_SELECTION_PARAMETERS + _DELETE_PARAMETERS,
                                       key=lambda parameter: parameter["name"])

# pods/log's query (core/v1 PodLogOptions)
_ACTION_QUERY_PARAMETERS = {"log": [
    _query("container", "string", "The container for which to stream logs. Defaults to only container if there is "
                                  "one container in the pod."),
    _query("follow", "boolean", "Follow the log stream of the pod. Defaults to false."),
    _query("insecureSkipTLSVerifyBackend", "boolean", "insecureSkipTLSVerifyBackend indicates that the apiserver "
                                                      "should not confirm the validity of the serving certificate of "
                                                      "the backend it is connecting to."),
    _query("limitBytes", "integer", "If set, the number of bytes to read from the server before terminating the log "
                                    "output."),
    _query("previous", "boolean", "Return previous terminated container logs. Defaults to false."),
    _query("sinceSeconds", "integer", "A relative time in seconds before the current time from which to show logs."),
    _query("tailLines", "integer", "If set, the number of lines from the end of the logs to show."),
    _query("timestamps", "boolean", "If true, add an RFC3339 or RFC3339Nano timestamp at the beginning of every line "
                                    "of log output. Defaults to false."),
]}

# pods/exec, pods/attach, pods/portforward (PodExecOptions, PodAttachOptions, PodPortForwardOptions)
_STREAMS = {"stderr": "Redirect the standard error stream of the pod for this call.",
            "stdin": "Redirect the standard input stream of the pod for this call. Defaults to false.",
            "stdout": "Redirect the standard output stream of the pod for this call."}
_CONNECT_QUERY_PARAMETERS = {
    "exec": [_query("command", "string", "Command is the remote command to execute. argv array. Not executed within a shell."),
             _query("container", "string", "Container in which to execute the command. Defaults to only container if there "
                                           "is only one container in the pod."),
             *(_query(name, "boolean", text) for name, text in _STREAMS.items()),
             _query("tty", "boolean", "TTY if true indicates that a tty will be allocated for the exec call. Defaults to false.")],
    "attach": [_query("container", "string", "The container in which to execute the command. Defaults to only container if "
                                             "there is only one container in the pod."),
               _query("stderr", "boolean", "Stderr if true indicates that stderr is to be redirected for the attach call. "
                                           "Defaults to true."),
               _query("stdin", "boolean", "Stdin if true, redirects the standard input stream of the pod for this call. "
                                          "Defaults to false."),
               _query("stdout", "boolean", "Stdout if true indicates that stdout is to be redirected for the attach call. "
                                           "Defaults to true."),
               _query("tty", "boolean", "TTY if true indicates that a tty will be allocated for the attach call. This is passed "
                                        "through the container runtime so the tty is allocated on the worker node by the "
                                        "container runtime. Defaults to false.")],
    "portforward": [_query("ports", "integer", "List of ports to forward Required when using WebSockets")],
}

_STATUS_TEXT = {"200": "OK", "201": "Created", "202": "Accepted"}
# What each subresource supports: status is read and written like the object, finalize only PUT.
_SUBRESOURCE_VERBS = {"status": ("get", "put", "patch"), "finalize": ("put",)}


def _path_parameter(name: str, description: str) -> dict:
    return {"name": name, "in": "path", "required": True, "description": description,
            "schema": {"type": "string", "uniqueItems": True}}


def _operation_prefix(group: str, version: str) -> str:
    """``CoreV1``, ``DiscoveryV1``: how upstream operation IDs and tags name a group/version."""
    words = (group.removesuffix(".k8s.io") or "core").replace("-", ".").split(".")
    return "".join(word.capitalize() for word in words) + version.capitalize()


class _ResourcePaths:
    """The path items of one resource: collection, item, subresources (and, when namespaced, the
    all-namespaces list)."""

    def __init__(self, info: KindInfo, components: ComponentSchemas):
        self.info = info
        self.components = components
        self.object_ref = components.ref(info.schema)
        if not info.create_only:  # nothing to list, delete or patch when nothing is stored
            self.list_ref = components.ref(list_schema(info.schema))
            self.status_ref = components.ref(STATUS)
            self.delete_options_ref = components.ref(DELETE_OPTIONS)
            self.patch_ref = components.named(_PATCH)
        self.gvk = {"group": info.group, "kind": info.kind, "version": info.version}
        self.tag = (info.group.removesuffix(".k8s.io").replace(".", "_") or "core") + "_" + info.version
        self.prefix = _operation_prefix(info.group, info.version)
        self.scope = "Namespaced" if info.namespaced else ""
        self.article = "an" if info.kind[0] in "AEIOU" else "a"

    def paths(self) -> dict[str, dict]:
        info = self.info
        root = f"/apis/{info.group}/{info.version}" if info.group else f"/api/{info.version}"
        scope_parameters = []
        if info.namespaced:
            scope_parameters = [_path_parameter("namespace", "object name and auth scope, such as for teams and "
                                                             "projects")]
        collection = f"{root}/namespaces/{{namespace}}/{info.resource}" if info.namespaced else f"{root}/{info.resource}"
        if info.create_only:  # upstream registers only POST on the collection
            return {collection: {
                "parameters": scope_parameters + [_PRETTY],
                "post": self._write("create", "post", f"create {self.article} {info.kind}", "200", "201", "202"),
            }}
        paths = {
            collection: {
                "parameters": scope_parameters + [_PRETTY],
                "get": self._list(self.scope + info.kind),
                "post": self._write("create", "post", f"create {self.article} {info.kind}", "200", "201", "202"),
                "delete": self._operation(f"delete{self.prefix}Collection{self.scope}{info.kind}", "deletecollection",
                                          f"delete collection of {info.kind}", _DELETE_COLLECTION_PARAMETERS,
                                          self.status_ref, ("200",), self._delete_body()),
            },
            f"{collection}/{{name}}": self._item(scope_parameters),
        }
        if info.namespaced:
            paths[f"{root}/{info.resource}"] = {"parameters": [_PRETTY], "get": self._list(f"{info.kind}ForAllNamespaces")}
        for subresource in info.subresources:
            paths[f"{collection}/{{name}}/{subresource}"] = self._subresource(subresource, scope_parameters)
        for action in actions_of(info):
            item_parameters = [_path_parameter("name", f"name of the {action.kind}")] + scope_parameters
            if action.body is not None and "update" in action.verbs:
                paths[f"{collection}/{{name}}/{action.name}"] = self._scale_action(action, action.body, item_parameters)
            elif action.body is not None:
                paths[f"{collection}/{{name}}/{action.name}"] = self._create_action(action, action.body, item_parameters,
                                                                                   info.kind + action.name.capitalize())
                if action.legacy_resource:
                    paths[f"{root}/namespaces/{{namespace}}/{action.legacy_resource}"] = self._create_action(
                        action, action.body, scope_parameters, action.kind, f"create {self.article} {action.kind}")
            elif action.name in _CONNECT_QUERY_PARAMETERS:
                paths[f"{collection}/{{name}}/{action.name}"] = self._connect_action(action, item_parameters)
            else:
                paths[f"{collection}/{{name}}/{action.name}"] = self._read_action(action, item_parameters)
        return paths

    def _create_action(self, action: ActionSubresource, body: KindInfo, parameters: list[dict], name: str,
                       description: str = "") -> dict:
        """POST of a kind that is not stored (a Binding), answered with that kind."""
        ref = self.components.ref(body.schema)
        operation = self._operation(f"create{self.prefix}{self.scope}{name}", "post",
                                    description or f"create {action.name} of {self.article} {self.info.kind}",
                                    [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION], ref, ("200", "201", "202"),
                                    {"content": {"*/*": {"schema": {"$ref": ref}}}, "required": True})
        operation["x-kubernetes-group-version-kind"] = {"group": body.group, "kind": body.kind, "version": body.version}
        return {"parameters": parameters + [_PRETTY], "post": operation}

    def _scale_action(self, action: ActionSubresource, body: KindInfo, parameters: list[dict]) -> dict:
        """GET, PUT and PATCH of another kind's view of the object (``deployments/scale``: a Scale)."""
        ref = self.components.ref(body.schema)
        gvk = {"group": body.group, "kind": body.kind, "version": body.version}
        suffix = action.name.capitalize()
        kind = self.info.kind
        operations = {
            "get": self._operation(f"read{self.prefix}{self.scope}{kind}{suffix}", "get",
                                   f"read {action.name} of the specified {kind}", [], ref, ("200",)),
            "put": self._operation(f"replace{self.prefix}{self.scope}{kind}{suffix}", "put",
                                   f"replace {action.name} of the specified {kind}", [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION],
                                   ref, ("200", "201"), {"content": {"*/*": {"schema": {"$ref": ref}}}, "required": True}),
            "patch": self._operation(f"patch{self.prefix}{self.scope}{kind}{suffix}", "patch",
                                     f"partially update {action.name} of the specified {kind}",
                                     [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION, _FORCE], ref, ("200", "201"),
                                     {"content": {content_type: {"schema": {"$ref": self.patch_ref}}
                                                  for content_type in PATCH_CONTENT_TYPES}, "required": True}),
        }
        for operation in operations.values():
            operation["x-kubernetes-group-version-kind"] = gvk
        return {"parameters": parameters + [_PRETTY], **operations}

    def _connect_action(self, action: ActionSubresource, parameters: list[dict]) -> dict:
        """A stream (exec, attach, port-forward): ``connect`` GET (WebSocket) and POST (SPDY),
        its options as query parameters (upstream's ``connectCoreV1GetNamespacedPodExec``...)."""
        item = {"parameters": sorted(parameters + _CONNECT_QUERY_PARAMETERS[action.name], key=lambda p: p["name"])}
        for method in ("get", "post"):
            operation = self._operation(f"connect{self.prefix}{method.capitalize()}{self.scope}{self.info.kind}{action.name.capitalize()}",
                                        "connect", f"connect {method.upper()} requests to {action.name} of {self.info.kind}", [], "", ("200",))
            operation["responses"]["200"]["content"] = {"*/*": {"schema": {"type": "string"}}}
            operation["x-kubernetes-group-version-kind"] = {"group": self.info.group, "kind": action.kind, "version": self.info.version}
            item[method] = operation
        return item

    def _read_action(self, action: ActionSubresource, parameters: list[dict]) -> dict:
        """GET of a stream (a container log): a plain string, not an object."""
        operation = self._operation(f"read{self.prefix}{self.scope}{self.info.kind}{action.name.capitalize()}", "get",
                                    f"read {action.name} of the specified {self.info.kind}", [], "", ("200",))
        text = {"schema": {"type": "string"}}
        operation["responses"]["200"]["content"] = {media: text for media in (
            "application/json", "application/vnd.kubernetes.protobuf", "application/yaml", "text/plain")}
        query = _ACTION_QUERY_PARAMETERS.get(action.name, [])
        return {"parameters": sorted(parameters + [_PRETTY] + query, key=lambda p: p["name"]), "get": operation}

    def _item(self, scope_parameters: list[dict]) -> dict:
        kind = self.info.kind
        deleted_ref = self.object_ref if self.info.delete_returns_object else self.status_ref
        return {
            "parameters": [_path_parameter("name", f"name of the {kind}")] + scope_parameters + [_PRETTY],
            "get": self._operation(f"read{self.prefix}{self.scope}{kind}", "get", f"read the specified {kind}", [],
                                   self.object_ref, ("200",)),
            "put": self._write("replace", "put", f"replace the specified {kind}", "200", "201"),
            "patch": self._patch("", f"partially update the specified {kind}"),
            "delete": self._operation(f"delete{self.prefix}{self.scope}{kind}", "delete", f"delete {self.article} {kind}",
                                      _DELETE_PARAMETERS, deleted_ref, ("200", "202"), self._delete_body()),
        }

    def _subresource(self, subresource: str, scope_parameters: list[dict]) -> dict:
        kind = self.info.kind
        suffix = subresource.capitalize()
        item = {"parameters": [_path_parameter("name", f"name of the {kind}")] + scope_parameters + [_PRETTY]}
        for verb in _SUBRESOURCE_VERBS.get(subresource, ("put",)):
            if verb == "get":
                item["get"] = self._operation(f"read{self.prefix}{self.scope}{kind}{suffix}", "get",
                                              f"read {subresource} of the specified {kind}", [], self.object_ref,
                                              ("200",))
            elif verb == "put":
                item["put"] = self._write("replace", "put", f"replace {subresource} of the specified {kind}", "200",
                                          "201", suffix=suffix)
            else:
                item["patch"] = self._patch(suffix, f"partially update {subresource} of the specified {kind}")
        return item

    def _list(self, name: str) -> dict:
        operation = self._operation(f"list{self.prefix}{name}", "list",
                                    f"list or watch objects of kind {self.info.kind}", _LIST_PARAMETERS,
                                    self.list_ref, ("200",))
        operation["responses"]["200"]["content"]["application/json;stream=watch"] = {"schema": {"$ref": self.list_ref}}
        return operation

    def _write(self, verb: str, action: str, description: str, *codes: str, suffix: str = "") -> dict:
        body = {"content": {"*/*": {"schema": {"$ref": self.object_ref}}}, "required": True}
        return self._operation(f"{verb}{self.prefix}{self.scope}{self.info.kind}{suffix}", action, description,
                               [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION], self.object_ref, codes, body)

    def _patch(self, suffix: str, description: str) -> dict:
        body = {"content": {content_type: {"schema": {"$ref": self.patch_ref}}
                            for content_type in PATCH_CONTENT_TYPES}, "required": True}
        return self._operation(f"patch{self.prefix}{self.scope}{self.info.kind}{suffix}", "patch", description,
                               [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION, _FORCE], self.object_ref,
                               ("200", "201"), body)

    def _delete_body(self) -> dict:
        return {"content": {"*/*": {"schema": {"$ref": self.delete_options_ref}}}}

    def _operation(self, operation_id: str, action: str, description: str, parameters: list[dict], response_ref: str,
                   codes: tuple[str, ...], request_body: dict | None = None) -> dict:
        operation = {
            "operationId": operation_id,
            "description": description,
            "tags": [self.tag],
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": self.gvk,
            "responses": {
                **{code: {"description": _STATUS_TEXT[code],
                          "content": {"application/json": {"schema": {"$ref": response_ref}}}} for code in codes},
                "401": {"description": "Unauthorized"},
            },
        }
        if parameters:
            operation["parameters"] = parameters
        if request_body:
            operation["requestBody"] = request_body
        return operation
