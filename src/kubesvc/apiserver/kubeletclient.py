"""The apiserver as a client of node agents: how ``kubectl logs`` reaches a container's log
(upstream pkg/kubelet/client ``NodeConnectionInfoGetter`` and the apiserver's
``genericrest.LocationStreamer`` with ``GenericHttpResponseChecker``).

**Where.** A Node reports how to reach its agent: ``status.addresses`` and the port in
``status.daemonEndpoints.kubeletEndpoint.Port``. The first address of the most preferred type
wins: InternalIP, InternalDNS, Hostname, ExternalIP, ExternalDNS (upstream's
``--kubelet-preferred-address-types``, with the IP first: a kubesvc agent's Hostname is its
node name, which need not resolve). A Node without a port is an error here, where upstream
would guess 10250.

**How.** HTTPS ``GET``, never plain HTTP: the apiserver presents its kubelet-client
certificate (``--kubelet-client-certificate``/``--kubelet-client-key``; CN
``kube-apiserver-kubelet-client``) and verifies the agent's serving certificate against
``--kubelet-certificate-authority`` (the cluster CA by default), hostname or IP included. No
bearer token ever goes to an agent: whatever listens at an address a Node object claims gets
a TLS ClientHello and nothing more unless it proves to be that node. The answer is streamed
to the client as ``text/plain`` as it arrives.

**Failures**, worded as upstream's: an agent that cannot be reached is a 500 without a reason,
``Get "URL": dial tcp HOST:PORT: connect: connection refused`` (a Go error that is not a
Status); an agent's error answer becomes 400 with its text, 500 ``Internal error occurred:
TEXT``, or the generic answer for its code, e.g. 404 ``the server could not find the requested
resource ( pods/log NAME)``; a TLS failure is Go's, e.g. ``Get "URL": tls: failed to verify
certificate: x509: certificate signed by unknown authority``, or ``Get "URL": http: server
gave HTTP response to HTTPS client`` for an agent that speaks plain HTTP.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import aiohttp
from aiohttp import web
from yarl import URL

from kubesvc.api import errors
from kubesvc.api.errors import StatusError
from kubesvc.util.golang import quote as go_quote
from kubesvc.util import golang, ipnet
from kubesvc.serving.streaming import relay

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


def tls_error_text(exc: BaseException, host: str) -> str | None:
    """Go's words for a failed TLS handshake with the agent at ``host``, or None if ``exc`` is
    not one (aiohttp wraps the ``ssl`` error in a connector error)."""
    for candidate in (getattr(exc, "certificate_error", None), getattr(exc, "os_error", None), exc):
        if isinstance(candidate, ssl.SSLCertVerificationError):
            message = candidate.verify_message or str(candidate)
            if "mismatch" in message:
                why = f"certificate is not valid for {host}"
            elif "expired" in message or "not yet valid" in message:
                why = "certificate has expired or is not yet valid"
            else:  # unable to get local issuer certificate, self-signed certificate, ...
                why = "certificate signed by unknown authority"
            return f"tls: failed to verify certificate: x509: {why}"
        if isinstance(candidate, ssl.SSLError):
            reason = getattr(candidate, "reason", None) or ""
            if reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST"):
                return "http: server gave HTTP response to HTTPS client"
            return f"remote error: tls: {(reason or str(candidate)).lower().replace('_', ' ')}"
    return None


def dial_error(url: URL, exc: BaseException) -> StatusError:
    """A connection failure in Go's words: ``Get "URL": dial tcp HOST:PORT: connect: ...``."""
    tls = tls_error_text(exc, url.host or "")
    if tls is not None:
        return unknown_error(f'Get "{url}": {tls}')
    cause = getattr(exc, "os_error", None) or exc
    address = ipnet.join_host_port(url.host or "", url.port)
    return unknown_error(f'Get "{url}": {golang.dial_error(address, cause, host=url.host)}')


def kubelet_tls_context(client_cert: str | Path, client_key: str | Path, certificate_authority: str | Path) -> ssl.SSLContext:
    """The apiserver's TLS client side towards agents: its kubelet-client certificate, and the
    agents' serving certificates verified against ``certificate_authority``, name included
    (upstream leaves them unverified when the flag is unset; kubesvc always has one: the
    cluster CA by default)."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(certificate_authority))
    context.load_cert_chain(str(client_cert), str(client_key))
    return context


# The agents authorize the apiserver's kubelet client by a SubjectAccessReview for
# nodes/proxy (agent/kubeletauth.py): kubeadm binds its user to system:kubelet-api-admin at
# init (ClusterRoleBinding kubeadm:apiserver-kubelet-client), k3s with kube-apiserver-kubelet-admin
# (k3s's name is kept). The apiserver ensures it at start, for whichever certificate it calls with.
KUBELET_API_ADMIN_ROLE = "system:kubelet-api-admin"
KUBELET_API_ADMIN_BINDING = "kube-apiserver-kubelet-admin"
RBAC_GROUP = "rbac.authorization.k8s.io"


def kubelet_client_user(certificate: str | Path) -> str:
    """The user the agents see for the apiserver's kubelet-client certificate (its CN)."""
    from cryptography import x509

    from kubesvc.serving.x509 import user_from_certificate

    user = user_from_certificate(x509.load_pem_x509_certificate(Path(certificate).read_bytes()))
    if user is None:
        raise ValueError(f"--kubelet-client-certificate {certificate}: the certificate has no common name")
    return user.name


def kubelet_api_admin_subject(user: str) -> dict:
    return {"kind": "User", "apiGroup": RBAC_GROUP, "name": user}


def kubelet_api_admin_binding(user: str) -> dict:
    return {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": KUBELET_API_ADMIN_BINDING},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": KUBELET_API_ADMIN_ROLE},
            "subjects": [kubelet_api_admin_subject(user)]}


async def ensure_kubelet_api_admin_binding(registry, user: str, field_manager: str = "kube-apiserver") -> None:
    """Bind ``user`` to ``system:kubelet-api-admin``: the binding is created if missing, and the
    user added to its subjects if someone replaced them (other subjects are kept). Several
    apiservers starting at once on one etcd may all find it missing: the one whose create loses
    (AlreadyExists) goes on with the one that won."""
    bindings = registry.store(RBAC_GROUP, "clusterrolebindings")
    if bindings is None:
        return
    subject = kubelet_api_admin_subject(user)
    try:
        current = await bindings.get(None, KUBELET_API_ADMIN_BINDING)
    except StatusError as exc:
        if exc.code != 404:
            raise
        try:
            await bindings.create(None, kubelet_api_admin_binding(user), field_manager=field_manager)
            return
        except StatusError as lost:
            if lost.code != 409:
                raise
        current = await bindings.get(None, KUBELET_API_ADMIN_BINDING)
    if subject in (current.get("subjects") or []):
        return

    def add_subject(obj: dict) -> dict:
        if subject not in (obj.get("subjects") or []):
            obj["subjects"] = [*(obj.get("subjects") or []), subject]
        return obj

    await bindings.guaranteed_update(None, KUBELET_API_ADMIN_BINDING, add_subject, field_manager=field_manager)


class KubeletClient:
    """One HTTPS session to every node agent, owned by the apiserver app. Without a TLS
    context (no kubelet-client credentials) it refuses to call any agent."""

    def __init__(self, tls: ssl.SSLContext | None = None, connect_timeout: float = CONNECT_TIMEOUT):
        self._tls = tls
        # connect covers the TLS handshake too: an address that accepts and says nothing is given up
        self._timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout, sock_connect=connect_timeout)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def tls_for(self, url: URL) -> ssl.SSLContext:
        """The TLS client context towards the agent at ``url`` (an error unless https with credentials)."""
        if url.scheme != "https" or self._tls is None:
            raise unknown_error(f'Get "{url}": the apiserver calls node agents over HTTPS with its kubelet client certificate only')
        return self._tls

    def session_for(self, url: URL) -> aiohttp.ClientSession:
        """The HTTPS session to the agents, for ``url`` (an error unless https with credentials)."""
        if url.scheme != "https" or self._tls is None:
            raise unknown_error(f'Get "{url}": the apiserver calls node agents over HTTPS with its kubelet client certificate only')
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout, connector=aiohttp.TCPConnector(ssl=self._tls, limit=0))
        return self._session

    async def stream(self, request: web.Request, url: URL, *, resource: str, name: str) -> web.StreamResponse:
        """GET ``url`` from the agent and relay its answer to the client as text/plain."""
        self.session_for(url)
        try:
            upstream = await self._session.get(url, allow_redirects=False)
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
