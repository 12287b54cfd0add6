"""One etcd member per server machine, as k3s's embedded etcd and kubeadm's stacked etcd run it:
the decisions (flags, the initial cluster, the join plan, promotion, certificates), no I/O but
the certificate files.

**A member** (etcd 3.4.23, Debian's ``etcd-server``) is named ``<short hostname>-<8 hex>`` once
and for good (k3s's name, kept in ``<data-dir>/etcd/member.json`` with the address and ports it
was made with); its data directory is ``<data-dir>/etcd/data``. It serves clients on
``https://<address>:2379`` and ``https://127.0.0.1:2379``, its peers on
``https://<address>:2380``, metrics on ``http://127.0.0.1:2381`` (k3s's listeners), with
``--client-cert-auth`` and ``--peer-client-cert-auth``: nothing talks to it without a
certificate from the etcd CA. Timing flags are etcd's defaults (heartbeat 100 ms, election
1 s: k3s uses 500 ms / 5 s for slow links; the defaults keep a fail-over within a couple of
seconds on a LAN), ``--snapshot-count 10000`` and a 5 s watch progress notification
(kubeadm's). No auto-compaction: the apiservers compact (``--etcd-compaction-interval``).

**Certificates** come from a CA of etcd's own, ``<data-dir>/pki/etcd/ca.crt`` (kubeadm's
``etcd/ca``), not the cluster CA that signs every node's and component's client
certificate: with ``--client-cert-auth`` etcd admits any certificate its CA signed, and it
has no authorization of its own, so a node agent's certificate must not open the whole
store. The CA signs ``server`` (serverAuth + clientAuth, kubeadm's etcd server certificate),
``peer`` (serverAuth + clientAuth: a member both dials and is dialled by its peers) and
``client`` (clientAuth, the apiserver's ``--etcd-certfile``). The server and peer
certificates name ``localhost``, the hostname, ``127.0.0.1`` and the member's address, every
name a peer or client dials. Files are 0600 in 0700 directories (``serving.pki``).

**Creating** (``--cluster-init``): ``--initial-cluster <name>=https://<address>:2380
--initial-cluster-state new``.

**Joining** learner first (etcd-ha.md §5.4, k3s's ``join``): on the existing cluster,
``MemberList``; our peer URL already there unnamed (added, never started: a join that died
half-way) is reused; a started learner with our peer URL or our name (a join of this machine
that died after etcd started, its data gone since) is stale and removed first, as kubeadm
removes the learner a failed join left before adding it again: a learner counts toward no
quorum, so removing it costs the cluster nothing; our peer URL on a voting member (a machine
that was a member and lost its data) is refused, with the ``etcdctl member remove`` that
clears it; another machine's learner still catching up is refused too (etcd 3.4 allows one learner, and k3s hits "too many learner members" when two
servers join at once). Otherwise ``MemberAdd(isLearner=true)``, then start etcd with
``--initial-cluster`` listing every member by name (ours included) and
``--initial-cluster-state existing``, and ``MemberPromote`` until the learner is in sync
(etcd refuses before the learner's log reaches 90 % of the leader's). A learner does not
count toward quorum, so a join that never starts never costs the cluster its quorum (a voter
added but not started does, §5.5). A join that fails after the add removes the learner and
its data directory: nothing is left half-made. A data directory that already holds a WAL
is a restart: etcd ignores every ``--initial-*`` flag and rejoins as the member it was,
catching up from its peers.
"""

from __future__ import annotations

import ipaddress
import json
import re
import secrets
import shutil
import socket
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from kubesvc.serving import pki

ETCD_DIR = "etcd"  # <data-dir>/etcd: member.json and data/
DATA_SUBDIR = "data"  # etcd's own --data-dir
MEMBER_FILE = "member.json"
PKI_SUBDIR = "etcd"  # <data-dir>/pki/etcd
ETCD_CA_NAME = "etcd-ca"
CLIENT_PORT = 2379
PEER_PORT = 2380
METRICS_PORT = 2381
CLUSTER_TOKEN = "kubesvc"  # --initial-cluster-token: two clusters made from one snapshot still differ by member IDs
SNAPSHOT_COUNT = 10000  # kubeadm's
PROGRESS_NOTIFY_INTERVAL = "5s"  # kubeadm's --experimental-watch-progress-notify-interval

# etcd's answers to MemberPromote (etcdserver/api/v3rpc/rpctypes)
LEARNER_NOT_READY = "can only promote a learner member which is in sync with leader"
MEMBER_NOT_LEARNER = "can only promote a learner member"
MEMBER_NOT_FOUND = "member not found"
UNHEALTHY_CLUSTER = "unhealthy cluster"  # strict reconfig check: a voter connected for less than 5 s


# ---- the member ------------------------------------------------------------------------------


def url(address: str, port: int) -> str:
    """``https://<address>:<port>``, an IPv6 address in brackets."""
    host = f"[{address}]" if ":" in address else address
    return f"https://{host}:{port}"


def member_name(hostname: str, suffix: str | None = None) -> str:
    """k3s's member name: the short hostname, a dash, 8 hex digits (unique even when two
    machines share a hostname, as cloned VMs do)."""
    short = re.sub(r"[^a-z0-9-]", "-", hostname.split(".")[0].lower()).strip("-") or "etcd"
    return f"{short}-{suffix or secrets.token_hex(4)}"


@dataclass(frozen=True)
class MemberSpec:
    """What this machine's member is: fixed when it is first made (``member.json``)."""

    name: str
    address: str  # the IP its peers and the apiservers of other machines dial
    client_port: int = CLIENT_PORT
    peer_port: int = PEER_PORT
    metrics_port: int = METRICS_PORT

    @property
    def peer_url(self) -> str:
        return url(self.address, self.peer_port)

    @property
    def client_url(self) -> str:
        return url(self.address, self.client_port)

    @property
    def local_client_url(self) -> str:
        return url("127.0.0.1", self.client_port)


def etcd_dir(data_dir: Path) -> Path:
    return Path(data_dir) / ETCD_DIR


def member_data_dir(data_dir: Path) -> Path:
    return etcd_dir(data_dir) / DATA_SUBDIR


def has_wal(data_dir: Path) -> bool:
    """Whether etcd's data directory already holds a member (then every --initial-* flag is
    ignored: it restarts as what it was)."""
    wal = member_data_dir(data_dir) / "member" / "wal"
    return wal.is_dir() and any(wal.glob("*.wal"))


def load_spec(data_dir: Path) -> MemberSpec | None:
    try:
        return MemberSpec(**json.loads((etcd_dir(data_dir) / MEMBER_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def save_spec(data_dir: Path, spec: MemberSpec) -> None:
    pki.private_dir(etcd_dir(data_dir))
    pki.write_private(etcd_dir(data_dir) / MEMBER_FILE, json.dumps(asdict(spec), indent=2).encode())


def member_spec(data_dir: Path, address: str, hostname: str | None = None, **ports) -> MemberSpec:
    """The member recorded under ``data_dir``, or a new one at ``address`` (not yet saved).
    A recorded member keeps its name; its address follows ``address`` only while it has no
    data (a started member's peer URL is part of the cluster's membership)."""
    recorded = load_spec(data_dir)
    if recorded is not None and (has_wal(data_dir) or recorded.address == address):
        return recorded
    name = recorded.name if recorded is not None else member_name(hostname or socket.gethostname())
    return MemberSpec(name, address, **ports)


# ---- flags -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemberTLS:
    """The files a member serves with and a client presents (``EtcdPKI.member_tls``)."""

    ca: Path
    server_cert: Path
    server_key: Path
    peer_cert: Path
    peer_key: Path
    client_cert: Path
    client_key: Path


def initial_cluster(members: Iterable[tuple[str, Sequence[str]]]) -> str:
    """``--initial-cluster``: ``name=peerURL`` for every peer URL of every member (etcdctl's
    ``member add`` output prints the same)."""
    return ",".join(f"{name}={peer}" for name, peers in members for peer in peers)


def etcd_argv(spec: MemberSpec, data_dir: Path, tls: MemberTLS, cluster: str, state: str, binary: str = "etcd") -> list[str]:
    """The ``etcd`` command line of this member (``state``: ``new`` or ``existing``)."""
    clients = [spec.client_url] + ([spec.local_client_url] if spec.address != "127.0.0.1" else [])
    return [
        binary, "--name", spec.name, "--data-dir", str(member_data_dir(data_dir)),
        "--listen-client-urls", ",".join(clients), "--advertise-client-urls", spec.client_url,
        "--listen-peer-urls", spec.peer_url, "--initial-advertise-peer-urls", spec.peer_url,
        "--listen-metrics-urls", f"http://127.0.0.1:{spec.metrics_port}",
        "--initial-cluster", cluster, "--initial-cluster-state", state, "--initial-cluster-token", CLUSTER_TOKEN,
        "--cert-file", str(tls.server_cert), "--key-file", str(tls.server_key), "--trusted-ca-file", str(tls.ca),
        "--client-cert-auth",
        "--peer-cert-file", str(tls.peer_cert), "--peer-key-file", str(tls.peer_key), "--peer-trusted-ca-file", str(tls.ca),
        "--peer-client-cert-auth",
        "--snapshot-count", str(SNAPSHOT_COUNT), "--experimental-watch-progress-notify-interval", PROGRESS_NOTIFY_INTERVAL,
        # zap to stdout: the supervisor reads a component's first stdout line as "started"
        # and keeps every line in <data-dir>/logs/etcd.log
        "--logger", "zap", "--log-outputs", "stdout",
    ]


# ---- membership --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """One entry of ``MemberList`` (``name`` is empty until the member has started once)."""

    id: int
    name: str
    peer_urls: tuple[str, ...]
    client_urls: tuple[str, ...] = ()
    is_learner: bool = False

    @property
    def hex_id(self) -> str:
        return f"{self.id:x}"


class JoinRefused(Exception):
    """The cluster's membership does not let this machine join as it is; the message says what
    to do."""


@dataclass(frozen=True)
class JoinPlan:
    """What joining takes: ``reuse`` the member already added for us (else add a learner),
    then start etcd with ``cluster`` (``--initial-cluster``, once our member is in it)."""

    reuse: Member | None
    others: tuple[Member, ...] = field(default=())
    stale: tuple[Member, ...] = field(default=())  # learners of an earlier join of this machine: removed first

    def cluster(self, spec: MemberSpec, ours: Member) -> str:
        """``--initial-cluster`` once ``ours`` is a member: every other member by name, ours by ``spec.name``."""
        return initial_cluster([(m.name, m.peer_urls) for m in self.others if m.id != ours.id] + [(spec.name, ours.peer_urls)])


def plan_join(members: Sequence[Member], spec: MemberSpec) -> JoinPlan:
    """The join of ``spec`` into a cluster whose ``MemberList`` is ``members`` (see the module
    docstring); raises :class:`JoinRefused`."""
    mine = [m for m in members if spec.peer_url in m.peer_urls or (m.name and m.name == spec.name)]
    others = tuple(m for m in members if m not in mine)
    stale = tuple(m for m in mine if m.name and m.is_learner)
    for member in mine:
        if member.name and not member.is_learner:
            raise JoinRefused(
                f"etcd member {member.name} (ID {member.hex_id}) already has this machine's peer URL {spec.peer_url} but this machine "
                f"has no data for it: remove it from a running member (etcdctl member remove {member.hex_id}), then retry")
    pending = [m for m in others if m.is_learner or not m.name]
    if pending:
        who = pending[0].name or ",".join(pending[0].peer_urls)
        raise JoinRefused(f"etcd member {who} is still joining (etcd admits one learner at a time): wait until it is a voting member "
                          f"(or remove it: etcdctl member remove {pending[0].hex_id}), then retry")
    unstarted = [m for m in mine if not m.name]
    return JoinPlan(unstarted[0] if unstarted else None, others, stale)


def promote_outcome(error: str | None) -> str:
    """What a ``MemberPromote`` answer means: ``done`` (it is a voter now, or already was),
    ``wait`` (not in sync yet: ask again) or ``failed``."""
    if error is None:
        return "done"
    if LEARNER_NOT_READY in error:
        return "wait"
    return "done" if error.endswith(MEMBER_NOT_LEARNER) else "failed"


def add_outcome(error: str) -> str:
    """What a refused ``MemberAdd`` means: ``wait`` when etcd's strict reconfiguration check
    found a voter connected to the leader for less than its 5 s health interval (right after
    the previous machine's promotion: etcd says "unhealthy cluster"), or when it answers "member
    not found" (seen in CI right after a stale learner of this machine was removed, while that
    removal is still being applied; a MemberAdd names no member, so it cannot mean ours is
    gone), else ``failed``. A wait is retried until the join's deadline, then fails."""
    return "wait" if error.endswith(UNHEALTHY_CLUSTER) or error.endswith(MEMBER_NOT_FOUND) else "failed"


# ---- certificates ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DualUseSpec(pki.CertSpec):
    """A certificate for serverAuth and clientAuth both (an etcd peer dials and is dialled)."""

    def usage(self) -> x509.ExtendedKeyUsage:
        return x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH])


def member_cert_specs(addresses: Iterable[str], hostname: str) -> dict[str, pki.CertSpec]:
    """name -> what it must say: the member's ``server`` and ``peer`` certificates and the
    ``client`` certificate apiservers and kubesvc's commands present."""
    ips = tuple(dict.fromkeys(["127.0.0.1", *(str(ipaddress.ip_address(a)) for a in addresses)]))
    dns = tuple(dict.fromkeys(["localhost", hostname]))
    return {"server": DualUseSpec("etcd-server", dns_names=dns, ip_addresses=ips),
            "peer": DualUseSpec("etcd-peer", dns_names=dns, ip_addresses=ips),
            "client": pki.CertSpec("kube-apiserver-etcd-client")}


def etcd_pki_dir(data_dir: Path) -> Path:
    return Path(data_dir) / pki.PKI_DIR / PKI_SUBDIR


def etcd_ca(data_dir: Path, now: datetime | None = None) -> pki.ClusterCA:
    """The etcd CA under ``<data-dir>/pki/etcd`` (made once, named ``etcd-ca``), or the one a
    joining machine was given (the files are then already there)."""
    pki.private_dir(Path(data_dir) / pki.PKI_DIR)
    directory = pki.private_dir(etcd_pki_dir(data_dir))
    cert, key = directory / "ca.crt", directory / "ca.key"
    if not (cert.exists() and key.exists()):
        ca_cert, ca_key = pki.new_ca(now or datetime.now(timezone.utc), ETCD_CA_NAME)
        pki.write_private(key, ca_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
        pki.write_private(cert, ca_cert.public_bytes(serialization.Encoding.PEM))
    return pki.ClusterCA(directory, now)


def member_tls(data_dir: Path, addresses: Iterable[str], hostname: str | None = None) -> MemberTLS:
    """The member's and a client's certificates, issued (or renewed) from the etcd CA."""
    ca = etcd_ca(data_dir)
    pairs = {name: ca.ensure(name, spec) for name, spec in member_cert_specs(addresses, hostname or socket.gethostname()).items()}
    return MemberTLS(ca.cert_path, pairs["server"].cert, pairs["server"].key, pairs["peer"].cert, pairs["peer"].key,
                     pairs["client"].cert, pairs["client"].key)


def client_tls(data_dir: Path) -> tuple[Path, Path, Path]:
    """(CA, client certificate, client key) for talking to the members (an apiserver's
    ``--etcd-cafile/--etcd-certfile/--etcd-keyfile``); the client certificate issued if missing."""
    ca = etcd_ca(data_dir)
    pair = ca.ensure("client", member_cert_specs((), "localhost")["client"])
    return ca.cert_path, pair.cert, pair.key


def remove_tree(path: Path) -> None:
    """Delete ``path`` and what is under it (a join's half-made data directory)."""
    if path.exists():
        shutil.rmtree(path)


def env_without_etcd(env: dict[str, str]) -> dict[str, str]:
    """``env`` without ``ETCD_*`` variables: etcd reads every flag from ``ETCD_<FLAG>`` too, and a
    stray ``ETCD_INITIAL_CLUSTER`` from an earlier ``etcdctl member add`` would conflict."""
    return {k: v for k, v in env.items() if not k.startswith("ETCD_")}

