"""kernel/process.py on the real kernel: a process spawned into a namespace of the harness runs
there, with the environment and directory given, in a session of its own whose whole group
``kill_group`` reaches (a child it left behind included)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import pytest

from kubesvc.kernel import netns as knetns
from kubesvc.kernel import process as kprocess
from tests.support.netns import Netns

pytestmark = pytest.mark.kernel


@pytest.fixture
def ns():
    made = Netns.create("process")
    try:
        yield made
    finally:
        made.close()


async def test_spawn_runs_in_the_namespace_with_env_and_cwd(ns, tmp_path):
    process = await kprocess.spawn(["sh", "-c", 'readlink /proc/self/ns/net; echo "$GREETING"; pwd; echo oops >&2'],
                                   env={"PATH": os.environ["PATH"], "GREETING": "hi"}, cwd=str(tmp_path), netns=ns.name, merge_stderr=True)
    out, _ = await process.communicate()
    ident = knetns.identify(knetns.netns_path(ns.name))
    assert out.decode().splitlines() == [f"net:[{ident.ino}]", "hi", str(tmp_path), "oops"]
    assert process.returncode == 0 and os.getsid(0) != process.pid


async def test_kill_group_reaches_what_the_process_left_running(tmp_path):
    process = await kprocess.spawn(["sh", "-c", "sleep 600 & echo $!; wait"], env={"PATH": os.environ["PATH"]}, cwd=str(tmp_path))
    child = int((await process.stdout.readline()).decode())
    assert os.getpgid(child) == process.pid, "the child is in the group the process leads"
    kprocess.kill_group(process.pid, signal.SIGKILL)
    assert await asyncio.wait_for(process.wait(), 5) == -signal.SIGKILL
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError(f"pid {child} survived kill_group")
    kprocess.kill_group(process.pid, signal.SIGKILL)  # a group already gone is fine


def test_terminate_sends_sigterm_then_sigkill_after_the_grace_period():
    polite = subprocess.Popen(["sleep", "600"])
    stubborn = subprocess.Popen(["sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"])
    try:
        time.sleep(0.1)  # the trap is set
        assert kprocess.alive(polite.pid) and kprocess.alive(stubborn.pid)
        kprocess.terminate(polite.pid, grace=5)
        assert polite.wait(timeout=5) == -signal.SIGTERM
        start = time.monotonic()
        kprocess.terminate(stubborn.pid, grace=0.3)
        assert stubborn.wait(timeout=5) == -signal.SIGKILL and time.monotonic() - start >= 0.3
        assert not kprocess.alive(polite.pid)
        kprocess.terminate(polite.pid, grace=1)  # gone already: nothing to do
    finally:
        for process in (polite, stubborn):
            if process.poll() is None:
                process.kill()
