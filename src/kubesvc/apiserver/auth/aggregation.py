"""ClusterRole aggregation (upstream pkg/controller/clusterroleaggregation; identity.md §2.3).

A ClusterRole with an ``aggregationRule`` gets as ``rules`` the rules of every other
ClusterRole matching one of its ``clusterRoleSelectors``: selector by selector, matching
roles by name, each rule appended unless an equal one is already there. ``admin``, ``edit``
and ``view`` are built this way from ``system:aggregate-to-*`` and from any ClusterRole a
user labels ``rbac.authorization.k8s.io/aggregate-to-<role>: "true"``.

Upstream runs this in kube-controller-manager; kubesvc runs it inside the apiserver, woken by
every ClusterRole change it stores: ``kubesvc apiserver`` is often run alone (tests, a
control plane without the controller-manager yet), and ``edit``/``view`` granting nothing
until another process starts would make the default policy useless there. The writes go
through the store with the controller's field manager, as the controller's apply would.
"""

from __future__ import annotations

import contextlib

from kubesvc.api.errors import StatusError
from kubesvc.api.selectors import selector_from_label_selector
from kubesvc.apiserver.registry.store import ListOptions
from kubesvc.util.wakeable import WakeableLoop

FIELD_MANAGER = "clusterrole-aggregation-controller"
_MAX_PASSES = 10  # aggregation chains (view -> edit -> admin) settle in a few passes


def aggregated_rules(role: dict, cluster_roles: list[dict]) -> list[dict] | None:
    """The rules ``role`` should have, or None when it is not aggregated."""
    rule = role.get("aggregationRule")
    if not isinstance(rule, dict):
        return None
    name = (role.get("metadata") or {}).get("name")
    rules: list[dict] = []
    for selector_spec in rule.get("clusterRoleSelectors") or []:
        try:
            selector = selector_from_label_selector(selector_spec)
        except StatusError:
            continue
        matching = sorted((r for r in cluster_roles if selector.matches((r.get("metadata") or {}).get("labels"))),
                          key=lambda r: r["metadata"]["name"])
        for other in matching:
            if other["metadata"]["name"] == name:
                continue
            for candidate in other.get("rules") or []:
                if candidate not in rules:
                    rules.append(candidate)
    return rules


class ClusterRoleAggregator:
    """:meth:`sync` once at start; then :meth:`run` syncs again after every ClusterRole change
    (which calls :meth:`kick`) and every ``interval`` seconds."""

    def __init__(self, registry, interval: float = 30.0):
        self.store = registry.store("rbac.authorization.k8s.io", "clusterroles")
        self._loop = WakeableLoop(self.sync, interval, "clusterrole aggregation")

    def kick(self) -> None:
        self._loop.kick()

    async def run(self) -> None:
        await self._loop.run()

    async def sync(self) -> int:
        """Aggregate until nothing changes; returns how many roles were written."""
        written = 0
        for _ in range(_MAX_PASSES):
            roles, _ = await self.store.list(None, ListOptions())
            changed = 0
            for role in roles:
                wanted = aggregated_rules(role, roles)
                if wanted is None or wanted == (role.get("rules") or []):
                    continue
                with contextlib.suppress(StatusError):  # gone or changed meanwhile: the next pass sees it
                    await self.store.guaranteed_update(None, role["metadata"]["name"], lambda current, wanted=wanted: {**current, "rules": wanted},
                                                 field_manager=FIELD_MANAGER)
                    changed += 1
            written += changed
            if not changed:
                break
        return written
