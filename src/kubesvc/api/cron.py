"""Cron schedules as a CronJob's ``spec.schedule`` takes them: robfig/cron v3 ``ParseStandard``.

Five fields, minute (0-59), hour (0-23), day of month (1-31), month (1-12 or ``jan``..``dec``)
and day of week (0-6 or ``sun``..``sat``); each a comma list of ``*`` or ``?``, ``N``, ``N-M``,
with an optional ``/step`` (``N/step`` means ``N-max/step``). Or a descriptor: ``@yearly``
(``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``), ``@hourly``,
``@every <Go duration>``. A leading ``TZ=<zone>`` or ``CRON_TZ=<zone>`` names a time zone
(which CronJob validation then refuses in favour of ``spec.timeZone``).

:func:`parse_standard` raises :class:`CronError` with robfig/cron's own message, which the
apiserver shows as the reason a schedule is invalid (``expected exactly 5 fields, found 1: [x]``).
"""

from __future__ import annotations

import zoneinfo

from kubesvc.util import golang

DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_MONTHS = {name: i for i, name in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)}
_DAYS = {name: i for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
# (min, max, names) of minute, hour, day of month, month, day of week
_BOUNDS = ((0, 59, None), (0, 23, None), (1, 31, None), (1, 12, _MONTHS), (0, 6, _DAYS))


class CronError(ValueError):
    pass


def _go_list(fields: list[str]) -> str:
    return "[" + " ".join(fields) + "]"


def _int(expr: str) -> int:
    """``mustParseInt``."""
    try:
        number = golang.atoi(expr)
    except ValueError as err:
        raise CronError(f"failed to parse int from {expr}: {err}") from None
    if number < 0:
        raise CronError(f"negative number ({number}) not allowed: {expr}")
    return number


def _int_or_name(expr: str, names: dict | None) -> int:
    if names is not None and expr.lower() in names:
        return names[expr.lower()]
    return _int(expr)


def _range(expr: str, low: int, high: int, names: dict | None) -> None:
    """``getRange``: one ``a-b/step`` term."""
    range_and_step = expr.split("/")
    low_and_high = range_and_step[0].split("-")
    if low_and_high[0] in ("*", "?"):
        start, end = low, high
    else:
        start = _int_or_name(low_and_high[0], names)
        if len(low_and_high) == 1:
            end = start
        elif len(low_and_high) == 2:
            end = _int_or_name(low_and_high[1], names)
        else:
            raise CronError(f"too many hyphens: {expr}")
    step = 1
    if len(range_and_step) == 2:
        step = _int(range_and_step[1])
        if len(low_and_high) == 1:
            end = high
    elif len(range_and_step) > 2:
        raise CronError(f"too many slashes: {expr}")
    if start < low:
        raise CronError(f"beginning of range ({start}) below minimum ({low}): {expr}")
    if end > high:
        raise CronError(f"end of range ({end}) above maximum ({high}): {expr}")
    if start > end:
        raise CronError(f"beginning of range ({start}) beyond end of range ({end}): {expr}")
    if step == 0:
        raise CronError(f"step of range should be a positive number: {expr}")


def parse_standard(spec: str) -> None:
    """Raise CronError unless ``spec`` is a schedule ``cron.ParseStandard`` accepts."""
    if not spec:
        raise CronError("empty spec string")
    if spec.startswith(("TZ=", "CRON_TZ=")):
        space, equals = spec.find(" "), spec.find("=")
        zone = spec[equals + 1:space] if space >= 0 else spec[equals + 1:]
        try:
            zoneinfo.ZoneInfo(zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise CronError(f"provided bad location {zone}: unknown time zone {zone}") from None
        spec = spec[space:].strip() if space >= 0 else ""
    if spec.startswith("@"):
        if spec in DESCRIPTORS:
            return
        if spec.startswith("@every "):
            try:
                golang.parse_duration(spec[len("@every "):])
            except ValueError as err:
                raise CronError(f"failed to parse duration {spec}: {err}") from None
            return
        raise CronError(f"unrecognized descriptor: {spec}")
    fields = spec.split()
    if len(fields) != 5:
        raise CronError(f"expected exactly 5 fields, found {len(fields)}: {_go_list(fields)}")
    for field, (low, high, names) in zip(fields, _BOUNDS):
        for expr in (term for term in field.split(",") if term):
            _range(expr, low, high, names)
