"""PATCH bodies: JSON Patch, JSON Merge Patch and strategic merge patch.

A PATCH request carries a *description of a change*. Its Content-Type says which of three
languages describes it (server-side apply, ``application/apply-patch+yaml``, is a fourth, handled
elsewhere). The HTTP handler upstream is ``k8s.io/apiserver/pkg/endpoints/handlers/patch.go``.

**JSON Patch** (``application/json-patch+json``, RFC 6902) is a list of operations, applied in order
(``add``, ``remove``, ``replace``, ``move``, ``copy`` and ``test``), each addressing a location
with a JSON Pointer (RFC 6901: ``/spec/ports/0/port``, where ``~1`` stands for ``/``, ``~0`` for
``~``, and ``-`` for "past the end of an array"). It is all or nothing: if one operation fails,
nothing changes. kube-apiserver delegates to ``gopkg.in/evanphx/json-patch.v4`` (patch.go), and
its error texts are copied here (``replace operation does not apply: doc is missing key: …``).
Upstream answers these failures with a 422 whose message is only the generic "the server rejected
our request due to an error in our request". Here the message says what failed.

Why our own RFC 6902 code and not the ``jsonpatch`` library (installed, 1.33): clients and the
tests compare evanphx's texts, which ``jsonpatch`` cannot give. Its exceptions carry its own
words (``can't replace a non-existent object 'x'`` for evanphx's ``replace operation does not
apply: doc is missing key: /metadata/labels/x``; ``member 'baz' not found in {...}``, which also
prints the document, for ``add operation does not apply: doc is missing path: "/baz/bat"``;
``Unknown operation 'frobnicate'`` for ``Unexpected kind: frobnicate``) and not enough structure
to map back (missing *key* and missing *path* are one exception class), and it refuses the
negative array indices (``/spec/ports/-1``) that evanphx v4, and so kube-apiserver, accepts.

**JSON Merge Patch** (``application/merge-patch+json``, RFC 7386) is a partial document: objects
merge recursively, ``null`` deletes a key, and anything else, arrays included, replaces the
target. ``kubectl label``/``annotate`` and ``kubectl patch --type merge`` send it. Upstream uses
evanphx ``merge.go``.

**Strategic merge patch** (``application/strategic-merge-patch+json``; upstream
``k8s.io/apimachinery/pkg/util/strategicpatch/patch.go``, ``StrategicMergeMapPatch``) is a merge
patch that knows the *type* of each field. A list is merged element by element only if its
schema asks for it (``x-kubernetes-patch-strategy: merge``, here ``ListOf.patch_strategy``):
* with a merge key (``patch_merge_key``: Service ports by ``port``, containers by ``name``), the
  patch element and the live element with the same key value are merged as maps;
* without one, it is a list of scalars merged as a set (``metadata.finalizers``).
Every other list is replaced whole. Maps (``MapOf``, ``Obj``) merge recursively and ``null``
deletes. Where the schema knows nothing (``Any_`` or no schema) this is plain JSON-merge
behaviour. The patch can also carry *directives*, which are consumed and never stored:

* ``"$patch": "replace"`` in a map: the map becomes the rest of that patch map.
  ``"$patch": "delete"``: the map is removed. ``"$patch": "merge"``: the default, stated.
* In a merge list, ``{"$patch": "delete", <key>: v}`` removes the elements whose key is ``v``.
  An element ``{"$patch": "replace"}`` makes the list exactly the patch's other elements.
* ``"$setElementOrder/<list>": [...]`` gives the final order of the list's elements, identified
  by merge key. ``kubectl apply`` (client side) always sends it next to the list it changes.
* ``"$deleteFromPrimitiveList/<list>": [...]`` removes these scalars from a set-merged list.
* ``"$retainKeys": [...]`` clears every key of the map not listed (the ``retainKeys`` strategy of
  union types such as a Deployment's ``strategy``). Every key the patch sets must be listed.

Without ``$setElementOrder``, merged lists are ordered as upstream orders them
(``normalizeElementOrder``): the patch's elements in patch order, with the live-only elements
slotted in where they stood relative to them. New elements therefore come *first*.

Deliberate departures from upstream, each because upstream is lenient, leaky or stricter than
it needs to be:
* JSON Patch ``replace`` of a missing object member and ``test`` of a missing location fail,
  as RFC 6902 says. evanphx v4 turns the first into an ``add`` and lets the second pass when the
  test value is ``null``. Negative array indices (``/ports/-1``) are accepted, as upstream does.
* Strategic merge patch values that land where nothing existed, or that replace a value whole,
  are merged into an empty value, not copied in. So nested ``null``s and directives never reach
  storage (upstream copies them verbatim). ``$patch: delete`` on a map removes the key, where
  upstream leaves ``{}`` that Go's ``omitempty`` then drops. ``$deleteFromPrimitiveList`` on a
  missing list changes nothing; upstream would store the deletion list as the value.
  ``$patch: merge`` is accepted as the default it names; upstream rejects it.
* Patch-content errors that upstream leaves unclassified, and so answers with a 500 (an unknown
  ``$patch`` value, a list element without its merge key, an element order that contradicts
  ``$setElementOrder``), are a 422 ``Invalid`` here, because they are the client's mistake.
  Errors upstream classifies keep upstream's code and text.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from kubesvc.api.decode import json_kind
from kubesvc.api.errors import StatusError
from kubesvc.api.schema import ListOf, Type, child

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
PATCH_CONTENT_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)

MAX_JSON_PATCH_OPERATIONS = 10000  # maxJSONPatchOperations in handlers/patch.go


class PatchError(StatusError):
    """A patch that cannot be decoded (400), is too long (413), cannot be applied (422), or whose
    Content-Type is not a patch type (415). ``code``, ``reason`` and ``str()`` give the Status."""


def _bad_request(message: str) -> PatchError:
    return PatchError(400, "BadRequest", message)


def _invalid(message: str) -> PatchError:
    return PatchError(422, "Invalid", message)


def apply_patch(content_type: str, original: dict, body: bytes, schema: Type | None, *, in_place: bool = False) -> dict:
    """Apply a PATCH request body of the given Content-Type to ``original`` (left unchanged,
    unless ``in_place``: the caller's private copy, which the patch may then reuse and change
    instead of copying it first; on an error it is left half patched)."""
    media_type = content_type.split(";", 1)[0].strip()
    if media_type not in PATCH_CONTENT_TYPES:
        raise PatchError(415, "UnsupportedMediaType",
                         "the body of the request was in an unknown format - accepted media types include: "
                         + ", ".join(PATCH_CONTENT_TYPES))
    document = _decode(body)
    if media_type == JSON_PATCH:
        return json_patch(original, document, in_place=in_place)
    if not isinstance(document, dict):
        raise _undecodable(document, "map[string]interface {}")
    if media_type == MERGE_PATCH:
        return json_merge_patch(original, document, in_place=in_place)
    return strategic_merge_patch(original, document, schema, in_place=in_place)


def _decode(body: bytes) -> Any:
    try:
        return json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise _bad_request(f"error decoding patch: {exc}") from None


def _reject_constant(name: str) -> None:
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value")


def _undecodable(value: Any, go_type: str) -> PatchError:
    """The 400 for a patch document of the wrong JSON type, worded as Go's decoder words it."""
    return _bad_request(f"error decoding patch: json: cannot unmarshal {json_kind(value)} "
                        f"into Go value of type {go_type}")


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality: numbers compare by value, but ``true`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_json_equal, a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


# --- JSON Merge Patch (RFC 7386) -----------------------------------------------------------------


def json_merge_patch(original: Any, patch: Any, *, in_place: bool = False) -> Any:
    """RFC 7386: merge ``patch`` into a copy of ``original`` (into ``original`` itself if
    ``in_place``, which also takes the patch's values without copying them: both are the
    caller's to give away). A non-object patch replaces it."""
    if in_place:  # the caller's copy, and apply_patch's own patch document: both reused
        return _merge_patch(original, patch, copy_values=False)
    return _merge_patch(copy.deepcopy(original), patch)


def _merge_patch(target: Any, patch: Any, copy_values: bool = True) -> Any:
    """RFC 7386 ``MergePatch(Target, Patch)``, reusing (and mutating) ``target``; the patch's
    values are copied into it unless ``copy_values`` is False (a patch used once)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch) if copy_values else patch
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _merge_patch(target.get(key), value, copy_values)
    return target


# --- JSON Patch (RFC 6902) -----------------------------------------------------------------------

_ARRAY_INDEX = re.compile(r"-?[0-9]+")


def json_patch(original: dict, operations: list, *, in_place: bool = False) -> dict:
    """RFC 6902: apply ``operations`` in order to a copy of ``original`` (to ``original`` itself
    if ``in_place``); all or nothing, the copy's way."""
    _check_operations(operations)
    doc: Any = original if in_place else copy.deepcopy(original)
    for operation in operations:
        kind = operation.get("op")
        apply = _OPERATIONS.get(kind) if isinstance(kind, str) else None
        if apply is None:
            raise _invalid(f"Unexpected kind: {kind if isinstance(kind, str) else 'unknown'}")
        doc = apply(doc, operation)
    if not isinstance(doc, dict):
        raise _invalid(f"the patched document is a JSON {json_kind(doc)}, not an object")
    return doc


def _check_operations(operations: Any) -> None:
    if not isinstance(operations, list):
        raise _undecodable(operations, "[]handlers.jsonPatchOp")
    for operation in operations:
        if not isinstance(operation, dict):
            raise _undecodable(operation, "handlers.jsonPatchOp")
    if len(operations) > MAX_JSON_PATCH_OPERATIONS:
        raise PatchError(413, "RequestEntityTooLarge",
                         f"Request entity too large: The allowed maximum operations in a JSON patch is "
                         f"{MAX_JSON_PATCH_OPERATIONS}, got {len(operations)}")


def _member(operation: dict, name: str, kind: str) -> Any:
    """A required member of an operation object (``path``, ``from`` or ``value``)."""
    if name not in operation or (name != "value" and not isinstance(operation[name], str)):
        raise _invalid(f"{kind} operation failed to decode {name}: missing value")
    return operation[name]


def _tokens(pointer: str) -> list[str] | None:
    """The RFC 6901 reference tokens of a JSON Pointer, or None if it is not one."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        return None
    return [token.replace("~1", "/").replace("~0", "~") for token in pointer[1:].split("/")]


def _array_index(token: str, size: int) -> int | None:
    """The index token names in an array of ``size`` slots (negative counts from the end), if valid."""
    if not _ARRAY_INDEX.fullmatch(token):
        return None
    index = int(token)
    if index < 0:
        index += size
    return index if 0 <= index < size else None


def _existing(container: dict | list, token: str) -> str | int | None:
    """The key or index of the member ``token`` names in ``container``, if that member exists."""
    if isinstance(container, dict):
        return token if token in container else None
    return _array_index(token, len(container))


def _parent(doc: Any, tokens: list[str] | None) -> dict | list | None:
    """The container that holds the pointer's last token, or None when the pointer has no parent
    (it is the whole document or not a pointer) or the path to the parent does not exist."""
    if not tokens:
        return None
    node = doc
    for token in tokens[:-1]:
        slot = _existing(node, token) if isinstance(node, (dict, list)) else None
        if slot is None:
            return None
        node = node[slot]
    return node if isinstance(node, (dict, list)) else None


_ABSENT = object()


def _get(doc: Any, pointer: str) -> Any:
    """The value at ``pointer``, or ``_ABSENT``."""
    tokens = _tokens(pointer)
    if tokens == []:
        return doc
    parent = _parent(doc, tokens)
    slot = None if parent is None else _existing(parent, tokens[-1])
    return _ABSENT if slot is None else parent[slot]


def _insert(doc: Any, path: str, value: Any, kind: str) -> Any:
    """RFC 6902 "add" of ``value`` at ``path``, shared by add, move and copy; returns the document."""
    tokens = _tokens(path)
    if tokens == []:
        return value
    parent = _parent(doc, tokens)
    if parent is None:
        raise _invalid(f'{kind} operation does not apply: doc is missing path: "{path}": missing value')
    token = tokens[-1]
    if isinstance(parent, dict):
        parent[token] = value
        return doc
    index = len(parent) if token == "-" else _array_index(token, len(parent) + 1)
    if index is None:
        raise _invalid(f"error in {kind} for path: '{path}': Unable to access invalid index: {token}: invalid index referenced")
    parent.insert(index, value)
    return doc


def _detach(doc: Any, path: str, kind: str) -> Any:
    """Remove and return the value at ``path``, shared by remove and move."""
    tokens = _tokens(path)
    parent = _parent(doc, tokens)
    if parent is None:
        raise _invalid(f'{kind} operation does not apply: doc is missing path: "{path}": missing value')
    token = tokens[-1]
    slot = _existing(parent, token)
    if slot is None:
        why = (f"Unable to remove nonexistent key: {token}: missing value" if isinstance(parent, dict)
               else f"Unable to access invalid index: {token}: invalid index referenced")
        raise _invalid(f"error in {kind} for path: '{path}': {why}")
    return parent.pop(slot)


def _op_add(doc: Any, operation: dict) -> Any:
    value = copy.deepcopy(_member(operation, "value", "add"))
    return _insert(doc, _member(operation, "path", "add"), value, "add")


def _op_remove(doc: Any, operation: dict) -> Any:
    _detach(doc, _member(operation, "path", "remove"), "remove")
    return doc


def _op_replace(doc: Any, operation: dict) -> Any:
    path = _member(operation, "path", "replace")
    value = copy.deepcopy(_member(operation, "value", "replace"))
    tokens = _tokens(path)
    if tokens == []:
        return value
    parent = _parent(doc, tokens)
    if parent is None:
        raise _invalid(f"replace operation does not apply: doc is missing path: {path}: missing value")
    slot = _existing(parent, tokens[-1])
    if slot is None:
        raise _invalid(f"replace operation does not apply: doc is missing key: {path}: missing value")
    parent[slot] = value
    return doc


def _op_move(doc: Any, operation: dict) -> Any:
    source = _member(operation, "from", "move")
    path = _member(operation, "path", "move")
    return _insert(doc, path, _detach(doc, source, "move"), "move")


def _op_copy(doc: Any, operation: dict) -> Any:
    source = _member(operation, "from", "copy")
    path = _member(operation, "path", "copy")
    value = _get(doc, source)
    if value is _ABSENT:
        raise _invalid(f"copy operation does not apply: doc is missing from path: {source}: missing value")
    return _insert(doc, path, copy.deepcopy(value), "copy")


def _op_test(doc: Any, operation: dict) -> Any:
    path = _member(operation, "path", "test")
    expected = _member(operation, "value", "test")
    actual = _get(doc, path)
    if actual is _ABSENT or not _json_equal(actual, expected):
        raise _invalid(f"testing value {path} failed: test failed")
    return doc


_OPERATIONS = {"add": _op_add, "remove": _op_remove, "replace": _op_replace,
               "move": _op_move, "copy": _op_copy, "test": _op_test}


# --- Strategic merge patch -----------------------------------------------------------------------

_PATCH = "$patch"
_RETAIN_KEYS = "$retainKeys"
_SET_ELEMENT_ORDER = "$setElementOrder"
_DELETE_FROM_PRIMITIVE_LIST = "$deleteFromPrimitiveList"
_DELETED = object()  # what a map carrying "$patch: delete" merges into


def strategic_merge_patch(original: dict, patch: dict, schema: Type | None, *, in_place: bool = False) -> dict:
    """Kubernetes strategic merge patch of ``patch`` into a copy of ``original`` (into
    ``original`` itself if ``in_place``), driven by the merge strategies and keys in ``schema``
    (JSON-merge behaviour where it has none)."""
    merged = _merge_map(original if in_place else copy.deepcopy(original), patch, schema)
    return {} if merged is _DELETED else merged


def _merges(schema: Type | None) -> bool:
    """Whether the list type asks to be merged rather than replaced (``patchStrategy: merge``)."""
    return isinstance(schema, ListOf) and "merge" in schema.patch_strategy.split(",")


def _merge_value(original: Any, patch: Any, schema: Type | None) -> Any:
    """Merge one patch value into the live value (which it may replace, or which may be absent)."""
    if isinstance(patch, dict):
        return _merge_map(original if isinstance(original, dict) else {}, patch, schema)
    if isinstance(patch, list):
        if _merges(schema):
            return _merge_list(original if isinstance(original, list) else [], patch, schema)
        item = schema.item if isinstance(schema, ListOf) else None
        elements = (_merge_value(None, element, item) for element in patch)
        return [element for element in elements if element is not _DELETED]
    return patch


def _merge_map(original: dict, patch: dict, schema: Type | None) -> Any:
    """mergeMap: merge ``patch`` into ``original`` (mutated); ``_DELETED`` for ``$patch: delete``."""
    if _PATCH in patch:
        directive = patch[_PATCH]
        rest = {key: value for key, value in patch.items() if key != _PATCH}
        if directive == "delete":
            return _DELETED
        if directive == "replace":
            return _merge_map({}, rest, schema)
        if directive != "merge":
            raise _invalid(f"unknown patch type: {directive} in map: {_compact(patch)}")
        patch = rest
    _retain_keys(original, patch)
    ordered = _set_element_orders(original, patch, schema)
    for key, value in patch.items():
        if key in ordered or key == _RETAIN_KEYS or key.startswith(_SET_ELEMENT_ORDER):
            continue
        if key.startswith(_DELETE_FROM_PRIMITIVE_LIST):
            _delete_from_primitive_list(original, key, value)
            continue
        merged = _DELETED if value is None else _merge_value(original.get(key), value, child(schema, key))
        if merged is _DELETED:
            original.pop(key, None)
        else:
            original[key] = merged
    return original


def _directive_field(directive: str, prefix: str, malformed: str) -> str:
    """The list field a ``<prefix>/<field>`` directive key is about."""
    head, slash, field = directive.partition("/")
    if head != prefix or not slash:
        raise _bad_request(malformed)
    return field


def _retain_keys(original: dict, patch: dict) -> None:
    """applyRetainKeysDirective: drop the live keys ``$retainKeys`` does not list."""
    if _RETAIN_KEYS not in patch:
        return
    retained = patch[_RETAIN_KEYS]
    if not isinstance(retained, list):
        raise _bad_request("invalid patch format of retainKeys")
    for key, value in patch.items():
        directive = key == _RETAIN_KEYS or key.startswith((_SET_ELEMENT_ORDER, _DELETE_FROM_PRIMITIVE_LIST))
        if value is not None and not directive and key not in retained:
            raise _bad_request("invalid patch format of retainKeys")
    for key in [key for key in original if key not in retained]:
        del original[key]


def _delete_from_primitive_list(original: dict, directive: str, doomed: Any) -> None:
    field = _directive_field(directive, _DELETE_FROM_PRIMITIVE_LIST, "invalid patch format of primitive list")
    if not isinstance(doomed, list):
        raise _bad_request("invalid patch format of primitive list")
    current = original.get(field)
    if isinstance(current, list):
        original[field] = [item for item in current if _position(doomed, item, "") < 0]


def _set_element_orders(original: dict, patch: dict, schema: Type | None) -> set[str]:
    """mergePatchIntoOriginal: merge each list that has a ``$setElementOrder/<list>`` and put its
    elements in that order; return the list fields done, for the caller to skip."""
    done: set[str] = set()
    for directive, order in patch.items():
        if not directive.startswith(_SET_ELEMENT_ORDER):
            continue
        field = _directive_field(directive, _SET_ELEMENT_ORDER, "invalid patch format of setElementOrder list")
        change, live = patch.get(field, []), original.get(field)
        if change is None or (field not in patch and not isinstance(live, list)):
            continue  # the list is being deleted, or there is no list to order
        if not isinstance(order, list) or not isinstance(change, list):
            raise _bad_request("invalid patch format of setElementOrder list")
        list_schema = child(schema, field)
        key = list_schema.patch_merge_key if isinstance(list_schema, ListOf) else ""
        _check_order(change, order, key)
        live = live if isinstance(live, list) else []
        merged = _merge_value(live, change, list_schema) if field in patch else live
        original[field] = _ordered(merged, order, live, key)
        done.add(field)
    return done


def _check_order(change: list, order: list, key: str) -> None:
    """validatePatchWithSetOrderList: the patch's elements must appear in ``order``, in that order."""
    remaining = iter(order)
    for element in change:
        if isinstance(element, dict) and _PATCH in element:
            continue
        if not any(_same_element(element, wanted, key) for wanted in remaining):
            raise _invalid(f"The order in patch list: {_compact(change)} doesn't match "
                           f"{_SET_ELEMENT_ORDER} list: {_compact(order)}")


def _element_kind(*lists: list) -> str | None:
    """sliceElementType: "map" or "scalar" for the elements of all ``lists``, None if all empty."""
    kinds = {"map" if isinstance(e, dict) else "list" if isinstance(e, list) else "scalar"
             for elements in lists for e in elements}
    if "list" in kinds:
        raise _invalid("lists of lists are not supported")
    if len(kinds) > 1:
        raise _invalid(f"list element types are not identical: {_compact(list(lists))}")
    return kinds.pop() if kinds else None


def _merge_list(original: list, patch: list, schema: ListOf) -> list:
    """mergeSlice: merge a ``patchStrategy: merge`` list, by merge key or as a set of scalars."""
    kind = _element_kind(original, patch)
    if kind is None:
        return original
    if kind == "scalar":
        merged = []
        for item in original + patch:
            if _position(merged, item, "") < 0:
                merged.append(item)
        return _ordered(merged, patch, original, "")
    key = schema.patch_merge_key
    if not key:
        raise _invalid("cannot merge lists without merge key for type map")
    live, change = _apply_element_directives(original, patch, key, schema.item)
    merged = list(live)
    for element in change:
        if key not in element:
            raise _invalid(f"map: {_compact(element)} does not contain declared merge key: {key}")
        index = _position(merged, element, key)
        if index < 0:
            merged.append(_merge_map({}, element, schema.item))
        else:
            merged[index] = _merge_map(merged[index], element, schema.item)
    return _ordered(merged, change, live, key)


def _apply_element_directives(original: list, patch: list, key: str, item: Type | None) -> tuple[list, list]:
    """mergeSliceWithSpecialElements: apply the ``$patch`` elements of a merge-keyed list patch.
    Returns the live list left after deletions and the patch elements still to merge; after a
    ``$patch: replace`` element, the live list is the other patch elements and nothing is left."""
    change, replace = [], False
    for element in patch:
        directive = element.get(_PATCH, "merge")
        if directive == "merge":
            change.append(element)
        elif directive == "delete":
            if key not in element:
                raise _invalid(f"map: {_compact(element)} does not contain declared merge key: {key}")
            original = [live for live in original if not (key in live and _json_equal(live[key], element[key]))]
        elif directive == "replace":
            replace = True
        else:
            raise _invalid(f"unknown patch type: {directive} in map: {_compact(element)}")
    if replace:
        return [_merge_map({}, element, item) for element in change], []
    return original, change


def _identity(element: Any, key: str) -> Any:
    """What identifies a list element: its merge key's value, or the element itself."""
    return element.get(key) if key and isinstance(element, dict) else element


def _same_element(a: Any, b: Any, key: str) -> bool:
    return _json_equal(_identity(a, key), _identity(b, key))


def _position(elements: list, element: Any, key: str) -> int:
    """The index of ``element`` in ``elements`` (matched by merge key), or -1."""
    return next((i for i, candidate in enumerate(elements) if _same_element(candidate, element, key)), -1)


def _sorted_by(elements: list, order: list, key: str) -> list:
    """``elements`` stably sorted by their position in ``order``; those not in it go last."""
    return sorted(elements, key=lambda e: (i if (i := _position(order, e, key)) >= 0 else len(order)))


def _ordered(merged: list, patch_order: list, live_order: list, key: str) -> list:
    """normalizeElementOrder: the elements named in ``patch_order`` in that order, interleaved with
    the others (live-only) in ``live_order``; a live-only element goes before a patch element only
    if it came before it in the live list."""
    named = _sorted_by([e for e in merged if _position(patch_order, e, key) >= 0], patch_order, key)
    others = _sorted_by([e for e in merged if _position(patch_order, e, key) < 0], live_order, key)
    result: list = []
    while named and others:
        other_at, named_at = _position(live_order, others[0], key), _position(live_order, named[0], key)
        result.append(others.pop(0) if 0 <= other_at < named_at else named.pop(0))
    return result + named + others
