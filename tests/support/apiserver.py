"""A real ``kubesvc apiserver`` in a subprocess on 127.0.0.1, and a real kubectl against it.

Tests drive the server exactly as a user does: HTTPS, the generated kubeconfig, the machine's
kubectl binary (with its own discovery cache dir, so no state leaks between servers).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from kubesvc.serving import pki
from tests.support.netns import signal_and_wait
from tests.support.slowdown import scaled

_READY = re.compile(r"listening on (https://\S+); kubeconfig: (\S+)")


@dataclass
class RunningAPIServer:
    process: subprocess.Popen
    url: str
    kubeconfig: Path
    data_dir: Path
    cache_dir: Path
    log: object = None

    @property
    def ca_file(self) -> Path:
        return self.data_dir / "pki" / "ca.crt"

    @property
    def admin_cert(self) -> tuple[str, str]:
        """The admin kubeconfig's client certificate and key as files (``system:admin`` in
        ``system:masters``), as requests' ``cert=``: the apiserver has no admin bearer token."""
        return str(self.data_dir / "pki" / "admin.crt"), str(self.data_dir / "pki" / "admin.key")

    def tls_context(self, *, admin: bool = True) -> ssl.SSLContext:
        """A client TLS context trusting the cluster CA, presenting the admin's certificate
        unless ``admin`` is False (aiohttp, urllib, raw sockets)."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if admin:
            context.load_cert_chain(*self.admin_cert)
        return context

    def session(self, *, admin: bool = True) -> requests.Session:
        """A requests session trusting the cluster CA (not REQUESTS_CA_BUNDLE), as the admin
        (client certificate) unless ``admin`` is False, then anonymous."""
        session = requests.Session()
        session.trust_env = False
        session.verify = str(self.ca_file)
        if admin:
            session.cert = self.admin_cert
        return session

    @property
    def ca(self) -> pki.ClusterCA:
        """The cluster CA in the server's data dir (to issue a node's certificates, as an admin would)."""
        return pki.cluster_ca(self.data_dir)

    def component_kubeconfig(self, component: str) -> Path:
        """The kubeconfig the apiserver wrote for ``controller-manager``, ``scheduler`` or ``proxy``."""
        return pki.kubeconfig_path(self.data_dir, component)

    def node_kubeconfig(self, node_name: str) -> Path:
        """A kubeconfig for node ``node_name``'s agent (``system:node:<name>``)."""
        return pki.write_node_kubeconfig(self.data_dir, self.url, node_name)

    def agent_tls_flags(self, node_name: str, node_ips: list[str]) -> list[str]:
        """``kubesvc agent`` flags for a serving certificate from the cluster CA and client
        certificates verified against it, as ``kubesvc up`` gives its agent."""
        serving = self.ca.node_serving(node_name, node_ips)
        return [f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}", f"--client-ca-file={self.ca_file}"]

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60, env: dict | None = None,
                kubeconfig: Path | None = None) -> subprocess.CompletedProcess:
        """kubectl as the admin, or as whoever ``kubeconfig`` holds the credentials of."""
        cmd = ["kubectl", f"--kubeconfig={kubeconfig or self.kubeconfig}", f"--cache-dir={self.cache_dir}", *args]
        result = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return result

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdout, self.log):
            if stream is not None:
                stream.close()


def start_apiserver(data_dir: Path, *extra: str, port: int = 0, timeout: float = 30) -> RunningAPIServer:
    """``kubesvc apiserver`` on a free port. (``kubesvc up`` programs the network as a node and
    only ever runs inside a namespace of its own: tests/support/up.py.) No controller-manager
    makes the ``default`` ServiceAccounts here, so the ServiceAccount admission plugin is off
    unless ``extra`` names admission plugins itself."""
    data_dir.mkdir(parents=True, exist_ok=True)
    if not any(flag.startswith(("--enable-admission-plugins", "--disable-admission-plugins")) for flag in extra):
        extra = ("--disable-admission-plugins=ServiceAccount", *extra)
    cmd = [sys.executable, "-m", "kubesvc", "apiserver", f"--data-dir={data_dir}", f"--secure-port={port}", *extra]
    log = open(data_dir / "apiserver.log", "ab")
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    deadline = time.monotonic() + scaled(timeout)
    assert process.stdout is not None
    line = ""
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        match = _READY.search(line)
        if match:
            cache_dir = data_dir / "kubectl-cache"
            return RunningAPIServer(process, match.group(1), Path(match.group(2)), data_dir, cache_dir, log)
    process.kill()
    process.wait()
    process.stdout.close()
    log.close()
    raise RuntimeError(f"apiserver did not start: {line!r}; log: {(data_dir / 'apiserver.log').read_text()[-3000:]}")


@contextlib.contextmanager
def running_apiserver(data_dir: Path, *extra: str, **options):
    """``start_apiserver`` for the block, stopped after it."""
    server = start_apiserver(data_dir, *extra, **options)
    try:
        yield server
    finally:
        server.stop()


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that nothing listens on (as of now): all are
    held open until all are chosen, so the kernel cannot hand out one twice."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def free_port() -> int:
    return free_ports(1)[0]


@dataclass
class RunningProcess:
    """A kubesvc component started as a user would, with its log in a file."""

    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        return signal_and_wait(self.process, sig, timeout)


def start_controller_manager(server: RunningAPIServer, log_path: Path, *extra: str, kubeconfig: Path | None = None,
                             use_service_account_credentials: bool = True) -> RunningProcess:
    """``kubesvc controller-manager`` against ``server``, as a cluster runs it: with its own
    kubeconfig (``system:kube-controller-manager``, or ``kubeconfig``), each controller as its
    kube-system ServiceAccount (``--use-service-account-credentials``) and the pod-scheduler as
    ``system:kube-scheduler``; stop() it (SIGTERM) or kill it (SIGKILL)."""
    cmd = [sys.executable, "-m", "kubesvc", "controller-manager", f"--kubeconfig={kubeconfig or server.component_kubeconfig('controller-manager')}",
           f"--scheduler-kubeconfig={server.component_kubeconfig('scheduler')}",
           f"--use-service-account-credentials={str(use_service_account_credentials).lower()}", "--v=2", *extra]
    with open(log_path, "ab") as log:
        process = subprocess.Popen(cmd, stdout=log, stderr=log)
    return RunningProcess(process, log_path)


# What the kernel tests' control plane runs beside the apiserver: the EndpointSlice controller
# only, no leader election, no serving port.
KERNEL_CONTROLLER_MANAGER_FLAGS = ("--leader-elect=false", "--secure-port=0", "--controllers=endpointslice-controller")


@contextlib.contextmanager
def running_kernel_control_plane(log_dir: Path, *apiserver_flags: str):
    """The apiserver and the EndpointSlice controller the kernel tests work against (on this
    host's loopback for tests/kernel, in the IPVS VM run's namespace for tests/kernel/vm);
    stopped at the end."""
    with running_apiserver(log_dir / "apiserver", *apiserver_flags) as server:
        manager = start_controller_manager(server, log_dir / "controller-manager.log", *KERNEL_CONTROLLER_MANAGER_FLAGS)
        try:
            yield server
        finally:
            manager.stop()
