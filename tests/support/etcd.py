"""A real etcd (Debian's ``etcd-server``) for tests: one member on 127.0.0.1, free ports,
a fresh data directory, killed and removed afterwards.

Starting one costs about a tenth of a second, so a test module or session shares one, and
tests that need a store of their own use a key prefix of their own (the etcd backend's
``prefix``); only tests that look at etcd-wide state (compaction, revisions from 1) start
their own. The data directory is on tmpfs when there is one: etcd fsyncs its WAL on every
commit, which on the CI machine's disk costs milliseconds that tests do not need to pay (the
benchmarks use a real disk). etcd missing is a failure, never a skip: the etcd backend's
contract runs in CI (``scripts/install.sh`` installs it).

With ``tls=True`` the client port serves HTTPS with a certificate from a CA made by
kubesvc's own PKI code (``kubesvc.serving.pki``) and requires client certificates, as a
kubeadm or k3s etcd does; ``client_tls`` are the files the apiserver's ``--etcd-cafile``,
``--etcd-certfile``, ``--etcd-keyfile`` name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kubesvc.serving import pki
from tests.support.slowdown import scaled

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


@dataclass(frozen=True)
class ClientTLS:
    ca_file: str
    cert_file: str
    key_file: str


@dataclass
class RunningEtcd:
    process: subprocess.Popen
    data_dir: Path
    client_url: str
    peer_url: str
    tls: ClientTLS | None = None
    command: list[str] = field(default_factory=list, repr=False)
    _prefixes: int = field(default=0, repr=False)

    @property
    def endpoint(self) -> str:
        return self.client_url

    def new_prefix(self) -> str:
        """A key prefix no other user of this etcd has: a store of its own for one test."""
        self._prefixes += 1
        return f"/t{os.getpid()}-{self._prefixes}"

    def flags(self) -> list[str]:
        """The apiserver flags that point it at this etcd."""
        flags = ["--storage-backend=etcd3", f"--etcd-servers={self.client_url}"]
        if self.tls:
            flags += [f"--etcd-cafile={self.tls.ca_file}", f"--etcd-certfile={self.tls.cert_file}",
                      f"--etcd-keyfile={self.tls.key_file}"]
        return flags

    def log(self) -> str:
        return (self.data_dir / "etcd.log").read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL, keeping the data directory (restart() brings the member back on it)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def pause(self) -> None:
        """SIGSTOP: connections are still accepted (by the kernel) and never answered, as with a
        member cut off by a partition; resume() with SIGCONT."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def restart(self, timeout: float = 20) -> None:
        """The same member again, on its data and ports (after kill())."""
        self.kill()
        self.process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
        _wait_healthy(self, scaled(timeout))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)  # a test etcd has nothing worth a clean shutdown
            self.process.wait()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def _free_ports(count: int) -> list[int]:
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def _issue_tls(directory: Path) -> tuple[list[str], ClientTLS]:
    ca = pki.ClusterCA(directory / "pki")
    server = ca.ensure("etcd-server", pki.CertSpec("etcd-server", server=True, dns_names=("localhost",),
                                                      ip_addresses=("127.0.0.1",)))
    client = ca.ensure("etcd-client", pki.CertSpec("kube-apiserver-etcd-client"))
    flags = [f"--cert-file={server.cert}", f"--key-file={server.key}", f"--trusted-ca-file={ca.cert_path}",
             "--client-cert-auth=true"]
    return flags, ClientTLS(str(ca.cert_path), str(client.cert), str(client.key))


def start_etcd(*, tls: bool = False, tmpfs: bool = True, timeout: float = 20, fast_election: bool = True) -> RunningEtcd:
    """A fresh single-member etcd, answering once it has elected itself leader; its data on
    tmpfs unless ``tmpfs`` is False (benchmarks: the fsyncs a real disk costs). Its raft ticks
    every 10 ms so that it leads at once, unless ``fast_election`` is False: etcd's own 100 ms
    heartbeat and 1 s election timeout, as kubesvc's managed members run (benchmarks: the
    idle ticks cost etcd ~2 % of a core at 10 ms)."""
    if not os.access(ETCD, os.X_OK):
        pytest.fail(f"etcd is not installed ({ETCD}): scripts/install.sh installs Debian's etcd-server", pytrace=False)
    base = "/dev/shm" if tmpfs and os.access("/dev/shm", os.W_OK) else None
    data_dir = Path(tempfile.mkdtemp(prefix="kubesvc-etcd-", dir=base))
    client_port, peer_port = _free_ports(2)
    scheme = "https" if tls else "http"
    client_url, peer_url = f"{scheme}://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    tls_flags, client_tls = _issue_tls(data_dir) if tls else ([], None)
    cmd = [
        ETCD, "--name=test", f"--data-dir={data_dir / 'member'}",
        f"--listen-client-urls={client_url}", f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=test={peer_url}", "--initial-cluster-state=new",
        *(["--heartbeat-interval=10", "--election-timeout=100"] if fast_election else []),  # one member: lead at once
        "--logger=zap", "--log-level=warn", f"--log-outputs={data_dir / 'etcd.log'}",
        *tls_flags,
    ]
    process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    etcd = RunningEtcd(process, data_dir, client_url, peer_url, client_tls, cmd)
    try:
        _wait_healthy(etcd, scaled(timeout))
    except BaseException:
        log = etcd.log()[-3000:] if (data_dir / "etcd.log").exists() else ""
        etcd.stop()
        raise RuntimeError(f"etcd did not become healthy at {client_url}; log:\n{log}") from None
    return etcd


def _wait_healthy(etcd: RunningEtcd, timeout: float) -> None:
    """Until ``/health`` says so, as ``etcdctl endpoint health`` asks it (a quorum read)."""
    import ssl
    import urllib.request

    context = None
    if etcd.tls:
        context = ssl.create_default_context(cafile=etcd.tls.ca_file)
        context.load_cert_chain(etcd.tls.cert_file, etcd.tls.key_file)
    deadline = time.monotonic() + timeout
    while True:
        if etcd.process.poll() is not None:
            raise RuntimeError(f"etcd exited with {etcd.process.returncode}")
        try:
            with urllib.request.urlopen(f"{etcd.client_url}/health", timeout=1, context=context) as answer:
                if b'"health":"true"' in answer.read():
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError
        time.sleep(0.02)


@contextlib.contextmanager
def running_etcd(**options):
    etcd = start_etcd(**options)
    try:
        yield etcd
    finally:
        etcd.stop()
