"""The process supervisor of ``kubesvc up``: each component a process of its own, restarted with
back-off when it dies.

Upstream runs kube-apiserver, kube-controller-manager (and kube-scheduler), kubelet and
kube-proxy as separate binaries, each on every core; k3s runs them in one process, as
goroutines, which Go spreads over every core too. One Python event loop is one core, so ``up``
runs each ``kubesvc <component>`` command as a child process, with the flags and kubeconfigs it
derives, and supervises them:

* **readiness**: a component is ready when it prints its first line on stdout (each command
  announces itself once it serves: the apiserver its URL, the agent its node, the proxy its
  mode); ``start`` waits for that line and fails, with the component's last log lines, when the
  process exits first or stays silent too long;
* **logs**: every line a component writes (stdout after the announcement, and stderr) goes to
  ``<data-dir>/logs/<component>.log`` and to ``up``'s stderr prefixed with the component's
  name;
* **crashes**: a component that exits while ``up`` is not stopping is logged with its exit code
  (or signal) and restarted after a back-off, kubelet's crash-loop back-off with a dev tool's
  cap (``restart_delay``: 1 s doubling to 60 s, back to 1 s once a run lasted 120 s; kubelet's
  is 10 s doubling to 5 min, reset after 10 min);
* **stop**: SIGTERM to each component's process group, SIGKILL to what is left after a grace
  period; every component also dies with ``up`` (``kernel.process.spawn(die_with_parent=...)``);
* **progress**: each start and stop is a ``kubesvc up: ...`` line on stderr with its time (as
  k3s logs each component it starts), so a slow start or stop shows where it waits.

The decisions (``restart_delay``, ``describe_exit``) are pure; ``Supervisor`` is the thin shell
around ``kernel.process``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kubesvc.kernel import process as kprocess
from kubesvc.util.aio import cancel_and_wait

log = logging.getLogger("kubesvc.up")

LOG_DIR = "logs"
LAST_LINES = 5  # of a component's log, quoted when it fails to start


@dataclass(frozen=True)
class BackoffPolicy:
    """Crash-loop back-off: ``initial`` seconds before the first restart, doubling up to ``cap``;
    a run that lasted ``reset_after`` seconds starts over at ``initial`` (kubelet resets after
    twice its cap)."""

    initial: float = 1.0
    cap: float = 60.0
    reset_after: float = 120.0


def restart_delay(previous: float, ran_for: float, policy: BackoffPolicy) -> float:
    """Seconds to wait before restarting a component that exited after running ``ran_for``
    seconds, ``previous`` being the delay before its last restart (0: it never restarted)."""
    if previous <= 0 or ran_for >= policy.reset_after:
        return policy.initial
    return min(previous * 2, policy.cap)


def describe_exit(returncode: int) -> str:
    """``exit code 3``, or ``signal 9 (SIGKILL)`` for a process a signal ended."""
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"
    return f"signal {-returncode} ({name})"


class ComponentFailed(Exception):
    """A component exited (or stayed silent) before it announced itself ready."""


@dataclass
class Component:
    """One supervised command: what runs, and what became of it."""

    name: str
    argv: list[str]  # may change between runs (the apiserver's port, pinned after its first start)
    process: kprocess.Process | None = None
    started_at: float = 0.0
    restarts: int = 0
    delay: float = 0.0  # the back-off before the last restart
    ready: asyncio.Future | None = None  # its first stdout line
    last_lines: deque = field(default_factory=lambda: deque(maxlen=LAST_LINES))
    exits: list[int] = field(default_factory=list)  # every exit code seen while not stopping


class Supervisor:
    def __init__(self, log_dir: Path, *, policy: BackoffPolicy = BackoffPolicy(), echo=None, env: dict | None = None,
                 clock: Callable[[], float] = time.monotonic, label: str = "kubesvc up"):
        self.log_dir = Path(log_dir)
        self.label = label  # the command whose progress the lines tell: "kubesvc up", "kubesvc join"
        self.policy = policy
        self.echo = echo or (lambda text: (sys.stderr.write(text), sys.stderr.flush()))
        self.env = dict(env if env is not None else os.environ)
        self.clock = clock
        self.components: dict[str, Component] = {}
        self.stopping = False
        self._relays: list[asyncio.Task] = []  # log copies and exit waiters: they end with their process
        self._watchers: list[asyncio.Task] = []  # one per component: restarts

    # -- start

    async def start(self, name: str, argv: Sequence[str], *, ready_timeout: float = 60.0) -> str:
        """Run ``argv`` as component ``name`` and wait for its first stdout line (returned); from
        then on it is restarted whenever it dies. Raises ``ComponentFailed``."""
        component = Component(name, list(argv))
        self.components[name] = component
        self.say(f"starting {name}")
        began = self.clock()
        await self._spawn(component)
        try:
            line = await asyncio.wait_for(asyncio.shield(component.ready), ready_timeout)
        except TimeoutError:
            raise ComponentFailed(f"{name} did not become ready within {ready_timeout:g}s{self._quote(component)}") from None
        self.say(f"{name} ready ({self.clock() - began:.1f}s)")
        self._watchers.append(asyncio.create_task(self._watch(component)))
        return line

    def say(self, what: str) -> None:
        """A progress line of ``up`` (or ``join``) on stderr (stdout carries only the announcement
        tools read)."""
        self._echo(f"{self.label}: {what}\n")

    async def _spawn(self, component: Component) -> None:
        self.log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        component.ready = asyncio.get_running_loop().create_future()
        component.process = await kprocess.spawn(component.argv, env=self.env, cwd=os.getcwd(), die_with_parent=True)
        component.started_at = self.clock()
        # 0600 as every log kubesvc writes (they may quote requests); closed by _not_ready_on_exit
        log_fd = os.open(self.log_dir / f"{component.name}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        log_file = open(log_fd, "ab", buffering=0)  # noqa: SIM115
        relays = [asyncio.create_task(self._relay(component, component.process.stdout, log_file, announces=True)),
                  asyncio.create_task(self._relay(component, component.process.stderr, log_file, announces=False))]
        waiter = asyncio.create_task(self._not_ready_on_exit(component, relays, log_file))
        self._relays += [*relays, waiter]

    async def _not_ready_on_exit(self, component: Component, relays: list[asyncio.Task], log_file) -> None:
        """Once the process has exited and its output is copied: close its log, and fail its
        readiness if it never announced itself."""
        await component.process.wait()
        await asyncio.gather(*relays, return_exceptions=True)
        log_file.close()
        if not component.ready.done():
            component.ready.set_exception(ComponentFailed(
                f"{component.name} exited with {describe_exit(component.process.returncode)} before it was ready{self._quote(component)}"))
            component.ready.exception()  # retrieved here: nobody waits for a restarted component's readiness

    async def _relay(self, component: Component, stream: asyncio.StreamReader, log_file, *, announces: bool) -> None:
        """Copy ``stream`` line by line to the log file and (prefixed) to ``up``'s stderr; the
        first stdout line is the component's readiness."""
        prefix = f"{component.name}: ".encode()
        while line := await stream.readline():
            if announces and not component.ready.done():
                component.ready.set_result(line.decode(errors="replace").strip())
            component.last_lines.append(line.decode(errors="replace").rstrip())
            # The pipe is drained whatever happens to the copies: a component whose output is
            # no longer read blocks on its next write once the pipe's 64 KiB are full (for the
            # apiserver, its event loop and so the whole cluster). A full disk or a closed
            # stderr (``kubesvc up 2>&1 | head``) loses the copy, not the component.
            with contextlib.suppress(OSError):
                log_file.write(line)
            self._echo((prefix + line).decode(errors="replace"))

    def _echo(self, text: str) -> None:
        if self.echo is not None:
            try:
                self.echo(text)
            except OSError as err:
                log.warning("stopped copying component output to stderr: %s", err)
                self.echo = None

    @staticmethod
    def _quote(component: Component) -> str:
        return "".join(f"\n  {line}" for line in component.last_lines)

    # -- crashes

    async def _watch(self, component: Component) -> None:
        """Restart ``component`` with back-off each time it dies, until ``stop``."""
        while True:
            returncode = await component.process.wait()
            if self.stopping:
                return
            ran_for = self.clock() - component.started_at
            component.exits.append(returncode)
            component.delay = restart_delay(component.delay, ran_for, self.policy)
            component.restarts += 1
            log.warning("%s (pid %d) exited with %s after %.1fs; restarting in %gs (restart %d)", component.name, component.process.pid,
                        describe_exit(returncode), ran_for, component.delay, component.restarts)
            await asyncio.sleep(component.delay)
            if self.stopping:
                return
            try:
                await self._spawn(component)
            except OSError as err:  # could not even start: wait out the next delay and try again
                log.warning("%s: cannot restart: %s", component.name, err)
                component.started_at = self.clock()
                continue
            log.warning("%s restarted (pid %d)", component.name, component.process.pid)

    # -- stop

    async def stop(self, names: Sequence[str], grace: float) -> dict[str, int | None]:
        """SIGTERM the named components' process groups together, SIGKILL what is left after
        ``grace`` seconds; their exit codes (None: never ran)."""
        self.stopping = True
        running = [self.components[name] for name in names if name in self.components and self.components[name].process is not None]
        if running:
            self.say(f"stopping {', '.join(c.name for c in running)}")
        began = self.clock()
        for component in running:
            if component.process.returncode is None:
                kprocess.kill_group(component.process.pid, signal.SIGTERM)

        async def ended(component: Component) -> int:
            try:
                return await asyncio.wait_for(asyncio.shield(component.process.wait()), grace)
            except TimeoutError:
                log.warning("%s did not stop within %gs of SIGTERM: killing it", component.name, grace)
                kprocess.kill_group(component.process.pid, signal.SIGKILL)
                return await component.process.wait()

        codes = await asyncio.gather(*(ended(c) for c in running))
        if running:
            self.say(f"stopped {', '.join(c.name for c in running)} ({self.clock() - began:.1f}s)")
        return dict(zip([c.name for c in running], codes))

    async def close(self) -> None:
        """Kill whatever still runs and wait for the log relays to drain."""
        self.stopping = True
        for component in self.components.values():
            if component.process is not None and component.process.returncode is None:
                kprocess.kill_group(component.process.pid, signal.SIGKILL)
        await cancel_and_wait(self._watchers)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*self._relays, return_exceptions=True), 10)
