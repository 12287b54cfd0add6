"""One informer per resource, shared by every controller in the process (client-go's
``SharedInformerFactory``): the Pods are listed and watched once, however many controllers
look at them. Indexes the controllers ask for on every sync are built in:

* every namespaced resource: ``namespace``;
* Pods: ``node`` (``spec.nodeName``), to find the Pods a Node change affects;
* EndpointSlices: ``service`` (``namespace/<kubernetes.io/service-name label>``).
"""

from __future__ import annotations

import asyncio
import random

from kubesvc.client.cache import IndexFunc, index_by_label
from kubesvc.client.informer import Informer
from kubesvc.client.rest import ENDPOINTS, ENDPOINTSLICES, NODES, PODS, SERVICES, Resource, RestClient
from kubesvc.client.workqueue import WorkQueue
from kubesvc.controllers.endpointslice.util import LABEL_SERVICE_NAME, pod_service_keys, services_to_update_on_pod_change
from kubesvc.util.aio import cancel_and_wait

POD_NODE_INDEX = "node"
SLICE_SERVICE_INDEX = "service"


def index_pod_by_node(pod: dict) -> list[str]:
    node = (pod.get("spec") or {}).get("nodeName")
    return [node] if node else []


_EXTRA_INDEXES: dict[Resource, dict[str, IndexFunc]] = {
    PODS: {POD_NODE_INDEX: index_pod_by_node},
    ENDPOINTSLICES: {SLICE_SERVICE_INDEX: index_by_label(LABEL_SERVICE_NAME)},
}


def default_resync_period() -> float:
    """kube-controller-manager's ``--min-resync-period`` (12 h) times a random factor in [1, 2):
    every cached object is handed to the handlers again, so work dropped after too many
    failed retries is eventually redone."""
    return 12 * 3600 * (1 + random.random())


class SharedInformers:
    def __init__(self, client: RestClient, resync_period: float | None = None):
        self._client = client
        self._resync_period = resync_period if resync_period is not None else default_resync_period()
        self._informers: dict[Resource, Informer] = {}
        self._tasks: list[asyncio.Task] = []

    def informer(self, resource: Resource) -> Informer:
        if resource not in self._informers:
            informer = Informer(self._client, resource, resync_period=self._resync_period)
            informer.indexer.add_indexers(_EXTRA_INDEXES.get(resource, {}))
            self._informers[resource] = informer
            if self._tasks:  # asked for after start(): start it too
                self._tasks.append(asyncio.create_task(informer.run()))
        return self._informers[resource]

    def existing(self, resource: Resource) -> Informer | None:
        """The informer of ``resource`` if some controller asked for it, else None (the garbage
        collector's monitors share these, as upstream's ObjectOrMetadataInformerFactory)."""
        return self._informers.get(resource)

    @property
    def services(self) -> Informer:
        return self.informer(SERVICES)

    @property
    def pods(self) -> Informer:
        return self.informer(PODS)

    @property
    def nodes(self) -> Informer:
        return self.informer(NODES)

    @property
    def endpoint_slices(self) -> Informer:
        return self.informer(ENDPOINTSLICES)

    @property
    def endpoints(self) -> Informer:
        return self.informer(ENDPOINTS)

    def start(self) -> None:
        for informer in self._informers.values():
            self._tasks.append(asyncio.create_task(informer.run()))

    async def wait_for_sync(self, timeout: float | None = None) -> bool:
        results = await asyncio.gather(*(i.wait_for_sync(timeout) for i in self._informers.values()))
        return all(results)

    async def stop(self) -> None:
        for informer in self._informers.values():
            informer.stop()
        await cancel_and_wait(self._tasks)
        self._tasks.clear()


class ServicesOfPods:
    """Pod events -> the keys of the Services selecting the Pod, added to a queue after the
    batch period (the EndpointSlice and Endpoints controllers' Pod handlers, upstream
    ``addPod``/``updatePod``/``deletePod``)."""

    def __init__(self, services: Informer, queue: WorkQueue, batch_period: float):
        self._services, self._queue, self._batch_period = services, queue, batch_period

    def _in_namespace(self, pod: dict) -> list[dict]:
        return self._services.indexer.by_index("namespace", pod["metadata"].get("namespace", ""))

    def on_add(self, pod: dict) -> None:
        """Also the delete handler: the Pod's Services must drop it."""
        for key in pod_service_keys(self._in_namespace(pod), pod):
            self._queue.add_after(key, self._batch_period)

    def on_update(self, old: dict, new: dict) -> None:
        for key in services_to_update_on_pod_change(lambda: self._in_namespace(new), old, new):
            self._queue.add_after(key, self._batch_period)

    def attach(self, pods: Informer) -> None:
        pods.add_event_handler(self.on_add, self.on_update, self.on_add)
