"""Server machines for the etcd tests: each a node namespace of ``tests.support.netns.Cluster``
(one LAN bridge in a namespace of its own; nothing leaves them) with a data directory, its
member run by ``tests.cluster.member_driver`` inside the namespace, and the real ``etcdctl``
run there to look at the cluster from outside kubesvc's code.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import netns
from tests.support.slowdown import scaled

START_TIMEOUT = 90.0


@dataclass(eq=False)
class Machine:
    node: netns.Node
    data_dir: Path
    process: subprocess.Popen | None = None
    name: str = ""
    member_id: str = ""
    logs: list[Path] = field(default_factory=list)

    @property
    def ip(self) -> str:
        return self.node.lan_ip

    @property
    def client_url(self) -> str:
        return f"https://{self.ip}:2379"

    def start(self, *join: str, data_dir: Path | None = None, expect_ready: bool = True, timeout: float = START_TIMEOUT) -> str:
        """Run the member (``join``: client URLs to join through); the ``ready`` line, or (not
        ``expect_ready``) the driver's stderr once it exited."""
        data_dir = data_dir or self.data_dir
        argv = self.node.ns.python("tests.cluster.member_driver", "--data-dir", data_dir, "--address", self.ip,
                                   "--hostname", f"machine{self.node.index}", *[a for url in join for a in ("--join", url)])
        log = data_dir.parent / f"{data_dir.name}.driver.log"
        self.logs.append(log)
        with open(log, "ab") as err:
            self.process = self.node.ns.popen(*argv, stdout=subprocess.PIPE, stderr=err)
        line = _first_line(self.process, scaled(timeout))
        if not expect_ready:
            self.process.wait(timeout=scaled(30))
            return log.read_text()
        if not line.startswith("ready "):
            raise AssertionError(f"member on {self.ip} did not start: {line!r}\n{log.read_text()[-3000:]}\n{self.etcd_log()}")
        _, self.name, self.member_id = line.split()
        return line

    def kill9(self) -> None:
        """``kill -9`` of everything the machine runs (the driver and its etcd)."""
        for pid in self.node.ns.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.process is not None:
            self.process.wait(timeout=10)
        netns.wait_until(lambda: not self.node.ns.pids(), 10, "the machine's processes to die")

    def stop(self) -> None:
        netns.signal_and_wait(self.process, signal.SIGTERM, 20)

    def etcd_log(self, data_dir: Path | None = None) -> str:
        path = (data_dir or self.data_dir) / "logs" / "etcd.log"
        return path.read_text()[-3000:] if path.exists() else ""

    def etcdctl(self, *args: str, endpoint: str | None = None, certs_of: Path | None = None, check: bool = True,
                timeout: float = 30) -> subprocess.CompletedProcess:
        pki = (certs_of or self.data_dir) / "pki" / "etcd"
        return self.node.ns.run("env", "ETCDCTL_API=3", "etcdctl", "--endpoints", endpoint or self.client_url,
                                "--cacert", pki / "ca.crt", "--cert", pki / "client.crt", "--key", pki / "client.key",
                                "--command-timeout", f"{scaled(15):g}s", *args, check=check, timeout=scaled(timeout))

    def members(self) -> list[dict]:
        """``etcdctl member list`` as etcd reports it (IDs in hex)."""
        members = json.loads(self.etcdctl("member", "list", "-w", "json").stdout).get("members", [])
        return [{"id": f"{m['ID']:x}", "name": m.get("name", ""), "peer": m.get("peerURLs", []), "learner": bool(m.get("isLearner"))}
                for m in members]

    def get(self, key: str, *, serializable: bool = False) -> str | None:
        """The value of ``key`` on this machine's member (``serializable``: from its own copy)."""
        args = ["get", key, "--print-value-only"] + (["--consistency=s"] if serializable else [])
        out = self.etcdctl(*args).stdout.strip()
        return out or None


def _first_line(process: subprocess.Popen, timeout: float) -> str:
    """The first stdout line of ``process`` ("" if it exits or stays silent ``timeout`` seconds)."""
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if selector.select(timeout=0.2):
                return process.stdout.readline().decode().strip()
            if process.poll() is not None:
                return ""
        return ""
    finally:
        selector.close()


def share_etcd_ca(source: Machine, target_dir: Path) -> None:
    """Give ``target_dir`` the etcd CA of ``source`` (what ``up --server`` gets from the
    server's bootstrap bundle)."""
    pki = target_dir / "pki" / "etcd"
    pki.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name in ("ca.crt", "ca.key"):
        shutil.copy2(source.data_dir / "pki" / "etcd" / name, pki / name)
