"""Compaction every ``--etcd-compaction-interval`` (default 5 min, 0 off), as kube-apiserver's
``storage/etcd3/compact.go``: several apiservers on one etcd compact once per interval between
them, coordinated by a compare-and-swap on a key ``compact_rev_key``.

Upstream's key is ``compact_rev_key`` outside every prefix. kubesvc's is
``<--etcd-prefix>/compact_rev_key``: then every write kubesvc makes to etcd is under the prefix,
so the watch cache, which watches the whole prefix, sees every revision etcd hands out and can
tell it has caught up with etcd's current revision without progress notifications (unreliable
before etcd 3.4.31, which Debian's 3.4.23 is). kubesvc does not share an etcd with
kube-apiservers (its values are JSON, theirs protobuf), so nothing else needs the bare key.

Each tick::

    Txn  If   version(compact_rev_key) == local_version
         Then Put(compact_rev_key, str(rev))        # bumps the key's version
         Else Get(compact_rev_key)

* Won: ``local_version += 1`` and compact to ``rev``, the revision seen at the *previous* tick,
  so about one interval of history stays (watchers and paged lists a little behind keep
  working). The first tick only records a revision: "we don't compact on bootstrap".
* Lost (another apiserver ticked first): adopt the key's version; compact nothing this round.
  In normal operation history is kept for one interval, after a failover for between one and
  two.

etcd's own ``--auto-compaction-retention`` must stay off with this, or two compactors run.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from aetcd import rpc

from kubesvc.storage.base import StorageError

log = logging.getLogger(__name__)

COMPACT_REV_KEY = "/registry/compact_rev_key"  # under --etcd-prefix (keys.py)


@dataclass
class CompactorState:
    local_version: int = 0  # compact_rev_key's version as this compactor last wrote or saw it
    revision: int = 0  # the header revision at the previous tick: the next compaction target


def after_tick(state: CompactorState, won: bool, remote_version: int, header_revision: int) -> tuple[CompactorState, int]:
    """The state after one CAS and the revision to compact now (0: none)."""
    if not won:
        return CompactorState(remote_version, header_revision), 0
    return CompactorState(state.local_version + 1, header_revision), state.revision


class Compactor:
    def __init__(self, backend, interval: float):
        self.backend = backend
        self.interval = interval
        self.state = CompactorState()
        self.key = backend.keys.key(COMPACT_REV_KEY)

    async def tick(self) -> int:
        """One round; returns the revision compacted to (0: none)."""
        backend = self.backend
        compare = rpc.Compare(key=self.key, target=rpc.Compare.CompareTarget.VERSION,
                              result=rpc.Compare.CompareResult.EQUAL, version=self.state.local_version)
        put = rpc.RequestOp(request_put=rpc.PutRequest(key=self.key, value=str(self.state.revision).encode()))
        get = rpc.RequestOp(request_range=rpc.RangeRequest(key=self.key))
        response = await backend._txn([compare], [put], [get])
        remote_version = 0
        if not response.succeeded:
            kvs = response.responses[0].response_range.kvs
            remote_version = kvs[0].version if kvs else 0
        self.state, target = after_tick(self.state, response.succeeded, remote_version, response.header.revision)
        if target:
            await backend.compact(target)
            log.info("compacted etcd to revision %d", target)
        return target

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.tick()
            except StorageError as error:
                log.warning("etcd compaction failed: %s", error)
