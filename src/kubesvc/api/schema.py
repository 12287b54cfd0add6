"""One description of every served type, from which everything structural is derived.

Kubernetes objects travel and are stored as JSON trees (plain dicts). What upstream gets from
Go struct tags and generated OpenAPI, we get from this small schema language:

* strict decoding (``fieldValidation=Strict``: unknown field -> 400, wrong JSON type -> 400),
* the OpenAPI v3 documents (``/openapi/v3/...``) that kubectl needs for validation and explain,
* strategic-merge-patch merge keys and strategies (``x-kubernetes-patch-merge-key``),
* server-side-apply list semantics (``x-kubernetes-list-type`` / ``x-kubernetes-list-map-keys``).

A schema is a tree of ``Scalar``, ``Obj``, ``ListOf``, ``MapOf`` and ``Any_`` nodes. ``Obj``
nodes have an OpenAPI component name (``io.k8s.api.core.v1.ServiceSpec``) so they become
``$ref``-linked components, as upstream's are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Union

ScalarKind = Literal["string", "integer", "boolean", "number", "int-or-string", "date-time", "quantity", "byte"]


@dataclass(frozen=True)
class Scalar:
    kind: ScalarKind
    format: str = ""  # int32 / int64 / byte / date-time
    enum: tuple[str, ...] = ()


@dataclass(frozen=True)
class Any_:
    """Any JSON (x-kubernetes-preserve-unknown-fields); used where we do not model deeper."""

    description: str = ""


@dataclass(frozen=True)
class MapOf:
    """A JSON object with arbitrary keys (labels, selectors). SSA treats it as a granular map
    (each key owned on its own) unless upstream marks it ``+mapType=atomic``
    (``x-kubernetes-map-type``): then it is one value, owned, conflicted on and replaced whole
    (ServiceSpec.selector). Strategic merge patch merges both kinds key by key, as upstream's."""

    value: "Type"
    map_type: Literal["granular", "atomic"] = "granular"


@dataclass(frozen=True)
class ListOf:
    item: "Type"
    # server-side apply (x-kubernetes-list-type): atomic | set | map
    list_type: Literal["atomic", "set", "map"] = "atomic"
    map_keys: tuple[str, ...] = ()  # x-kubernetes-list-map-keys, for list_type "map"
    # strategic merge patch (x-kubernetes-patch-strategy / -merge-key); "" = replace wholesale
    patch_strategy: str = ""  # "merge", "merge,retainKeys", "retainKeys"
    patch_merge_key: str = ""


@dataclass(frozen=True)
class Field:
    type: "Type"
    description: str = ""
    # SMP strategy for non-list fields ("retainKeys" on some unions); lists carry theirs on ListOf
    patch_strategy: str = ""


@dataclass(eq=False)
class Obj:
    """A struct type. ``fields`` may be filled in after creation to allow recursive types."""

    name: str  # OpenAPI component name, e.g. io.k8s.api.core.v1.Service
    fields: dict[str, Field] = field(default_factory=dict)
    description: str = ""
    required: tuple[str, ...] = ()
    # x-kubernetes-map-type: "atomic" makes SSA replace it whole (e.g. LabelSelector parts)
    map_type: Literal["granular", "atomic"] = "granular"
    # top-level kinds: (group, version, kind) for x-kubernetes-group-version-kind
    gvk: tuple[str, str, str] | None = None

    def __hash__(self) -> int:
        return id(self)


Type = Union[Scalar, Obj, ListOf, MapOf, Any_]

STRING = Scalar("string")
INT32 = Scalar("integer", "int32")
INT64 = Scalar("integer", "int64")
BOOL = Scalar("boolean")
NUMBER = Scalar("number", "double")
INT_OR_STRING = Scalar("int-or-string", "int-or-string")
TIME = Scalar("date-time", "date-time")
QUANTITY = Scalar("quantity")
BYTES = Scalar("byte", "byte")
STRING_MAP = MapOf(STRING)


def F(type_: Type, description: str = "", **kw) -> Field:
    return Field(type_, description, **kw)


def walk(schema: Type, visit: Callable[[Obj], None]) -> None:
    """Visit every Obj reachable from ``schema`` once (handles recursive schemas)."""
    seen: set[int] = set()

    def go(node: Type) -> None:
        if isinstance(node, Obj):
            if id(node) in seen:
                return
            seen.add(id(node))
            visit(node)
            for f in node.fields.values():
                go(f.type)
        elif isinstance(node, ListOf):
            go(node.item)
        elif isinstance(node, MapOf):
            go(node.value)

    go(schema)


def child(schema: Type | None, key: str) -> Type | None:
    """The schema of ``obj[key]`` for an Obj or MapOf schema; None when unknown."""
    if isinstance(schema, Obj):
        f = schema.fields.get(key)
        return f.type if f else None
    if isinstance(schema, MapOf):
        return schema.value
    return None
