"""load_kubeconfig: where the file comes from, how contexts resolve, and one clear error each."""

from __future__ import annotations

import base64
import ssl
from datetime import datetime, timedelta, timezone

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kubesvc.client.kubeconfig import ClientConfig, ConfigError, load_kubeconfig


def _self_signed(common_name: str) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.now(timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


@pytest.fixture(scope="module")
def ca_pem() -> bytes:
    return _self_signed("test-ca")[0]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _kubeconfig(clusters=(), users=(), contexts=(), current=None) -> dict:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": c} for n, c in clusters],
        "users": [{"name": n, "user": u} for n, u in users],
        "contexts": [{"name": n, "context": c} for n, c in contexts],
    }
    if current:
        doc["current-context"] = current
    return doc


def _write(path, doc: dict):
    path.write_text(yaml.safe_dump(doc))
    return path


def _simple(ca_pem: bytes, **cluster_extra) -> dict:
    return _kubeconfig(
        clusters=[("c1", {"server": "https://127.0.0.1:6443", "certificate-authority-data": _b64(ca_pem), **cluster_extra})],
        users=[("admin", {"token": "s3cr3t"})],
        contexts=[("ctx", {"cluster": "c1", "user": "admin", "namespace": "team-a"}), ("bare", {"cluster": "c1", "user": "admin"})],
        current="ctx",
    )


def test_current_context_gives_server_token_ca_and_namespace(tmp_path, ca_pem):
    config = load_kubeconfig(_write(tmp_path / "config", _simple(ca_pem)))
    assert config == ClientConfig(server="https://127.0.0.1:6443", token="s3cr3t", namespace="team-a", ca_pem=ca_pem)
    context = config.ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_named_context_wins_and_namespace_defaults_to_default(tmp_path, ca_pem):
    config = load_kubeconfig(_write(tmp_path / "config", _simple(ca_pem)), context="bare")
    assert config.namespace == "default"


def test_kubeconfig_env_merges_files_first_definition_wins(tmp_path, ca_pem, monkeypatch):
    first = _write(tmp_path / "a", _kubeconfig(users=[("admin", {"token": "from-a"})], current="ctx"))
    second = _simple(ca_pem)
    second["users"] = [{"name": "admin", "user": {"token": "from-b"}}]
    second["current-context"] = "bare"
    second_path = _write(tmp_path / "b", second)
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'missing'}:{second_path}")
    config = load_kubeconfig()
    assert (config.token, config.namespace) == ("from-a", "team-a")


def test_default_path_is_home_kube_config(tmp_path, ca_pem, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".kube").mkdir()
    _write(tmp_path / ".kube" / "config", _simple(ca_pem))
    assert load_kubeconfig().token == "s3cr3t"


def test_file_references_are_relative_to_the_kubeconfig(tmp_path, ca_pem):
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_bytes(ca_pem)
    (tmp_path / "token").write_text("from-file\n")
    doc = _kubeconfig(
        clusters=[("c1", {"server": "https://k:6443", "certificate-authority": "pki/ca.crt"})],
        users=[("u", {"tokenFile": "token"})],
        contexts=[("ctx", {"cluster": "c1", "user": "u"})],
        current="ctx",
    )
    config = load_kubeconfig(_write(tmp_path / "config", doc))
    assert (config.ca_pem, config.token) == (ca_pem, "from-file")


def test_client_certificate_data_is_loaded_into_the_tls_context(tmp_path, ca_pem):
    cert_pem, key_pem = _self_signed("client")
    doc = _simple(ca_pem)
    doc["users"] = [{"name": "admin", "user": {"client-certificate-data": _b64(cert_pem), "client-key-data": _b64(key_pem)}}]
    config = load_kubeconfig(_write(tmp_path / "config", doc))
    assert (config.client_cert_pem, config.client_key_pem, config.token) == (cert_pem, key_pem, None)
    assert isinstance(config.ssl_context(), ssl.SSLContext)


def test_insecure_skip_tls_verify_turns_verification_off(tmp_path, ca_pem):
    config = load_kubeconfig(_write(tmp_path / "config", _simple(ca_pem, **{"insecure-skip-tls-verify": True})))
    context = config.ssl_context()
    assert context.verify_mode == ssl.CERT_NONE and not context.check_hostname


def test_plain_http_needs_no_tls_context():
    assert ClientConfig(server="http://127.0.0.1:8080").ssl_context() is None


def test_unusable_ca_is_a_config_error():
    with pytest.raises(ConfigError, match="TLS material for https://k is unusable"):
        ClientConfig(server="https://k", ca_pem=b"-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n").ssl_context()


def _broken(ca_pem: bytes, change) -> dict:
    doc = _simple(ca_pem)
    change(doc)
    return doc


@pytest.mark.parametrize(
    "change, context, message",
    [
        (lambda d: None, "foo", 'context "foo" not found'),
        (lambda d: d.pop("current-context"), None, "no current-context is set and no context was given"),
        (lambda d: d["contexts"][0]["context"].update(cluster="nope"), None, 'cluster "nope" (of context "ctx") not found'),
        (lambda d: d["contexts"][0]["context"].update(user="nobody"), None, 'user "nobody" (of context "ctx") not found'),
        (lambda d: d["clusters"][0]["cluster"].pop("server"), None, 'cluster "c1" has no server'),
        (lambda d: d["clusters"][0]["cluster"].update({"certificate-authority-data": "%%%"}), None, "certificate-authority-data is not valid base64"),
        (lambda d: d["users"][0]["user"].update(exec={"command": "x"}), None, 'user "admin": exec credentials are not supported'),
    ],
    ids=["unknown-context", "no-current-context", "unknown-cluster", "unknown-user", "no-server", "bad-base64", "exec-plugin"],
)
def test_errors_name_the_file_and_the_fault(tmp_path, ca_pem, change, context, message):
    path = _write(tmp_path / "config", _broken(ca_pem, change))
    with pytest.raises(ConfigError) as raised:
        load_kubeconfig(path, context=context)
    assert str(raised.value) == f"kubeconfig {path}: {message}"


def test_missing_referenced_file_is_named(tmp_path, ca_pem):
    doc = _simple(ca_pem)
    doc["users"] = [{"name": "admin", "user": {"tokenFile": "/nonexistent/token"}}]
    path = _write(tmp_path / "config", doc)
    with pytest.raises(ConfigError, match=r"tokenFile /nonexistent/token: No such file or directory"):
        load_kubeconfig(path)


@pytest.mark.parametrize(
    "content, message",
    [(None, "no such file"), ("clusters: [", "while parsing"), ("- a list", "not a kubeconfig")],
    ids=["missing", "bad-yaml", "not-a-mapping"],
)
def test_unreadable_files(tmp_path, content, message):
    path = tmp_path / "config"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=f"^kubeconfig {path}: .*{message}"):
        load_kubeconfig(path)
