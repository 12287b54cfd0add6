"""ServiceAccount tokens: the JWTs kube-apiserver signs for ServiceAccounts and how it checks
them (pkg/serviceaccount jwt.go, claims.go, legacy.go; identity.md §1.5).

Two kinds, told apart by ``iss``:

* **bound** tokens (TokenRequest, projected volumes): ``iss`` the first
  ``--service-account-issuer``, ``sub`` ``system:serviceaccount:<ns>:<name>``, ``aud`` a list,
  ``iat``/``nbf`` now, ``exp``, ``jti`` a UUID, and the private claim ``kubernetes.io``:
  ``{namespace, serviceaccount{name,uid}}`` plus at most one of ``pod``/``secret``/``node``
  (a Pod-bound token also names the Pod's node) and ``warnafter`` for extended tokens.
* **legacy** tokens (Secrets of type ``kubernetes.io/service-account-token``): ``iss``
  ``kubernetes/serviceaccount``, flat ``kubernetes.io/serviceaccount/...`` claims, no ``exp``
  and no ``aud`` (taken as the API audiences).

Checking a token (``jwtTokenAuthenticator.AuthenticateToken``):

1. without verifying, the payload's ``iss`` must be one this authenticator accepts, else the
   token is not its business (no error: the next authenticator is asked);
2. the keys with the header's ``kid`` (all keys without one) must include one that verifies
   the signature (``invalid signature, no keys found`` when there are none);
3. the token's audiences (the API audiences when it has none) must meet the audiences asked
   for (the API audiences for a normal request);
4. bound: ``exp``/``nbf``/``iat`` with go-jose's one minute of leeway; the ServiceAccount must
   exist with the uid in the token and not have been deleted over a minute ago; a bound Pod,
   Secret or Node likewise (else ``service account token has been invalidated``).
   legacy (with ``--service-account-lookup``, default true): the Secret must exist, not be
   deleting, and hold this very token; the ServiceAccount must exist with the token's uid.

The user is ``system:serviceaccount:<ns>:<name>`` in ``system:serviceaccounts`` and
``system:serviceaccounts:<ns>``, uid the ServiceAccount's; a bound token adds the extra keys
``authentication.kubernetes.io/pod-name``/``pod-uid`` (both or neither),
``node-name``/``node-uid`` and ``credential-id`` (``JTI=<jti>``).
"""

from __future__ import annotations

import hmac
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, Sequence

from kubesvc.api.validation_config import secret_bytes
from kubesvc.util.golang import quote_strings as go_string_list
from kubesvc.apiserver.auth import jwt
from kubesvc.apiserver.auth.tokens import AuthenticationError, Response, intersect
from kubesvc.serving.user import UserInfo, service_account_groups, service_account_user, split_service_account
from kubesvc.util import golang
from kubesvc.util.clock import Clock
from kubesvc.util.golang import parse_rfc3339

LEGACY_ISSUER = "kubernetes/serviceaccount"
LEEWAY = timedelta(minutes=1)  # go-jose jwt.DefaultLeeway

POD_NAME_KEY = "authentication.kubernetes.io/pod-name"
POD_UID_KEY = "authentication.kubernetes.io/pod-uid"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
NODE_UID_KEY = "authentication.kubernetes.io/node-uid"
CREDENTIAL_ID_KEY = "authentication.kubernetes.io/credential-id"

# legacy private claims
_LEGACY_NAMESPACE = "kubernetes.io/serviceaccount/namespace"
_LEGACY_SA_NAME = "kubernetes.io/serviceaccount/service-account.name"
_LEGACY_SA_UID = "kubernetes.io/serviceaccount/service-account.uid"
_LEGACY_SECRET_NAME = "kubernetes.io/serviceaccount/secret.name"
SERVICE_ACCOUNT_TOKEN_KEY = "token"  # v1.ServiceAccountTokenKey, the Secret data key
# what a legacy token must carry, in upstream's order of checking, with the name its error uses
_LEGACY_REQUIRED_CLAIMS = (("sub", "sub"), (_LEGACY_NAMESPACE, "namespace"), (_LEGACY_SECRET_NAME, "secretName"),
                           (_LEGACY_SA_NAME, "serviceAccountName"), (_LEGACY_SA_UID, "serviceAccountUID"))


@dataclass(frozen=True)
class ServiceAccountInfo:
    namespace: str
    name: str
    uid: str
    pod_name: str = ""
    pod_uid: str = ""
    node_name: str = ""
    node_uid: str = ""
    credential_id: str = ""

    def user_info(self) -> UserInfo:
        extra: dict[str, tuple[str, ...]] = {}
        if self.pod_name and self.pod_uid:
            extra[POD_NAME_KEY] = (self.pod_name,)
            extra[POD_UID_KEY] = (self.pod_uid,)
        if self.credential_id:
            extra[CREDENTIAL_ID_KEY] = (self.credential_id,)
        if self.node_name:
            extra[NODE_NAME_KEY] = (self.node_name,)
            if self.node_uid:
                extra[NODE_UID_KEY] = (self.node_uid,)
        return UserInfo(service_account_user(self.namespace, self.name), self.uid, service_account_groups(self.namespace), extra)


class ObjectGetter(Protocol):
    """Reads of the objects a token is bound to; each returns the object, or raises
    AuthenticationError with the not-found message when it is missing."""

    async def service_account(self, namespace: str, name: str) -> dict: ...

    async def secret(self, namespace: str, name: str) -> dict: ...

    async def pod(self, namespace: str, name: str) -> dict: ...

    async def node(self, name: str) -> dict: ...


# ---- making tokens -------------------------------------------------------------------------------


def _numeric_date(moment: datetime) -> int:
    return int(moment.timestamp())


def _ref(obj: dict) -> dict:
    meta = obj.get("metadata") or {}
    return {k: v for k, v in (("name", meta.get("name", "")), ("uid", meta.get("uid", ""))) if v}


def bound_claims(service_account: dict, audiences: Sequence[str], expiration_seconds: int, now: datetime, *,
                 pod: dict | None = None, secret: dict | None = None, node: dict | None = None,
                 warn_after_seconds: int = 0, jti: str | None = None) -> dict:
    """The claims of a bound token (upstream ``token.Claims``), without ``iss``."""
    if secret is not None and (pod is not None or node is not None):
        raise ValueError("internal error, token can only be bound to one object type")
    meta = service_account["metadata"]
    kubernetes: dict = {"namespace": meta["namespace"], "serviceaccount": _ref(service_account)}
    if pod is not None:
        kubernetes["pod"] = _ref(pod)
        if node is not None:
            kubernetes["node"] = _ref(node)
    elif secret is not None:
        kubernetes["secret"] = _ref(secret)
    elif node is not None:
        kubernetes["node"] = _ref(node)
    if warn_after_seconds:
        kubernetes["warnafter"] = _numeric_date(now + timedelta(seconds=warn_after_seconds))
    return {
        "aud": list(audiences),
        "exp": _numeric_date(now + timedelta(seconds=expiration_seconds)),
        "iat": _numeric_date(now),
        "jti": jti or str(uuid.uuid4()),
        "kubernetes.io": kubernetes,
        "nbf": _numeric_date(now),
        "sub": service_account_user(meta["namespace"], meta["name"]),
    }


def legacy_claims(service_account: dict, secret_name: str) -> dict:
    """The claims of a Secret-based token (upstream ``LegacyClaims``), without ``iss``."""
    meta = service_account["metadata"]
    return {
        "sub": service_account_user(meta["namespace"], meta["name"]),
        _LEGACY_NAMESPACE: meta["namespace"],
        _LEGACY_SA_NAME: meta["name"],
        _LEGACY_SA_UID: meta.get("uid", ""),
        _LEGACY_SECRET_NAME: secret_name,
    }


class TokenGenerator:
    """Signs claims with the issuer's key (``--service-account-signing-key-file``)."""

    def __init__(self, issuer: str, private_key: jwt.PrivateKey):
        self.issuer = issuer
        self.private_key = private_key
        self._header = jwt.header_of(private_key)  # the key's id is a hash of its DER: once

    def generate(self, claims: dict) -> str:
        """Signed on the event loop, as a request's goroutine signs upstream. A worker thread
        (the cryptography package lets go of the GIL while it signs) took ~1 ms off the loop,
        but each hop back to the GIL waits for the busy loop to yield it: token requests took
        64-190 ms of server time in bench/e2e.py --deployment at 100 % machine CPU (2-6 ms signed
        on the loop)."""
        signing_input = jwt.signing_input_of({**claims, "iss": self.issuer}, self._header)
        return jwt.compact(signing_input, jwt.signature_of(signing_input, self.private_key))


# ---- checking tokens -----------------------------------------------------------------------------


def _numeric(claims: dict, name: str) -> int | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise AuthenticationError(f"json: cannot unmarshal {type(value).__name__} into Go struct field Claims.{name} of type jwt.NumericDate")
    return int(value)


def token_audiences(claims: dict) -> tuple[str, ...]:
    aud = claims.get("aud")
    if aud is None:
        return ()
    if isinstance(aud, str):
        return (aud,)
    if isinstance(aud, list) and all(isinstance(a, str) for a in aud):
        return tuple(aud)
    raise AuthenticationError("go-jose/go-jose/jwt: expected string or array value to unmarshal to Audience")


def check_times(claims: dict, now: datetime) -> None:
    """go-jose ``Claims.ValidateWithLeeway`` for nbf, exp, iat with one minute of leeway."""
    nbf, exp, iat = _numeric(claims, "nbf"), _numeric(claims, "exp"), _numeric(claims, "iat")
    ahead, behind = _numeric_date(now + LEEWAY), _numeric_date(now - LEEWAY)
    if nbf is not None and ahead < nbf:
        raise AuthenticationError("service account token is not valid yet")
    if exp is not None and behind > exp:
        raise AuthenticationError("service account token has expired")
    if iat is not None and ahead < iat:
        raise AuthenticationError("service account token is issued in the future")


def _deleted_before(obj: dict, moment: datetime) -> bool:
    stamp = (obj.get("metadata") or {}).get("deletionTimestamp")
    return bool(stamp) and parse_rfc3339(stamp) < moment


def _uid(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("uid", "")


def _str_ref(value: object) -> tuple[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise AuthenticationError("invalid kubernetes.io claim")
    name, uid = value.get("name", ""), value.get("uid", "")
    if not isinstance(name, str) or not isinstance(uid, str):
        raise AuthenticationError("invalid kubernetes.io claim")
    return name, uid


async def _check_bound(kind: str, fetch, claimed_uid: str, invalid_if_deleted_before: datetime, uid_first: bool = False) -> None:
    """The object a token is bound to must exist, not have been deleted over a minute ago, and
    have the uid in the token (upstream checks a Node's uid before its deletion)."""
    try:
        obj = await fetch()
    except AuthenticationError:
        raise AuthenticationError("service account token has been invalidated") from None
    mismatch = claimed_uid != _uid(obj)
    if mismatch and uid_first:
        raise AuthenticationError(f"{kind} UID ({_uid(obj)}) does not match service account {kind} ref claim ({claimed_uid})")
    if _deleted_before(obj, invalid_if_deleted_before):
        raise AuthenticationError("service account token has been invalidated")
    if mismatch:
        raise AuthenticationError(f"{kind} UID ({_uid(obj)}) does not match service account {kind} ref claim ({claimed_uid})")


async def validate_bound(claims: dict, getter: ObjectGetter, now: datetime) -> ServiceAccountInfo:
    """upstream ``validator.Validate`` for a signature-checked bound token."""
    check_times(claims, now)
    private = claims.get("kubernetes.io") or {}
    if not isinstance(private, dict):
        raise AuthenticationError("invalid kubernetes.io claim")
    namespace = private.get("namespace", "")
    sa_ref = _str_ref(private.get("serviceaccount") or {}) or ("", "")
    pod_ref, secret_ref, node_ref = (_str_ref(private.get(k)) for k in ("pod", "secret", "node"))
    if not isinstance(namespace, str):
        raise AuthenticationError("invalid kubernetes.io claim")
    invalid_if_deleted_before = now - LEEWAY
    service_account = await getter.service_account(namespace, sa_ref[0])
    if _deleted_before(service_account, invalid_if_deleted_before):
        raise AuthenticationError(f"service account {namespace}/{sa_ref[0]} has been deleted")
    if _uid(service_account) != sa_ref[1]:
        raise AuthenticationError(f"service account UID ({_uid(service_account)}) does not match claim ({sa_ref[1]})")
    if secret_ref is not None:
        await _check_bound("secret", lambda: getter.secret(namespace, secret_ref[0]), secret_ref[1], invalid_if_deleted_before)
    pod_name = pod_uid = ""
    if pod_ref is not None:
        await _check_bound("pod", lambda: getter.pod(namespace, pod_ref[0]), pod_ref[1], invalid_if_deleted_before)
        pod_name, pod_uid = pod_ref
    node_name = node_uid = ""
    if node_ref is not None:
        if pod_ref is None:  # a node-bound token: the node must still be there (a Pod-bound one only names it)
            await _check_bound("node", lambda: getter.node(node_ref[0]), node_ref[1], invalid_if_deleted_before, uid_first=True)
        node_name, node_uid = node_ref
    jti = claims.get("jti") or ""
    return ServiceAccountInfo(namespace, sa_ref[0], sa_ref[1], pod_name, pod_uid, node_name, node_uid,
                              f"JTI={jti}" if isinstance(jti, str) and jti else "")


async def validate_legacy(claims: dict, token: str, getter: ObjectGetter, lookup: bool) -> ServiceAccountInfo:
    """upstream ``legacyValidator.Validate`` for a signature-checked Secret-based token."""
    values = []
    for name, label in _LEGACY_REQUIRED_CLAIMS:
        value = claims.get(name, "")
        if not isinstance(value, str) or not value:
            raise AuthenticationError(f"{label} claim is missing")
        values.append(value)
    subject, namespace, secret_name, sa_name, sa_uid = values
    if split_service_account(subject) != (namespace, sa_name):
        raise AuthenticationError("sub claim is invalid")
    if lookup:
        try:
            secret = await getter.secret(namespace, secret_name)
        except AuthenticationError:
            raise AuthenticationError("Token has been invalidated") from None
        if (secret.get("metadata") or {}).get("deletionTimestamp"):
            raise AuthenticationError("Token has been invalidated")
        if not hmac.compare_digest(secret_bytes((secret.get("data") or {}).get(SERVICE_ACCOUNT_TOKEN_KEY)), token.encode()):
            raise AuthenticationError("Token does not match server's copy")
        service_account = await getter.service_account(namespace, sa_name)
        if (service_account.get("metadata") or {}).get("deletionTimestamp"):
            raise AuthenticationError(f"ServiceAccount {namespace}/{sa_name} has been deleted")
        if _uid(service_account) != sa_uid:
            raise AuthenticationError(f"ServiceAccount UID ({_uid(service_account)}) does not match claim ({sa_uid})")
    return ServiceAccountInfo(namespace, sa_name, sa_uid)


class JWTAuthenticator:
    """One of kube-apiserver's two ServiceAccount token authenticators: ``legacy`` accepts
    ``kubernetes/serviceaccount``, the other the ``--service-account-issuer`` values."""

    def __init__(self, issuers: Sequence[str], keys: Sequence[jwt.PublicKey], implicit_audiences: Sequence[str],
                 getter: ObjectGetter, clock: Clock, *, legacy: bool = False, lookup: bool = True):
        self.issuers = frozenset(issuers)
        self.keys = list(keys)
        self.keys_by_id: dict[str, list[jwt.PublicKey]] = {}
        for key in self.keys:
            self.keys_by_id.setdefault(jwt.key_id(key), []).append(key)
        self.implicit_audiences = tuple(implicit_audiences)
        self.getter = getter
        self.clock = clock
        self.legacy = legacy
        self.lookup = lookup

    async def authenticate_token(self, token: str, audiences: Sequence[str]) -> Response | None:
        if jwt.unverified_issuer(token) not in self.issuers:
            return None
        try:
            signed = jwt.parse(token)
        except jwt.JWTError:
            return None
        keys = self.keys_by_id.get(signed.kid, []) if signed.kid else self.keys
        if not keys:
            raise AuthenticationError("invalid signature, no keys found")
        errors = []
        for key in keys:
            try:
                jwt.verify(signed, key)
                break
            except jwt.JWTError as exc:
                errors.append(str(exc))
        else:
            raise AuthenticationError(golang.aggregate(errors))
        try:
            claims = signed.claims()
        except jwt.JWTError as exc:
            raise AuthenticationError(str(exc)) from None
        issuer = claims.get("iss")
        if not isinstance(issuer, str) or issuer not in self.issuers:
            raise AuthenticationError(f'token issuer "{issuer}" is invalid')
        presented = token_audiences(claims) or self.implicit_audiences
        requested = tuple(audiences) or self.implicit_audiences
        granted = intersect(presented, requested)
        if not granted and self.implicit_audiences:
            raise AuthenticationError(f"token audiences {go_string_list(presented)} is invalid for the target audiences {go_string_list(requested)}")
        if self.legacy:
            info = await validate_legacy(claims, token, self.getter, self.lookup)
        else:
            info = await validate_bound(claims, self.getter, self.clock.now())
        return Response(info.user_info(), granted)


class RegistryGetter:
    """:class:`ObjectGetter` over the apiserver's own storage (upstream reads informers, then
    the API): a missing object is the API's not-found message."""

    def __init__(self, registry):
        self.registry = registry

    async def _get(self, resource: str, namespace: str | None, name: str) -> dict:
        from kubesvc.api.errors import StatusError

        store = self.registry.store("", resource)
        if store is None:
            raise AuthenticationError(f'{resource} "{name}" not found')
        try:
            return await store.get(namespace, name)
        except StatusError as exc:
            raise AuthenticationError(exc.message) from None

    async def service_account(self, namespace: str, name: str) -> dict:
        return await self._get("serviceaccounts", namespace, name)

    async def secret(self, namespace: str, name: str) -> dict:
        return await self._get("secrets", namespace, name)

    async def pod(self, namespace: str, name: str) -> dict:
        return await self._get("pods", namespace, name)

    async def node(self, name: str) -> dict:
        return await self._get("nodes", None, name)
