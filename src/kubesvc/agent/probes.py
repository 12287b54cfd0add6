"""Readiness, liveness and startup probes, as the kubelet runs them.

A container may declare three probes (``readinessProbe``, ``livenessProbe``, ``startupProbe``),
each one handler (``httpGet``, ``tcpSocket``, ``exec``, ``grpc``) plus timing: the first check
``initialDelaySeconds`` after the container started, then one every ``periodSeconds``, each
allowed ``timeoutSeconds``. What a check's outcome does is upstream
``pkg/kubelet/prober/worker.go``:

* a result is reported only after ``failureThreshold`` failures (or ``successThreshold``
  successes) *in a row*; until then the previous report stands;
* before any report a readiness probe says Failure (not ready), a liveness probe Success (alive)
  and a startup probe Unknown;
* readiness decides the container's ``ready`` (and so the Pod's endpoints); a reported liveness
  failure gets the container killed and restarted; a startup probe gates the other two until it
  succeeds and, if it fails, restarts the container as liveness does;
* after a liveness Failure, or any startup report, the worker goes *on hold* (no more checks)
  until a new container replaces this one; the run counter starts over;
* a check that could not be run at all (an unknown port name, say) is an *error*: it is
  reported as an event and thrown away, counting for nothing.

:class:`ProbeTracker` is that worker as a pure state machine. The checks themselves are
``pkg/probe/{http,tcp,exec}`` run from the node's network namespace, as the kubelet runs them
(``pod_ip`` is reachable from the node): ``httpGet`` succeeds on a status in [200, 400), follows
redirects to the same host and takes a redirect elsewhere as a success with a warning;
``tcpSocket`` succeeds when a connection opens; ``exec`` runs the command inside the Pod's
network namespace (``ip netns exec``) with the container's environment and succeeds on exit 0,
a timeout being a failure. A check's result (:class:`CheckResult`: success, warning, failure,
unknown) maps onto the worker's (:class:`ProbeResult`) as ``prober.probe`` maps it: a warning is
a success, unknown a failure. kubesvc has no gRPC health client: a ``grpc`` probe fails.
"""

from __future__ import annotations

import asyncio
import enum
import math
import os
import signal
import socket
import ssl
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import urljoin, urlsplit

import aiohttp

from kubesvc.agent.envvars import expand
from kubesvc.agent.runtime import DEFAULT_PATH, find_executable
from kubesvc.util.golang import quote as go_quote  # Go's %q to the letter
from kubesvc.kernel import process as kprocess
from kubesvc.kernel.host import process_root
from kubesvc.kernel.mounts import in_container
from kubesvc.util import golang
from kubesvc.util.ipnet import join_host_port

KUBE_VERSION = "1.32"
USER_AGENT = f"kube-probe/{KUBE_VERSION}"
MAX_HTTP_BODY_BYTES = 10 * 1024  # pkg/probe/http maxRespBodyLength
MAX_EXEC_OUTPUT_BYTES = 10 * 1024  # pkg/probe/exec maxReadLength
MAX_REDIRECTS = 10  # net/http's default, kept by the probe's redirect checker
MAX_PROBE_RETRIES = 3  # a check that errors is retried this often before the error counts
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


class ProbeResult(enum.Enum):
    """What a probe worker reports (upstream ``prober/results.Result``, with its strings)."""

    UNKNOWN = "UNKNOWN"
    SUCCESS = "Success"
    FAILURE = "Failure"



class CheckResult(enum.Enum):
    """The outcome of one check (upstream ``pkg/probe.Result``)."""

    SUCCESS = "success"
    WARNING = "warning"
    FAILURE = "failure"
    UNKNOWN = "unknown"


class CheckOutcome(NamedTuple):
    """One check: its result, its output (a body, a command's output, why it failed) and, when
    the check could not be run at all, the error (upstream's ``err``, which the worker discards)."""

    result: CheckResult
    output: str
    error: str | None = None


class ProbeError(Exception):
    """A probe that cannot be run as written (e.g. an unknown port name)."""


INITIAL_RESULTS = {"readiness": ProbeResult.FAILURE, "liveness": ProbeResult.SUCCESS, "startup": ProbeResult.UNKNOWN}


# ---- the spec ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class HTTPGetAction:
    port: int | str
    path: str = "/"
    host: str = ""
    scheme: str = "HTTP"
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class TCPSocketAction:
    port: int | str
    host: str = ""


@dataclass(frozen=True)
class ExecAction:
    command: tuple[str, ...]


@dataclass(frozen=True)
class GRPCAction:
    port: int
    service: str | None = None


@dataclass(frozen=True)
class ProbeSpec:
    """A ``v1.Probe`` with the API's defaults applied (``SetDefaults_Probe``, ``SetDefaults_HTTPGetAction``)."""

    exec_action: ExecAction | None = None
    http_get: HTTPGetAction | None = None
    tcp_socket: TCPSocketAction | None = None
    grpc: GRPCAction | None = None
    initial_delay_seconds: int = 0
    timeout_seconds: int = 1
    period_seconds: int = 10
    success_threshold: int = 1
    failure_threshold: int = 3
    termination_grace_period_seconds: int | None = None

    @classmethod
    def from_dict(cls, probe: Mapping) -> ProbeSpec:
        def defaulted(name: str, default: int) -> int:
            return probe.get(name) or default  # the API defaults 0 as well as absent

        exec_, http, tcp, grpc = (probe.get(key) for key in ("exec", "httpGet", "tcpSocket", "grpc"))
        return cls(
            exec_action=ExecAction(tuple(exec_.get("command") or ())) if exec_ is not None else None,
            http_get=HTTPGetAction(
                port=http.get("port", 0), path=http.get("path") or "/", host=http.get("host") or "",
                scheme=http.get("scheme") or "HTTP",
                headers=tuple((h.get("name", ""), h.get("value", "")) for h in http.get("httpHeaders") or ()),
            ) if http is not None else None,
            tcp_socket=TCPSocketAction(port=tcp.get("port", 0), host=tcp.get("host") or "") if tcp is not None else None,
            grpc=GRPCAction(port=grpc.get("port", 0), service=grpc.get("service")) if grpc is not None else None,
            initial_delay_seconds=probe.get("initialDelaySeconds") or 0,
            timeout_seconds=defaulted("timeoutSeconds", 1),
            period_seconds=defaulted("periodSeconds", 10),
            success_threshold=defaulted("successThreshold", 1),
            failure_threshold=defaulted("failureThreshold", 3),
            termination_grace_period_seconds=probe.get("terminationGracePeriodSeconds"),
        )


# ---- the worker (worker.go doProbe) ------------------------------------------------------------


class ProbeTracker:
    """One container's probe of one kind, as upstream's probe worker keeps it.

    Feed it each check's :class:`ProbeResult` (``observe``); ``result`` is what the worker
    reports. Call ``reset`` when a new container replaces the old one (a restart),
    ``container_not_running`` while it is not running, ``pod_deletion_requested`` when the Pod
    starts terminating. ``due`` says whether a check should run now.
    """

    def __init__(self, kind: str, spec: ProbeSpec):
        if kind not in INITIAL_RESULTS:
            raise ValueError(f"unknown probe kind {kind!r}")
        self.kind = kind
        self.spec = spec
        self.initial_result = INITIAL_RESULTS[kind]
        self.result = self.initial_result
        self.on_hold = False  # no checks until a new container
        self.stopped = False  # no checks ever again (the Pod is terminating)
        # Go's zero value of results.Result is Success; with a run of 0 it only matters as
        # "different from the first Failure", which then starts a run of 1 either way.
        self.last_result = ProbeResult.SUCCESS
        self.result_run = 0
        self.last_check_at: float | None = None

    def observe(self, result: ProbeResult, *, at: float | None = None) -> bool:
        """Count one check's result (taken at time ``at``, for ``due``); True when the reported
        result changed. Unknown (the check errored) and checks made while on hold count for
        nothing."""
        if at is not None:
            self.last_check_at = at
        if self.on_hold or self.stopped or result is ProbeResult.UNKNOWN:
            return False
        if result is self.last_result:
            self.result_run += 1
        else:
            self.last_result, self.result_run = result, 1
        threshold = self.spec.failure_threshold if result is ProbeResult.FAILURE else self.spec.success_threshold
        if self.result_run < threshold:
            return False  # below the threshold the reported result stands
        changed = self._report(result)
        if (self.kind == "liveness" and result is ProbeResult.FAILURE) or self.kind == "startup":
            # The container will be restarted (or has started): stop checking until a new one,
            # whose checks get the full threshold again.
            self.on_hold = True
            self.result_run = 0
        return changed

    def reset(self) -> bool:
        """A new container: the initial result again, checks resume. As upstream, the run of
        results is not cleared (a reported liveness failure or startup result already did)."""
        self.on_hold = False
        self.last_check_at = None
        return self._report(self.initial_result)

    def container_not_running(self) -> bool:
        """The container is waiting or terminated: the worker reports Failure (unless on hold)."""
        if self.on_hold or self.stopped:
            return False
        return self._report(ProbeResult.FAILURE)

    def pod_deletion_requested(self) -> bool:
        """Graceful shutdown: liveness and startup report Success and stop, so a terminating
        container is not restarted; readiness keeps checking (endpoints drain on it)."""
        if self.kind == "readiness" or self.stopped:
            return False
        self.stopped = True
        return self._report(ProbeResult.SUCCESS)

    def due(self, now: float, container_started_at: float, *, started: bool = True) -> bool:
        """Whether to check now: past ``initialDelaySeconds`` (whole seconds, as upstream
        truncates), a period after the last check, not on hold; a startup probe only until the
        container has ``started``, the others only after."""
        if self.on_hold or self.stopped:
            return False
        if int(now - container_started_at) < self.spec.initial_delay_seconds:
            return False
        if (self.kind == "startup") == started:
            return False
        return self.last_check_at is None or now - self.last_check_at >= self.spec.period_seconds

    def _report(self, result: ProbeResult) -> bool:
        changed = result is not self.result
        self.result = result
        return changed


def next_check_at(origin: float, period: float, last_started: float, now: float) -> float:
    """When the worker checks next: upstream's worker loops on a ``time.Ticker`` of
    ``periodSeconds`` started with it (ticks at ``origin + k * period``), not on a sleep after
    each check, so a check's own duration does not stretch the period. Go's ticker keeps at most
    one tick for a busy receiver and drops the rest: after a check that outlasted a tick the next
    one starts at once (``now``), then the cadence resumes on the grid."""
    if period <= 0:
        return now
    k = math.floor((last_started - origin) / period + 1e-9) + 1  # the first tick after this check began
    return max(origin + k * period, now)


# ---- from a check to the worker (prober.go probe) ---------------------------------------------


def worker_result(outcome: CheckOutcome) -> ProbeResult:
    """``prober.probe``'s mapping; Unknown stands for "errored, throw the result away"."""
    if outcome.error is not None:
        return ProbeResult.UNKNOWN
    if outcome.result in (CheckResult.SUCCESS, CheckResult.WARNING):
        return ProbeResult.SUCCESS
    return ProbeResult.FAILURE


def probe_event(kind: str, outcome: CheckOutcome) -> tuple[str, str] | None:
    """The Warning event the kubelet records for a check: (reason, message), or None."""
    name = kind.capitalize()
    if outcome.error is not None:
        return "Unhealthy", f"{name} probe errored and resulted in {outcome.result.value} state: {outcome.error}"
    if outcome.result is CheckResult.WARNING:
        return "ProbeWarning", f"{name} probe warning: {outcome.output}"
    if outcome.result is CheckResult.FAILURE:
        return "Unhealthy", f"{name} probe failed: {outcome.output}"
    return None


async def run_probe(spec: ProbeSpec, *, pod_ip: str, container: dict, env: Mapping[str, str],
                    netns: str | None, pid: int | None = None) -> tuple[ProbeResult, str]:
    """Run the probe once (an erroring check up to three times, as upstream) and return what to
    feed the tracker with the check's output, or its error when the result is Unknown."""
    outcome = await run_check(spec, pod_ip=pod_ip, container=container, env=env, netns=netns, pid=pid)
    return worker_result(outcome), outcome.error if outcome.error is not None else outcome.output


async def run_check(spec: ProbeSpec, *, pod_ip: str, container: dict, env: Mapping[str, str],
                    netns: str | None, pid: int | None = None) -> CheckOutcome:
    """``runProbeWithRetries`` around ``runProbe``: the check of the probe's handler. ``pid``:
    the container's process when it has a mount namespace of its own, which exec then enters."""
    outcome = CheckOutcome(CheckResult.UNKNOWN, "")
    for _ in range(MAX_PROBE_RETRIES):
        outcome = await _check_once(spec, pod_ip=pod_ip, container=container, env=env, netns=netns, pid=pid)
        if outcome.error is None:
            break
    return outcome


async def _check_once(spec: ProbeSpec, *, pod_ip: str, container: dict, env: Mapping[str, str],
                      netns: str | None, pid: int | None = None) -> CheckOutcome:
    timeout = float(spec.timeout_seconds)
    if spec.exec_action is not None:
        # Upstream expands $(VAR) in the command with the container's literal env values only
        # (ExpandContainerCommandOnlyStatic); the command itself runs with the full environment.
        static = {var.get("name", ""): var.get("value") or "" for var in container.get("env") or []}
        command = [expand(part, static) for part in spec.exec_action.command]
        return await probe_exec(command, env=env, netns=netns, timeout=timeout, cwd=container.get("workingDir"), pid=pid)
    if spec.http_get is not None:
        return await probe_http(spec.http_get, pod_ip=pod_ip, container=container, timeout=timeout)
    if spec.tcp_socket is not None:
        return await probe_tcp(spec.tcp_socket, pod_ip=pod_ip, container=container, timeout=timeout)
    if spec.grpc is not None:
        return CheckOutcome(CheckResult.FAILURE, f"gRPC probe on port {spec.grpc.port} unsupported: kubesvc has no gRPC "
                                                 "health client")
    return CheckOutcome(CheckResult.UNKNOWN, "", f"missing probe handler for container {container.get('name', '')}")


# ---- ports (pkg/probe/util.go) -----------------------------------------------------------------


def resolve_port(port: int | str, container: dict) -> int:
    """``ResolveContainerPort``: a number, or the ``containerPort`` of the container port so
    named, or (the last-ditch effort upstream keeps) a number written as a string."""
    if isinstance(port, bool) or not isinstance(port, (int, str)):
        raise ProbeError(f"intOrString had no kind: {port!r}")
    if isinstance(port, str):
        named = [p.get("containerPort", 0) for p in container.get("ports") or [] if p.get("name") == port]
        if named:
            port = named[0]
        else:
            try:
                port = golang.atoi(port)
            except ValueError as err:
                raise ProbeError(str(err)) from None
    if 0 < port < 65536:
        return port
    raise ProbeError(f"invalid port number: {port}")


# ---- httpGet (pkg/probe/http) ------------------------------------------------------------------


def format_url(scheme: str, host: str, port: int, path: str) -> str:
    """``formatURL``: the path (which may carry a query) on ``scheme://host:port``."""
    parts = urlsplit(path)
    url_path = parts.path
    if url_path and not url_path.startswith("/"):
        url_path = "/" + url_path  # Go's URL.String() roots a relative path under a host
    query = f"?{parts.query}" if parts.query or path.endswith("?") else ""
    return f"{scheme}://{join_host_port(host, port)}{url_path}{query}"


def canonical_header_key(name: str) -> str:
    """``textproto.CanonicalMIMEHeaderKey``: ``fOO-bAR`` -> ``Foo-Bar``; a name with characters
    that are not header-token characters is left as written."""
    if not name or not all(ch.isascii() and (ch.isalnum() or ch in "!#$%&'*+-.^_`|~") for ch in name):
        return name
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))


def request_headers(http_headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The headers of a probe request (``NewRequestForHTTPGetAction``): the probe's own, then
    ``User-Agent: kube-probe/<version>`` and ``Accept: */*`` unless given. A ``User-Agent`` or
    ``Accept`` given empty is not sent at all, as Go's client does not send them."""
    headers = [(canonical_header_key(name), value) for name, value in http_headers]
    names = {name for name, _ in headers}
    if "User-Agent" not in names:
        headers.append(("User-Agent", USER_AGENT))
    if "Accept" not in names:
        headers.append(("Accept", "*/*"))
    first = {}
    for name, value in headers:
        first.setdefault(name, value)
    return [(name, value) for name, value in headers if not (name in ("User-Agent", "Accept", "Host") and first[name] == "")]


async def probe_http(action: HTTPGetAction, *, pod_ip: str, container: dict, timeout: float) -> CheckOutcome:
    """``DoHTTPProbe`` with the kubelet's client: no proxy, no keep-alive, no compression, TLS
    not verified, redirects followed only to the same host, ``timeout`` for the whole exchange."""
    try:
        port = resolve_port(action.port, container)
    except ProbeError as err:
        return CheckOutcome(CheckResult.UNKNOWN, "", str(err))
    scheme = (action.scheme or "HTTP").lower()
    url = format_url(scheme, action.host or pod_ip, port, action.path)
    if scheme not in ("http", "https"):
        return CheckOutcome(CheckResult.FAILURE, f"Get {go_quote(url)}: unsupported protocol scheme {go_quote(scheme)}")
    headers = request_headers(action.headers)
    phase = _HTTPPhase(url)
    try:
        async with asyncio.timeout(timeout):
            return await _http_exchange(url, headers, phase)
    except TimeoutError:
        if phase.reading_body:
            return CheckOutcome(CheckResult.FAILURE, "", "context deadline exceeded (Client.Timeout or context cancellation "
                                                         "while reading body)")
        return CheckOutcome(CheckResult.FAILURE, f"Get {go_quote(phase.url)}: context deadline exceeded (Client.Timeout "
                                                 "exceeded while awaiting headers)")
    except (aiohttp.ClientError, OSError, ssl.SSLError) as err:
        if phase.reading_body:
            return CheckOutcome(CheckResult.FAILURE, "", str(err) or type(err).__name__)
        return CheckOutcome(CheckResult.FAILURE, f"Get {go_quote(phase.url)}: {_go_http_error(err)}")


@dataclass
class _HTTPPhase:
    """Where an HTTP exchange got to, for the Go-worded error when it is cut short."""

    url: str
    reading_body: bool = False


async def _http_exchange(url: str, headers: list[tuple[str, str]], phase: _HTTPPhase) -> CheckOutcome:
    hostname = urlsplit(url).hostname
    connector = aiohttp.TCPConnector(ssl=False, force_close=True)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False, trust_env=False,
                                     skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding")) as session:
        sent = 1
        while True:
            async with session.get(phase.url, headers=headers, allow_redirects=False) as resp:
                location = resp.headers.get("Location")
                if resp.status in REDIRECT_STATUSES and location:
                    target = urljoin(phase.url, location)
                    if urlsplit(target).hostname == hostname:  # elsewhere: the redirect itself is the answer
                        if sent >= MAX_REDIRECTS:
                            return CheckOutcome(CheckResult.FAILURE, f"Get {go_quote(location)}: stopped after {MAX_REDIRECTS} "
                                                                     "redirects")
                        if urlsplit(location).scheme:  # as net/http: a custom Host survives relative moves only
                            headers = [(n, v) for n, v in headers if n != "Host"]
                        phase.url, sent = target, sent + 1
                        continue
                phase.reading_body = True
                body = await _read_at_most(resp.content, MAX_HTTP_BODY_BYTES)
                return _http_outcome(resp.status, body.decode("utf-8", errors="replace"))


async def _read_at_most(stream: aiohttp.StreamReader, limit: int) -> bytes:
    """``ReadAtMost``: the first ``limit`` bytes; a longer body is cut, not an error."""
    data = bytearray()
    while len(data) < limit:
        chunk = await stream.read(limit - len(data))
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _http_outcome(status: int, body: str) -> CheckOutcome:
    if 200 <= status < 400:
        if status >= 300:
            return CheckOutcome(CheckResult.WARNING, f"Probe terminated redirects, Response body: {body}")
        return CheckOutcome(CheckResult.SUCCESS, body)
    # Upstream keeps the body out of the user-facing message (issue 99425).
    return CheckOutcome(CheckResult.FAILURE, f"HTTP probe failed with statuscode: {status}")


def _go_http_error(err: BaseException) -> str:
    """The tail of Go's ``Get "<url>": ...`` for a failed exchange."""
    if isinstance(err, aiohttp.ClientConnectorError):
        return golang.dial_error(join_host_port(err.host, err.port), err.os_error)
    if isinstance(err, aiohttp.ServerDisconnectedError):
        return "EOF"
    return str(err) or type(err).__name__


# ---- tcpSocket (pkg/probe/tcp) -----------------------------------------------------------------


async def probe_tcp(action: TCPSocketAction, *, pod_ip: str, container: dict, timeout: float) -> CheckOutcome:
    """``DoTCPProbe``: success when a connection opens within ``timeout``. The socket is closed
    with a reset (``SO_LINGER`` 0, as the kubelet's probe dialer does) to leave no TIME-WAIT."""
    try:
        port = resolve_port(action.port, container)
    except ProbeError as err:
        return CheckOutcome(CheckResult.UNKNOWN, "", str(err))
    host = action.host or pod_ip
    address = join_host_port(host, port)
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(host, port)
    except (TimeoutError, OSError) as err:
        return CheckOutcome(CheckResult.FAILURE, golang.dial_error(address, err))
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()
    return CheckOutcome(CheckResult.SUCCESS, "")


# ---- exec (pkg/probe/exec) ---------------------------------------------------------------------


async def probe_exec(command: Sequence[str], *, env: Mapping[str, str], netns: str | None, timeout: float,
                     cwd: str | None = None, pid: int | None = None) -> CheckOutcome:
    """Run ``command`` in network namespace ``netns`` with environment ``env`` (or, given the
    ``pid`` of a container with a mount namespace of its own, in that container's namespaces,
    root and working directory): exit 0 is success, any other exit a failure with the combined
    output (first 10 KiB); past ``timeout`` the command and everything it started are killed
    and the check fails."""
    env = {"PATH": DEFAULT_PATH, **env}  # as the container itself was started
    root = process_root(pid)
    cwd = cwd if cwd and os.path.isdir(root + cwd) else "/"
    if not command:
        return CheckOutcome(CheckResult.UNKNOWN, "", "exec: no command")
    if find_executable(command[0], env, cwd, root=root) is None:
        # The container runtime refuses such an exec outright; the kubelet sees an error.
        return CheckOutcome(CheckResult.UNKNOWN, "", f"exec: {go_quote(command[0])}: executable file not found in $PATH")
    argv, netns = (in_container(pid, command), None) if pid is not None else (command, netns)
    cwd = "/" if pid is not None else cwd  # nsenter takes the container's own
    try:
        process = await kprocess.spawn(argv, env=env, cwd=cwd, netns=netns, merge_stderr=True)
    except OSError as err:  # could not start at all: upstream's non-exit error
        return CheckOutcome(CheckResult.UNKNOWN, "", str(err))
    try:
        async with asyncio.timeout(timeout):
            output = await _read_limited(process.stdout, MAX_EXEC_OUTPUT_BYTES)
            code = await process.wait()
    except TimeoutError:
        kprocess.kill_group(process.pid, signal.SIGKILL)
        await process.wait()
        # The CRI's timeout error (remote_runtime.go ExecSync); with ExecProbeTimeout on (GA) a failure.
        return CheckOutcome(CheckResult.FAILURE, f"command {go_quote(' '.join(command))} timed out")
    except BaseException:
        kprocess.kill_group(process.pid, signal.SIGKILL)
        raise
    text = output.decode("utf-8", errors="replace")
    return CheckOutcome(CheckResult.SUCCESS if code == 0 else CheckResult.FAILURE, text)


async def _read_limited(stream: asyncio.StreamReader, limit: int) -> bytes:
    """Everything until EOF, keeping the first ``limit`` bytes (``ioutils.LimitWriter``)."""
    data = bytearray()
    while chunk := await stream.read(65536):
        data += chunk[: max(0, limit - len(data))]
    return bytes(data)
