"""``kubesvc proxy``: kube-proxy's process (upstream ``cmd/kube-proxy/app/server.go``).

Start-up, in upstream's order:

1. The node name (``--hostname-override``, else the host name) and the node's IPs: from the
   Node object's addresses (InternalIP, then ExternalIP), waiting briefly for it, else
   ``--bind-address``, else 127.0.0.1 with a warning.
2. Clean up what other modes left behind (nftables mode removes iptables chains, iptables
   mode removes the nftables table), so switching modes never leaves two sets of rules; then
   the host's conntrack sysctls (``proxy/startup.py``, upstream ``platformSetup``).
3. One proxier per IP family the kernel supports (dual-stack, as ``metaproxier``).
4. Informers: Services and EndpointSlices with kube-proxy's label selector
   (``!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless``), our own Node
   (``metadata.name=<node>``) and ServiceCIDRs; every event goes to every family's proxier.
5. Servers: health (``--healthz-bind-address``, ``/healthz`` ``/livez``) and metrics
   (``--metrics-bind-address``: ``/metrics``, ``/healthz``, ``/proxyMode``, ``/configz``).
6. The sync loops, until SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import json
import logging

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, disable_created_metrics, generate_latest

from kubesvc.client.informer import Informer
from kubesvc.client.record import EventRecorder
from kubesvc.client.rest import ENDPOINTSLICES, NODES, SERVICECIDRS, SERVICES, RestClient
from kubesvc.kernel.exec import CleanupFailed, CommandFailed
from kubesvc.proxy.config import ProxySettings, options_for_family
from kubesvc.proxy.healthcheck import ProxyHealthServer, ServiceHealthServer
from kubesvc.serving.listen import listen_socket
from kubesvc.proxy.backend import ProxyOptions
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.nodeportaddresses import NodePortAddresses, detect_node_ips, node_ips_from_node
from kubesvc.kernel.netlink import local_addresses_async
from kubesvc.proxy.proxier import Proxier
from kubesvc.proxy.startup import READ_ONLY_SYSFS_MESSAGE, READ_ONLY_SYSFS_REASON, RETRY_BIND_EVERY, setup_conntrack
from kubesvc.proxy.types import IPV4, IPV6
from kubesvc.util.aio import cancel_and_wait

log = logging.getLogger("kubesvc.proxy")

PROXY_LABEL_SELECTOR = "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless"
NODE_IP_WAIT = 10.0

disable_created_metrics()


def make_backend(mode: str, options: ProxyOptions, *, sync_period: float = 30.0, udp_idle_timeout: float = 0.25, ipvs=None):
    """The kernel mode ``mode`` for one family (the shared ``Proxier`` holds the metrics and
    counts for every mode)."""
    if mode == "nftables":
        from kubesvc.proxy.nftables.proxier import NftablesBackend
        return NftablesBackend(options, check_period=sync_period)
    if mode == "iptables":
        from kubesvc.proxy.iptables.proxier import IptablesBackend
        # Upstream polls the canaries every syncPeriod and then waits up to 5 s for the other
        # tables' canaries, so a flush can take syncPeriod + 5 s to repair; halving both keeps
        # the repair within syncPeriod.
        return IptablesBackend(options, canary_period=sync_period / 2, flush_timeout=min(5.0, sync_period / 2))
    if mode == "userspace":
        from kubesvc.proxy.userspace.proxier import UserspaceBackend
        return UserspaceBackend(options, udp_idle_timeout=udp_idle_timeout, publish_state=True)
    if mode == "ipvs":  # only reached when IPVS is usable (ProxyServer._ipvs_or_fallback)
        from kubesvc.proxy.ipvs.proxier import IpvsBackend
        return IpvsBackend(options, settings=ipvs, sync_period=sync_period)
    raise ValueError(f"proxy mode {mode!r} is not implemented")


# ipvs before iptables: IPVS mode's own chains reference chains the two share (KUBE-MARK-MASQ),
# and its jumps differ in comment from iptables mode's. ipvs: skipped where IPVS never ran.
MODES_WITH_LEFTOVERS = ("nftables", "ipvs", "iptables", "userspace")
IPTABLES_BASED = ("iptables", "ipvs")


def cleanup_leftovers(modes: tuple[str, ...] = MODES_WITH_LEFTOVERS) -> list[str]:
    """Remove every table, chain and rule the given modes ever made, in both families
    (``--cleanup``); returns the errors (empty: clean). Each mode is cleaned even if another fails."""
    from kubesvc.proxy.iptables.proxier import cleanup_leftovers as clean_iptables
    from kubesvc.proxy.nftables.proxier import cleanup_leftovers as clean_nftables
    from kubesvc.proxy.userspace.proxier import cleanup_leftovers as clean_userspace

    from kubesvc.proxy.ipvs.proxier import cleanup_leftovers as clean_ipvs

    cleaners = {"nftables": clean_nftables, "iptables": clean_iptables, "userspace": clean_userspace, "ipvs": clean_ipvs}
    errors: list[str] = []
    for mode in modes:
        try:
            cleaners[mode]()
        except (CleanupFailed, CommandFailed) as err:
            errors.append(str(err))
    return errors


def _nodeport_ips_of(addresses: NodePortAddresses, family: int):
    """The node's current addresses accepting NodePorts, read at each sync (addresses change);
    None when every local address does."""
    async def nodeport_ips() -> tuple[str, ...] | None:
        if addresses.match_all:
            return None
        return tuple(addresses.node_ips(await local_addresses_async(family)))
    return nodeport_ips


class ProxyServer:
    def __init__(self, client: RestClient, settings: ProxySettings):
        self.client = client
        self.settings = settings
        self.node_name = settings.hostname
        self.metrics = ProxyMetrics()
        self.health = ProxyHealthServer(settings.healthz_bind_address, settings.health_timeout, self.metrics)
        self.recorder = EventRecorder(client, "kube-proxy")
        self.proxiers: list[Proxier] = []
        self.informers: list[Informer] = []
        self._tasks: list[asyncio.Task] = []
        self._runners: list[web.AppRunner] = []
        self.metrics_port: int | None = None
        self._node: dict | None = None
        self.setup_conntrack = setup_conntrack  # the host's conntrack sysctls (injectable)
        self.retry_bind_every = RETRY_BIND_EVERY

    async def _wait_for_node(self) -> dict | None:
        """Our Node object, if it shows up within ``NODE_IP_WAIT`` with addresses."""
        nodes = self.client.resource(NODES)
        deadline = asyncio.get_running_loop().time() + NODE_IP_WAIT
        while True:
            try:
                node = await nodes.get(self.node_name)
                if node_ips_from_node(node):
                    return node
            except Exception as err:
                log.debug("node %s not readable yet: %s", self.node_name, err)
            if asyncio.get_running_loop().time() > deadline:
                return None
            await asyncio.sleep(0.5)

    async def start(self) -> None:
        if self.settings.mode == "ipvs":
            await self._ipvs_or_fallback()
        mode = self.settings.mode
        # upstream platformCleanup: switching between the iptables-based modes cleans neither
        # (each rewrites the chains they share); anything else is cleaned
        others = tuple(m for m in MODES_WITH_LEFTOVERS if m != mode and not (m in IPTABLES_BASED and mode in IPTABLES_BASED))
        for err in await asyncio.to_thread(cleanup_leftovers, others):  # blocking tools; keep the loop free
            log.warning("cleanup of %s", err)
        self._node = node = await self._wait_for_node()
        primary, node_ips = detect_node_ips(node_ips_from_node(node), self.settings.bind_address)
        if node is None and primary == IPV4 and node_ips[IPV4] == "127.0.0.1":
            log.warning("Can't determine this node's IP, assuming loopback; if this is incorrect, please set the --bind-address flag")
        conntrack = await asyncio.to_thread(self.setup_conntrack, self.settings.conntrack)  # upstream platformSetup
        if conntrack.read_only_sysfs:
            self.recorder.event(self._node_ref(), "Warning", READ_ONLY_SYSFS_REASON, READ_ONLY_SYSFS_MESSAGE, action="StartKubeProxy")
        for family in (IPV4, IPV6):
            addresses = NodePortAddresses(self.settings.nodeport_addresses, family, [node_ips[family]])
            service_health = None
            if family == primary:  # one set of health-check listeners, on the primary family's addresses
                service_health = ServiceHealthServer(self.node_name, addresses, self.health, self._health_failed)
            options = options_for_family(self.settings, family, node)
            backend = make_backend(mode, options, sync_period=self.settings.sync_period,
                                   udp_idle_timeout=self.settings.udp_idle_timeout, ipvs=self.settings.ipvs)
            self.proxiers.append(Proxier(
                backend, options, self.metrics, min_sync_period=self.settings.min_sync_period,
                sync_period=self.settings.sync_period, health=self.health, service_health=service_health,
                nodeport_ips=_nodeport_ips_of(addresses, family), node_ip=node_ips[family], report_pending=family == primary))
        self._start_informers()
        await self._serve()
        for proxier in self.proxiers:
            self._tasks.append(asyncio.create_task(proxier.run()))

    async def _ipvs_or_fallback(self) -> None:
        """ipvs mode on a kernel without IPVS (or without ipset) runs the iptables proxier:
        ``self.settings`` becomes the settings actually running (``/proxyMode``), their
        ``configz`` unchanged."""
        from kubesvc.proxy.ipvs.support import can_use_ipvs, iptables_fallback

        reason = await asyncio.to_thread(can_use_ipvs, self.settings.ipvs.scheduler)
        if reason:
            log.warning("Can't use the IPVS proxier: %s; using iptables Proxier", reason)
            self.settings = iptables_fallback(self.settings)

    def _health_failed(self, service: str, message: str) -> None:
        namespace, _, name = service.partition("/")
        ref = {"apiVersion": "v1", "kind": "Service", "metadata": {"namespace": namespace, "name": name}}
        self.recorder.event(ref, "Warning", "FailedToStartServiceHealthcheck", message, action="Listen")

    def _start_informers(self) -> None:
        resync = self.settings.config_sync_period
        services = Informer(self.client, SERVICES, label_selector=PROXY_LABEL_SELECTOR, resync_period=resync)
        slices = Informer(self.client, ENDPOINTSLICES, label_selector=PROXY_LABEL_SELECTOR, resync_period=resync)
        nodes = Informer(self.client, NODES, field_selector=f"metadata.name={self.node_name}", resync_period=resync)
        cidrs = Informer(self.client, SERVICECIDRS, resync_period=resync)
        for proxier in self.proxiers:
            services.add_event_handler(proxier.on_service_add, proxier.on_service_update, proxier.on_service_delete)
            slices.add_event_handler(proxier.on_endpoint_slice_add, proxier.on_endpoint_slice_update, proxier.on_endpoint_slice_delete)
        nodes.add_event_handler(self._on_node, lambda old, new: self._on_node(new), lambda node: self._on_node(None))
        cidrs.add_event_handler(lambda _: self._on_cidrs(cidrs), lambda _o, _n: self._on_cidrs(cidrs), lambda _: self._on_cidrs(cidrs))
        self.informers = [services, slices, nodes, cidrs]
        for informer in self.informers:
            self._tasks.append(asyncio.create_task(informer.run()))
        self._tasks.append(asyncio.create_task(self._mark_synced(services, "on_services_synced")))
        self._tasks.append(asyncio.create_task(self._mark_synced(slices, "on_endpoint_slices_synced")))

    async def _mark_synced(self, informer: Informer, callback: str) -> None:
        await informer.wait_for_sync()
        for proxier in self.proxiers:
            getattr(proxier, callback)()

    def _on_node(self, node: dict | None) -> None:
        self.health.sync_node(node)
        for proxier in self.proxiers:
            proxier.on_node(node)

    def _on_cidrs(self, informer: Informer) -> None:
        cidrs = [cidr for obj in informer.indexer.list() for cidr in (obj.get("spec") or {}).get("cidrs") or []
                 if not (obj.get("metadata") or {}).get("deletionTimestamp")]
        for proxier in self.proxiers:
            proxier.on_service_cidrs(cidrs)

    # ---- HTTP servers ---------------------------------------------------------------------------

    def _node_ref(self) -> dict:
        """Upstream's NodeRef: the Node by name, with the name as its UID."""
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node_name, "uid": self.node_name}}

    async def _serve(self) -> None:
        """The healthz and metrics servers. A bind failure ends the start with
        ``bindAddressHardFail`` (after a Warning Event on the Node, as upstream's Run); without
        it the failure is logged and the bind retried every 5 s (upstream's wait.Until)."""
        if self.settings.healthz_bind_address:
            await self._start_server("Healthz", self._start_healthz, "FailedToStartProxierHealthcheck")
        if self.settings.metrics_bind_address:
            await self._start_server("Metrics", self._start_metrics, "FailedToStartMetricServer")

    async def _start_server(self, name: str, start, reason: str) -> None:
        try:
            await start()
            return
        except OSError as err:
            if self.settings.bind_address_hard_fail:
                self.recorder.event(self._node_ref(), "Warning", reason, f"{name.lower()} server failed: {err}", action="StartKubeProxy")
                raise
            log.error("%s server failed: %s (retrying every %g s)", name, err, self.retry_bind_every)
        self._tasks.append(asyncio.create_task(self._retry_server(name, start)))

    async def _retry_server(self, name: str, start) -> None:
        while True:
            await asyncio.sleep(self.retry_bind_every)
            try:
                await start()
            except OSError as err:
                log.error("%s server failed: %s", name, err)
                continue
            log.info("%s server started", name)
            return

    async def _start_healthz(self) -> None:
        await self.health.start(self.settings.healthz_bind_address)

    async def _start_metrics(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/proxyMode", self._proxy_mode)
        app.router.add_get("/configz", self._configz)
        app.router.add_get("/healthz", self.health.healthz_handler)
        host, _, port = self.settings.metrics_bind_address.rpartition(":")
        sock = listen_socket(host.strip("[]"), int(port))
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        await web.SockSite(runner, sock, shutdown_timeout=0.5).start()
        self._runners.append(runner)
        self.metrics_port = sock.getsockname()[1]

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _proxy_mode(self, request: web.Request) -> web.Response:
        return web.Response(text=self.settings.mode)

    async def _configz(self, request: web.Request) -> web.Response:
        return web.Response(text=json.dumps({"kubeproxy.config.k8s.io": self.settings.configz()}), content_type="application/json")

    async def stop(self) -> None:
        for informer in self.informers:
            informer.stop()
        await cancel_and_wait(self._tasks)
        for proxier in self.proxiers:
            if proxier.service_health is not None:
                await proxier.service_health.sync_services({})
        await self.health.stop()
        for runner in self._runners:
            await runner.cleanup()
        await self.recorder.flush()
