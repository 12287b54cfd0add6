"""NamespaceLifecycle admission: the system namespaces cannot be deleted, and nothing is created
in a namespace that is going away.

Upstream: ``k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle/admission.go``, on in
every kube-apiserver (identity.md §8.1).

* **Immortal namespaces** are ``default``, ``kube-system`` and ``kube-public``
  (``kube-node-lease`` is not). Deleting one, dry run or not, is a 403 whose details name the
  namespace: ``namespaces "kube-system" is forbidden: this namespace may not be deleted``.
* **Creating in a terminating namespace** is a 403 naming the new object (its name, else its
  generateName, else ``Unknown``: admission runs before a name is generated):
  ``services "web" is forbidden: unable to create new content in namespace demo because it is
  being terminated``, with the extra cause ``{"reason": "NamespaceTerminating", "message":
  "namespace demo is being terminated", "field": "metadata.namespace"}`` that controllers
  (the ServiceAccount and root-CA publishers) use to give up quietly. Creating in a namespace
  that does not exist is the NotFound of the namespace itself (``namespaces "demo" not found``).
  The registry checks the namespace as it creates (``Store._check_namespace``), with
  :func:`terminating` for the words.

The system namespaces themselves are kept by the apiserver's ``SystemNamespaces`` loop
(``kubernetes_service.py``), as upstream's system-namespaces controller keeps them.
"""

from __future__ import annotations

from typing import Callable, Mapping

from kubesvc.api import errors
from kubesvc.api.errors import StatusError
from kubesvc.api.scheme import KindInfo
from kubesvc.apiserver.admission.strategy import DELETE, admitted, object_name

IMMORTAL_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})


def refuse_delete(namespace: str) -> StatusError | None:
    """The 403 for deleting ``namespace``, None when it may go."""
    if namespace not in IMMORTAL_NAMESPACES:
        return None
    return errors.forbidden("namespaces", namespace, "", "this namespace may not be deleted")


def terminating(info: KindInfo, obj: dict | None, namespace: str) -> StatusError:
    """The 403 for creating ``obj`` in ``namespace`` while it terminates."""
    why = f"unable to create new content in namespace {namespace} because it is being terminated"
    error = errors.forbidden(info.resource, object_name(obj), info.group, why)
    error.details.setdefault("causes", []).append(
        {"reason": "NamespaceTerminating", "message": f"namespace {namespace} is being terminated", "field": "metadata.namespace"})
    return error


class NamespaceLifecycle:
    """The plugin: in front of the Namespace strategy, it refuses deleting the immortal ones."""

    async def admit(self, info: KindInfo, operation: str, subresource: str, new: dict | None, old: dict | None) -> None:
        if info.kind == "Namespace" and operation == DELETE:
            refused = refuse_delete(((old or {}).get("metadata") or {}).get("name", ""))
            if refused is not None:
                raise refused

    def strategies(self, overrides: Mapping[str, Callable] | None = None) -> dict:
        """``overrides`` with the Namespace strategy wrapped."""
        from kubesvc.apiserver.registry.strategy import strategy_for

        merged = dict(overrides or {})
        merged["Namespace"] = admitted(merged.get("Namespace") or strategy_for, self)
        return merged
