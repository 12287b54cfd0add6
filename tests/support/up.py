"""``kubesvc up`` inside a throw-away network namespace, driven with the real ``kubectl``.

The process is started with ``nsenter --net`` (not ``ip netns exec``, whose private mount
namespace would hide the Pod namespaces the agent creates from the host's ``ip netns list``),
on a free port, with a data directory of its own; ``kubectl`` runs inside the namespace too, so
ClusterIPs, Pod IPs and the apiserver's loopback are all reachable. ``close()`` stops it with
SIGINT (the user's Ctrl-C), falls back to ``kubesvc down`` and SIGKILL, and deletes the
namespace: nothing is left, pass or fail.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.netns import Netns, signal_and_wait

STARTED = re.compile(r"kubesvc is up at https://127\.0\.0\.1:(\d+); kubeconfig: (\S+)")


class UpProcess:
    def __init__(self, data_dir: Path, *extra: str, role: str = "up"):
        self.data_dir = Path(data_dir)
        self.extra = extra
        self.ns = Netns.create(role)
        self.ns.ip("link", "set", "lo", "up")
        self.process: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"
        self.kubeconfig = ""
        self.port = 0

    def nsenter(self, *argv: str) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.ns.name}", *argv]

    def start(self, timeout: float = 30.0) -> "UpProcess":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        argv = self.nsenter(sys.executable, "-m", "kubesvc", "up", "--data-dir", str(self.data_dir), "--secure-port", "0", *self.extra)
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            match = STARTED.search(line)
            if match:
                self.port, self.kubeconfig = int(match.group(1)), match.group(2)
                return self
        raise AssertionError(f"kubesvc up did not start:\n{self.log()}")

    def log(self, tail: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        result = subprocess.run(self.nsenter("kubectl", "--kubeconfig", self.kubeconfig, *args), input=input, capture_output=True,
                                text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stdout}{result.stderr}")
        return result

    def get(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def run(self, *argv: str, check: bool = False, timeout: float = 30) -> subprocess.CompletedProcess:
        """A command inside the namespace (curl, python3 -c, ...)."""
        return subprocess.run(self.nsenter(*argv), capture_output=True, text=True, timeout=timeout, check=check)

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30.0) -> int:
        """Send ``sig`` (Ctrl-C by default) and wait for the exit code."""
        assert self.process is not None
        self.process.send_signal(sig)
        return self.process.wait(timeout=timeout)

    def close(self) -> None:
        signal_and_wait(self.process, signal.SIGINT, 30)
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        subprocess.run(self.nsenter(sys.executable, "-m", "kubesvc", "down", "--data-dir", str(self.data_dir)), capture_output=True,
                       timeout=60, env={**os.environ})
        self.ns.close()


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.2, message: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; that value, or AssertionError."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message}; last: {last!r}")
