"""The watch cache's metrics and the watch handler's, with upstream's names and labels.

From ``k8s.io/apiserver/pkg/storage/cacher/metrics/metrics.go`` (labels ``group``, ``resource``;
before 1.33 upstream had one ``resource`` label holding ``GroupResource.String()``):

* ``apiserver_watch_cache_events_received_total``: events the cache took from storage
  (``watchCache.processEvent``), one per stored change of the resource;
* ``apiserver_watch_cache_events_dispatched_total``: events the cacher dispatched to its
  watchers (``Cacher.dispatchEvents``), once per event whatever the number of watchers, the
  storage's progress notifications included;
* ``apiserver_watch_cache_initializations_total``: the cache (re)loaded from storage
  (``startCaching``'s ``onReplace``);
* ``apiserver_watch_cache_resource_version`` (gauge): the cache's revision, truncated to its 15
  least significant digits as upstream's ``RecordResourceVersion``;
* ``watch_cache_capacity`` (gauge): the ring's capacity. Upstream declares it without the
  ``apiserver`` namespace (``Subsystem: "watch_cache", Name: "capacity"``), so the name has no
  ``apiserver_`` prefix there either;
* ``apiserver_cache_list_total``, ``apiserver_cache_list_fetched_objects_total`` (labels
  ``group``, ``resource``, ``index``: ``""``, no index is used) and
  ``apiserver_cache_list_returned_objects_total`` (``group``, ``resource``): lists served
  from the cache, the objects read to serve them and the objects returned
  (``RecordListCacheMetrics``).

From ``k8s.io/apiserver/pkg/endpoints/metrics/metrics.go``, recorded by the watch handler
(``endpoints/handlers/watch.go``) for every event written to a client, bookmarks and errors
included:

* ``apiserver_watch_events_total`` and ``apiserver_watch_events_sizes`` (bytes per event,
  buckets 1 KiB doubling to 128 KiB), labels ``group``, ``version``, ``kind``. The ``kind``
  label carries the resource (``services``): upstream's handler passes ``gvr.Resource`` there.

The hot paths (an event applied, a list served, a line written to a watcher) add to plain
integers; the families are built when /metrics is scraped (a prometheus_client collector), so
a write watched by 100 clients costs no metric lock per delivery.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

if TYPE_CHECKING:
    from kubesvc.apiserver.cacher import WatchCache

RESOURCE_VERSION_MODULUS = 10 ** 15  # upstream keeps the 15 least significant digits (float precision)
EVENT_SIZE_BUCKETS = tuple(1024 * 2 ** i for i in range(8))  # ExponentialBuckets(1024, 2.0, 8): 1 KiB .. 128 KiB


class ResourceCounts:
    """One resource's cache counters; they outlive the cache's reloads."""

    __slots__ = ("received", "dispatched", "initializations", "lists", "fetched", "returned")

    def __init__(self) -> None:
        self.received = self.dispatched = self.initializations = 0
        self.lists = self.fetched = self.returned = 0


class EventSizes:
    """Watch events written to clients for one group/version/resource: a count and a histogram
    of their sizes."""

    __slots__ = ("count", "total", "buckets")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0
        self.buckets = [0] * (len(EVENT_SIZE_BUCKETS) + 1)  # the last one is +Inf

    def observe(self, size: int) -> None:
        self.count += 1
        self.total += size
        self.buckets[bisect.bisect_left(EVENT_SIZE_BUCKETS, size)] += 1


class WatchCacheMetrics:
    """Registered once per apiserver (``registry``: the one /metrics serves)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self._resources: dict[tuple[str, str], ResourceCounts] = {}
        self._events: dict[tuple[str, str, str], EventSizes] = {}
        self._cache: WatchCache | None = None
        if registry is not None:
            registry.register(self)

    def resource(self, group: str, resource: str) -> ResourceCounts:
        found = self._resources.get((group, resource))
        if found is None:
            found = self._resources[group, resource] = ResourceCounts()
        return found

    def watch_events(self, group: str, version: str, resource: str) -> EventSizes:
        found = self._events.get((group, version, resource))
        if found is None:
            found = self._events[group, version, resource] = EventSizes()
        return found

    def attach(self, cache: WatchCache) -> None:
        """The cache whose revision and capacity the gauges show."""
        self._cache = cache

    def describe(self) -> list:
        return []  # families are built per scrape (collect); nothing to check at registration

    def collect(self) -> Iterator:
        labels = ["group", "resource"]
        received = CounterMetricFamily("apiserver_watch_cache_events_received", "Counter of events received in watch cache broken by resource type.", labels=labels)
        dispatched = CounterMetricFamily("apiserver_watch_cache_events_dispatched", "Counter of events dispatched in watch cache broken by resource type.", labels=labels)
        initializations = CounterMetricFamily("apiserver_watch_cache_initializations", "Counter of watch cache initializations broken by resource type.", labels=labels)
        lists = CounterMetricFamily("apiserver_cache_list", "Number of LIST requests served from watch cache", labels=[*labels, "index"])
        fetched = CounterMetricFamily("apiserver_cache_list_fetched_objects", "Number of objects read from watch cache in the course of serving a LIST request",
                                      labels=[*labels, "index"])
        returned = CounterMetricFamily("apiserver_cache_list_returned_objects", "Number of objects returned for a LIST request from watch cache", labels=labels)
        for (group, resource), counts in sorted(self._resources.items()):
            received.add_metric([group, resource], counts.received)
            dispatched.add_metric([group, resource], counts.dispatched)
            initializations.add_metric([group, resource], counts.initializations)
            if counts.lists:
                lists.add_metric([group, resource, ""], counts.lists)
                fetched.add_metric([group, resource, ""], counts.fetched)
                returned.add_metric([group, resource], counts.returned)
        yield from (received, dispatched, initializations, lists, fetched, returned)
        version = GaugeMetricFamily("apiserver_watch_cache_resource_version",
                                    "Current resource version of watch cache broken by resource type. This is truncated to the 15 least significant digits.", labels=labels)
        capacity = GaugeMetricFamily("watch_cache_capacity", "Total capacity of watch cache broken by resource type.", labels=labels)
        cache = self._cache
        if cache is not None and cache.ready:
            for group, resource, capacity_of in cache.capacities():
                version.add_metric([group, resource], cache.revision % RESOURCE_VERSION_MODULUS)
                capacity.add_metric([group, resource], capacity_of)
        yield from (version, capacity)
        gvk = ["group", "version", "kind"]
        events = CounterMetricFamily("apiserver_watch_events", "Number of events sent in watch clients", labels=gvk)
        sizes = HistogramMetricFamily("apiserver_watch_events_sizes", "Watch event size distribution in bytes", labels=gvk)
        for key, stats in sorted(self._events.items()):
            events.add_metric(list(key), stats.count)
            cumulative, running = [], 0
            for bound, count in zip((*EVENT_SIZE_BUCKETS, float("inf")), stats.buckets):
                running += count
                cumulative.append(("+Inf" if bound == float("inf") else str(float(bound)), running))
            sizes.add_metric(list(key), cumulative, stats.total)
        yield from (events, sizes)
