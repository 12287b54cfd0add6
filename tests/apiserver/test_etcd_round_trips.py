"""What a create costs etcd, counted by etcd itself (its ``grpc_server_handled_total`` metric on
the client port): a Service created in a namespace the apiserver's watch cache holds is one
``Txn`` and no ``Range`` (NamespaceLifecycle reads the namespace from the cache, as upstream's
plugin reads its informer), and its two events (the Service, its IPAddress) go to one etcd
watch, the watch cache's (``etcd_debugging_mvcc_events_total``): the allocators' index follows
the cache's events instead of watching IPAddresses in etcd itself."""

from __future__ import annotations

import re
import time

import requests

from tests.support.apiserver import running_apiserver
from tests.support.etcd import running_etcd

CREATES = 20


def handled(etcd, method: str, kind: str = "unary") -> int:
    """etcd's count of ``method`` calls handled (every gRPC code), or of streams opened."""
    text = requests.get(f"{etcd.client_url}/metrics", timeout=10).text
    pattern = rf'^grpc_server_handled_total\{{[^}}]*grpc_method="{method}"[^}}]*grpc_type="{kind}"[^}}]*\}} (\S+)$'
    return int(sum(float(value) for value in re.findall(pattern, text, re.M)))


def events_sent(etcd) -> int:
    """etcd's count of events sent to watchers (each event once per watcher it goes to)."""
    text = requests.get(f"{etcd.client_url}/metrics", timeout=10).text
    return int(float(re.search(r"^etcd_debugging_mvcc_events_total (\S+)$", text, re.M).group(1)))


def test_a_create_is_one_txn_and_the_apiserver_one_watch(tmp_path):
    with running_etcd() as etcd, running_apiserver(tmp_path / "data", *etcd.flags()) as server:
        session = server.session()
        url = f"{server.url}/api/v1/namespaces/default/services"
        body = {"metadata": {"name": "first"}, "spec": {"ports": [{"port": 80}]}}
        assert session.post(url, json=body, timeout=30).status_code == 201
        time.sleep(0.5)  # the watch cache has the default namespace long since; let the first create settle
        ranges, txns, events = handled(etcd, "Range"), handled(etcd, "Txn"), events_sent(etcd)
        for i in range(CREATES):
            body = {"metadata": {"name": f"s{i}"}, "spec": {"ports": [{"port": 80}]}}
            assert session.post(url, json=body, timeout=30).status_code == 201
        txns_made, ranges_made = handled(etcd, "Txn") - txns, handled(etcd, "Range") - ranges
        events_made = events_sent(etcd) - events
        # background loops (leases, repair, system objects) write or read now and then, never once per create
        assert CREATES <= txns_made < CREATES + 5, txns_made
        assert ranges_made < CREATES // 2, ranges_made  # was one namespace read per create
        # a ClusterIP Service's Txn writes the Service and its IPAddress: two events, each sent
        # to the one watch that sees them (the watch cache's)
        assert CREATES * 2 <= events_made < CREATES * 2 + 5, events_made
