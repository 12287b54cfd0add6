"""The storage Backend on etcd v3 (kube-apiserver's ``storage/etcd3/store.go``; the five calls of
etcd's ``client/v3/kubernetes`` interface).

Values are kubesvc's JSON bytes, keys upstream's (keys.py). resourceVersion is etcd's
``mod_revision``; a write's revision is its response header's revision. Every write is one etcd
``Txn`` whose compare is the optimistic-concurrency check, so two apiservers on one etcd race
safely:

================  ===============================  =====================  ==================
operation         If                               Then                   Else
================  ===============================  =====================  ==================
create            ``mod_revision(key) == 0``       ``Put``                (KeyExists)
update, expected  ``mod_revision(key) == rev``     ``Put(prev_kv)``       ``Range(key)``
update, any       ``mod_revision(key) > 0``        ``Put(prev_kv)``       ``Range(key)``
delete            as update                        ``DeleteRange(prev)``  ``Range(key)``
================  ===============================  =====================  ==================

A multi-operation :meth:`txn` (a Service and its IPAddress and NodePort records) is one etcd Txn:
all compares, then all writes, and on failure a Range of every key; which operation failed, and
how, is then decided by replaying the operations over those values with the same rule the
embedded stores apply (``base.apply_op``). **etcd commits a Txn at one revision**: every
operation of a txn gets the same mod_revision ("the store's revision is incremented only once
for the transaction"), where the embedded stores give each its own. A txn may write a key once
(etcd refuses duplicates), and at most 128 operations (``--max-txn-ops``).

Reads: ``get`` and ``list`` are Ranges (linearizable: they go through the leader's read index),
``list`` at a revision with ``limit`` and a start key as the etcd3 store pages (``remaining``
from the Range's ``count``), ``count`` a ``count_only`` Range. A read below the compact
revision raises Compacted, above the current one FutureRevision. etcd does not tell a reader its
compact revision; :meth:`compact_revision` is the last one this backend knows (its own
compactions, a watch cancelled for compaction, and a probe when a read is refused), learned
again on open.

Watches: watch.py. Compaction: compactor.py runs upstream's compare-and-swap on
``<prefix>/compact_rev_key`` so that several apiservers compact once per interval.

``request_watch_progress`` says whether etcd's progress notifications can prove a watch has
caught up (kube-apiserver's ``endpointSupportsRequestWatchProgress``, etcd issues #15220 and
#17507): etcd 3.4.31+, 3.5.13+ or 3.6+, checked with ``Status`` on the member :meth:`open`
reaches. Debian's 3.4.23 is not.

``watch_sees_every_revision = True`` says that every revision this etcd hands out is a write
under ``--etcd-prefix``, i.e. an event of the watch cache's one watch of the whole prefix; the
cache then serves a consistent read (resourceVersion="") once its own events reach etcd's
current revision (one Range's header revision), without progress notifications, so on 3.4.23
too. Why it holds for kubesvc's etcd: a revision is made only by a Put, DeleteRange or Txn that
changes a key (etcd's mvcc store bumps it once per write txn with changes), and every key kubesvc
writes goes through this backend's :class:`KeySpace` (the registry's objects, the endpoint
reconciler's ``masterleases`` (expiry in the value, no etcd lease), events, IPAddresses, the
allocators' records) or is the compactor's ``<prefix>/compact_rev_key`` (compactor.py).
Measured on 3.4.23 (not a revision): LeaseGrant, LeaseRevoke and lease expiry without keys
(kubesvc attaches no lease to a key), Compact, MemberAdd/MemberRemove (raft configuration, not
the key-value store), Status, Alarm, Defragment; the cluster package's member, health and
snapshot calls are of these kinds. The limit: another writer in the same etcd outside the
prefix (another program, a second kubesvc under another ``--etcd-prefix``, an etcdctl put)
makes revisions no event announces; every consistent list then waits the cache's freshness
timeout (3 s) and is answered by etcd (correct, slower) until a kubesvc write passes that
revision (an apiserver with a non-loopback advertise address renews its master lease every
10 s). Such a setup should set the attribute False, as kube-apiserver assumes of etcd.
tests/apiserver/test_cacher_etcd_fresh.py shows both on a real etcd.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Sequence

import grpc
from aetcd import rpc

from kubesvc.storage.base import (
    Compacted, Create, Delete, FutureRevision, KeyExists, KeyValue, ListResult, Op, StorageError, TxnResult, Update,
    apply_op,
)
from kubesvc.storage.etcd import errors, wire
from kubesvc.storage.etcd.client import EtcdConfig, open_channel
from kubesvc.storage.etcd.keys import KeySpace
from kubesvc.storage.etcd.watch import EtcdWatch

log = logging.getLogger(__name__)

HAS_LEADER = (("hasleader", "true"),)  # clientv3.WithRequireLeader
HEALTH_KEY = "/registry/health"  # read, never written: kube-apiserver's etcd health probe reads it too


def _condition(op: Op, key: bytes) -> bytes:
    """The op's compare (the table's If), encoded (wire.py)."""
    if isinstance(op, Create):
        return wire.compare_mod_revision(key, wire.EQUAL, 0)
    if op.expected_revision:
        return wire.compare_mod_revision(key, wire.EQUAL, op.expected_revision)
    return wire.compare_mod_revision(key, wire.GREATER, 0)


def _write(op: Op, key: bytes) -> bytes:
    """The op's write (the table's Then), encoded (wire.py)."""
    if isinstance(op, Delete):
        return wire.delete(key, prev_kv=True)
    return wire.put(key, op.value, prev_kv=not isinstance(op, Create))


def _result(op: Op, response: "rpc.ResponseOp", revision: int) -> KeyValue:
    if isinstance(op, Create):
        return KeyValue(op.key, op.value, revision, revision)
    if isinstance(op, Update):
        return KeyValue(op.key, op.value, response.response_put.prev_kv.create_revision, revision)
    prev = response.response_delete_range.prev_kvs[0]
    return KeyValue(op.key, prev.value, prev.create_revision, revision)


def supports_request_watch_progress(version: str) -> bool:
    """Whether an etcd server of ``version`` (``3.4.23``) sends progress notifications in order
    with its events: 3.4.31+, 3.5.13+, 3.6+."""
    try:
        major, minor, patch = (int(part) for part in version.split("-")[0].split(".")[:3])
    except ValueError:
        return False
    if (major, minor) == (3, 4):
        return patch >= 31
    if (major, minor) == (3, 5):
        return patch >= 13
    return (major, minor) >= (3, 6)


def first_failure(ops: Sequence[Op], current: dict[str, KeyValue | None]) -> StorageError:
    """The error of the first operation whose condition fails when applied in order to
    ``current`` (the keys' values when the Txn was refused)."""
    state = dict(current)
    for op in ops:
        try:
            event = apply_op(op, state.get(op.key), 0)
        except StorageError as error:
            return error
        state[op.key] = None if event.type == "DELETE" else event.kv
    return StorageError(f"etcd refused a transaction whose conditions hold: {[op.key for op in ops]}")


class EtcdBackend:
    """An async storage Backend on an etcd cluster (see the module docstring)."""

    def __init__(self, config: EtcdConfig = EtcdConfig(), *, watch_queue_size: int = 10_000, **_ignored):
        self.config = config
        self.keys = KeySpace.of(config.prefix)
        self._channel = open_channel(config)
        self._kv = rpc.KVStub(self._channel)
        # every write's Txn, its request already bytes (wire.py): one callable kept, no serializer
        self._write_txn = self._channel.unary_unary("/etcdserverpb.KV/Txn", request_serializer=None,
                                                    response_deserializer=rpc.TxnResponse.FromString)
        self._watch_stub = rpc.WatchStub(self._channel)
        self._maintenance = rpc.MaintenanceStub(self._channel)
        self._timeout = config.request_timeout
        self._watch_queue_size = watch_queue_size
        self._watches: set[EtcdWatch] = set()
        self._compacted = 0
        self._closed = False
        self._probe = self.keys.key(HEALTH_KEY)
        self.request_watch_progress = False  # set by open() from the member's version
        self.watch_sees_every_revision = True  # only kubesvc writes, all under the prefix (module docstring)
        self.server_version = ""

    # --- plumbing ---------------------------------------------------------------------------

    async def _call(self, method, request, requested: int = 0):
        """One unary call with the request timeout; errors become storage errors."""
        if self._closed:
            raise errors.Unavailable("etcd backend is closed")
        try:
            return await method(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as error:
            kind = errors.kind_of(error)
            if kind == "compacted":
                await self._learn_compaction()
                raise Compacted(requested, self._compacted) from None
            if kind == "future":
                raise FutureRevision(requested, await self.current_revision()) from None
            raise errors.unavailable(error, self.config.endpoints) from None

    async def _range(self, key: bytes, end: bytes = b"", **fields) -> "rpc.RangeResponse":
        return await self._call(self._kv.Range, rpc.RangeRequest(key=key, range_end=end, **fields),
                                fields.get("revision", 0))

    async def _txn(self, compare, success, failure=()) -> "rpc.TxnResponse":
        return await self._call(self._kv.Txn, rpc.TxnRequest(compare=compare, success=success, failure=failure))

    def _kv_of(self, kv) -> KeyValue:
        return KeyValue(self.keys.name(kv.key), kv.value, kv.create_revision, kv.mod_revision)

    async def _learn_compaction(self) -> None:
        """etcd's compact revision, from the one answer that carries it: a watch from revision 1
        is cancelled with ``compact_revision`` set when history below it is gone."""
        call = self._watch_stub.Watch(timeout=self._timeout)
        try:
            watch = EtcdWatch(call, self.keys.name, 1, lambda _: None)
            first = await watch.start(rpc.WatchCreateRequest(key=self._probe, start_revision=1))
            if first is not grpc.aio.EOF and first.created and not first.canceled:
                # etcd reports compaction asynchronously, from its unsynced-watcher loop (every
                # 100 ms); events or silence mean history reaches back to revision 1
                response = await asyncio.wait_for(call.read(), 0.3)
                first = response
            if first is not grpc.aio.EOF and first.compact_revision > self._compacted:
                self._compacted = first.compact_revision
        except (asyncio.TimeoutError, grpc.aio.AioRpcError):
            pass  # not compacted (no answer), or etcd gone: keep what is known
        finally:
            call.cancel()

    # --- the Backend protocol -------------------------------------------------------------------

    async def open(self) -> "EtcdBackend":
        """Check that etcd answers (one quorum read), learn its compact revision and whether its
        progress notifications can be trusted."""
        await self.current_revision()
        status = await self._call(self._maintenance.Status, rpc.StatusRequest())
        self.server_version = status.version
        self.request_watch_progress = supports_request_watch_progress(status.version)
        await self._learn_compaction()
        return self

    async def current_revision(self) -> int:
        return (await self._range(self._probe, count_only=True)).header.revision

    def compact_revision(self) -> int:
        return self._compacted

    async def get(self, key: str, revision: int = 0) -> KeyValue | None:
        response = await self._range(self.keys.key(key), revision=revision)
        return self._kv_of(response.kvs[0]) if response.kvs else None

    async def list(self, prefix: str, *, revision: int = 0, limit: int = 0, start_key: str = "") -> ListResult:
        begin, end = self.keys.range(prefix, start_key)
        response = await self._range(begin, end, revision=revision, limit=limit)
        kvs = [self._kv_of(kv) for kv in response.kvs]
        at = revision or response.header.revision
        return ListResult(kvs, at, response.more, response.count - len(kvs) if response.more else 0)

    async def count(self, prefix: str) -> int:
        begin, end = self.keys.range(prefix)
        return (await self._range(begin, end, count_only=True)).count

    async def create(self, key: str, value: bytes) -> KeyValue:
        etcd_key = self.keys.key(key)
        response = await self._call(self._write_txn, wire.txn([wire.compare_mod_revision(etcd_key, wire.EQUAL, 0)],
                                                              [wire.put(etcd_key, value)]))
        if not response.succeeded:
            raise KeyExists(key)
        revision = response.header.revision
        return KeyValue(key, value, revision, revision)

    async def update(self, key: str, value: bytes, expected_revision: int = 0) -> KeyValue:
        return (await self.txn([Update(key, value, expected_revision)])).results[0]

    async def delete(self, key: str, expected_revision: int = 0) -> KeyValue:
        return (await self.txn([Delete(key, expected_revision)])).results[0]

    async def txn(self, ops: Sequence[Op]) -> TxnResult:
        keys = [self.keys.key(op.key) for op in ops]
        if len(set(keys)) < len(keys):
            raise await self._refused(ops, keys) or ValueError("an etcd transaction writes each key at most once")
        response = await self._call(self._write_txn, wire.txn(
            [_condition(op, key) for op, key in zip(ops, keys)],
            [_write(op, key) for op, key in zip(ops, keys)],
            [wire.get(key) for key in dict.fromkeys(keys)]))
        if not response.succeeded:
            current = {}
            for op, answer in zip(dict.fromkeys(op.key for op in ops), response.responses):
                kvs = answer.response_range.kvs
                current[op] = self._kv_of(kvs[0]) if kvs else None
            raise first_failure(ops, current)
        revision = response.header.revision
        return TxnResult([_result(op, answer, revision) for op, answer in zip(ops, response.responses)])

    async def _refused(self, ops: Sequence[Op], keys: list[bytes]) -> StorageError | None:
        """For a txn etcd cannot express (a key twice): the error the ops would meet, if any."""
        reads = await self._txn([], [rpc.RequestOp(request_range=rpc.RangeRequest(key=key)) for key in dict.fromkeys(keys)])
        current = {}
        for name, answer in zip(dict.fromkeys(op.key for op in ops), reads.responses):
            kvs = answer.response_range.kvs
            current[name] = self._kv_of(kvs[0]) if kvs else None
        error = first_failure(ops, current)
        return None if type(error) is StorageError else error

    async def watch(self, prefix: str, after_revision: int) -> EtcdWatch:
        begin, end = self.keys.range(prefix)
        if after_revision:
            # refuse a revision below the compact revision or above the current one at once (a
            # watch would be cancelled later, or wait for the revision): a one-key read at it
            # answers both. Reading *at* the compact revision is allowed, so a watch after it is too
            await self._range(self._probe, revision=after_revision, count_only=True)
        if self._closed:
            raise errors.Unavailable("etcd backend is closed")
        call = self._watch_stub.Watch(metadata=HAS_LEADER)
        watch = EtcdWatch(call, self.keys.name, self._watch_queue_size, self._watches.discard,
                          progress_requests=self.request_watch_progress)
        create = rpc.WatchCreateRequest(key=begin, range_end=end, start_revision=after_revision + 1 if after_revision else 0,
                                        prev_kv=True, progress_notify=True)
        try:
            first = await asyncio.wait_for(watch.start(create), self._timeout)
        except grpc.aio.AioRpcError as error:
            call.cancel()
            raise errors.unavailable(error, self.config.endpoints) from None
        except asyncio.TimeoutError:
            call.cancel()
            raise errors.Unavailable(f"etcd ({self.config.endpoints}): watch not created within {self._timeout}s") from None
        if first is grpc.aio.EOF or first.canceled:
            call.cancel()
            if first is not grpc.aio.EOF and first.compact_revision:
                self._compacted = max(self._compacted, first.compact_revision)
                raise Compacted(after_revision, first.compact_revision)
            reason = "stream closed" if first is grpc.aio.EOF else first.cancel_reason
            raise errors.Unavailable(f"etcd ({self.config.endpoints}): watch refused: {reason}")
        self._watches.add(watch)
        watch.run()
        return watch

    async def compact(self, revision: int) -> None:
        """Compacting at or below the compact revision is a no-op; above the current one raises
        FutureRevision. History is dropped at once (``physical``: wait until the compaction is
        applied, so a read that follows sees it)."""
        if revision <= self._compacted:
            return
        try:
            await self._call(self._kv.Compact, rpc.CompactionRequest(revision=revision, physical=True), revision)
        except Compacted:
            return  # someone compacted further already; _call learned how far
        self._compacted = revision

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for watch in list(self._watches):
            watch.close()
        await self._channel.close()
