"""The apiserver's aiohttp application: URL grammar, authentication, error translation.

Resource URLs follow the Kubernetes REST layout:

    /api/v1/namespaces/{ns}/{resource}[/{name}[/{subresource}]]     namespaced
    /api/v1/{resource}[/{name}[/{subresource}]]                     cluster-scoped, or all namespaces
    /apis/{group}/{version}/...                                      the same for named groups

Subresources are views of the object (``status``, ``finalize``) or actions with a handler of
their own (``pods/binding``, ``pods/log``, ``serviceaccounts/token``, and the legacy
``bindings`` collection; see ``subresources.py``). Create-only kinds (access reviews,
TokenReview, SelfSubjectReview) answer ``POST`` on their collection through the handler
registered in ``app[appkeys.CREATE_HANDLERS]`` (404 until one is), and 405 to every other method.

Non-resource paths: /version (minor "32": the kubectl dispatcher picks its binary by it),
/healthz /livez /readyz, discovery (/api, /apis, /api/v1, /apis/g[/v], legacy or aggregated by
Accept), /openapi/v3[/…], /metrics, and the paths of ``app[appkeys.PATH_HANDLERS]`` (``PathHandler``: the
Service map under /ui/, ``kubesvc.ui.routes``, installed by ``kubesvc apiserver``). Every request is authenticated (``app[appkeys.AUTHENTICATOR]``,
installed by the server: client certificates, the bearer tokens its flags configure, else
``system:anonymous``) and authorized (``app[appkeys.AUTHORIZER]``: anonymous gets /version and the
health checks); every error is a Kubernetes Status with the HTTP code equal to its ``code``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from kubesvc.api import errors
from kubesvc.api.errors import StatusError
from kubesvc.api.nesting import ensure_recursion_headroom
from kubesvc.api.scheme import KindInfo, all_kinds, by_resource
from kubesvc.apiserver import appkeys, codec, handlers, openapi_v2
from kubesvc.apiserver.auth.attributes import Attributes, request_info
from kubesvc.apiserver.auth.authorizer import PrivilegedGroupAuthorizer, Union, forbidden
from kubesvc.apiserver.auth.context import set_current as set_request_context
from kubesvc.apiserver.auth.impersonation import impersonate
from kubesvc.apiserver.discovery import Discovery, wants_aggregated
from kubesvc.apiserver.eviction import create_eviction
from kubesvc.apiserver.oidc import JWKS_PATH, OPENID_CONFIGURATION_PATH, oidc_response
from kubesvc.apiserver.openapi import OpenAPI
from kubesvc.apiserver.kubeletclient import KubeletClient
from kubesvc.apiserver.limits import in_flight_middleware
from kubesvc.apiserver.registry.store import Registry
from kubesvc.apiserver.scale import handle_scale
from kubesvc.apiserver.streaming import connect_attach, connect_exec, connect_port_forward
from kubesvc.apiserver.subresources import (
    POD_ATTACH, POD_BINDING, POD_EVICTION, POD_EXEC, POD_LOG, POD_PORTFORWARD, SCALE_SUBRESOURCES, SERVICE_ACCOUNT_TOKEN, action, legacy_action,
)
from kubesvc.apiserver.watch import watch_objects
from kubesvc.storage.base import StorageError
from kubesvc.util.clock import Clock

log = logging.getLogger("kubesvc.apiserver")

VERSION_INFO = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.4-kubesvc",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_HEALTH_CHECKS = ("ping", "log", "etcd", "poststarthook/start-apiextensions-informers")

CONNECT_SUBRESOURCES = frozenset({"exec", "attach", "portforward"})

# The Pod's action subresources: the HTTP method(s) each answers, and its handler
ACTION_HANDLERS = {
    POD_BINDING: ("POST", handlers.create_binding),
    POD_EVICTION: ("POST", create_eviction),
    POD_LOG: ("GET", handlers.read_pod_log),
    POD_EXEC: (("GET", "POST"), connect_exec),  # GET: a WebSocket; POST: a SPDY upgrade
    POD_ATTACH: (("GET", "POST"), connect_attach),
    POD_PORTFORWARD: (("GET", "POST"), connect_port_forward),
    # a TokenRequest, answered by the handler registered as create_handlers[("", "serviceaccounts/token")]
    SERVICE_ACCOUNT_TOKEN: ("POST", lambda request, target: handlers.create_unstored(
        request, SERVICE_ACCOUNT_TOKEN.body, ("", "serviceaccounts/token"), target.namespace, target.name)),
    **{scale: (("GET", "PUT", "PATCH"), handle_scale) for scale in SCALE_SUBRESOURCES},
}


@dataclass(frozen=True)
class UnstoredTarget:
    """The collection URL of a create-only kind (an access review, TokenReview...): POST only."""

    info: KindInfo
    namespace: str | None


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.requests = Counter("apiserver_request", "Counter of apiserver requests broken out for each verb, group, version, resource and HTTP response code.",
                                ["verb", "group", "version", "resource", "subresource", "code"], registry=self.registry)
        self.latency = Histogram("apiserver_request_duration_seconds", "Response latency distribution in seconds for each verb, group, version and resource.",
                                 ["verb", "group", "version", "resource", "subresource"], registry=self.registry,
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0))
        # each label set's counter and histogram, looked up once: prometheus_client's labels()
        # validates and locks on every call, a tenth of a cheap request's middleware (the label
        # sets are bounded: verbs x served resources x status codes, as upstream's)
        self._children: dict[tuple[str, ...], tuple] = {}

    def observe(self, verb: str, group: str, version: str, resource: str, subresource: str, code: int, seconds: float) -> None:
        key = (verb, group, version, resource, subresource, code)
        children = self._children.get(key)
        if children is None:
            labels = (verb, group, version, resource, subresource)
            children = self._children[key] = (self.requests.labels(*labels, str(code)), self.latency.labels(*labels))
        children[0].inc()
        children[1].observe(seconds)


@dataclass(frozen=True)
class PathHandler:
    """Non-resource paths at and under ``prefix`` served by a layer above the apiserver (the
    Service map at /ui, ``kubesvc.ui.routes``, which reads through the explain and trace
    components the apiserver may not import), installed in ``app[appkeys.PATH_HANDLERS]`` by the
    command that runs the server. ``check_credential(request, user)`` runs right after
    authentication and may refuse (a StatusError) before authorization; ``serve`` answers a GET
    that was authenticated and authorized like any non-resource request."""

    prefix: str
    serve: Callable[[web.Request], Awaitable[web.StreamResponse]]
    check_credential: Callable[[web.Request, object], None] = lambda request, user: None

    def matches(self, path: str) -> bool:
        return path == self.prefix or path.startswith(self.prefix + "/")


class RenderedStatusError(StatusError):
    """A Status error answered with a response of its own instead of the Status (a browser's 401
    on /ui/ is the sign-in page)."""

    def __init__(self, code: int, reason: str, message: str, rendered: web.Response | None = None):
        super().__init__(code, reason, message)
        self.rendered = rendered


def _path_handler(app: web.Application, path: str) -> PathHandler | None:
    return next((h for h in app.get(appkeys.PATH_HANDLERS) or () if h.matches(path)), None)


def error_response(exc: StatusError) -> web.Response:
    """The Status, with ``Retry-After`` when it says when to retry (upstream's ErrorNegotiated)."""
    if isinstance(exc, RenderedStatusError) and exc.rendered is not None:
        return exc.rendered
    retry = (exc.details or {}).get("retryAfterSeconds")
    return handlers.json_response(exc.status(), exc.code, {"Retry-After": str(retry)} if retry else None)


def _resolve(request: web.Request, registry: Registry) -> handlers.Target | UnstoredTarget | None:
    """Map a resource path to its target, or None when it is not a resource path. A create-only
    kind has only its collection URL (in its namespace when namespaced), as upstream registers
    only ``POST`` there: anything else under it is 404."""
    parts = [p for p in request.path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api" and parts[1] == "v1":
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return None
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    resource, name = rest[0], rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else ""
    if len(rest) > 3:
        raise errors.StatusError(404, "NotFound", "the server could not find the requested resource")
    legacy = legacy_action(group, resource) if version == "v1" else None
    if legacy is not None:  # POST /api/v1/namespaces/{ns}/bindings: pods/binding, the Pod named in the body
        store = registry.store(group, legacy.parent)
        if store is None or namespace is None or name is not None:
            raise errors.StatusError(404, "NotFound", "the server could not find the requested resource")
        return handlers.Target(store, namespace, None, legacy.name)
    unstored = by_resource(group, version, resource)
    if unstored is not None and unstored.create_only:
        if name is not None or (namespace is None) == unstored.namespaced:
            raise errors.StatusError(404, "NotFound", "the server could not find the requested resource")
        return UnstoredTarget(unstored, namespace)
    store = registry.store(group, resource)
    if store is None or store.info.version != version:
        raise errors.StatusError(404, "NotFound", "the server could not find the requested resource")
    info = store.info
    if namespace is not None and not info.namespaced:
        raise errors.StatusError(404, "NotFound", "the server could not find the requested resource")
    if subresource and subresource not in info.subresources and action(info, subresource) is None:
        raise errors.StatusError(404, "NotFound", "the server could not find the requested resource")
    if info.namespaced and name is not None and namespace is None:
        raise errors.StatusError(404, "NotFound", "the server could not find the requested resource")
    return handlers.Target(store, namespace, name, subresource)


async def resource_handler(request: web.Request) -> web.StreamResponse:
    registry: Registry = request.app[appkeys.REGISTRY]
    target = _resolve(request, registry)
    if target is None:
        return await non_resource_handler(request)
    if isinstance(target, UnstoredTarget):
        info = target.info
        request["metric_labels"] = (info.group, info.version, info.resource, "")
        if request.method != "POST":  # no get, list, watch or delete: nothing is stored
            raise errors.method_not_allowed("the server does not allow this method on the requested resource")
        return await handlers.create_unstored(request, info, (info.group, info.resource), target.namespace)
    request["metric_labels"] = (target.info.group, target.info.version, target.info.resource, target.subresource)
    method = request.method
    subresource_action = action(target.info, target.subresource) if target.subresource else None
    if subresource_action is not None:
        verb_method, handler = ACTION_HANDLERS[subresource_action]
        if method not in ((verb_method,) if isinstance(verb_method, str) else verb_method):
            raise errors.method_not_allowed("the server does not allow this method on the requested resource")
        return await handler(request, target)
    collection = target.name is None
    if method == "GET":
        if codec.parameter_bool(request.query, "watch"):
            return await watch_objects(request, target)
        if not codec.accepts_json(request.headers.get("Accept")):
            raise errors.not_acceptable("only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf")
        return await (handlers.list_objects(request, target) if collection else handlers.get_object(request, target))
    if collection:
        if target.subresource:
            raise errors.method_not_allowed("the server does not allow this method on the requested resource")
        if method == "POST":
            if target.info.namespaced and target.namespace is None:
                raise errors.method_not_allowed("the server does not allow this method on the requested resource")
            return await handlers.create_object(request, target)
        if method == "DELETE":
            return await handlers.delete_collection(request, target)
    else:
        if method == "PUT":
            return await handlers.update_object(request, target)
        if method == "PATCH" and target.subresource != "finalize":
            return await handlers.patch_object(request, target)
        if method == "DELETE" and not target.subresource:
            return await handlers.delete_object(request, target)
    raise errors.method_not_allowed("the server does not allow this method on the requested resource")


async def non_resource_handler(request: web.Request) -> web.StreamResponse:
    path = request.path.rstrip("/") or "/"
    app = request.app
    if request.method != "GET":
        raise errors.StatusError(404, "NotFound", "the server could not find the requested resource")
    if path == "/version":
        return handlers.json_response(VERSION_INFO)
    if path in ("/healthz", "/livez", "/readyz"):
        if "verbose" in request.query:
            lines = [f"[+]{check} ok" for check in _HEALTH_CHECKS]
            return web.Response(text="\n".join(lines) + f"\n{path[1:]} check passed\n", content_type="text/plain")
        return web.Response(text="ok", content_type="text/plain")
    if path.startswith(("/healthz/", "/livez/", "/readyz/")):
        return web.Response(text="ok", content_type="text/plain")
    extra = _path_handler(app, path)
    if extra is not None:
        return await extra.serve(request)
    if path == "/metrics":
        return web.Response(body=generate_latest(app[appkeys.METRICS].registry), headers={"Content-Type": CONTENT_TYPE_LATEST})
    discovery: Discovery = app[appkeys.DISCOVERY]
    aggregated_type = wants_aggregated(request.headers.get("Accept", ""))
    if path == "/api":
        if aggregated_type:
            return web.Response(body=codec.to_json(discovery.aggregated(core=True, content_type=aggregated_type)), headers={"Content-Type": aggregated_type})
        return handlers.json_response(discovery.api_versions())
    if path == "/apis":
        if aggregated_type:
            return web.Response(body=codec.to_json(discovery.aggregated(core=False, content_type=aggregated_type)), headers={"Content-Type": aggregated_type})
        return handlers.json_response(discovery.api_group_list())
    if path == "/api/v1":
        return handlers.json_response(discovery.api_resource_list("", "v1"))
    parts = path.split("/")[1:]
    if parts[0] == "apis" and len(parts) in (2, 3):
        body = discovery.api_group(parts[1]) if len(parts) == 2 else discovery.api_resource_list(parts[1], parts[2])
        if body is not None:
            return handlers.json_response(body)
    if path in (OPENID_CONFIGURATION_PATH, JWKS_PATH) and app.get(appkeys.OIDC) is not None:
        return oidc_response(app[appkeys.OIDC], path)
    openapi: OpenAPI = app[appkeys.OPENAPI]
    if path == "/openapi/v3":
        return handlers.json_response(openapi.index())
    if path == "/openapi/v2":
        protobuf = openapi_v2.wants_protobuf(request.headers.get("Accept", ""))
        # the first call builds the document (~0.5 s of CPU): off the loop, which keeps serving
        body, digest = await asyncio.to_thread(openapi.swagger, protobuf)
        return web.Response(body=body, content_type=openapi_v2.PROTOBUF_TYPE if protobuf else "application/json",
                            headers={"ETag": f'"{digest}"'})
    if path.startswith("/openapi/v3/"):
        doc = openapi.document(path[len("/openapi/v3/"):])
        if doc is not None:
            return web.Response(body=doc, content_type="application/json",
                                headers={"ETag": f'"{openapi.etag(path[len("/openapi/v3/"):])}"', "Cache-Control": "public, immutable"})
    raise errors.StatusError(404, "NotFound", "the server could not find the requested resource")


@web.middleware
async def status_middleware(request: web.Request, handler) -> web.StreamResponse:
    """Authentication, Status errors for everything, request metrics."""
    started = time.monotonic()
    code = 500
    try:
        await authorize_request(request)
        response = await handler(request)
        code = response.status
        return response
    except StatusError as exc:
        code = exc.code
        return error_response(exc)
    except web.HTTPRequestEntityTooLarge:
        code = 413
        return error_response(errors.too_large())
    except web.HTTPException as exc:
        code = exc.status
        return error_response(StatusError(exc.status, exc.reason.replace(" ", ""), exc.text or exc.reason))
    except StorageError as exc:
        # the store failed (etcd unreachable, no quorum, a request timed out): kube-apiserver passes
        # etcd's error through ErrorToAPIStatus as a 500 with its text and no reason; not a bug,
        # so one log line, no traceback
        log.warning("storage failed serving %s %s: %s", request.method, request.path, exc)
        code = 500
        return error_response(StatusError(500, "", str(exc)))
    except Exception as exc:  # the last line of defence: a bug is a 500 Status, never a traceback to the client
        log.exception("internal error serving %s %s", request.method, request.path)
        code = 500
        return error_response(errors.internal(f"{type(exc).__name__}: {exc}"))
    finally:
        _observe(request, code, time.monotonic() - started)


async def authorize_request(request: web.Request) -> None:
    """Authentication, then authorization (upstream WithAuthentication -> WithImpersonation ->
    WithAuthorization): ``request["user"]`` is who asks, ``request["request_info"]`` what."""
    user = await request.app[appkeys.AUTHENTICATOR].authenticate(request)
    extra = _path_handler(request.app, request.path)
    if extra is not None:
        extra.check_credential(request, user)  # /ui/: never system:anonymous, a 401
    user = impersonate(request.headers, request.path, user, request.app[appkeys.AUTHORIZER])
    info = request.get("request_info") or request_info(request.method, request.path, request.query)  # the in-flight filter's, if it ran
    request["user"], request["request_info"] = user, info
    set_request_context(user, info)
    verdict = request.app[appkeys.AUTHORIZER].authorize(Attributes(user, info))
    if not verdict.allowed:
        raise forbidden(user, info, verdict.reason)


def _observe(request: web.Request, code: int, seconds: float) -> None:
    group, version, resource, sub = request.get("metric_labels", ("", "", "", ""))
    # a stream (exec, attach, port-forward) is counted as upstream's metrics.CleanVerb counts it: CONNECT
    verb = "WATCH" if codec.parameter_bool(request.query, "watch") else "CONNECT" if sub in CONNECT_SUBRESOURCES else request.method
    metrics: Metrics = request.app[appkeys.METRICS]
    metrics.observe(verb, group, version, resource, sub, code, seconds)


def build_app(registry: Registry, clock: Clock, server_address: str, metrics_registry: CollectorRegistry | None = None,
              kubelet_client: KubeletClient | None = None) -> web.Application:
    """The application without authentication: the server installs its authenticator
    (``auth.endpoints.install``) and its ``--authorization-mode`` chain before serving."""
    ensure_recursion_headroom()  # bodies may nest nesting.MAX_DEPTH levels: room to walk them
    # the max-in-flight filter first: it refuses before any work (it looks at the user only then)
    app = web.Application(middlewares=[in_flight_middleware, status_middleware], client_max_size=codec.MAX_BODY_BYTES + 1)
    app[appkeys.REGISTRY] = registry
    app[appkeys.CREATE_HANDLERS] = {}  # (group, resource) -> handlers.CreateHandler, for create-only kinds
    app[appkeys.PATH_HANDLERS] = []  # PathHandler: non-resource paths a layer above serves (the Service map)
    app[appkeys.AUTHORIZER] = Union([PrivilegedGroupAuthorizer()])  # the server sets its --authorization-mode chain
    app[appkeys.CLOCK] = clock
    app[appkeys.METRICS] = Metrics(metrics_registry)
    kinds = all_kinds()
    app[appkeys.DISCOVERY] = Discovery(kinds, server_address)
    app[appkeys.OPENAPI] = OpenAPI()
    app[appkeys.KUBELET_CLIENT] = kubelet_client or KubeletClient()
    app.on_cleanup.append(lambda app: app[appkeys.KUBELET_CLIENT].close())
    app.router.add_route("*", "/{tail:.*}", resource_handler)
    return app
