"""Go ``time.Duration`` strings, as Kubernetes components take them on the command line
(``--endpointslice-updates-batch-period=500ms``, ``--leader-elect-lease-duration=15s``)."""

from __future__ import annotations

import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds in ``text`` (``1h2m3.5s``, ``250ms``, ``0``, optionally signed); ValueError with
    Go's message otherwise."""
    original = text
    sign = -1.0 if text.startswith("-") else 1.0
    text = text.lstrip("+-")
    if text == "0":
        return 0.0
    if not text:
        raise ValueError(f'time: invalid duration "{original}"')
    total, position = 0.0, 0
    for match in _PART.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if position != len(text):
        if re.fullmatch(r"\d+(\.\d*)?", text):
            raise ValueError(f'time: missing unit in duration "{original}"')
        raise ValueError(f'time: invalid duration "{original}"')
    return sign * total
