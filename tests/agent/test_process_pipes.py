"""``kernel.process``'s readers of a child's pipes close each descriptor exactly once, under both
event loops. uvloop's ``connect_read_pipe`` (0.23) closed it twice (MagicStack/uvloop#763): the
file object when it was collected, then libuv, by then closing whatever descriptor had taken
that number meanwhile (review 20). The probe is the issue's: a file object that, as it closes
its descriptor, opens a pipe of its own (which takes the lowest free numbers, that one first)
and checks afterwards that nothing closed it."""

from __future__ import annotations

import asyncio
import gc
import io
import os

import pytest

from kubesvc.kernel import process as kprocess

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None

LOOPS = [pytest.param(asyncio.new_event_loop, id="asyncio"),
         pytest.param(uvloop and uvloop.new_event_loop, id="uvloop", marks=pytest.mark.skipif(uvloop is None, reason="no uvloop"))]


class Probe(io.FileIO):
    """A pipe's read end that, once it has closed its descriptor, opens a pipe in its place."""

    after: list[tuple[int, int]] = []

    def close(self):
        if not self.closed:
            super().close()
            Probe.after.append(os.pipe())


def still_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


@pytest.mark.parametrize("new_loop", LOOPS)
def test_a_pipe_read_to_its_end_is_closed_once(new_loop):
    Probe.after = []

    async def main():
        loop = asyncio.get_running_loop()
        for _ in range(3):
            r, w = os.pipe()
            reader = await kprocess._reader(loop, Probe(r, "rb"))
            os.write(w, b"output")
            os.close(w)
            assert await reader.read() == b"output"
            del reader
            await asyncio.sleep(0.02)
            gc.collect()
            await asyncio.sleep(0.02)

    loop = new_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert len(Probe.after) == 3
    closed = [fd for pair in Probe.after for fd in pair if not still_open(fd)]
    for pair in Probe.after:
        for fd in pair:
            with_suppress_close(fd)
    assert closed == [], f"descriptors opened after the pipe was closed were closed again: {closed}"


def with_suppress_close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


@pytest.mark.parametrize("new_loop", LOOPS)
def test_a_reader_pauses_past_twice_its_limit_and_reads_everything(new_loop, tmp_path):
    size = 8 * kprocess.PIPE_LIMIT

    async def main():
        process = await kprocess.spawn(["head", "-c", str(size), "/dev/zero"], env={"PATH": os.environ["PATH"]}, cwd=str(tmp_path))
        await asyncio.sleep(0.3)  # nobody reads: the reader stops taking from the pipe
        held = len(process.stdout._buffer)
        assert 2 * kprocess.PIPE_LIMIT <= held < size
        data = await process.stdout.read()
        assert await process.wait() == 0
        return len(data)

    loop = new_loop()
    try:
        assert loop.run_until_complete(main()) == size
    finally:
        loop.close()
