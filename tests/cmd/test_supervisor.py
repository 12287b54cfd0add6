"""``kubesvc up``'s supervisor: the crash-loop back-off (pure), and the shell with real child
processes (small Python scripts standing in for the components): readiness is the first stdout
line, a process that dies is restarted and logged with its exit code, logs land in files and on
stderr prefixed, stop is SIGTERM then SIGKILL."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys

import pytest

from kubesvc.cmd.supervisor import BackoffPolicy, ComponentFailed, Supervisor, describe_exit, restart_delay

POLICY = BackoffPolicy(initial=1.0, cap=60.0, reset_after=120.0)


@pytest.mark.parametrize(("previous", "ran_for", "expected"), [
    (0.0, 0.5, 1.0),     # the first crash: the initial delay
    (1.0, 0.5, 2.0),     # crashing again at once: doubled
    (16.0, 30.0, 32.0),
    (32.0, 30.0, 60.0),  # capped
    (60.0, 30.0, 60.0),
    (60.0, 120.0, 1.0),  # it had run long enough: starts over
], ids=["first", "doubles", "doubles-again", "capped", "stays-capped", "reset-after-a-long-run"])
def test_restart_delay_is_kubelets_crash_loop_back_off_with_a_dev_cap(previous, ran_for, expected):
    assert restart_delay(previous, ran_for, POLICY) == expected


def test_the_schedule_from_the_first_crash():
    delays, delay = [], 0.0
    for _ in range(8):
        delay = restart_delay(delay, 0.1, POLICY)
        delays.append(delay)
    assert delays == [1, 2, 4, 8, 16, 32, 60, 60]


@pytest.mark.parametrize(("code", "text"), [(0, "exit code 0"), (3, "exit code 3"), (-9, "signal 9 (SIGKILL)"), (-15, "signal 15 (SIGTERM)")])
def test_describe_exit(code, text):
    assert describe_exit(code) == text


def script(body: str) -> list[str]:
    return [sys.executable, "-c", body]


READY_THEN_SLEEP = "import sys, time; print('ready', flush=True); print('to stderr', file=sys.stderr, flush=True); time.sleep(60)"


@pytest.fixture
def echoed():
    return []


@pytest.fixture
async def supervisor(tmp_path, echoed):
    made = Supervisor(tmp_path / "logs", policy=BackoffPolicy(initial=0.05, cap=0.2, reset_after=10), echo=echoed.append)
    yield made
    await made.close()


async def test_ready_is_the_first_line_and_the_logs_go_to_a_file_and_prefixed_to_stderr(supervisor, tmp_path, echoed):
    assert await supervisor.start("web", script(READY_THEN_SLEEP), ready_timeout=20) == "ready"
    log_file = tmp_path / "logs" / "web.log"

    async def logged():
        while "to stderr" not in (log_file.read_text() if log_file.exists() else ""):
            await asyncio.sleep(0.02)

    await asyncio.wait_for(logged(), 10)
    assert sorted(log_file.read_text().splitlines()) == ["ready", "to stderr"]
    progress = [line for line in echoed if line.startswith("kubesvc up: ")]
    assert sorted(set(echoed) - set(progress)) == ["web: ready\n", "web: to stderr\n"]
    # up's own progress: the start, then ready with the time it took
    assert progress[0] == "kubesvc up: starting web\n"
    assert re.fullmatch(r"kubesvc up: web ready \(\d+\.\ds\)\n", progress[1]), progress
    await supervisor.stop(["web"], 5)
    assert echoed[-2:] == ["kubesvc up: stopping web\n", echoed[-1]]
    assert re.fullmatch(r"kubesvc up: stopped web \(\d+\.\ds\)\n", echoed[-1]), echoed


async def test_a_component_that_dies_is_restarted_and_logged_with_its_exit_code(supervisor, caplog):
    await supervisor.start("web", script(READY_THEN_SLEEP), ready_timeout=20)
    first = supervisor.components["web"].process.pid
    os.kill(first, signal.SIGKILL)

    async def restarted():
        while supervisor.components["web"].process.pid == first or supervisor.components["web"].process.returncode is not None:
            await asyncio.sleep(0.02)
        await supervisor.components["web"].ready

    await asyncio.wait_for(restarted(), 20)
    component = supervisor.components["web"]
    assert component.restarts == 1 and component.exits == [-9]
    assert f"web (pid {first}) exited with signal 9 (SIGKILL)" in caplog.text and "restarting in 0.05s (restart 1)" in caplog.text


async def test_crashing_again_backs_off(supervisor):
    await supervisor.start("flaky", script("import time; print('ready', flush=True); time.sleep(0.1); raise SystemExit(3)"), ready_timeout=20)

    async def three_exits():
        while len(supervisor.components["flaky"].exits) < 3:
            await asyncio.sleep(0.02)

    await asyncio.wait_for(three_exits(), 20)
    component = supervisor.components["flaky"]
    assert component.exits[:3] == [3, 3, 3]
    assert component.delay in (0.2, 0.1)  # 0.05, 0.1, 0.2 (capped) as it goes


async def test_a_component_that_exits_before_it_is_ready_fails_the_start_with_its_last_lines(supervisor):
    with pytest.raises(ComponentFailed) as failed:
        await supervisor.start("broken", script("import sys; print('Error: no such flag', file=sys.stderr); sys.exit(2)"), ready_timeout=20)
    assert str(failed.value) == "broken exited with exit code 2 before it was ready\n  Error: no such flag"


async def test_stop_is_sigterm_then_sigkill_after_the_grace(supervisor):
    await supervisor.start("polite", script(READY_THEN_SLEEP), ready_timeout=20)
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    await supervisor.start("stubborn", script(stubborn), ready_timeout=20)
    codes = await supervisor.stop(["polite", "stubborn"], grace=0.5)
    assert codes == {"polite": -signal.SIGTERM, "stubborn": -signal.SIGKILL}
    await asyncio.sleep(0.2)
    assert all(c.restarts == 0 for c in supervisor.components.values()), "a stopped component is not restarted"


async def test_a_broken_stderr_does_not_stall_the_component_and_its_log_stays_private(tmp_path):
    """``kubesvc up 2>&1 | head``: once up's stderr is gone, the component's output is still
    drained into its log file, so the component never blocks on a full pipe."""
    echoed: list[str] = []

    def closed_after_first(text: str) -> None:
        if echoed:
            raise BrokenPipeError(32, "Broken pipe")
        echoed.append(text)

    chatty = "import sys; print('ready', flush=True)\nfor i in range(20000): print('line', i, '-' * 60)\nsys.stdout.flush(); print('done', flush=True)"
    made = Supervisor(tmp_path / "logs", policy=BackoffPolicy(initial=5, cap=5, reset_after=10), echo=closed_after_first)
    try:
        await made.start("web", script(chatty), ready_timeout=20)
        log_file = tmp_path / "logs" / "web.log"

        async def finished():
            while not (log_file.exists() and log_file.read_text().endswith("done\n")):
                await asyncio.sleep(0.05)

        await asyncio.wait_for(finished(), 20)  # 1.3 MB through a 64 KiB pipe: it never blocked
        assert echoed == ["kubesvc up: starting web\n"]  # the first line echoed; then stderr broke
        assert len(log_file.read_text().splitlines()) == 20002
        assert os.stat(log_file).st_mode & 0o777 == 0o600
    finally:
        await made.close()


async def test_progress_lines_name_the_command_that_supervises(tmp_path):
    """``kubesvc join`` runs its agent and proxy under the same supervisor: its lines say join."""
    echoed: list[str] = []
    joined = Supervisor(tmp_path / "logs", echo=echoed.append, label="kubesvc join")
    try:
        await joined.start("web", script(READY_THEN_SLEEP), ready_timeout=20)
    finally:
        await joined.close()
    assert echoed[0] == "kubesvc join: starting web\n"
    assert not [line for line in echoed if line.startswith("kubesvc up")]
