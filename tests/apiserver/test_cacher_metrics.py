"""The watch cache's metrics (apiserver/cacher_metrics.py) under upstream's names and labels
(k8s.io/apiserver/pkg/storage/cacher/metrics/metrics.go, endpoints/metrics/metrics.go): the
exposition a Prometheus scrape reads."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from kubesvc.apiserver.cacher_metrics import WatchCacheMetrics


def exposition(registry: CollectorRegistry) -> set[str]:
    return {line for line in generate_latest(registry).decode().splitlines() if line and not line.startswith("#")}


def test_counters_and_watch_event_sizes_under_upstream_names():
    registry = CollectorRegistry()
    metrics = WatchCacheMetrics(registry)
    services = metrics.resource("", "services")
    services.received, services.dispatched, services.initializations = 3, 4, 1
    services.lists, services.fetched, services.returned = 2, 20, 5
    slices = metrics.resource("discovery.k8s.io", "endpointslices")
    slices.initializations = 1
    events = metrics.watch_events("", "v1", "services")
    for size in (100, 1024, 1025, 200_000):
        events.observe(size)
    lines = exposition(registry)
    for expected in (
        'apiserver_watch_cache_events_received_total{group="",resource="services"} 3.0',
        'apiserver_watch_cache_events_dispatched_total{group="",resource="services"} 4.0',
        'apiserver_watch_cache_initializations_total{group="",resource="services"} 1.0',
        'apiserver_watch_cache_initializations_total{group="discovery.k8s.io",resource="endpointslices"} 1.0',
        'apiserver_cache_list_total{group="",index="",resource="services"} 2.0',
        'apiserver_cache_list_fetched_objects_total{group="",index="",resource="services"} 20.0',
        'apiserver_cache_list_returned_objects_total{group="",resource="services"} 5.0',
        'apiserver_watch_events_total{group="",kind="services",version="v1"} 4.0',
        'apiserver_watch_events_sizes_bucket{group="",kind="services",le="1024.0",version="v1"} 2.0',
        'apiserver_watch_events_sizes_bucket{group="",kind="services",le="2048.0",version="v1"} 3.0',
        'apiserver_watch_events_sizes_bucket{group="",kind="services",le="131072.0",version="v1"} 3.0',
        'apiserver_watch_events_sizes_bucket{group="",kind="services",le="+Inf",version="v1"} 4.0',
        'apiserver_watch_events_sizes_count{group="",kind="services",version="v1"} 4.0',
        'apiserver_watch_events_sizes_sum{group="",kind="services",version="v1"} 202149.0',
    ):
        assert expected in lines, expected
    # no list served for endpointslices yet: no list series for it
    assert not any("cache_list" in line and "endpointslices" in line for line in lines)


def scrape(http, url: str) -> dict[str, float]:
    """/metrics as {series: value} (series with their labels, as exposed)."""
    samples = {}
    for line in http.get(f"{url}/metrics").text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            samples[series] = float(value)
    return samples


def test_a_list_and_a_watch_show_on_metrics(fresh_apiserver):
    """Over HTTP: the counters move as a client lists and watches Services, the gauges show the
    cache's revision and capacity."""
    import json

    server = fresh_apiserver()
    http = server.session()
    base = f"{server.url}/api/v1/namespaces/default/services"
    rv = http.get(base).json()["metadata"]["resourceVersion"]
    before = scrape(http, server.url)
    for name in ("a", "b"):
        assert http.post(base, json={"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}}).status_code == 201
    listed = http.get(base).json()
    with http.get(base, params={"watch": "true", "resourceVersion": rv, "timeoutSeconds": "1"}, stream=True) as response:
        lines = [line for line in response.iter_lines() if line]
    after = scrape(http, server.url)
    services = '{group="",resource="services"}'
    assert after["apiserver_watch_cache_events_received_total" + services] - before["apiserver_watch_cache_events_received_total" + services] == 2
    assert after["apiserver_watch_cache_events_dispatched_total" + services] - before["apiserver_watch_cache_events_dispatched_total" + services] == 2
    assert after["apiserver_watch_cache_initializations_total" + services] == 1
    assert after['apiserver_cache_list_total{group="",index="",resource="services"}'] - before['apiserver_cache_list_total{group="",index="",resource="services"}'] == 1
    assert after['apiserver_cache_list_returned_objects_total{group="",resource="services"}'] - before['apiserver_cache_list_returned_objects_total{group="",resource="services"}'] == 3
    assert after["apiserver_watch_cache_resource_version" + services] >= int(listed["metadata"]["resourceVersion"])
    assert after["watch_cache_capacity" + services] == 10000
    assert [json.loads(line)["type"] for line in lines] == ["ADDED", "ADDED"]
    watched = '{group="",kind="services",version="v1"}'
    assert after["apiserver_watch_events_total" + watched] == 2
    assert after["apiserver_watch_events_sizes_sum" + watched] == sum(len(line) + 1 for line in lines)  # each line with its newline
