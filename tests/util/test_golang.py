"""util/golang: Go's texts and parsings, case by case against what Go gives."""

from __future__ import annotations

import asyncio
import errno
import socket
from datetime import datetime, timezone

import pytest

from kubesvc.util import golang

QUOTES = [
    # (id, text, strconv.Quote)
    ("plain", "abc", '"abc"'),
    ("empty", "", '""'),
    ("quote and backslash", 'a"b\\c', '"a\\"b\\\\c"'),
    ("named escapes", "\a\b\f\n\r\t\v", '"\\a\\b\\f\\n\\r\\t\\v"'),
    ("control byte", "\x01", '"\\x01"'),
    ("printable unicode kept", "héllo", '"héllo"'),
    ("non-printable BMP", "\u200b", '"\\u200b"'),
    ("non-printable astral", "\U000e0001", '"\\U000e0001"'),
]


@pytest.mark.parametrize(("text", "expected"), [r[1:] for r in QUOTES], ids=[r[0] for r in QUOTES])
def test_quote(text, expected):
    assert golang.quote(text) == expected


def test_quote_strings():
    assert golang.quote_strings(["a", "b c"]) == '["a" "b c"]'
    assert golang.quote_strings([]) == "[]"
    assert golang.go_syntax_strings(["a", 'b"']) == '[]string{"a", "b\\""}'
    assert golang.go_syntax_strings([]) == "[]string{}"


PARSE_INT = [
    # (id, text, value or error text) -- strconv.ParseInt(s, 10, 64)
    ("zero", "0", 0),
    ("plus sign", "+42", 42),
    ("minus sign", "-42", -42),
    ("leading zeros", "007", 7),
    ("max", "9223372036854775807", 2**63 - 1),
    ("min", "-9223372036854775808", -(2**63)),
    ("above max", "9223372036854775808", 'strconv.ParseInt: parsing "9223372036854775808": value out of range'),
    ("below min", "-9223372036854775809", 'strconv.ParseInt: parsing "-9223372036854775809": value out of range'),
    ("past uint64", "99999999999999999999999", 'strconv.ParseInt: parsing "99999999999999999999999": value out of range'),
    ("range before syntax", "99999999999999999999x", 'strconv.ParseInt: parsing "99999999999999999999x": value out of range'),
    ("syntax before range", "1x99999999999999999999", 'strconv.ParseInt: parsing "1x99999999999999999999": invalid syntax'),
    ("empty", "", 'strconv.ParseInt: parsing "": invalid syntax'),
    ("sign alone", "-", 'strconv.ParseInt: parsing "-": invalid syntax'),
    ("space", " 1", 'strconv.ParseInt: parsing " 1": invalid syntax'),
    ("underscore", "1_000", 'strconv.ParseInt: parsing "1_000": invalid syntax'),
    ("hex", "0x10", 'strconv.ParseInt: parsing "0x10": invalid syntax'),
    ("unicode digit", "١", 'strconv.ParseInt: parsing "١": invalid syntax'),
]


@pytest.mark.parametrize(("text", "expected"), [r[1:] for r in PARSE_INT], ids=[r[0] for r in PARSE_INT])
def test_parse_int(text, expected):
    if isinstance(expected, int):
        assert golang.parse_int(text) == expected
    else:
        with pytest.raises(golang.NumError) as info:
            golang.parse_int(text)
        assert str(info.value) == expected


def test_parse_int_32_bits():
    assert golang.parse_int("2147483647", 32) == 2**31 - 1
    with pytest.raises(ValueError, match="value out of range"):
        golang.parse_int("2147483648", 32)


def test_atoi_names_itself():
    assert golang.atoi("8080") == 8080
    with pytest.raises(ValueError) as info:
        golang.atoi("http")
    assert str(info.value) == 'strconv.Atoi: parsing "http": invalid syntax'


PARSE_UINT = [
    ("zero", "0", 0),
    ("max", "18446744073709551615", 2**64 - 1),
    ("above max", "18446744073709551616", 'strconv.ParseUint: parsing "18446744073709551616": value out of range'),
    ("no sign", "+1", 'strconv.ParseUint: parsing "+1": invalid syntax'),
    ("negative", "-1", 'strconv.ParseUint: parsing "-1": invalid syntax'),
]


@pytest.mark.parametrize(("text", "expected"), [r[1:] for r in PARSE_UINT], ids=[r[0] for r in PARSE_UINT])
def test_parse_uint(text, expected):
    if isinstance(expected, int):
        assert golang.parse_uint(text) == expected
    else:
        with pytest.raises(ValueError) as info:
            golang.parse_uint(text)
        assert str(info.value) == expected


@pytest.mark.parametrize("text", ["1", "t", "T", "TRUE", "true", "True"])
def test_parse_bool_true(text):
    assert golang.parse_bool(text) is True


@pytest.mark.parametrize("text", ["0", "f", "F", "FALSE", "false", "False"])
def test_parse_bool_false(text):
    assert golang.parse_bool(text) is False


@pytest.mark.parametrize("text", ["yes", "", "tRUE", "2", " true"])
def test_parse_bool_refuses(text):
    with pytest.raises(ValueError) as info:
        golang.parse_bool(text)
    assert str(info.value) == f"strconv.ParseBool: parsing {golang.quote(text)}: invalid syntax"


QUERY_BOOLS = [
    # (id, value or None for absent, result) -- Convert_Slice_string_To_bool
    ("absent", None, False),
    ("zero", "0", False),
    ("false", "false", False),
    ("False any case", "FaLsE", False),
    ("empty is true", "", True),
    ("yes is true", "yes", True),
    ("one", "1", True),
    ("f is true", "f", True),
]


@pytest.mark.parametrize(("value", "expected"), [r[1:] for r in QUERY_BOOLS], ids=[r[0] for r in QUERY_BOOLS])
def test_query_bool(value, expected):
    assert golang.query_bool(value) is expected


DURATIONS = [
    # (id, seconds, Duration.String())
    ("zero", 0, "0s"),
    ("nanoseconds", 5e-9, "5ns"),
    ("microseconds", 1.5e-6, "1.5µs"),
    ("milliseconds", 0.5, "500ms"),
    ("fraction of a second", 1.5, "1.5s"),
    ("minutes", 900, "15m0s"),
    ("an hour is not 60m", 3600, "1h0m0s"),
    ("a day", 86400, "24h0m0s"),
    ("mixed", 3723.5, "1h2m3.5s"),
    ("negative", -1, "-1s"),
]


@pytest.mark.parametrize(("seconds", "expected"), [r[1:] for r in DURATIONS], ids=[r[0] for r in DURATIONS])
def test_format_duration(seconds, expected):
    assert golang.format_duration(seconds) == expected


PARSED_DURATIONS = [
    ("zero", "0", 0.0),
    ("plain", "15s", 15.0),
    ("compound", "1h2m3.5s", 3723.5),
    ("milliseconds", "250ms", 0.25),
    ("micro sign", "10µs", 10e-6),
    ("signed", "-1.5h", -5400.0),
    ("plus", "+2m", 120.0),
    ("leading dot", ".5s", 0.5),
]


@pytest.mark.parametrize(("text", "seconds"), [r[1:] for r in PARSED_DURATIONS], ids=[r[0] for r in PARSED_DURATIONS])
def test_parse_duration(text, seconds):
    assert golang.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(("text", "message"), [
    ("", 'time: invalid duration ""'),
    ("10", 'time: missing unit in duration "10"'),
    ("1d", 'time: invalid duration "1d"'),
    ("--1s", 'time: invalid duration "--1s"'),
    ("1s ", 'time: invalid duration "1s "'),
])
def test_parse_duration_errors(text, message):
    with pytest.raises(ValueError) as info:
        golang.parse_duration(text)
    assert str(info.value) == message


@pytest.mark.parametrize("seconds", [0.001, 1, 59.5, 60, 3600, 5400.25, 86400 * 3])
def test_duration_round_trip(seconds):
    assert golang.parse_duration(golang.format_duration(seconds)) == pytest.approx(seconds)


RFC3339 = [
    # (id, text, UTC datetime)
    ("zulu", "2024-05-06T07:08:09Z", datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc)),
    ("offset", "2024-05-06T09:08:09+02:00", datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc)),
    ("negative offset", "2024-05-06T00:08:09-07:00", datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc)),
    ("nanoseconds truncated", "2024-05-06T07:08:09.123456789Z", datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=timezone.utc)),
    ("short fraction", "2024-05-06T07:08:09.5Z", datetime(2024, 5, 6, 7, 8, 9, 500000, tzinfo=timezone.utc)),
    ("leap day", "2024-02-29T00:00:00Z", datetime(2024, 2, 29, tzinfo=timezone.utc)),
]


@pytest.mark.parametrize(("text", "moment"), [r[1:] for r in RFC3339], ids=[r[0] for r in RFC3339])
def test_parse_rfc3339(text, moment):
    assert golang.rfc3339_error(text) is None
    assert golang.parse_rfc3339(text) == moment


RFC3339_ERRORS = [
    ("not a time", "yesterday", 'parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006"'),
    ("date only", "2024-05-06", 'parsing time "2024-05-06" as "2006-01-02T15:04:05Z07:00": cannot parse "" as "T"'),
    ("no zone", "2024-05-06T07:08:09", 'parsing time "2024-05-06T07:08:09" as "2006-01-02T15:04:05Z07:00": cannot parse "" as "Z07:00"'),
    ("space separator", "2024-05-06 07:08:09Z", 'parsing time "2024-05-06 07:08:09Z" as "2006-01-02T15:04:05Z07:00": cannot parse " 07:08:09Z" as "T"'),
    ("month 13", "2024-13-06T07:08:09Z", 'parsing time "2024-13-06T07:08:09Z": month out of range'),
    ("not a leap year", "2023-02-29T00:00:00Z", 'parsing time "2023-02-29T00:00:00Z": day out of range'),
    ("extra text", "2024-05-06T07:08:09Zjunk", 'parsing time "2024-05-06T07:08:09Zjunk": extra text: "junk"'),
]


@pytest.mark.parametrize(("text", "message"), [r[1:] for r in RFC3339_ERRORS], ids=[r[0] for r in RFC3339_ERRORS])
def test_rfc3339_errors(text, message):
    assert golang.rfc3339_error(text) == message
    with pytest.raises(ValueError) as info:
        golang.parse_rfc3339(text)
    assert str(info.value) == message


def test_rfc3339_year_zero_is_clamped():
    assert golang.parse_rfc3339("0000-01-01T00:00:00Z") == datetime.min.replace(tzinfo=timezone.utc)


def test_format_time_and_micro_time():
    moment = datetime(2024, 5, 6, 9, 8, 9, 123456, tzinfo=timezone.utc)
    assert golang.rfc3339(moment) == "2024-05-06T09:08:09Z"
    assert golang.rfc3339_micro(moment) == "2024-05-06T09:08:09.123456Z"
    assert golang.parse_rfc3339(golang.rfc3339_micro(moment)) == moment
    assert golang.rfc3339_nano(moment) == "2024-05-06T09:08:09.123456Z"
    assert golang.rfc3339_nano(moment.replace(microsecond=500000)) == "2024-05-06T09:08:09.5Z"
    assert golang.rfc3339_nano(moment.replace(microsecond=0)) == "2024-05-06T09:08:09Z"


AGGREGATES = [
    ("none", [], ""),
    ("one", ["a"], "a"),
    ("two", ["a", "b"], "[a, b]"),
    ("repeats dropped", ["a", "b", "a"], "[a, b]"),
    ("one after dedup", ["a", "a"], "a"),
    ("errors by text", [ValueError("x"), ValueError("y")], "[x, y]"),
]


@pytest.mark.parametrize(("messages", "expected"), [r[1:] for r in AGGREGATES], ids=[r[0] for r in AGGREGATES])
def test_aggregate(messages, expected):
    assert golang.aggregate(messages) == expected


DIAL_ERRORS = [
    ("refused", ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed"), "dial tcp 10.0.0.1:80: connect: connection refused"),
    ("unreachable", OSError(errno.EHOSTUNREACH, "whatever"), "dial tcp 10.0.0.1:80: connect: no route to host"),
    ("timeout", asyncio.TimeoutError(), "dial tcp 10.0.0.1:80: i/o timeout"),
    ("lookup", socket.gaierror(-2, "Name or service not known"), "dial tcp: lookup 10.0.0.1: no such host"),
    ("other", RuntimeError("boom"), "dial tcp 10.0.0.1:80: boom"),
]


@pytest.mark.parametrize(("err", "expected"), [r[1:] for r in DIAL_ERRORS], ids=[r[0] for r in DIAL_ERRORS])
def test_dial_error(err, expected):
    assert golang.dial_error("10.0.0.1:80", err) == expected


def test_dial_error_lookup_names_the_host():
    assert golang.dial_error("[::1]:80", socket.gaierror(-2, "x")) == "dial tcp: lookup ::1: no such host"
    assert golang.dial_error("node-a:10250", socket.gaierror(-2, "x"), host="node-a") == "dial tcp: lookup node-a: no such host"


def test_listen_error():
    err = OSError(errno.EADDRINUSE, "Address already in use")
    assert golang.listen_error("0.0.0.0:10256", err) == "listen tcp 0.0.0.0:10256: bind: address already in use"
