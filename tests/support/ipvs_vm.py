"""Running tests/kernel/vm/ (IPVS mode) inside the throw-away VM of scripts/vm-ipvs.sh, in the
background, so that its minutes of software emulation overlap the rest of the suite.

    python -m tests.support.ipvs_vm start RUN_DIR   # detached; returns at once
    python -m tests.support.ipvs_vm stop RUN_DIR    # ends a run still going (the suite is over)

scripts/test.sh starts a run before pytest and names its directory in ``KUBESVC_IPVS_VM_RUN``;
tests/kernel/test_proxy_ipvs_vm.py then waits for that run's result instead of booting a VM of
its own (which it does when run alone). A run directory holds ``output.txt`` (everything the VM
printed), ``junit.xml`` (the tests' report, written by pytest in the VM through the shared out
directory), ``exit`` (vm-ipvs.sh's exit code, written last) and ``pid``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.netns import REPO_ROOT

VM_SCRIPT = REPO_ROOT / "scripts" / "vm-ipvs.sh"
VM_TESTS = "tests/kernel/vm"
RUN_ENV = "KUBESVC_IPVS_VM_RUN"
VM_BUDGET = 1500  # seconds the VM may take (vm-ipvs.sh's own timeout: exit 124 past it)
VM_NICENESS = -5  # scheduled ahead of the host's tests (root may lower niceness)
# Python starts 15-25 times slower in the VM; the harness's waits stretch by this much
# (tests/support/slowdown.py), the checks stay the same.
SLOWDOWN = "8"


GUEST_TMPFS = ("/tmp/", "/run/", "/dev/shm/")  # fresh in the guest: host paths there must be shared


def vm_env(run_dir: Path) -> dict[str, str]:
    """The environment for vm-ipvs.sh: its settings, and what the guest's tests see. The
    repository and the interpreter are shared read-only when they live where the guest has a
    fresh tmpfs (a clone under /tmp)."""
    shared = [str(path) for path in (REPO_ROOT, Path(sys.prefix)) if str(path.resolve()).startswith(GUEST_TMPFS)]
    env = {**os.environ, "KUBESVC_IPVS_TESTS": "1", "KUBESVC_TEST_SLOWDOWN": SLOWDOWN, "VM_TIMEOUT": str(VM_BUDGET),
           "VM_OUT_DIR": str(run_dir)}
    if shared:
        env["VM_RO"] = " ".join([os.environ.get("VM_RO", ""), *shared]).strip()
    return env


def start(run_dir: Path) -> None:
    """vm-ipvs.sh running the VM tests, detached (its own session), writing into ``run_dir``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in ("exit", "junit.xml", "output.txt"):
        (run_dir / name).unlink(missing_ok=True)
    pytest_argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={run_dir / 'junit.xml'}",
                   "-o", f"timeout={VM_BUDGET}", VM_TESTS]
    script = '"$@" > "$RUN_DIR/output.txt" 2>&1; echo $? > "$RUN_DIR/exit.tmp"; mv "$RUN_DIR/exit.tmp" "$RUN_DIR/exit"'
    # The emulated CPU is one host thread that needs most of a core for the whole run; the host's
    # own tests (two workers and their servers) would otherwise take its share and push it past
    # its budget. Ahead of them in the scheduler, it gets most of a core.
    process = subprocess.Popen(["nice", "-n", str(VM_NICENESS), "bash", "-c", script, "vm-run", str(VM_SCRIPT), "run", *pytest_argv], cwd=REPO_ROOT,
                               env={**vm_env(run_dir), "RUN_DIR": str(run_dir)}, start_new_session=True,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (run_dir / "pid").write_text(str(process.pid))


def started(run_dir: Path) -> bool:
    return (run_dir / "pid").exists()


@dataclass
class RunResult:
    exit_code: int | None  # None: no result within the wait
    output: str
    junit: Path


def wait(run_dir: Path, timeout: float) -> RunResult:
    """The run's result once its ``exit`` file appears (or what there is after ``timeout``)."""
    deadline = time.monotonic() + timeout
    exit_file = run_dir / "exit"
    while not exit_file.exists() and time.monotonic() < deadline:
        time.sleep(1)
    output_file = run_dir / "output.txt"
    output = output_file.read_text(errors="replace") if output_file.exists() else ""
    code = int(exit_file.read_text()) if exit_file.exists() else None
    return RunResult(code, output, run_dir / "junit.xml")


def stop(run_dir: Path) -> None:
    """End the run's process group if it is still going (vm-ipvs.sh stops qemu on SIGTERM)."""
    pid_file = run_dir / "pid"
    if not pid_file.exists() or (run_dir / "exit").exists():
        return
    try:
        os.killpg(int(pid_file.read_text()), signal.SIGTERM)
    except ProcessLookupError:
        pass


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python -m tests.support.ipvs_vm start|stop RUN_DIR", file=sys.stderr)
        return 2
    (start if argv[0] == "start" else stop)(Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
