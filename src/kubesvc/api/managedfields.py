"""Server-side apply and ``metadata.managedFields``: which client owns which field of an object.

Every object records, in ``metadata.managedFields``, one entry per *field manager* (the
``fieldManager`` query parameter: ``kubectl``, ``kubectl-client-side-apply``, a controller's
name...) and operation::

    {"manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "time": "2024-05-01T10:00:00Z",
     "fieldsType": "FieldsV1",
     "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}},
                  "f:spec": {"f:ports": {"k:{\\"port\\":80,\\"protocol\\":\\"TCP\\"}": {".": {}, "f:port": {}}}}}}

**Field sets.** ``fieldsV1`` is a tree of *path elements*: ``f:<name>`` selects a struct field or a
map key, ``k:{...}`` an item of a list-map by its key fields (``x-kubernetes-list-map-keys``,
written as a JSON object with sorted keys), ``v:<json>`` an item of a set by value, ``i:<n>`` a
list item by index. A node whose value is ``{}`` is owned; ``"."`` inside a node that also has
children means "this node itself is owned too". ``FieldSet`` is that tree in Python
(upstream ``fieldpath.Set``); paths print in conflicts as ``.spec.ports[port=80,protocol="TCP"].targetPort``.
The schema decides what is a leaf: scalars, and lists or maps marked atomic, are owned as a whole;
granular structs, maps, list-maps and sets are owned field by field, item by item.

**Apply** (``PATCH`` with ``application/apply-patch+yaml``) sends the manager's whole intent.
The server merges it into the live object (config wins on leaves; list-maps merge by key, sets
by value; atomic values are replaced), and the manager's Apply entry becomes exactly the fields
of the config. Fields the manager applied last time and has now dropped are *removed* from the
object, unless another manager also owns them. A field whose value the apply changes, and
which another manager owns, is a *conflict*: 409 unless ``force=true``, which moves the
ownership to the applier. Applying the same config again changes nothing, not even the time.

**Updates** (create, PUT, non-apply PATCH) are tracked as ``operation: Update`` entries: the
writer gains the fields its write added or changed, and every other manager loses them (and
loses the fields the write removed). A write that changes nothing leaves managedFields alone.

Upstream: kubernetes-sigs/structured-merge-diff (``fieldpath``: sets and their serialisation;
``typed``: ToFieldSet, Merge, Compare, RemoveItems; ``merge/update.go``: the Apply/Update
algorithm with prune and conflicts) and k8s.io/apimachinery ``util/managedfields/internal``
(decode/encode and sort of entries, manager identity, strip-meta, skip-non-applied, the timestamp
rules, the conflict Status). Deliberately not ported: version conversion (one version per kind
here), capping Update entries at 10, the last-applied-annotation helpers
(``lastAppliedManager``/``lastAppliedUpdater``) and unions.
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Iterator

from kubesvc.api.errors import bad_request, status_body
from kubesvc.api.schema import ListOf, MapOf, Obj, Scalar, Type, child
from kubesvc.util import golang

_MISSING: Any = object()  # "no such field", as opposed to a JSON null

# Defaults of list-map key fields (upstream reads them from the OpenAPI ``default`` of the key
# field). ``ports`` lists are keyed by port and protocol, and a manifest usually omits protocol.
_KEY_DEFAULTS = {"protocol": "TCP"}


# ---- path elements ---------------------------------------------------------------------------
# A path element is kept in its serialised form ('f:spec', 'k:{"port":80,"protocol":"TCP"}',
# 'v:"a"', 'i:0'): hashable, canonical, and exactly the key fieldsV1 uses.

Path = tuple[str, ...]


_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # json.dumps's, built once


def _go_json(value: Any) -> str:
    """Compact JSON as Go's encoder writes it (non-ASCII kept, ``<>&`` and U+2028/9 escaped)."""
    text = _COMPACT_JSON.encode(value)
    for char in "<>&\u2028\u2029":
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text


def _key_pe(fields: dict) -> str:
    items = sorted(fields.items())
    try:
        # keyed by type too: True, 1 and 1.0 are equal keys to Python and different JSON
        return _key_pe_of(tuple((name, type(value), value) for name, value in items))
    except TypeError:  # a key field holding a list or map: not hashable, not remembered
        return "k:" + _go_json(dict(items))


@functools.lru_cache(maxsize=4096)  # list-map items repeat their keys on every write
def _key_pe_of(items: tuple) -> str:
    return "k:" + _go_json({name: value for name, _, value in items})


def _value_pe(value: Any) -> str:
    return "v:" + _go_json(value)


@functools.lru_cache(maxsize=4096)  # the same few hundred elements, read from every stored entry
def _canonical_pe(text: str) -> str | None:
    """The canonical form of a fieldsV1 key; None for an element type we do not know (upstream
    drops those); ValueError when malformed."""
    if len(text) < 2 or text[1] != ":":
        raise ValueError(f"invalid path element {text!r}")
    kind, body = text[0], text[2:]
    if kind == "f":
        return text
    if kind == "k":
        fields = json.loads(body)
        if not isinstance(fields, dict):
            raise ValueError(f"invalid key path element {text!r}")
        return _key_pe(fields)
    if kind == "v":
        return _value_pe(json.loads(body))
    if kind == "i":
        return f"i:{int(body)}"
    return None


def _value_order(value: Any) -> tuple:
    """value.Compare: numbers < strings < booleans < lists < maps < null."""
    if isinstance(value, bool):
        return (2, value)
    if isinstance(value, (int, float)):
        return (0, value)
    if isinstance(value, str):
        return (1, value)
    if value is None:
        return (5, 0)
    return (3 if isinstance(value, list) else 4, _go_json(value))


@functools.lru_cache(maxsize=4096)
def _pe_order(pe: str) -> tuple:
    """PathElement.Compare: field names < keys < values < indexes, each in its own order."""
    kind, body = pe[0], pe[2:]
    if kind == "f":
        return (0, body)
    if kind == "k":
        return (1, tuple((name, _value_order(v)) for name, v in json.loads(body).items()))
    if kind == "v":
        return (2, _value_order(json.loads(body)))
    return (3, int(body))


def _value_text(value: Any) -> str:
    """value.ToString: strings quoted as Go's %q does, everything else as JSON."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else _go_json(value)


def _pe_text(pe: str) -> str:
    kind, body = pe[0], pe[2:]
    if kind == "f":
        return "." + body
    if kind == "k":
        return "[" + ",".join(f"{name}={_value_text(v)}" for name, v in json.loads(body).items()) + "]"
    if kind == "v":
        return f"[={_value_text(json.loads(body))}]"
    return f"[{body}]"


def _path_text(path: Path) -> str:
    """A path as conflicts print it: ``.spec.ports[port=80,protocol="TCP"].targetPort``."""
    return "".join(_pe_text(pe) for pe in path)


# ---- field sets ------------------------------------------------------------------------------


@dataclass
class FieldSet:
    """A set of field paths, as a tree (upstream ``fieldpath.Set``).

    ``members`` are the path elements owned at this level; ``children`` the subtrees below an
    element (an element can be both). Subtrees are never empty. Operations return new sets and
    may share subtrees, so a set is not modified once built.
    """

    members: set[str] = field(default_factory=set)
    children: dict[str, FieldSet] = field(default_factory=dict)

    def empty(self) -> bool:
        return not self.members and not self.children

    def insert(self, path: Path) -> None:
        node = self
        for pe in path[:-1]:
            node = node.children.setdefault(pe, FieldSet())
        node.members.add(path[-1])

    def union(self, other: FieldSet) -> FieldSet:
        children = dict(self.children)
        for pe, sub in other.children.items():
            children[pe] = children[pe].union(sub) if pe in children else sub
        return FieldSet(self.members | other.members, children)

    def difference(self, other: FieldSet) -> FieldSet:
        """Paths in self but not in other (a removed member does not take its children along)."""
        children = {}
        for pe, sub in self.children.items():
            rest = sub.difference(other.children[pe]) if pe in other.children else sub
            if not rest.empty():
                children[pe] = rest
        return FieldSet(self.members - other.members, children)

    def intersection(self, other: FieldSet) -> FieldSet:
        children = {}
        for pe, sub in self.children.items():
            if pe in other.children:
                both = sub.intersection(other.children[pe])
                if not both.empty():
                    children[pe] = both
        return FieldSet(self.members & other.members, children)

    def paths(self, prefix: Path = ()) -> Iterator[Path]:
        """Every member path: this level's members first, then each subtree (Set.Iterate)."""
        for pe in sorted(self.members, key=_pe_order):
            yield prefix + (pe,)
        for pe in sorted(self.children, key=_pe_order):
            yield from self.children[pe].paths(prefix + (pe,))


def _path_set(*paths: Path) -> FieldSet:
    fs = FieldSet()
    for path in paths:
        fs.insert(path)
    return fs


# Never owned by anyone (upstream stripMetaManager), plus the deletion marks, which upstream
# sets outside the field manager.
_UNTRACKED = _path_set(
    ("f:apiVersion",), ("f:kind",), ("f:metadata",),
    *(("f:metadata", "f:" + name) for name in (
        "name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "selfLink",
        "clusterName", "managedFields", "deletionTimestamp", "deletionGracePeriodSeconds")),
)


def to_fields_v1(fs: FieldSet) -> dict:
    """The ``fieldsV1`` JSON of a set: elements sorted as upstream, ``"."`` first in a node."""
    return _emit(fs, member=False)


def _emit(fs: FieldSet, member: bool) -> dict:
    out: dict = {".": {}} if member else {}
    for pe in sorted(fs.members | fs.children.keys(), key=_pe_order):
        out[pe] = _emit(fs.children[pe], pe in fs.members) if pe in fs.children else {}
    return out


def from_fields_v1(doc: dict) -> FieldSet:
    """Parse ``fieldsV1``; raises ValueError when it is not a valid set."""
    return _read(doc)[0]


def _read(doc: Any) -> tuple[FieldSet, bool]:
    """(the set below this node, whether the node itself is owned)."""
    if not isinstance(doc, dict):
        raise ValueError("fieldsV1 nodes must be JSON objects")
    fs, owned = FieldSet(), False
    for text, sub in doc.items():
        if text == ".":
            owned = True
            continue
        pe = _canonical_pe(text)
        if pe is None:
            continue
        grandchildren, child_owned = _read(sub)
        if child_owned:
            fs.members.add(pe)
        if not grandchildren.empty():
            fs.children[pe] = fs.children[pe].union(grandchildren) if pe in fs.children else grandchildren
    return fs, owned or fs.empty()


# ---- typed walks over JSON values ------------------------------------------------------------


def _container(schema: Type | None, value: Any) -> str | None:
    """"map" or "list" when SSA looks inside value, None when value is a leaf (scalars, atomic
    lists and maps, values that do not match their schema). No schema means untyped JSON:
    objects are granular maps, lists atomic."""
    if isinstance(value, dict):
        atomic = isinstance(schema, (Scalar, ListOf)) or (isinstance(schema, (Obj, MapOf)) and schema.map_type == "atomic")
        return None if atomic else "map"
    if isinstance(value, list) and isinstance(schema, ListOf) and schema.list_type != "atomic":
        return "list"
    return None


def _descent(schema: Type | None, *values: Any) -> str | None:
    """The container kind shared by the present values; None (compare as a leaf) if they differ,
    or if all are empty: that keeps the difference between null, absent and empty."""
    present = [v for v in values if v is not _MISSING]
    kinds = {_container(schema, v) for v in present}
    if len(kinds) != 1 or not any(present):
        return None
    return kinds.pop()


def _child_type(schema: Type | None, pe: str) -> Type | None:
    if isinstance(schema, ListOf):
        return schema.item
    return child(schema, pe[2:])


def _declared(schema: Type | None, pe: str) -> bool:
    return isinstance(schema, Obj) and pe[2:] in schema.fields


def _item_pe(schema: ListOf, index: int, item: Any) -> str:
    if schema.list_type == "set":
        return _value_pe(item)
    if isinstance(item, dict):
        keys = [k for k in schema.map_keys if k in item or k in _KEY_DEFAULTS]
        return _key_pe({k: item.get(k, _KEY_DEFAULTS.get(k)) for k in keys})
    return f"i:{index}"


def _items(schema: Type | None, value: dict | list) -> dict[str, Any]:
    """A container's children by path element (the first of duplicate list items wins)."""
    if isinstance(value, dict):
        return {"f:" + k: v for k, v in value.items()}
    items: dict[str, Any] = {}
    for index, item in enumerate(value):
        items.setdefault(_item_pe(schema, index, item), item)
    return items


def _rebuild(kind: str, items: dict[str, Any]) -> dict | list:
    return {pe[2:]: v for pe, v in items.items()} if kind == "map" else list(items.values())


def _to_set(value: Any, schema: Type | None) -> FieldSet:
    """Every field value sets (typed ToFieldSet): leaves, list items, map keys, and declared
    struct fields only when null or ``{}``."""
    fs = FieldSet()
    if value is not _MISSING:
        _collect(value, schema, (), fs)
    return fs


def _collect(value: Any, schema: Type | None, path: Path, fs: FieldSet) -> None:
    kind = _container(schema, value)
    if kind is None:
        fs.insert(path)
        return
    for pe, item in _items(schema, value).items():
        _collect(item, _child_type(schema, pe), path + (pe,), fs)
        if kind == "list" or item is None or item == {} or not _declared(schema, pe):
            fs.insert(path + (pe,))


def fields_of(obj: dict, schema: Type) -> FieldSet:
    """The fields an apply of ``obj`` would own: all it sets, except the never-tracked ones
    (apiVersion, kind, metadata.name and the other system fields, managedFields)."""
    return _to_set(obj, schema).difference(_UNTRACKED)


def _merge(live: Any, config: Any, schema: Type | None) -> Any:
    """live.Merge(config) (typed/merge.go): config wins on leaves; maps merge key by key and
    granular lists item by item."""
    if config is _MISSING:
        return live
    kind = _descent(schema, live, config)
    if live is _MISSING or kind is None:
        return config
    left, right = _items(schema, live), _items(schema, config)
    order = list({**left, **right}) if kind == "map" else _merged_order(list(left), list(right))
    merged = {pe: _merge(left.get(pe, _MISSING), right.get(pe, _MISSING), _child_type(schema, pe)) for pe in order}
    return _rebuild(kind, merged)


def _merged_order(left: list[str], right: list[str]) -> list[str]:
    """Item order of a merged list (visitListItems): live-only items keep their place, config
    items come in config order, and items in both move to where the config puts them."""
    in_left, in_right = set(left), set(right)
    shared = [pe for pe in right if pe in in_left]
    out: list[str] = []
    li = ri = si = 0
    while li < len(left) or ri < len(right):
        if li < len(left) and ri < len(right):
            if left[li] == right[ri]:
                out.append(left[li])
                li, ri, si = li + 1, ri + 1, si + 1
                continue
            if left[li] in in_right and si < len(shared) and shared[si] != left[li]:
                li += 1  # a shared item the config wants later
                continue
        if li < len(left) and left[li] not in in_right:
            out.append(left[li])
            li += 1
        elif ri < len(right):
            out.append(right[ri])
            if si < len(shared) and shared[si] == right[ri]:
                si += 1
            ri += 1
        else:
            li += 1  # a shared item already placed in config order
    return out


@dataclass
class _Diff:
    added: FieldSet = field(default_factory=FieldSet)
    modified: FieldSet = field(default_factory=FieldSet)
    removed: FieldSet = field(default_factory=FieldSet)


def _diff(old: Any, new: Any, schema: Type | None) -> _Diff:
    """old.Compare(new): which leaves were added, modified or removed; a granular map, list or
    list item that appears (disappears) is itself added (removed), with everything below it."""
    diff = _Diff()
    _compare(old, new, schema, (), diff)
    return diff


def _added(value: Any, schema: Type | None, pe: str, node: FieldSet) -> None:
    """``_compare(_MISSING, value, ...)`` at ``node``'s child ``pe``, written for the case where
    only ``added`` can grow (a create compares every field against nothing): the element
    itself and, below a non-empty container, every item, built into the tree directly."""
    node.members.add(pe)
    if value and _container(schema, value) is not None:
        below = node.children.get(pe)
        if below is None:
            below = node.children[pe] = FieldSet()
        for item_pe, item in _items(schema, value).items():
            _added(item, _child_type(schema, item_pe), item_pe, below)


def _diff_from_zero(zero: dict, new: dict, schema: Type | None) -> _Diff:
    """``_diff(zero, new)`` for a create: ``zero`` holds only empty top-level structs, so a key
    of ``new`` is added unless zero has it, and a struct zero has is added field by field when
    ``new`` gives it content. Same sets as the general walk, without its bookkeeping."""
    diff = _Diff()
    if not new or _container(schema, new) != "map":
        _compare(zero, new, schema, (), diff)
        return diff
    for pe, item in _items(schema, new).items():
        child_schema = _child_type(schema, pe)
        if pe[2:] not in zero:
            _added(item, child_schema, pe, diff.added)
        elif item == {}:
            continue  # {} as in zero: neither added nor changed
        elif isinstance(item, dict) and _container(child_schema, item) == "map":
            below = diff.added.children.setdefault(pe, FieldSet())
            for item_pe, value in _items(child_schema, item).items():
                _added(value, _child_type(child_schema, item_pe), item_pe, below)
        else:
            _compare({}, item, child_schema, (pe,), diff)
    for name in zero:
        if name not in new:
            diff.removed.insert(("f:" + name,))
    return diff


def _created_fields_v1(zero: dict, new: dict, schema: Type | None) -> dict | None:
    """The ``fieldsV1`` a create's writer takes: ``to_fields_v1`` of ``_diff_from_zero(zero,
    new)``'s added fields less ``_UNTRACKED``, built as the JSON tree directly (no FieldSet,
    no union, difference and sort of sets: a third of a Service create's CPU went there).
    None for the shapes that walk takes the general ``_compare`` for (a top-level struct
    given as something other than an object); the caller then takes the general path."""
    if not new or _container(schema, new) != "map":
        return None
    out: dict = {}
    for name in sorted(new):
        item, pe = new[name], "f:" + name
        child_schema = _child_type(schema, pe)
        if name not in zero:
            out[pe] = _added_fields_v1(item, child_schema)
        elif item == {}:
            continue
        elif isinstance(item, dict) and _container(child_schema, item) == "map":
            out[pe] = {"f:" + k: _added_field_v1(item[k], child_schema, k) for k in sorted(item)}
        else:
            return None
    _subtract_fields_v1(out, _UNTRACKED)
    return out


def _added_fields_v1(value: Any, schema: Type | None) -> dict:
    """The ``fieldsV1`` node of an element a create added (``_added``, then ``_emit``): ``{}``
    for a leaf or an empty container, else ``"."`` and every item, sorted as upstream."""
    if not value:
        return {}
    kind = _container(schema, value)
    if kind is None:
        return {}
    out: dict = {".": {}}
    if kind == "map":
        for k in sorted(value):  # field names: PathElement.Compare orders them as strings
            out["f:" + k] = _added_field_v1(value[k], schema, k)
    else:
        items = _items(schema, value)
        for pe in sorted(items, key=_pe_order):
            out[pe] = _added_fields_v1(items[pe], _child_type(schema, pe))
    return out


def _added_field_v1(value: Any, schema: Type | None, name: str) -> dict:
    """``_added_fields_v1`` of the field ``name`` of a map of ``schema``: a scalar is a leaf
    whatever its schema, so only an object or a list looks its schema up."""
    if value and isinstance(value, (dict, list)):
        return _added_fields_v1(value, _child_type(schema, "f:" + name))
    return {}


def _subtract_fields_v1(node: dict, paths: FieldSet) -> None:
    """``FieldSet.difference`` on an emitted ``fieldsV1`` tree, in place: a member removed keeps
    its children (``"."`` goes), a leaf member goes, and a node left with nothing goes; a
    member whose children all went becomes a leaf (``{}``)."""
    for pe in paths.members:
        sub = node.get(pe)
        if sub is None:
            continue
        if "." in sub:
            del sub["."]
        elif not sub:
            del node[pe]
    for pe, below in paths.children.items():
        sub = node.get(pe)
        if not sub:
            continue
        _subtract_fields_v1(sub, below)
        if not sub:
            del node[pe]
        elif len(sub) == 1 and "." in sub:
            node[pe] = {}


def _compare(old: Any, new: Any, schema: Type | None, path: Path, diff: _Diff) -> None:
    if type(old) is type(new) and old == new:
        # equal values add, change and remove nothing at any depth; Python's equality (C speed)
        # decides it for the parts a write leaves alone (a status write's spec and metadata)
        # without the walk. Below a container of one type, equal values differ only as bool,
        # int and float may (True == 1 == 1.0): decoded against the kind's schema, a field holds
        # one of them, never a mix
        return
    kind = _descent(schema, old, new)
    if kind is not None:
        left = _items(schema, old) if old is not _MISSING else {}
        right = _items(schema, new) if new is not _MISSING else {}
        for pe in {**left, **right}:
            _compare(left.get(pe, _MISSING), right.get(pe, _MISSING), _child_type(schema, pe), path + (pe,), diff)
    if old is _MISSING:
        diff.added.insert(path)
    elif new is _MISSING:
        diff.removed.insert(path)
    elif kind is None and old != new:
        diff.modified.insert(path)


def _remove(value: Any, paths: FieldSet, schema: Type | None) -> Any:
    """value without the fields and items ``paths`` names as members (typed RemoveItems); a map
    or list left empty disappears (_MISSING), as a null would when upstream decodes it."""
    kind = _container(schema, value)
    if kind is None or not value:
        return value
    kept = {}
    for pe, item in _items(schema, value).items():
        if pe in paths.members:
            continue
        if pe in paths.children:
            item = _remove(item, paths.children[pe], _child_type(schema, pe))
            if item is _MISSING:
                continue
        kept[pe] = item
    return _rebuild(kind, kept) if kept else _MISSING


def _ensure_named(fs: FieldSet, schema: Type | None) -> FieldSet:
    """fs, where a declared struct field with owned fields below it is owned itself
    (Set.EnsureNamedFieldsAreMembers), so that pruning may remove whole struct fields."""
    members = set(fs.members)
    children = {}
    for pe, sub in fs.children.items():
        if _declared(schema, pe):
            members.add(pe)
        children[pe] = _ensure_named(sub, _child_type(schema, pe))
    return FieldSet(members, children)


def _prune(merged: dict, schema: Type, last: FieldSet, owned: FieldSet) -> dict:
    """Remove what the applier owned last time and nobody (its new config included) owns now
    (merge/update.go prune, addBackOwnedItems, addBackDanglingItems)."""
    last, owned = _ensure_named(last, schema), _ensure_named(owned, schema)

    def fields(value: Any) -> FieldSet:
        return _ensure_named(_to_set(value, schema), schema)

    merged_set = fields(merged)
    naive = _remove(merged, last, schema)
    unowned = _remove(merged, merged_set.difference(fields(naive).union(owned)), schema)
    pruned = _remove(merged, merged_set.difference(fields(unowned)).intersection(last), schema)
    return {} if pruned is _MISSING else pruned


# ---- managedFields entries -------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    manager: str
    operation: str  # "Apply" | "Update"
    api_version: str
    subresource: str
    parsed: FieldSet | None  # None: an entry of a stored object, its fieldsV1 read when first asked
    time: str | None
    wire: dict | None = None  # the entry as read, written back as long as nothing changed

    @functools.cached_property
    def fields(self) -> FieldSet:
        if self.parsed is not None:
            return self.parsed
        assert self.wire is not None
        return from_fields_v1(self.wire.get("fieldsV1", {}))

    def top_level(self) -> set[str]:
        """The first path elements of the entry's fields, read from fieldsV1 as long as the
        set itself has not been parsed: whether it can meet a write's paths at all. Every
        element in fieldsV1 is owned or has owned fields below it, so these are exactly the
        first elements of the parsed set's paths (empty: the set is empty)."""
        if self.parsed is not None or "fields" in self.__dict__:
            return self.fields.members | self.fields.children.keys()
        assert self.wire is not None
        return {pe for text in self.wire.get("fieldsV1", {}) if text != "." and (pe := _canonical_pe(text)) is not None}

    @property
    def identity(self) -> str:
        return _identity(self.manager, self.operation, self.api_version, self.subresource)

    def describe(self) -> str:
        """How conflicts name the manager (printManager)."""
        text = _value_text(self.manager)
        if self.subresource:
            text += f" with subresource {_value_text(self.subresource)}"
        return text + (f" using {self.api_version}" if self.operation == "Update" else "")


Managed = dict[str, _Entry]  # by identity


@functools.lru_cache(maxsize=1024)  # a handful of managers write most objects
def _identity(manager: str, operation: str, api_version: str, subresource: str) -> str:
    """Upstream's manager identifier (BuildManagerIdentifier): one entry per manager, operation,
    subresource and, for updates only, apiVersion."""
    ident = {"manager": manager, "operation": operation,
             "apiVersion": api_version if operation == "Update" else "", "subresource": subresource}
    return _go_json({k: v for k, v in ident.items() if v})


def _decode(entries: Any, *, stored: bool = False) -> Managed:
    """Read managedFields (DecodeManagedFields); ValueError when malformed. ``stored``: entries
    of an object read from storage, which this server wrote only after reading them here (or
    built them): their fields sets are read when first needed, not all of them on every write
    (a status write meets only the status owner's)."""
    if not isinstance(entries, list):
        raise ValueError("managedFields must be a list")
    managed: Managed = {}
    for i, wire in enumerate(entries):
        entry = _stored_entry(wire) if stored else _decode_entry(i, wire)
        managed[entry.identity] = entry
    return managed


def _stored_entry(wire: dict) -> _Entry:
    return _Entry(wire.get("manager") or "", wire["operation"], wire["apiVersion"], wire.get("subresource") or "",
                  None, wire.get("time"), wire)


def _decode_entry(i: int, wire: Any) -> _Entry:
    if not isinstance(wire, dict):
        raise ValueError(f"managed fields entry {i} must be an object")
    for key in ("manager", "operation", "apiVersion", "time", "fieldsType", "subresource"):
        if wire.get(key) is not None and not isinstance(wire[key], str):
            raise ValueError(f"{key} of managed fields entry {i} must be a string")
    if wire.get("operation") not in ("Apply", "Update"):
        raise ValueError("operation must be `Apply` or `Update`")
    if not wire.get("apiVersion"):
        raise ValueError("apiVersion must not be empty")
    fields_type = wire.get("fieldsType", "")
    if not fields_type:
        raise ValueError(f"missing fieldsType in managed fields entry {i}")
    if fields_type != "FieldsV1":
        raise ValueError(f"invalid fieldsType {json.dumps(fields_type)} in managed fields entry {i}")
    if wire.get("time") is not None:
        golang.parse_rfc3339(wire["time"])
    try:
        fields = from_fields_v1(wire.get("fieldsV1", {}))
    except ValueError as e:
        raise ValueError(f"error decoding versioned set of managed fields entry {i}: {e}") from None
    return _Entry(wire.get("manager") or "", wire["operation"], wire["apiVersion"], wire.get("subresource") or "",
                  fields, wire.get("time"), wire)


def _managed_of(obj: dict | None, *, stored: bool = False) -> Managed:
    """obj's managedFields; none when absent or malformed (upstream resets invalid ones).
    ``stored``: obj is the live object (see _decode)."""
    entries = (obj or {}).get("metadata", {}).get("managedFields")
    try:
        return _decode(entries, stored=stored) if entries is not None else {}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


def validate_managed_fields(obj: dict) -> str | None:
    """Why ``metadata.managedFields`` of obj is malformed, or None when it is fine or absent."""
    entries = obj.get("metadata", {}).get("managedFields")
    try:
        if entries is not None:
            _decode(entries)
    except ValueError as e:
        return str(e)
    return None


@functools.lru_cache(maxsize=1024)  # the entries of one object keep their times across writes
def _seconds(time: str | None) -> int:
    return int(golang.parse_rfc3339(time).timestamp()) if time else 0


def _wire(entry: _Entry) -> dict:
    if entry.wire is not None:
        return entry.wire
    wire: dict[str, Any] = {"manager": entry.manager, "operation": entry.operation, "apiVersion": entry.api_version}
    if entry.time:
        wire["time"] = entry.time
    wire["fieldsType"] = "FieldsV1"
    wire["fieldsV1"] = to_fields_v1(entry.fields)
    if entry.subresource:
        wire["subresource"] = entry.subresource
    return {k: v for k, v in wire.items() if v != ""}


def _encode(managed: Managed) -> list[dict]:
    """managedFields in upstream order: Apply before Update, then oldest first, then by manager,
    apiVersion and subresource (sortEncodedManagedFields)."""
    # an entry read from an object is copied (it may be shared with that object), all but its
    # fieldsV1 tree, which nothing changes in place (a changed set is emitted anew by _wire);
    # one built here by _wire is new already
    entries = [dict(e.wire) if e.wire is not None else _wire(e) for e in managed.values()]
    if len(entries) < 2:
        return entries  # a create's one entry: no times to parse for a sort
    return sorted(entries, key=lambda w: (w["operation"], _seconds(w.get("time")), w.get("manager", ""),
                                          w["apiVersion"], w.get("subresource", "")))


def _store(obj: dict, managed: Managed) -> None:
    if managed:
        obj.setdefault("metadata", {})["managedFields"] = _encode(managed)
    elif isinstance(obj.get("metadata"), dict):
        obj["metadata"].pop("managedFields", None)


def _disown(managed: Managed, paths: FieldSet) -> Managed:
    """Every entry without ``paths``; entries left (or sent) empty are dropped."""
    out: Managed = {}
    first = paths.members | paths.children.keys()
    for ident, entry in managed.items():
        top = entry.top_level()
        if not top:
            continue  # an empty set
        if top.isdisjoint(first) or entry.fields.intersection(paths).empty():
            out[ident] = entry
        elif not (rest := entry.fields.difference(paths)).empty():
            out[ident] = replace(entry, parsed=rest, wire=None)
    return out


def _content(obj: dict, *, keep_status: bool = False) -> dict:
    """obj as field tracking sees it: no managedFields and, on main-resource writes, no status
    (upstream resets status there for kinds with a status subresource)."""
    out = {k: v for k, v in obj.items() if keep_status or k != "status"}
    if isinstance(out.get("metadata"), dict):
        out["metadata"] = {k: v for k, v in out["metadata"].items() if k != "managedFields"}
    return out


def _zero(schema: Type) -> dict:
    """What a create starts from: Go's zero object, whose top-level structs (metadata, spec,
    status) exist but are empty, so a creator owns ``spec.x`` but not ``spec`` itself."""
    fields = schema.fields if isinstance(schema, Obj) else {}
    return {name: {} for name, f in fields.items() if isinstance(f.type, Obj)}


# ---- updates ---------------------------------------------------------------------------------


def _record_update(managed: Managed, old: dict, new: dict, *, manager: str, schema: Type,
                   api_version: str, subresource: str, now: str, from_zero: bool = False) -> Managed:
    """Updater.Update plus managedFieldsUpdater: the writer takes what it added or changed,
    everyone loses what the write changed or removed; the writer's time moves only when it
    took something."""
    diff = _diff_from_zero(old, new, schema) if from_zero else _diff(old, new, schema)
    changed = diff.added.union(diff.modified)
    managed = _disown(managed, changed.union(diff.removed))
    taken = changed.difference(_UNTRACKED)
    if taken.empty():
        return managed
    entry = _Entry(manager, "Update", api_version, subresource, taken, now)
    previous = managed.get(entry.identity)
    if previous is not None:
        entry = replace(entry, parsed=taken.union(previous.fields))
    return {**managed, entry.identity: entry}


def _managed_for_update(old: dict | None, new: dict, subresource: str) -> Managed:
    """Whose entries an update starts from (decodeManagedFields): the request's, if it sets valid
    ones (that is how clients edit managedFields), else the live object's; ``[]`` or ``[{}]``
    resets them. Subresource writes cannot change managedFields."""
    if subresource:
        return _managed_of(old, stored=True)
    entries = new.get("metadata", {}).get("managedFields")
    if entries == [] or entries == [{}]:
        return {}
    if old is not None and entries == old.get("metadata", {}).get("managedFields"):
        return _managed_of(old, stored=True)  # the live object's, as a patch leaves them
    return _managed_of(new) or _managed_of(old, stored=True)


def track_update(old: dict | None, new: dict, *, manager: str, schema: Type, api_version: str, now: str,
                 subresource: str = "") -> None:
    """Record a create (old None), update or non-apply patch by ``manager`` in
    ``new["metadata"]["managedFields"]``, as upstream's field manager does for Operation Update.

    An update of an object that tracks no fields stays untracked (skipNonAppliedManager).
    """
    if old is None and not subresource and isinstance(new.get("metadata"), dict) and "managedFields" not in new["metadata"]:
        fields = _created_fields_v1(_content(_zero(schema)), _content(new), schema)
        if fields is not None:  # the usual create: the writer owns everything it set, one entry
            if fields:
                wire = {"manager": manager, "operation": "Update", "apiVersion": api_version, "time": now,
                        "fieldsType": "FieldsV1", "fieldsV1": fields}
                new["metadata"]["managedFields"] = [{k: v for k, v in wire.items() if v}]
            return
    managed = _managed_for_update(old, new, subresource)
    if managed or old is None:
        keep_status = bool(subresource)
        before = _content(old if old is not None else _zero(schema), keep_status=keep_status)
        managed = _record_update(managed, before, _content(new, keep_status=keep_status), manager=manager,
                                 schema=schema, api_version=api_version, subresource=subresource, now=now,
                                 from_zero=old is None)
    _store(new, managed)


# ---- apply -----------------------------------------------------------------------------------


class ApplyConflict(Exception):
    """An apply would change fields other managers own (merge.Conflicts).

    ``conflicts`` holds (manager, path) pairs; the manager is written as upstream prints it:
    ``"kubectl-client-side-apply" using v1`` for an Update entry, ``"kubectl"`` for an Apply one.
    """

    def __init__(self, conflicts: list[tuple[str, str]]):
        self.conflicts = conflicts
        super().__init__(self.message)

    @property
    def message(self) -> str:
        if len(self.conflicts) == 1:
            manager, path = self.conflicts[0]
            return f"Apply failed with 1 conflict: conflict with {manager}: {path}"
        lines = []
        for manager in sorted({m for m, _ in self.conflicts}):
            lines.append(f"conflicts with {manager}:")
            lines.extend(f"- {path}" for m, path in self.conflicts if m == manager)
        return f"Apply failed with {len(self.conflicts)} conflicts: " + "\n".join(lines)

    def status(self) -> dict:
        causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {manager}", "field": path}
                  for manager, path in self.conflicts]
        return status_body(409, "Conflict", self.message, {"causes": causes})


def _settle_others(others: Managed, live: dict, merged: dict, schema: Type, force: bool) -> Managed:
    """Other managers after the apply (Updater.update): a field the apply adds or changes and
    another manager owns is a conflict, unless forced, when that manager loses it; every
    manager loses what the apply removed."""
    diff = _diff(live, merged, schema)
    changed = diff.added.union(diff.modified)
    conflicts = [(others[ident].describe(), _path_text(path))
                 for ident in sorted(others) for path in others[ident].fields.intersection(changed).paths()]
    if conflicts and not force:
        raise ApplyConflict(conflicts)
    return _disown(others, changed.union(diff.removed))


def _applied_entry(last: _Entry | None, manager: str, api_version: str, fields: FieldSet,
                   changed: bool, now: str) -> _Entry | None:
    """The applier's entry: exactly its config's fields. Its time moves only when the apply
    changed the object (managedFieldsUpdater.Apply); a manager whose first apply changes nothing
    gets no time at all, as upstream."""
    if fields.empty():
        return None
    if last is not None and not changed and last.fields == fields and last.api_version == api_version:
        return last
    time = now if changed else (last.time if last else None)
    return _Entry(manager, "Apply", api_version, "", fields, time)


def apply(live: dict | None, config: dict, *, manager: str, force: bool, schema: Type, api_version: str,
          now: str) -> dict:
    """Server-side apply of ``config`` by ``manager`` to ``live`` (None: the object is created).

    Returns the new object with its managedFields; when nothing changes this is a copy of
    ``live``. Raises ApplyConflict, or a 400 StatusError when config carries managedFields.
    ``status`` in config is ignored (main-resource writes do not set it).
    """
    if config.get("metadata", {}).get("managedFields") is not None:
        raise bad_request("metadata.managedFields must be nil")
    live_obj = _content(live) if live is not None else {}
    config_obj = _content(config)
    managed = _managed_of(live, stored=True)
    if live is not None and not managed:
        # skipNonAppliedManager: the fields of an untracked object go to "before-first-apply"
        managed = _record_update({}, _content(_zero(schema)), live_obj, manager="before-first-apply",
                                 schema=schema, api_version=api_version, subresource="", now=now)

    ident = _identity(manager, "Apply", api_version, "")
    last = managed.get(ident)
    others = {i: e for i, e in managed.items() if i != ident}
    applied = _to_set(config_obj, schema)
    merged = _merge(live_obj, config_obj, schema)
    if last is not None:
        owned = applied
        for other in others.values():
            owned = owned.union(other.fields)
        merged = _prune(merged, schema, last.fields, owned)
    others = _settle_others(others, live_obj, merged, schema, force)

    changed = merged != live_obj
    entry = _applied_entry(last, manager, api_version, applied.difference(_UNTRACKED), changed, now)
    managed = {**others, ident: entry} if entry is not None else others
    if changed:
        result = copy.deepcopy(merged)
        if live is not None and "status" in live:
            result["status"] = copy.deepcopy(live["status"])
    else:
        result = copy.deepcopy(live) if live is not None else {}
    _store(result, managed)
    return result
