"""``pods/exec``, ``pods/attach`` and ``pods/portforward``: the apiserver's side of ``kubectl
exec``, ``kubectl attach`` and ``kubectl port-forward`` (upstream
pkg/registry/core/pod/rest/subresources.go ``ExecREST``, ``AttachREST``, ``PortForwardREST``;
``ExecLocation``/``AttachLocation``/``PortForwardLocation`` in pkg/registry/core/pod/strategy.go;
workloads.md §9). Attach is exec without a command, to ``/attach/NS/POD/CONTAINER``.

**What kubectl 1.32 sends** (logged from it against a bare server):

* exec: ``GET .../pods/P/exec?command=env&container=c&stderr=true&stdout=true`` (``stdin=true``,
  ``tty=true`` when asked) as a WebSocket upgrade offering only ``v5.channel.k8s.io``; if that
  upgrade fails (any answer but 101), ``POST`` to the same URL with ``Upgrade: SPDY/3.1`` and
  ``X-Stream-Protocol-Version: v5.channel.k8s.io`` (and older versions).
* port-forward: ``GET .../pods/P/portforward`` (no port: ports travel in stream headers) as a
  WebSocket offering ``SPDY/3.1+portforward.k8s.io``; then the same fallback to a SPDY ``POST``.

**Authorization.** The request filter authorizes the method's verb (``get`` for the WebSocket
GET, ``create`` for the POST) on ``pods/exec``; an upgraded GET (a WebSocket, or a SPDY upgrade
sent as GET) must *also* be allowed ``create``, as kube-apiserver does with ``AuthorizePodWebsocketUpgradeCreatePermission`` (a
Kubernetes 1.35 default, closing the hole where ``get`` alone let a user exec): a user with only
``get`` is refused with ``pods "P" is forbidden: User "U" cannot create resource "pods/exec"``.
The bootstrap roles ``admin`` and ``edit`` grant both.

**Where.** The Pod must exist (404), the container be one of its containers (400 ``container X
is not valid for pod P``; the only container when none is named, else 400 ``a container name
must be specified``), and the Pod be on a node (400 ``pod P does not have a host assigned``).
The node agent's URL is kubelet's: ``/exec/NS/POD/CONTAINER?command=...&input=1&output=1&error=1&tty=1``
(kube-apiserver's ``streamParams``), ``/portForward/NS/POD``.

**How.** Over HTTPS with the kubelet-client certificate (``kubeletclient.py``), never plain
HTTP. kube-apiserver proxies the upgraded byte stream; kubesvc relays the WebSocket message by
message: it opens the agent's WebSocket offering what the client offered, and accepts the
client's with the subprotocol the agent chose, then copies binary and text messages both ways
until either side closes (with the same close code). An agent that refuses the upgrade is
answered through to the client with its status and text (``container not found ("C")``, which
kubectl prints after ``unable to upgrade connection:``); the SPDY ``POST`` fallback is passed to
the agent as the same upgrade (``serving/upgrade.py``), its bytes copied both ways.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

import aiohttp
from aiohttp import WSMsgType, web
from multidict import MultiMapping
from yarl import URL

from kubesvc.api import errors
from kubesvc.apiserver.auth.attributes import Attributes
from kubesvc.apiserver.auth.authorizer import forbidden
from kubesvc.apiserver.kubeletclient import MAX_ERROR_BODY, dial_error, kubelet_address
from kubesvc.apiserver.registry.pod import choose_container
from kubesvc.serving import upgrade
from kubesvc.apiserver import appkeys

MAX_MESSAGE = 4 << 20  # a WebSocket message either way (kubectl writes at most 32 KiB of stdin at a time)


def exec_query(query: MultiMapping[str]) -> dict[str, list[str]]:
    """The agent's query for a ``PodExecOptions`` query (kube-apiserver's ``streamParams``):
    ``command`` repeated, ``input``/``output``/``error``/``tty`` as "1"."""
    params: dict[str, list[str]] = {"command": list(query.getall("command", []))}
    for ours, theirs in (("stdin", "input"), ("stdout", "output"), ("stderr", "error"), ("tty", "tty")):
        if query.get(ours, "").lower() in ("true", "1"):
            params[theirs] = ["1"]
    return params


def is_websocket(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


def offered_protocols(request: web.Request) -> list[str]:
    return [p.strip() for value in request.headers.getall("Sec-WebSocket-Protocol", []) for p in value.split(",") if p.strip()]


def authorize_websocket_create(request: web.Request) -> None:
    """An upgraded GET to exec/attach/portforward also needs ``create``: the WebSocket, and a SPDY
    upgrade on a GET too (kubectl sends SPDY as POST, already ``create``; a GET carrying it would
    otherwise stream with ``get`` alone). A plain POST is ``create`` already."""
    if request.method != "GET" or not (is_websocket(request) or upgrade.is_spdy_upgrade(request)):
        return
    info = dataclasses.replace(request["request_info"], verb="create")
    user = request["user"]
    verdict = request.app[appkeys.AUTHORIZER].authorize(Attributes(user, info))
    if not verdict.allowed:
        raise forbidden(user, info, verdict.reason)


async def _node_of(target, pod: dict) -> tuple[str, int]:
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not node_name:
        raise errors.bad_request(f"pod {target.name} does not have a host assigned")
    node = await target.store.registry.store("", "nodes").get(None, node_name)
    return kubelet_address(node)


async def exec_location(request: web.Request, target, kind: str = "exec") -> URL:
    """The agent's ``/exec`` (or ``/attach``) URL of the container (``ExecLocation``/``AttachLocation``)."""
    pod = await target.store.get(target.namespace, target.name)
    container = choose_container(pod, request.query.get("container", ""))
    if kind == "exec" and not request.query.getall("command", []):
        raise errors.bad_request("you must specify at least 1 command")
    host, port = await _node_of(target, pod)
    query = exec_query(request.query)
    if kind != "exec":
        query.pop("command")
    return URL.build(scheme="https", host=host, port=port, path=f"/{kind}/{target.namespace}/{target.name}/{container}", query=query)


async def port_forward_location(request: web.Request, target) -> URL:
    pod = await target.store.get(target.namespace, target.name)
    host, port = await _node_of(target, pod)
    query = {"ports": request.query.getall("ports")} if "ports" in request.query else {}
    return URL.build(scheme="https", host=host, port=port, path=f"/portForward/{target.namespace}/{target.name}", query=query)


async def connect_exec(request: web.Request, target) -> web.StreamResponse:
    """``pods/exec``: GET (WebSocket) or POST (SPDY)."""
    authorize_websocket_create(request)
    return await _relay(request, await exec_location(request, target))


async def connect_attach(request: web.Request, target) -> web.StreamResponse:
    """``pods/attach``: GET (WebSocket) or POST (SPDY)."""
    authorize_websocket_create(request)
    return await _relay(request, await exec_location(request, target, "attach"))


async def connect_port_forward(request: web.Request, target) -> web.StreamResponse:
    """``pods/portforward``: GET (WebSocket) or POST (SPDY)."""
    authorize_websocket_create(request)
    return await _relay(request, await port_forward_location(request, target))


async def _agent_refusal(session: aiohttp.ClientSession, method: str, url: URL) -> web.Response:
    """The agent's answer to a plain request for ``url``: how it refuses the stream, passed on."""
    try:
        async with session.request(method, url, allow_redirects=False) as answer:
            body = await answer.content.read(MAX_ERROR_BODY)
            return web.Response(status=answer.status, body=body,
                                headers={"Content-Type": answer.headers.get("Content-Type", "text/plain")})
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        raise dial_error(url, exc) from None


async def _relay(request: web.Request, url: URL) -> web.StreamResponse:
    kubelet_client = request.app[appkeys.KUBELET_CLIENT]
    session = kubelet_client.session_for(url)
    if upgrade.is_spdy_upgrade(request):
        return await _relay_spdy(request, url, kubelet_client.tls_for(url))
    if not is_websocket(request):  # not a stream at all: the agent says why not
        return await _agent_refusal(session, request.method, url)
    protocols = offered_protocols(request)
    try:
        upstream = await session.ws_connect(url, protocols=protocols, autoping=True, max_msg_size=MAX_MESSAGE)
    except aiohttp.WSServerHandshakeError as exc:
        if exc.status == 101:  # the agent chose nothing the client offered
            raise errors.bad_request(f"unable to upgrade: no common protocol among {protocols}") from None
        # the handshake error carries no body: ask again without the upgrade for the agent's words
        return await _agent_refusal(session, "GET", url)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        raise dial_error(url, exc) from None
    try:
        client = web.WebSocketResponse(protocols=(upstream.protocol,) if upstream.protocol else (), autoping=True,
                                       max_msg_size=MAX_MESSAGE)
        await client.prepare(request)
        await _pipe(client, upstream)
        return client
    finally:
        await upstream.close()


async def _relay_spdy(request: web.Request, url: URL, tls) -> web.StreamResponse:
    """kubectl's SPDY fallback, proxied as kube-apiserver's UpgradeAwareHandler does: the same
    upgrade asked of the agent, its 101 (with the protocol it chose) or its refusal answered to
    the client, then the two connections' bytes copied both ways until either ends."""
    headers = [("Connection", "Upgrade"), ("Upgrade", request.headers.get("Upgrade", "SPDY/3.1"))]
    headers += [("X-Stream-Protocol-Version", p) for p in upgrade.requested_protocols(request.headers)]
    try:
        answer = await upgrade.dial(url.host or "", url.port or 443, tls, request.method, url.raw_path_qs, headers)
    except (OSError, asyncio.TimeoutError, ValueError) as exc:
        raise dial_error(url, exc) from None
    if answer.status != 101 or answer.reader is None or answer.writer is None:
        return web.Response(status=answer.status, body=answer.body,
                            headers={"Content-Type": answer.headers.get("Content-Type", "text/plain")})
    agent_reader, agent_writer = answer.reader, answer.writer
    try:
        response, client = await upgrade.accept(request, answer.headers.get("X-Stream-Protocol-Version", ""))

        async def to_agent() -> None:
            while data := await client.read():
                agent_writer.write(data)
                await agent_writer.drain()

        async def to_client() -> None:
            while data := await agent_reader.read(65536):
                await client.write(data)

        tasks = [asyncio.create_task(to_agent()), asyncio.create_task(to_client())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            client.close()
        return response
    finally:
        agent_writer.close()


async def _pipe(client: web.WebSocketResponse, upstream: aiohttp.ClientWebSocketResponse) -> None:
    """Messages both ways until one side closes; the other is closed with its code."""

    async def copy(source, sink) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            async for message in source:
                if message.type == WSMsgType.BINARY:
                    await sink.send_bytes(message.data)
                elif message.type == WSMsgType.TEXT:
                    await sink.send_str(message.data)

    to_client = asyncio.create_task(copy(upstream, client))
    to_agent = asyncio.create_task(copy(client, upstream))
    try:
        done, _ = await asyncio.wait([to_client, to_agent], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (to_client, to_agent):
            task.cancel()
        await asyncio.gather(to_client, to_agent, return_exceptions=True)
    if to_client in done:  # the agent finished (the status was sent): close the client the same way
        await client.close(code=upstream.close_code or aiohttp.WSCloseCode.OK)
    else:
        await upstream.close(code=client.close_code or aiohttp.WSCloseCode.OK)
        await client.close()
