"""The suite's file order (tests/support/filetimes.py): longest recorded files first, a file's
own tests in their order, unknown files ahead of the short known ones, the IPVS VM's collector
last; and tests/file_times.json written from a run's per-file figures."""

from __future__ import annotations

import json
from types import SimpleNamespace

from tests.support import filetimes


def ids(*nodeids):
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_longest_files_first_their_tests_in_order_the_vm_collector_last():
    items = ids("tests/a.py::one", "tests/kernel/test_proxy_ipvs_vm.py::vm", "tests/b.py::one", "tests/a.py::two", "tests/new.py::one")
    times = {"tests/a.py": 2.0, "tests/b.py": 30.0, "tests/kernel/test_proxy_ipvs_vm.py": 900.0}
    assert [i.nodeid for i in filetimes.longest_first(items, times)] == [
        "tests/b.py::one", "tests/new.py::one", "tests/a.py::one", "tests/a.py::two", "tests/kernel/test_proxy_ipvs_vm.py::vm"]


def test_times_file_from_a_run(tmp_path):
    run = tmp_path / "run.jsonl"
    run.write_text("".join(json.dumps({"path": p, "worker": "gw0", "busy": b, "start": 0, "stop": b, "tests": 1}) + "\n"
                           for p, b in (("tests/a.py", 1.234), ("tests/b.py", 20.06))))
    out = tmp_path / "file_times.json"
    filetimes.update(run, out)
    assert list(json.loads(out.read_text()).items()) == [("tests/b.py", 20.1), ("tests/a.py", 1.2)]
    assert filetimes.load_times(out) == {"tests/b.py": 20.1, "tests/a.py": 1.2}
    assert filetimes.load_times(tmp_path / "missing.json") == {}
