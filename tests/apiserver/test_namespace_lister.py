"""NamespaceLifecycle's namespace reads for creates (admission/namespace_lifecycle.py's
NamespaceLister), in-process on the memory backend with a real watch cache: a namespace the
cache holds costs no storage read, a missing one is read live, and a namespace this apiserver
is deleting is read live for 30 s even while the cache (here frozen: its pump stopped) still
shows it Active, as upstream's forceLiveLookupCache."""

from __future__ import annotations

import asyncio

import pytest

from kubesvc.api.errors import StatusError
from kubesvc.apiserver.admission.namespace_lifecycle import FORCE_LIVE_LOOKUP_TTL, NamespaceLister
from kubesvc.apiserver.server import build_control_plane
from kubesvc.storage.memory import MemoryBackend
from kubesvc.util.clock import FakeClock
from tests.support.watchcache import start_cache, stop_cache

NAMESPACE_KEY = "/registry/namespaces/"


class Now:
    def __init__(self):
        self.value = 1000.0

    def __call__(self) -> float:
        return self.value


@pytest.fixture
async def setup():
    """(registry, namespace keys read from storage, the lister's clock)."""
    now = Now()
    backend = MemoryBackend()
    registry, _ = await build_control_plane(backend, FakeClock(), ["10.96.0.0/16"])
    registry.namespace_lister = NamespaceLister(now)
    # the lifecycle plugin in front of the Namespace strategy marks deletes on the lister it was
    # built with: point it at this one
    registry.store("", "namespaces").strategy._plugin.lister = registry.namespace_lister
    reads: list[str] = []
    get = backend.get

    async def counting_get(key, *args, **kwargs):
        if key.startswith(NAMESPACE_KEY):
            reads.append(key)
        return await get(key, *args, **kwargs)

    backend.get = counting_get
    return registry, reads, now


def svc(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}}


async def cached(registry):
    cache = await start_cache(registry.backend, [store.info for store in registry.stores.values()])
    registry.namespace_lister.use_cache(cache)
    return cache


async def until_cached(cache, registry, name: str) -> None:
    info = registry.store("", "namespaces").info
    for _ in range(200):
        if any(obj.key == info.key(None, name) for obj in cache.cacher(info).objects(info.key(None, name))):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"namespace {name} never reached the watch cache")


async def test_without_a_cache_every_create_reads_its_namespace(setup):
    registry, reads, _ = setup
    services = registry.store("", "services")
    for i in range(3):
        await services.create("default", svc(f"s{i}"), field_manager="t")
    assert reads == [f"{NAMESPACE_KEY}default"] * 3


async def test_a_cached_namespace_costs_no_read(setup):
    registry, reads, _ = setup
    cache = await cached(registry)
    try:
        await until_cached(cache, registry, "default")
        services = registry.store("", "services")
        for i in range(5):
            await services.create("default", svc(f"s{i}"), field_manager="t")
        assert reads == []
        assert len((await registry.backend.list("/registry/services/specs/default/")).kvs) == 5
    finally:
        await stop_cache(cache)


async def test_a_new_namespace_is_read_live_until_cached(setup):
    registry, reads, _ = setup
    cache = await cached(registry)
    await stop_cache(cache)  # frozen: a namespace created now never reaches it
    await registry.store("", "namespaces").create(None, {"metadata": {"name": "fresh"}}, field_manager="t")
    created = await registry.store("", "services").create("fresh", svc("web"), field_manager="t")
    assert created["metadata"]["namespace"] == "fresh"
    assert reads == [f"{NAMESPACE_KEY}fresh"]


async def test_a_missing_namespace_is_not_found(setup):
    registry, reads, _ = setup
    cache = await cached(registry)
    try:
        with pytest.raises(StatusError) as refused:
            await registry.store("", "services").create("nowhere", svc("web"), field_manager="t")
        assert refused.value.code == 404 and refused.value.message == 'namespaces "nowhere" not found'
        assert reads == [f"{NAMESPACE_KEY}nowhere"]
    finally:
        await stop_cache(cache)


async def test_deleting_a_namespace_forces_live_reads_for_30_seconds(setup):
    registry, reads, now = setup
    namespaces, services = registry.store("", "namespaces"), registry.store("", "services")
    await namespaces.create(None, {"metadata": {"name": "going"}}, field_manager="t")
    cache = await cached(registry)
    await until_cached(cache, registry, "going")
    await stop_cache(cache)  # frozen with "going" Active
    await services.create("going", svc("before"), field_manager="t")
    assert reads == []
    marked, _ = await namespaces.delete(None, "going", {})
    assert marked["status"]["phase"] == "Terminating"
    reads.clear()  # the delete's own read
    now.value += FORCE_LIVE_LOOKUP_TTL  # still forced at the TTL's end
    with pytest.raises(StatusError) as refused:
        await services.create("going", svc("after"), field_manager="t")
    assert refused.value.code == 403
    assert refused.value.message == ('services "after" is forbidden: unable to create new content in namespace going '
                                     "because it is being terminated")
    assert reads == [f"{NAMESPACE_KEY}going"]
    # past the TTL the (here stale) cache is trusted again, as upstream's lister is
    now.value += 0.001
    await services.create("going", svc("stale"), field_manager="t")
    assert reads == [f"{NAMESPACE_KEY}going"]


async def test_a_terminating_namespace_in_the_cache_is_refused_without_a_read(setup):
    registry, reads, _ = setup
    namespaces, services = registry.store("", "namespaces"), registry.store("", "services")
    await namespaces.create(None, {"metadata": {"name": "going"}}, field_manager="t")
    cache = await cached(registry)
    try:
        await namespaces.delete(None, "going", {})
        reads.clear()  # the delete's own read
        info = namespaces.info
        for _ in range(200):
            found = [o for o in cache.cacher(info).objects(info.key(None, "going")) if o.key == info.key(None, "going")]
            if found and b'"Terminating"' in found[0].raw:
                break
            await asyncio.sleep(0.01)
        for name in ("a", "b"):
            with pytest.raises(StatusError) as refused:
                await services.create("going", svc(name), field_manager="t")
            assert refused.value.code == 403
        assert reads == []
    finally:
        await stop_cache(cache)


def test_the_live_lookup_list_keeps_the_last_100_names():
    now = Now()
    lister = NamespaceLister(now)
    for i in range(101):
        lister.force_live_lookup(f"ns{i}")
    assert not lister._forced("ns0") and lister._forced("ns1") and lister._forced("ns100")
