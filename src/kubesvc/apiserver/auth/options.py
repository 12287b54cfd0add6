"""kube-apiserver's authentication flags, checked and resolved into the objects that serve them
(pkg/kubeapiserver/options/authentication.go; identity.md §6.1).

=============================================  =================================================
``--anonymous-auth`` (true)                    requests with no credential are ``system:anonymous``
``--token-auth-file``                          static tokens (``tokens.py``)
``--enable-bootstrap-token-auth`` (false)      bootstrap tokens (``bootstrap.py``)
``--service-account-issuer`` (repeatable)      accepted issuers; the first signs new tokens
``--service-account-key-file`` (repeatable)    public keys that verify ServiceAccount tokens
``--service-account-signing-key-file``         the private key that signs them
``--api-audiences``                            the API's audiences; default: the issuers
``--service-account-lookup`` (true)            legacy tokens checked against their Secret
``--service-account-max-token-expiration``     TokenRequest cap (1h to 2^32 s; 0: none)
``--service-account-extend-token-expiration``  Pod-bound 3607 s tokens live a year (true)
``--service-account-jwks-uri``                 ``jwks_uri`` of the discovery document (https)
=============================================  =================================================

Upstream requires an issuer and keys; ``kubesvc apiserver`` runs with no flags, so where they
are missing it uses what k3s passes: the issuer ``https://kubernetes.default.svc.cluster.local``
and a key of its own, an RSA 2048 key made once in ``<data-dir>/pki/sa.key`` (mode 0600, as
kubeadm's ``sa.key``) that both signs and verifies.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from kubesvc.apiserver.auth import jwt
from kubesvc.serving import pki

DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"
GENERATED_KEY = Path(pki.PKI_DIR) / "sa.key"
MIN_MAX_TOKEN_EXPIRATION = 3600
MAX_TOKEN_EXPIRATION = 1 << 32


@dataclass
class AuthenticationOptions:
    anonymous_auth: bool = True
    token_auth_file: Path | None = None
    enable_bootstrap_token_auth: bool = False
    service_account_issuers: tuple[str, ...] = ()
    service_account_key_files: tuple[Path, ...] = ()
    service_account_signing_key_file: Path | None = None
    api_audiences: tuple[str, ...] = ()
    service_account_lookup: bool = True
    service_account_max_token_expiration: int = 0  # seconds; 0: no cap
    service_account_extend_token_expiration: bool = True
    service_account_jwks_uri: str = ""


def validate(options: AuthenticationOptions) -> list[str]:
    """Flag errors worded as upstream's ``BuiltInAuthenticationOptions.Validate``."""
    problems: list[str] = []
    seen: set[str] = set()
    for issuer in options.service_account_issuers:
        if issuer == "":
            problems.append("service-account-issuer should not be an empty string")
            continue
        if ":" in issuer:
            try:
                urllib.parse.urlsplit(issuer)
            except ValueError as exc:
                problems.append(f'service-account-issuer "{issuer}" contained a \':\' but was not a valid URL: {exc}')
                continue
        if issuer in seen:
            problems.append(f'service-account-issuer "{issuer}" is already specified')
            continue
        seen.add(issuer)
    if options.service_account_jwks_uri:
        parsed = urllib.parse.urlsplit(options.service_account_jwks_uri)
        if parsed.scheme != "https":
            problems.append(f"service-account-jwks-uri requires https scheme, parsed as: {options.service_account_jwks_uri}")
    cap = options.service_account_max_token_expiration
    if cap and not MIN_MAX_TOKEN_EXPIRATION <= cap <= MAX_TOKEN_EXPIRATION:
        problems.append(f"service-account-max-token-expiration {cap}s is invalid: must be between 1h and 2^32 seconds")
    return problems


@dataclass
class ServiceAccountConfig:
    """What signs and verifies ServiceAccount tokens, resolved from the flags."""

    issuers: tuple[str, ...]
    api_audiences: tuple[str, ...]
    signing_key: jwt.PrivateKey
    public_keys: list[jwt.PublicKey] = field(default_factory=list)
    lookup: bool = True
    max_expiration_seconds: int = 0
    extend_expiration: bool = True
    jwks_uri: str = ""

    @property
    def issuer(self) -> str:
        return self.issuers[0]


def ensure_signing_key(data_dir: Path) -> Path:
    """``<data-dir>/pki/sa.key``, made once; 0600 in the 0700 ``pki`` directory (tightened
    again at every start, as the cluster CA's files are)."""
    path = pki.private_dir(Path(data_dir) / GENERATED_KEY.parent) / GENERATED_KEY.name
    if not path.exists():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pki.write_private(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                                  serialization.NoEncryption()))
    os.chmod(path, 0o600)
    return path


def resolve_service_accounts(options: AuthenticationOptions, data_dir: Path) -> ServiceAccountConfig:
    """Keys and issuers, with kubesvc's defaults; ValueError (one line) for a bad key file."""
    problems = validate(options)
    if problems:
        raise ValueError(problems[0])
    issuers = options.service_account_issuers or (DEFAULT_ISSUER,)
    signing_path = options.service_account_signing_key_file or ensure_signing_key(data_dir)
    signing_key = jwt.private_key_from_file(signing_path)
    if options.service_account_key_files:
        public_keys = [key for path in options.service_account_key_files for key in jwt.public_keys_from_file(path)]
    else:
        public_keys = [signing_key.public_key()]
    return ServiceAccountConfig(
        issuers=tuple(issuers),
        api_audiences=tuple(options.api_audiences) or tuple(issuers),
        signing_key=signing_key,
        public_keys=public_keys,
        lookup=options.service_account_lookup,
        max_expiration_seconds=options.service_account_max_token_expiration,
        extend_expiration=options.service_account_extend_token_expiration,
        jwks_uri=options.service_account_jwks_uri,
    )


def build_authenticator(options: AuthenticationOptions, service_accounts: ServiceAccountConfig, registry, clock, *, x509=None):
    """The request authenticator in upstream's order (``authenticator.py``); ValueError for a
    bad token file."""
    from kubesvc.apiserver.auth.authenticator import Authenticator
    from kubesvc.apiserver.auth.bootstrap import BootstrapTokens, registry_secret_lookup
    from kubesvc.apiserver.auth.serviceaccount import LEGACY_ISSUER, JWTAuthenticator, RegistryGetter
    from kubesvc.apiserver.auth.tokens import AudienceAgnostic, CachedTokens, StaticTokens, TokenUnion

    audiences = service_accounts.api_audiences
    token_authenticators = []
    if options.token_auth_file is not None:
        token_authenticators.append(AudienceAgnostic(StaticTokens.from_file(options.token_auth_file), audiences))
    getter = RegistryGetter(registry)
    token_authenticators.append(JWTAuthenticator([LEGACY_ISSUER], service_accounts.public_keys, audiences, getter, clock,
                                                 legacy=True, lookup=service_accounts.lookup))
    token_authenticators.append(JWTAuthenticator(service_accounts.issuers, service_accounts.public_keys, audiences, getter, clock))
    if options.enable_bootstrap_token_auth:
        token_authenticators.append(AudienceAgnostic(BootstrapTokens(registry_secret_lookup(registry), clock), audiences))
    tokens = CachedTokens(TokenUnion(token_authenticators), clock.monotonic)
    return Authenticator(tokens, x509=x509, api_audiences=audiences, anonymous=options.anonymous_auth)
