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
one that wrote the reply (``kubernetes``, ``forward``, ``cache``). Label children are looked
up once and kept: the per-query cost is a dictionary hit and an increment.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

DURATION_BUCKETS = tuple(0.00025 * 2**i for i in range(16))
MONITORED_TYPES = frozenset(("A", "AAAA", "MX", "SOA", "CNAME", "PTR", "TXT", "NS", "SRV", "DS", "DNSKEY", "RRSIG",
                             "NSEC", "NSEC3", "HTTPS", "IXFR", "AXFR", "ANY"))


class DNSMetrics:
    def __init__(self, server: str, registry: CollectorRegistry | None = None):
        self.server = server
        self.registry = r = registry or CollectorRegistry()
        self.requests = Counter("coredns_dns_requests_total", "Counter of DNS requests made per zone, protocol and family.",
                                ["server", "zone", "view", "proto", "family", "type"], registry=r)
        self.responses = Counter("coredns_dns_responses_total", "Counter of response status codes.",
                                 ["server", "zone", "view", "rcode", "plugin"], registry=r)
        self.duration = Histogram("coredns_dns_request_duration_seconds", "Histogram of the time (in seconds) each request took per zone.",
                                  ["server", "zone", "view"], buckets=DURATION_BUCKETS, registry=r)
        self.cache_hits = Counter("coredns_cache_hits_total", "The count of cache hits.", ["server", "type", "zones", "view"], registry=r)
        self.cache_misses = Counter("coredns_cache_misses_total", "The count of cache misses. Deprecated, derive misses from cache hits/requests counters.",
                                    ["server", "zones", "view"], registry=r)
        self.cache_entries = Gauge("coredns_cache_entries", "The number of elements in the cache.", ["server", "type", "zones", "view"], registry=r)
        self._children: dict[tuple, object] = {}

    def _child(self, metric, *labels):
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def observe(self, zone: str, proto: str, family: str, qtype: str, rcode: str, plugin: str, seconds: float) -> None:
        self._child(self.requests, self.server, zone, "", proto, family, qtype if qtype in MONITORED_TYPES else "other").inc()
        self._child(self.responses, self.server, zone, "", rcode, plugin).inc()
        self._child(self.duration, self.server, zone, "").observe(seconds)

    def cache_hit(self, kind: str) -> None:
        self._child(self.cache_hits, self.server, kind, ".", "").inc()

    def cache_miss(self) -> None:
        self._child(self.cache_misses, self.server, ".", "").inc()

    def cache_size(self, kind: str, size: int) -> None:
        self._child(self.cache_entries, self.server, kind, ".", "").set(size)
