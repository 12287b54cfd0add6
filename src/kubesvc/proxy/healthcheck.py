"""kube-proxy's two kinds of health endpoints (upstream ``pkg/proxy/healthcheck``).

**The proxy's own health** (``proxy_health.go``; ``--healthz-bind-address``, default
``0.0.0.0:10256``). Per IP family the proxier reports two moments: ``queued_update`` when a
change arrives that needs a sync (only the oldest pending one is kept) and ``updated`` after each
successful sync (which clears the pending one). A family is unhealthy when an update has been
pending for ``health_timeout`` (2 × ``syncPeriod``) or longer; families that never synced are not
judged. ``/livez`` answers 200 when every family is healthy, ``/healthz`` additionally requires
the Node to be *eligible*: known, not being deleted and not tainted
``ToBeDeletedByClusterAutoscaler`` (so cloud load balancers drain a node before it goes away).
Both answer ``application/json`` with ``X-Content-Type-Options: nosniff`` and Go's JSON of::

    {"lastUpdated": ..., "currentTime": ..., "nodeEligible": true, "healthy": true,
     "status": {"IPv4": {"lastUpdated": ..., "healthy": true}}}

(``nodeEligible`` on ``/healthz`` only; on a 200 ``lastUpdated`` is the current time, for
compatibility with releases that reported the last sync-loop run). Each answer counts in
``kubeproxy_proxy_healthz_total{code}`` / ``kubeproxy_proxy_livez_total{code}``.

**Per-Service health-check node ports** (``service_health.go``). A ``LoadBalancer`` Service with
``externalTrafficPolicy: Local`` gets a ``healthCheckNodePort``; every node serves HTTP on it so
the cloud load balancer sends traffic only to nodes with a local ready endpoint. After each
successful sync the proxier hands over the wanted ports (``sync_services``: listeners of Services
that went away or changed port are closed, missing ones opened) and the local endpoint counts
(``sync_endpoints``). Any request answers 200 when the Service has local endpoints *and* the proxy
is healthy (``/livez`` health; node eligibility is not considered), else 503, with header
``X-Load-Balancing-Endpoint-Weight: <count>`` and a tab-indented JSON body. A port is opened on
``0.0.0.0`` (Go's dual-stack "any") when ``nodePortAddresses`` matches everything, else on each
matching node IP. A listen that fails closes that Service's other listeners, is reported through
``on_listen_failed`` (the server emits the ``FailedToStartServiceHealthcheck`` event) and is
retried at the next sync.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from aiohttp import web

from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.nodeportaddresses import NodePortAddresses
from kubesvc.proxy.types import FAMILY_NAMES
from kubesvc.serving.listen import listen_socket
from kubesvc.util import golang
from kubesvc.util.clock import Clock, RealClock
from kubesvc.util.ipnet import join_host_port

log = logging.getLogger("kubesvc.proxy.healthcheck")

# Set by the Cluster Autoscaler on a node it is about to delete.
TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"
JSON_HEADERS = {"Content-Type": "application/json", "X-Content-Type-Options": "nosniff"}
ANY_ADDRESS = "0.0.0.0"  # as in Go, "0.0.0.0", "::" and "" all mean every address of both families
GO_ZERO_TIME = "0001-01-01T00:00:00Z"


def go_time(moment: datetime | None) -> str:
    """Go's JSON for a ``time.Time`` (RFC 3339 with the fraction's trailing zeros dropped), in UTC."""
    return GO_ZERO_TIME if moment is None else golang.rfc3339_nano(moment.astimezone(timezone.utc))


def family_name(family: int | str) -> str:
    """``4``/``6`` or ``"IPv4"``/``"IPv6"`` → ``"IPv4"``/``"IPv6"`` (upstream ``v1.IPFamily``)."""
    if isinstance(family, str):
        if family not in FAMILY_NAMES.values():
            raise ValueError(f"unknown IP family {family!r}")
        return family
    return FAMILY_NAMES[family]


# ---- proxy health: pure decisions ------------------------------------------------------------


@dataclass(frozen=True)
class ProxierHealth:
    """One family's proxier (upstream ``ProxierHealth``)."""

    last_updated: datetime | None
    healthy: bool


@dataclass(frozen=True)
class ProxyHealth:
    """The whole proxy (upstream ``ProxyHealth``); ``status`` is keyed ``"IPv4"``/``"IPv6"``."""

    healthy: bool
    last_updated: datetime | None
    current_time: datetime
    status: Mapping[str, ProxierHealth] = field(default_factory=dict)
    node_eligible: bool | None = None  # set only for /healthz answers

    def to_json(self) -> str:
        """Exactly Go's ``json.Marshal`` of the upstream struct (field order, compact, sorted map)."""
        body: dict = {"lastUpdated": go_time(self.last_updated), "currentTime": go_time(self.current_time)}
        if self.node_eligible is not None:
            body["nodeEligible"] = self.node_eligible
        body["healthy"] = self.healthy
        if self.status:
            body["status"] = {name: {"lastUpdated": go_time(status.last_updated), "healthy": status.healthy}
                              for name, status in sorted(self.status.items())}
        return json.dumps(body, separators=(",", ":"))


def evaluate_proxy_health(last_updated: Mapping[str, datetime], oldest_pending: Mapping[str, datetime],
                          now: datetime, health_timeout: float) -> ProxyHealth:
    """Upstream ``Health()``: a family that synced is unhealthy iff an update has been queued for
    ``health_timeout`` or longer; ``last_updated`` overall is the newest family's."""
    status: dict[str, ProxierHealth] = {}
    for name, updated in last_updated.items():
        pending = oldest_pending.get(name)
        late = pending is not None and (now - pending).total_seconds() >= health_timeout
        status[name] = ProxierHealth(updated, not late)
    newest = max(last_updated.values(), default=None)
    return ProxyHealth(all(s.healthy for s in status.values()), newest, now, status)


def node_is_eligible(node: Mapping | None) -> bool:
    """Upstream ``NodeEligible``: the Node is known, not being deleted and not tainted
    ``ToBeDeletedByClusterAutoscaler``."""
    if not node:
        return False
    if ((node.get("metadata") or {}).get("deletionTimestamp")):
        return False
    return not any((taint or {}).get("key") == TO_BE_DELETED_TAINT for taint in ((node.get("spec") or {}).get("taints") or []))


# ---- proxy health: the state and the HTTP handlers -------------------------------------------


class ProxyHealthServer:
    """``/healthz`` and ``/livez`` of one kube-proxy (all families share one)."""

    def __init__(self, bind_address: str = "0.0.0.0:10256", health_timeout: float = 60.0,
                 metrics: ProxyMetrics | None = None, *, clock: Clock | None = None):
        self.bind_address = bind_address
        self.health_timeout = health_timeout
        self.metrics = metrics or ProxyMetrics()
        self.clock = clock or RealClock()
        self._last_updated: dict[str, datetime] = {}
        self._oldest_pending: dict[str, datetime] = {}
        self._node: Mapping | None = None
        self._site: asyncio.AbstractServer | None = None
        self._http: web.Server | None = None

    # -- what the proxiers and the Node informer report

    def queued_update(self, family: int | str) -> None:
        """A change arrived that needs a sync; only the oldest pending one counts."""
        self._oldest_pending.setdefault(family_name(family), self.clock.now())

    def updated(self, family: int | str) -> None:
        """The family's proxier synced successfully (or its sync loop started)."""
        name = family_name(family)
        self._oldest_pending.pop(name, None)
        self._last_updated[name] = self.clock.now()

    def sync_node(self, node: Mapping | None) -> None:
        """The Node object as the informer last saw it (None: not known / deleted)."""
        self._node = node

    def node_eligible(self) -> bool:
        return node_is_eligible(self._node)

    def health(self) -> ProxyHealth:
        return evaluate_proxy_health(self._last_updated, self._oldest_pending, self.clock.now(), self.health_timeout)

    # -- HTTP

    def healthz_response(self) -> web.Response:
        health = self.health()
        eligible = self.node_eligible()
        healthy = health.healthy and eligible
        return self._respond(health, healthy, self.metrics.proxy_healthz_total, node_eligible=eligible)

    def livez_response(self) -> web.Response:
        health = self.health()
        return self._respond(health, health.healthy, self.metrics.proxy_livez_total, node_eligible=None)

    def _respond(self, health: ProxyHealth, healthy: bool, counter, node_eligible: bool | None) -> web.Response:
        code = 200 if healthy else 503
        counter.labels(code=str(code)).inc()
        last_updated = health.current_time if healthy else health.last_updated
        body = ProxyHealth(health.healthy, last_updated, health.current_time, health.status, node_eligible).to_json()
        return web.Response(status=code, body=body.encode(), headers=JSON_HEADERS)

    async def healthz_handler(self, request: web.Request) -> web.Response:
        return self.healthz_response()

    async def livez_handler(self, request: web.Request) -> web.Response:
        return self.livez_response()

    def application(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/healthz", self.healthz_handler)
        app.router.add_route("*", "/livez", self.livez_handler)
        return app

    async def start(self, bind_address: str | None = None) -> int:
        """Serve ``/healthz`` and ``/livez`` on ``host:port`` (port 0 picks one); returns the port.
        Raises ``OSError`` with upstream's wording if the address cannot be bound."""
        address = bind_address if bind_address is not None else self.bind_address
        host, _, port = address.rpartition(":")
        try:
            sock = listen_socket(host.strip("[]"), int(port))
        except OSError as err:
            raise OSError(err.errno, f"failed to start proxy healthz on {address}: {go_listen_error(host.strip('[]'), int(port), err)}") from None

        async def dispatch(request: web.BaseRequest) -> web.StreamResponse:
            if request.path == "/healthz":
                return self.healthz_response()
            if request.path == "/livez":
                return self.livez_response()
            return web.Response(status=404, text="404 page not found\n")

        self._http = web.Server(dispatch, access_log=None)
        self._site = await asyncio.get_running_loop().create_server(self._http, sock=sock)
        return sock.getsockname()[1]

    async def stop(self) -> None:
        if self._site is not None:
            self._site.close()
            await self._http.shutdown(0.5)
            self._site = self._http = None


# ---- sockets with Go's listen semantics -------------------------------------------------------


def go_listen_error(host: str, port: int, err: OSError) -> str:
    """Go's wording of a failed listen: ``listen tcp 0.0.0.0:9376: bind: address already in use``."""
    return golang.listen_error(join_host_port(host or ANY_ADDRESS, port), err)


# ---- per-Service health-check node ports ---------------------------------------------------------


def service_health_body(service: str, local_endpoints: int, proxy_healthy: bool) -> str:
    """The exact body upstream writes (tab-indented, no trailing newline, ``%q`` strings)."""
    namespace, _, name = service.partition("/")
    return ("{\n"
            "\t\"service\": {\n"
            f"\t\t\"namespace\": {json.dumps(namespace)},\n"
            f"\t\t\"name\": {json.dumps(name)}\n"
            "\t},\n"
            f"\t\"localEndpoints\": {local_endpoints},\n"
            f"\t\"serviceProxyHealthy\": {'true' if proxy_healthy else 'false'}\n"
            "}")


@dataclass
class _HealthCheckedService:
    """One Service's listeners (upstream ``hcInstance``)."""

    service: str
    port: int
    endpoints: int = 0
    listeners: list[tuple[asyncio.AbstractServer, web.Server]] = field(default_factory=list)

    async def close(self) -> None:
        for site, http in self.listeners:
            site.close()
            await http.shutdown(0.1)
        self.listeners.clear()


class ServiceHealthServer:
    """The health-check node ports of one node (upstream ``ServiceHealthServer``).

    ``listen_ips`` (tests, or a caller that already knows them) overrides what is derived from
    ``node_port_addresses``: ``0.0.0.0`` when it matches everything, else its matching local
    addresses (all addresses if they cannot be listed). ``proxy_health`` is anything with
    ``health() -> ProxyHealth``. ``on_listen_failed(service, message)`` is called for each
    Service whose port could not be opened."""

    def __init__(self, hostname: str, node_port_addresses: NodePortAddresses | None, proxy_health,
                 on_listen_failed: Callable[[str, str], None] | None = None, *,
                 listen_ips: Sequence[str] | None = None,
                 interface_addresses: Callable[[], Iterable[str]] | None = None):
        self.hostname = hostname
        self.proxy_health = proxy_health
        self.on_listen_failed = on_listen_failed
        self.services: dict[str, _HealthCheckedService] = {}
        self.listen_ips: tuple[str, ...] = tuple(listen_ips) if listen_ips is not None else \
            health_check_listen_ips(node_port_addresses, interface_addresses)

    async def sync_services(self, new_services: Mapping[str, int] | None) -> None:
        """Make exactly ``{"ns/name": healthCheckNodePort}`` served: close the listeners of
        Services that went away or changed port, open the missing ones (failed ones are retried
        on the next call)."""
        wanted = dict(new_services or {})
        for service in sorted(self.services):
            current = self.services[service]
            if wanted.get(service) != current.port:
                log.info("Closing healthcheck service=%s port=%d", service, current.port)
                del self.services[service]
                await current.close()
        for service, port in sorted(wanted.items()):
            if service in self.services:
                continue
            log.info("Opening healthcheck service=%s port=%d", service, port)
            instance = _HealthCheckedService(service, port)
            try:
                await self._listen_all(instance)
            except OSError as err:
                message = f"node {self.hostname} failed to start healthcheck {json.dumps(service)} on port {port}: {err.strerror or err}"
                log.error("Failed to start healthcheck node=%s service=%s port=%d: %s", self.hostname, service, port, err.strerror or err)
                if self.on_listen_failed is not None:
                    self.on_listen_failed(service, message)
                continue
            self.services[service] = instance

    def sync_endpoints(self, new_endpoints: Mapping[str, int] | None) -> None:
        """Record each Service's local ready endpoint count; Services missing here get 0, counts
        of Services without a health check are dropped."""
        new_endpoints = new_endpoints or {}
        for service, instance in self.services.items():
            instance.endpoints = new_endpoints.get(service, 0)

    async def close(self) -> None:
        await self.sync_services({})

    def response(self, service: str) -> web.Response:
        """The answer for a request to ``service``'s port (upstream ``hcHandler``)."""
        instance = self.services.get(service)
        if instance is None:  # a request racing the close of its listener: nothing written
            log.error("Received request for closed healthcheck service=%s", service)
            return web.Response(status=200)
        count = instance.endpoints
        proxy_healthy = self.proxy_health.health().healthy
        headers = {**JSON_HEADERS, "X-Load-Balancing-Endpoint-Weight": str(count)}
        status = 200 if count != 0 and proxy_healthy else 503
        return web.Response(status=status, body=service_health_body(service, count, proxy_healthy).encode(), headers=headers)

    async def _listen_all(self, instance: _HealthCheckedService) -> None:
        loop = asyncio.get_running_loop()

        async def handle(request: web.BaseRequest) -> web.StreamResponse:
            return self.response(instance.service)

        for ip in self.listen_ips:
            try:
                sock = listen_socket(ip, instance.port)
            except OSError as err:
                await instance.close()  # free what was opened, so a retry (or another owner) can bind
                raise OSError(err.errno, go_listen_error(ip, instance.port, err)) from None
            http = web.Server(handle, access_log=None)
            site = await loop.create_server(http, sock=sock)
            instance.listeners.append((site, http))


def health_check_listen_ips(node_port_addresses: NodePortAddresses | None,
                            interface_addresses: Callable[[], Iterable[str]] | None = None) -> tuple[str, ...]:
    """Where health-check node ports listen (upstream ``newServiceHealthServer``): everywhere when
    ``nodePortAddresses`` matches all, else on the matching local addresses; if the addresses
    cannot be listed, everywhere."""
    if node_port_addresses is None or node_port_addresses.match_all:
        return (ANY_ADDRESS,)
    if interface_addresses is None:
        from kubesvc.kernel.netlink import local_addresses as interface_addresses
    try:
        return tuple(node_port_addresses.node_ips(interface_addresses()))
    except Exception as err:  # noqa: BLE001 - any failure to list means "listen everywhere", as upstream
        log.error("Failed to get node ip address matching node port addresses, health check port will listen to all node addresses "
                  "nodePortAddresses=%s: %s", node_port_addresses, err)
        return (ANY_ADDRESS,)
