"""bench/e2e.py's reading of the proxy's metrics: one finished sync per change of the
last-sync timestamp, its length from the duration histogram's sum/count deltas, and the upper
bound of a histogram bucket as a quantile. Expected values written out by hand."""

import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("bench_e2e", Path(__file__).resolve().parent.parent / "bench" / "e2e.py")
e2e = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(e2e)


def metrics(stamp: float, count: int, total: float) -> str:
    return (f'kubeproxy_sync_proxy_rules_last_timestamp_seconds{{ip_family="IPv4"}} {stamp}\n'
            f'kubeproxy_sync_proxy_rules_duration_seconds_sum{{ip_family="IPv4"}} {total}\n'
            f'kubeproxy_sync_proxy_rules_duration_seconds_count{{ip_family="IPv4"}} {count}\n'
            f'kubeproxy_sync_proxy_rules_duration_seconds_count{{ip_family="IPv6"}} 99\n')


def test_each_new_sync_timestamp_is_one_sync_with_its_length():
    scraper = e2e.SyncScraper(0.25)
    scraper._wall_offset = 1000.0  # wall clock = monotonic + 1000
    scraper.record(metrics(1100.0, 3, 0.5))  # the first scrape only sets the baseline
    scraper.record(metrics(1100.0, 3, 0.5))  # nothing new
    scraper.record(metrics(1102.0, 4, 0.75))  # one sync of 0.25 s, ended at wall 1102
    assert scraper.syncs == [(pytest.approx(101.75), pytest.approx(102.0))]
    scraper.record(metrics(1105.0, 6, 1.05))  # two syncs between scrapes: the last one's end, their mean length
    assert scraper.syncs[-1] == (pytest.approx(104.85), pytest.approx(105.0))
    assert scraper.merged == 1


def test_bucket_quantile_is_the_upper_bound_of_the_bucket_holding_it():
    buckets = [(0.25, 0.0), (0.5, 10.0), (1.0, 90.0), (2.0, 100.0)]
    assert e2e.bucket_quantile(buckets, 0.5) == 1.0
    assert e2e.bucket_quantile(buckets, 0.99) == 2.0
    assert e2e.bucket_quantile(buckets, 0.1) == 0.5
    assert e2e.bucket_quantile([(1.0, 0.0)], 0.5) is None


def test_percentile_picks_the_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert e2e.percentile(values, 0.5) == 51.0  # index round(0.5 * 99) = 50 (round half to even)
    assert e2e.percentile(values, 0.99) == 99.0


def test_apiserver_requests_by_kind_with_their_mean_server_time():
    def text(puts: int, put_seconds: float) -> str:
        return (f'apiserver_request_total{{code="200",group="discovery.k8s.io",resource="endpointslices",subresource="",verb="PUT",version="v1"}} {puts}\n'
                f'apiserver_request_total{{code="409",group="discovery.k8s.io",resource="endpointslices",subresource="",verb="PUT",version="v1"}} 1.0\n'
                f'apiserver_request_duration_seconds_sum{{group="discovery.k8s.io",resource="endpointslices",subresource="",verb="PUT",version="v1"}} {put_seconds}\n'
                'apiserver_request_total{code="200",group="",resource="pods",subresource="status",verb="PATCH",version="v1"} 7.0\n'
                'apiserver_request_duration_seconds_sum{group="",resource="pods",subresource="status",verb="PATCH",version="v1"} 0.7\n'
                'apiserver_request_total{code="200",group="",resource="pods",subresource="",verb="WATCH",version="v1"} 3.0\n')

    before = e2e.api_requests(text(10, 1.0))
    assert before["PUT endpointslices"] == [11.0, 1.0] and before["PATCH pods/status"] == [7.0, 0.7]
    after = e2e.api_requests(text(30, 3.0))  # 20 more PUTs taking 2 s: 100 ms each; no PATCH; watches left out
    assert e2e.api_report(before, after) == "PUT endpointslices 20 (100 ms)"


def test_bind_gaps_are_the_pauses_between_consecutive_binds_longest_first():
    assert e2e.bind_gaps([10.0, 10.1, 10.15, 10.65, 10.7]) == pytest.approx([0.5, 0.1, 0.05, 0.05])
    assert e2e.bind_gaps([3.0]) == []


def test_components_cpu_splits_each_components_main_thread_out(monkeypatch):
    """The event loop's share: the main thread's CPU from /proc/<pid>/task/<pid>/stat, beside
    the whole process's; a thread burning 0.2 s of CPU beside it counts in the process's only."""
    import os
    import threading
    import time

    pid = os.getpid()
    fields = lambda: open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: E731
    monkeypatch.setattr(e2e, "namespace_components", lambda: [(pid, "apiserver", fields())])
    before = e2e.components_cpu()

    def burn() -> None:  # 0.2 s of this thread's own CPU, however long the machine's load makes it take
        deadline = time.monotonic() + 30
        while time.thread_time() < 0.2 and time.monotonic() < deadline:
            pass

    worker = threading.Thread(target=burn)
    worker.start()
    worker.join()
    after = e2e.components_cpu()
    assert set(after) == {"apiserver", "apiserver (event loop)"}
    process = after["apiserver"] - before["apiserver"]
    loop = after["apiserver (event loop)"] - before["apiserver (event loop)"]
    assert process >= 0.18  # the thread's 0.2 s (clock ticks of 10 ms)
    assert loop < process / 2  # the main thread only waited for it


def test_components_waited_is_the_event_loops_time_ready_but_without_a_cpu(monkeypatch):
    """The run-queue delay of a component's main thread: a process at nice 10 sharing one CPU
    with a busy one at nice 0 gets about a tenth of it, so for 30 ms of its own CPU it waits
    several times as long; the CPU it ran is not counted as waiting."""
    import subprocess
    import sys

    pin = "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
    hog = subprocess.Popen([sys.executable, "-c", pin + "print('on', flush=True)\nwhile True: pass"], stdout=subprocess.PIPE, text=True)
    child = subprocess.Popen([sys.executable, "-c", pin + "import sys, time; os.nice(10); print('ready', flush=True); sys.stdin.readline(); "
                              "t = time.thread_time()\nwhile time.thread_time() - t < 0.03: pass\nprint('done', flush=True); time.sleep(60)"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout.readline() == "on\n" and child.stdout.readline() == "ready\n"
        monkeypatch.setattr(e2e, "namespace_components", lambda: [(child.pid, "apiserver", [])])
        before = e2e.components_waited()
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline() == "done\n"
        after = e2e.components_waited()
    finally:
        hog.kill()
        child.kill()
        hog.wait()
        child.wait()
    assert set(after) == {"apiserver", "machine busy"}
    assert after["apiserver"] - before["apiserver"] >= 0.09  # three times its 30 ms of CPU, at least
    assert after["machine busy"] - before["machine busy"] >= 0.03


def test_the_slowest_pods_are_printed_hop_by_hop_with_the_controllers_backlog():
    """Pooled over rounds, slowest first, at most five; a hop the bench could not time is '-'."""
    rounds = [{"slowest": [("a", {"latency": 2.1, "agent": 0.3, "slice": 1.5, "ahead": 7, "writes": 12, "wait": 0.4, "sync": 0.15,
                                  "kernel": 0.01})]},
              {"slowest": [("b", {"latency": 3.0}), ("c", {"latency": 0.5})]}]
    assert e2e.slowest_report(rounds).splitlines() == [
        "the 3 slowest Pods, hop by hop (ms; backlog: Pods Ready before it and not yet in a slice / slice writes seen until its own):",
        "  agent -  slice -  wait -  sync -  kernel -  latency 3000",
        "  agent 300  slice 1500  wait 400  sync 150  kernel 10  latency 2100  backlog 7 / 12",
        "  agent -  slice -  wait -  sync -  kernel -  latency 500"]
