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
from dataclasses import dataclass
from datetime import datetime, timedelta

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


def _range(expr: str, low: int, high: int, names: dict | None) -> tuple[set[int], bool]:
    """``getRange``: one ``a-b/step`` term: its values, and whether it is a ``*`` (the star bit)."""
    range_and_step = expr.split("/")
    low_and_high = range_and_step[0].split("-")
    star = low_and_high[0] in ("*", "?")
    if star:
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
        if step > 1:
            star = False
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
    return set(range(start, end + 1, step)), star


@dataclass(frozen=True)
class Schedule:
    """A parsed schedule: the allowed values of each field (``SpecSchedule``), or a constant
    delay (``@every``, ``ConstantDelaySchedule``: whole seconds, at least one)."""

    minutes: frozenset = frozenset()
    hours: frozenset = frozenset()
    days_of_month: frozenset = frozenset()
    months: frozenset = frozenset()
    days_of_week: frozenset = frozenset()
    dom_star: bool = False
    dow_star: bool = False
    every: float = 0.0
    zone: str = ""  # from TZ= / CRON_TZ=

    def _day_matches(self, t: datetime) -> bool:
        dom, dow = t.day in self.days_of_month, (t.isoweekday() % 7) in self.days_of_week
        if self.dom_star or self.dow_star:
            return dom and dow
        return dom or dow

    def next(self, t: datetime) -> datetime | None:
        """The first activation after ``t`` (``Next``); None if there is none within 5 years.
        Fields are matched in ``t``'s own time zone, as robfig/cron matches in the location
        of the time it is given."""
        if self.every:
            return t.replace(microsecond=0) + timedelta(seconds=self.every)
        t = t.replace(microsecond=0) + timedelta(seconds=1)
        limit = t.year + 5
        added = False
        while t.year <= limit:
            if t.month not in self.months:
                if not added:
                    added, t = True, t.replace(day=1, hour=0, minute=0, second=0)
                t = (t.replace(day=1) + timedelta(days=32)).replace(day=1)
                continue
            if not self._day_matches(t):
                if not added:
                    added, t = True, t.replace(hour=0, minute=0, second=0)
                t += timedelta(days=1)
                continue
            if t.hour not in self.hours:
                if not added:
                    added, t = True, t.replace(minute=0, second=0)
                t += timedelta(hours=1)
                continue
            if t.minute not in self.minutes:
                if not added:
                    added, t = True, t.replace(second=0)
                t += timedelta(minutes=1)
                continue
            if t.second != 0:
                if not added:
                    added = True
                t = t.replace(second=0) + timedelta(minutes=1)
                continue
            return t
        return None


_DESCRIBED = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
              "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}


def parse_standard(spec: str) -> Schedule:
    """The schedule ``cron.ParseStandard`` makes of ``spec``; CronError with its message otherwise."""
    if not spec:
        raise CronError("empty spec string")
    zone = ""
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
            return _fields(_DESCRIBED[spec].split(), zone)
        if spec.startswith("@every "):
            try:
                seconds = golang.parse_duration(spec[len("@every "):])
            except ValueError as err:
                raise CronError(f"failed to parse duration {spec}: {err}") from None
            return Schedule(every=max(1.0, float(int(seconds))), zone=zone)
        raise CronError(f"unrecognized descriptor: {spec}")
    fields = spec.split()
    if len(fields) != 5:
        raise CronError(f"expected exactly 5 fields, found {len(fields)}: {_go_list(fields)}")
    return _fields(fields, zone)


def _fields(fields: list[str], zone: str) -> Schedule:
    values: list[frozenset] = []
    stars: list[bool] = []
    for field, (low, high, names) in zip(fields, _BOUNDS):
        allowed: set[int] = set()
        star = False
        for expr in (term for term in field.split(",") if term):
            got, is_star = _range(expr, low, high, names)
            allowed |= got
            star = star or is_star
        values.append(frozenset(allowed))
        stars.append(star)
    return Schedule(*values, dom_star=stars[2], dow_star=stars[4], zone=zone)
