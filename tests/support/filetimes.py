"""Per-file wall time of a test run, and which xdist worker ran each file when: the data for
keeping the suite under 15 minutes (``--durations`` names single tests, but a module-scoped
cluster's setup lands on whichever test comes first, and the suite's length is decided by the
files and by how the two workers' queues end).

    python3 -m pytest -p tests.support.filetimes ...      # scripts/test.sh loads it

At the end of the run it prints the slowest files (the sum of their tests' setup, call and
teardown), each worker's busy time and idle tail, and, with ``KUBESVC_FILE_TIMES=path``, writes
every file's figures there as JSON lines. The figures come from the reports pytest already
makes (``TestReport.start``/``stop``/``duration``), so the plugin adds no work to any test.

The same figures order the next runs (``tests/conftest.py``): with ``--dist loadfile`` a worker
takes the next file when it runs out, so the files go longest first (``longest_first``, the
classic longest-processing-time rule) and the short ones fill the tail, where before a
15-30 s kernel module could start on one worker as the other ran out of work. The figures
live in ``tests/file_times.json`` (seconds per file as the run that wrote it measured them: only
their order matters; refresh it from a whole run with ``python3 -m tests.support.filetimes
update RUN.jsonl``).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SHOWN = 30
TIMES_FILE = Path(__file__).resolve().parent.parent / "file_times.json"
UNKNOWN = 5.0  # seconds assumed for a file not in TIMES_FILE (a new one): ahead of the many short ones
# Files that only wait for work running elsewhere go last, whatever they took: the IPVS tests
# run in their VM from the start of the suite (tests/support/ipvs_vm.py) and this file collects
# their result, so the later it starts the less it waits.
LAST = ("tests/kernel/test_proxy_ipvs_vm.py",)


@dataclass
class FileTime:
    path: str
    worker: str
    first_start: float
    last_stop: float
    busy: float = 0.0  # sum of setup + call + teardown durations
    tests: set[str] = field(default_factory=set)


def worker_of(report) -> str:
    node = getattr(report, "node", None)  # set by xdist's controller on a worker's report
    gateway = getattr(node, "gateway", None)
    return getattr(gateway, "id", None) or getattr(report, "worker_id", None) or "main"


def record(files: dict[str, FileTime], report) -> None:
    path = report.nodeid.split("::", 1)[0]
    start, stop = getattr(report, "start", None), getattr(report, "stop", None)
    if start is None or stop is None:
        return
    entry = files.get(path)
    if entry is None:
        entry = files[path] = FileTime(path, worker_of(report), start, stop)
    entry.first_start, entry.last_stop = min(entry.first_start, start), max(entry.last_stop, stop)
    entry.busy += report.duration
    entry.tests.add(report.nodeid)


def summary(files: dict[str, FileTime]) -> list[str]:
    if not files:
        return []
    begin = min(f.first_start for f in files.values())
    end = max(f.last_stop for f in files.values())
    lines = [f"slowest {min(SHOWN, len(files))} of {len(files)} files (busy s, tests, worker, span from the run's start):"]
    for entry in sorted(files.values(), key=lambda f: f.busy, reverse=True)[:SHOWN]:
        lines.append(f"{entry.busy:8.1f}s {len(entry.tests):5d} {entry.worker:>5} "
                     f"{entry.first_start - begin:7.1f}-{entry.last_stop - begin:7.1f}  {entry.path}")
    by_worker: dict[str, list[FileTime]] = {}
    for entry in files.values():
        by_worker.setdefault(entry.worker, []).append(entry)
    for worker, entries in sorted(by_worker.items()):
        finished = max(e.last_stop for e in entries)
        last = max(entries, key=lambda e: e.last_stop)
        lines.append(f"worker {worker}: {len(entries)} files, busy {sum(e.busy for e in entries):.1f}s, "
                     f"done at {finished - begin:.1f}s of {end - begin:.1f}s (last: {last.path})")
    return lines


class FileTimes:
    def __init__(self) -> None:
        self.files: dict[str, FileTime] = {}

    def pytest_runtest_logreport(self, report) -> None:
        record(self.files, report)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if hasattr(terminalreporter.config, "workerinput"):
            return  # a worker: its controller reports
        for line in summary(self.files):
            terminalreporter.write_line(line)
        if out := os.environ.get("KUBESVC_FILE_TIMES"):
            with open(out, "w") as stream:
                for entry in self.files.values():
                    stream.write(json.dumps({"path": entry.path, "worker": entry.worker, "busy": round(entry.busy, 3),
                                             "start": entry.first_start, "stop": entry.last_stop, "tests": len(entry.tests)}) + "\n")


@pytest.hookimpl(trylast=True)
def pytest_configure(config) -> None:
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(FileTimes(), "kubesvc-filetimes")


def load_times(path: Path = TIMES_FILE) -> dict[str, float]:
    try:
        return {name: float(seconds) for name, seconds in json.loads(path.read_text()).items()}
    except (OSError, ValueError):
        return {}


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def longest_first(items: list, times: dict[str, float]) -> list:
    """``items`` grouped by file, the files in descending recorded time (unknown ones at
    ``UNKNOWN``, ``LAST`` at the end); a file's own tests keep their order (sorted() is stable)."""
    def key(item) -> tuple[bool, float]:
        path = file_of(item.nodeid)
        return path in LAST, -times.get(path, UNKNOWN)
    return sorted(items, key=key)


def update(run_file: Path, path: Path = TIMES_FILE) -> dict[str, float]:
    """TIMES_FILE from a run's JSON lines (``KUBESVC_FILE_TIMES``): every file's busy seconds."""
    times = {}
    for line in run_file.read_text().splitlines():
        entry = json.loads(line)
        times[entry["path"]] = round(entry["busy"], 1)
    ordered = dict(sorted(times.items(), key=lambda kv: (-kv[1], kv[0])))
    path.write_text(json.dumps(ordered, indent=0) + "\n")
    return ordered


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "update":
        sys.exit("usage: python3 -m tests.support.filetimes update RUN.jsonl")
    update(Path(sys.argv[2]))
