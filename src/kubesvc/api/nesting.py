"""Nesting and alias limits for request bodies, checked on the bytes before any recursive parse.

A JSON or YAML body is a tree, and every parser that builds it, and every piece of code that
walks it afterwards (decoding, patching, apply, encoding), follows it by recursion. A body
30,000 levels deep is 60 KB, and it exhausts whatever stack that recursion runs on. Upstream's
decoders refuse such bodies while they scan them:

* Go's ``encoding/json`` scanner (and ``sigs.k8s.io/json``, its fork that kube-apiserver
  decodes with) stops at ``maxNestingDepth = 10000`` with a ``SyntaxError``:
  ``invalid character '[' exceeded max depth``. For a create, ``SimpleMetaFactory.Interpret``
  hits it first and the handler's ``transformDecodeError`` words the 400 as
  ``the object provided is unrecognized (must be of type Service): couldn't get version/kind;
  json parse error: invalid character '[' exceeded max depth ({"a":{"a":{"a":… ...)``.
* go-yaml v2 (``go.yaml.in/yaml/v2``, behind ``sigs.k8s.io/yaml``) stops at
  ``max_flow_level = 10000`` flow collections (``[``/``{``) and ``max_indents = 10000`` block
  levels with the scanner error ``yaml: line 5: exceeded max depth of 10000`` (no ``line N:``
  on the first line, as go-yaml's ``parser.fail`` words it).
* go-yaml v2 bounds alias expansion, upstream's fix for CVE-2019-11253 ("billion laughs"): the
  decoder counts every node it decodes (``decodeCount``) and those it decodes inside an alias
  (``aliasCount``), and fails with ``yaml: document contains excessive aliasing`` once
  ``aliasCount > 100 && decodeCount > 1000`` and the alias share exceeds 99% (up to 400,000
  decodes), falling linearly to 10% at 4,000,000 (``allowedAliasRatio``). An alias inside its
  own anchor is ``yaml: anchor 'a' value contains itself``; an alias of an anchor not (yet)
  defined is ``yaml: unknown anchor 'a' referenced``.

kubesvc's parsers and tree walkers run in Python, where recursion is bounded by the
interpreter's recursion limit and the C stack (PyYAML's C composer segfaults near 30,000
levels; msgspec at the recursion limit). So kubesvc refuses nesting deeper than
``MAX_DEPTH = 1000`` levels, upstream's wording with kubesvc's number, and
``ensure_recursion_headroom`` gives the apiserver's interpreter room for every walk of a tree
that deep (a few frames per level). No real object comes near: a Pod is about 15 levels deep.
For YAML, flow and block levels count together (go-yaml limits each of them separately).

The checks run before any parser: JSON by its brackets outside strings (``check_json_depth``),
YAML by a small scanner that follows YAML's quoting, comments, block scalars, plain-scalar
continuation lines and flow/block structure (``yaml_depth``); both linear. The YAML scan may
count a level too many on odd input, never a flow level too few, so libyaml's scanner (whose
time grows with input times flow depth) only ever sees shallow text. The tree libyaml's
parser builds is counted again, exactly, on its events as ``yamljson.yaml_to_json`` composes
the value, together with go-yaml's alias budget (``check_alias_budget``).
"""

from __future__ import annotations

import re
import sys
from itertools import accumulate

MAX_DEPTH = 1000
RECURSION_LIMIT = 8 * MAX_DEPTH  # a few frames per level of the deepest walks, and the server's own stack


class NestingError(ValueError):
    """A body nested deeper than ``MAX_DEPTH`` or aliasing past the budget; ``str()`` is the
    decoder's message (``invalid character '[' exceeded max depth``, ``yaml: …``)."""


def ensure_recursion_headroom() -> None:
    """Let the interpreter recurse through trees ``MAX_DEPTH`` deep (each level may take a few
    frames of Python and of C): ``RECURSION_LIMIT`` frames, which stay well inside the main
    thread's C stack."""
    if sys.getrecursionlimit() < RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)


# ---- JSON -----------------------------------------------------------------------------------

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [0] * 256
for _b in b"[{":
    _STEP[_b] = 1
for _b in b"]}":
    _STEP[_b] = -1


def check_json_depth(body: bytes, limit: int = MAX_DEPTH) -> None:
    """Raise ``NestingError`` (Go's scanner wording) when ``body`` nests more than ``limit`` arrays
    and objects. Linear; a body with few brackets is passed on two ``bytes.count`` calls."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    levels = list(accumulate(map(_STEP.__getitem__, brackets)))
    if not levels or max(levels) <= limit:
        return
    opener = brackets[levels.index(limit + 1)]
    raise NestingError(f"invalid character '{chr(opener)}' exceeded max depth")


# ---- YAML depth -----------------------------------------------------------------------------

_FLOW_OPEN, _FLOW_CLOSE = "[{", "]}"
_FLOW_INDICATORS = ",[]{}"
_DOUBLE_QUOTED_END = re.compile(r'(?:[^"\\]|\\.)*"', re.S)
_SINGLE_QUOTED_END = re.compile(r"(?:[^']|'')*'")
_PLAIN_FLOW_END = re.compile(r"[,\[\]{}\n]|:(?=[ \t\n,\[\]{}])|:\Z| #|\t#")
_PLAIN_BLOCK_END = re.compile(r": |:\t|:$| #|\t#", re.M)
_PROPERTY = re.compile(r"(?:(?:&[0-9A-Za-z_-]*|![^ \t\n,\[\]{}]*)(?:[ \t]+|$))+", re.M)
_BLOCK_SCALAR_HEADER = re.compile(r"[|>]([1-9]?)[-+]?([1-9]?)")
_NOT_BLANK = re.compile(r"[^ \t]")


def yaml_text(body: bytes) -> str:
    """A YAML body as text, decoded as libyaml and go-yaml read it: UTF-16 when it starts with
    a UTF-16 byte order mark, else UTF-8. ``UnicodeDecodeError`` when it is neither."""
    if body.startswith((b"\xff\xfe", b"\xfe\xff")):
        return body.decode("utf-16")
    return body.decode("utf-8-sig")


def check_yaml_depth(text: str, limit: int = MAX_DEPTH) -> None:
    """Raise ``NestingError`` (go-yaml's wording) when ``text`` nests more than ``limit`` levels."""
    bound = text.count("[") + text.count("{") + text.count("\n") + text.count("-") + text.count("?") + 1
    if bound <= limit:  # every level needs one of these: no scan needed
        return
    depth, line = yaml_depth(text, stop_above=limit)
    if depth > limit:
        raise NestingError(yaml_depth_message(line, limit))


def yaml_depth_message(line: int, limit: int = MAX_DEPTH) -> str:
    """go-yaml's scanner error at 0-based ``line`` (``parser.fail`` names no line 0)."""
    where = f"line {line + 1}: " if line else ""
    return f"yaml: {where}exceeded max depth of {limit}"


def yaml_depth(text: str, stop_above: int | None = None) -> tuple[int, int]:
    """The deepest nesting of collections in a YAML stream (flow and block levels together),
    and the 0-based line where it is first reached. Never less than what libyaml builds from
    the same text; it stops early once the depth passes ``stop_above``."""
    scan = _YAMLDepth(_LINE_BREAKS.sub("\n", text), stop_above)
    try:
        scan.run()
    except _Stop:
        pass
    return scan.deepest, scan.deepest_line


# ---- YAML aliases ---------------------------------------------------------------------------

ALIAS_RATIO_RANGE_LOW = 400_000  # go-yaml v2 decode.go: up to here 99% of decodes may come from aliases
ALIAS_RATIO_RANGE_HIGH = 4_000_000  # from here 10%
EXPANSION_CAP = 10**12  # more than any body holds outside aliases: past it the alias share is ~1


def allowed_alias_ratio(decode_count: int) -> float:
    """go-yaml v2's ``allowedAliasRatio``: the share of decodes aliases may account for."""
    if decode_count <= ALIAS_RATIO_RANGE_LOW:
        return 0.99
    if decode_count >= ALIAS_RATIO_RANGE_HIGH:
        return 0.10
    return 0.99 - 0.89 * (decode_count - ALIAS_RATIO_RANGE_LOW) / (ALIAS_RATIO_RANGE_HIGH - ALIAS_RATIO_RANGE_LOW)


def check_alias_budget(decoded: int, aliased: int) -> None:
    """go-yaml's check, run at every node it decodes: ``decoded`` nodes so far (aliases expanded),
    ``aliased`` of them inside aliases. The 400 of CVE-2019-11253's fix once aliases dominate."""
    if aliased > 100 and decoded > 1000 and aliased / decoded > allowed_alias_ratio(decoded):
        raise NestingError("yaml: document contains excessive aliasing")


class _Stop(Exception):
    """Stop scanning: deep enough, or libyaml would stop here (an unterminated quoted scalar)."""


class _YAMLDepth:
    """A cursor over the text: line by line in block context, token by token in flow context.

    Block levels follow go-yaml's indent stack (``roll_indent``/``unroll_indent``): a sequence
    entry (``- ``), an explicit key (``? ``) or a simple key (``key:``) at a column deeper than
    the current indent opens a level; a line starting left of an indent closes it. Flow levels
    are ``[``/``{`` outside quoted scalars and comments. Quoted scalars, comments, block scalars
    (``|``/``>`` and their more-indented lines) and the continuation lines of a multi-line plain
    scalar hold no structure and are skipped. Where libyaml would stop with an error, going on
    can only count more."""

    def __init__(self, text: str, stop_above: int | None):
        self.text = text
        self.end = len(text)
        self.stop = stop_above
        self.indents: list[int] = []
        self.kinds: list[str] = []  # per indent: "seq", "map" or "indentless" (a sequence at its mapping's column)
        self.flow = 0
        self.deepest = 0
        self.deepest_line = 0
        self.flow_peak = 0  # the deepest level reached while scanning the current flow collection
        self._line_no = 0  # the line number of position _line_pos, advanced lazily
        self._line_pos = 0
        # what the next lines may be, in block context
        self.block_scalar_parent: int | None = None  # a block scalar is open under this indent
        self.block_scalar_indent = 0  # its content indent, 0 until its first non-blank line
        self.plain_parent: int | None = None  # a plain scalar may continue on lines deeper than this

    def run(self) -> None:
        pos = 0
        while pos < self.end:
            pos = self._block_line(pos)

    # -- bookkeeping

    def _line_of(self, pos: int) -> int:
        if pos > self._line_pos:
            self._line_no += self.text.count("\n", self._line_pos, pos)
            self._line_pos = pos
        return self._line_no

    def _reached(self, pos: int) -> None:
        depth = len(self.indents) + self.flow
        if depth > self.flow_peak:
            self.flow_peak = depth
        self._record(depth, pos)

    def _record(self, depth: int, pos: int) -> None:
        if depth > self.deepest:
            self.deepest, self.deepest_line = depth, self._line_of(pos)
            if self.stop is not None and depth > self.stop:
                raise _Stop

    def _push_block(self, column: int, pos: int, kind: str = "map") -> bool:
        """A block collection (``seq`` or ``map``) starting at ``column``: a level when deeper than
        the current indent; a sequence entry at its mapping's own column is an indentless
        sequence ("key:\\n- a"), a level libyaml's events open though go-yaml's indent stack does
        not count it."""
        if not self.indents or self.indents[-1] < column:
            self.indents.append(column)
            self.kinds.append(kind)
        elif kind == "seq" and self.indents[-1] == column and self.kinds[-1] == "map":
            self.indents.append(column)
            self.kinds.append("indentless")
        else:
            return False
        self._reached(pos)
        return True

    def _next_line(self, pos: int) -> int:
        newline = self.text.find("\n", pos)
        return self.end if newline < 0 else newline + 1

    def _line_end(self, pos: int) -> int:
        newline = self.text.find("\n", pos)
        return self.end if newline < 0 else newline

    # -- block context

    def _block_line(self, start: int) -> int:
        """Scan the line starting at ``start``; return where scanning goes on."""
        text = self.text
        end = self._line_end(start)
        found = _NOT_BLANK.search(text, start, end)
        if found is None:
            return end + 1  # a blank line ends nothing
        first = found.start()
        column = first - start
        if self.block_scalar_parent is not None:
            if self.block_scalar_indent == 0 and column > self.block_scalar_parent:
                self.block_scalar_indent = column
            if self.block_scalar_indent and column >= self.block_scalar_indent:
                return end + 1
            self.block_scalar_parent = None
        if text[first] == "#":
            return end + 1
        marker = column == 0 and text.startswith(("---", "..."), first) and (first + 3 >= end or text[first + 3] in _SPACE_OR_END)
        if self.plain_parent is not None and column > self.plain_parent and not marker:
            # a continuation line of a multi-line plain scalar (": " in it is an error libyaml
            # raises before anything after it); " #" ends the scalar
            if _COMMENT_IN_LINE.search(text, first, end):
                self.plain_parent = None
            return end + 1
        self.plain_parent = None
        if marker:
            self.indents.clear()
            self.kinds.clear()
            first = _skip_blank(text, first + 3, end)
            if text[start] == "." or first >= end:
                return end + 1
            return self._node(first, end, start, block_entries=False)
        entry = text[first] == "-" and (first + 1 >= end or text[first + 1] in _SPACE_OR_END)
        while self.indents and (self.indents[-1] > column or self.kinds[-1] == "indentless" and self.indents[-1] == column and not entry):
            self.indents.pop()
            self.kinds.pop()
        return self._node(first, end, start, block_entries=True)

    def _node(self, pos: int, end: int, line_start: int, block_entries: bool) -> int:
        """Indicators, properties and then one node, starting at ``pos`` on a block line."""
        text = self.text
        while block_entries and pos < end and text[pos] in "-?:" and (pos + 1 >= end or text[pos + 1] in _SPACE_OR_END):
            self._push_block(pos - line_start, pos, "seq" if text[pos] == "-" else "map")  # ":" without a key opens a mapping too
            pos = _skip_blank(text, pos + 1, end)
        column = pos - line_start  # a key's level opens where its properties start
        properties = _PROPERTY.match(text, pos, end)
        if properties:
            pos = properties.end()
        if pos >= end or text[pos] == "#":
            return end + 1
        char = text[pos]
        if char == ":" and (pos + 1 >= end or text[pos + 1] in _SPACE_OR_END):  # an empty key
            self._push_block(column, pos)
            value = _skip_blank(text, pos + 1, end)
            return self._node(value, end, line_start, block_entries=False) if value < end else end + 1
        if char in _FLOW_OPEN:
            self.flow_peak = 0
            after = self._flow(pos)
            return self._after_scalar(after, column, line_start, self.flow_peak)
        if char in "\"'":
            return self._after_scalar(self._quoted(pos), column, line_start, 0)
        if char == "*":  # an alias: a whole node
            return self._after_scalar(_ANCHOR_NAME.match(text, pos + 1).end(), column, line_start, 0)
        if char in "|>":
            header = _BLOCK_SCALAR_HEADER.match(text, pos, end)
            parent = self.indents[-1] if self.indents else -1
            explicit = header.group(1) or header.group(2)
            self.block_scalar_parent = parent
            self.block_scalar_indent = max(parent, 0) + int(explicit) if explicit else 0
            return end + 1
        stop = _PLAIN_BLOCK_END.search(text, pos, end)
        if stop and text[stop.start()] == ":":  # a simple key
            self._push_block(column, pos)
            value = _skip_blank(text, stop.start() + 1, end)
            return self._node(value, end, line_start, block_entries=False) if value < end else end + 1
        if stop is None:
            self.plain_parent = self.indents[-1] if self.indents else -1
        return end + 1

    def _after_scalar(self, pos: int, column: int, line_start: int, flow_peak: int) -> int:
        """After a quoted scalar or a flow collection in block context: a ``:`` indicator later
        on the line makes the last scalar before it a key (also when the scalar ended on a
        later line: libyaml refuses that key, and counting it can only count more). libyaml
        opens the key's mapping before the key, so a flow collection that turns out to be a
        key was one level deeper than counted while it was scanned (``flow_peak``)."""
        text = self.text
        end = self._line_end(pos)
        following = _skip_blank(text, pos, end)
        if following < end and text[following] not in ":#":
            # more on the line: libyaml's scanner reads it ahead (an invalid document, which its
            # parser refuses after), so scan it as another node
            return self._node(following, end, text.rfind("\n", 0, following) + 1, block_entries=False)
        stop = _PLAIN_BLOCK_END.search(text, pos, end)
        if stop is None or text[stop.start()] != ":":
            return end + 1
        colon = stop.start()
        start_of_line = text.rfind("\n", 0, colon) + 1
        plain = _skip_blank(text, pos, end)
        if plain < colon:  # a plain scalar between them is the key
            column = plain - start_of_line
        elif start_of_line != line_start:
            column = _skip_blank(text, start_of_line, end) - start_of_line
        if self._push_block(column, colon) and flow_peak:
            self._record(flow_peak + 1, colon)
        value = _skip_blank(text, colon + 1, end)
        return self._node(value, end, start_of_line, block_entries=False) if value < end else end + 1

    def _quoted(self, pos: int) -> int:
        """The position after the quoted scalar starting at ``pos``."""
        pattern = _DOUBLE_QUOTED_END if self.text[pos] == '"' else _SINGLE_QUOTED_END
        match = pattern.match(self.text, pos + 1)
        if match is None:
            raise _Stop  # unterminated: libyaml stops at the end of the stream
        return match.end()

    # -- flow context

    def _flow(self, pos: int) -> int:
        """Scan the flow collection opening at ``pos``; return the position after it closes."""
        text, end = self.text, self.end
        in_plain = False
        # per open flow collection: 1 while a "key: value" pair inside a sequence is open, which
        # libyaml makes a single-pair mapping (a level of its own)
        pairs: list[int] = []
        sequences: list[bool] = []
        # per open flow collection: the deepest level reached inside it, and inside the
        # collections it holds since its last ",": libyaml may make such a collection the key
        # of a pair, opening the pair's mapping before it
        peaks: list[int] = []
        child_peaks: list[int] = []
        base = self.flow
        while pos < end:
            char = text[pos]
            if char in _FLOW_OPEN:
                self.flow += 1
                pairs.append(0)
                sequences.append(char == "[")
                peaks.append(0)
                child_peaks.append(0)
                self._reached(pos)
                peaks[-1] = self.flow + len(self.indents)
                in_plain = False
                pos += 1
            elif char in _FLOW_CLOSE:
                self.flow -= pairs.pop() + 1
                sequences.pop()
                child_peaks.pop()
                peak = peaks.pop()
                pos += 1
                if not pairs:
                    self.flow = base
                    return pos
                peaks[-1] = max(peaks[-1], peak)
                child_peaks[-1] = max(child_peaks[-1], peak)
                in_plain = False
            elif char == ",":
                if pairs[-1]:
                    self.flow -= 1
                    pairs[-1] = 0
                child_peaks[-1] = 0
                in_plain = False
                pos += 1
            elif char in " \t\n":
                pos += 1
            elif char == "#" and (not in_plain or text[pos - 1] in _SPACE_OR_END):
                pos = self._line_end(pos)
                in_plain = False
            elif in_plain:
                stop = _PLAIN_FLOW_END.search(text, pos)
                if stop is None:
                    return end
                pos = stop.start()
                if text[pos] == ":":
                    in_plain = False
                    self._pair(pairs, sequences, peaks, child_peaks, pos)
                    pos += 1
                elif text[pos] in " \t":
                    pos += 1  # then "#" starts a comment
            elif char in "\"'":
                pos = self._quoted(pos)
            elif char in "?:" or char == "-" and (pos + 1 >= end or text[pos + 1] in _SPACE_OR_END or text[pos + 1] in _FLOW_INDICATORS):
                if char != "-":
                    self._pair(pairs, sequences, peaks, child_peaks, pos)
                pos += 1
            elif char in "&!*":
                pos = (_TAG_NAME if char == "!" else _ANCHOR_NAME).match(text, pos + 1).end()
            else:
                in_plain = True
                pos += 1
        return end

    def _pair(self, pairs: list[int], sequences: list[bool], peaks: list[int], child_peaks: list[int], pos: int) -> None:
        """A ``:`` or ``?`` in a flow sequence: a single-pair mapping, unless one is open."""
        if sequences and sequences[-1] and not pairs[-1]:
            pairs[-1] = 1
            self.flow += 1
            self._reached(pos)
            peaks[-1] = max(peaks[-1], self.flow + len(self.indents))
            if child_peaks[-1]:
                self._record(child_peaks[-1] + 1, pos)


_SPACE_OR_END = " \t\n"
_LINE_BREAKS = re.compile("\r\n?|[\x85\u2028\u2029]")  # YAML 1.1's line breaks, as libyaml reads them
_COMMENT_IN_LINE = re.compile(r"[ \t]#")
_TAG_NAME = re.compile(r"[^ \t\n,\[\]{}]*")
_ANCHOR_NAME = re.compile(r"[0-9A-Za-z_-]*")  # libyaml's anchor and alias names


def _skip_blank(text: str, pos: int, end: int) -> int:
    while pos < end and text[pos] in " \t":
        pos += 1
    return pos
