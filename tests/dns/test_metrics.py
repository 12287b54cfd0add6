"""CoreDNS's metrics as a scrape shows them: requests by zone, proto, family and type (types
CoreDNS does not monitor as ``other``), responses by zone, rcode and plugin, and the request
duration histogram per zone, counted from the answers observed."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kubesvc.dns.metrics import DNSMetrics


def samples(metrics: DNSMetrics) -> dict[tuple, float]:
    text = generate_latest(metrics.registry).decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def labels(**kw) -> tuple:
    return tuple(sorted(kw.items()))


def test_a_scrape_counts_what_was_observed():
    metrics = DNSMetrics("dns://:53")
    zone = "cluster.local."
    for seconds in (0.0001, 0.0002, 0.0003):  # the first bucket (0.25 ms) holds two of them
        metrics.observe(zone, "udp", "1", "A", "NOERROR", "kubernetes", seconds)
    metrics.observe(zone, "udp", "1", "A", "NXDOMAIN", "kubernetes", 0.001)
    metrics.observe(zone, "tcp", "2", "AAAA", "NOERROR", "kubernetes", 0.003)
    metrics.observe(zone, "udp", "1", "HINFO", "NOERROR", "kubernetes", 0.0001)  # not monitored: "other"
    metrics.observe(".", "udp", "1", "A", "NOERROR", "cache", 0.0001)
    got = samples(metrics)
    server = {"server": "dns://:53", "view": ""}

    def requests(zone, proto, family, qtype):
        return got[("coredns_dns_requests_total", labels(**server, zone=zone, proto=proto, family=family, type=qtype))]

    assert requests(zone, "udp", "1", "A") == 4
    assert requests(zone, "tcp", "2", "AAAA") == 1
    assert requests(zone, "udp", "1", "other") == 1
    assert requests(".", "udp", "1", "A") == 1
    assert ("coredns_dns_requests_total", labels(**server, zone=zone, proto="udp", family="1", type="HINFO")) not in got

    def responses(zone, rcode, plugin):
        return got[("coredns_dns_responses_total", labels(**server, zone=zone, rcode=rcode, plugin=plugin))]

    assert responses(zone, "NOERROR", "kubernetes") == 5
    assert responses(zone, "NXDOMAIN", "kubernetes") == 1
    assert responses(".", "NOERROR", "cache") == 1

    def bucket(zone, le):
        return got[("coredns_dns_request_duration_seconds_bucket", labels(**server, zone=zone, le=le))]

    assert bucket(zone, "0.00025") == 3
    assert bucket(zone, "0.0005") == 4
    assert bucket(zone, "0.001") == 5
    assert bucket(zone, "0.004") == bucket(zone, "+Inf") == 6
    assert got[("coredns_dns_request_duration_seconds_count", labels(**server, zone=zone))] == 6
    assert abs(got[("coredns_dns_request_duration_seconds_sum", labels(**server, zone=zone))] - 0.0047) < 1e-9
    assert bucket(".", "+Inf") == 1
