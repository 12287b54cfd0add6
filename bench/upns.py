"""``kubesvc up`` in a throwaway network namespace, for the benches that measure the whole chain
(``bench/e2e.py``, ``bench/scheduler.py``).

A fresh namespace ``<prefix>-<hex>`` with only ``lo`` up; ``kubesvc up`` started inside it as a
user does (``nsenter --net``, so the Pod namespaces the agent makes are ordinary host
namespaces), its stderr in ``<workdir>/up.log``, ready when it prints its "kubesvc is up" line.
Leaving the ``with`` block stops it as a user does, with SIGINT (Ctrl-C), and checks that
nothing is left in the namespace (links other than ``lo``, routes, nftables tables); if
something is, or ``up`` did not exit 0 within a minute, its log's tail is printed and
``kubesvc down`` cleans up. The namespace and the work directory are removed in every case.

    with UpInNamespace("ks-bench-e2e", label="") as up:
        subprocess.run(up.nsenter(sys.executable, "bench/e2e.py", "--inside", "--kubeconfig", up.kubeconfig))
    clean = up.clean
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UP_LINE = re.compile(r"kubesvc is up at https://127\.0\.0\.1:(\d+); kubeconfig: (\S+)")


def child_env(src: Path) -> dict[str, str]:
    """The environment of a child that must import ``src``'s kubesvc, installed or not."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))}


def nsenter(netns: str, *argv) -> list[str]:
    return ["nsenter", f"--net=/run/netns/{netns}", *map(str, argv)]


def leftovers(netns: str) -> list[str]:
    """What a stopped ``kubesvc up`` left in ``netns``: links besides lo, routes, nftables tables."""
    found = []
    links = subprocess.run(["ip", "-n", netns, "-o", "link", "show"], capture_output=True, text=True).stdout.splitlines()
    if [line for line in links if ": lo:" not in line]:
        found.append(f"links: {[line.split(':')[1].strip() for line in links]}")
    routes = subprocess.run(["ip", "-n", netns, "route"], capture_output=True, text=True).stdout.strip()
    if routes:
        found.append(f"routes: {routes!r}")
    tables = subprocess.run(nsenter(netns, "nft", "list", "tables"), capture_output=True, text=True).stdout.strip()
    if tables:
        found.append(f"nft tables: {tables!r}")
    return found


COMPONENTS = ("apiserver", "controller-manager", "agent", "proxy", "up")


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                todo += [int(c) for c in Path(f"/proc/{current}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return found


def component_of(pid: int) -> str:
    """``kubesvc <component>``'s component, else "Pods and helpers" (containers, exec probes...)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    for i, arg in enumerate(argv[:-1]):
        if arg == b"kubesvc" and argv[i + 1].decode() in COMPONENTS:
            return argv[i + 1].decode()
    return "Pods and helpers"


def cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) so far of each component of the ``up`` whose pid is ``pid``,
    of the processes they started that still run ("Pods and helpers"), and of those that have
    exited ("<component>'s children": ``cutime``/``cstime``, e.g. the proxy's ``nft``)."""
    tick = os.sysconf("SC_CLK_TCK")
    totals: dict[str, float] = {}
    for member in process_tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = component_of(member)
        utime, stime, cutime, cstime = (int(v) / tick for v in fields[11:15])
        totals[name] = totals.get(name, 0.0) + utime + stime
        if name != "Pods and helpers" and cutime + cstime:
            totals[f"{name}'s children"] = totals.get(f"{name}'s children", 0.0) + cutime + cstime
    return totals


def cpu_report(before: dict[str, float], after: dict[str, float], wall: float) -> str:
    """One line: each component's CPU seconds between two ``cpu_seconds``, and the sum against wall time."""
    spent = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in after}
    parts = [f"{name} {seconds:.1f}" for name, seconds in sorted(spent.items(), key=lambda kv: -kv[1]) if seconds >= 0.05]
    total = sum(spent.values())
    return f"CPU seconds: {', '.join(parts)}; {total:.1f} s in all over {wall:.1f} s wall ({total / wall:.2f} cores)"


class UpFailed(Exception):
    """``kubesvc up`` did not announce itself."""


class UpInNamespace:
    """``kubesvc up`` (``src``'s) in a namespace of its own, from ``with`` to the end of it."""

    def __init__(self, prefix: str, *, src: Path = ROOT / "src", label: str = "", start_timeout: float = 90.0):
        self.netns = f"{prefix}-{secrets.token_hex(3)}"
        self.src = src
        self.label = f"{label}: " if label else ""
        self.start_timeout = start_timeout
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
        self.log_path = self.workdir / "up.log"
        self.env = child_env(src)
        self.process: subprocess.Popen | None = None
        self.kubeconfig = ""
        self.started_in = 0.0
        self.clean = False  # after the block: up exited 0 on SIGINT and left nothing

    def nsenter(self, *argv) -> list[str]:
        return nsenter(self.netns, *argv)

    def __enter__(self) -> "UpInNamespace":
        subprocess.run(["ip", "netns", "add", self.netns], check=True)
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self) -> None:
        subprocess.run(["ip", "-n", self.netns, "link", "set", "lo", "up"], check=True)
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.nsenter(sys.executable, "-m", "kubesvc", "up", "--data-dir", self.workdir / "data",
                                                         "--secure-port", "0"),
                                            stdout=subprocess.PIPE, stderr=log, cwd=self.workdir, env=self.env)
        line = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self.process.stdout, selectors.EVENT_READ)
            while time.monotonic() - started < self.start_timeout and self.process.poll() is None:
                if sel.select(timeout=0.2):
                    line = self.process.stdout.readline()
                    break
        match = UP_LINE.search(line.decode(errors="replace"))
        if not match:
            raise UpFailed(f"{self.label}kubesvc up did not start: {line!r}\n{self.log_tail()}")
        self.kubeconfig = match.group(2)
        self.started_in = time.monotonic() - started

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def __exit__(self, *exc) -> None:
        try:
            if self.process is not None:
                self.clean = self._stop()
        finally:
            subprocess.run(["ip", "netns", "del", self.netns], check=False)
            shutil.rmtree(self.workdir, ignore_errors=True)

    def restarts(self) -> list[str]:
        """The supervisor's lines about components that exited and were restarted."""
        return [line.strip() for line in self.log_tail(1 << 20).splitlines() if "; restarting in " in line]

    def _stop(self) -> bool:
        """Ctrl-C, then the leftovers check (``kubesvc down`` if anything is left); clean or not."""
        assert self.process is not None
        stopping = time.monotonic()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            code = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
            print(f"{self.label}kubesvc up did not stop within 60 s of SIGINT: killed", file=sys.stderr)
        if self.process.stdout is not None:
            self.process.stdout.close()
        left = leftovers(self.netns)
        for line in self.restarts():
            print(f"{self.label}a component died during the run (its figures include the restart): {line}", flush=True)
        print(f"{self.label}Ctrl-C: kubesvc up exited {code} after {time.monotonic() - stopping:.2f} s; "
              f"{'nothing left in ' + self.netns if not left else 'LEFT: ' + '; '.join(left)}", flush=True)
        if code == 0 and not left:
            return True
        print(self.log_tail(), file=sys.stderr)
        with contextlib.suppress(Exception):
            subprocess.run(self.nsenter(sys.executable, "-m", "kubesvc", "down", "--data-dir", self.workdir / "data"), cwd=self.workdir,
                           env=self.env, timeout=120, check=False)
        return False
