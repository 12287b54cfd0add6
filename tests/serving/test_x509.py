"""x509 client-certificate authentication: the mapping (CN, O, UID, credential id), the checks
made per request, and what the TLS handshake refuses before any request."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubesvc.api.errors import StatusError
from kubesvc.serving import pki
from kubesvc.serving.x509 import (CREDENTIAL_ID_KEY, UID_OID, CertificateRejected, X509Authenticator, check_usable,
                                         request_client_certificates, user_from_certificate)
from tests.serving.tls_pair import client_context, handshake, server_context

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
CA_CERT, CA_KEY = pki.new_ca(NOW)


def certificate(attributes: list[tuple], usages: list | None = (ExtendedKeyUsageOID.CLIENT_AUTH,),
                not_before: datetime = NOW - timedelta(hours=1), not_after: datetime = NOW + timedelta(days=365)) -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(oid, value) for oid, value in attributes]))
               .issuer_name(CA_CERT.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(not_before).not_valid_after(not_after))
    if usages is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    return builder.sign(CA_KEY, hashes.SHA256())


CN, O = NameOID.COMMON_NAME, NameOID.ORGANIZATION_NAME


@pytest.mark.parametrize("attributes, name, groups, uid", [
    ([(CN, "system:admin"), (O, "system:masters")], "system:admin", ("system:masters",), ""),
    ([(O, "system:nodes"), (CN, "system:node:n1")], "system:node:n1", ("system:nodes",), ""),
    ([(CN, "jane"), (O, "b-team"), (O, "a-team")], "jane", ("b-team", "a-team"), ""),
    ([(CN, "jane"), (UID_OID, "1234")], "jane", (), "1234"),
    ([(CN, "system:kube-proxy")], "system:kube-proxy", (), ""),
], ids=["admin", "node", "groups-in-order", "uid", "no-groups"])
def test_common_name_user_conversion(attributes, name, groups, uid):
    cert = certificate(attributes)
    user = user_from_certificate(cert)
    der = cert.public_bytes(serialization.Encoding.DER)
    assert (user.name, user.groups, user.uid) == (name, groups, uid)
    assert user.extra == {CREDENTIAL_ID_KEY: (f"X509SHA256={hashlib.sha256(der).hexdigest()}",)}


def test_an_empty_common_name_is_not_this_methods_user():
    assert user_from_certificate(certificate([(O, "system:masters")])) is None


def test_two_uids_are_an_error():
    with pytest.raises(CertificateRejected, match="expected 1 UID, but found multiple"):
        user_from_certificate(certificate([(CN, "jane"), (UID_OID, "1"), (UID_OID, "2")]))


@pytest.mark.parametrize("cert, problem", [
    (certificate([(CN, "a")]), None),
    (certificate([(CN, "a")], usages=None), None),
    (certificate([(CN, "a")], usages=[ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE]), None),
    (certificate([(CN, "a")], usages=[ExtendedKeyUsageOID.SERVER_AUTH]), "incompatible key usage"),
    (certificate([(CN, "a")], not_after=NOW - timedelta(seconds=1)), "is after"),
    (certificate([(CN, "a")], not_before=NOW + timedelta(minutes=5)), "is before"),
], ids=["client-auth", "no-eku", "any-eku", "server-only", "expired", "not-yet-valid"])
def test_per_request_checks(cert, problem):
    if problem is None:
        check_usable(cert, NOW)
    else:
        with pytest.raises(CertificateRejected, match=problem):
            check_usable(cert, NOW)


def test_a_certificate_that_expires_on_a_kept_alive_connection_is_401():
    cert = certificate([(CN, "jane")], not_after=NOW + timedelta(minutes=1))
    der = cert.public_bytes(serialization.Encoding.DER)
    clock = {"now": NOW}
    authenticator = X509Authenticator(now=lambda: clock["now"])
    assert authenticator.authenticate_der(der).name == "jane"
    clock["now"] = NOW + timedelta(minutes=2)
    with pytest.raises(StatusError) as refused:
        authenticator.authenticate_der(der)
    assert (refused.value.code, refused.value.message) == (401, "Unauthorized")


class _Transport:
    def __init__(self, ssl_object):
        self._ssl_object = ssl_object

    def get_extra_info(self, name):
        return self._ssl_object if name == "ssl_object" else None


class _Request:
    def __init__(self, transport):
        self.transport = transport


class _SSLObject:
    def __init__(self, der):
        self._der = der

    def getpeercert(self, binary_form=False):
        return self._der


@pytest.mark.parametrize("transport", [None, _Transport(None), _Transport(_SSLObject(None))], ids=["no-transport", "plain", "no-cert"])
def test_no_certificate_is_not_this_methods_user(transport):
    assert X509Authenticator().authenticate(_Request(transport)) is None


@pytest.fixture
def cluster(tmp_path):
    ca = pki.ClusterCA(tmp_path / "pki")
    serving = ca.ensure("apiserver", pki.apiserver_serving_spec(["10.96.0.0/12"], "127.0.0.1"))
    server = request_client_certificates(server_context(serving), ca.cert_path)
    return ca, server


def test_handshake_hands_the_verified_certificate_to_the_authenticator(cluster):
    ca, server = cluster
    der = handshake(server, client_context(ca, ca.client("kube-proxy", pki.PROXY)))
    assert X509Authenticator().authenticate_der(der).name == "system:kube-proxy"


def test_a_client_without_a_certificate_still_connects(cluster):
    ca, server = cluster
    assert handshake(server, client_context(ca)) is None


def test_a_certificate_from_another_ca_fails_the_handshake(cluster, tmp_path):
    ca, server = cluster
    stranger = pki.ClusterCA(tmp_path / "other").client("admin", pki.ADMIN)
    with pytest.raises(Exception) as refused:
        handshake(server, client_context(ca, stranger))
    assert "certificate" in str(refused.value).lower() or "unknown ca" in str(refused.value).lower()


def test_an_expired_certificate_fails_the_handshake(cluster, tmp_path):
    ca, server = cluster
    expired = pki.ClusterCA(tmp_path / "pki", now=datetime.now(timezone.utc) - timedelta(days=800)).client("old", pki.ADMIN)
    with pytest.raises(Exception, match="(?i)expired"):
        handshake(server, client_context(ca, expired))
