"""Bearer tokens: where a request carries one, the static token file, and what every token
authenticator shares (k8s.io/apiserver pkg/authentication/request/bearertoken,
request/websocket, token/tokenfile, token/union, token/cache; identity.md §1.1, §1.3).

A token authenticator answers one of three ways: a :class:`Response` (the user, and the
audiences the token is good for), ``None`` ("not mine": the next one is asked), or an
:class:`AuthenticationError` (the token is recognised but bad). The union of token
authenticators returns the first Response; if none, the errors joined as Go's
``utilerrors.NewAggregate`` prints them (one error alone, several as ``[a, b]``).

Where the token is:

* ``Authorization: Bearer <token>`` (scheme case-insensitive; the header split on spaces into at
  most three parts and the second taken: ``Bearer  x``, with two spaces, is no token at all
  and earns the warning below). A token nobody accepts is ``invalid bearer token``.
* a websocket upgrade's ``Sec-WebSocket-Protocol: base64url.bearer.authorization.k8s.io.<token
  base64url, no padding>`` (browsers cannot set headers on a websocket), next to at least one
  other subprotocol.

The static token file (``--token-auth-file``) is CSV (RFC 4180 quoting, as Go's encoding/csv
reads it): ``token,user,uid[,"group1,group2"]``; fewer than three columns stops the server;
an empty token is skipped, a repeated token's last line wins; it is read once, at start.

Results are cached (``tokencache``): a success for 10 s, keyed on a hash of the token and the
audiences asked for, failures not at all; so a deleted ServiceAccount or bootstrap token can
keep working for up to 10 s, as upstream.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol, Sequence

from kubesvc.apiserver.auth.jwt import b64url_decode
from kubesvc.serving.user import UserInfo
from kubesvc.util import golang

log = logging.getLogger("kubesvc.apiserver.auth")

EXTRA_SPACE_WARNING = "the provided Authorization header contains extra space before the bearer token, and is ignored"
WEBSOCKET_BEARER_PREFIX = "base64url.bearer.authorization.k8s.io."
SUCCESS_CACHE_TTL = 10.0
CACHE_SIZE = 4096


class AuthenticationError(Exception):
    """A credential was presented and is bad: the request is 401, never anonymous."""


@dataclass(frozen=True)
class Response:
    user: UserInfo
    audiences: tuple[str, ...] = ()


class TokenAuthenticator(Protocol):
    async def authenticate_token(self, token: str, audiences: Sequence[str]) -> Response | None: ...


def aggregate(errors: Sequence[Exception]) -> AuthenticationError:
    """Go's ``utilerrors.NewAggregate(errs).Error()``: one message alone, several as ``[a, b]``."""
    return AuthenticationError(golang.aggregate(errors))


def intersect(a: Sequence[str], b: Sequence[str]) -> tuple[str, ...]:
    """``authenticator.Audiences.Intersect``: the members of ``a`` also in ``b``, in ``a``'s order."""
    members = set(b)
    return tuple(x for x in a if x in members)


# ---- where the token is ------------------------------------------------------------------------


@dataclass(frozen=True)
class BearerToken:
    token: str | None  # None: no token here
    warning: str = ""


def bearer_from_header(authorization: str | None) -> BearerToken:
    """upstream bearertoken.AuthenticateRequest's parsing."""
    auth = (authorization or "").strip()
    if not auth:
        return BearerToken(None)
    parts = auth.split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer":
        return BearerToken(None)
    if not parts[1]:
        return BearerToken(None, EXTRA_SPACE_WARNING if len(parts) == 3 else "")
    return BearerToken(parts[1])


def is_websocket_request(headers: Mapping[str, str]) -> bool:
    connection = ",".join(headers.getall("Connection", [])) if hasattr(headers, "getall") else headers.get("Connection", "")
    return "upgrade" in connection.lower() and headers.get("Upgrade", "").lower() == "websocket"


def bearer_from_websocket_protocols(protocol_headers: Sequence[str]) -> tuple[str | None, list[str]]:
    """(token or None, the other subprotocols) from the ``Sec-WebSocket-Protocol`` values
    (upstream websocket.ProtocolAuthenticator); raises AuthenticationError as upstream does."""
    token: str | None = None
    others: list[str] = []
    for header in protocol_headers:
        for protocol in header.split(","):
            protocol = protocol.strip()
            if not protocol.startswith(WEBSOCKET_BEARER_PREFIX):
                others.append(protocol)
                continue
            if token is not None:
                raise AuthenticationError("multiple base64.bearer.authorization tokens specified")
            encoded = protocol[len(WEBSOCKET_BEARER_PREFIX):]
            try:
                decoded = b64url_decode(encoded)
            except ValueError:
                raise AuthenticationError("invalid base64.bearer.authorization token encoding") from None
            try:
                token = decoded.decode("utf-8")
            except UnicodeDecodeError:
                raise AuthenticationError("invalid base64.bearer.authorization token") from None
    if token and not others:
        raise AuthenticationError("missing additional subprotocol")
    return (token or None), others


# ---- the static token file ----------------------------------------------------------------------


class CSVError(ValueError):
    pass


def read_go_csv(text: str) -> list[list[str]]:
    """Records as Go's ``encoding/csv`` Reader reads them with ``FieldsPerRecord = -1``: fields
    separated by commas, double-quoted fields may hold commas, newlines and ``""``; blank lines
    skipped; ``\\r\\n`` read as ``\\n``; a quote inside an unquoted field, or a quoted field not
    closed properly, is a ParseError worded as Go's."""
    records: list[list[str]] = []
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    i = 0
    while i < len(lines):
        line, start_line = lines[i], i + 1
        i += 1
        if line == "":
            continue
        fields: list[str] = []
        pos, line_no = 0, start_line
        while True:
            if line[pos:pos + 1] != '"':  # unquoted field
                end = line.find(",", pos)
                field = line[pos:] if end < 0 else line[pos:end]
                quote = field.find('"')
                if quote >= 0:
                    raise CSVError(_csv_error(start_line, line_no, pos + quote + 1, 'bare " in non-quoted-field'))
                fields.append(field)
                if end < 0:
                    break
                pos = end + 1
                continue
            value, pos = [], pos + 1  # quoted field, possibly across lines
            while True:
                quote = line.find('"', pos)
                if quote < 0:
                    value.append(line[pos:] + "\n")
                    if i >= len(lines):
                        raise CSVError(_csv_error(start_line, line_no + 1, 1, 'extraneous or missing " in quoted-field'))
                    line, pos, line_no = lines[i], 0, line_no + 1
                    i += 1
                    continue
                value.append(line[pos:quote])
                after = line[quote + 1:quote + 2]
                if after == '"':
                    value.append('"')
                    pos = quote + 2
                    continue
                if after in ("", ","):
                    pos = quote + 1
                    break
                raise CSVError(_csv_error(start_line, line_no, quote + 2, 'extraneous or missing " in quoted-field'))
            fields.append("".join(value))
            if pos >= len(line):
                break
            pos += 1  # the comma
        records.append(fields)
    return records


def _csv_error(start_line: int, line: int, column: int, message: str) -> str:
    if start_line != line:
        return f"record on line {start_line}; parse error on line {line}, column {column}: {message}"
    return f"parse error on line {line}, column {column}: {message}"


def parse_token_file(text: str, path: str) -> tuple[dict[str, UserInfo], list[str]]:
    """(token -> user, warnings) from a ``--token-auth-file``'s text; ValueError names the file."""
    try:
        records = read_go_csv(text)
    except CSVError as exc:
        raise ValueError(f"{exc}") from None
    tokens: dict[str, UserInfo] = {}
    warnings: list[str] = []
    for number, record in enumerate(records, start=1):
        if len(record) < 3:
            raise ValueError(f"token file '{path}' must have at least 3 columns (token, user name, user uid), found {len(record)}")
        token, name, uid = record[0], record[1], record[2]
        if not token:
            warnings.append(f"empty token has been found in token file '{path}', record number '{number}'")
            continue
        if token in tokens:
            warnings.append(f"duplicate token has been found in token file '{path}', record number '{number}'")
        groups = tuple(record[3].split(",")) if len(record) >= 4 else ()
        tokens[token] = UserInfo(name, uid, groups)
    return tokens, warnings


def read_token_file(path: str | Path) -> dict[str, UserInfo]:
    """The users of a token file, its warnings logged; ValueError (one line) when unusable."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"open {path}: {getattr(exc, 'strerror', None) or exc}") from None
    tokens, warnings = parse_token_file(text, str(path))
    for warning in warnings:
        log.warning("%s", warning)
    return tokens


class StaticTokens:
    """``--token-auth-file``: the users of a token file read once at start."""

    def __init__(self, tokens: Mapping[str, UserInfo]):
        self._tokens = dict(tokens)

    @classmethod
    def from_file(cls, path: str | Path) -> "StaticTokens":
        return cls(read_token_file(path))

    async def authenticate_token(self, token: str, audiences: Sequence[str]) -> Response | None:
        user = self._tokens.get(token)
        return Response(user) if user is not None else None


# ---- union and cache ----------------------------------------------------------------------------


class TokenUnion:
    """The first authenticator that accepts the token wins; else the errors, aggregated."""

    def __init__(self, authenticators: Sequence[TokenAuthenticator]):
        self.authenticators = list(authenticators)

    async def authenticate_token(self, token: str, audiences: Sequence[str]) -> Response | None:
        errors: list[Exception] = []
        for authenticator in self.authenticators:
            try:
                response = await authenticator.authenticate_token(token, audiences)
            except AuthenticationError as exc:
                errors.append(exc)
                continue
            if response is not None:
                return response
        if errors:
            raise aggregate(errors)
        return None


class CachedTokens:
    """Successful answers kept ``ttl`` seconds (a bounded map; oldest dropped first)."""

    def __init__(self, inner: TokenAuthenticator, monotonic, ttl: float = SUCCESS_CACHE_TTL, size: int = CACHE_SIZE):
        self.inner = inner
        self.monotonic = monotonic
        self.ttl = ttl
        self.size = size
        self._cache: OrderedDict[bytes, tuple[float, Response]] = OrderedDict()

    def _key(self, token: str, audiences: Sequence[str]) -> bytes:
        """A hash of what was asked (the token is never kept). Header bytes that are not
        UTF-8 arrive as surrogate escapes and hash as those bytes."""
        digest = hashlib.sha256()
        for audience in audiences:
            digest.update(audience.encode("utf-8", "surrogateescape") + b"\x00")
        digest.update(b"\x01" + token.encode("utf-8", "surrogateescape"))
        return digest.digest()

    async def authenticate_token(self, token: str, audiences: Sequence[str]) -> Response | None:
        key = self._key(token, audiences)
        now = self.monotonic()
        hit = self._cache.get(key)
        if hit is not None:
            if hit[0] > now:
                return hit[1]
            del self._cache[key]
        response = await self.inner.authenticate_token(token, audiences)
        if response is not None and self.ttl > 0:
            self._cache[key] = (now + self.ttl, response)
            while len(self._cache) > self.size:
                self._cache.popitem(last=False)
        return response


class AudienceAgnostic:
    """upstream ``WrapAudienceAgnosticToken`` for tokens that name no audience (static file,
    bootstrap): good only for the API's own audiences. Asked for other audiences (a
    TokenReview for "vault"), the token is not ours; else the answer carries the audiences
    asked for that are the API's."""

    def __init__(self, inner: TokenAuthenticator, implicit_audiences: Sequence[str]):
        self.inner = inner
        self.implicit_audiences = tuple(implicit_audiences)

    async def authenticate_token(self, token: str, audiences: Sequence[str]) -> Response | None:
        if not audiences:
            return await self.inner.authenticate_token(token, audiences)
        granted = intersect(self.implicit_audiences, audiences)
        if not granted:
            return None
        response = await self.inner.authenticate_token(token, audiences)
        return Response(response.user, granted) if response is not None else None
