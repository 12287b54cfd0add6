"""Compact JWS (RFC 7515) signed JSON Web Tokens (RFC 7519), as kube-apiserver signs and checks
ServiceAccount tokens (pkg/serviceaccount/jwt.go, go-jose underneath).

A token is ``base64url(header) "." base64url(payload) "." base64url(signature)``, each part
base64url without padding. The signature covers the first two parts as ASCII.

* Keys and algorithms: an RSA key signs ``RS256`` (RSASSA-PKCS1-v1_5 with SHA-256); an ECDSA key
  signs ``ES256``/``ES384``/``ES512`` by its curve (P-256/P-384/P-521), the signature being the
  fixed-width big-endian ``r || s``, not DER (RFC 7518 §3.4).
* Header: ``{"alg":…,"kid":…}`` and nothing else (no ``typ``); ``kid`` is base64url (no padding)
  of SHA-256 of the public key's PKIX DER, so verifiers can pick the key (``keyIDFromPublicKey``).
* Payload: JSON with sorted keys and no spaces, as Go's encoding/json writes the merged claims.
* Verification takes the ``alg`` from the header only if it matches the key: an RSA key
  verifies RS256 only, an EC key only the ES algorithm of its curve; ``none`` and HMAC are
  never accepted (the classic JWT algorithm-confusion attacks).

Key files (``--service-account-key-file``, ``--service-account-signing-key-file``) are PEM:
public keys (``PUBLIC KEY``, ``RSA PUBLIC KEY``), certificates, or private keys whose public half
is used (client-go keyutil ``PublicKeysFromFile``). Pure functions; no I/O but the file readers.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey
PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey

_CURVES = {  # curve name -> (alg, hash, coordinate bytes)
    "secp256r1": ("ES256", hashes.SHA256, 32),
    "secp384r1": ("ES384", hashes.SHA384, 48),
    "secp521r1": ("ES512", hashes.SHA512, 66),
}
_B64URL = re.compile(r"[A-Za-z0-9_-]*")


class JWTError(ValueError):
    """A token that is not a well-formed, correctly signed JWS."""


def _json(data: bytes, what: str) -> object:
    """A token part's JSON. Nesting too deep for Python's parser is refused as Go's
    encoding/json refuses more than 10,000 levels: the token is malformed, never a 500."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise JWTError(f"invalid {what}: {exc}") from None


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Go's ``base64.RawURLEncoding.DecodeString``: no padding, nothing outside the alphabet."""
    if not _B64URL.fullmatch(text) or len(text) % 4 == 1:
        raise JWTError("illegal base64 data")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise JWTError("illegal base64 data") from None


def key_id(public_key: PublicKey) -> str:
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return b64url_encode(hashlib.sha256(der).digest())


def algorithm(public_key: PublicKey) -> str:
    if isinstance(public_key, rsa.RSAPublicKey):
        return "RS256"
    if isinstance(public_key, ec.EllipticCurvePublicKey) and public_key.curve.name in _CURVES:
        return _CURVES[public_key.curve.name][0]
    raise JWTError(f"unknown public key type: {type(public_key).__name__}")


def canonical_json(value: object) -> bytes:
    """Sorted keys, no spaces: what Go marshals from the merged claim maps."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign(claims: dict, private_key: PrivateKey) -> str:
    signing_input = signing_input_of(claims, header_of(private_key))
    return compact(signing_input, signature_of(signing_input, private_key))


def header_of(private_key: PrivateKey) -> dict:
    """The JWS header a key signs with: its algorithm and key id."""
    public_key = private_key.public_key()
    return {"alg": algorithm(public_key), "kid": key_id(public_key)}


def signing_input_of(claims: dict, header: dict) -> bytes:
    """``base64url(header) "." base64url(claims)``: what the signature covers."""
    return f"{b64url_encode(canonical_json(header))}.{b64url_encode(canonical_json(claims))}".encode("ascii")


def signature_of(signing_input: bytes, private_key: PrivateKey) -> bytes:
    """The JWS signature of ``signing_input``: one call into the cryptography package (which
    lets go of the GIL while it signs) and, for ECDSA, the r||s encoding."""
    if isinstance(private_key, rsa.RSAPrivateKey):
        return private_key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    _, hash_type, size = _CURVES[private_key.curve.name]
    r, s = decode_dss_signature(private_key.sign(signing_input, ec.ECDSA(hash_type())))
    return r.to_bytes(size, "big") + s.to_bytes(size, "big")


def compact(signing_input: bytes, signature: bytes) -> str:
    return f"{signing_input.decode('ascii')}.{b64url_encode(signature)}"


@dataclass(frozen=True)
class SignedToken:
    """A parsed, not yet verified, compact JWS."""

    header: dict
    signing_input: bytes
    signature: bytes
    payload: bytes

    @property
    def kid(self) -> str:
        kid = self.header.get("kid", "")
        return kid if isinstance(kid, str) else ""

    def claims(self) -> dict:
        claims = _json(self.payload, "claims")
        if not isinstance(claims, dict):
            raise JWTError("invalid claims: not a JSON object")
        return claims


def parse(token: str) -> SignedToken:
    parts = token.split(".")
    if len(parts) != 3:
        raise JWTError("compact JWS format must have three parts")
    header = _json(b64url_decode(parts[0]), "header")
    if not isinstance(header, dict) or not isinstance(header.get("alg"), str):
        raise JWTError("invalid header: no alg")
    if header.get("crit"):
        raise JWTError("unsupported crit header")
    return SignedToken(header, f"{parts[0]}.{parts[1]}".encode("ascii"), b64url_decode(parts[2]), b64url_decode(parts[1]))


def unverified_claims(token: str) -> dict | None:
    """The payload read without checking anything, or None when it is no JSON object."""
    if token.strip().startswith("{"):
        return None
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = _json(b64url_decode(parts[1]), "claims")
    except JWTError:
        return None
    return claims if isinstance(claims, dict) else None


def unverified_issuer(token: str) -> str | None:
    """The ``iss`` claim read without checking anything; None unless it is a string
    (kube-apiserver's ``hasCorrectIssuer`` pre-check: only a token whose issuer is ours is
    ever verified by a ServiceAccount authenticator)."""
    issuer = (unverified_claims(token) or {}).get("iss")
    return issuer if isinstance(issuer, str) else None


def verify(token: SignedToken, public_key: PublicKey) -> None:
    """Raise JWTError unless ``public_key`` made the signature, with the algorithm the key implies."""
    alg = token.header["alg"]
    try:
        if isinstance(public_key, rsa.RSAPublicKey):
            if alg != "RS256":
                raise JWTError(f"unexpected signature algorithm {alg!r} for an RSA key")
            public_key.verify(token.signature, token.signing_input, padding.PKCS1v15(), hashes.SHA256())
            return
        curve = _CURVES.get(public_key.curve.name)
        if curve is None or alg != curve[0]:
            raise JWTError(f"unexpected signature algorithm {alg!r} for an ECDSA key")
        _, hash_type, size = curve
        if len(token.signature) != 2 * size:
            raise JWTError("error in cryptographic primitive")
        r, s = int.from_bytes(token.signature[:size], "big"), int.from_bytes(token.signature[size:], "big")
        public_key.verify(encode_dss_signature(r, s), token.signing_input, ec.ECDSA(hash_type()))
    except InvalidSignature:
        raise JWTError("error in cryptographic primitive") from None


# ---- keys ------------------------------------------------------------------------------------

_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n.*?-----END \1-----", re.S)


def _usable(key) -> bool:
    return isinstance(key, rsa.RSAPublicKey) or (isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name in _CURVES)


def public_keys_from_pem(data: bytes) -> list[PublicKey]:
    """Every RSA/ECDSA public key in the PEM data: public keys, certificates' keys, and the public
    half of private keys, in file order."""
    keys: list[PublicKey] = []
    for match in _PEM_BLOCK.finditer(data):
        kind, block = match.group(1), match.group(0)
        try:
            if kind in (b"PUBLIC KEY", b"RSA PUBLIC KEY"):
                key = serialization.load_pem_public_key(block)
            elif kind == b"CERTIFICATE":
                key = x509.load_pem_x509_certificate(block).public_key()
            elif kind in (b"PRIVATE KEY", b"RSA PRIVATE KEY", b"EC PRIVATE KEY"):
                key = serialization.load_pem_private_key(block, None).public_key()
            else:
                continue
        except (ValueError, TypeError):
            continue
        if _usable(key):
            keys.append(key)
    return keys


def public_keys_from_file(path: str | Path) -> list[PublicKey]:
    data = Path(path).read_bytes()
    keys = public_keys_from_pem(data)
    if not keys:
        raise ValueError(f"error reading public key file {path}: data does not contain any valid RSA or ECDSA public keys")
    return keys


def private_key_from_file(path: str | Path) -> PrivateKey:
    """The first RSA or ECDSA private key in the PEM file (``--service-account-signing-key-file``)."""
    data = Path(path).read_bytes()
    for match in _PEM_BLOCK.finditer(data):
        if match.group(1) in (b"PRIVATE KEY", b"RSA PRIVATE KEY", b"EC PRIVATE KEY"):
            try:
                key = serialization.load_pem_private_key(match.group(0), None)
            except (ValueError, TypeError):
                continue
            if _usable(key.public_key()):
                return key
    raise ValueError(f"failed to parse service-account-issuer-key-file: {path}: data does not contain a valid RSA or ECDSA private key")


def public_jwk(public_key: PublicKey) -> dict:
    """The key as a JSON Web Key (RFC 7517) with ``use: sig``, go-jose's field order."""
    jwk: dict = {"use": "sig"}
    if isinstance(public_key, rsa.RSAPublicKey):
        numbers = public_key.public_numbers()
        jwk.update(kty="RSA", kid=key_id(public_key), alg="RS256",
                   n=b64url_encode(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")),
                   e=b64url_encode(numbers.e.to_bytes((numbers.e.bit_length() + 7) // 8, "big")))
        return jwk
    alg, _, size = _CURVES[public_key.curve.name]
    numbers = public_key.public_numbers()
    crv = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}[alg]
    jwk.update(kty="EC", kid=key_id(public_key), crv=crv, alg=alg,
               x=b64url_encode(numbers.x.to_bytes(size, "big")), y=b64url_encode(numbers.y.to_bytes(size, "big")))
    return jwk
