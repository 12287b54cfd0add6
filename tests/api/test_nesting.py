"""Nesting and alias limits: the scans of api/nesting.py and the event composer of api/yamljson.py.

The property that keeps the server alive: no text the YAML scan passes nests libyaml's events
deeper than the scan says (``test_yaml_scan_never_counts_less_than_libyaml``), and the composer
never builds a value deeper than MAX_DEPTH, whatever libyaml's parser does (``[?],`` nests one
level per four bytes there, which no bracket count sees).
"""

from __future__ import annotations

import json
import random
import time

import pytest
import yaml

from kubesvc.api import nesting
from kubesvc.api.yamljson import YAMLBodyError, yaml_to_json
from tests.support.slowdown import scaled

LIMIT = nesting.MAX_DEPTH
nesting.ensure_recursion_headroom()  # as the apiserver does: values MAX_DEPTH deep are compared here


def scanner_flow_level(text: str) -> int:
    """The deepest flow level YAML's scanner reaches while the parser asks it for tokens (the
    factor in libyaml's running time; it stops at the parser's first error). PyYAML's Python
    scanner is libyaml's, ported; it shows its flow level as it goes."""
    loader = yaml.SafeLoader(text)
    deepest = 0
    try:
        while loader.check_event():
            loader.get_event()
            deepest = max(deepest, loader.flow_level)
    except yaml.YAMLError:
        deepest = max(deepest, loader.flow_level)
    return deepest


def libyaml_depth(text: str) -> int:
    """The deepest nesting of the events libyaml emits before it stops (its parser's own tree)."""
    depth = deepest = 0
    try:
        for event in yaml.parse(text, Loader=yaml.CSafeLoader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                deepest = max(deepest, depth)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError:
        pass
    return deepest


def nested(depth: int) -> object:
    value: object = 1
    for level in range(depth):
        value = [value] if level % 2 else {"a": value}
    return value


def nested_json(depth: int) -> str:
    """``nested(depth)`` as JSON text, built without recursion."""
    opening = "".join("[" if level % 2 else '{"a":' for level in reversed(range(depth)))
    closing = "".join("]" if level % 2 else "}" for level in range(depth))
    return opening + "1" + closing


# ---- JSON -------------------------------------------------------------------------------------


@pytest.mark.parametrize("body, message", [
    pytest.param(b"[" * (LIMIT + 1) + b"]" * (LIMIT + 1), "invalid character '[' exceeded max depth", id="arrays"),
    pytest.param(b'{"a":' * (LIMIT + 1) + b"1" + b"}" * (LIMIT + 1), "invalid character '{' exceeded max depth", id="objects"),
    pytest.param(b"[" * 30000, "invalid character '[' exceeded max depth", id="unclosed"),
])
def test_json_past_the_limit_is_refused_in_go_words(body, message):
    with pytest.raises(nesting.NestingError) as caught:
        nesting.check_json_depth(body)
    assert str(caught.value) == message


@pytest.mark.parametrize("body", [
    pytest.param(nested_json(LIMIT).encode(), id="at-the-limit"),
    pytest.param(json.dumps({"s": "[" * 5000, "t": "{" * 5000}).encode(), id="brackets-in-strings"),
    pytest.param(json.dumps({"s": '\\"[[[' * 3000}).encode(), id="escaped-quotes-in-strings"),
    pytest.param(json.dumps([[1] * 10] * 3000).encode(), id="wide"),
])
def test_json_within_the_limit_passes(body):
    nesting.check_json_depth(body)


# ---- YAML text scan ---------------------------------------------------------------------------


@pytest.mark.parametrize("text, depth", [
    pytest.param("a: b", 1, id="mapping"),
    pytest.param("a:\n  b:\n    c: [1, [2]]", 5, id="block-and-flow"),
    pytest.param("- - - x", 3, id="compact-sequences"),
    pytest.param("k1:\n- 1\nk2:\n- 2\n", 2, id="indentless-sequences"),
    pytest.param('k: "[[[["\nl: \'{{{\'', 1, id="quoted"),
    pytest.param("k: |\n  [[[[\n  [[[\nz: 1", 1, id="block-scalar"),
    pytest.param("k: a [[[ b\n  [[[ continued", 1, id="plain-scalar-lines"),
    pytest.param("k: 1 # [[[[\n", 1, id="comment"),
    pytest.param("[[1]]: v", 3, id="flow-key"),
    pytest.param("[a: b]", 2, id="flow-pair"),
    pytest.param('{"a":{"b":[1]}}', 3, id="json"),
])
def test_yaml_scan_counts_levels_as_libyaml_builds_them(text, depth):
    assert nesting.yaml_depth(text)[0] == depth == libyaml_depth(text)


@pytest.mark.parametrize("text, message", [
    pytest.param("apiVersion: v1\nkind: Service\nmetadata:\n  name: t\nx: " + "[" * 30000 + "]" * 30000,
                 f"yaml: line 5: exceeded max depth of {LIMIT}", id="the-issue's-body"),
    pytest.param("x: " + "[" * LIMIT, f"yaml: exceeded max depth of {LIMIT}", id="first-line-names-no-line"),
    pytest.param("".join(" " * i + "- a:\n" for i in range(0, 2 * LIMIT + 4, 2)), "exceeded max depth", id="block"),
])
def test_yaml_past_the_limit_is_refused_in_go_yaml_words(text, message):
    with pytest.raises(nesting.NestingError) as caught:
        nesting.check_yaml_depth(text)
    assert message in str(caught.value)


TOKENS = ["[", "]", "{", "}", ",", ":", ": ", "- ", "? ", "#", " #", '"', "'", "\\", "|", ">", "|2", ">-", "&a ", "*a",
          "!t ", "\n", "\n  ", "\n    ", "\n ", "  ", " ", "a", "b c", "k: ", "---", "--- ", "...", "\t", "\r\n",
          "''", '""', "x:y", ":[", "-", "?", "[1, [2, [3", "]]]", '{"k":']


STRUCTURED = ["[", "]", "{", "}", ", ", ": ", "- ", "? ", "\n", "\n  ", "\n    ", "\n      ", "a", "k: ", '"q"', "'s'",
              "|\n", ">\n", "&x ", "*x", " # c", "\t", "b: [", "- [", "- {a: ", '{"k":', "[1, [2, [3", "]]]", "[a: b]"]


def parses(text: str) -> bool:
    try:
        for _ in yaml.parse(text, Loader=yaml.CSafeLoader):
            pass
        return True
    except yaml.YAMLError:
        return False


@pytest.mark.parametrize("seed", range(4))
def test_yaml_scan_never_counts_less_than_libyaml(seed):
    """Random documents from YAML's syntax that libyaml parses: the scan's depth is at least the
    flow level libyaml's scanner reaches (the factor in its running time) and the depth of the
    events its parser emits (what PyYAML's C composer would recurse into). Where libyaml's
    parser stops at an error, it reads at most a line ahead of it, and the composer counts the
    events' depth itself."""
    rng = random.Random(seed)
    checked = 0
    for _ in range(8000):
        text = "".join(rng.choice(rng.choice((TOKENS, STRUCTURED))) for _ in range(rng.randint(1, 40)))
        if not parses(text):
            continue
        checked += 1
        scanned = nesting.yaml_depth(text)[0]
        assert scanned >= scanner_flow_level(text), repr(text)
        assert scanned >= libyaml_depth(text), repr(text)
    assert checked > 400


def test_yaml_scan_is_linear():
    wide = "x: [" + ",".join(["[" * 100 + "1" + "]" * 100] * 3000) + "]"
    # CPU time of this thread, not wall time: a loaded machine (other xdist workers, kernel
    # tests) stretches wall time, never the work a quadratic scan would do.
    started = time.thread_time()
    assert nesting.yaml_depth(wide)[0] == 102
    assert time.thread_time() - started < scaled(2.0)


# ---- YAML aliases and composition -------------------------------------------------------------


def billion_laughs() -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text, message", [
    pytest.param(billion_laughs(), "yaml: document contains excessive aliasing", id="billion-laughs"),
    # go-yaml's own limit test: 1000 kB of maps with 100 aliases
    pytest.param("{a: &a [{a}" + ",{a}" * (1000 * 1024 // 4 - 100) + "], b: &b [*a" + ",*a" * 99 + "]}",
                 "yaml: document contains excessive aliasing", id="go-yaml-1000kb-100-aliases"),
    pytest.param("a: &a [*a]", "yaml: anchor 'a' value contains itself", id="recursive"),
    pytest.param("b: *nowhere", "yaml: unknown anchor 'nowhere' referenced", id="undefined"),
    pytest.param("[?]," * 30000, f"yaml: exceeded max depth of {LIMIT}", id="libyaml-swallowed-brackets"),  # segfaulted PyYAML
    pytest.param("a: &a " + "[" * 600 + "]" * 600 + "\nb: " + "[" * 600 + "*a" + "]" * 600,
                 f"yaml: line 2: exceeded max depth of {LIMIT}", id="deep-through-an-alias"),
    pytest.param("x: .inf", "json: unsupported value: +Inf", id="infinity"),
])
def test_yaml_refused(text, message):
    started = time.thread_time()
    with pytest.raises(YAMLBodyError) as caught:
        yaml_to_json(text)
    assert str(caught.value) == message
    assert time.thread_time() - started < scaled(10.0)


@pytest.mark.parametrize("text, value", [
    pytest.param("a: 1\nb: [1, 2, {c: d}]", {"a": 1, "b": [1, 2, {"c": "d"}]}, id="plain"),
    pytest.param("a: &x {k: v}\nb: *x", {"a": {"k": "v"}, "b": {"k": "v"}}, id="alias"),
    pytest.param("base: &b {a: 1, b: 2}\nm:\n  <<: *b\n  b: 3", {"base": {"a": 1, "b": 2}, "m": {"a": 1, "b": 3}}, id="merge-key"),
    pytest.param("1: yes\nnull: ~\n2.5: x", {"1": True, "null": None, "2.5": "x"}, id="keys-as-json-strings"),
    pytest.param("d: 2001-12-14\nt: !!timestamp 2001-12-14", {"d": "2001-12-14", "t": "2001-12-14"}, id="timestamps-stay-strings"),
    pytest.param("x: " + "1" * 5000, {"x": "1" * 5000}, id="number-too-large-is-a-string"),
    pytest.param("a: 1\n---\nb: 2", {"a": 1}, id="first-document-only"),
    pytest.param("", None, id="empty"),
    pytest.param(nested_json(LIMIT), nested(LIMIT), id="json-at-the-limit"),
])
def test_yaml_to_json(text, value):
    assert yaml_to_json(text) == value


def test_aliases_are_copies():
    document = yaml_to_json("a: &x {k: [1]}\nb: *x")
    document["a"]["k"].append(2)
    assert document["b"] == {"k": [1]}


@pytest.mark.parametrize("seed", range(2))
def test_composer_raises_only_yaml_errors(seed):
    rng = random.Random(seed)
    for _ in range(3000):
        text = "".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 40)))
        try:
            yaml_to_json(text)
        except YAMLBodyError:
            pass
