"""OIDC discovery for the ServiceAccount issuer (pkg/serviceaccount/openidmetadata.go,
pkg/routes/openidmetadata.go; identity.md §1.6): what lets another system (a cloud's workload
identity, Vault, another cluster) verify this cluster's ServiceAccount tokens on its own.

* ``GET /.well-known/openid-configuration``, ``application/json``:
  ``{"issuer", "jwks_uri", "response_types_supported": ["id_token"],
  "subject_types_supported": ["public"], "id_token_signing_alg_values_supported": [algs]}``
  (the algorithms of the verification keys, sorted);
* ``GET /openid/v1/jwks``, ``application/jwk-set+json``: ``{"keys": [JWK…]}``, every public key
  of ``--service-account-key-file`` with ``use: sig`` and the ``kid`` tokens carry.

Both with ``Cache-Control: public, max-age=3600``. They are served only when the first
issuer is an ``https`` URL without query or fragment (else 404, as upstream which then logs
why); ``jwks_uri`` is ``--service-account-jwks-uri`` or ``https://<external address>/openid/v1/jwks``.
Who may read them is the authorizer's business: RBAC's ``system:service-account-issuer-discovery``
grants it to ``system:serviceaccounts``.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass

from kubesvc.apiserver.auth import jwt

OPENID_CONFIGURATION_PATH = "/.well-known/openid-configuration"
JWKS_PATH = "/openid/v1/jwks"
JWKS_CONTENT_TYPE = "application/jwk-set+json"
CACHE_CONTROL = "public, max-age=3600"


@dataclass(frozen=True)
class OpenIDMetadata:
    configuration: bytes
    jwks: bytes


def issuer_problem(issuer: str) -> str | None:
    """Why this issuer cannot have discovery documents (upstream's wording), or None."""
    try:
        parsed = urllib.parse.urlsplit(issuer)
    except ValueError as exc:
        return f"issuer URL is invalid: {exc}"
    if parsed.scheme != "https":
        return f"issuer URL must use https scheme, got: {issuer}"
    if parsed.query:
        return f"issuer URL may not include a query, got: {issuer}"
    if parsed.fragment:
        return f"issuer URL may not include a fragment, got: {issuer}"
    return None


def build_metadata(issuer: str, jwks_uri: str, external_address: str, public_keys: list[jwt.PublicKey]) -> OpenIDMetadata:
    """Both documents as bytes; ValueError (upstream's message) when they cannot be served."""
    if not public_keys:
        raise ValueError("no keys provided for validating keyset")
    problem = issuer_problem(issuer)
    if problem:
        raise ValueError(problem)
    if not jwks_uri:
        if not external_address:
            raise ValueError(f"attempted to build jwks_uri from external address {external_address}, but could not construct a valid URL. "
                             "Error: empty address")
        jwks_uri = f"https://{external_address}{JWKS_PATH}"
    configuration = {
        "issuer": issuer,
        "jwks_uri": jwks_uri,
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": sorted({jwt.algorithm(key) for key in public_keys}),
    }
    keys = {"keys": [jwt.public_jwk(key) for key in public_keys]}
    return OpenIDMetadata(json.dumps(configuration, separators=(",", ":")).encode(), json.dumps(keys, separators=(",", ":")).encode())


def oidc_response(metadata: OpenIDMetadata, path: str):
    """The aiohttp answer for one of the two paths."""
    from aiohttp import web

    if path == JWKS_PATH:
        return web.Response(body=metadata.jwks, headers={"Content-Type": JWKS_CONTENT_TYPE, "Cache-Control": CACHE_CONTROL})
    return web.Response(body=metadata.configuration, headers={"Content-Type": "application/json", "Cache-Control": CACHE_CONTROL})
