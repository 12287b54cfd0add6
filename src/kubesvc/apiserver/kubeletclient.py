"""The apiserver as a client of node agents: how ``kubectl logs`` reaches a container's log
(upstream pkg/kubelet/client ``NodeConnectionInfoGetter`` and the apiserver's
``genericrest.LocationStreamer`` with ``GenericHttpResponseChecker``).

**Where.** A Node reports how to reach its agent: ``status.addresses`` and the port in
``status.daemonEndpoints.kubeletEndpoint.Port``. The first address of the most preferred type
wins: InternalIP, InternalDNS, Hostname, ExternalIP, ExternalDNS (upstream's
``--kubelet-preferred-address-types``, with the IP first: a kubesvc agent's Hostname is its
node name, which need not resolve). A Node without a port is an error here, where upstream
would guess 10250.

**How.** Plain HTTP ``GET`` with the apiserver's own bearer token (the agents trust that token
as a kubelet trusts the apiserver's client certificate); the answer is streamed to the client
as ``text/plain`` as it arrives.

**Failures**, worded as upstream's: an agent that cannot be reached is a 500 without a reason,
``Get "URL": dial tcp HOST:PORT: connect: connection refused`` (a Go error that is not a
Status); an agent's error answer becomes 400 with its text, 500 ``Internal error occurred:
TEXT``, or the generic answer for its code, e.g. 404 ``the server could not find the requested
resource ( pods/log NAME)``.
"""

from __future__ import annotations

import asyncio
import os
import socket

import aiohttp
from aiohttp import web
from yarl import URL

from kubesvc.api import errors
from kubesvc.api.errors import StatusError
from kubesvc.api.validation_meta import go_quote
from kubesvc.apiserver.streaming import relay

PREFERRED_ADDRESS_TYPES = ("InternalIP", "InternalDNS", "Hostname", "ExternalIP", "ExternalDNS")
MAX_ERROR_BODY = 50000  # upstream maxReadLength: how much of an agent's error answer is kept
CONNECT_TIMEOUT = 10.0


def unknown_error(message: str) -> StatusError:
    """What the apiserver answers for an error that is not a Status (ErrorToAPIStatus): 500,
    with no reason; kubectl prints ``Error from server: <message>``."""
    return StatusError(500, "", message)


def kubelet_address(node: dict) -> tuple[str, int]:
    """(host, port) of the node's agent, or the error upstream's GetConnectionInfo gives."""
    status = node.get("status") or {}
    addresses = status.get("addresses") or []
    host = next((a["address"] for kind in PREFERRED_ADDRESS_TYPES for a in addresses if a.get("type") == kind and a.get("address")), None)
    if host is None:
        known = " ".join(f"{{{a.get('type', '')} {a.get('address', '')}}}" for a in addresses)
        raise unknown_error(f"no preferred addresses found; known addresses: [{known}]")
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port") or 0
    if port <= 0:
        raise unknown_error(f"node {node['metadata']['name']} reports no kubelet port (status.daemonEndpoints.kubeletEndpoint.Port)")
    return host, port


# errors.NewGenericServerResponse: the reason and message a client makes of a bare status code
_GENERIC = {
    400: ("BadRequest", "the server rejected our request for an unknown reason"),
    401: ("Unauthorized", "the server has asked for the client to provide credentials"),
    404: ("NotFound", "the server could not find the requested resource"),
    405: ("MethodNotAllowed", "the server does not allow this method on the requested resource"),
    409: ("Conflict", "the server reported a conflict"),
    422: ("Invalid", "the server rejected our request due to an error in our request"),
    429: ("TooManyRequests", "the server has received too many requests and has asked us to try again later"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "the server was unable to return a response in the time allotted, but may still be processing the request"),
}


def agent_error(code: int, body: str, resource: str, name: str) -> StatusError:
    """Upstream ``GenericHttpResponseChecker.Check`` for an answer outside 200..206."""
    if code == 500:
        return errors.internal(body)
    if code == 400:
        return errors.bad_request(body)
    if code == 403:
        reason, message = "Forbidden", body
    elif code in _GENERIC:
        reason, message = _GENERIC[code]
    elif code > 500:
        reason, message = "InternalError", f"an error on the server ({go_quote(body)}) has prevented the request from succeeding"
    else:
        reason, message = "", f"the server responded with the status code {code} but did not return more information"
    # the verb is "" here, hence upstream's double space
    return StatusError(code, reason, f"{message} ( {resource} {name})", {"name": name, "kind": resource})


def dial_error(url: URL, exc: BaseException) -> StatusError:
    """A connection failure in Go's words: ``Get "URL": dial tcp HOST:PORT: connect: ...``."""
    os_error = getattr(exc, "os_error", None)
    if isinstance(os_error, socket.gaierror):
        return unknown_error(f'Get "{url}": dial tcp: lookup {url.host}: no such host')
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        why = "i/o timeout"
    elif isinstance(os_error, OSError) and os_error.errno:
        text = os.strerror(os_error.errno)
        why = text[:1].lower() + text[1:]
    else:
        why = str(exc) or type(exc).__name__
    host = f"[{url.host}]" if url.host and ":" in url.host else url.host
    return unknown_error(f'Get "{url}": dial tcp {host}:{url.port}: connect: {why}')


class KubeletClient:
    """One HTTP session to every node agent, owned by the apiserver app."""

    def __init__(self, token: str, connect_timeout: float = CONNECT_TIMEOUT):
        self._token = token
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def stream(self, request: web.Request, url: URL, *, resource: str, name: str) -> web.StreamResponse:
        """GET ``url`` from the agent and relay its answer to the client as text/plain."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        try:
            upstream = await self._session.get(url, headers={"Authorization": f"Bearer {self._token}"}, allow_redirects=False)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise dial_error(url, exc) from None
        try:
            if not 200 <= upstream.status <= 206:
                body = (await upstream.content.read(MAX_ERROR_BODY)).decode("utf-8", "replace")
                raise agent_error(upstream.status, body, resource, name)
            response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
            await response.prepare(request)
            await relay(request, response, upstream.content.iter_any())
            return response
        finally:
            upstream.close()  # a followed stream ends here: drop the agent's connection too
