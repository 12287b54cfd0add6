"""The keys of what the apiserver's aiohttp application holds (``app[REGISTRY]``...).

aiohttp wants typed ``web.AppKey`` objects rather than strings as an application's keys (a
string key warns ``NotAppKeyWarning``). They live in this module of their own, which imports
nothing of the apiserver, so the handlers and filters that read them and the server that sets
them can all import it without an import cycle.
"""

from __future__ import annotations

from aiohttp import web

REGISTRY = web.AppKey("registry")  # the Registry of stores
CLOCK = web.AppKey("clock")
METRICS = web.AppKey("metrics")  # app.Metrics: apiserver_request_* counters
DISCOVERY = web.AppKey("discovery")
OPENAPI = web.AppKey("openapi")
KUBELET_CLIENT = web.AppKey("kubelet_client")
AUTHENTICATOR = web.AppKey("authenticator")  # installed by auth.endpoints.install
AUTHORIZER = web.AppKey("authorizer")  # the --authorization-mode chain
SERVICE_ACCOUNTS = web.AppKey("service_accounts")  # the ServiceAccount token issuer
OIDC = web.AppKey("oidc")  # the OIDC discovery documents, or None
CREATE_HANDLERS = web.AppKey("create_handlers")  # (group, resource) -> handlers.CreateHandler of create-only kinds
PATH_HANDLERS = web.AppKey("path_handlers")  # app.PathHandler: non-resource paths a layer above serves
ADMISSION_WAITS = web.AppKey("admission_waits")  # admission plugins' waits before a create
IN_FLIGHT = web.AppKey("in_flight")  # limits.InFlight: the max-in-flight buckets
WATCH_CACHE = web.AppKey("watch_cache")  # cacher.WatchCache, when on
WATCH_CACHE_METRICS = web.AppKey("watch_cache_metrics")
NAMESPACE_FINALIZER = web.AppKey("namespace_finalizer")  # the namespace controller, kicked by a Namespace delete
