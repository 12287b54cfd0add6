"""NamespaceLifecycle admission: the system namespaces cannot be deleted, and nothing is created
in a namespace that is going away.

Upstream: ``k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle/admission.go``, on in
every kube-apiserver (identity.md §8.1).

* **Immortal namespaces** are ``default``, ``kube-system`` and ``kube-public``
  (``kube-node-lease`` is not). Deleting one, dry run or not, is a 403 whose details name the
  namespace: ``namespaces "kube-system" is forbidden: this namespace may not be deleted``.
* **Creating in a terminating namespace** is a 403 naming the new object (its name, else its
  generateName, else ``Unknown``: admission runs before a name is generated):
  ``services "web" is forbidden: unable to create new content in namespace demo because it is
  being terminated``, with the extra cause ``{"reason": "NamespaceTerminating", "message":
  "namespace demo is being terminated", "field": "metadata.namespace"}`` that controllers
  (the ServiceAccount and root-CA publishers) use to give up quietly. Creating in a namespace
  that does not exist is the NotFound of the namespace itself (``namespaces "demo" not found``).
  The registry checks the namespace as it creates (``Store.admit_namespace_lifecycle``, which
  the Eviction subresource's create calls too), with :func:`terminating` for the words.

**Where the namespace is read** (:class:`NamespaceLister`): upstream's plugin reads the
Namespace from its informer's cache and goes to storage only when the cache cannot be trusted:
the namespace is not in it (just created: the watch has not brought it yet), the cache has not
synced, or this apiserver admitted a DELETE of that namespace in the last 30 s
(``forceLiveLookupTTL``, an LRU of 100 names) while its cached copy still says Active. kubesvc's
cache is the apiserver's watch cache (apiserver/cacher.py), so a create in a namespace it holds
is one storage write and no read: on etcd, one round trip instead of two. Upstream waits 50 ms
(``missingNamespaceWait``) for the cache before a live read of a missing namespace; kubesvc
reads at once (the read is cheaper than the wait). As upstream, a namespace deleted through
another apiserver is seen by this one's cache a watch delay later.

The system namespaces themselves are kept by the apiserver's ``SystemNamespaces`` loop
(``kubernetes_service.py``), as upstream's system-namespaces controller keeps them.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable, Mapping

import msgspec

from kubesvc.api import errors
from kubesvc.api.errors import StatusError
from kubesvc.api.scheme import KindInfo
from kubesvc.apiserver.admission.strategy import DELETE, admitted, object_name

IMMORTAL_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})
FORCE_LIVE_LOOKUP_TTL = 30.0  # seconds (upstream's forceLiveLookupTTL)
FORCE_LIVE_LOOKUP_SIZE = 100  # names remembered (upstream's NewLRUExpireCache(100))

_decode = msgspec.json.Decoder().decode


def refuse_delete(namespace: str) -> StatusError | None:
    """The 403 for deleting ``namespace``, None when it may go."""
    if namespace not in IMMORTAL_NAMESPACES:
        return None
    return errors.forbidden("namespaces", namespace, "", "this namespace may not be deleted")


def terminating(info: KindInfo, obj: dict | None, namespace: str) -> StatusError:
    """The 403 for creating ``obj`` in ``namespace`` while it terminates."""
    why = f"unable to create new content in namespace {namespace} because it is being terminated"
    error = errors.forbidden(info.resource, object_name(obj), info.group, why)
    error.details.setdefault("causes", []).append(
        {"reason": "NamespaceTerminating", "message": f"namespace {namespace} is being terminated", "field": "metadata.namespace"})
    return error


def is_terminating(namespace: dict) -> bool:
    """Whether a stored Namespace is going away: marked for deletion, or in phase Terminating."""
    return bool((namespace.get("metadata") or {}).get("deletionTimestamp")
                or (namespace.get("status") or {}).get("phase") == "Terminating")


class NamespaceLister:
    """The namespaces a create is admitted against (see "Where the namespace is read" above):
    :meth:`lookup` answers from the watch cache given by :meth:`use_cache`, or from storage."""

    def __init__(self, now: Callable[[], float] = time.monotonic):
        self.cache = None  # the apiserver's WatchCache, once it has one
        self._now = now
        self._force_live: OrderedDict[str, float] = OrderedDict()  # name -> expiry
        self._phases: dict[tuple[str, int], bool] = {}  # (key, revision) -> terminating
        self.live_reads = 0  # storage reads made (tests and benches look at it)

    def use_cache(self, cache) -> None:
        self.cache = cache

    def force_live_lookup(self, name: str) -> None:
        """A DELETE of ``name`` was admitted: for FORCE_LIVE_LOOKUP_TTL an Active cached copy is
        not trusted."""
        self._force_live.pop(name, None)
        self._force_live[name] = self._now() + FORCE_LIVE_LOOKUP_TTL
        while len(self._force_live) > FORCE_LIVE_LOOKUP_SIZE:
            self._force_live.popitem(last=False)

    def _forced(self, name: str) -> bool:
        expiry = self._force_live.get(name)
        if expiry is None:
            return False
        if self._now() > expiry:  # utilcache's LRUExpireCache: expired at exactly the TTL's end
            del self._force_live[name]
            return False
        return True

    def _terminating(self, key: str, revision: int, value: Callable[[], bytes]) -> bool:
        """Remembered per revision of the Namespace, so creates do not decode it each time."""
        known = self._phases.get((key, revision))
        if known is None:
            if len(self._phases) >= 1024:
                self._phases.clear()
            known = self._phases[(key, revision)] = is_terminating(_decode(value()))
        return known

    def _cached(self, info: KindInfo, key: str) -> tuple[bool, bool]:
        """(found in a ready cache, terminating) for the Namespace stored at ``key``."""
        cache = self.cache
        cacher = cache.cacher(info) if cache is not None and cache.ready else None
        if cacher is None:
            return False, False
        found = next(iter(cacher.objects(key)), None)  # the first key from ``key`` on: itself if held
        if found is None or found.key != key:
            return False, False
        return True, self._terminating(key, found.revision, lambda: found.raw)

    async def lookup(self, backend, info: KindInfo, name: str) -> bool | None:
        """Whether the Namespace ``name`` (``info``: the Namespace kind) is terminating; None
        when it does not exist. From the cache when it holds the namespace (an Active copy only
        when no recent DELETE forces a live read), else one storage read."""
        key = info.key(None, name)
        found, terminating = self._cached(info, key)
        if found and (terminating or not self._forced(name)):
            return terminating
        self.live_reads += 1
        kv = await backend.get(key)
        if kv is None:
            return None
        return self._terminating(key, kv.mod_revision, lambda: kv.value)


class NamespaceLifecycle:
    """The plugin: in front of the Namespace strategy, it refuses deleting the immortal ones and
    marks a namespace being deleted for live lookups (``lister``)."""

    def __init__(self, lister: NamespaceLister | None = None):
        self.lister = lister if lister is not None else NamespaceLister()

    async def admit(self, info: KindInfo, operation: str, subresource: str, new: dict | None, old: dict | None) -> None:
        if info.kind == "Namespace" and operation == DELETE:
            name = ((old or {}).get("metadata") or {}).get("name", "")
            refused = refuse_delete(name)
            if refused is not None:
                raise refused
            self.lister.force_live_lookup(name)

    def strategies(self, overrides: Mapping[str, Callable] | None = None) -> dict:
        """``overrides`` with the Namespace strategy wrapped."""
        from kubesvc.apiserver.registry.strategy import strategy_for

        merged = dict(overrides or {})
        merged["Namespace"] = admitted(merged.get("Namespace") or strategy_for, self)
        return merged
