"""TokenRequest rules (auth/tokenrequest.py): lifetimes, extension, bound object kinds."""

from __future__ import annotations

import pytest

from kubesvc.apiserver.auth.tokenrequest import EXPIRATION_EXTENSION_SECONDS, Lifetime, group_version_kind, token_lifetime, validate_expiration

API = ("https://kubernetes.default.svc.cluster.local",)


@pytest.mark.parametrize("requested,max_seconds,extend,pod_bound,audiences,lifetime", [
    (3600, 0, True, False, list(API), Lifetime(3600, 3600)),
    (3607, 0, True, True, list(API), Lifetime(3607, EXPIRATION_EXTENSION_SECONDS, 3607)),
    (3607, 0, True, True, [], Lifetime(3607, EXPIRATION_EXTENSION_SECONDS, 3607)),
    (3607, 0, False, True, list(API), Lifetime(3607, 3607)),
    (3607, 0, True, False, list(API), Lifetime(3607, 3607)),
    (3607, 0, True, True, ["vault"], Lifetime(3607, 3607)),
    (3608, 0, True, True, list(API), Lifetime(3608, 3608)),
    (7200, 3600, True, False, list(API), Lifetime(3600, 3600, 0, "requested expiration of 7200 seconds shortened to 3600 seconds")),
    (3600, 7200, True, False, list(API), Lifetime(3600, 3600)),
], ids=["plain", "projected-volume-extended", "no-audiences-is-api", "extension-off", "not-pod-bound", "foreign-audience",
        "not-3607", "capped", "under-cap"])
def test_token_lifetime(requested, max_seconds, extend, pod_bound, audiences, lifetime):
    assert token_lifetime(requested, max_seconds=max_seconds, extend=extend, pod_bound=pod_bound, audiences=audiences, api_audiences=API) == lifetime


@pytest.mark.parametrize("seconds,messages", [
    (600, []), (599, ["spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"]),
    (1 << 32, []), ((1 << 32) + 1, ["spec.expirationSeconds: Invalid value: 4294967297: may not specify a duration larger than 2^32 seconds"]),
], ids=["minimum", "too-short", "maximum", "too-long"])
def test_validate_expiration(seconds, messages):
    assert [str(e) for e in validate_expiration(seconds)] == messages


@pytest.mark.parametrize("api_version,kind,gvk", [
    ("v1", "Pod", ("", "v1", "Pod")), ("", "Pod", ("", "", "Pod")), ("apps/v1", "Deployment", ("apps", "v1", "Deployment")),
    ("a/b/c", "X", ("", "", "X")),
], ids=["core", "empty", "named-group", "malformed"])
def test_group_version_kind(api_version, kind, gvk):
    assert group_version_kind(api_version, kind) == gvk
