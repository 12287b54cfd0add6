"""The authorizers' view of the store (auth/storefeed.py) outlives a store that is away: a watch
that cannot be opened (etcd unreachable, no leader) is retried, and the changes made meanwhile
and after are applied once it opens."""

from __future__ import annotations

import asyncio

from kubesvc.api.scheme import all_kinds
from kubesvc.apiserver.auth import storefeed
from kubesvc.apiserver.auth.storefeed import StoreFeed
from kubesvc.storage.base import StorageError
from kubesvc.storage.memory import MemoryBackend


async def test_a_watch_that_cannot_open_is_retried_and_the_view_catches_up(monkeypatch):
    monkeypatch.setattr(storefeed, "RETRY_SECONDS", 0.01)
    backend = MemoryBackend()
    info = next(kind for kind in all_kinds() if kind.group == "rbac.authorization.k8s.io" and kind.resource == "rolebindings")
    await backend.create("/registry/configmaps/default/seed", b"{}")  # the view is loaded at a revision past 0 ("now")
    seen: list[tuple[str, str, bool]] = []
    feed = StoreFeed(backend, [info], lambda _info, namespace, name, obj: seen.append((namespace, name, obj is not None)))
    after = await feed.load()
    watch, refusals = backend.watch, [1, 1, 1]

    async def away_then_back(prefix: str, revision: int):
        if refusals:
            refusals.pop()
            raise StorageError("etcd (https://10.0.0.1:2379): connection refused")
        return await watch(prefix, revision)

    backend.watch = away_then_back
    feed.start(after)
    try:
        await backend.create(info.key("default", "meanwhile"), b'{"metadata":{"name":"meanwhile","namespace":"default"}}')
        for _ in range(200):
            if not refusals:
                break
            await asyncio.sleep(0.01)
        created = await backend.create(info.key("default", "after"), b'{"metadata":{"name":"after","namespace":"default"}}')
        deleted = await backend.delete(info.key("default", "meanwhile"))
        for _ in range(200):
            if len(seen) == 3:
                break
            await asyncio.sleep(0.01)
        assert not refusals and created.mod_revision < deleted.mod_revision
        assert seen == [("default", "meanwhile", True), ("default", "after", True), ("default", "meanwhile", False)]
        assert not any(task.done() for task in feed._tasks)
    finally:
        await feed.stop()


async def test_a_refresh_the_store_cannot_answer_leaves_the_change_to_the_watch():
    """After a write through this apiserver commits, its refresh reads the store; a store that
    is away just then must not fail the (committed) write's request: the watch applies it."""
    backend = MemoryBackend()
    await backend.create("/registry/configmaps/default/seed", b"{}")
    info = next(kind for kind in all_kinds() if kind.group == "rbac.authorization.k8s.io" and kind.resource == "rolebindings")
    seen: list[tuple[str, str, bool]] = []
    feed = StoreFeed(backend, [info], lambda _info, namespace, name, obj: seen.append((namespace, name, obj is not None)))
    feed.start(await feed.load())
    get = backend.get

    async def away(key: str, revision: int = 0):
        raise StorageError("etcd (https://10.0.0.1:2379): request to etcd timed out")

    try:
        await backend.create(info.key("default", "rb"), b'{"metadata":{"name":"rb","namespace":"default"}}')
        backend.get = away
        await feed.refresh(info, "default", "rb")  # no exception
        backend.get = get
        for _ in range(200):
            if seen:
                break
            await asyncio.sleep(0.01)
        assert seen == [("default", "rb", True)]
    finally:
        await feed.stop()
