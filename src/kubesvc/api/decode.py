"""Decoding a request body the way kube-apiserver's JSON decoder does: typed, case-sensitive, strict.

Upstream decodes every write into Go structs with sigs.k8s.io/json (a fork of encoding/json).
Two kinds of problems come out of that, and clients depend on their exact text:

* **Wrong JSON type** (``"port": "80"``): always a 400, whatever ``fieldValidation`` says::

      Service in version "v1" cannot be handled as a Service: json: cannot unmarshal string into
      Go struct field ServicePort.spec.ports.port of type int32

  ``ServicePort`` is the innermost struct holding the field, ``spec.ports.port`` its path from
  the root with list indices and map keys left out, ``int32`` the Go type. Only the first such
  error is reported (Go keeps decoding and remembers the first), except that the custom
  decoders of Time, MicroTime, IntOrString and Quantity stop decoding at once, so their error
  wins even over an earlier one. A number that does not fit an integer field names its text:
  ``cannot unmarshal number 80.5 into ... of type int32``. A ``[]byte`` field (Secret ``data``)
  holds base64; a corrupt string is ``illegal base64 data at input byte 4``, with no field named.

* **Unknown fields** (``spec.bogusField``), which depend on the request's ``fieldValidation``:
  ``Strict`` is a 400 listing every one (``strict decoding error: unknown field "spec.a",
  unknown field "spec.ports[0].b"``; paths here keep list indices), ``Warn`` drops them and
  returns one warning each for the ``Warning`` header, ``Ignore`` drops them silently. A type
  error takes precedence over unknown fields.

``null`` for a field means "not set" (Go leaves the zero value, which is omitted on output), so
the field is removed; ``null`` inside a list or map becomes the element type's zero value.
``Any_`` subtrees are copied verbatim. The result is a new tree; the input is not modified.

Each ``Obj`` is compiled once into a closure over its field table, so a decode costs one dict
lookup and one call per value in the body and nothing per schema node the body does not use.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from kubesvc.api.errors import StatusError
from kubesvc.api.schema import Any_, ListOf, MapOf, Obj, Scalar, Type
from kubesvc.util import gobase64, golang

VALIDATION_MODES = ("Strict", "Warn", "Ignore")
MAX_UNKNOWN_FIELDS = 100  # upstream stops collecting strict errors here

# A chain is the path from the root to the value being decoded, built as linked pairs
# (parent_chain, segment) only when descending into a container: a str segment is a struct
# field, an int a list index, a 1-tuple a map key.
Chain = tuple | None


def decode_object(data: dict, schema: Obj, *, kind_label: str, api_version: str,
                  validation: str = "Strict") -> tuple[dict, list[str]]:
    """Decode ``data`` against the top-level kind ``schema``; returns (object, warnings).

    Raises ``StatusError`` 400 BadRequest with upstream's message for type errors, and for
    unknown fields when ``validation`` is ``Strict``. ``api_version`` may be ``group/version``;
    the message names only the version, as upstream's does.
    """
    if validation not in VALIDATION_MODES:
        raise ValueError(f"fieldValidation must be one of {', '.join(VALIDATION_MODES)}, not {validation!r}")
    state = _Decoding(collect_unknown=validation != "Ignore")
    try:
        result = _struct_decoder(schema)(data, None, state)
    except _Abort as abort:
        raise _cannot_handle(kind_label, api_version, str(abort)) from None
    except _Mismatch as mismatch:
        raise _cannot_handle(kind_label, api_version,
                             f"json: cannot unmarshal {mismatch.value} into Go value of type {mismatch.go_type}") from None
    if state.type_error is not None:
        raise _cannot_handle(kind_label, api_version, state.type_error)
    if not state.unknown:
        return result, []
    messages = [f'unknown field "{path}"' for path in state.unknown]
    if validation == "Strict":
        raise _cannot_handle(kind_label, api_version, "strict decoding error: " + ", ".join(messages))
    return result, messages


def _cannot_handle(kind: str, api_version: str, reason: str) -> StatusError:
    version = api_version.rpartition("/")[2]
    return StatusError(400, "BadRequest", f'{kind} in version "{version}" cannot be handled as a {kind}: {reason}')


# ---- decoding state and errors ---------------------------------------------------------------


class _Mismatch(Exception):
    """A JSON value of the wrong kind for its Go type. The nearest enclosing struct catches it
    and adds itself and the field path; ``fatal`` ones end decoding there."""

    def __init__(self, value: str, go_type: str, fatal: bool = False):
        self.value = value
        self.go_type = go_type
        self.fatal = fatal


class _Abort(Exception):
    """A complete error message that ends decoding at once (a custom Go decoder's error)."""


class _Decoding:
    __slots__ = ("collect_unknown", "unknown", "type_error")

    def __init__(self, collect_unknown: bool):
        self.collect_unknown = collect_unknown
        self.unknown: list[str] = []
        self.type_error: str | None = None

    def unknown_field(self, chain: Chain, key: str) -> None:
        if len(self.unknown) < MAX_UNKNOWN_FIELDS:
            self.unknown.append(_strict_path((chain, key)))

    def mismatch(self, mismatch: _Mismatch, struct_name: str, chain: Chain, key: str) -> None:
        if self.type_error is not None and not mismatch.fatal:
            return
        message = (f"json: cannot unmarshal {mismatch.value} into Go struct field "
                   f"{struct_name}.{_field_path((chain, key))} of type {mismatch.go_type}")
        if mismatch.fatal:
            raise _Abort(message)
        self.type_error = message


def _segments(chain: Chain) -> list:
    segments = []
    while chain is not None:
        chain, segment = chain
        segments.append(segment)
    segments.reverse()
    return segments


def _strict_path(chain: Chain) -> str:
    """``spec.ports[0].bogus``: the path sigs.k8s.io/json reports for strict errors."""
    path = ""
    for segment in _segments(chain):
        if type(segment) is int:
            path += f"[{segment}]"
        else:
            name = segment if type(segment) is str else segment[0]
            path = f"{path}.{name}" if path else name
    return path


def _field_path(chain: Chain) -> str:
    """``spec.ports.port``: encoding/json's field stack, struct fields only."""
    return ".".join(segment for segment in _segments(chain) if type(segment) is str)


_JSON_KINDS = {str: "string", bool: "bool", int: "number", float: "number", list: "array", dict: "object", type(None): "null"}


def json_kind(value: Any) -> str:
    """encoding/json's name for a decoded JSON value's kind, as its unmarshal errors print it."""
    return _JSON_KINDS.get(type(value)) or type(value).__name__


def _number_or_kind(value: Any) -> str:
    """How encoding/json names a value it could not store in an integer: numbers by their text."""
    if type(value) in (int, float):
        return f"number {value!r}"
    return json_kind(value)


# ---- compiling schemas into decoders ---------------------------------------------------------

Decoder = Callable[..., Any]
_struct_decoders: dict[Obj, Decoder] = {}


def _compile(node: Type) -> tuple[Decoder, bool]:
    """A decoder for ``node`` and whether it is a container (called as ``f(value, chain, state)``
    rather than ``f(value)``)."""
    if isinstance(node, Obj):
        return _struct_decoder(node), True
    if isinstance(node, ListOf):
        return _list_decoder(node), True
    if isinstance(node, MapOf):
        return _map_decoder(node), True
    if isinstance(node, Any_):
        return copy_json, False
    if node.kind == "byte":
        return _bytes_decoder(node), True  # needs the state: a bad base64 string is remembered there
    return _SCALAR_DECODERS[node.kind](node), False


def _struct_decoder(obj: Obj) -> Decoder:
    decoder = _struct_decoders.get(obj)
    if decoder is not None:
        return decoder
    fields: dict[str, tuple[Decoder, bool]] = {}
    struct_name = obj.name.rpartition(".")[2]
    go_type = go_type_name(obj)

    def decode_struct(value: Any, chain: Chain, state: _Decoding) -> dict:
        if type(value) is not dict:
            raise _Mismatch(json_kind(value), go_type)
        out = {}
        for key, item in value.items():
            entry = fields.get(key)
            if entry is None:
                if state.collect_unknown:
                    state.unknown_field(chain, key)
                continue
            if item is None:
                continue
            decode, is_container = entry
            try:
                out[key] = decode(item, (chain, key), state) if is_container else decode(item)
            except _Mismatch as mismatch:
                state.mismatch(mismatch, struct_name, chain, key)
        return out

    _struct_decoders[obj] = decode_struct  # before the fields: a recursive type finds itself
    for name, field in obj.fields.items():
        fields[name] = _compile(field.type)
    return decode_struct


def _list_decoder(node: ListOf) -> Decoder:
    decode_item, item_is_container = _compile(node.item)
    zero = _zero_value(node.item)
    go_type = go_type_name(node)

    def decode_list(value: Any, chain: Chain, state: _Decoding) -> list:
        if type(value) is not list:
            raise _Mismatch(json_kind(value), go_type)
        if item_is_container:
            return [zero() if item is None else decode_item(item, (chain, index), state)
                    for index, item in enumerate(value)]
        return [zero() if item is None else decode_item(item) for item in value]

    return decode_list


def _map_decoder(node: MapOf) -> Decoder:
    decode_value, value_is_container = _compile(node.value)
    zero = _zero_value(node.value)
    go_type = go_type_name(node)

    def decode_map(value: Any, chain: Chain, state: _Decoding) -> dict:
        if type(value) is not dict:
            raise _Mismatch(json_kind(value), go_type)
        if value_is_container:
            return {key: zero() if item is None else decode_value(item, (chain, (key,)), state)
                    for key, item in value.items()}
        return {key: zero() if item is None else decode_value(item) for key, item in value.items()}

    return decode_map


def _zero_value(node: Type) -> Callable[[], Any]:
    """What Go stores for a JSON null element: the element type's zero value, as it serializes."""
    if isinstance(node, Obj):
        return dict
    if isinstance(node, Scalar):
        zero = _SCALAR_ZEROS.get(node.kind)
        return lambda: zero
    return lambda: None


_SCALAR_ZEROS = {"string": "", "byte": "", "integer": 0, "int-or-string": 0, "number": 0, "boolean": False,
                 "quantity": "0"}


_IMMUTABLE_SCALARS = frozenset({str, int, float, bool, type(None)})


def copy_json(value: Any) -> Any:
    """A deep copy of a JSON-shaped value. Decoded JSON (dicts, lists, immutable scalars) takes
    a fast path several times cheaper than ``copy.deepcopy``, which keeps a memo of every node
    for shared references that JSON cannot have; anything else an in-process caller may pass (a
    tuple, a dict subclass, a set) is handed to ``copy.deepcopy``, so nothing of the caller's is
    ever shared with the copy."""
    kind = type(value)
    if kind is dict:
        return {key: copy_json(item) for key, item in value.items()}
    if kind is list:
        return [copy_json(item) for item in value]
    if kind in _IMMUTABLE_SCALARS:
        return value
    import copy

    return copy.deepcopy(value)


def go_type_name(node: Type) -> str:
    """The Go type upstream's messages name for ``node``: ``v1.ServicePort``, ``[]string``, ``int32``."""
    if isinstance(node, Obj):
        package, _, name = node.name.rpartition(".")
        return f"{package.rpartition('.')[2]}.{name}"
    if isinstance(node, ListOf):
        return "[]" + go_type_name(node.item)
    if isinstance(node, MapOf):
        if isinstance(node.value, Scalar) and node.value.kind == "quantity":
            return "v1.ResourceList"
        return "map[string]" + go_type_name(node.value)
    if isinstance(node, Any_):
        return "interface {}"
    if node.kind == "integer":
        return node.format or "int64"
    return _SCALAR_GO_TYPES[node.kind] if node.format != "micro-time" else "v1.MicroTime"


_SCALAR_GO_TYPES = {"string": "string", "boolean": "bool", "number": "float64", "byte": "[]uint8",
                    "int-or-string": "intstr.IntOrString", "date-time": "v1.Time", "quantity": "resource.Quantity"}

# ---- scalars ---------------------------------------------------------------------------------


def _string_decoder(node: Scalar) -> Decoder:
    go_type = go_type_name(node)

    def decode_string(value: Any) -> str:
        if type(value) is str:
            return value
        raise _Mismatch(json_kind(value), go_type)

    return decode_string


def _bytes_decoder(node: Scalar) -> Decoder:
    """``[]byte`` (Secret ``data`` values): a base64 string. A corrupt one is Go's saved
    ``illegal base64 data at input byte N`` error (the first error wins, decoding goes on)."""

    def decode_bytes(value: Any, chain: Chain, state: _Decoding) -> str:
        if type(value) is not str:
            raise _Mismatch(json_kind(value), "[]uint8")
        if state.type_error is None:
            try:
                gobase64.decode(value)
            except gobase64.CorruptInputError as error:
                state.type_error = str(error)
        return value

    return decode_bytes


def _boolean_decoder(node: Scalar) -> Decoder:
    def decode_boolean(value: Any) -> bool:
        if type(value) is bool:
            return value
        raise _Mismatch(json_kind(value), "bool")

    return decode_boolean


def _number_decoder(node: Scalar) -> Decoder:
    def decode_number(value: Any) -> float | int:
        if type(value) in (int, float):
            return value
        raise _Mismatch(json_kind(value), "float64")

    return decode_number


def _int_range(go_type: str) -> tuple[int, int]:
    bits = 32 if go_type == "int32" else 64
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def _integer_decoder(node: Scalar) -> Decoder:
    go_type = go_type_name(node)
    low, high = _int_range(go_type)

    def decode_integer(value: Any) -> int:
        if type(value) is int and low <= value <= high:
            return value
        raise _Mismatch(_number_or_kind(value), go_type)

    return decode_integer


def _int_or_string_decoder(node: Scalar) -> Decoder:
    """intstr.IntOrString: a JSON string, or else whatever encoding/json can put in an int32."""
    low, high = _int_range("int32")

    def decode_int_or_string(value: Any) -> int | str:
        if type(value) is str or (type(value) is int and low <= value <= high):
            return value
        raise _Mismatch(_number_or_kind(value), "int32", fatal=True)

    return decode_int_or_string


def _time_decoder(node: Scalar) -> Decoder:
    """metav1.Time / MicroTime: a JSON string Go's time.Parse(time.RFC3339, …) accepts."""

    def decode_time(value: Any) -> str:
        if type(value) is not str:
            raise _Mismatch(json_kind(value), "string", fatal=True)
        error = golang.rfc3339_error(value)
        if error:
            raise _Abort(error)
        return value

    return decode_time


_QUANTITY_FORMAT = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_QUANTITY = re.compile(_QUANTITY_FORMAT)
_QUANTITY_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)\Z")
_QUANTITY_SUFFIX = re.compile(r"(?:[numkMGTPE]?|[KMGTPE]i|[eE][-+]?[0-9]+)\Z")


def _quantity_decoder(node: Scalar) -> Decoder:
    """resource.Quantity: a string (or bare number) in Kubernetes quantity syntax. Numbers are
    stored as their decimal text, not in upstream's canonical form ("0.5", not "500m")."""

    def decode_quantity(value: Any) -> str:
        if type(value) in (int, float):
            value = repr(value)
        elif type(value) is not str:
            raise _Abort(f"quantities must match the regular expression '{_QUANTITY_FORMAT}'")
        parts = _QUANTITY.match(value)
        if parts is None:
            raise _Abort(f"quantities must match the regular expression '{_QUANTITY_FORMAT}'")
        if not _QUANTITY_NUMBER.match(parts.group(1)):
            raise _Abort("unable to parse numeric part of quantity")
        if not _QUANTITY_SUFFIX.match(parts.group(2)):
            raise _Abort("unable to parse quantity's suffix")
        return value

    return decode_quantity


_SCALAR_DECODERS: dict[str, Callable[[Scalar], Decoder]] = {
    "string": _string_decoder,
    "byte": _string_decoder,
    "boolean": _boolean_decoder,
    "number": _number_decoder,
    "integer": _integer_decoder,
    "int-or-string": _int_or_string_decoder,
    "date-time": _time_decoder,
    "quantity": _quantity_decoder,
}
