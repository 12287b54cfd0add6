from datetime import datetime, timezone

import pytest

from kubesvc.api.conditions import transition_time

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
EARLIER = "2026-01-01T00:00:00Z"


@pytest.mark.parametrize(("previous", "status", "expected"), [
    (None, "True", "2026-01-02T03:04:05Z"),
    ({"status": "True", "lastTransitionTime": EARLIER}, "True", EARLIER),
    ({"status": "False", "lastTransitionTime": EARLIER}, "True", "2026-01-02T03:04:05Z"),
    ({"status": "True"}, "True", "2026-01-02T03:04:05Z"),
    ({"status": "True", "lastTransitionTime": ""}, "True", "2026-01-02T03:04:05Z"),
], ids=["first", "status holds", "status flips", "old without time", "old with empty time"])
def test_transition_time(previous, status, expected):
    assert transition_time(previous, status, NOW) == expected
