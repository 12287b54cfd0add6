"""What kube-proxy sets up on the host before its first sync, and what it does with the settings
it reads but cannot honour (upstream ``cmd/kube-proxy/app/server.go``, ``server_linux.go`` and
``conntrack.go``).

**Conntrack** (``setupConntrack``), from ``KubeProxyConfiguration.conntrack``:

- ``nf_conntrack_max`` = ``max(maxPerCore × CPUs, min)`` when ``maxPerCore`` > 0
  (``getConntrackMax``; 0 leaves the kernel's limit alone). Raising it raises the hash table
  too: ``hashsize`` (a module parameter) goes to ``max / 4`` when it is smaller.
- ``nf_conntrack_tcp_timeout_established`` / ``_close_wait`` (``tcpEstablishedTimeout``,
  ``tcpCloseWaitTimeout``), ``nf_conntrack_udp_timeout`` / ``_stream`` (``udpTimeout``,
  ``udpStreamTimeout``), each in whole seconds when > 0; ``nf_conntrack_tcp_be_liberal`` = 1
  when ``tcpBeLiberal``.
- A sysctl is written only when its value differs (``setIntSysCtl`` reads it first).

Upstream fails the start on any of these errors except a read-only ``/sys`` (a Warning Event
``readOnlySysFS`` on the Node, then it goes on). kubesvc runs proxies inside network namespaces,
where the kernel makes ``nf_conntrack_max`` read-only (it is global: 0444 outside the initial
namespace) and refuses ``hashsize``; kind, in the same position, sets ``maxPerCore: 0``. So
here a permission failure (``EACCES``, ``EPERM``, ``EROFS``, ``EOPNOTSUPP``) or a missing key
(``ENOENT``: ``nf_conntrack`` not loaded) is a logged warning; any other failure fails the
start as upstream's does.

**oomScoreAdj** (``Run``: ``oom.ApplyOOMScoreAdj(0, …)``, -999 by default): applied to the
``kubesvc proxy`` process; a failure is logged, not fatal, as upstream's. Inside ``kubesvc up``
the proxy shares its process with the apiserver and the agent, so it is left alone there.

**clientConnection**: ``qps``/``burst`` become the client's token bucket
(``client.flowcontrol``). ``contentType`` is what upstream encodes requests in (protobuf by
default); this client speaks JSON only, which every apiserver accepts, so protobuf is sent as
JSON (noted at start) and any other type is a warning.

**bindAddressHardFail** (``serveHealthz``/``serveMetrics``) is applied by ``ProxyServer``: with
it, a healthz or metrics server that cannot bind ends the proxy (after a Warning Event on the
Node); without it the failure is logged and the bind retried every 5 s.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from kubesvc.kernel import params
from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.sysctl import read_sysctl, write_sysctl
from kubesvc.proxy.config import ConntrackSettings, ProxySettings

log = logging.getLogger("kubesvc.proxy")

NF_CONNTRACK_MAX = "net/netfilter/nf_conntrack_max"
TOLERATED = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.EOPNOTSUPP, errno.ENOENT})
READ_ONLY_SYSFS_REASON = "readOnlySysFS"
READ_ONLY_SYSFS_MESSAGE = ("CRI error: /sys is read-only: cannot modify conntrack limits, problems may arise later "
                           "(If running Docker, see docker issue #24000)")
RETRY_BIND_EVERY = 5.0  # serveHealthz/serveMetrics: wait.Until(fn, 5*time.Second)
JSON = "application/json"
PROTOBUF = "application/vnd.kubernetes.protobuf"


def conntrack_sysctls(conntrack: ConntrackSettings, cpus: int) -> dict[str, int]:
    """The conntrack sysctls to set, in upstream's order (``nf_conntrack_max`` first)."""
    wanted: dict[str, int] = {}
    if (limit := conntrack.max_entries(cpus)) > 0:
        wanted[NF_CONNTRACK_MAX] = limit
    for name, seconds in (("nf_conntrack_tcp_timeout_established", conntrack.tcp_established_timeout),
                          ("nf_conntrack_tcp_timeout_close_wait", conntrack.tcp_close_wait_timeout)):
        if seconds > 0:
            wanted[f"net/netfilter/{name}"] = int(seconds)
    if conntrack.tcp_be_liberal:
        wanted["net/netfilter/nf_conntrack_tcp_be_liberal"] = 1
    for name, seconds in (("nf_conntrack_udp_timeout", conntrack.udp_timeout),
                          ("nf_conntrack_udp_timeout_stream", conntrack.udp_stream_timeout)):
        if seconds > 0:
            wanted[f"net/netfilter/{name}"] = int(seconds)
    return wanted


def hashsize_for(conntrack_max: int, current: int) -> int | None:
    """The ``hashsize`` to write after raising ``nf_conntrack_max``: a quarter of it, unless the
    table is that big already (None)."""
    return None if current >= conntrack_max // 4 else conntrack_max // 4


@dataclass
class ConntrackSetup:
    """What ``setup_conntrack`` did: the sysctls it wrote, the warnings it logged, and whether
    ``/sys`` was read-only (upstream's ``readOnlySysFS`` Event)."""

    written: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    read_only_sysfs: bool = False


def _tolerated(err: CommandFailed) -> bool:
    return err.returncode in TOLERATED


def setup_conntrack(conntrack: ConntrackSettings, cpus: int | None = None, *,
                    read: Callable[[str], str] = read_sysctl, write: Callable[[str, int], None] = write_sysctl,
                    hashsize: Callable[[], int] = params.conntrack_hashsize,
                    set_hashsize: Callable[[int], None] = params.set_conntrack_hashsize) -> ConntrackSetup:
    """Apply the conntrack settings (see the module docstring). Raises the kernel's
    ``CommandFailed`` for a failure upstream would stop on and this proxy does not tolerate."""
    cpus = cpus if cpus is not None else len(os.sched_getaffinity(0))
    done = ConntrackSetup()

    def warn(text: str) -> None:
        log.warning("%s", text)
        done.warnings.append(text)

    for key, value in conntrack_sysctls(conntrack, cpus).items():
        try:
            current = read(key)
        except CommandFailed:
            current = None  # as upstream's GetSysctl error: try the write, which says why
        if current is not None and current.strip() == str(value):
            continue
        try:
            write(key, value)
        except CommandFailed as err:
            if not _tolerated(err):
                raise
            warn(f"cannot set conntrack limits: {err} (left at {current}); kube-proxy would stop here")
            continue
        log.info("Set sysctl %s to %d", key, value)
        done.written[key] = value
        if key == NF_CONNTRACK_MAX:
            _raise_hashsize(value, hashsize, set_hashsize, done, warn)
    return done


def _raise_hashsize(conntrack_max: int, hashsize, set_hashsize, done: ConntrackSetup, warn) -> None:
    try:
        buckets = hashsize_for(conntrack_max, hashsize())
        if buckets is None:
            return
        log.info("Setting conntrack hashsize to %d", buckets)
        set_hashsize(buckets)
    except CommandFailed as err:
        if err.returncode == errno.EROFS:
            done.read_only_sysfs = True
            warn(READ_ONLY_SYSFS_MESSAGE)
        elif _tolerated(err):
            warn(f"cannot set the conntrack hashsize: {err}")
        else:
            raise


def apply_oom_score_adj(value: int | None, set_adj: Callable[[int], None] = params.set_oom_score_adj) -> bool:
    """Set our own ``oom_score_adj``; a failure is logged (upstream: ``Failed to apply OOMScore``)."""
    if value is None:
        return False
    try:
        set_adj(value)
    except CommandFailed as err:
        log.warning("Failed to apply OOMScore %d: %s", value, err)
        return False
    return True


def client_connection_notes(settings: ProxySettings) -> list[tuple[int, str]]:
    """(log level, message) for the clientConnection settings this client cannot honour."""
    notes = []
    content_type = settings.client_content_type
    if content_type == PROTOBUF:
        notes.append((logging.INFO, f"clientConnection.contentType {content_type}: requests are sent as {JSON} "
                                    "(this client has no protobuf encoder; every apiserver accepts JSON)"))
    elif content_type not in ("", JSON):
        notes.append((logging.WARNING, f"clientConnection.contentType {content_type!r} is not supported: requests are sent as {JSON}"))
    accept = settings.client_accept_content_types
    if accept and JSON not in [part.strip() for part in accept.split(",")]:
        notes.append((logging.WARNING, f"clientConnection.acceptContentTypes {accept!r} does not include {JSON}: "
                                       f"this client asks for {JSON} only"))
    return notes
