"""The agent: one per node, wiring the Node heartbeat, the pod network, the log server and a
worker per Pod bound to the node (upstream kubelet's ``syncLoop`` over a Pod source filtered by
``spec.nodeName``).

* Pods come from an informer on ``fieldSelector=spec.nodeName=<node>``; Services from an
  informer on every namespace (the environment variables need them, and upstream refuses to
  start a container before the Service informer has synced once).
* A Pod gets a worker the first time it is seen alive; a ``deletionTimestamp`` starts its
  graceful termination; a Pod that disappears from the API (force deletion) is killed at once.
  A Pod already deleted when first seen (nothing of it runs here) is reported Failed, unless it
  is terminal already, and deleted with grace 0 (the kubelet's pod worker goes straight to
  terminated and its status manager's ``TerminatePod`` fails it): a finalizer may keep it.
  Workers run side by side, as the kubelet's pod workers do (a goroutine per Pod); at most
  ``parallel_pod_setups`` set up volumes and sandboxes at once, in the order the Pods came,
  so the first Pods of a burst run while the last ones wait. Nothing slow runs on the event
  loop's thread (netlink, namespaces, sysctls, files and forks go to worker threads), so the
  loop stays free for probes, status writes and the informers however many Pods start.
* At start, namespaces of Pods that no longer exist (left by a crash) are removed; a Pod whose
  namespace survives is restarted in it, keeping its address.
* Certificates are renewed under a running agent and taken in place, as the kubelet takes
  them (``serving/dynamiccert.py``): the log server presents a changed ``--tls-cert-file`` (or,
  with ``--rotate-server-certificates``, the pair ``kubesvc join`` gets issued into
  ``--cert-dir``) from the next handshake on, and the API client a changed client pair of its
  kubeconfig (``client/certrotation.py``). A restart would stop every Pod of the node.
* Stopping the agent stops every container (there is no runtime to keep them), reports them
  terminated and the Node not ready, and removes every namespace, link and address it made.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from kubesvc.agent import podnet
from kubesvc.agent.kubeletauth import SubjectAccessReviewAuthorizer, self_signed_serving_pair, serving_context
from kubesvc.agent.kubeletserver import KubeletServer, PodLogInfo
from kubesvc.agent.node import NodeHeartbeat, NodeIdentity
from kubesvc.agent.objectwatch import ObjectWatches
from kubesvc.agent.podvolumes import remove_orphans as remove_orphan_volumes
from kubesvc.agent.podstatus import merge_patch_for, never_started_status
from kubesvc.agent.podworker import PodWorker, WorkerContext, delete_for_good
from kubesvc.agent.streaming import ExecTarget
from kubesvc.agent.tokens import TokenManager
from kubesvc.client.informer import Informer
from kubesvc.client.record import EventRecorder
from kubesvc.client.rest import PODS, SERVICES, ClientError, RestClient
from kubesvc.serving.dynamiccert import WATCH_INTERVAL, serving_pair_watch, watch_forever
from kubesvc.util.clock import Clock, RealClock
from kubesvc.util.aio import cancel_and_wait

log = logging.getLogger("kubesvc.agent")

TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass
class AgentConfig:
    node_name: str
    pod_cidrs: list[str]
    node_ips: list[str]
    data_dir: Path
    zone: str = ""
    kubelet_bind_address: str = "0.0.0.0"
    kubelet_port: int = 10250
    bridge: str = "cbr0"
    netns_prefix: str = "kubesvc-"
    backoff_base: float = 10.0
    backoff_max: float = 300.0
    shutdown_grace: float = 5.0
    parallel_pod_setups: int = 8  # Pods whose volumes and sandbox are set up at once (podworker.WorkerContext.setup_slots)
    extra_labels: dict[str, str] = field(default_factory=dict)
    # kubelet's --tls-cert-file, --tls-private-key-file, --client-ca-file (kubeletauth.py)
    tls_cert_file: Path | None = None
    tls_private_key_file: Path | None = None
    client_ca_file: Path | None = None
    # kubelet's --cluster-dns, --cluster-domain, --resolv-conf (poddns.NodeDNS): each Pod's resolv.conf and hosts
    dns: object | None = None
    # kubelet's --rotate-server-certificates and --cert-dir: the serving pair kubesvc join gets
    # issued (serverTLSBootstrap) is <cert_dir>/kubelet-server.{crt,key}; self-signed until it is there
    rotate_server_certificates: bool = False
    cert_dir: Path | None = None
    certificate_watch_interval: float = WATCH_INTERVAL  # seconds between looks at the serving pair's files

    def serving_pair_files(self) -> tuple[Path, Path] | None:
        """The (certificate, key) files whose changes the log server follows: the configured
        pair, or the rotated one (which may not exist yet); None for a self-signed one only."""
        if self.tls_cert_file is not None and self.tls_private_key_file is not None:
            return self.tls_cert_file, self.tls_private_key_file
        if self.rotate_server_certificates:
            cert_dir = self.cert_dir or self.data_dir / "pki"
            return cert_dir / "kubelet-server.crt", cert_dir / "kubelet-server.key"
        return None

    def serving_context(self) -> ssl.SSLContext:
        """The log server's TLS: the configured (or rotated) certificate, else a self-signed one
        (kubelet's ``--cert-dir`` fallback, which no apiserver trusts)."""
        files = self.serving_pair_files()
        if files is not None and self.tls_cert_file is None and not _pair_present(*files):
            log.info("no serving certificate at %s yet: serving a self-signed one until it is issued", files[0])
            files = None
        cert, key = files or self_signed_serving_pair(self.cert_dir or self.data_dir / "pki", self.node_name, list(self.node_ips))
        if self.client_ca_file is None:
            log.warning("no --client-ca-file: every caller of the log server is refused (kubelet's anonymous access is off)")
        return serving_context(cert, key, self.client_ca_file)

    @property
    def network(self) -> podnet.NodeNetwork:
        return podnet.NodeNetwork(pod_cidrs=list(self.pod_cidrs), bridge=self.bridge, netns_prefix=self.netns_prefix,
                                  state_dir=self.data_dir / "network")


def _pair_present(cert: Path, key: Path) -> bool:
    from kubesvc.serving.dynamiccert import pair_matches

    try:
        return pair_matches(cert.read_bytes(), key.read_bytes())
    except OSError:
        return False


class CrossNodeNetwork(Protocol):
    """The Pod network across nodes (``kubesvc.podnetwork``'s controller, which the command
    wires in: the agent runs it as k3s's agent runs flannel): ``prepare`` before the Pod bridge
    (the Pods' MTU, None for the default), ``start`` once the Node is registered, ``stop`` last."""

    async def prepare(self) -> int | None: ...
    async def start(self) -> None: ...
    async def stop(self, *, cleanup: bool = True) -> list[str]: ...


class Agent:
    def __init__(self, client: RestClient, config: AgentConfig, *, clock: Clock | None = None, pod_network: CrossNodeNetwork | None = None):
        self.client = client
        self.config = config
        self.clock = clock or RealClock()
        self.network = config.network
        self.pods_api = client.resource(PODS)
        self.recorder = EventRecorder(client, "kubelet")
        tls = config.serving_context()
        files = config.serving_pair_files()
        # a renewed serving pair is served from the next handshake on, the agent and its Pods running on (dynamiccert.py)
        self.serving_watch = serving_pair_watch(tls, *files, what="the log server's certificate") if files is not None else None
        self.kubelet = KubeletServer(config.kubelet_bind_address, config.kubelet_port, config.data_dir / "pods", self._pod_log_info,
                                     node_name=config.node_name, tls=tls,
                                     authorizer=SubjectAccessReviewAuthorizer(client, clock=self.clock),
                                     exec_target=self._exec_target, pod_netns=self._pod_netns, attach_target=self._attach_target)
        self.heartbeat: NodeHeartbeat | None = None
        self.pods = Informer(client, PODS, field_selector=f"spec.nodeName={config.node_name}")
        self.tokens = TokenManager(self._request_token, self.clock)  # projected ServiceAccount tokens
        self.services = Informer(client, SERVICES)
        self.objects = ObjectWatches(client)  # the ConfigMaps and Secrets the Pods reference
        self.workers: dict[str, PodWorker] = {}
        self._setup_slots = asyncio.Semaphore(config.parallel_pod_setups)
        self._done: set[str] = set()  # UIDs whose worker finished: never run again
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self.pod_network = pod_network

    # -- life

    async def start(self) -> None:
        if self.pod_network is not None:
            self.network.mtu = await self.pod_network.prepare()  # vxlan: the Pods' MTU leaves room for the encapsulation
        await podnet.ensure_node_network(self.network)
        await self.kubelet.start()
        identity = NodeIdentity(self.config.node_name, list(self.config.node_ips), list(self.config.pod_cidrs), self.config.zone,
                                self.kubelet.port, dict(self.config.extra_labels))
        self.heartbeat = NodeHeartbeat(self.client, identity, clock=self.clock)
        await self.heartbeat.register()
        for event in self.config.dns.start_events() if self.config.dns is not None else []:  # the kubelet's CheckLimitsForResolvConf
            self.recorder.event(self.heartbeat.node, "Warning", event.reason, event.message)
        if self.pod_network is not None:
            await self.pod_network.start()  # publishes this node's annotations on its Node, follows the others
        self._tasks.append(asyncio.create_task(self.heartbeat.run()))
        if self.serving_watch is not None:
            self._tasks.append(asyncio.create_task(watch_forever([self.serving_watch], self.config.certificate_watch_interval)))
        self._tasks += [asyncio.create_task(self.services.run()), asyncio.create_task(self.pods.run())]
        await self.services.wait_for_sync()
        await self.pods.wait_for_sync()
        await self._collect_orphans()
        self.pods.add_event_handler(self._on_pod, lambda old, new: self._on_pod(new), self._on_pod_gone)
        log.info("agent for node %s running (pod CIDRs %s, log server on port %d)", self.config.node_name,
                 ",".join(self.config.pod_cidrs), self.kubelet.port)

    async def stop(self, *, remove_network: bool = True) -> list[str]:
        """Stop every Pod, report the node not ready, remove what we made; returns cleanup errors."""
        self._stopping = True
        self.pods.stop()
        self.services.stop()
        workers = list(self.workers.values())
        await asyncio.gather(*(w.shutdown(self.config.shutdown_grace, delete=False) for w in workers), return_exceptions=True)
        self.objects.stop()
        await cancel_and_wait(self._tasks)  # the heartbeat first: an in-flight beat must not re-report Ready
        if self.heartbeat is not None:
            try:
                await self.heartbeat.report_status(force=True, ready=False, ready_message="kubesvc agent stopped")
            except (ClientError, OSError) as err:
                log.warning("cannot report node %s not ready: %s", self.config.node_name, err)
        await self.kubelet.stop()
        await self.recorder.flush()
        errors = await podnet.teardown_node_network(self.network) if remove_network else []
        if self.pod_network is not None:
            errors += await self.pod_network.stop(cleanup=remove_network)
        return errors

    # -- Pods

    def _context(self) -> WorkerContext:
        return WorkerContext(
            node_name=self.config.node_name, host_ips=list(self.config.node_ips), network=self.network,
            log_root=self.config.data_dir / "pods", pods=self.pods_api, recorder=self.recorder, services=self.services.indexer.list,
            clock=self.clock, backoff_base=self.config.backoff_base, backoff_max=self.config.backoff_max,
            kubelet_dir=self.config.data_dir / "kubelet", api=self.client, tokens=self.tokens, setup_slots=self._setup_slots,
            objects=self.objects, dns=self.config.dns)

    async def _request_token(self, namespace: str, service_account: str, request: dict) -> dict:
        """TokenRequest (``serviceaccounts/<sa>/token``), as the kubelet's token manager sends it."""
        return await self.client.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token", request)

    def _on_pod(self, pod: dict) -> None:
        if self._stopping:
            return
        meta = pod["metadata"]
        uid = meta["uid"]
        worker = self.workers.get(uid)
        if worker is not None:
            worker.update(pod)
            return
        if uid in self._done:
            return
        phase = (pod.get("status") or {}).get("phase")
        if meta.get("deletionTimestamp"):
            # nothing of it runs here (a terminal Pod, or one whose agent restarted): done at once
            self._done.add(uid)
            self._spawn(self._delete_now(pod))
            return
        if phase in TERMINAL_PHASES:
            return
        counts = {s.get("name"): int(s.get("restartCount") or 0) for s in (pod.get("status") or {}).get("containerStatuses") or []}
        worker = PodWorker(self._context(), pod, restart_counts=counts)
        self.workers[uid] = worker
        worker.start()
        self._spawn(self._forget_when_finished(worker))

    def _on_pod_gone(self, pod: dict) -> None:
        worker = self.workers.get(pod["metadata"]["uid"])
        if worker is not None:
            worker.kill_now()

    async def _forget_when_finished(self, worker: PodWorker) -> None:
        await worker.finished.wait()
        self._done.add(worker.uid)
        self.workers.pop(worker.uid, None)

    async def _delete_now(self, pod: dict) -> None:
        try:
            await podnet.remove_pod(self.network, pod["metadata"]["uid"])
        except Exception as err:  # the Pod object goes anyway; the namespace is collected at the next start
            log.warning("pod %s/%s: cannot remove its network: %s", pod["metadata"].get("namespace"), pod["metadata"]["name"], err)
        await finish_unrun_pod(self.pods_api, pod, list(self.config.node_ips), self.clock)

    async def _collect_orphans(self) -> None:
        """Namespaces left by a crash for Pods that are gone; the processes in those that stay are
        stopped, since the worker starts its containers afresh."""
        alive = {pod["metadata"]["uid"] for pod in self.pods.indexer.list()}
        remove_orphan_volumes(self.config.data_dir / "kubelet", alive)
        for uid, pod_network in podnet.existing_pods(self.network).items():
            await podnet.kill_processes_in(pod_network.netns)  # the worker starts its containers afresh
            if uid not in alive:
                log.info("removing the network namespace of vanished pod %s", uid)
                await podnet.remove_pod(self.network, uid)

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    def _worker(self, namespace: str, name: str) -> PodWorker | None:
        for worker in self.workers.values():
            meta = worker.pod["metadata"]
            if meta.get("namespace") == namespace and meta["name"] == name:
                return worker
        return None

    def _running_container(self, namespace: str, name: str, container: str):
        """(worker, slot, the container's current process), None for a Pod not here, or kubelet's
        reason (``findContainer``) when the container is not running."""
        worker = self._worker(namespace, name)
        if worker is None:
            return None
        slot = next((s for s in worker.init_slots + worker.slots if s.name == container), None)
        process = slot.process if slot is not None and slot.record.running else None
        if process is None or process.returncode is not None or worker.network is None:
            return f'container not found ("{container}")'
        return worker, slot, process

    def _exec_target(self, namespace: str, name: str, container: str) -> ExecTarget | str | None:
        """Where ``kubectl exec`` into that container runs."""
        found = self._running_container(namespace, name, container)
        if not isinstance(found, tuple):
            return found
        worker, slot, process = found
        return ExecTarget(netns=worker.network.netns, env=dict(slot.env), working_dir=slot.spec.get("workingDir") or "/", pid=process.pid,
                          container_stopped=process.wait_exit)

    def _attach_target(self, namespace: str, name: str, container: str):
        """The running container a ``kubectl attach`` joins (runtime.ContainerProcess)."""
        found = self._running_container(namespace, name, container)
        return found[2] if isinstance(found, tuple) else found

    def _pod_netns(self, namespace: str, name: str) -> str | None:
        """The Pod's network namespace, for ``kubectl port-forward``."""
        worker = self._worker(namespace, name)
        return worker.network.netns if worker is not None and worker.network is not None else None

    def _pod_log_info(self, namespace: str, name: str) -> PodLogInfo | None:
        for worker in self.workers.values():
            meta = worker.pod["metadata"]
            if meta.get("namespace") == namespace and meta["name"] == name:
                containers = [s.name for s in worker.init_slots + worker.slots]
                return PodLogInfo(uid=worker.uid, restart_counts={c: worker.restart_count(c) for c in containers},
                                  running=worker.container_running)
        return None


async def finish_unrun_pod(pods, pod: dict, host_ips: list[str], clock: Clock) -> None:
    """A deleted Pod this agent never ran: reported Failed first when it is not terminal yet (as
    the kubelet's ``TerminatePod`` does; a finalizer, a Job's tracking one, may keep the object,
    and its controller waits for a terminal phase), then deleted with grace 0."""
    if (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES:
        meta = pod["metadata"]
        status = never_started_status(pod, host_ips, clock.now())
        try:
            # the UID makes the apiserver refuse the write if the name now belongs to a new Pod
            await pods.patch(meta["name"], {"metadata": {"uid": meta["uid"]}, "status": merge_patch_for(pod.get("status") or {}, status)},
                             meta.get("namespace"), subresource="status")
        except ClientError as err:  # gone, or another Pod now; the deletion below says the rest
            log.warning("pod %s/%s: cannot report it failed: %s", meta.get("namespace"), meta["name"], err)
    await delete_for_good(pods, pod)
