"""The storage Backend: a revisioned key-value store in etcd's terms.

Every write gets a new revision (etcd's ``mod_revision``), greater than every revision before
it; the apiserver exposes it as ``metadata.resourceVersion``. A key remembers the revision that
created it (``create_revision``). Writes are conditional on the revision the writer last read,
which is how the apiserver's optimistic concurrency (409 Conflict) and GuaranteedUpdate work:

* ``create`` fails with :class:`KeyExists` if the key is live;
* ``update`` / ``delete`` fail with :class:`RevisionMismatch` unless the key's current
  ``mod_revision`` equals the expected one (0 means "whatever it is now");
* ``txn`` applies several such operations all-or-nothing (a Service and its IP allocation
  commit together). In etcd all operations of one Txn share ONE revision; the embedded stores
  give each its own consecutive revision. A user may rely only on what both give (see
  contract.py): each result's ``mod_revision`` is above every revision before the txn and
  non-decreasing in op order, ``TxnResult.revision`` is the txn's last (commit) revision, and
  a watch delivers the txn's events together, in op order. Nothing may assume one event per
  revision.

History is kept until :meth:`Backend.compact`; reading or watching below the compacted
revision raises :class:`Compacted`, which the apiserver answers with 410 Expired.

Watches are "after revision N": they deliver, in revision order, every event with
revision > N for keys under a prefix, then live events as they commit.

**Why the data methods are coroutines.** kube-apiserver's ``storage.Interface``
(staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go) sends every Get, List, Txn and Watch
to etcd over gRPC: a network round trip of a millisecond or more, during which an asyncio
apiserver must keep serving other requests. So every method that reads or writes is
``async`` and callers await it; ``compact_revision()`` stays a plain method (the last value
the backend knows, which the apiserver only puts into a 410's message).

Implementations:

* ``memory`` (tests) and ``sqlite`` (kine-like log; the embedded default) answer in
  microseconds from this process: their coroutines run the synchronous code directly, with no
  thread hop, so awaiting them costs what a call did. Both keep the watch ring of watch.py.
* etcd (storage/etcd, ``--storage-backend etcd3``) sends each call to etcd over gRPC.

``contract.py`` is the suite every backend must pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AsyncIterator, Literal, Protocol, Sequence


class StorageError(Exception):
    """Base of every error a Backend raises; the registry translates these, nothing else."""


class KeyExists(StorageError):
    def __init__(self, key: str):
        super().__init__(f"key exists: {key}")
        self.key = key


class KeyNotFound(StorageError):
    def __init__(self, key: str):
        super().__init__(f"key not found: {key}")
        self.key = key


class RevisionMismatch(StorageError):
    """The key's current mod_revision is not the expected one (someone else wrote first)."""

    def __init__(self, key: str, expected: int, actual: int):
        super().__init__(f"revision mismatch on {key}: expected {expected}, actual {actual}")
        self.key = key
        self.expected = expected
        self.actual = actual


class Compacted(StorageError):
    """The requested revision is older than the oldest kept (etcd ErrCompacted)."""

    def __init__(self, requested: int, compact_revision: int):
        super().__init__(f"required revision {requested} has been compacted (compacted at {compact_revision})")
        self.requested = requested
        self.compact_revision = compact_revision


class FutureRevision(StorageError):
    def __init__(self, requested: int, current: int):
        super().__init__(f"required revision {requested} is a future revision (current {current})")
        self.requested = requested
        self.current = current


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int


@dataclass(frozen=True, slots=True)
class Event:
    """One committed change. For DELETE, ``kv.value`` is the value the key had before deletion
    and ``kv.mod_revision`` is the revision of the delete itself. PROGRESS (etcd's progress
    notification) is no change: every event up to ``kv.mod_revision`` under the watch's prefix
    has been delivered before it."""

    type: Literal["PUT", "DELETE", "PROGRESS"]
    kv: KeyValue
    prev_kv: KeyValue | None = None

    @property
    def is_create(self) -> bool:
        return self.type == "PUT" and self.kv.create_revision == self.kv.mod_revision


@dataclass(frozen=True, slots=True)
class ListResult:
    kvs: list[KeyValue]
    revision: int  # the revision the list was read at
    more: bool = False  # True when limit cut the result short
    remaining: int = 0  # how many more keys match after the last returned one


@dataclass(frozen=True, slots=True)
class Create:
    key: str
    value: bytes


@dataclass(frozen=True, slots=True)
class Update:
    key: str
    value: bytes
    expected_revision: int = 0  # 0: unconditional (key must exist)


@dataclass(frozen=True, slots=True)
class Delete:
    key: str
    expected_revision: int = 0  # 0: unconditional (key must exist)


Op = Create | Update | Delete


@dataclass(frozen=True, slots=True)
class TxnResult:
    """Per operation, in order: the resulting KeyValue (for Delete, the deleted value with the
    delete's revision as mod_revision)."""

    results: list[KeyValue] = field(default_factory=list)

    @property
    def revision(self) -> int:
        return self.results[-1].mod_revision if self.results else 0


class Watch(Protocol):
    """An open watch. Iterate to receive batches of events; close() to stop.

    Iteration ends when the watch is closed (by close() or by the backend dropping a slow
    consumer); a consumer that needs to continue re-watches from its last revision."""

    def __aiter__(self) -> AsyncIterator[list[Event]]: ...

    def close(self) -> None: ...

    def request_progress(self) -> None:
        """Queue a PROGRESS event carrying the newest revision already queued to this watch; a
        backend whose ``request_watch_progress`` is False cannot order it with the events and
        queues none (storage/etcd/watch.py)."""
        ...


class Backend(Protocol):
    """The data methods are coroutines: for etcd each is a network round trip, and the apiserver
    calls them from its event loop, which must never block. The embedded stores answer in
    microseconds and implement them by running their synchronous code directly (no thread hop).
    ``compact_revision`` stays a plain method: the last value the backend knows."""

    async def current_revision(self) -> int: ...

    def compact_revision(self) -> int: ...

    async def get(self, key: str, revision: int = 0) -> KeyValue | None:
        """The key's value at ``revision`` (0: now); None if absent then."""
        ...

    async def list(self, prefix: str, *, revision: int = 0, limit: int = 0, start_key: str = "") -> ListResult:
        """Live keys starting with ``prefix`` and >= ``start_key``, in key order, as of
        ``revision`` (0: now). ``limit`` 0 means no limit."""
        ...

    async def count(self, prefix: str) -> int: ...

    async def create(self, key: str, value: bytes) -> KeyValue: ...

    async def update(self, key: str, value: bytes, expected_revision: int = 0) -> KeyValue: ...

    async def delete(self, key: str, expected_revision: int = 0) -> KeyValue:
        """Returns the deleted value, with the delete's revision as mod_revision."""
        ...

    async def txn(self, ops: Sequence[Op]) -> TxnResult:
        """All ops or none. Raises the first failing op's error."""
        ...

    async def watch(self, prefix: str, after_revision: int) -> Watch:
        """Events with revision > after_revision under prefix. Raises Compacted if
        after_revision < compact_revision(), FutureRevision if > current (tolerated: 0 means now)."""
        ...

    async def compact(self, revision: int) -> None:
        """Forget history at and below ``revision`` (current values are kept)."""
        ...

    async def close(self) -> None: ...


# The rules above as pure functions, shared by the embedded implementations.


MAX_KEY = "\U0010ffff"  # the range end of the empty prefix: the highest code point sorts above any key


def prefix_end(prefix: str) -> str:
    """The least key above every key that starts with ``prefix`` (etcd's range_end for a prefix)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else MAX_KEY


def resolve_revision(requested: int, current: int, compacted: int) -> int:
    """The revision a read or watch at ``requested`` (0: now) sees. Reading at the compact
    revision itself is allowed (each key's value as of then is kept), below it is not."""
    if requested == 0:
        return current
    if requested > current:
        raise FutureRevision(requested, current)
    if requested < compacted:
        raise Compacted(requested, compacted)
    return requested


def apply_op(op: Op, current: KeyValue | None, revision: int) -> Event:
    """The event ``op`` commits at ``revision`` when the key's live value is ``current`` (None:
    absent or deleted). Raises KeyExists / KeyNotFound / RevisionMismatch when its condition fails."""
    if isinstance(op, Create):
        if current is not None:
            raise KeyExists(op.key)
        return Event("PUT", KeyValue(op.key, op.value, revision, revision))
    if current is None:
        raise KeyNotFound(op.key)
    if op.expected_revision and op.expected_revision != current.mod_revision:
        raise RevisionMismatch(op.key, op.expected_revision, current.mod_revision)
    if isinstance(op, Update):
        return Event("PUT", KeyValue(op.key, op.value, current.create_revision, revision), current)
    return Event("DELETE", KeyValue(op.key, current.value, current.create_revision, revision), current)
