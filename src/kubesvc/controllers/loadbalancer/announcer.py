"""The node side of LoadBalancer addresses: one node per address answers ARP for it, elected
with a Lease, as MetalLB's speaker does in L2 mode (and Cilium's agent with L2 announcements:
one ``cilium-l2announce-<ns>-<svc>`` Lease per Service).

Where it runs, and why: MetalLB runs its speaker as a DaemonSet of its own and Cilium inside
its per-node agent; both are a per-node process that watches Services and EndpointSlices and
holds Leases. This is that process's logic (``Announcer``), kept apart from the node proxy: the
proxy's identity (``system:node-proxier``) may not write Leases, and an announcer that dies must
take only the announcements with it, not the Service rules. It sits in this package beside the
IPAM controller because both read the same Service fields (allocator.py).

* **Which addresses**: every ``status.loadBalancer.ingress[].ip`` of a Service of ours
  (allocator.is_ours), IPv4 (answered with ARP) or IPv6 (with NDP), **that lies in a
  LoadBalancerIPPool that selects the Service** (``pooled``). The status is only a claim:
  whoever may write ``services/status`` could put the LAN gateway's address there, and a node
  answering ARP for it would take the gateway's traffic. MetalLB's speaker likewise announces
  only addresses of its IPAddressPools (an address outside every pool is logged and ignored).
  A disabled pool still counts: disabling stops new allocations, not the ones made.
* **Who may announce** (``eligible``): with ``externalTrafficPolicy: Cluster`` every node
  running an announcer; with ``Local`` only a node with a ready endpoint of the Service
  (an EndpointSlice endpoint whose ``nodeName`` is this node and whose ``ready`` is not false),
  since the proxy drops external traffic for the Service on any other node (MetalLB's
  ``ShouldAnnounce``).
* **Election**: per address a ``coordination.k8s.io`` Lease in the namespace ``kubesvc-lb``
  (announceraccess.py: the only namespace the announcers may write Leases in), named
  ``kubesvc-lb-<address>`` (dots and colons as dashes), held through client/leaderelection.py
  (its timing flags: ``lease_duration``, ``renew_deadline``, ``retry_period``). An eligible
  node is a candidate; one that stops being eligible (its last local endpoint went, the Service
  went or lost the address) stops and releases, so another takes over within a retry period. A
  killed node stops renewing; another takes over once the Lease has not changed for
  ``lease_duration``.
* **Holding**: the holder adds the address to the set its ARP and NDP sockets answer for
  (kernel/arp.py, kernel/ndp.py) and sends a gratuitous ARP announcement or an unsolicited
  Neighbour Advertisement at once, so every neighbour's cache moves to it without waiting for
  its entry to expire.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Awaitable, Callable, Iterable

from kubesvc.client.informer import Informer
from kubesvc.client.leaderelection import LeaderElector
from kubesvc.client.rest import RestClient
from kubesvc.controllers.loadbalancer.allocator import Pool, ingress_ips, is_ours, pool_from_object
from kubesvc.controllers.loadbalancer.announceraccess import LEASE_NAMESPACE
from kubesvc.util.aio import cancel_and_wait
from kubesvc.util.clock import Clock, RealClock

log = logging.getLogger("kubesvc.loadbalancer.announcer")

LEASE_PREFIX = "kubesvc-lb-"
LABEL_SERVICE_NAME = "kubernetes.io/service-name"


def lease_name(address: str) -> str:
    return LEASE_PREFIX + address.replace(".", "-").replace(":", "-")


def has_ready_local_endpoint(slices: list[dict], node: str) -> bool:
    for endpoint_slice in slices:
        for endpoint in endpoint_slice.get("endpoints") or ():
            ready = (endpoint.get("conditions") or {}).get("ready")
            if endpoint.get("nodeName") == node and ready is not False:
                return True
    return False


def eligible(service: dict, slices: list[dict], node: str) -> bool:
    """May ``node`` announce ``service``'s addresses (MetalLB's ShouldAnnounce)?"""
    if (service.get("spec") or {}).get("externalTrafficPolicy") == "Local":
        return has_ready_local_endpoint(slices, node)
    return True


def pooled(address: str, service: dict, pools: Iterable[Pool]) -> bool:
    """Is ``address`` in a pool that selects ``service`` (one the allocator could have given it)?"""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(pool.contains(ip) and pool.serves(service) for pool in pools)


def wanted_announcements(services: list[dict], slices_of: Callable[[dict], list[dict]], node: str,
                         pools: Iterable[Pool]) -> dict[str, str]:
    """address -> the namespace of the Service it belongs to, for every address ``node`` should
    stand as a candidate for."""
    pools = list(pools)
    wanted: dict[str, str] = {}
    for service in services:
        if not is_ours(service):
            continue
        addresses = [ip for ip in ingress_ips(service) if pooled(ip, service, pools)]
        if addresses and eligible(service, slices_of(service), node):
            for ip in addresses:
                wanted.setdefault(ip, service["metadata"]["namespace"])
    return wanted


class Announcer:
    """Stands as a candidate for each address ``node`` may announce; answers ARP/NDP for the
    ones it holds through ``announce`` (called on takeover) and the ``holding`` set (read by the
    sockets' ``serve``)."""

    def __init__(self, client: RestClient, services: Informer, endpoint_slices: Informer, pools: Informer, node: str, *,
                 announce: Callable[[str], Awaitable[None]], lease_duration: float = 15.0, renew_deadline: float = 10.0,
                 retry_period: float = 2.0, clock: Clock | None = None):
        self.client = client
        self.services = services
        self.endpoint_slices = endpoint_slices
        self.pools = pools
        self.node = node
        self.announce = announce
        self.timing = (lease_duration, renew_deadline, retry_period)
        self.clock = clock or RealClock()
        self.holding: set[str] = set()
        self._unpooled_logged: set[str] = set()
        self._candidacies: dict[str, asyncio.Task] = {}
        self._changed = asyncio.Event()
        for informer in (services, endpoint_slices, pools):
            informer.add_event_handler(self._poke, lambda old, new: self._poke(new), self._poke)

    def _poke(self, _obj: dict) -> None:
        self._changed.set()

    def _slices_of(self, service: dict) -> list[dict]:
        name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
        return [s for s in self.endpoint_slices.indexer.list()
                if (s.get("metadata") or {}).get("namespace") == namespace
                and ((s.get("metadata") or {}).get("labels") or {}).get(LABEL_SERVICE_NAME) == name]

    async def run(self) -> None:
        for informer in (self.services, self.endpoint_slices, self.pools):
            await informer.wait_for_sync()
        try:
            while True:
                self._changed.clear()
                await self.reconcile()
                await self._changed.wait()
        finally:
            for address in list(self._candidacies):
                await self._withdraw(address)

    async def reconcile(self) -> None:
        pools = [pool_from_object(obj) for obj in self.pools.indexer.list()]
        services = self.services.indexer.list()
        wanted = wanted_announcements(services, self._slices_of, self.node, pools)
        self._log_unpooled(services, pools)
        for address in [a for a in self._candidacies if a not in wanted or self._candidacies[a].done()]:
            await self._withdraw(address)
        for address in wanted:
            if address not in self._candidacies:
                self._candidacies[address] = asyncio.create_task(self._stand(address))

    def _log_unpooled(self, services: list[dict], pools: list[Pool]) -> None:
        """Say once per address that a Service's status claims one outside every pool."""
        for service in services:
            if is_ours(service):
                for ip in ingress_ips(service):
                    if ip not in self._unpooled_logged and not pooled(ip, service, pools):
                        self._unpooled_logged.add(ip)
                        meta = service["metadata"]
                        log.warning("not announcing %s of Service %s/%s: in no LoadBalancerIPPool that selects it",
                                    ip, meta.get("namespace"), meta.get("name"))

    async def _withdraw(self, address: str) -> None:
        task = self._candidacies.pop(address, None)
        if task is not None:
            await cancel_and_wait([task])
        self.holding.discard(address)

    async def _stand(self, address: str) -> None:
        lease_duration, renew_deadline, retry_period = self.timing
        elector = LeaderElector(self.client, namespace=LEASE_NAMESPACE, name=lease_name(address), identity=self.node,
                                lease_duration=lease_duration, renew_deadline=renew_deadline, retry_period=retry_period,
                                clock=self.clock)

        async def hold() -> None:
            self.holding.add(address)
            log.info("node %s announces %s", self.node, address)
            try:
                await self.announce(address)
                await asyncio.Event().wait()  # until the election or a withdrawal cancels us
            finally:
                self.holding.discard(address)

        try:
            await elector.run(hold)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # lost the lease: stand again at the next change
            log.info("node %s: candidacy for %s ended: %s", self.node, address, exc)
            self.holding.discard(address)
            self._changed.set()

