"""Bootstrap tokens (``--enable-bootstrap-token-auth``): short-lived credentials a new node
joins with (plugin/pkg/auth/authenticator/token/bootstrap, k8s.io/cluster-bootstrap;
identity.md §1.4).

A token is ``<token-id>.<token-secret>``, six then sixteen of ``[a-z0-9]``; anything else is
not a bootstrap token (the next authenticator is asked). It is backed by the Secret
``kube-system/bootstrap-token-<token-id>`` of type ``bootstrap.kubernetes.io/token``, whose
``data`` holds:

=================================  ============================================================
``token-id``, ``token-secret``     must equal the two halves (the secret compared in constant time)
``expiration``                     RFC 3339; absent: never expires; unparseable: expired
``usage-bootstrap-authentication`` must be exactly ``true``
``auth-extra-groups``              comma list, each ``system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]``
=================================  ============================================================

Any mismatch (or a Secret being deleted) means "not authenticated" without an error, so the
request gets ``invalid bearer token``. The user is ``system:bootstrap:<token-id>`` with the
groups ``system:bootstrappers`` and the extra groups, deduplicated and sorted; no uid.
"""

from __future__ import annotations

import hmac
import logging
import re
from datetime import datetime
from typing import Awaitable, Callable, Sequence

from kubesvc.api.validation_config import secret_bytes
from kubesvc.apiserver.auth.tokens import Response
from kubesvc.serving.user import BOOTSTRAPPERS_GROUP, UserInfo
from kubesvc.util.clock import Clock
from kubesvc.util.golang import parse_rfc3339

log = logging.getLogger("kubesvc.apiserver.auth")

TOKEN_PATTERN = re.compile(r"\A([a-z0-9]{6})\.([a-z0-9]{16})\Z")
GROUP_PATTERN_TEXT = r"\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z"
GROUP_PATTERN = re.compile(r"\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\Z")
RFC3339 = re.compile(r"\A\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})\Z")  # Go's time.RFC3339
SECRET_TYPE = "bootstrap.kubernetes.io/token"
SECRET_PREFIX = "bootstrap-token-"
SECRET_NAMESPACE = "kube-system"
USER_PREFIX = "system:bootstrap:"
TOKEN_ID_KEY = "token-id"
TOKEN_SECRET_KEY = "token-secret"
EXPIRATION_KEY = "expiration"
USAGE_AUTHENTICATION_KEY = "usage-bootstrap-authentication"
EXTRA_GROUPS_KEY = "auth-extra-groups"


def parse_token(token: str) -> tuple[str, str] | None:
    match = TOKEN_PATTERN.match(token)
    return (match.group(1), match.group(2)) if match else None


def secret_data(secret: dict, key: str) -> str:
    """``bootstrapsecretutil.GetData``: the decoded value, or "" when absent."""
    return secret_bytes((secret.get("data") or {}).get(key)).decode("utf-8", "replace")


def has_expired(secret: dict, now: datetime) -> bool:
    text = secret_data(secret, EXPIRATION_KEY)
    if not text:
        return False
    if not RFC3339.match(text):
        return True  # unparseable: treated as expired
    try:
        expires = parse_rfc3339(text)
    except ValueError:
        return True
    return expires <= now


def groups_of(secret: dict) -> list[str]:
    """``bootstrapsecretutil.GetGroups``; ValueError for an invalid extra group."""
    groups = {BOOTSTRAPPERS_GROUP}
    extra = secret_data(secret, EXTRA_GROUPS_KEY)
    if extra:
        for group in extra.split(","):
            if not GROUP_PATTERN.match(group):
                raise ValueError(f"bootstrap group {group!r} is invalid (must match {GROUP_PATTERN_TEXT})")
            groups.add(group)
    return sorted(groups)


def authenticate(token_id: str, token_secret: str, secret: dict | None, now: datetime) -> UserInfo | None:
    """The bootstrap user for a parsed token and its Secret, or None (why is logged)."""
    name = SECRET_PREFIX + token_id

    def reject(why: str) -> None:
        log.info("bootstrap secret %s/%s %s", SECRET_NAMESPACE, name, why)

    if secret is None:
        return None
    if (secret.get("metadata") or {}).get("deletionTimestamp"):
        return reject("is deleted and awaiting removal")
    if secret.get("type") != SECRET_TYPE or secret.get("data") is None:
        return reject(f"has invalid type, expected {SECRET_TYPE}.")
    if not hmac.compare_digest(secret_data(secret, TOKEN_SECRET_KEY).encode(), token_secret.encode()):
        return reject(f"has invalid value for key {TOKEN_SECRET_KEY}.")
    if secret_data(secret, TOKEN_ID_KEY) != token_id:
        return reject(f"has invalid value for key {TOKEN_ID_KEY}.")
    if has_expired(secret, now):
        return reject("has expired.")
    if secret_data(secret, USAGE_AUTHENTICATION_KEY) != "true":
        return reject(f"not marked {USAGE_AUTHENTICATION_KEY}=true.")
    try:
        groups = groups_of(secret)
    except ValueError as exc:
        return reject(f"has invalid value for key {EXTRA_GROUPS_KEY}: {exc}.")
    return UserInfo(USER_PREFIX + token_id, groups=tuple(groups))


class BootstrapTokens:
    """The token authenticator: ``lookup(name)`` reads a kube-system Secret (None if missing)."""

    def __init__(self, lookup: Callable[[str], Awaitable[dict | None]], clock: Clock):
        self.lookup = lookup
        self.clock = clock

    async def authenticate_token(self, token: str, audiences: Sequence[str]) -> Response | None:
        parsed = parse_token(token)
        if parsed is None:
            return None
        user = authenticate(parsed[0], parsed[1], await self.lookup(SECRET_PREFIX + parsed[0]), self.clock.now())
        return Response(user) if user is not None else None


def registry_secret_lookup(registry) -> Callable[[str], Awaitable[dict | None]]:
    from kubesvc.api.errors import StatusError

    async def lookup(name: str) -> dict | None:
        store = registry.store("", "secrets")
        if store is None:
            return None
        try:
            return await store.get(SECRET_NAMESPACE, name)
        except StatusError:
            return None

    return lookup
