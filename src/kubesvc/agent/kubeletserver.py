"""The node agent's HTTP server: what the apiserver calls on a node (upstream
pkg/kubelet/server/server.go, the ``/containerLogs`` and ``/healthz`` handlers, and the
``/exec``, ``/attach`` and ``/portForward`` streams of ``kubectl exec``/``port-forward``: ``streaming.py``).

``kubectl logs`` goes to the apiserver, which finds the Pod's node, reads the port from the
Node's ``status.daemonEndpoints.kubeletEndpoint.Port`` and asks the agent over HTTPS, with
its kubelet-client certificate::

    GET https://<node IP>:<port>/containerLogs/{namespace}/{pod}/{container}?follow=true&tailLines=10&...

Every request is authenticated by client certificate and authorized as kubelet does
(``kubeletauth.py``): 401 ``Unauthorized`` without a certificate from the client CA, 403
``Forbidden (user=..., verb=get, resource=nodes, subresource(s)=[proxy])`` for a caller not
allowed ``get`` on ``nodes/proxy`` of this node.

The agent answers with the container's log as text, streamed (see ``logs.py`` for the file
format and the options). The current instance's log is ``<restart count>.log``;
``previous=true`` asks for the one before (``<restart count - 1>.log``). Errors, with
kubelet's words, as plain text the apiserver hands on:

* 404 ``pod "P" does not exist`` / ``container "C" not found in pod "P"``;
* 400 ``previous terminated container "C" in pod "P" not found``, or ``container "C" in pod
  "P" is waiting to start: ContainerCreating`` when it has no log yet;
* 400/422 for options that do not decode / do not validate (kubelet's terse JSON-ish text).

``/healthz`` answers ``ok`` to callers allowed ``nodes/proxy``, as on kubelet's port 10250
(its unauthenticated healthz port, 10248, is not served).
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from aiohttp import web

from kubesvc.agent.kubeletauth import AuthorizationFailed, Authorizer, authorization_error_text, forbidden_text, node_request
from kubesvc.agent.logs import InvalidLogOptions, LogOptions, container_log_path, read_logs
from kubesvc.agent.streaming import ResolveAttach, ResolveExec, ResolvePod, serve_attach, serve_exec, serve_port_forward
from kubesvc.serving.x509 import X509Authenticator
from kubesvc.api.errors import StatusError
from kubesvc.serving.params import parameter_bool
from kubesvc.serving.streaming import relay
from kubesvc.serving.listen import listen_socket
from kubesvc.util.clock import Clock, RealClock


@dataclass
class PodLogInfo:
    """What the server needs to know about a Pod the agent runs."""

    uid: str
    restart_counts: dict[str, int]  # container -> its current restart count
    running: Callable[[str], bool]  # is that container running now


Resolve = Callable[[str, str], "PodLogInfo | None"]  # (namespace, pod name) -> the Pod, if it runs here


def _text(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message, content_type="text/plain")


log = logging.getLogger("kubesvc.agent.server")


class KubeletServer:
    """The agent's HTTPS server for node ``node_name``: ``tls`` is its server context (client
    certificates asked for: ``kubeletauth.serving_context``), ``authorizer`` decides who may
    call it."""

    def __init__(self, bind_address: str, port: int, log_root: Path, resolve: Resolve, *, node_name: str, tls: ssl.SSLContext,
                 authorizer: Authorizer, clock: Clock | None = None, exec_target: ResolveExec | None = None,
                 pod_netns: ResolvePod | None = None, attach_target: ResolveAttach | None = None):
        self.bind_address = bind_address
        self.port = port
        self.node_name = node_name
        self._tls = tls
        self._authenticator = X509Authenticator()
        self._authorizer = authorizer
        self._log_root = Path(log_root)
        self._resolve = resolve
        self._clock = clock or RealClock()
        self._exec_target = exec_target or (lambda namespace, pod, container: None)
        self._pod_netns = pod_netns or (lambda namespace, pod: None)
        self._attach_target = attach_target or (lambda namespace, pod, container: None)
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Listen (port 0 picks a free one; ``self.port`` is then the real one)."""
        app = web.Application(middlewares=[self._auth_filter])
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._container_logs)
        for method in ("GET", "POST"):  # GET: a WebSocket; POST: a SPDY upgrade (refused with 400: streaming.py)
            app.router.add_route(method, "/exec/{namespace}/{pod}/{container}", lambda r: serve_exec(r, self._exec_target))
            app.router.add_route(method, "/portForward/{namespace}/{pod}", lambda r: serve_port_forward(r, self._pod_netns))
            app.router.add_route(method, "/attach/{namespace}/{pod}/{container}", lambda r: serve_attach(r, self._attach_target))
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = listen_socket(self.bind_address, self.port)  # as kubelet's Go listener: "" / 0.0.0.0 is dual-stack
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock, ssl_context=self._tls).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _auth_filter(self, request: web.Request, handler) -> web.StreamResponse:
        """kubelet's ``InstallAuthFilter``: authenticate, then authorize, every request."""
        try:
            user = self._authenticator.authenticate(request)
        except StatusError:
            user = None
        if user is None:
            return _text(401, "Unauthorized")
        attributes = node_request(request.method, request.path, self.node_name)
        try:
            allowed = await self._authorizer.allowed(user, attributes)
        except AuthorizationFailed as err:
            log.warning("authorizing %s for nodes/%s: %s", user.name, attributes.subresource, err)
            return _text(500, authorization_error_text(user, attributes))
        if not allowed:
            return _text(403, forbidden_text(user, attributes))
        return await handler(request)

    async def _healthz(self, request: web.Request) -> web.Response:
        return _text(200, "ok")

    async def _container_logs(self, request: web.Request) -> web.StreamResponse:
        namespace, pod_name, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
        query = dict(request.query)
        if "tail" in query:  # kubelet's older spelling of tailLines; "all" means no limit
            tail = query.pop("tail")
            if tail != "all":
                query["tailLines"] = tail
        try:
            options = LogOptions.from_query(query, self._clock.now())
        except InvalidLogOptions:
            return _text(422, '{"message": "Invalid request."}')
        except ValueError:
            return _text(400, '{"message": "Unable to decode query."}')
        previous = parameter_bool(query, "previous")
        pod = self._resolve(namespace, pod_name)
        if pod is None:
            return _text(404, f'pod "{pod_name}" does not exist')
        if container not in pod.restart_counts:
            return _text(404, f'container "{container}" not found in pod "{pod_name}"')
        restart = pod.restart_counts[container] - (1 if previous else 0)
        path = container_log_path(self._log_root, namespace, pod_name, pod.uid, container, restart)
        if previous and (restart < 0 or not path.exists()):
            return _text(400, f'previous terminated container "{container}" in pod "{pod_name}" not found')
        if not path.exists():
            return _text(400, f'container "{container}" in pod "{pod_name}" is waiting to start: ContainerCreating')

        def still_running() -> bool:
            """The same instance of the container is still running (a restart ends a follow)."""
            if previous:
                return False
            now = self._resolve(namespace, pod_name)
            return now is not None and now.uid == pod.uid and now.restart_counts.get(container) == restart and now.running(container)

        response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await relay(request, response, read_logs(path, options, is_running=still_running))
        return response
