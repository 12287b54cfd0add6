"""Bootstrap token rules (auth/bootstrap.py, upstream plugin/pkg/auth/authenticator/token/bootstrap)."""

from __future__ import annotations

import base64
from datetime import datetime, timezone

import pytest

from kubesvc.apiserver.auth.bootstrap import BootstrapTokens, authenticate, has_expired, parse_token
from kubesvc.serving.user import UserInfo
from kubesvc.util.clock import FakeClock

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)


def secret(token_id="abcdef", token_secret="0123456789abcdef", type_="bootstrap.kubernetes.io/token", deleting=False, **data) -> dict:
    values = {"token-id": token_id, "token-secret": token_secret, "usage-bootstrap-authentication": "true",
              **{k.replace("_", "-"): v for k, v in data.items()}}
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in values.items() if v is not None}
    meta = {"name": f"bootstrap-token-{token_id}", "namespace": "kube-system"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T11:00:00Z"
    return {"metadata": meta, "type": type_, "data": encoded}


@pytest.mark.parametrize("token,parsed", [
    ("abcdef.0123456789abcdef", ("abcdef", "0123456789abcdef")),
    ("ABCDEF.0123456789abcdef", None),
    ("abcde.0123456789abcdef", None),
    ("abcdef.0123456789abcdef\n", None),
    ("abcdef:0123456789abcdef", None),
], ids=["valid", "upper-case", "short-id", "trailing-newline", "colon"])
def test_parse_token(token, parsed):
    assert parse_token(token) == parsed


USER = UserInfo("system:bootstrap:abcdef", groups=("system:bootstrappers",))


@pytest.mark.parametrize("stored,user", [
    (secret(), USER),
    (None, None),
    (secret(deleting=True), None),
    (secret(type_="Opaque"), None),
    (secret(token_secret="ffffffffffffffff"), None),
    (secret(usage_bootstrap_authentication="false"), None),
    (secret(usage_bootstrap_authentication=None), None),
    (secret(expiration="2026-01-01T11:59:59Z"), None),
    (secret(expiration="2026-01-01T12:00:00Z"), None),
    (secret(expiration="2026-01-01T12:00:01Z"), USER),
    (secret(expiration="2026-01-01T13:00:00+02:00"), None),
    (secret(expiration="tomorrow"), None),
    (secret(expiration="2027-01-01"), None),
    (secret(auth_extra_groups="system:bootstrappers:kubeadm:default-node-token,system:bootstrappers:b,system:bootstrappers:b"),
     UserInfo("system:bootstrap:abcdef", groups=("system:bootstrappers", "system:bootstrappers:b", "system:bootstrappers:kubeadm:default-node-token"))),
    (secret(auth_extra_groups="system:masters"), None),
    (secret(auth_extra_groups="system:bootstrappers:"), None),
], ids=["valid", "missing", "deleting", "wrong-type", "wrong-secret", "usage-false", "usage-missing", "expired", "expires-now",
        "not-yet-expired", "expired-with-offset", "unparseable-expiration", "date-only-expiration", "extra-groups-sorted-deduplicated",
        "extra-group-outside-prefix", "extra-group-empty-suffix"])
def test_authenticate(stored, user):
    assert authenticate("abcdef", "0123456789abcdef", stored, NOW) == user


def test_token_id_in_data_must_match():
    assert authenticate("abcdef", "0123456789abcdef", secret(token_id="zzzzzz"), NOW) is None


def test_has_expired_without_expiration():
    assert not has_expired(secret(), NOW)


async def test_authenticator_reads_the_secret_named_by_the_token_id():
    asked = []

    async def lookup(name):
        asked.append(name)
        return secret()

    tokens = BootstrapTokens(lookup, FakeClock(NOW))
    assert (await tokens.authenticate_token("abcdef.0123456789abcdef", ())).user == USER
    assert await tokens.authenticate_token("not-a-bootstrap-token", ()) is None
    assert asked == ["bootstrap-token-abcdef"]
