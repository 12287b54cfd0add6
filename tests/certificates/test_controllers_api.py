"""csrapproving, csrsigning, csrcleaner's neighbours and node-ipam-controller in a real
``kubesvc controller-manager`` against a real apiserver, observed with the real kubectl:
a bootstrap identity's node CSR approved after its SubjectAccessReview and issued by the
cluster CA (the certificate then authenticates as the node), a self-renewal approved, requests
without the grant left pending, and Pod CIDRs handed to Nodes, refused with a
``CIDRNotAvailable`` Event when the range is full, freed by a deleted Node and recovered from
the Nodes after a restart."""

from __future__ import annotations

import base64
import json
import time
from datetime import timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from kubesvc.nodejoin.csr import key_pem, new_key, node_csr_object
from kubesvc.serving import pki
from tests.support.apiserver import running_apiserver, start_controller_manager
from tests.support.slowdown import scaled

BOOT_GROUP = "system:bootstrappers:test:node-token"


def user_kubeconfig(server, name: str, *groups: str):
    label = name.replace(":", "-")
    pair = server.ca.client(f"test-user-{label}", pki.Identity(name, tuple(groups)))
    return pki.write_kubeconfig(server.data_dir / "users" / f"{label}.kubeconfig", server.url, server.ca, name, pair)


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    data = tmp_path_factory.mktemp("csr-controllers")
    with running_apiserver(data / "server") as server:
        for binding, role, kind, subject in (
                ("boot-bootstrapper", "system:node-bootstrapper", "--group", BOOT_GROUP),
                ("boot-autoapprove", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", "--group", BOOT_GROUP),
                ("nodes-autorenew", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "--group", "system:nodes")):
            server.kubectl("create", "clusterrolebinding", binding, f"--clusterrole={role}", f"{kind}={subject}")
        manager = start_controller_manager(server, data / "cm.log", "--cluster-signing-cert-file", str(server.ca.cert_path),
                                           "--cluster-signing-key-file", str(server.ca.key_path), "--allocate-node-cidrs",
                                           "--cluster-cidr=10.250.0.0/23", "--node-cidr-mask-size=24",
                                           "--controllers=*,-pod-scheduler,-garbage-collector-controller", "--leader-elect=false",
                                           "--secure-port=0")
        server.manager = manager
        try:
            yield server
        finally:
            manager.stop()


def get(server, *args):
    return json.loads(server.kubectl("get", *args, "-o", "json").stdout)


def create_csr(server, kubeconfig, node: str, **spec) -> tuple[str, object]:
    key = new_key()
    obj = node_csr_object(key, node, **spec)
    server.kubectl("create", "-f", "-", input=json.dumps(obj), kubeconfig=kubeconfig)
    return obj["metadata"]["name"], key


def issued(server, name: str) -> x509.Certificate:
    def certificate():
        status = get(server, "csr", name).get("status") or {}
        return status.get("certificate")
    return x509.load_pem_x509_certificate(base64.b64decode(wait_for(certificate, what=f"{name} issued")))


def test_a_bootstrap_identitys_node_csr_is_approved_signed_and_works(cluster, tmp_path):
    boot = user_kubeconfig(cluster, "system:bootstrap:abc123", "system:bootstrappers", BOOT_GROUP)
    name, key = create_csr(cluster, boot, "worker-1", expiration_seconds=3600)
    cert = issued(cluster, name)
    condition = get(cluster, "csr", name)["status"]["conditions"][0]
    assert (condition["type"], condition["reason"]) == ("Approved", "AutoApproved")
    assert condition["message"] == "Auto approving kubelet client certificate after SubjectAccessReview."
    assert cert.subject.rfc4514_string() == "CN=system:node:worker-1,O=system:nodes"
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == timedelta(seconds=3600, minutes=5)  # asked 1h, backdated 5m
    row = cluster.kubectl("get", "csr", name, "--no-headers").stdout.split()
    assert row[2:] == ["kubernetes.io/kube-apiserver-client-kubelet", "system:bootstrap:abc123", "60m", "Approved,Issued"]
    # the certificate is the node's credential
    (tmp_path / "node.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "node.key").write_bytes(key_pem(key))
    kubeconfig = pki.write_kubeconfig(tmp_path / "node.kubeconfig", cluster.url, cluster.ca, "system:node:worker-1",
                                      pki.KeyPair(tmp_path / "node.crt", tmp_path / "node.key"))
    whoami = cluster.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig).stdout
    assert json.loads(whoami)["status"]["userInfo"]["username"] == "system:node:worker-1"


def test_without_the_nodeclient_grant_a_request_stays_pending(cluster):
    stranger = user_kubeconfig(cluster, "system:bootstrap:zzz999", "system:bootstrappers")
    cluster.kubectl("create", "clusterrolebinding", "stranger-may-ask", "--clusterrole=system:node-bootstrapper", "--user=system:bootstrap:zzz999")
    name, _ = create_csr(cluster, stranger, "worker-9")
    boot = user_kubeconfig(cluster, "system:bootstrap:abc123", "system:bootstrappers", BOOT_GROUP)
    later, _ = create_csr(cluster, boot, "worker-8")
    issued(cluster, later)  # the controllers have seen both by now
    assert cluster.kubectl("get", "csr", name, "--no-headers").stdout.split()[-1] == "Pending"


def test_a_node_renews_its_own_certificate_but_not_another_nodes(cluster):
    node = user_kubeconfig(cluster, "system:node:worker-2", "system:nodes")
    own, _ = create_csr(cluster, node, "worker-2")
    assert issued(cluster, own).subject.rfc4514_string() == "CN=system:node:worker-2,O=system:nodes"
    assert get(cluster, "csr", own)["status"]["conditions"][0]["message"] == "Auto approving self kubelet client certificate after SubjectAccessReview."
    other, _ = create_csr(cluster, node, "worker-3")
    time.sleep(scaled(2))
    assert cluster.kubectl("get", "csr", other, "--no-headers").stdout.split()[-1] == "Pending"


def test_a_denied_request_is_never_signed(cluster):
    stranger = user_kubeconfig(cluster, "system:bootstrap:zzz999", "system:bootstrappers")
    name, _ = create_csr(cluster, stranger, "worker-7")
    cluster.kubectl("certificate", "deny", name)
    boot = user_kubeconfig(cluster, "system:bootstrap:abc123", "system:bootstrappers", BOOT_GROUP)
    issued(cluster, create_csr(cluster, boot, "worker-6")[0])
    assert cluster.kubectl("get", "csr", name, "--no-headers").stdout.split()[-1] == "Denied"


def node(name: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})


def pod_cidrs(server, name: str) -> list[str]:
    return (get(server, "node", name).get("spec") or {}).get("podCIDRs") or []


def cidr_not_available(server, name: str) -> bool:
    events = get(server, "events", "-n", "default", f"--field-selector=involvedObject.name={name}")["items"]
    return any(e["reason"] == "CIDRNotAvailable" and e["message"] == f"Node {name} status is now: CIDRNotAvailable"
               and e["type"] == "Normal" for e in events)


def test_nodes_get_distinct_pod_cidrs_exhaustion_is_an_event_and_deletion_frees(cluster, tmp_path):
    for name in ("ipam-a", "ipam-b"):
        cluster.kubectl("create", "-f", "-", input=node(name))
    a = wait_for(lambda: pod_cidrs(cluster, "ipam-a"), what="ipam-a's range")
    b = wait_for(lambda: pod_cidrs(cluster, "ipam-b"), what="ipam-b's range")
    assert sorted(a + b) == ["10.250.0.0/24", "10.250.1.0/24"]
    assert get(cluster, "node", "ipam-a")["spec"]["podCIDR"] == a[0]
    cluster.kubectl("create", "-f", "-", input=node("ipam-c"))
    wait_for(lambda: cidr_not_available(cluster, "ipam-c"), what="CIDRNotAvailable on ipam-c")
    assert pod_cidrs(cluster, "ipam-c") == []
    cluster.kubectl("delete", "node", "ipam-a")
    assert wait_for(lambda: pod_cidrs(cluster, "ipam-c"), what="ipam-c's range") == a
    # a restarted controller-manager reads the taken ranges from the Nodes: no range twice
    cluster.manager.stop()
    cluster.manager = start_controller_manager(cluster, tmp_path / "cm2.log", "--cluster-signing-cert-file", str(cluster.ca.cert_path),
                                               "--cluster-signing-key-file", str(cluster.ca.key_path), "--allocate-node-cidrs",
                                               "--cluster-cidr=10.250.0.0/23", "--node-cidr-mask-size=24",
                                               "--controllers=*,-pod-scheduler,-garbage-collector-controller", "--leader-elect=false",
                                               "--secure-port=0")
    cluster.kubectl("create", "-f", "-", input=node("ipam-d"))
    wait_for(lambda: cidr_not_available(cluster, "ipam-d"), what="CIDRNotAvailable on ipam-d")
    assert pod_cidrs(cluster, "ipam-d") == []
    assert sorted(pod_cidrs(cluster, "ipam-b") + pod_cidrs(cluster, "ipam-c")) == ["10.250.0.0/24", "10.250.1.0/24"]
