"""JWS signing and verification (auth/jwt.py): what go-jose and kube-apiserver accept."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from kubesvc.apiserver.auth import jwt

RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEYS = {curve.name: ec.generate_private_key(curve) for curve in (ec.SECP256R1(), ec.SECP384R1(), ec.SECP521R1())}
OTHER_RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.mark.parametrize("key,alg", [(RSA_KEY, "RS256"), (EC_KEYS["secp256r1"], "ES256"), (EC_KEYS["secp384r1"], "ES384"),
                                     (EC_KEYS["secp521r1"], "ES512")], ids=["rsa", "p256", "p384", "p521"])
def test_sign_then_verify_round_trip(key, alg):
    token = jwt.sign({"sub": "x", "aud": ["a"]}, key)
    signed = jwt.parse(token)
    assert signed.header == {"alg": alg, "kid": jwt.key_id(key.public_key())}
    jwt.verify(signed, key.public_key())
    assert signed.claims() == {"sub": "x", "aud": ["a"]}


def test_header_and_payload_are_sorted_compact_json_without_typ():
    token = jwt.sign({"sub": "s", "aud": ["x"], "iss": "i"}, RSA_KEY)
    header, payload, _ = token.split(".")
    assert base64.urlsafe_b64decode(header + "==").decode().startswith('{"alg":"RS256","kid":"')
    assert base64.urlsafe_b64decode(payload + "==") == b'{"aud":["x"],"iss":"i","sub":"s"}'
    assert "=" not in token


def test_kid_is_sha256_of_pkix_der_base64url():
    der = RSA_KEY.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert jwt.key_id(RSA_KEY.public_key()) == _b64(hashlib.sha256(der).digest())


def test_es256_signature_is_raw_r_and_s():
    signed = jwt.parse(jwt.sign({"a": 1}, EC_KEYS["secp256r1"]))
    assert len(signed.signature) == 64


def _tampered_payload(token: str) -> str:
    header, _, signature = token.split(".")
    payload = _b64(b'{"sub":"admin"}')
    return f"{header}.{payload}.{signature}"


def _alg_none(token: str) -> str:
    header = _b64(b'{"alg":"none"}')
    return f"{header}.{token.split('.')[1]}."


def _hs256_with_public_key(token: str) -> str:
    import hmac

    pem = RSA_KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    header = _b64(b'{"alg":"HS256"}')
    payload = token.split(".")[1]
    mac = hmac.new(pem, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{_b64(mac)}"


def _ps256(token: str) -> str:
    header = _b64(json.dumps({"alg": "PS256", "kid": jwt.key_id(RSA_KEY.public_key())}).encode())
    payload = token.split(".")[1]
    sig = RSA_KEY.sign(f"{header}.{payload}".encode(), padding.PSS(padding.MGF1(hashes.SHA256()), 32), hashes.SHA256())
    return f"{header}.{payload}.{_b64(sig)}"


@pytest.mark.parametrize("forge", [_tampered_payload, _alg_none, _hs256_with_public_key, _ps256],
                         ids=["tampered-payload", "alg-none", "hs256-confusion", "ps256-not-accepted"])
def test_forged_tokens_do_not_verify(forge):
    forged = forge(jwt.sign({"sub": "x"}, RSA_KEY))
    with pytest.raises(jwt.JWTError):
        jwt.verify(jwt.parse(forged), RSA_KEY.public_key())


def test_signature_of_another_key_does_not_verify():
    with pytest.raises(jwt.JWTError, match="error in cryptographic primitive"):
        jwt.verify(jwt.parse(jwt.sign({"sub": "x"}, OTHER_RSA)), RSA_KEY.public_key())


def test_ec_key_refuses_an_rsa_algorithm():
    with pytest.raises(jwt.JWTError):
        jwt.verify(jwt.parse(jwt.sign({"sub": "x"}, RSA_KEY)), EC_KEYS["secp256r1"].public_key())


DEEP = _b64(b"[" * 100_000 + b"]" * 100_000)
RS256 = _b64(b'{"alg":"RS256"}')


@pytest.mark.parametrize("token", ["a.b", "a.b.c.d", "!!.e30.", "e30=.e30.", "bm90anNvbg.e30.", f"{DEEP}.e30."],
                         ids=["two-parts", "four-parts", "bad-base64", "padding", "header-not-json", "header-nested-too-deep"])
def test_malformed_tokens_do_not_parse(token):
    with pytest.raises(jwt.JWTError):
        jwt.parse(token)


def test_claims_nested_too_deep_are_invalid():
    with pytest.raises(jwt.JWTError):
        jwt.parse(f"{RS256}.{DEEP}.").claims()


ISS_X = _b64(b'{"iss":"x"}')


@pytest.mark.parametrize("token,claims", [
    (f"e30.{ISS_X}.sig", {"iss": "x"}),
    ('{"iss":"x"}', None),
    ("a.b", None),
    ("e30.!!.sig", None),
    ("e30.WzFd.sig", None),
    (f"e30.{DEEP}.sig", None),
], ids=["claims", "json-token", "two-parts", "bad-base64", "not-an-object", "nested-too-deep"])
def test_unverified_claims(token, claims):
    assert jwt.unverified_claims(token) == claims


def test_public_keys_from_pem_reads_public_private_and_certificate_blocks(tmp_path):
    public_pem = RSA_KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    private_pem = EC_KEYS["secp256r1"].private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    path = tmp_path / "keys.pem"
    path.write_bytes(public_pem + private_pem)
    keys = jwt.public_keys_from_file(path)
    assert [jwt.key_id(k) for k in keys] == [jwt.key_id(RSA_KEY.public_key()), jwt.key_id(EC_KEYS["secp256r1"].public_key())]
    (tmp_path / "empty.pem").write_text("nothing here\n")
    with pytest.raises(ValueError, match="does not contain any valid RSA or ECDSA public keys"):
        jwt.public_keys_from_file(tmp_path / "empty.pem")
    with pytest.raises(ValueError, match="failed to parse service-account-issuer-key-file"):
        jwt.private_key_from_file(tmp_path / "empty.pem")


@pytest.mark.parametrize("key,expected", [
    (RSA_KEY, {"use", "kty", "kid", "alg", "n", "e"}),
    (EC_KEYS["secp256r1"], {"use", "kty", "kid", "crv", "alg", "x", "y"}),
], ids=["rsa", "ec"])
def test_public_jwk_fields(key, expected):
    jwk = jwt.public_jwk(key.public_key())
    assert set(jwk) == expected and jwk["use"] == "sig" and jwk["kid"] == jwt.key_id(key.public_key())
    if "e" in jwk:
        assert jwk["e"] == "AQAB"
