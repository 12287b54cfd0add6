"""The cluster CA and what it issues: identities (CN/O), key usages, SANs, renewal, file modes,
and OpenSSL keeping client and serving certificates apart (the reason one CA is enough)."""

from __future__ import annotations

import ipaddress
import ssl
import stat
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubesvc.serving import pki
from kubesvc.client.kubeconfig import load_kubeconfig
from tests.serving.tls_pair import client_context, handshake, server_context

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def subject(cert: x509.Certificate) -> tuple[str, list[str]]:
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    return cn, [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]


def usages(cert: x509.Certificate) -> list:
    return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def sans(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(names.get_values_for_type(x509.DNSName)), {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}


@pytest.fixture
def ca(tmp_path) -> pki.ClusterCA:
    return pki.ClusterCA(tmp_path / "pki", now=NOW)


@pytest.mark.parametrize("name, identity, cn, orgs", [
    ("admin", pki.ADMIN, "system:admin", ["system:masters"]),
    ("kube-controller-manager", pki.CONTROLLER_MANAGER, "system:kube-controller-manager", []),
    ("kube-scheduler", pki.SCHEDULER, "system:kube-scheduler", []),
    ("kube-proxy", pki.PROXY, "system:kube-proxy", []),
    ("apiserver-kubelet-client", pki.KUBELET_CLIENT, "kube-apiserver-kubelet-client", []),
    ("node-n1", pki.node_identity("n1"), "system:node:n1", ["system:nodes"]),
], ids=["admin", "controller-manager", "scheduler", "proxy", "kubelet-client", "node"])
def test_client_certificates_say_who_and_are_for_client_auth_only(ca, name, identity, cn, orgs):
    cert = load(ca.client(name, identity).cert)
    assert subject(cert) == (cn, orgs)
    assert usages(cert) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert cert.issuer == ca.cert.subject
    cert.verify_directly_issued_by(ca.cert)
    assert cert.not_valid_after_utc - cert.not_valid_before_utc <= pki.LEAF_VALIDITY + pki.BACKDATE
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_the_apiserver_serving_certificate_covers_every_name_pods_and_users_dial(ca):
    spec = pki.apiserver_serving_spec(["10.96.0.0/12"], "192.168.10.5", "0.0.0.0")
    cert = load(ca.ensure("apiserver", spec).cert)
    assert subject(cert) == ("kube-apiserver", [])
    assert usages(cert) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert sans(cert) == ({"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
                          {"10.96.0.1", "127.0.0.1", "192.168.10.5"})


@pytest.mark.parametrize("cidrs, advertise, bind, ips", [
    (["10.96.0.0/12"], "127.0.0.1", "127.0.0.1", ["127.0.0.1", "10.96.0.1"]),
    (["10.0.0.0/24"], "10.1.2.3", "10.1.2.3", ["127.0.0.1", "10.0.0.1", "10.1.2.3"]),
    (["fd00:10:96::/108", "10.96.0.0/12"], "fd00::5", "::", ["127.0.0.1", "fd00:10:96::1", "fd00::5"]),
    (["10.96.0.0/12", "fd00:10:96::/108"], None, "0.0.0.0", ["127.0.0.1", "10.96.0.1"]),
], ids=["loopback", "other-range", "ipv6-primary-only", "no-advertise"])
def test_serving_ips_are_the_primary_service_ip_and_the_advertise_address(cidrs, advertise, bind, ips):
    assert list(pki.apiserver_serving_spec(cidrs, advertise, bind).ip_addresses) == ips


@pytest.mark.parametrize("flag, bind, host, expected", [
    (None, "127.0.0.1", None, "127.0.0.1"),
    (None, "0.0.0.0", "10.1.1.1", "10.1.1.1"),
    ("192.168.1.5", "0.0.0.0", "10.1.1.1", "192.168.1.5"),
    ("192.168.1.5", "127.0.0.1", None, "192.168.1.5"),
    (None, "::", None, None),
], ids=["bind", "host-when-unspecified", "flag-wins", "flag-over-bind", "nothing"])
def test_advertise_address(flag, bind, host, expected):
    assert pki.advertise_address(flag, bind, host) == expected


def test_node_serving_certificate(ca):
    cert = load(ca.node_serving("n1", ["192.168.77.11", "fd00::11"], ["n1.example"]).cert)
    assert subject(cert) == ("system:node:n1", ["system:nodes"])
    assert usages(cert) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert sans(cert) == ({"n1", "n1.example"}, {"192.168.77.11", "fd00::11"})


@pytest.mark.parametrize("change, reason", [
    (lambda spec, ca, now: (spec, ca, now), None),
    (lambda spec, ca, now: (pki.CertSpec("other", spec.organizations), ca, now), "subject"),
    (lambda spec, ca, now: (pki.CertSpec(spec.common_name, spec.organizations, dns_names=("x",)), ca, now), "subject alternative names"),
    (lambda spec, ca, now: (pki.CertSpec(spec.common_name, spec.organizations, server=True), ca, now), "key usage"),
    (lambda spec, ca, now: (spec, ca, now + timedelta(days=280)), "expires"),
    (lambda spec, ca, now: (spec, pki.new_ca(now)[0], now), "not signed by the cluster CA"),
], ids=["current", "subject", "sans", "usage", "near-expiry", "other-ca"])
def test_reissue_reason(change, reason):
    ca_cert, ca_key = pki.new_ca(NOW)
    spec = pki.CertSpec.client(pki.PROXY)
    cert, _ = pki.issue(ca_cert, ca_key, spec, NOW)
    spec_now, ca_now, now = change(spec, ca_cert, NOW)
    got = pki.reissue_reason(cert, ca_now, spec_now, now)
    assert (got is None) if reason is None else (reason in got), got


def test_ensure_keeps_a_current_certificate_and_renews_one_near_its_end(tmp_path):
    first = pki.ClusterCA(tmp_path / "pki", now=NOW)
    pair = first.client("kube-proxy", pki.PROXY)
    issued = pair.cert.read_bytes()
    assert pki.ClusterCA(tmp_path / "pki", now=NOW + timedelta(days=200)).client("kube-proxy", pki.PROXY).cert.read_bytes() == issued
    later = NOW + timedelta(days=300)  # 65 days left: inside the 90-day renewal window
    renewed = load(pki.ClusterCA(tmp_path / "pki", now=later).client("kube-proxy", pki.PROXY).cert)
    assert renewed.not_valid_after_utc > later + timedelta(days=300)


def test_ensure_reissues_when_the_sans_change(ca):
    old = ca.ensure("apiserver", pki.apiserver_serving_spec(["10.96.0.0/12"], "127.0.0.1")).cert.read_bytes()
    new = ca.ensure("apiserver", pki.apiserver_serving_spec(["10.96.0.0/12"], "10.0.0.7")).cert
    assert new.read_bytes() != old
    assert "10.0.0.7" in sans(load(new))[1]


def test_a_new_ca_reissues_everything_it_signs(tmp_path):
    pair = pki.ClusterCA(tmp_path / "pki", now=NOW).client("admin", pki.ADMIN)
    old = pair.cert.read_bytes()
    (tmp_path / "pki" / "ca.key").unlink()
    ca = pki.ClusterCA(tmp_path / "pki", now=NOW)
    assert ca.client("admin", pki.ADMIN).cert.read_bytes() != old
    load(pair.cert).verify_directly_issued_by(ca.cert)


def test_keys_and_certificates_are_private(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    creds = pki.ensure_credentials(data, "127.0.0.1")
    pki.write_component_kubeconfigs(data, "https://127.0.0.1:6443")
    pki.write_node_kubeconfig(data, "https://127.0.0.1:6443", "n1")
    for directory in (data / "pki", data / "cred"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        for path in directory.iterdir():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(creds.admin.key.stat().st_mode) == 0o600


def test_loose_modes_left_by_an_older_version_are_tightened(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    creds = pki.ensure_credentials(data, "127.0.0.1")
    creds.admin.key.chmod(0o644)
    creds.ca_cert.chmod(0o644)
    (data / "pki").chmod(0o755)
    pki.ensure_credentials(data, "127.0.0.1")
    assert stat.S_IMODE(creds.admin.key.stat().st_mode) == 0o600
    assert stat.S_IMODE(creds.ca_cert.stat().st_mode) == 0o600
    assert stat.S_IMODE((data / "pki").stat().st_mode) == 0o700


def _retired_token_file(data: Path) -> None:
    (data / "token").write_text("an older version's admin token\n")


def _retired_token_link(data: Path) -> None:
    (data / "elsewhere").write_text("an older version's admin token\n")
    (data / "token").symlink_to(data / "elsewhere")


def _a_directory_named_token(data: Path) -> None:
    (data / "token").mkdir()


@pytest.mark.parametrize("leave, removed, left", [
    (lambda data: None, False, False),
    (_retired_token_file, True, False),
    (_retired_token_link, True, False),
    (_a_directory_named_token, False, True),
], ids=["none", "an-older-versions-token", "a-symlink-to-one", "not-a-file-left-alone"])
def test_no_admin_token_is_made_and_an_older_versions_is_deleted(tmp_path, leave, removed, left):
    data = tmp_path / "data"
    data.mkdir()
    leave(data)
    assert pki.remove_retired_admin_token(data) is removed
    assert (data / "token").exists() is left
    pki.ensure_credentials(data, "127.0.0.1")
    assert (data / "token").exists() is left


@pytest.mark.parametrize("component, user", [
    ("controller-manager", "system:kube-controller-manager"),
    ("scheduler", "system:kube-scheduler"),
    ("proxy", "system:kube-proxy"),
], ids=["controller-manager", "scheduler", "proxy"])
def test_component_kubeconfigs_hold_their_own_certificate_and_no_token(tmp_path, component, user):
    data = tmp_path / "data"
    data.mkdir()
    paths = pki.write_component_kubeconfigs(data, "https://127.0.0.1:6443")
    assert paths[component] == data / "cred" / f"{component}.kubeconfig"
    document = yaml.safe_load(paths[component].read_text())
    assert "token" not in document["users"][0]["user"]
    config = load_kubeconfig(paths[component])
    assert config.token is None
    assert subject(x509.load_pem_x509_certificate(config.client_cert_pem)) == (user, [])
    assert config.ca_pem == (data / "pki" / "ca.crt").read_bytes()


def test_a_client_certificate_cannot_pose_as_a_server(ca):
    """One CA signs both kinds; OpenSSL refuses a clientAuth-only certificate as a server's."""
    impostor = ca.client("admin", pki.ADMIN)
    with pytest.raises(ssl.SSLCertVerificationError, match="unsuitable certificate purpose"):
        handshake(server_context(impostor), client_context(ca), server_hostname="localhost")


def test_a_serving_certificate_cannot_pose_as_a_client(ca):
    serving = ca.ensure("apiserver", pki.apiserver_serving_spec(["10.96.0.0/12"], "127.0.0.1"))
    server = server_context(serving)
    server.verify_mode = ssl.CERT_OPTIONAL
    server.load_verify_locations(cafile=str(ca.cert_path))
    assert handshake(server, client_context(ca, ca.client("admin", pki.ADMIN))) is not None
    with pytest.raises(ssl.SSLError):
        handshake(server, client_context(ca, serving))


def test_first_service_ip():
    assert pki.first_service_ip("10.96.0.0/12") == "10.96.0.1"
    assert pki.first_service_ip("fd00:10:96::/108") == str(ipaddress.ip_address("fd00:10:96::1"))
