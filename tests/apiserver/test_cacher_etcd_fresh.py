"""Consistent lists from the watch cache on a real etcd (Debian's 3.4.23, no reliable progress
notifications): kubesvc's etcd backend declares ``watch_sees_every_revision`` (every revision is
a write under ``--etcd-prefix``), so a list with resourceVersion="" waits for the cache's own
events to reach etcd's current revision and is served from memory; a revision made outside the
prefix sends it to etcd after the freshness wait, still right."""

from __future__ import annotations

import asyncio
import time

from kubesvc.apiserver import cacher
from kubesvc.apiserver.registry.store import ListOptions
from kubesvc.storage.etcd import EtcdBackend, EtcdConfig
from tests.apiserver.test_cacher_consistency import SERVICES, key, started, stop, value
from tests.support.etcd import running_etcd

WAIT = 0.5  # the cache's freshness timeout in this test (3 s in the server)


def names(page) -> list[str]:
    return [obj.decode()["metadata"]["name"] for obj in page.items]


async def test_consistent_list_from_the_cache_sees_another_apiservers_write_and_falls_back_on_a_foreign_revision(monkeypatch):
    monkeypatch.setattr(cacher, "FRESHNESS_TIMEOUT", WAIT)
    with running_etcd() as etcd:
        prefix = etcd.new_prefix()
        ours = EtcdConfig((etcd.client_url,), prefix=prefix, request_timeout=5)
        store_a, store_b = await EtcdBackend(ours).open(), await EtcdBackend(ours).open()
        foreign = await EtcdBackend(EtcdConfig((etcd.client_url,), prefix="/another-program", request_timeout=5)).open()
        assert store_a.watch_sees_every_revision and store_a.request_watch_progress is False  # 3.4.23
        a = await started(store_a)
        counts = a.cacher(SERVICES).counts
        try:
            # apiserver B writes; a consistent list on A right after sees it, from A's cache
            written = await store_b.create(key("one"), value("one"))
            lists = counts.lists
            page = await asyncio.wait_for(a.list(SERVICES, "default", ListOptions()), 2 * WAIT)
            assert page is not None and counts.lists == lists + 1  # served by the cache, not etcd
            assert names(page) == ["one"] and page.meta["resourceVersion"] == str(written.mod_revision)

            # a write outside the prefix (a revision no event of A's watch announces) followed by
            # one of ours: the cache's events pass the foreign revision, the cache answers
            await foreign.create("/registry/configmaps/default/x", b"{}")
            await store_b.create(key("two"), value("two"))
            page = await asyncio.wait_for(a.list(SERVICES, "default", ListOptions()), 2 * WAIT)
            assert names(page) == ["one", "two"]

            # a foreign revision last: the cache cannot reach etcd's current revision, etcd answers
            await foreign.create("/registry/configmaps/default/y", b"{}")
            started_at = time.monotonic()
            assert await a.list(SERVICES, "default", ListOptions()) is None  # storage answers, after the wait
            assert time.monotonic() - started_at >= WAIT
            assert counts.lists == lists + 2
            from_etcd = await store_a.list(SERVICES.key_prefix("default"))
            assert [kv.key for kv in from_etcd.kvs] == [key("one"), key("two")]
            assert from_etcd.revision == await foreign.current_revision()

            # the next kubesvc write passes the foreign revision: the cache answers again
            three = await store_b.create(key("three"), value("three"))
            page = await asyncio.wait_for(a.list(SERVICES, "default", ListOptions()), 2 * WAIT)
            assert names(page) == ["one", "three", "two"] and page.meta["resourceVersion"] == str(three.mod_revision)
            assert counts.lists == lists + 3
        finally:
            await stop(a)
            for store in (store_a, store_b, foreign):
                await store.close()
