"""bench/scheduler.py --backlog's summary: the median and p99 over rounds of each round's
figures, each Pod's uncordon -> bound pooled over every round, and the peak RSS, printed beside
each other (a review finding: medians alone). Expected values written out by hand."""

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))  # bench/scheduler.py imports bench/upns.py
SPEC = importlib.util.spec_from_file_location("bench_scheduler", BENCH / "scheduler.py")
scheduler = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(scheduler)


def a_round(binds: float, all_bound: float, to_bound: list[float], api_ms: float, cm_ms: float) -> dict:
    return {"binds_per_second": binds, "all_bound": all_bound, "to_bound": to_bound,
            "cpu_ms": {"apiserver": api_ms, "controller-manager": cm_ms},
            "cpu_events_ms": {"apiserver": api_ms * 2, "controller-manager": cm_ms * 2}}


def test_backlog_summary_prints_p99_and_peak_memory_beside_the_medians():
    rounds = [a_round(400, 0.8, [0.1, 0.5, 0.8], 1.5, 1.0), a_round(300, 1.1, [0.2, 0.6, 1.1], 2.0, 1.2),
              a_round(100, 3.0, [0.3, 1.0, 3.0], 4.0, 2.0)]
    text = scheduler.backlog_summary(3, rounds, {"apiserver": 150.4, "controller-manager": 98.6})
    assert "binds/s median 300, p99 400" in text
    assert "uncordon -> all bound median 1.10 s, p99 3.00 s" in text
    assert "over all 9 Pods: p50 0.60 s, p99 3.00 s" in text
    assert "CPU per bind, apiserver: binds alone median 2.00 ms, p99 4.00 ms; with the Scheduled Events median 4.00 ms, p99 8.00 ms" in text
    assert "CPU per bind, controller-manager: binds alone median 1.20 ms, p99 2.00 ms" in text
    assert "peak RSS (VmHWM): apiserver 150 MiB, controller-manager 99 MiB" in text
