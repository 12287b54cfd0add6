"""Authentication: from a request's credentials to a :class:`UserInfo` (kube-apiserver's
``pkg/kubeapiserver/authenticator/config.go`` ``New``; identity.md §1.1, §1.7, §1.8).

The request authenticator is a union tried in upstream's order, the first success winning:

1. the x509 client certificate of the TLS connection (``--client-ca-file``; ``x509.py``);
2. a bearer token from the ``Authorization`` header, then
3. the same token from a websocket's ``base64url.bearer.authorization.k8s.io.`` subprotocol;
   both ask one token union, cached 10 s on success (``tokens.py``), of
   a. the static token file (``--token-auth-file``),
   b. legacy ServiceAccount tokens (issuer ``kubernetes/serviceaccount``),
   c. bound ServiceAccount tokens (the ``--service-account-issuer`` values),
   d. bootstrap tokens (``--enable-bootstrap-token-auth``).

Every authenticated user then gets ``system:authenticated`` appended (unless it is
``system:anonymous`` or already holds ``system:authenticated``/``system:unauthenticated``).
A request with no credential any authenticator recognises is ``system:anonymous`` in
``system:unauthenticated`` when ``--anonymous-auth`` is on (the default); a credential that is
presented and fails is a 401 ``Unauthorized`` Status, never anonymous (``NewFailOnError``).
A token good only for other audiences than the API's is a 401 as well.

The ``Authorization`` header is not removed after use as upstream does: no handler here reads
or forwards it (calls to node agents carry the apiserver's own certificate).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Sequence

from kubesvc.api import errors
from kubesvc.api.errors import StatusError
from kubesvc.apiserver.auth.tokens import (AuthenticationError, Response, TokenAuthenticator, aggregate, bearer_from_header,
                                           bearer_from_websocket_protocols, intersect, is_websocket_request)
from kubesvc.serving.user import ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS, UserInfo

log = logging.getLogger("kubesvc.apiserver.auth")

ANONYMOUS_USER = UserInfo(ANONYMOUS, groups=(ALL_UNAUTHENTICATED,))
INVALID_BEARER_TOKEN = "invalid bearer token"


def with_authenticated_group(user: UserInfo) -> UserInfo:
    """upstream ``AuthenticatedGroupAdder``."""
    if user.name == ANONYMOUS or ALL_AUTHENTICATED in user.groups or ALL_UNAUTHENTICATED in user.groups:
        return user
    return replace(user, groups=(*user.groups, ALL_AUTHENTICATED))


def audiences_acceptable(api_audiences: Sequence[str], response_audiences: Sequence[str]) -> bool:
    """The authentication filter's check: either side empty, or they meet."""
    return not api_audiences or not response_audiences or bool(intersect(api_audiences, response_audiences))


@dataclass(frozen=True)
class Credentials:
    """What a request presents: the client certificate's user (already mapped by the x509
    authenticator), the Authorization header and the websocket subprotocols."""

    certificate_user: UserInfo | None = None
    authorization: str | None = None
    websocket_protocols: tuple[str, ...] = ()


class Authenticator:
    """The request authenticator. ``x509`` maps the connection's verified certificate
    (``X509Authenticator``; None without ``--client-ca-file``); ``tokens`` is the cached token
    union (None when no token authenticator is configured)."""

    def __init__(self, tokens: TokenAuthenticator | None, *, x509=None, api_audiences: Sequence[str] = (), anonymous: bool = True):
        self.tokens = tokens
        self.x509 = x509
        self.api_audiences = tuple(api_audiences)
        self.anonymous = anonymous

    async def authenticate(self, request) -> UserInfo:
        """The request's user; a 401 Status when a credential fails (or none, without anonymous)."""
        errors_seen: list[Exception] = []
        certificate_user = None
        if self.x509 is not None:
            try:
                certificate_user = self.x509.authenticate(request)
            except StatusError as exc:  # a certificate that no longer verifies: the next method may still succeed
                errors_seen.append(AuthenticationError(exc.message))
        headers = request.headers
        protocols = tuple(headers.getall("Sec-WebSocket-Protocol", ())) if is_websocket_request(headers) else ()
        try:
            response = await self.authenticate_credentials(Credentials(certificate_user, headers.get("Authorization"), protocols), errors_seen)
        except AuthenticationError as exc:
            log.debug("unable to authenticate %s %s: %s", request.method, request.path, exc)
            raise errors.unauthorized() from None
        if response is None:
            if self.anonymous:
                return ANONYMOUS_USER
            raise errors.unauthorized()
        return response.user

    async def authenticate_credentials(self, credentials: Credentials, errors_seen: list[Exception] | None = None) -> Response | None:
        """The union, the group adder and the audience check; None: no credential at all.
        Raises AuthenticationError when a credential was presented and none succeeded."""
        errors_seen = list(errors_seen or ())
        response = await self._union(credentials, errors_seen)
        if response is None:
            if errors_seen:
                raise aggregate(errors_seen)
            return None
        if not audiences_acceptable(self.api_audiences, response.audiences):
            raise AuthenticationError(f"unable to match audience: {list(response.audiences)} , accepted: {list(self.api_audiences)}")
        return Response(with_authenticated_group(response.user), response.audiences)

    async def _union(self, credentials: Credentials, errors_seen: list[Exception]) -> Response | None:
        if credentials.certificate_user is not None:
            return Response(credentials.certificate_user)
        if self.tokens is None:
            return None
        bearer = bearer_from_header(credentials.authorization)
        if bearer.token is not None:
            try:
                response = await self.tokens.authenticate_token(bearer.token, self.api_audiences)
            except AuthenticationError as exc:
                errors_seen.append(exc)
            else:
                if response is not None:
                    return response
                errors_seen.append(AuthenticationError(INVALID_BEARER_TOKEN))
        if credentials.websocket_protocols:
            try:
                token, _ = bearer_from_websocket_protocols(credentials.websocket_protocols)
                if token is not None:
                    response = await self.tokens.authenticate_token(token, self.api_audiences)
                    if response is not None:
                        return response
                    errors_seen.append(AuthenticationError(INVALID_BEARER_TOKEN))
            except AuthenticationError as exc:
                errors_seen.append(exc)
        return None

    async def review_token(self, token: str, audiences: Sequence[str]) -> tuple[Response | None, str]:
        """A TokenReview: the request authenticator run on a request carrying only
        ``Authorization: Bearer <token>``, for ``audiences`` (the API audiences when empty).
        Returns (the response or None, the error text)."""
        reviewer = Authenticator(self.tokens, api_audiences=tuple(audiences) or self.api_audiences, anonymous=self.anonymous)
        try:
            return await reviewer.authenticate_credentials(Credentials(authorization="Bearer " + token)), ""
        except AuthenticationError as exc:
            return None, str(exc)
