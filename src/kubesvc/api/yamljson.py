"""YAML bodies to JSON data, as sigs.k8s.io/yaml's ``YAMLToJSON`` gives them, without recursion.

kube-apiserver reads YAML with go-yaml v2 and converts it to JSON (sigs.k8s.io/yaml): mapping
keys become strings (``1`` -> ``"1"``, ``null`` -> ``"null"``), aliases are expanded in place,
timestamps stay strings. Here libyaml's C parser (through PyYAML) turns the text into events,
and ``yaml_to_json`` builds the value from them with an explicit stack, so:

* nesting is counted on the events themselves, the tree the parser really builds, and a body
  deeper than ``nesting.MAX_DEPTH`` stops at the first event past it with go-yaml's scanner
  error (``yaml: line 5: exceeded max depth of 1000``). Counting brackets is not enough:
  libyaml's parser swallows the ``]`` after a ``?`` in a flow sequence, so ``[?],[?],…``
  nests one level per four bytes, and PyYAML's recursive C composer dies on 30,000 of them;
* go-yaml's alias budget (CVE-2019-11253, ``nesting.check_alias_budget``) is counted as the
  events come, before an alias is expanded: each anchor's expanded size is known when its
  node ends. An alias of an anchor still open is go-yaml's ``anchor 'a' value contains
  itself``; of one not defined, ``unknown anchor 'a' referenced``. An alias is expanded as a
  copy (go-yaml decodes it again), so no two places share one object;
* only the first document is read, as go-yaml's ``Unmarshal`` does.

Scalars are resolved and constructed by PyYAML's safe resolver and constructors (YAML 1.1:
``yes`` is true, ``0x1f`` is 31), except that timestamps stay strings, a number too large for
any Go type stays a string (go-yaml's ``resolve`` refuses it as int and float), and ``.inf``
and ``.nan`` are refused as JSON refuses them. Merge keys (``<<``) merge as PyYAML merges them.

libyaml's scanner takes time proportional to the input times its flow depth; the text is
checked for flow depth first (``nesting.check_yaml_depth``), so that stays linear.
"""

from __future__ import annotations

import json
import math

import yaml

from kubesvc.api import nesting

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_STR, _INT, _FLOAT, _MERGE = ("tag:yaml.org,2002:" + name for name in ("str", "int", "float", "merge"))
_MAP, _SEQ = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"


class YAMLBodyError(ValueError):
    """A YAML body go-yaml would refuse; ``str()`` is the error, go-yaml's where it has one."""


class _Loader_(_Loader):
    """PyYAML's safe loader without the timestamp resolver (sigs.k8s.io/yaml keeps them strings)."""


_Loader_.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
    for first, resolvers in _Loader.yaml_implicit_resolvers.items()
}


def yaml_to_json(text: str, max_depth: int = nesting.MAX_DEPTH) -> object:
    """The first document of ``text`` as JSON data (None when there is none). Raises
    ``YAMLBodyError`` for what go-yaml refuses, and for libyaml's syntax errors."""
    try:
        nesting.check_yaml_depth(text, max_depth)
    except nesting.NestingError as exc:
        raise YAMLBodyError(str(exc)) from None
    loader = _Loader_(text)
    try:
        return _Composer(loader, max_depth).document()
    except yaml.YAMLError as exc:
        raise YAMLBodyError(str(exc).splitlines()[0]) from None
    except nesting.NestingError as exc:
        raise YAMLBodyError(str(exc)) from None
    finally:
        loader.dispose()


class _Frame:
    __slots__ = ("value", "is_map", "key", "has_key", "anchor", "size", "depth", "merges")

    def __init__(self, is_map: bool, anchor: str | None):
        self.value: dict | list = {} if is_map else []
        self.is_map = is_map
        self.key: str | None = None
        self.has_key = False
        self.anchor = anchor
        self.size = 1  # nodes go-yaml decodes for this node, aliases expanded
        self.depth = 1  # levels of nesting below and including this node
        self.merges: list[dict] = []


class _Composer:
    def __init__(self, loader, max_depth: int):
        self.loader = loader
        self.max_depth = max_depth
        self.stack: list[_Frame] = []
        self.anchors: dict[str, tuple[object, int, int]] = {}  # name -> (value, size, depth)
        self.decoded = 0
        self.aliased = 0
        self.scalars: dict[tuple, object] = {}

    def document(self) -> object:
        get = self.loader.get_event
        get()  # StreamStart
        if isinstance(get(), yaml.StreamEndEvent):
            return None
        self.decoded = 1  # the document node
        root: object = None
        while True:
            event = get()
            kind = type(event)
            if kind is yaml.ScalarEvent:
                value, size, depth = self._scalar(event), 1, 0
                self.decoded += 1
                nesting.check_alias_budget(self.decoded, self.aliased)
                anchor = event.anchor
            elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
                is_map = kind is yaml.MappingStartEvent
                if event.tag not in (None, "!", _MAP if is_map else _SEQ):
                    raise YAMLBodyError(f"yaml: line {event.start_mark.line + 1}: cannot decode the tag {event.tag!r}")
                if len(self.stack) + 1 > self.max_depth:
                    raise nesting.NestingError(nesting.yaml_depth_message(event.start_mark.line, self.max_depth))
                self.stack.append(_Frame(is_map, event.anchor))
                self.decoded += 1
                nesting.check_alias_budget(self.decoded, self.aliased)
                continue
            elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
                frame = self.stack.pop()
                value, size, depth, anchor = frame.value, frame.size, frame.depth, frame.anchor
                if frame.merges:
                    value = frame.value = _merged(frame.merges, frame.value)
            elif kind is yaml.AliasEvent:
                value, size, depth = self._alias(event)
                anchor = None
            elif kind is yaml.DocumentEndEvent:
                return root
            else:
                continue
            if anchor is not None:
                self.anchors[anchor] = (value, size, depth)
            if not self.stack:
                root = value
                continue
            parent = self.stack[-1]
            parent.size = min(parent.size + size, nesting.EXPANSION_CAP)
            parent.depth = max(parent.depth, depth + 1)
            if not parent.is_map:
                parent.value.append(value)
            elif not parent.has_key:
                parent.key, parent.has_key = self._key(value, kind, event), True
            else:
                parent.has_key = False
                if parent.key is _MERGE_KEY:
                    parent.merges.extend(_merge_sources(value, event))
                else:
                    parent.value[parent.key] = value

    def _scalar(self, event: yaml.ScalarEvent) -> object:
        """A scalar's value; the same text with the same tagging gives the same (immutable) value,
        so each distinct one is resolved and constructed once."""
        key = (event.value, event.tag, event.implicit)
        try:
            return self.scalars[key]
        except KeyError:
            value = self.scalars[key] = self._construct_scalar(event)
            return value

    def _construct_scalar(self, event: yaml.ScalarEvent) -> object:
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.loader.resolve(yaml.ScalarNode, event.value, event.implicit)
        if tag == _STR or tag == _TIMESTAMP:
            return event.value
        if tag == _MERGE:
            return _MERGE_KEY
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        if tag == _INT:
            try:
                return self.loader.construct_yaml_int(node)
            except ValueError:  # more digits than any Go integer or float holds: a string in go-yaml
                return event.value
        if tag == _FLOAT:
            value = self.loader.construct_yaml_float(node)
            if math.isfinite(value):
                return value
            if not event.value.lstrip("+-").startswith("."):
                return event.value  # past float64: a string in go-yaml
            text = "NaN" if math.isnan(value) else "+Inf" if value > 0 else "-Inf"
            raise YAMLBodyError(f"json: unsupported value: {text}")
        value = self.loader.construct_object(node)
        if isinstance(value, bytes):  # !!binary: go-yaml gives the decoded bytes as a string
            return value.decode("utf-8", "replace")
        return value

    def _alias(self, event: yaml.AliasEvent) -> tuple[object, int, int]:
        name = event.anchor
        if name not in self.anchors:
            if any(frame.anchor == name for frame in self.stack):
                raise YAMLBodyError(f"yaml: anchor '{name}' value contains itself")
            raise YAMLBodyError(f"yaml: unknown anchor '{name}' referenced")
        value, size, depth = self.anchors[name]
        self.decoded += 1 + size
        self.aliased += size
        nesting.check_alias_budget(self.decoded, self.aliased)
        if len(self.stack) + depth > self.max_depth:
            raise nesting.NestingError(nesting.yaml_depth_message(event.start_mark.line, self.max_depth))
        return (_copy(value) if depth else value), 1 + size, depth

    @staticmethod
    def _key(value: object, kind: type, event: yaml.Event) -> object:
        """A mapping key as JSON has them: a string (``1`` -> ``"1"``, ``null`` -> ``"null"``)."""
        if value is _MERGE_KEY or isinstance(value, str):
            return value
        if value is None or isinstance(value, (bool, int, float)):
            return json.dumps(value)
        if isinstance(value, (dict, list)):
            raise YAMLBodyError(f"yaml: line {event.start_mark.line + 1}: found unhashable key")
        return str(value)


class _MergeKey:
    """``<<``, the merge key."""


_MERGE_KEY = _MergeKey()


def _merge_sources(value: object, event: yaml.Event) -> list[dict]:
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list) and all(isinstance(item, dict) for item in value):
        return list(reversed(value))  # earlier mappings win (PyYAML's flatten_mapping)
    raise YAMLBodyError(f"yaml: line {event.start_mark.line + 1}: map merge requires map or sequence of maps as the value")


def _merged(sources: list[dict], own: dict) -> dict:
    merged: dict = {}
    for source in sources:
        merged.update(source)
    merged.update(own)
    return merged


def _copy(value: object) -> object:
    """A copy of JSON data (its scalars are immutable and shared)."""
    if type(value) is dict:
        return {key: _copy(item) for key, item in value.items()}
    if type(value) is list:
        return [_copy(item) for item in value]
    return value
