"""What a write needs besides its own object: extra storage operations committed in the same
transaction, and what to do in memory once it commits or fails.

Upstream's service REST storage returns a ``transaction`` with ``Commit``/``Revert`` from its
allocation step (pkg/registry/core/service/storage/transaction.go) because etcd3's store
cannot write the allocation and the Service together. Our Backend can, so a Txn carries the
allocation's storage operations (create the IPAddress, delete a released NodePort record)
and only in-memory bookkeeping remains for ``commit``/``revert``: the allocator's index
marks reservations at once (so one request never picks an IP twice) and drops them if the
write does not happen.

``conflict(key)`` handles a transaction that failed because one of our created keys already
exists (another writer, or a stale index): it returns the error to give the client, or None
when the write may simply be retried with a fresh choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import inspect
from typing import Awaitable, Callable

from kubesvc.api.errors import StatusError
from kubesvc.storage.base import Op

ConflictHandler = Callable[[], "StatusError | None"]


@dataclass
class Txn:
    ops: list[Op] = field(default_factory=list)
    _on_commit: list[Callable[[], "Awaitable[None] | None"]] = field(default_factory=list)
    _on_revert: list[Callable[[], None]] = field(default_factory=list)
    _conflicts: dict[str, ConflictHandler] = field(default_factory=dict)
    _conflicted: set[str] = field(default_factory=set)

    def on_commit(self, hook: Callable[[], "Awaitable[None] | None"]) -> None:
        self._on_commit.append(hook)

    def on_revert(self, hook: Callable[[], None]) -> None:
        self._on_revert.append(hook)

    def reservation(self, key: str, undo: Callable[[], None], on_conflict: ConflictHandler) -> None:
        """A key this write creates: ``undo`` drops the in-memory reservation if the write
        fails, unless the store reported the key as existing (then it is taken for real)."""
        self._conflicts[key] = on_conflict
        self._on_revert.append(lambda: None if key in self._conflicted else undo())

    def owns(self, key: str) -> bool:
        return key in self._conflicts

    def conflict(self, key: str) -> StatusError | None:
        self._conflicted.add(key)
        return self._conflicts[key]()

    async def commit(self) -> None:
        """Run the commit hooks in order; a hook that reads the store (the allocators' ranges,
        the policy index's refresh) returns an awaitable, awaited before the next hook."""
        hooks = list(self._on_commit)
        self._on_commit.clear()
        for hook in hooks:
            outcome = hook()
            if inspect.isawaitable(outcome):
                await outcome
        self._on_revert.clear()

    def revert(self) -> None:
        for hook in reversed(self._on_revert):
            hook()
        self._on_commit.clear()
        self._on_revert.clear()
