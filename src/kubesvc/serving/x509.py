"""x509 client-certificate authentication (k8s.io/apiserver pkg/authentication/request/x509,
``x509.go``; identity.md §1.2).

A client proves who it is with the certificate it presents in the TLS handshake. The server
asks for one (``--client-ca-file`` set: Go's ``tls.RequestClientCert``) but does not demand
it, so clients with a bearer token, or none, still connect.

**Verification.** The certificate must chain to a CA of ``--client-ca-file`` and be valid for
client authentication (``KeyUsages=[ClientAuth]``: a certificate with an extended key usage
must list ``clientAuth``; one without any is valid for every use, as Go and OpenSSL agree).
Python's ``ssl`` cannot ask for a certificate without verifying it, so the chain, the dates
and the key usage are checked by OpenSSL during the handshake (``ssl.CERT_OPTIONAL``): a
certificate from an unknown CA, or an expired one, fails the handshake instead of earning the
401 kube-apiserver would answer. Both end in no access. Because a keep-alive connection may
outlive its certificate, the dates and the key usage are checked again on every request, as
upstream does (a 401 then).

**Mapping** (``CommonNameUserConversion``):

* user name = the subject's Common Name; an empty CN means "not authenticated by this
  method" (the next authenticator is tried);
* groups = every Organization of the subject, in order (``O=system:masters`` is a superuser,
  ``O=system:nodes`` with ``CN=system:node:<name>`` a node);
* uid = the subject's ``UID`` attribute (OID 0.9.2342.19200300.100.1.1; gate
  ``AllowParsingUserUIDFromCertAuth``, on since 1.33); more than one is an error;
* extra ``authentication.kubernetes.io/credential-id`` = ``X509SHA256=<hex SHA-256 of the
  certificate's DER>`` (1.32+): what audit logs use to tell two certificates of one user apart.

``system:authenticated`` is not added here: the authenticator chain adds it to every
authenticated user (upstream ``AuthenticatedGroupAdder``).

Interface for the chain: :class:`X509Authenticator` ``.authenticate(request)`` returns a
:class:`UserInfo`, ``None`` when the request carries no (usable-for-us) certificate, or raises
``errors.unauthorized()`` (401) for a certificate that no longer verifies.
:func:`request_client_certificates` turns a server ``SSLContext`` into one that asks for
certificates from a CA bundle; the apiserver and the node agent both use it.
"""

from __future__ import annotations

import hashlib
import ssl
import warnings
from collections import OrderedDict
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

from kubesvc.api import errors
from kubesvc.serving.user import UserInfo
from kubesvc.util.golang import rfc3339

CREDENTIAL_ID_KEY = "authentication.kubernetes.io/credential-id"
UID_OID = ObjectIdentifier("0.9.2342.19200300.100.1.1")
_CACHE_SIZE = 1024  # certificates parsed once per distinct DER, not once per request


class CertificateRejected(Exception):
    """The certificate verified at the handshake but is not (or no longer) acceptable."""


def request_client_certificates(context: ssl.SSLContext, client_ca_file: str | Path) -> ssl.SSLContext:
    """Ask TLS clients for a certificate signed by a CA of ``client_ca_file`` (a PEM bundle),
    without requiring one. Returns ``context``."""
    context.verify_mode = ssl.CERT_OPTIONAL
    context.load_verify_locations(cafile=str(client_ca_file))
    return context


def peer_certificate_der(transport) -> bytes | None:
    """The DER of the verified leaf certificate the client presented on this connection."""
    if transport is None:
        return None
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    return ssl_object.getpeercert(binary_form=True) or None


def _attribute_values(name: x509.Name, oid: ObjectIdentifier) -> list[str]:
    return [str(attribute.value) for attribute in name.get_attributes_for_oid(oid)]


def check_usable(cert: x509.Certificate, now: datetime) -> None:
    """Upstream's per-request ``Verify`` beyond the chain: within its dates, and good for
    client authentication. Raises :class:`CertificateRejected` with Go's wording."""
    _check_usability(_usability(cert), now)


# (notBefore, notAfter, why its key usage does not allow client authentication or None): what
# check_usable reads from a certificate, read once per certificate (cryptography builds new
# datetimes and extension objects on every access)
_Usability = tuple[datetime, datetime, "str | None"]


def _usability(cert: x509.Certificate) -> _Usability:
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        usage_error = None
    else:
        client_auth = ExtendedKeyUsageOID.CLIENT_AUTH in usages or ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE in usages
        usage_error = None if client_auth else "x509: certificate specifies an incompatible key usage"
    return cert.not_valid_before_utc, cert.not_valid_after_utc, usage_error


def _check_usability(usability: _Usability, now: datetime) -> None:
    not_before, not_after, usage_error = usability
    if now < not_before:
        raise CertificateRejected(f"x509: certificate has expired or is not yet valid: current time {rfc3339(now)} is before "
                                  f"{rfc3339(not_before)}")
    if now > not_after:
        raise CertificateRejected(f"x509: certificate has expired or is not yet valid: current time {rfc3339(now)} is after "
                                  f"{rfc3339(not_after)}")
    if usage_error is not None:
        raise CertificateRejected(usage_error)


def certificate_subject(cert: x509.Certificate) -> x509.Name:
    """The subject, read as Go reads it: a CN longer than X.520's 64 characters (a
    ServiceAccount user can be) is accepted without cryptography's warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return cert.subject


def user_from_certificate(cert: x509.Certificate, der: bytes | None = None) -> UserInfo | None:
    """``CommonNameUserConversion``: CN -> name, O -> groups, UID -> uid; None for an empty CN."""
    subject = certificate_subject(cert)
    common_names = _attribute_values(subject, NameOID.COMMON_NAME)
    name = common_names[0] if common_names else ""
    if not name:
        return None
    uids = _attribute_values(subject, UID_OID)
    if len(uids) > 1:
        raise CertificateRejected(f"expected 1 UID, but found multiple: {uids}")
    der = der if der is not None else cert.public_bytes(Encoding.DER)
    return UserInfo(name, uid=uids[0] if uids else "", groups=tuple(_attribute_values(subject, NameOID.ORGANIZATION_NAME)),
                    extra={CREDENTIAL_ID_KEY: (f"X509SHA256={hashlib.sha256(der).hexdigest()}",)})


class X509Authenticator:
    """The user named by the client certificate of the request's connection (see the module
    docstring for the contract). ``now`` is injected for tests."""

    def __init__(self, now: Callable[[], datetime] | None = None):
        self._now = now or (lambda: datetime.now(timezone.utc))
        self._parsed: OrderedDict[bytes, tuple[_Usability, UserInfo | None]] = OrderedDict()

    def authenticate(self, request) -> UserInfo | None:
        der = peer_certificate_der(request.transport)
        if der is None:
            return None
        return self.authenticate_der(der)

    def authenticate_der(self, der: bytes) -> UserInfo | None:
        """The user of a handshake-verified certificate given as DER."""
        try:
            usability, user = self._parse(der)
            _check_usability(usability, self._now())
        except (CertificateRejected, ValueError):
            raise errors.unauthorized() from None
        return user

    def _parse(self, der: bytes) -> tuple[_Usability, UserInfo | None]:
        hit = self._parsed.get(der)
        if hit is not None:
            self._parsed.move_to_end(der)
            return hit
        cert = x509.load_der_x509_certificate(der)
        entry = (_usability(cert), user_from_certificate(cert, der))
        self._parsed[der] = entry
        if len(self._parsed) > _CACHE_SIZE:
            self._parsed.popitem(last=False)
        return entry
