"""ServiceAccount JWTs (auth/serviceaccount.py): claims as kube-apiserver makes them and every
rule of its validators, against objects held in a dict."""

from __future__ import annotations

import base64
from datetime import datetime, timedelta, timezone

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from kubesvc.apiserver.auth import jwt
from kubesvc.apiserver.auth.serviceaccount import (CREDENTIAL_ID_KEY, LEGACY_ISSUER, NODE_NAME_KEY, NODE_UID_KEY, POD_NAME_KEY, POD_UID_KEY,
                                                   JWTAuthenticator, TokenGenerator, bound_claims, legacy_claims)
from kubesvc.apiserver.auth.tokens import AuthenticationError
from kubesvc.util.clock import FakeClock

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
ISSUER = "https://kubernetes.default.svc.cluster.local"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def obj(name, uid, namespace="ns", deleted=None, **more):
    meta = {"name": name, "uid": uid}
    if namespace:
        meta["namespace"] = namespace
    if deleted:
        meta["deletionTimestamp"] = deleted
    return {"metadata": meta, **more}


SA = obj("builder", "sa-uid")
POD = obj("web", "pod-uid")
NODE = obj("n1", "node-uid", namespace=None)
SECRET = obj("s1", "secret-uid")


class Objects:
    def __init__(self, **objects):
        self.objects = {"serviceaccounts/ns/builder": SA, "pods/ns/web": POD, "nodes//n1": NODE, "secrets/ns/s1": SECRET}
        self.objects.update(objects)

    def _get(self, resource, namespace, name):
        found = self.objects.get(f"{resource}/{namespace}/{name}")
        if found is None:
            raise AuthenticationError(f'{resource} "{name}" not found')
        return found

    async def service_account(self, namespace, name):
        return self._get("serviceaccounts", namespace, name)

    async def secret(self, namespace, name):
        return self._get("secrets", namespace, name)

    async def pod(self, namespace, name):
        return self._get("pods", namespace, name)

    async def node(self, name):
        return self._get("nodes", "", name)


def bound_token(key=KEY, issuer=ISSUER, audiences=(ISSUER,), issued=NOW, seconds=3600, **binding):
    claims = bound_claims(SA, audiences, seconds, issued, jti="the-jti", **binding)
    return TokenGenerator(issuer, key).generate(claims)


def authenticator(objects=None, keys=(KEY.public_key(),), now=NOW, legacy=False, lookup=True):
    issuers = [LEGACY_ISSUER] if legacy else [ISSUER, "https://old.example"]
    return JWTAuthenticator(issuers, keys, [ISSUER], objects or Objects(), FakeClock(now), legacy=legacy, lookup=lookup)


def test_bound_claims_shape():
    claims = bound_claims(SA, ["a"], 3607, NOW, pod=POD, node=NODE, warn_after_seconds=3607, jti="j")
    stamp = int(NOW.timestamp())
    assert claims == {
        "aud": ["a"], "exp": stamp + 3607, "iat": stamp, "nbf": stamp, "jti": "j", "sub": "system:serviceaccount:ns:builder",
        "kubernetes.io": {"namespace": "ns", "serviceaccount": {"name": "builder", "uid": "sa-uid"},
                          "pod": {"name": "web", "uid": "pod-uid"}, "node": {"name": "n1", "uid": "node-uid"}, "warnafter": stamp + 3607},
    }


def test_binding_a_secret_with_a_pod_is_an_error():
    with pytest.raises(ValueError):
        bound_claims(SA, ["a"], 3600, NOW, pod=POD, secret=SECRET)


async def test_a_pod_bound_token_is_the_service_account_with_pod_and_node_extras():
    response = await authenticator().authenticate_token(bound_token(pod=POD, node=NODE), [ISSUER])
    user = response.user
    assert (user.name, user.uid, user.groups) == ("system:serviceaccount:ns:builder", "sa-uid", ("system:serviceaccounts", "system:serviceaccounts:ns"))
    assert user.extra == {POD_NAME_KEY: ("web",), POD_UID_KEY: ("pod-uid",), CREDENTIAL_ID_KEY: ("JTI=the-jti",),
                          NODE_NAME_KEY: ("n1",), NODE_UID_KEY: ("node-uid",)}
    assert response.audiences == (ISSUER,)


async def test_es256_keys_work_and_the_kid_picks_the_key():
    token = bound_token(key=EC_KEY)
    response = await authenticator(keys=(KEY.public_key(), EC_KEY.public_key())).authenticate_token(token, [ISSUER])
    assert response.user.name == "system:serviceaccount:ns:builder"


async def test_any_accepted_issuer_verifies():
    assert await authenticator().authenticate_token(bound_token(issuer="https://old.example"), [ISSUER]) is not None


def _deleted(minutes_ago: float) -> str:
    return (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


REJECTIONS = [
    (dict(token=bound_token(issued=NOW - timedelta(seconds=3600 + 61))), None, "service account token has expired"),
    (dict(token=bound_token(issued=NOW + timedelta(seconds=61))), None, "service account token is not valid yet"),
    (dict(token=bound_token(audiences=("vault",))), None,
     'token audiences ["vault"] is invalid for the target audiences ["https://kubernetes.default.svc.cluster.local"]'),
    (dict(token=bound_token(key=OTHER_KEY)), None, "invalid signature, no keys found"),
    (dict(token=bound_token()), Objects(**{"serviceaccounts/ns/builder": None}), 'serviceaccounts "builder" not found'),
    (dict(token=bound_token()), Objects(**{"serviceaccounts/ns/builder": obj("builder", "new-uid")}),
     "service account UID (new-uid) does not match claim (sa-uid)"),
    (dict(token=bound_token()), Objects(**{"serviceaccounts/ns/builder": obj("builder", "sa-uid", deleted=_deleted(2))}),
     "service account ns/builder has been deleted"),
    (dict(token=bound_token(pod=POD)), Objects(**{"pods/ns/web": None}), "service account token has been invalidated"),
    (dict(token=bound_token(pod=POD)), Objects(**{"pods/ns/web": obj("web", "pod-uid", deleted=_deleted(1.5))}),
     "service account token has been invalidated"),
    (dict(token=bound_token(pod=POD)), Objects(**{"pods/ns/web": obj("web", "other")}),
     "pod UID (other) does not match service account pod ref claim (pod-uid)"),
    (dict(token=bound_token(secret=SECRET)), Objects(**{"secrets/ns/s1": None}), "service account token has been invalidated"),
    (dict(token=bound_token(secret=SECRET)), Objects(**{"secrets/ns/s1": obj("s1", "x")}),
     "secret UID (x) does not match service account secret ref claim (secret-uid)"),
    (dict(token=bound_token(node=NODE)), Objects(**{"nodes//n1": None}), "service account token has been invalidated"),
    (dict(token=bound_token(node=NODE)), Objects(**{"nodes//n1": obj("n1", "x", namespace=None)}),
     "node UID (x) does not match service account node ref claim (node-uid)"),
]


@pytest.mark.parametrize("case,objects,error", REJECTIONS, ids=[
    "expired", "not-yet-valid", "wrong-audience", "unknown-key", "service-account-gone", "service-account-recreated",
    "service-account-deleting", "pod-gone", "pod-deleting", "pod-recreated", "secret-gone", "secret-recreated", "node-gone", "node-recreated"])
async def test_rejections(case, objects, error):
    with pytest.raises(AuthenticationError) as info:
        await authenticator(objects).authenticate_token(case["token"], [ISSUER])
    assert str(info.value) == error


@pytest.mark.parametrize("issued,ok", [(NOW - timedelta(seconds=3600 + 59), True), (NOW + timedelta(seconds=59), True)],
                         ids=["expired-within-leeway", "future-within-leeway"])
async def test_one_minute_of_leeway(issued, ok):
    assert (await authenticator().authenticate_token(bound_token(issued=issued), [ISSUER]) is not None) == ok


async def test_deleted_within_a_minute_still_works():
    objects = Objects(**{"pods/ns/web": obj("web", "pod-uid", deleted=_deleted(0.5))})
    assert await authenticator(objects).authenticate_token(bound_token(pod=POD), [ISSUER]) is not None


def _unsigned(header: bytes, payload: bytes) -> str:
    return f"{jwt.b64url_encode(header)}.{jwt.b64url_encode(payload)}.AA"


DEEP = b"[" * 100_000 + b"]" * 100_000  # Go's encoding/json stops at 10,000 levels; Python's at its recursion limit
OUR_ISSUER = f'{{"iss":"{ISSUER}"}}'.encode()


@pytest.mark.parametrize("token", [
    "abcdef.0123456789abcdef", "not-a-jwt", '{"iss":"x"}', TokenGenerator("https://someone-else", KEY).generate({"sub": "x"}),
    _unsigned(b'{"alg":"RS256"}', b'{"iss":[]}'), _unsigned(b'{"alg":"RS256"}', b'{"iss":{}}'),
    _unsigned(b'{"alg":"RS256"}', b'{"iss":7}'), _unsigned(b'{"alg":"RS256"}', DEEP), _unsigned(DEEP, OUR_ISSUER),
    _unsigned(b'[]', OUR_ISSUER),
], ids=["bootstrap-token", "opaque", "json", "other-issuer", "issuer-list", "issuer-object", "issuer-number", "deep-payload",
        "deep-header", "header-not-an-object"])
async def test_tokens_of_others_are_not_ours(token):
    """upstream ``hasCorrectIssuer`` reads ``iss`` as a string or not at all, and a token
    ``jwt.ParseSigned`` refuses is not the authenticator's either."""
    assert await authenticator().authenticate_token(token, [ISSUER]) is None


def legacy_secret(token: str, **meta) -> dict:
    return {"metadata": {"name": "builder-token", "namespace": "ns", "uid": "s-uid", **meta},
            "type": "kubernetes.io/service-account-token", "data": {"token": base64.b64encode(token.encode()).decode()}}


def legacy_token(**override) -> str:
    claims = {**legacy_claims(SA, "builder-token"), **override}
    return TokenGenerator(LEGACY_ISSUER, KEY).generate({k: v for k, v in claims.items() if v is not None})


async def test_legacy_token():
    token = legacy_token()
    objects = Objects(**{"secrets/ns/builder-token": legacy_secret(token)})
    response = await authenticator(objects, legacy=True).authenticate_token(token, [ISSUER])
    assert (response.user.name, response.user.uid, response.user.extra) == ("system:serviceaccount:ns:builder", "sa-uid", {})
    assert response.audiences == (ISSUER,)


@pytest.mark.parametrize("override,secret,error", [
    (dict(sub=None), "same", "sub claim is missing"),
    ({"kubernetes.io/serviceaccount/namespace": None}, "same", "namespace claim is missing"),
    ({"kubernetes.io/serviceaccount/secret.name": None}, "same", "secretName claim is missing"),
    ({"kubernetes.io/serviceaccount/service-account.name": None}, "same", "serviceAccountName claim is missing"),
    ({"kubernetes.io/serviceaccount/service-account.uid": None}, "same", "serviceAccountUID claim is missing"),
    (dict(sub="system:serviceaccount:ns:other"), "same", "sub claim is invalid"),
    ({}, None, "Token has been invalidated"),
    ({}, "other-token", "Token does not match server's copy"),
    ({}, "deleting", "Token has been invalidated"),
], ids=["sub", "namespace", "secret-name", "sa-name", "sa-uid", "sub-mismatch", "secret-gone", "secret-holds-another-token", "secret-deleting"])
async def test_legacy_rejections(override, secret, error):
    token = legacy_token(**override)
    stored = {"same": legacy_secret(token), "other-token": legacy_secret("x"), None: None,
              "deleting": legacy_secret(token, deletionTimestamp="2026-03-01T11:59:59Z")}[secret]
    objects = Objects(**{"secrets/ns/builder-token": stored})
    with pytest.raises(AuthenticationError) as info:
        await authenticator(objects, legacy=True).authenticate_token(token, [ISSUER])
    assert str(info.value) == error


async def test_legacy_without_lookup_trusts_the_signature():
    assert await authenticator(Objects(), legacy=True, lookup=False).authenticate_token(legacy_token(), [ISSUER]) is not None


async def test_a_bound_token_is_not_a_legacy_one():
    assert await authenticator(legacy=True).authenticate_token(bound_token(), [ISSUER]) is None


async def test_signature_is_checked_before_claims():
    header, payload, _ = bound_token().split(".")
    forged = f"{header}.{payload}.{jwt.b64url_encode(b'x' * 256)}"
    with pytest.raises(AuthenticationError, match="error in cryptographic primitive"):
        await authenticator().authenticate_token(forged, [ISSUER])
