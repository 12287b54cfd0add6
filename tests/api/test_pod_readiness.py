"""Upstream's ``IsPodReady``/``IsPodAvailable`` (pkg/api/v1/pod/util.go), which every workload
controller counts with: the expected answers are upstream's, case by case."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from kubesvc.api.pods import is_available, is_ready, ready_since

NOW = datetime(2026, 11, 27, 12, 0, 0, tzinfo=timezone.utc)


def pod(*conditions: dict) -> dict:
    return {"metadata": {"name": "p"}, "status": {"conditions": list(conditions)}}


READY_AT_1150 = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-27T11:50:00Z"}


@pytest.mark.parametrize("subject, ready", [
    (pod(READY_AT_1150), True),
    (pod({"type": "Ready", "status": "False"}), False),
    (pod({"type": "ContainersReady", "status": "True"}), False),
    (pod(), False),
    ({"metadata": {"name": "p"}}, False),
    (pod("not a condition", READY_AT_1150), True),
], ids=["ready", "not-ready", "other-condition", "no-conditions", "no-status", "junk-beside"])
def test_is_ready(subject, ready):
    assert is_ready(subject) is ready


@pytest.mark.parametrize("subject, min_ready, available", [
    (pod(READY_AT_1150), 0, True),
    (pod(READY_AT_1150), 599, True),  # ready 600 s: strictly longer than 599
    (pod(READY_AT_1150), 600, False),  # not strictly longer
    (pod({"type": "Ready", "status": "True"}), 10, False),  # zero time: never available with minReadySeconds
    (pod({"type": "Ready", "status": "True", "lastTransitionTime": "yesterday"}), 10, False),
    (pod({"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-27T11:00:00Z"}), 0, False),
], ids=["no-min", "longer", "exactly", "no-time", "unreadable-time", "not-ready"])
def test_is_available(subject, min_ready, available):
    assert is_available(subject, min_ready, NOW) is available


def test_ready_since_only_for_a_ready_pod():
    assert ready_since(pod(READY_AT_1150)) == datetime(2026, 11, 27, 11, 50, tzinfo=timezone.utc)
    assert ready_since(pod({"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-27T11:00:00Z"})) is None
