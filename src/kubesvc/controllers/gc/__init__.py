"""Garbage collection by ownerReferences (upstream kube-controller-manager ``garbagecollector``).

An object names the objects it belongs to in ``metadata.ownerReferences`` (apiVersion, kind,
name, uid; ``controller: true`` for the managing one, ``blockOwnerDeletion: true`` to make a
foreground deletion of the owner wait for it). An EndpointSlice or Endpoints object made for a
Service, for example, names that Service. When the owners are gone, the dependent is garbage.

Deleting an owner picks what happens to its dependents (``DeleteOptions.propagationPolicy``,
``kubectl delete --cascade=...``); the apiserver records the choice as a finalizer on the owner
(apiserver/registry/store.py) and this controller carries it out:

* **Background** (the default): the owner goes at once; the garbage collector then finds its
  dependents' owner absent and deletes them (and theirs, in turn).
* **Foreground**: the owner stays, marked for deletion (``deletionTimestamp``) with the
  ``foregroundDeletion`` finalizer, while the garbage collector deletes its dependents (in the
  foreground themselves when they have dependents); when no dependent with
  ``blockOwnerDeletion: true`` is left, it removes the finalizer and the owner goes.
* **Orphan**: the owner stays marked with the ``orphan`` finalizer while the garbage collector
  removes the owner's ownerReference from each dependent; then it removes the finalizer and the
  owner goes; the dependents live on.

The pieces, after upstream's files: ``graph.py`` (graph.go, graph_builder.go: the owner ->
dependents graph by uid, built from one informer per resource), ``decisions.py``
(garbagecollector.go's attemptToDeleteItem / classifyReferences, patch.go: pure decisions and
request bodies), ``resources.py`` (which resources to watch, from discovery), ``controller.py``
(the asyncio shell: monitors, queues, workers, API calls; operations.go).

Objects are always named by uid as well as name: a Service deleted and re-created under the
same name is a different owner, and never keeps (or loses) the old one's dependents.
"""

from kubesvc.controllers.gc.controller import DEFAULT_WORKERS, GarbageCollector

__all__ = ["DEFAULT_WORKERS", "GarbageCollector"]
