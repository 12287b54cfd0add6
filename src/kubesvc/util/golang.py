"""Go's standard library, as far as Kubernetes shows it to users: one home for the texts and
parsings that kubectl, the client libraries and people compare against, to the letter.

What is here, and where Go documents it:

- :func:`quote` is ``strconv.Quote`` (and the ``%q`` verb of ``fmt``): printable runes kept,
  ``\\a \\b \\f \\n \\r \\t \\v \\" \\\\`` named, other runes as ``\\xNN``, ``\\uNNNN`` or
  ``\\UNNNNNNNN`` (pkg.go.dev/strconv#Quote). :func:`quote_strings` is ``%q`` of a ``[]string``,
  :func:`go_syntax_strings` its ``%#v`` (``[]string{"a", "b"}``).
- :func:`parse_int`, :func:`parse_uint` and :func:`atoi` are ``strconv.ParseInt(s, 10, 64)``,
  ``strconv.ParseUint(s, 10, 64)`` and ``strconv.Atoi``: decimal digits after an optional sign
  (ParseUint takes none), no spaces, no ``_``. They raise :class:`NumError`, whose text is Go's
  ``*strconv.NumError``: ``strconv.ParseInt: parsing "x": invalid syntax`` or ``... value out of
  range``. Go scans left to right and stops at the first problem, so ``99999999999999999999x`` is
  out of range, not invalid syntax.
- :func:`parse_bool` is ``strconv.ParseBool``: ``1 t T TRUE true True`` and ``0 f F FALSE false
  False``, nothing else (``yes`` is an error). Query parameters are not read with it:
  :func:`query_bool` is apimachinery's ``Convert_Slice_string_To_bool``
  (pkg/runtime/conversion.go), which the parameter codec uses for ``watch``,
  ``allowWatchBookmarks``, ``follow`` ...: absent, ``0`` or ``false`` (any case) is false, and
  anything else, ``yes`` and the empty string included, is true.
- :func:`parse_duration` is ``time.ParseDuration`` (``1h2m3.5s``, ``250ms``, ``-1.5h``, ``0``)
  and :func:`format_duration` is ``time.Duration.String`` (``0s``, ``1.5s``, ``1h0m0s``,
  ``500ms``): hours are never folded into minutes, so 3600 s prints ``1h0m0s``.
- :func:`parse_rfc3339` and :func:`rfc3339_error` are ``time.Parse(time.RFC3339, s)`` (which
  also takes a fraction of a second, so it reads RFC3339Nano too), with the parser's error texts
  (``parsing time "x" as "2006-01-02T15:04:05Z07:00": cannot parse "x" as "2006"``, ``... day out
  of range``, ``... extra text: ...``). :func:`rfc3339` and :func:`rfc3339_micro` write
  ``metav1.Time`` and ``metav1.MicroTime`` (UTC, ``Z``; seconds, or six fraction digits);
  :func:`rfc3339_nano` writes ``time.RFC3339Nano`` (trailing fraction zeros dropped), as Go's
  JSON of a plain ``time.Time`` and the trigger-time annotation have it.
- :func:`aggregate` is the text of ``utilerrors.NewAggregate(errs).Error()``
  (k8s.io/apimachinery/pkg/util/errors): nothing for none, one message as it is, several
  de-duplicated in order as ``[a, b]``.
- :func:`dial_error` and :func:`listen_error` are ``*net.OpError`` texts: ``dial tcp
  10.0.0.1:80: connect: connection refused``, ``dial tcp 10.0.0.1:80: i/o timeout``, ``dial tcp:
  lookup name: no such host``, ``listen tcp 0.0.0.0:10256: bind: address already in use``.
  Errno texts are Go's (syscall's table: lower case), from the errno, not Python's message.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone

# ---- strconv.Quote ---------------------------------------------------------------------------

_NAMED_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
                  '"': '\\"', "\\": "\\\\"}


def quote(text: str) -> str:
    """``strconv.Quote``: a Go double-quoted string literal of ``text``."""
    out = []
    for ch in text:
        if ch in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return '"' + "".join(out) + '"'


def quote_strings(values: Iterable[str]) -> str:
    """``%q`` of a ``[]string``: ``["a" "b"]``."""
    return "[" + " ".join(quote(v) for v in values) + "]"


def go_syntax_strings(values: Iterable[str]) -> str:
    """``%#v`` of a ``[]string``: ``[]string{"a", "b"}`` (how ``field.Error`` shows one)."""
    return "[]string{" + ", ".join(quote(v) for v in values) + "}"


# ---- strconv.ParseInt / ParseUint / Atoi / ParseBool -------------------------------------------


class NumError(ValueError):
    """``*strconv.NumError``: ``strconv.<Func>: parsing <quoted>: <reason>``."""

    def __init__(self, func: str, text: str, reason: str):
        self.func, self.text, self.reason = func, text, reason
        super().__init__(f"strconv.{func}: parsing {quote(text)}: {reason}")


SYNTAX = "invalid syntax"
RANGE = "value out of range"


def _scan_uint(func: str, original: str, digits: str, limit: int) -> int:
    """ParseUint's loop: the first non-digit is a syntax error, the first digit that takes the
    value past ``limit`` a range error, whichever comes first."""
    if not digits:
        raise NumError(func, original, SYNTAX)
    value = 0
    for ch in digits:
        if not "0" <= ch <= "9":
            raise NumError(func, original, SYNTAX)
        value = value * 10 + ord(ch) - 48
        if value > limit:
            raise NumError(func, original, RANGE)
    return value


def parse_uint(text: str, bits: int = 64, *, func: str = "ParseUint") -> int:
    """``strconv.ParseUint(text, 10, bits)``; :class:`NumError` otherwise."""
    return _scan_uint(func, text, text, (1 << bits) - 1)


def parse_int(text: str, bits: int = 64, *, func: str = "ParseInt") -> int:
    """``strconv.ParseInt(text, 10, bits)``; :class:`NumError` otherwise."""
    negative = text[:1] == "-"
    body = text[1:] if text[:1] in ("+", "-") else text
    magnitude = _scan_uint(func, text, body, (1 << 64) - 1)
    if magnitude > (1 << (bits - 1)) - (0 if negative else 1):
        raise NumError(func, text, RANGE)
    return -magnitude if negative else magnitude


def atoi(text: str) -> int:
    """``strconv.Atoi`` (a 64-bit int): ParseInt's rules, ``Atoi`` in the error."""
    return parse_int(text, 64, func="Atoi")


_TRUE = frozenset(("1", "t", "T", "TRUE", "true", "True"))
_FALSE = frozenset(("0", "f", "F", "FALSE", "false", "False"))


def parse_bool(text: str) -> bool:
    """``strconv.ParseBool``; :class:`NumError` (``invalid syntax``) for anything else."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise NumError("ParseBool", text, SYNTAX)


def query_bool(text: str | None) -> bool:
    """``Convert_Slice_string_To_bool`` of a query value (None: the parameter is absent)."""
    return text is not None and text != "0" and text.lower() != "false"


# ---- time.ParseDuration / Duration.String ------------------------------------------------------

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds in ``text`` (``1h2m3.5s``, ``250ms``, ``0``, optionally signed); ValueError with
    Go's message otherwise (``time: invalid duration "x"``, ``time: missing unit in duration "1"``)."""
    original = text
    sign = -1.0 if text.startswith("-") else 1.0
    text = text[1:] if text[:1] in ("+", "-") else text
    if text == "0":
        return 0.0
    if not text:
        raise ValueError(f"time: invalid duration {quote(original)}")
    total, position = 0.0, 0
    for match in _PART.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if position != len(text):
        if re.fullmatch(r"\d+(\.\d*)?", text):
            raise ValueError(f"time: missing unit in duration {quote(original)}")
        raise ValueError(f"time: invalid duration {quote(original)}")
    return sign * total


def format_duration(seconds: float) -> str:
    """``time.Duration.String()``: ``0s``, ``500ms``, ``1.5s``, ``15m0s``, ``1h0m0s``, ``-1s``."""
    nanos = round(seconds * 1e9)
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    magnitude = abs(nanos)

    def fraction(value: int, unit: int) -> str:
        whole, rest = divmod(value, unit)
        if not rest:
            return str(whole)
        return f"{whole}." + f"{rest:0{len(str(unit)) - 1}d}".rstrip("0")

    if magnitude < 1_000:
        return f"{sign}{magnitude}ns"
    if magnitude < 1_000_000:
        return f"{sign}{fraction(magnitude, 1_000)}µs"
    if magnitude < 1_000_000_000:
        return f"{sign}{fraction(magnitude, 1_000_000)}ms"
    minutes, second_nanos = divmod(magnitude, 60_000_000_000)
    text = fraction(second_nanos, 1_000_000_000) + "s"
    if minutes:
        hours, minutes = divmod(minutes, 60)
        text = (f"{hours}h" if hours else "") + f"{minutes}m" + text
    return sign + text


# ---- time.Parse(time.RFC3339, …) and metav1.Time ------------------------------------------------

RFC3339_LAYOUT = "2006-01-02T15:04:05Z07:00"
_PLAIN_RFC3339 = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:[.,]([0-9]+))?"
                            r"(?:Z|([+-])([0-9]{2}):([0-9]{2}))\Z")
_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _days_in(month: int, year: int) -> int:
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return 29 if month == 2 and leap else _DAYS_IN_MONTH[month - 1]


def _is_plain_rfc3339(value: str) -> bool:
    """The common, certainly valid case, checked without the element walk."""
    match = _PLAIN_RFC3339.match(value)
    if match is None:
        return False
    year, month, day, hour, minute, second, _, _, zone_hour, zone_minute = match.groups()
    return (1 <= int(month) <= 12 and 1 <= int(day) <= _days_in(int(month), int(year)) and int(hour) < 24
            and int(minute) < 60 and int(second) < 60 and int(zone_hour or 0) <= 24 and int(zone_minute or 0) <= 60)


def _time_quote(text: str) -> str:
    """The time package's quote(): ASCII kept, \\ and \" escaped, other bytes as \\xNN."""
    out = ['"']
    for char in text:
        if " " <= char < "\x80":
            out.append("\\" + char if char in '"\\' else char)
        else:
            out.extend(f"\\x{byte:02x}" for byte in char.encode("utf-8", "surrogatepass"))
    out.append('"')
    return "".join(out)


def _leading_number(text: str, width: int, fixed: bool) -> tuple[int, str] | None:
    """Go's getnum: ``width`` leading digits of ``text`` (fewer, but at least one, unless ``fixed``)."""
    digits = 0
    while digits < width and digits < len(text) and text[digits] in "0123456789":
        digits += 1
    if digits == width or (digits and not fixed):
        return int(text[:digits]), text[digits:]
    return None


def rfc3339_error(value: str) -> str | None:
    """The error text of Go's ``time.Parse(time.RFC3339, value)``, or None if Go accepts it."""
    if _is_plain_rfc3339(value):
        return None
    quoted = _time_quote(value)

    def cannot_parse(rest: str, element: str) -> str:
        return f'parsing time {quoted} as "{RFC3339_LAYOUT}": cannot parse {_time_quote(rest)} as "{element}"'

    def out_of_range(what: str) -> str:
        return f"parsing time {quoted}: {what} out of range"

    rest = value
    numbers: dict[str, int] = {}
    # (literal before the element, element, digits, fixed width, upper bound or None, name in range errors)
    for prefix, element, width, fixed, limit, name in (
        ("", "2006", 4, True, None, "year"), ("-", "01", 2, True, 12, "month"), ("-", "02", 2, True, 31, "day"),
        ("T", "15", 2, False, 23, "hour"), (":", "04", 2, True, 59, "minute"), (":", "05", 2, True, 59, "second"),
    ):
        if prefix:
            if not rest.startswith(prefix):
                return cannot_parse(rest, prefix)
            rest = rest[len(prefix):]
        parsed = _leading_number(rest, width, fixed)
        if parsed is None:
            return cannot_parse(rest, element)
        number, rest = parsed
        if limit is not None and number > limit or name == "month" and number == 0:
            return out_of_range(name)
        numbers[name] = number
    if len(rest) >= 2 and rest[0] in ".," and rest[1] in "0123456789":
        rest = rest[1:].lstrip("0123456789")
    if rest.startswith("Z"):
        rest = rest[1:]
    else:
        if len(rest) < 6 or rest[3] != ":":
            return cannot_parse(rest, "Z07:00")
        zone_hour = _leading_number(rest[1:3], 2, True)
        zone_minute = _leading_number(rest[4:6], 2, True)
        if zone_hour is None or zone_minute is None:
            return cannot_parse(rest, "Z07:00")
        if zone_minute[0] > 60:
            return out_of_range("time zone offset minute")
        if zone_hour[0] > 24:
            return out_of_range("time zone offset hour")
        if rest[0] not in "+-":
            return cannot_parse(rest, "Z07:00")
        rest = rest[6:]
    if rest:
        return f"parsing time {quoted}: extra text: {_time_quote(rest)}"
    if numbers["day"] < 1 or numbers["day"] > _days_in(numbers["month"], numbers["year"]):
        return out_of_range("day")
    return None


def parse_rfc3339(text: str) -> datetime:
    """``time.Parse(time.RFC3339, text)`` as an aware datetime in UTC (microseconds: Python keeps
    no nanoseconds; years Python cannot hold are clamped to its first or last moment);
    ValueError with Go's text for anything Go refuses."""
    error = rfc3339_error(text)
    if error is not None:
        raise ValueError(error)
    year, month, day, hour, minute, second, fraction, zone_sign, zone_hour, zone_minute = (
        _PLAIN_RFC3339.match(text.replace(",", ".", 1)).groups())
    offset = timedelta(hours=int(zone_hour or 0), minutes=int(zone_minute or 0)) * (-1 if zone_sign == "-" else 1)
    try:
        local = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                         int((fraction or "0")[:6].ljust(6, "0")), tzinfo=timezone(offset))
        return local.astimezone(timezone.utc)
    except (ValueError, OverflowError):  # year 0, or past 9999 in UTC: Go holds it, datetime does not
        return (datetime.max if int(year) > 1 else datetime.min).replace(tzinfo=timezone.utc)


def rfc3339(moment: datetime) -> str:
    """``metav1.Time`` on the wire: UTC, whole seconds, ``Z``."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(moment: datetime) -> str:
    """``metav1.MicroTime`` on the wire: UTC, six fraction digits, ``Z``."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339_nano(moment: datetime) -> str:
    """``time.RFC3339Nano`` in UTC (and Go's JSON of a ``time.Time``): the fraction without its
    trailing zeros, none at all for whole seconds. A naive datetime is taken as UTC."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc)
    fraction = f"{moment.microsecond:06d}".rstrip("0")
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


# ---- utilerrors.NewAggregate -------------------------------------------------------------------


def aggregate(messages: Iterable[object]) -> str:
    """``utilerrors.NewAggregate(errs).Error()`` of the errors' texts ("" for none)."""
    unique = list(dict.fromkeys(str(message) for message in messages))
    if len(unique) == 1:
        return unique[0]
    return "[" + ", ".join(unique) + "]" if unique else ""


# ---- *net.OpError texts -------------------------------------------------------------------------


def errno_text(err: BaseException) -> str:
    """Go's text of a syscall error: the errno's message, lower-cased as Go's table has it
    (asyncio rewords ``strerror``, so the errno is what counts)."""
    number = getattr(err, "errno", None)
    text = os.strerror(number) if isinstance(number, int) and number > 0 else (getattr(err, "strerror", None) or str(err))
    return text[:1].lower() + text[1:]


def dial_error(address: str, err: BaseException, *, host: str | None = None, network: str = "tcp") -> str:
    """The text of a failed ``net.Dial(network, address)``. ``host`` is the name looked up, for
    a resolver failure (default: ``address`` less its port)."""
    if isinstance(err, socket.gaierror):
        name = host if host is not None else address.rpartition(":")[0].strip("[]")
        return f"dial {network}: lookup {name}: no such host"
    if isinstance(err, (TimeoutError, asyncio.TimeoutError, socket.timeout)):
        return f"dial {network} {address}: i/o timeout"
    if isinstance(err, OSError) and err.errno:
        return f"dial {network} {address}: connect: {errno_text(err)}"
    return f"dial {network} {address}: {err}"


def listen_error(address: str, err: BaseException, network: str = "tcp") -> str:
    """The text of a failed ``net.Listen(network, address)``: ``listen tcp ADDR: bind: ...``."""
    return f"listen {network} {address}: bind: {errno_text(err)}"
