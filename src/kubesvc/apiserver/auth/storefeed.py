"""In-memory views the authorizers keep of stored objects, fed straight from the storage
Backend (upstream's authorizers read shared informer caches: RBAC its listers of the four
RBAC kinds, the Node authorizer a graph fed by Pod events).

A :class:`StoreFeed` lists some kinds once, then watches each from the listed revision and
hands every change to a handler ``apply(info, namespace, name, obj_or_None)``. Writes
through this apiserver are also applied as they commit (:meth:`StoreFeed.refresh`, called
from the RBAC strategies' commit hooks), so a request right after a RoleBinding's create
already sees it; the watch then brings the same change again, and changes of other
apiservers sharing the store. Every applied change is remembered by its key's revision, so
a late or repeated event never rolls a key back. A watch that ends (slow consumer) is
resumed from the last revision it delivered; one that fell below the compaction point
relists; one the store cannot open (etcd unreachable) is asked again every RETRY_SECONDS,
so the view never stops following.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

import msgspec

from kubesvc.api.scheme import KindInfo
from kubesvc.storage import base as storage
from kubesvc.util.aio import cancel_and_wait

log = logging.getLogger("kubesvc.apiserver.auth")

Handler = Callable[[KindInfo, str, str, "dict | None"], None]
_decode = msgspec.json.Decoder().decode
_MAX_TOMBSTONES = 4096
RETRY_SECONDS = 0.5  # a store that is away (etcd unreachable) is asked again after this


class StoreFeed:
    def __init__(self, backend: storage.Backend, kinds: list[KindInfo], apply: Handler):
        self.backend = backend
        self.kinds = kinds
        self.apply = apply
        self._revisions: dict[str, int] = {}  # live key -> revision of the last change applied
        self._deleted: dict[str, int] = {}  # deleted key -> revision of its deletion
        self._watched: dict[str, int] = {}  # key prefix -> revision its watch has delivered
        self._tasks: list[asyncio.Task] = []

    def _forget_delivered_deletions(self) -> None:
        """A deletion the watches have delivered cannot be followed by an older event."""
        delivered = min(self._watched.values(), default=0)
        self._deleted = {k: r for k, r in self._deleted.items() if r > delivered}

    def _apply_kv(self, info: KindInfo, key: str, value: bytes | None, revision: int) -> None:
        if max(self._revisions.get(key, 0), self._deleted.get(key, 0)) >= revision:
            return
        if value is None:
            self._revisions.pop(key, None)
            self._deleted[key] = revision
            if len(self._deleted) > _MAX_TOMBSTONES:
                self._forget_delivered_deletions()
        else:
            self._deleted.pop(key, None)
            self._revisions[key] = revision
        rest = key[len(info.key_prefix()):]
        namespace, _, name = rest.rpartition("/") if info.namespaced else ("", "", rest)
        try:
            obj = _decode(value) if value is not None else None
        except msgspec.DecodeError:
            log.warning("unreadable object at %s ignored", key)
            return
        self.apply(info, namespace, name, obj)

    async def load(self) -> int:
        """List every kind now; returns the revision to watch from."""
        revision = await self.backend.current_revision()
        for info in self.kinds:
            for kv in (await self.backend.list(info.key_prefix(), revision=revision)).kvs:
                self._apply_kv(info, kv.key, kv.value, kv.mod_revision)
        return revision

    async def refresh(self, info: KindInfo, namespace: str | None, name: str) -> None:
        """Apply a key's current state now (after a write through this apiserver commits). A
        store that cannot be read just then (etcd unreachable) leaves it to the watch: the write
        has committed, and its request must not fail for this."""
        key = info.key(namespace, name)
        try:
            kv = await self.backend.get(key)
            if kv is None:
                self._apply_kv(info, key, None, await self.backend.current_revision())
            else:
                self._apply_kv(info, key, kv.value, kv.mod_revision)
        except storage.StorageError as err:
            log.warning("reading %s for the authorizers after its write: %s; the watch brings it", key, err)

    def start(self, after_revision: int) -> None:
        self._tasks = [asyncio.create_task(self._follow(info, after_revision)) for info in self.kinds]

    async def _follow(self, info: KindInfo, after: int) -> None:
        prefix = info.key_prefix()
        while True:
            try:
                try:
                    watch = await self.backend.watch(prefix, after)
                except storage.Compacted:
                    after = await self._relist(info)
                    continue
            except storage.StorageError as err:  # the store is away: the view keeps what it has, and asks again
                log.warning("watch of %s for the authorizers: %s; retrying in %.1f s", prefix, err, RETRY_SECONDS)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            try:
                async for batch in watch:
                    delivered = after
                    for event in batch:
                        if event.type == "PROGRESS":
                            continue
                        value = event.kv.value if event.type == "PUT" else None
                        self._apply_kv(info, event.kv.key, value, event.kv.mod_revision)
                        delivered = max(delivered, event.kv.mod_revision)
                    # resume after a whole batch only: in etcd a transaction's events share one
                    # revision, so resuming "after" a revision applied in part would lose the rest
                    after = self._watched[prefix] = delivered
            except asyncio.CancelledError:
                raise
            except Exception:  # keep the view alive: re-watch from the last revision seen
                log.exception("watch of %s for the authorizers failed; resuming", prefix)
            finally:
                watch.close()
            await asyncio.sleep(0.1)

    async def _relist(self, info: KindInfo) -> int:
        revision = await self.backend.current_revision()
        listed = await self.backend.list(info.key_prefix(), revision=revision)
        present = {kv.key for kv in listed.kvs}
        for kv in listed.kvs:
            self._apply_kv(info, kv.key, kv.value, kv.mod_revision)
        for key in [k for k in list(self._revisions) if k.startswith(info.key_prefix()) and k not in present]:
            self._apply_kv(info, key, None, revision)
        return revision

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks, raise_errors=True)
        self._tasks = []
