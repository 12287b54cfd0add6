"""``node-ipam-controller`` with the range allocator (pkg/controller/nodeipam/ipam/range_allocator.go):
each Node gets ``spec.podCIDRs`` from ``--cluster-cidr``, one range per family.

* Enabled by ``--allocate-node-cidrs`` with ``--cluster-cidr`` (one CIDR, or an IPv4 and an
  IPv6 one for dual-stack) and the node mask sizes (``--node-cidr-mask-size`` single-stack,
  ``--node-cidr-mask-size-ipv4``/``-ipv6``; defaults /24 and /64).
* At start, once the Node cache has synced, every range already in a Node's ``spec.podCIDRs``
  is marked taken before anything is allocated: the Nodes are the allocator's memory, so a
  restarted controller-manager never hands out a range twice. A recorded range outside the
  cluster CIDR is logged and left alone.
* A Node without ``spec.podCIDRs`` gets the next free range of each cluster CIDR, written as
  ``spec.podCIDR`` (the first) and ``spec.podCIDRs`` in one patch; if the patch fails the
  ranges go back.
* No range left: a ``Normal`` Event ``CIDRNotAvailable`` on the Node ("Node <name> status is
  now: CIDRNotAvailable", upstream's ``RecordNodeStatusChange``) and the Node is retried with
  backoff; it gets a range once one is freed.
* A deleted Node's ranges are free again at once.
"""

from __future__ import annotations

import logging

from kubesvc.client.informer import Informer
from kubesvc.client.record import EventRecorder
from kubesvc.client.rest import NODES, RestClient, is_not_found, ClientError
from kubesvc.client.workqueue import WorkQueue
from kubesvc.controllers.nodeipam.cidrset import CIDRSet, CIDRSetError
from kubesvc.controllers.runtime import run_workers
from kubesvc.util.clock import Clock, RealClock

log = logging.getLogger("kubesvc.controllers.nodeipam")

CIDR_NOT_AVAILABLE = "CIDRNotAvailable"


class CIDRNotAvailable(Exception):
    pass


def pod_cidrs(node: dict) -> list[str]:
    spec = node.get("spec") or {}
    cidrs = spec.get("podCIDRs")
    if isinstance(cidrs, list) and cidrs:
        return [c for c in cidrs if isinstance(c, str)]
    return [spec["podCIDR"]] if isinstance(spec.get("podCIDR"), str) and spec["podCIDR"] else []


class RangeAllocator:
    def __init__(self, client: RestClient, nodes: Informer, cluster_cidrs: list[str], node_mask_sizes: list[int], *,
                 clock: Clock | None = None, recorder: EventRecorder | None = None):
        self.client = client
        self.nodes = nodes
        self.sets = [CIDRSet(cidr, size) for cidr, size in zip(cluster_cidrs, node_mask_sizes)]
        self.queue = WorkQueue(clock=clock or RealClock())
        # node -> ranges patched in but maybe not yet in the cache (a stale copy must not get a second range)
        self._patched: dict[str, list[str]] = {}
        self.recorder = recorder or EventRecorder(client, "cidrAllocator", clock)
        nodes.add_event_handler(self._enqueue, lambda old, new: self._enqueue(new), self._released)

    def _enqueue(self, node: dict) -> None:
        self.queue.add(node["metadata"]["name"])

    def _released(self, node: dict) -> None:
        for cidr in pod_cidrs(node) or self._patched.get(node["metadata"]["name"], []):
            self._release(cidr)
        self._patched.pop(node["metadata"]["name"], None)

    def _release(self, cidr: str) -> None:
        for cidr_set in self.sets:
            if cidr_set.contains(cidr):
                cidr_set.release(cidr)
                log.info("released %s", cidr)

    def occupy(self, node: dict) -> None:
        for cidr in pod_cidrs(node):
            owner = next((s for s in self.sets if s.contains(cidr)), None)
            if owner is None:
                log.warning("node %s: pod CIDR %s is outside the cluster CIDRs %s; left alone", node["metadata"]["name"], cidr,
                            ", ".join(str(s.cluster) for s in self.sets))
                continue
            owner.occupy(cidr)

    async def run(self) -> None:
        await self.nodes.wait_for_sync()
        for node in self.nodes.indexer.list():  # upstream: occupy every recorded range before allocating
            self.occupy(node)
        # one worker: allocations are decided one Node at a time
        await run_workers("node-ipam-controller", self.queue, self.sync, 1)

    async def sync(self, name: str) -> None:
        node = self.nodes.indexer.get(name, None)
        if node is None or (node.get("metadata") or {}).get("deletionTimestamp"):
            return
        if pod_cidrs(node):
            self.occupy(node)
            self._patched.pop(name, None)
            return
        if name in self._patched:
            return  # our patch is on its way to the cache
        allocated: list[str] = []
        try:
            for cidr_set in self.sets:
                allocated.append(cidr_set.allocate_next())
        except CIDRSetError as exc:
            for cidr in allocated:
                self._release(cidr)
            meta = node["metadata"]
            ref = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": meta["name"], **({"uid": meta["uid"]} if meta.get("uid") else {})}}
            self.recorder.event(ref, "Normal", CIDR_NOT_AVAILABLE, f"Node {name} status is now: {CIDR_NOT_AVAILABLE}")
            raise CIDRNotAvailable(f"failed to allocate cidr from cluster cidr: {exc}") from None
        try:
            await self.client.resource(NODES).patch(name, {"spec": {"podCIDR": allocated[0], "podCIDRs": allocated}}, patch_type="strategic")
            self._patched[name] = allocated
            log.info("node %s: pod CIDRs %s", name, ", ".join(allocated))
        except ClientError as exc:
            for cidr in allocated:
                self._release(cidr)
            if is_not_found(exc):
                return
            raise
