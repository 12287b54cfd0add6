"""``kubesvc controller-manager``: kube-controller-manager's Service networking controllers in one
process, as an API client.

* **Controllers** (``--controllers``, default ``*``; ``-name`` disables one; upstream's names
  and their older short aliases):
  ``endpointslice-controller`` (slices for selector Services),
  ``endpointslice-mirroring-controller`` (slices for custom Endpoints),
  ``endpoints-controller`` (legacy Endpoints for selector Services),
  ``garbage-collector-controller`` (ownerReferences; off with ``--enable-garbage-collector=false``),
  ``serviceaccount-controller`` (a ``default`` ServiceAccount in every active namespace),
  ``root-ca-certificate-publisher-controller`` (a ``kube-root-ca.crt`` ConfigMap in every
  namespace, holding ``--root-ca-file`` or else the CA of the manager's kubeconfig),
  ``pod-scheduler`` (binds unscheduled Pods to Ready Nodes, spreading them; kube-scheduler's
  job, kept small),
  ``deployment-controller``, ``daemonset-controller``, ``job-controller``,
  ``ttl-after-finished-controller`` (the workloads: controllers/deployment, daemonset, job),
  ``pod-garbage-collector-controller`` (podgc: the terminated-Pod excess over
  ``--terminated-pod-gc-threshold``, orphans of deleted Nodes, terminating Pods no kubelet
  will finish: controllers/podgc),
  ``replicaset-controller`` and ``replicationcontroller-controller`` (one code for both kinds:
  controllers/replicaset), ``cronjob-controller`` (controllers/cronjob),
  ``certificatesigningrequest-approving-controller``, ``-signing-controller`` (with
  ``--cluster-signing-cert-file``/``-key-file``) and ``-cleaner-controller`` (csrapproving,
  csrsigning, csrcleaner: controllers/certificates), ``node-ipam-controller`` (with
  ``--allocate-node-cidrs``: controllers/nodeipam), ``service-lb-controller`` (LoadBalancer
  addresses from kubesvc.io LoadBalancerIPPools: controllers/loadbalancer).
* **Identities**: the shared informers and leader election use the manager's own client
  (``--kubeconfig``, ``system:kube-controller-manager``). Each controller writes with the client
  a client builder (controllers/clientbuilder.py) gives for its ServiceAccount name
  (``CONTROLLER_SERVICE_ACCOUNTS``) once leadership is won: with
  ``--use-service-account-credentials`` (``kubesvc up`` sets it) it is that kube-system
  ServiceAccount, with renewed TokenRequest tokens, so RBAC grants it its
  ``system:controller:<name>`` role; without, the manager's own credentials, as upstream. The
  pod-scheduler (kube-scheduler's job) has no ServiceAccount: it uses ``--scheduler-kubeconfig``
  (``system:kube-scheduler``), given as a fixed client (``controller_clients``).
* **Shared informers**: Services, Pods, Nodes, EndpointSlices and Endpoints are listed and
  watched once for all controllers; controllers start working only after every cache synced.
* **Leader election** (``--leader-elect``, default true): a ``coordination.k8s.io`` Lease
  ``kube-system/kube-controller-manager``; only its holder runs controllers, so two managers
  never both write. Losing the lease stops the controllers and ends the process with an
  error, as upstream does (its supervisor restarts it as a fresh candidate).
* **Serving** (``--bind-address``, ``--secure-port`` 10257, 0 disables): HTTPS with a throw-away
  certificate, ``/healthz``, ``/readyz``, ``/livez`` and ``/metrics`` (every controller's metrics).
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, disable_created_metrics, generate_latest

from kubesvc.serving.pki import ephemeral_serving_context
from kubesvc.client.rest import NAMESPACES, ClientError, RestClient
from kubesvc.controllers.endpointslice.controller import EndpointSliceController
from kubesvc.controllers.endpointslice.metrics import EndpointSliceMetrics
from kubesvc.controllers.informers import SharedInformers
from kubesvc.controllers.mirroring.controller import EndpointSliceMirroringController
from kubesvc.controllers.mirroring.metrics import EndpointSliceMirroringMetrics
from kubesvc.controllers.job.metrics import JobMetrics
from kubesvc.controllers.job.ttlafterfinished import TTLAfterFinishedMetrics
from kubesvc.controllers.podgc.controller import PodGCMetrics
from kubesvc.util.clock import Clock, RealClock

log = logging.getLogger("kubesvc.controllers.manager")

ENDPOINTSLICE = "endpointslice-controller"
MIRRORING = "endpointslice-mirroring-controller"
ENDPOINTS = "endpoints-controller"
GARBAGE_COLLECTOR = "garbage-collector-controller"
SCHEDULER = "pod-scheduler"
SERVICEACCOUNT = "serviceaccount-controller"
ROOT_CA_CERT_PUBLISHER = "root-ca-certificate-publisher-controller"
CSR_APPROVING = "certificatesigningrequest-approving-controller"
CSR_SIGNING = "certificatesigningrequest-signing-controller"
CSR_CLEANER = "certificatesigningrequest-cleaner-controller"
NODE_IPAM = "node-ipam-controller"
DEPLOYMENT = "deployment-controller"
DAEMONSET = "daemonset-controller"
JOB = "job-controller"
TTL_AFTER_FINISHED = "ttl-after-finished-controller"
REPLICASET = "replicaset-controller"
REPLICATION = "replicationcontroller-controller"
CRONJOB = "cronjob-controller"
SERVICE_LB = "service-lb-controller"
PODGC = "pod-garbage-collector-controller"
KNOWN_CONTROLLERS = (ENDPOINTSLICE, MIRRORING, ENDPOINTS, GARBAGE_COLLECTOR, SCHEDULER, SERVICEACCOUNT, ROOT_CA_CERT_PUBLISHER,
                     CSR_APPROVING, CSR_SIGNING, CSR_CLEANER, NODE_IPAM, DEPLOYMENT, DAEMONSET, JOB, TTL_AFTER_FINISHED,
                     REPLICASET, REPLICATION, CRONJOB, SERVICE_LB, PODGC)
# Each controller's identity with upstream's --use-service-account-credentials: the
# kube-system ServiceAccount its system:controller:<name> ClusterRole is bound to.
CONTROLLER_SERVICE_ACCOUNTS = {ENDPOINTSLICE: "endpointslice-controller", MIRRORING: "endpointslicemirroring-controller",
                               ENDPOINTS: "endpoint-controller", GARBAGE_COLLECTOR: "generic-garbage-collector",
                               SERVICEACCOUNT: "service-account-controller", ROOT_CA_CERT_PUBLISHER: "root-ca-cert-publisher",
                               CSR_APPROVING: "certificate-controller", CSR_SIGNING: "certificate-controller",
                               CSR_CLEANER: "certificate-controller", NODE_IPAM: "node-controller",
                               DEPLOYMENT: "deployment-controller", DAEMONSET: "daemon-set-controller", JOB: "job-controller",
                               TTL_AFTER_FINISHED: "ttl-after-finished-controller", REPLICASET: "replicaset-controller",
                               REPLICATION: "replication-controller", CRONJOB: "cronjob-controller", SERVICE_LB: "service-controller",
                               PODGC: "pod-garbage-collector"}
ALIASES = {"endpointslice": ENDPOINTSLICE, "endpointslicemirroring": MIRRORING, "endpoint": ENDPOINTS,
           "endpoints": ENDPOINTS, "garbagecollector": GARBAGE_COLLECTOR, "scheduler": SCHEDULER,
           "serviceaccount": SERVICEACCOUNT, "root-ca-cert-publisher": ROOT_CA_CERT_PUBLISHER,
           "csrapproving": CSR_APPROVING, "csrsigning": CSR_SIGNING, "csrcleaner": CSR_CLEANER, "nodeipam": NODE_IPAM,
           "deployment": DEPLOYMENT, "daemonset": DAEMONSET, "job": JOB, "ttl-after-finished": TTL_AFTER_FINISHED,
           "replicaset": REPLICASET, "replicationcontroller": REPLICATION, "cronjob": CRONJOB, "service": SERVICE_LB, "podgc": PODGC}


class LeaderElectionLost(Exception):
    pass


class ControllerClientFailed(Exception):
    """A controller's client could not be built (upstream's ``Error in getting client``, which
    ends kube-controller-manager)."""


class ClientBuilder(Protocol):
    """Gives the client a controller writes with, by its ServiceAccount's name."""

    async def client(self, name: str) -> RestClient: ...


def enabled_controllers(spec: list[str]) -> set[str]:
    """``--controllers``: ``*`` is every controller on by default, ``name`` turns one on,
    ``-name`` off (upstream's IsControllerEnabled). Unknown names are an error."""
    wanted: set[str] = set()
    disabled: set[str] = set()
    star = False
    for item in (s.strip() for s in spec):
        if not item:
            continue
        if item == "*":
            star = True
            continue
        negated = item.startswith("-")
        name = ALIASES.get(item.lstrip("-"), item.lstrip("-"))
        if name not in KNOWN_CONTROLLERS:
            raise ValueError(f'"{item.lstrip("-")}" is not in the list of known controllers')
        (disabled if negated else wanted).add(name)
    if star:
        wanted |= set(KNOWN_CONTROLLERS)
    return wanted - disabled


@dataclass
class ManagerConfig:
    controllers: set[str] = field(default_factory=lambda: set(KNOWN_CONTROLLERS))
    concurrent_service_endpoint_syncs: int = 5
    concurrent_endpoint_syncs: int = 5
    mirroring_concurrent_service_endpoint_syncs: int = 5
    concurrent_gc_syncs: int = 20
    concurrent_deployment_syncs: int = 5
    concurrent_daemonset_syncs: int = 2
    concurrent_job_syncs: int = 5
    concurrent_ttl_after_finished_syncs: int = 5
    terminated_pod_gc_threshold: int = 12500  # pod-garbage-collector-controller; 0 turns that part off
    max_endpoints_per_slice: int = 100
    feature_gates: dict[str, bool] = field(default_factory=dict)  # --feature-gates (only the ones given)
    endpointslice_updates_batch_period: float = 0.0
    endpoint_updates_batch_period: float = 0.0
    mirroring_max_endpoints_per_subset: int = 1000
    mirroring_endpointslice_updates_batch_period: float = 0.0
    enable_garbage_collector: bool = True
    leader_elect: bool = True
    leader_elect_lease_duration: float = 15.0
    leader_elect_renew_deadline: float = 10.0
    leader_elect_retry_period: float = 2.0
    leader_elect_resource_name: str = "kube-controller-manager"
    leader_elect_resource_namespace: str = "kube-system"
    identity: str = ""
    bind_address: str = "0.0.0.0"
    secure_port: int = 10257
    root_ca_file: str | None = None  # --root-ca-file; default: the CA of the manager's kubeconfig
    # csrsigning: skipped without a CA, as upstream ("no csr cert/key was specified")
    cluster_signing_cert_file: str | None = None
    cluster_signing_key_file: str | None = None
    cluster_signing_duration: float = 8760 * 3600.0
    # node-ipam-controller: off unless --allocate-node-cidrs
    allocate_node_cidrs: bool = False
    cluster_cidr: str = ""
    node_cidr_mask_size: int = 0
    node_cidr_mask_size_ipv4: int = 0
    node_cidr_mask_size_ipv6: int = 0


class ControllerManager:
    def __init__(self, client: RestClient, config: ManagerConfig, clock: Clock | None = None, *,
                 client_builder: ClientBuilder | None = None, controller_clients: dict[str, RestClient] | None = None):
        self.client = client
        # controller name -> the client it writes with; with no builder, the rest use ``client``
        self.controller_clients = dict(controller_clients or {})
        self.client_builder = client_builder
        self.config = config
        self.clock = clock or RealClock()
        self.metrics_registry = CollectorRegistry()
        # built once: controllers are rebuilt each time leadership is won, metrics live on
        self.endpointslice_metrics = EndpointSliceMetrics(config.max_endpoints_per_slice, self.metrics_registry)
        self.mirroring_metrics = EndpointSliceMirroringMetrics(config.mirroring_max_endpoints_per_subset, self.metrics_registry)
        self.podgc_metrics = PodGCMetrics(self.metrics_registry)
        self.job_metrics = JobMetrics(self.metrics_registry)
        self.ttl_after_finished_metrics = TTLAfterFinishedMetrics(self.metrics_registry)
        self.leading = asyncio.Event()
        self.caches_synced = asyncio.Event()
        self.controllers: dict[str, object] = {}
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def run(self) -> None:
        """Serve health and metrics, then (once leader) run the controllers until cancelled.
        Raises LeaderElectionLost when the lease is lost."""
        await self.serve()
        try:
            if not self.config.leader_elect:
                await self.run_controllers()
                return
            from kubesvc.client.leaderelection import LeaderElector, default_identity

            elector = LeaderElector(
                self.client,
                namespace=self.config.leader_elect_resource_namespace,
                name=self.config.leader_elect_resource_name,
                identity=self.config.identity or default_identity(),
                lease_duration=self.config.leader_elect_lease_duration,
                renew_deadline=self.config.leader_elect_renew_deadline,
                retry_period=self.config.leader_elect_retry_period,
                clock=self.clock,
            )
            await elector.run(self.run_controllers)
            raise LeaderElectionLost("leaderelection lost")
        finally:
            await self.stop_serving()

    async def run_controllers(self) -> None:
        await self._build_clients()
        self.leading.set()
        informers = SharedInformers(self.client)
        runs = self._build(informers)
        informers.start()
        try:
            if not await informers.wait_for_sync(timeout=None):
                return
            log.info("caches synced; starting controllers: %s", ", ".join(sorted(self.controllers)))
            self.caches_synced.set()
            async with asyncio.TaskGroup() as group:
                for run in runs:
                    group.create_task(run())
        finally:
            self.leading.clear()
            self.caches_synced.clear()
            await informers.stop()

    async def _build_clients(self) -> None:
        """A client from the builder for each enabled controller that has a ServiceAccount (a
        failure, such as the ServiceAccount not being creatable, ends the run: upstream's
        ``ClientOrDie``)."""
        if self.client_builder is None:
            return
        built: dict[str, RestClient] = {}  # one client per ServiceAccount (certificate-controller serves three)
        for controller in sorted(self.config.controllers):
            if controller == GARBAGE_COLLECTOR and not self.config.enable_garbage_collector:
                continue
            service_account = CONTROLLER_SERVICE_ACCOUNTS.get(controller)
            if service_account and service_account in built:
                self.controller_clients.setdefault(controller, built[service_account])
                continue
            if service_account and controller not in self.controller_clients:
                try:
                    self.controller_clients[controller] = built[service_account] = await self.client_builder.client(service_account)
                except ClientError as err:
                    raise ControllerClientFailed(f"Error in getting client for {service_account}: {err}") from err

    def _client_for(self, controller: str) -> RestClient:
        return self.controller_clients.get(controller, self.client)

    def _build(self, informers: SharedInformers) -> list:
        config, enabled = self.config, self.config.controllers
        runs = []
        if ENDPOINTSLICE in enabled:
            controller = EndpointSliceController(
                self._client_for(ENDPOINTSLICE), informers, max_endpoints_per_slice=config.max_endpoints_per_slice,
                batch_period=config.endpointslice_updates_batch_period, workers=config.concurrent_service_endpoint_syncs,
                metrics=self.endpointslice_metrics, clock=self.clock,
                prefer_same_traffic_distribution=config.feature_gates.get("PreferSameTrafficDistribution", True))
            self.controllers[ENDPOINTSLICE] = controller
            runs.append(controller.run)
        if MIRRORING in enabled:
            controller = EndpointSliceMirroringController(
                self._client_for(MIRRORING), informers, max_endpoints_per_subset=config.mirroring_max_endpoints_per_subset,
                batch_period=config.mirroring_endpointslice_updates_batch_period,
                workers=config.mirroring_concurrent_service_endpoint_syncs,
                metrics=self.mirroring_metrics, clock=self.clock)
            self.controllers[MIRRORING] = controller
            runs.append(controller.run)
        if ENDPOINTS in enabled:
            from kubesvc.controllers.endpoints.controller import EndpointsController

            controller = EndpointsController(self._client_for(ENDPOINTS), informers, batch_period=config.endpoint_updates_batch_period,
                                             workers=config.concurrent_endpoint_syncs, clock=self.clock)
            self.controllers[ENDPOINTS] = controller
            runs.append(controller.run)
        if GARBAGE_COLLECTOR in enabled and config.enable_garbage_collector:
            from kubesvc.controllers.gc.controller import GarbageCollector

            controller = GarbageCollector(self._client_for(GARBAGE_COLLECTOR), workers=config.concurrent_gc_syncs, informers=informers)
            self.controllers[GARBAGE_COLLECTOR] = controller
            runs.append(controller.run)
        if SCHEDULER in enabled:
            from kubesvc.controllers.scheduler.controller import Scheduler

            controller = Scheduler(self._client_for(SCHEDULER), informers, clock=self.clock)
            self.controllers[SCHEDULER] = controller
            runs.append(controller.run)
        if SERVICEACCOUNT in enabled:
            from kubesvc.controllers.serviceaccount.controller import SERVICEACCOUNTS, ServiceAccountsController

            controller = ServiceAccountsController(self._client_for(SERVICEACCOUNT), informers.informer(NAMESPACES), informers.informer(SERVICEACCOUNTS), clock=self.clock)
            self.controllers[SERVICEACCOUNT] = controller
            runs.append(controller.run)
        if ROOT_CA_CERT_PUBLISHER in enabled:
            from kubesvc.controllers.rootcacert.publisher import CONFIGMAPS, RootCACertPublisher, read_root_ca

            root_ca = read_root_ca(config.root_ca_file) if config.root_ca_file else (self.client.config.ca_pem or b"").decode()
            controller = RootCACertPublisher(self._client_for(ROOT_CA_CERT_PUBLISHER), informers.informer(NAMESPACES), informers.informer(CONFIGMAPS), root_ca, clock=self.clock)
            self.controllers[ROOT_CA_CERT_PUBLISHER] = controller
            runs.append(controller.run)
        runs += self._build_certificates_and_ipam(informers)
        if SERVICE_LB in enabled:
            from kubesvc.controllers.loadbalancer.controller import LOADBALANCER_IP_POOLS, LoadBalancerIPAMController

            controller = LoadBalancerIPAMController(self._client_for(SERVICE_LB), informers.services,
                                                    informers.informer(LOADBALANCER_IP_POOLS), clock=self.clock)
            self.controllers[SERVICE_LB] = controller
            runs.append(controller.run)
        if PODGC in enabled:
            from kubesvc.controllers.podgc.controller import PodGCController

            controller = PodGCController(self._client_for(PODGC), informers, terminated_pod_threshold=config.terminated_pod_gc_threshold,
                                         metrics=self.podgc_metrics, clock=self.clock)
            self.controllers[PODGC] = controller
            runs.append(controller.run)
        return runs

    def _build_certificates_and_ipam(self, informers: SharedInformers) -> list:
        """csrapproving, csrsigning, csrcleaner (controllers/certificates) and node-ipam-controller
        (controllers/nodeipam), each only when enabled and configured as upstream starts them."""
        from kubesvc.controllers.certificates.csr import CSRS

        config, enabled, runs = self.config, self.config.controllers, []
        if CSR_APPROVING in enabled:
            from kubesvc.controllers.certificates.approver import CSRApprovingController

            self.controllers[CSR_APPROVING] = CSRApprovingController(self._client_for(CSR_APPROVING), informers.informer(CSRS), clock=self.clock)
            runs.append(self.controllers[CSR_APPROVING].run)
        if CSR_SIGNING in enabled and config.cluster_signing_cert_file and config.cluster_signing_key_file:
            from kubesvc.controllers.certificates.signer import CSRSigningController, SigningCA

            ca = SigningCA.load(config.cluster_signing_cert_file, config.cluster_signing_key_file)
            self.controllers[CSR_SIGNING] = CSRSigningController(self._client_for(CSR_SIGNING), informers.informer(CSRS), ca,
                                                                 signing_duration=config.cluster_signing_duration, clock=self.clock)
            runs.append(self.controllers[CSR_SIGNING].run)
        elif CSR_SIGNING in enabled:
            log.info("skipping CSR signer controller because no csr cert/key was specified")
        if CSR_CLEANER in enabled:
            from kubesvc.controllers.certificates.cleaner import CSRCleanerController

            self.controllers[CSR_CLEANER] = CSRCleanerController(self._client_for(CSR_CLEANER), informers.informer(CSRS), clock=self.clock)
            runs.append(self.controllers[CSR_CLEANER].run)
        if NODE_IPAM in enabled and config.allocate_node_cidrs:
            from kubesvc.controllers.nodeipam.cidrset import node_mask_sizes, parse_cluster_cidrs
            from kubesvc.controllers.nodeipam.range_allocator import RangeAllocator

            cidrs = parse_cluster_cidrs(config.cluster_cidr)
            masks = node_mask_sizes(cidrs, config.node_cidr_mask_size, config.node_cidr_mask_size_ipv4, config.node_cidr_mask_size_ipv6)
            self.controllers[NODE_IPAM] = RangeAllocator(self._client_for(NODE_IPAM), informers.nodes, cidrs, masks, clock=self.clock)
            runs.append(self.controllers[NODE_IPAM].run)
        runs += self._build_workloads(informers)
        return runs

    def _build_workloads(self, informers: SharedInformers) -> list:
        """The workload controllers (deployment, replicaset, replicationcontroller, daemonset, job, ttl-after-finished, cronjob)."""
        from kubesvc.controllers.daemonset.controller import DaemonSetController
        from kubesvc.controllers.deployment.controller import DeploymentController
        from kubesvc.controllers.job.controller import JobController
        from kubesvc.controllers.job.ttlafterfinished import TTLAfterFinishedController
        from kubesvc.controllers.cronjob.controller import CronJobController
        from kubesvc.controllers.replicaset.controller import ReplicaSetController, replication_manager

        config = self.config
        workers = {DEPLOYMENT: config.concurrent_deployment_syncs, DAEMONSET: config.concurrent_daemonset_syncs,
                   JOB: config.concurrent_job_syncs, TTL_AFTER_FINISHED: config.concurrent_ttl_after_finished_syncs}
        runs = []
        for name, controller_class in ((DEPLOYMENT, DeploymentController), (DAEMONSET, DaemonSetController), (JOB, JobController),
                                       (TTL_AFTER_FINISHED, TTLAfterFinishedController), (REPLICASET, ReplicaSetController),
                                       (REPLICATION, replication_manager), (CRONJOB, CronJobController)):
            if name in self.config.controllers:
                options = {"workers": workers[name]} if name in workers else {}
                if name == TTL_AFTER_FINISHED:
                    options["metrics"] = self.ttl_after_finished_metrics
                if name == JOB:
                    options["metrics"] = self.job_metrics
                    options["job_managed_by"] = config.feature_gates.get("JobManagedBy", True)
                controller = controller_class(self._client_for(name), informers, clock=self.clock, **options)
                self.controllers[name] = controller
                runs.append(controller.run)
        return runs

    # ---- serving -----------------------------------------------------------------------------

    async def serve(self) -> None:
        if self.config.secure_port == 0:
            return
        app = web.Application()
        app.router.add_get("/healthz", self._ok)
        app.router.add_get("/livez", self._ok)
        app.router.add_get("/readyz", self._ok)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        family = socket.AF_INET6 if ":" in self.config.bind_address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.config.bind_address, self.config.secure_port))
        sock.listen(128)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        tls = ephemeral_serving_context("kube-controller-manager", self.config.bind_address)
        await web.SockSite(self._runner, sock, ssl_context=tls, shutdown_timeout=1.0).start()

    async def stop_serving(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=render_metrics(self.metrics_registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


disable_created_metrics()  # the Go client has no ``_created`` series; neither do we

# Counters kube-controller-manager exposes without a ``_total`` suffix (component-base names
# them ``changes``/``syncs`` and the Go client adds nothing); prometheus_client always adds it.
UNSUFFIXED_COUNTERS = ("endpoint_slice_controller_changes", "endpoint_slice_controller_syncs",
                       "endpoint_slice_mirroring_controller_changes")


def render_metrics(registry: CollectorRegistry) -> bytes:
    """The text exposition, with upstream's names for the counters above (no ``_total``)."""
    text = generate_latest(registry).decode()
    for counter in UNSUFFIXED_COUNTERS:
        text = re.sub(rf"\b{counter}_total\b", counter, text)
    return text.encode()
