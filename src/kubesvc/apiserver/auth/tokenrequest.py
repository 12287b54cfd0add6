"""``POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token``: a TokenRequest in, a signed
ServiceAccount token out (pkg/registry/core/serviceaccount/storage/token.go ``TokenREST``;
identity.md §1.5 "TokenRequest API"). ``kubectl create token NAME [--duration]
[--audience]... [--bound-object-kind Pod --bound-object-name P]`` and the node agent's projected
volumes use it.

1. ``metadata.name``/``namespace``, when given, must be the ServiceAccount's (422);
2. the ServiceAccount must exist (404);
3. ``spec.audiences`` defaults to the API audiences, ``spec.expirationSeconds`` to 3600, and
   must be 600 s (``may not specify a duration less than 10 minutes``) to 2^32 s (422);
4. ``spec.boundObjectRef`` (core group only) names a Pod running as this ServiceAccount
   (400 ``cannot bind token for serviceaccount "x" to pod running with different
   serviceaccount name.``; the token then also names the Pod's node), a Secret or a Node,
   which must exist (404) and carry the given uid (409); another kind is a 400
   ``cannot bind token to object of type <group>/<version>, Kind=<kind>``;
5. ``--service-account-max-token-expiration`` shortens longer requests;
6. a Pod-bound request for exactly 3607 s with API audiences (what projected volumes ask) gets
   a token that lives a year but carries ``warnafter`` at 3607 s, while the answer still says
   3607 s (``--service-account-extend-token-expiration``, default on), so a client that fails
   to refresh keeps working while the apiserver can count stale tokens.

The answer is the request with name, namespace and ``creationTimestamp`` filled in, the
defaulted spec, and ``status: {token, expirationTimestamp}`` (now + the granted seconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from kubesvc.api import errors
from kubesvc.api.errors import FieldError, StatusError
from kubesvc.api.validation_meta import parse_group_version
from kubesvc.apiserver.auth.options import ServiceAccountConfig
from kubesvc.apiserver.auth.serviceaccount import TokenGenerator, bound_claims
from kubesvc.util.clock import Clock
from kubesvc.util.golang import rfc3339

KIND = "TokenRequest"
GROUP = "authentication.k8s.io"
DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 600
MAX_EXPIRATION_SECONDS = 1 << 32
WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS = 3607  # 3600 + 7, what the ServiceAccount admission plugin asks
EXPIRATION_EXTENSION_SECONDS = 24 * 365 * 3600


def validate_expiration(seconds: int) -> list[FieldError]:
    """``ValidateTokenRequest``."""
    problems = []
    if seconds < MIN_EXPIRATION_SECONDS:
        problems.append(errors.invalid_value("spec.expirationSeconds", seconds, "may not specify a duration less than 10 minutes"))
    if seconds > MAX_EXPIRATION_SECONDS:
        problems.append(errors.invalid_value("spec.expirationSeconds", seconds, "may not specify a duration larger than 2^32 seconds"))
    return problems


def group_version_kind(api_version: str, kind: str) -> tuple[str, str, str]:
    """``schema.FromAPIVersionAndKind``: "v1" is the core group, "g/v" a named one; what
    does not parse leaves only the kind."""
    group, version = parse_group_version(api_version) or ("", "")
    return group, version, kind


@dataclass(frozen=True)
class Lifetime:
    granted_seconds: int  # spec.expirationSeconds of the answer, and its expirationTimestamp
    token_seconds: int  # the token's exp - iat
    warn_after_seconds: int = 0
    warning: str = ""


def token_lifetime(requested: int, *, max_seconds: int, extend: bool, pod_bound: bool, audiences: list[str],
                   api_audiences: tuple[str, ...]) -> Lifetime:
    """Steps 5 and 6 of the module docstring."""
    warning = ""
    if max_seconds > 0 and requested > max_seconds:
        warning = f"requested expiration of {requested} seconds shortened to {max_seconds} seconds"
        requested = max_seconds
    if extend and pod_bound and requested == WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS and set(audiences) <= set(api_audiences):
        return Lifetime(requested, EXPIRATION_EXTENSION_SECONDS, requested, warning)
    return Lifetime(requested, requested, 0, warning)


async def _get(registry, resource: str, namespace: str | None, name: str) -> dict:
    store = registry.store("", resource)
    if store is None:
        raise errors.not_found(resource, name)
    return await store.get(namespace, name)


class TokenRequests:
    """The ``serviceaccounts/token`` handler; ``create`` is the whole decision, synchronous."""

    def __init__(self, registry, config: ServiceAccountConfig, clock: Clock):
        self.registry = registry
        self.config = config
        self.generator = TokenGenerator(config.issuer, config.signing_key)
        self.clock = clock

    async def handle(self, request, create) -> dict:
        answer, warning = await self.create(create.namespace or "", create.name or "", create.body)
        if warning:
            request.setdefault("warnings", []).append(warning)
        return answer

    async def create(self, namespace: str, name: str, body: dict, now: datetime | None = None) -> tuple[dict, str]:
        """(the answered TokenRequest without kind/apiVersion, a warning or "")."""
        meta = dict(body.get("metadata") or {})
        if meta.get("name") and meta["name"] != name:
            raise errors.invalid(KIND, name, [errors.invalid_value("metadata.name", meta["name"], "must match the service account name if specified")], GROUP)
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.invalid(KIND, name, [errors.invalid_value("metadata.namespace", meta["namespace"],
                                                                   "must match the service account namespace if specified")], GROUP)
        service_account = await _get(self.registry, "serviceaccounts", namespace, name)
        spec = dict(body.get("spec") or {})
        audiences = list(spec.get("audiences") or self.config.api_audiences)
        spec["audiences"] = audiences
        requested = spec.get("expirationSeconds")
        requested = DEFAULT_EXPIRATION_SECONDS if requested is None else int(requested)
        spec["expirationSeconds"] = requested
        now = now or self.clock.now()
        meta["name"] = meta.get("name") or name
        meta["namespace"] = meta.get("namespace") or namespace
        meta["creationTimestamp"] = rfc3339(now)
        problems = validate_expiration(requested)
        if problems:
            raise errors.invalid(KIND, "", problems, GROUP)
        bound = await self._bound_objects(namespace, name, spec.get("boundObjectRef"))
        lifetime = token_lifetime(requested, max_seconds=self.config.max_expiration_seconds, extend=self.config.extend_expiration,
                                  pod_bound=bound.get("pod") is not None, audiences=audiences, api_audiences=self.config.api_audiences)
        spec["expirationSeconds"] = lifetime.granted_seconds
        claims = bound_claims(service_account, audiences, lifetime.token_seconds, now, warn_after_seconds=lifetime.warn_after_seconds, **bound)
        token = self.generator.generate(claims)  # RS256 with RSA 2048, as upstream's
        status = {"token": token, "expirationTimestamp": rfc3339(now + timedelta(seconds=lifetime.granted_seconds))}
        return {"metadata": meta, "spec": spec, "status": status}, lifetime.warning

    async def _bound_objects(self, namespace: str, service_account: str, ref: dict | None) -> dict:
        if not ref:
            return {}
        group, version, kind = group_version_kind(ref.get("apiVersion") or "", ref.get("kind") or "")
        ref_name, ref_uid = ref.get("name") or "", ref.get("uid") or ""
        bound: dict = {}
        if group == "" and kind == "Pod":
            pod = await _get(self.registry, "pods", namespace, ref_name)
            if (pod.get("spec") or {}).get("serviceAccountName", "default") != service_account:
                raise errors.bad_request(f'cannot bind token for serviceaccount "{service_account}" to pod running with different serviceaccount name.')
            bound["pod"] = pod
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name:
                try:
                    bound["node"] = await _get(self.registry, "nodes", None, node_name)
                except StatusError as exc:
                    if exc.code != 404:
                        raise
                    bound["node"] = {"metadata": {"name": node_name}}  # named without a uid, as upstream
            uid = pod["metadata"].get("uid", "")
        elif group == "" and kind == "Node":
            bound["node"] = await _get(self.registry, "nodes", None, ref_name)
            uid = bound["node"]["metadata"].get("uid", "")
        elif group == "" and kind == "Secret":
            bound["secret"] = await _get(self.registry, "secrets", namespace, ref_name)
            uid = bound["secret"]["metadata"].get("uid", "")
        else:
            raise errors.bad_request(f"cannot bind token to object of type {group}/{version}, Kind={kind}")
        if ref_uid and ref_uid != uid:
            raise errors.conflict(kind, ref_name, why=f"the UID in the bound object reference ({ref_uid}) does not match the UID in record. "
                                                      "The object might have been deleted and then recreated")
        return bound
