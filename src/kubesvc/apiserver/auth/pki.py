"""Credentials for the apiserver: a self-signed CA, a serving certificate, a bearer token, and
the kubeconfig that hands all three to kubectl and the Python client.

kubectl only sends a bearer token over TLS (it drops the Authorization header on plain http),
and verifies the server against ``certificate-authority-data``; the serving certificate needs
``subjectAltName=IP:127.0.0.1`` (api-compat.md G8). Everything lives in ``--data-dir`` and is
reused on restart, so a kubeconfig stays valid across restarts of the same data dir.
"""

from __future__ import annotations

import base64
import hmac
import ipaddress
import os
import secrets
import ssl
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

# Paths that answer without a token, as kube-apiserver's default RBAC lets system:unauthenticated
# read them (and the kubectl dispatcher calls /version before every command).
PUBLIC_PATHS = frozenset({"/version", "/healthz", "/livez", "/readyz"})


@dataclass(frozen=True)
class Credentials:
    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    token: str


def _write_private(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _new_ca(now: datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubesvc-ca")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _serving_sans(bind_address: str) -> list[x509.GeneralName]:
    ips = {"127.0.0.1"}
    if bind_address not in ("0.0.0.0", "::", ""):
        ips.add(bind_address)
    names: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in sorted(ips)]
    names.append(x509.DNSName("localhost"))
    names.append(x509.DNSName("kubernetes.default.svc"))
    return names


def _new_serving(ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, sans: list[x509.GeneralName], now: datetime,
                 common_name: str = "kube-apiserver"):
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def _sans_of(cert_path: Path) -> set:
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    return set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)


def ensure_credentials(data_dir: Path, bind_address: str) -> Credentials:
    """Create (once) the CA, token and a serving certificate covering the bind address."""
    pki = data_dir / "pki"
    pki.mkdir(parents=True, exist_ok=True)
    now = datetime.now(timezone.utc)
    ca_cert_path, ca_key_path = pki / "ca.crt", pki / "ca.key"
    if not (ca_cert_path.exists() and ca_key_path.exists()):
        ca, ca_key = _new_ca(now)
        _write_private(ca_key_path, _key_pem(ca_key))
        _write_private(ca_cert_path, ca.public_bytes(serialization.Encoding.PEM))
    ca = x509.load_pem_x509_certificate(ca_cert_path.read_bytes())
    ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), None)

    serving_cert_path, serving_key_path = pki / "apiserver.crt", pki / "apiserver.key"
    sans = _serving_sans(bind_address)
    if not (serving_cert_path.exists() and serving_key_path.exists()) or _sans_of(serving_cert_path) != set(sans):
        cert, key = _new_serving(ca, ca_key, sans, now)
        _write_private(serving_key_path, _key_pem(key))
        _write_private(serving_cert_path, cert.public_bytes(serialization.Encoding.PEM))

    token_path = data_dir / "token"
    if not token_path.exists():
        _write_private(token_path, secrets.token_urlsafe(32).encode())
    return Credentials(ca_cert_path, serving_cert_path, serving_key_path, token_path.read_text().strip())


def write_kubeconfig(path: Path, server: str, creds: Credentials, user: str = "admin") -> None:
    ca_data = base64.b64encode(creds.ca_cert.read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubesvc", "cluster": {"server": server, "certificate-authority-data": ca_data}}],
        "users": [{"name": user, "user": {"token": creds.token}}],
        "contexts": [{"name": "kubesvc", "context": {"cluster": "kubesvc", "user": user, "namespace": "default"}}],
        "current-context": "kubesvc",
        "preferences": {},
    }
    _write_private(path, yaml.safe_dump(config, sort_keys=False).encode())


def token_valid(authorization: str | None, token: str) -> bool:
    if not authorization:
        return False
    scheme, _, presented = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(presented.strip().encode(), token.encode())


def ephemeral_serving_context(common_name: str, bind_address: str) -> ssl.SSLContext:
    """A TLS server context with a throw-away certificate, made in memory at start, as
    kube-controller-manager does for its secure port when no ``--cert-dir`` certificate is given."""
    now = datetime.now(timezone.utc)
    ca, ca_key = _new_ca(now)
    cert, key = _new_serving(ca, ca_key, _serving_sans(bind_address), now, common_name=common_name)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as tmp:
        cert_path, key_path = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + ca.public_bytes(serialization.Encoding.PEM))
        _write_private(key_path, _key_pem(key))
        context.load_cert_chain(cert_path, key_path)
    return context
