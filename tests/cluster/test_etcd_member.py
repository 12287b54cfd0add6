"""The pure parts of a managed etcd member: the join plan against a MemberList, what etcd's
answers to MemberAdd/MemberPromote mean, the initial cluster and command line, names, and the
certificates (read back with ``cryptography`` and ``openssl``, not with the code that made them)."""

from __future__ import annotations

import stat
import subprocess

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubesvc.cluster import etcd_member as em

ME = em.MemberSpec("m3-0000beef", "192.168.77.13")
A = em.Member(0xA1, "m1-aaaa", ("https://192.168.77.11:2380",), ("https://192.168.77.11:2379",))
B = em.Member(0xB2, "m2-bbbb", ("https://192.168.77.12:2380",), ("https://192.168.77.12:2379",))


def test_join_adds_a_learner_and_lists_every_member_by_name():
    plan = em.plan_join([A, B], ME)
    assert plan.reuse is None
    ours = em.Member(0xC3, "", ("https://192.168.77.13:2380",), is_learner=True)
    assert plan.cluster(ME, ours) == ("m1-aaaa=https://192.168.77.11:2380,m2-bbbb=https://192.168.77.12:2380,"
                                      "m3-0000beef=https://192.168.77.13:2380")


def test_join_reuses_the_member_added_for_us_but_never_started():
    added = em.Member(0xC3, "", ("https://192.168.77.13:2380",), is_learner=True)
    plan = em.plan_join([A, added], ME)
    assert plan.reuse == added
    assert plan.cluster(ME, added) == "m1-aaaa=https://192.168.77.11:2380,m3-0000beef=https://192.168.77.13:2380"


@pytest.mark.parametrize("stale", [
    em.Member(0xC3, "m3-0000beef", ("https://192.168.77.13:2380",), is_learner=True),
    em.Member(0xC3, "m3-old", ("https://192.168.77.13:2380",), is_learner=True),
    em.Member(0xC3, "m3-0000beef", ("https://192.168.77.99:2380",), is_learner=True),
], ids=["our-name-and-url", "our-url-another-name", "our-name-another-url"])
def test_join_removes_the_learner_an_earlier_join_of_this_machine_left(stale):
    """A started learner with our peer URL or our name (a joiner that died before promotion,
    its data gone): removed, then a learner added anew; it is in no --initial-cluster."""
    plan = em.plan_join([A, B, stale], ME)
    assert plan.stale == (stale,) and plan.reuse is None
    ours = em.Member(0xE5, "", ("https://192.168.77.13:2380",), is_learner=True)
    assert plan.cluster(ME, ours) == ("m1-aaaa=https://192.168.77.11:2380,m2-bbbb=https://192.168.77.12:2380,"
                                      "m3-0000beef=https://192.168.77.13:2380")


@pytest.mark.parametrize("members, words", [
    ([A, em.Member(0xC3, "m3-old", ("https://192.168.77.13:2380",))], ["m3-old", "etcdctl member remove c3", "already has"]),
    ([A, em.Member(0xD4, "m4-dddd", ("https://192.168.77.14:2380",), is_learner=True)], ["m4-dddd", "still joining",
                                                                                       "etcdctl member remove d4"]),
    ([A, em.Member(0xD4, "", ("https://192.168.77.14:2380",), is_learner=True)], ["https://192.168.77.14:2380", "still joining"]),
], ids=["our-url-is-a-started-member", "another-learner", "another-unstarted-member"])
def test_join_refused_in_one_line_that_says_what_to_do(members, words):
    with pytest.raises(em.JoinRefused) as refused:
        em.plan_join(members, ME)
    text = str(refused.value)
    assert "\n" not in text
    for word in words:
        assert word in text


@pytest.mark.parametrize("error, outcome", [
    (None, "done"),
    ("etcdserver: can only promote a learner member which is in sync with leader", "wait"),
    ("etcdserver: can only promote a learner member", "done"),
    ("etcdserver: member not found", "failed"),
], ids=["promoted", "not-in-sync", "already-voter", "removed"])
def test_promote_outcome(error, outcome):
    assert em.promote_outcome(error) == outcome


@pytest.mark.parametrize("error, outcome", [
    ("etcdserver: unhealthy cluster", "wait"),
    ("etcdserver: too many learner members in cluster", "failed"),
    ("etcdserver: Peer URLs already exists", "failed"),
    ("etcdserver: member not found", "wait"),  # a MemberAdd right after a stale learner's removal
], ids=["unhealthy", "too-many-learners", "exists", "after-removal"])
def test_add_outcome(error, outcome):
    assert em.add_outcome(error) == outcome


def test_member_name_is_the_short_hostname_and_8_hex():
    assert em.member_name("Web-1.example.com", "0123abcd") == "web-1-0123abcd"
    name = em.member_name("host")
    assert name.startswith("host-") and len(name) == len("host-") + 8


def test_url_brackets_ipv6():
    assert em.url("fd00::1", 2380) == "https://[fd00::1]:2380"
    assert em.url("10.0.0.1", 2379) == "https://10.0.0.1:2379"


def test_member_spec_keeps_its_name_and_follows_the_address_only_without_data(tmp_path):
    spec = em.member_spec(tmp_path, "10.0.0.1", "box")
    assert spec.name.startswith("box-")
    em.save_spec(tmp_path, spec)
    assert stat.S_IMODE((tmp_path / "etcd" / "member.json").stat().st_mode) == 0o600
    moved = em.member_spec(tmp_path, "10.0.0.2", "other")
    assert (moved.name, moved.address) == (spec.name, "10.0.0.2")
    wal = tmp_path / "etcd" / "data" / "member" / "wal"
    wal.mkdir(parents=True)
    (wal / "0000000000000000-0000000000000000.wal").write_bytes(b"")
    assert em.member_spec(tmp_path, "10.0.0.2", "other") == spec  # a started member's peer URL is the cluster's


def test_argv_for_a_new_member(tmp_path):
    tls = em.MemberTLS(*(tmp_path / n for n in ("ca", "sc", "sk", "pc", "pk", "cc", "ck")))
    argv = em.etcd_argv(ME, tmp_path, tls, "m3-0000beef=https://192.168.77.13:2380", "new", binary="etcd")
    flags = dict(zip(argv[1::2], argv[2::2]))
    assert flags["--listen-client-urls"] == "https://192.168.77.13:2379,https://127.0.0.1:2379"
    assert flags["--advertise-client-urls"] == "https://192.168.77.13:2379"
    assert flags["--listen-peer-urls"] == flags["--initial-advertise-peer-urls"] == "https://192.168.77.13:2380"
    assert flags["--data-dir"] == str(tmp_path / "etcd" / "data")
    assert flags["--initial-cluster-state"] == "new"
    assert "--client-cert-auth" in argv and "--peer-client-cert-auth" in argv


def test_certificates_from_the_etcd_ca(tmp_path):
    tls = em.member_tls(tmp_path, ["192.168.77.13"], "box")
    ca = x509.load_pem_x509_certificate(tls.ca.read_bytes())
    assert ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "etcd-ca"
    cluster_ca = tmp_path / "pki" / "ca.crt"
    assert not cluster_ca.exists()  # its own CA, not the cluster's
    for cert_path, key_path, usages in [(tls.server_cert, tls.server_key, {"serverAuth", "clientAuth"}),
                                        (tls.peer_cert, tls.peer_key, {"serverAuth", "clientAuth"}),
                                        (tls.client_cert, tls.client_key, {"clientAuth"})]:
        for path in (cert_path, key_path):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
        subprocess.run(["openssl", "verify", "-CAfile", tls.ca, cert_path], check=True, capture_output=True)
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        names = {ExtendedKeyUsageOID.SERVER_AUTH: "serverAuth", ExtendedKeyUsageOID.CLIENT_AUTH: "clientAuth"}
        assert {names[u] for u in eku} == usages
    san = x509.load_pem_x509_certificate(tls.peer_cert.read_bytes()).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == {"localhost", "box"}
    assert {str(ip) for ip in san.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "192.168.77.13"}
    again = em.member_tls(tmp_path, ["192.168.77.13"], "box")
    assert again.peer_cert.read_bytes() == tls.peer_cert.read_bytes()  # kept while it says the same
    assert stat.S_IMODE((tmp_path / "pki").stat().st_mode) == 0o700


def test_etcd_last_error_is_its_own_words():
    from kubesvc.cluster.etcd_process import last_error

    lines = ['{"level":"info","msg":"configuring peer listeners"}',
             '{"level":"fatal","msg":"discovery failed","error":"listen tcp 127.0.0.1:2379: bind: address already in use"}',
             '{"level":"info","msg":"closing"}']
    assert last_error(lines) == "discovery failed: listen tcp 127.0.0.1:2379: bind: address already in use"
    assert last_error(['{"level":"info","msg":"starting"}', "panic: runtime error"]) == "panic: runtime error"
    assert last_error([]) == ""
