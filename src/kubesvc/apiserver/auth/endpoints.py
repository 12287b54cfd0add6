"""Authentication, put together on a running apiserver app: the request authenticator in
``app[appkeys.AUTHENTICATOR]``, the TokenRequest/TokenReview/SelfSubjectReview handlers in
``app[appkeys.CREATE_HANDLERS]``, and the OIDC discovery documents in ``app[appkeys.OIDC]`` (None when
the issuer cannot have them). See ``authenticator.py``, ``tokenrequest.py``,
``identity_reviews.py`` and ``apiserver/oidc.py``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from kubesvc.apiserver import oidc
from kubesvc.apiserver.auth.options import AuthenticationOptions, ServiceAccountConfig, build_authenticator, resolve_service_accounts
from kubesvc.apiserver.auth.identity_reviews import IdentityReviews
from kubesvc.apiserver.auth.tokenrequest import TokenRequests
from kubesvc.apiserver import appkeys

log = logging.getLogger("kubesvc.apiserver.auth")

AUTHENTICATION_GROUP = "authentication.k8s.io"


def install(app, options: AuthenticationOptions, data_dir: Path, external_address: str, *, x509=None) -> ServiceAccountConfig:
    """Wire authentication into ``app``; ValueError (one line) for bad flags or files. The
    only bearer tokens are the ones the flags configure: ``--token-auth-file``'s, ServiceAccount
    JWTs and (``--enable-bootstrap-token-auth``) bootstrap tokens; the server has none of its own."""
    registry, clock = app[appkeys.REGISTRY], app[appkeys.CLOCK]
    service_accounts = resolve_service_accounts(options, data_dir)
    authenticator = build_authenticator(options, service_accounts, registry, clock, x509=x509)
    app[appkeys.AUTHENTICATOR] = authenticator
    app[appkeys.SERVICE_ACCOUNTS] = service_accounts
    handlers = app.setdefault(appkeys.CREATE_HANDLERS, {})
    handlers[("", "serviceaccounts/token")] = TokenRequests(registry, service_accounts, clock).handle
    reviews = IdentityReviews(authenticator, clock)
    handlers[(AUTHENTICATION_GROUP, "tokenreviews")] = reviews.token_review
    handlers[(AUTHENTICATION_GROUP, "selfsubjectreviews")] = reviews.self_subject_review
    try:
        app[appkeys.OIDC] = oidc.build_metadata(service_accounts.issuer, service_accounts.jwks_uri, external_address, service_accounts.public_keys)
    except ValueError as exc:
        log.warning("not serving OpenID Connect discovery documents: %s", exc)
        app[appkeys.OIDC] = None
    return service_accounts
