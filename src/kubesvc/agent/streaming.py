"""The agent's streaming endpoints: ``kubectl exec`` and ``kubectl port-forward`` (upstream
kubelet's ``/exec``, ``/portForward`` in pkg/kubelet/server/server.go, served by the CRI
streaming server in pkg/kubelet/cri/streaming; workloads.md §9).

The apiserver reaches them over HTTPS with its kubelet-client certificate, authorized here as
``nodes/proxy`` like every path but a few (kubeletauth.py), and relays the client's WebSocket::

    GET /exec/{namespace}/{pod}/{container}?command=sh&command=-c&command=...&input=1&output=1&error=1&tty=1
    GET /attach/{namespace}/{pod}/{container}?input=1&output=1&error=1
    GET /portForward/{namespace}/{pod}

**Exec** speaks the channel protocol (``wsstream``): every binary message is one channel byte
and its payload. Channel 0 is stdin (client to server), 1 stdout, 2 stderr, 3 the error
channel, 4 resize (JSON ``{"Width": W, "Height": H}``). Subprotocols: ``v5.channel.k8s.io``
(what kubectl 1.32 offers; adds the message ``[255, channel]``, the client closing that channel:
``[255, 0]`` when its stdin ends) and ``v4.channel.k8s.io`` (other clients; no way to end
stdin). Once upgraded the server writes an empty message on the lowest channel the client reads
(stdout, else stderr, else error). When the command ends, the error channel carries a
``metav1.Status`` (v4's ``errorDecoderV4``): ``{"metadata":{},"status":"Success"}`` for exit
0; else ``NonZeroExitCode`` with the code as the ``ExitCode`` cause, from which kubectl prints
``command terminated with exit code N`` and exits N. A command that cannot start is a plain
failure Status (kubectl prints its message). Then a normal close (1000).

The command runs where the container runs: in its network, mount and UTS namespaces, root and
working directory, as its user (``mounts.in_container``: ``nsenter`` over its main process),
with the container's environment (what the runtime keeps from ``CreateContainer``). ``tty`` gives it a
pseudo-terminal (``kernel.process.spawn(tty=True)``).

**Attach** (``/attach/{namespace}/{pod}/{container}``, the same options without a command)
joins the running container: what it prints from then on (the runtime tees its pipes:
``runtime.ContainerProcess.listen``), and stdin into its own stdin when its spec has ``stdin:
true`` (the end of the client's stdin closes the container's only with ``stdinOnce``). It ends
with the container (a Success Status) or when the client leaves. A container with ``tty: true``
runs on a pseudo-terminal: the session's resizes go to it, its output is the one stream.

**Port-forward** from kubectl 1.32 is SPDY/3.1 tunneled through the WebSocket (subprotocol
``SPDY/3.1+portforward.k8s.io``; ``streaming_spdy.py``). Per local connection kubectl opens two
streams with headers ``streamType`` (``error``, ``data``), ``port`` and ``requestID``; the agent
connects to ``localhost:<port>`` *inside the Pod's network namespace* (a socket made by a
thread that entered it, as containerd's ``PortForward`` dials from within the sandbox's
namespace: IPv4 first, then IPv6) and copies bytes both ways on the data stream. A failure is
text on the error stream (kubelet's ``error forwarding port P to pod ...``), then both close.
Other clients (the Python client's ``portforward``) use the channel protocol
``v4.channel.k8s.io`` with ``?ports=``: see ``_forward_channels``.

Errors before the upgrade are plain text with kubelet's words: 404 for a Pod the agent does not
run, 500 ``container not found ("C")`` for a container that is not running (kubectl prints
``unable to upgrade connection: container not found ("C")``), 400 for bad parameters.

**SPDY fallback.** kubectl falls back to a plain ``POST`` with ``Upgrade: SPDY/3.1`` when its
WebSocket is refused (or with ``KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false`` /
``KUBECTL_PORT_FORWARD_WEBSOCKETS=false``): the agent answers 101 with
``X-Stream-Protocol-Version`` ``v4.channel.k8s.io`` (exec; a stream per channel) or
``portforward.k8s.io`` (the same streams as in the tunnel), the connection taken over by
``serving/upgrade.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import struct
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from aiohttp import WSMsgType, web

from kubesvc.agent.runtime import find_executable
from kubesvc.agent.streaming_spdy import ProtocolError, Session, Stream
from kubesvc.kernel import interactive, netns as knetns, process as kprocess
from kubesvc.kernel.exec import in_netns
from kubesvc.kernel.host import process_root
from kubesvc.kernel.interactive import set_window_size
from kubesvc.kernel.mounts import DEFAULT_PATH, in_container
from kubesvc.serving import upgrade
from kubesvc.util.golang import quote as go_quote

log = logging.getLogger("kubesvc.agent.streaming")

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
EXEC_PROTOCOLS = (V5, V4)
PORT_FORWARD_TUNNEL = "SPDY/3.1+portforward.k8s.io"
PORT_FORWARD_SPDY = "portforward.k8s.io"  # X-Stream-Protocol-Version of the plain SPDY upgrade
SPDY_EXEC_PROTOCOLS = (V4,)  # client-go offers v5..v1 over SPDY; v4 is the newest kubelet speaks there
STREAM_CREATION_TIMEOUT = 30.0  # kubelet's streamCreationTimeout
DRAIN_SECONDS = 1.0  # output still read after the command exited (a child it left may hold the pipe)
MAX_MESSAGE = 4 << 20
# what a port-forward (client to Pod) or an attach (container to client) may hold before the
# faster side waits (port-forward: 16 messages of at most MAX_MESSAGE) or loses output (attach:
# 256 reads of the container's output, at most 64 KiB each)
QUEUED_MESSAGES = 16
QUEUED_OUTPUT_CHUNKS = 256
# kubectl sends the terminal's size as the first resize message as soon as the session is up; a
# command on a terminal starts once it has come (or after this long), so its first ``stty size``
# or full-screen draw sees the user's size rather than 0x0
FIRST_SIZE_WAIT = 1.0


@dataclass
class ExecTarget:
    """Where a command for one running container runs."""

    netns: str | None
    env: Mapping[str, str]
    working_dir: str
    pid: int | None  # the container's main process: its namespaces, root, directory and user are entered
    # until the container stops: an exec still running then is killed with it (the runtime's
    # exec processes live in the container's cgroup and die with it: exit 137 in kubectl)
    container_stopped: Callable[[], Awaitable[None]] | None = None


ResolveExec = Callable[[str, str, str], "ExecTarget | str | None"]  # None: no such Pod; str: why not
ResolvePod = Callable[[str, str], "str | None"]  # (namespace, pod) -> its network namespace
# (namespace, pod, container) -> the running container (runtime.ContainerProcess), None: no such Pod; str: why not
ResolveAttach = Callable[[str, str, str], object]


# ---- pure parts -------------------------------------------------------------------------------


def success_status() -> dict:
    return {"metadata": {}, "status": "Success"}


def exit_status(code: int) -> dict:
    """The Status for a command that exited ``code`` (kubelet's exec ``CodeExitError``)."""
    if code == 0:
        return success_status()
    return {"metadata": {}, "status": "Failure", "message": f"command terminated with non-zero exit code: exit status {code}",
            "reason": "NonZeroExitCode", "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


def failure_status(message: str) -> dict:
    return {"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError", "code": 500,
            "details": {"causes": [{"message": message}]}}


def frame(channel: int, payload: bytes = b"") -> bytes:
    return bytes([channel]) + payload


def flag(query: Mapping[str, str], name: str) -> bool:
    """kubelet's streaming options: ``input=1`` etc. (kube-apiserver sends "1"; "true" is taken too)."""
    return query.get(name, "").lower() in ("1", "true")


@dataclass(frozen=True)
class ExecOptions:
    command: tuple[str, ...]
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool

    @classmethod
    def from_query(cls, query) -> ExecOptions:
        tty = flag(query, "tty")
        return cls(tuple(query.getall("command", [])), flag(query, "input"), flag(query, "output"),
                   flag(query, "error") and not tty, tty)

    def problem(self, attach: bool = False) -> str | None:
        """kubelet's ``NewOptions`` checks, its words."""
        if not attach and not self.command:
            return "you must specify at least 1 command"
        if not (self.stdin or self.stdout or self.stderr or self.tty):
            return "you must specify at least 1 of stdin, stdout, stderr"
        return None

    def first_channel(self) -> int:
        return STDOUT if self.stdout else STDERR if self.stderr else ERROR


def resize_of(payload: bytes) -> tuple[int, int] | None:
    """(width, height) of a resize message, None if it does not decode or does not fit a
    terminal's two unsigned 16-bit numbers (``TIOCSWINSZ``)."""
    try:
        size = json.loads(payload)
        width, height = int(size["Width"]), int(size["Height"])
    except (ValueError, KeyError, TypeError):
        return None
    return (width, height) if 0 <= width <= 0xFFFF and 0 <= height <= 0xFFFF else None


def _text(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message, content_type="text/plain")


def _chosen_protocol(request: web.Request, supported: Sequence[str]) -> str | None:
    offered = [p.strip() for value in request.headers.getall("Sec-WebSocket-Protocol", []) for p in value.split(",")]
    return next((p for p in offered if p in supported), None)


def _is_websocket(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


# ---- exec -------------------------------------------------------------------------------------


async def serve_exec(request: web.Request, resolve: ResolveExec) -> web.StreamResponse:
    return await _serve_container_stream(request, resolve, _run_exec, attach=False)


async def serve_attach(request: web.Request, resolve: ResolveAttach) -> web.StreamResponse:
    """``kubectl attach``: the running container's own streams (kubelet's ``/attach``, the
    runtime's Attach): what it prints from now on, and stdin into its stdin when it has one."""
    return await _serve_container_stream(request, resolve, _run_attach, attach=True)


async def _serve_container_stream(request: web.Request, resolve, runner, *, attach: bool) -> web.StreamResponse:
    """The checks kubelet makes before an exec or attach upgrade, then the session."""
    namespace, pod, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
    options = ExecOptions.from_query(request.query)
    problem = options.problem(attach=attach)
    if problem:
        return _text(400, problem)
    target = resolve(namespace, pod, container)
    if target is None:
        return _text(404, f'pod "{pod}" does not exist')
    if isinstance(target, str):
        return _text(500, target)
    return await _serve_remotecommand(request, options, lambda send, client_input: runner(send, client_input, options, target))


Run = Callable[[Callable[[int, bytes], Awaitable[None]], Callable[..., Awaitable[None]]], Awaitable[None]]


async def _serve_remotecommand(request: web.Request, options: ExecOptions, run: Run) -> web.StreamResponse:
    """An exec or attach session over whichever transport the client asked for: ``run(send,
    client_input)`` serves it (``send(channel, bytes)`` out, ``client_input(child)`` in)."""
    if upgrade.is_spdy_upgrade(request):
        return await _serve_spdy_remotecommand(request, options, run)
    if not _is_websocket(request):
        return _text(400, "unable to upgrade: a stream is a WebSocket (v5.channel.k8s.io, v4.channel.k8s.io) or a SPDY/3.1 upgrade")
    protocol = _chosen_protocol(request, EXEC_PROTOCOLS)
    if protocol is None:
        return _text(400, f"unable to upgrade: unable to negotiate protocol: client supports {request.headers.getall('Sec-WebSocket-Protocol', [])}, "
                          f"server supports {list(EXEC_PROTOCOLS)}")
    ws = web.WebSocketResponse(protocols=(protocol,), max_msg_size=MAX_MESSAGE, autoping=True)
    await ws.prepare(request)
    send_lock = asyncio.Lock()

    async def send(channel: int, data: bytes) -> None:
        async with send_lock:
            await ws.send_bytes(frame(channel, data))

    try:
        await send(options.first_channel(), b"")
        await run(send, lambda child: _from_client(ws, protocol, child))
    finally:
        await ws.close()
    return ws


async def _serve_spdy_remotecommand(request: web.Request, options: ExecOptions, run: Run) -> web.StreamResponse:
    """kubectl's fallback: remotecommand over SPDY/3.1 (kubelet's remotecommand/httpstream.go).
    The client opens one stream per channel, each named by its ``streamType`` header: ``error``,
    then ``stdin``, ``stdout``, ``stderr`` as asked, and ``resize`` with a terminal (a sequence
    of JSON sizes); stdin ends with its stream's FIN. Protocol ``v4.channel.k8s.io``: the error
    stream carries the same Status as the WebSocket's error channel."""
    protocol = next((p for p in upgrade.requested_protocols(request.headers) if p in SPDY_EXEC_PROTOCOLS), None)
    if protocol is None:
        return _text(400, f"unable to upgrade: unable to negotiate protocol: client supports {upgrade.requested_protocols(request.headers)}, "
                          f"server supports {list(SPDY_EXEC_PROTOCOLS)}")
    expected = {"error"} | {name for name, on in (("stdin", options.stdin), ("stdout", options.stdout),
                                                   ("stderr", options.stderr), ("resize", options.tty)) if on}
    streams: dict[str, Stream] = {}
    all_there = asyncio.Event()

    async def on_stream(stream: Stream) -> None:
        streams[stream.header("streamType")] = stream
        if expected <= streams.keys():
            all_there.set()

    response, connection = await upgrade.accept(request, protocol)
    session = Session(connection.write, on_stream)
    reading = asyncio.create_task(_feed_session(connection, session))
    try:
        await asyncio.wait_for(all_there.wait(), timeout=STREAM_CREATION_TIMEOUT)
    except asyncio.TimeoutError:
        log.info("exec over SPDY: the client opened %s of %s in time", sorted(streams), sorted(expected))
        reading.cancel()
        connection.close()
        return response
    channels = {STDOUT: "stdout", STDERR: "stderr", ERROR: "error"}

    async def send(channel: int, data: bytes) -> None:
        stream = streams.get(channels.get(channel, ""))
        if stream is not None and data:
            await stream.write(data)

    async def from_client(child) -> None:
        tasks = []
        if "stdin" in streams:
            tasks.append(asyncio.create_task(_stdin_from_stream(streams["stdin"], child)))
        if "resize" in streams:
            tasks.append(asyncio.create_task(_resizes_from_stream(streams["resize"], child)))
        try:
            await session.closed.wait()
        finally:
            for task in tasks:
                task.cancel()

    try:
        await run(send, from_client)
        for stream in streams.values():
            await stream.close()
    except ConnectionError:
        pass
    finally:
        reading.cancel()
        session.close()
        connection.close()
    return response


async def _feed_session(connection: upgrade.RawConnection, session: Session) -> None:
    """The upgraded connection's bytes into ``session`` until it ends (then every stream ends)."""
    try:
        while data := await connection.read():
            await session.feed(data)
    except (ProtocolError, ConnectionError) as exc:
        log.info("SPDY connection: %s", exc)
    finally:
        session.close()


async def _stdin_from_stream(stream: Stream, child) -> None:
    while data := await stream.read():
        with contextlib.suppress(OSError):
            await child.write(data)
    child.close_stdin()


async def _resizes_from_stream(stream: Stream, child) -> None:
    """A stream of JSON ``{"Width": W, "Height": H}`` objects, one after another (Go's json.Decoder)."""
    decoder, buffer = json.JSONDecoder(), ""
    while data := await stream.read():
        buffer += data.decode("utf-8", "replace")
        while True:
            buffer = buffer.lstrip()
            try:
                size, end = decoder.raw_decode(buffer)
            except ValueError:
                break
            buffer = buffer[end:]
            decoded = resize_of(json.dumps(size).encode())
            if decoded is not None:
                child.resize(*decoded)


def _exec_argv(target: ExecTarget, command: Sequence[str]) -> tuple[list[str], str, dict[str, str]]:
    env = {"PATH": DEFAULT_PATH, **target.env}  # as the container itself was started
    if target.pid is not None:
        return in_container(target.pid, command), "/", env  # nsenter takes the container's root and cwd
    return in_netns(target.netns, command), target.working_dir or "/", env


class _AttachedInput:
    """What a session's input reaches in an attached container (the interface of
    ``_ExecInput`` that ``_from_client`` uses): its stdin (pipe or terminal); the
    end of the client's stdin closes it only for ``stdinOnce`` (a terminal gets ^D instead);
    resizes go to its terminal."""

    def __init__(self, container):
        self._container = container

    @property
    def stdin(self) -> int | None:
        return self._container.stdin_fd if self._container.stdin else None

    async def write(self, data: bytes) -> None:
        if self.stdin is not None:
            await interactive.write(self.stdin, data)

    def resize(self, width: int, height: int) -> None:
        self._container.resize(width, height)

    def close_stdin(self) -> None:
        if not self._container.stdin_once:
            return
        if self._container.tty:
            with contextlib.suppress(OSError):
                if self._container.stdin_fd is not None:
                    os.write(self._container.stdin_fd, b"\x04")
        else:
            self._container.close_stdin()


async def _run_attach(send: Callable[[int, bytes], Awaitable[None]], client_input: Callable[..., Awaitable[None]],
                      options: ExecOptions, container) -> None:
    """Until the container exits (then a Success Status, as kubelet's ServeAttach) or the client
    leaves (with ``stdinOnce``, the container's stdin is then closed)."""
    # bounded: attach is best effort, as the CRI's: what a client too slow to read would make the
    # agent hold is dropped (the container's log keeps it all), with one line in the agent's log
    output: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue(maxsize=QUEUED_OUTPUT_CHUNKS)
    dropped = [0]

    def listener(stream: str, chunk: bytes) -> None:
        try:
            output.put_nowait((stream, chunk))
        except asyncio.QueueFull:
            if not dropped[0]:
                log.info("attach: the client reads slower than the container writes; dropping output (the log has it)")
            dropped[0] += 1

    stop_listening = container.listen(listener)

    async def forward() -> None:
        while True:
            stream, chunk = await output.get()
            if stream == "stderr" and not options.tty:
                if options.stderr:
                    await send(STDERR, chunk)
            elif options.stdout or options.tty:
                await send(STDOUT, chunk)

    forwarding = asyncio.create_task(forward())
    client = asyncio.ensure_future(client_input(_AttachedInput(container)))
    exited = asyncio.ensure_future(container.wait_exit())
    try:
        await asyncio.wait([exited, client, forwarding], return_when=asyncio.FIRST_COMPLETED)
        if exited.done():
            await asyncio.sleep(0.2)  # the pumps' last chunks
            deadline = asyncio.get_running_loop().time() + DRAIN_SECONDS
            while not output.empty() and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
            await send(ERROR, json.dumps(success_status()).encode())
    finally:
        stop_listening()
        for task in (forwarding, client, exited):
            task.cancel()
        await asyncio.gather(forwarding, client, exited, return_exceptions=True)
        if container.stdin_once:
            container.close_stdin()


class _ExecInput:
    """What the client's input reaches in an exec'd command (the interface ``_from_client`` and
    the SPDY stdin/resize streams use, as ``_AttachedInput`` for attach): its stdin pipe or its
    terminal's master; resizes to the terminal; the end of the client's stdin closes the pipe,
    or is ^D on a terminal (end of input for a reader in canonical mode, as a user's ^D).

    The client's input is read from before the command starts (a terminal's command waits for
    the first size): until :meth:`attach`, input is kept and the last size remembered; then
    :meth:`flush` writes what was kept, and later input waits for it, so the command reads
    everything in the order it was sent (``kubectl cp`` is a tar stream on stdin)."""

    def __init__(self, tty: bool):
        self.tty = tty
        self._process: kprocess.Process | None = None
        self._early: list[bytes] = []
        self._early_close = False
        self._flushed = asyncio.Event()
        self.size: tuple[int, int] | None = None
        self.sized = asyncio.Event()

    @property
    def stdin(self) -> int | None:
        return self._process.stdin if self._process is not None else None

    def attach(self, process: kprocess.Process) -> None:
        """The command has started: it gets the remembered size (the input: :meth:`flush`)."""
        self._process = process
        if self.size is not None:
            self.resize(*self.size)

    async def flush(self) -> None:
        """What came before the command started, into it (once its output is being read: a
        command that writes as it reads would otherwise hold this write, and itself, forever)."""
        try:
            with contextlib.suppress(OSError):
                for data in self._early:
                    if self.stdin is not None:
                        await interactive.write(self.stdin, data)
        finally:
            self._early = []
            self._flushed.set()
        if self._early_close:
            self.close_stdin()

    async def write(self, data: bytes) -> None:
        if self._process is None:
            self._early.append(data)
            return
        await self._flushed.wait()
        if self._process.stdin is not None:
            await interactive.write(self._process.stdin, data)

    def resize(self, width: int, height: int) -> None:
        self.size = (width, height)
        self.sized.set()
        if self.tty and self.stdin is not None:
            set_window_size(self.stdin, width, height)

    def close_stdin(self) -> None:
        if not self._flushed.is_set():  # after what came before it
            self._early_close = True
            return
        if self._process.stdin is None:
            return
        if self.tty:
            with contextlib.suppress(OSError):
                os.write(self._process.stdin, b"\x04")
        else:
            self.close()

    def close(self) -> None:
        if self._process is not None and self._process.stdin is not None:
            os.close(self._process.stdin)
            self._process.stdin = None


async def _run_exec(send: Callable[[int, bytes], Awaitable[None]], client_input: Callable[..., Awaitable[None]],
                    options: ExecOptions, target: ExecTarget) -> None:
    """Run the command and serve it: its output through ``send(channel, bytes)``, the client's
    input by ``client_input(child)`` (which returns when the client has gone), the Status last."""
    command = list(options.command)
    root = process_root(target.pid)
    env = {"PATH": DEFAULT_PATH, **target.env}
    if find_executable(command[0], env, target.working_dir, root=root) is None:
        message = (f"failed to exec in container: failed to start exec: OCI runtime exec failed: exec failed: unable to start "
                   f"container process: exec: {go_quote(command[0])}: executable file not found in $PATH: unknown")
        await send(ERROR, json.dumps(failure_status(message)).encode())
        return
    argv, cwd, env = _exec_argv(target, command)
    child_input = _ExecInput(options.tty)
    client = asyncio.ensure_future(client_input(child_input))
    if options.tty:
        sized = asyncio.ensure_future(child_input.sized.wait())
        await asyncio.wait([sized, client], timeout=FIRST_SIZE_WAIT, return_when=asyncio.FIRST_COMPLETED)
        sized.cancel()
    if client.done():  # the client left before the command started
        return
    try:
        child = await kprocess.spawn(argv, env=env, cwd=cwd, stdin_pipe=options.stdin, tty=options.tty, window=child_input.size)
    except OSError as exc:
        client.cancel()
        await asyncio.gather(client, return_exceptions=True)
        await send(ERROR, json.dumps(failure_status(f"failed to exec in container: {exc}")).encode())
        return
    except BaseException:
        client.cancel()
        raise
    child_input.attach(child)

    async def pump(reader: asyncio.StreamReader, channel: int, wanted: bool) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(65536):
                if wanted:
                    await send(channel, data)

    pumps = [asyncio.create_task(pump(child.stdout, STDOUT, options.stdout or options.tty))]
    if child.stderr is not None:
        pumps.append(asyncio.create_task(pump(child.stderr, STDERR, options.stderr)))
    flushing = asyncio.ensure_future(child_input.flush())
    exited = asyncio.ensure_future(child.wait())
    stopped = asyncio.ensure_future(target.container_stopped() if target.container_stopped else asyncio.Event().wait())
    try:
        await asyncio.wait([exited, client, stopped], return_when=asyncio.FIRST_COMPLETED)
        if not exited.done() and stopped.done():  # the container is gone: so is what runs in it
            kprocess.kill_group(child.pid, signal.SIGKILL)
            await asyncio.wait([exited], timeout=5)
        if not exited.done():  # the client went away first: the command goes too, as upstream's
            kprocess.kill_group(child.pid, signal.SIGKILL)
            return
        await asyncio.wait(pumps, timeout=DRAIN_SECONDS)
        code = exited.result()
        await send(ERROR, json.dumps(exit_status(128 - code if code < 0 else code)).encode())  # a signal N: 128 + N, as runc
    finally:
        client.cancel()
        stopped.cancel()
        flushing.cancel()
        for task in pumps:
            task.cancel()
        await asyncio.gather(client, flushing, *pumps, return_exceptions=True)
        if not exited.done():
            kprocess.kill_group(child.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(exited, timeout=5)
        child_input.close()


async def _from_client(ws: web.WebSocketResponse, protocol: str, child) -> None:
    """Stdin, resizes and (v5) the close of stdin, until the client closes the WebSocket."""
    async for message in ws:
        if message.type != WSMsgType.BINARY or not message.data:
            continue
        channel, payload = message.data[0], message.data[1:]
        if channel == STDIN and payload:
            try:
                await child.write(payload)
            except OSError:  # the command closed its stdin: later input is dropped
                pass
        elif channel == RESIZE:
            size = resize_of(payload)
            if size is not None:
                child.resize(*size)
        elif channel == CLOSE and protocol == V5 and payload[:1] == bytes([STDIN]):
            child.close_stdin()


# ---- port-forward -----------------------------------------------------------------------------


def forward_ports(query) -> list[int] | str:
    """The ``ports`` of a channel-protocol port-forward (``?ports=8080,9090`` or repeated), or
    kubelet's complaint."""
    values = [p for value in query.getall("ports", []) for p in value.split(",") if p.strip()]
    if not values:
        return "at least one port must be specified"
    ports = []
    for value in values:
        try:
            port = int(value)
        except ValueError:
            return f'unable to parse "{value}" as a port: invalid syntax'
        if not 0 < port < 65536:
            return f"port {port} must be > 0"
        ports.append(port)
    return ports


async def serve_port_forward(request: web.Request, resolve: ResolvePod) -> web.StreamResponse:
    namespace, pod = request.match_info["namespace"], request.match_info["pod"]
    pod_netns = resolve(namespace, pod)
    if pod_netns is None:
        return _text(404, f'pod "{pod}" does not exist')
    if upgrade.is_spdy_upgrade(request):
        if PORT_FORWARD_SPDY not in upgrade.requested_protocols(request.headers):
            return _text(400, f"unable to upgrade: unable to negotiate protocol: client supports {upgrade.requested_protocols(request.headers)}, "
                              f"server supports [{PORT_FORWARD_SPDY}]")
        response, connection = await upgrade.accept(request, PORT_FORWARD_SPDY)
        forwarder = PortForwarder(f"{namespace}/{pod}", pod_netns)
        session = Session(connection.write, forwarder.on_stream)
        try:
            await _feed_session(connection, session)
        finally:
            session.close()
            await session.wait_handlers()
            connection.close()
        return response
    protocol = _chosen_protocol(request, (PORT_FORWARD_TUNNEL, V4)) if _is_websocket(request) else None
    if protocol is None:
        return _text(400, f"unable to upgrade: a port-forward is a WebSocket ({PORT_FORWARD_TUNNEL}, {V4}) or a SPDY/3.1 upgrade")
    ports = forward_ports(request.query) if protocol == V4 else []
    if isinstance(ports, str):
        return _text(400, ports)
    ws = web.WebSocketResponse(protocols=(protocol,), max_msg_size=MAX_MESSAGE, autoping=True)
    await ws.prepare(request)
    try:
        if protocol == V4:
            await _forward_channels(ws, f"{namespace}/{pod}", pod_netns, ports)
        else:
            await _forward_spdy(ws, f"{namespace}/{pod}", pod_netns)
    finally:
        await ws.close()
    return ws


async def _forward_spdy(ws: web.WebSocketResponse, pod: str, pod_netns: str) -> None:
    """kubectl's SPDY/3.1 tunnel: each binary message a slice of the SPDY byte stream."""
    forwarder = PortForwarder(pod, pod_netns)
    session = Session(ws.send_bytes, forwarder.on_stream)
    try:
        async for message in ws:
            if message.type == WSMsgType.BINARY:
                await session.feed(message.data)
    except ProtocolError as exc:
        log.info("port-forward to %s: %s", pod, exc)
    finally:
        session.close()
        await session.wait_handlers()


async def _forward_channels(ws: web.WebSocketResponse, pod: str, pod_netns: str, ports: list[int]) -> None:
    """The channel protocol (kubelet's portforward/websocket.go; the Python client's
    ``portforward``): one connection per port of the query, port i on channels 2i (data) and
    2i+1 (error), each opened by the server with the port as two little-endian bytes. The
    WebSocket closes once every Pod-side connection has ended (v4 has no per-channel close)."""
    send_lock = asyncio.Lock()
    # bounded: a client writing faster than the Pod reads waits (the WebSocket is read no
    # further, TCP pushes back) instead of growing the agent's memory
    to_pod: list[asyncio.Queue[bytes | None]] = [asyncio.Queue(maxsize=QUEUED_MESSAGES) for _ in ports]
    ended: set[int] = set()  # ports whose Pod-side connection is over: their data is dropped

    async def send(channel: int, data: bytes) -> None:
        async with send_lock:
            await ws.send_bytes(frame(channel, data))

    async def one(index: int, port: int) -> None:
        data_channel, error_channel = 2 * index, 2 * index + 1
        prefix = struct.pack("<H", port)
        await send(data_channel, prefix)
        await send(error_channel, prefix)
        try:
            sock = await knetns.on_thread_async(pod_netns, _connect_local, port)
        except OSError as exc:
            end(index)
            await send(error_channel, f"error forwarding port {port} to pod {pod}: {exc}".encode())
            return
        reader, writer = await asyncio.open_connection(sock=sock)

        async def upstream() -> None:
            with contextlib.suppress(OSError, ConnectionError):
                while (chunk := await to_pod[index].get()) is not None:
                    writer.write(chunk)
                    await writer.drain()
                if writer.can_write_eof():
                    writer.write_eof()

        writing = asyncio.create_task(upstream())
        try:
            with contextlib.suppress(OSError, ConnectionError):
                while chunk := await reader.read(65536):
                    await send(data_channel, chunk)
        finally:
            end(index)
            writing.cancel()
            writer.close()

    def end(index: int) -> None:
        ended.add(index)
        while not to_pod[index].empty():  # a client waiting for room goes on (and drops)
            to_pod[index].get_nowait()

    async def from_client() -> None:
        async for message in ws:
            if message.type == WSMsgType.BINARY and message.data:
                channel, payload = message.data[0], message.data[1:]
                if channel % 2 == 0 and channel // 2 < len(ports) and payload and channel // 2 not in ended:
                    await to_pod[channel // 2].put(payload)
        for index, queue in enumerate(to_pod):
            if index not in ended:
                await queue.put(None)

    forwards = asyncio.gather(*(one(i, port) for i, port in enumerate(ports)), return_exceptions=True)
    client = asyncio.create_task(from_client())
    try:
        await asyncio.wait([forwards, client], return_when=asyncio.FIRST_COMPLETED)
    finally:
        client.cancel()
        forwards.cancel()
        await asyncio.gather(client, forwards, return_exceptions=True)


def _connect_local(port: int) -> socket.socket:
    """A TCP connection to localhost:``port`` from this thread's network namespace: IPv4, then
    IPv6 (containerd's words on failure)."""
    errors = []
    for family, host, label in ((socket.AF_INET, "127.0.0.1", "IPv4: dial tcp4 127.0.0.1"), (socket.AF_INET6, "::1", "IPv6 dial tcp6 [::1]")):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(5.0)
        try:
            sock.connect((host, port))
        except OSError as exc:
            sock.close()
            errors.append(f"{label}:{port}: connect: {(exc.strerror or str(exc)).lower()}")
            continue
        sock.setblocking(False)
        return sock
    raise OSError(f"failed to connect to localhost:{port} inside namespace, {' '.join(errors)}")


class PortForwarder:
    """The streams of one port-forward session, paired by ``requestID``."""

    def __init__(self, pod: str, pod_netns: str):
        self.pod = pod
        self.netns = pod_netns
        self._pairs: dict[str, dict[str, Stream]] = {}
        self._paired: dict[str, asyncio.Event] = {}

    async def on_stream(self, stream: Stream) -> None:
        request_id, kind = stream.header("requestID"), stream.header("streamType")
        if kind not in ("error", "data"):
            await stream.close()
            return
        pair = self._pairs.setdefault(request_id, {})
        pair[kind] = stream
        paired = self._paired.setdefault(request_id, asyncio.Event())
        if len(pair) == 2:
            paired.set()
        if kind == "error":
            return  # the data stream's task serves the pair
        try:
            await asyncio.wait_for(paired.wait(), timeout=30)
            await self._forward(pair["data"], pair["error"])
        except asyncio.TimeoutError:
            await stream.close()
        finally:
            self._pairs.pop(request_id, None)
            self._paired.pop(request_id, None)
            for s in pair.values():
                stream.session.remove(s)

    async def _forward(self, data: Stream, error: Stream) -> None:
        port_text = data.header("port")
        try:
            port = int(port_text)
            if not 0 < port < 65536:
                raise ValueError
        except ValueError:
            await self._fail(data, error, f"invalid port {port_text!r}")
            return
        try:
            sock = await knetns.on_thread_async(self.netns, _connect_local, port)
        except OSError as exc:
            await self._fail(data, error, f"error forwarding port {port} to pod {self.pod}: {exc}")
            return
        reader, writer = await asyncio.open_connection(sock=sock)

        async def upstream() -> None:  # client -> Pod
            with contextlib.suppress(OSError, ConnectionError):
                while chunk := await data.read():
                    writer.write(chunk)
                    await writer.drain()
                if writer.can_write_eof():
                    writer.write_eof()

        async def downstream() -> None:  # Pod -> client
            with contextlib.suppress(OSError, ConnectionError):
                while chunk := await reader.read(65536):
                    await data.write(chunk)

        to_pod = asyncio.create_task(upstream())
        try:
            await downstream()
            await data.close()
            await error.close()
            await asyncio.wait_for(to_pod, timeout=DRAIN_SECONDS)
        except asyncio.TimeoutError:
            pass
        finally:
            to_pod.cancel()
            writer.close()

    @staticmethod
    async def _fail(data: Stream, error: Stream, message: str) -> None:
        await error.write(message.encode())
        await error.close()
        await data.close()
