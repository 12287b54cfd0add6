"""Moved: Go durations live in :mod:`kubesvc.util.golang` (``parse_duration``, ``format_duration``).
Kept only until the last importer (the pre-``cmd/`` cli) is gone."""

from kubesvc.util.golang import parse_duration  # noqa: F401
