"""Two apiservers over one store (two Registries on one memory backend): what each allocator's
index sees of the other's writes, and that both repair loops together never undo a good
allocation (issue 18: "allocation repair safe to run in every apiserver")."""

from __future__ import annotations

import asyncio
import json

import pytest

from kubesvc.api.errors import StatusError
from kubesvc.apiserver.allocator import records
from kubesvc.apiserver.allocator.follow import AllocationFeed
from kubesvc.apiserver.allocator.repair import Repair
from kubesvc.apiserver.registry.store import ListOptions
from kubesvc.apiserver.server import build_control_plane
from kubesvc.storage.memory import MemoryBackend
from kubesvc.util.clock import FakeClock
from tests.support.watchcache import start_cache, stop_cache

CIDR = "10.96.0.0/29"  # 6 allocatable IPs, all dynamic
FULL = "Internal error occurred: failed to allocate a serviceIP: range is full"


class Apiserver:
    def __init__(self, registry, allocators, feed: AllocationFeed | None):
        self.registry, self.allocators, self.feed = registry, allocators, feed
        self.services = registry.store("", "services")
        self.repair = Repair(registry, allocators, registry.clock, leak_grace_seconds=0)

    async def create(self, name: str, **spec) -> dict:
        body = {"metadata": {"name": name}, "spec": {"ports": [{"port": 80}], **spec}}
        return await self.services.create("default", body, field_manager="test")

    def taken(self) -> set[str]:
        return set(self.allocators.families["IPv4"].taken)


@pytest.fixture(params=["storage-watches", "watch-cache"])
async def pair(request):
    """Two apiservers on one store, the second with its index following the store: through
    storage watches of its own, or through its watch cache's events (the apiserver's default)."""
    backend, clock = MemoryBackend(), FakeClock()
    first = Apiserver(*await build_control_plane(backend, clock, [CIDR], "30000-30009"), None)
    since = await backend.current_revision()
    registry, allocators = await build_control_plane(backend, clock, [CIDR], "30000-30009")
    feed = AllocationFeed(allocators, backend)
    feed.since(since)
    second = Apiserver(registry, allocators, feed)
    cache = None
    if request.param == "watch-cache":
        cache = await start_cache(backend, [store.info for store in registry.stores.values()])
        tasks = feed.follow_cache(cache)
    else:
        tasks = feed.start()
    yield first, second
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if cache is not None:
        await stop_cache(cache)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_the_following_index_sees_the_other_apiservers_allocations_and_releases(pair):
    first, second = pair
    kubernetes_ip = "10.96.0.1"  # the default ServiceCIDR's first IP is reserved for nothing here
    a = await first.create("a", type="NodePort")
    await settle()
    ip, port = a["spec"]["clusterIP"], a["spec"]["ports"][0]["nodePort"]
    assert ip in second.taken() and second.allocators.ports.has(port)
    await first.services.delete("default", "a", {})
    await settle()
    assert ip not in second.taken() and not second.allocators.ports.has(port)
    assert kubernetes_ip not in second.taken()


async def test_without_following_an_index_says_full_for_ips_the_other_freed(pair):
    """The first apiserver does not follow the store: it learns of the second's allocations
    by colliding with them, and of its releases only at its repair pass. The second follows
    and sees both at once."""
    first, second = pair
    theirs = [await second.create(f"b{i}") for i in range(3)]
    ours = [await first.create(f"a{i}") for i in range(3)]  # collides with the second's IPs, retries
    assert len({o["spec"]["clusterIP"] for o in theirs + ours}) == 6
    with pytest.raises(StatusError) as full:
        await second.create("late")
    assert full.value.message == FULL  # the following index knows the first's three at once

    await first.services.delete("default", "a0", {})
    await settle()
    assert (await second.create("late"))["spec"]["clusterIP"] == ours[0]["spec"]["clusterIP"]

    await second.services.delete("default", "b0", {})  # the first may hold b0's IP as taken
    await first.repair.run_once()  # until its repair pass reloads an index that differs from the store
    stored = {records.ip_of_key(kv.key) for kv in (await first.registry.backend.list(records.IP_ADDRESS_PREFIX)).kvs}
    assert first.taken() == stored == second.taken()


async def test_racing_creates_through_both_apiservers_never_share_an_ip(pair):
    first, second = pair
    created = await asyncio.gather(*(server.create(f"{name}{i}") for i in range(3) for name, server in
                                     (("a", first), ("b", second))), return_exceptions=True)
    ips = [obj["spec"]["clusterIP"] for obj in created if isinstance(obj, dict)]
    assert len(ips) == 6 and len(set(ips)) == 6
    stored = {records.ip_of_key(kv.key) for kv in (await first.registry.backend.list(records.IP_ADDRESS_PREFIX)).kvs}
    assert set(ips) <= stored


async def test_both_repair_loops_together_keep_every_allocation_and_fix_a_leak_once(pair):
    first, second = pair
    for i in range(2):
        await first.create(f"a{i}")
        await second.create(f"b{i}")
    backend = first.registry.backend
    held_ips = {records.ip_of_key(kv.key) for kv in (await backend.list(records.IP_ADDRESS_PREFIX)).kvs}
    leaked = next(f"10.96.0.{i}" for i in range(1, 7) if f"10.96.0.{i}" not in held_ips)
    orphan = records.ip_address_object(leaked, "default", "gone")
    await first.registry.store("networking.k8s.io", "ipaddresses").create(None, orphan, field_manager="test")
    first.registry.clock.advance(1)  # past the (zero) grace period
    # both passes read the store before either acts: the second acts on a stale finding
    plans = [await server.repair._snapshot_and_plan() for server in (first, second)]
    reports = [await server.repair.apply(*plan) for server, plan in zip((first, second), plans)]
    leaks = sum(report.ip_errors.get("leak", 0) for report in reports)
    skipped = sum(report.skipped for report in reports)
    assert (leaks, leaks + skipped) == (1, 2)  # one deletes the leak, the other finds it gone
    items, _ = await first.services.list("default", ListOptions())
    held = {svc["spec"]["clusterIP"] for svc in items}
    stored = {records.ip_of_key(kv.key) for kv in (await backend.list(records.IP_ADDRESS_PREFIX)).kvs}
    assert held == stored == held_ips and len(held) == 4
    assert all(report.port_errors == {} for report in reports)
    for _ in range(2):
        for server in (first, second):
            assert (await server.repair.run_once()).clean


async def test_a_following_index_is_reloaded_only_when_a_difference_outlives_a_pass(pair, monkeypatch):
    """With the index following the store, a difference at a repair pass is usually a write
    the watch has not delivered yet; only one still there at the next pass (a broken feed)
    reloads the whole index."""
    first, second = pair
    repair = Repair(second.registry, second.allocators, second.registry.clock, index_follows_store=True)
    loads = []
    real_load = second.allocators.load

    async def counting_load() -> None:
        loads.append(1)
        await real_load()

    monkeypatch.setattr(second.allocators, "load", counting_load)
    backend = second.registry.backend
    lagging = records.ip_address_object("10.96.0.5", "default", "elsewhere")
    await backend.create(records.ip_address_key("10.96.0.5"), json.dumps(lagging).encode())  # not delivered yet
    assert await repair.reload_index() is False and loads == []
    await settle()  # the watch delivers it
    assert "10.96.0.5" in second.taken()
    assert await repair.reload_index() is False and loads == []

    second.allocators.mark_ip("10.96.0.4", True)  # the index drifts (a feed that missed a delete)
    assert await repair.reload_index() is False and loads == []  # first seen: maybe in flight
    assert await repair.reload_index() is True and loads == [1]  # still there: reloaded
    assert "10.96.0.4" not in second.taken() and "10.96.0.5" in second.taken()


async def test_a_servicecidr_write_is_not_failed_by_a_store_away_after_its_commit(pair, caplog):
    """The ServiceCIDR commit hook re-reads the ranges from the store after the write has
    committed; a store that is away just then (etcd unreachable) is one warning line, the
    write's request succeeds, and the allocation feed's watch applies the new range."""
    from kubesvc.storage.base import StorageError

    _, second = pair
    backend = second.registry.backend
    list_ = backend.list
    refusals = [1]

    async def away_once(prefix: str, **options):
        if prefix == "/registry/servicecidrs/" and refusals:
            refusals.pop()
            raise StorageError("etcd (https://10.0.0.1:2379): request to etcd timed out")
        return await list_(prefix, **options)

    backend.list = away_once
    cidrs = second.registry.store("networking.k8s.io", "servicecidrs")
    created = await cidrs.create(None, {"metadata": {"name": "extra"}, "spec": {"cidrs": ["10.97.0.0/29"]}}, field_manager="test")
    assert created["metadata"]["name"] == "extra" and not refusals
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "request to etcd timed out" in warnings[0], warnings
    for _ in range(50):  # the feed's watch brings the range
        await settle()
        if any(r.name == "extra" for r in second.allocators.families["IPv4"].ranges):
            break
    svc = await second.create("in-extra", clusterIP="10.97.0.2")
    assert svc["spec"]["clusterIP"] == "10.97.0.2"


async def test_a_watch_cache_loaded_past_the_index_has_the_index_reread(caplog):
    """The cache loads a state (not events) up to its start revision; an index that follows it
    from an older revision missed what happened in between and reads the store again."""
    backend, clock = MemoryBackend(), FakeClock()
    first = Apiserver(*await build_control_plane(backend, clock, [CIDR], "30000-30009"), None)
    since = await backend.current_revision()
    registry, allocators = await build_control_plane(backend, clock, [CIDR], "30000-30009")
    second = Apiserver(registry, allocators, None)
    ips = [(await first.create(f"a{i}"))["spec"]["clusterIP"] for i in range(2)]
    assert not set(ips) & second.taken()
    feed = AllocationFeed(allocators, backend)
    feed.since(since)
    # a ring of one event: the cache starts one revision before the current one, past the IPs' records
    cache = await start_cache(backend, [store.info for store in registry.stores.values()], capacity=1)
    assert cache.revision > since
    tasks = feed.follow_cache(cache)
    try:
        for _ in range(100):
            if set(ips) <= second.taken():
                break
            await asyncio.sleep(0.01)
        assert set(ips) <= second.taken()
        third = (await first.create("a2"))["spec"]["clusterIP"]  # and it follows on from there
        for _ in range(100):
            if third in second.taken():
                break
            await asyncio.sleep(0.01)
        assert third in second.taken()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await stop_cache(cache)
