"""Authentication: from a request's credentials to a :class:`UserInfo` (identity.md §1).

A request with no credential any authenticator recognises is ``system:anonymous`` in
``system:unauthenticated``; a credential that is presented but does not verify is 401, never
anonymous (upstream ``union.NewFailOnError``).
"""

from __future__ import annotations

import hmac

from aiohttp import web

from kubesvc.api import errors
from kubesvc.apiserver.auth.user import ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS, SYSTEM_PRIVILEGED_GROUP, UserInfo

ANONYMOUS_USER = UserInfo(ANONYMOUS, groups=(ALL_UNAUTHENTICATED,))


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, presented = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        return None
    return presented.strip()


class TokenAuthenticator:
    """One admin bearer token (``system:masters``); no token is anonymous."""

    def __init__(self, token: str):
        self._token = token.encode()

    def authenticate(self, request: web.Request) -> UserInfo:
        presented = bearer_token(request.headers.get("Authorization"))
        if presented is None:
            return ANONYMOUS_USER
        if hmac.compare_digest(presented.encode(), self._token):
            return UserInfo("admin", groups=(SYSTEM_PRIVILEGED_GROUP, ALL_AUTHENTICATED))
        raise errors.unauthorized()
