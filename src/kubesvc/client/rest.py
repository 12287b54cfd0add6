"""An asyncio client for the Kubernetes REST API (client-go's ``rest.Interface`` and typed clients).

The API is uniform: every kind is a *resource* (a lower-case plural) in an API group and
version, namespaced or cluster-scoped, and its URLs follow from those four facts:

    /api/v1/namespaces/{ns}/services/{name}[/status]        core group ("")
    /apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices
    /api/v1/nodes/{name}                                    cluster-scoped
    /api/v1/services                                        all namespaces (list and watch)

The verbs map onto HTTP: get/list = GET, create = POST, update = PUT (with
``metadata.resourceVersion`` as an optimistic-concurrency precondition: stale means 409
Conflict), patch = PATCH (the Content-Type picks merge, strategic-merge, JSON or
server-side-apply semantics), delete = DELETE. Writes carry a ``fieldManager`` so the server
can record who owns which fields.

A list is a snapshot at one ``metadata.resourceVersion``; with ``limit`` it comes in pages
chained by an opaque ``continue`` token. A *watch* (``?watch=true``) is a long response of
line-delimited JSON events ``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": …}``
that starts after the given resourceVersion. A BOOKMARK carries only a newer resourceVersion
to resume from; an ERROR carries a ``Status`` (410 Expired when the requested version has been
compacted away, which means: list again).

Credentials: a client certificate and/or a bearer ``token`` from the kubeconfig, fixed for the
client's life; or a *token source* (client-go's ``transport.ResettableTokenSourceWrapTransport``)
asked for the bearer token before every request and every watch, so a token that is renewed
(kube-controller-manager's ServiceAccount tokens, controllers/clientbuilder.py) takes effect
without a new client. A static ``token`` wins over the source, as client-go lets ``--token``
override it. A 401 answer tells the source to forget the token that was refused (unless it has
already replaced it), so the next request asks for a fresh one.

Failures are translated once, here: a non-2xx answer (or a watch ERROR event) becomes
``ApiError`` built from the Kubernetes ``Status`` body; a transport failure (refused, reset,
TLS, timeout, truncated stream) becomes ``ConnectionFailed``. Nothing above this module sees an
aiohttp exception.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import msgspec

from kubesvc import __version__
from kubesvc.client.flowcontrol import TokenBucketRateLimiter
from kubesvc.client.kubeconfig import ClientConfig

log = logging.getLogger("kubesvc.client.rest")

USER_AGENT = f"kubesvc/{__version__}"
DEFAULT_FIELD_MANAGER = "kubesvc"
DEFAULT_PAGE_SIZE = 500

PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}

# What client-go assumes when an error answer carries no Status body
# (apimachinery errors.NewGenericServerResponse).
_REASON_FOR_CODE = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Gone",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ClientError(Exception):
    """Base of everything this client raises about a request."""


class ApiError(ClientError):
    """The server answered with an error ``Status`` (HTTP status, or a watch ERROR event)."""

    def __init__(self, status: int, reason: str, message: str, body: Any = None):
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body

    @classmethod
    def from_status(cls, status: int, body: Any) -> ApiError:
        """Build from an HTTP status and its (decoded, if JSON) body."""
        if isinstance(body, dict) and body.get("kind") == "Status":
            code = body.get("code") or status
            return cls(code, body.get("reason") or _REASON_FOR_CODE.get(code, "Unknown"), body.get("message", ""), body)
        text = body if isinstance(body, str) else ""
        return cls(status, _REASON_FOR_CODE.get(status, "Unknown"), text.strip()[:500], body)


class ConnectionFailed(ClientError):
    """The request did not get a complete answer: refused, reset, TLS failure, timeout, or a
    watch stream that broke off mid-way."""


class TokenSource(Protocol):
    """Where a client gets its bearer token, per request."""

    async def token(self) -> str:
        """The token to send now; raises ``ClientError`` when none can be had."""

    def reset(self, token: str) -> None:
        """``token`` was refused (401): drop it if it is still the current one (client-go's
        ``ResetTokenOlderThan`` the request's start: a token fetched since then is kept)."""


def is_not_found(err: BaseException) -> bool:
    return isinstance(err, ApiError) and err.reason == "NotFound"


def is_conflict(err: BaseException) -> bool:
    """409 Conflict: a stale resourceVersion precondition (re-read and retry)."""
    return isinstance(err, ApiError) and err.reason == "Conflict"


def is_already_exists(err: BaseException) -> bool:
    return isinstance(err, ApiError) and err.reason == "AlreadyExists"


def is_namespace_terminating(err: BaseException) -> bool:
    """A create refused because its namespace is being deleted: the 403 carries the status
    cause ``NamespaceTerminating`` (``apierrors.HasStatusCause(err,
    v1.NamespaceTerminatingCause)``; a cause's ``type`` is ``reason`` in JSON)."""
    if not isinstance(err, ApiError) or not isinstance(err.body, dict):
        return False
    causes = (err.body.get("details") or {}).get("causes") or []
    return any(isinstance(cause, dict) and cause.get("reason") == "NamespaceTerminating" for cause in causes)


def is_gone(err: BaseException) -> bool:
    """410: the resourceVersion (or continue token) asked for is compacted away (reason
    Expired, or Gone); the only recovery is a fresh list."""
    return isinstance(err, ApiError) and err.status == 410


@dataclass(frozen=True)
class Resource:
    """One API resource: enough to build every URL for it."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The URL path; a namespaced resource without a namespace means all namespaces."""
        parts = ["/api/v1" if not self.group else f"/apis/{self.group}/{self.version}"]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name:
            parts.append(name)
            if subresource:
                parts.append(subresource)
        return "/".join(parts)


SERVICES = Resource("", "v1", "services", True, "Service")
ENDPOINTS = Resource("", "v1", "endpoints", True, "Endpoints")
PODS = Resource("", "v1", "pods", True, "Pod")
EVENTS = Resource("", "v1", "events", True, "Event")
NODES = Resource("", "v1", "nodes", False, "Node")
NAMESPACES = Resource("", "v1", "namespaces", False, "Namespace")
ENDPOINTSLICES = Resource("discovery.k8s.io", "v1", "endpointslices", True, "EndpointSlice")
LEASES = Resource("coordination.k8s.io", "v1", "leases", True, "Lease")
IPADDRESSES = Resource("networking.k8s.io", "v1", "ipaddresses", False, "IPAddress")
SERVICECIDRS = Resource("networking.k8s.io", "v1", "servicecidrs", False, "ServiceCIDR")


def _query(params: Mapping[str, Any] | None) -> dict[str, str]:
    """Drop None values; booleans as the API spells them."""
    out: dict[str, str] = {}
    for key, value in (params or {}).items():
        if value is None:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def _decode(raw: bytes) -> Any:
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return raw.decode("utf-8", "replace")


IDLE_CONNECTION_TIMEOUT = 60.0  # seconds a kept-alive connection may idle: below the apiserver's 90 s, so it is the client that closes


class RestClient:
    """One aiohttp session to one apiserver. Use as ``async with RestClient(config) as c``.

    ``field_manager`` is sent on every write (the server records it in managedFields);
    ``timeout`` bounds each non-watch request; ``token_source`` gives the bearer token of each
    request when the config holds none; ``rate_limiter`` (client-go's QPS/burst token bucket,
    ``client.flowcontrol``) is waited on before every request and every watch.
    """

    def __init__(self, config: ClientConfig, *, field_manager: str = DEFAULT_FIELD_MANAGER, user_agent: str = USER_AGENT, timeout: float = 30.0,
                 token_source: TokenSource | None = None, rate_limiter: TokenBucketRateLimiter | None = None):
        self.config = config
        self.field_manager = field_manager
        self.user_agent = user_agent
        self._base = config.server.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=min(timeout, 10.0))
        self._headers = {"User-Agent": user_agent, "Accept": "application/json"}
        if config.token:
            self._headers["Authorization"] = f"Bearer {config.token}"
        self._token_source = None if config.token else token_source
        self._ssl = config.ssl_context()
        self._session: aiohttp.ClientSession | None = None
        self._rate_limiter = rate_limiter
        self._watches: set[aiohttp.ClientResponse] = set()  # open watch streams (a rotation ends them)

    async def __aenter__(self) -> RestClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def rotate_client_certificate(self, cert_pem: bytes, key_pem: bytes) -> None:
        """Use a renewed client certificate, in place (client-go's ``transport/cert_rotation.go``):
        every new TLS connection presents it, and the open ones (kept-alive requests, watches)
        are closed so that they reconnect with it; the informers' watches resume from their
        resourceVersion as after any dropped connection."""
        import dataclasses

        from kubesvc.serving.pki import load_pair_into

        if self._ssl is None:
            return
        load_pair_into(self._ssl, cert_pem, key_pem)
        self.config = dataclasses.replace(self.config, client_cert_pem=cert_pem, client_key_pem=key_pem)
        old, self._session = self._session, None
        log.info("certificate rotation detected, shutting down client connections to start using new credentials")
        for response in list(self._watches):  # aiohttp's close does not wake a reader waiting on a stream: end each one
            response.content.set_exception(aiohttp.ClientConnectionError("connection closed: the client certificate was rotated"))
        if old is not None:
            try:  # aborted, not shut down: a TLS shutdown waits for the peer, and a watch's stream would not end until it answers
                await old.connector.close(abort_ssl=True)
            except TypeError:  # an aiohttp before 3.12: no abort_ssl
                pass
            await old.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            # No connection cap: every open watch holds a connection for minutes. Idle connections
            # are kept a minute (aiohttp's default is 15 s; Go's http.Transport, client-go's, keeps
            # them 90 s, the apiserver's own idle timeout): a burst of requests some seconds after
            # the last one reuses them instead of paying a TLS handshake each, on both sides.
            connector = aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else False, limit=0,
                                             keepalive_timeout=IDLE_CONNECTION_TIMEOUT)
            self._session = aiohttp.ClientSession(headers=self._headers, connector=connector)
        return self._session

    async def _credentials(self) -> tuple[str | None, dict[str, str]]:
        """The token source's token for one request (None without a source) and its header."""
        if self._token_source is None:
            return None, {}
        token = await self._token_source.token()
        return token, {"Authorization": f"Bearer {token}"}

    def _refused(self, token: str | None, status: int) -> None:
        if token is not None and status == 401:
            self._token_source.reset(token)

    async def request(self, method: str, path: str, params: Mapping[str, Any] | None = None, body: Any = None, content_type: str = "application/json") -> Any:
        """One request; the decoded JSON answer, or ``ApiError``/``ConnectionFailed``."""
        data = None if body is None else msgspec.json.encode(body)
        if self._rate_limiter is not None:
            await self._rate_limiter.wait()
        token, headers = await self._credentials()
        if data is not None:
            headers["Content-Type"] = content_type
        try:
            async with self._http().request(method, self._base + path, params=_query(params), data=data, headers=headers or None, timeout=self._timeout) as response:
                payload = _decode(await response.read())
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise ConnectionFailed(f"{method} {self._base}{path}: {_describe(exc)}") from exc
        if response.status >= 300:
            self._refused(token, response.status)
            raise ApiError.from_status(response.status, payload)
        return payload

    async def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return await self.request("GET", path, params)

    async def list(self, path: str, params: Mapping[str, Any] | None = None) -> dict:
        """Every item of a list, following ``continue`` pages (``limit`` is the page size).

        The answer is one List whose ``metadata.resourceVersion`` is the snapshot all pages
        came from. If a continue token expires mid-way (410), the list restarts unpaged, as
        client-go's pager does.
        """
        params = dict(params or {})
        params["limit"] = params.get("limit") or DEFAULT_PAGE_SIZE
        first = await self.get(path, params)
        items = list(first.get("items") or [])
        token = (first.get("metadata") or {}).get("continue")
        while token:
            try:
                page = await self.get(path, {**params, "continue": token})
            except ApiError as err:
                if not is_gone(err):
                    raise
                return await self.get(path, {k: v for k, v in params.items() if k != "limit"})
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
        metadata = {k: v for k, v in (first.get("metadata") or {}).items() if k not in ("continue", "remainingItemCount")}
        return {**first, "metadata": metadata, "items": items}

    def _write_params(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        return {"fieldManager": self.field_manager, **(params or {})}

    async def create(self, path: str, body: Any, params: Mapping[str, Any] | None = None) -> Any:
        return await self.request("POST", path, self._write_params(params), body)

    async def update(self, path: str, body: Any, params: Mapping[str, Any] | None = None) -> Any:
        return await self.request("PUT", path, self._write_params(params), body)

    async def patch(self, path: str, body: Any, patch_type: str = "merge", params: Mapping[str, Any] | None = None) -> Any:
        """``patch_type``: merge, strategic, json, apply (server-side apply), or a Content-Type."""
        content_type = PATCH_CONTENT_TYPES.get(patch_type, patch_type)
        return await self.request("PATCH", path, self._write_params(params), body, content_type)

    async def delete(self, path: str, params: Mapping[str, Any] | None = None, body: Any = None) -> Any:
        """The deleted object (Services, Pods, or anything with finalizers) or a Status; ``body``
        is a DeleteOptions (preconditions)."""
        return await self.request("DELETE", path, params, body=body)

    async def watch(self, path: str, params: Mapping[str, Any] | None = None) -> AsyncIterator[tuple[str, dict]]:
        """Stream ``(type, object)`` events until the server ends the watch.

        BOOKMARK events are yielded too (their object only carries a resourceVersion). An
        ERROR event raises ``ApiError`` (410 when the start version was compacted). Wrap the
        iterator in ``contextlib.aclosing`` when leaving it early, to free the connection.
        """
        query = _query({**(params or {}), "watch": True})
        # The server ends the stream at timeoutSeconds; a stream that outlives it by far is dead.
        limit = float(query["timeoutSeconds"]) + 30.0 if "timeoutSeconds" in query else None
        timeout = aiohttp.ClientTimeout(total=limit, sock_connect=self._timeout.sock_connect)
        url = self._base + path
        if self._rate_limiter is not None:
            await self._rate_limiter.wait()
        token, headers = await self._credentials()
        try:
            async with self._http().get(url, params=query, headers=headers or None, timeout=timeout) as response:
                if response.status >= 300:
                    self._refused(token, response.status)
                    raise ApiError.from_status(response.status, _decode(await response.read()))
                self._watches.add(response)
                try:
                    async for line in _lines(response.content):
                        yield _watch_event(line, url)
                finally:
                    self._watches.discard(response)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise ConnectionFailed(f"watch {url}: {_describe(exc)}") from exc

    def resource(self, resource: Resource) -> ResourceClient:
        return ResourceClient(self, resource)


async def _lines(stream: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """Newline-delimited records of any length (aiohttp's readline caps line length)."""
    buffer = b""
    async for chunk in stream.iter_any():
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def _watch_event(line: bytes, url: str) -> tuple[str, dict]:
    try:
        event = msgspec.json.decode(line)
        event_type, obj = event["type"], event["object"]
    except (msgspec.DecodeError, KeyError, TypeError):
        raise ConnectionFailed(f"watch {url}: malformed event {line[:200]!r}") from None
    if event_type == "ERROR":
        raise ApiError.from_status(obj.get("code") or 500, obj)
    return event_type, obj


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


class ResourceClient:
    """The verbs on one resource (client-go's typed ``Services(ns)`` style clients).

    Namespaced single-object calls need a namespace: the argument, or for create/update the
    object's ``metadata.namespace``. List and watch without one span all namespaces.
    Objects are plain dicts, as the server sends them.
    """

    def __init__(self, client: RestClient, resource: Resource):
        self.client = client
        self.resource = resource

    def _object_path(self, name: str, namespace: str | None, subresource: str | None = None) -> str:
        if self.resource.namespaced and not namespace:
            raise ValueError(f"{self.resource.plural} are namespaced: a namespace is required")
        return self.resource.path(namespace if self.resource.namespaced else None, name, subresource)

    def _with_type(self, obj: dict) -> dict:
        return {"apiVersion": self.resource.api_version, "kind": self.resource.kind, **obj}

    @staticmethod
    def _selection(label_selector: str | None, field_selector: str | None, **extra: Any) -> dict[str, Any]:
        return {"labelSelector": label_selector, "fieldSelector": field_selector, **extra}

    async def list(self, namespace: str | None = None, label_selector: str | None = None, field_selector: str | None = None, limit: int | None = None) -> dict:
        """Every matching object (``limit`` is the page size), as one List."""
        params = self._selection(label_selector, field_selector, limit=limit)
        return await self.client.list(self.resource.path(namespace), params)

    async def get(self, name: str, namespace: str | None = None) -> dict:
        return await self.client.get(self._object_path(name, namespace))

    async def create(self, obj: dict, namespace: str | None = None) -> dict:
        namespace = namespace or obj.get("metadata", {}).get("namespace")
        if self.resource.namespaced and not namespace:
            raise ValueError(f"{self.resource.plural} are namespaced: a namespace is required")
        return await self.client.create(self.resource.path(namespace), self._with_type(obj))

    async def update(self, obj: dict, namespace: str | None = None) -> dict:
        """PUT the whole object; its ``metadata.resourceVersion`` (if set) must be current."""
        return await self._put(obj, namespace, None)

    async def update_status(self, obj: dict, namespace: str | None = None) -> dict:
        """PUT to the ``status`` subresource: only ``.status`` changes."""
        return await self._put(obj, namespace, "status")

    async def _put(self, obj: dict, namespace: str | None, subresource: str | None) -> dict:
        meta = obj.get("metadata", {})
        path = self._object_path(meta["name"], namespace or meta.get("namespace"), subresource)
        return await self.client.update(path, self._with_type(obj))

    async def patch(self, name: str, body: Any, namespace: str | None = None, patch_type: str = "merge", subresource: str | None = None, force: bool | None = None) -> dict:
        """``force`` only means something for server-side apply (take fields from other managers)."""
        path = self._object_path(name, namespace, subresource)
        return await self.client.patch(path, body, patch_type, {"force": force})

    async def delete(self, name: str, namespace: str | None = None, propagation_policy: str | None = None, grace_period_seconds: int | None = None,
                     preconditions: Mapping[str, str] | None = None) -> dict:
        """``preconditions`` (``uid``, ``resourceVersion``): delete only that very object."""
        params = {"propagationPolicy": propagation_policy, "gracePeriodSeconds": grace_period_seconds}
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": dict(preconditions)} if preconditions else None
        return await self.client.delete(self._object_path(name, namespace), params, body)

    def watch(self, namespace: str | None = None, label_selector: str | None = None, field_selector: str | None = None, resource_version: str | None = None, timeout_seconds: int | None = None, allow_watch_bookmarks: bool = False) -> AsyncIterator[tuple[str, dict]]:
        params = self._selection(label_selector, field_selector, resourceVersion=resource_version, timeoutSeconds=timeout_seconds, allowWatchBookmarks=allow_watch_bookmarks or None)
        return self.client.watch(self.resource.path(namespace), params)
