"""The certificate controllers' pure decisions, table-driven: which recognizer approves a
request, the lifetime a signer gives, which requests the cleaner deletes, and node IPAM's
ranges and flag rules (expected values written out, not computed by the code under test)."""

from __future__ import annotations

import base64
import ipaddress
from datetime import datetime, timedelta, timezone

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from kubesvc.controllers.certificates.approver import NODE_CLIENT, NODE_KUBE_PROXY_CLIENT, SELF_NODE_CLIENT, recognize
from kubesvc.controllers.certificates.cleaner import should_delete
from kubesvc.controllers.certificates.signer import certificate_duration
from kubesvc.controllers.nodeipam.cidrset import CIDRSet, CIDRSetError, node_mask_sizes, parse_cluster_cidrs
from kubesvc.nodejoin.csr import new_key, request_pem

NOW = datetime(2026, 1, 2, 12, 0, 0, tzinfo=timezone.utc)


def at(delta: timedelta) -> str:
    return (NOW + delta).strftime("%Y-%m-%dT%H:%M:%SZ")


def csr(cn="system:node:n1", orgs=("system:nodes",), usages=("digital signature", "client auth"), username="system:bootstrap:abcdef",
        signer="kubernetes.io/kube-apiserver-client-kubelet", conditions=(), sans=None, groups=None) -> dict:
    key = new_key()
    if sans:
        from cryptography.x509.oid import NameOID
        names = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs] + [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        request = (x509.CertificateSigningRequestBuilder().subject_name(x509.Name(names))
                   .add_extension(x509.SubjectAlternativeName(sans), critical=False).sign(key, hashes.SHA256()))
        from cryptography.hazmat.primitives import serialization
        pem = request.public_bytes(serialization.Encoding.PEM)
    else:
        pem = request_pem(key, cn, tuple(orgs))
    return {"metadata": {"name": "x", "creationTimestamp": at(-timedelta(minutes=1))},
            "spec": {"request": base64.b64encode(pem).decode(), "signerName": signer, "usages": list(usages), "username": username,
                     **({} if groups is None else {"groups": list(groups)})},
            "status": {"conditions": list(conditions)}}


@pytest.mark.parametrize("obj, expected", [
    (csr(), [NODE_CLIENT]),
    (csr(username="system:node:n1"), [SELF_NODE_CLIENT, NODE_CLIENT]),
    (csr(usages=("digital signature", "key encipherment", "client auth")), [NODE_CLIENT]),
    (csr(usages=("client auth",)), []),
    (csr(usages=("digital signature", "client auth", "server auth")), []),
    (csr(orgs=("system:nodes", "system:masters")), []),
    (csr(cn="admin"), []),
    (csr(signer="kubernetes.io/kube-apiserver-client"), []),
    (csr(sans=[x509.DNSName("n1")]), []),
    (csr(conditions=[{"type": "Denied", "status": "True"}]), []),
    (csr(conditions=[{"type": "Approved", "status": "True"}]), []),
], ids=["bootstrap", "self-renewal", "rsa-usages", "usages-short", "server-auth", "extra-org", "not-a-node-cn", "other-signer",
        "dns-san", "denied", "already-approved"])
def test_which_recognizers_match(obj, expected):
    assert recognize(obj) == expected


def kube_proxy_csr(cn="system:kube-proxy", orgs=(), usages=("digital signature", "key encipherment", "client auth"),
                   username="system:node:n1", groups=("system:nodes", "system:authenticated"),
                   signer="kubernetes.io/kube-apiserver-client", **more) -> dict:
    """A node asking for kube-proxy's client certificate as kubesvc join does."""
    return csr(cn=cn, orgs=orgs, usages=usages, username=username, groups=groups, signer=signer, **more)


@pytest.mark.parametrize("obj, expected", [
    (kube_proxy_csr(), [NODE_KUBE_PROXY_CLIENT]),
    (kube_proxy_csr(cn="system:kube-controller-manager"), []),
    (kube_proxy_csr(cn="system:node:n1"), []),
    (kube_proxy_csr(orgs=("system:masters",)), []),
    (kube_proxy_csr(orgs=("system:nodes",)), []),
    (kube_proxy_csr(usages=("digital signature", "client auth")), []),
    (kube_proxy_csr(usages=("digital signature", "key encipherment", "client auth", "server auth")), []),
    (kube_proxy_csr(sans=[x509.DNSName("n1")]), []),
    (kube_proxy_csr(username="system:bootstrap:abcdef", groups=("system:bootstrappers", "system:authenticated")), []),
    (kube_proxy_csr(username="jane", groups=("system:nodes",)), []),
    (kube_proxy_csr(groups=("system:authenticated",)), []),
    (kube_proxy_csr(signer="kubernetes.io/kube-apiserver-client-kubelet"), []),
    (kube_proxy_csr(signer="kubernetes.io/legacy-unknown"), []),
    (kube_proxy_csr(conditions=[{"type": "Denied", "status": "True"}]), []),
], ids=["node-asks-kube-proxy", "wrong-cn", "node-cn", "extra-org-masters", "extra-org-nodes", "usages-short", "server-auth",
        "dns-san", "requester-bootstrap-token", "requester-not-system-node", "requester-not-in-system-nodes", "kubelet-signer",
        "legacy-signer", "denied"])
def test_a_nodes_kube_proxy_client_request_is_recognized_only_in_that_shape(obj, expected):
    assert recognize(obj) == expected


def test_the_kube_proxy_request_join_sends_is_the_recognized_shape():
    from kubesvc.nodejoin.csr import kube_proxy_csr_object

    obj = kube_proxy_csr_object(new_key())
    obj["spec"] |= {"username": "system:node:m2", "groups": ["system:nodes", "system:authenticated"]}
    assert obj["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client"
    assert recognize(obj) == [NODE_KUBE_PROXY_CLIENT]
    assert "system:kube-proxy" in NODE_KUBE_PROXY_CLIENT.message and NODE_KUBE_PROXY_CLIENT.subresource == "nodekubeproxyclient"


@pytest.mark.parametrize("signing, requested, expected", [
    (8760 * 3600.0, None, 8760 * 3600.0),
    (8760 * 3600.0, 3600, 3600.0),
    (8760 * 3600.0, 600, 600.0),
    (8760 * 3600.0, 10**9, 8760 * 3600.0),
    (3600.0, 7200, 3600.0),
    (300.0, None, 300.0),
    (300.0, 900, 600.0),
], ids=["default", "asked-less", "minimum", "asked-more", "capped", "short-signing", "floor"])
def test_certificate_duration(signing, requested, expected):
    assert certificate_duration(signing, requested) == expected


def cond(ctype: str, ago: timedelta) -> dict:
    return {"type": ctype, "status": "True", "lastUpdateTime": at(-ago)}


@pytest.mark.parametrize("obj, deleted", [
    ({"metadata": {"creationTimestamp": at(-timedelta(hours=23))}, "status": {}}, False),
    ({"metadata": {"creationTimestamp": at(-timedelta(hours=25))}, "status": {}}, True),
    ({"metadata": {"creationTimestamp": at(-timedelta(hours=2))}, "status": {"conditions": [cond("Approved", timedelta(minutes=30))]}}, False),
    ({"metadata": {"creationTimestamp": at(-timedelta(hours=2))}, "status": {"conditions": [cond("Approved", timedelta(minutes=61))]}}, True),
    ({"metadata": {"creationTimestamp": at(-timedelta(hours=2))}, "status": {"conditions": [cond("Denied", timedelta(minutes=61))]}}, True),
    ({"metadata": {"creationTimestamp": at(-timedelta(hours=2))}, "status": {"conditions": [cond("Failed", timedelta(minutes=59))]}}, False),
], ids=["pending-23h", "pending-25h", "approved-30m", "approved-61m", "denied-61m", "failed-59m"])
def test_what_the_cleaner_deletes(obj, deleted):
    assert bool(should_delete(obj, NOW)) is deleted


def test_signed_certificates_and_the_cleaner_deleting_an_expired_one():
    from cryptography.x509.oid import ExtendedKeyUsageOID

    from kubesvc.controllers.certificates.signer import SigningCA, sign
    from kubesvc.serving import pki

    ca = SigningCA(*pki.new_ca(NOW - timedelta(days=3)))
    request = x509.load_pem_x509_csr(request_pem(new_key(), "system:node:n1"))
    pem = sign(ca, request, ["digital signature", "client auth"], 86400.0, NOW - timedelta(days=2))
    cert = x509.load_pem_x509_certificate(pem)
    assert cert.subject == request.subject and cert.issuer == ca.cert.subject
    assert cert.not_valid_before_utc == NOW - timedelta(days=2, minutes=5)  # backdated 5 minutes
    assert cert.not_valid_after_utc == NOW - timedelta(days=1)
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert should_delete({"metadata": {}, "status": {"certificate": base64.b64encode(pem).decode()}}, NOW)
    assert not should_delete({"metadata": {}, "status": {"certificate": base64.b64encode(pem).decode()}}, NOW - timedelta(days=1, hours=1))


def test_cidr_set_hands_out_ranges_round_robin_and_takes_back_released_ones():
    ranges = CIDRSet("10.244.0.0/22", 24)
    assert [ranges.allocate_next() for _ in range(3)] == ["10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24"]
    ranges.release("10.244.1.0/24")
    assert ranges.allocate_next() == "10.244.3.0/24"  # after the last handed out, not the freed one at once
    assert ranges.allocate_next() == "10.244.1.0/24"
    with pytest.raises(CIDRSetError, match="no remaining CIDRs left"):
        ranges.allocate_next()


def test_cidr_set_occupies_recorded_ranges_and_ipv6():
    ranges = CIDRSet("10.244.0.0/23", 24)
    ranges.occupy("10.244.0.0/24")
    assert ranges.allocate_next() == "10.244.1.0/24"
    with pytest.raises(CIDRSetError, match="out the range of cluster cidr"):
        ranges.occupy("10.9.0.0/24")
    six = CIDRSet("fd00:10:244::/56", 64)
    assert [six.allocate_next() for _ in range(2)] == ["fd00:10:244::/64", "fd00:10:244:1::/64"]


@pytest.mark.parametrize("cidrs, mask, mask4, mask6, expected", [
    (["10.244.0.0/16"], 0, 0, 0, [24]),
    (["10.244.0.0/16"], 26, 0, 0, [26]),
    (["10.244.0.0/16"], 0, 25, 0, [25]),
    (["fd00::/48"], 0, 0, 0, [64]),
    (["10.244.0.0/16", "fd00::/48"], 0, 0, 0, [24, 64]),
    (["fd00::/48", "10.244.0.0/16"], 0, 26, 60, [60, 26]),
], ids=["v4-default", "v4-mask", "v4-family-mask", "v6-default", "dual-defaults", "dual-order"])
def test_node_mask_sizes(cidrs, mask, mask4, mask6, expected):
    assert node_mask_sizes(cidrs, mask, mask4, mask6) == expected


@pytest.mark.parametrize("cidrs, mask, mask4, mask6, message", [
    (["10.244.0.0/16", "fd00::/48"], 24, 0, 0, "usage of --node-cidr-mask-size is not allowed with dual-stack clusters"),
    (["10.244.0.0/16"], 0, 0, 64, "usage of --node-cidr-mask-size-ipv6 is not allowed for a single-stack IPv4 cluster"),
], ids=["dual-with-single-flag", "v6-flag-on-v4"])
def test_node_mask_size_errors(cidrs, mask, mask4, mask6, message):
    with pytest.raises(ValueError, match=message):
        node_mask_sizes(cidrs, mask, mask4, mask6)


def test_cluster_cidr_rules():
    assert parse_cluster_cidrs("10.244.0.0/16, fd00::/48") == ["10.244.0.0/16", "fd00::/48"]
    with pytest.raises(ValueError, match="mixed cidrs are required for dual-stack"):
        parse_cluster_cidrs("10.0.0.0/16,10.1.0.0/16")
    with pytest.raises(ValueError, match="invalid CIDR address: nope"):
        parse_cluster_cidrs("nope")


def serving_request(sans, orgs=("system:nodes",), cn="system:node:n1"):
    from cryptography.x509.oid import NameOID

    names = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs] + [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(names))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(new_key(), hashes.SHA256())


@pytest.mark.parametrize("sans, usages, orgs, cn, problem", [
    ([x509.DNSName("n1")], ["digital signature", "server auth"], ("system:nodes",), "system:node:n1", ""),
    ([x509.IPAddress(ipaddress.ip_address("10.0.0.1"))], ["digital signature", "key encipherment", "server auth"],
     ("system:nodes",), "system:node:n1", ""),
    ([], ["digital signature", "server auth"], ("system:nodes",), "system:node:n1", "DNS or IP subjectAltName is required"),
    ([x509.DNSName("n1"), x509.RFC822Name("a@b.c")], ["digital signature", "server auth"], ("system:nodes",), "system:node:n1",
     "Email subjectAltNames are not allowed"),
    ([x509.DNSName("n1")], ["digital signature", "client auth"], ("system:nodes",), "system:node:n1",
     "usages did not match [digital signature key encipherment server auth]"),
    ([x509.DNSName("n1")], ["digital signature", "server auth"], ("x",), "system:node:n1", "subject organization is not system:nodes"),
    ([x509.DNSName("n1")], ["digital signature", "server auth"], ("system:nodes",), "n1", "subject common name does not begin with system:node:"),
], ids=["dns", "ip-rsa-usages", "no-san", "email-san", "client-usages", "org", "cn"])
def test_kubelet_serving_shape(sans, usages, orgs, cn, problem):
    from kubesvc.controllers.certificates.csr import kubelet_serving_problem

    assert kubelet_serving_problem(serving_request(sans, orgs, cn), usages) == problem


def test_the_approver_never_approves_kubelet_serving_requests():
    obj = csr(signer="kubernetes.io/kubelet-serving", usages=("digital signature", "server auth"), username="system:node:n1",
              sans=[x509.DNSName("n1")])
    assert recognize(obj) == []
