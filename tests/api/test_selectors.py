"""Label and field selectors, checked against upstream's own test tables and error texts.

Cases marked "upstream" come from k8s.io/apimachinery pkg/labels/selector_test.go
(TestSelectorParse, TestSelectorMatches, TestSetSelectorParser, TestToString); the error
messages are the strings upstream's parser, NewRequirement and field selector code produce.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubesvc.api.errors import StatusError
from kubesvc.api.schema import BOOL, INT32, STRING, F, Obj
from kubesvc.api.selectors import (
    everything,
    nothing,
    parse_field_selector,
    parse_label_selector,
    selector_from_label_selector,
    selector_from_map,
)

QNAME_DETAIL = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
VALUE_DETAIL = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"


def bad_request_message(fn, *args) -> str:
    with pytest.raises(StatusError) as caught:
        fn(*args)
    assert caught.value.code == 400 and caught.value.reason == "BadRequest"
    return caught.value.message


# ---- label selector parsing ---------------------------------------------------------------

# upstream TestSelectorParse: these parse and print back without their spaces
@pytest.mark.parametrize("text", ["x=a,y=b,z=c", "", "x!=a,y=b", "x=", "x= ", "x=,z= ", "x= ,z= ", "!x", "x>1", "x>1,z<5"])
def test_good_selectors_print_back_without_spaces(text):
    assert str(parse_label_selector(text)) == text.replace(" ", "")


@pytest.mark.parametrize(
    "text, printed",
    [
        pytest.param("\rx", "x", id="carriage-return-is-whitespace"),
        pytest.param("this-is-a-dns.domain.com/key-with-dash", "this-is-a-dns.domain.com/key-with-dash", id="prefixed-key"),
        pytest.param("0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)", "0.1.2.domain/99 notin (10.10.100.1,tick.tack.clock)", id="notin-with-spaces"),
        pytest.param("foo  in\t (abc)", "foo in (abc)", id="tabs"),
        pytest.param("x notin\n (abc)", "x notin (abc)", id="newline"),
        pytest.param("x in (abc,)", "x in (,abc)", id="trailing-comma-adds-empty"),
        pytest.param("x in ()", "x in ()", id="empty-set-is-empty-string"),
        pytest.param("x notin (abc,,def),bar,z in (),w", "bar,w,x notin (,abc,def),z in ()", id="sorted-by-key-double-comma"),
        pytest.param("x notin ( )", "x notin ()", id="space-in-parens"),
        pytest.param("x notin (, a)", "x notin (,a)", id="leading-comma"),
        pytest.param("a ", "a", id="trailing-space"),
        pytest.param("a in (x,y,notin, z,in)", "a in (in,notin,x,y,z)", id="keywords-as-values"),
        pytest.param("x=abc,y==jkl,z!=a", "x=abc,y==jkl,z!=a", id="operators-kept"),
        pytest.param("provider=kubernetes,component in (apiserver)", "component in (apiserver),provider=kubernetes", id="kubectl-cluster-info"),
    ],
)
def test_selector_parses_to(text, printed):
    assert str(parse_label_selector(text)) == printed


@pytest.mark.parametrize(
    "text, message",
    [
        pytest.param("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt", id="missing-operator"),
        pytest.param("a,", "found '', expected: identifier after ','", id="trailing-comma"),
        pytest.param(",x,y", "found ',', expected: !, identifier, or 'end of string'", id="leading-comma"),
        pytest.param("(", "found '(', expected: !, identifier, or 'end of string'", id="open-paren"),
        pytest.param("a (", "unable to parse requirement: found '(', expected: in, notin, =, ==, !=, gt, lt", id="paren-as-operator"),
        pytest.param("a notin(", "unable to parse requirement: found '', expected: ',', ')' or identifier", id="unterminated-set"),
        pytest.param("a in (xyz abc)", "unable to parse requirement: found 'abc', expected: ',' or ')'", id="no-comma-in-set"),
        pytest.param("x in (a", "unable to parse requirement: found '', expected: ',' or ')'", id="unclosed-set"),
        pytest.param("x in a", "unable to parse requirement: found 'a' expected: '('", id="set-without-parens"),
        pytest.param("x in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier", id="operator-in-set"),
        pytest.param("x in (a,=)", "unable to parse requirement: found '=', expected: ',', or identifier", id="operator-after-comma"),
        pytest.param("a in (xyz)b notin ()", "found 'b', expected: ',' or 'end of string'", id="missing-comma-between"),
        pytest.param("x==a==b", "found '==', expected: ',' or 'end of string'", id="double-equals-twice"),
        pytest.param("!x=a", "found '=', expected: ',' or 'end of string'", id="not-exists-with-value"),
        pytest.param("!", "unable to parse requirement: found '', expected: identifier", id="bare-bang"),
        pytest.param("x=(", "unable to parse requirement: found '(', expected: identifier", id="paren-as-value"),
        pytest.param("x<=3", "unable to parse requirement: found '=', expected: identifier", id="no-less-or-equal"),
        pytest.param("x>a", "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, the value must be an integer", id="gt-not-integer"),
        pytest.param("-bad", f'unable to parse requirement: <nil>: Invalid value: "-bad": {QNAME_DETAIL}', id="bad-key"),
        pytest.param("x=-b", f'unable to parse requirement: values[0][x]: Invalid value: "-b": {VALUE_DETAIL}', id="bad-value"),
        pytest.param("a/b/c", f"unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')", id="two-slashes"),
        pytest.param("/x", 'unable to parse requirement: <nil>: Invalid value: "/x": prefix part must be non-empty', id="empty-prefix"),
        pytest.param("x" * 64, f'unable to parse requirement: <nil>: Invalid value: "{"x" * 64}": name part must be no more than 63 characters', id="long-key"),
        pytest.param("x=" + "v" * 64, f'unable to parse requirement: values[0][x]: Invalid value: "{"v" * 64}": must be no more than 63 characters', id="long-value"),
        pytest.param("x>-", f"unable to parse requirement: [values[0]: Invalid value: \"-\": for 'Gt', 'Lt' operators, the value must be an integer, values[0][x]: Invalid value: \"-\": {VALUE_DETAIL}]", id="two-errors-aggregated"),
    ],
)
def test_bad_selectors_are_400_with_upstream_text(text, message):
    assert bad_request_message(parse_label_selector, text) == message


@pytest.mark.parametrize("text", ["x=a||y=b", "x,y in", "x nott in (y)", "x=a,y=b,", "x in (a,b"])
def test_other_bad_selectors(text):
    bad_request_message(parse_label_selector, text)


def test_nul_ends_the_selector_as_in_upstreams_byte_lexer():
    assert str(parse_label_selector("a=b\0 junk (")) == "a=b"


def test_parse_is_deterministic():
    assert str(parse_label_selector("x=a,a=x")) == str(parse_label_selector("a=x,x=a"))


# ---- label selector matching ----------------------------------------------------------------

MATCHES = [  # upstream TestSelectorMatches and TestRequirementSelectorMatching
    ("", {"x": "y"}, True),
    ("x=y", {"x": "y"}, True),
    ("x=y,z=w", {"x": "y", "z": "w"}, True),
    ("x!=y,z!=w", {"x": "z", "z": "a"}, True),
    ("notin=in", {"notin": "in"}, True),
    ("x", {"x": "z"}, True),
    ("!x", {"y": "z"}, True),
    ("x>1", {"x": "2"}, True),
    ("x<1", {"x": "0"}, True),
    ("x=z", {}, False),
    ("x=y", {"x": "z"}, False),
    ("x=y,z=w", {"x": "w", "z": "w"}, False),
    ("x!=y,z!=w", {"x": "z", "z": "w"}, False),
    ("x", {"y": "z"}, False),
    ("!x", {"x": "z"}, False),
    ("x>1", {"x": "0"}, False),
    ("x<1", {"x": "2"}, False),
    ("foo=bar,foobar=bar,baz=blah", {"foo": "bar", "baz": "blah"}, False),
    ("x in (foo),y notin (alpha)", {"x": "foo", "y": "baz"}, True),
    ("x in (foo),y in (alpha)", {"x": "foo", "y": "baz"}, False),
    ("x notin (),y", {"y": ""}, True),
    ("!x,y", {"y": ""}, True),
    ("x notin (),!y", {"y": ""}, False),
    ("x in ()", {"y": "baz"}, False),
    ("z>1", {"z": "v2"}, False),
    ("x!=a", {}, True),
    ("x notin (a)", {}, True),
    ("x>1", {}, False),
    ("x==y", {"x": "y"}, True),
    ("x=", {"x": ""}, True),
]


@pytest.mark.parametrize("text, labels, expected", MATCHES, ids=[f"{t or 'empty'}~{l}" for t, l, _ in MATCHES])
def test_matches(text, labels, expected):
    assert parse_label_selector(text).matches(labels) is expected


def test_none_labels_are_empty_labels():
    assert parse_label_selector("!x").matches(None)
    assert not parse_label_selector("x").matches(None)


def test_everything_and_nothing():
    assert everything().matches({"a": "b"}) and everything().is_everything()
    assert not nothing().matches({}) and not nothing().is_everything()
    assert parse_label_selector("").is_everything()


# ---- selectors built from objects ----------------------------------------------------------


@pytest.mark.parametrize(
    "selector, labels, expected",
    [
        pytest.param({"app": "web"}, {"app": "web", "tier": "fe"}, True, id="subset-matches"),
        pytest.param({"app": "web", "tier": "fe"}, {"app": "web"}, False, id="missing-label"),
        pytest.param({}, {"app": "web"}, False, id="empty-selects-no-pods"),
        pytest.param(None, {"app": "web"}, False, id="missing-selects-no-pods"),
    ],
)
def test_service_selector(selector, labels, expected):
    assert selector_from_map(selector).matches(labels) is expected


def test_service_selector_prints_sorted():
    assert str(selector_from_map({"tier": "fe", "app": "web"})) == "app=web,tier=fe"


@pytest.mark.parametrize(
    "label_selector, labels, expected",
    [
        pytest.param(None, {"a": "b"}, False, id="null-matches-nothing"),
        pytest.param({}, {"a": "b"}, True, id="empty-matches-everything"),
        pytest.param({"matchLabels": {"a": "b"}}, {"a": "b"}, True, id="match-labels"),
        pytest.param({"matchExpressions": [{"key": "a", "operator": "In", "values": ["x", "b"]}]}, {"a": "b"}, True, id="in"),
        pytest.param({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["b"]}]}, {"a": "b"}, False, id="notin"),
        pytest.param({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True, id="exists"),
        pytest.param({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False, id="does-not-exist"),
        pytest.param({"matchLabels": {"a": "b"}, "matchExpressions": [{"key": "c", "operator": "Exists"}]}, {"a": "b"}, False, id="and"),
    ],
)
def test_label_selector_objects(label_selector, labels, expected):
    assert selector_from_label_selector(label_selector).matches(labels) is expected


@pytest.mark.parametrize(
    "label_selector, message",
    [
        pytest.param({"matchExpressions": [{"key": "a", "operator": "Bogus"}]}, '"Bogus" is not a valid label selector operator', id="operator"),
        pytest.param({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}, "values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty", id="in-without-values"),
        pytest.param({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}, 'values: Invalid value: []string{"x"}: values set must be empty for exists and does not exist', id="exists-with-values"),
        pytest.param({"matchLabels": {"-a": "b"}}, f'key: Invalid value: "-a": {QNAME_DETAIL}', id="bad-key"),
    ],
)
def test_invalid_label_selector_objects(label_selector, message):
    assert bad_request_message(selector_from_label_selector, label_selector) == message


# ---- field selectors ----------------------------------------------------------------------

SERVICE_FIELDS = {"spec.clusterIP": ("spec", "clusterIP"), "spec.type": ("spec", "type")}
NODE_FIELDS = {"spec.unschedulable": ("spec", "unschedulable")}
SVC = {"metadata": {"name": "web", "namespace": "default"}, "spec": {"type": "ClusterIP", "clusterIP": "10.0.0.1"}}


@pytest.mark.parametrize(
    "text, fields, obj, expected",
    [
        pytest.param("metadata.name=web", {}, SVC, True, id="name"),
        pytest.param("metadata.name==web", {}, SVC, True, id="double-equals"),
        pytest.param("metadata.name!=web", {}, SVC, False, id="not-equals"),
        pytest.param("metadata.namespace=default,metadata.name=web", {}, SVC, True, id="and"),
        pytest.param("metadata.namespace=other,metadata.name=web", {}, SVC, False, id="and-fails"),
        pytest.param("spec.type=ClusterIP", SERVICE_FIELDS, SVC, True, id="kind-field"),
        pytest.param("spec.clusterIP=", SERVICE_FIELDS, {"metadata": {"name": "x"}}, True, id="missing-is-empty"),
        pytest.param("metadata.namespace=", {}, {"metadata": {"name": "node-1"}}, True, id="cluster-scoped-namespace"),
        pytest.param("spec.unschedulable=true", NODE_FIELDS, {"spec": {"unschedulable": True}}, True, id="bool-true"),
        pytest.param("spec.unschedulable=false", NODE_FIELDS, {"spec": {}}, False, id="missing-without-schema-is-empty"),
        pytest.param("spec.port=80", {"spec.port": ("spec", "port")}, {"spec": {"port": 80}}, True, id="number"),
        pytest.param("metadata.name=a\\,b", {}, {"metadata": {"name": "a,b"}}, True, id="escaped-comma"),
        pytest.param("metadata.name=a\\=b\\\\c", {}, {"metadata": {"name": "a=b\\c"}}, True, id="escaped-equals-and-backslash"),
        pytest.param("", {}, SVC, True, id="empty-matches-all"),
        pytest.param(",metadata.name=web,", {}, SVC, True, id="empty-terms-skipped"),
    ],
)
def test_field_selector_matches(text, fields, obj, expected):
    assert parse_field_selector(text, fields).matches(obj) is expected


NODE_SCHEMA = Obj("io.k8s.api.core.v1.Node", {"spec": F(Obj("io.k8s.api.core.v1.NodeSpec", {"unschedulable": F(BOOL), "podCIDR": F(STRING), "replicas": F(INT32)}))})
NODE_SCHEMA_FIELDS = {**NODE_FIELDS, "spec.podCIDR": ("spec", "podCIDR"), "spec.replicas": ("spec", "replicas")}


@pytest.mark.parametrize(
    "text, obj, expected",
    [
        pytest.param("spec.unschedulable=false", {"spec": {}}, True, id="absent-bool-is-false"),
        pytest.param("spec.unschedulable=false", {}, True, id="absent-parent"),
        pytest.param("spec.unschedulable!=true", {"spec": {"unschedulable": None}}, True, id="null-bool-is-false"),
        pytest.param("spec.unschedulable=true", {"spec": {"unschedulable": True}}, True, id="set-bool"),
        pytest.param("spec.replicas=0", {"spec": {}}, True, id="absent-int-is-zero"),
        pytest.param("spec.podCIDR=", {"spec": {}}, True, id="absent-string-is-empty"),
    ],
)
def test_absent_fields_compare_as_go_zero_values(text, obj, expected):
    assert parse_field_selector(text, NODE_SCHEMA_FIELDS, NODE_SCHEMA).matches(obj) is expected


@pytest.mark.parametrize(
    "text, fields, message",
    [
        pytest.param("spec.type=x", {}, '"spec.type" is not a known field selector: only "metadata.name", "metadata.namespace"', id="kind-without-extra-fields"),
        pytest.param("status.phase=x", SERVICE_FIELDS, "field label not supported: status.phase", id="kind-with-extra-fields"),
        pytest.param("metadata.name", {}, "invalid selector: 'metadata.name'; can't understand 'metadata.name'", id="no-operator"),
        pytest.param("metadata.name=a,b", {}, "invalid selector: 'metadata.name=a,b'; can't understand 'b'", id="unescaped-comma"),
        pytest.param("metadata.name=a=b", {}, "invalid field selector: unescaped character in value: 61", id="unescaped-equals"),
        pytest.param("metadata.name=a\\x", {}, "invalid field selector: invalid escape sequence: \\x", id="bad-escape"),
        pytest.param("metadata.name=a\\", {}, "invalid field selector: invalid escape sequence: \\", id="trailing-backslash"),
    ],
)
def test_bad_field_selectors(text, fields, message):
    assert bad_request_message(parse_field_selector, text, fields) == message


@pytest.mark.parametrize(
    "text, name",
    [
        pytest.param("metadata.name=web", "web", id="equals"),
        pytest.param("metadata.namespace=default,metadata.name==web", "web", id="with-namespace"),
        pytest.param("metadata.name!=web", None, id="negated"),
        pytest.param("metadata.namespace=default", None, id="no-name"),
    ],
)
def test_exact_name(text, name):
    assert parse_field_selector(text, {}).exact_name() == name


# ---- robustness -----------------------------------------------------------------------------

SELECTOR_ALPHABET = st.sampled_from(list("ab=!(),<> \t\\/.-_0") + ["in", "notin", "\0", "é"])


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(), st.lists(SELECTOR_ALPHABET, max_size=20).map("".join)))
def test_label_selector_parser_only_raises_status_errors(text):
    try:
        parse_label_selector(text).matches({"a": "0", "b": ""})
    except StatusError as e:
        assert e.code == 400


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(), st.lists(SELECTOR_ALPHABET, max_size=20).map("".join)))
def test_field_selector_parser_only_raises_status_errors(text):
    try:
        parse_field_selector(text, SERVICE_FIELDS).matches(SVC)
    except StatusError as e:
        assert e.code == 400
