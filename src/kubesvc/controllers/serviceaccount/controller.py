"""kube-controller-manager's ``serviceaccount-controller``
(pkg/controller/serviceaccount/serviceaccounts_controller.go): every active namespace has the
ServiceAccount ``default``, which Pods run as unless they name another.

* Namespaces added or updated, and ServiceAccounts deleted, enqueue the namespace; nothing
  else does (a ServiceAccount that exists is never touched).
* A sync of a namespace that is gone or not ``Active`` does nothing; otherwise each
  ServiceAccount to ensure that the cache does not hold is created with nothing but its name.
  AlreadyExists is success; a refusal because the namespace is terminating is ignored.

So deleting ``default`` brings it back at once (with a new uid: tokens of the old one stop
working), and a new namespace gets one within moments of its creation.
"""

from __future__ import annotations

import logging

from kubesvc.client.informer import Informer
from kubesvc.client.rest import ApiError, Resource, RestClient, is_already_exists, is_namespace_terminating
from kubesvc.client.workqueue import WorkQueue
from kubesvc.controllers.runtime import namespace_is_active, run_workers
from kubesvc.util.clock import Clock, RealClock

log = logging.getLogger("kubesvc.controllers.serviceaccount")

SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", True, "ServiceAccount")
DEFAULT_SERVICE_ACCOUNTS = ("default",)


def missing(wanted: tuple[str, ...], existing: set[str]) -> list[str]:
    return [name for name in wanted if name not in existing]


class ServiceAccountsController:
    def __init__(self, client: RestClient, namespaces: Informer, service_accounts: Informer, *,
                 wanted: tuple[str, ...] = DEFAULT_SERVICE_ACCOUNTS, clock: Clock | None = None):
        self.client = client
        self.wanted = wanted
        self.queue = WorkQueue(clock=clock or RealClock())
        self._namespaces = namespaces
        self._service_accounts = service_accounts
        namespaces.add_event_handler(self._enqueue_namespace, lambda old, new: self._enqueue_namespace(new), None)
        service_accounts.add_event_handler(None, None, self._on_service_account_deleted)

    def _enqueue_namespace(self, namespace: dict) -> None:
        self.queue.add(namespace["metadata"]["name"])

    def _on_service_account_deleted(self, service_account: dict) -> None:
        self.queue.add(service_account["metadata"].get("namespace", ""))

    async def run(self) -> None:
        await self._namespaces.wait_for_sync()
        await self._service_accounts.wait_for_sync()
        await run_workers("serviceaccount-controller", self.queue, self.sync, 1)

    async def sync(self, namespace_name: str) -> None:
        namespace = self._namespaces.indexer.get(namespace_name)
        if not namespace_is_active(namespace):
            return
        existing = {sa["metadata"]["name"] for sa in self._service_accounts.indexer.by_index("namespace", namespace_name)}
        failures = []
        for name in missing(self.wanted, existing):
            try:
                await self.client.resource(SERVICEACCOUNTS).create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
                                                                  namespace_name)
                log.info("created ServiceAccount %s/%s", namespace_name, name)
            except ApiError as exc:
                if not is_already_exists(exc) and not is_namespace_terminating(exc):
                    failures.append(exc)
        if failures:
            raise failures[0]

