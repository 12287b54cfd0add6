"""resource.Quantity values (api/quantity.py)."""

from decimal import Decimal

import pytest

from kubesvc.api.quantity import parse_quantity


@pytest.mark.parametrize(("value", "expected"), [
    ("500m", Decimal("0.5")),
    ("64Mi", Decimal(64 * 2**20)),
    ("1Gi", Decimal(2**30)),
    ("2k", Decimal(2000)),
    ("1e3", Decimal(1000)),
    ("1.5", Decimal("1.5")),
    (".5", Decimal("0.5")),
    ("-1", Decimal(-1)),
    (3, Decimal(3)),
    (0.25, Decimal("0.25")),
], ids=["milli", "mebi", "gibi", "kilo", "exponent", "fraction", "leading-dot", "negative", "json-int", "json-float"])
def test_values(value, expected):
    assert parse_quantity(value) == expected


@pytest.mark.parametrize("value", ["", "1Ki2", "abc", "1 Mi", True, None, float("inf"), "1e999999999"],
                         ids=["empty", "trailing", "letters", "space", "bool", "none", "infinite", "overflow"])
def test_not_quantities(value):
    assert parse_quantity(value) is None
