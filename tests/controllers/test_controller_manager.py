"""``kubesvc controller-manager`` as a process: killed mid-reconcile and restarted, two of them
under leader election, its HTTPS metrics; and a rolling replacement of 1000 Pods, counting
slice writes."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import ssl
import urllib.request

import pytest

from kubesvc.client.rest import LEASES, PODS
from kubesvc.controllers.endpointslice import controller as endpointslice_controller_module
from kubesvc.controllers.endpointslice.reconciler import reconcile
from tests.controllers.test_endpointslice_api import by_pod, endpoint_counts, endpointslice_controller, slices_of
from tests.support.apiserver import free_ports, start_controller_manager
from tests.support.cluster import api_client, create_pods, create_service, ensure_node, eventually, new_namespace, pod_ip


def scrape(port: int) -> str:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context, timeout=10) as response:
        return response.read().decode()


def _serving(port: int) -> bool:
    with contextlib.suppress(OSError):
        return bool(scrape(port))
    return False


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not exposed")


async def test_killed_mid_reconcile_restart_converges_without_duplicates(fresh_apiserver, tmp_path):
    server = fresh_apiserver()
    flags = ("--leader-elect=false", "--secure-port=0", "--max-endpoints-per-slice=5", "--controllers=endpointslice-controller")
    async with api_client(server) as client:
        await ensure_node(client, "node-a")
        ns = await new_namespace(client)
        await create_pods(client, ns, 400, {"app": "web"})
        await create_service(client, ns, "web", {"app": "web"})
        first = start_controller_manager(server, tmp_path / "cm1.log", *flags)
        try:
            # 80 slices to create one after the other: kill it part-way
            await eventually(lambda: _at_least(client, ns, 10), 60, "some slices written")
        finally:
            first.stop(signal.SIGKILL)
        partial = await slices_of(client, ns, "web")
        assert 0 < len(partial) < 80, f"the kill was not mid-reconcile ({len(partial)} slices)"

        second = start_controller_manager(server, tmp_path / "cm2.log", *flags)
        try:
            async def converged():
                slices = await slices_of(client, ns, "web")
                return slices if sum(len(s.get("endpoints") or []) for s in slices) == 400 else None

            slices = await eventually(converged, 90, "all 400 endpoints")
            await asyncio.sleep(2)  # and it stays that way: nothing left to write
            slices = await slices_of(client, ns, "web")
        finally:
            assert second.stop() == 0, second.log()[-2000:]
        addresses = [a for s in slices for ep in s["endpoints"] for a in ep["addresses"]]
        assert len(addresses) == len(set(addresses)) == 400
        assert sorted(addresses) == sorted(pod_ip(i) for i in range(400))
        assert endpoint_counts(slices) == [5] * 80


async def _at_least(client, ns, count) -> bool:
    return len(await slices_of(client, ns, "web")) >= count


async def test_two_managers_one_leader_and_takeover(fresh_apiserver, tmp_path):
    server = fresh_apiserver()
    ports = free_ports(2)
    flags = ("--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=500ms",
             "--controllers=endpointslice-controller,garbage-collector-controller")
    managers = [start_controller_manager(server, tmp_path / f"cm{i}.log", f"--secure-port={ports[i]}", "--bind-address=127.0.0.1", *flags)
                for i in range(2)]
    try:
        async with api_client(server) as client:
            await ensure_node(client, "node-a")
            for port in ports:  # both are up (serving before, and whether or not, they lead)
                await eventually(lambda: _serving(port), 30, f"/metrics on {port}")

            async def holder():
                with contextlib.suppress(Exception):
                    lease = await client.resource(LEASES).get("kube-controller-manager", "kube-system")
                    return lease["spec"].get("holderIdentity")

            leader_identity = await eventually(holder, 30, "a leader")
            ns = await new_namespace(client)
            await create_pods(client, ns, 3, {"app": "web"})
            await create_service(client, ns, "web", {"app": "web"})
            # Under heavy load a leader may fail to renew within its renew deadline (2 s here): it
            # stops and exits ("leaderelection lost"), and the other takes over once the lease
            # expires (at once if the loser released it), so both may have led by now, one after
            # the other. One that exited is started again, as a supervisor does. What must never
            # happen is two leading at once: every leadership but the last ended before the next began.
            runs = [(i, m) for i, m in enumerate(managers)]  # every process that ran in each of the two places

            def restart_exited() -> None:
                for i, m in enumerate(managers):
                    if m.process.poll() is not None:
                        managers[i] = start_controller_manager(server, tmp_path / f"cm{i}-{len(runs)}.log", f"--secure-port={ports[i]}",
                                                               "--bind-address=127.0.0.1", *flags)
                        runs.append((i, managers[i]))

            async def made_by_a_leader():
                restart_exited()
                return await _endpoints_at(client, ns, "web", 3)

            await eventually(made_by_a_leader, 60, "slices by the leader")

            async def settled():  # a leader now
                restart_exited()
                spans = sorted(((start, end, i, m) for i, m in runs for start, end in leadership_spans(m.log())), key=lambda span: span[0])
                return spans if spans and spans[-1][1] is None and spans[-1][3].process.poll() is None else None

            spans = await eventually(settled, 60, "a current leader")
            for (_, end, *_), (next_start, *_) in zip(spans, spans[1:]):
                assert end is not None and end < next_start, ("two leaders at once", [s[:3] for s in spans], [m.log()[-3000:] for _, m in runs])
            leader, follower = spans[-1][2], 1 - spans[-1][2]
            await eventually(lambda: _serving(ports[follower]), 30, f"/metrics on {ports[follower]}")

            async def leader_synced():  # a leader that took over syncs the Service once its caches are synced
                with contextlib.suppress(OSError, AssertionError):
                    text = scrape(ports[leader])
                    return text if metric(text, "endpoint_slice_controller_num_endpoint_slices") == 1 else None

            text = await eventually(leader_synced, 30, "the leader's sync")
            assert metric(text, "endpoint_slice_controller_syncs") >= 1
            assert metric(text, "endpoint_slice_controller_num_endpoint_slices") == 1
            assert metric(text, "endpoint_slice_controller_endpoints_desired") == 3
            assert metric(text, "endpoint_slice_controller_desired_endpoint_slices") == 1
            if len(spans) == 1:  # a later leader found the slice made (its changes count only its own writes)
                assert 'endpoint_slice_controller_changes{operation="create"}' in text
            assert "endpoint_slice_controller_endpoints_added_per_sync_bucket" in text
            assert "endpoint_slice_controller_endpoints_removed_per_sync_bucket" in text
            assert metric(scrape(ports[follower]), "endpoint_slice_controller_num_endpoint_slices") == 0
            # the Job controller's and PodGC's families are registered whether or not those controllers run
            for family in ("job_controller_job_sync_duration_seconds histogram", "job_controller_job_syncs_total counter",
                           "job_controller_jobs_finished_total counter", "job_controller_job_pods_finished_total counter",
                           "job_controller_pod_failures_handled_by_failure_policy_total counter",
                           "job_controller_terminated_pods_tracking_finalizer_total counter", "job_controller_job_pods_creation_total counter",
                           "pod_gc_collector_force_delete_pods_total counter", "pod_gc_collector_force_delete_pod_errors_total counter"):
                assert f"# TYPE {family}" in text, family

            leader_identity = await eventually(holder, 30, "the leader's identity")  # the holder now, after any change above
            managers[leader].stop(signal.SIGKILL)
            new_holder = await eventually(lambda: _holder_other_than(client, leader_identity), 30, "a new leader")
            assert new_holder != leader_identity
            await create_service(client, ns, "after", {"app": "web"})
            await eventually(lambda: _endpoints_at(client, ns, "after", 3), 30, "slices by the new leader")
            assert "starting controllers" in managers[follower].log()
    finally:
        for manager in managers:
            manager.stop()


LEADERSHIP_START = "successfully acquired lease"
LEADERSHIP_END = ("leaderelection lost", "released lease")


def leadership_spans(log: str) -> list[tuple[str, str | None]]:
    """The times (the log's own stamps, one host clock) at which a manager began and stopped
    leading; None for one that has not ended."""
    spans: list[tuple[str, str | None]] = []
    for line in log.splitlines():
        stamp = line[:23]  # "2026-01-01 12:00:00,000"
        if LEADERSHIP_START in line:
            spans.append((stamp, None))
        elif spans and spans[-1][1] is None and any(marker in line for marker in LEADERSHIP_END) and line[:4].isdigit():
            spans[-1] = (spans[-1][0], stamp)
    return spans


def test_leadership_spans_read_from_a_log():
    log = """2026-11-27 13:37:00,432 INFO kubesvc.leaderelection: successfully acquired lease kube-system/kube-controller-manager
2026-11-27 13:37:07,038 INFO kubesvc.controllers.gc: Starting controller garbagecollector
2026-11-27 13:37:09,501 ERROR kubesvc.leaderelection: failed to renew lease kube-system/kube-controller-manager within 2s; leaderelection lost
Error: leaderelection lost: host_1 failed to renew lease kube-system/kube-controller-manager within 2s
"""
    assert leadership_spans(log) == [("2026-11-27 13:37:00,432", "2026-11-27 13:37:09,501")]
    assert leadership_spans(log.splitlines()[0]) == [("2026-11-27 13:37:00,432", None)]


async def _endpoints_at(client, ns, service, count) -> bool:
    return sum(len(s.get("endpoints") or []) for s in await slices_of(client, ns, service)) == count


async def _holder_other_than(client, identity):
    lease = await client.resource(LEASES).get("kube-controller-manager", "kube-system")
    current = lease["spec"].get("holderIdentity")
    return current if current and current != identity else None


# ~60 s on a quiet machine (3,000 Pod writes, then upstream's algorithm replayed in 16 orders on
# every sync the controller made; the watch cache delivers events sooner, so the controller now
# makes ~75 syncs where it made ~40); twice that beside CI's other worker and the IPVS VM
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("total", "per_slice"), [
    # the same shape (ten full slices, waves of a tenth) at a third of the size keeps the suite
    # fast; upstream's default of 100 per slice and 1000 Pods runs with the slow tests
    (300, 30),
    pytest.param(1000, 100, marks=pytest.mark.slow),
], ids=["300-pods-30-per-slice", "1000-pods-100-per-slice"])
async def test_rolling_replacement_keeps_slices_packed(apiserver, capsys, monkeypatch, total, per_slice):
    """Replace every Pod in waves of a tenth (start a wave of new ones, then stop as many old).
    The Pod sets the controller synced are recorded; upstream's algorithm (the pure reconcile,
    table-tested against upstream's reconciler scenarios) replayed on exactly those syncs gives
    the slice count and writes the controller must not exceed: the shell (caches, retries,
    crashes of a write) adds no slices of its own."""
    wave = total // 10
    synced_pod_sets: list[list[dict]] = []

    def recording_reconcile(service, pods, slices, nodes, **kwargs):
        synced_pod_sets.append(list(pods))
        return reconcile(service, pods, slices, nodes, **kwargs)

    monkeypatch.setattr(endpointslice_controller_module, "reconcile", recording_reconcile)
    async with api_client(apiserver) as client:
        await ensure_node(client, "node-a")
        ns = await new_namespace(client)
        await create_pods(client, ns, total, {"app": "web"}, prefix="old")
        service = await create_service(client, ns, "web", {"app": "web"})
        async with endpointslice_controller(apiserver, max_endpoints_per_slice=per_slice) as manager:
            await eventually(lambda: _endpoints_at(client, ns, "web", total), 60, f"{total} endpoints")
            assert endpoint_counts(await slices_of(client, ns, "web")) == [per_slice] * 10
            await asyncio.sleep(1.5)
            changes = manager.endpointslice_metrics.changes
            before = sum(changes.labels(op)._value.get() for op in ("create", "update", "delete"))
            first_sync = len(synced_pod_sets)
            for start in range(0, total, wave):
                await create_pods(client, ns, wave, {"app": "web"}, prefix="new", start=total + start)
                await asyncio.gather(*(client.resource(PODS).delete(f"old-{i}", ns, grace_period_seconds=0) for i in range(start, start + wave)))

            async def only_new():
                eps = by_pod(await slices_of(client, ns, "web"))
                return len(eps) == total and all(name.startswith("new-") for name in eps)

            await eventually(only_new, 120, "only new Pods listed")
            await asyncio.sleep(1.5)
            slices = await slices_of(client, ns, "web")
            writes = int(sum(changes.labels(op)._value.get() for op in ("create", "update", "delete")) - before)

    # upstream iterates Go maps, so its slice and endpoint order (and so its tie-breaks) varies
    # from run to run: every order is upstream's algorithm; ours must not do worse than the worst
    pod_sets = synced_pod_sets[:first_sync][-1:] + synced_pod_sets[first_sync:]
    replays = [_replay(service, pod_sets, seed, per_slice) for seed in range(REPLAY_ORDERS)]
    replay_slices, replay_writes = max(r[0] for r in replays), max(r[1] for r in replays)
    with capsys.disabled():
        print(f"\nrolling replacement of {total} Pods in waves of {wave}: {len(slices)} slices {endpoint_counts(slices)}, "
              f"{writes} slice writes in {len(synced_pod_sets) - first_sync} syncs "
              f"(upstream's algorithm on the same syncs, {REPLAY_ORDERS} iteration orders: {sorted({r[0] for r in replays})} slices, "
              f"{sorted({r[1] for r in replays})} writes)")
    assert len(slices) <= replay_slices
    assert writes <= replay_writes
    addresses = [a for s in slices for ep in s["endpoints"] for a in ep["addresses"]]
    assert len(addresses) == len(set(addresses)) == total


# how many of upstream's iteration orders (Go map order is random) are replayed to find its
# worst case; 6 let a deterministic order of ours come out worse than every sample now and then
REPLAY_ORDERS = 16


def _replay(service: dict, pod_sets: list[list[dict]], seed: int, per_slice: int) -> tuple[int, int]:
    """Upstream's algorithm run on a sequence of Pod sets, starting from the slices the first
    set gives, with slices and Pods in a shuffled order each sync: the slice count it ends with
    and the writes after the first set."""
    shuffle = random.Random(seed).shuffle
    nodes = {"node-a": {"metadata": {"name": "node-a"}}}
    slices: dict[str, dict] = {}
    writes = 0
    for step, pods in enumerate(pod_sets):
        existing, pods = list(slices.values()), list(pods)
        shuffle(existing)
        shuffle(pods)
        plan = reconcile(service, pods, existing, nodes, max_endpoints_per_slice=per_slice)
        if step:
            writes += plan.writes
        for created in plan.creates:
            created["metadata"]["name"] = f"replayed-{step}-{len(slices)}-{id(created)}"
            slices[created["metadata"]["name"]] = created
        for updated in plan.updates:
            slices[updated["metadata"]["name"]] = updated
        for deleted in plan.deletes:
            slices.pop(deleted["metadata"]["name"], None)
    return len(slices), writes
