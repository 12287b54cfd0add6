"""``--authorization-mode``: the authorizer chain and the in-memory views it decides from
(upstream pkg/kubeapiserver/authorizer ``reload.go`` and options/authorization.go;
identity.md §2.1, §6.1).

The privileged-group authorizer (``system:masters``) always runs first, then the modes in
the given order: ``Node``, ``RBAC``, ``AlwaysAllow``, ``AlwaysDeny``; kube-apiserver's
default, and kubesvc's, is ``Node,RBAC``. The first Allow (or Deny) wins; if every
authorizer has no opinion the request is refused with their reasons.

:class:`Authorization` owns what those authorizers read: the RBAC policy index and the Node
graph, fed from the store by one :class:`StoreFeed` (the four RBAC kinds and Pods), the
ClusterRole aggregation loop, the escalation guard the RBAC strategies consult, the
default policy reconciled at start, and, with the Node mode, NodeRestriction admission.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Mapping

from kubesvc.api.scheme import KindInfo
from kubesvc.apiserver.admission.noderestriction import RESTRICTED_KINDS, NodeRestriction
from kubesvc.apiserver.auth.aggregation import ClusterRoleAggregator
from kubesvc.apiserver.auth.authorizer import AlwaysAllow, AlwaysDeny, Authorizer, PrivilegedGroupAuthorizer, Union
from kubesvc.apiserver.auth.escalation import EscalationGuard
from kubesvc.apiserver.auth.node import NodeAuthorizer, NodeGraph
from kubesvc.apiserver.auth.policy import ensure_bootstrap_policy
from kubesvc.apiserver.auth.rbac import RBAC_GROUP, PolicyIndex, RBACAuthorizer
from kubesvc.apiserver.auth.storefeed import StoreFeed
from kubesvc.util.aio import cancel_and_wait

MODES = ("AlwaysAllow", "AlwaysDeny", "Node", "RBAC")
UPSTREAM_ONLY_MODES = ("ABAC", "Webhook")
DEFAULT_MODES = ("Node", "RBAC")
RBAC_RESOURCES = ("roles", "clusterroles", "rolebindings", "clusterrolebindings")


def parse_modes(text: str) -> list[str]:
    """The flag's value as upstream validates it; ValueError with upstream's message."""
    modes = [m.strip() for m in text.split(",") if m.strip()]
    problems = []
    for mode in modes:
        if mode in UPSTREAM_ONLY_MODES:
            problems.append(f"authorization-mode {mode!r} is not supported by kubesvc".replace("'", '"'))
        elif mode not in MODES:
            problems.append(f'authorization-mode "{mode}" is not a valid mode')
    if len(set(modes)) != len(modes):
        problems.append("authorization-mode [" + " ".join(f'"{m}"' for m in modes) + "] has mode specified more than once")
    if not modes:
        problems.append("at least one authorization-mode must be passed")
    if problems:
        raise ValueError(", ".join(problems))
    return modes


class Authorization:
    def __init__(self, modes: list[str] | tuple[str, ...] = DEFAULT_MODES):
        self.modes = list(modes)
        self.policy = PolicyIndex()
        self.graph = NodeGraph()
        chain: list[Authorizer] = [PrivilegedGroupAuthorizer()]
        for mode in self.modes:
            chain.append({"AlwaysAllow": AlwaysAllow, "AlwaysDeny": AlwaysDeny}[mode]() if mode in ("AlwaysAllow", "AlwaysDeny")
                         else NodeAuthorizer(self.graph) if mode == "Node" else RBACAuthorizer(self.policy))
        self.authorizer = Union(chain)
        self.node_restriction = NodeRestriction(lambda: self.registry) if "Node" in self.modes else None
        self.registry = None
        self.feed: StoreFeed | None = None
        self.guard: EscalationGuard | None = None
        self.aggregator: ClusterRoleAggregator | None = None
        self._watch_from = 0
        self._tasks: list[asyncio.Task] = []

    def strategies(self, overrides: Mapping[str, Callable] | None = None) -> dict:
        """``overrides`` plus the RBAC kinds' strategy (escalation checks, the index kept
        current as their writes commit) and, with the Node mode, NodeRestriction admission in
        front of the Pod, Node and Lease strategies (as kubeadm and k3s enable it with Node)."""
        from kubesvc.apiserver.registry.certificates import CSRStrategy
        from kubesvc.apiserver.registry.rbac import RBACStrategy
        from kubesvc.apiserver.registry.strategy import strategy_for

        merged = dict(overrides or {})
        for kind in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"):
            merged[kind] = lambda info: RBACStrategy(info, self)
        # CertificateApproval / CertificateSigning admission ask this chain about signers
        merged.setdefault("CertificateSigningRequest", lambda info: CSRStrategy(info, self.authorizer))
        if self.node_restriction is not None:
            for kind in RESTRICTED_KINDS:
                merged[kind] = self.node_restriction.wrap(merged.get(kind) or strategy_for)
        return merged

    def admit_token_requests(self, handlers: dict) -> None:
        """NodeRestriction in front of the ``serviceaccounts/token`` handler, if there is one."""
        key = ("", "serviceaccounts/token")
        if self.node_restriction is not None and key in handlers:
            handlers[key] = self.node_restriction.wrap_token_requests(handlers[key])

    async def attach(self, registry) -> None:
        """Load the views from ``registry``'s store, then reconcile the default policy and
        aggregate the ClusterRoles (all done before the apiserver serves)."""
        self.registry = registry
        kinds: list[KindInfo] = [registry.store(RBAC_GROUP, r).info for r in RBAC_RESOURCES] + [registry.store("", "pods").info]
        self.feed = StoreFeed(registry.backend, kinds, self._apply)
        self.guard = EscalationGuard(self.authorizer, self.policy, self._get_role)
        self.aggregator = ClusterRoleAggregator(registry)
        self._watch_from = await self.feed.load()
        await ensure_bootstrap_policy(registry)
        await self.aggregator.sync()

    def _apply(self, info: KindInfo, namespace: str, name: str, obj: dict | None) -> None:
        if info.group == RBAC_GROUP:
            self.policy.apply(info.kind, namespace, name, obj)
            if info.kind == "ClusterRole" and self.aggregator is not None:
                self.aggregator.kick()
        elif info.kind == "Pod":
            self.graph.apply(namespace, name, obj)

    async def _get_role(self, kind: str, namespace: str, name: str) -> dict:
        if kind == "Role":
            return await self.registry.store(RBAC_GROUP, "roles").get(namespace, name)
        return await self.registry.store(RBAC_GROUP, "clusterroles").get(None, name)

    def start(self) -> None:
        """Follow the store from where :meth:`attach` read it; run the aggregation loop."""
        self.feed.start(self._watch_from)
        self._tasks = [asyncio.create_task(self.aggregator.run())]

    async def stop(self) -> None:
        if self.feed is not None:
            await self.feed.stop()
        await cancel_and_wait(self._tasks, raise_errors=True)
