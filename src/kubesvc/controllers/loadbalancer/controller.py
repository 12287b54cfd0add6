"""``service-lb-controller``: addresses for ``type: LoadBalancer`` Services on bare metal, from
kubesvc.io/v1alpha1 LoadBalancerIPPools, as k3s's ServiceLB, Cilium's LB-IPAM and MetalLB's
controller give them (the decisions are allocator.py's; this is the shell that watches and
writes).

* Watches Services and pools (shared informers). Once both caches synced, every address already
  in a Service's ``status.loadBalancer.ingress`` is taken for it (oldest Service first), then
  Services are synced one at a time (one worker: allocation decisions are serial).
* A Service of ours (allocator.is_ours) gets ``status.loadBalancer.ingress`` =
  ``[{ip, ipMode: VIP}]`` per address (``ipMode: VIP``: the node proxy delivers the traffic to
  the endpoints itself, kube-proxy's ``LoadBalancerIPMode``), written with a merge patch of the
  ``status`` subresource, as upstream's service controller's ``patchStatus``.
  ``allocateLoadBalancerNodePorts`` is the apiserver's business (NodePorts are allocated or not
  at create); addresses are given either way, since the proxy answers on the address itself.
* When it cannot: a ``Warning`` Event ``AllocationFailed`` on the Service
  (``Failed to allocate IP for "ns/name": <why>``, MetalLB's words) and the Service stays
  pending (``kubectl get svc`` shows ``<pending>``); it is tried again when a pool or the
  Service changes.
* A deleted Service, one that stopped being ``LoadBalancer``, or one whose class changed to
  another implementation's frees its addresses at once; the controller also clears the status
  it wrote for the first two (a Service of another class is not touched: its status is its
  implementation's).
* No pool at all: LB-IPAM is off and Services are left as they are (no Events), so a cluster
  without pools behaves as one without a load-balancer implementation.
* A pool changed or deleted: every Service of ours is synced again (an address no longer in any
  pool is given up for a new one).

"""

from __future__ import annotations

import logging

from kubesvc.client.informer import Informer
from kubesvc.client.record import EventRecorder
from kubesvc.client.rest import SERVICES, ClientError, Resource, RestClient, is_not_found
from kubesvc.client.workqueue import WorkQueue
from kubesvc.controllers.loadbalancer.allocator import (
    AllocationFailed,
    Allocator,
    ingress_ips,
    is_ours,
    pool_from_object,
    service_key,
)
from kubesvc.controllers.runtime import run_workers
from kubesvc.util.clock import Clock, RealClock

log = logging.getLogger("kubesvc.controllers.loadbalancer")

LOADBALANCER_IP_POOLS = Resource("kubesvc.io", "v1alpha1", "loadbalancerippools", False, "LoadBalancerIPPool")
ALLOCATION_FAILED = "AllocationFailed"
IP_ALLOCATED = "IPAllocated"
IP_MODE_VIP = "VIP"


def desired_ingress(ips: list[str]) -> list[dict]:
    return [{"ip": ip, "ipMode": IP_MODE_VIP} for ip in ips]


class LoadBalancerIPAMController:
    def __init__(self, client: RestClient, services: Informer, pools: Informer, *, clock: Clock | None = None,
                 recorder: EventRecorder | None = None):
        self.client = client
        self.services = services
        self.pools = pools
        self.allocator = Allocator()
        self.queue = WorkQueue(clock=clock or RealClock())
        self.recorder = recorder or EventRecorder(client, "service-lb-controller", clock)
        self._started = False
        services.add_event_handler(self._enqueue, lambda old, new: self._enqueue(new), self._deleted)
        pools.add_event_handler(self._pool_changed, lambda old, new: self._pool_changed(new), self._pool_deleted)

    def _enqueue(self, service: dict) -> None:
        self.queue.add(service_key(service))

    def _deleted(self, service: dict) -> None:
        key = service_key(service)
        released = self.allocator.release(key)
        if released:
            log.info("service %s deleted: released %s", key, ", ".join(map(str, released)))
            self._resync_all()  # a Service left pending may have an address now

    def _pool_changed(self, pool: dict) -> None:
        self.allocator.set_pool(pool_from_object(pool))
        self._resync_all()

    def _pool_deleted(self, pool: dict) -> None:
        self.allocator.remove_pool(pool["metadata"]["name"])
        self._resync_all()

    def _resync_all(self) -> None:
        if not self._started:
            return
        for service in self.services.indexer.list():
            if is_ours(service):
                self._enqueue(service)

    async def run(self) -> None:
        await self.services.wait_for_sync()
        await self.pools.wait_for_sync()
        for pool in self.pools.indexer.list():
            self.allocator.set_pool(pool_from_object(pool))
        # the recorded addresses first, oldest Service first, before anything new is given out
        for service in sorted(self.services.indexer.list(), key=lambda s: (s["metadata"].get("creationTimestamp", ""), service_key(s))):
            if is_ours(service):
                self.allocator.occupy(service_key(service), ingress_ips(service))
        self._started = True
        self._resync_all()
        await run_workers("service-lb-controller", self.queue, self.sync, 1)

    async def sync(self, key: str) -> None:
        namespace, name = key.split("/", 1)
        service = self.services.indexer.get(key, None)
        if service is None:
            self.allocator.release(key)
            return
        if (service.get("metadata") or {}).get("deletionTimestamp"):
            return
        spec = service.get("spec") or {}
        if not is_ours(service):
            released = self.allocator.release(key)
            if released:
                log.info("service %s is no longer ours: released %s", key, ", ".join(map(str, released)))
                self._resync_all()
            if spec.get("type") != "LoadBalancer" and ingress_ips(service):
                await self._write_ingress(service, [])
            return
        if not self.allocator.pools:
            return  # no pool, no LB-IPAM: the Service is left to whoever sets its status
        try:
            ips = self.allocator.assign(service)
        except AllocationFailed as failure:
            log.info("service %s: %s", key, failure)
            self.recorder.event(service, "Warning", ALLOCATION_FAILED, f'Failed to allocate IP for "{key}": {failure}')
            return  # pending; a pool or Service change enqueues it again
        if ingress_ips(service) == ips and all(e.get("ipMode") == IP_MODE_VIP for e in self._ingress(service)):
            return
        if await self._write_ingress(service, desired_ingress(ips)):
            self.recorder.event(service, "Normal", IP_ALLOCATED, "Assigned IP [" + ", ".join(f'"{ip}"' for ip in ips) + "]")

    @staticmethod
    def _ingress(service: dict) -> list[dict]:
        return (((service.get("status") or {}).get("loadBalancer") or {}).get("ingress")) or []

    async def _write_ingress(self, service: dict, ingress: list[dict]) -> bool:
        meta = service["metadata"]
        try:
            await self.client.resource(SERVICES).patch(meta["name"], {"status": {"loadBalancer": {"ingress": ingress or None}}},
                                                       namespace=meta["namespace"], subresource="status")
        except ClientError as err:
            if is_not_found(err):
                return False
            raise
        log.info("service %s/%s: ingress %s", meta["namespace"], meta["name"], ", ".join(e["ip"] for e in ingress) or "cleared")
        return True
