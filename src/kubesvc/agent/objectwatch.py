"""The ConfigMaps and Secrets a node's Pods reference, watched one object at a time and shared
(the kubelet's ``WatchBasedManager``, ``pkg/kubelet/util/manager``, its default
``configMapAndSecretChangeDetectionStrategy: Watch``).

For each referenced object (namespace, kind, name) one reflector runs a list and watch with
``fieldSelector=metadata.name=<name>`` in that namespace, as long as some Pod on the node
references it; Pods referencing the same object share it (the ``kube-root-ca.crt`` ConfigMap
of every ServiceAccount volume of a namespace is one watch). A request naming one object is
what the Node authorizer lets a node list and watch, and only for objects its Pods reference.

Reads come from these watches too (the manager's ``GetObject`` reads its reflector's store): once
a watch has synced, the object it holds is what a Pod's volumes and environment get, without a
request (a burst of Pods of one namespace, each with the ``kube-root-ca.crt`` volume, costs the
apiserver one watch, not a GET per Pod). A watch that has not synced yet, or that does not hold
the object, sends the reader to the API as before (a ConfigMap created just before the Pod
is found live, not reported missing from a watch that has not seen it yet).

Subscribers get a call on every add, update and delete of the object: a Pod worker rewrites its
atomic-writer volumes then (a ``kubectl edit`` of a mounted ConfigMap reaches the running
container in about the time of one watch event, where the kubelet waits for its next periodic
sync), and retries a container held in ``CreateContainerConfigError`` by a missing ConfigMap
or Secret once it appears.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from kubesvc.agent.envvars import ObjectRef
from kubesvc.client.informer import Informer
from kubesvc.client.rest import Resource

log = logging.getLogger("kubesvc.agent")

RESOURCES = {"configmap": Resource("", "v1", "configmaps", True, "ConfigMap"),
             "secret": Resource("", "v1", "secrets", True, "Secret")}


@dataclass
class _Watch:
    informer: Informer
    task: asyncio.Task
    subscribers: dict[int, Callable[[], None]] = field(default_factory=dict)


class ObjectWatches:
    """Shared single-object watches; ``subscribe`` returns a token for ``unsubscribe``."""

    def __init__(self, client) -> None:
        self._client = client
        self._watches: dict[tuple[str, ObjectRef], _Watch] = {}
        self._next = 0

    def subscribe(self, namespace: str, ref: ObjectRef, on_change: Callable[[], None]) -> tuple:
        key = (namespace, ref)
        watch = self._watches.get(key)
        if watch is None:
            informer = Informer(self._client, RESOURCES[ref.kind], namespace=namespace, field_selector=f"metadata.name={ref.name}")
            watch = _Watch(informer, asyncio.create_task(informer.run()))
            informer.add_event_handler(lambda obj, w=watch: _notify(w), lambda old, new, w=watch: _notify(w), lambda obj, w=watch: _notify(w))
            self._watches[key] = watch
        self._next += 1
        watch.subscribers[self._next] = on_change
        return key, self._next

    def cached(self, namespace: str, ref: ObjectRef) -> dict | None:
        """The object as its watch last saw it; None when no watch of it has synced or it
        holds no such object (ask the API then)."""
        watch = self._watches.get((namespace, ref))
        if watch is None or not watch.informer.has_synced():
            return None
        return watch.informer.indexer.get(ref.name, namespace)

    def unsubscribe(self, token: tuple) -> None:
        key, number = token
        watch = self._watches.get(key)
        if watch is None:
            return
        watch.subscribers.pop(number, None)
        if not watch.subscribers:
            del self._watches[key]
            watch.informer.stop()

    def stop(self) -> None:
        for watch in self._watches.values():
            watch.informer.stop()
        self._watches.clear()

    def __len__(self) -> int:
        return len(self._watches)


def _notify(watch: _Watch) -> None:
    for on_change in list(watch.subscribers.values()):
        try:
            on_change()
        except Exception:  # one subscriber's failure is not the others'
            log.exception("object watch subscriber failed")
