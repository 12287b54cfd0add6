"""The ServiceAccounts controller: a ``default`` ServiceAccount in every active namespace."""

from kubesvc.controllers.serviceaccount.controller import ServiceAccountsController

__all__ = ["ServiceAccountsController"]
