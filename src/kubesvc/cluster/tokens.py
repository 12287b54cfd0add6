"""Bootstrap tokens as ``kubeadm token create|list|delete`` makes and shows them (kubeadm's
``cmd/token.go``; the Secret's layout is k8s.io/cluster-bootstrap's, which the apiserver's
``--enable-bootstrap-token-auth`` reads: ``apiserver/auth/bootstrap.py``).

A token ``<id>.<secret>`` (6 and 16 of ``[a-z0-9]``, from ``secrets``) lives in the Secret
``kube-system/bootstrap-token-<id>`` of type ``bootstrap.kubernetes.io/token`` with ``data``:
``token-id``, ``token-secret``, ``expiration`` (RFC 3339, UTC, now + ``--ttl``: 24h by
default, ``0`` for a token that never expires), ``usage-bootstrap-<usage>: "true"`` per usage
(``signing``, ``authentication``), ``auth-extra-groups`` (comma list, each
``system:bootstrappers:...``; default kubeadm's ``system:bootstrappers:kubeadm:default-node-token``
alone: a node token, for ``kubesvc join``, which cannot read the cluster's CA keys; ``create
--control-plane`` adds ``system:bootstrappers:kubesvc:server``, which lets the token join a server
machine and read those keys: ``cluster/join.py``) and ``description`` when given. Groups only make sense for a token that authenticates, so
kubeadm refuses them without the ``authentication`` usage.

``create`` prints the token alone; ``list`` prints kubeadm's table (Go tabwriter, minimum width
10, padding 3): TOKEN, TTL (``ShortHumanDuration`` of what is left; ``<forever>``), EXPIRES
(RFC 3339; ``<never>``), USAGES, DESCRIPTION, EXTRA GROUPS (``<none>`` for empty ones);
``delete`` takes tokens or token IDs and prints ``bootstrap token "<id>" deleted`` for each.
The same token is what ``kubesvc up --server --token`` presents to join a server machine: on a
cluster server ``create`` also signs ``kube-public/cluster-info`` with a token that has the
``signing`` usage and ``delete`` removes the signature (kubeadm's bootstrap signer's job).
"""

from __future__ import annotations

import base64
import secrets
import string
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Iterable, Sequence

from kubesvc.apiserver.auth import bootstrap as bt
from kubesvc.util.golang import parse_rfc3339

ALPHABET = string.ascii_lowercase + string.digits
VALID_USAGES = ("signing", "authentication")  # cluster-bootstrap's KnownTokenUsages
USAGE_PREFIX = "usage-bootstrap-"
DESCRIPTION_KEY = "description"
DEFAULT_TTL = 24 * 3600.0
DEFAULT_USAGES = ("signing", "authentication")
SERVER_GROUP = "system:bootstrappers:kubesvc:server"  # may read the server bootstrap bundle (cluster/join.py)
NODE_GROUP = "system:bootstrappers:kubeadm:default-node-token"  # may join as a node (nodejoin/serverside.py)
DEFAULT_GROUPS = (NODE_GROUP,)  # a node token: it cannot read the cluster's CA keys
CONTROL_PLANE_GROUPS = (NODE_GROUP, SERVER_GROUP)  # token create --control-plane: may join a server machine
TOKEN_ID_PATTERN = r"\A[a-z0-9]{6}\Z"


class TokenError(ValueError):
    """A token, usage or group kubeadm would refuse; the message is kubeadm's."""


def generate(randbelow=secrets.randbelow) -> str:
    """A random token ``[a-z0-9]{6}.[a-z0-9]{16}``."""
    return "".join(ALPHABET[randbelow(len(ALPHABET))] for _ in range(6)) + "." + \
        "".join(ALPHABET[randbelow(len(ALPHABET))] for _ in range(16))


def token_id_of(token_or_id: str) -> str:
    """The token ID of a token or of a token ID (``kubeadm token delete`` takes either)."""
    import re

    if re.match(TOKEN_ID_PATTERN, token_or_id):
        return token_or_id
    parsed = bt.parse_token(token_or_id)
    if parsed is None:
        raise TokenError(f'given token or token id "{token_or_id}" didn\'t match pattern "[a-z0-9]{{6}}" or "[a-z0-9]{{6}}.[a-z0-9]{{16}}"')
    return parsed[0]


def check_usages_and_groups(usages: Sequence[str], groups: Sequence[str]) -> None:
    """kubeadm's validation of ``--usages`` and ``--groups``."""
    for usage in usages:
        if usage not in VALID_USAGES:
            raise TokenError(f"invalid bootstrap token usage string: {usage}, valid options: {', '.join(VALID_USAGES)}")
    for group in groups:
        if not bt.GROUP_PATTERN.match(group):
            raise TokenError(f'bootstrap group "{group}" is invalid (must match {bt.GROUP_PATTERN_TEXT})')
    if groups and "authentication" not in usages:
        raise TokenError("token groups cannot be specified unless the usages include \"authentication\"")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def token_secret(token: str, *, ttl: float, now: datetime, usages: Sequence[str] = DEFAULT_USAGES,
                 groups: Sequence[str] = DEFAULT_GROUPS, description: str = "") -> dict:
    """The Secret that makes ``token`` a bootstrap token (kubeadm's ``BootstrapTokenToSecret``)."""
    parsed = bt.parse_token(token)
    if parsed is None:
        raise TokenError(f'the bootstrap token "{token}" was not of form "[a-z0-9]{{6}}.[a-z0-9]{{16}}"')
    check_usages_and_groups(usages, groups)
    token_id, token_secret_text = parsed
    data = {bt.TOKEN_ID_KEY: token_id, bt.TOKEN_SECRET_KEY: token_secret_text}
    if description:
        data[DESCRIPTION_KEY] = description
    if ttl > 0:
        expires = (now + timedelta(seconds=ttl)).astimezone(timezone.utc).replace(microsecond=0)
        data[bt.EXPIRATION_KEY] = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
    for usage in usages:
        data[USAGE_PREFIX + usage] = "true"
    if groups:
        data[bt.EXTRA_GROUPS_KEY] = ",".join(groups)
    return {"apiVersion": "v1", "kind": "Secret", "type": bt.SECRET_TYPE,
            "metadata": {"name": bt.SECRET_PREFIX + token_id, "namespace": bt.SECRET_NAMESPACE},
            "data": {key: _b64(value) for key, value in data.items()}}


# ---- list ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Listed:
    token: str
    expires: datetime | None
    usages: tuple[str, ...]
    description: str
    groups: tuple[str, ...]


def from_secret(secret: dict) -> Listed:
    """kubeadm's ``BootstrapTokenFromSecret``; TokenError (kubeadm's text) for a broken one."""
    name = (secret.get("metadata") or {}).get("name", "")
    token_id = bt.secret_data(secret, bt.TOKEN_ID_KEY)
    if not token_id:
        raise TokenError(f"bootstrap Token Secret has no token-id data: {name}")
    if name != bt.SECRET_PREFIX + token_id:
        raise TokenError(f"bootstrap token name is not of the form '{bt.SECRET_PREFIX}(token-id)'. Actual: {name!r}. "
                         f"Expected: {bt.SECRET_PREFIX + token_id!r}")
    token = f"{token_id}.{bt.secret_data(secret, bt.TOKEN_SECRET_KEY)}"
    if bt.parse_token(token) is None:
        raise TokenError(f"bootstrap Token Secret is not a valid token: {name}")
    expires = None
    text = bt.secret_data(secret, bt.EXPIRATION_KEY)
    if text:
        try:
            expires = parse_rfc3339(text)
        except ValueError:
            raise TokenError(f"can't parse expiration time of bootstrap token {name!r}") from None
    usages = tuple(sorted(key[len(USAGE_PREFIX):] for key in (secret.get("data") or {})
                          if key.startswith(USAGE_PREFIX) and bt.secret_data(secret, key) == "true"))
    groups = tuple(g for g in bt.secret_data(secret, bt.EXTRA_GROUPS_KEY).split(",") if g)
    return Listed(token, expires, usages, bt.secret_data(secret, DESCRIPTION_KEY), groups)


def short_human_duration(seconds: float) -> str:
    """apimachinery's ``duration.ShortHumanDuration``."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 60:
        return f"{whole}s"
    if (minutes := whole // 60) < 60:
        return f"{minutes}m"
    if (hours := whole // 3600) < 24:
        return f"{hours}h"
    if hours < 24 * 365:
        return f"{hours // 24}d"
    return f"{hours // 24 // 365}y"


def row(token: Listed, now: datetime) -> list[str]:
    """kubeadm's ``humanReadableBootstrapToken``."""
    ttl, expires = "<forever>", "<never>"
    if token.expires is not None:
        ttl = short_human_duration((token.expires - now).total_seconds())
        expires = token.expires.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [token.token, ttl, expires, ",".join(token.usages) or "<none>", token.description or "<none>", ",".join(token.groups) or "<none>"]


HEADER = ["TOKEN", "TTL", "EXPIRES", "USAGES", "DESCRIPTION", "EXTRA GROUPS"]


def tabwrite(rows: Iterable[Sequence[str]], minwidth: int = 10, padding: int = 3) -> str:
    """Go's ``tabwriter.NewWriter(out, minwidth, 4, padding, ' ', 0)`` over tab-separated cells:
    each column but the last as wide as its widest cell plus ``padding`` (at least ``minwidth``)."""
    rows = [list(r) for r in rows]
    if not rows:
        return ""
    columns = max(len(r) for r in rows)
    widths = [max(minwidth, max(len(r[c]) for r in rows if c < len(r) - 1) + padding) if any(c < len(r) - 1 for r in rows) else 0
              for c in range(columns)]
    lines = []
    for r in rows:
        lines.append("".join(cell.ljust(widths[c]) if c < len(r) - 1 else cell for c, cell in enumerate(r)))
    return "\n".join(lines) + "\n"
