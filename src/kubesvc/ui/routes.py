"""``/ui/``: the Service map, served by the apiserver behind the API's own authentication and
authorization.

Who may see what (the same rules as every other request):

* **Authentication.** A client certificate (the browser sends it on navigation) or a bearer
  token. A browser cannot put a bearer token on a navigation, so the page itself asks for one,
  keeps it in ``sessionStorage`` (gone when the tab closes; never in a URL or a cookie) and sends
  it as ``Authorization: Bearer`` on each of its ``fetch`` requests. A request under ``/ui`` with
  no credential is never ``system:anonymous``: it is a 401 ``Unauthorized`` Status, as upstream
  answers when its anonymous authenticator is limited to other paths (the structured
  AuthenticationConfiguration's ``anonymous.conditions``). A browser navigating there
  (``Accept: text/html``) gets that 401 with the page as its body: the page is the package's
  code, the same for everyone, and holds no data; it asks for the token.
* **Authorization.** ``/ui`` and ``/ui/*`` are non-resource URLs: ``get`` on them is granted by
  RBAC like ``/api`` and ``/version`` are (the ``kubesvc:service-map`` ClusterRole, bound to
  ``system:authenticated`` as upstream binds ``system:discovery``). The data are not: every
  object the map, the explanation or the trace reads is read through :class:`AsUser`, which
  authorizes that read (``list pods`` in the namespace, ``list nodes``, ...) for the requesting
  user with the apiserver's authorizer chain before it touches the store, exactly as if the
  browser had made the request; a refused read is the API's 403 Status.

``kubesvc apiserver`` installs these paths (``path_handler``; the apiserver component itself
does not import the explain and trace components this module reads through). Endpoints: ``GET
/ui/`` the page; ``GET /ui/api/map`` the whole map (``graph.service_map``), with
each node's proxy health read from its health endpoint (``explain.gather.proxy_health``); ``GET
/ui/api/explain?namespace=&name=`` ``kubesvc explain``'s findings (``explain.gather.gather`` and
``explain.findings.explain``, unchanged); ``GET /ui/api/trace?namespace=&name=`` ``kubesvc
trace``'s walk of a connection from this machine to the Service's first port, read from the
kernel of the machine the apiserver runs on (``proxy.trace.live``; read once for every trace
asked within two seconds, ``RecentNodeState``), which under ``kubesvc up`` is the node; elsewhere
it says it cannot. The page learns of changes by watching Services,
EndpointSlices, Pods and Nodes itself (ordinary watch requests with the user's token) and asks
for the map again when one changes.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ipaddress
import logging
import time
from functools import cache
from importlib import resources

from aiohttp import web

from kubesvc.api import errors
from kubesvc.api.errors import StatusError
from kubesvc.api.selectors import parse_label_selector
from kubesvc.apiserver.app import PathHandler, RenderedStatusError
from kubesvc.apiserver.auth.attributes import Attributes, request_info
from kubesvc.apiserver.auth.authorizer import forbidden
from kubesvc.apiserver.registry.store import ListOptions
from kubesvc.client.rest import ApiError
from kubesvc.ui.graph import service_map
from kubesvc.apiserver import appkeys

log = logging.getLogger("kubesvc.ui")

PREFIX = "/ui"
ANONYMOUS = "system:anonymous"
PROXY_HEALTH_TIMEOUT = 1.0  # seconds per node: an unreachable proxy is drawn as such, never a stall
CLUSTER_DOMAIN = "cluster.local"


def is_ui_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def path_handler() -> PathHandler:
    """What ``kubesvc apiserver`` installs (``app[appkeys.PATH_HANDLERS]``) to serve /ui."""
    proxies, rules = RecentProxyHealth(), RecentNodeState()
    return PathHandler(PREFIX, lambda request: handle(request, proxies, rules), require_credential)


class RecentProxyHealth:
    """Each node's proxy health as last read, read again once older than ``max_age`` seconds: every
    open page asks for the map after each watch event, and a burst of events (a rollout) must
    not become a burst of requests to every node."""

    def __init__(self, max_age: float = 2.0, clock=time.monotonic):
        self.max_age, self.clock = max_age, clock
        self.read_at: dict[tuple[str, str], tuple[float, object]] = {}

    async def read(self, nodes: list[dict]) -> list:
        from kubesvc.explain.gather import proxy_health

        async def one(node: dict):
            key = ((node.get("metadata") or {}).get("name", ""), repr((node.get("status") or {}).get("addresses")))
            seen = self.read_at.get(key)
            if seen is not None and self.clock() - seen[0] < self.max_age:
                return seen[1]
            health = await proxy_health(node, PROXY_HEALTH_TIMEOUT)
            self.read_at[key] = (self.clock(), health)
            return health

        results = await asyncio.gather(*(one(n) for n in nodes))
        live = {((n.get("metadata") or {}).get("name", ""), repr((n.get("status") or {}).get("addresses"))) for n in nodes}
        for key in set(self.read_at) - live:  # Nodes gone or readdressed
            del self.read_at[key]
        return list(results)


class RecentNodeState:
    """This machine's rules as last read for a trace (``live.read_node``: four ``nft`` and four
    ``iptables-save`` processes, ``ipset save`` in IPVS mode; seconds of CPU with many Services),
    read again once older than ``max_age`` seconds, and one read at a time: concurrent traces wait
    for the read under way. Otherwise every trace request of any user allowed to trace started
    those processes on the apiserver's machine, up to the max-in-flight limit at once. A failed
    read is kept as long (an apiserver that may not read the rules says so without retrying).
    ``report`` is pure, so one state serves every trace."""

    def __init__(self, max_age: float = 2.0, clock=time.monotonic, read=None):
        self.max_age, self.clock, self._read = max_age, clock, read
        self.outcome: tuple[float, object, BaseException | None] | None = None
        self.reading: asyncio.Future | None = None

    async def read(self):
        if self.outcome is not None and self.clock() - self.outcome[0] < self.max_age:
            return self._result(self.outcome)
        if self.reading is None:
            self.reading = asyncio.ensure_future(self._read_once())
        return self._result(await asyncio.shield(self.reading))

    async def _read_once(self):
        if self._read is None:
            from kubesvc.proxy.trace.live import read_node as read
        else:
            read = self._read
        try:
            state, error = await read(), None
        except Exception as exc:  # kept and raised to every waiter: CommandFailed, OSError, ...
            state, error = None, exc
        self.outcome = (self.clock(), state, error)
        self.reading = None
        return self.outcome

    @staticmethod
    def _result(outcome):
        _, state, error = outcome
        if error is not None:
            raise error
        return state


def require_credential(request: web.Request, user) -> None:
    """Called right after authentication: no anonymous access to anything under /ui; a browser
    navigating there gets the sign-in page with the 401, everything else the Status."""
    if user.name == ANONYMOUS and is_ui_path(request.path):
        browser = request.method == "GET" and "text/html" in request.headers.get("Accept", "")
        raise RenderedStatusError(401, "Unauthorized", "Unauthorized", page_response(401) if browser else None)


# ---- the page -----------------------------------------------------------------------------


@cache
def _page() -> tuple[bytes, str]:
    """The page with its script and style inlined (so loading it needs no second, credential-less
    request) and the Content-Security-Policy that allows exactly those two by hash."""
    static = resources.files("kubesvc.ui") / "static"
    html = (static / "map.html").read_text()
    script = (static / "map.js").read_text()
    style = (static / "map.css").read_text()

    def digest(text: str) -> str:
        return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"

    body = html.replace("<!--STYLE-->", f"<style>{style}</style>").replace("<!--SCRIPT-->", f"<script>{script}</script>")
    policy = (f"default-src 'none'; script-src {digest(script)}; style-src {digest(style)}; connect-src 'self'; "
              "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
    return body.encode(), policy


def page_response(status: int = 200) -> web.Response:
    body, policy = _page()
    return web.Response(body=body, status=status, content_type="text/html", charset="utf-8", headers={
        "Content-Security-Policy": policy, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store", "X-Frame-Options": "DENY"})


# ---- reads as the requesting user ---------------------------------------------------------


class AsUser:
    """The ``get``/``list`` of ``kubesvc.client.rest.RestClient`` (what ``explain.gather`` calls)
    answered from the apiserver's own store, each read authorized for ``user`` first (the
    attributes the same URL would have as a request) and refused with the API's 403 Status."""

    def __init__(self, app: web.Application, user):
        self.app, self.user = app, user

    def _target(self, path: str, query: dict):
        info = request_info("GET", path, query)
        verdict = self.app[appkeys.AUTHORIZER].authorize(Attributes(self.user, info))
        if not verdict.allowed:
            raise forbidden(self.user, info, verdict.reason)
        store = self.app[appkeys.REGISTRY].store(info.api_group, info.resource)
        if store is None:
            raise errors.StatusError(404, "NotFound", "the server could not find the requested resource")
        return store, info

    async def get(self, path: str) -> dict:
        store, info = self._target(path, {})
        try:
            return await store.get(info.namespace or None, info.name)
        except StatusError as exc:
            raise ApiError(exc.code, exc.reason, exc.message) from None

    async def list(self, path: str, params: dict | None = None) -> dict:
        params = dict(params or {})
        store, info = self._target(path, params)
        selector = params.get("labelSelector", "")
        opts = ListOptions(label_selector=parse_label_selector(selector) if selector else None)
        items, _ = await store.list(info.namespace or None, opts)
        return {"items": items}


# ---- handlers -----------------------------------------------------------------------------


async def handle(request: web.Request, proxies: RecentProxyHealth, rules: RecentNodeState | None = None) -> web.StreamResponse:
    """Every GET under /ui once the request is authenticated and allowed ``get`` on its path."""
    path = request.path
    if path in (PREFIX, PREFIX + "/", PREFIX + "/index.html"):
        return page_response()
    reader = AsUser(request.app, request["user"])
    if path == PREFIX + "/api/map":
        return web.json_response(await map_data(reader, proxies))
    if path in (PREFIX + "/api/explain", PREFIX + "/api/trace"):
        namespace, name = request.query.get("namespace", ""), request.query.get("name", "")
        if not namespace or not name:
            raise errors.StatusError(400, "BadRequest", "namespace and name are required")
        refused = service_name_errors(namespace, name)
        if refused:
            raise errors.StatusError(400, "BadRequest", "; ".join(refused))
        if path.endswith("/explain"):
            return web.json_response(await explain_data(reader, namespace, name))
        return web.json_response(await trace_data(reader, namespace, name, rules or RecentNodeState()))
    raise errors.StatusError(404, "NotFound", "the server could not find the requested resource")


def service_name_errors(namespace: str, name: str) -> list[str]:
    """A Service's namespace (a DNS-1123 label) and name (a DNS-1035 label) as the API validates
    them: both go into the paths read as the user, where a ``/`` would make ``kubernetes/proxy``
    a read of the Service authorized as ``get services/proxy``."""
    from kubesvc.api.validation_meta import is_dns1035_label, is_dns1123_label

    return ([f"invalid namespace {namespace!r}: {e}" for e in is_dns1123_label(namespace)]
            + [f"invalid name {name!r}: {e}" for e in is_dns1035_label(name)])


async def map_data(reader: AsUser, proxies: RecentProxyHealth) -> dict:
    services, slices, pods, nodes = await asyncio.gather(
        reader.list("/api/v1/services"), reader.list("/apis/discovery.k8s.io/v1/endpointslices"),
        reader.list("/api/v1/pods"), reader.list("/api/v1/nodes"))
    node_items = nodes["items"]
    return service_map(services["items"], slices["items"], pods["items"], node_items, await proxies.read(node_items))


async def explain_data(reader: AsUser, namespace: str, name: str) -> dict:
    from kubesvc.explain.findings import as_json, explain
    from kubesvc.explain.gather import ServiceNotFound, gather

    try:
        snapshot = await gather(reader, namespace, name, node=None, cluster_domain=CLUSTER_DOMAIN, timeout=PROXY_HEALTH_TIMEOUT)
    except ServiceNotFound as err:
        raise errors.StatusError(404, "NotFound", str(err)) from None
    except ApiError as err:
        raise errors.StatusError(err.status, err.reason, err.message) from None
    findings = explain(snapshot)
    return {"service": f"{namespace}/{name}", "findings": as_json(findings), "lines": [f.line() for f in findings]}


async def trace_data(reader: AsUser, namespace: str, name: str, rules: RecentNodeState) -> dict:
    """``kubesvc trace node <namespace>/<name>`` on the apiserver's machine, or why it cannot run."""
    from kubesvc.explain.gather import SERVICE_NAME_LABEL, asking_node
    from kubesvc.kernel.exec import CommandFailed
    from kubesvc.proxy.trace import live

    try:
        service = await reader.get(f"/api/v1/namespaces/{namespace}/services/{name}")
    except ApiError as err:
        raise errors.StatusError(err.status, err.reason, err.message) from None
    spec = service.get("spec") or {}
    dest = spec.get("clusterIP")
    ports = spec.get("ports") or []
    if not dest or dest == "None" or not ports:
        return {"error": f"service {namespace}/{name} has no ClusterIP and port to trace"}
    port, protocol = int(ports[0]["port"]), (ports[0].get("protocol") or "TCP").lower()
    slices = (await reader.list(f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
                                {"labelSelector": f"{SERVICE_NAME_LABEL}={name}"}))["items"]
    nodes = (await reader.list("/api/v1/nodes"))["items"]
    try:
        state = await rules.read()
    except (CommandFailed, OSError) as err:
        return {"error": f"cannot read this machine's rules (the trace runs where the apiserver runs): {err}"}
    objs = live.Objects(service=service, slices=slices, node=asking_node(None, nodes))
    for node in nodes:
        if (node.get("metadata") or {}).get("name") == objs.node:
            objs.node_labels = (node.get("metadata") or {}).get("labels") or {}
    family = live.family_of(dest)
    own = [a for a in state.addresses if live.family_of(a) == family and not ipaddress.ip_address(a).is_loopback]
    source = own[0] if own else ("127.0.0.1" if family == 4 else "::1")
    report = live.report(state, source, dest, port, protocol, from_node=True, objs=objs)
    return {"report": report, "lines": live.text(report)}
