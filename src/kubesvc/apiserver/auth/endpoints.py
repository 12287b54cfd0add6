"""Authentication, put together on a running apiserver app: the request authenticator in
``app["authenticator"]``, the TokenRequest/TokenReview/SelfSubjectReview handlers in
``app["create_handlers"]``, and the OIDC discovery documents in ``app["oidc"]`` (None when
the issuer cannot have them). See ``authenticator.py``, ``tokenrequest.py``,
``identity_reviews.py`` and ``apiserver/oidc.py``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Mapping

from kubesvc.apiserver import oidc
from kubesvc.apiserver.auth.options import AuthenticationOptions, ServiceAccountConfig, build_authenticator, resolve_service_accounts
from kubesvc.apiserver.auth.identity_reviews import IdentityReviews
from kubesvc.apiserver.auth.tokenrequest import TokenRequests
from kubesvc.apiserver.auth.tokens import StaticTokens, read_token_file
from kubesvc.apiserver.auth.user import UserInfo

log = logging.getLogger("kubesvc.apiserver.auth")

AUTHENTICATION_GROUP = "authentication.k8s.io"


def static_tokens(options: AuthenticationOptions, own: Mapping[str, UserInfo]) -> StaticTokens | None:
    """``--token-auth-file``'s users, plus tokens the server made for itself (``own``)."""
    tokens: dict[str, UserInfo] = {}
    if options.token_auth_file is not None:
        tokens.update(read_token_file(options.token_auth_file))
    tokens.update(own)
    return StaticTokens(tokens) if tokens else None


def install(app, options: AuthenticationOptions, data_dir: Path, external_address: str, *, x509=None,
            own_tokens: Mapping[str, UserInfo] | None = None) -> ServiceAccountConfig:
    """Wire authentication into ``app``; ValueError (one line) for bad flags or files."""
    registry, clock = app["registry"], app["clock"]
    service_accounts = resolve_service_accounts(options, data_dir)
    authenticator = build_authenticator(options, service_accounts, registry, clock, x509=x509,
                                        static_tokens=static_tokens(options, own_tokens or {}))
    app["authenticator"] = authenticator
    app["service_accounts"] = service_accounts
    handlers = app.setdefault("create_handlers", {})
    handlers[("", "serviceaccounts/token")] = TokenRequests(registry, service_accounts, clock).handle
    reviews = IdentityReviews(authenticator, clock)
    handlers[(AUTHENTICATION_GROUP, "tokenreviews")] = reviews.token_review
    handlers[(AUTHENTICATION_GROUP, "selfsubjectreviews")] = reviews.self_subject_review
    try:
        app["oidc"] = oidc.build_metadata(service_accounts.issuer, service_accounts.jwks_uri, external_address, service_accounts.public_keys)
    except ValueError as exc:
        log.warning("not serving OpenID Connect discovery documents: %s", exc)
        app["oidc"] = None
    return service_accounts
