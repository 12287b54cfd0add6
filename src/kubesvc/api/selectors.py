"""Label and field selectors: the ``labelSelector`` / ``fieldSelector`` query parameters.

A **label selector** is a comma-separated AND of requirements over an object's
``metadata.labels`` (k8s.io/apimachinery/pkg/labels/selector.go)::

    app=web            app==web          tier!=fe          (equality; != also matches a missing key)
    env in (a,b)       env notin (a,b)                     (set based; notin matches a missing key)
    release            !release                            (key exists / does not exist)
    replicas>2         replicas<5                          (value parses as a base-10 int64)

Whitespace (space, tab, CR, LF) separates tokens and is otherwise ignored; ``in``/``notin``
are keywords only in operator position (``x in (in)`` is valid). Keys must be qualified
names (``[prefix/]name``) and values valid label values; the server answers a bad selector
with 400 BadRequest and upstream's own message, e.g. ``unable to parse requirement: found
'', expected: identifier``. :func:`parse_label_selector` is a port of upstream's lexer and
recursive-descent parser, error texts included.

Two more constructors cover selectors that arrive as objects rather than strings:

* :func:`selector_from_label_selector` converts a ``metav1.LabelSelector``
  (``matchLabels`` + ``matchExpressions``), as ``metav1.LabelSelectorAsSelector`` does:
  a null selector matches nothing, an empty one matches everything.
* :func:`selector_from_map` converts a ``Service.spec.selector``. Upstream's
  ``labels.SelectorFromSet`` turns an empty map into "everything", but the endpoint
  controllers never select Pods for a Service without a selector (its endpoints are managed
  by someone else), so for that use an empty or missing map selects **nothing** here.

A **field selector** (k8s.io/apimachinery/pkg/fields/selector.go) is a comma-separated AND
of ``field=value``, ``field==value`` or ``field!=value`` terms; ``\\``, ``,`` and ``=`` in a
value are escaped with a backslash. Values compare as text; an absent field compares as its
Go zero value ("" for strings, "false" for booleans, "0" for numbers), since upstream selects
on Go structs where nothing is absent. Only a per-kind list of fields may be used: every kind
accepts ``metadata.name`` and ``metadata.namespace``, some add more (Services:
``spec.clusterIP``, ``spec.type``; Events: ``involvedObject.*``, ...). An unknown field is a
400 with upstream's text: kinds that register their own field-label conversion upstream
(exactly the kinds that declare extra fields) say ``field label not supported: X``; the
others use ``runtime.DefaultMetaV1FieldSelectorConversion``'s ``"X" is not a known field
selector: only "metadata.name", "metadata.namespace"``. (Upstream's Node and Namespace
conversions also reject ``metadata.namespace``; here it is accepted everywhere.)
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from kubesvc.api.errors import StatusError, bad_request
from kubesvc.api.schema import Scalar, Type, child
from kubesvc.util.golang import quote as go_quote
from kubesvc.util import golang


class Operator(enum.StrEnum):
    """The selection operators, spelled as k8s.io/apimachinery/pkg/selection spells them."""

    EQUALS = "="
    DOUBLE_EQUALS = "=="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    GREATER_THAN = "gt"
    LESS_THAN = "lt"


# ---- label key / value validation (k8s.io/apimachinery/pkg/util/validation) -----------------

_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME_MSG = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
_LABEL_VALUE_FMT = f"({_QUALIFIED_NAME_FMT})?"
_LABEL_VALUE_MSG = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_MSG = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"

_QUALIFIED_NAME_RE = re.compile(_QUALIFIED_NAME_FMT)
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT)
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """validation.RegexError, including its odd ``'a',  or 'b', `` spacing."""
    text = msg + " (e.g. "
    for i, example in enumerate(examples):
        if i > 0:
            text += " or "
        text += f"'{example}', "
    return text + f"regex used for validation is '{fmt}')"


def _byte_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _qualified_name_errors(key: str) -> list[str]:
    """validation.IsQualifiedName: ``[DNS-subdomain-prefix/]name``, name at most 63 bytes."""
    errors: list[str] = []
    parts = key.split("/")
    if len(parts) > 2:
        return ["a qualified name " + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc") + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if _byte_len(prefix) > 253:
                errors.append("prefix part must be no more than 253 characters")
            if not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
                errors.append("prefix part " + _regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    if not name:
        errors.append("name part must be non-empty")
    elif _byte_len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    if not _QUALIFIED_NAME_RE.fullmatch(name):
        errors.append("name part " + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc"))
    return errors


def _label_value_errors(value: str) -> list[str]:
    errors: list[str] = []
    if _byte_len(value) > 63:
        errors.append("must be no more than 63 characters")
    if not _LABEL_VALUE_RE.fullmatch(value):
        errors.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errors


def _go_string_slice(values: Iterable[str]) -> str:
    """Go's ``%#v`` of a []string, as field.Invalid prints a bad value list."""
    return golang.go_syntax_strings(values)


def _invalid(path: str, shown_value: str, detail: str) -> str:
    """The text of a field.Invalid error: ``path: Invalid value: <value>: detail``."""
    return f"{path}: Invalid value: {shown_value}: {detail}"


def _parse_int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64), or None where Go would return an error."""
    try:
        return golang.parse_int(text)
    except ValueError:
        return None


# ---- requirements and label selectors --------------------------------------------------------


@dataclass(frozen=True)
class Requirement:
    """One ``key <op> values`` clause; build it with :func:`new_requirement` (validates)."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op in (Operator.IN, Operator.EQUALS, Operator.DOUBLE_EQUALS):
            return self.key in labels and labels[self.key] in self.values
        if op in (Operator.NOT_IN, Operator.NOT_EQUALS):
            return self.key not in labels or labels[self.key] not in self.values
        if op is Operator.EXISTS:
            return self.key in labels
        if op is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        if self.key not in labels or len(self.values) != 1:
            return False
        actual, bound = _parse_int64(labels[self.key]), _parse_int64(self.values[0])
        if actual is None or bound is None:
            return False
        return actual > bound if op is Operator.GREATER_THAN else actual < bound

    def __str__(self) -> str:
        if self.operator is Operator.EXISTS:
            return self.key
        if self.operator is Operator.DOES_NOT_EXIST:
            return "!" + self.key
        spelled = {Operator.IN: " in ", Operator.NOT_IN: " notin ", Operator.GREATER_THAN: ">", Operator.LESS_THAN: "<"}
        values = ",".join(sorted(self.values))
        if self.operator in (Operator.IN, Operator.NOT_IN):
            values = f"({values})"
        return self.key + spelled.get(self.operator, str(self.operator)) + values


def new_requirement(key: str, operator: Operator, values: Iterable[str]) -> Requirement:
    """labels.NewRequirement: validate and build; raises 400 with upstream's aggregated text
    (field paths ``key``, ``values``, ``values[i]``, ``values[i][key]``, as upstream names them)."""
    values = tuple(values)
    problems: list[str] = []
    if key_errors := _qualified_name_errors(key):
        problems.append(_invalid("key", go_quote(key), "; ".join(key_errors)))
    if operator in (Operator.IN, Operator.NOT_IN) and not values:
        problems.append(_invalid("values", _go_string_slice(values), "for 'in', 'notin' operators, values set can't be empty"))
    elif operator in (Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.NOT_EQUALS) and len(values) != 1:
        problems.append(_invalid("values", _go_string_slice(values), "exact-match compatibility requires one single value"))
    elif operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST) and values:
        problems.append(_invalid("values", _go_string_slice(values), "values set must be empty for exists and does not exist"))
    elif operator in (Operator.GREATER_THAN, Operator.LESS_THAN):
        if len(values) != 1:
            problems.append(_invalid("values", _go_string_slice(values), "for 'Gt', 'Lt' operators, exactly one value is required"))
        for i, value in enumerate(values):
            if _parse_int64(value) is None:
                problems.append(_invalid(f"values[{i}]", go_quote(value), "for 'Gt', 'Lt' operators, the value must be an integer"))
    for i, value in enumerate(values):
        if value_errors := _label_value_errors(value):
            problems.append(_invalid(f"values[{i}][{key}]", go_quote(value), "; ".join(value_errors)))
    if problems:
        raise bad_request(golang.aggregate(problems))
    return Requirement(key, operator, values)


@dataclass(frozen=True)
class LabelSelector:
    """An AND of requirements, sorted by key; ``matches_nothing`` is labels.Nothing()."""

    requirements: tuple[Requirement, ...] = ()
    matches_nothing: bool = False

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.matches_nothing:
            return False
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def is_everything(self) -> bool:
        return not self.matches_nothing and not self.requirements

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def everything() -> LabelSelector:
    return LabelSelector()


def nothing() -> LabelSelector:
    return LabelSelector(matches_nothing=True)


def _sorted_by_key(requirements: Iterable[Requirement]) -> LabelSelector:
    return LabelSelector(tuple(sorted(requirements, key=lambda r: r.key)))


def selector_from_map(selector: Mapping[str, str] | None) -> LabelSelector:
    """A Service's ``spec.selector``: every pair must match; empty or missing selects nothing."""
    if not selector:
        return nothing()
    return _sorted_by_key(Requirement(k, Operator.EQUALS, (v,)) for k, v in selector.items())


_EXPRESSION_OPERATORS = {"In": Operator.IN, "NotIn": Operator.NOT_IN, "Exists": Operator.EXISTS, "DoesNotExist": Operator.DOES_NOT_EXIST}


def selector_from_label_selector(label_selector: Mapping[str, Any] | None) -> LabelSelector:
    """metav1.LabelSelectorAsSelector: null -> nothing, ``{}`` -> everything."""
    if label_selector is None:
        return nothing()
    match_labels = label_selector.get("matchLabels") or {}
    expressions = label_selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return everything()
    requirements = [new_requirement(k, Operator.EQUALS, [v]) for k, v in match_labels.items()]
    for expression in expressions:
        operator = _EXPRESSION_OPERATORS.get(expression.get("operator", ""))
        if operator is None:
            raise bad_request(f"{go_quote(str(expression.get('operator', '')))} is not a valid label selector operator")
        requirements.append(new_requirement(expression.get("key", ""), operator, expression.get("values") or []))
    return _sorted_by_key(requirements)


# ---- the label selector lexer and parser (labels/selector.go) --------------------------------


class _Token(enum.Enum):
    END = "end of string"
    CLOSED_PAR = ")"
    COMMA = ","
    DOES_NOT_EXIST = "!"
    DOUBLE_EQUALS = "=="
    EQUALS = "="
    GREATER_THAN = ">"
    IDENTIFIER = "identifier"
    IN = "in"
    LESS_THAN = "<"
    NOT_EQUALS = "!="
    NOT_IN = "notin"
    OPEN_PAR = "("


_SYMBOL_TOKENS = {t.value: t for t in (_Token.CLOSED_PAR, _Token.COMMA, _Token.DOES_NOT_EXIST, _Token.DOUBLE_EQUALS, _Token.EQUALS, _Token.GREATER_THAN, _Token.LESS_THAN, _Token.NOT_EQUALS, _Token.OPEN_PAR)}
_KEYWORD_TOKENS = {"in": _Token.IN, "notin": _Token.NOT_IN}
_SPECIAL_CHARS = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")
_BINARY_OPERATORS = {
    _Token.IN: Operator.IN,
    _Token.NOT_IN: Operator.NOT_IN,
    _Token.EQUALS: Operator.EQUALS,
    _Token.DOUBLE_EQUALS: Operator.DOUBLE_EQUALS,
    _Token.NOT_EQUALS: Operator.NOT_EQUALS,
    _Token.GREATER_THAN: Operator.GREATER_THAN,
    _Token.LESS_THAN: Operator.LESS_THAN,
}
_EXPECTED_OPERATORS = ", ".join(op.value for op in _BINARY_OPERATORS.values())


def _lex(text: str) -> list[tuple[_Token, str]]:
    """Tokens with their literal text, ending in END. A NUL ends the input, as upstream's
    byte reader treats it."""
    text = text.split("\0", 1)[0]
    tokens: list[tuple[_Token, str]] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos] in _WHITESPACE:
            pos += 1
        if pos == len(text):
            tokens.append((_Token.END, ""))
            return tokens
        if text[pos] in _SPECIAL_CHARS:
            # the longest symbol wins: "!=" and "==" are the only two-character ones
            symbol = text[pos : pos + 2] if text[pos : pos + 2] in ("!=", "==") else text[pos]
            tokens.append((_SYMBOL_TOKENS[symbol], symbol))
            pos += len(symbol)
            continue
        start = pos
        while pos < len(text) and text[pos] not in _SPECIAL_CHARS and text[pos] not in _WHITESPACE:
            pos += 1
        word = text[start:pos]
        tokens.append((_KEYWORD_TOKENS.get(word, _Token.IDENTIFIER), word))


class _Parser:
    """Recursive descent over the token list. In value position (``values=True``) the
    keywords ``in``/``notin`` are plain identifiers."""

    def __init__(self, text: str):
        self.tokens = _lex(text)
        self.position = 0

    def lookahead(self, values: bool = True) -> tuple[_Token, str]:
        return self._as_context(self.tokens[self.position], values)

    def consume(self, values: bool = True) -> tuple[_Token, str]:
        self.position += 1
        return self._as_context(self.tokens[self.position - 1], values)

    @staticmethod
    def _as_context(item: tuple[_Token, str], values: bool) -> tuple[_Token, str]:
        token, literal = item
        if values and token in (_Token.IN, _Token.NOT_IN):
            return _Token.IDENTIFIER, literal
        return token, literal

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            token, literal = self.lookahead()
            if token is _Token.END:
                return requirements
            if token not in (_Token.IDENTIFIER, _Token.DOES_NOT_EXIST):
                raise bad_request(f"found '{literal}', expected: !, identifier, or 'end of string'")
            requirements.append(self.requirement())
            token, literal = self.consume()
            if token is _Token.END:
                return requirements
            if token is not _Token.COMMA:
                raise bad_request(f"found '{literal}', expected: ',' or 'end of string'")
            next_token, next_literal = self.lookahead()
            if next_token not in (_Token.IDENTIFIER, _Token.DOES_NOT_EXIST):
                raise bad_request(f"found '{next_literal}', expected: identifier after ','")

    def requirement(self) -> Requirement:
        try:
            key, operator = self.key_and_inferred_operator()
            if operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
                return new_requirement(key, operator, ())
            operator = self.operator()
            values = self.value_set() if operator in (Operator.IN, Operator.NOT_IN) else self.exact_value()
            return new_requirement(key, operator, sorted(values))
        except StatusError as e:
            raise bad_request(f"unable to parse requirement: {e.message}") from None

    def key_and_inferred_operator(self) -> tuple[str, Operator | None]:
        operator = None
        token, literal = self.consume()
        if token is _Token.DOES_NOT_EXIST:
            operator = Operator.DOES_NOT_EXIST
            token, literal = self.consume()
        if token is not _Token.IDENTIFIER:
            raise bad_request(f"found '{literal}', expected: identifier")
        if key_errors := _qualified_name_errors(literal):
            raise bad_request(_invalid("<nil>", go_quote(literal), "; ".join(key_errors)))
        if self.lookahead()[0] in (_Token.END, _Token.COMMA) and operator is None:
            operator = Operator.EXISTS
        return literal, operator

    def operator(self) -> Operator:
        token, literal = self.consume(values=False)
        if token not in _BINARY_OPERATORS:
            raise bad_request(f"found '{literal}', expected: {_EXPECTED_OPERATORS}")
        return _BINARY_OPERATORS[token]

    def value_set(self) -> set[str]:
        token, literal = self.consume()
        if token is not _Token.OPEN_PAR:
            raise bad_request(f"found '{literal}' expected: '('")
        token, literal = self.lookahead()
        if token is _Token.CLOSED_PAR:  # "()" is the set holding the empty string
            self.consume()
            return {""}
        if token not in (_Token.IDENTIFIER, _Token.COMMA):
            raise bad_request(f"found '{literal}', expected: ',', ')' or identifier")
        values = self.identifier_list()
        self.consume()  # the ")" that identifier_list stopped at
        return values

    def identifier_list(self) -> set[str]:
        """A possibly empty, comma-separated list of possibly empty identifiers, up to ")"."""
        values: set[str] = set()
        while True:
            token, literal = self.consume()
            if token is _Token.IDENTIFIER:
                values.add(literal)
                next_token, next_literal = self.lookahead()
                if next_token is _Token.CLOSED_PAR:
                    return values
                if next_token is not _Token.COMMA:
                    raise bad_request(f"found '{next_literal}', expected: ',' or ')'")
            elif token is _Token.COMMA:
                if not values:
                    values.add("")  # "(,"
                next_token = self.lookahead()[0]
                if next_token is _Token.CLOSED_PAR:
                    values.add("")  # ",)"
                    return values
                if next_token is _Token.COMMA:
                    values.add("")  # ",,"
            else:
                raise bad_request(f"found '{literal}', expected: ',', or identifier")

    def exact_value(self) -> set[str]:
        if self.lookahead()[0] in (_Token.END, _Token.COMMA):
            return {""}
        token, literal = self.consume()
        if token is not _Token.IDENTIFIER:
            raise bad_request(f"found '{literal}', expected: identifier")
        return {literal}


def parse_label_selector(text: str) -> LabelSelector:
    """labels.Parse: the ``labelSelector`` query parameter. Raises 400 BadRequest."""
    return _sorted_by_key(_Parser(text).parse())


# ---- field selectors (fields/selector.go) -----------------------------------------------------

_ALWAYS_SELECTABLE = {"metadata.name": ("metadata", "name"), "metadata.namespace": ("metadata", "namespace")}
_TERM_OPERATORS = ("!=", "==", "=")  # "==" before "=" so the second "=" is not read as value


@dataclass(frozen=True)
class FieldTerm:
    """``field=value`` or, with ``negated``, ``field!=value``; ``path`` locates the field and
    ``missing`` is the text an absent field compares as."""

    field: str
    value: str
    negated: bool
    path: tuple[str, ...]
    missing: str = ""

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (_field_text(obj, self.path, self.missing) == self.value) != self.negated


def _field_text(obj: Mapping[str, Any], path: tuple[str, ...], missing: str) -> str:
    """The field's value as upstream's field sets hold it: bools as "true"/"false", numbers
    in decimal, anything else (objects, lists) as ""."""
    value: Any = obj
    for step in path:
        if not isinstance(value, Mapping) or step not in value:
            return missing
        value = value[step]
    if value is None:
        return missing
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    return ""


def _missing_text(schema: Type | None, path: tuple[str, ...]) -> str:
    """What upstream's Go structs hold for an absent field: the zero value of its type, so an
    absent ``spec.unschedulable`` selects as "false" and an absent integer as "0"."""
    for step in path:
        schema = child(schema, step)
    if isinstance(schema, Scalar) and schema.kind == "boolean":
        return "false"
    if isinstance(schema, Scalar) and schema.kind in ("integer", "number"):
        return "0"
    return ""


@dataclass(frozen=True)
class FieldSelector:
    terms: tuple[FieldTerm, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(term.matches(obj) for term in self.terms)

    def exact_name(self) -> str | None:
        """The name every match must have (``metadata.name=X``), so a list can fetch one key."""
        for term in self.terms:
            if term.field == "metadata.name" and not term.negated:
                return term.value
        return None


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not backslash-escaped (escapes stay in the pieces)."""
    terms, start, escaped = [], 0, False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    for i in range(len(term)):
        for operator in _TERM_OPERATORS:
            if term.startswith(operator, i):
                return term[:i], operator, term[i + len(operator) :]
    return None


def _unescape_value(value: str) -> str:
    """fields.UnescapeValue: ``\\\\``, ``\\,`` and ``\\=`` are the only escapes."""
    out, escaped = [], False
    for ch in value:
        if escaped:
            if ch not in "\\,=":
                raise bad_request(f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in ",=":
            # upstream formats the rune with %v, which prints its code point
            raise bad_request(f"invalid field selector: unescaped character in value: {ord(ch)}")
        else:
            out.append(ch)
    if escaped:
        raise bad_request("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def parse_field_selector(text: str, allowed: Mapping[str, tuple[str, ...]], schema: Type | None = None) -> FieldSelector:
    """fields.ParseSelector followed by the kind's field-label conversion.

    ``allowed`` maps the kind's extra selectable fields to JSON paths; ``metadata.name`` and
    ``metadata.namespace`` are always selectable. With the kind's ``schema``, an absent field
    compares as its type's zero value (see :func:`_missing_text`); without it, as "".
    Raises 400 BadRequest.
    """
    parsed: list[tuple[str, str, bool]] = []
    for part in sorted(_split_terms(text) if text else []):
        if not part:
            continue
        split = _split_term(part)
        if split is None:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field, operator, raw_value = split
        parsed.append((field, _unescape_value(raw_value), operator == "!="))
    selectable = {**_ALWAYS_SELECTABLE, **allowed}
    terms = []
    for field, value, negated in parsed:
        if field not in selectable:
            if allowed:
                raise bad_request(f"field label not supported: {field}")
            raise bad_request(f'{go_quote(field)} is not a known field selector: only "metadata.name", "metadata.namespace"')
        path = tuple(selectable[field])
        terms.append(FieldTerm(field, value, negated, path, _missing_text(schema, path)))
    return FieldSelector(tuple(terms))
