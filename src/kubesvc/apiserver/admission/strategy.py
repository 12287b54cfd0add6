"""Admission plugins in front of a registry strategy.

Upstream runs admission as a chain between authorization and storage: each plugin sees the
operation (``CREATE``, ``UPDATE``, ``DELETE``), the subresource, the new object and the old
one, and may change the new object (mutating) or refuse the write (validating)
(k8s.io/apiserver pkg/admission ``Attributes``; pkg/registry/rest ``BeforeCreate``/
``BeforeUpdate``/``BeforeDelete`` call into it).

kubesvc's registry has no separate admission stage: each write already passes its kind's
strategy (``begin_create``, ``begin_update``, ``begin_delete``) at the point where upstream
admits it, so a plugin is put in front of a kind's strategy with :func:`admitted`. A
graceful delete here is an update that sets ``deletionTimestamp``; it is admitted as the
DELETE it is (the old object, no new one), as upstream admits the DELETE request itself.

Wrapping is composable: the last plugin wrapped runs first (upstream orders its plugins the
same way: ``ServiceAccount`` before ``NodeRestriction``).
"""

from __future__ import annotations

import copy
from typing import Callable, Protocol

from kubesvc.api.scheme import KindInfo

CREATE, UPDATE, DELETE = "CREATE", "UPDATE", "DELETE"


class Plugin(Protocol):
    async def admit(self, info: KindInfo, operation: str, subresource: str, new: dict | None, old: dict | None) -> None:
        """Refuse the write (a StatusError), or change ``new`` in place, or do nothing. A
        coroutine: a plugin may read the store (a ServiceAccount, a Node)."""


StrategyFactory = Callable[[KindInfo], object]


def admitted(base: StrategyFactory, plugin: Plugin) -> StrategyFactory:
    """A strategy factory whose writes pass ``plugin`` first."""
    return lambda info: AdmittedStrategy(base(info), plugin)


def object_name(obj: dict | None) -> str:
    """The name upstream's ``admission.NewForbidden`` gives a refused object."""
    meta = (obj or {}).get("metadata") or {}
    return meta.get("name") or meta.get("generateName") or "Unknown"


def marks_deleted(new: dict, old: dict) -> bool:
    """An update that starts a graceful delete (or one held by finalizers)."""
    return bool((new.get("metadata") or {}).get("deletionTimestamp")) and not (old.get("metadata") or {}).get("deletionTimestamp")


class AdmittedStrategy:
    """A strategy with one admission plugin in front of its writes; everything else is the
    inner strategy's."""

    def __init__(self, inner, plugin: Plugin):
        self._inner = inner
        self._plugin = plugin

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    async def begin_create(self, obj: dict, dry_run: bool):
        await self._plugin.admit(self._inner.info, CREATE, "", obj, None)
        return await self._inner.begin_create(obj, dry_run)

    async def begin_update(self, new: dict, old: dict, dry_run: bool, subresource: str):
        if marks_deleted(new, old):
            await self._plugin.admit(self._inner.info, DELETE, "", None, copy.deepcopy(old))
        else:
            await self._plugin.admit(self._inner.info, UPDATE, subresource, new, old)
        return await self._inner.begin_update(new, old, dry_run, subresource)

    async def begin_delete(self, obj: dict):
        await self._plugin.admit(self._inner.info, DELETE, "", None, obj)
        return await self._inner.begin_delete(obj)

    async def admit_subresource_create(self, subresource: str, obj: dict, parent: dict) -> None:
        """A create of a subresource that writes no object of its own (``pods/eviction``):
        admitted as upstream admits that create, ``obj`` the posted body and ``parent`` the
        object it names (as the old object), before the subresource's REST code writes
        anything."""
        await self._plugin.admit(self._inner.info, CREATE, subresource, obj, parent)
        inner = getattr(self._inner, "admit_subresource_create", None)
        if inner is not None:
            await inner(subresource, obj, parent)

    async def admit_delete(self, obj: dict) -> None:
        """A dry-run DELETE: admitted as a real one is (upstream admits dry runs), nothing written."""
        await self._plugin.admit(self._inner.info, DELETE, "", None, obj)
        inner = getattr(self._inner, "admit_delete", None)
        if inner is not None:
            await inner(obj)
