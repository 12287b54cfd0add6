"""pytest's assertion rewriting of the test files done once, before the xdist workers start,
instead of once in each worker.

pytest rewrites the ``assert`` statements of every test file and conftest it imports (parse,
AST rewrite, compile: about half of this suite's collection, ~9 s of CPU) and keeps the result
in ``__pycache__/<name>.<tag>-pytest-<version>.pyc`` for the next run, unless the interpreter
does not write bytecode: CI runs with ``PYTHONDONTWRITEBYTECODE=1`` and a fresh clone, so each
of the two workers rewrote all of them again, side by side, on the same two cores. pytest
*reads* that cache whatever the setting (``AssertionRewritingHook.exec_module``), so the
controller writes it here first, split over two processes, and the workers only load it.

It uses pytest's own rewriting (``_rewrite_test``, ``_read_pyc``, ``_write_pyc``, private but
the very functions the import hook calls, so the cached code is what pytest would have made);
if they are missing or fail, nothing is written and the workers rewrite as before.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import struct
from pathlib import Path
from types import SimpleNamespace

_config = None  # the controller's Config, inherited by the forked rewriters
_NO_TRACE = SimpleNamespace(trace=lambda message: None)  # _write_pyc's AssertionState, for its trace only


def _stale(path: Path) -> bool:
    """Whether the cached rewrite of ``path`` is missing or not of this source: the header
    check of ``_read_pyc`` (magic, flags, the source's mtime and size), without loading the code."""
    from _pytest.assertion import rewrite

    pyc = rewrite.get_cache_dir(path) / (path.name[:-3] + rewrite.PYC_TAIL)
    try:
        with open(pyc, "rb") as stream:
            header = stream.read(16)
    except OSError:
        return True
    source = path.stat()
    expected = importlib.util.MAGIC_NUMBER + b"\0\0\0\0" + struct.pack("<LL", int(source.st_mtime) & 0xFFFFFFFF, source.st_size & 0xFFFFFFFF)
    return header != expected


def _rewrite(path: Path) -> bool:
    from _pytest.assertion import rewrite

    try:
        source_stat, code = rewrite._rewrite_test(path, _config)
        cache_dir = rewrite.get_cache_dir(path)
        cache_dir.mkdir(exist_ok=True)
        return rewrite._write_pyc(_NO_TRACE, code, source_stat, cache_dir / (path.name[:-3] + rewrite.PYC_TAIL))
    except Exception:  # the worker's import hook rewrites it then, as without this module
        return False


def test_files(root: Path) -> list[Path]:
    """The files pytest rewrites on import under ``root``: test modules and conftests."""
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts
                  and (p.name == "conftest.py" or (p.name.startswith("test_") or p.name.endswith("_test.py"))))


def prewrite(config, root: Path, processes: int = 2) -> int:
    """Rewrite (and cache) every stale test file under ``root``; the number written."""
    global _config
    try:
        stale = [path for path in test_files(root) if _stale(path)]
    except Exception:
        return 0
    if not stale:
        return 0
    _config = config
    try:
        if processes <= 1 or len(stale) < 2:
            return sum(map(_rewrite, stale))
        with multiprocessing.get_context("fork").Pool(min(processes, os.cpu_count() or 1)) as pool:
            return sum(pool.map(_rewrite, stale, chunksize=4))
    finally:
        _config = None
