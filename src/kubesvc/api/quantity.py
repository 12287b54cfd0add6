"""``resource.Quantity`` values (apimachinery ``pkg/api/resource``): a number with an optional
binary suffix (``Ki`` .. ``Ei``, powers of 1024), decimal SI suffix (``n`` .. ``E``) or
exponent (``1e3``), as in ``cpu: 500m`` or ``memory: 64Mi``. JSON numbers are quantities too.

Only the value is computed (an exact ``Decimal``), for comparisons and arithmetic; the
canonical re-serialization upstream does is not needed here.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

_QUANTITY_RE = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?", re.ASCII)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(value: Any) -> Decimal | None:
    """A resource.Quantity's value; None when it does not parse (or is not finite)."""
    try:
        if (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, float):
            number = Decimal(str(value))
        elif isinstance(value, str) and (match := _QUANTITY_RE.fullmatch(value)):
            number, suffix = Decimal(match[1]), match[2] or ""
            if suffix in _BINARY:
                number *= _BINARY[suffix]
            elif suffix:
                number = number.scaleb(_DECIMAL.get(suffix) or int(suffix[1:]))
        else:
            return None
    except (ArithmeticError, ValueError):
        return None
    return number if number.is_finite() else None
