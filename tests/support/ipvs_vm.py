"""Running tests/kernel/vm/ (IPVS mode) inside the throw-away VM of scripts/vm-ipvs.sh, in the
background, so that its minutes of software emulation overlap the rest of the suite.

    python -m tests.support.ipvs_vm start RUN_DIR   # detached; returns at once
    python -m tests.support.ipvs_vm stop RUN_DIR    # ends a run still going (the suite is over)

scripts/test.sh starts a run before pytest and names its directory in ``KUBESVC_IPVS_VM_RUN``;
tests/kernel/test_proxy_ipvs_vm.py then waits for that run's result instead of booting a VM of
its own (which it does when run alone). A run directory holds ``output.txt`` (everything the VM
printed), ``junit.xml`` (the tests' report, written by pytest in the VM through the shared out
directory), ``exit`` (vm-ipvs.sh's exit code, written last), ``pid`` and ``netns``.

The tests' apiserver and controller-manager run here on the host, natively, not in the VM
(where their start-up and every request cost emulated CPU): ``start`` makes a network namespace
of the run's own holding only a tap device, and runs in it (``supervise``) the two processes,
the apiserver listening there on every address (``127.0.0.1`` for its kubeconfigs, and the
tap's ``HOST_IP``), and the VM with its ``eth0`` on that tap (vm-ipvs.sh's ``VM_TAP``). The
namespace has no other link and no route: the VM reaches the apiserver and nothing else, and
nothing leaves the machine. In the guest, tests/kernel/vm/conftest.py relays its loopback's
apiserver port to ``HOST_IP`` (``APISERVER_ENV`` names the server's files in the run directory).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.apiserver import RunningAPIServer, running_kernel_control_plane
from tests.support.netns import REPO_ROOT, Netns, netns_pids, remove_netns

VM_SCRIPT = REPO_ROOT / "scripts" / "vm-ipvs.sh"
VM_TESTS = "tests/kernel/vm"
RUN_ENV = "KUBESVC_IPVS_VM_RUN"
APISERVER_ENV = "KUBESVC_VM_APISERVER"  # in the guest: the host apiserver's description (a JSON file)
TAP = "vmtap0"  # the VM's link in the run's namespace
HOST_IP, GUEST_IP = "10.250.0.1", "10.250.0.2"  # its two ends (/30)
VM_BUDGET = 1500  # seconds the VM may take (vm-ipvs.sh's own timeout: exit 124 past it)
STOP_GRACE = 10  # seconds a stopped run's processes get to end before they are killed
VM_NICENESS = -5  # scheduled ahead of the host's tests (root may lower niceness)
# Python starts 15-25 times slower in the VM; the harness's waits stretch by this much
# (tests/support/slowdown.py), the checks stay the same.
SLOWDOWN = "8"


# Plugins the VM's tests do not use, whose start-up is emulated too: hypothesis's pytest plugin
# imports all of hypothesis (2.4 of the 4.1 CPU seconds a collection of tests/kernel/vm takes on
# the host, so about a minute in the VM), pytest-benchmark runs git five times, one process.
GUEST_PYTEST_PLUGINS_OFF = ("-p", "no:hypothesispytest", "-p", "no:benchmark", "-p", "no:xdist", "-p", "no:xdist.looponfail")

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


def pytest_argv(run_dir: Path) -> list[str]:
    """The guest's command: pytest over tests/kernel/vm, its JUnit report into ``run_dir``."""
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *GUEST_PYTEST_PLUGINS_OFF,
            f"--junitxml={run_dir / 'junit.xml'}", "-o", f"timeout={VM_BUDGET}", VM_TESTS]


def start(run_dir: Path) -> None:
    """The run's namespace with the VM's tap, and ``supervise`` in it, detached (its own
    session), writing into ``run_dir``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in ("exit", "junit.xml", "output.txt", "netns"):
        (run_dir / name).unlink(missing_ok=True)
    ns = Netns.create("ipvsvm")
    try:
        (run_dir / "netns").write_text(ns.name)
        ns.ip("tuntap", "add", "dev", TAP, "mode", "tap")
        ns.ip_batch(f"addr add {HOST_IP}/30 dev {TAP}", f"link set {TAP} up")
        # The emulated CPU is one host thread that needs most of a core for the whole run; the
        # host's own tests (two workers and their servers) would otherwise take its share and
        # push it past its budget. Ahead of them in the scheduler, it gets most of a core.
        process = subprocess.Popen(["nice", "-n", str(VM_NICENESS), *ns.argv(sys.executable, "-m", "tests.support.ipvs_vm", "supervise",
                                                                             str(run_dir))],
                                   cwd=REPO_ROOT, start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
    except BaseException:
        remove_netns(ns.name)
        raise
    (run_dir / "pid").write_text(str(process.pid))


def supervise(run_dir: Path) -> int:
    """In the run's namespace (``start``): the control plane, then the VM running the tests with
    its link on the namespace's tap; the VM's exit code into ``exit``, written last."""
    code = 255
    try:
        with open(run_dir / "output.txt", "wb") as output:
            try:
                # every address of this namespace (loopback, the tap); kubeconfigs name 127.0.0.1
                with running_kernel_control_plane(run_dir / "control-plane", "--bind-address=0.0.0.0", "--advertise-address=127.0.0.1") as server:
                    described = run_dir / "apiserver.json"
                    described.write_text(json.dumps({"url": server.url, "kubeconfig": str(server.kubeconfig),
                                                     "data_dir": str(server.data_dir)}))
                    env = {**vm_env(run_dir), "VM_TAP": TAP, "VM_GUEST_IP": f"{GUEST_IP}/30", APISERVER_ENV: str(described)}
                    code = subprocess.run([str(VM_SCRIPT), "run", *pytest_argv(run_dir)], cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL,
                                          stdout=output, stderr=subprocess.STDOUT).returncode
            except Exception as exc:  # noqa: BLE001 - the run's result says why
                output.write(f"ipvs_vm: {type(exc).__name__}: {exc}\n".encode())
    finally:
        (run_dir / "exit.tmp").write_text(f"{code}\n")
        (run_dir / "exit.tmp").rename(run_dir / "exit")
    return code


def guest_apiserver(described: Path) -> RunningAPIServer:
    """In the guest: the host's apiserver as the harness knows a server (its URL, kubeconfig
    and credentials, in the shared run directory); no process of the guest's."""
    info = json.loads(described.read_text())
    data_dir = Path(info["data_dir"])
    return RunningAPIServer(None, info["url"], Path(info["kubeconfig"]), data_dir, data_dir / "kubectl-cache", None)


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
    """End the run's process group if it is still going (vm-ipvs.sh stops qemu on SIGTERM, the
    control plane takes it as a stop) and remove its namespace."""
    pid_file = run_dir / "pid"
    if pid_file.exists() and not (run_dir / "exit").exists():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(pid_file.read_text()), signal.SIGTERM)
    netns_file = run_dir / "netns"
    if netns_file.exists():
        name = netns_file.read_text().strip()
        deadline = time.monotonic() + STOP_GRACE  # vm-ipvs.sh's own clean-up, before the leftovers are killed
        while netns_pids(name) and time.monotonic() < deadline:
            time.sleep(0.2)
        remove_netns(name)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop", "supervise"):
        print("usage: python -m tests.support.ipvs_vm start|stop|supervise RUN_DIR", file=sys.stderr)
        return 2
    if argv[0] == "supervise":
        return supervise(Path(argv[1]))
    (start if argv[0] == "start" else stop)(Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
