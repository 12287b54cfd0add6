"""WakeableLoop: kicks coalesce into one pass, the interval runs a pass unasked, and a pass
that raises does not end the loop."""

from __future__ import annotations

import asyncio

from kubesvc.util.wakeable import WakeableLoop


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_kicks_coalesce_and_a_failing_pass_keeps_the_loop():
    passes = []

    def work():
        passes.append(len(passes))
        if len(passes) == 1:
            raise RuntimeError("first pass fails")

    loop = WakeableLoop(work, interval=3600, what="test pass")
    task = asyncio.create_task(loop.run())
    try:
        await _settle()
        assert passes == []  # nothing until kicked
        loop.kick(), loop.kick(), loop.kick()
        await _settle()
        assert passes == [0]  # three kicks, one pass (which raised)
        loop.kick()
        await _settle()
        assert passes == [0, 1]
        assert not task.done()
    finally:
        task.cancel()


async def test_the_interval_runs_a_pass_unasked():
    passes = []
    loop = WakeableLoop(lambda: passes.append(1), interval=0.01, what="test pass")
    task = asyncio.create_task(loop.run())
    try:
        await asyncio.sleep(0.1)
        assert len(passes) >= 2
    finally:
        task.cancel()
