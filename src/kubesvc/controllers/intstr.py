"""``intstr.IntOrString`` as a scaled value (k8s.io/apimachinery/pkg/util/intstr
``GetScaledValueFromIntOrPercent``): ``maxSurge: 3`` means 3, ``maxSurge: "25%"`` means 25 % of a
total, rounded up or down as the caller asks. A string that does not end in ``%`` is an error
(``invalid type: string is not a percentage``), as is a percentage whose number does not parse.
Deployments round surge up and unavailability down; DaemonSets round both up."""

from __future__ import annotations

from kubesvc.util import golang


class IntOrPercentError(ValueError):
    pass


def scaled_value(value: int | str | None, total: int, round_up: bool) -> int:
    """``value`` (an int, a ``"<n>%"`` string or None, which counts as 0) scaled against ``total``."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise IntOrPercentError("invalid type: neither int nor percentage")
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        raise IntOrPercentError("invalid type: neither int nor percentage")
    if not value.endswith("%"):
        raise IntOrPercentError("invalid type: string is not a percentage")
    try:
        percent = golang.atoi(value[:-1])
    except ValueError as exc:
        raise IntOrPercentError(f"invalid value {golang.quote(value)}: {exc}") from None
    scaled = percent * total
    # math.Ceil / math.Floor of percent*total/100, exactly in integers
    return -(-scaled // 100) if round_up else scaled // 100
