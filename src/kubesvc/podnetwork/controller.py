"""The Pod network across nodes: a Node informer driving this node's routes, VXLAN entries and masquerading.

k3s runs flannel inside its agent; so do we: the agent makes a :class:`PodNetworkController`
when ``--pod-network`` is ``routes`` or ``vxlan`` and runs it beside its Pods:

1. :meth:`prepare` (before the Pod bridge exists): finds the uplink (the link holding the node
   IP), makes or adopts the VXLAN device (``vxlan``: flannel's ``ensureLink``, a device that
   differs is deleted and made again) with the VTEP address, and returns the MTU the Pods'
   interfaces get (the uplink's minus 50 in ``vxlan``), then writes the masquerade table
   (:mod:`kubesvc.podnetwork.masquerade`).
2. :meth:`start` (after the Node is registered): publishes this node's annotations on its own
   Node (flannel's: backend type, VtepMAC, public IP; the Node authorizer lets a node patch its
   own Node and nothing else), then follows every Node with an informer (through ``watch_client``:
   a node's identity may read only its own Node, see :func:`on_this_host`). Handlers only mark the
   state dirty; one task syncs: it reads what the kernel holds (our routes by protocol number,
   the device's permanent neighbours and FDB entries), asks :mod:`kubesvc.podnetwork.plan`
   for the operations that make it what the Nodes say, and applies them in one batch. A
   failed sync is retried after ``RETRY_SECONDS``, and every ``RESYNC_SECONDS`` regardless
   (someone deleting our route by hand), as flannel's and kube-router's periodic syncs do.
3. :meth:`stop`: deletes every route of ours, the VXLAN device (its neighbours and FDB entries
   go with it) and the masquerade table: nothing stays on the machine.

The kernel is injected: ``kernel.vxlan.HostOverlay`` and ``kernel.nftables.NFTables``, or
``kernel.fake.overlay.FakeOverlay`` and ``kernel.fake.nftables.FakeNFTables`` in tests.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubesvc.kernel.links import Address, DelLink, SetUp
from kubesvc.kernel.vxlan import OverlayKernel, matches
from kubesvc.podnetwork import masquerade, plan
from kubesvc.util.aio import cancel_and_wait

log = logging.getLogger("kubesvc.podnetwork")

RETRY_SECONDS = 1.0
RESYNC_SECONDS = 30.0


class PodNetworkSetupError(Exception):
    """The Pod network cannot be set up here (no link holds the node IP, a VXLAN mode without IPv4)."""


@dataclass
class PodNetworkConfig:
    node_name: str
    mode: str  # "routes" | "vxlan"
    node_ips: list[str]
    pod_cidrs: list[str]
    cluster_cidrs: list[str]
    device: str = plan.DEVICE

    def __post_init__(self) -> None:
        if self.mode not in ("routes", "vxlan"):
            raise ValueError(f"pod network mode {self.mode!r}: expected routes or vxlan")

    @property
    def public_ip(self) -> str:
        """The node IP of the first podCIDR's family (vxlan: the IPv4 one)."""
        import ipaddress

        family = 4 if self.mode == "vxlan" else ipaddress.ip_network(self.pod_cidrs[0]).version
        for ip in self.node_ips:
            if ipaddress.ip_address(ip).version == family:
                return ip
        raise PodNetworkSetupError(f"--pod-network {self.mode} needs an IPv{family} node IP; have {', '.join(self.node_ips)}")


@dataclass
class PodNetworkController:
    client: Any  # RestClient: the Node patch and the informer
    config: PodNetworkConfig
    kernel: OverlayKernel
    nft: dict[int, Any] = field(default_factory=dict)  # family -> NFTables-like (run, delete_table_sync)
    informer_factory: Callable[[], Any] | None = None  # tests: something with run/stop/wait_for_sync/add_event_handler/indexer
    watch_client: Any = None  # lists and watches every Node (None: ``client``); ours to close
    local_networks: list[str] = field(default_factory=list)
    uplink_mtu: int = 1500
    _dirty: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task] = field(default_factory=list)
    _informer: Any = None
    _reported: tuple[str, ...] = ()

    # -- life

    async def prepare(self) -> int | None:
        """Uplink, VXLAN device, masquerade table; returns the Pods' MTU (None: leave the default)."""
        cfg = self.config
        uplink = await self.kernel.uplink(cfg.public_ip)
        if uplink is None:
            raise PodNetworkSetupError(f"no link here holds the node IP {cfg.public_ip}")
        self.uplink_mtu, self.local_networks = uplink.mtu, list(uplink.networks)
        if cfg.mode == "vxlan":
            await self._ensure_device(uplink.name)
        for version in masquerade.families(cfg.cluster_cidrs):
            await self.nft[version].run(masquerade.transaction(version, cfg.cluster_cidrs, cfg.pod_cidrs))
        return plan.pod_mtu(cfg.mode, uplink.mtu)

    async def _ensure_device(self, uplink: str) -> None:
        cfg = self.config
        want = plan.vxlan_device(cfg.node_name, cfg.public_ip, uplink, self.uplink_mtu, cfg.device)
        info = await self.kernel.vxlan(cfg.device)
        ops: list = []
        if not matches(info, want):
            if info is not None:
                if info.kind not in ("vxlan", None):
                    raise PodNetworkSetupError(f"a link named {cfg.device} exists and is a {info.kind}, not a VXLAN device")
                ops.append(DelLink(cfg.device))
            from kubesvc.kernel.vxlan import AddVxlan

            ops.append(AddVxlan(want))
        v4 = [c for c in cfg.pod_cidrs if ":" not in c]
        if not v4:
            raise PodNetworkSetupError("--pod-network vxlan needs an IPv4 podCIDR")
        ops += [Address(cfg.device, f"{plan.vtep_address(v4[0])}/32", replace=True), SetUp(cfg.device)]
        await self.kernel.apply(ops)

    async def start(self) -> None:
        """Publish this node's annotations, then follow the Nodes."""
        from kubesvc.client.informer import Informer
        from kubesvc.client.rest import NODES

        cfg = self.config
        mac = plan.vtep_mac(cfg.node_name) if cfg.mode == "vxlan" else None
        await self.client.resource(NODES).patch(cfg.node_name, {"metadata": {"annotations": plan.self_annotations(cfg.mode, cfg.public_ip, mac)}})
        self._informer = self.informer_factory() if self.informer_factory else Informer(self.watch_client or self.client, NODES)
        self._informer.add_event_handler(lambda _n: self._dirty.set(), lambda _o, _n: self._dirty.set(), lambda _n: self._dirty.set())
        self._tasks.append(asyncio.create_task(self._informer.run()))
        await self._informer.wait_for_sync()
        self._dirty.set()
        self._tasks.append(asyncio.create_task(self._run()))

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._dirty.wait(), RESYNC_SECONDS)
            except asyncio.TimeoutError:
                pass
            self._dirty.clear()
            try:
                await self.sync(self._informer.indexer.list())
            except Exception as err:  # noqa: BLE001 - the kernel refused or vanished: say so, retry
                log.warning("pod network sync failed (retrying in %gs): %s", RETRY_SECONDS, err)
                await asyncio.sleep(RETRY_SECONDS)
                self._dirty.set()

    async def sync(self, nodes: Iterable[dict]) -> list:
        """Make the kernel hold what ``nodes`` ask for; returns the operations applied."""
        cfg = self.config
        want = plan.desired(cfg.mode, plan.peers(nodes, cfg.node_name), self.local_networks, cfg.device)
        if want.unreachable != self._reported:
            for why in want.unreachable:
                log.warning("pod network: not routing to %s", why)
            self._reported = want.unreachable
        vxlan = cfg.mode == "vxlan"
        ops = plan.sync_ops(cfg.mode, want, await self.kernel.routes(), await self.kernel.neighbours(cfg.device) if vxlan else {},
                            await self.kernel.fdb(cfg.device) if vxlan else {}, cfg.device)
        if ops:
            await self.kernel.apply(ops)
            log.info("pod network: %s", "; ".join(map(str, ops)))
        return ops

    async def stop(self, *, cleanup: bool = True) -> list[str]:
        """Stop following the Nodes and (``cleanup``) remove every route, device and rule we made; the errors."""
        if self._informer is not None:
            self._informer.stop()
        await cancel_and_wait(self._tasks)
        self._tasks.clear()
        if self.watch_client is not None:
            await self.watch_client.close()
        return await self.cleanup() if cleanup else []

    async def cleanup(self) -> list[str]:
        from kubesvc.kernel.routes import DeleteRoute

        errors: list[str] = []

        async def attempt(what: str, ops: Sequence) -> None:
            try:
                await self.kernel.apply(ops)
            except Exception as err:  # noqa: BLE001 - reported; the rest is still removed
                errors.append(f"{what}: {err}")

        try:
            routes = await self.kernel.routes()
        except Exception as err:  # noqa: BLE001
            errors.append(f"listing our routes: {err}")
            routes = set()
        for route in sorted(routes):
            if route.dev != self.config.device:  # the device takes its own along
                await attempt(f"route {route}", [DeleteRoute(route.dst)])
        if self.config.mode == "vxlan":
            info = await self.kernel.vxlan(self.config.device)
            if info is not None and info.kind == "vxlan":
                await attempt(f"link {self.config.device}", [DelLink(self.config.device)])
        for version in masquerade.families(self.config.cluster_cidrs):
            try:
                await asyncio.to_thread(self.nft[version].delete_table_sync)
            except Exception as err:  # noqa: BLE001
                errors.append(f"nftables table {masquerade.TABLE}: {err}")
        return errors


def on_this_host(client: Any, config: PodNetworkConfig, watch_client: Any = None) -> PodNetworkController:
    """The controller over this process's network namespace: rtnetlink through ``kernel.vxlan``,
    the masquerade table through ``kernel.nftables`` (one per family of the cluster CIDRs).
    ``watch_client`` (None: ``client``) lists and watches the Nodes: a node's own identity may
    only read its own Node (the Node authorizer, ``AuthorizeNodeWithSelectors``), so the agent
    uses another, as k3s's agent runs flannel as ``system:k3s-controller`` and flannel's
    DaemonSet as its own ServiceAccount."""
    from kubesvc.kernel.nftables import NFTables
    from kubesvc.kernel.vxlan import HostOverlay

    nft = {version: NFTables(version, masquerade.TABLE) for version in masquerade.families(config.cluster_cidrs)}
    return PodNetworkController(client, config, HostOverlay(), nft, watch_client=watch_client)


def leftovers_sync() -> list[str]:
    """Remove what an agent killed before its own cleanup left of the cross-node network in this
    network namespace (``kubesvc down``, and ``up``'s stop after its agent): every route of ours
    (protocol 77), the ``kubesvc.1`` VXLAN device and both masquerade tables; each exists only
    if a Pod network ran here, and is ours by name or number. Returns the errors."""
    config = PodNetworkConfig("", "vxlan", [], [], ["0.0.0.0/0", "::/0"])  # every family's table, the device
    return asyncio.run(on_this_host(None, config).cleanup())
