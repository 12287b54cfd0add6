"""Each controller's API client: kube-controller-manager's client builders
(k8s.io/controller-manager/pkg/clientbuilder; chosen in cmd/kube-controller-manager/app
``createClientBuilders``).

kube-controller-manager asks a builder for a client per controller, by the name of the
controller's ServiceAccount (``endpointslice-controller``, ``generic-garbage-collector``, ...).
Its shared informers, leader election and the builder's own calls always use the manager's
``--kubeconfig`` identity (``system:kube-controller-manager``, whose bootstrap ClusterRole may
list and watch everything, create ServiceAccounts and ``serviceaccounts/token``, but write
almost nothing else).

* ``SimpleClientBuilder`` (``--use-service-account-credentials=false``, upstream's default): the
  manager's own credentials for every controller; only the User-Agent gains ``/<name>``.
* ``ServiceAccountClientBuilder`` (upstream's ``DynamicControllerClientBuilder``, with
  ``--use-service-account-credentials``, which kubeadm and k3s set): every controller is its
  ServiceAccount in ``kube-system``, so RBAC gives it exactly its
  ``system:controller:<name>`` ClusterRole. For each name the builder

  1. gets the ServiceAccount, creating it when missing (``getOrCreateServiceAccount``; an
     error here fails the controller's start, upstream's ``ClientOrDie``);
  2. builds a client from the kubeconfig stripped of every credential
     (``restclient.AnonymousClientConfig``: no client certificate, no token, else the
     certificate would authenticate first), User-Agent ``<agent>/system:serviceaccount:kube-system:<name>``,
     with a token source consulted before each request;
  3. the source asks the TokenRequest API (``serviceaccounts/<name>/token``,
     ``expirationSeconds`` 3600, audiences left to the apiserver's default) for a token the
     first time one is needed, each attempt also re-ensuring the ServiceAccount, 4 attempts
     0.5 s, 1 s, 2 s apart; failing that, ``failed to get token for kube-system/<name>:
     timed out waiting for the condition``;
  4. keeps the token until 80 % of its lifetime has passed (leeway 20 %; the lifetime is
     ``status.expirationTimestamp`` minus now, at least 10 minutes in case of clock skew), then
     fetches the next one on the next request (client-go's caching token source). A failed
     renewal keeps the current token (``Unable to rotate token``) and is tried again on the
     following request. A 401 answer drops the token it refused, so a token invalidated early
     (its ServiceAccount deleted and re-created) is replaced on the next request.

A running watch keeps the connection, and so the token, it started with, as upstream.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from kubesvc.serving.user import service_account_user
from kubesvc.client.kubeconfig import ClientConfig
from kubesvc.client.rest import NAMESPACES, ApiError, ClientError, RestClient, is_already_exists, is_not_found
from kubesvc.controllers.serviceaccount.controller import SERVICEACCOUNTS
from kubesvc.util.clock import Clock, RealClock
from kubesvc.util.golang import parse_rfc3339

log = logging.getLogger("kubesvc.controllers.clientbuilder")

CONTROLLER_NAMESPACE = "kube-system"  # metav1.NamespaceSystem
DEFAULT_EXPIRATION_SECONDS = 3600  # defaultExpirationSeconds
DEFAULT_LEEWAY_PERCENT = 20  # defaultLeewayPercent: rotate with 20 % of the lifetime left
MIN_TOKEN_LIFETIME = timedelta(minutes=10)  # a shorter lifetime is clock skew: pinned to this
TOKEN_RETRY_DELAYS = (0.5, 1.0, 2.0)  # wait.Backoff{Duration: 500ms, Factor: 2, Steps: 4}


class TokenUnavailable(ClientError):
    """No token could be had for a ServiceAccount (and none is cached)."""


def anonymous_config(config: ClientConfig) -> ClientConfig:
    """The connection without its credentials (``restclient.AnonymousClientConfig``): server
    and how to trust it only."""
    return dataclasses.replace(config, token=None, client_cert_pem=None, client_key_pem=None)


def refresh_time(now: datetime, expiration: datetime, leeway_percent: int = DEFAULT_LEEWAY_PERCENT) -> datetime:
    """When a token that expires at ``expiration``, received at ``now``, is to be replaced
    (``tokenSourceImpl.Token``'s ``Expiry``)."""
    lifetime = max(expiration - now, MIN_TOKEN_LIFETIME)
    return now + lifetime - lifetime * leeway_percent / 100


async def get_or_create_service_account(client: RestClient, namespace: str, name: str) -> dict:
    """The ServiceAccount, created when missing (its namespace too, when that is missing and the
    caller may create it; failing that is only logged, as upstream)."""
    service_accounts = client.resource(SERVICEACCOUNTS)
    try:
        return await service_accounts.get(name, namespace)
    except ApiError as err:
        if not is_not_found(err):
            raise
    try:
        await client.resource(NAMESPACES).get(namespace)
    except ApiError as err:
        if is_not_found(err):
            try:
                await client.resource(NAMESPACES).create({"metadata": {"name": namespace}})
            except ApiError as create_err:
                if not is_already_exists(create_err):
                    log.info('create non-exist namespace namespace="%s" error="%s"', namespace, create_err)
    try:
        return await service_accounts.create({"metadata": {"namespace": namespace, "name": name}})
    except ApiError as err:
        if not is_already_exists(err):
            raise
        return await service_accounts.get(name, namespace)  # raced with another creator


@dataclasses.dataclass(frozen=True)
class _Token:
    value: str
    refresh_at: datetime


class ServiceAccountTokenSource:
    """Bearer tokens of one ServiceAccount from the TokenRequest API, cached until 80 % of their
    lifetime (``tokenSourceImpl`` behind client-go's ``cachingTokenSource``)."""

    def __init__(self, client: RestClient, namespace: str, name: str, *, expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS,
                 leeway_percent: int = DEFAULT_LEEWAY_PERCENT, clock: Clock | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.client = client  # the manager's own identity: it may create ServiceAccounts and their tokens
        self.namespace = namespace
        self.name = name
        self.expiration_seconds = expiration_seconds
        self.leeway_percent = leeway_percent
        self.clock = clock or RealClock()
        self._sleep = sleep
        self._current: _Token | None = None
        self._lock = asyncio.Lock()
        self.requested = 0  # TokenRequests answered (each a new token)

    async def token(self) -> str:
        current = self._current
        if current is not None and self.clock.now() < current.refresh_at:
            return current.value
        async with self._lock:  # one renewal at a time; the others wait for its token
            current = self._current
            if current is not None and self.clock.now() < current.refresh_at:
                return current.value
            try:
                self._current = await self._request()
            except TokenUnavailable as err:
                if current is None:
                    raise
                log.error("Unable to rotate token: %s", err)
                return current.value
            return self._current.value

    def reset(self, token: str) -> None:
        if self._current is not None and self._current.value == token:
            self._current = None

    async def _request(self) -> _Token:
        where = f"{self.namespace}/{self.name}"
        for delay in (*TOKEN_RETRY_DELAYS, None):
            try:
                await get_or_create_service_account(self.client, self.namespace, self.name)
            except ClientError as err:
                log.info('get or create service account failed namespace="%s" serviceAccountName="%s" error="%s"', self.namespace, self.name, err)
            else:
                try:
                    answer = await self.client.request("POST", SERVICEACCOUNTS.path(self.namespace, self.name, "token"), body={
                        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                        "spec": {"expirationSeconds": self.expiration_seconds}})
                    return self._received(answer)
                except ClientError as err:
                    log.info('get token failed namespace="%s" serviceAccountName="%s" error="%s"', self.namespace, self.name, err)
            if delay is not None:
                await self._sleep(delay)
        raise TokenUnavailable(f"failed to get token for {where}: timed out waiting for the condition")

    def _received(self, answer: dict) -> _Token:
        status = answer.get("status") or {}
        if not status.get("token") or not status.get("expirationTimestamp"):
            raise TokenUnavailable(f"failed to get token for {self.namespace}/{self.name}: the TokenRequest answer holds no token")
        self.requested += 1
        expiration = parse_rfc3339(status["expirationTimestamp"])
        return _Token(status["token"], refresh_time(self.clock.now(), expiration, self.leeway_percent))


class SimpleClientBuilder:
    """Every controller with the manager's own credentials (``SimpleControllerClientBuilder``)."""

    def __init__(self, root: RestClient):
        self.root = root
        self._clients: dict[str, RestClient] = {}

    async def client(self, name: str) -> RestClient:
        if name not in self._clients:
            self._clients[name] = RestClient(self.root.config, field_manager=self.root.field_manager, user_agent=f"{self.root.user_agent}/{name}")
        return self._clients[name]

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()


class ServiceAccountClientBuilder(SimpleClientBuilder):
    """Every controller as its ServiceAccount in ``namespace``, with renewed TokenRequest tokens
    (``DynamicControllerClientBuilder``; see the module docstring)."""

    def __init__(self, root: RestClient, namespace: str = CONTROLLER_NAMESPACE, *, expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS,
                 leeway_percent: int = DEFAULT_LEEWAY_PERCENT, clock: Clock | None = None):
        super().__init__(root)
        self.namespace = namespace
        self.expiration_seconds = expiration_seconds
        self.leeway_percent = leeway_percent
        self.clock = clock or RealClock()
        self.token_sources: dict[str, ServiceAccountTokenSource] = {}

    async def client(self, name: str) -> RestClient:
        await get_or_create_service_account(self.root, self.namespace, name)
        if name not in self._clients:
            source = ServiceAccountTokenSource(self.root, self.namespace, name, expiration_seconds=self.expiration_seconds,
                                               leeway_percent=self.leeway_percent, clock=self.clock)
            self.token_sources[name] = source
            self._clients[name] = RestClient(anonymous_config(self.root.config), field_manager=self.root.field_manager,
                                             user_agent=f"{self.root.user_agent}/{service_account_user(self.namespace, name)}",
                                             token_source=source)
        return self._clients[name]
