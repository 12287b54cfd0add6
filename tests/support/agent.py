"""``kubesvc agent`` run inside a node namespace, and HTTP traffic sent from inside a namespace.

The agent creates a network namespace per Pod (``ip netns add <prefix><pod uid>``), which is a
bind mount under /run/netns: it must share the host's *mount* namespace, so it is started with
``nsenter --net=/run/netns/<node>`` (never ``ip netns exec``, whose private mount namespace would
hide the Pod namespaces from everyone else, and from every leftover check)::

    nsenter --net=/run/netns/<node> python -m kubesvc agent --kubeconfig K --node-name node1
        --pod-cidr 10.244.1.0/24 --node-ip 192.168.77.11 --zone zone-1 --data-dir D/node1 --port 0
        --netns-prefix ks-pod-<hex>- --v=2

Each agent gets its own Pod namespace prefix, so what it leaves behind can be found (and is
removed by :meth:`AgentProcess.cleanup`, pass or fail) without touching anyone else's.

HTTP: :func:`http_request` is a plain-socket HTTP/1.0 client (one connection per request, so
each is a new conntrack flow and a new load-balancing decision); :func:`requests_in` runs a
batch of them on one thread that has entered a namespace, :class:`RequestLoop` keeps sending
in the background and records every outcome with its time.
"""

from __future__ import annotations

import collections
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.netns import REPO_ROOT, LoggedProcess, Node, call_in_netns, netns_names, remove_netns, signal_and_wait


def nsenter_argv(netns: str, *cmd: str) -> list[str]:
    """``cmd`` in network namespace ``netns`` only (the host's mount namespace kept)."""
    return ["nsenter", f"--net=/run/netns/{netns}", *map(str, cmd)]


def link_names(netns: str) -> set[str]:
    """The links in ``netns`` (``ip -o link``; ``veth0@if2`` -> ``veth0``)."""
    out = subprocess.run(["ip", "-n", netns, "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if line.strip()}


# ---------------------------------------------------------------------------------------------
# HTTP from inside a namespace


def http_request(host: str, port: int, path: str = "/", method: str = "GET", timeout: float = 2.0) -> tuple[int, str]:
    """One HTTP/1.0 request on a new connection: (status, body). Call it on a thread that is in
    the namespace to send from (:func:`requests_in`), or from the host's."""
    import socket

    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(f"{method} {path} HTTP/1.0\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n".encode())
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    raw = b"".join(chunks).decode(errors="replace")
    head, _, body = raw.partition("\r\n\r\n")
    parts = head.split("\r\n", 1)[0].split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise OSError(f"not an HTTP response from {host}:{port}{path}: {raw[:200]!r}")
    return int(parts[1]), body


def outcome_of(host: str, port: int, path: str = "/", timeout: float = 2.0) -> str:
    """The body's first line for a 200 (the answering Pod's name at ``/``); a failure starts
    with ``!``: ``"! HTTP <code>"``, ``"! <ExceptionName>: <message>"``."""
    try:
        status, body = http_request(host, port, path, timeout=timeout)
    except OSError as exc:
        return f"! {type(exc).__name__}: {exc}"
    if status != 200:
        return f"! HTTP {status}"
    return body.strip().splitlines()[0] if body.strip() else "! HTTP 200 with an empty body"


def is_failure(outcome: str) -> bool:
    return outcome.startswith("!")


def in_netns(netns: str, fn, *args):
    """``fn(*args)`` on a thread inside ``netns`` (every socket it opens lives there)."""
    return call_in_netns(netns, fn, *args)


def requests_in(netns: str, host: str, port: int, count: int, path: str = "/", timeout: float = 2.0) -> list[str]:
    """``count`` requests one after another from inside ``netns``: their outcomes in order."""
    return in_netns(netns, lambda: [outcome_of(host, port, path, timeout) for _ in range(count)])


def request_in(netns: str, host: str, port: int, path: str = "/", method: str = "GET", timeout: float = 2.0) -> tuple[int, str]:
    return in_netns(netns, http_request, host, port, path, method, timeout)


def tally(outcomes: list[str]) -> collections.Counter:
    return collections.Counter(outcomes)


class RequestLoop:
    """Requests to ``host:port`` from inside ``netns``, one every ``interval`` seconds, on a
    background thread, until :meth:`stop`; ``records`` holds ``(monotonic time, outcome)``."""

    def __init__(self, netns: str, host: str, port: int, interval: float = 0.02, timeout: float = 2.0):
        self.netns, self.host, self.port, self.interval, self.timeout = netns, host, port, interval, timeout
        self.records: list[tuple[float, str]] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"requests-{netns}", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            outcome = outcome_of(self.host, self.port, timeout=self.timeout)
            self.records.append((time.monotonic(), outcome))
            self._stop.wait(self.interval)

    def _run(self) -> None:
        try:
            call_in_netns(self.netns, self._loop)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def __enter__(self) -> "RequestLoop":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> list[tuple[float, str]]:
        self._stop.set()
        self._thread.join(timeout=30)
        if self.error is not None:
            raise self.error
        return self.records

    def between(self, start: float, end: float = float("inf")) -> list[str]:
        return [o for t, o in self.records if start <= t < end]

    def failures(self) -> list[tuple[float, str]]:
        return [(t, o) for t, o in self.records if is_failure(o)]


# ---------------------------------------------------------------------------------------------
# the agent


@dataclass(eq=False)
class AgentProcess(LoggedProcess):
    """``kubesvc agent`` for ``node`` (see the module docstring); ``stop()`` sends SIGTERM and
    waits, ``cleanup()`` removes whatever it left (kill, leftover Pod namespaces), pass or fail."""

    node: Node
    kubeconfig: Path
    node_name: str
    data_dir: Path
    log_path: Path
    zone: str = ""
    extra: list[str] = field(default_factory=list)
    netns_prefix: str = field(default_factory=lambda: f"ks-pod-{secrets.token_hex(3)}-")
    process: subprocess.Popen | None = None

    def command(self) -> list[str]:
        args = [sys.executable, "-m", "kubesvc", "agent", f"--kubeconfig={self.kubeconfig}", f"--node-name={self.node_name}",
                f"--pod-cidr={self.node.pod_cidr}", f"--node-ip={self.node.lan_ip}", f"--data-dir={self.data_dir}", "--port=0",
                f"--netns-prefix={self.netns_prefix}", "--v=2", *self.extra]
        if self.zone:
            args.append(f"--zone={self.zone}")
        return nsenter_argv(self.node.name, *args)

    def start(self) -> "AgentProcess":
        assert not self.alive, "already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== {' '.join(self.command())}\n".encode())
            log.flush()
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
        return self

    def pod_namespaces(self) -> list[str]:
        """The Pod namespaces this agent has (by its prefix), as ``ip netns list`` shows them."""
        return sorted(n for n in netns_names() if n.startswith(self.netns_prefix))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int | None:
        """Send ``sig`` and wait for the exit (SIGKILL after ``timeout``); the exit code."""
        return signal_and_wait(self.process, sig, timeout)

    def cleanup(self) -> None:
        if self.alive:
            self.stop(signal.SIGKILL)
        for name in self.pod_namespaces():
            remove_netns(name)
