"""Running the apiserver: storage, credentials, bootstrap objects, background loops, HTTPS.

Background loops, each the in-process stand-in for an upstream component:

* the compactor (kube-apiserver's ``--etcd-compaction-interval``, 0: none): on SQLite it keeps
  the newest ``--compaction-retain-revisions`` revisions; on etcd it is upstream's
  compare-and-swap on ``compact_rev_key`` (storage/etcd/compactor.py), so that several
  apiservers compact once per interval; watches and lists below get 410 Expired;
* the watch cache (kube-apiserver's cacher, ``--watch-cache``): one storage watch keeping every
  resource's objects and recent events in memory, which lists and watches are served from
  (apiserver/cacher.py);
* the namespace finalizer (kube-controller-manager's namespace controller): a namespace marked
  for deletion has its content deleted, then its ``kubernetes`` finalizer removed, and goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sqlite3
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from kubesvc.api.errors import StatusError
from kubesvc.api.scheme import all_kinds
from kubesvc.serving import pki as auth
from kubesvc.apiserver.auth.modes import DEFAULT_MODES, Authorization
from kubesvc.apiserver.reviews import register_review_handlers
from kubesvc.apiserver.app import build_app
from kubesvc.apiserver.auth.endpoints import install as install_authentication
from kubesvc.apiserver.auth.options import AuthenticationOptions
from kubesvc.serving.x509 import X509Authenticator
from kubesvc.apiserver.cacher import WatchCache
from kubesvc.apiserver.cacher_metrics import WatchCacheMetrics
from kubesvc.apiserver.registry.store import ListOptions, Registry
from kubesvc.apiserver.allocator.metrics import AllocatorMetrics
from kubesvc.apiserver.allocator.repair import Repair
from kubesvc.apiserver.allocator.service import ServiceAllocators
from kubesvc.apiserver.allocator.follow import AllocationFeed
from kubesvc.apiserver.allocator.servicecidr import ensure_default_service_cidr
from kubesvc.serving.x509 import request_client_certificates
from kubesvc.apiserver.kubeletclient import KubeletClient, ensure_kubelet_api_admin_binding, kubelet_client_user, kubelet_tls_context
from kubesvc.apiserver.admission.plugins import DEFAULT_ENABLED as DEFAULT_ADMISSION_PLUGINS, SERVICE_ACCOUNT
from kubesvc.apiserver.admission.namespace_lifecycle import NamespaceLifecycle
from kubesvc.apiserver.connections import DEFAULT_IDLE_TIMEOUT, DEFAULT_READ_HEADER_TIMEOUT, TimedSockSite
from kubesvc.apiserver.datadir import prepare_data_dir, storage_error
from kubesvc.apiserver.limits import DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT, DEFAULT_MAX_REQUESTS_INFLIGHT, InFlight
from kubesvc.apiserver.admission.serviceaccount import ServiceAccountAdmission
from kubesvc.apiserver.endpointreconciler import EndpointReconciler
from kubesvc.apiserver.kubernetes_service import KubernetesService, SystemObjects, ensure_system_namespaces
from kubesvc.apiserver.registry.strategy import allocation_strategies
from prometheus_client import CollectorRegistry
from kubesvc.storage import compact_to_window, open_backend
from kubesvc.util.wakeable import WakeableLoop
from kubesvc.util.clock import Clock, RealClock
from kubesvc.util.aio import cancel_and_wait
from kubesvc.util.ipnet import join_host_port
from kubesvc.apiserver import appkeys

if TYPE_CHECKING:  # the etcd client (gRPC) loads only for --storage-backend etcd3
    from kubesvc.storage.etcd import EtcdConfig

log = logging.getLogger("kubesvc.apiserver")

FIELD_MANAGER = "kube-apiserver"


@dataclass
class ServerConfig:
    data_dir: Path
    storage_backend: str = "sqlite"
    bind_address: str = "127.0.0.1"
    secure_port: int = 6443
    service_cluster_ip_range: str = "10.96.0.0/12"
    service_node_port_range: str = "30000-32767"
    feature_gates: dict[str, bool] = field(default_factory=dict)
    compaction_interval: float = 300.0
    compaction_retain_revisions: int = 10000
    etcd: EtcdConfig | None = None  # --storage-backend etcd3: --etcd-servers and the other --etcd-* flags
    watch_cache: bool = True  # --watch-cache: lists and watches from memory (apiserver/cacher.py)
    repair_services_interval: float = 180.0
    # identity (identity.md §5.1, §6.1); None: the generated cluster CA and certificates in <data-dir>/pki
    advertise_address: str | None = None
    client_ca_file: Path | None = None
    kubelet_client_certificate: Path | None = None
    kubelet_client_key: Path | None = None
    kubelet_certificate_authority: Path | None = None
    authorization_modes: tuple[str, ...] = DEFAULT_MODES  # --authorization-mode
    admission_plugins: frozenset[str] = DEFAULT_ADMISSION_PLUGINS  # --enable/--disable-admission-plugins
    endpoint_reconciler_type: str = "lease"  # --endpoint-reconciler-type: lease or none
    # connection handling (apiserver/limits.py, apiserver/connections.py)
    max_requests_inflight: int = DEFAULT_MAX_REQUESTS_INFLIGHT
    max_mutating_requests_inflight: int = DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT
    read_header_timeout: float = DEFAULT_READ_HEADER_TIMEOUT
    idle_connection_timeout: float = DEFAULT_IDLE_TIMEOUT
    authentication: AuthenticationOptions = field(default_factory=AuthenticationOptions)  # --anonymous-auth, --token-auth-file, --service-account-*
    path_handlers: tuple = ()  # app.PathHandler: non-resource paths served from above (kubesvc apiserver adds the Service map)


class NamespaceFinalizer:
    """Deletes the content of terminating namespaces, then the namespaces themselves."""

    def __init__(self, registry: Registry, interval: float = 2.0):
        self.registry = registry
        self._loop = WakeableLoop(self.sweep, interval, "namespace finalizer sweep")

    def kick(self) -> None:
        self._loop.kick()

    async def sweep(self) -> None:
        namespaces = self.registry.store("", "namespaces")
        items, _ = await namespaces.list(None, ListOptions())
        for ns in items:
            meta = ns["metadata"]
            if not meta.get("deletionTimestamp"):
                continue
            name = meta["name"]
            remaining = 0
            for store in self.registry.namespaced_stores():
                await store.delete_collection(name, ListOptions(), {"gracePeriodSeconds": 0})
                remaining += len((await store.list(name, ListOptions(limit=1)))[0])
            if remaining:
                continue

            def drop_kubernetes_finalizer(current: dict) -> dict:
                spec = current.setdefault("spec", {})
                spec["finalizers"] = [f for f in spec.get("finalizers") or [] if f != "kubernetes"]
                return current

            with contextlib.suppress(StatusError):
                await namespaces.guaranteed_update(None, name, drop_kubernetes_finalizer, field_manager=FIELD_MANAGER, subresource="finalize")

    async def run(self) -> None:
        await self._loop.run()


async def bootstrap(registry: Registry) -> None:
    await ensure_system_namespaces(registry)


async def build_control_plane(backend, clock: Clock, cidrs: list[str], node_port_range: str = "30000-32767", *,
                        static_subrange: bool = True, node_port_static_subrange: bool = True,
                        metrics_registry: CollectorRegistry | None = None,
                        authorization: Authorization | None = None,
                        admission: Sequence[ServiceAccountAdmission] = (),
                        feature_gates: Mapping[str, bool] | None = None) -> tuple[Registry, ServiceAllocators]:
    """The registry with its allocators, bootstrap objects in place (namespaces, the default
    ServiceCIDR) and the allocators' index loaded. ``allocators.service_cidr_controller`` is
    the controller for ServiceCIDRs, woken by every ServiceCIDR change and IP release.
    With ``authorization``, the RBAC kinds check escalation and the default RBAC policy is
    reconciled. Each ``admission`` plugin wraps the strategies of the kinds it admits."""
    allocators = ServiceAllocators(cidrs, node_port_range, static_subrange=static_subrange, node_port_static_subrange=node_port_static_subrange,
                                   metrics=AllocatorMetrics(metrics_registry))
    strategies = allocation_strategies(allocators, allocators.kick_service_cidrs, feature_gates=feature_gates)
    if authorization is not None:
        strategies = authorization.strategies(strategies)
    for plugin in admission:
        strategies = plugin.strategies(strategies)
    lifecycle = NamespaceLifecycle()  # always on
    strategies = lifecycle.strategies(strategies)
    registry = Registry(all_kinds(), backend, clock, strategies, namespace_lister=lifecycle.lister)
    allocators.attach(registry)
    await bootstrap(registry)
    if authorization is not None:
        await authorization.attach(registry)
    controller = await ensure_default_service_cidr(registry, [r.cidr for r in allocators.flag_ranges])
    allocators.service_cidr_controller = controller
    await allocators.load()
    return registry, allocators


def _host_address() -> str | None:
    """The machine's first global IPv4 address: the advertise address when bound to every
    address and none is given (upstream picks the default route's interface)."""
    from kubesvc.kernel.netlink import local_addresses

    for text in local_addresses(4):
        if not (text.startswith("127.") or text.startswith("169.254.")):
            return text
    return None


def _listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


class APIServer:
    """The whole apiserver as one object: ``await start()``, then ``await stop()``."""

    def __init__(self, config: ServerConfig, clock: Clock | None = None):
        self.config = config
        self.clock = clock or RealClock()
        self.backend = None
        self.registry: Registry | None = None
        self.runner: web.AppRunner | None = None
        self.port = 0
        self.kubeconfig = config.data_dir / "kubeconfig"
        self.advertise_address: str | None = None
        self.component_kubeconfigs: dict[str, Path] = {}
        self._tasks: list[asyncio.Task] = []
        self.authorization: Authorization | None = None
        self.endpoint_reconciler: EndpointReconciler | None = None

    @property
    def url(self) -> str:
        host = self.config.bind_address
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return f"https://{'[' + host + ']' if ':' in host else host}:{self.port}"

    async def start(self) -> None:
        config = self.config
        prepare_data_dir(config.data_dir)  # 0700, writable with room, or one line and exit
        if config.storage_backend == "etcd3":
            from kubesvc.storage.etcd import EtcdConfig, open_etcd

            self.backend = await open_etcd(config.etcd or EtcdConfig())  # one line (ValueError) when it does not answer
        else:
            try:
                self.backend = open_backend(config.storage_backend, str(config.data_dir))
            except (OSError, sqlite3.Error) as exc:
                raise storage_error(config.data_dir, exc) from None
        metrics_registry = CollectorRegistry()
        cidrs = [c.strip() for c in config.service_cluster_ip_range.split(",") if c.strip()]
        self.authorization = Authorization(config.authorization_modes)
        admission = [ServiceAccountAdmission(lambda: self.registry)] if SERVICE_ACCOUNT in config.admission_plugins else []
        loaded_since = await self.backend.current_revision()  # the allocators' index follows the store from here
        self.registry, self.allocators = await build_control_plane(
            self.backend, self.clock, cidrs, config.service_node_port_range,
            static_subrange=config.feature_gates.get("ServiceIPStaticSubrange", True),
            node_port_static_subrange=config.feature_gates.get("ServiceNodePortStaticSubrange", True), metrics_registry=metrics_registry,
            authorization=self.authorization, admission=admission, feature_gates=config.feature_gates)
        host_address = _host_address() if auth.unspecified(config.bind_address) and not config.advertise_address else None
        self.advertise_address = auth.advertise_address(config.advertise_address, config.bind_address, host_address)
        try:
            creds = auth.ensure_credentials(config.data_dir, config.bind_address, advertise=self.advertise_address, service_cidrs=cidrs)
        except OSError as exc:
            raise storage_error(config.data_dir, exc) from None
        sock = _listening_socket(config.bind_address, config.secure_port)
        self.port = sock.getsockname()[1]
        kubernetes_service = KubernetesService(self.registry, self.allocators, self.port)
        await kubernetes_service.ensure()
        system_objects = SystemObjects(self.registry, kubernetes_service)
        repair = Repair(self.registry, self.allocators, self.clock, index_follows_store=True)  # _follow_allocations
        finalizer = NamespaceFinalizer(self.registry)
        kubelet_client_cert = config.kubelet_client_certificate or creds.kubelet_client.cert
        kubelet_client = KubeletClient(kubelet_tls_context(kubelet_client_cert, config.kubelet_client_key or creds.kubelet_client.key,
                                                           config.kubelet_certificate_authority or creds.ca_cert))
        await ensure_kubelet_api_admin_binding(self.registry, kubelet_client_user(kubelet_client_cert))
        app = build_app(self.registry, self.clock, join_host_port(config.bind_address, self.port), metrics_registry, kubelet_client)
        cache_metrics = WatchCacheMetrics(metrics_registry)  # watch events are counted with the cache off too
        app[appkeys.WATCH_CACHE_METRICS] = cache_metrics
        watch_cache = (WatchCache(self.backend, [store.info for store in self.registry.stores.values()], metrics=cache_metrics)
                       if config.watch_cache else None)
        if watch_cache is not None:
            app[appkeys.WATCH_CACHE] = watch_cache
            self.registry.namespace_lister.use_cache(watch_cache)  # a create's namespace from memory
        app[appkeys.NAMESPACE_FINALIZER] = finalizer
        app[appkeys.PATH_HANDLERS].extend(config.path_handlers)
        app[appkeys.IN_FLIGHT] = InFlight(config.max_requests_inflight, config.max_mutating_requests_inflight)
        app[appkeys.ADMISSION_WAITS] = [plugin.wait_ready for plugin in admission]  # run by the create handlers
        app[appkeys.AUTHORIZER] = self.authorization.authorizer
        register_review_handlers(app)
        install_authentication(app, config.authentication, config.data_dir, self.url.removeprefix("https://"), x509=X509Authenticator())
        self.authorization.admit_token_requests(app[appkeys.CREATE_HANDLERS])  # NodeRestriction
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(creds.serving_cert, creds.serving_key)
        request_client_certificates(tls, config.client_ca_file or creds.ca_cert)  # x509 authentication
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self.runner.setup()
        site = TimedSockSite(self.runner, sock, ssl_context=tls, shutdown_timeout=1.0,
                             header_timeout=config.read_header_timeout, idle_timeout=config.idle_connection_timeout)
        await site.start()
        auth.write_kubeconfig(self.kubeconfig, self.url, auth.cluster_ca(config.data_dir), auth.ADMIN_USER, creds.admin)
        self.component_kubeconfigs = auth.write_component_kubeconfigs(config.data_dir, self.url)
        self.authorization.start()
        self._tasks = [
            *([await watch_cache.start()] if watch_cache is not None else []),
            asyncio.create_task(system_objects.run()),
            asyncio.create_task(finalizer.run()),
            *([asyncio.create_task(self._compactor())] if config.compaction_interval else []),
            asyncio.create_task(self.allocators.service_cidr_controller.run()),
            asyncio.create_task(repair.run(config.repair_services_interval)),
            *self._follow_allocations(loaded_since, watch_cache),
        ]
        if config.endpoint_reconciler_type == "lease":  # default/kubernetes endpoints at the live apiservers' advertise addresses
            self.endpoint_reconciler = EndpointReconciler(self.registry, self.advertise_address, self.port, self.clock)
            self._tasks.append(asyncio.create_task(self.endpoint_reconciler.run()))

    def _follow_allocations(self, since: int, cache: WatchCache | None) -> list[asyncio.Task]:
        """Keep the allocators' index current with every apiserver's writes (allocator/follow.py):
        from the watch cache's events when there is one, else from storage watches."""
        feed = AllocationFeed(self.allocators, self.backend)
        feed.since(since)
        if cache is not None:
            return feed.follow_cache(cache)
        return feed.start()

    async def _compactor(self) -> None:
        if self.config.storage_backend == "etcd3":
            from kubesvc.storage.etcd.compactor import Compactor

            await Compactor(self.backend, self.config.compaction_interval).run()
        while True:
            await asyncio.sleep(self.config.compaction_interval)
            try:
                await compact_to_window(self.backend, self.config.compaction_retain_revisions)
            except Exception:
                log.exception("compaction failed")

    async def stop(self) -> None:
        if self.endpoint_reconciler is not None:
            try:
                await self.endpoint_reconciler.remove()  # our address leaves the kubernetes Service now
            except Exception as err:  # noqa: BLE001 - stopping goes on; the lease expires in 15 s anyway
                log.warning("unable to remove endpoints from kubernetes service: %s", err)
        await cancel_and_wait(self._tasks, raise_errors=True)
        if self.authorization is not None:
            await self.authorization.stop()
        if self.runner is not None:
            await self.runner.cleanup()
        if self.backend is not None:
            await self.backend.close()
