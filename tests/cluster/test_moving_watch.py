"""A watch moved between apiservers while writes go on sees every change once and in order
(DESIGN.md's watch invariant, issue 18's "a client switching apiservers continues its watch from
its resourceVersion with no gap"), on the real components without the three machines: one etcd
(Debian's etcd-server), three ``kubesvc apiserver`` processes on it, the official Python client.

The watch (``tests/cluster/load.py``'s MovingWatch) hops to the next apiserver after every
one-second stream, from the last resourceVersion it read, while three writers create and patch
Services through all three; one apiserver is then killed (``kill -9``) and the watch and the
writers move on without it.

It also pins down the one failure of the three-machine test (``[274, 268, 270, ...]``): the
watch started from the resourceVersion of ``kubectl get -o json``, which is kubectl's own List
with ``resourceVersion: ""``. Without a revision a watch begins with the current objects as
ADDED events in key order, and Services written meanwhile (w0-0 through the slowest apiserver
last) came as 274, 268, 270. That is the API's behaviour (upstream's too), not a fault of the
server: the test's start was no revision, and MovingWatch now refuses one.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client as k8s
from kubernetes import config
from kubernetes.watch.watch import iter_resp_lines

from tests.cluster import load
from tests.support.apiserver import start_apiserver
from tests.support.etcd import running_etcd
from tests.support.slowdown import scaled

PRESENT = ("w3-pre", "w1-pre", "w2-pre", "w0-pre")  # written in this order: revisions not in key order


def api_client(server) -> k8s.ApiClient:
    configuration = k8s.Configuration()
    config.load_kube_config(config_file=str(server.kubeconfig), client_configuration=configuration)
    configuration.retries = False  # a dead apiserver is one failed request, not three
    return k8s.ApiClient(configuration)


def wait_until(predicate, timeout: float, what: str, describe=lambda: "") -> None:
    deadline = time.monotonic() + scaled(timeout)
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{describe()}")
        time.sleep(0.2)


@contextlib.contextmanager
def apiservers_on_one_etcd(tmp_path, count: int):
    """``count`` apiservers on a fresh etcd (started together: each start is seconds), with the
    load namespace and the PRESENT Services written through the first."""
    with running_etcd() as etcd, contextlib.ExitStack() as stack, ThreadPoolExecutor(count) as pool:
        starting = [pool.submit(start_apiserver, tmp_path / f"api{i + 1}", *etcd.flags()) for i in range(count)]
        for future in starting:  # every one that started is stopped at the end, also when another did not start
            if future.exception() is None:
                stack.callback(future.result().stop)
        servers = [future.result() for future in starting]  # the first failure to start, if any
        core = k8s.CoreV1Api(api_client(servers[0]))
        core.create_namespace({"metadata": {"name": load.NAMESPACE}})
        for name in PRESENT:
            core.create_namespaced_service(load.NAMESPACE, {"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}})
        yield servers


@pytest.fixture(scope="module")
def apiservers(tmp_path_factory):
    """Three apiservers on one etcd for the module (the second test kills the third; the first
    reads through the first only)."""
    with apiservers_on_one_etcd(tmp_path_factory.mktemp("moving-watch"), 3) as servers:
        yield servers


def test_a_watch_without_a_revision_begins_with_the_objects_in_key_order_and_movingwatch_refuses_that_start(apiservers):
    first = apiservers[0]
    api = api_client(first)
    created = {name: int(k8s.CoreV1Api(api).read_namespaced_service(name, load.NAMESPACE).metadata.resource_version)
               for name in PRESENT}
    response = k8s.CoreV1Api(api).list_namespaced_service(load.NAMESPACE, watch=True, resource_version="", timeout_seconds=1,
                                                          _preload_content=False)
    events = [json.loads(line) for line in iter_resp_lines(response) if line.strip()]
    events = [e for e in events if e["object"]["metadata"].get("name") in PRESENT]  # the other test may have written more
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", name) for name in sorted(PRESENT)]
    revisions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert revisions == [created[name] for name in sorted(PRESENT)] and revisions != sorted(revisions)

    # the three-machine test's former start: kubectl -o json's List carries no revision
    listed = json.loads(first.kubectl("get", "svc", "-n", load.NAMESPACE, "-o", "json").stdout)
    assert listed["kind"] == "List" and listed["metadata"]["resourceVersion"] == ""
    for no_revision in ("", "0"):
        with pytest.raises(ValueError, match="needs one"):
            load.MovingWatch([("api1", api)], no_revision, threading.Event())


@pytest.mark.timeout(240)
def test_a_watch_moved_between_apiservers_under_writes_sees_every_change_once_and_in_order(apiservers):
    apis = [(f"api{i + 1}", api_client(server)) for i, server in enumerate(apiservers)]
    start_rv = k8s.CoreV1Api(apis[0][1]).list_namespaced_service(load.NAMESPACE).metadata.resource_version
    stop_writing, stop_watching = threading.Event(), threading.Event()
    writers = [load.Writer(i, apis[i:] + apis[:i], stop_writing, pause=0.02) for i in range(3)]
    watch = load.MovingWatch(apis[2:] + apis[:2], start_rv, stop_watching, hop=True, timeout_seconds=1)
    with ThreadPoolExecutor(len(writers) + 1) as pool:
        watching = pool.submit(watch.run)
        writing = [pool.submit(writer.run) for writer in writers]
        try:
            wait_until(lambda: len(watch.streams) >= 9 and sum(len(w.acked.service_writes) for w in writers) >= 30, 90,
                       "30 Service writes and 9 streams", watch.describe)
            assert not any(w.error for w in writers), [w.error for w in writers]
            apiservers[2].process.kill()  # kill -9: its streams and requests fail, watch and writers move on
            apiservers[2].process.wait()
            streams_at_kill = len(watch.streams)
            written_at_kill = sum(len(w.acked.service_writes) for w in writers)
            wait_until(lambda: len(watch.streams) >= streams_at_kill + 6
                       and sum(len(w.acked.service_writes) for w in writers) >= written_at_kill + 20, 90,
                       "20 more Service writes and 6 more streams after the kill", watch.describe)
        finally:
            stop_writing.set()
            for future in writing:
                future.result(timeout=scaled(60))
        assert not any(w.error for w in writers), [w.error for w in writers]
        acked = set().union(*(w.acked.service_writes for w in writers))
        try:
            wait_until(lambda: acked <= {(name, rv) for _, name, rv in watch.events}, 30,
                       "the watch to deliver every acknowledged Service write",
                       lambda: f"missing {sorted(acked - {(n, rv) for _, n, rv in watch.events})}\n{watch.describe()}")
        finally:
            stop_watching.set()
            watching.result(timeout=scaled(30))
    assert watch.error is None, f"{watch.error!r}\n{watch.describe()}"
    assert {"api1", "api2", "api3"} <= set(watch.served_by), watch.describe()
    served_after_kill = {stream.server for stream in watch.streams[streams_at_kill:] if stream.end == "ended"}
    assert served_after_kill == {"api1", "api2"}, watch.describe()  # the dead one's attempts failed, the others served
    revisions = [int(rv) for _, _, rv in watch.events]
    assert revisions == sorted(set(revisions)), f"the watch delivered an event twice or out of order:\n{watch.describe()}"
    assert all(int(rv) > int(start_rv) for rv in revisions)
    assert not {name for _, name, _ in watch.events} & set(PRESENT)  # written before the start: not events
