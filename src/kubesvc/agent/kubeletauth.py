"""Who may call a node agent, decided as kubelet decides it (identity.md §5.2; upstream
cmd/kubelet/app/auth.go, pkg/kubelet/server/auth.go and server.go ``InstallAuthFilter``).

**TLS.** The agent serves HTTPS only, with its serving certificate (``--tls-cert-file`` /
``--tls-private-key-file``; under ``kubesvc up`` one from the cluster CA with CN
``system:node:<name>`` and the node's IPs). Without one it makes a self-signed certificate in
``<data-dir>/pki`` as kubelet does in its ``--cert-dir``; the apiserver will not trust it.

**Authentication** (kubelet's config defaults: ``anonymous.enabled=false``): a client
certificate from a CA of ``--client-ca-file``, mapped to a user as the apiserver maps one
(``serving/x509.py``). Anything else (no certificate, a bearer token: this agent has no
TokenReview webhook) is 401 ``Unauthorized``. Without ``--client-ca-file`` nobody gets in.

**Authorization** (``authorization.mode=Webhook``): every request becomes the attributes
kubelet builds (``nodeAuthorizerAttributesGetter``): verb from the method (GET ``get``, POST
``create``, PUT ``update``, PATCH ``patch``, DELETE ``delete``), resource ``nodes``, this node's
name, and a subresource from the path (``/stats`` stats, ``/metrics`` metrics, ``/logs`` log,
``/checkpoint`` checkpoint, everything else, ``/containerLogs`` included, proxy). The agent
asks the apiserver with a ``SubjectAccessReview`` under its own node identity and caches the
answer (allowed 5 minutes, denied 30 seconds: ``cacheAuthorizedTTL``/``cacheUnauthorizedTTL``).
A denial is 403 ``Forbidden (user=U, verb=V, resource=nodes, subresource(s)=[S])``; a review
that fails is 500 ``Authorization error (user=U, verb=V, resource=nodes, subresource=S)``.

The apiserver's own kubelet client (CN ``kube-apiserver-kubelet-client``) is allowed by the
``system:kubelet-api-admin`` ClusterRole bound to it, as kubeadm binds it. When the apiserver
cannot review access for the agent (404: it serves no ``subjectaccessreviews``; 403: the
node may not create them) the agent falls back to allowing exactly that identity (and
``system:masters``) and nobody else: a narrower rule than the webhook, never a wider one. The
review is tried again once the cached answer expires.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from kubesvc.serving.user import SYSTEM_PRIVILEGED_GROUP, UserInfo
from kubesvc.serving.x509 import request_client_certificates
from kubesvc.client.rest import ApiError, ClientError, RestClient
from kubesvc.util.clock import Clock, RealClock

log = logging.getLogger("kubesvc.agent.auth")

SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
CACHE_AUTHORIZED_TTL = 300.0
CACHE_UNAUTHORIZED_TTL = 30.0
APISERVER_KUBELET_CLIENT = "kube-apiserver-kubelet-client"
_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_SUBRESOURCES = (("/stats", "stats"), ("/metrics", "metrics"), ("/logs", "log"), ("/checkpoint", "checkpoint"))


@dataclass(frozen=True)
class NodeRequest:
    """The authorization attributes of one request to the agent."""

    verb: str
    subresource: str
    node: str


def node_request(method: str, path: str, node: str) -> NodeRequest:
    """kubelet's ``GetRequestAttributes``: verb from the method, subresource from the path."""
    subresource = "proxy"
    for prefix, name in _SUBRESOURCES:
        if path == prefix or path.startswith(prefix + "/"):
            subresource = name
            break
    return NodeRequest(_VERBS.get(method.upper(), ""), subresource, node)


def forbidden_text(user: UserInfo, request: NodeRequest) -> str:
    return f"Forbidden (user={user.name}, verb={request.verb}, resource=nodes, subresource(s)=[{request.subresource}])\n"


def authorization_error_text(user: UserInfo, request: NodeRequest) -> str:
    return f"Authorization error (user={user.name}, verb={request.verb}, resource=nodes, subresource={request.subresource})"


def review_body(user: UserInfo, request: NodeRequest) -> dict:
    """The SubjectAccessReview kubelet's webhook authorizer sends."""
    spec: dict = {"user": user.name, "resourceAttributes": {"verb": request.verb, "version": "v1", "resource": "nodes",
                                                            "subresource": request.subresource, "name": request.node}}
    if user.groups:
        spec["groups"] = list(user.groups)
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra.items()}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def fallback_allows(user: UserInfo) -> bool:
    """Who may call the agent when the apiserver cannot review access (see the docstring)."""
    return user.name == APISERVER_KUBELET_CLIENT or SYSTEM_PRIVILEGED_GROUP in user.groups


class AuthorizationFailed(Exception):
    """The access review could not be made (the apiserver refused or was unreachable)."""


class Authorizer(Protocol):
    async def allowed(self, user: UserInfo, request: NodeRequest) -> bool: ...


class SubjectAccessReviewAuthorizer:
    """kubelet's Webhook authorization mode, with its decision cache."""

    def __init__(self, client: RestClient, *, authorized_ttl: float = CACHE_AUTHORIZED_TTL,
                 unauthorized_ttl: float = CACHE_UNAUTHORIZED_TTL, clock: Clock | None = None):
        self._client = client
        self._ttls = (unauthorized_ttl, authorized_ttl)
        self._clock = clock or RealClock()
        self._cache: dict[tuple, tuple[bool, float]] = {}
        self._warned = False

    async def allowed(self, user: UserInfo, request: NodeRequest) -> bool:
        key = (user.name, user.uid, user.groups, tuple(sorted((k, v) for k, v in user.extra.items() if k != "authentication.kubernetes.io/credential-id")), request)
        now = self._clock.monotonic()
        hit = self._cache.get(key)
        if hit is not None and hit[1] > now:
            return hit[0]
        decision = await self._review(user, request)
        if len(self._cache) > 4096:
            self._cache = {k: v for k, v in self._cache.items() if v[1] > now}
        self._cache[key] = (decision, now + self._ttls[decision])
        return decision

    async def _review(self, user: UserInfo, request: NodeRequest) -> bool:
        try:
            answer = await self._client.create(SUBJECT_ACCESS_REVIEWS, review_body(user, request))
        except ApiError as err:
            if err.status in (403, 404):
                if not self._warned:
                    log.warning("cannot review access (%s): only %s and %s may call this agent", err, APISERVER_KUBELET_CLIENT,
                                SYSTEM_PRIVILEGED_GROUP)
                    self._warned = True
                return fallback_allows(user)
            raise AuthorizationFailed(str(err)) from None
        except ClientError as err:
            raise AuthorizationFailed(str(err)) from None
        return bool((answer.get("status") or {}).get("allowed"))


# ---- TLS ------------------------------------------------------------------------------------------


def serving_context(cert_file: Path, key_file: Path, client_ca_file: Path | None) -> ssl.SSLContext:
    """The agent's TLS server context: its certificate, and client certificates asked for
    (verified against ``client_ca_file``) when it is given."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert_file), str(key_file))
    if client_ca_file is not None:
        request_client_certificates(context, client_ca_file)
    return context


def self_signed_serving_pair(cert_dir: Path, node_name: str, node_ips: list[str]) -> tuple[Path, Path]:
    """kubelet's fallback without ``--tls-cert-file``: ``<cert-dir>/kubelet.crt`` self-signed
    for ``<hostname>@<unix time>`` with the node's name and IPs (made once, kept while its
    names match)."""
    from kubesvc.serving import pki

    cert_path, key_path = cert_dir / "kubelet.crt", cert_dir / "kubelet.key"
    spec = pki.node_serving_spec(node_name, node_ips)
    if not pki.self_signed_current(cert_path, key_path, spec):
        now = datetime.now(timezone.utc)
        pki.private_dir(cert_dir)
        pki.write_self_signed(cert_path, key_path, f"{node_name}@{int(now.timestamp())}", spec, now)
    return cert_path, key_path
