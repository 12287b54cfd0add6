"""util/gcpause: the collector is off inside, back on after the last holder leaves, and left
off when it was off before."""

from __future__ import annotations

import gc

import pytest

from kubesvc.util import gcpause


@pytest.fixture(autouse=True)
def _restore_gc():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_nested_and_interleaved():
    gc.enable()
    first, second = gcpause.paused(), gcpause.paused()
    first.__enter__()
    assert not gc.isenabled()
    second.__enter__()
    first.__exit__(None, None, None)  # the other proxier still syncing
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_paused_reenables_after_an_error_and_keeps_a_disabled_collector_off():
    gc.enable()
    with pytest.raises(RuntimeError), gcpause.paused():
        raise RuntimeError("sync failed")
    assert gc.isenabled()
    gc.disable()
    with gcpause.paused():
        pass
    assert not gc.isenabled()
