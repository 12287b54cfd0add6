"""Where bearer tokens come from, the static token file, the token union and its cache
(auth/tokens.py), and the request authenticator's chain rules (auth/authenticator.py)."""

from __future__ import annotations

import base64

import pytest

from kubesvc.apiserver.auth.authenticator import ANONYMOUS_USER, Authenticator, Credentials, with_authenticated_group
from kubesvc.apiserver.auth.tokens import (EXTRA_SPACE_WARNING, AuthenticationError, CachedTokens, Response, StaticTokens, TokenUnion,
                                           bearer_from_header, bearer_from_websocket_protocols, parse_token_file)
from kubesvc.serving.user import UserInfo


@pytest.mark.parametrize("header,token,warning", [
    (None, None, ""),
    ("", None, ""),
    ("Bearer abc", "abc", ""),
    ("bEaReR abc", "abc", ""),
    ("  Bearer abc  ", "abc", ""),
    ("Bearer abc def", "abc", ""),
    ("Bearer  abc", None, EXTRA_SPACE_WARNING),
    ("Bearer", None, ""),
    ("Basic YTpi", None, ""),
], ids=["none", "empty", "plain", "scheme-case", "trimmed", "third-part-ignored", "extra-space", "no-token", "basic"])
def test_bearer_from_header(header, token, warning):
    parsed = bearer_from_header(header)
    assert (parsed.token, parsed.warning) == (token, warning)


def _protocol(token: bytes) -> str:
    return "base64url.bearer.authorization.k8s.io." + base64.urlsafe_b64encode(token).rstrip(b"=").decode()


@pytest.mark.parametrize("headers,token,others", [
    ((f"{_protocol(b'tok')}, v4.channel.k8s.io",), "tok", ["v4.channel.k8s.io"]),
    (("v4.channel.k8s.io", _protocol(b"t?k")), "t?k", ["v4.channel.k8s.io"]),
    (("v4.channel.k8s.io",), None, ["v4.channel.k8s.io"]),
], ids=["one-header", "two-headers", "no-token"])
def test_bearer_from_websocket_protocols(headers, token, others):
    assert bearer_from_websocket_protocols(headers) == (token, others)


@pytest.mark.parametrize("headers,error", [
    ((_protocol(b"tok"),), "missing additional subprotocol"),
    ((f"{_protocol(b'a')},{_protocol(b'b')},x",), "multiple base64.bearer.authorization tokens specified"),
    (("base64url.bearer.authorization.k8s.io.!!,x",), "invalid base64.bearer.authorization token encoding"),
    (("base64url.bearer.authorization.k8s.io.dG9r=,x",), "invalid base64.bearer.authorization token encoding"),
    ((f"{_protocol(bytes([0xff, 0xfe]))},x",), "invalid base64.bearer.authorization token"),
], ids=["alone", "twice", "bad-base64", "padded", "not-utf8"])
def test_bad_websocket_tokens(headers, error):
    with pytest.raises(AuthenticationError) as info:
        bearer_from_websocket_protocols(headers)
    assert str(info.value) == error


TOKEN_FILES = [
    ("tok,alice,uid-1\n", {"tok": UserInfo("alice", "uid-1")}),
    ('tok,bob,uid-2,"system:masters,devs"\n', {"tok": UserInfo("bob", "uid-2", ("system:masters", "devs"))}),
    ("tok,bob,uid-2,g1,ignored\n", {"tok": UserInfo("bob", "uid-2", ("g1",))}),
    ("a,one,1\r\n\r\nb,two,2", {"a": UserInfo("one", "1"), "b": UserInfo("two", "2")}),
    ("a,first,1\na,second,2\n", {"a": UserInfo("second", "2")}),
    (",nobody,0\nb,two,2\n", {"b": UserInfo("two", "2")}),
    ('"to,k","na""me",3\n', {"to,k": UserInfo('na"me', "3")}),
    (' tok , spaced ,1\n', {" tok ": UserInfo(" spaced ", "1")}),
    ('tok,u,1,""\n', {"tok": UserInfo("u", "1", ("",))}),
]


@pytest.mark.parametrize("text,tokens", TOKEN_FILES, ids=["three-columns", "quoted-groups", "fifth-column-ignored", "crlf-and-blank-lines",
                                                          "duplicate-last-wins", "empty-token-skipped", "quotes", "spaces-kept", "empty-group"])
def test_token_file(text, tokens):
    assert parse_token_file(text, "/f.csv")[0] == tokens


def test_token_file_warnings():
    assert parse_token_file(",a,1\nt,b,2\nt,c,3\n", "/f.csv")[1] == [
        "empty token has been found in token file '/f.csv', record number '1'",
        "duplicate token has been found in token file '/f.csv', record number '3'"]


@pytest.mark.parametrize("text,error", [
    ("tok,alice\n", "token file '/f.csv' must have at least 3 columns (token, user name, user uid), found 2"),
    ('to"k,a,1\n', 'parse error on line 1, column 3: bare " in non-quoted-field'),
    ('"tok"x,a,1\n', 'parse error on line 1, column 6: extraneous or missing " in quoted-field'),
    ('"tok,a,1\n', 'record on line 1; parse error on line 2, column 1: extraneous or missing " in quoted-field'),
], ids=["two-columns", "bare-quote", "text-after-quote", "unclosed-quote"])
def test_token_file_errors(text, error):
    with pytest.raises(ValueError) as info:
        parse_token_file(text, "/f.csv")
    assert str(info.value) == error


class Fixed:
    def __init__(self, answer):
        self.answer = answer
        self.calls = 0

    async def authenticate_token(self, token, audiences):
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


ALICE = Response(UserInfo("alice"))


@pytest.mark.parametrize("answers,result,error", [
    ([None, ALICE], ALICE, None),
    ([AuthenticationError("bad sig"), ALICE], ALICE, None),
    ([None, None], None, None),
    ([AuthenticationError("bad sig"), None], None, "bad sig"),
    ([AuthenticationError("a"), AuthenticationError("b")], None, "[a, b]"),
], ids=["second-wins", "error-then-success", "nobody", "one-error", "errors-aggregated"])
async def test_token_union(answers, result, error):
    union = TokenUnion([Fixed(a) for a in answers])
    if error:
        with pytest.raises(AuthenticationError) as info:
            await union.authenticate_token("t", ())
        assert str(info.value) == error
    else:
        assert await union.authenticate_token("t", ()) == result


async def test_cache_keeps_successes_ten_seconds_and_failures_not_at_all():
    now = [0.0]
    inner = Fixed(ALICE)
    cache = CachedTokens(inner, lambda: now[0])
    assert await cache.authenticate_token("t", ()) == ALICE
    inner.answer = None
    now[0] = 9.9
    assert await cache.authenticate_token("t", ()) == ALICE
    assert await cache.authenticate_token("t", ("other-audience",)) is None
    now[0] = 10.1
    assert await cache.authenticate_token("t", ()) is None
    assert inner.calls == 3
    await cache.authenticate_token("t", ())
    assert inner.calls == 4


async def test_cache_is_bounded():
    cache = CachedTokens(Fixed(ALICE), lambda: 0.0, size=2)
    for token in "abc":
        await cache.authenticate_token(token, ())
    assert len(cache._cache) == 2


@pytest.mark.parametrize("user,groups", [
    (UserInfo("alice", groups=("devs",)), ("devs", "system:authenticated")),
    (UserInfo("alice", groups=("system:authenticated", "devs")), ("system:authenticated", "devs")),
    (UserInfo("odd", groups=("system:unauthenticated",)), ("system:unauthenticated",)),
    (UserInfo("system:anonymous", groups=("system:unauthenticated",)), ("system:unauthenticated",)),
], ids=["appended", "already-there", "unauthenticated-kept", "anonymous"])
def test_authenticated_group_adder(user, groups):
    assert with_authenticated_group(user).groups == groups


STATIC = StaticTokens({"good": UserInfo("alice", "u1", ("devs",))})


@pytest.mark.parametrize("credentials,anonymous,user,error", [
    (Credentials(), True, ANONYMOUS_USER, None),
    (Credentials(), False, None, None),
    (Credentials(authorization="Bearer good"), True, UserInfo("alice", "u1", ("devs", "system:authenticated")), None),
    (Credentials(authorization="Bearer bad"), True, None, "invalid bearer token"),
    (Credentials(authorization="Basic abc"), True, ANONYMOUS_USER, None),
    (Credentials(certificate_user=UserInfo("system:admin", groups=("system:masters",)), authorization="Bearer bad"), True,
     UserInfo("system:admin", groups=("system:masters", "system:authenticated")), None),
    (Credentials(websocket_protocols=(_protocol(b"good") + ",v4.channel.k8s.io",)), True,
     UserInfo("alice", "u1", ("devs", "system:authenticated")), None),
    (Credentials(websocket_protocols=(_protocol(b"good"),)), True, None, "missing additional subprotocol"),
], ids=["anonymous", "no-anonymous", "token", "bad-token-never-anonymous", "other-scheme-is-anonymous", "certificate-first",
        "websocket-token", "websocket-error"])
async def test_request_chain(credentials, anonymous, user, error):
    authenticator = Authenticator(STATIC, anonymous=anonymous)
    if error:
        with pytest.raises(AuthenticationError) as info:
            await authenticator.authenticate_credentials(credentials)
        assert str(info.value) == error
        return
    response = await authenticator.authenticate_credentials(credentials)
    if user is ANONYMOUS_USER or user is None:
        assert response is None
    else:
        assert response.user == user


@pytest.mark.parametrize("header", ["Bearer \udcff\udcfe", "Bearer caf\udce9"], ids=["not-utf-8", "latin-1"])
async def test_a_token_that_is_not_utf_8_is_invalid(header):
    """aiohttp hands header bytes that are not UTF-8 on as surrogate escapes; such a token is
    no one's (Go compares the bytes), never an encoding error."""
    authenticator = Authenticator(CachedTokens(TokenUnion([STATIC]), lambda: 0.0))
    with pytest.raises(AuthenticationError, match="invalid bearer token"):
        await authenticator.authenticate_credentials(Credentials(authorization=header))


async def test_audiences_outside_the_api_audiences_are_refused():
    authenticator = Authenticator(Fixed(Response(UserInfo("sa"), ("elsewhere",))), api_audiences=("https://kubernetes.default.svc",))
    with pytest.raises(AuthenticationError, match="unable to match audience"):
        await authenticator.authenticate_credentials(Credentials(authorization="Bearer x"))
