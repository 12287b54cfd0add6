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


def test_asserts_rewritten_once_before_the_workers_are_what_pytest_loads(tmp_path, pytestconfig):
    """tests/support/rewritecache.py: a stale test file's rewrite is cached where pytest's
    import hook looks, in the form it reads (``_read_pyc`` gives the rewritten code back), an
    up-to-date one is left alone, and an edited source makes its cache stale again."""
    from _pytest.assertion import rewrite

    from tests.support import rewritecache

    (tmp_path / "pkg").mkdir()
    test_file = tmp_path / "pkg" / "test_example.py"
    test_file.write_text("def test_one():\n    x = 1\n    assert x == 2\n")
    (tmp_path / "pkg" / "helper.py").write_text("VALUE = 1\n")
    (tmp_path / "conftest.py").write_text("")
    assert rewritecache.test_files(tmp_path) == [tmp_path / "conftest.py", test_file]
    assert rewritecache.prewrite(pytestconfig, tmp_path) == 2
    code = rewrite._read_pyc(test_file, rewrite.get_cache_dir(test_file) / ("test_example" + rewrite.PYC_TAIL))
    assert code is not None
    (test_one,) = [c for c in code.co_consts if getattr(c, "co_name", None) == "test_one"]
    assert any(name.startswith("@py_assert") for name in test_one.co_varnames), test_one.co_varnames  # pytest's rewritten assert
    assert rewritecache.prewrite(pytestconfig, tmp_path) == 0
    test_file.write_text(test_file.read_text() + "\n\ndef test_two():\n    assert True\n")
    assert rewritecache.prewrite(pytestconfig, tmp_path) == 1


def test_the_modules_sharing_one_up_are_one_scheduling_unit():
    """tests/support/up.py: under ``--dist loadfile`` every other file is its own unit; the
    SHARED_UP_MODULES are one (one worker runs them in turn, on one ``kubesvc up``)."""
    from tests.support.up import SHARED_UP_MODULES, SHARED_UP_SCOPE, scheduling_scope

    assert len(SHARED_UP_MODULES) >= 2
    assert {scheduling_scope(f"{path}::test_x[a]") for path in SHARED_UP_MODULES} == {SHARED_UP_SCOPE}
    assert scheduling_scope("tests/kernel/test_agent_containers.py::test_x") == "tests/kernel/test_agent_containers.py"
    assert scheduling_scope("tests/api/test_kinds.py") == "tests/api/test_kinds.py"
