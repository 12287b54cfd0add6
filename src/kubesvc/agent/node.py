"""The agent's Node: registration, status heartbeats and the node Lease (upstream
``pkg/kubelet/kubelet_node_status.go`` and ``pkg/kubelet/nodelease``).

* **Registration** (``registerWithAPIServer``): create the Node with the well-known labels
  (``kubernetes.io/hostname``, ``kubernetes.io/os``, ``kubernetes.io/arch``,
  ``topology.kubernetes.io/zone`` from ``--zone``), ``spec.podCIDR(s)``, addresses
  (``InternalIP`` per node IP, ``Hostname``), the kubelet port in
  ``status.daemonEndpoints.kubeletEndpoint`` (where the apiserver fetches ``kubectl logs``),
  capacity and nodeInfo. A Node that already exists is adopted: its labels and status are
  brought up to date; a podCIDR is only ever set from empty (it is immutable afterwards).
* **Status** (``nodeStatusUpdateFrequency`` 10 s, reported when changed or every
  ``nodeStatusReportFrequency``): the four kubelet conditions, ``Ready`` being
  ``KubeletReady`` "kubelet is posting ready status". ``lastHeartbeatTime`` moves on each
  report, ``lastTransitionTime`` only when a status flips.
* **Lease** ``kube-node-lease/<node>`` (40 s duration, renewed every 10 s, owned by the Node so
  it is garbage collected with it): the cheap heartbeat the node lifecycle controller watches.
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import socket
from dataclasses import dataclass, field
from datetime import datetime

from kubesvc.api.conditions import transition_time
from kubesvc.client.rest import LEASES, NODES, ApiError, ClientError, RestClient, is_already_exists, is_not_found
from kubesvc.kernel import host
from kubesvc.util.clock import Clock, RealClock
from kubesvc.util.golang import rfc3339, rfc3339_micro

log = logging.getLogger("kubesvc.agent")

KUBELET_VERSION = "v1.32.0-kubesvc"
LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_HOSTNAME = "kubernetes.io/hostname"

_CONDITIONS = (  # type, healthy status, reason, message
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)


@dataclass
class NodeIdentity:
    name: str
    node_ips: list[str]
    pod_cidrs: list[str]
    zone: str = ""
    kubelet_port: int = 10250
    extra_labels: dict[str, str] = field(default_factory=dict)


def _arch() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def machine_facts() -> dict:
    """What the Node reports about the machine: nodeInfo and capacity."""
    capacity = {"cpu": str(os.cpu_count() or 1), "memory": f"{host.memory_total_kib()}Ki", "pods": "110", "ephemeral-storage": "0"}
    return {
        "capacity": capacity,
        "allocatable": dict(capacity),
        "nodeInfo": {
            "machineID": host.machine_id(), "systemUUID": host.system_uuid(),
            "bootID": host.boot_id(), "kernelVersion": platform.release(), "osImage": host.os_image(),
            "containerRuntimeVersion": "kubesvc://processes", "kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": "",
            "operatingSystem": "linux", "architecture": _arch(),
        },
    }


def node_labels(identity: NodeIdentity) -> dict[str, str]:
    labels = {"kubernetes.io/arch": _arch(), LABEL_HOSTNAME: identity.name, "kubernetes.io/os": "linux",
              "beta.kubernetes.io/arch": _arch(), "beta.kubernetes.io/os": "linux", **identity.extra_labels}
    if identity.zone:
        labels[LABEL_ZONE] = identity.zone
    return labels


def node_conditions(ready: bool, ready_message: str, previous: list[dict], now: datetime) -> list[dict]:
    """The kubelet's four conditions; transition times kept while a status holds."""
    old = {c.get("type"): c for c in previous or []}
    out = []
    for type_, status, reason, message in _CONDITIONS:
        if type_ == "Ready" and not ready:
            status, reason, message = "False", "KubeletNotReady", ready_message
        prior = old.get(type_) or {}
        out.append({"type": type_, "status": status, "lastHeartbeatTime": rfc3339(now), "lastTransitionTime": transition_time(prior, status, now),
                    "reason": reason, "message": message})
    return out


def node_status(identity: NodeIdentity, facts: dict, previous: dict, now: datetime, *, ready: bool = True, ready_message: str = "") -> dict:
    addresses = [{"type": "InternalIP", "address": ip} for ip in identity.node_ips]
    addresses.append({"type": "Hostname", "address": identity.name})
    return {
        **facts,
        "addresses": addresses,
        "conditions": node_conditions(ready, ready_message, previous.get("conditions") or [], now),
        "daemonEndpoints": {"kubeletEndpoint": {"Port": identity.kubelet_port}},
    }


def new_node(identity: NodeIdentity, facts: dict, now: datetime) -> dict:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": identity.name, "labels": node_labels(identity),
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "spec": {"podCIDR": identity.pod_cidrs[0], "podCIDRs": list(identity.pod_cidrs)} if identity.pod_cidrs else {},
        "status": node_status(identity, facts, {}, now),
    }


class PodCIDRMismatch(Exception):
    pass


def _comparable(status: dict) -> dict:
    """The status without heartbeat times: what decides whether a report is due early."""
    return {**status, "conditions": [{k: v for k, v in c.items() if k != "lastHeartbeatTime"} for c in status.get("conditions") or []]}


class NodeHeartbeat:
    """Registers the Node, then keeps its status and Lease fresh until cancelled."""

    def __init__(self, client: RestClient, identity: NodeIdentity, *, clock: Clock | None = None, status_period: float = 10.0,
                 report_period: float = 60.0, lease_period: float = 10.0):
        self.client = client
        self.identity = identity
        self.clock = clock or RealClock()
        self.status_period = status_period
        self.report_period = report_period
        self.lease_period = lease_period
        self.nodes = client.resource(NODES)
        self.leases = client.resource(LEASES)
        self.facts = machine_facts()
        self.node: dict = {}
        self._last_report = 0.0

    async def register(self) -> dict:
        """Create or adopt the Node; returns it. Raises PodCIDRMismatch when the Node's podCIDR
        differs from ours (it cannot be changed)."""
        now = self.clock.now()
        try:
            self.node = await self.nodes.create(new_node(self.identity, self.facts, now))
            log.info("registered node %s", self.identity.name)
        except ApiError as err:
            if not is_already_exists(err):
                raise
            self.node = await self._adopt(await self.nodes.get(self.identity.name))
        self._last_report = self.clock.monotonic()
        return self.node

    async def _adopt(self, node: dict) -> dict:
        spec = node.get("spec") or {}
        existing = spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else [])
        patch: dict = {"metadata": {"labels": node_labels(self.identity)}}
        if existing and self.identity.pod_cidrs and existing != self.identity.pod_cidrs:
            raise PodCIDRMismatch(f"node {self.identity.name} already has podCIDRs {existing}, not {self.identity.pod_cidrs}")
        if not existing and self.identity.pod_cidrs:
            patch["spec"] = {"podCIDR": self.identity.pod_cidrs[0], "podCIDRs": list(self.identity.pod_cidrs)}
        node = await self.nodes.patch(self.identity.name, patch)
        status = node_status(self.identity, self.facts, node.get("status") or {}, self.clock.now())
        return await self.nodes.patch(self.identity.name, {"status": status}, subresource="status")

    async def report_status(self, *, force: bool = False, ready: bool = True, ready_message: str = "") -> None:
        previous = self.node.get("status") or {}
        status = node_status(self.identity, self.facts, previous, self.clock.now(), ready=ready, ready_message=ready_message)
        due = self.clock.monotonic() - self._last_report >= self.report_period
        if not force and not due and _comparable(status) == _comparable(previous):
            return
        self.node = await self.nodes.patch(self.identity.name, {"status": status}, subresource="status")
        self._last_report = self.clock.monotonic()

    async def renew_lease(self) -> None:
        name = self.identity.name
        spec = {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_SECONDS, "renewTime": rfc3339_micro(self.clock.now())}
        try:
            await self.leases.patch(name, {"spec": spec}, LEASE_NAMESPACE)
        except ApiError as err:
            if not is_not_found(err):
                raise
            owner = [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": self.node.get("metadata", {}).get("uid", "")}]
            lease = {"metadata": {"name": name, "namespace": LEASE_NAMESPACE, "ownerReferences": owner}, "spec": spec}
            try:
                await self.leases.create(lease)
            except ApiError as create_err:
                if not is_already_exists(create_err):
                    raise

    async def run(self) -> None:
        """Heartbeats until cancelled; failures are logged and retried at the next period."""
        next_status = next_lease = 0.0
        while True:
            now = self.clock.monotonic()
            try:
                if now >= next_lease:
                    next_lease = now + self.lease_period
                    await self.renew_lease()
                if now >= next_status:
                    next_status = now + self.status_period
                    await self.report_status()
            except (ClientError, OSError, asyncio.TimeoutError) as err:
                log.warning("node %s heartbeat failed: %s", self.identity.name, err)
            await asyncio.sleep(max(0.05, min(next_status, next_lease) - self.clock.monotonic()))


def default_node_name() -> str:
    """kubelet's default: the lower-cased hostname."""
    return socket.gethostname().lower()
