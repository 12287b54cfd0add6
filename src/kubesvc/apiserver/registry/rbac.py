"""The RBAC kinds' strategy: escalation prevention on create and update, and the
authorizers' policy index updated as each write commits (upstream's policy-based RBAC
storage, pkg/registry/rbac/*/policybased; the checks are in auth/escalation.py).

The requester comes from the request context (auth/context.py); a write from the apiserver
itself (the default policy, ClusterRole aggregation) has none and is not checked, as
upstream's loopback client in ``system:masters`` is not. An object validation would refuse
is not checked either: validation then answers 422 (upstream would answer a 500 for a
binding whose ``roleRef.kind`` is neither Role nor ClusterRole).
"""

from __future__ import annotations

from typing import Protocol

from kubesvc.api.scheme import KindInfo
from kubesvc.apiserver.admission.strategy import marks_deleted
from kubesvc.apiserver.auth.context import RequestContext, current
from kubesvc.apiserver.registry.strategy import Strategy
from kubesvc.apiserver.registry.txn import Txn


class EscalationCheck(Protocol):
    async def check_role(self, request: RequestContext | None, resource: str, new: dict, old: dict | None) -> None: ...

    async def check_binding(self, request: RequestContext | None, resource: str, new: dict, old: dict | None) -> None: ...


class PolicyFeed(Protocol):
    async def refresh(self, info: KindInfo, namespace: str | None, name: str) -> None: ...


class RBACHooks(Protocol):
    """What the strategy needs of the authorization modes (``auth.modes.Authorization``, which
    builds this strategy): the escalation guard and the policy index's feed, each None until
    the modes are attached. A protocol, so the registry does not import ``auth.modes``."""

    guard: EscalationCheck | None
    feed: PolicyFeed | None


class RBACStrategy(Strategy):
    def __init__(self, info: KindInfo, authorization: RBACHooks):
        super().__init__(info)
        self.authorization = authorization

    async def _check(self, new: dict, old: dict | None) -> None:
        guard = self.authorization.guard
        if guard is None:
            return
        if self.info.kind in ("Role", "ClusterRole"):
            await guard.check_role(current(), self.info.resource, new, old)
        else:
            await guard.check_binding(current(), self.info.resource, new, old)

    def _refresh_on_commit(self, obj: dict, dry_run: bool) -> Txn:
        txn = Txn()
        feed = self.authorization.feed
        if feed is not None and not dry_run:
            meta = obj.get("metadata") or {}
            txn.on_commit(lambda: feed.refresh(self.info, meta.get("namespace"), meta.get("name") or ""))
        return txn

    async def begin_create(self, obj: dict, dry_run: bool) -> Txn:
        if not self.validate(obj):
            await self._check(obj, None)
        return self._refresh_on_commit(obj, dry_run)

    async def begin_update(self, new: dict, old: dict, dry_run: bool, subresource: str) -> Txn:
        if not marks_deleted(new, old) and not self.validate_update(new, old):  # a DELETE marking it is no grant
            await self._check(new, old)
        return self._refresh_on_commit(new, dry_run)

    async def begin_delete(self, obj: dict) -> Txn:
        return self._refresh_on_commit(obj, False)
