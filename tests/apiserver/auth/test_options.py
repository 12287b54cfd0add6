"""kube-apiserver's authentication flags (auth/options.py): upstream's validation messages, and
the ServiceAccount signing key kubesvc makes when none is given."""

from __future__ import annotations

import os
import stat

import pytest

from kubesvc.apiserver.auth import jwt
from kubesvc.apiserver.auth.options import DEFAULT_ISSUER, AuthenticationOptions, ensure_signing_key, resolve_service_accounts, validate


@pytest.mark.parametrize("options,problems", [
    (AuthenticationOptions(), []),
    (AuthenticationOptions(service_account_issuers=("",)), ["service-account-issuer should not be an empty string"]),
    (AuthenticationOptions(service_account_issuers=("https://a", "https://a")), ['service-account-issuer "https://a" is already specified']),
    (AuthenticationOptions(service_account_jwks_uri="http://a/jwks"), ["service-account-jwks-uri requires https scheme, parsed as: http://a/jwks"]),
    (AuthenticationOptions(service_account_max_token_expiration=60),
     ["service-account-max-token-expiration 60s is invalid: must be between 1h and 2^32 seconds"]),
    (AuthenticationOptions(service_account_max_token_expiration=3600), []),
], ids=["defaults", "empty-issuer", "repeated-issuer", "jwks-not-https", "cap-too-short", "cap-one-hour"])
def test_validate(options, problems):
    assert validate(options) == problems


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_generated_signing_key_is_private_and_made_once(tmp_path):
    path = ensure_signing_key(tmp_path)
    assert path == tmp_path / "pki" / "sa.key"
    assert (_mode(path), _mode(path.parent)) == (0o600, 0o700)
    first = path.read_bytes()
    assert ensure_signing_key(tmp_path).read_bytes() == first


def test_a_signing_key_left_readable_is_made_private_again(tmp_path):
    path = ensure_signing_key(tmp_path)
    os.chmod(path, 0o644)
    os.chmod(path.parent, 0o755)
    ensure_signing_key(tmp_path)
    assert (_mode(path), _mode(path.parent)) == (0o600, 0o700)


def test_defaults_are_k3s_issuer_and_the_generated_key(tmp_path):
    config = resolve_service_accounts(AuthenticationOptions(), tmp_path)
    assert (config.issuers, config.api_audiences) == ((DEFAULT_ISSUER,), (DEFAULT_ISSUER,))
    assert [jwt.key_id(k) for k in config.public_keys] == [jwt.key_id(config.signing_key.public_key())]
