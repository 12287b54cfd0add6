"""CoreDNS's metrics, with its names, labels and buckets (plugin/metrics/vars/vars.go,
plugin/plugin.go, plugin/cache/metrics.go), served on ``:9153`` at ``/metrics``:

- ``coredns_dns_requests_total{server,zone,view,proto,family,type}``
- ``coredns_dns_responses_total{server,zone,view,rcode,plugin}``
- ``coredns_dns_request_duration_seconds{server,zone,view}``: buckets
  ``ExponentialBuckets(0.00025, 2, 16)``, 0.25 ms to 8.192 s
- ``coredns_cache_hits_total{server,type,zones,view}`` (type ``success`` or ``denial``),
  ``coredns_cache_misses_total{server,zones,view}``, ``coredns_cache_entries{server,type,zones,view}``
- ``coredns_kubernetes_dns_programming_duration_seconds{service_kind}`` is not kept.

``server`` is ``dns://:<port>``; ``zone`` the zone that answered (the cluster domain, or
``.`` for forwarded names); ``view`` is empty (no views here); ``family`` 1 (IPv4) or 2
(IPv6); ``type`` the query type among CoreDNS's monitored ones, else ``other``; ``plugin`` the
one that wrote the reply (``kubernetes``, ``forward``, ``cache``).

Counting happens on the query path, so it is plain list arithmetic on one thread (the event
loop's): each distinct (zone, proto, family, type, rcode, plugin) of an answer is a series
found by one dictionary lookup, holding its count and its zone's histogram; the Prometheus
families are summed from those series when ``/metrics`` is scraped (a custom collector).
prometheus_client's own Counter and Histogram take a lock per increment: with them, counting
cost seven times the answering of a repeated question.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

DURATION_BUCKETS = tuple(0.00025 * 2**i for i in range(16))
MONITORED_TYPES = frozenset(("A", "AAAA", "MX", "SOA", "CNAME", "PTR", "TXT", "NS", "SRV", "DS", "DNSKEY", "RRSIG",
                             "NSEC", "NSEC3", "HTTPS", "IXFR", "AXFR", "ANY"))


class DNSMetrics:
    def __init__(self, server: str, registry: CollectorRegistry | None = None):
        self.server = server
        self.series: dict[tuple, list] = {}  # (zone, proto, family, type, rcode, plugin) -> [count, its zone's histogram]
        self.durations: dict[str, list] = {}  # zone -> [bucket counts..., +Inf count, sum]
        self.cache_hits: dict[str, int] = defaultdict(int)  # kind
        self.cache_misses = 0
        self.cache_entries: dict[str, int] = {}
        self.registry = registry or CollectorRegistry()
        self.registry.register(self)

    def observe(self, zone: str, proto: str, family: str, qtype: str, rcode: str, plugin: str, seconds: float) -> None:
        key = (zone, proto, family, qtype, rcode, plugin)
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = [0, self._histogram(zone)]
        series[0] += 1
        histogram = series[1]
        histogram[bisect.bisect_left(DURATION_BUCKETS, seconds)] += 1
        histogram[-1] += seconds

    def _histogram(self, zone: str) -> list:
        histogram = self.durations.get(zone)
        if histogram is None:
            histogram = self.durations[zone] = [0] * (len(DURATION_BUCKETS) + 1) + [0.0]
        return histogram

    @property
    def requests(self) -> dict[tuple, int]:
        """``coredns_dns_requests_total``: (zone, proto, family, type) -> count, the type
        ``other`` when CoreDNS does not monitor it."""
        counts: dict[tuple, int] = defaultdict(int)
        for (zone, proto, family, qtype, _, _), (count, _) in list(self.series.items()):
            counts[(zone, proto, family, qtype if qtype in MONITORED_TYPES else "other")] += count
        return counts

    @property
    def responses(self) -> dict[tuple, int]:
        """``coredns_dns_responses_total``: (zone, rcode, plugin) -> count."""
        counts: dict[tuple, int] = defaultdict(int)
        for (zone, _, _, _, rcode, plugin), (count, _) in list(self.series.items()):
            counts[(zone, rcode, plugin)] += count
        return counts

    def cache_hit(self, kind: str) -> None:
        self.cache_hits[kind] += 1

    def cache_miss(self) -> None:
        self.cache_misses += 1

    def cache_size(self, kind: str, size: int) -> None:
        self.cache_entries[kind] = size

    # -- the Prometheus side (a collector: prometheus_client calls collect() per scrape)

    def collect(self):
        server = self.server
        requests = CounterMetricFamily("coredns_dns_requests", "Counter of DNS requests made per zone, protocol and family.",
                                       labels=["server", "zone", "view", "proto", "family", "type"])
        for (zone, proto, family, qtype), count in self.requests.items():
            requests.add_metric([server, zone, "", proto, family, qtype], count)
        responses = CounterMetricFamily("coredns_dns_responses", "Counter of response status codes.",
                                        labels=["server", "zone", "view", "rcode", "plugin"])
        for (zone, rcode, plugin), count in self.responses.items():
            responses.add_metric([server, zone, "", rcode, plugin], count)
        duration = HistogramMetricFamily("coredns_dns_request_duration_seconds", "Histogram of the time (in seconds) each request took per zone.",
                                         labels=["server", "zone", "view"])
        for zone, histogram in list(self.durations.items()):
            cumulative, buckets = 0, []
            for bound, count in zip((*(repr(b) for b in DURATION_BUCKETS), "+Inf"), histogram[:-1]):
                cumulative += count
                buckets.append((bound, cumulative))
            duration.add_metric([server, zone, ""], buckets, histogram[-1])
        hits = CounterMetricFamily("coredns_cache_hits", "The count of cache hits.", labels=["server", "type", "zones", "view"])
        for kind, count in list(self.cache_hits.items()):
            hits.add_metric([server, kind, ".", ""], count)
        misses = CounterMetricFamily("coredns_cache_misses", "The count of cache misses. Deprecated, derive misses from cache hits/requests counters.",
                                     labels=["server", "zones", "view"])
        misses.add_metric([server, ".", ""], self.cache_misses)
        entries = GaugeMetricFamily("coredns_cache_entries", "The number of elements in the cache.", labels=["server", "type", "zones", "view"])
        for kind, size in list(self.cache_entries.items()):
            entries.add_metric([server, kind, ".", ""], size)
        return [requests, responses, duration, hits, misses, entries]
